//! Evaluating a policy's mutate rules on one resource: each matching rule
//! patches the output of the previous one.

use std::sync::Arc;

use jmespath::Rcvar;
use serde_json::{Value, json};

use super::PatchedTarget;
use super::anchors;
use super::at_refs;
use super::merge;
use super::schema;
use super::spec::{ForeachPatch, MutateForeach, MutateSpec, Order, TargetSpec};
use crate::eval::{Bindings, Lazy, Prepared, RuleCtx, base_vars};
use crate::exception::Exception;
use crate::k8s::json_patch::{self, Failure};
use crate::matching::LabelSelector;
use crate::policy::{Policy, Rule};
use crate::request::{ClusterData, EvalRequest, Operation};
use crate::result::{RuleResult, Source, Status};
use crate::vars::{self, Vars, to_var};

/// What one patch (or one rule) did.
pub(crate) struct Patched {
    pub status: Status,
    pub message: String,
    /// The resource after the patch; `None` when it is the input as it
    /// was (Skip, Error), so that a patch that changes nothing does not
    /// deep-copy the whole resource.
    pub object: Option<Value>,
}

impl Patched {
    fn error(message: impl Into<String>) -> Patched {
        Patched {
            status: Status::Error,
            message: message.into(),
            object: None,
        }
    }

    fn skip(message: impl Into<String>) -> Patched {
        Patched {
            status: Status::Skip,
            message: message.into(),
            object: None,
        }
    }

    /// A patch's outcome on `input`, a partly patched copy of the object
    /// the caller was given (`None`: that object itself), as an outcome
    /// on the caller's object: an unchanged outcome names `input`.
    fn on(mut self, input: Option<Value>) -> Patched {
        if self.object.is_none() {
            self.object = input;
        }
        self
    }
}

/// Whether a mutate rule reads variables (its context, preconditions or
/// patch): one that does not is run with empty variables, so the JMESPath
/// copy of the whole resource is not built for it (a patch that applies
/// to every pod changes the object, and the next rule would build it
/// again).
fn reads_vars(rule: &Rule, spec: &MutateSpec) -> bool {
    if !rule.context.is_empty() || rule.preconditions.is_some() {
        return true;
    }
    match spec {
        MutateSpec::StrategicMerge(patch) => vars::has_vars(patch),
        MutateSpec::Json6902(text) => text.contains("{{"),
        MutateSpec::Foreach(_) | MutateSpec::Existing { .. } => true,
    }
}

/// Kyverno's message for a rule that patched the resource.
fn mutated_message(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("");
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    match object["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("mutated {kind}/{name} in namespace {ns}"),
        _ => format!("mutated {kind}/{name}"),
    }
}

impl Policy {
    /// Applies every matching mutate rule, in order, each to the output of
    /// the previous one. Returns the mutated object, one result per
    /// matching rule (per target found, for a `mutate.targets` rule) and
    /// the targets those rules patched. `req` is the admission request
    /// around `object` (its `object` is replaced by `object`). Without
    /// `with_targets`, `mutate.targets` rules are not run.
    pub(crate) fn mutate(
        &self,
        object: Arc<Value>,
        req: &EvalRequest,
        data: &dyn ClusterData,
        bindings: &Bindings,
        exceptions: &[Arc<Exception>],
        with_targets: bool,
    ) -> (Arc<Value>, Vec<RuleResult>, Vec<PatchedTarget>) {
        let prepared = Prepared::new(EvalRequest {
            object,
            ..req.clone()
        });
        let (prepared, out, targets) =
            self.mutate_prepared(prepared, req, data, bindings, exceptions, with_targets);
        (prepared.request().object.clone(), out, targets)
    }

    /// [`Policy::mutate`] on the object of `prepared` (a request as `req`
    /// around the current object), returning the request prepared around
    /// the object the rules leave: the engine hands it to the next policy,
    /// so a policy that patches nothing reuses the variables and CEL
    /// values built for the one before instead of rebuilding them.
    pub(crate) fn mutate_prepared(
        &self,
        mut prepared: Prepared,
        req: &EvalRequest,
        data: &dyn ClusterData,
        bindings: &Bindings,
        exceptions: &[Arc<Exception>],
        with_targets: bool,
    ) -> (Prepared, Vec<RuleResult>, Vec<PatchedTarget>) {
        let mut current = prepared.request().object.clone();
        let mut out = Vec::new();
        let mut targets = Vec::new();
        // The request around the current object, with its variables built
        // once per object (not once per rule): rebuilt when a rule patched.
        let around = |object: &Arc<Value>| {
            Prepared::new(EvalRequest {
                object: object.clone(),
                ..req.clone()
            })
        };
        for rule in &self.rules {
            let Some(spec) = &rule.mutate else {
                continue;
            };
            if !with_targets && matches!(spec, MutateSpec::Existing { .. }) {
                continue;
            }
            if !Arc::ptr_eq(&prepared.request().object, &current) {
                prepared = around(&current);
            }
            let cur_req = prepared.request();
            if let Some(ns) = &self.namespace
                && cur_req.namespace() != ns
            {
                return (prepared, out, targets);
            }
            let Some((bound, operation)) = self.selects(rule, cur_req, &cur_req.target(), bindings)
            else {
                continue;
            };
            let result = |status: Status, message: String| RuleResult {
                policy: self.key.clone(),
                rule: rule.name.clone(),
                status,
                message,
                source: Source::Kyverno,
            };
            if let Some(e) = exceptions
                .iter()
                .find(|e| e.applies(&self.key, &rule.name, &rule.base_name, &prepared, None))
            {
                out.push(result(
                    Status::Skip,
                    format!("rule skipped due to policy exception {}", e.key()),
                ));
                continue;
            }
            let mut vars = if !reads_vars(rule, spec) {
                Vars::new(Default::default())
            } else if operation == cur_req.operation {
                prepared.base().clone()
            } else {
                base_vars(cur_req, operation)
            };
            for (k, v) in &bound {
                vars.set_dotted(k, to_var(v));
            }
            let ctx = RuleCtx {
                policy: self,
                rule,
                req: cur_req,
                data,
                delete: operation == Operation::Delete,
                mocked: bound.iter().map(|(k, _)| k.clone()).collect(),
                // foreachValues are for validate rules' foreach lists.
                foreach_bound: &[],
            };
            if let MutateSpec::Existing {
                targets: specs,
                patch,
            } = spec
            {
                // The admitted resource stays as it is; each target found
                // gives a result of its own.
                for t in ctx.mutate_targets(specs, patch, vars) {
                    if let Some(object) = t.target {
                        targets.push(PatchedTarget {
                            rule: rule.name.clone(),
                            status: t.patched.status,
                            message: t.patched.message.clone(),
                            object: Arc::new(object),
                        });
                    }
                    out.push(result(t.patched.status, t.patched.message));
                }
                continue;
            }
            let patched = ctx.mutate_rule(spec, vars, &current);
            if patched.status == Status::Pass
                && let Some(object) = patched.object
            {
                current = Arc::new(object);
            }
            out.push(result(patched.status, patched.message));
        }
        if !Arc::ptr_eq(&prepared.request().object, &current) {
            prepared = around(&current);
        }
        (prepared, out, targets)
    }
}

impl Policy {
    /// The `mutate.targets` rules whose match and exclude select the
    /// request (its trigger), in order: what an UpdateRequest of type
    /// `mutate` names. Context and preconditions are left to the
    /// background, which evaluates the rule with the targets.
    pub fn mutate_existing_rules_for(&self, req: &EvalRequest, bindings: &Bindings) -> Vec<String> {
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return Vec::new();
        }
        let target = req.target();
        self.rules
            .iter()
            .filter(|r| matches!(r.mutate, Some(MutateSpec::Existing { .. })))
            .filter(|r| self.selects(r, req, &target, bindings).is_some())
            .map(|r| r.name.clone())
            .collect()
    }

    /// Runs the `mutate.targets` rules named in `rules` for the trigger in
    /// `req`: one result per target (or per rule that stopped before
    /// looking its targets up) and the targets as the patch leaves them.
    /// The targets are read from `data`.
    pub fn mutate_existing(
        &self,
        rules: &[String],
        req: &EvalRequest,
        data: &dyn ClusterData,
        exceptions: &[Arc<Exception>],
    ) -> (Vec<RuleResult>, Vec<PatchedTarget>) {
        let (_, mut results, mut targets) = self.mutate(
            req.object.clone(),
            req,
            data,
            &Bindings::default(),
            exceptions,
            true,
        );
        let named = |rule: &str| {
            rules.iter().any(|r| r == rule)
                && self.rules.iter().any(|x| {
                    x.name == rule && matches!(x.mutate, Some(MutateSpec::Existing { .. }))
                })
        };
        results.retain(|r| named(&r.rule));
        targets.retain(|t| named(&t.rule));
        (results, targets)
    }
}

/// What a `mutate.targets` rule did to one target (or, without a target,
/// why it did not run).
struct TargetOutcome {
    patched: Patched,
    /// The target (patched when `pass`); `None` when the rule stopped
    /// before looking targets up.
    target: Option<Value>,
}

impl RuleCtx<'_> {
    /// The rule's context and preconditions: `Err` is the result when the
    /// rule does not go on.
    fn rule_vars(&self, vars: Vars) -> Result<Vars, Patched> {
        let rule = self.rule;
        let vars = match self.load_context(&rule.context, &vars) {
            Ok(v) => v,
            Err(e) => {
                return Err(Patched::error(format!("failed to load context: {e}")));
            }
        };
        let lazy = Lazy::ready(vars);
        match self.preconditions(rule.preconditions.as_ref(), &lazy) {
            Ok(true) => {}
            Ok(false) => return Err(Patched::skip("preconditions not met")),
            Err(e) => {
                return Err(Patched::error(format!(
                    "failed to evaluate preconditions: {e}"
                )));
            }
        }
        if let Some(cel) = &rule.cel_preconditions {
            let (status, message) = cel.evaluate(self.req, self.data);
            if status != Status::Pass {
                return Err(Patched::skip(format!(
                    "cel preconditions not met: {message}"
                )));
            }
        }
        Ok(lazy.get().clone())
    }

    fn mutate_rule(&self, spec: &MutateSpec, vars: Vars, object: &Value) -> Patched {
        let vars = match self.rule_vars(vars) {
            Ok(v) => v,
            Err(p) => return p,
        };
        self.apply_patch(spec, &vars, object)
    }

    /// Applies a rule's patch to `object`.
    fn apply_patch(&self, spec: &MutateSpec, vars: &Vars, object: &Value) -> Patched {
        let mut patched = match spec {
            MutateSpec::StrategicMerge(p) => self.strategic_merge(p, vars, object),
            MutateSpec::Json6902(text) => self.json6902(text, vars, object),
            MutateSpec::Foreach(decls) => self.mutate_foreach(decls, vars, object, 0),
            MutateSpec::Existing { .. } => {
                return Patched::error("mutate.targets cannot be nested");
            }
        };
        if patched.status == Status::Pass
            && let Some(object) = &patched.object
        {
            patched.message = mutated_message(object);
        }
        patched
    }

    /// `mutate.targets`: the patch applied to each existing resource the
    /// targets name (Kyverno's mutate-existing handler), with `target`
    /// bound to it; the trigger is `request.object`.
    fn mutate_targets(
        &self,
        specs: &[TargetSpec],
        patch: &MutateSpec,
        vars: Vars,
    ) -> Vec<TargetOutcome> {
        let vars = match self.rule_vars(vars) {
            Ok(v) => v,
            Err(p) => {
                return vec![TargetOutcome {
                    patched: p,
                    target: None,
                }];
            }
        };
        let mut out = Vec::new();
        for spec in specs {
            let found = match self.find_targets(spec, &vars) {
                Ok(f) => f,
                Err(e) => {
                    out.push(TargetOutcome {
                        patched: Patched::error(format!("failed to load targets: {e}")),
                        target: None,
                    });
                    continue;
                }
            };
            for target in found {
                let tvars = vars.with("target", to_var(&target));
                let tvars = match self.load_context(&spec.context, &tvars) {
                    Ok(v) => v,
                    Err(e) => {
                        out.push(TargetOutcome {
                            patched: Patched::error(format!("failed to load context: {e}")),
                            target: Some(target),
                        });
                        continue;
                    }
                };
                let lazy = Lazy::ready(tvars);
                let patched = match self.preconditions(spec.preconditions.as_ref(), &lazy) {
                    Ok(true) => self.apply_patch(patch, lazy.get(), &target),
                    Ok(false) => Patched::skip("preconditions not met"),
                    Err(e) => Patched::error(format!("failed to evaluate preconditions: {e}")),
                };
                let object = patched.object.clone().unwrap_or(target);
                out.push(TargetOutcome {
                    patched,
                    target: Some(object),
                });
            }
        }
        out
    }

    /// The existing resources one target entry names, from the cluster
    /// data: its strings substituted, name and namespace matched with
    /// wildcards, the selector applied. A namespaced `Policy` reads its own
    /// namespace only.
    fn find_targets(&self, spec: &TargetSpec, vars: &Vars) -> Result<Vec<Value>, String> {
        let api_version = self.sub_str(&spec.api_version, vars)?;
        let kind = self.sub_str(&spec.kind, vars)?;
        let name = self.sub_str(&spec.name, vars)?;
        let mut namespace = self.sub_str(&spec.namespace, vars)?;
        if let Some(ns) = &self.policy.namespace {
            namespace = ns.clone();
        }
        let selector = match &spec.selector {
            None => None,
            Some(s) => {
                let s = self.substitute(s, vars)?;
                let err = |field: String, message: String| {
                    crate::Error::invalid("ClusterPolicy", "", field, message)
                };
                Some(LabelSelector::parse(&s, "selector", &err).map_err(|e| e.to_string())?)
            }
        };
        let listed_ns = if crate::wildcard::has_wildcard(&namespace) {
            ""
        } else {
            namespace.as_str()
        };
        let objects = self.data.list(&api_version, &kind, listed_ns);
        Ok(objects
            .iter()
            .filter(|o| {
                let meta = &o["metadata"];
                let oname = meta["name"].as_str().unwrap_or("");
                let ons = meta["namespace"].as_str().unwrap_or("");
                (name.is_empty() || crate::wildcard::matches(&name, oname))
                    && (namespace.is_empty() || crate::wildcard::matches(&namespace, ons))
                    && selector
                        .as_ref()
                        .is_none_or(|s| s.matches_json(meta["labels"].as_object()))
            })
            .map(|o| (**o).clone())
            .collect())
    }

    /// The outcome of one patch: pass when it changed the object.
    fn outcome(&self, result: Result<Value, String>, object: &Value) -> Patched {
        match result {
            Err(e) => Patched::error(format!("failed to patch resource: {e}")),
            Ok(v) if v == *object => Patched::skip("no patches applied"),
            Ok(v) => Patched {
                status: Status::Pass,
                message: "resource patched".into(),
                object: Some(v),
            },
        }
    }

    fn substitute(&self, doc: &Value, vars: &Vars) -> Result<Value, String> {
        if !vars::has_vars(doc) {
            return Ok(doc.clone());
        }
        if at_refs::any(doc) {
            // `{{@}}` reads the target of a mutate-existing rule, else the
            // admitted resource.
            let root = if vars.has("target") {
                "target"
            } else {
                "request.object"
            };
            let doc = at_refs::resolve(doc, root);
            return vars::substitute(&doc, vars, &self.policy.cache, self.delete);
        }
        vars::substitute(doc, vars, &self.policy.cache, self.delete)
    }

    fn strategic_merge(&self, patch: &Value, vars: &Vars, object: &Value) -> Patched {
        let mut overlay = match self.substitute(patch, vars) {
            Ok(p) => p,
            Err(e) => return Patched::error(format!("variable substitution failed: {e}")),
        };
        if anchors::preprocess(&mut overlay, object).is_err() {
            // A condition that does not hold: the patch applies nothing.
            return Patched::skip("no patches applied");
        }
        let schema = schema::for_resource(
            object["apiVersion"].as_str().unwrap_or(""),
            object["kind"].as_str().unwrap_or(""),
        );
        self.outcome(merge::merge(object, &overlay, schema), object)
    }

    fn json6902(&self, text: &str, vars: &Vars, object: &Value) -> Patched {
        let text = match self.substitute(&Value::String(text.to_string()), vars) {
            Ok(Value::String(s)) => s,
            Ok(other) => vars::go_format(&other),
            Err(e) => return Patched::error(format!("variable substitution failed: {e}")),
        };
        let doc: Value = match serde_saphyr::from_str(&text) {
            Ok(d) => d,
            Err(e) => {
                return Patched::error(format!(
                    "failed to patch resource: patchesJson6902 is not valid YAML: {e}"
                ));
            }
        };
        let result = json_patch::parse(&doc).and_then(|ops| {
            json_patch::apply(object, &ops, json_patch::Mode::Kyverno).map_err(|e| match e {
                Failure::Invalid(e) | Failure::TestFailed(e) => e,
            })
        });
        self.outcome(result, object)
    }

    fn mutate_foreach(
        &self,
        decls: &[MutateForeach],
        vars: &Vars,
        object: &Value,
        nesting: usize,
    ) -> Patched {
        // The patched copy, made by the first declaration that patches.
        let mut resource: Option<Value> = None;
        let mut vars = vars.clone();
        let mut applied = 0;
        for decl in decls {
            let list = match self
                .policy
                .cache
                .get(&decl.list)
                .and_then(|e| vars.eval(&e))
            {
                Ok(v) => v,
                Err(e) => {
                    return Patched::error(format!("failed to evaluate list {}: {e}", decl.list));
                }
            };
            let elements = match list {
                Value::Array(items) => items,
                Value::Null => Vec::new(),
                other => vec![other],
            };
            let current = resource.as_ref().unwrap_or(object);
            let r = self.mutate_elements(decl, &elements, &vars, current, nesting);
            match r.status {
                Status::Error | Status::Fail => return r.on(resource),
                Status::Skip => {}
                _ => {
                    applied += 1;
                    if let Some(patched) = r.object {
                        // Later declarations see the patched resource.
                        vars.set_dotted("request.object", to_var(&patched));
                        resource = Some(patched);
                    }
                }
            }
        }
        let message = format!("{applied} elements processed");
        if applied == 0 {
            return Patched::skip(message);
        }
        Patched {
            status: Status::Pass,
            message,
            // A declaration that passed patched the resource.
            object: Some(resource.unwrap_or_else(|| object.clone())),
        }
    }

    fn mutate_elements(
        &self,
        decl: &MutateForeach,
        elements: &[Value],
        vars: &Vars,
        object: &Value,
        nesting: usize,
    ) -> Patched {
        let descending = match decl.order {
            Some(o) => o == Order::Descending,
            // Kyverno walks a strategic merge foreach backwards by default.
            None => matches!(decl.patch, ForeachPatch::StrategicMerge(_)),
        };
        let mut order: Vec<usize> = (0..elements.len()).collect();
        if descending {
            order.reverse();
        }
        // The patched copy, made by the first element that patches.
        let mut patched: Option<Value> = None;
        for index in order {
            let element = &elements[index];
            if element.is_null() {
                continue;
            }
            let el: Rcvar = to_var(element);
            let idx = to_var(&json!(index));
            let v = vars
                .with("element", el.clone())
                .with("elementIndex", idx.clone())
                .with(&format!("element{nesting}"), el)
                .with(&format!("elementIndex{nesting}"), idx);
            let v = match self.load_context(&decl.context, &v) {
                Ok(v) => v,
                Err(e) => {
                    return Patched::error(format!(
                        "failed to load to mutate.foreach[{index}].context: {e}"
                    ));
                }
            };
            let lazy = Lazy::ready(v);
            match self.preconditions(decl.preconditions.as_ref(), &lazy) {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    return Patched::error(format!(
                        "failed to evaluate mutate.foreach[{index}].preconditions: {e}"
                    ));
                }
            }
            let v = lazy.get();
            let current = patched.as_ref().unwrap_or(object);
            let r = match &decl.patch {
                ForeachPatch::Nested(inner) => self.mutate_foreach(inner, v, current, nesting + 1),
                ForeachPatch::StrategicMerge(p) => self.strategic_merge(p, v, current),
                ForeachPatch::Json6902(text) => self.json6902(text, v, current),
            };
            match r.status {
                Status::Error | Status::Fail => return r.on(patched),
                Status::Pass => {
                    if let Some(object) = r.object {
                        patched = Some(object);
                    }
                }
                _ => {}
            }
        }
        match patched {
            Some(patched) if patched != *object => Patched {
                status: Status::Pass,
                message: String::new(),
                object: Some(patched),
            },
            _ => Patched::skip("no patches applied"),
        }
    }
}
