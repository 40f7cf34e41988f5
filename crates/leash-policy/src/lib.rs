//! leash-policy: Kyverno policies parsed, compiled once into immutable
//! values, and evaluated on any thread.
//!
//! The engine is pure: no network and no async runtime in the evaluation
//! path. Cluster data that rules look up comes through [`ClusterData`],
//! supplied by the caller. Evaluating never mutates a policy or a resource
//! (seed 000: background scan goroutines wrote one shared map; tests mutated
//! shared policy objects): compiled policies are `Arc`s of immutable values,
//! resources are `Arc<serde_json::Value>`s.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod cel;
mod error;
pub mod jmespath;
pub mod kinds;
mod request;
mod result;
pub mod vpol;

pub use error::{Error, Result};
pub use request::{ClusterData, EvalRequest, NoClusterData, Operation, UserInfo};
pub use result::{RuleResult, Source, Status};
