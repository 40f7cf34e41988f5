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
//!   customresourcedefinitions (apiextensions.k8s.io/v1); validatingwebhookconfigurations,
//!   mutatingwebhookconfigurations (admissionregistration.k8s.io/v1); roles, rolebindings,
//!   clusterroles, clusterrolebindings (rbac.authorization.k8s.io/v1: stored and served, not
//!   enforced; `selfsubjectaccessreviews` (authorization.k8s.io/v1, create only) answer
//!   allowed, as the sandbox's one user may do everything). Creating a CRD registers every
//!   served version of its kind; deleting it
//!   removes the kind and its objects.
//! - Admission webhooks, called as kube-apiserver calls them, on create, update (PUT, every
//!   PATCH, the `status` subresource when a rule names it: `pods/status`, `pods/*`, `*/*`) and delete
//!   (also each object of a deletecollection) of any kind but the webhook configurations
//!   themselves: the stored configurations' `rules` (operations, apiGroups, apiVersions,
//!   resources with `*` and subresources, scope), `namespaceSelector` (a namespace's own
//!   labels for namespaces), `objectSelector` (object or old object) and `matchConditions`
//!   (CEL over `object`, `oldObject` and `request`; any false skips the webhook, an error
//!   is a failed call under `failurePolicy`) pick the webhooks;
//!   each gets an `admission.k8s.io/v1` `AdmissionReview` (fresh uid, the object as it would
//!   be stored: defaults, generated name, uid; the old object; dryRun; options; the user
//!   `system:admin` in `system:masters`) over HTTPS (`clientConfig.url`, or
//!   `clientConfig.service` through [`SandboxConfig::webhook_services`]), the server
//!   verified against `caBundle` only, within `timeoutSeconds` (default 10, at most 30).
//!   Mutating webhooks run in order (configurations by name) and their JSON Patches are
//!   applied before the next; validating webhooks then run concurrently. Denials answer
//!   with the webhook's Status (`admission webhook "NAME" denied the request: ...`);
//!   failed calls under `failurePolicy: Fail` with kube-apiserver's 500
//!   `failed calling webhook "NAME": ...`; `response.warnings` become `Warning` headers.
//!   At most 64 calls are in flight at once; no lock is held while calling, so a slow
//!   webhook delays only the requests it is called for.
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
//! - Metadata only when `Accept` asks for it (kube-rs `Api<PartialObjectMeta<K>>`,
//!   client-go's metadata informers): `PartialObjectMetadataList`s for lists (paged
//!   like lists), `PartialObjectMetadata` for gets and each watch event; a
//!   transformation that does not fit the request is 406, as in kube-apiserver.
//! - Create-time defaults that `kubectl get` shows: a Service's type, node ports, cluster IP (from
//!   10.96.0.0/12) and port protocol; a Secret's type; a Namespace's phase.
//! - Lists: `labelSelector`, `fieldSelector` (metadata.name, metadata.namespace, and a
//!   few per-kind fields such as pods' `spec.nodeName`/`status.phase`), `limit` and
//!   `continue` over consistent snapshots, `remainingItemCount`, `resourceVersion` and
//!   `resourceVersionMatch`; expired continue tokens get 410 with a fresh token.
//! - Watches: `resourceVersion`, `allowWatchBookmarks`, `timeoutSeconds`,
//!   `sendInitialEvents` (ending in the `k8s.io/initial-events-end` bookmark), 410 ERROR
//!   events when the version is older than the event history (10,000 events).
//! - Faults ([`Faults`], changeable at run time): latency, 500s, 429s, connection resets,
//!   and watches cut short (after a random time, or after a random event; ending the
//!   chunked response cleanly as kube-apiserver's watch timeout does, or with a reset).
//! - A request log ([`Sandbox::requests`]): the distinct requests served, as
//!   kube-apiserver's authorizer sees them ([`ApiRequest`]: verb, group, resource,
//!   subresource, namespace, or a non-resource path), so tests can check a client's
//!   RBAC needs.
//!
//! # What is not
//! Protobuf answers, protobuf bodies of other kinds and CBOR bodies (415), schema
//! validation, defaulting beyond the
//! fields above, finalizers and graceful deletion (deletes are immediate),
//! owner-reference garbage collection, conversion between CRD versions, subresources
//! other than `status` and `scale`, field managers (`managedFields`), HTTP/2 and TLS.
//! Of admission: writes of the `scale` subresource and writes through [`Store`] (no HTTP)
//! skip the webhooks; `matchConditions` get no `authorizer` (an expression using it fails
//! under the failure policy) and are compiled when used, not refused when written,
//! `matchPolicy: Equivalent` matches only the requested
//! version, plain `http://` URLs and an
//! empty `caBundle` (kube-apiserver would use the system roots) fail the call under its
//! failure policy, a service reference's port is only named in messages (the mapped URL
//! says where to connect), RBAC objects are not enforced, and the namespace a cascading
//! namespace delete empties is not admitted object by object.
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
mod request_log;
mod resources;
mod sandbox;
mod schema;
mod selector;
mod server;
mod status;
mod store;
mod table;
mod transform;
mod watch;

pub use config::{Faults, SandboxConfig, WatchCut};
pub use error::{Error, Result};
pub use request_log::{ApiRequest, MAX_DISTINCT as MAX_DISTINCT_REQUESTS};
pub use sandbox::Sandbox;
pub use status::ApiError;
pub use store::Store;
