//! `policies.kyverno.io` ValidatingPolicy and NamespacedValidatingPolicy.
//!
//! A policy is compiled once into a [`ValidatingPolicy`]: its match
//! constraints, match conditions, variables and validations, plus the
//! variants Kyverno's autogen derives for Pod controllers (a policy matching
//! only `pods` also applies to DaemonSets, Deployments, Jobs, ReplicaSets and
//! StatefulSets with `object.spec`/`object.metadata` rewritten to the pod
//! template's, and to CronJobs with the job template's pod template).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value as Json;

use crate::cel::rule::{
    Enabled, SpecFields, Validation, compile_named_conditions, compile_validations,
    compile_variables,
};
use crate::cel::{Activation, Expr, VarMemo, Variable, fast};
use crate::error::{Error, Result};
use crate::eval::Prepared;
use crate::matching::LabelSelector;
use crate::model::nullable;
use crate::request::labels_of;
use crate::request::{ClusterData, EvalRequest, Operation};
use crate::result::{RuleResult, Source, Status};

/// A `validationActions` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum ValidationAction {
    /// Deny the admission request.
    Deny,
    /// Warn the client.
    Warn,
    /// Report only.
    Audit,
}

/// One `resourceRules`/`excludeResourceRules` entry.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
struct ResourceRule {
    #[serde(rename = "apiGroups", deserialize_with = "nullable")]
    groups: Vec<String>,
    #[serde(rename = "apiVersions", deserialize_with = "nullable")]
    versions: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    resources: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    operations: Vec<String>,
    #[serde(rename = "resourceNames", deserialize_with = "nullable")]
    names: Vec<String>,
    /// `Cluster`, `Namespaced`, or any (`*`, empty).
    #[serde(deserialize_with = "nullable")]
    scope: String,
}

impl ResourceRule {
    fn matches(&self, t: &Target<'_>) -> bool {
        let any = |list: &[String], x: &str| list.iter().any(|e| e == "*" || e == x);
        let op_ok = match t.operation {
            // A background scan has no operation: every rule applies.
            Operation::Background => true,
            op => any(&self.operations, op.as_str()),
        };
        // Kubernetes' rule semantics: `pods` is the resource alone,
        // `pods/binding` one subresource, `pods/*` every subresource of
        // pods, `*/*` every resource and subresource.
        let (t_res, t_sub) = t.resource.split_once('/').unwrap_or((&t.resource, ""));
        let res_ok = self.resources.iter().any(|r| {
            let (res, sub) = r.split_once('/').unwrap_or((r, ""));
            (res == "*" || res == t_res)
                && match sub {
                    "" => t_sub.is_empty(),
                    "*" => res == "*" || !t_sub.is_empty(),
                    sub => sub == t_sub,
                }
        });
        let scope_ok = match self.scope.as_str() {
            "Cluster" => t.namespace.is_empty(),
            "Namespaced" => !t.namespace.is_empty(),
            _ => true,
        };
        op_ok
            && any(&self.groups, t.group)
            && any(&self.versions, t.version)
            && res_ok
            && scope_ok
            && (self.names.is_empty() || self.names.iter().any(|n| n == t.name))
    }
}

/// What a request is matched on.
pub(crate) struct Target<'a> {
    group: &'a str,
    version: &'a str,
    resource: String,
    namespace: &'a str,
    name: &'a str,
    operation: Operation,
}

impl<'a> Target<'a> {
    /// What `req` is matched on.
    pub(crate) fn of(req: &'a EvalRequest) -> Target<'a> {
        let (group, version) = crate::kinds::split_api_version(req.api_version());
        Target {
            group,
            version,
            resource: req
                .request_resource
                .clone()
                .unwrap_or_else(|| crate::kinds::plural_of(req.kind())),
            namespace: req.namespace(),
            name: req.name(),
            operation: req.operation,
        }
    }

    /// This target matched whatever operations a rule names (as a
    /// background scan is), for a DeletingPolicy's selection.
    pub(crate) fn any_operation(self) -> Target<'a> {
        Target {
            operation: Operation::Background,
            ..self
        }
    }
}

/// A resource of a resource rule, `(group, version, resource)`, and the
/// admission operations the rule names.
pub type ResourceOperations = ((String, String, String), Vec<&'static str>);

/// `matchConstraints`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct MatchResources {
    #[serde(deserialize_with = "nullable")]
    namespace_selector: LabelSelector,
    #[serde(deserialize_with = "nullable")]
    object_selector: LabelSelector,
    #[serde(rename = "resourceRules", deserialize_with = "nullable")]
    rules: Vec<ResourceRule>,
    #[serde(rename = "excludeResourceRules", deserialize_with = "nullable")]
    excludes: Vec<ResourceRule>,
}

impl MatchResources {
    /// Whether a resource rule or exclusion selects by name
    /// (`resourceNames`).
    pub(crate) fn selects_by_name(&self) -> bool {
        self.rules
            .iter()
            .chain(&self.excludes)
            .any(|r| !r.names.is_empty())
    }

    /// The `(group, version, plural)` of every resource rule; `*` stays
    /// `*`, subresources are left out.
    /// As [`MatchResources::resources`], each with the admission operations
    /// its resource rule names (`*`: all four).
    pub(crate) fn resources_with_operations(&self, out: &mut Vec<ResourceOperations>) {
        const ALL: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];
        for r in &self.rules {
            let ops: Vec<&'static str> = ALL
                .iter()
                .copied()
                .filter(|o| r.operations.iter().any(|x| x == "*" || x == o))
                .collect();
            let mut resources = Vec::new();
            MatchResources {
                rules: vec![r.clone()],
                ..MatchResources::default()
            }
            .resources(&mut resources);
            out.extend(resources.into_iter().map(|res| (res, ops.clone())));
        }
    }

    pub(crate) fn resources(&self, out: &mut Vec<(String, String, String)>) {
        for r in &self.rules {
            for g in &r.groups {
                for v in &r.versions {
                    for res in &r.resources {
                        let (res, _) = res.split_once('/').unwrap_or((res, ""));
                        let entry = (g.clone(), v.clone(), res.to_string());
                        if !out.contains(&entry) {
                            out.push(entry);
                        }
                    }
                }
            }
        }
    }

    /// `matchConstraints` (or a binding's `matchResources`) `v` of the
    /// policy `kind` `name`, at `field`: a selector with an unknown
    /// operator (or of the wrong shape) is an error naming its field, as
    /// Kubernetes refuses it, not a selector that never matches.
    pub(crate) fn parse(v: &Json, kind: &str, name: &str, field: &str) -> Result<MatchResources> {
        let err = |f: String, m: String| Error::invalid(kind, name, f, m);
        crate::model::parse::<Option<MatchResources>>(v, field, &err).map(Option::unwrap_or_default)
    }

    /// Whether these constraints are a single resource rule naming no
    /// resources, with no (non-empty) object or namespace selector and no
    /// excluded resources: what Kyverno's CLI calls "having a selector"
    /// (`hasSelector`), the one shape whose policy has no response for the
    /// resources it does not match.
    pub(crate) fn is_single_plain_rule(&self) -> bool {
        self.namespace_selector.is_empty()
            && self.object_selector.is_empty()
            && self.excludes.is_empty()
            && self.rules.len() == 1
            && self.rules[0].names.is_empty()
    }

    pub(crate) fn matches(&self, req: &EvalRequest, t: &Target<'_>) -> bool {
        self.rules.iter().any(|r| r.matches(t)) && self.matches_unruled_as_all(req, t)
    }

    /// As [`MatchResources::matches`], except that without `resourceRules`
    /// every resource is selected (Kyverno's matcher for a
    /// ValidatingAdmissionPolicyBinding's `matchResources`).
    pub(crate) fn matches_unruled_as_all(&self, req: &EvalRequest, t: &Target<'_>) -> bool {
        if (!self.rules.is_empty() && !self.rules.iter().any(|r| r.matches(t)))
            || self.excludes.iter().any(|r| r.matches(t))
        {
            return false;
        }
        if !self.namespace_selector.is_empty() {
            // Kubernetes: cluster-scoped objects other than Namespaces are
            // not filtered by the namespace selector; a Namespace is matched
            // on its own labels.
            let is_namespace = req.kind() == "Namespace" && t.group.is_empty();
            if is_namespace {
                if !self.namespace_selector.matches(&labels_of(&req.object)) {
                    return false;
                }
            } else if !t.namespace.is_empty() {
                let empty = BTreeMap::new();
                let labels = req.namespace_labels.as_ref().unwrap_or(&empty);
                if !self.namespace_selector.matches(labels) {
                    return false;
                }
            }
        }
        if !self.object_selector.is_empty() {
            let obj = match (req.operation, &req.old_object) {
                (Operation::Delete, Some(old)) => old,
                _ => &req.object,
            };
            if !self.object_selector.matches(&labels_of(obj)) {
                return false;
            }
        }
        true
    }
}

/// The evaluable part of a policy: the policy itself or one autogen variant.
#[derive(Debug, Clone)]
struct Body {
    matching: MatchResources,
    conditions: Vec<(String, Expr)>,
    variables: Vec<Variable>,
    validations: Vec<Validation>,
    /// An ImageValidatingPolicy's image part.
    images: Option<crate::ivpol::ImageChecks>,
}

/// What [`crate::ivpol::run`] evaluates of a policy's body.
pub(crate) struct BodyParts<'a> {
    pub(crate) conditions: &'a [(String, Expr)],
    pub(crate) variables: &'a [Variable],
    pub(crate) validations: &'a [Validation],
}

/// A compiled ValidatingPolicy or NamespacedValidatingPolicy. Immutable;
/// evaluate from any thread.
#[derive(Debug, Clone)]
pub struct ValidatingPolicy {
    name: Arc<str>,
    kind: String,
    namespace: Option<String>,
    background: bool,
    admission: bool,
    actions: Vec<ValidationAction>,
    ignore_failures: bool,
    /// `spec.evaluation.mode`.
    mode: EvaluationMode,
    body: Body,
    autogen: Vec<Body>,
}

/// `spec.evaluation.mode`: what a ValidatingPolicy evaluates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum EvaluationMode {
    /// `Kubernetes` (the default): Kubernetes resources.
    #[default]
    Kubernetes,
    /// `JSON`: JSON payloads ([`ValidatingPolicy::evaluate_json`]).
    #[serde(rename = "JSON")]
    Json,
    /// `HTTP`: HTTP authorization requests
    /// ([`ValidatingPolicy::evaluate_authz`]).
    #[serde(rename = "HTTP")]
    Http,
    /// `Envoy`: Envoy authorization (`CheckRequest`) requests
    /// ([`ValidatingPolicy::evaluate_authz`]).
    Envoy,
}

/// The policy kinds and versions [`ValidatingPolicy::compile`] accepts
/// (ImageValidatingPolicies are ValidatingPolicies with an image part:
/// see [`crate::ivpol`]).
pub const KINDS: &[&str] = &[
    "ValidatingPolicy",
    "NamespacedValidatingPolicy",
    "ImageValidatingPolicy",
    "NamespacedImageValidatingPolicy",
];

/// Whether `doc` is a ValidatingPolicy or NamespacedValidatingPolicy.
pub fn is_validating_policy(doc: &Json) -> bool {
    crate::cel::rule::is_policy_kind(doc, KINDS)
}

/// Pod controllers of Kyverno's ValidatingPolicy autogen: resource,
/// group, version, kind, and whether the pod template is a CronJob's.
const CONTROLLERS: &[(&str, &str, &str, &str, bool)] = &[
    ("daemonsets", "apps", "v1", "DaemonSet", false),
    ("deployments", "apps", "v1", "Deployment", false),
    ("jobs", "batch", "v1", "Job", false),
    ("replicasets", "apps", "v1", "ReplicaSet", false),
    ("statefulsets", "apps", "v1", "StatefulSet", false),
    ("cronjobs", "batch", "v1", "CronJob", true),
];

impl ValidatingPolicy {
    /// The Secrets an ImageValidatingPolicy's `credentials.secrets` names.
    pub(crate) fn registry_secrets(&self) -> &[String] {
        self.body
            .images
            .as_ref()
            .map_or(&[], |i| i.registry_secrets.as_slice())
    }

    /// Compiles a policy document; errors name the field and the CEL
    /// parse error.
    pub fn compile(doc: &Json) -> Result<ValidatingPolicy> {
        let crate::cel::rule::Header {
            kind,
            name,
            namespace,
        } = crate::cel::rule::Header::of(doc, KINDS)?;
        let spec = &doc["spec"];
        let header = SpecFields::of(spec, &kind, &name)?;
        let body = compile_body(spec, &kind, &name)?;
        let autogen = autogen_specs(spec)
            .iter()
            .map(|s| compile_body(s, &kind, &name))
            .collect::<Result<Vec<_>>>()?;
        Ok(ValidatingPolicy {
            name: Arc::from(name.as_str()),
            kind,
            namespace,
            background: Enabled::on(&header.evaluation.background),
            admission: Enabled::on(&header.evaluation.admission),
            ignore_failures: header.ignores_failures(),
            actions: header.validation_actions,
            mode: header.evaluation.mode.unwrap_or_default(),
            body,
            autogen,
        })
    }

    /// Whether Kyverno's CLI has a response of this policy for every
    /// resource of a test, matched or not: unless its match constraints
    /// are a single plain resource rule. A row no result answers then
    /// passes as "Excluded".
    pub fn responds_to_every_resource(&self) -> bool {
        if self.is_image_policy() {
            // Kyverno's image verification engine responds only for the
            // resources a policy matches.
            return false;
        }
        !self.body.matching.is_single_plain_rule()
    }

    /// `spec.evaluation.mode`. A policy of another mode than `Kubernetes`
    /// gives no result on a Kubernetes resource (the admission and
    /// background components never send it one; Kyverno's CLI alone also
    /// tries a JSON-mode policy on the test's resources).
    pub fn evaluation_mode(&self) -> EvaluationMode {
        self.mode
    }

    /// The result on an HTTP or Envoy authorization request (`object` is
    /// the request), as kyverno-authz evaluates such a policy: a false
    /// match condition gives Skip ("request does not match"), one that
    /// fails an error (Skip under `failurePolicy: Ignore`); then the
    /// validations' expressions in order, the first that is not null
    /// deciding: an allowed response (`http.Allowed()`, `envoy.Allowed()`)
    /// Pass, a denied one Fail; none: Skip. An expression that fails, or
    /// builds something that is not a response, is an error (Skip under
    /// `Ignore`).
    pub fn evaluate_authz(&self, request: &EvalRequest, data: &dyn ClusterData) -> RuleResult {
        let (status, message) = match self.run_authz(request, data) {
            Ok(decided) => decided,
            Err(_) if self.ignore_failures => (Status::Skip, "request does not match".to_string()),
            Err(e) => (Status::Error, e),
        };
        RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message,
            source: Source::ValidatingPolicy,
        }
    }

    fn run_authz(
        &self,
        request: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Result<(Status, String), String> {
        let not_matched = || (Status::Skip, "request does not match".to_string());
        let mut act = Activation::new(request, data);
        let mut errors = Vec::new();
        for (name, cond) in &self.body.conditions {
            match cond.eval_bool(&act) {
                Ok(true) => {}
                Ok(false) => return Ok(not_matched()),
                Err(e) => errors.push(format!("match condition '{name}': {e}")),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        act.bind_variables(&self.body.variables);
        for v in &self.body.validations {
            let value = v.expr.eval(&act)?;
            if matches!(value, ::cel::Value::Null) {
                continue;
            }
            let response = value
                .json()
                .map_err(|e| format!("the rule result is not a response: {e}"))?;
            return match response[crate::cel::libs::AUTHZ_MARK].as_str() {
                Some("ok") => Ok((Status::Pass, "request allowed".to_string())),
                Some("denied") => Ok((
                    Status::Fail,
                    match response["library"].as_str() {
                        Some("envoy") => format!(
                            "request denied with status code {}",
                            response["code"].as_i64().unwrap_or(0)
                        ),
                        _ => format!(
                            "request denied, reason: {}",
                            response["reason"].as_str().unwrap_or("")
                        ),
                    },
                )),
                _ => Err(format!(
                    "the rule result is expected to be a response, got {response}"
                )),
            };
        }
        Ok(not_matched())
    }

    /// The result on a JSON payload (`object` is the payload), as Kyverno's
    /// engine evaluates a JSON-mode policy: no match constraints, the
    /// match conditions (Skip when one is false), the variables and the
    /// validations.
    pub fn evaluate_json(&self, payload: &EvalRequest, data: &dyn ClusterData) -> RuleResult {
        let (status, message) = self.run(&self.body, payload, None, data);
        RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message,
            source: Source::ValidatingPolicy,
        }
    }

    /// What evaluating the policy can read of a resource (see
    /// [`crate::ReadSet`]): its identity, and what each CEL expression of
    /// the policy and of its autogen variants reads of `object` and
    /// `oldObject` (the subtree at the end of each chain of field selections
    /// from either; the whole object where one is used otherwise).
    pub fn reads(&self) -> crate::ReadSet {
        if self.is_image_policy() {
            // The images are read wherever its extractors look.
            return crate::ReadSet::all();
        }
        let mut reads = crate::ReadSet::naming();
        let uses = self.object_reads(&mut reads);
        self.add_selected(&mut reads, &uses);
        reads
    }

    /// Adds what matching reads of the identity beyond its naming: the
    /// labels for a selector; all of it when an expression uses `request`.
    fn add_selected(&self, reads: &mut crate::ReadSet, uses: &crate::cel::reads::Uses) {
        if uses.request {
            reads.merge(&crate::ReadSet::identity());
        }
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            let m = &body.matching;
            if !m.namespace_selector.is_empty() || !m.object_selector.is_empty() {
                reads.add_segs(
                    &[
                        crate::reads::Seg::Field("metadata"),
                        crate::reads::Seg::Field("labels"),
                    ],
                    true,
                );
            }
        }
    }

    /// Adds what the expressions read of the object to `reads`.
    fn object_reads(&self, reads: &mut crate::ReadSet) -> crate::cel::reads::Uses {
        let mut uses = crate::cel::reads::Uses::default();
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            // Match conditions see no variables.
            let conditions = body.conditions.iter().map(|(_, e)| e);
            let u = crate::cel::reads::object_reads(&[], conditions, &mut |p, whole| {
                reads.add_segs(p, whole)
            });
            uses.request |= u.request;
            uses.data |= u.data;
            let validations = body.validations.iter().flat_map(|v| v.exprs());
            let u =
                crate::cel::reads::object_reads(&body.variables, validations, &mut |p, whole| {
                    reads.add_segs(p, whole)
                });
            uses.request |= u.request;
            uses.data |= u.data;
        }
        uses
    }

    /// What its result depends on, when that is the resource alone, for
    /// remembering it ([`crate::memo`]): what its expressions read, the
    /// kind, and of the identity what matching uses (the labels for a
    /// selector, the name for `resourceNames`; all of it when an
    /// expression uses `request`). `None` when an expression reaches other
    /// data (`resource`, `globalContext`, `image`).
    pub(crate) fn memo_key(&self) -> Option<crate::ReadSet> {
        if self.is_image_policy() {
            // Its result depends on registries.
            return None;
        }
        let mut key = crate::ReadSet::empty();
        let uses = self.object_reads(&mut key);
        if uses.data || key.is_all() {
            return None;
        }
        key.add_segs(&[crate::reads::Seg::Field("apiVersion")], true);
        key.add_segs(&[crate::reads::Seg::Field("kind")], true);
        self.add_selected(&mut key, &uses);
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            if body.matching.selects_by_name() {
                key.add_segs(
                    &[
                        crate::reads::Seg::Field("metadata"),
                        crate::reads::Seg::Field("name"),
                    ],
                    true,
                );
                key.add_segs(
                    &[
                        crate::reads::Seg::Field("metadata"),
                        crate::reads::Seg::Field("generateName"),
                    ],
                    true,
                );
            }
        }
        Some(key)
    }

    /// Whether this is an ImageValidatingPolicy or
    /// NamespacedImageValidatingPolicy.
    pub fn is_image_policy(&self) -> bool {
        self.body.images.is_some()
    }

    /// The `mutateDigest` of an ImageValidatingPolicy (default true):
    /// whether its matched images' tags are pinned to their digests at
    /// admission. False for a ValidatingPolicy.
    pub fn mutates_digests(&self) -> bool {
        self.body.images.as_ref().is_some_and(|i| i.mutate_digest)
    }

    /// Whether an ImageValidatingPolicy's `matchImageReferences` select
    /// `image` (false for a ValidatingPolicy, or an expression that fails).
    pub fn matches_image(&self, image: &str) -> bool {
        self.body
            .images
            .as_ref()
            .is_some_and(|i| i.matches_image(image).unwrap_or(false))
    }

    /// The source its results carry.
    fn source(&self) -> Source {
        if self.is_image_policy() {
            Source::ImageValidatingPolicy
        } else {
            Source::ValidatingPolicy
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ValidatingPolicy` or `NamespacedValidatingPolicy`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The namespace of a NamespacedValidatingPolicy (it applies only to
    /// resources in it); None for a ValidatingPolicy.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// `spec.evaluation.background.enabled` (default true).
    pub fn background(&self) -> bool {
        self.background
    }

    /// `spec.evaluation.admission.enabled` (default true).
    pub fn admission(&self) -> bool {
        self.admission
    }

    /// `spec.failurePolicy: Ignore` (default `Fail`).
    pub fn ignores_webhook_failures(&self) -> bool {
        self.ignore_failures
    }

    /// `spec.validationActions`.
    pub fn validation_actions(&self) -> &[ValidationAction] {
        &self.actions
    }

    /// The resources the policy (and its autogen variants) match, as
    /// `(group, version, plural)`; `*` stays `*`, subresources are left out.
    pub fn matched_resources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            body.matching.resources(&mut out);
        }
        out
    }

    /// The resources of the policy's own match constraints, its autogen
    /// variants left out: what its status's `RBACPermissionsGranted`
    /// checks, as Kyverno's does.
    pub fn declared_resources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        self.body.matching.resources(&mut out);
        out
    }

    /// [`ValidatingPolicy::matched_resources`], each with the admission
    /// operations its resource rule names: what the webhook registers.
    pub fn matched_resource_operations(&self) -> Vec<ResourceOperations> {
        let mut out = Vec::new();
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            body.matching.resources_with_operations(&mut out);
        }
        out
    }

    /// Evaluates the policy on a request: None when the match constraints
    /// (of the policy and of its autogen variants) do not select the
    /// resource; otherwise a result for the policy (rule = policy name):
    /// Skip when a match condition is false, Pass, Fail with the first
    /// failing validation's message, or Error.
    pub fn evaluate(&self, req: &EvalRequest, data: &dyn ClusterData) -> Option<RuleResult> {
        self.evaluate_with(req, None, data)
    }

    /// As [`ValidatingPolicy::evaluate`], with the request's objects
    /// converted to CEL values once, when a policy first needs them, and
    /// shared by every policy evaluated on it.
    pub(crate) fn evaluate_with<'a>(
        &self,
        req: &EvalRequest,
        objects: Option<(&'a Prepared, &VarMemo<'a>)>,
        data: &'a dyn ClusterData,
    ) -> Option<RuleResult> {
        self.evaluate_inner(req, objects, data, true)
    }

    /// As [`ValidatingPolicy::evaluate`] with every expression evaluated by
    /// the interpreter (what the fast path is compared with).
    #[cfg(test)]
    pub(crate) fn evaluate_interpreted(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Option<RuleResult> {
        self.evaluate_inner(req, None, data, false)
    }

    /// Whether the fast path alone gives the policy's result on `req`
    /// (false also when the policy does not match it).
    #[cfg(test)]
    pub(crate) fn fast_answers(&self, req: &EvalRequest) -> bool {
        let target = Target::of(req);
        std::iter::once(&self.body)
            .chain(&self.autogen)
            .find(|b| b.matching.matches(req, &target))
            .is_some_and(|body| fast_run(body, req).is_some())
    }

    fn evaluate_inner<'a>(
        &self,
        req: &EvalRequest,
        objects: Option<(&'a Prepared, &VarMemo<'a>)>,
        data: &'a dyn ClusterData,
        fast: bool,
    ) -> Option<RuleResult> {
        if self.is_image_policy() {
            // Alone, `required` sees this policy's verifications only.
            let record = crate::ivpol::Verifications::default();
            let (mut result, pending) = self.evaluate_images(req, data, &record)?;
            if let Some(message) = record.unverified(&pending) {
                result.status = Status::Fail;
                result.message = message;
            }
            return Some(result);
        }
        let body = self.selecting_body(req)?;
        let fast = fast.then(|| fast_run(body, req)).flatten();
        let (status, message) = fast.unwrap_or_else(|| self.run(body, req, objects, data));
        Some(RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message,
            source: Source::ValidatingPolicy,
        })
    }

    /// The body (the policy's, or an autogen variant's) whose match
    /// constraints select `req`; None when none does, or the policy is for
    /// another namespace or evaluation mode.
    fn selecting_body(&self, req: &EvalRequest) -> Option<&Body> {
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return None;
        }
        if self.mode != EvaluationMode::Kubernetes {
            return None;
        }
        let target = Target::of(req);
        std::iter::once(&self.body)
            .chain(&self.autogen)
            .find(|b| b.matching.matches(req, &target))
    }

    /// An ImageValidatingPolicy's `mutateDigest` on `req`, as Kyverno's
    /// mutating webhook applies it: when its match constraints and match
    /// conditions select the request, each pod image without a digest that
    /// `matchImageReferences` select becomes `IMAGE:TAG@DIGEST`, the digest
    /// the registry's. The mutated object and its result; None when
    /// nothing changed. An image the registry cannot give is left as it is
    /// (the validation reports it).
    pub(crate) fn mutate_digests(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Option<(Json, RuleResult)> {
        let body = self.selecting_body(req)?;
        let checks = body.images.as_ref().filter(|c| c.mutate_digest)?;
        let act = Activation::new(req, data);
        for (_, cond) in &body.conditions {
            if cond.eval_bool(&act) != Ok(true) {
                return None;
            }
        }
        let mut replaced = Vec::new();
        for image in crate::eval::pod_images(&req.object) {
            if image.contains('@')
                || !checks.matches_image(&image).unwrap_or(false)
                || replaced.iter().any(|(i, _)| *i == image)
            {
                continue;
            }
            let digest = data
                .image_data(&image)
                .ok()
                .and_then(|d| d["digest"].as_str().map(str::to_string));
            if let Some(digest) = digest {
                let pinned = crate::eval::with_digest(&image, &digest);
                replaced.push((image, pinned));
            }
        }
        if replaced.is_empty() {
            return None;
        }
        let mut object = (*req.object).clone();
        crate::eval::set_pod_images(&mut object, &replaced);
        Some((
            object,
            RuleResult {
                policy: self.name.clone(),
                rule: self.name.to_string(),
                status: Status::Pass,
                message: "mutated image digest".to_string(),
                source: self.source(),
            },
        ))
    }

    /// An ImageValidatingPolicy's result on `req` (see [`crate::ivpol`]),
    /// its verifications recorded in `record`, with the images whose
    /// verification `required` still asks for (empty unless it passed);
    /// None when it does not match.
    pub(crate) fn evaluate_images(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
        record: &crate::ivpol::Verifications,
    ) -> Option<(RuleResult, Vec<String>)> {
        let body = self.selecting_body(req)?;
        let checks = body.images.as_ref()?;
        let parts = BodyParts {
            conditions: &body.conditions,
            variables: &body.variables,
            validations: &body.validations,
        };
        let (status, message, pending) =
            crate::ivpol::run(checks, &parts, self.ignore_failures, req, data, record)?;
        Some((
            RuleResult {
                policy: self.name.clone(),
                rule: self.name.to_string(),
                status,
                message,
                source: self.source(),
            },
            pending,
        ))
    }

    fn run<'a>(
        &self,
        body: &Body,
        req: &EvalRequest,
        objects: Option<(&'a Prepared, &VarMemo<'a>)>,
        data: &'a dyn ClusterData,
    ) -> (Status, String) {
        let mut act = match objects {
            Some((prepared, memo)) => {
                Activation::shared(prepared.cel_objects(), data).with_memo(memo)
            }
            None => Activation::new(req, data),
        };
        let mut errors = Vec::new();
        for (name, cond) in &body.conditions {
            match cond.eval_bool(&act) {
                Ok(true) => {}
                Ok(false) => return (Status::Skip, String::new()),
                Err(e) => errors.push(format!("match condition '{name}': {e}")),
            }
        }
        if !errors.is_empty() {
            if self.ignore_failures {
                return (Status::Skip, String::new());
            }
            return (Status::Error, errors.join("; "));
        }
        act.bind_variables(&body.variables);
        run_validations(&body.validations, &act).unwrap_or((Status::Pass, String::new()))
    }
}

/// The validations in order on `act`: the first that fails (Fail with its
/// message, its message expression's, or the default) or errs; None when
/// all hold.
pub(crate) fn run_validations(
    validations: &[Validation],
    act: &Activation<'_, '_>,
) -> Option<(Status, String)> {
    for (i, v) in validations.iter().enumerate() {
        match v.expr.eval_bool(act) {
            Ok(true) => {}
            Ok(false) => {
                let mut message = v.message.clone();
                if let Some(me) = &v.message_expr {
                    message = match me.eval_string(act) {
                        Ok(m) => m,
                        Err(e) => format!("failed to evaluate message expression: {e}"),
                    };
                }
                if message.is_empty() {
                    message = default_message(i);
                }
                return Some((Status::Fail, message));
            }
            Err(e) => return Some((Status::Error, e)),
        }
    }
    None
}

/// The policy's result when the CEL fast path answers every expression it
/// needs (see [`crate::cel::fast`]), as [`ValidatingPolicy::run`] gives it:
/// `Skip` when a match condition is false, `Pass` when every validation
/// holds, `Fail` with the message of the first that does not (unless its
/// message is an expression). Anything else (an error, an expression the
/// fast path does not take) is None: the interpreter evaluates the policy.
fn fast_run(body: &Body, req: &EvalRequest) -> Option<(Status, String)> {
    let old = req.old_object.as_deref();
    // Match conditions see no variables.
    let mut scope = fast::Scope::new(&req.object, old, &[]);
    for (_, cond) in &body.conditions {
        match scope.eval_bool(cond.ast()) {
            Ok(true) => {}
            Ok(false) => return Some((Status::Skip, String::new())),
            Err(_) => return None,
        }
    }
    let mut scope = fast::Scope::new(&req.object, old, &body.variables);
    for (i, v) in body.validations.iter().enumerate() {
        match scope.eval_bool(v.expr.ast()) {
            Ok(true) => {}
            Ok(false) if v.message_expr.is_none() => {
                let message = if v.message.is_empty() {
                    default_message(i)
                } else {
                    v.message.clone()
                };
                return Some((Status::Fail, message));
            }
            _ => return None,
        }
    }
    Some((Status::Pass, String::new()))
}

/// The message of failed validation `i` that has none.
fn default_message(i: usize) -> String {
    format!("CEL expression validation failed at index {i}")
}

fn compile_body(spec: &Json, kind: &str, name: &str) -> Result<Body> {
    let matching = MatchResources::parse(
        &spec["matchConstraints"],
        kind,
        name,
        "spec.matchConstraints",
    )?;
    let conditions = compile_named_conditions(
        spec.get("matchConditions"),
        kind,
        name,
        "spec.matchConditions",
    )?;
    let images = if crate::ivpol::KINDS.contains(&kind) {
        Some(crate::ivpol::ImageChecks::compile(spec, kind, name)?)
    } else {
        None
    };
    let variables = compile_variables(spec.get("variables"), kind, name, "spec.variables")?;
    let validations = compile_validations(spec.get("validations"), kind, name, "spec.validations")?;
    crate::cel::rule::check_types(
        &variables,
        &validations,
        kind,
        name,
        "spec.variables",
        "spec.validations",
    )?;
    Ok(Body {
        matching,
        conditions,
        variables,
        validations,
        images,
    })
}

/// Whether Kyverno generates pod controller variants: the match selects
/// exactly `pods` of core v1, with no selectors, exclusions or names.
fn can_autogen(m: &Json) -> bool {
    let Ok(Some(m)) = Option::<MatchResources>::deserialize(m) else {
        return false;
    };
    m.is_single_plain_rule() && {
        let r = &m.rules[0];
        r.groups == [""] && r.versions == ["v1"] && r.resources == ["pods"]
    }
}

/// One autogen variant's targets: whether it is the CronJob variant, its
/// `matchConstraints`, and the condition that its object is one of the
/// targeted kinds.
pub(crate) struct AutogenTargets {
    pub(crate) cronjob: bool,
    pub(crate) match_constraints: Json,
    pub(crate) kind_guard: String,
}

/// The pod controller variants Kyverno's autogen derives for a policy
/// matching only pods (none if it matches anything else): one for the
/// controllers with a pod template at `spec.template`, one for CronJobs,
/// narrowed by `spec.autogen.podControllers.controllers`.
pub(crate) fn autogen_targets(spec: &Json) -> Vec<AutogenTargets> {
    let m = &spec["matchConstraints"];
    if !can_autogen(m) {
        return Vec::new();
    }
    let wanted: Vec<String> =
        match Vec::<String>::deserialize(&spec["autogen"]["podControllers"]["controllers"]) {
            Ok(list) => list.iter().map(|c| c.to_ascii_lowercase()).collect(),
            Err(_) => CONTROLLERS.iter().map(|c| c.0.to_string()).collect(),
        };
    let operations = m["resourceRules"][0]["operations"].clone();
    let mut out = Vec::new();
    for cronjob in [false, true] {
        let targets: Vec<_> = CONTROLLERS
            .iter()
            .filter(|c| c.4 == cronjob && wanted.iter().any(|w| w == c.0))
            .collect();
        if targets.is_empty() {
            continue;
        }
        // One resource rule per group/version.
        let mut rules: Vec<(String, String, Vec<String>)> = Vec::new();
        for t in &targets {
            match rules.iter_mut().find(|r| r.0 == t.1 && r.1 == t.2) {
                Some(r) => r.2.push(t.0.to_string()),
                None => rules.push((t.1.to_string(), t.2.to_string(), vec![t.0.to_string()])),
            }
        }
        rules.sort();
        let rules: Vec<Json> = rules
            .into_iter()
            .map(|(g, v, mut res)| {
                res.sort();
                serde_json::json!({
                    "apiGroups": [g], "apiVersions": [v], "resources": res,
                    "operations": operations.clone(),
                })
            })
            .collect();
        let mut pre: Vec<String> = targets
            .iter()
            .map(|t| {
                format!(
                    "(object.apiVersion == '{}/{}' && object.kind =='{}')",
                    t.1, t.2, t.3
                )
            })
            .collect();
        pre.sort();
        out.push(AutogenTargets {
            cronjob,
            match_constraints: serde_json::json!({ "resourceRules": rules }),
            kind_guard: pre.join("||"),
        });
    }
    out
}

/// The specs of the autogen variants: one for the controllers with a pod
/// template at `spec.template`, one for CronJobs.
fn autogen_specs(spec: &Json) -> Vec<Json> {
    let mut out = Vec::new();
    for AutogenTargets {
        cronjob,
        match_constraints,
        kind_guard: pre,
    } in autogen_targets(spec)
    {
        let mut s = spec.clone();
        if let Some(obj) = s.as_object_mut() {
            obj.remove("autogen");
            obj.insert("matchConstraints".into(), match_constraints);
            if let Some(Json::Array(conds)) = obj.get_mut("matchConditions") {
                for c in conds {
                    let e = c["expression"].as_str().unwrap_or("").to_string();
                    c["expression"] = Json::String(format!("!({pre}) || ({e})"));
                }
            }
        }
        let (spec_to, meta_to) = if cronjob {
            (
                "spec.jobTemplate.spec.template.spec",
                "spec.jobTemplate.spec.template.metadata",
            )
        } else {
            ("spec.template.spec", "spec.template.metadata")
        };
        rewrite_strings(&mut s, &|text| {
            let mut t = text.to_string();
            for (from, to) in [("spec", spec_to), ("metadata", meta_to)] {
                for root in ["object.", "oldObject."] {
                    t = replace_path(&t, &format!("{root}{from}"), &format!("{root}{to}"));
                }
            }
            t
        });
        out.push(s);
    }
    out
}

fn rewrite_strings(v: &mut Json, f: &dyn Fn(&str) -> String) {
    match v {
        Json::String(s) => *s = f(s),
        Json::Array(a) => a.iter_mut().for_each(|x| rewrite_strings(x, f)),
        Json::Object(o) => {
            for (k, x) in o.iter_mut() {
                if k != "matchConstraints" && k != "name" {
                    rewrite_strings(x, f);
                }
            }
        }
        _ => {}
    }
}

/// Replaces `from` with `to` in `data`, except where `from` is directly
/// followed by `.name` or `.namespace` (a workload's own name and namespace
/// stay its own), as Kyverno's autogen does.
fn replace_path(data: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(data.len());
    let mut rest = data;
    while let Some(i) = rest.find(from) {
        out.push_str(&rest[..i]);
        let after = &rest[i + from.len()..];
        let protected = [".name", ".namespace"].iter().any(|p| {
            after
                .strip_prefix(p)
                .is_some_and(|n| !n.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        });
        out.push_str(if protected { from } else { to });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
pub(crate) mod tests;
