//! leash-sandbox: an in-memory Kubernetes API server for demos, tests and benchmarks.
//!
//! [`Sandbox::start`] binds a loopback port and serves JSON over HTTP/1.1 that kubectl
//! and kube-rs use unchanged; [`Sandbox::store`] gives tests direct access to the
//! objects (no HTTP, no faults).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use leash_sandbox::{Sandbox, SandboxConfig};
//! use serde_json::json;
//!
//! let sandbox = Sandbox::start(SandboxConfig::default()).await?;
//! sandbox.store().create(json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "demo", "namespace": "default"},
//! }))?;
//! assert_eq!(sandbox.store().object_count(), 5); // the 4 default namespaces + 1
//! let client = kube::Client::try_from(kube::Config::new(sandbox.url().parse()?))?;
//! let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client, "default");
//! assert_eq!(cms.get("demo").await?.metadata.name.as_deref(), Some("demo"));
//! sandbox.shutdown().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # What is served
//! - `/version`; discovery, aggregated (`apidiscovery.k8s.io` v2 and v2beta1 on `/api`
//!   and `/apis`, chosen by `Accept`) and legacy (`/api`, `/api/v1`, `/apis`,
//!   `/apis/{g}`, `/apis/{g}/{v}`); a minimal `/openapi/v3` (group-version-kinds and
//!   PATCH parameters only, enough for kubectl's server-side field validation check);
//!   `/healthz`, `/livez`, `/readyz` (no auth).
//! - Built-in kinds: namespaces, pods, configmaps, secrets, services, serviceaccounts,
//!   events, nodes (v1); deployments, statefulsets, daemonsets, replicasets (apps/v1);
//!   jobs, cronjobs (batch/v1); leases (coordination.k8s.io/v1); events (events.k8s.io/v1,
//!   stored apart from v1 events: no conversion between the two);
//!   customresourcedefinitions (apiextensions.k8s.io/v1). Creating a CRD registers every
//!   served version of its kind; deleting it removes the kind and its objects.
//! - Verbs: get, list, watch, create, update (PUT), patch (merge, strategic merge treated
//!   as merge, JSON patch, apply treated as a merge patch that creates), delete,
//!   deletecollection; the `status` subresource where the kind has one, and `scale`
//!   (`autoscaling/v1` `Scale`) for deployments, replicasets and statefulsets.
//! - Request bodies in JSON, YAML, or protobuf (`application/vnd.kubernetes.protobuf`,
//!   what kubectl's imperative `create`, `run` and `expose` send) for the kinds those
//!   commands create; answers are always JSON.
//! - `meta.k8s.io` `Table`s when `Accept` asks for them (`kubectl get`): kube-apiserver's
//!   columns for the built-in kinds (wide ones at priority 1), a CRD version's
//!   `additionalPrinterColumns`, rows carrying `includeObject`, paged like lists; a
//!   watch that asks for Tables (`kubectl get -w`) gets one-row Tables.
//! - Create-time defaults that `kubectl get` shows: a Service's type, node ports, cluster IP (from
//!   10.96.0.0/12) and port protocol; a Secret's type; a Namespace's phase.
//! - Lists: `labelSelector`, `fieldSelector` (metadata.name, metadata.namespace, and a
//!   few per-kind fields such as pods' `spec.nodeName`/`status.phase`), `limit` and
//!   `continue` over consistent snapshots, `remainingItemCount`, `resourceVersion` and
//!   `resourceVersionMatch`; expired continue tokens get 410 with a fresh token.
//! - Watches: `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`,
//!   `sendInitialEvents` (ending in the `k8s.io/initial-events-end` bookmark), 410 ERROR
//!   events when the version is older than the event history (10,000 events).
//!
//! # What is not
//! Protobuf answers, protobuf bodies of other kinds and CBOR bodies (415), schema
//! validation, defaulting beyond the
//! fields above and admission, finalizers and graceful deletion (deletes are immediate),
//! owner-reference garbage collection, conversion between CRD versions, subresources
//! other than `status` and `scale`, field managers (`managedFields`), HTTP/2 and TLS.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod admission;
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
mod protobuf;
mod resources;
mod sandbox;
mod selector;
mod server;
mod status;
mod store;
mod table;
mod watch;

pub use config::{Faults, SandboxConfig};
pub use error::{Error, Result};
pub use sandbox::Sandbox;
pub use status::ApiError;
pub use store::Store;
