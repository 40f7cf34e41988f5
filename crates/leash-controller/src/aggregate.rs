//! The aggregate report controller: ephemeral reports (from the background
//! scan and the admission webhook) folded into one `PolicyReport` /
//! `ClusterPolicyReport` per resource, then deleted; and the periodic
//! cleanup of results whose policy or rule is gone and of reports whose
//! resource is gone.
//!
//! Seed 000 (Kyverno #17035): Kyverno's `NewController` started an endless
//! cleanup goroutine, one more per leader-election change. Here
//! [`Aggregator::new`] only stores its inputs; the cleanup is an [`Every`]
//! inside [`Aggregator::run`], in the run's scope, so it ends when the run's
//! token is cancelled and the run has joined it before returning.
//!
//! # Invariants
//! 1. [`Aggregator::new`] starts nothing. [`Aggregator::run`] spawns, in a
//!    child scope of its token, four report watches, `workers` aggregate
//!    workers and the cleanup; after the token is cancelled it shuts that
//!    scope down (cancel, then join all of them) before it returns (seed
//!    000 above). A [`ReportIndex`] is made for one leadership term
//!    ([`crate::Reports::new`]); nothing of it survives into the next.
//! 2. The [`ReportIndex`] is shared by the scan's workers, this run's
//!    watches and workers: three `std::sync::Mutex` maps (`by_uid`,
//!    `deleted`, `written`), four [`KindStore`]s and a [`WorkQueue`]. Each
//!    mutex is taken for a lookup, insert or removal and released before
//!    the next statement or the method's return; no guard lives across an
//!    await (house rule 5): `process` takes its `deleted` entry out, then
//!    awaits, and puts it back under a new guard if the delete failed.
//! 3. An ephemeral report's breaker room is given back at most once, by
//!    whichever of its watch (a delete event or a re-list) and a deleting
//!    worker removes it from `by_uid`: the removal, under that lock, says
//!    whether it was still there. When both ephemeral stores are synced, a
//!    list resets the count to the ephemeral reports that exist
//!    ([`Breaker::set_used`]).
//! 4. A written body is used for a merge only if it is the version the
//!    watch saw or newer, and is dropped when the report's deletion is seen
//!    (a body at or below the deleted version).
//! 5. Every API call of a worker or the cleanup is raced against the token
//!    ([`writer`]); a worker stops at `WriteError::Cancelled` or when the
//!    queue returns `None`. Work is keyed by resource `(namespace, uid)`, so
//!    the queue folds a burst of one resource's ephemeral reports into one
//!    merge and keeps two workers off one resource (with the gap stated in
//!    [`WorkQueue`]'s invariants).
//! 6. The policy set is read by cloning the `Arc` out of the `watch`
//!    channel (`borrow().clone()`); no channel guard is kept.
//!
//! # Lock order
//! No two locks are held together: `track` releases `written` before it
//! takes `by_uid`; the index's mutexes, the stores' locks and the queue's
//! lock are each taken alone.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leash_report::{self as report, Owner};
use leash_runtime::{Every, Scope, ScopeError};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cache::{Cache, KindStore};
use crate::metrics::{Metrics, Running};
use crate::queue::WorkQueue;
use crate::sources::PolicySet;
use crate::watch::{Change, Seen, WatchScope, watch_into};
use crate::writer::{self, Breaker, WriteError, Written};

/// The report kind for a resource's namespace.
fn report_kind(namespace: &str) -> &'static str {
    if namespace.is_empty() {
        "ClusterPolicyReport"
    } else {
        "PolicyReport"
    }
}

/// `(namespace, uid)`: one resource's reports.
type UidKey = (String, String);
/// `(kind, namespace, name)` of an ephemeral report.
type EphKey = (String, String, String);

/// What the scan and the aggregate controller share: the reports that
/// exist (mirrored by watches) and the resources deleted whose reports must
/// go. Built empty; filled by [`Aggregator::run`].
#[derive(Debug)]
pub struct ReportIndex {
    ephemeral: Arc<KindStore>,
    cluster_ephemeral: Arc<KindStore>,
    reports: Arc<KindStore>,
    cluster_reports: Arc<KindStore>,
    by_uid: Mutex<HashMap<String, BTreeSet<EphKey>>>,
    deleted: Mutex<HashMap<String, Owner>>,
    written: Mutex<HashMap<EphKey, WrittenBody>>,
    queue: WorkQueue<UidKey>,
}

/// An ephemeral report this process wrote: the body it sent and the
/// version the server stored it as. The watch of ephemeral reports reads
/// only their metadata; a merge takes the body from here when the version
/// it merges is this one, and reads it from the API server otherwise (a
/// report another process wrote, or one written again since).
#[derive(Debug)]
struct WrittenBody {
    rv: u64,
    resource_version: String,
    created: Value,
    json: Arc<[u8]>,
}

impl Default for ReportIndex {
    fn default() -> Self {
        ReportIndex::new()
    }
}

impl ReportIndex {
    /// An empty index.
    pub fn new() -> ReportIndex {
        ReportIndex {
            ephemeral: Arc::new(KindStore::new(writer::ephemeral_resource(), true)),
            cluster_ephemeral: Arc::new(KindStore::new(
                writer::cluster_ephemeral_resource(),
                false,
            )),
            reports: Arc::new(KindStore::new(writer::report_resource(), true)),
            cluster_reports: Arc::new(KindStore::new(writer::cluster_report_resource(), false)),
            by_uid: Mutex::new(HashMap::new()),
            deleted: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            queue: WorkQueue::new(),
        }
    }

    fn report_store(&self, namespace: &str) -> &Arc<KindStore> {
        if namespace.is_empty() {
            &self.cluster_reports
        } else {
            &self.reports
        }
    }

    fn eph_store(&self, kind: &str) -> &Arc<KindStore> {
        if kind == "ClusterEphemeralReport" {
            &self.cluster_ephemeral
        } else {
            &self.ephemeral
        }
    }

    /// Whether a resource has a policy report or pending ephemeral reports.
    pub fn has_reports(&self, namespace: &str, uid: &str) -> bool {
        self.report_store(namespace).contains(namespace, uid) || self.has_ephemeral(uid, uid)
    }

    /// Whether an ephemeral report of that name exists for the resource.
    pub fn has_ephemeral(&self, uid: &str, name: &str) -> bool {
        self.by_uid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .is_some_and(|s| s.iter().any(|(_, _, n)| n == name))
    }

    /// The resource is gone: its reports go too.
    pub fn resource_deleted(&self, owner: Owner) {
        let key = (owner.namespace.clone(), owner.uid.clone());
        self.deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(owner.uid.clone(), owner);
        self.queue.add(key);
    }

    /// Ephemeral reports known now.
    pub fn ephemeral_count(&self) -> usize {
        self.ephemeral.len() + self.cluster_ephemeral.len()
    }

    /// Records an ephemeral report (of `kind`) as present or gone; the key
    /// of its resource, and whether the index changed (so that exactly one
    /// of the watch and the deleting worker gives the breaker its room back).
    fn track(&self, kind: &str, eph: &Seen, present: bool) -> Option<(UidKey, bool)> {
        let uid = eph.label(report::LABEL_RESOURCE_UID)?;
        let key = (
            kind.to_string(),
            eph.namespace().to_string(),
            eph.name().to_string(),
        );
        if !present {
            let rv = eph
                .meta
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok());
            self.forget_written(&key, rv);
        }
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        let set = by_uid.entry(uid.to_string()).or_default();
        let changed = if present {
            set.insert(key.clone())
        } else {
            let was = set.remove(&key);
            if set.is_empty() {
                by_uid.remove(uid);
            }
            was
        };
        Some(((key.1, uid.to_string()), changed))
    }

    /// An ephemeral report this process wrote (`body` as sent, `written` as
    /// the server answered): its merge need not read it back.
    pub fn wrote(&self, written: &Written, body: Arc<[u8]>) {
        let m = &written.metadata;
        let Some(resource_version) = m.resource_version.clone() else {
            return;
        };
        let Ok(rv) = resource_version.parse::<u64>() else {
            return;
        };
        let key = (
            written.kind.clone(),
            m.namespace.clone().unwrap_or_default(),
            m.name.clone().unwrap_or_default(),
        );
        let created = serde_json::to_value(&m.creation_timestamp).unwrap_or(Value::Null);
        let mut map = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(&key).is_none_or(|old| old.rv < rv) {
            map.insert(
                key,
                WrittenBody {
                    rv,
                    resource_version,
                    created,
                    json: body,
                },
            );
        }
    }

    /// Drops a written body at or below version `upto` (all if `None`): its
    /// report was deleted.
    fn forget_written(&self, key: &EphKey, upto: Option<u64>) {
        let mut map = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if map
            .get(key)
            .is_some_and(|w| upto.is_none_or(|upto| w.rv <= upto))
        {
            map.remove(key);
        }
    }

    /// The body this process wrote for an ephemeral report, if it is the
    /// version `seen` (by the watch) or newer, with the metadata the server set.
    fn written_body(&self, key: &EphKey, seen: u64) -> Option<Value> {
        let (json, resource_version, created) = {
            let map = self.written.lock().unwrap_or_else(|e| e.into_inner());
            let w = map.get(key).filter(|w| w.rv >= seen)?;
            (
                w.json.clone(),
                w.resource_version.clone(),
                w.created.clone(),
            )
        };
        let mut v: Value = serde_json::from_slice(&json).ok()?;
        let meta = v.get_mut("metadata")?.as_object_mut()?;
        meta.insert("resourceVersion".into(), Value::String(resource_version));
        if !created.is_null() {
            meta.insert("creationTimestamp".into(), created);
        }
        Some(v)
    }

    /// How many written bodies are held (for tests: none outlives its report).
    pub fn written_bodies(&self) -> usize {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn untrack(&self, uid: &str, key: &EphKey) -> bool {
        let mut by_uid = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        let Some(set) = by_uid.get_mut(uid) else {
            return false;
        };
        let was = set.remove(key);
        if set.is_empty() {
            by_uid.remove(uid);
        }
        was
    }

    /// The ephemeral reports of a resource, with the version the watch
    /// last saw of each.
    fn ephemerals_of(&self, uid: &str) -> Vec<(EphKey, u64)> {
        let keys: Vec<EphKey> = self
            .by_uid
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        keys.into_iter()
            .filter_map(|k| {
                let rv = self
                    .eph_store(&k.0)
                    .get_stored(&k.1, &k.2)?
                    .resource_version()
                    .unwrap_or(0);
                Some((k, rv))
            })
            .collect()
    }
}

/// How the aggregate controller works.
#[derive(Debug, Clone)]
pub struct AggregateSettings {
    /// Concurrent report writers.
    pub workers: usize,
    /// How often results of deleted policies and reports of deleted
    /// resources are removed.
    pub cleanup_interval: Duration,
}

impl Default for AggregateSettings {
    fn default() -> Self {
        AggregateSettings {
            workers: 4,
            cleanup_interval: Duration::from_secs(60),
        }
    }
}

/// See the module docs.
pub struct Aggregator {
    client: kube::Client,
    policies: watch::Receiver<Arc<PolicySet>>,
    live: Arc<Cache>,
    index: Arc<ReportIndex>,
    breaker: Arc<Breaker>,
    metrics: Arc<Metrics>,
    settings: AggregateSettings,
}

impl Aggregator {
    /// A controller; starts nothing (seed 000: `NewController`).
    pub fn new(
        client: kube::Client,
        policies: watch::Receiver<Arc<PolicySet>>,
        live: Arc<Cache>,
        index: Arc<ReportIndex>,
        breaker: Arc<Breaker>,
        metrics: Arc<Metrics>,
        settings: AggregateSettings,
    ) -> Aggregator {
        Aggregator {
            client,
            policies,
            live,
            index,
            breaker,
            metrics,
            settings,
        }
    }

    /// Watches the reports, merges, and cleans up until `token` is
    /// cancelled; returns after every task it started has ended.
    pub async fn run(self, token: CancellationToken) -> Result<(), ScopeError> {
        let scope = Scope::with_parent_token(&token);
        let this = Arc::new(self);
        for store in [
            this.index.ephemeral.clone(),
            this.index.cluster_ephemeral.clone(),
            this.index.reports.clone(),
            this.index.cluster_reports.clone(),
        ] {
            let this = this.clone();
            let token = scope.token().clone();
            scope.spawn(format!("watch {}", store.resource.plural), async move {
                let is_eph = store.resource.group == "reports.kyverno.io";
                let resource = store.resource.clone();
                // Reports are known by their identity only (10,000 policy
                // reports of 17 results are ~150 MB of JSON): their watches
                // read only metadata. A merge reads the policy report it
                // changes, and the ephemeral reports' bodies from what this
                // process wrote or from the API server; the cleanup pages
                // through the policy reports.
                let scope = WatchScope {
                    keep: (!is_eph).then_some(report_identity as fn(&Value) -> Value),
                    metadata_only: true,
                    ..WatchScope::default()
                };
                let kind = resource.kind.clone();
                watch_into(
                    this.client.clone(),
                    resource,
                    scope,
                    store,
                    token,
                    |change| {
                        if !is_eph {
                            return;
                        }
                        match change {
                            Change::Applied(v) => {
                                if let Some((k, _)) = this.index.track(&kind, &v, true) {
                                    this.index.queue.add(k);
                                }
                            }
                            Change::Deleted(v) => {
                                // Gone before our delete returned (or deleted by
                                // someone else): the room comes back here.
                                if let Some((_, true)) = this.index.track(&kind, &v, false) {
                                    this.breaker.release(1);
                                }
                            }
                            Change::Listed { removed } => {
                                for v in removed {
                                    if let Some((_, true)) = this.index.track(&kind, &v, false) {
                                        this.breaker.release(1);
                                    }
                                }
                                if this.index.ephemeral.is_synced()
                                    && this.index.cluster_ephemeral.is_synced()
                                {
                                    this.breaker.set_used(this.index.ephemeral_count());
                                }
                            }
                        }
                    },
                    |_| {
                        this.metrics.api_errors.inc();
                    },
                )
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        for n in 0..this.settings.workers.max(1) {
            let this = this.clone();
            let token = scope.token().clone();
            scope.spawn(format!("aggregate worker {n}"), async move {
                while let Some(key) = this.index.queue.next(&token).await {
                    this.metrics
                        .aggregate_queue_depth
                        .set(this.index.queue.len() as i64);
                    match this.process(&key, &token).await {
                        Ok(()) => this.index.queue.done(&key),
                        Err(WriteError::Cancelled) => break,
                        Err(e) => {
                            this.metrics.api_errors.inc();
                            let delay = this.index.queue.retry(&key);
                            tracing::debug!(
                                "report of {}/{}: {e}; retry in {delay:?}",
                                key.0,
                                key.1
                            );
                        }
                    }
                }
                Ok::<(), std::convert::Infallible>(())
            });
        }
        {
            let this = this.clone();
            let token = scope.token().clone();
            let interval = this.settings.cleanup_interval;
            scope.spawn("report cleanup", async move {
                let _running = Running::start(&this.metrics.cleanup_loops);
                Every::new(interval, || {
                    let this = this.clone();
                    let token = token.clone();
                    async move { this.cleanup(&token).await }
                })
                .jitter(0.1)
                .immediate(false)
                .run(token.clone())
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        token.cancelled().await;
        scope.shutdown().await
    }

    /// Folds a resource's ephemeral reports into its policy report.
    async fn process(&self, key: &UidKey, token: &CancellationToken) -> Result<(), WriteError> {
        let (namespace, uid) = key;
        let gone = self
            .index
            .deleted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        if let Some(owner) = gone {
            if let Err(e) = self.delete_all(&owner, token).await {
                self.index
                    .deleted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(uid.clone(), owner);
                return Err(e);
            }
            return Ok(());
        }
        let mut ephs = Vec::new();
        for (k, seen) in self.index.ephemerals_of(uid) {
            let body = match self.index.written_body(&k, seen) {
                Some(v) => Some(v),
                None => writer::get(&self.client, &k.0, &k.1, &k.2, token).await?,
            };
            // Gone since (None): its watch event untracks it.
            if let Some(v) = body {
                ephs.push((k, v));
            }
        }
        if ephs.is_empty() {
            return Ok(());
        }
        ephs.sort_by_key(|(_, v)| {
            (
                v["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                v["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0),
            )
        });
        let Some(owner) = owner_of_ephemeral(&ephs[ephs.len() - 1].1) else {
            return Ok(());
        };
        let existing = if self.index.report_store(namespace).contains(namespace, uid) {
            writer::get(&self.client, report_kind(namespace), namespace, uid, token)
                .await?
                .map(Arc::new)
        } else {
            None
        };
        let mut deletes = Vec::with_capacity(ephs.len());
        let mut docs = Vec::with_capacity(ephs.len());
        for (k, v) in ephs {
            let rv = v["metadata"]["resourceVersion"]
                .as_str()
                .map(str::to_string);
            deletes.push((k, rv));
            docs.push(v);
        }
        let merged = report::merge_owned(&owner, existing.as_deref().cloned(), docs);
        // Results of policies or rules deleted since go now, not at the next cleanup.
        let set = self.policies.borrow().clone();
        let merged = match set.generation {
            0 => merged,
            _ => report::prune(&merged, |p, r| set.has_rule(p, r)).unwrap_or(merged),
        };
        if report::report_results(&merged).is_empty() {
            if existing.is_some() {
                writer::delete(
                    &self.client,
                    report_kind(namespace),
                    namespace,
                    uid,
                    None,
                    token,
                )
                .await?;
                self.index.report_store(namespace).remove(namespace, uid);
                self.metrics.policy_reports_deleted.inc();
            }
        } else if existing
            .as_deref()
            .is_none_or(|e| !report::same_results(e, &merged))
        {
            let stored = writer::put(&self.client, merged, token).await?;
            self.index.report_store(namespace).put_if_newer(
                namespace,
                uid,
                &report_identity(&stored.identity()),
            );
            self.metrics.policy_reports_written.inc();
        }
        for (k, rv) in deletes {
            let deleted = writer::delete(&self.client, &k.0, &k.1, &k.2, rv.clone(), token).await?;
            if deleted {
                self.index
                    .forget_written(&k, rv.and_then(|v| v.parse().ok()));
            }
            if deleted && self.index.untrack(uid, &k) {
                self.index.eph_store(&k.0).remove(&k.1, &k.2);
                self.breaker.release(1);
            }
        }
        Ok(())
    }

    async fn delete_all(&self, owner: &Owner, token: &CancellationToken) -> Result<(), WriteError> {
        let ns = &owner.namespace;
        if self.index.report_store(ns).contains(ns, &owner.uid) {
            writer::delete(&self.client, report_kind(ns), ns, &owner.uid, None, token).await?;
            self.index.report_store(ns).remove(ns, &owner.uid);
            self.metrics.policy_reports_deleted.inc();
        }
        for (k, _) in self.index.ephemerals_of(&owner.uid) {
            writer::delete(&self.client, &k.0, &k.1, &k.2, None, token).await?;
            self.index.forget_written(&k, None);
            if self.index.untrack(&owner.uid, &k) {
                self.index.eph_store(&k.0).remove(&k.1, &k.2);
                self.breaker.release(1);
            }
        }
        Ok(())
    }

    /// One cleanup pass: results of policies or rules that no longer
    /// exist, reports of resources that no longer exist.
    async fn cleanup(&self, token: &CancellationToken) {
        let set = self.policies.borrow().clone();
        if set.generation == 0 {
            return; // policies not read yet: nothing can be judged stale
        }
        for kind in ["PolicyReport", "ClusterPolicyReport"] {
            // Page by page: a page is judged before the next is read.
            let mut next: Option<String> = None;
            loop {
                let (page, more) =
                    match writer::list_page(&self.client, kind, next.as_deref(), token).await {
                        Ok(p) => p,
                        Err(e) => {
                            // Cancelled, or an expired continue token: the
                            // next pass starts over.
                            self.metrics.api_errors.inc();
                            tracing::debug!("cleanup: listing {kind}s: {e}");
                            return;
                        }
                    };
                for rep in page {
                    if token.is_cancelled() {
                        return;
                    }
                    self.clean_report(&set, rep, token).await;
                }
                match more {
                    Some(c) => next = Some(c),
                    None => break,
                }
            }
        }
    }

    /// The cleanup of one policy report: deleted when its resource is gone
    /// or it has no result left; rewritten without the results of removed
    /// policies and rules.
    async fn clean_report(&self, set: &PolicySet, rep: Value, token: &CancellationToken) {
        let Some(owner) = report::report_owner(&rep) else {
            return;
        };
        let key = (owner.api_version.clone(), owner.kind.clone());
        let resource_gone = self.live.get_store(&key).is_some_and(|s| {
            s.is_synced()
                && s.get(&owner.namespace, &owner.name)
                    .is_none_or(|o| o["metadata"]["uid"].as_str() != Some(&owner.uid))
        });
        let result = if resource_gone {
            self.index.resource_deleted(owner);
            return;
        } else if let Some(pruned) = report::prune(&rep, |p, r| set.has_rule(p, r)) {
            if report::report_results(&pruned).is_empty() {
                let ns = &owner.namespace;
                let r = writer::delete(&self.client, report_kind(ns), ns, &owner.uid, None, token)
                    .await;
                if r.is_ok() {
                    self.index.report_store(ns).remove(ns, &owner.uid);
                    self.metrics.policy_reports_deleted.inc();
                }
                r.map(|_| ())
            } else {
                let ns = owner.namespace.clone();
                writer::put(&self.client, pruned, token)
                    .await
                    .map(|stored| {
                        self.index.report_store(&ns).put_if_newer(
                            &ns,
                            &owner.uid,
                            &report_identity(&stored.identity()),
                        );
                        self.metrics.policy_reports_written.inc();
                    })
            }
        } else {
            Ok(())
        };
        if let Err(e) = result {
            // A conflict or an API error: the next pass tries again.
            self.metrics.api_errors.inc();
            tracing::debug!("cleanup of the report of {}: {e}", owner.display());
        }
    }
}

/// The resource an ephemeral report is about (`spec.owner` plus the
/// report's namespace).
fn owner_of_ephemeral(eph: &Value) -> Option<Owner> {
    let o = &eph["spec"]["owner"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let owner = Owner {
        api_version: s(&o["apiVersion"]),
        kind: s(&o["kind"]),
        namespace: s(&eph["metadata"]["namespace"]),
        name: s(&o["name"]),
        uid: s(&o["uid"]),
    };
    (!owner.uid.is_empty()).then_some(owner)
}

impl std::fmt::Debug for Aggregator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregator").finish_non_exhaustive()
    }
}

/// What the index keeps of a policy report: its identity and version (what
/// its metadata-only watch reads, and what is kept of a report written).
fn report_identity(rep: &Value) -> Value {
    let m = &rep["metadata"];
    let mut meta = serde_json::Map::new();
    for k in ["name", "namespace", "resourceVersion", "uid"] {
        if let Some(v) = m.get(k) {
            meta.insert(k.into(), v.clone());
        }
    }
    serde_json::json!({
        "apiVersion": rep["apiVersion"],
        "kind": rep["kind"],
        "metadata": meta,
    })
}
