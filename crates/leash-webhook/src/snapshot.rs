//! What the webhook derives from one policy set, once per snapshot (never per
//! request): the admission-enabled policies by result key, the kinds they can
//! match, and the references the readiness recorder reports.
//!
//! Everything here is immutable once built and shared as `Arc<Snapshot>`
//! (seed 000: shared policy objects are never mutated; evaluation reads only).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use leash_policy::vpol::{ValidatingPolicy, ValidationAction};
use leash_policy::{Engine, FailureAction, Policy, RuleResult, Shared, Source, Status};

use crate::memo::PatchMemo;
use crate::recorder::{Gvr, PolicyRef};

/// A compiled policy the webhook serves.
#[derive(Debug, Clone)]
pub(crate) enum Served {
    Kyverno(Arc<Policy>),
    Validating(Arc<ValidatingPolicy>),
}

impl Served {
    /// `spec.failurePolicy: Ignore`.
    pub(crate) fn ignores_webhook_failures(&self) -> bool {
        match self {
            Served::Kyverno(p) => p.ignores_webhook_failures(),
            Served::Validating(p) => p.ignores_webhook_failures(),
        }
    }
}

/// One policy set as the webhook serves it.
#[derive(Debug)]
pub(crate) struct Snapshot {
    pub(crate) engine: Arc<Engine>,
    /// Admission-enabled policies by (source, the `policy` of their results).
    served: HashMap<(SourceKey, Arc<str>), Served>,
    /// Kinds some admission-enabled policy may match; `None`: any kind.
    kinds: Option<HashSet<String>>,
    /// Whether the set holds GeneratingPolicies or MutatingPolicies that
    /// mutate existing resources (their triggers are admitted through this
    /// webhook too; they give no verdict).
    generating: bool,
    /// The served policies, each with the resources its status checks.
    refs: BTreeMap<PolicyRef, Vec<Gvr>>,
    /// What the mutating webhook runs.
    pub(crate) mutation: Mutators,
}

/// The mutate side of a policy set: one engine per mutating endpoint,
/// each holding the admission-enabled policies that patch the admitted
/// object (classic `mutate` rules without `targets`, MutatingPolicies) of
/// that failure policy, in the set's order, and every exception.
#[derive(Debug)]
pub(crate) struct Mutators {
    /// Every mutating policy (`/mutate`).
    pub(crate) all: Mutator,
    /// Those with `failurePolicy: Fail` (`/mutate/fail`).
    pub(crate) fail: Mutator,
    /// Those with `failurePolicy: Ignore` (`/mutate/ignore`).
    pub(crate) ignore: Mutator,
    /// Kinds some mutating policy may match; `None`: any kind.
    kinds: Option<HashSet<String>>,
}

impl Mutators {
    fn build(engine: &Engine, refs: &mut BTreeMap<PolicyRef, Vec<Gvr>>) -> Mutators {
        let (mut all, mut fail, mut ignore) = (Engine::new(), Engine::new(), Engine::new());
        let mut kinds = Some(HashSet::new());
        let mut resources = Vec::new();
        for p in engine.policies().iter().filter(|p| p.admission()) {
            let ops = p.mutate_webhook_operations();
            if ops.is_empty() {
                continue;
            }
            for (spec, _) in ops {
                match (kind_of(&spec), kinds.as_mut()) {
                    (Some(k), Some(set)) => {
                        set.insert(k.to_string());
                    }
                    (None, _) => kinds = None,
                    _ => {}
                }
            }
            let side = if p.ignores_webhook_failures() {
                &mut ignore
            } else {
                &mut fail
            };
            side.add_shared(Shared::Policy(p.clone()));
            all.add_shared(Shared::Policy(p.clone()));
        }
        for m in engine.mutating_policies().iter().filter(|m| m.admission()) {
            refs.insert(
                PolicyRef::new(m.kind(), m.namespace(), m.name()),
                m.declared_resources(),
            );
            resources.extend(m.matched_resources());
            let side = if m.ignores_failures() {
                &mut ignore
            } else {
                &mut fail
            };
            side.add_shared(Shared::MutatingPolicy(m.clone()));
            all.add_shared(Shared::MutatingPolicy(m.clone()));
        }
        // ImageValidatingPolicies pin their images' digests here
        // (`mutateDigest`).
        for v in engine
            .validating_policies()
            .iter()
            .filter(|v| v.admission() && v.mutates_digests())
        {
            refs.insert(
                PolicyRef::new(v.kind(), v.namespace(), v.name()),
                v.declared_resources(),
            );
            resources.extend(v.matched_resources());
            let side = if v.ignores_webhook_failures() {
                &mut ignore
            } else {
                &mut fail
            };
            side.add_shared(Shared::ValidatingPolicy(v.clone()));
            all.add_shared(Shared::ValidatingPolicy(v.clone()));
        }
        widen_kinds(&mut kinds, resources);
        if !all.is_empty() {
            for e in engine.exceptions() {
                for side in [&mut all, &mut fail, &mut ignore] {
                    side.add_shared(Shared::Exception(e.clone()));
                }
            }
        }
        Mutators {
            all: Mutator::new(all),
            fail: Mutator::new(fail),
            ignore: Mutator::new(ignore),
            kinds,
        }
    }

    /// Whether some mutating policy may match `kind`.
    pub(crate) fn may_match(&self, kind: &str) -> bool {
        !self.all.engine.is_empty() && self.kinds.as_ref().is_none_or(|k| k.contains(kind))
    }
}

/// One mutating endpoint's engine, with its remembered answers when they
/// depend on the request alone ([`PatchMemo`]).
#[derive(Debug, Clone)]
pub(crate) struct Mutator {
    pub(crate) engine: Arc<Engine>,
    pub(crate) memo: Option<Arc<PatchMemo>>,
}

impl Mutator {
    fn new(engine: Engine) -> Mutator {
        Mutator {
            memo: PatchMemo::for_engine(&engine).map(Arc::new),
            engine: Arc::new(engine),
        }
    }
}

/// Adds the kinds of `resources` (`(group, version, plural)`) to `kinds`;
/// a wildcard, or a resource that is not a built-in kind, makes it any
/// kind (`None`).
fn widen_kinds(kinds: &mut Option<HashSet<String>>, resources: Vec<(String, String, String)>) {
    for (group, _, plural) in resources {
        let known = (plural != "*" && group != "*")
            .then(|| leash_policy::kinds::by_resource(&group, &plural))
            .flatten();
        match (known, kinds.as_mut()) {
            (Some(k), Some(set)) => {
                set.insert(k.kind.to_string());
            }
            (None, _) => *kinds = None,
            _ => {}
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum SourceKey {
    Kyverno,
    Validating,
    /// MutatingPolicy, GeneratingPolicy, DeletingPolicy and
    /// ValidatingAdmissionPolicy results (not served by this validating
    /// snapshot).
    Other,
}

fn source_key(s: Source) -> SourceKey {
    match s {
        Source::Kyverno => SourceKey::Kyverno,
        Source::ValidatingPolicy | Source::ImageValidatingPolicy => SourceKey::Validating,
        Source::MutatingPolicy
        | Source::GeneratingPolicy
        | Source::DeletingPolicy
        | Source::ValidatingAdmissionPolicy
        | Source::MutatingAdmissionPolicy => SourceKey::Other,
    }
}

/// The kind part of a Kyverno kind string (`Pod`, `v1/Pod`,
/// `apps/v1/Deployment`, `Pod/exec`); `None` for wildcards.
pub(crate) fn kind_of(spec: &str) -> Option<&str> {
    if spec.contains(['*', '?']) {
        return None;
    }
    spec.split('/')
        .find(|p| p.starts_with(|c: char| c.is_ascii_uppercase()))
}

impl Snapshot {
    pub(crate) fn build(engine: Arc<Engine>) -> Snapshot {
        let mut served = HashMap::new();
        let mut kinds = Some(HashSet::new());
        let mut refs = BTreeMap::new();
        for p in engine.policies().iter().filter(|p| p.admission()) {
            served.insert(
                (SourceKey::Kyverno, p.key().clone()),
                Served::Kyverno(p.clone()),
            );
            refs.insert(
                PolicyRef::new(p.kind(), p.namespace(), p.name()),
                Vec::new(),
            );
            for spec in p.matched_kinds().into_iter().chain(p.trigger_kinds()) {
                match (kind_of(&spec), kinds.as_mut()) {
                    (Some(k), Some(set)) => {
                        set.insert(k.to_string());
                    }
                    (None, _) => kinds = None,
                    _ => {}
                }
            }
        }
        let mut resources = Vec::new();
        for v in engine
            .validating_policies()
            .iter()
            .filter(|v| v.admission())
        {
            served.insert(
                (SourceKey::Validating, Arc::from(v.name())),
                Served::Validating(v.clone()),
            );
            refs.insert(
                PolicyRef::new(v.kind(), v.namespace(), v.name()),
                v.declared_resources(),
            );
            resources.extend(v.matched_resources());
        }
        for g in engine.generating_policies() {
            // Served at admission (its triggers' UpdateRequests): its
            // status says so, as a ValidatingPolicy's does.
            refs.insert(
                PolicyRef::new(g.kind(), g.namespace(), g.name()),
                g.matched_resources(),
            );
            resources.extend(g.matched_resources());
        }
        // MutatingPolicies' mutate-existing triggers come through here too.
        let mut mutating_existing = false;
        for m in engine
            .mutating_policies()
            .iter()
            .filter(|m| m.admission() && m.mutates_existing())
        {
            mutating_existing = true;
            resources.extend(m.matched_resources());
        }
        widen_kinds(&mut kinds, resources);
        let mutation = Mutators::build(&engine, &mut refs);
        Snapshot {
            mutation,
            generating: !engine.generating_policies().is_empty() || mutating_existing,
            engine,
            served,
            kinds,
            refs,
        }
    }

    /// Whether some admission-enabled policy may match `kind`.
    pub(crate) fn may_match(&self, kind: &str) -> bool {
        (!self.served.is_empty() || self.generating)
            && self.kinds.as_ref().is_none_or(|k| k.contains(kind))
    }

    /// The policies served, for the readiness recorder.
    pub(crate) fn refs(&self) -> &BTreeMap<PolicyRef, Vec<Gvr>> {
        &self.refs
    }

    /// The served policy a result belongs to; `None` for results of
    /// policies that are not admission-enabled (they are dropped).
    pub(crate) fn policy_of(&self, r: &RuleResult) -> Option<&Served> {
        self.served.get(&(source_key(r.source), r.policy.clone()))
    }
}

/// What a review's results mean for the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) blocked: bool,
    /// Non-pass, non-skip results by policy name, then rule (Kyverno's
    /// `GetBlockedMessages` input).
    pub(crate) failures:
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    pub(crate) warnings: Vec<String>,
}

/// Kyverno's blocking rules: a failed or errored rule of an Enforce
/// policy/rule blocks; a ValidatingPolicy blocks when `validationActions`
/// has Deny; `Warn` adds `policy NAME.RULE: MESSAGE` warnings. Audit
/// failures allow.
pub(crate) fn verdict(snapshot: &Snapshot, results: &[RuleResult]) -> Verdict {
    let mut v = Verdict {
        blocked: false,
        failures: Default::default(),
        warnings: Vec::new(),
    };
    for r in results {
        if matches!(r.status, Status::Pass | Status::Skip) {
            continue;
        }
        let Some(policy) = snapshot.policy_of(r) else {
            continue;
        };
        let name = match policy {
            Served::Kyverno(p) => p.name().to_string(),
            Served::Validating(p) => p.name().to_string(),
        };
        let failing = matches!(r.status, Status::Fail | Status::Error);
        // Kyverno evaluates Enforce and Audit policies apart: only the
        // enforcing ones are named in a denial.
        let enforcing = match policy {
            Served::Kyverno(p) => p.rule_failure_action(&r.rule) == FailureAction::Enforce,
            Served::Validating(p) => p.validation_actions().contains(&ValidationAction::Deny),
        };
        match policy {
            Served::Kyverno(_) => {
                if failing && enforcing {
                    v.blocked = true;
                }
            }
            Served::Validating(p) => {
                let actions = p.validation_actions();
                if failing && enforcing {
                    v.blocked = true;
                }
                if (failing || r.status == Status::Warn)
                    && actions.contains(&ValidationAction::Warn)
                {
                    v.warnings
                        .push(format!("policy {name}.{}: {}", r.rule, r.message));
                }
            }
        }
        if enforcing && r.message != "preconditions not met" {
            v.failures
                .entry(name)
                .or_default()
                .insert(r.rule.clone(), r.message.clone());
        }
    }
    v
}

/// Kyverno's denial message (`GetBlockedMessages`): the resource as
/// `KIND/NAMESPACE/NAME`, then the failures as the YAML map
/// `policy: {rule: message}` (keys sorted, as yaml.v2 sorts them).
///
/// Differences from yaml.v2: no folding of lines longer than 80 columns, and
/// strings with line breaks are double-quoted instead of literal blocks.
pub(crate) fn blocked_message(
    resource_name: &str,
    failures: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
) -> String {
    let mut yaml = String::new();
    for (policy, rules) in failures {
        yaml.push_str(&yaml_scalar(policy));
        yaml.push_str(":\n");
        for (rule, message) in rules {
            yaml.push_str("  ");
            yaml.push_str(&yaml_scalar(rule));
            yaml.push_str(": ");
            yaml.push_str(&yaml_scalar(message));
            yaml.push('\n');
        }
    }
    format!("\n\nresource {resource_name} was blocked due to the following policies \n\n{yaml}")
}

/// A YAML scalar as yaml.v2 writes it: plain when unambiguous, otherwise
/// single-quoted, or double-quoted when it holds line breaks or control
/// characters.
pub(crate) fn yaml_scalar(s: &str) -> String {
    let special_start = s.starts_with([
        '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@',
        '`', ' ',
    ]);
    let reserved = matches!(
        s.to_ascii_lowercase().as_str(),
        "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null" | "~"
    ) || s.parse::<f64>().is_ok();
    let needs_double = s.chars().any(|c| c.is_control());
    if needs_double {
        return serde_json::to_string(s).unwrap_or_default();
    }
    if s.is_empty()
        || special_start
        || reserved
        || s.ends_with([' ', ':'])
        || s.contains(": ")
        || s.contains(" #")
    {
        return format!("'{}'", s.replace('\'', "''"));
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn blocked_message_matches_kyverno() {
        // kyverno/kyverno pkg/webhooks/utils/block_test.go, TestGetBlockedMessages.
        let mut f = BTreeMap::new();
        f.insert(
            "test".to_string(),
            BTreeMap::from([
                ("rule-fail".to_string(), "message fail".to_string()),
                ("rule-error".to_string(), "message error".to_string()),
            ]),
        );
        assert_eq!(
            blocked_message("foo/bar/baz", &f),
            "\n\nresource foo/bar/baz was blocked due to the following policies \n\ntest:\n  rule-error: message error\n  rule-fail: message fail\n"
        );
    }

    #[test]
    fn yaml_scalars() {
        assert_eq!(yaml_scalar("plain text."), "plain text.");
        assert_eq!(
            yaml_scalar("validation error: no. rule r failed at path /a/"),
            "'validation error: no. rule r failed at path /a/'"
        );
        assert_eq!(yaml_scalar("it's: x"), "'it''s: x'");
        assert_eq!(yaml_scalar("true"), "'true'");
        assert_eq!(yaml_scalar("a\nb"), "\"a\\nb\"");
        assert_eq!(yaml_scalar(""), "''");
    }

    #[test]
    fn kinds_of_specs() {
        assert_eq!(kind_of("Pod"), Some("Pod"));
        assert_eq!(kind_of("apps/v1/Deployment"), Some("Deployment"));
        assert_eq!(kind_of("v1/Pod"), Some("Pod"));
        assert_eq!(kind_of("Pod/exec"), Some("Pod"));
        assert_eq!(kind_of("*"), None);
        assert_eq!(kind_of("apps/v1/*"), None);
    }
}
