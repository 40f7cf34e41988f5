//! `policies.kyverno.io` MutatingPolicy and NamespacedMutatingPolicy.
//!
//! A policy is compiled once into a [`MutatingPolicy`]: its match
//! constraints (as a ValidatingPolicy's), match conditions, variables and
//! mutations, plus the pod controller variants of Kyverno's autogen. Its
//! [`MutatingPolicy::mutate`] is pure: it returns the mutated object, a
//! copy, and never changes the policy or the request.
//!
//! # Evaluation, as Kyverno's mpol engine does it
//!
//! 1. The match constraints (and a namespaced policy's namespace) select
//!    the resource; if they do not, there is no result.
//! 2. Variables are bound, then the match conditions run (they may read
//!    `variables`); one that is false makes the result Skip, one that fails
//!    makes it Error.
//! 3. The mutations run in order, each on the object the previous one
//!    produced (CEL `object` is rebound between them): an ApplyConfiguration
//!    is merged with structured-merge semantics (the `merge` module), a JSONPatch's
//!    operations are applied in order (`crate::k8s::json_patch`, strictly). The first failure
//!    makes the result Error and the object is left as it was.
//! 4. Otherwise the result is Pass, whether or not the object changed (as
//!    Kyverno reports it).
//!
//! Variables are evaluated as Kubernetes' lazy variables are: once, when an
//! expression first reads them, so a variable first read by a later
//! mutation sees the object the earlier mutations produced (the `lazy` module).
//!
//! `failurePolicy` and `reinvocationPolicy` are admission settings: the
//! result says Error, and the admission component decides what an error
//! means ([`MutatingPolicy::ignores_failures`]).

pub mod admission;
mod autogen;
mod lazy;
mod literal;
mod merge;
mod schema;

use crate::eval::Prepared;
use crate::k8s::json_patch;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value as Json;

use crate::cel::rule::{Enabled, NamedExpression, SpecFields, typed_list};
use crate::cel::{Activation, Expr, Variable};
use crate::error::{Error, Result};
use crate::request::{ClusterData, EvalRequest};
use crate::result::{RuleResult, Source, Status};
use crate::vpol::{MatchResources, Target};

use literal::Literals;

/// The policy kinds [`MutatingPolicy::compile`] accepts.
pub const KINDS: &[&str] = &["MutatingPolicy", "NamespacedMutatingPolicy"];

/// Whether `doc` is a MutatingPolicy or NamespacedMutatingPolicy.
pub fn is_mutating_policy(doc: &Json) -> bool {
    crate::cel::rule::is_policy_kind(doc, KINDS)
}

/// `spec.reinvocationPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum Reinvocation {
    /// `Never` (the default).
    #[default]
    Never,
    /// `IfNeeded`: run again when a later mutation changed the object.
    IfNeeded,
}

/// One `spec.mutations[]` entry.
#[derive(Debug, Clone)]
enum Mutation {
    /// `patchType: ApplyConfiguration`: the expression builds an `Object`.
    Apply(Expr),
    /// `patchType: JSONPatch`: the expression builds a list of `JSONPatch`.
    JsonPatch(Expr),
}

/// The evaluable part of a policy: the policy itself or one autogen variant.
#[derive(Debug, Clone)]
struct Body {
    matching: MatchResources,
    conditions: Vec<(String, Expr)>,
    /// The variables to evaluate before the match conditions (stage 0) and
    /// before each mutation (stage `i + 1`), see [`lazy`].
    stages: Vec<Vec<Variable>>,
    mutations: Vec<Mutation>,
    /// Why an autogen variant does not compile (Kyverno derives it by
    /// rewriting the policy's text, which can produce an expression that
    /// does not type-check, e.g. `Object.metadata` moved under
    /// `Object.spec.template`): the resources it matches get an Error
    /// result, as Kyverno reports them, and the policy itself still works.
    broken: Option<String>,
}

/// A compiled MutatingPolicy or NamespacedMutatingPolicy. Immutable;
/// evaluate from any thread.
#[derive(Debug, Clone)]
pub struct MutatingPolicy {
    name: Arc<str>,
    kind: String,
    namespace: Option<String>,
    admission: bool,
    background: bool,
    mutate_existing: bool,
    ignore_failures: bool,
    reinvocation: Reinvocation,
    body: Body,
    autogen: Vec<Body>,
    /// What `evaluation.mutateExisting` mutates.
    targets: Targets,
}

/// The existing resources a policy with `evaluation.mutateExisting`
/// mutates: those `spec.targetMatchConstraints` selects (the match
/// constraints when it names no resources), on which
/// `spec.targetMatchConditions` hold (the policy's match conditions are
/// for the trigger).
#[derive(Debug, Clone)]
struct Targets {
    matching: Option<MatchResources>,
    conditions: Vec<(String, Expr)>,
    /// `targetMatchConstraints.expression` (targets listed by CEL), which
    /// leash does not evaluate: processing such a policy is an error.
    expression: bool,
}

impl MutatingPolicy {
    /// Compiles a policy document; errors name the field and the problem
    /// (a CEL parse error, an unknown patch type, a missing expression).
    pub fn compile(doc: &Json) -> Result<MutatingPolicy> {
        let crate::cel::rule::Header {
            kind,
            name,
            namespace,
        } = crate::cel::rule::Header::of(doc, KINDS)?;
        let spec = &doc["spec"];
        let header = SpecFields::of(spec, &kind, &name)?;
        let e = &header.evaluation;
        let body = compile_body(spec, &kind, &name)?;
        let tmc = &spec["targetMatchConstraints"];
        let targets = Targets {
            matching: match tmc["resourceRules"].as_array() {
                Some(r) if !r.is_empty() => Some(MatchResources::parse(
                    tmc,
                    &kind,
                    &name,
                    "spec.targetMatchConstraints",
                )?),
                _ => None,
            },
            conditions: compile_conditions(spec, "targetMatchConditions", &kind, &name)?,
            expression: tmc["expression"].as_str().is_some_and(|e| !e.is_empty()),
        };
        let autogen = autogen::specs(spec)
            .iter()
            .map(|s| {
                compile_body(s, &kind, &name).unwrap_or_else(|e| Body {
                    matching: MatchResources::parse(
                        &s["matchConstraints"],
                        &kind,
                        &name,
                        "spec.matchConstraints",
                    )
                    .unwrap_or_default(),
                    conditions: Vec::new(),
                    stages: Vec::new(),
                    mutations: Vec::new(),
                    broken: Some(format!("autogen: {e}")),
                })
            })
            .collect();
        Ok(MutatingPolicy {
            name: Arc::from(name.as_str()),
            kind,
            namespace,
            admission: Enabled::on(&e.admission),
            background: Enabled::on(&e.background),
            mutate_existing: Enabled::or(&e.mutate_existing, false),
            ignore_failures: header.ignores_failures(),
            reinvocation: header.reinvocation_policy.unwrap_or_default(),
            body,
            autogen,
            targets,
        })
    }

    /// `evaluation.mutateExisting.enabled`: admitted triggers (and, when
    /// the policy is created or changed, the policy itself) mutate the
    /// existing targets in the background.
    pub fn mutates_existing(&self) -> bool {
        self.mutate_existing
    }

    /// The resources mutate-existing targets are listed from, as
    /// `(group, version, plural)`: `targetMatchConstraints`' or, without
    /// resource rules there, the match constraints'.
    pub fn target_resources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        self.targets
            .matching
            .as_ref()
            .unwrap_or(&self.body.matching)
            .resources(&mut out);
        out
    }

    /// Whether an admitted `req` triggers mutate-existing: the policy
    /// mutates existing resources at admission, its match constraints
    /// select the request and its match conditions hold (an error in one
    /// counts as not holding, as Kyverno's matcher counts it).
    pub fn triggers(&self, req: &EvalRequest, data: &dyn ClusterData) -> bool {
        if !(self.mutate_existing && self.admission) {
            return false;
        }
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return false;
        }
        let target = Target::of(req);
        if !self.body.matching.matches(req, &target) {
            return false;
        }
        let mut act = Activation::new(req, data);
        act.bind_variables(self.body.stages.first().map_or(&[][..], Vec::as_slice));
        self.body
            .conditions
            .iter()
            .all(|(_, c)| c.eval_bool(&act).unwrap_or(false))
    }

    /// Mutates one existing target (`target.object`, with the trigger's
    /// operation and user): None when the target constraints do not
    /// select it; otherwise the result and, on Pass, the mutated object.
    pub fn mutate_target(
        &self,
        target: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Option<(RuleResult, Option<Json>)> {
        if let Some(ns) = &self.namespace
            && target.namespace() != ns
        {
            return None;
        }
        let t = Target::of(target);
        let matching = self
            .targets
            .matching
            .as_ref()
            .unwrap_or(&self.body.matching);
        if !matching.matches(target, &t) {
            return None;
        }
        let body = Body {
            conditions: self.targets.conditions.clone(),
            ..self.body.clone()
        };
        let outcome = if self.targets.expression {
            Err(RunError::Mutation(
                "targetMatchConstraints.expression is not supported by leash".to_string(),
            ))
        } else {
            run(&body, &Prepared::new(target.clone()), data, None)
        };
        Some(self.outcome(outcome))
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `MutatingPolicy` or `NamespacedMutatingPolicy`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The namespace of a NamespacedMutatingPolicy (it applies only to
    /// resources in it); None for a MutatingPolicy.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// `spec.evaluation.admission.enabled` (default true).
    pub fn admission(&self) -> bool {
        self.admission
    }

    /// `spec.evaluation.background.enabled` (default true).
    pub fn background(&self) -> bool {
        self.background
    }

    /// `spec.evaluation.mutateExisting.enabled` (default false).
    pub fn mutate_existing(&self) -> bool {
        self.mutate_existing
    }

    /// `spec.failurePolicy: Ignore`: an admission request is let through
    /// unmutated when the policy errors.
    pub fn ignores_failures(&self) -> bool {
        self.ignore_failures
    }

    /// `spec.reinvocationPolicy`.
    pub fn reinvocation(&self) -> Reinvocation {
        self.reinvocation
    }

    /// Whether Kyverno's CLI has a response of this policy for every
    /// resource of a test, matched or not: unless its match constraints
    /// are a single plain resource rule (as for a ValidatingPolicy).
    pub fn responds_to_every_resource(&self) -> bool {
        !self.body.matching.is_single_plain_rule()
    }

    /// The resources the policy (and its autogen variants) match, as
    /// `(group, version, plural)`.
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

    /// The resources the policy (and its autogen variants) match, with the
    /// operations its rules name that the mutating webhook is sent (CREATE
    /// and UPDATE).
    pub fn matched_resource_operations(&self) -> Vec<crate::vpol::ResourceOperations> {
        let mut out = Vec::new();
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            body.matching.resources_with_operations(&mut out);
        }
        for (_, ops) in &mut out {
            ops.retain(|o| matches!(*o, "CREATE" | "UPDATE"));
        }
        out.retain(|(_, ops)| !ops.is_empty());
        out
    }

    /// What its mutation at admission depends on ([`crate::MutationKey`]):
    /// `Unkeyed` when an expression reaches other data than the request
    /// (`resource`, `globalContext`, `image`, ...); the whole request when
    /// an expression uses `request`, reads the object's name (or what
    /// holds it), a mutation may write it, or matching selects by name.
    pub(crate) fn mutation_key(&self) -> crate::MutationKey {
        let mut reads = crate::ReadSet::empty();
        let mut name = false;
        for body in std::iter::once(&self.body).chain(&self.autogen) {
            let variables: Vec<Variable> = body.stages.iter().flatten().cloned().collect();
            let exprs = body
                .conditions
                .iter()
                .map(|(_, e)| e)
                .chain(body.mutations.iter().map(|m| match m {
                    Mutation::Apply(e) | Mutation::JsonPatch(e) => e,
                }));
            let uses = crate::cel::reads::object_reads(&variables, exprs, &mut |p, whole| {
                reads.add_segs(p, whole)
            });
            if uses.data {
                return crate::MutationKey::Unkeyed;
            }
            name |= uses.request
                || body.matching.selects_by_name()
                || body.mutations.iter().any(|m| {
                    let (Mutation::Apply(e) | Mutation::JsonPatch(e)) = m;
                    crate::reads::cel_writes_name(e.source())
                })
                // A variable may hold what a mutation writes.
                || variables
                    .iter()
                    .any(|v| crate::reads::cel_writes_name(v.expr.source()));
        }
        if name || reads.may_read(&["metadata", "name"]) {
            crate::MutationKey::Request
        } else {
            crate::MutationKey::RequestButName
        }
    }

    /// Mutates `req.object` (the object as earlier policies left it):
    /// None when the match constraints do not select it; otherwise the
    /// result for the policy (rule = policy name, source
    /// `KyvernoMutatingPolicy`) and the object: the mutated copy on Pass,
    /// `req.object` unchanged on Skip and Error.
    pub fn mutate(&self, req: &EvalRequest, data: &dyn ClusterData) -> Option<(RuleResult, Json)> {
        self.mutate_prepared(&Prepared::new(req.clone()), data)
            .map(|(result, object)| (result, object.unwrap_or_else(|| (*req.object).clone())))
    }

    /// [`MutatingPolicy::mutate`] with the request's objects converted to
    /// CEL values once for every policy run on the same object. The
    /// object is `None` when it is `req.object` unchanged (Skip, Error):
    /// the engine then keeps the object it has instead of deep-copying
    /// and comparing it.
    pub(crate) fn mutate_prepared(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
    ) -> Option<(RuleResult, Option<Json>)> {
        let req = prepared.request();
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return None;
        }
        let target = Target::of(req);
        let body = std::iter::once(&self.body)
            .chain(&self.autogen)
            .find(|b| b.matching.matches(req, &target))?;
        Some(self.outcome(run(body, prepared, data, None)))
    }

    /// The policy's result for a run, with the mutated object on Pass.
    fn outcome(
        &self,
        ran: std::result::Result<Option<Json>, RunError>,
    ) -> (RuleResult, Option<Json>) {
        let (status, message, object) = match ran {
            Ok(Some(object)) => (Status::Pass, "success".to_string(), Some(object)),
            Ok(None) => (Status::Skip, "skip".to_string(), None),
            Err(e) => (
                Status::Error,
                format!("failed to evaluate policy: {e}"),
                None,
            ),
        };
        let result = RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message,
            source: Source::MutatingPolicy,
        };
        (result, object)
    }
}

/// Why a matched body produced no object.
#[derive(Debug, Clone, PartialEq)]
enum RunError {
    /// A match condition could not be evaluated.
    Condition(String),
    /// A mutation failed (or the body does not compile).
    Mutation(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Condition(e) | RunError::Mutation(e) => f.write_str(e),
        }
    }
}

/// Runs a matched body with `params` bound (null when None): `Ok(None)`
/// when a match condition is false, the mutated object, or the first
/// error.
fn run(
    body: &Body,
    prepared: &Prepared,
    data: &dyn ClusterData,
    params: Option<&Json>,
) -> Result<Option<Json>, RunError> {
    if let Some(e) = &body.broken {
        return Err(RunError::Mutation(e.clone()));
    }
    let req = prepared.request();
    // One mutation reads the objects converted once for the request; a
    // later mutation sees the object the one before produced, which a
    // shared activation cannot rebind: those convert their own.
    let mut act = if body.mutations.len() > 1 {
        Activation::new(req, data)
    } else {
        Activation::shared(prepared.cel_objects(), data)
    };
    if let Some(p) = params {
        act.set_params(p);
    }
    let stage = |i: usize| body.stages.get(i).map_or(&[][..], Vec::as_slice);
    act.bind_variables(stage(0));
    let mut errors = Vec::new();
    for (name, cond) in &body.conditions {
        match cond.eval_bool(&act) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => errors.push(format!("match condition '{name}': {e}")),
        }
    }
    if !errors.is_empty() {
        return Err(RunError::Condition(errors.join("; ")));
    }
    // The first mutation patches the request's object itself (each patch
    // builds a new object), so it is not deep-copied up front.
    let mut object: Option<Json> = None;
    for (i, m) in body.mutations.iter().enumerate() {
        act.bind_variables(stage(i + 1));
        let next = apply(m, &act, object.as_ref().unwrap_or(&req.object))
            .map_err(|e| RunError::Mutation(format!("mutation {i}: {e}")))?;
        if i + 1 < body.mutations.len() {
            act.set_object(&next);
        }
        object = Some(next);
    }
    Ok(Some(object.unwrap_or_else(|| (*req.object).clone())))
}

fn apply(m: &Mutation, act: &Activation<'_, '_>, object: &Json) -> Result<Json, String> {
    match m {
        Mutation::Apply(expr) => {
            let value = expr.eval(act)?;
            let patch = to_json(&value)?;
            if !patch.is_object() {
                return Err(format!(
                    "an ApplyConfiguration expression must build an Object, got {}",
                    value.type_of()
                ));
            }
            let shape = schema::for_kind(
                object["apiVersion"].as_str().unwrap_or(""),
                object["kind"].as_str().unwrap_or(""),
            );
            merge::merge(object, &patch, shape)
        }
        Mutation::JsonPatch(expr) => {
            let value = expr.eval(act)?;
            let ops = match to_json(&value)? {
                Json::Array(items) => items
                    .iter()
                    .map(json_patch::Op::parse)
                    .collect::<Result<Vec<_>, _>>()?,
                other => {
                    return Err(format!(
                        "a JSONPatch expression must build a list of JSONPatch, got {other}"
                    ));
                }
            };
            match json_patch::apply(object, &ops, json_patch::Mode::Strict) {
                Ok(patched) => Ok(patched),
                // As Kubernetes: a failed `test` means "do not patch".
                Err(json_patch::Failure::TestFailed(_)) => Ok(object.clone()),
                Err(json_patch::Failure::Invalid(e)) => Err(e),
            }
        }
    }
}

fn to_json(v: &::cel::Value) -> Result<Json, String> {
    v.json()
        .map_err(|e| format!("the result cannot be converted to JSON: {e}"))
}

/// Compiles the expression `src` at `field`, its typed literals rewritten
/// ([`literal`]).
fn compile_typed(
    src: Option<&str>,
    literals: Literals,
    kind: &str,
    name: &str,
    field: &str,
) -> Result<Expr> {
    let src = src.ok_or_else(|| Error::invalid(kind, name, field, "expression is required"))?;
    Expr::compile_rewritten(src, |ast| literal::rewrite(ast, literals))
        .map_err(|e| Error::invalid(kind, name, field, e))
}

/// `spec.<key>` conditions (`matchConditions`, `targetMatchConditions`):
/// `(name, expression)`.
fn compile_conditions(
    spec: &Json,
    key: &str,
    kind: &str,
    name: &str,
) -> Result<Vec<(String, Expr)>> {
    let field = format!("spec.{key}");
    let mut conditions = Vec::new();
    for (i, c) in typed_list::<NamedExpression>(spec.get(key), kind, name, &field)?
        .into_iter()
        .enumerate()
    {
        let field = format!("{field}[{i}].expression");
        let expr = compile_typed(c.expression.as_deref(), Literals::Any, kind, name, &field)?;
        conditions.push((c.name.unwrap_or_default(), expr));
    }
    Ok(conditions)
}

/// A `spec.mutations[]` entry as written.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MutationDoc {
    patch_type: Option<PatchType>,
    apply_configuration: Option<NamedExpression>,
    json_patch: Option<NamedExpression>,
}

#[derive(serde::Deserialize)]
enum PatchType {
    ApplyConfiguration,
    #[serde(rename = "JSONPatch")]
    JsonPatch,
}

fn compile_body(spec: &Json, kind: &str, name: &str) -> Result<Body> {
    let matching = MatchResources::parse(
        &spec["matchConstraints"],
        kind,
        name,
        "spec.matchConstraints",
    )?;
    let conditions = compile_conditions(spec, "matchConditions", kind, name)?;
    let mut mutations = Vec::new();
    for (i, m) in typed_list::<MutationDoc>(spec.get("mutations"), kind, name, "spec.mutations")?
        .into_iter()
        .enumerate()
    {
        let field = format!("spec.mutations[{i}]");
        let (key, doc, literals, make): (_, _, _, fn(Expr) -> Mutation) = match m.patch_type {
            Some(PatchType::ApplyConfiguration) => (
                "applyConfiguration",
                m.apply_configuration,
                Literals::Object,
                Mutation::Apply,
            ),
            // A patch's value may be a typed object too:
            // `JSONPatch{op: "add", path: "/spec/initContainers/-",
            // value: Object.spec.initContainers{...}}`.
            Some(PatchType::JsonPatch) => (
                "jsonPatch",
                m.json_patch,
                Literals::Any,
                Mutation::JsonPatch,
            ),
            None => {
                return Err(Error::invalid(
                    kind,
                    name,
                    format!("{field}.patchType"),
                    "is required (ApplyConfiguration or JSONPatch)",
                ));
            }
        };
        let efield = format!("{field}.{key}.expression");
        let src = doc.and_then(|d| d.expression);
        let expr = compile_typed(src.as_deref(), literals, kind, name, &efield)?;
        mutations.push(make(expr));
    }
    let mut variables = Vec::new();
    for (i, v) in
        typed_list::<NamedExpression>(spec.get("variables"), kind, name, "spec.variables")?
            .into_iter()
            .enumerate()
    {
        let f = format!("spec.variables[{i}]");
        let var = v
            .name
            .ok_or_else(|| Error::invalid(kind, name, format!("{f}.name"), "name is required"))?;
        let f = format!("{f}.expression");
        let expr = compile_typed(v.expression.as_deref(), Literals::Any, kind, name, &f)?;
        variables.push(Variable::new(var, expr));
    }
    let reads: Vec<(String, BTreeSet<String>)> = variables
        .iter()
        .map(|v| (v.name.clone(), lazy::reads(v.expr.ast())))
        .collect();
    let mut stage_reads = vec![
        conditions
            .iter()
            .flat_map(|(_, e)| lazy::reads(e.ast()))
            .collect::<BTreeSet<_>>(),
    ];
    stage_reads.extend(mutations.iter().map(|m| match m {
        Mutation::Apply(e) | Mutation::JsonPatch(e) => lazy::reads(e.ast()),
    }));
    let stages = lazy::schedule(&reads, &stage_reads)
        .into_iter()
        .map(|due| due.into_iter().map(|i| variables[i].clone()).collect())
        .collect();
    Ok(Body {
        matching,
        conditions,
        stages,
        mutations,
        broken: None,
    })
}

#[cfg(test)]
mod corpus_tests;
#[cfg(test)]
mod tests;
