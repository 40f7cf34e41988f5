//! The `ValidatingWebhookConfiguration` and the
//! `MutatingWebhookConfiguration` ([`build_mutating_configuration`]): built
//! from the policy set (pure functions) and kept in the cluster by the
//! [`Registrar`].
//!
//! As Kyverno's webhook controller: one webhook per failure policy
//! (`validate.kyverno.svc-fail` with `failurePolicy: Fail`,
//! `validate.kyverno.svc-ignore` with `Ignore`; empty ones are left out),
//! rules derived from the kinds the admission-enabled policies match
//! (`apiGroups`, `apiVersions`, `resources` — `pods` also brings
//! `pods/ephemeralcontainers` — and `scope`), every operation (CREATE,
//! UPDATE, DELETE, CONNECT: Kyverno's default when a rule names none; the
//! engine filters by operation), `sideEffects: None`,
//! `admissionReviewVersions: [v1]`, `matchPolicy: Equivalent`.
//!
//! Each policy goes to the webhook of its `spec.failurePolicy`, and each
//! webhook evaluates only its own policies, so a request matched by both
//! is evaluated once per policy. A classic rule's webhook operations are
//! Kyverno's: those its match names, all four when it names none, less
//! those an exclude filter names by operation alone
//! ([`leash_policy::Policy::webhook_operations`]); a ValidatingPolicy's or
//! GeneratingPolicy's are those of its resource rules.
//! Custom kinds without a group in the policy become `apiGroups: ["*"]`
//! with the guessed plural (no discovery).
//!
//! # Invariants (Registrar)
//! 1. Every API call is raced against the token; after cancellation only the
//!    optional cleanup delete runs, bounded by `shutdown_timeout`.
//! 2. The configuration is written only when the desired one changes (or a
//!    write failed, retried after `retry_interval`); get + replace with the
//!    read `resourceVersion`, so a concurrent writer causes a conflict, and a
//!    retry, never a lost update.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::api::{Api, DeleteParams, PostParams};
use leash_policy::Engine;
use leash_runtime::CancellationToken;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::server::FailurePolicy;
use crate::settings::{ServiceRef, Settings};
use crate::snapshot::kind_of;

/// Where the API server sends reviews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientTarget {
    /// `clientConfig.url` (the prefix; `/fail`, `/ignore` appended).
    Url(String),
    /// `clientConfig.service`.
    Service(ServiceRef),
}

/// One resource rule key: (group, version, scope).
type RuleKey = (String, String, String);

/// Resource rules: key → resource → the operations sent for it.
type Rules = BTreeMap<RuleKey, BTreeMap<String, BTreeSet<&'static str>>>;

const OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

/// The resources the policy validation webhook sees: every kind the
/// engine compiles, by group.
const POLICY_RESOURCES: &[(&str, &[&str])] = &[
    (
        "kyverno.io",
        &["clusterpolicies", "policies", "policyexceptions"],
    ),
    (
        "policies.kyverno.io",
        &[
            "validatingpolicies",
            "namespacedvalidatingpolicies",
            "imagevalidatingpolicies",
            "namespacedimagevalidatingpolicies",
            "mutatingpolicies",
            "namespacedmutatingpolicies",
            "generatingpolicies",
            "namespacedgeneratingpolicies",
            "deletingpolicies",
            "namespaceddeletingpolicies",
            "policyexceptions",
        ],
    ),
];

/// The webhook rules of one kind spec (`Pod`, `apps/v1/Deployment`,
/// `v1/Pod`, `Pod/exec`, `*`).
fn rules_of_kind(spec: &str, ops: &[&'static str], out: &mut Rules) {
    let Some(kind) = kind_of(spec) else {
        insert(out, ("*".into(), "*".into(), "*".into()), "*".into(), ops);
        return;
    };
    let parts: Vec<&str> = spec.split('/').collect();
    let pos = parts.iter().position(|p| *p == kind).unwrap_or(0);
    let sub = parts.get(pos + 1).copied();
    let builtin = leash_policy::kinds::by_kind(kind);
    let (group, version) = match pos {
        2 => (parts[0].to_string(), parts[1].to_string()),
        1 => (
            builtin.map_or("*", |b| b.group).to_string(),
            parts[0].to_string(),
        ),
        _ => match builtin {
            Some(b) => (b.group.to_string(), b.version.to_string()),
            None => ("*".to_string(), "*".to_string()),
        },
    };
    let plural = builtin.map_or_else(
        || leash_policy::kinds::plural_of(kind),
        |b| b.plural.to_string(),
    );
    let scope = match builtin {
        Some(b) if b.namespaced => "Namespaced",
        Some(_) => "Cluster",
        None => "*",
    };
    let key = (group, version, scope.to_string());
    match sub {
        Some(s) => insert(out, key, format!("{plural}/{s}"), ops),
        None => insert(out, key, plural, ops),
    }
}

/// A CEL policy's resources and operations, in the rules of the webhook
/// of its failure policy.
fn add_cel(
    fail: &mut Rules,
    ignore: &mut Rules,
    ignores: bool,
    resources: Vec<leash_policy::vpol::ResourceOperations>,
) {
    let rules = if ignores { ignore } else { fail };
    for ((group, version, plural), ops) in resources {
        let scope = scope_of(&group, &plural);
        insert(rules, (group, version, scope), plural, &ops);
    }
}

/// Adds `resource` (and, for pods, `pods/ephemeralcontainers`) with `ops`.
fn insert(out: &mut Rules, key: RuleKey, resource: String, ops: &[&'static str]) {
    let resources = out.entry(key).or_default();
    if resource == "pods" {
        resources
            .entry("pods/ephemeralcontainers".to_string())
            .or_default()
            .extend(ops);
    }
    resources.entry(resource).or_default().extend(ops);
}

/// API groups whose objects an operator needs to repair a cluster whose
/// webhook is down: policies and reports (to delete the policy that
/// blocks), webhook configurations and CRDs, leases (leader election of
/// every controller), RBAC, certificate signing (kubelet bootstrap),
/// token and access reviews, aggregated APIs.
const RECOVERY_GROUPS: [&str; 13] = [
    "kyverno.io",
    "policies.kyverno.io",
    "wgpolicyk8s.io",
    "reports.kyverno.io",
    "openreports.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "coordination.k8s.io",
    "rbac.authorization.k8s.io",
    "certificates.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
];
/// Core resources of the same kind: namespaces (to remove a broken
/// workload's), nodes (kubelets update them), events.
const RECOVERY_CORE: [&str; 3] = ["namespaces", "nodes", "events"];

/// The CEL condition (over `request`) that a request is for one of the
/// resources an operator needs to recover ([`RECOVERY_GROUPS`],
/// [`RECOVERY_CORE`]).
fn recovery_condition() -> String {
    let quoted = |xs: &[&str]| {
        xs.iter()
            .map(|x| format!("'{x}'"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "request.resource.group in [{}] || (request.resource.group == '' && request.resource.resource in [{}])",
        quoted(&RECOVERY_GROUPS),
        quoted(&RECOVERY_CORE)
    )
}

/// Whether rules may send requests for a recovery resource.
fn touches_recovery(rules: &Rules) -> bool {
    rules.iter().any(|((group, _, _), resources)| {
        group == "*"
            || RECOVERY_GROUPS.contains(&group.as_str())
            || (group.is_empty()
                && resources.keys().any(|r| {
                    let base = r.split('/').next().unwrap_or(r);
                    base == "*" || RECOVERY_CORE.contains(&base)
                }))
    })
}

/// The rules of the admission-enabled classic policies, by failure
/// policy (`Fail`, `Ignore`), from the kinds and operations `ops_of` gives.
fn classic_rules(
    engine: &Engine,
    ops_of: impl Fn(&leash_policy::Policy) -> Vec<(String, Vec<&'static str>)>,
) -> (Rules, Rules) {
    let mut fail = Rules::new();
    let mut ignore = Rules::new();
    for p in engine.policies().iter().filter(|p| p.admission()) {
        let rules = if p.ignores_webhook_failures() {
            &mut ignore
        } else {
            &mut fail
        };
        for (k, ops) in ops_of(p) {
            rules_of_kind(&k, &ops, rules);
        }
    }
    (fail, ignore)
}

/// What the webhooks never send, whatever the policies match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions {
    /// Namespaces whose objects (and the Namespace objects themselves)
    /// are never sent: leash's own (so it can always start again) and the
    /// system ones (`--webhook-exclude-namespaces`, Kyverno's `kube-system`
    /// default).
    pub namespaces: Vec<String>,
}

/// The configuration for `engine`'s admission-enabled policies.
///
/// Two safeguards keep a webhook that is down from locking the cluster
/// (Kyverno's #16177): every webhook has a `namespaceSelector` leaving out
/// `exclusions.namespaces`; and requests for the resources an operator
/// needs to recover (see [`RECOVERY_GROUPS`]) never go to the `Fail`
/// webhook: a third webhook, `validate.kyverno.svc-fail-recovery`, sends
/// them to the same policies with `failurePolicy: Ignore`. While leash
/// answers, they are judged as before; while it cannot, they are allowed.
pub fn build_configuration(
    name: &str,
    target: &ClientTarget,
    ca_pem: &str,
    timeout_seconds: u8,
    exclusions: &Exclusions,
    engine: &Engine,
) -> ValidatingWebhookConfiguration {
    let (mut fail, mut ignore) = classic_rules(engine, leash_policy::Policy::webhook_operations);
    for v in engine
        .validating_policies()
        .iter()
        .filter(|v| v.admission())
    {
        add_cel(
            &mut fail,
            &mut ignore,
            v.ignores_webhook_failures(),
            v.matched_resource_operations(),
        );
    }
    // A GeneratingPolicy's triggers come through the `Fail` webhook too.
    for g in engine.generating_policies() {
        add_cel(
            &mut fail,
            &mut ignore,
            false,
            g.matched_resource_operations(),
        );
    }
    // A MutatingPolicy with `evaluation.mutateExisting`: its triggers'
    // UpdateRequests are created here, as classic mutate-existing ones.
    for m in engine.mutating_policies() {
        if m.admission() && m.mutates_existing() {
            add_cel(
                &mut fail,
                &mut ignore,
                m.ignores_failures(),
                m.matched_resource_operations(),
            );
        }
    }
    let common = Common::new(target, ca_pem, timeout_seconds, exclusions);
    let webhook = |name_suffix: &str,
                   suffix: &str,
                   policy: FailurePolicy,
                   condition: Option<(&str, String)>,
                   rules: Rules| {
        let h = common.hook("validate", name_suffix, suffix, policy, condition, rules);
        ValidatingWebhook {
            name: h.name,
            client_config: h.client_config,
            failure_policy: h.failure_policy,
            namespace_selector: h.namespace_selector,
            match_conditions: h.match_conditions,
            match_policy: h.match_policy,
            side_effects: "None".to_string(),
            admission_review_versions: h.admission_review_versions,
            timeout_seconds: h.timeout_seconds,
            rules: h.rules,
            ..ValidatingWebhook::default()
        }
    };
    let mut webhooks = by_failure_policy(fail, ignore, webhook);
    // Kyverno's policy validation webhook: invalid policies are refused
    // before they are stored (see the server's `policy_review`). It fails
    // open (Kyverno's fails closed): policies are among what a cluster needs
    // to recover (issue 38), and a policy stored while leash is down is
    // still compiled when it is read, and marked not Ready if invalid.
    let mut policy_rules = Rules::new();
    for (group, resources) in POLICY_RESOURCES {
        for resource in *resources {
            insert(
                &mut policy_rules,
                (group.to_string(), "*".into(), "*".into()),
                resource.to_string(),
                &["CREATE", "UPDATE"],
            );
        }
    }
    let mut policy_webhook = webhook(
        "policy",
        "policy",
        FailurePolicy::Ignore,
        None,
        policy_rules,
    );
    policy_webhook.name = "validate-policy.kyverno.svc".to_string();
    policy_webhook.namespace_selector = None;
    webhooks.push(policy_webhook);
    ValidatingWebhookConfiguration {
        metadata: managed_metadata(name),
        webhooks: Some(webhooks),
    }
}

/// What the webhooks of both configurations share.
struct Common {
    target: ClientTarget,
    ca_bundle: ByteString,
    timeout_seconds: i32,
    namespace_selector: Option<LabelSelector>,
}

/// A webhook's fields common to `ValidatingWebhook` and `MutatingWebhook`.
struct Hook {
    name: String,
    client_config: WebhookClientConfig,
    failure_policy: Option<String>,
    namespace_selector: Option<LabelSelector>,
    match_conditions: Option<Vec<MatchCondition>>,
    match_policy: Option<String>,
    admission_review_versions: Vec<String>,
    timeout_seconds: Option<i32>,
    rules: Option<Vec<RuleWithOperations>>,
}

impl Common {
    fn new(
        target: &ClientTarget,
        ca_pem: &str,
        timeout_seconds: u8,
        exclusions: &Exclusions,
    ) -> Common {
        Common {
            target: target.clone(),
            ca_bundle: ByteString(ca_pem.as_bytes().to_vec()),
            timeout_seconds: i32::from(timeout_seconds),
            namespace_selector: (!exclusions.namespaces.is_empty()).then(|| LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "kubernetes.io/metadata.name".to_string(),
                    operator: "NotIn".to_string(),
                    values: Some(exclusions.namespaces.clone()),
                }]),
                match_labels: None,
            }),
        }
    }

    /// The webhook `{kind}.kyverno.svc-{name_suffix}` calling
    /// `/{kind}/{suffix}` (`kind`: `validate` or `mutate`; the target's
    /// prefix ends in `/validate`, and `/mutate` is its sibling).
    fn hook(
        &self,
        kind: &str,
        name_suffix: &str,
        suffix: &str,
        policy: FailurePolicy,
        condition: Option<(&str, String)>,
        rules: Rules,
    ) -> Hook {
        let sibling = |prefix: &str| {
            let prefix = prefix.trim_end_matches('/');
            let base = prefix.strip_suffix("/validate").unwrap_or(prefix);
            format!("{base}/{kind}/{suffix}")
        };
        let client_config = match &self.target {
            ClientTarget::Url(u) => WebhookClientConfig {
                url: Some(sibling(u)),
                ca_bundle: Some(self.ca_bundle.clone()),
                service: None,
            },
            ClientTarget::Service(s) => WebhookClientConfig {
                url: None,
                ca_bundle: Some(self.ca_bundle.clone()),
                service: Some(ServiceReference {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    port: s.port,
                    path: Some(sibling(&s.path)),
                }),
            },
        };
        Hook {
            name: format!("{kind}.kyverno.svc-{name_suffix}"),
            client_config,
            failure_policy: Some(policy.as_str().to_string()),
            namespace_selector: self.namespace_selector.clone(),
            match_conditions: condition.map(|(name, expression)| {
                vec![MatchCondition {
                    name: name.to_string(),
                    expression,
                }]
            }),
            match_policy: Some("Equivalent".to_string()),
            admission_review_versions: vec!["v1".to_string()],
            timeout_seconds: Some(self.timeout_seconds),
            rules: Some(rules_with_operations(rules)),
        }
    }
}

/// The webhook rules: one per (group, version, scope) and set of
/// operations.
fn rules_with_operations(rules: Rules) -> Vec<RuleWithOperations> {
    rules
        .into_iter()
        .flat_map(|((group, version, scope), resources)| {
            let mut by_ops: BTreeMap<Vec<&'static str>, Vec<String>> = BTreeMap::new();
            for (resource, ops) in resources {
                let ops: Vec<&'static str> = OPERATIONS
                    .iter()
                    .copied()
                    .filter(|o| ops.contains(o))
                    .collect();
                by_ops.entry(ops).or_default().push(resource);
            }
            by_ops
                .into_iter()
                .filter(|(ops, _)| !ops.is_empty())
                .map(move |(ops, resources)| RuleWithOperations {
                    api_groups: Some(vec![group.clone()]),
                    api_versions: Some(vec![version.clone()]),
                    operations: Some(ops.iter().map(|s| s.to_string()).collect()),
                    resources: Some(resources),
                    scope: Some(scope.clone()),
                })
        })
        .collect()
}

/// The webhooks of one configuration: `-fail` (split in two, with a
/// `-fail-recovery` one under `Ignore`, when it may be sent a resource an
/// operator needs to recover), then `-ignore`; empty ones left out.
fn by_failure_policy<W>(
    fail: Rules,
    ignore: Rules,
    webhook: impl Fn(&str, &str, FailurePolicy, Option<(&str, String)>, Rules) -> W,
) -> Vec<W> {
    let mut webhooks = Vec::new();
    if !fail.is_empty() {
        if touches_recovery(&fail) {
            webhooks.push(webhook(
                "fail",
                "fail",
                FailurePolicy::Fail,
                Some((
                    "not-needed-for-recovery",
                    format!("!({})", recovery_condition()),
                )),
                fail.clone(),
            ));
            webhooks.push(webhook(
                "fail-recovery",
                "fail",
                FailurePolicy::Ignore,
                Some(("needed-for-recovery", recovery_condition())),
                fail,
            ));
        } else {
            webhooks.push(webhook("fail", "fail", FailurePolicy::Fail, None, fail));
        }
    }
    if !ignore.is_empty() {
        webhooks.push(webhook(
            "ignore",
            "ignore",
            FailurePolicy::Ignore,
            None,
            ignore,
        ));
    }
    webhooks
}

/// The `MutatingWebhookConfiguration` for `engine`'s admission-enabled
/// mutating policies: classic rules that patch the admitted object
/// (CREATE and UPDATE, as their match names them) and MutatingPolicies,
/// each in the webhook of its failure policy (`mutate.kyverno.svc-fail`,
/// `mutate.kyverno.svc-ignore`, and `-fail-recovery` as in
/// [`build_configuration`]), at `/mutate/fail` and `/mutate/ignore`.
/// As Kyverno's: `reinvocationPolicy: IfNeeded` (a later webhook's change
/// is seen by the policies again), `sideEffects: NoneOnDryRun` (a dry
/// run writes no report). With no mutating policy the configuration has
/// no webhooks.
pub fn build_mutating_configuration(
    name: &str,
    target: &ClientTarget,
    ca_pem: &str,
    timeout_seconds: u8,
    exclusions: &Exclusions,
    engine: &Engine,
) -> MutatingWebhookConfiguration {
    let (mut fail, mut ignore) =
        classic_rules(engine, leash_policy::Policy::mutate_webhook_operations);
    for m in engine.mutating_policies().iter().filter(|m| m.admission()) {
        add_cel(
            &mut fail,
            &mut ignore,
            m.ignores_failures(),
            m.matched_resource_operations(),
        );
    }
    // An ImageValidatingPolicy's `mutateDigest` pins digests here.
    for v in engine.validating_policies() {
        if v.admission() && v.mutates_digests() {
            let ops = v.matched_resource_operations();
            add_cel(&mut fail, &mut ignore, v.ignores_webhook_failures(), ops);
        }
    }
    let common = Common::new(target, ca_pem, timeout_seconds, exclusions);
    let webhooks = by_failure_policy(
        fail,
        ignore,
        |name_suffix, suffix, policy, condition, rules| {
            let h = common.hook("mutate", name_suffix, suffix, policy, condition, rules);
            MutatingWebhook {
                name: h.name,
                client_config: h.client_config,
                failure_policy: h.failure_policy,
                namespace_selector: h.namespace_selector,
                match_conditions: h.match_conditions,
                match_policy: h.match_policy,
                side_effects: "NoneOnDryRun".to_string(),
                admission_review_versions: h.admission_review_versions,
                timeout_seconds: h.timeout_seconds,
                rules: h.rules,
                reinvocation_policy: Some("IfNeeded".to_string()),
                ..MutatingWebhook::default()
            }
        },
    );
    MutatingWebhookConfiguration {
        metadata: managed_metadata(name),
        webhooks: Some(webhooks),
    }
}

/// `Namespaced`, `Cluster`, or `*` when the resource is not a built-in one.
fn scope_of(group: &str, plural: &str) -> String {
    if group == "*" || plural == "*" {
        return "*".to_string();
    }
    match leash_policy::kinds::by_resource(group, plural) {
        Some(b) if b.namespaced => "Namespaced",
        Some(_) => "Cluster",
        None => "*",
    }
    .to_string()
}

/// A configuration's metadata: its name and leash's managed-by label.
fn managed_metadata(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(BTreeMap::from([(
            "webhook.kyverno.io/managed-by".to_string(),
            "leash".to_string(),
        )])),
        ..ObjectMeta::default()
    }
}

/// Keeps the configuration in step with the policy set. Built without
/// starting anything.
#[derive(Clone)]
pub struct Registrar {
    client: kube::Client,
    policies: watch::Receiver<Arc<Engine>>,
    name: String,
    mutating_name: String,
    target: ClientTarget,
    ca_pem: String,
    timeout_seconds: u8,
    exclusions: Exclusions,
    cleanup: bool,
    shutdown_timeout: Duration,
    retry_interval: Duration,
    /// How often the written configuration is read back and restored if
    /// someone deleted or changed it.
    resync_interval: Duration,
    /// True once the configuration was written (and stays true).
    registered: watch::Sender<bool>,
}

impl std::fmt::Debug for Registrar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrar")
            .field("name", &self.name)
            .field("target", &self.target)
            .field("cleanup", &self.cleanup)
            .finish_non_exhaustive()
    }
}

impl Registrar {
    /// A registrar for `settings` (name, timeout, cleanup, service), pointing
    /// at `webhook_url` unless `settings.service` is set, with `ca_pem` as
    /// the `caBundle` (see `AdmissionServer::webhook_url` and `ca_pem`).
    pub fn new(
        client: kube::Client,
        settings: &Settings,
        webhook_url: String,
        ca_pem: String,
        policies: watch::Receiver<Arc<Engine>>,
    ) -> Registrar {
        Registrar {
            client,
            policies,
            name: settings.configuration_name.clone(),
            mutating_name: settings.mutating_configuration_name.clone(),
            target: match &settings.service {
                Some(s) => ClientTarget::Service(s.clone()),
                None => ClientTarget::Url(webhook_url),
            },
            ca_pem,
            timeout_seconds: settings.timeout_seconds,
            exclusions: Exclusions {
                namespaces: settings.excluded_namespaces.clone(),
            },
            cleanup: settings.cleanup_webhooks,
            shutdown_timeout: settings.shutdown_timeout,
            retry_interval: Duration::from_secs(5),
            resync_interval: Duration::from_secs(30),
            registered: watch::Sender::new(false),
        }
    }

    /// Becomes true once the configuration was first written: the API
    /// server then calls the webhook (readiness waits for it).
    pub fn registered(&self) -> watch::Receiver<bool> {
        self.registered.subscribe()
    }

    /// Sets how long to wait before retrying a failed write.
    pub fn with_retry_interval(mut self, d: Duration) -> Registrar {
        self.retry_interval = d;
        self
    }

    /// The configurations for `engine`: the validating one and the
    /// mutating one.
    fn desired(&self, engine: &Engine) -> Desired {
        let args = (
            &self.target,
            self.ca_pem.as_str(),
            self.timeout_seconds,
            &self.exclusions,
            engine,
        );
        Desired {
            validating: build_configuration(&self.name, args.0, args.1, args.2, args.3, args.4),
            mutating: build_mutating_configuration(
                &self.mutating_name,
                args.0,
                args.1,
                args.2,
                args.3,
                args.4,
            ),
        }
    }

    /// Registers the configurations and updates them on every policy
    /// change until `token` is cancelled; then deletes them when
    /// `cleanup_webhooks`.
    ///
    /// # Errors
    /// Only the cleanup delete's failure (write failures are retried).
    ///
    /// # Cancel safety
    /// Not cancel safe as to cleanup: dropping the future skips the delete.
    pub async fn run(mut self, token: CancellationToken) -> Result<()> {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let mut applied: Option<Desired> = None;
        loop {
            let engine = self.policies.borrow_and_update().clone();
            let desired = self.desired(&engine);
            let mut failed = false;
            if applied.as_ref() != Some(&desired) {
                let write = async {
                    apply(&validating, desired.validating.clone()).await?;
                    apply(&mutating, desired.mutating.clone()).await
                };
                match token.run_until_cancelled(write).await {
                    None => break,
                    Some(Ok(())) => {
                        tracing::info!(validating = %self.name, mutating = %self.mutating_name, "webhook configurations registered");
                        applied = Some(desired);
                        self.registered.send_replace(true);
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "registering the webhook configurations failed; will retry");
                        failed = true;
                    }
                }
            }
            let policies = &mut self.policies;
            let pause = if failed {
                self.retry_interval
            } else {
                self.resync_interval
            };
            let wait = async move {
                match tokio::time::timeout(pause, policies.changed()).await {
                    Ok(Ok(())) => false,
                    Ok(Err(_)) => {
                        // No more policy sets: only resyncs from now on.
                        tokio::time::sleep(pause).await;
                        true
                    }
                    Err(_) => true,
                }
            };
            match token.run_until_cancelled(wait).await {
                None => break,
                // A resync: written again only if what the API server
                // holds differs (deleted, edited by hand, by an older run).
                Some(true) if !failed => {
                    let read = async {
                        let v = validating.get_opt(&self.name).await?;
                        let m = mutating.get_opt(&self.mutating_name).await?;
                        Ok::<_, kube::Error>((v, m))
                    };
                    match token.run_until_cancelled(read).await {
                        None => break,
                        Some(Ok((v, m))) => {
                            let intact = applied.as_ref().is_some_and(|a| {
                                v.is_some_and(|v| same_essentials(&v, &a.validating))
                                    && m.is_some_and(|m| same_essentials(&m, &a.mutating))
                            });
                            if !intact {
                                tracing::warn!(validating = %self.name, mutating = %self.mutating_name, "a webhook configuration was deleted or changed by someone else; writing them again");
                                applied = None;
                            }
                        }
                        Some(Err(e)) => {
                            tracing::warn!(name = %self.name, "reading the webhook configurations back: {e}");
                        }
                    }
                }
                Some(_) => {}
            }
        }
        if self.cleanup {
            let params = DeleteParams::default();
            let delete = async {
                remove(&validating, &self.name, &params).await?;
                remove(&mutating, &self.mutating_name, &params).await
            };
            match tokio::time::timeout(self.shutdown_timeout, delete).await {
                Ok(result) => result?,
                Err(_) => {
                    tracing::warn!(name = %self.name, "deleting the webhook configurations timed out")
                }
            }
        }
        Ok(())
    }
}

/// What the registrar keeps in the cluster.
#[derive(Debug, Clone, PartialEq)]
struct Desired {
    validating: ValidatingWebhookConfiguration,
    mutating: MutatingWebhookConfiguration,
}

/// Whether what the API server holds is what was written, ignoring the
/// fields it fills in (defaults, metadata): compared as JSON, webhook by
/// webhook, on the fields leash sets.
fn same_essentials<K: serde::Serialize>(current: &K, written: &K) -> bool {
    let essentials = |c: &K| -> Vec<serde_json::Value> {
        let v = serde_json::to_value(c).unwrap_or_default();
        v["webhooks"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| {
                let service = &w["clientConfig"]["service"];
                serde_json::json!([
                    w["name"],
                    w["clientConfig"]["url"],
                    service["namespace"],
                    service["name"],
                    service["path"],
                    service["port"].as_i64().unwrap_or(443),
                    w["clientConfig"]["caBundle"],
                    w["failurePolicy"],
                    w["rules"],
                    w["namespaceSelector"]["matchExpressions"],
                    w["matchConditions"],
                    w["timeoutSeconds"],
                    w["reinvocationPolicy"],
                ])
            })
            .collect()
    };
    essentials(current) == essentials(written)
}

/// Creates, or replaces with the read resourceVersion (invariant 2).
async fn apply<K>(api: &Api<K>, mut desired: K) -> Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    let err = |op: &str, source| Error::ApiFailed {
        operation: format!("{op} {} {name}", K::kind(&())),
        source,
    };
    match api.get_opt(&name).await.map_err(|e| err("reading", e))? {
        None => {
            api.create(&PostParams::default(), &desired)
                .await
                .map_err(|e| err("creating", e))?;
        }
        Some(existing) => {
            desired.meta_mut().resource_version = existing.meta().resource_version.clone();
            api.replace(&name, &PostParams::default(), &desired)
                .await
                .map_err(|e| err("replacing", e))?;
        }
    }
    Ok(())
}

/// Deletes a configuration (gone already is fine).
async fn remove<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> Result<()>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.delete(name, params).await {
        Ok(_) => {
            tracing::info!(name = %name, "webhook configuration removed");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::ApiFailed {
            operation: format!("deleting {} {name}", K::kind(&())),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn engine(docs: &[serde_json::Value]) -> Engine {
        let mut e = Engine::new();
        for d in docs {
            assert!(e.add_json(d).unwrap());
        }
        e
    }

    fn cpol(name: &str, kinds: &[&str], admission: bool) -> serde_json::Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": {"admission": admission, "rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": kinds}}]},
                "validate": {"message": "m", "pattern": {"metadata": {"name": "?*"}}}}]}})
    }

    #[test]
    fn rules_from_kinds_and_resources() {
        let e = engine(&[
            cpol("a", &["Pod", "apps/v1/Deployment", "Namespace"], true),
            cpol("b", &["example.com/v1/Widget"], true),
            cpol("c", &["ConfigMap"], false),
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "v"},
                "spec": {"validationActions": ["Deny"], "matchConstraints": {"resourceRules": [
                    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]}]},
                    "validations": [{"expression": "true"}]}}),
        ]);
        let cfg = build_configuration(
            "leash-validating-webhook-cfg",
            &ClientTarget::Url("https://127.0.0.1:9443/validate/".into()),
            "CA",
            7,
            &Exclusions::default(),
            &e,
        );
        let v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(v["metadata"]["name"], "leash-validating-webhook-cfg");
        let hooks = v["webhooks"].as_array().unwrap();
        // No policy needs the Ignore webhook; Namespaces need the recovery
        // one; the policy validation webhook is always there, last.
        assert_eq!(hooks.len(), 3);
        assert_eq!(hooks[2]["name"], "validate-policy.kyverno.svc");
        assert_eq!(hooks[1]["name"], "validate.kyverno.svc-fail-recovery");
        let h = &hooks[0];
        assert_eq!(h["name"], "validate.kyverno.svc-fail");
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["sideEffects"], "None");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["admissionReviewVersions"], json!(["v1"]));
        assert_eq!(h["timeoutSeconds"], 7);
        assert_eq!(
            h["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate/fail"
        );
        assert_eq!(
            h["clientConfig"]["caBundle"], "Q0E=",
            "base64 of the CA PEM"
        );
        let ops = json!(["CREATE", "UPDATE", "DELETE", "CONNECT"]);
        let rule = |g: &str, v: &str, res: serde_json::Value, scope: &str| json!({"apiGroups": [g], "apiVersions": [v], "operations": ops, "resources": res, "scope": scope});
        assert_eq!(
            h["rules"],
            json!([
                rule("", "v1", json!(["namespaces"]), "Cluster"),
                rule(
                    "",
                    "v1",
                    json!(["pods", "pods/ephemeralcontainers"]),
                    "Namespaced"
                ),
                rule("apps", "v1", json!(["deployments"]), "Namespaced"),
                // The ValidatingPolicy's resource rule names CREATE only.
                json!({"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["jobs"], "scope": "Namespaced"}),
                rule("example.com", "v1", json!(["widgets"]), "*"),
            ]),
            "{}",
            serde_json::to_string_pretty(&h["rules"]).unwrap()
        );
    }

    #[test]
    fn policies_go_to_the_webhook_of_their_failure_policy() {
        let mut ignored = cpol("i", &["ConfigMap"], true);
        ignored["spec"]["failurePolicy"] = json!("Ignore");
        let e = engine(&[
            cpol("f", &["Namespace"], true),
            ignored,
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "v"},
                "spec": {"failurePolicy": "Ignore", "validationActions": ["Deny"], "matchConstraints": {"resourceRules": [
                    {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]}]},
                    "validations": [{"expression": "true"}]}}),
        ]);
        let cfg = build_configuration(
            "c",
            &ClientTarget::Url("https://127.0.0.1:9443/validate".into()),
            "CA",
            10,
            &Exclusions::default(),
            &e,
        );
        let v = serde_json::to_value(&cfg).unwrap();
        let hook = |suffix: &str| {
            v["webhooks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["name"] == format!("validate.kyverno.svc-{suffix}"))
                .cloned()
                .unwrap_or_else(|| panic!("no {suffix} webhook"))
        };
        let resources = |h: &serde_json::Value| -> Vec<String> {
            h["rules"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r["resources"].as_array().unwrap().clone())
                .map(|r| r.as_str().unwrap().to_string())
                .collect()
        };
        let (fail, ignore) = (hook("fail"), hook("ignore"));
        assert_eq!(fail["failurePolicy"], "Fail");
        assert_eq!(resources(&fail), ["namespaces"]);
        assert_eq!(ignore["failurePolicy"], "Ignore");
        assert_eq!(
            ignore["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate/ignore"
        );
        assert_eq!(resources(&ignore), ["configmaps", "jobs"]);
    }

    #[test]
    fn operations_come_from_the_rules_match_and_operation_only_excludes() {
        let rule =
            |name: &str, kind: &str, matched: serde_json::Value, exclude: serde_json::Value| {
                json!({"name": name,
                "match": {"any": [{"resources": {"kinds": [kind], "operations": matched}}]},
                "exclude": exclude,
                "validate": {"message": "m", "pattern": {"metadata": {"name": "?*"}}}})
            };
        let e = engine(&[
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "ops"},
            "spec": {"rules": [
                rule("a", "Namespace", json!(["CREATE", "UPDATE"]), json!(null)),
                rule("b", "ConfigMap", json!(null), json!({"any": [{"resources": {"operations": ["DELETE", "CONNECT"]}}]})),
                // An exclusion that depends on the resource keeps the operation.
                rule("c", "Secret", json!(null), json!({"any": [{"resources": {"operations": ["DELETE"], "names": ["x"]}}]})),
                rule("d", "Namespace", json!(["DELETE"]), json!(null)),
            ]}}),
        ]);
        let cfg = build_configuration(
            "c",
            &ClientTarget::Url("https://127.0.0.1:9443/validate".into()),
            "CA",
            10,
            &Exclusions::default(),
            &e,
        );
        let v = serde_json::to_value(&cfg).unwrap();
        let ops_of = |resource: &str| -> serde_json::Value {
            v["webhooks"][0]["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| {
                    r["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|x| x == resource)
                })
                .map(|r| r["operations"].clone())
                .unwrap_or_else(|| panic!("no rule for {resource}: {v}"))
        };
        assert_eq!(ops_of("namespaces"), json!(["CREATE", "UPDATE", "DELETE"]));
        assert_eq!(ops_of("configmaps"), json!(["CREATE", "UPDATE"]));
        assert_eq!(
            ops_of("secrets"),
            json!(["CREATE", "UPDATE", "DELETE", "CONNECT"])
        );
    }

    /// The mutating configuration: classic mutate rules (not `targets`
    /// ones) and MutatingPolicies, by failure policy, CREATE and UPDATE
    /// only, at the `/mutate` sibling of the validating prefix, reinvoked
    /// if needed; a rule on a recovery resource goes to the `Ignore`
    /// recovery webhook; validate-only policies are not in it.
    #[test]
    fn the_mutating_configuration() {
        let e = engine(&[
            cpol("validate-only", &["Pod"], true),
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "m"},
                "spec": {"rules": [
                    {"name": "create-only", "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "operations": ["CREATE"]}}]},
                     "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}},
                    {"name": "ns", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                     "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}},
                    {"name": "existing", "match": {"any": [{"resources": {"kinds": ["Secret"]}}]},
                     "mutate": {"targets": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "namespace": "y"}],
                                "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}}]}}),
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "mp"},
                "spec": {"failurePolicy": "Ignore", "matchConstraints": {"resourceRules": [
                    {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "DELETE"], "resources": ["deployments"]}]},
                    "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}]}}),
        ]);
        let cfg = build_mutating_configuration(
            "leash-mutating-webhook-cfg",
            &ClientTarget::Url("https://127.0.0.1:9443/validate".into()),
            "CA",
            7,
            &Exclusions {
                namespaces: vec!["kyverno".into()],
            },
            &e,
        );
        let v = serde_json::to_value(&cfg).unwrap();
        let hooks = v["webhooks"].as_array().unwrap();
        let names: Vec<&str> = hooks.iter().map(|h| h["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "mutate.kyverno.svc-fail",
                "mutate.kyverno.svc-fail-recovery",
                "mutate.kyverno.svc-ignore"
            ]
        );
        for h in hooks {
            assert_eq!(h["reinvocationPolicy"], "IfNeeded");
            assert_eq!(h["sideEffects"], "NoneOnDryRun");
            assert_eq!(h["timeoutSeconds"], 7);
            assert_eq!(
                h["namespaceSelector"]["matchExpressions"][0]["values"],
                json!(["kyverno"])
            );
        }
        assert_eq!(
            hooks[0]["clientConfig"]["url"],
            "https://127.0.0.1:9443/mutate/fail"
        );
        assert_eq!(hooks[1]["failurePolicy"], "Ignore");
        assert_eq!(
            hooks[2]["clientConfig"]["url"],
            "https://127.0.0.1:9443/mutate/ignore"
        );
        let rules = |h: &serde_json::Value| -> Vec<(String, String)> {
            h["rules"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| {
                    let ops = r["operations"].to_string();
                    r["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(move |x| (x.as_str().unwrap().to_string(), ops.clone()))
                })
                .collect()
        };
        let fail = rules(&hooks[0]);
        assert!(
            fail.contains(&("configmaps".into(), r#"["CREATE"]"#.into())),
            "{fail:?}"
        );
        assert!(
            fail.contains(&("namespaces".into(), r#"["CREATE","UPDATE"]"#.into())),
            "{fail:?}"
        );
        assert!(
            !fail.iter().any(|(r, _)| r == "secrets" || r == "pods"),
            "targets rules and validate-only policies are not sent here: {fail:?}"
        );
        assert_eq!(
            rules(&hooks[2]),
            [("deployments".to_string(), r#"["CREATE"]"#.to_string())]
        );
        // Nothing mutates: no webhooks.
        let empty = build_mutating_configuration(
            "n",
            &ClientTarget::Url("https://x/validate".into()),
            "CA",
            7,
            &Exclusions::default(),
            &engine(&[cpol("validate-only", &["Pod"], true)]),
        );
        assert_eq!(empty.webhooks, Some(Vec::new()));
    }

    #[test]
    fn service_targets_and_empty_sets() {
        let target = ClientTarget::Service(ServiceRef {
            namespace: "kyverno".into(),
            name: "leash".into(),
            port: Some(443),
            path: "/validate".into(),
        });
        let cfg = build_configuration(
            "n",
            &target,
            "CA",
            10,
            &Exclusions::default(),
            &engine(&[cpol("a", &["*"], true)]),
        );
        let v = serde_json::to_value(&cfg).unwrap();
        let h = &v["webhooks"][0];
        assert_eq!(
            h["clientConfig"]["service"],
            json!({"namespace": "kyverno", "name": "leash", "port": 443, "path": "/validate/fail"})
        );
        assert!(h["clientConfig"].get("url").is_none());
        assert_eq!(h["rules"][0]["resources"], json!(["*"]));
        let empty = build_configuration(
            "n",
            &target,
            "CA",
            10,
            &Exclusions::default(),
            &Engine::new(),
        );
        let names: Vec<String> = empty
            .webhooks
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect();
        assert_eq!(names, ["validate-policy.kyverno.svc"]);
    }

    /// Issue 39: the policy validation webhook sees every policy kind the
    /// engine compiles, created or updated, in every namespace, and fails
    /// open (a down leash never stops a policy from being fixed).
    #[test]
    fn the_policy_validation_webhook() {
        let cfg = build_configuration(
            "n",
            &ClientTarget::Url("https://127.0.0.1:9443/validate".into()),
            "CA",
            10,
            &Exclusions {
                namespaces: vec!["kyverno".into()],
            },
            &Engine::new(),
        );
        let v = serde_json::to_value(&cfg).unwrap();
        let h = &v["webhooks"][0];
        assert_eq!(h["name"], "validate-policy.kyverno.svc");
        assert_eq!(
            h["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate/policy"
        );
        assert_eq!(h["failurePolicy"], "Ignore");
        assert!(h.get("namespaceSelector").is_none(), "{h}");
        assert_eq!(h["rules"][0]["apiGroups"], json!(["kyverno.io"]));
        assert_eq!(h["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
        assert_eq!(
            h["rules"][0]["resources"],
            json!(["clusterpolicies", "policies", "policyexceptions"])
        );
        assert_eq!(h["rules"][1]["apiGroups"], json!(["policies.kyverno.io"]));
        assert!(
            h["rules"][1]["resources"]
                .as_array()
                .unwrap()
                .contains(&json!("namespacedvalidatingpolicies"))
        );
    }

    /// Issue 38 (3): leash's own and the system namespaces are never sent,
    /// and the resources needed to recover (policies, namespaces, leases,
    /// ...) go to the Fail policies through a webhook that fails open; a
    /// set that cannot match them gets no such webhook.
    #[test]
    fn a_down_webhook_cannot_lock_the_cluster() {
        let target = ClientTarget::Url("https://127.0.0.1:9443/validate".into());
        let exclusions = Exclusions {
            namespaces: vec!["kyverno".into(), "kube-system".into()],
        };
        let cfg = build_configuration(
            "n",
            &target,
            "CA",
            10,
            &exclusions,
            &engine(&[cpol("all", &["*"], true)]),
        );
        let v = serde_json::to_value(&cfg).unwrap();
        let hooks = v["webhooks"].as_array().unwrap();
        let names: Vec<&str> = hooks.iter().map(|h| h["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "validate.kyverno.svc-fail",
                "validate.kyverno.svc-fail-recovery",
                "validate-policy.kyverno.svc"
            ]
        );
        let hooks = &hooks[..2];
        for h in hooks {
            assert_eq!(
                h["namespaceSelector"],
                json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                    "operator": "NotIn", "values": ["kyverno", "kube-system"]}]}),
                "{h}"
            );
            assert_eq!(h["rules"], hooks[0]["rules"], "same rules");
            assert_eq!(
                h["clientConfig"]["url"], "https://127.0.0.1:9443/validate/fail",
                "both judged by the Fail policies"
            );
        }
        assert_eq!(hooks[0]["failurePolicy"], "Fail");
        assert_eq!(hooks[1]["failurePolicy"], "Ignore");
        let fail_cond = hooks[0]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap();
        let recovery_cond = hooks[1]["matchConditions"][0]["expression"]
            .as_str()
            .unwrap();
        assert_eq!(fail_cond, format!("!({recovery_cond})"));
        for needed in [
            "'kyverno.io'",
            "'policies.kyverno.io'",
            "'coordination.k8s.io'",
            "'namespaces'",
        ] {
            assert!(
                recovery_cond.contains(needed),
                "{needed} in {recovery_cond}"
            );
        }

        // Pods only: nothing to recover through this webhook.
        let cfg = build_configuration(
            "n",
            &target,
            "CA",
            10,
            &exclusions,
            &engine(&[cpol("pods", &["Pod"], true)]),
        );
        let v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(v["webhooks"].as_array().unwrap().len(), 2, "{v}");
        assert!(v["webhooks"][0].get("matchConditions").is_none(), "{v}");
        // A policy on Namespaces alone gets the recovery webhook too.
        let cfg = build_configuration(
            "n",
            &target,
            "CA",
            10,
            &exclusions,
            &engine(&[cpol("ns", &["Namespace"], true)]),
        );
        assert_eq!(cfg.webhooks.unwrap().len(), 3);
    }
}
