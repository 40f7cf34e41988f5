//! leash-runtime: the structured-concurrency core of leash.
//!
//! - [`Scope`]: owns tasks (a `TaskTracker` plus a `CancellationToken`);
//!   child scopes inherit cancellation; `shutdown` cancels, waits and returns
//!   task failures and panics; dropping a scope cancels its tasks.
//! - [`WorkerPool`]: N workers over a bounded queue with backpressure, results
//!   as a stream, cancellation that reaches tasks in flight.
//! - [`Every`]: periodic jobs started by `run(token)`, never by a constructor.
//! - [`TtlCache`]: expiry without a background task.
//! - [`OnceCell`]: one-time async initialization (tokio's).
//!
//! # Synchronization
//! This crate is built only from tokio / tokio-util / std primitives:
//! `TaskTracker`, `CancellationToken`, tokio `mpsc` channels, a
//! `tokio::sync::Mutex` around the pool's queue receiver, a `std::sync::Mutex`
//! around the cache's map, and two `AtomicU64` counters that order nothing
//! (task ids, a statistic). It holds no hand-written lock-free protocol, so
//! there is no loom model; the primitives' own models (tokio's loom tests)
//! cover them. Each module states its invariants.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod once;
mod periodic;
mod pool;
mod scope;
mod ttl_cache;

pub use once::{OnceCell, SetError};
pub use periodic::{Every, every};
pub use pool::{
    MAX_QUEUE_CAPACITY, MAX_WORKERS, PoolConfig, PoolError, Results, SubmitError, Submitter,
    TaskFailure, TaskId, TaskResult, TrySubmitError, WorkerPool,
};
pub use scope::{BoxError, Scope, ScopeError, ScopeHandle, TaskError, cancellable, scoped};
pub use tokio_util::sync::CancellationToken;
pub use ttl_cache::TtlCache;
