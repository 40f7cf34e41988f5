//! leash-webhook: the admission component of `leash serve`.
//!
//! # Components
//! - [`AdmissionServer`]: HTTPS (rustls with ring, HTTP/1.1) answering
//!   `admission.k8s.io/v1` AdmissionReviews on `POST /validate`
//!   (`/validate/fail`, `/validate/ignore` per webhook failure policy) and
//!   `GET /healthz`. It evaluates the validate rules of every
//!   admission-enabled policy of the current [`leash_policy::Engine`]
//!   snapshot and answers as Kyverno does: Enforce failures and errors deny
//!   with Kyverno's message, Audit failures allow, ValidatingPolicy `Deny`
//!   denies, `Warn` adds warnings. Filtered and excluded requests (Kyverno's
//!   ConfigMap) are allowed without evaluation.
//! - [`audit_channel`] → ([`AuditQueue`], [`AuditWriter`]): the results of
//!   admitted requests handed to a [`ReportSink`] through a bounded queue,
//!   retried with backoff, drained at shutdown.
//! - [`Recorder`] and [`StatusWriter`]: which policies the webhook serves,
//!   and their `status` marked Ready as Kyverno reports it.
//! - [`build_configuration`] and [`Registrar`]: the
//!   `ValidatingWebhookConfiguration`, kept in step with the policy set and
//!   removed on clean shutdown when asked.
//!
//! Every component follows the house rules: `new` starts nothing, `run(token)`
//! does the work and returns when the token is cancelled, every task belongs
//! to a `leash_runtime::Scope`, every I/O await is raced against the token.
//!
//! # Seed defects ruled out
//! - *Recorder holds a mutex across a channel send*: the [`Recorder`]'s state
//!   is a `watch` channel modified in place; a consumer that stopped reading
//!   blocks nothing (test `seed_recorder_send_under_lock`).
//! - *Dummy WaitGroup, fire-and-forget background work*: audit results are
//!   queued (bounded), written with retries by a worker that shutdown drains;
//!   every result is written or its loss is counted, logged by name and told
//!   to the sink (test `seed_fire_and_forget_background`).
//! - *Tests mutating shared policy objects, goroutines writing one map*:
//!   the policy set is an immutable `Arc<Engine>`; the per-set derived data is
//!   built once and swapped whole (test `seed_shared_policy_mutation`).
//! - *Shared `err` across load-generator goroutines*: `leash-loadgen` keeps
//!   each client's counters, latencies and errors in that client's own task.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod audit;
mod ca_secret;
mod component;
mod error;
mod memo;
mod metrics;
mod recorder;
pub mod review;
mod server;
mod settings;
mod snapshot;
mod status;
mod tls;
mod userinfo;
mod webhookconfig;

pub use audit::{
    AuditQueue, AuditRecord, AuditWriter, DrainSummary, LossReason, ReportSink, audit_channel,
};
pub use ca_secret::shared_ca;
pub use component::{AdmissionBuilder, AdmissionComponent};
pub use error::{Error, Result};
pub use recorder::{Gvr, PolicyRef, Readiness, Recorder};
pub use server::{
    AdmissionServer, FailurePolicy, Lookup, LookupSource, RequestKind, Trigger, TriggerSink,
};
pub use settings::{AuditSettings, ServiceRef, Settings};
pub use status::StatusWriter;
pub use tls::{CaMaterial, TlsMaterial, generate as generate_tls};
pub use userinfo::{RoleMemo, resolve_roles};
pub use webhookconfig::{
    ClientTarget, Exclusions, Registrar, build_configuration, build_mutating_configuration,
};
