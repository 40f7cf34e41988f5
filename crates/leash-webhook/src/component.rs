//! Admission as one component: the webhook server, its registration,
//! the policy status writer, the audit hand-off and its report sink
//! (admission `EphemeralReport`s for the aggregate controller), the
//! UpdateRequest sink of generate and mutate-existing triggers, and the
//! lookups reviews make beyond the admission cache, fed the policy sets of
//! leash-controller's source. `leash serve` builds it with
//! [`AdmissionComponent::builder`] and runs it with
//! [`AdmissionComponent::run`].
//!
//! # Invariants
//! 1. [`AdmissionBuilder::build`] binds the server and builds everything
//!    but starts nothing; [`AdmissionComponent::run`] spawns the admission
//!    cache, the server, the policy status writer and the audit writer in
//!    a child scope of the given token, and the webhook registrar only
//!    once the first policy set (`generation > 0`) is served. On
//!    cancellation it shuts that scope down (cancel, then join) before it
//!    returns.
//! 2. No lock or atomic here. `run` alone sends on the engine and
//!    readiness channels; the server answers by its failure policy until
//!    readiness turns true, which happens only after the first whole set
//!    was sent. Policy sets are read by cloning their `Arc` out of the
//!    `watch` channel; the guard `wait_for` returns lives only for the
//!    synchronous closure that reads it; no guard lives across an await. A
//!    closed policy channel keeps the last engine until cancellation.
//! 3. An admission report write waits for [`Breaker`] room and writes on a
//!    never-cancelled token: at shutdown it is bounded by the audit
//!    writer's drain deadline (four fifths of the shutdown timeout), which
//!    drops it. Room it took is given back if the write fails.
//! 4. Lookups a review misses are fetched with a token that `run`'s token
//!    cancels, so shutdown cancels them.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use leash_controller::lookups::{Lookups, ScanData};
use leash_controller::{Breaker, CacheWatcher, Metrics, PolicySet, generate};
use leash_policy::{Engine, KyvernoConfig};
use leash_report::{self as report, Owner, PolicyMeta, ReportSource};
use leash_runtime::Scope;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::{
    AdmissionServer, AuditRecord, PolicyRef, Recorder, Registrar, ReportSink, RequestKind,
    Settings, StatusWriter, Trigger, TriggerSink, audit_channel,
};

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
    /// The shared cluster view, when `serve` gives one: its data (cache,
    /// answers, global context) is what a review reads.
    hub: Option<Arc<leash_controller::WatchHub>>,
    token: CancellationToken,
    /// Image registries (`imageRegistry` entries, `image.GetMetadata`).
    images: Arc<leash_images::Registry>,
}

impl std::fmt::Debug for AdmissionLookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionLookups").finish_non_exhaustive()
    }
}

impl crate::LookupSource for AdmissionLookups {
    fn begin(&self) -> Box<dyn crate::Lookup> {
        let data = match &self.hub {
            Some(hub) => hub.data(),
            None => ScanData::new(self.cache.clone(), self.lookups.clone()),
        };
        Box::new(AdmissionLookup {
            data: data.with_images(self.images.clone()),
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

impl crate::Lookup for AdmissionLookup {
    fn data(&self) -> &dyn leash_policy::ClusterData {
        &self.data
    }

    /// Cluster objects and images together: each bounded (the API
    /// server's requests by the token and their own timeouts, a registry
    /// by the registry timeout), all within the review's deadline.
    fn fetch_missed(&self) -> BoxFuture<'_, bool> {
        async move {
            self.data
                .fetch_all(&self.client, &self.token)
                .await
                .unwrap_or(false)
        }
        .boxed()
    }
}

/// Builds an [`AdmissionComponent`]: what it serves comes from the
/// arguments of [`AdmissionComponent::builder`], the rest has defaults.
pub struct AdmissionBuilder {
    client: kube::Client,
    settings: Settings,
    policies: watch::Receiver<Arc<PolicySet>>,
    config: watch::Receiver<Arc<KyvernoConfig>>,
    breaker: Option<Arc<Breaker>>,
    metrics: Option<Arc<Metrics>>,
    update_request_namespace: String,
    images: Option<Arc<leash_images::Registry>>,
    hub: Option<Arc<leash_controller::WatchHub>>,
}

impl std::fmt::Debug for AdmissionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionBuilder")
            .field("settings", &self.settings)
            .field("update_request_namespace", &self.update_request_namespace)
            .finish_non_exhaustive()
    }
}

impl AdmissionBuilder {
    /// The quota admission reports share with the background scan's
    /// (default: a quota of its own, unbounded).
    pub fn breaker(mut self, breaker: Arc<Breaker>) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// leash's metrics (API errors of the admission cache); default: ones
    /// of its own, registered nowhere.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Where generate and mutate-existing triggers' UpdateRequests are
    /// created (default `kyverno`).
    pub fn update_request_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.update_request_namespace = namespace.into();
        self
    }

    /// Image registries, shared with the background scan (one fetch per
    /// image for concurrent reviews, answers kept for the registry's TTL);
    /// default: a client of its own with default settings.
    pub fn images(mut self, images: Arc<leash_images::Registry>) -> Self {
        self.images = Some(images);
        self
    }

    /// Watches what admission reads (namespaces, role bindings) through
    /// `hub`, in its cache, shared with the background scan (one watch per
    /// kind); default: watches of its own.
    pub fn hub(mut self, hub: Arc<leash_controller::WatchHub>) -> Self {
        self.hub = Some(hub);
        self
    }

    /// Binds the server, so its URL and CA are known, and builds the
    /// component; starts nothing.
    pub fn build(self, registry: &mut Registry) -> crate::Result<AdmissionComponent> {
        let metrics = self
            .metrics
            .unwrap_or_else(|| Arc::new(Metrics::unregistered()));
        let breaker = self
            .breaker
            .unwrap_or_else(|| Arc::new(Breaker::new(usize::MAX, metrics.clone())));
        let images = self
            .images
            .unwrap_or_else(|| Arc::new(leash_images::Registry::new(Default::default())));
        let (engine_tx, engine_rx) = watch::channel(Arc::new(Engine::new()));
        // Reviews are answered by their failure policy until the first
        // whole policy set is served (a stale configuration of an earlier
        // run may send them at once).
        let (ready_tx, ready_rx) = watch::channel(false);
        let mut cache_watcher = CacheWatcher::for_admission(self.client.clone(), metrics.clone());
        let mut lookups = Arc::new(Lookups::default());
        if let Some(hub) = &self.hub {
            lookups = hub.lookups();
            cache_watcher = cache_watcher.on_hub(hub.clone());
        }
        let sink = Arc::new(EphemeralSink {
            client: self.client.clone(),
            policies: self.policies.clone(),
            breaker,
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
        // Cancelled by `run`'s token (invariant 4).
        let lookups_token = CancellationToken::new();
        let server = AdmissionServer::new(
            self.settings.clone(),
            engine_rx.clone(),
            self.config,
            cache_watcher.cache(),
            queue,
            recorder.clone(),
            registry,
        )?
        .until_ready(ready_rx)
        .with_triggers(Arc::new(UpdateRequestSink {
            client: self.client.clone(),
            namespace: self.update_request_namespace,
        }))
        .with_lookups(Arc::new(AdmissionLookups {
            client: self.client.clone(),
            cache: cache_watcher.cache(),
            lookups,
            hub: self.hub.clone(),
            token: lookups_token.clone(),
            images,
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
        let status = StatusWriter::new(self.client, &recorder);
        Ok(AdmissionComponent {
            url,
            registered,
            server,
            cache_watcher,
            registrar,
            status,
            recorder,
            writer,
            policies: self.policies,
            engine_tx,
            ready_tx,
            lookups_token,
        })
    }
}

/// Admission, built and bound: [`AdmissionComponent::run`] serves it.
pub struct AdmissionComponent {
    url: String,
    registered: watch::Receiver<bool>,
    server: AdmissionServer,
    cache_watcher: CacheWatcher,
    registrar: Registrar,
    status: StatusWriter,
    recorder: Recorder,
    writer: crate::AuditWriter,
    policies: watch::Receiver<Arc<PolicySet>>,
    engine_tx: watch::Sender<Arc<Engine>>,
    ready_tx: watch::Sender<bool>,
    lookups_token: CancellationToken,
}

impl std::fmt::Debug for AdmissionComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionComponent")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl AdmissionComponent {
    /// A builder for the component serving `policies` (leash-controller's
    /// policy source) with Kyverno's `config`, over `client`.
    pub fn builder(
        client: kube::Client,
        settings: Settings,
        policies: watch::Receiver<Arc<PolicySet>>,
        config: watch::Receiver<Arc<KyvernoConfig>>,
    ) -> AdmissionBuilder {
        AdmissionBuilder {
            client,
            settings,
            policies,
            config,
            breaker: None,
            metrics: None,
            update_request_namespace: "kyverno".to_string(),
            images: None,
            hub: None,
        }
    }

    /// The validating webhook's URL (the mutating one is its `/mutate`
    /// sibling).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// True once the webhook configurations were written.
    pub fn registered(&self) -> watch::Receiver<bool> {
        self.registered.clone()
    }

    /// Serves until `token` is cancelled (invariant 1).
    ///
    /// # Cancel safety
    /// Cancel the token to stop it; dropping the future drops the tasks'
    /// scope, which cancels and detaches them.
    pub async fn run(self, token: CancellationToken) -> Result<(), leash_runtime::ScopeError> {
        let AdmissionComponent {
            server,
            cache_watcher,
            registrar,
            status,
            recorder,
            writer,
            mut policies,
            engine_tx,
            ready_tx,
            lookups_token,
            ..
        } = self;
        // Invalid policies get a not-Ready status naming the field.
        let report_invalid = move |set: &PolicySet| {
            recorder.fail_exactly(set.errors.iter().map(|e| {
                (
                    PolicyRef::new(&e.kind, e.namespace.as_deref(), &e.name),
                    e.error.clone(),
                )
            }));
        };
        let scope = Scope::with_parent_token(&token);
        let t = scope.token().clone();
        {
            let t = t.clone();
            scope.spawn("admission lookups", async move {
                t.cancelled().await;
                lookups_token.cancel();
                Ok::<(), std::convert::Infallible>(())
            });
        }
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
    }
}
