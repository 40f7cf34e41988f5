//! leash-loader: concurrent, complete, cancellable loading of Kubernetes
//! resources.
//!
//! Replaces the Kyverno CLI's cluster loader (seed 001), which dropped tasks
//! beyond twice its concurrency, ignored cancellation, turned an unmappable
//! kind into an empty success, threw away pages on error, never retried and
//! did not handle expired continue tokens.
//!
//! - [`Loader::resolve`]: discovery (aggregated, else legacy) once, then
//!   kubectl's name resolution; an unknown kind is [`Error::UnknownKind`].
//! - [`Loader::load`]: one list task per kind (per kind and namespace when
//!   several namespaces are selected) on a `leash_runtime::WorkerPool`;
//!   pages of a kind are sequential, kinds run concurrently, and at most
//!   [`LoadOptions::concurrency`] requests are in flight (a kind waiting to
//!   retry does not hold a request slot). Objects stream
//!   out page by page through a bounded channel ([`Objects`]); the report
//!   ([`LoadReport`]) says, per kind, objects, pages, retries, restarts,
//!   time, whether it was read across snapshots, and why it is incomplete.
//! - Retries ([`RetryPolicy`]): exponential backoff with full jitter on 429
//!   (honouring `Retry-After`), 5xx, transport errors and requests that
//!   take longer than [`RetryPolicy::request_timeout`]. kube's own retry
//!   layer must be off ([`client_from_config`] does that).
//! - 410 Expired mid-list: continue with the server's fresh token (the kind
//!   is then read across snapshots), or with
//!   [`LoadOptions::consistent`] restart from a new snapshot; either way
//!   each object is handed out exactly once (dedup by uid).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod discovery;
mod error;
mod fetch;
mod kind;
mod list;
mod load;
mod object;
mod options;
mod report;
mod resolve;
mod retry;

pub use discovery::Catalog;
pub use error::{Error, Result};
pub use kind::ResolvedKind;
pub use load::{Load, LoadTarget, Loader, Objects};
pub use object::{ItemParser, LoadedObject, Parsed};
pub use options::{LoadOptions, MAX_CONCURRENCY, NamespaceSelection};
pub use report::{KindReport, LoadReport, Progress, ProgressSnapshot};
pub use resolve::{KindSelection, resolve, resolve_one};
pub use retry::{DEFAULT_REQUEST_TIMEOUT, RetryPolicy};

/// Build a kube client for the loader: kube's default retry layer (429, 503,
/// 504) is turned off so that the loader's [`RetryPolicy`] is the only one
/// that runs.
pub fn client_from_config(mut config: kube::Config) -> Result<kube::Client> {
    config.default_retry = false;
    kube::Client::try_from(config).map_err(Error::Client)
}
