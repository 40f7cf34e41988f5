//! The policy set and Kyverno's configuration, read from the cluster and
//! published whole.
//!
//! [`PolicySource`] watches every policy kind, compiles the whole set after
//! each change (debounced) and publishes one immutable [`PolicySet`] on a
//! `watch` channel; [`ConfigSource`] watches Kyverno's ConfigMap and
//! publishes one [`KyvernoConfig`] snapshot. Readers take the current
//! `Arc` and keep it for as long as they work with it: they never see half
//! an update (house rule 7; seed 000: `IsExcluded()` read a map that config
//! updates were writing). An invalid update keeps the previous value and
//! says why.
//!
//! # Invariants
//! 1. [`PolicySource::new`] and [`ConfigSource::new`] start nothing.
//!    [`PolicySource::run`] spawns one watch per policy kind in a child
//!    scope of its token; compiling and publishing happen in `run`'s own
//!    loop, the only one to send on the set's and `synced`'s channels.
//!    [`ConfigSource::run`] spawns nothing: its watch runs in the caller's
//!    task, and its callback is the only caller of `apply` there.
//! 2. No lock is held here; the shared state is the watches' stores (see
//!    [`KindStore`]), the `watch` channels, one `Notify` and one
//!    `AtomicBool` per policy kind. Values are published whole with
//!    `send_replace` (house rule 7); `apply` drops its `borrow()` guard
//!    before it sends.
//! 3. No change is lost: a watch signals `dirty` with `notify_one`, which
//!    stores a permit when the loop is busy compiling; a burst is gathered
//!    into one compile by the debounce that follows.
//! 4. A kind's `absent` flag is set once (`swap`, AcqRel) by its watch when
//!    its list fails with a 404, and read (Acquire) by the loop. The first
//!    set is published only once every kind is listed or absent, never
//!    from a partial read; `synced` turns true only then.
//! 5. On cancellation the loop breaks (cancelled during the debounce,
//!    nothing more is compiled or published) and the watch scope is shut
//!    down (cancel, then join) before `run` returns.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leash_policy::{Document, Engine, KyvernoConfig, Shared};
use leash_runtime::Scope;
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::cache::KindStore;
use crate::metrics::Metrics;
use crate::object::api_resource;
use crate::watch::{Change, WatchScope, watch_into};

/// The policy kinds read from the cluster: group, version, kind, plural,
/// namespaced.
pub const POLICY_KINDS: &[(&str, &str, &str, &str, bool)] = &[
    (
        "kyverno.io",
        "v1",
        "ClusterPolicy",
        "clusterpolicies",
        false,
    ),
    ("kyverno.io", "v1", "Policy", "policies", true),
    (
        "kyverno.io",
        "v2",
        "PolicyException",
        "policyexceptions",
        true,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "ValidatingPolicy",
        "validatingpolicies",
        false,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "NamespacedValidatingPolicy",
        "namespacedvalidatingpolicies",
        true,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "ImageValidatingPolicy",
        "imagevalidatingpolicies",
        false,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "NamespacedImageValidatingPolicy",
        "namespacedimagevalidatingpolicies",
        true,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "PolicyException",
        "policyexceptions",
        true,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "MutatingPolicy",
        "mutatingpolicies",
        false,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "NamespacedMutatingPolicy",
        "namespacedmutatingpolicies",
        true,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "GeneratingPolicy",
        "generatingpolicies",
        false,
    ),
    (
        "policies.kyverno.io",
        "v1",
        "NamespacedGeneratingPolicy",
        "namespacedgeneratingpolicies",
        true,
    ),
];

/// How long the first set waits for every policy kind to be listed before
/// it says which are missing (and then every FIRST_SET_COMPLAINT).
const FIRST_SET_WAIT: Duration = Duration::from_secs(5);
const FIRST_SET_COMPLAINT: Duration = Duration::from_secs(30);

/// How long policy changes are gathered before the set is compiled again.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Every policy of the cluster, compiled. Immutable once published.
#[derive(Debug, Default)]
pub struct PolicySet {
    /// Every policy and exception.
    pub engine: Engine,
    /// Background-enabled policies (and every exception): what the scan
    /// evaluates.
    pub background: Engine,
    /// Policy key → resourceVersion, of the background policies.
    pub background_versions: Vec<(String, String)>,
    /// Every (policy key, rule) that exists, autogen rules included; a
    /// ValidatingPolicy's rule is its name.
    pub rules: HashSet<(String, String)>,
    /// Policies that did not compile, each with why.
    pub errors: Vec<PolicyError>,
    /// Policies with `spec.background` true kept out of the background
    /// scan because their rules depend on the request's user, as Kyverno
    /// refuses them: `(policy key, Kyverno's reason)`. They still run at
    /// admission.
    pub admission_only: Vec<(String, String)>,
    /// How many times the set was compiled (0: nothing read yet).
    pub generation: u64,
    /// Policy key → (resourceVersion, creationTimestamp) of every policy
    /// with generate rules.
    pub generating: HashMap<String, (String, String)>,
    /// Policy key → resourceVersion of every policy with
    /// `mutateExistingOnPolicyUpdate` rules.
    pub mutating_existing: HashMap<String, String>,
    /// Policy key → resourceVersion of every MutatingPolicy with
    /// `evaluation.mutateExisting`.
    pub mutating_existing_cel: HashMap<String, String>,
}

impl PolicySet {
    /// Compiles documents (each kind's objects) into a set.
    pub fn compile(docs: &[Arc<Value>], generation: u64) -> PolicySet {
        let mut set = PolicySet {
            generation,
            ..PolicySet::default()
        };
        let mut sorted: Vec<&Arc<Value>> = docs.iter().collect();
        sorted.sort_by_key(|d| {
            (
                d["kind"].as_str().unwrap_or("").to_string(),
                d["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                d["metadata"]["name"].as_str().unwrap_or("").to_string(),
            )
        });
        for doc in sorted {
            let rv = doc["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            match Document::compile(doc) {
                Ok(Some(Document::Policy(p))) => {
                    let key = p.key().to_string();
                    if !p.mutate_existing_on_policy_update().is_empty() {
                        set.mutating_existing.insert(key.clone(), rv.clone());
                    }
                    // Kyverno's autogen names: the rule and its pod-controller variants.
                    for rule in p.rule_names() {
                        for name in [
                            rule.to_string(),
                            format!("autogen-{rule}"),
                            format!("autogen-cronjob-{rule}"),
                        ] {
                            set.rules.insert((key.clone(), name));
                        }
                    }
                    if p.has_generate() {
                        let created = doc["metadata"]["creationTimestamp"]
                            .as_str()
                            .unwrap_or("")
                            .to_string();
                        set.generating.insert(key.clone(), (rv.clone(), created));
                    }
                    let p = Arc::new(p);
                    if let Some(why) = p.background_refused() {
                        set.admission_only.push((key, why.to_string()));
                    } else if p.background() {
                        set.background_versions.push((key, rv));
                        set.background.add_shared(Shared::Policy(p.clone()));
                    }
                    set.engine.add_shared(Shared::Policy(p));
                }
                Ok(Some(Document::ValidatingPolicy(p))) => {
                    let key = match p.namespace() {
                        Some(ns) => format!("{ns}/{}", p.name()),
                        None => p.name().to_string(),
                    };
                    set.rules
                        .insert((p.name().to_string(), p.name().to_string()));
                    set.rules.insert((key.clone(), p.name().to_string()));
                    let p = Arc::new(p);
                    if p.background() {
                        set.background_versions.push((key, rv));
                        set.background
                            .add_shared(Shared::ValidatingPolicy(p.clone()));
                    }
                    set.engine.add_shared(Shared::ValidatingPolicy(p));
                }
                Ok(Some(Document::MutatingPolicy(p))) => {
                    // Mutating policies only mutate (admission); they add
                    // no validate results to the background scan. Their
                    // one result (rule = the policy's name) is reported.
                    set.rules
                        .insert((p.name().to_string(), p.name().to_string()));
                    // Whether or not `background` is on (Kyverno's #16090).
                    if p.mutates_existing() {
                        let key = match p.namespace() {
                            Some(ns) => format!("{ns}/{}", p.name()),
                            None => p.name().to_string(),
                        };
                        set.mutating_existing_cel.insert(key, rv.clone());
                    }
                    set.engine.add_shared(Shared::MutatingPolicy(Arc::new(p)));
                }
                Ok(Some(Document::GeneratingPolicy(p))) => {
                    // Run by the admission and background components, as
                    // classic generate rules are.
                    let created = doc["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    set.generating.insert(p.key(), (rv.clone(), created));
                    set.engine.add_shared(Shared::GeneratingPolicy(Arc::new(p)));
                }
                Ok(Some(Document::Exception(e))) => {
                    let e = Arc::new(e);
                    set.background.add_shared(Shared::Exception(e.clone()));
                    set.engine.add_shared(Shared::Exception(e));
                }
                Ok(None) => {}
                Err(err) => set.errors.push(PolicyError {
                    kind: doc["kind"].as_str().unwrap_or("?").to_string(),
                    namespace: doc["metadata"]["namespace"].as_str().map(str::to_string),
                    name: doc["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                    error: err.to_string(),
                }),
            }
        }
        set
    }

    /// Whether a result's (policy, rule) still exists.
    pub fn has_rule(&self, policy: &str, rule: &str) -> bool {
        self.rules.contains(&(policy.to_string(), rule.to_string()))
    }
}

/// A policy left out of a [`PolicySet`] because it did not compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// Its kind (`ClusterPolicy`, `ValidatingPolicy`, ...).
    pub kind: String,
    /// Its namespace, for a namespaced kind.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Why it did not compile, naming the field.
    pub error: String,
}

impl std::fmt::Display for PolicyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Watches the policy kinds and publishes the compiled set.
pub struct PolicySource {
    client: kube::Client,
    sender: watch::Sender<Arc<PolicySet>>,
    synced: watch::Sender<bool>,
    metrics: Arc<Metrics>,
}

impl PolicySource {
    /// A source; nothing runs until [`PolicySource::run`].
    pub fn new(client: kube::Client, metrics: Arc<Metrics>) -> PolicySource {
        PolicySource {
            client,
            sender: watch::Sender::new(Arc::new(PolicySet::default())),
            synced: watch::Sender::new(false),
            metrics,
        }
    }

    /// The published set (the current one, and every later one).
    pub fn subscribe(&self) -> watch::Receiver<Arc<PolicySet>> {
        self.sender.subscribe()
    }

    /// True once every policy kind was listed once.
    pub fn synced(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Watches until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) -> Result<(), leash_runtime::ScopeError> {
        let scope = Scope::with_parent_token(&token);
        let dirty = Arc::new(Notify::new());
        let stores: Vec<Arc<KindStore>> = POLICY_KINDS
            .iter()
            .map(|&(g, v, k, p, ns)| Arc::new(KindStore::new(api_resource(g, v, k, p), ns)))
            .collect();
        // Per kind: its list failed with a 404 (its CRD is not installed),
        // so it has no policies; any other failure keeps the set unread.
        let absent: Vec<Arc<AtomicBool>> = stores
            .iter()
            .map(|_| Arc::new(AtomicBool::new(false)))
            .collect();
        for (store, absent) in stores.iter().zip(&absent) {
            let (client, store, dirty, metrics, absent) = (
                self.client.clone(),
                store.clone(),
                dirty.clone(),
                self.metrics.clone(),
                absent.clone(),
            );
            let token = scope.token().clone();
            let kind = store.resource.kind.clone();
            scope.spawn(format!("policy watch {kind}"), async move {
                let resource = store.resource.clone();
                watch_into(
                    client,
                    resource,
                    WatchScope::default(),
                    store,
                    token,
                    |_change: Change| dirty.notify_one(),
                    |e| {
                        metrics.api_errors.inc();
                        if crate::watch::is_not_found(e) && !absent.swap(true, Ordering::AcqRel) {
                            dirty.notify_one();
                        }
                    },
                )
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        let mut generation = 0;
        let mut last_errors: Vec<PolicyError> = Vec::new();
        let mut last_admission_only: Vec<(String, String)> = Vec::new();
        let mut next_complaint = tokio::time::Instant::now() + FIRST_SET_WAIT;
        let mut pending = false;
        loop {
            // Until the first set is out, look again every 500 ms.
            let first = generation == 0;
            tokio::select! {
                _ = token.cancelled() => break,
                _ = dirty.notified() => pending = true,
                _ = tokio::time::sleep(Duration::from_millis(500)), if first => {}
            }
            // Gather a burst of changes into one compile.
            tokio::select! {
                _ = token.cancelled() => break,
                _ = tokio::time::sleep(DEBOUNCE) => {}
            }
            let read = |(s, a): (&Arc<KindStore>, &Arc<AtomicBool>)| {
                s.is_synced() || a.load(Ordering::Acquire)
            };
            if first {
                // The first set has every kind that exists: one that could
                // not be listed (forbidden, the API server unreachable)
                // might hold Enforce policies, and admission answers "not
                // ready" (its failure policy) until the set is whole,
                // never "allowed" for want of a policy it did not read.
                if !stores.iter().zip(&absent).all(read) {
                    if tokio::time::Instant::now() >= next_complaint {
                        let unread: Vec<String> = stores
                            .iter()
                            .zip(&absent)
                            .filter(|&p| !read(p))
                            .map(|(s, _)| s.resource.kind.clone())
                            .collect();
                        tracing::warn!(
                            "policies not read yet: {} could not be listed (see the errors above); admission answers by its failure policy until they are",
                            unread.join(", ")
                        );
                        next_complaint = tokio::time::Instant::now() + FIRST_SET_COMPLAINT;
                    }
                    continue;
                }
            } else if !pending {
                continue;
            }
            pending = false;
            let docs: Vec<Arc<Value>> = stores.iter().flat_map(|s| s.list("")).collect();
            generation += 1;
            let set = PolicySet::compile(&docs, generation);
            if set.errors != last_errors {
                for e in &set.errors {
                    tracing::warn!("policy {e} is not used: {}", e.error);
                }
                last_errors = set.errors.clone();
            }
            if set.admission_only != last_admission_only {
                for (name, why) in &set.admission_only {
                    tracing::warn!(
                        "policy {name} is not evaluated in background, only at admission: {why}"
                    );
                }
                last_admission_only = set.admission_only.clone();
            }
            self.metrics.policies.set(
                (set.engine.policies().len()
                    + set.engine.validating_policies().len()
                    + set.engine.generating_policies().len()) as i64,
            );
            self.sender.send_replace(Arc::new(set));
            if stores.iter().zip(&absent).all(read) {
                self.synced.send_replace(true);
            }
        }
        scope.shutdown().await
    }
}

/// Watches Kyverno's ConfigMap and publishes its snapshot.
pub struct ConfigSource {
    client: kube::Client,
    namespace: String,
    name: String,
    sender: watch::Sender<Arc<KyvernoConfig>>,
    metrics: Arc<Metrics>,
}

impl ConfigSource {
    /// A source for ConfigMap `namespace/name`; nothing runs until
    /// [`ConfigSource::run`].
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        name: impl Into<String>,
        metrics: Arc<Metrics>,
    ) -> ConfigSource {
        ConfigSource {
            client,
            namespace: namespace.into(),
            name: name.into(),
            sender: watch::Sender::new(Arc::new(KyvernoConfig::default())),
            metrics,
        }
    }

    /// The published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<Arc<KyvernoConfig>> {
        self.sender.subscribe()
    }

    /// Applies one state of the ConfigMap (None: deleted). An invalid one
    /// keeps the current snapshot; the error says why.
    pub fn apply(&self, cm: Option<&Value>) -> Result<(), leash_policy::ConfigError> {
        let next = match cm {
            Some(cm) => KyvernoConfig::from_config_map(cm)?,
            None => KyvernoConfig::default(),
        };
        if **self.sender.borrow() != next {
            self.sender.send_replace(Arc::new(next));
        }
        Ok(())
    }

    /// Watches until `token` is cancelled.
    pub async fn run(self, token: CancellationToken) {
        let resource = api_resource("", "v1", "ConfigMap", "configmaps");
        let store = Arc::new(KindStore::new(resource.clone(), true));
        let scope = WatchScope {
            namespace: Some(self.namespace.clone()),
            fields: Some(format!("metadata.name={}", self.name)),
            keep: None,
            metadata_only: false,
            end_on_not_found: false,
        };
        let key = format!("{}/{}", self.namespace, self.name);
        let metrics = self.metrics.clone();
        // The object a rejection was logged for, by resourceVersion: the
        // initial list hands the same object over twice (as applied, then
        // as listed), and it is one rejection.
        let mut rejected: Option<String> = None;
        watch_into(
            self.client.clone(),
            resource,
            scope,
            store.clone(),
            token,
            |change| {
                let cm = match change {
                    Change::Applied(v) => v.value(),
                    Change::Deleted(_) => None,
                    Change::Listed { .. } => store.get(&self.namespace, &self.name),
                };
                let version = cm
                    .as_deref()
                    .and_then(|c| c["metadata"]["resourceVersion"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                match self.apply(cm.as_deref()) {
                    Err(_) if rejected.as_deref() == Some(version.as_str()) => {}
                    Err(e) => {
                        metrics.config_rejected.inc();
                        tracing::warn!("ConfigMap {key}: the update is not used, the previous configuration stays: {e}");
                        rejected = Some(version);
                    }
                    Ok(()) => rejected = None,
                }
            },
            |_| {
                metrics.api_errors.inc();
            },
        )
        .await;
    }
}

/// Counts policies per source for logs: `N policies (M background)`.
pub fn describe(set: &PolicySet) -> String {
    let all = set.engine.policies().len()
        + set.engine.validating_policies().len()
        + set.engine.generating_policies().len();
    let bg = set.background_versions.len();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for p in set.engine.policies() {
        *kinds.entry(p.kind()).or_default() += 1;
    }
    for p in set.engine.validating_policies() {
        *kinds.entry(p.kind()).or_default() += 1;
    }
    for p in set.engine.generating_policies() {
        *kinds.entry(p.kind()).or_default() += 1;
    }
    let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    format!("{all} policies ({bg} in background: {})", parts.join(", "))
}

impl std::fmt::Debug for PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicySource").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSource").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(name: &str, background: Option<bool>, message: &str) -> Arc<Value> {
        let mut spec = json!({"validationFailureAction": "Audit", "rules": [{
            "name": "r",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"message": message, "pattern": {"metadata": {"labels": {"team": "?*"}}}}}]});
        if let Some(b) = background {
            spec["background"] = json!(b);
        }
        Arc::new(
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}),
        )
    }

    #[test]
    fn policies_reading_the_requests_user_stay_out_of_the_background_set() {
        let docs = [
            policy("plain", None, "a team label is required"),
            policy(
                "by-user",
                None,
                "{{request.userInfo.username}} must set a team label",
            ),
            policy(
                "admission",
                Some(false),
                "{{request.userInfo.username}}: no team",
            ),
        ];
        let set = PolicySet::compile(&docs, 1);
        assert!(set.errors.is_empty(), "{:?}", set.errors);
        let background: Vec<&str> = set
            .background_versions
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(background, ["plain"]);
        assert_eq!(set.admission_only.len(), 1);
        assert_eq!(set.admission_only[0].0, "by-user");
        assert!(
            set.admission_only[0]
                .1
                .ends_with("variable {{request.userInfo.username}} is not allowed"),
            "{}",
            set.admission_only[0].1
        );
        // All three still run at admission.
        assert_eq!(set.engine.policies().len(), 3);
        assert_eq!(set.background.policies().len(), 1);
    }

    /// An invalid update of Kyverno's ConfigMap is refused, saying why, and
    /// the previous configuration stays in effect; a valid one replaces it
    /// whole.
    #[test]
    fn an_invalid_config_update_keeps_the_previous_configuration() {
        // Applied to, never run: the client never connects.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _enter = rt.enter();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let source = ConfigSource::new(
            client,
            "kyverno",
            "kyverno",
            Arc::new(Metrics::unregistered()),
        );
        let rx = source.subscribe();
        let alice = leash_policy::UserInfo {
            username: "alice".into(),
            ..leash_policy::UserInfo::default()
        };
        source
            .apply(Some(&json!({"data": {"excludeUsernames": "alice"}})))
            .unwrap();
        assert!(rx.borrow().is_excluded(&alice));
        let err = source
            .apply(Some(&json!({"data": {"excludeUsernames": 5}})))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("excludeUsernames") && err.contains("not a string"),
            "{err}"
        );
        assert!(
            rx.borrow().is_excluded(&alice),
            "the previous configuration stays"
        );
        source
            .apply(Some(&json!({"data": {"excludeUsernames": "bob"}})))
            .unwrap();
        assert!(!rx.borrow().is_excluded(&alice));
    }

    /// A policy that does not compile is left out of the set, named with
    /// the reason (the source logs each such error once); the others still
    /// run.
    #[test]
    fn a_policy_that_does_not_compile_is_left_out_and_named() {
        let mut broken = (*policy("broken", None, "m")).clone();
        broken["spec"]["rules"][0]["validate"] = json!({"message": "m", "deny": {"conditions": {"any": [{"key": "{{ request.object.metadata.name }}", "operator": "Equalz", "value": "x"}]}}});
        let docs = [
            policy("plain", None, "a team label is required"),
            Arc::new(broken),
        ];
        let set = PolicySet::compile(&docs, 1);
        assert_eq!(set.errors.len(), 1, "{:?}", set.errors);
        assert_eq!(set.errors[0].name, "broken", "{:?}", set.errors);
        assert!(
            set.errors[0].error.contains("unknown operator \"Equalz\""),
            "{:?}",
            set.errors
        );
        let names: Vec<&str> = set.engine.policies().iter().map(|p| p.name()).collect();
        assert_eq!(names, ["plain"]);
    }
}
