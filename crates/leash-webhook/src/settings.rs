//! The settings of the admission component; fields mirror `leash serve`'s flags.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// A Service the webhook configuration points at instead of a URL
/// (`clientConfig.service`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRef {
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
    /// The Service's port (Kubernetes' default: 443).
    pub port: Option<i32>,
    /// The path prefix of the validating webhooks (`/validate`; `/fail`
    /// and `/ignore` are appended); the mutating ones are at its sibling
    /// `/mutate`.
    pub path: String,
}

/// How the audit hand-off retries and how much it buffers.
#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// Records the queue holds (default 10,000). A full queue never blocks
    /// an admission response: the record's loss is counted and logged by name.
    pub capacity: usize,
    /// Writes in flight at once (default 8).
    pub concurrency: usize,
    /// First retry delay (default 100 ms); doubled each attempt, full jitter.
    pub initial_backoff: Duration,
    /// Largest retry delay (default 10 s).
    pub max_backoff: Duration,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            capacity: 10_000,
            concurrency: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// Settings of the admission component (server, audit hand-off, registrar).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--admission-listen` (default `127.0.0.1:9443`).
    pub listen: SocketAddr,
    /// `--tls-cert`: PEM certificate chain. With `tls_key`; without both, a
    /// self-signed CA and serving certificate are generated at start.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`: PEM private key.
    pub tls_key: Option<PathBuf>,
    /// Without `tls_cert`: the CA that signs the generated serving
    /// certificate (shared by the replicas; None: a new one per start).
    pub ca: Option<crate::tls::CaMaterial>,
    /// `--webhook-url` (default `https://<listen>/validate`): what the
    /// validating webhooks point at (`/fail` and `/ignore` are appended per
    /// webhook); the mutating ones point at its sibling `/mutate`. Ends in
    /// `/validate`.
    pub webhook_url: Option<String>,
    /// A Service reference instead of a URL (wins over `webhook_url`).
    pub service: Option<ServiceRef>,
    /// Namespaces the webhooks never send requests from (leash's own and
    /// `--webhook-exclude-namespaces`).
    pub excluded_namespaces: Vec<String>,
    /// `timeoutSeconds` of the webhooks, and the deadline of every answer (default 10).
    pub timeout_seconds: u8,
    /// `--cleanup-webhooks`: delete the webhook configuration on clean shutdown.
    pub cleanup_webhooks: bool,
    /// The ValidatingWebhookConfiguration's name (default `leash-validating-webhook-cfg`).
    pub configuration_name: String,
    /// The MutatingWebhookConfiguration's name (default `leash-mutating-webhook-cfg`).
    pub mutating_configuration_name: String,
    /// How long shutdown may take: in-flight reviews, draining the audit queue,
    /// deleting the webhook configuration (default 10 s).
    pub shutdown_timeout: Duration,
    /// `--admission-reports` (default true): hand the results of every
    /// admitted request to the audit queue, for an admission EphemeralReport
    /// (Kyverno's `--admissionReports`). Off, requests are evaluated and
    /// answered as before and nothing is queued: the background scan alone
    /// reports.
    pub reports: bool,
    /// The audit hand-off.
    pub audit: AuditSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 9443)),
            tls_cert: None,
            tls_key: None,
            ca: None,
            webhook_url: None,
            service: None,
            excluded_namespaces: Vec::new(),
            timeout_seconds: 10,
            cleanup_webhooks: false,
            configuration_name: "leash-validating-webhook-cfg".to_string(),
            mutating_configuration_name: "leash-mutating-webhook-cfg".to_string(),
            shutdown_timeout: Duration::from_secs(10),
            reports: true,
            audit: AuditSettings::default(),
        }
    }
}

impl Settings {
    /// The URL the webhook configuration points at (before `/fail`, `/ignore`).
    pub fn effective_webhook_url(&self, bound: SocketAddr) -> String {
        match &self.webhook_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("https://{bound}/validate"),
        }
    }

    /// The deadline of one answer: 90% of `timeout_seconds` (at least 100 ms),
    /// so the answer reaches the API server before it gives up.
    pub fn answer_deadline(&self) -> Duration {
        let total = Duration::from_secs(u64::from(self.timeout_seconds.max(1)));
        (total * 9 / 10).max(Duration::from_millis(100))
    }
}
