//! leash-runtime: the structured-concurrency core of leash.
//!
//! - [`Scope`]: owns tasks (a `TaskTracker` plus a `CancellationToken`);
//!   child scopes inherit cancellation; `shutdown` cancels, waits and returns
//!   task failures and panics; dropping a scope cancels its tasks.
//! - [`WorkerPool`]: N workers over a bounded queue with backpressure, results
//!   as a stream, cancellation that reaches tasks in flight; [`WorkerPool::run_all`]
//!   runs a known batch of tasks without the submit-then-collect deadlock.
//! - [`Every`]: periodic jobs started by `run(token)`, never by a constructor.
//! - [`TtlCache`]: expiry without a background task.
//! - [`OnceCell`]: one-time async initialization (tokio's).
//!
//! ```
//! use futures::StreamExt;
//! use leash_runtime::{PoolConfig, Scope, WorkerPool};
//!
//! # tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(async {
//! let scope = Scope::new();
//! let pool = WorkerPool::new(PoolConfig::new(4, 8), |n: u64, token| async move {
//!     // Race every I/O await against the task's token (house rule 3).
//!     leash_runtime::cancellable(&token, async move { n * n }).await
//! })?;
//! let (submitter, mut results) = pool.start(&scope);
//! // Submit and consume concurrently: the queue is bounded.
//! let producer = async move {
//!     for n in 0..100 {
//!         submitter.submit(n).await.expect("pool open");
//!     }
//!     // Dropping the last submitter closes the pool; the stream then ends.
//! };
//! let consumer = async {
//!     let mut sum = 0;
//!     while let Some(result) = results.next().await {
//!         sum += result.outcome.expect("no panic").expect("not cancelled");
//!     }
//!     sum
//! };
//! let ((), sum) = tokio::join!(producer, consumer);
//! assert_eq!(sum, (0..100u64).map(|n| n * n).sum::<u64>());
//! results.join().await?;
//! scope.shutdown().await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! # Synchronization
//! This crate is built only from tokio / tokio-util / std primitives:
//! `TaskTracker`, `CancellationToken`, tokio `mpsc` channels, a
//! `tokio::sync::Mutex` around the pool's queue receiver, a `std::sync::Mutex`
//! around the cache's map, and three `AtomicU64` counters that order nothing
//! (task ids, two statistics: undelivered pool results, failures a scope did
//! not keep). It holds no hand-written lock-free protocol, so
//! there is no loom model here; the primitives are covered by their own
//! crates' loom tests. The one guard held across an `.await` is the pool's
//! `tokio::sync::Mutex` guard over its queue receiver while it waits for the
//! next task (the usual way to share a tokio `mpsc::Receiver`); what it waits
//! for (a submit, a close, a cancellation) never needs that lock, so it
//! cannot deadlock. Each module states its invariants.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod once;
mod periodic;
mod pool;
mod scope;
mod ttl_cache;

pub use once::{OnceCell, SetError};
pub use periodic::{Every, every};
pub use pool::{
    Batch, MAX_QUEUE_CAPACITY, MAX_WORKERS, PoolConfig, PoolError, Results, SubmitError, Submitter,
    TaskFailure, TaskId, TaskResult, TrySubmitError, WorkerPool,
};
pub use scope::{
    BoxError, MAX_KEPT_ERRORS, Scope, ScopeError, ScopeHandle, TaskError, cancellable, scoped,
};
pub use tokio_util::sync::CancellationToken;
pub use ttl_cache::TtlCache;
