//! The mutating webhook's remembered answers: a chain of mutating policies
//! whose patch depends on the request alone
//! ([`leash_policy::MutationKey`]) answers a request equal to one it has
//! answered with the same JSON Patch, without running again.
//!
//! What repeats at admission: kube-apiserver sends the mutating webhook
//! the pods of one ReplicaSet, Job or DaemonSet as one object (no name yet,
//! only `generateName`, no uid), and pods created by name differ in the
//! name alone, which the chain's key leaves out when no policy reads or
//! writes it. A chain runs some 30 rules on each pod of the policy
//! library's set; a remembered answer costs a copy and a map lookup.
//!
//! # Invariants
//! 1. Only CREATE requests without a uid in the object are remembered
//!    (an UPDATE's object has a new `resourceVersion` each time; a
//!    mutation with a uid is reported, which needs the run's results).
//! 2. A denial is remembered only when its message does not hold the
//!    object's name: the chain does not read the name, but a message may
//!    name the resource. A memo serves one endpoint, so one failure
//!    policy. Whether the object has a name is part of the key.
//! 3. A hit is decided by comparing the whole key text (every part of the
//!    request the chain may read), never by a hash alone.
//! 4. A memo belongs to one engine of one policy snapshot: a changed
//!    policy set builds new engines and new memos, so no answer outlives
//!    the policies that gave it. Namespace labels and the Namespace object
//!    are part of the key.
//! 5. Bounded: at most [`CAPACITY`] answers (plus those remembered by
//!    concurrent callers between two recounts), each for [`TTL`]; the
//!    cache's lock is held only inside its synchronous methods, never
//!    across an evaluation or an `.await`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leash_policy::{Engine, EvalRequest, MutationKey, Operation};
use leash_runtime::TtlCache;
use serde_json::Value;

/// How many answers one memo keeps.
pub(crate) const CAPACITY: usize = 2048;
/// How long an answer is kept.
pub(crate) const TTL: Duration = Duration::from_secs(120);

/// A remembered answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Remembered {
    /// Admitted with this JSON Patch (`None`: nothing to patch).
    Patch(Option<Vec<u8>>),
    /// Denied with this message.
    Denied(String),
}

/// An object as part of a key: written without `metadata.name` when
/// `without_name` (no copy made).
struct Object<'a> {
    value: &'a Value,
    without_name: bool,
}

impl serde::Serialize for Object<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(top) = self.value else {
            return self.value.serialize(s);
        };
        if !self.without_name {
            return self.value.serialize(s);
        }
        let mut map = s.serialize_map(Some(top.len()))?;
        for (k, v) in top {
            match (k.as_str(), v) {
                ("metadata", Value::Object(meta)) => {
                    map.serialize_entry(k, &MetadataWithoutName(meta))?;
                }
                _ => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

/// An object's metadata without its `name`.
struct MetadataWithoutName<'a>(&'a serde_json::Map<String, Value>);

impl serde::Serialize for MetadataWithoutName<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.0.iter().filter(|(k, _)| *k != "name") {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// The remembered answers of one mutating engine.
pub(crate) struct PatchMemo {
    /// The key of a request for a kind some policy names.
    by_kind: HashMap<String, MutationKey>,
    /// The key of a request for any other kind.
    keyed: MutationKey,
    answers: TtlCache<String, Arc<Remembered>>,
    /// About how many answers are kept: recounted every [`RECOUNT`]
    /// attempts to remember, counted up in between (invariant 5).
    kept: AtomicUsize,
    attempts: AtomicUsize,
}

/// How often [`PatchMemo::remember`] recounts what is kept.
const RECOUNT: usize = 64;

impl std::fmt::Debug for PatchMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PatchMemo")
            .field("keyed", &self.keyed)
            .field("by_kind", &self.by_kind)
            .finish_non_exhaustive()
    }
}

impl PatchMemo {
    /// A memo for `engine`'s answers; `None` when they depend on more than
    /// the request.
    pub(crate) fn for_engine(engine: &Engine) -> Option<PatchMemo> {
        let keyed = engine.mutation_key();
        let mut by_kind = HashMap::new();
        for p in engine.policies() {
            for (spec, _) in p.mutate_webhook_operations() {
                if let Some(kind) = crate::snapshot::kind_of(&spec) {
                    by_kind
                        .entry(kind.to_string())
                        .or_insert_with(|| engine.mutation_key_for(kind));
                }
            }
        }
        for m in engine.mutating_policies() {
            for (group, _, plural) in m.matched_resources() {
                if let Some(k) = leash_policy::kinds::by_resource(&group, &plural) {
                    by_kind
                        .entry(k.kind.to_string())
                        .or_insert_with(|| engine.mutation_key_for(k.kind));
                }
            }
        }
        let remembers =
            keyed != MutationKey::Unkeyed || by_kind.values().any(|k| *k != MutationKey::Unkeyed);
        (remembers && !engine.is_empty()).then(|| PatchMemo {
            by_kind,
            keyed,
            answers: TtlCache::new(TTL),
            kept: AtomicUsize::new(0),
            attempts: AtomicUsize::new(0),
        })
    }

    /// What a request is remembered by; `None` when it is not
    /// remembered (invariant 1).
    pub(crate) fn key(&self, req: &EvalRequest) -> Option<String> {
        if req.operation != Operation::Create
            || req.old_object.is_some()
            || req.object["metadata"]["uid"]
                .as_str()
                .is_some_and(|u| !u.is_empty())
        {
            return None;
        }
        let keyed = self.by_kind.get(req.kind()).copied().unwrap_or(self.keyed);
        if keyed == MutationKey::Unkeyed {
            return None;
        }
        let u = &req.user_info;
        let without_name = keyed == MutationKey::RequestButName;
        let key = (
            !req.name().is_empty(),
            Object {
                value: &req.object,
                without_name,
            },
            [&u.username, &u.uid],
            &u.groups,
            &u.roles,
            &u.cluster_roles,
            &req.namespace_labels,
            req.namespace_object.as_deref(),
            &req.request_resource,
        );
        serde_json::to_string(&key).ok()
    }

    /// The answer remembered for `key`.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Remembered>> {
        self.answers.get(key)
    }

    /// Remembers `answer`, given to `req`, as the answer for `key`: a
    /// denial only when its message does not hold the object's name
    /// (invariant 2), and only while the memo has room (invariant 5).
    pub(crate) fn remember(&self, key: String, req: &EvalRequest, answer: Remembered) {
        if let Remembered::Denied(message) = &answer
            && !req.name().is_empty()
            && message.contains(req.name())
        {
            return;
        }
        if self
            .attempts
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(RECOUNT)
        {
            self.kept.store(self.answers.len(), Ordering::Relaxed);
        }
        if self.kept.load(Ordering::Relaxed) >= CAPACITY {
            return;
        }
        self.kept.fetch_add(1, Ordering::Relaxed);
        self.answers.insert(key, Arc::new(answer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn memo() -> PatchMemo {
        let mut engine = Engine::new();
        let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "team"}, "spec": {"rules": [{"name": "r",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"+(team)": "a"}}}}}]}});
        assert!(engine.add_json(&policy).unwrap());
        PatchMemo::for_engine(&engine).expect("a memo")
    }

    fn pod(name: Option<&str>) -> EvalRequest {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "default", "generateName": "web-"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        if let Some(n) = name {
            p["metadata"]["name"] = json!(n);
        }
        EvalRequest::create(Arc::new(p))
    }

    #[test]
    fn names_are_left_out_but_having_one_is_not() {
        let m = memo();
        assert_eq!(m.key(&pod(Some("a"))), m.key(&pod(Some("b"))));
        assert_ne!(m.key(&pod(Some("a"))), m.key(&pod(None)));
        // Everything else of the metadata is kept.
        let mut labelled = pod(Some("a"));
        Arc::make_mut(&mut labelled.object)["metadata"]["labels"] = json!({"team": "b"});
        assert_ne!(m.key(&labelled), m.key(&pod(Some("a"))));
        let key = m.key(&pod(Some("a"))).unwrap();
        assert!(
            key.contains("\"generateName\":\"web-\"") && !key.contains("\"a\""),
            "{key}"
        );
        let mut update = pod(Some("a"));
        update.operation = Operation::Update;
        assert_eq!(m.key(&update), None, "only creations are remembered");
        let mut with_uid = pod(Some("a"));
        Arc::make_mut(&mut with_uid.object)["metadata"]["uid"] = json!("u-1");
        assert_eq!(m.key(&with_uid), None, "a mutation with a uid is reported");
    }

    #[test]
    fn a_denial_naming_the_object_is_not_remembered() {
        let m = memo();
        let (a, b) = (pod(Some("web-1")), pod(Some("web-2")));
        let key = m.key(&a).unwrap();
        m.remember(
            key.clone(),
            &a,
            Remembered::Denied("rule r: Pod/web-1 failed".into()),
        );
        assert_eq!(m.get(&m.key(&b).unwrap()), None);
        m.remember(key, &a, Remembered::Denied("rule r: no such key: x".into()));
        assert_eq!(
            m.get(&m.key(&b).unwrap()).as_deref(),
            Some(&Remembered::Denied("rule r: no such key: x".into()))
        );
    }
}
