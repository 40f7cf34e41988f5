//! Kyverno `mutate` rules of `kyverno.io/v1` ClusterPolicy / Policy:
//! `patchStrategicMerge` with Kyverno's anchors, `patchesJson6902` and
//! `foreach`, evaluated as data (the engine never changes a shared
//! resource: every step returns a new one).
//!
//! [`crate::Engine::mutate`] runs the mutating policies in order, each on
//! the output of the previous one, and returns a [`Mutation`]: the final
//! object and one [`MutationStep`] per policy that had a matching mutate
//! rule.
//!
//! - `spec`: the compiled `mutate` block.
//! - `anchors`: `+(key)`, `(key)` and `<(key)` resolved against the
//!   resource before the merge.
//! - `merge` and `schema`: the strategic merge and the merge keys of the
//!   built-in Kubernetes lists.
//! - `patchesJson6902`: RFC 6902 with Kyverno's options (`crate::k8s::json_patch`).
//! - `at_refs`: `{{@}}`, the resource's value at the patch leaf's path.
//! - `rule`: a policy's mutate rules, foreach included.

mod anchors;
mod at_refs;
mod merge;
mod rule;
mod schema;
mod spec;

use std::sync::Arc;

use serde_json::Value;

use crate::result::{RuleResult, Source};

pub(crate) use spec::{ForeachPatch, MutateForeach, MutateSpec};

/// What one mutating policy did to the resource.
#[derive(Debug, Clone, PartialEq)]
pub struct MutationStep {
    /// The policy's key (`namespace/name` for a namespaced `Policy`).
    pub policy: Arc<str>,
    /// The engine that produced it.
    pub source: Source,
    /// One result per matching mutate rule, in the order applied: `pass`
    /// when the rule patched the resource, `skip` when it did not apply or
    /// changed nothing, `error` when it could not be applied.
    pub results: Vec<RuleResult>,
    /// The resource after this policy (and every policy before it).
    pub object: Arc<Value>,
    /// Existing resources the policy's `mutate.targets` rules patched (or
    /// tried to), one per target and rule, in order; their results are
    /// in `results` too.
    pub targets: Vec<PatchedTarget>,
}

/// An existing resource a `mutate.targets` rule applied to.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchedTarget {
    /// The rule.
    pub rule: String,
    /// `pass` when patched, `skip` when unchanged or excluded, `error`.
    pub status: crate::Status,
    /// The rule result's message.
    pub message: String,
    /// The target after the patch (as found when not patched).
    pub object: Arc<Value>,
}

/// The outcome of [`crate::Engine::mutate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Mutation {
    /// The resource after every mutating policy (the input, shared, when
    /// nothing changed it).
    pub object: Arc<Value>,
    /// One step per policy that had a matching mutate rule, in order.
    pub steps: Vec<MutationStep>,
}

impl Mutation {
    /// Every mutate rule result, in the order the rules ran.
    pub fn results(&self) -> impl Iterator<Item = &RuleResult> {
        self.steps.iter().flat_map(|s| s.results.iter())
    }

    /// The resource as it was after `policy` (its key or its name), if
    /// that policy had a matching mutate rule.
    pub fn object_after(&self, policy: &str) -> Option<&Arc<Value>> {
        self.steps
            .iter()
            .find(|s| *s.policy == *policy || s.policy.rsplit('/').next() == Some(policy))
            .map(|s| &s.object)
    }

    /// Whether any rule changed the resource.
    pub fn changed(&self) -> bool {
        self.steps
            .iter()
            .any(|s| s.results.iter().any(|r| r.status == crate::Status::Pass))
    }
}

#[cfg(test)]
pub(crate) mod tests;
