//! `validate.cel` of a classic Kyverno rule.

use serde_json::Value as Json;

use super::{Activation, Expr, Variable};
use crate::error::{Error, Result};
use crate::request::{ClusterData, EvalRequest};
use crate::result::Status;
use crate::vpol::MatchResources;

/// One `validate.cel.expressions[]` entry.
#[derive(Debug, Clone)]
pub(crate) struct Validation {
    pub(crate) expr: Expr,
    pub(crate) message: String,
    pub(crate) message_expr: Option<Expr>,
}

impl Validation {
    /// Its expression and message expression.
    pub(crate) fn exprs(&self) -> impl Iterator<Item = &Expr> {
        std::iter::once(&self.expr).chain(&self.message_expr)
    }

    /// The failure message, as Kubernetes' validator builds it: the message
    /// expression's result when it evaluates to a non-blank string, else the
    /// static message, else `failed expression: <expression>`.
    pub(crate) fn failure_message(&self, act: &Activation<'_, '_>) -> String {
        if let Some(me) = &self.message_expr
            && let Ok(m) = me.eval_string(act)
            && !m.trim().is_empty()
        {
            return m;
        }
        self.static_message()
    }

    /// The failure message without the message expression: the static
    /// message, else `failed expression: <expression>`.
    /// An expression's error in Kubernetes' words.
    pub(crate) fn error_text(&self, error: &impl std::fmt::Display) -> String {
        format!(
            "expression '{}' resulted in error: {error}",
            self.expr.source().trim()
        )
    }

    pub(crate) fn static_message(&self) -> String {
        if !self.message.is_empty() {
            return self.message.clone();
        }
        format!("failed expression: {}", self.expr.source().trim())
    }
}

/// The first validation that does not hold: `Fail` with its message, or
/// `on_error` when its expression fails to evaluate; `Pass` when all hold.
pub(crate) fn run_validations(
    validations: &[Validation],
    act: &Activation<'_, '_>,
    on_error: Status,
) -> (Status, String) {
    for v in validations {
        match v.expr.eval_bool(act) {
            Ok(true) => {}
            Ok(false) => return (Status::Fail, v.failure_message(act)),
            Err(e) => return (on_error, v.error_text(&e)),
        }
    }
    (Status::Pass, String::new())
}

/// Compiles a `[{name, expression}]` list at `field`.
/// cel-go's type check of `validations` (at `field`) with `variables` (at
/// `variables_field`) typed by their expressions: an operator applied to
/// operands whose types are known and that no overload takes is refused,
/// naming the field ([`super::types`]).
pub(crate) fn check_types(
    variables: &[Variable],
    validations: &[Validation],
    kind: &str,
    policy: &str,
    variables_field: &str,
    field: &str,
) -> Result<()> {
    super::types::check_with_variables(
        variables.iter().enumerate().map(|(i, v)| {
            (
                format!("{variables_field}[{i}].expression"),
                v.name.as_str(),
                v.expr.ast(),
            )
        }),
        validations
            .iter()
            .enumerate()
            .flat_map(|(i, v)| v.exprs().map(move |e| (format!("{field}[{i}]"), e.ast()))),
    )
    .map_err(|(at, message)| Error::invalid(kind, policy, at, message))
}

/// What every CEL policy kind's `compile` starts from: the document's
/// kind, its name (required) and, for a `Namespaced` kind, its namespace
/// (`default` when it names none).
#[derive(Debug)]
pub(crate) struct Header {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
}

impl Header {
    /// The header of `doc` when it is one of `kinds` of
    /// `policies.kyverno.io` (else [`Error::Unsupported`]).
    pub(crate) fn of(doc: &Json, kinds: &[&str]) -> Result<Header> {
        Header::in_group(doc, "policies.kyverno.io", kinds)
    }

    /// The header of `doc` when it is one of `kinds` of API `group`.
    pub(crate) fn in_group(doc: &Json, group: &str, kinds: &[&str]) -> Result<Header> {
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        if !is_kind_in(doc, group, kinds) {
            return Err(Error::Unsupported(format!(
                "{} {kind} {name}",
                doc["apiVersion"].as_str().unwrap_or("")
            )));
        }
        if name.is_empty() {
            return Err(Error::invalid(
                &kind,
                &name,
                "metadata.name",
                "name is required",
            ));
        }
        let namespace = kind.starts_with("Namespaced").then(|| {
            doc["metadata"]["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or("default")
                .to_string()
        });
        Ok(Header {
            kind,
            name,
            namespace,
        })
    }
}

/// Whether `doc` is one of `kinds` of the `policies.kyverno.io` group (its
/// versions are the schema check's to refuse).
pub(crate) fn is_policy_kind(doc: &Json, kinds: &[&str]) -> bool {
    is_kind_in(doc, "policies.kyverno.io", kinds)
}

/// Whether `doc` is one of `kinds` of API `group`.
pub(crate) fn is_kind_in(doc: &Json, group: &str, kinds: &[&str]) -> bool {
    doc["apiVersion"].as_str().unwrap_or("").split('/').next() == Some(group)
        && kinds.contains(&doc["kind"].as_str().unwrap_or(""))
}

/// What the CEL policy kinds' `compile`s read of a `spec` besides their
/// expression lists, typed: each kind reads its own fields (the schema
/// check has refused the others').
#[derive(Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct SpecFields {
    pub match_constraints: Option<MatchResources>,
    /// A ValidatingAdmissionPolicyBinding's.
    pub match_resources: Option<MatchResources>,
    /// A ValidatingAdmissionPolicyBinding's.
    pub policy_name: Option<String>,
    pub failure_policy: Option<crate::model::FailurePolicy>,
    #[serde(deserialize_with = "crate::model::nullable")]
    pub validation_actions: Vec<crate::vpol::ValidationAction>,
    #[serde(deserialize_with = "crate::model::nullable")]
    pub evaluation: Evaluation,
    /// A DeletingPolicy's.
    pub schedule: Option<String>,
    /// A MutatingPolicy's or MutatingAdmissionPolicy's.
    pub reinvocation_policy: Option<crate::mpol::Reinvocation>,
    /// A MutatingAdmissionPolicy's.
    pub param_kind: Option<ParamKind>,
    /// A MutatingAdmissionPolicyBinding's.
    pub param_ref: Option<ParamRef>,
}

/// An admission policy's `paramKind`.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ParamKind {
    pub api_version: Option<String>,
    pub kind: Option<String>,
}

/// An admission policy binding's `paramRef`.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct ParamRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub selector: Option<crate::matching::LabelSelector>,
}

impl SpecFields {
    /// The fields of `spec` of policy `policy` of kind `kind`.
    pub(crate) fn of(spec: &Json, kind: &str, policy: &str) -> Result<SpecFields> {
        let err = |f: String, m: String| Error::invalid(kind, policy, f, m);
        crate::model::parse(spec, "spec", &err)
    }

    /// `failurePolicy: Ignore` (default `Fail`).
    pub(crate) fn ignores_failures(&self) -> bool {
        self.failure_policy == Some(crate::model::FailurePolicy::Ignore)
    }
}

/// `spec.evaluation` of the CEL policy kinds (each reads its own; the
/// schema check has refused the others').
#[derive(Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct Evaluation {
    pub admission: Option<Enabled>,
    pub background: Option<Enabled>,
    pub mode: Option<crate::vpol::EvaluationMode>,
    pub synchronize: Option<Enabled>,
    pub generate_existing: Option<Enabled>,
    pub orphan_downstream_on_policy_delete: Option<Enabled>,
    pub mutate_existing: Option<Enabled>,
}

/// One `{enabled}` setting of `spec.evaluation`.
#[derive(serde::Deserialize)]
pub(crate) struct Enabled {
    enabled: Option<bool>,
}

impl Enabled {
    /// Whether `e` (maybe absent) is enabled, `default` when it says not.
    pub(crate) fn or(e: &Option<Enabled>, default: bool) -> bool {
        e.as_ref().and_then(|e| e.enabled).unwrap_or(default)
    }

    /// Whether `e` (maybe absent) leaves it enabled (the default).
    pub(crate) fn on(e: &Option<Enabled>) -> bool {
        Enabled::or(e, true)
    }
}

/// A `{name, expression}` entry: a variable or a match condition.
#[derive(serde::Deserialize)]
pub(crate) struct NamedExpression {
    pub name: Option<String>,
    pub expression: Option<String>,
}

/// A `{expression, message, messageExpression}` entry.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValidationDoc {
    expression: Option<String>,
    message: Option<String>,
    message_expression: Option<String>,
}

/// The list at `field` (`None` or `null`: empty) as `T`s.
pub(crate) fn typed_list<T: serde::de::DeserializeOwned>(
    list: Option<&Json>,
    kind: &str,
    policy: &str,
    field: &str,
) -> Result<Vec<T>> {
    let err = |f: String, m: String| Error::invalid(kind, policy, f, m);
    let list = list.unwrap_or(&Json::Null);
    crate::model::parse::<Option<Vec<T>>>(list, field, &err).map(Option::unwrap_or_default)
}

pub(crate) fn compile_variables(
    list: Option<&Json>,
    kind: &str,
    policy: &str,
    field: &str,
) -> Result<Vec<Variable>> {
    let mut out = Vec::new();
    for (i, v) in typed_list::<NamedExpression>(list, kind, policy, field)?
        .into_iter()
        .enumerate()
    {
        let f = format!("{field}[{i}]");
        let name = v
            .name
            .ok_or_else(|| Error::invalid(kind, policy, format!("{f}.name"), "name is required"))?;
        let expr = compile_expr(
            v.expression.as_deref(),
            kind,
            policy,
            &format!("{f}.expression"),
        )?;
        let var = Variable::shareable(name, expr, out.last());
        out.push(var);
    }
    Ok(out)
}

/// Compiles a `[{name, expression}]` list of conditions at `field` (the
/// `matchConditions` of the CEL policy kinds, a DeletingPolicy's
/// `conditions`): each condition's name (empty when absent) and expression.
pub(crate) fn compile_named_conditions(
    list: Option<&Json>,
    kind: &str,
    policy: &str,
    field: &str,
) -> Result<Vec<(String, Expr)>> {
    let mut out = Vec::new();
    for (i, c) in typed_list::<NamedExpression>(list, kind, policy, field)?
        .into_iter()
        .enumerate()
    {
        let f = format!("{field}[{i}].expression");
        let expr = compile_expr(c.expression.as_deref(), kind, policy, &f)?;
        out.push((c.name.unwrap_or_default(), expr));
    }
    Ok(out)
}

/// Compiles a `[{expression, message, messageExpression}]` list at `field`.
pub(crate) fn compile_validations(
    list: Option<&Json>,
    kind: &str,
    policy: &str,
    field: &str,
) -> Result<Vec<Validation>> {
    let mut out = Vec::new();
    for (i, v) in typed_list::<ValidationDoc>(list, kind, policy, field)?
        .into_iter()
        .enumerate()
    {
        let f = format!("{field}[{i}]");
        let expr = compile_expr(
            v.expression.as_deref(),
            kind,
            policy,
            &format!("{f}.expression"),
        )?;
        let message_expr = match &v.message_expression {
            None => None,
            Some(m) => Some(compile_expr(
                Some(m),
                kind,
                policy,
                &format!("{f}.messageExpression"),
            )?),
        };
        out.push(Validation {
            expr,
            message: v.message.unwrap_or_default(),
            message_expr,
        });
    }
    Ok(out)
}

/// The expression `src` at `field` (required), compiled.
pub(crate) fn compile_expr(
    src: Option<&str>,
    kind: &str,
    policy: &str,
    field: &str,
) -> Result<Expr> {
    let src = src.ok_or_else(|| Error::invalid(kind, policy, field, "expression is required"))?;
    Expr::compile(src).map_err(|e| Error::invalid(kind, policy, field, e))
}

/// A compiled classic `validate.cel` block: `{expressions, variables,
/// paramKind, paramRef, auditAnnotations}`. Immutable; evaluate from any
/// thread.
#[derive(Debug, Clone)]
pub struct CelRule {
    validations: Vec<Validation>,
    variables: Vec<Variable>,
    has_params: bool,
}

impl CelRule {
    /// Compiles `spec` (the `validate.cel` object) of policy `policy` of
    /// kind `kind`; `field` is the block's path, e.g.
    /// `spec.rules[0].validate.cel`, and errors name the expression's field
    /// (`spec.rules[0].validate.cel.expressions[1].expression`).
    pub fn compile(spec: &Json, kind: &str, policy: &str, field: &str) -> Result<CelRule> {
        if !spec.is_object() {
            return Err(Error::invalid(kind, policy, field, "must be an object"));
        }
        let variables = compile_variables(
            spec.get("variables"),
            kind,
            policy,
            &format!("{field}.variables"),
        )?;
        let validations = compile_validations(
            spec.get("expressions"),
            kind,
            policy,
            &format!("{field}.expressions"),
        )?;
        check_types(
            &variables,
            &validations,
            kind,
            policy,
            &format!("{field}.variables"),
            &format!("{field}.expressions"),
        )?;
        let has_params = spec.get("paramKind").is_some_and(|p| !p.is_null())
            || spec.get("paramRef").is_some_and(|p| !p.is_null());
        Ok(CelRule {
            validations,
            variables,
            has_params,
        })
    }

    /// Uses `message` (the rule's `validate.message`) for expressions that
    /// have no `message` of their own, as Kyverno does.
    pub fn with_default_message(mut self, message: &str) -> CelRule {
        for v in &mut self.validations {
            if v.message.is_empty() {
                v.message = message.to_string();
            }
        }
        self
    }

    /// What its variables and expressions read of `object` and
    /// `oldObject` (see [`super::reads`]).
    pub(crate) fn reads<'a>(
        &'a self,
        out: &mut dyn FnMut(&[crate::reads::Seg<'a>], bool),
    ) -> super::reads::Uses {
        let exprs = self.validations.iter().flat_map(Validation::exprs);
        super::reads::object_reads(&self.variables, exprs, out)
    }

    /// Whether the rule uses `params` (`paramKind`/`paramRef`), which this
    /// engine binds to null.
    pub fn has_params(&self) -> bool {
        self.has_params
    }

    /// Evaluates the rule: `(Pass, "")` when every expression is true,
    /// `(Fail, message)` for the first expression that is false. As in
    /// Kyverno (Kubernetes' validator with failure policy `Fail`), an
    /// expression that errors or is not a bool denies too: `(Fail, error
    /// text)`.
    pub fn evaluate(&self, req: &EvalRequest, data: &dyn ClusterData) -> (Status, String) {
        self.fast(req)
            .unwrap_or_else(|| self.evaluate_interpreted(req, data))
    }

    /// Evaluates the rule as a classic rule's `celPreconditions`: true when
    /// every expression is, false at the first false one. Kyverno hands
    /// them to Kubernetes' validator as match conditions (failure policy
    /// `Fail`), so one that errors is the error Kubernetes words,
    /// `expression '<expression>' resulted in error: <error>`, which the
    /// rule reports as a failure.
    pub(crate) fn preconditions(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Result<bool, String> {
        if let Some((status, _)) = self.fast(req) {
            return Ok(status == Status::Pass);
        }
        let mut act = Activation::new(req, data);
        act.bind_variables(&self.variables);
        for v in &self.validations {
            match v.expr.eval_bool(&act) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => return Err(v.error_text(&e)),
            }
        }
        Ok(true)
    }

    /// The result when the fast path (see [`super::fast`]) answers every
    /// expression: `Pass`, or `Fail` with the first false expression's
    /// message when that is not an expression; otherwise None.
    fn fast(&self, req: &EvalRequest) -> Option<(Status, String)> {
        let mut scope =
            super::fast::Scope::new(&req.object, req.old_object.as_deref(), &self.variables);
        for v in &self.validations {
            match scope.eval_bool(v.expr.ast()) {
                Ok(true) => {}
                Ok(false) if v.message_expr.is_none() => {
                    return Some((Status::Fail, v.static_message()));
                }
                _ => return None,
            }
        }
        Some((Status::Pass, String::new()))
    }

    /// [`CelRule::evaluate`] with every expression evaluated by the
    /// interpreter.
    pub(crate) fn evaluate_interpreted(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> (Status, String) {
        let mut act = Activation::new(req, data);
        act.bind_variables(&self.variables);
        // A classic `validate.cel` rule reports a failing expression as a
        // failure, as Kyverno does.
        run_validations(&self.validations, &act, Status::Fail)
    }
}
