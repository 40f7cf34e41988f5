//! leash-sandbox: an in-memory Kubernetes API server for demos, tests and benchmarks.
//!
//! [`Sandbox::start`] binds a loopback port and serves discovery, CRUD, paginated
//! lists over consistent snapshots, and watches, with optional fault injection.
//! [`Sandbox::store`] gives tests direct access to the objects without HTTP.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod api;
mod config;
mod discovery;
mod error;
mod faults;
pub mod generate;
mod list;
pub mod manifests;
mod object;
mod openapi;
mod resources;
mod sandbox;
mod selector;
mod server;
mod status;
mod store;
mod watch;

pub use config::{Faults, SandboxConfig};
pub use error::{Error, Result};
pub use sandbox::Sandbox;
pub use status::ApiError;
pub use store::Store;
