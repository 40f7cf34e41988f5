//! The admission component of `leash serve`: leash-webhook's server, its
//! webhook registration, readiness status and audit hand-off, wired to the
//! policy and config sources; audit results become admission
//! EphemeralReports for the aggregate controller.

use std::sync::Arc;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use leash_controller::lookups::{Lookups, ScanData};
use leash_controller::{Breaker, CacheWatcher, Metrics, PolicySet, generate};
use leash_policy::{Engine, KyvernoConfig, Source};
use leash_report::{self as report, Owner, PolicyMeta, ReportSource};
use leash_runtime::Scope;
use leash_webhook::{
    AdmissionServer, AuditRecord, Recorder, Registrar, ReportSink, StatusWriter, TriggerSink,
    audit_channel,
};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cli_error::usage;

/// Creates the UpdateRequest of a generate trigger in Kyverno's namespace
/// (leash-controller's background component processes it).
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
        source: Source,
        policy: &str,
        rules: Vec<String>,
        trigger: Arc<serde_json::Value>,
    ) -> BoxFuture<'static, Result<(), String>> {
        let client = self.client.clone();
        let request_type = match source {
            Source::GeneratingPolicy => generate::REQUEST_CEL_GENERATE,
            _ => generate::REQUEST_GENERATE,
        };
        let request =
            generate::update_request(&self.namespace, request_type, policy, &rules, &trigger);
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
            let name = format!("{}-{short}", owner.uid);
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
}

impl std::fmt::Debug for AdmissionLookups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionLookups").finish_non_exhaustive()
    }
}

impl leash_webhook::LookupSource for AdmissionLookups {
    fn begin(&self) -> Box<dyn leash_webhook::Lookup> {
        Box::new(AdmissionLookup {
            data: ScanData::new(self.cache.clone(), self.lookups.clone()),
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
}

impl leash_webhook::Lookup for AdmissionLookup {
    fn fetch_missed(&self) -> BoxFuture<'_, bool> {
        self.data.fetch_missed(&self.client, &self.token).boxed()
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
        .map_err(|e| usage(format!("--admission-listen: {e}")))?
        .with_triggers(Arc::new(UpdateRequestSink {
            client: self.client.clone(),
            namespace: self.update_request_namespace.clone(),
        }))
        .with_lookups(Arc::new(AdmissionLookups {
            client: self.client.clone(),
            cache: cache_watcher.cache(),
            lookups: Arc::new(Lookups::default()),
            token: token.clone(),
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
                r = policies.wait_for(|set| set.generation > 0) => r.ok().map(|set| set.engine.clone()),
            };
            if let Some(engine) = first {
                engine_tx.send_replace(Arc::new(engine));
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
