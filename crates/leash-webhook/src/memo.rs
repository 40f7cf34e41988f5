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
//! 2. Only answers whose every result passed or was skipped: a failing
//!    policy's message names the resource, and the answer depends on the
//!    endpoint's failure policy.
//! 3. A hit is decided by comparing the whole key text (every part of the
//!    request the chain may read), never by a hash alone.
//! 4. A memo belongs to one engine of one policy snapshot: a changed
//!    policy set builds new engines and new memos, so no answer outlives
//!    the policies that gave it. Namespace labels and the Namespace object
//!    are part of the key.
//! 5. Bounded: at most [`CAPACITY`] answers, each for [`TTL`]; the
//!    cache's lock is held only inside its synchronous methods, never
//!    across an evaluation or an `.await`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use leash_policy::{Engine, EvalRequest, MutationKey, Operation, RuleResult, Status};
use leash_runtime::TtlCache;
use serde_json::{Value, json};

/// How many answers one memo keeps.
pub(crate) const CAPACITY: usize = 2048;
/// How long an answer is kept.
pub(crate) const TTL: Duration = Duration::from_secs(120);

/// A JSON Patch answered (`None`: nothing to patch).
pub(crate) type Patch = Arc<Option<Vec<u8>>>;

/// The remembered answers of one mutating engine.
pub(crate) struct PatchMemo {
    /// The key of a request for a kind some policy names.
    by_kind: HashMap<String, MutationKey>,
    /// The key of a request for any other kind.
    keyed: MutationKey,
    answers: TtlCache<String, Patch>,
}

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
        let mut object = (*req.object).clone();
        if keyed == MutationKey::RequestButName
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("name");
        }
        let u = &req.user_info;
        let key = json!([
            object,
            [&u.username, &u.uid],
            u.groups,
            u.roles,
            u.cluster_roles,
            req.namespace_labels,
            req.namespace_object.as_deref(),
            req.request_resource,
        ]);
        Some(key.to_string())
    }

    /// The answer remembered for `key`.
    pub(crate) fn get(&self, key: &str) -> Option<Patch> {
        self.answers.get(key)
    }

    /// Remembers `patch` as the answer for `key` when every one of the
    /// run's `results` passed or was skipped (invariant 2) and the memo has
    /// room (invariant 5).
    pub(crate) fn remember<'r>(
        &self,
        key: String,
        results: impl IntoIterator<Item = &'r RuleResult>,
        patch: &Option<Vec<u8>>,
    ) {
        if results
            .into_iter()
            .any(|r| matches!(r.status, Status::Error | Status::Fail))
        {
            return;
        }
        if self.answers.len() >= CAPACITY {
            return;
        }
        self.answers.insert(key, Arc::new(patch.clone()));
    }
}
