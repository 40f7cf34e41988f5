//! leash-context: the global context store.
//!
//! Kyverno's `GlobalContextEntry`, kept correctly: each entry mirrors a
//! Kubernetes resource (kube-runtime watcher + reflector) or polls an HTTP
//! API (the Kubernetes API server through the client's credentials, or an
//! external service), and evaluates JMESPath projections over its data.
//!
//! - [`ContextEntry`]: a validated entry ([`parse_entries`], [`load_entry_files`],
//!   [`ContextEntry::from_resource`]); invalid specs are rejected before
//!   anything starts, naming the entry and the field.
//! - [`Store`]: add, replace and remove entries while running; readers get an
//!   immutable [`Snapshot`] (data and projections of the same data, swapped
//!   whole); failures keep the last good snapshot and show in [`EntryStatus`];
//!   [`Store::wait_ready`] is bounded; [`Store::changes`] reports updates.
//! - [`CrdFeeder`]: keeps the store in step with `GlobalContextEntry` objects
//!   in the cluster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use leash_context::{Store, StoreConfig, parse_entries};
//!
//! let entries = parse_entries(
//!     r#"
//! apiVersion: kyverno.io/v2beta1
//! kind: GlobalContextEntry
//! metadata: {name: deployments}
//! spec:
//!   kubernetesResource: {group: apps, version: v1, resource: deployments}
//!   projections:
//!   - {name: in-x, jmesPath: "[?metadata.namespace=='x'] | length(@)"}
//! "#,
//!     "inline",
//! )?;
//! let store = Store::new(StoreConfig::default(), Some(kube::Client::try_default().await?));
//! for entry in entries {
//!     store.add(entry)?;
//! }
//! // Bounded by StoreConfig::ready_timeout (30 s by default).
//! let snapshot = store.wait_ready("deployments").await?;
//! println!("{}", snapshot.projections["in-x"]);
//! // Policies' "deployments.in-x":
//! let value = store.projection("deployments", "in-x")?;
//! # let _ = value;
//! store.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Seeds (../shared/seeds/000): the watch error handler's self-join, `Stop()`
//! holding the entry lock while waiting for the poller, projections written
//! into the live map one by one, raw cached maps handed out, and reads that
//! hide the last good data behind a refresh error. Each is ruled out by the
//! invariants of [`store`](Store), `cell`, `kubernetes` and `api_call`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod api_call;
mod cell;
mod changes;
mod duration;
mod entry;
mod error;
mod feed;
mod http;
mod kubernetes;
mod parse;
mod snapshot;
pub mod spec;
mod status;
mod status_writer;
mod store;

pub use cell::EntryId;
pub use changes::{Change, ChangeKind, Changes};
pub use entry::{
    ApiCallSource, ApiTarget, CompiledProjection, ContextEntry, DEFAULT_REFRESH_INTERVAL,
    DEFAULT_RETRY_LIMIT, EntrySource, KubernetesSource, ServiceTarget,
};
pub use error::{Error, Result};
pub use feed::{
    CrdFeeder, DEFAULT_FULL_RETRY, entry_from_object, global_context_entry_resource,
    list_cluster_entries,
};
pub use http::call_service;
pub use parse::{decode_entry, load_entry_files, parse_entries};
pub use snapshot::Snapshot;
pub use spec::GlobalContextEntry;
pub use status::{EntryState, EntryStatus};
pub use status_writer::StatusWriter;
pub use store::{
    DEFAULT_READY_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_WATCH_TIMEOUT, FIRST_RESTART_DELAY,
    MAX_RESTART_DELAY, Store, StoreConfig,
};
