//! The background scan: watches every kind a background policy matches,
//! evaluates each resource when it or the policies change and on every
//! `interval`, and writes one background-scan ephemeral report per resource.
//!
//! - Watchers are started and stopped as the policies' kinds change; each
//!   runs in its own child scope, kept in a map with an identity so that a
//!   watcher that ended is replaced (house rule 8).
//! - Work is a deduplicating queue of object keys ([`WorkQueue`]) drained by
//!   a fixed set of workers: a burst of changes to one object is evaluated
//!   once, and one object is not evaluated by two workers at once
//!   ([`WorkQueue`]'s invariants).
//! - Workers read shared, immutable objects (`Arc<Value>`) and compiled
//!   policies; nothing is written into either (seed 000: the scan's
//!   goroutines wrote into one shared map from the informer cache).
//!
//! # Invariants
//! 1. [`BackgroundScan::new`] starts nothing. [`BackgroundScan::run`]
//!    spawns, in a child scope of its token, the workers, the periodic
//!    rescan and one child scope per watched kind; only its own loop (one
//!    task, no lock) owns the watcher set (`watchers.rs`), the catalog and the `synced`
//!    sender.
//! 2. A watcher is stopped by shutting its scope down (cancel, then join)
//!    before its store is dropped from the cache or a replacement is
//!    started: no two watchers of one kind run at once. A watcher that
//!    ended reports `(kind, id)` on an unbounded channel; it is replaced
//!    only if the set still holds that id and the token is not cancelled
//!    (house rule 8; seed: a dead watcher never recreated).
//! 3. Shared state is the [`Cache`] (see its invariants), the
//!    [`ReportIndex`], the [`Lookups`] and the queue, each with its own
//!    short-held `std` lock; this module holds no lock itself and no guard
//!    across an await. Policies and config are read by cloning their `Arc`
//!    out of the `watch` channels.
//! 4. Work names an object, not its contents: a worker reads the object
//!    from the cache when it takes the key (the watch stores an event
//!    before it queues the key), so it evaluates the newest state the
//!    cache holds.
//! 5. Evaluation is synchronous and never waits on the network; lookups it
//!    missed are fetched between evaluations (at most four rounds), raced
//!    against the token. Breaker room is taken only for a report this
//!    resource does not have pending, and given back if the write fails.
//! 6. On cancellation the loop breaks, every watcher scope is shut down,
//!    then the run's scope (workers, rescan) is shut down; `run` returns
//!    after all of them ended. Workers stop at `WriteError::Cancelled` or
//!    when the queue returns `None`.
//! 7. A closed policy or config channel is not an end: the scan goes on
//!    with the last snapshot.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::core::ApiResource;
use leash_loader::{Catalog, LoadOptions, Loader};
use leash_policy::{ClusterData, EvalRequest, KyvernoConfig, Operation, Prepared, UserInfo};
use leash_report::{self as report, Owner, PolicyMeta, ReportSource};
use leash_runtime::{Every, Scope, ScopeError};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::aggregate::ReportIndex;
use crate::cache::{Cache, KindKey, kind_key};
use crate::hub::WatchHub;
use crate::kinds::select_kinds;
use crate::metrics::{Metrics, Running};
use crate::object::api_resource;
use crate::queue::WorkQueue;
use crate::sources::PolicySet;
use crate::watch::{Change, Seen};
use crate::watchers::{Ended, WatcherSet};
use crate::writer::{self, Breaker, WriteError};

/// A unit of scan work.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Work {
    /// Evaluate one object (as it is in the cache when the worker gets it).
    Object(KindKey, String, String),
    /// An object was deleted: its reports go.
    Gone(Owner),
}

/// How the scan works.
#[derive(Debug, Clone)]
pub struct ScanSettings {
    /// Concurrent evaluating workers.
    pub workers: usize,
    /// Full rescan period (`--background-scan-interval`).
    pub interval: Duration,
    /// Image registries for `imageRegistry` entries and CEL
    /// `image.GetMetadata`; None: such a rule errors ("no image registry
    /// is read here").
    pub images: Option<Arc<leash_images::Registry>>,
}

impl Default for ScanSettings {
    fn default() -> Self {
        ScanSettings {
            workers: 8,
            interval: Duration::from_secs(3600),
            images: None,
        }
    }
}

/// Evaluates one object with the background policies: the report results.
/// Pure (no I/O): what the workers run, and what tests compare.
pub fn evaluate_object(
    set: &PolicySet,
    config: &KyvernoConfig,
    cache: &Cache,
    object: &Arc<Value>,
    now: u64,
) -> Vec<Value> {
    evaluate_object_with(set, config, cache, cache, object, now)
}

/// [`evaluate_object`] with the cluster data lookups read (`data`) apart
/// from the cache that holds the namespaces.
pub fn evaluate_object_with(
    set: &PolicySet,
    config: &KyvernoConfig,
    cache: &Cache,
    data: &dyn ClusterData,
    object: &Arc<Value>,
    now: u64,
) -> Vec<Value> {
    let kind = object["kind"].as_str().unwrap_or("");
    let ns = object["metadata"]["namespace"].as_str().unwrap_or("");
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    if config.is_filtered(kind, ns, name) {
        return Vec::new();
    }
    let namespace_object = if ns.is_empty() {
        None
    } else {
        cache.namespace(ns)
    };
    let namespace_labels = namespace_object.as_deref().map(leash_policy::labels_of);
    let req = EvalRequest {
        object: object.clone(),
        old_object: None,
        operation: Operation::Background,
        user_info: UserInfo::default(),
        namespace_labels,
        namespace_object,
        request_resource: None,
    };
    set.background
        .evaluation(data)
        .validate(&Prepared::new(req))
        .iter()
        .map(|r| report::result_entry(r, &PolicyMeta::of(&set.engine, &r.policy), now))
        .collect()
}

/// The resource a watched object is (its kind from the watch).
fn owner_of(ar: &ApiResource, seen: &Seen) -> Option<Owner> {
    let owner = Owner {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
        namespace: seen.namespace().to_string(),
        name: seen.name().to_string(),
        uid: seen.uid().to_string(),
    };
    (!owner.name.is_empty() && !owner.uid.is_empty()).then_some(owner)
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// See the module docs.
pub struct BackgroundScan {
    client: kube::Client,
    policies: watch::Receiver<Arc<PolicySet>>,
    config: watch::Receiver<Arc<KyvernoConfig>>,
    hub: Arc<WatchHub>,
    cache: Arc<Cache>,
    index: Arc<ReportIndex>,
    breaker: Arc<Breaker>,
    metrics: Arc<Metrics>,
    settings: ScanSettings,
    synced: watch::Sender<bool>,
}

impl BackgroundScan {
    /// A scan; starts nothing. The kinds it scans are watched through
    /// `hub` (shared with admission: one watch per kind), their objects
    /// read from its cache.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        policies: watch::Receiver<Arc<PolicySet>>,
        config: watch::Receiver<Arc<KyvernoConfig>>,
        hub: Arc<WatchHub>,
        index: Arc<ReportIndex>,
        breaker: Arc<Breaker>,
        metrics: Arc<Metrics>,
        settings: ScanSettings,
    ) -> BackgroundScan {
        BackgroundScan {
            client,
            policies,
            config,
            cache: hub.cache(),
            hub,
            index,
            breaker,
            metrics,
            settings,
            synced: watch::Sender::new(false),
        }
    }

    /// True once the policies were read and every watched kind listed.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Scans until `token` is cancelled; returns after every task it
    /// started has ended.
    pub async fn run(mut self, token: CancellationToken) -> Result<(), ScopeError> {
        let scope = Scope::with_parent_token(&token);
        let queue: Arc<WorkQueue<Work>> = Arc::new(WorkQueue::new());
        let this = Arc::new(Shared {
            client: self.client.clone(),
            policies: self.policies.clone(),
            config: self.config.clone(),
            cache: self.cache.clone(),
            index: self.index.clone(),
            breaker: self.breaker.clone(),
            metrics: self.metrics.clone(),
            queue: queue.clone(),
            hub: self.hub.clone(),
            images: self.settings.images.clone(),
        });
        let worker_set = Arc::new(Running::start(&self.metrics.worker_sets));
        for n in 0..self.settings.workers.max(1) {
            let this = this.clone();
            let token = scope.token().clone();
            let worker_set = worker_set.clone();
            scope.spawn(format!("scan worker {n}"), async move {
                let _set = worker_set;
                while let Some(work) = this.queue.next(&token).await {
                    this.metrics.scan_queue_depth.set(this.queue.len() as i64);
                    // Boxed: one object's evaluation (its registry
                    // lookups included) is a large future, kept off the
                    // worker's stack.
                    match Box::pin(this.process(&work, &token)).await {
                        Ok(()) => this.queue.done(&work),
                        Err(WriteError::Cancelled) => break,
                        Err(e) => {
                            this.metrics.api_errors.inc();
                            let delay = this.queue.retry(&work);
                            tracing::debug!("scan of {work:?}: {e}; retry in {delay:?}");
                        }
                    }
                }
                Ok::<(), std::convert::Infallible>(())
            });
        }
        drop(worker_set);
        {
            let this = this.clone();
            let token = scope.token().clone();
            let interval = self.settings.interval;
            scope.spawn("periodic rescan", async move {
                Every::new(interval, || {
                    this.enqueue_all();
                    std::future::ready(())
                })
                .immediate(false)
                .run(token)
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        let mut watchers: WatcherSet<KindKey> = WatcherSet::new();
        // The kinds watched now, for replacing a watcher that ended.
        let mut kinds_now: HashMap<KindKey, (ApiResource, bool)> = HashMap::new();
        let mut catalog: Option<Catalog> = None;
        let mut noted: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut last_versions: Option<Vec<(String, String)>> = None;
        let mut last_config = self.config.borrow().clone();
        let mut policies = self.policies.clone();
        let mut config = self.config.clone();
        policies.mark_changed();
        // A source whose sender is gone publishes no more changes: its last
        // snapshot stays in force (the scan goes on with it, it does not
        // end unnoticed with nothing said).
        let (mut policies_open, mut config_open) = (true, true);
        let mut sync_check = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                r = policies.changed(), if policies_open => {
                    if r.is_err() {
                        policies_open = false;
                        tracing::debug!("the policy source is gone; scanning with its last policy set");
                    }
                    let set = policies.borrow_and_update().clone();
                    if set.generation == 0 {
                        continue;
                    }
                    let kinds = match self.kinds_for(&set, &mut catalog, &mut noted, &token).await {
                        Some(k) => k,
                        None => continue,
                    };
                    let desired: HashMap<KindKey, (ApiResource, bool)> =
                        kinds.into_iter().map(|(ar, ns)| (kind_key(&ar), (ar, ns))).collect();
                    // Stop the watchers of kinds no policy matches any more
                    // (cancelled and joined; the hub drops a kind's store
                    // when nobody else subscribes to it).
                    watchers.retain(|k| desired.contains_key(k), |_| {}).await;
                    for (k, (ar, namespaced)) in &desired {
                        let (ar, namespaced) = (ar.clone(), *namespaced);
                        watchers.start(k.clone(), |ended| Some(self.start_watcher(&scope, &this, ar, namespaced, ended)));
                    }
                    kinds_now = desired;
                    if last_versions.as_ref() != Some(&set.background_versions) {
                        last_versions = Some(set.background_versions.clone());
                        this.enqueue_all();
                    }
                }
                r = config.changed(), if config_open => {
                    if r.is_err() {
                        config_open = false;
                        tracing::debug!("the configuration source is gone; scanning with its last configuration");
                        continue;
                    }
                    let c = config.borrow_and_update().clone();
                    if *c != *last_config {
                        last_config = c;
                        this.enqueue_all();
                    }
                }
                (k, id) = watchers.ended() => {
                    // A watcher ended on its own: replace it, but only if the
                    // set still holds that same watcher (house rule 8).
                    if !token.is_cancelled()
                        && watchers.stop_if_current(&k, id).await
                        && let Some((ar, namespaced)) = kinds_now.get(&k).cloned()
                    {
                        watchers.start(k, |ended| Some(self.start_watcher(&scope, &this, ar, namespaced, ended)));
                    }
                }
                _ = sync_check.tick() => {
                    let ready = self.policies.borrow().generation > 0
                        && !watchers.is_empty()
                        && watchers.keys().all(|k| self.cache.get_store(k).is_some_and(|s| s.is_synced()));
                    if ready && !*self.synced.borrow() {
                        self.synced.send_replace(true);
                    }
                }
            }
        }
        watchers.shutdown().await;
        drop(this);
        scope.shutdown().await
    }

    /// A watcher of one kind: its subscription to the hub, turning the
    /// kind's changes into scan work until cancelled.
    fn start_watcher(
        &mut self,
        scope: &Scope,
        this: &Arc<Shared>,
        ar: ApiResource,
        namespaced: bool,
        ended: Ended<KindKey>,
    ) -> Scope {
        let child = scope.child();
        let mut subscription = self.hub.subscribe(&ar, namespaced, true);
        let key = kind_key(&ar);
        let this = this.clone();
        let token = child.token().clone();
        child.spawn(format!("scan {}", ar.plural), async move {
            while let Some(change) = subscription.next_until(&token).await {
                match change {
                    Change::Applied(v) => this.queue.add(Work::Object(
                        key.clone(),
                        v.namespace().to_string(),
                        v.name().to_string(),
                    )),
                    Change::Deleted(v) => {
                        if let Some(owner) = owner_of(&ar, &v) {
                            this.queue.add(Work::Gone(owner));
                        }
                    }
                    Change::Listed { removed } => {
                        for v in removed {
                            if let Some(owner) = owner_of(&ar, &v) {
                                this.queue.add(Work::Gone(owner));
                            }
                        }
                    }
                }
            }
            drop(subscription);
            ended.send();
            Ok::<(), std::convert::Infallible>(())
        });
        child
    }

    /// The kinds to watch for a policy set: what its background policies
    /// match (resolved by discovery, again when a kind is not found) and
    /// Namespaces (for namespace selectors).
    async fn kinds_for(
        &self,
        set: &PolicySet,
        catalog: &mut Option<Catalog>,
        noted: &mut std::collections::HashSet<String>,
        token: &CancellationToken,
    ) -> Option<Vec<(ApiResource, bool)>> {
        for attempt in 0..2 {
            if catalog.is_none() || attempt == 1 {
                let loader = Loader::new(self.client.clone(), LoadOptions::default()).ok()?;
                match loader.discover(token).await {
                    Ok(c) => *catalog = Some(c),
                    Err(e) => {
                        self.metrics.api_errors.inc();
                        tracing::warn!("discovery failed: {e}");
                        if catalog.is_none() {
                            return None;
                        }
                    }
                }
            }
            let c = catalog.as_ref()?;
            let (kinds, not_served) = select_kinds(&set.background, c);
            if not_served.is_empty() || attempt == 1 {
                for k in not_served {
                    if noted.insert(k.clone()) {
                        tracing::info!("{k} is not served by the cluster");
                    }
                }
                let mut out: Vec<(ApiResource, bool)> = kinds
                    .iter()
                    .map(|k| {
                        (
                            api_resource(&k.group, &k.version, &k.kind, &k.plural),
                            k.namespaced,
                        )
                    })
                    .collect();
                if !out
                    .iter()
                    .any(|(ar, _)| ar.kind == "Namespace" && ar.group.is_empty())
                {
                    out.push((api_resource("", "v1", "Namespace", "namespaces"), false));
                }
                return Some(out);
            }
        }
        None
    }
}

/// What the workers share.
struct Shared {
    client: kube::Client,
    policies: watch::Receiver<Arc<PolicySet>>,
    config: watch::Receiver<Arc<KyvernoConfig>>,
    cache: Arc<Cache>,
    index: Arc<ReportIndex>,
    breaker: Arc<Breaker>,
    metrics: Arc<Metrics>,
    queue: Arc<WorkQueue<Work>>,
    /// The cluster view: the watched kinds, what evaluations read beyond
    /// them, the global context.
    hub: Arc<WatchHub>,
    /// Image registries (see [`ScanSettings::images`]).
    images: Option<Arc<leash_images::Registry>>,
}

impl Shared {
    fn enqueue_all(&self) {
        for store in self.cache.stores() {
            let k = kind_key(&store.resource);
            for (ns, name) in store.keys() {
                self.queue.add(Work::Object(k.clone(), ns, name));
            }
        }
    }

    async fn process(&self, work: &Work, token: &CancellationToken) -> Result<(), WriteError> {
        let (kind, ns, name) = match work {
            Work::Gone(owner) => {
                self.index.resource_deleted(owner.clone());
                return Ok(());
            }
            Work::Object(k, ns, name) => (k, ns, name),
        };
        let Some(object) = self.cache.get_store(kind).and_then(|s| s.get(ns, name)) else {
            return Ok(()); // deleted since: its Gone work handles it
        };
        let Some(owner) = Owner::of(&object) else {
            return Ok(());
        };
        let set = self.policies.borrow().clone();
        let config = self.config.borrow().clone();
        let mut evaluating = Duration::ZERO;
        let mut data = self.hub.data();
        if let Some(images) = &self.images {
            data = data.with_images(images.clone());
        }
        // A configMap, apiCall or CEL lookup of data no watch holds, and an
        // image's data, is read between evaluations (the engine never
        // waits on the network).
        let settled = data
            .settle(&self.client, token, |data| {
                let start = Instant::now();
                let results =
                    evaluate_object_with(&set, &config, &self.cache, data, &object, now_seconds());
                evaluating += start.elapsed();
                results
            })
            .await;
        let Some(results) = settled else {
            return Err(WriteError::Cancelled);
        };
        self.metrics
            .evaluation_seconds
            .observe(evaluating.as_secs_f64());
        self.metrics.resources_scanned.inc();
        if results.is_empty() && !self.index.has_reports(ns, &owner.uid) {
            return Ok(()); // nothing matches and no report to clear
        }
        let eph = report::ephemeral_report(
            &owner,
            &owner.uid,
            ReportSource::BackgroundScan,
            &set.background_versions,
            results,
        );
        // Replacing our own pending report takes no new room.
        let new_room = !self.index.has_ephemeral(&owner.uid, &owner.uid);
        if new_room && !self.breaker.acquire(token).await {
            return Err(WriteError::Cancelled);
        }
        match writer::put_keeping_body(&self.client, eph, token).await {
            Ok((written, body)) => {
                self.index.wrote(&written, body);
                self.metrics.ephemeral_reports_written.inc();
                Ok(())
            }
            Err(e) => {
                if new_room {
                    self.breaker.release(1);
                }
                Err(e)
            }
        }
    }
}

impl std::fmt::Debug for BackgroundScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundScan").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}
