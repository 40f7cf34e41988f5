//! leash-policy: Kyverno policies parsed, compiled once into immutable
//! values, and evaluated on any thread.
//!
//! The engine is pure: no network and no async runtime in the evaluation
//! path. Cluster data that rules look up comes through [`ClusterData`],
//! supplied by the caller. Evaluating never mutates a policy or a resource
//! (seed 000: background scan goroutines wrote one shared map; tests mutated
//! shared policy objects): compiled policies are `Arc`s of immutable values,
//! resources are `Arc<serde_json::Value>`s.
//!
//! - [`Engine`]: compiled [`Policy`]s, [`vpol::ValidatingPolicy`]s and
//!   [`Exception`]s; [`Engine::evaluation`] is the one entry point of an
//!   evaluation (a builder for its bindings and memo):
//!   [`Evaluation::validate`] gives one [`RuleResult`] per matching rule,
//!   [`Evaluation::apply`] mutates, then validates the mutated resource
//!   (as Kyverno's CLI does).
//! - [`Engine::mutate`]: the mutate rules, in order, each on the output of
//!   the previous one.
//! - [`mpol::MutatingPolicy`]: a compiled MutatingPolicy;
//!   [`mpol::MutatingPolicy::mutate`] gives its result and the mutated object.
//! - [`Document::compile`]: one YAML/JSON document into a policy, with
//!   errors naming the field.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod autogen;
mod background;
pub mod cel;
mod conditions;
pub mod config;
pub mod dpol;
mod engine;
mod error;
mod eval;
mod exception;
mod generate;
pub mod gpol;
pub mod images;
pub mod ivpol;
pub mod jmespath;
pub mod k8s;
pub mod kinds;
mod matching;
pub mod memo;
mod model;
pub mod mpol;
pub mod mutate;
pub mod pattern;
mod podsecurity;
mod policy;
mod reads;
mod request;
mod result;
pub mod schema;
pub mod value;
pub mod vap;
mod vars;
pub mod vpol;
pub mod wildcard;

pub use config::{ConfigError, KyvernoConfig};
pub use engine::{Document, Engine, Evaluation, Results, Shared, base_rule};
pub use error::{Error, Result};
pub use eval::{Bindings, PolicyBindings, Prepared};
pub use exception::Exception;
pub use generate::{GenerateTarget, Generated, downstream_labels};
pub(crate) use k8s::quantity;
pub use k8s::quantity::{Quantity, parse_duration};
pub use memo::{Memo, MemoStats};
pub use mutate::{Mutation, MutationStep, PatchedTarget};
pub use policy::{FailureAction, Policy};
pub use reads::{Builder, MutationKey, ReadSet};
pub use request::{
    ClusterData, EntryKind, EvalRequest, ImageTrust, KeylessIdentity, NoClusterData, Operation,
    ServiceCall, UserInfo, labels_of,
};
pub use result::{RuleResult, Source, Status};
