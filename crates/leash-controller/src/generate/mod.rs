//! The `background` component of `leash serve`: generate rules, their
//! UpdateRequests, and the dynamic watch manager; and `mutate.targets`
//! rules (mutate existing), from UpdateRequests of type `mutate`
//! ([`mutate`]).
//!
//! Seed 000 places four defects here; each is impossible by construction:
//! - watchers started with `context.Background()` (PR #16087): every
//!   watcher is a child scope of the component's scope, so cancelling the
//!   component ends them all, and `run` returns only after they have;
//! - a watcher that exited stayed in `dynamicWatchers`, so it was never
//!   replaced: an ended watcher reports `(kind, id)` and is replaced only if
//!   the set still holds that same watcher (house rule 8; `crate::watchers`);
//! - `GetDownstreams` read maps without the lock: readers get an immutable
//!   [`Registry`] snapshot ([`registry`]);
//! - UpdateRequests created in a fire-and-forget goroutine: admission
//!   creates the UpdateRequest before it answers ([`create_update_request`]),
//!   and the trigger itself is the durable record: every trigger event (and
//!   every trigger listed at start) of a generate rule is reconciled, so a
//!   lost UpdateRequest still gets its downstream.
//!
//! Reconciling is level-based and idempotent: the downstreams a rule wants
//! for the trigger's current state are computed by the engine and made to
//! exist; nothing is done twice because a second pass finds them present.
//!
//! # Invariants
//! 1. [`Background::new`] starts nothing. [`Background::run`] spawns, in a
//!    child scope of its token, the workers, the UpdateRequest watch and
//!    one child scope per watched kind; its own loop (one task) alone owns
//!    the watcher set and the registry's `watch::Sender`. One component is
//!    made per leadership term (`serve`'s `make`).
//! 2. Readers of the registry and of the policy set clone an `Arc` out of a
//!    `watch` channel (`borrow().clone()`) and keep no guard; the registry
//!    is published whole (`send_replace`) before the watchers change, so a
//!    watcher's events are judged against the newest one.
//! 3. `Shared` has four `std::sync::Mutex`es (`catalog`, `gone`, `stores`,
//!    `learned`), each taken for a lookup, clone, insert or removal and
//!    released before the next await (house rule 5): a discovery refresh is
//!    fetched with no lock held, then swapped in. Every API call of the
//!    component goes through `cancellable` (raced against the token,
//!    transient errors tried again in place) or, for discovery, takes the
//!    token; [`create_update_request`], called by admission, is the one
//!    exception and awaits the API server without a token.
//! 4. A watcher is stopped by shutting its scope down (cancel, then join)
//!    before its store is forgotten or a replacement is started. An ended
//!    watcher reports `(kind, id)` on an unbounded channel and is replaced
//!    only if the set still holds that id and the token is not cancelled
//!    (house rule 8); a kind no longer served is tried again after
//!    `RESTART_DELAY`, not in a loop.
//! 5. `learn` signals `relearn` with `notify_one` after releasing
//!    `learned`: the permit is stored if the loop is not waiting, so a new
//!    downstream kind is never missed; the loop then rebuilds the registry.
//! 6. Workers process nothing before the first policy set
//!    (`generation > 0`) is read, and stop when the queue returns `None`
//!    or a call fails after cancellation.
//! 7. On cancellation the loop breaks, every watcher scope is shut down,
//!    then the run's scope; `run` returns after every task it started has
//!    ended (seed: watchers on `context.Background()`, above). A closed
//!    policy channel is not an end: the last set stays in force.
//!
//! # Lock order
//! No two of `Shared`'s mutexes are ever held together, nor one of them
//! with the queue's lock or a store's lock: each guard is dropped at the
//! end of its statement or block, before the next lock is taken.

pub mod mutate;
pub mod registry;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::core::ApiResource;
use leash_loader::{Catalog, LoadOptions, Loader};
use leash_policy::{
    Bindings, EvalRequest, GenerateTarget, Generated, Policy, Prepared, Status,
    gpol::GeneratingPolicy,
};
use leash_runtime::{Scope, ScopeError};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::cache::KindStore;
use crate::lookups::{Lookup, ScanData};
use crate::metrics::Metrics;
use crate::object::{Object, api_resource};
use crate::queue::WorkQueue;
use crate::sources::PolicySet;
use crate::watch::{Change, WatchScope, watch_into};
use crate::watchers::{Ended, WatcherSet};

pub use registry::{Gvk, Registry, RuleKey};

/// `kyverno.io/v2` `UpdateRequest`.
pub fn update_request_resource() -> ApiResource {
    api_resource("kyverno.io", "v2", "UpdateRequest", "updaterequests")
}

const LABEL_POLICY: &str = "generate.kyverno.io/policy-name";
const LABEL_POLICY_NS: &str = "generate.kyverno.io/policy-namespace";
const LABEL_RULE: &str = "generate.kyverno.io/rule-name";

/// A trigger resource, as UpdateRequests and downstream labels name it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TriggerRef {
    /// `apiVersion`
    pub api_version: String,
    /// `kind`
    pub kind: String,
    /// `metadata.namespace` ("" for cluster scope)
    pub namespace: String,
    /// `metadata.name`
    pub name: String,
    /// `metadata.uid` ("" when unknown)
    pub uid: String,
}

impl TriggerRef {
    /// The reference of an object.
    pub fn of(v: &Value) -> TriggerRef {
        let s = |p: &Value| p.as_str().unwrap_or("").to_string();
        TriggerRef {
            api_version: s(&v["apiVersion"]),
            kind: s(&v["kind"]),
            namespace: s(&v["metadata"]["namespace"]),
            name: s(&v["metadata"]["name"]),
            uid: s(&v["metadata"]["uid"]),
        }
    }

    /// The trigger a downstream's labels name, with its policy key and rule.
    pub fn from_labels(v: &Value) -> Option<(String, String, TriggerRef)> {
        let l = v["metadata"]["labels"].as_object()?;
        let get = |k: &str| l.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let policy = get(LABEL_POLICY);
        let rule = get(LABEL_RULE);
        if policy.is_empty() || rule.is_empty() {
            return None;
        }
        let key = match get(LABEL_POLICY_NS) {
            ns if ns.is_empty() => policy,
            ns => format!("{ns}/{policy}"),
        };
        let group = get("generate.kyverno.io/trigger-group");
        let version = get("generate.kyverno.io/trigger-version");
        let api_version = if group.is_empty() {
            version
        } else {
            format!("{group}/{version}")
        };
        let trigger = TriggerRef {
            api_version,
            kind: get("generate.kyverno.io/trigger-kind"),
            namespace: get("generate.kyverno.io/trigger-namespace"),
            name: get("generate.kyverno.io/trigger-name"),
            uid: get("generate.kyverno.io/trigger-uid"),
        };
        (!trigger.kind.is_empty() && !trigger.name.is_empty()).then_some((key, rule, trigger))
    }

    fn to_json(&self) -> Value {
        json!({
            "apiVersion": self.api_version, "kind": self.kind,
            "namespace": self.namespace, "name": self.name, "uid": self.uid,
        })
    }

    fn from_json(v: &Value) -> TriggerRef {
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        TriggerRef {
            api_version: s("apiVersion"),
            kind: s("kind"),
            namespace: s("namespace"),
            name: s("name"),
            uid: s("uid"),
        }
    }
}

impl std::fmt::Display for TriggerRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// `spec.requestType` of an UpdateRequest for classic generate rules.
pub const REQUEST_GENERATE: &str = "generate";

/// `spec.requestType` of an UpdateRequest for a GeneratingPolicy (Kyverno
/// 1.14's `CELGenerate`).
pub const REQUEST_CEL_GENERATE: &str = "cel-generate";

/// An UpdateRequest for one trigger and the generate rules that matched it,
/// in Kyverno 1.12's layout (`spec.ruleContext`); `request_type` is
/// [`REQUEST_GENERATE`] or [`REQUEST_CEL_GENERATE`] (whose one rule is the
/// policy's name).
pub fn update_request(
    namespace: &str,
    request_type: &str,
    policy: &str,
    rules: &[String],
    trigger: &Value,
) -> Value {
    let t = TriggerRef::of(trigger);
    let policy_name = policy.rsplit('/').next().unwrap_or(policy);
    json!({
        "apiVersion": "kyverno.io/v2",
        "kind": "UpdateRequest",
        "metadata": {
            "generateName": "ur-",
            "namespace": namespace,
            "labels": {
                LABEL_POLICY: policy_name,
                "generate.kyverno.io/trigger-kind": t.kind,
                "generate.kyverno.io/trigger-namespace": t.namespace,
                "generate.kyverno.io/trigger-uid": t.uid,
            },
        },
        "spec": {
            "requestType": request_type,
            "policy": policy,
            "rule": rules.first().cloned().unwrap_or_default(),
            "resource": t.to_json(),
            "ruleContext": rules.iter().map(|r| json!({"rule": r, "trigger": t.to_json()})).collect::<Vec<_>>(),
        },
    })
}

/// Creates an UpdateRequest (admission calls this before answering), then
/// sets its state `Pending`, as Kyverno does (the status subresource
/// ignores a status sent with the create). The request exists once the
/// create succeeded: a failed status write is logged, not an error, and
/// the background component treats a request without a state as pending.
pub async fn create_update_request(
    client: &kube::Client,
    request: &Value,
) -> Result<String, kube::Error> {
    let ns = request["metadata"]["namespace"].as_str().unwrap_or("");
    let api: Api<Object> = Api::namespaced_with(client.clone(), ns, &update_request_resource());
    let obj = Object::from_value(request.clone()).map_err(kube::Error::SerdeError)?;
    let created = api.create(&PostParams::default(), &obj).await?;
    let name = created.name().to_string();
    let mut pending = created.raw.as_ref().clone();
    pending["status"] = json!({"state": "Pending"});
    match Object::from_value(pending) {
        Ok(body) => {
            if let Err(e) = api
                .replace_status(&name, &PostParams::default(), &body)
                .await
            {
                tracing::debug!("UpdateRequest {ns}/{name}: setting state Pending: {e}");
            }
        }
        Err(e) => tracing::debug!("UpdateRequest {ns}/{name}: {e}"),
    }
    Ok(name)
}

/// Settings of the background component.
#[derive(Debug, Clone)]
pub struct BackgroundSettings {
    /// Where UpdateRequests live (Kyverno's namespace).
    pub namespace: String,
    /// Concurrent reconciles.
    pub workers: usize,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        BackgroundSettings {
            namespace: "kyverno".into(),
            workers: 4,
        }
    }
}

/// One unit of work.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Work {
    /// An UpdateRequest to process.
    Request { name: String },
    /// Reconcile one trigger for one rule.
    Trigger {
        policy: String,
        rule: String,
        trigger: TriggerRef,
    },
    /// A policy with `generateExisting` was created or changed.
    Existing { policy: String },
    /// A generating policy is gone: delete (or orphan) its downstreams.
    PolicyGone { policy: String },
    /// A policy with `mutateExistingOnPolicyUpdate` was created or changed:
    /// queue its rules for every existing trigger.
    MutateExistingPolicy { policy: String },
    /// A MutatingPolicy with `evaluation.mutateExisting` was created or
    /// changed: mutate its existing targets.
    MutateExistingCel { policy: String },
    /// Run a `mutate.targets` rule for one existing trigger.
    MutateExisting {
        policy: String,
        rule: String,
        trigger: TriggerRef,
    },
}

/// The background component; one term's worth (see [`crate::Reports`]).
pub struct Background {
    client: kube::Client,
    policies: watch::Receiver<Arc<PolicySet>>,
    metrics: Arc<Metrics>,
    hub: Arc<crate::WatchHub>,
    settings: BackgroundSettings,
    registry: watch::Sender<Arc<Registry>>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What the workers and watchers share.
struct Shared {
    client: kube::Client,
    /// Trigger and downstream kinds are watched through it (one watch per
    /// kind, shared with the scan and admission).
    hub: Arc<crate::WatchHub>,
    policies: watch::Receiver<Arc<PolicySet>>,
    registry: watch::Receiver<Arc<Registry>>,
    metrics: Arc<Metrics>,
    settings: BackgroundSettings,
    queue: WorkQueue<Work>,
    /// Discovery, refreshed when a kind is not found. Never held across an
    /// await: a refresh is fetched first, then swapped in.
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// The targets of policies that went away, until their cleanup ran.
    gone: Mutex<HashMap<String, Vec<GenerateTarget>>>,
    /// Trigger kind stores (metadata only), for `generateExisting`.
    stores: Mutex<HashMap<Gvk, Arc<KindStore>>>,
    /// The downstream kinds a GeneratingPolicy was seen to generate, by
    /// policy key: its expressions name them only when evaluated, so the
    /// watch manager learns them (Kyverno's dynamic watchers).
    learned: Mutex<HashMap<String, BTreeSet<Gvk>>>,
    /// Signalled when `learned` gained a kind: the registry is rebuilt.
    relearn: Notify,
    /// `apiCall` answers of context entries, kept 30 s as the scan keeps
    /// them.
    calls: Arc<crate::lookups::Lookups>,
}

impl Background {
    /// A component; starts nothing.
    pub fn new(
        client: kube::Client,
        policies: watch::Receiver<Arc<PolicySet>>,
        metrics: Arc<Metrics>,
        hub: Arc<crate::WatchHub>,
        settings: BackgroundSettings,
    ) -> Background {
        Background {
            client,
            policies,
            metrics,
            hub,
            settings,
            registry: watch::Sender::new(Arc::new(Registry::default())),
        }
    }

    /// The watch manager's current registry, always whole.
    pub fn registry(&self) -> watch::Receiver<Arc<Registry>> {
        self.registry.subscribe()
    }

    /// Runs until `token` is cancelled; returns after every task it
    /// started (workers, every watcher) has ended.
    pub async fn run(self, token: CancellationToken) -> Result<(), ScopeError> {
        let scope = Scope::with_parent_token(&token);
        let shared = Arc::new(Shared {
            client: self.client.clone(),
            hub: self.hub.clone(),
            policies: self.policies.clone(),
            registry: self.registry.subscribe(),
            metrics: self.metrics.clone(),
            settings: self.settings.clone(),
            queue: WorkQueue::new(),
            catalog: Mutex::new(None),
            gone: Mutex::new(HashMap::new()),
            stores: Mutex::new(HashMap::new()),
            learned: Mutex::new(HashMap::new()),
            relearn: Notify::new(),
            calls: self.hub.lookups(),
        });
        for n in 0..self.settings.workers.max(1) {
            let shared = shared.clone();
            let token = scope.token().clone();
            scope.spawn(format!("generate worker {n}"), async move {
                // Work is judged against the cluster's policies: an
                // UpdateRequest processed before they are read would be
                // completed with nothing generated.
                let mut policies = shared.policies.clone();
                let loaded = token.run_until_cancelled(policies.wait_for(|s| s.generation > 0));
                if !matches!(loaded.await, Some(Ok(_))) {
                    return Ok(());
                }
                while let Some(work) = shared.queue.next(&token).await {
                    match shared.process(&work, &token).await {
                        Ok(()) => shared.queue.done(&work),
                        Err(_) if token.is_cancelled() => break,
                        Err(e) => {
                            shared.metrics.api_errors.inc();
                            let delay = shared.queue.retry(&work);
                            tracing::debug!("generate {work:?}: {e}; retry in {delay:?}");
                        }
                    }
                }
                Ok::<(), std::convert::Infallible>(())
            });
        }
        let mut watchers: WatcherSet<Gvk> = WatcherSet::new();
        let mut versions: HashMap<String, String> = HashMap::new();
        let mut mutate_versions: HashMap<String, String> = HashMap::new();
        let mut cel_mutate_versions: HashMap<String, String> = HashMap::new();
        let mut policies = self.policies.clone();
        policies.mark_changed();
        let mut incomplete = false;
        let mut retry = tokio::time::interval(RESTART_DELAY * 2);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // UpdateRequests: listed at start (pending ones from before a
        // restart) and watched.
        {
            let shared = shared.clone();
            let t = scope.token().clone();
            let store = Arc::new(KindStore::new(update_request_resource(), true));
            scope.spawn("watch updaterequests", async move {
                let s = shared.clone();
                let st = store.clone();
                watch_into(
                    shared.client.clone(),
                    update_request_resource(),
                    WatchScope {
                        namespace: Some(shared.settings.namespace.clone()),
                        ..WatchScope::default()
                    },
                    store,
                    t,
                    |change| match change {
                        Change::Applied(v) => s.queue.add(Work::Request {
                            name: v.name().to_string(),
                        }),
                        Change::Listed { .. } => {
                            for v in st.list("") {
                                s.queue.add(Work::Request {
                                    name: v["metadata"]["name"].as_str().unwrap_or("").to_string(),
                                });
                            }
                        }
                        Change::Deleted(_) => {}
                    },
                    |_| {},
                )
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        // A policy source that is gone publishes no more sets: the last
        // one stays in force (the component goes on, it does not end
        // unnoticed); a change marked here is still read, once.
        let mut policies_open = true;
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                r = policies.changed(), if policies_open => {
                    if r.is_err() {
                        policies_open = false;
                        tracing::debug!("the policy source is gone; generating with its last policy set");
                        continue;
                    }
                    let set = policies.borrow_and_update().clone();
                    if set.generation == 0 {
                        continue;
                    }
                    let (registry, complete) = shared.registry_for(&set, &token).await;
                    let old = self.registry.borrow().clone();
                    for (policy, targets) in &old.policies {
                        if !registry.policies.contains_key(policy) {
                            shared.gone.lock().unwrap_or_else(|e| e.into_inner())
                                .insert(policy.clone(), targets.clone());
                            shared.queue.add(Work::PolicyGone { policy: policy.clone() });
                        }
                    }
                    // Publish before the watchers change: a watcher's events
                    // are judged against the newest registry.
                    self.registry.send_replace(Arc::new(registry.clone()));
                    // Cancelled and joined before their store is dropped.
                    watchers.retain(|k| registry.kinds.contains_key(k), |k| {
                        shared.stores.lock().unwrap_or_else(|e| e.into_inner()).remove(k);
                    }).await;
                    for k in registry.kinds.keys() {
                        watchers.start(k.clone(), |ended| shared.start_watcher(&scope, k.clone(), Duration::ZERO, ended));
                    }
                    for (policy, (rv, _)) in &set.generating {
                        let changed = versions.get(policy) != Some(rv);
                        let existing = registry.policies.get(policy).is_some_and(|ts| ts.iter().any(|t| t.generate_existing));
                        if changed && existing {
                            shared.queue.add(Work::Existing { policy: policy.clone() });
                        }
                    }
                    versions = set.generating.iter().map(|(k, (rv, _))| (k.clone(), rv.clone())).collect();
                    for (policy, rv) in &set.mutating_existing {
                        if mutate_versions.get(policy) != Some(rv) {
                            shared.queue.add(Work::MutateExistingPolicy { policy: policy.clone() });
                        }
                    }
                    mutate_versions = set.mutating_existing.clone();
                    for (policy, rv) in &set.mutating_existing_cel {
                        if cel_mutate_versions.get(policy) != Some(rv) {
                            shared.queue.add(Work::MutateExistingCel { policy: policy.clone() });
                        }
                    }
                    cel_mutate_versions = set.mutating_existing_cel.clone();
                    // A kind discovery did not know (yet), or a watcher that
                    // could not start: the set is applied again shortly.
                    incomplete = !complete || registry.kinds.keys().any(|k| !watchers.contains(k));
                }
                _ = retry.tick(), if incomplete => {
                    incomplete = false;
                    policies.mark_changed();
                    // A marked change is read even from a closed channel.
                    policies_open = true;
                }
                // A GeneratingPolicy generated a kind not watched yet: the
                // same set, applied again, watches it.
                _ = shared.relearn.notified() => {
                    policies.mark_changed();
                    policies_open = true;
                }
                (k, id) = watchers.ended() => {
                    // A watcher ended on its own: replace it only if the set
                    // still holds that same watcher (house rule 8).
                    if !token.is_cancelled()
                        && watchers.stop_if_current(&k, id).await
                        && self.registry.borrow().kinds.contains_key(&k)
                    {
                        // A kind that is not served (its CRD deleted) is
                        // tried again after a pause, not in a loop.
                        watchers.start(k.clone(), |ended| shared.start_watcher(&scope, k, RESTART_DELAY, ended));
                    }
                }
            }
        }
        watchers.shutdown().await;
        scope.shutdown().await
    }
}

impl Shared {
    /// The kind's API resource and scope, from discovery (refreshed once
    /// when the kind is not in it).
    async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
        token: &CancellationToken,
    ) -> Option<(ApiResource, bool)> {
        for attempt in 0..2 {
            let current = self
                .catalog
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let catalog = match current {
                Some(c) if attempt == 0 => c,
                _ => {
                    let loader = Loader::new(self.client.clone(), LoadOptions::default()).ok()?;
                    match loader.discover(token).await {
                        Ok(c) => {
                            let c = Arc::new(c);
                            *self.catalog.lock().unwrap_or_else(|e| e.into_inner()) =
                                Some(c.clone());
                            c
                        }
                        Err(e) => {
                            self.metrics.api_errors.inc();
                            tracing::warn!("discovery failed: {e}");
                            return None;
                        }
                    }
                }
            };
            if let Some(found) = find_kind(&catalog, api_version, kind) {
                return Some(found);
            }
        }
        None
    }

    /// The current catalog (discovered first when there is none).
    async fn resolve_catalog(&self, token: &CancellationToken) -> Arc<Catalog> {
        let _ = self.resolve("v1", "Namespace", token).await;
        self.catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// The kinds a match kind names (`Namespace`, `apps/v1/Deployment`,
    /// `*/Pod`), from the current catalog.
    fn resolve_match(&self, catalog: &Catalog, kind: &str) -> Vec<Gvk> {
        let parts: Vec<&str> = kind.split('/').collect();
        let (group, version, k) = match parts.as_slice() {
            [k] => ("*", "*", *k),
            [v, k] => ("*", *v, *k),
            [g, v, k] => (*g, *v, *k),
            _ => return Vec::new(),
        };
        catalog
            .kinds()
            .iter()
            .filter(|r| {
                // A classic kind names the kind; a GeneratingPolicy's
                // resource rule the plural.
                (leash_policy::wildcard::matches(k, &r.kind) || k == r.plural)
                    && (group == "*" || leash_policy::wildcard::matches(group, &r.group))
                    && (version == "*" || leash_policy::wildcard::matches(version, &r.version))
                    && !r.plural.contains('/')
            })
            .map(|r| (join_api_version(&r.group, &r.version), r.kind.clone()))
            .collect()
    }

    /// The registry of a policy set, and whether every kind in it was
    /// resolved (if not, the caller builds it again a little later).
    async fn registry_for(&self, set: &PolicySet, token: &CancellationToken) -> (Registry, bool) {
        let mut policies = BTreeMap::new();
        for p in set.engine.policies().iter().filter(|p| p.has_generate()) {
            policies.insert(p.key().to_string(), p.generate_targets());
        }
        for p in set.engine.generating_policies() {
            policies
                .entry(p.key())
                .or_insert_with(Vec::new)
                .push(self.cel_target(p));
        }
        // Make sure discovery knows every downstream kind (a CRD installed
        // since the last discovery triggers one refresh).
        let mut complete = true;
        for targets in policies.values() {
            for t in targets {
                for (av, k) in &t.kinds {
                    complete &= self.resolve(av, k, token).await.is_some();
                }
            }
        }
        let catalog = self
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        complete &= catalog.is_some();
        let catalog = catalog.unwrap_or_default();
        let unresolved = std::cell::Cell::new(false);
        let registry = Registry::build(policies, |k| {
            let found = self.resolve_match(&catalog, k);
            if found.is_empty() {
                unresolved.set(true);
            }
            found
        });
        (registry, complete && !unresolved.get())
    }

    /// A GeneratingPolicy as the watch manager sees it: one rule (its
    /// name), the downstream kinds learned so far, its trigger resources.
    fn cel_target(&self, p: &GeneratingPolicy) -> GenerateTarget {
        let kinds = self
            .learned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&p.key())
            .map(|k| k.iter().cloned().collect())
            .unwrap_or_default();
        GenerateTarget {
            rule: p.name().to_string(),
            kinds,
            synchronize: p.synchronize(),
            orphan_on_policy_delete: p.orphan_on_policy_delete(),
            generate_existing: p.generate_existing(),
            // `group/version/resource`, which `resolve_match` reads.
            trigger_kinds: p
                .matched_resources()
                .into_iter()
                .map(|(g, v, r)| format!("{g}/{v}/{r}"))
                .collect(),
        }
    }

    /// Records the kinds a GeneratingPolicy generated; a new one rebuilds
    /// the registry, so it is watched (and cleaned up with the policy).
    fn learn(&self, policy_key: &str, downstreams: &[Value]) {
        let mut new = false;
        {
            let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
            let kinds = learned.entry(policy_key.to_string()).or_default();
            for d in downstreams {
                let gvk = (
                    d["apiVersion"].as_str().unwrap_or("").to_string(),
                    d["kind"].as_str().unwrap_or("").to_string(),
                );
                new |= kinds.insert(gvk);
            }
        }
        if new {
            self.relearn.notify_one();
        }
    }

    fn start_watcher(
        self: &Arc<Self>,
        scope: &Scope,
        gvk: Gvk,
        delay: Duration,
        ended: Ended<Gvk>,
    ) -> Option<Scope> {
        let catalog = self
            .catalog
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()?;
        let (ar, namespaced) = find_kind(&catalog, &gvk.0, &gvk.1)?;
        let child = scope.child();
        let this = self.clone();
        let token = child.token().clone();
        child.spawn(format!("generate {}", ar.plural), async move {
            if !delay.is_zero()
                && token
                    .run_until_cancelled(tokio::time::sleep(delay))
                    .await
                    .is_none()
            {
                return Ok(());
            }
            // The kind's watch is the hub's (shared with the scan and
            // admission); its store is read for generateExisting.
            let mut subscription = this.hub.subscribe(&ar, namespaced, true);
            if let Some(store) = subscription.store() {
                this.stores
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(gvk.clone(), store);
            }
            while let Some(change) = subscription.next_until(&token).await {
                match change {
                    Change::Applied(v) => {
                        if let Some(v) = v.value() {
                            this.on_event(&gvk, &v, false);
                        }
                    }
                    Change::Deleted(v) => {
                        if let Some(v) = v.value() {
                            this.on_event(&gvk, &v, true);
                        }
                    }
                    Change::Listed { removed } => {
                        for v in removed.iter().filter_map(|v| v.value()) {
                            this.on_event(&gvk, &v, true);
                        }
                        for v in subscription.store().map(|s| s.list("")).unwrap_or_default() {
                            this.on_event(&gvk, &v, false);
                        }
                    }
                }
            }
            drop(subscription);
            ended.send();
            Ok::<(), std::convert::Infallible>(())
        });
        Some(child)
    }

    /// A watched object changed: queue the reconciles it calls for.
    fn on_event(&self, gvk: &Gvk, v: &Value, deleted: bool) {
        let registry = self.registry.borrow().clone();
        let Some(roles) = registry.kinds.get(gvk) else {
            return;
        };
        // A downstream changed or went away: its trigger is reconciled,
        // which restores it.
        if let Some((policy, rule, trigger)) = TriggerRef::from_labels(v)
            && roles
                .downstream_of
                .contains(&(policy.clone(), rule.clone()))
        {
            self.queue.add(Work::Trigger {
                policy,
                rule,
                trigger,
            });
        }
        if roles.trigger_of.is_empty() {
            return;
        }
        let set = self.policies.borrow().clone();
        let created = v["metadata"]["creationTimestamp"].as_str().unwrap_or("");
        for (policy, rule) in &roles.trigger_of {
            let Some(target) = registry.target(policy, rule) else {
                continue;
            };
            // Without synchronize, a trigger is generated for once: when it
            // is created after the policy (or always, with generateExisting).
            let policy_created = set
                .generating
                .get(policy)
                .map(|(_, c)| c.as_str())
                .unwrap_or("");
            let wanted = if deleted {
                target.synchronize
            } else {
                target.synchronize || target.generate_existing || created >= policy_created
            };
            if wanted {
                self.queue.add(Work::Trigger {
                    policy: policy.clone(),
                    rule: rule.clone(),
                    trigger: TriggerRef::of(v),
                });
            }
        }
    }

    async fn process(&self, work: &Work, token: &CancellationToken) -> Result<(), String> {
        match work {
            Work::Request { name } => self.process_request(name, token).await,
            Work::Trigger {
                policy,
                rule,
                trigger,
            } => self
                .reconcile(policy, rule, trigger, token)
                .await
                .map(|_| ()),
            Work::Existing { policy } => {
                let registry = self.registry.borrow().clone();
                for (gvk, roles) in &registry.kinds {
                    for (p, rule) in roles.trigger_of.iter().filter(|(p, _)| p == policy) {
                        let store = self
                            .stores
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get(gvk)
                            .cloned();
                        let Some(store) = store else { continue };
                        for v in store.list("") {
                            self.queue.add(Work::Trigger {
                                policy: p.clone(),
                                rule: rule.clone(),
                                trigger: TriggerRef::of(&v),
                            });
                        }
                    }
                }
                Ok(())
            }
            Work::MutateExistingPolicy { policy } => {
                self.queue_existing_triggers(policy, token).await
            }
            Work::MutateExistingCel { policy } => {
                self.mutate_existing_cel_policy(policy, token).await
            }
            Work::MutateExisting {
                policy,
                rule,
                trigger,
            } => {
                self.mutate_existing_trigger(policy, rule, trigger, token)
                    .await
            }
            Work::PolicyGone { policy } => {
                let targets = self
                    .gone
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(policy)
                    .cloned()
                    .unwrap_or_default();
                if self.policies.borrow().generating.contains_key(policy) {
                    // Re-created meanwhile: its downstreams are its again.
                    self.forget_gone(policy);
                    return Ok(());
                }
                for t in targets.iter().filter(|t| !t.orphan_on_policy_delete) {
                    self.delete_downstreams(policy, &t.rule, None, &t.kinds, token)
                        .await?;
                }
                self.forget_gone(policy);
                Ok(())
            }
        }
    }

    fn forget_gone(&self, policy: &str) {
        self.gone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(policy);
    }

    /// Cluster data for one reconcile: the objects and lists a rule reads
    /// (a clone's source, a `configMap` context) read as they are now, by
    /// [`Self::fetch_missed`]; `apiCall`s answered from the hub's kept
    /// answers.
    fn fresh_data(&self) -> ScanData {
        let data =
            ScanData::new(Arc::new(crate::Cache::new()), self.calls.clone()).reading_afresh();
        match self.hub.global() {
            Some(store) => data.with_global(store),
            None => data,
        }
    }

    fn api(&self, ar: &ApiResource, namespace: &str) -> Api<Object> {
        if namespace.is_empty() {
            Api::all_with(self.client.clone(), ar)
        } else {
            Api::namespaced_with(self.client.clone(), namespace, ar)
        }
    }

    async fn process_request(&self, name: &str, token: &CancellationToken) -> Result<(), String> {
        let api: Api<Object> = Api::namespaced_with(
            self.client.clone(),
            &self.settings.namespace,
            &update_request_resource(),
        );
        let Some(ur) = cancellable(token, || api.get_opt(name)).await? else {
            return Ok(());
        };
        let ur = ur.raw;
        let request_type = ur["spec"]["requestType"]
            .as_str()
            .unwrap_or(REQUEST_GENERATE);
        if request_type == mutate::REQUEST_MUTATE || request_type == mutate::REQUEST_CEL_MUTATE {
            return self.process_mutate_request(name, &ur, token).await;
        }
        if request_type != REQUEST_GENERATE && request_type != REQUEST_CEL_GENERATE {
            return Ok(());
        }
        let policy = ur["spec"]["policy"].as_str().unwrap_or("").to_string();
        let contexts = rule_contexts(&ur);
        let mut outcome = Ok(Vec::new());
        if ur["status"]["state"].as_str() != Some("Completed") {
            let mut generated = Vec::new();
            let mut failure = None;
            for (rule, trigger) in &contexts {
                match self.reconcile(&policy, rule, trigger, token).await {
                    Ok(refs) => generated.extend(refs),
                    Err(e) => failure = Some(e),
                }
            }
            outcome = match failure {
                None => Ok(generated),
                Some(e) => Err((e, generated)),
            };
        }
        self.finish_request(name, &ur, outcome, "generatedResources", token)
            .await
    }

    /// Records how an UpdateRequest went (`Completed` with the resources
    /// it wrote under `field`, or `Failed` with the error), and deletes it
    /// once completed. A failure is returned, so the queue retries it. An
    /// UpdateRequest already `Completed` is only deleted.
    async fn finish_request(
        &self,
        name: &str,
        ur: &Value,
        outcome: Result<Vec<Value>, (String, Vec<Value>)>,
        field: &str,
        token: &CancellationToken,
    ) -> Result<(), String> {
        let api: Api<Object> = Api::namespaced_with(
            self.client.clone(),
            &self.settings.namespace,
            &update_request_resource(),
        );
        if ur["status"]["state"].as_str() != Some("Completed") {
            let (status, failure) = match outcome {
                Ok(refs) => (json!({"state": "Completed", field: refs}), None),
                Err((e, refs)) => (
                    json!({"state": "Failed", "message": e, field: refs}),
                    Some(e),
                ),
            };
            let mut updated = ur.clone();
            updated["status"] = status;
            let body = Object::from_value(updated).map_err(|e| e.to_string())?;
            let pp = PostParams::default();
            // A conflict or a failure here is retried: the work is idempotent.
            cancellable(token, || api.replace_status(name, &pp, &body)).await?;
            if let Some(e) = failure {
                return Err(e);
            }
        }
        let dp = DeleteParams::default();
        match cancellable(token, || api.delete(name, &dp)).await {
            Ok(_) => Ok(()),
            Err(e) if e.contains("404") || e.contains("not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Fetches what an evaluation asked `data` for and did not find: the
    /// objects and lists as they are now (resolved through discovery),
    /// `apiCall`s through the kept answers; false when nothing was missing.
    async fn fetch_missed(
        &self,
        data: &ScanData,
        token: &CancellationToken,
    ) -> Result<bool, String> {
        let missed = data.take_missed();
        if missed.is_empty() {
            return Ok(false);
        }
        let (objects, calls): (Vec<Lookup>, Vec<Lookup>) = missed
            .into_iter()
            .partition(|l| matches!(l, Lookup::Get(..) | Lookup::List(..)));
        if !calls.is_empty() && !data.fetch(&self.client, calls, token).await {
            return Err("cancelled".into());
        }
        for key in objects {
            let (av, kind, ns, name) = match &key {
                Lookup::Get(av, kind, ns, name) => (av, kind, ns, name.as_str()),
                Lookup::List(av, kind, ns) => (av, kind, ns, ""),
                _ => continue,
            };
            let Some((ar, _)) = self.resolve(av, kind, token).await else {
                if name.is_empty() {
                    data.put_list(key, Vec::new());
                } else {
                    data.put_object(key, None);
                }
                continue;
            };
            let api = self.api(&ar, ns);
            if name.is_empty() {
                let lp = ListParams::default();
                let list = cancellable(token, || api.list(&lp)).await?;
                // kube-apiserver leaves apiVersion and kind out of the
                // items of a list of built-in kinds.
                let items = list.items.into_iter().map(|o| {
                    let mut v = Arc::unwrap_or_clone(o.raw);
                    if let Some(m) = v.as_object_mut()
                        && !m.contains_key("kind")
                    {
                        m.insert("apiVersion".into(), ar.api_version.clone().into());
                        m.insert("kind".into(), ar.kind.clone().into());
                    }
                    Arc::new(v)
                });
                data.put_list(key, items.collect());
            } else {
                let got = cancellable(token, || api.get_opt(name)).await?;
                data.put_object(key, got.map(|o| o.raw));
            }
        }
        Ok(true)
    }

    /// The labels and object of a namespace (none for "" or a missing one).
    async fn namespace_of(
        &self,
        namespace: &str,
        token: &CancellationToken,
    ) -> Result<Option<Object>, String> {
        if namespace.is_empty() {
            return Ok(None);
        }
        let ns_ar = api_resource("", "v1", "Namespace", "namespaces");
        let ns_api = self.api(&ns_ar, "");
        cancellable(token, || ns_api.get_opt(namespace)).await
    }

    /// Makes the rule's downstreams for the trigger's current state exist;
    /// deletes them when a synchronizing rule's trigger is gone. Returns
    /// the downstreams it ensured.
    async fn reconcile(
        &self,
        policy_key: &str,
        rule: &str,
        trigger: &TriggerRef,
        token: &CancellationToken,
    ) -> Result<Vec<Value>, String> {
        let set = self.policies.borrow().clone();
        let Some(generator) = Generator::find(&set, policy_key, rule) else {
            return Ok(Vec::new());
        };
        let target = match &generator {
            Generator::Classic(p) => {
                let Some(t) = p.generate_targets().into_iter().find(|t| t.rule == rule) else {
                    return Ok(Vec::new());
                };
                t
            }
            Generator::Cel(p) => self.cel_target(p),
        };
        let (ar, _) = self
            .resolve(&trigger.api_version, &trigger.kind, token)
            .await
            .ok_or_else(|| format!("trigger kind {} is not served", trigger.kind))?;
        let trigger_api = self.api(&ar, &trigger.namespace);
        let live = cancellable(token, || trigger_api.get_opt(&trigger.name)).await?;
        let live = live.filter(|o| trigger.uid.is_empty() || o.uid() == trigger.uid);
        let Some(live) = live else {
            if target.synchronize && !trigger.uid.is_empty() {
                self.delete_downstreams(policy_key, rule, Some(&trigger.uid), &target.kinds, token)
                    .await?;
            }
            return Ok(Vec::new());
        };
        let mut req = EvalRequest::create(live.raw.clone());
        if let Some(ns) = self.namespace_of(&trigger.namespace, token).await? {
            req.namespace_labels = ns.meta.labels.clone();
            req.namespace_object = Some(ns.raw.clone());
        }
        let prepared = Prepared::new(req);
        let data = self.fresh_data();
        let mut generated = None;
        for _ in 0..crate::lookups::ROUNDS {
            generated = generator.generate(&set, &prepared, &data, policy_key, rule);
            if !self.fetch_missed(&data, token).await? {
                break;
            }
        }
        let Some(generated) = generated else {
            return Ok(Vec::new());
        };
        match generated.result.status {
            Status::Pass => {}
            Status::Skip => return Ok(Vec::new()),
            _ => return Err(generated.result.message),
        }
        if matches!(generator, Generator::Cel(_)) {
            self.learn(policy_key, &generated.downstreams);
        }
        let mut refs = Vec::new();
        for d in &generated.downstreams {
            self.apply(d, target.synchronize, token).await?;
            refs.push(json!({
                "apiVersion": d["apiVersion"], "kind": d["kind"],
                "namespace": d["metadata"]["namespace"], "name": d["metadata"]["name"],
            }));
        }
        Ok(refs)
    }

    /// Creates a downstream, or brings it back in line with its rule when
    /// the rule synchronizes.
    async fn apply(
        &self,
        desired: &Value,
        synchronize: bool,
        token: &CancellationToken,
    ) -> Result<(), String> {
        let av = desired["apiVersion"].as_str().unwrap_or("");
        let kind = desired["kind"].as_str().unwrap_or("");
        let (ar, namespaced) = self
            .resolve(av, kind, token)
            .await
            .ok_or_else(|| format!("downstream kind {av} {kind} is not served"))?;
        let ns = if namespaced {
            desired["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
        } else {
            ""
        };
        let name = desired["metadata"]["name"].as_str().unwrap_or("");
        let api = self.api(&ar, ns);
        let existing = cancellable(token, || api.get_opt(name)).await?;
        match existing {
            None => {
                let obj = Object::from_value(desired.clone()).map_err(|e| e.to_string())?;
                let pp = PostParams::default();
                match cancellable(token, || api.create(&pp, &obj)).await {
                    Ok(_) => Ok(()),
                    // Created meanwhile (another worker, a retry): the next
                    // pass compares it.
                    Err(e) if e.contains("409") || e.contains("AlreadyExists") => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Some(e) if synchronize && !contains(&e.raw, desired) => {
                let mut update = desired.clone();
                update["metadata"]["resourceVersion"] =
                    json!(e.meta.resource_version.clone().unwrap_or_default());
                let obj = Object::from_value(update).map_err(|e| e.to_string())?;
                let pp = PostParams::default();
                cancellable(token, || api.replace(name, &pp, &obj))
                    .await
                    .map(|_| ())
            }
            Some(_) => Ok(()),
        }
    }

    /// Deletes the downstreams a rule made (for one trigger, or all).
    async fn delete_downstreams(
        &self,
        policy_key: &str,
        rule: &str,
        trigger_uid: Option<&str>,
        kinds: &[(String, String)],
        token: &CancellationToken,
    ) -> Result<(), String> {
        let (ns, name) = match policy_key.split_once('/') {
            Some((ns, name)) => (Some(ns), name),
            None => (None, policy_key),
        };
        let mut selector = format!("{LABEL_POLICY}={name},{LABEL_RULE}={rule}");
        if let Some(ns) = ns {
            selector.push_str(&format!(",{LABEL_POLICY_NS}={ns}"));
        }
        if let Some(uid) = trigger_uid {
            selector.push_str(&format!(",generate.kyverno.io/trigger-uid={uid}"));
        }
        let (mut failed, mut last) = (0usize, None);
        for (av, kind) in kinds {
            let Some((ar, _)) = self.resolve(av, kind, token).await else {
                continue;
            };
            let all = self.api(&ar, "");
            let lp = ListParams::default().labels(&selector);
            let list = cancellable(token, || all.list(&lp)).await?;
            let dp = DeleteParams::default();
            // Every deletion is tried, so a retry after transient errors
            // only has the failed ones left.
            for o in list.items {
                let api = self.api(&ar, o.namespace());
                match cancellable(token, || api.delete(o.name(), &dp)).await {
                    Ok(_) => {}
                    Err(e) if e.contains("404") || e.contains("not found") => {}
                    Err(e) if token.is_cancelled() => return Err(e),
                    Err(e) => {
                        failed += 1;
                        last = Some(e);
                    }
                }
            }
        }
        match last {
            None => Ok(()),
            Some(e) => Err(format!(
                "{failed} downstream deletions failed; the last: {e}"
            )),
        }
    }
}

/// The (rule, trigger) pairs an UpdateRequest names: its `ruleContext`,
/// or (an older layout) its `rule` and `resource`.
fn rule_contexts(ur: &Value) -> Vec<(String, TriggerRef)> {
    let mut contexts: Vec<(String, TriggerRef)> = ur["spec"]["ruleContext"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["rule"].as_str().unwrap_or("").to_string(),
                TriggerRef::from_json(&c["trigger"]),
            )
        })
        .collect();
    if contexts.is_empty() {
        contexts.push((
            ur["spec"]["rule"].as_str().unwrap_or("").to_string(),
            TriggerRef::from_json(&ur["spec"]["resource"]),
        ));
    }
    contexts
}

/// What a (policy key, rule) names: a classic policy's generate rule, or a
/// GeneratingPolicy (whose one rule is its name). Both kinds share the
/// label scheme, so a ClusterPolicy and a GeneratingPolicy of the same name
/// share a key: the classic rule is looked up first.
enum Generator {
    Classic(Arc<Policy>),
    Cel(Arc<GeneratingPolicy>),
}

impl Generator {
    fn find(set: &PolicySet, key: &str, rule: &str) -> Option<Generator> {
        let classic = set
            .engine
            .policies()
            .iter()
            .find(|p| &**p.key() == key && p.generate_rule_names().any(|r| r == rule));
        if let Some(p) = classic {
            return Some(Generator::Classic(p.clone()));
        }
        set.engine
            .generating_policies()
            .iter()
            .find(|p| p.key() == key && p.name() == rule)
            .map(|p| Generator::Cel(p.clone()))
    }

    /// What the rule generates for the trigger (None: not selected).
    fn generate(
        &self,
        set: &PolicySet,
        prepared: &Prepared,
        data: &ScanData,
        key: &str,
        rule: &str,
    ) -> Option<Generated> {
        match self {
            // Through the engine, which applies the exceptions.
            Generator::Classic(_) => set
                .engine
                .generate(prepared, data, &Bindings::default())
                .into_iter()
                .find(|(p, g)| &**p.key() == key && g.result.rule == rule)
                .map(|(_, g)| g),
            Generator::Cel(p) => p.generate(prepared.request(), data),
        }
    }
}

/// `group/version`, or `version` for the core group.
fn join_api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn find_kind(catalog: &Catalog, api_version: &str, kind: &str) -> Option<(ApiResource, bool)> {
    let (group, version) = leash_policy::kinds::split_api_version(api_version);
    catalog
        .kinds()
        .iter()
        .chain(catalog.other_versions())
        .find(|r| {
            r.group == group
                && (version.is_empty() || r.version == version)
                && (r.kind == kind || r.plural == kind)
                && !r.plural.contains('/')
        })
        .map(|r| {
            (
                api_resource(&r.group, &r.version, &r.kind, &r.plural),
                r.namespaced,
            )
        })
}

/// Whether `have` holds everything `want` says (maps: every key, lists and
/// scalars: equal), ignoring the fields the API server assigns.
fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w.iter().all(|(k, wv)| {
            h.get(k)
                .is_some_and(|hv| contains(hv, wv) || (wv.is_null() && hv.is_null()))
        }),
        _ => have == want,
    }
}

/// Runs an API call until it succeeds, fails for good, or the token is
/// cancelled. Transient failures (429, 5xx, a connection error) are tried
/// again in place up to [`CALL_ATTEMPTS`] times, briefly, before the work
/// item as a whole backs off: one reconcile makes several calls, and
/// backing off the whole item for each transient error would compound.
async fn cancellable<T, F>(
    token: &CancellationToken,
    mut call: impl FnMut() -> F,
) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = tokio::select! {
            _ = token.cancelled() => return Err("cancelled".to_string()),
            r = call() => r,
        };
        match result {
            Ok(v) => return Ok(v),
            Err(e) if attempt < CALL_ATTEMPTS && is_transient(&e) => {
                let pause = Duration::from_millis(20 << attempt);
                if token
                    .run_until_cancelled(tokio::time::sleep(pause))
                    .await
                    .is_none()
                {
                    return Err("cancelled".to_string());
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Calls tried in place before the work item backs off.
const CALL_ATTEMPTS: u32 = 4;

fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The pause before a watcher that ended on its own is started again.
const RESTART_DELAY: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_downstreams_labels_name_its_trigger_policy_and_rule() {
        let d = json!({"metadata": {"labels": {
            "generate.kyverno.io/policy-name": "p", "generate.kyverno.io/policy-namespace": "team",
            "generate.kyverno.io/rule-name": "r", "generate.kyverno.io/trigger-group": "apps",
            "generate.kyverno.io/trigger-version": "v1", "generate.kyverno.io/trigger-kind": "Deployment",
            "generate.kyverno.io/trigger-namespace": "a", "generate.kyverno.io/trigger-name": "web",
            "generate.kyverno.io/trigger-uid": "u"}}});
        let (policy, rule, t) = TriggerRef::from_labels(&d).expect("labels name a trigger");
        assert_eq!((policy.as_str(), rule.as_str()), ("team/p", "r"));
        assert_eq!(t.api_version, "apps/v1");
        assert_eq!(t.to_string(), "Deployment a/web");
        assert!(TriggerRef::from_labels(&json!({"metadata": {"labels": {"a": "b"}}})).is_none());
    }

    #[test]
    fn contains_ignores_what_the_server_adds() {
        let have = json!({"metadata": {"name": "a", "uid": "x", "labels": {"k": "v", "z": "1"}},
                          "data": {"a": "1"}});
        assert!(contains(
            &have,
            &json!({"metadata": {"name": "a", "labels": {"k": "v"}}, "data": {"a": "1"}})
        ));
        assert!(!contains(&have, &json!({"data": {"a": "2"}})));
        assert!(!contains(&have, &json!({"data": {"b": "1"}})));
    }

    #[test]
    fn update_requests_carry_kyvernos_rule_context() {
        let trigger =
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n", "uid": "u"}});
        let ur = update_request(
            "kyverno",
            REQUEST_GENERATE,
            "p",
            &["a".into(), "b".into()],
            &trigger,
        );
        assert_eq!(ur["spec"]["requestType"], "generate");
        assert_eq!(ur["spec"]["ruleContext"][1]["rule"], "b");
        assert_eq!(ur["spec"]["ruleContext"][0]["trigger"]["uid"], "u");
        assert_eq!(ur["metadata"]["labels"][LABEL_POLICY], "p");
    }
}
