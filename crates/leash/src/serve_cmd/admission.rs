//! The admission component of `leash serve`: leash-webhook's server, its
//! webhook registration, readiness status and audit hand-off, wired to the
//! policy and config sources; audit results become admission
//! EphemeralReports for the aggregate controller.
//!
//! # Invariants
//! 1. [`Admission::start`] binds the server and builds everything but
//!    starts nothing; the returned `run` future, when polled, spawns the
//!    admission cache, the server, the policy status writer and the audit
//!    writer in a child scope of the given token, and the webhook
//!    registrar only once the first policy set (`generation > 0`) is
//!    served. On cancellation it shuts that scope down (cancel, then join)
//!    before it returns.
//! 2. No lock or atomic here. The `run` future alone sends on the engine
//!    and readiness channels; the server answers by its failure policy until
//!    readiness turns true, which happens only after the first whole set
//!    was sent. Policy sets are read by cloning their `Arc` out of the
//!    `watch` channel; the guard `wait_for` returns lives only for the
//!    synchronous closure that reads it; no guard lives across an await. A
//!    closed policy channel keeps the last engine until cancellation.
//! 3. An admission report write waits for [`Breaker`] room and writes on a
//!    never-cancelled token: at shutdown it is bounded by the audit
//!    writer's drain deadline (four fifths of the shutdown timeout), which
//!    drops it. Room it took is given back if the write fails.
//! 4. Lookups a review misses are fetched with the token `start` was given,
//!    so shutdown cancels them.
//! 5. `remove_if_unanswered` races its reads, its delete and its backoff
//!    sleeps against the token; the probes of each webhook are not: a URL
//!    probe is bounded by 3 s, the EndpointSlice list only by the client's
//!    own timeouts. `shared_ca` retries until it succeeds; its caller races
//!    it against SIGINT/SIGTERM.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use leash_controller::lookups::{Lookups, ScanData};
use leash_controller::{Breaker, CacheWatcher, Metrics, PolicySet, generate};
use leash_policy::{Engine, KyvernoConfig};
use leash_report::{self as report, Owner, PolicyMeta, ReportSource};
use leash_runtime::Scope;
use leash_webhook::{
    AdmissionServer, AuditRecord, PolicyRef, Recorder, Registrar, ReportSink, RequestKind,
    StatusWriter, Trigger, TriggerSink, audit_channel,
};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cli_error::usage;

/// Creates the UpdateRequest of a generate or mutate-existing trigger in
/// Kyverno's namespace (leash-controller's background component processes
/// it).
struct UpdateRequestSink {
    client: kube::Client,
    namespace: String,
}

impl std::fmt::Debug for UpdateRequestSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateRequestSink")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl TriggerSink for UpdateRequestSink {
    fn create(
        &self,
        kind: RequestKind,
        policy: &str,
        rules: Vec<String>,
        trigger: &Trigger,
    ) -> BoxFuture<'static, Result<(), String>> {
        let client = self.client.clone();
        let request = match kind {
            RequestKind::Generate | RequestKind::CelGenerate => {
                let request_type = if kind == RequestKind::CelGenerate {
                    generate::REQUEST_CEL_GENERATE
                } else {
                    generate::REQUEST_GENERATE
                };
                generate::update_request(
                    &self.namespace,
                    request_type,
                    policy,
                    &rules,
                    &trigger.object,
                )
            }
            RequestKind::Mutate | RequestKind::CelMutate => {
                let mut ur = generate::mutate::mutate_update_request(
                    &self.namespace,
                    policy,
                    &rules,
                    trigger.operation,
                    &trigger.object,
                    trigger.old_object.as_deref(),
                    &trigger.user,
                );
                if kind == RequestKind::CelMutate {
                    ur["spec"]["requestType"] = generate::mutate::REQUEST_CEL_MUTATE.into();
                }
                ur
            }
        };
        async move {
            generate::create_update_request(&client, &request)
                .await
                .map(|_| ())
                .map_err(|e| match e {
                    // kube's Display of an API error ends with the whole
                    // Status in Debug form; the user needs what it says.
                    kube::Error::Api(s) => {
                        format!(
                            "the API server answered {} {}: {}",
                            s.code, s.reason, s.message
                        )
                    }
                    e => e.to_string(),
                })
        }
        .boxed()
    }
}

/// Writes each admission record as one `EphemeralReport` (named by the
/// review's uid, so a retried write replaces, never duplicates).
struct EphemeralSink {
    client: kube::Client,
    policies: watch::Receiver<Arc<PolicySet>>,
    breaker: Arc<Breaker>,
}

impl std::fmt::Debug for EphemeralSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EphemeralSink").finish_non_exhaustive()
    }
}

impl ReportSink for EphemeralSink {
    fn write(
        &self,
        record: Arc<AuditRecord>,
    ) -> BoxFuture<'static, Result<(), leash_runtime::BoxError>> {
        let (client, policies, breaker) = (
            self.client.clone(),
            self.policies.clone(),
            self.breaker.clone(),
        );
        async move {
            let Some(owner) = Owner::of(&record.object) else {
                // No kind, name or uid: nothing a report could be named by.
                tracing::warn!(resource = %record.resource_name(), uid = %record.uid, "admission report not written: the object has no kind, name or uid");
                return Ok(());
            };
            tracing::debug!(resource = %record.resource_name(), uid = %record.uid, "writing the admission report");
            let set = policies.borrow().clone();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            // One metadata lookup per policy, not per result.
            let mut metas: Vec<(&str, PolicyMeta)> = Vec::new();
            for r in &record.results {
                if !metas.iter().any(|(k, _)| *k == &*r.policy) {
                    metas.push((&r.policy, PolicyMeta::of(&set.engine, &r.policy)));
                }
            }
            let results: Vec<_> = record
                .results
                .iter()
                .filter_map(|r| {
                    let (_, meta) = metas.iter().find(|(k, _)| *k == &*r.policy)?;
                    Some((r, meta))
                })
                .collect();
            let evaluated: Vec<(String, String)> = metas
                .iter()
                .map(|(k, _)| (k.to_string(), String::new()))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            // By chars: the review's uid is the API server's to choose.
            let short: String = record.uid.chars().take(8).collect();
            // The mutating and the validating webhook each write one.
            let phase = if record.mutation { "-m" } else { "" };
            let name = format!("{}-{short}{phase}", owner.uid);
            // A created resource does not exist yet: owned by it, the
            // report would be deleted by the garbage collector.
            let body = report::ephemeral_report_json(
                &owner,
                &name,
                ReportSource::Admission,
                &evaluated,
                &results,
                now,
                record.operation != leash_policy::Operation::Create,
            );
            let target = leash_controller::writer::Target {
                kind: if owner.cluster_scoped() {
                    "ClusterEphemeralReport"
                } else {
                    "EphemeralReport"
                },
                namespace: &owner.namespace,
                name: &name,
                has_resource_version: false,
            };
            // The audit writer bounds this write by its shutdown deadline.
            let never = CancellationToken::new();
            breaker.acquire(&never).await;
            match leash_controller::writer::put_json(&client, target, body, &never).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    breaker.release(1);
                    Err(e.into())
                }
            }
        }
        .boxed()
    }
}

/// What admission reads beyond its cache (namespaces, role bindings): a
/// `configMap` context entry, an `apiCall`, a CEL lookup, from the API
/// server between evaluations, kept for the scan's 30 s
/// ([`leash_controller::lookups`]).
struct AdmissionLookups {
    client: kube::Client,
    cache: Arc<leash_controller::Cache>,
    lookups: Arc<Lookups>,
    token: CancellationToken,
    /// Image registries (`imageRegistry` entries, `image.GetMetadata`).
    images: Arc<leash_images::Registry>,
}

impl std::fmt::Debug for AdmissionLookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionLookups").finish_non_exhaustive()
    }
}

impl leash_webhook::LookupSource for AdmissionLookups {
    fn begin(&self) -> Box<dyn leash_webhook::Lookup> {
        Box::new(AdmissionLookup {
            data: ScanData::new(self.cache.clone(), self.lookups.clone())
                .with_images(self.images.clone()),
            client: self.client.clone(),
            token: self.token.clone(),
        })
    }
}

/// One review's data. See [`AdmissionLookups`].
struct AdmissionLookup {
    data: ScanData,
    client: kube::Client,
    token: CancellationToken,
}

impl std::fmt::Debug for AdmissionLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionLookup").finish_non_exhaustive()
    }
}

impl leash_policy::ClusterData for AdmissionLookup {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<serde_json::Value>> {
        self.data.get(api_version, resource, namespace, name)
    }

    fn list(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
    ) -> Vec<Arc<serde_json::Value>> {
        self.data.list(api_version, resource, namespace)
    }

    fn api_get(&self, url_path: &str) -> Option<serde_json::Value> {
        self.data.api_get(url_path)
    }

    fn api_service(&self, call: &leash_policy::ServiceCall) -> Option<serde_json::Value> {
        self.data.api_service(call)
    }

    fn image_data(&self, image: &str) -> Result<serde_json::Value, String> {
        self.data.image_data(image)
    }

    fn verify_image(
        &self,
        image: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<String, String> {
        self.data.verify_image(image, trust)
    }

    fn verify_attestations(
        &self,
        image: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<Vec<serde_json::Value>, String> {
        self.data.verify_attestations(image, trust)
    }
}

impl leash_webhook::Lookup for AdmissionLookup {
    /// Cluster objects and images together: each bounded (the API
    /// server's requests by the token and their own timeouts, a registry
    /// by the registry timeout), all within the review's deadline.
    fn fetch_missed(&self) -> BoxFuture<'_, bool> {
        async move {
            let (objects, images) = futures::join!(
                self.data.fetch_missed(&self.client, &self.token),
                leash_runtime::cancellable(&self.token, self.data.fetch_missed_images()),
            );
            objects || images.unwrap_or(false)
        }
        .boxed()
    }
}

/// Everything the admission component needs.
pub(crate) struct Admission {
    pub(crate) client: kube::Client,
    pub(crate) settings: leash_webhook::Settings,
    pub(crate) policies: watch::Receiver<Arc<PolicySet>>,
    pub(crate) config: watch::Receiver<Arc<KyvernoConfig>>,
    pub(crate) breaker: Arc<Breaker>,
    pub(crate) metrics: Arc<Metrics>,
    /// Where generate triggers' UpdateRequests are created.
    pub(crate) update_request_namespace: String,
    /// Image registries, shared by every review (one fetch per image for
    /// concurrent reviews, answers kept for the registry's TTL).
    pub(crate) images: Arc<leash_images::Registry>,
}

/// A started admission component's address, and its run future.
pub(crate) struct Started {
    pub(crate) url: String,
    /// True once the webhook configuration was written.
    pub(crate) registered: watch::Receiver<bool>,
    pub(crate) run: BoxFuture<'static, Result<(), leash_runtime::ScopeError>>,
}

impl Admission {
    /// Binds the server (so the address and CA are known) and returns the
    /// future that runs everything; nothing runs until it is polled.
    pub(crate) fn start(
        self,
        registry: &mut Registry,
        token: CancellationToken,
    ) -> anyhow::Result<Started> {
        let (engine_tx, engine_rx) = watch::channel(Arc::new(Engine::new()));
        // Reviews are answered by their failure policy until the first
        // whole policy set is served (a stale configuration of an earlier
        // run may send them at once).
        let (ready_tx, ready_rx) = watch::channel(false);
        let cache_watcher = CacheWatcher::for_admission(self.client.clone(), self.metrics.clone());
        let sink = Arc::new(EphemeralSink {
            client: self.client.clone(),
            policies: self.policies.clone(),
            breaker: self.breaker.clone(),
        });
        // The drain gets four fifths of the shutdown deadline, so that what
        // it could not write is reported before leash exits, and shutdown
        // still ends in time.
        let (queue, writer) = audit_channel(
            self.settings.audit.clone(),
            self.settings.shutdown_timeout * 4 / 5,
            sink,
            registry,
        );
        let recorder = Recorder::new(registry);
        let server = AdmissionServer::new(
            self.settings.clone(),
            engine_rx.clone(),
            self.config.clone(),
            cache_watcher.cache(),
            queue,
            recorder.clone(),
            registry,
        )
        .map_err(|e| setup_error(e, self.settings.tls_cert.is_some()))?
        .until_ready(ready_rx)
        .with_triggers(Arc::new(UpdateRequestSink {
            client: self.client.clone(),
            namespace: self.update_request_namespace.clone(),
        }))
        .with_lookups(Arc::new(AdmissionLookups {
            client: self.client.clone(),
            cache: cache_watcher.cache(),
            lookups: Arc::new(Lookups::default()),
            token: token.clone(),
            images: self.images.clone(),
        }));
        let url = server.webhook_url();
        let registrar = Registrar::new(
            self.client.clone(),
            &self.settings,
            url.clone(),
            server.ca_pem().to_string(),
            engine_rx,
        );
        let registered = registrar.registered();
        let status = StatusWriter::new(self.client.clone(), &recorder);
        let mut policies = self.policies;
        // Invalid policies get a not-Ready status naming the field.
        let report_invalid = move |set: &PolicySet| {
            recorder.fail_exactly(set.errors.iter().map(|e| {
                (
                    PolicyRef::new(&e.kind, e.namespace.as_deref(), &e.name),
                    e.error.clone(),
                )
            }));
        };
        let run = async move {
            let scope = Scope::with_parent_token(&token);
            let t = scope.token().clone();
            scope.spawn("admission cache", cache_watcher.run(t.clone()));
            scope.spawn("admission server", server.run(t.clone()));
            scope.spawn("policy status", status.run(t.clone()));
            {
                let t = t.clone();
                scope.spawn("audit writer", async move {
                    let summary = writer.run(t).await;
                    if !summary.lost.is_empty() {
                        tracing::warn!("{} admission results were not written", summary.lost.len());
                    }
                    Ok::<(), std::convert::Infallible>(())
                });
            }
            // The webhook is registered (and readiness follows) only once the
            // first policy set is served: a configuration written from the
            // empty engine would match nothing, and requests made right after
            // /readyz would not reach the webhook.
            let first = tokio::select! {
                _ = t.cancelled() => None,
                r = policies.wait_for(|set| set.generation > 0) => r.ok().map(|set| {
                    report_invalid(&set);
                    set.engine.clone()
                }),
            };
            if let Some(engine) = first {
                engine_tx.send_replace(Arc::new(engine));
                ready_tx.send_replace(true);
                scope.spawn("webhook registrar", registrar.run(t.clone()));
            }
            // Feed the server the admission view of each policy set.
            loop {
                tokio::select! {
                    _ = t.cancelled() => break,
                    r = policies.changed() => {
                        if r.is_err() {
                            // No more policy sets: the server keeps
                            // serving the last one until shutdown.
                            t.cancelled().await;
                            break;
                        }
                        let set = policies.borrow_and_update().clone();
                        if set.generation > 0 {
                            report_invalid(&set);
                            engine_tx.send_replace(Arc::new(set.engine.clone()));
                        }
                    }
                }
            }
            scope.shutdown().await
        };
        Ok(Started {
            url,
            registered,
            run: run.boxed(),
        })
    }
}

/// An error of the admission server's setup, naming the flag to fix and
/// keeping its cause (the OS's reason a bind failed). `tls_files`: the
/// certificate and key came from `--tls-cert`/`--tls-key`.
fn setup_error(e: leash_webhook::Error, tls_files: bool) -> anyhow::Error {
    use leash_webhook::Error;
    match e {
        Error::BindFailed { addr, source } => usage(format!(
            "--admission-listen {addr}: cannot listen: {source}"
        )),
        Error::TlsFileInvalid { what, .. } => {
            let flag = if what == "key" {
                "--tls-key"
            } else {
                "--tls-cert"
            };
            usage(format!("{flag}: {e}"))
        }
        // Its message names both flags.
        Error::TlsIncomplete(_) => usage(e.to_string()),
        Error::TlsConfigFailed(ref source) if tls_files => {
            usage(format!("--tls-cert/--tls-key: {e}: {source}"))
        }
        e => anyhow::Error::new(e).context("starting the admission webhook"),
    }
}

/// The shared webhook CA from the Secret `namespace/name` (created at the
/// first start), retried with backoff while the API server cannot be
/// reached or refuses; each failure is logged at warn, naming the Secret.
pub(crate) async fn shared_ca(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> leash_webhook::CaMaterial {
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match leash_webhook::shared_ca(client, namespace, name).await {
            Ok(ca) => return ca,
            Err(e) => {
                let why = match std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<kube::Error>())
                {
                    Some(k) => leash_controller::watch::client_error_reason(k),
                    None => e.to_string(),
                };
                tracing::warn!("{e}: {why}; retrying in {delay:?}");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
    }
}

/// Deletes the ValidatingWebhookConfiguration `name` that leash wrote, if
/// none of its webhooks can be answered: a URL where nothing accepts a
/// connection, a Service with no ready endpoint. One that something
/// answers (another replica serving admission) is left alone.
pub(crate) async fn remove_if_unanswered(
    client: &kube::Client,
    name: &str,
    token: &CancellationToken,
) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
    let mut delay = std::time::Duration::from_millis(500);
    let current = loop {
        match token.run_until_cancelled(api.get_opt(name)).await {
            None => return,
            Some(Ok(c)) => break c,
            Some(Err(e)) => tracing::warn!(
                "reading ValidatingWebhookConfiguration {name} (to remove it if stale): {}; retrying in {delay:?}",
                leash_controller::watch::client_error_reason(&e)
            ),
        }
        if token
            .run_until_cancelled(tokio::time::sleep(delay))
            .await
            .is_none()
        {
            return;
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
    };
    let Some(current) = current else { return };
    let ours = current
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("webhook.kyverno.io/managed-by"))
        .is_some_and(|v| v == "leash");
    if !ours {
        return;
    }
    for hook in current.webhooks.iter().flatten() {
        let answered = match (&hook.client_config.url, &hook.client_config.service) {
            (Some(url), _) => url_accepts(url).await,
            (None, Some(svc)) => service_has_endpoints(client, &svc.namespace, &svc.name).await,
            (None, None) => false,
        };
        if answered {
            tracing::info!(
                "ValidatingWebhookConfiguration {name} is served elsewhere (webhook {}); left in place",
                hook.name
            );
            return;
        }
    }
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: current.metadata.resource_version.clone(),
            uid: None,
        }),
        ..Default::default()
    };
    match token.run_until_cancelled(api.delete(name, &params)).await {
        Some(Ok(_)) => tracing::warn!(
            "removed ValidatingWebhookConfiguration {name}: admission is not a component of this run and nothing answers its webhooks, which would fail every request they match"
        ),
        Some(Err(e)) => tracing::warn!(
            "removing the stale ValidatingWebhookConfiguration {name}: {}",
            leash_controller::watch::client_error_reason(&e)
        ),
        None => {}
    }
}

/// Whether the webhook at `url` may be answered. Only a loopback URL
/// (`127.0.0.0/8`, `::1`, `localhost`) is judged, by whether something
/// accepts a TCP connection there within 3 s: from this host that is
/// proof. Any other host counts as answered (never delete on a doubt: a
/// replica this host cannot reach may be serving it, and deleting its
/// configuration would admit what its policies deny), and is not dialled.
async fn url_accepts(url: &str) -> bool {
    let Some((host, port)) = loopback_target(url) else {
        return true;
    };
    matches!(
        tokio::time::timeout(
            std::time::Duration::from_secs(3),
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await,
        Ok(Ok(_))
    )
}

/// The host and port of a loopback `https://` URL; None for any other.
fn loopback_target(url: &str) -> Option<(String, u16)> {
    let uri = url.parse::<http::Uri>().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback.then(|| (host.to_string(), uri.port_u16().unwrap_or(443)))
}

/// Whether the Service has a ready endpoint (EndpointSlices); an error
/// reading them counts as "answered" (never delete on a doubt).
async fn service_has_endpoints(client: &kube::Client, namespace: &str, name: &str) -> bool {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client.clone(), namespace);
    let params =
        kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    match api.list(&params).await {
        Ok(list) => list.items.iter().any(|slice| {
            slice
                .endpoints
                .iter()
                .flatten()
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        }),
        Err(e) => {
            tracing::warn!(
                "reading the endpoints of Service {namespace}/{name}: {}; the webhook configuration is left in place",
                leash_controller::watch::client_error_reason(&e)
            );
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run without admission judges only loopback URLs (from this host a
    /// refused connection there proves nothing serves them); any other
    /// host is left alone, undialled.
    #[test]
    fn only_loopback_webhook_urls_are_judged() {
        assert_eq!(
            loopback_target("https://127.0.0.1:9443/validate/fail"),
            Some(("127.0.0.1".to_string(), 9443))
        );
        assert_eq!(
            loopback_target("https://[::1]/validate"),
            Some(("::1".to_string(), 443))
        );
        assert_eq!(
            loopback_target("https://localhost:8443/v"),
            Some(("localhost".to_string(), 8443))
        );
        assert_eq!(loopback_target("https://10.0.0.7:9443/validate"), None);
        assert_eq!(loopback_target("https://leash.example.com/validate"), None);
        assert_eq!(loopback_target("not a url"), None);
    }

    #[tokio::test]
    async fn a_remote_url_counts_as_answered() {
        assert!(url_accepts("https://10.0.0.7:9443/validate").await);
    }
}
