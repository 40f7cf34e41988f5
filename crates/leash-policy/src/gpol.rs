//! `policies.kyverno.io` GeneratingPolicy (CEL): match constraints, match
//! conditions, variables, and `generate[].expression`s calling
//! `generator.Apply(namespace, [objects])`.
//!
//! Evaluation is pure, as for every policy: `generator.Apply` records the
//! namespace and the objects in the evaluation's own sink and returns true
//! (so it also works inside macros: `nsList.all(ns, generator.Apply(ns,
//! [...]))`), and [`GeneratingPolicy::generate`] turns what was recorded
//! into the downstream objects, each with its namespace and Kyverno's
//! `generate.kyverno.io/*` labels; creating them is the caller's job.

use std::sync::Arc;

use serde_json::Value as Json;

use crate::cel::libs::GeneratedSink;
use crate::cel::rule::{
    Enabled, Header, NamedExpression, SpecFields, compile_expr, compile_named_conditions,
    compile_variables, typed_list,
};
use crate::cel::{Activation, Expr, Variable};
use crate::error::{Error, Result};
use crate::generate::{Generated, labels_for, with_labels};
use crate::request::{ClusterData, EvalRequest};
use crate::result::{RuleResult, Source, Status};
use crate::vpol::{MatchResources, Target};

/// The policy kinds [`GeneratingPolicy::compile`] accepts.
pub const KINDS: &[&str] = &["GeneratingPolicy", "NamespacedGeneratingPolicy"];

/// Whether `doc` is a GeneratingPolicy or NamespacedGeneratingPolicy.
pub fn is_generating_policy(doc: &Json) -> bool {
    crate::cel::rule::is_policy_kind(doc, KINDS)
}

/// A compiled GeneratingPolicy. Immutable; evaluate from any thread.
#[derive(Debug, Clone)]
pub struct GeneratingPolicy {
    name: Arc<str>,
    kind: String,
    namespace: Option<String>,
    matching: MatchResources,
    conditions: Vec<(String, Expr)>,
    variables: Vec<Variable>,
    generates: Vec<Expr>,
    synchronize: bool,
    generate_existing: bool,
    orphan_on_policy_delete: bool,
}

impl GeneratingPolicy {
    /// Compiles a policy document; errors name the field.
    pub fn compile(doc: &Json) -> Result<GeneratingPolicy> {
        let Header {
            kind,
            name,
            namespace,
        } = Header::of(doc, KINDS)?;
        let spec = &doc["spec"];
        let header = SpecFields::of(spec, &kind, &name)?;
        let conditions = compile_named_conditions(
            spec.get("matchConditions"),
            &kind,
            &name,
            "spec.matchConditions",
        )?;
        let variables = compile_variables(spec.get("variables"), &kind, &name, "spec.variables")?;
        let generates: Vec<Expr> =
            typed_list::<NamedExpression>(spec.get("generate"), &kind, &name, "spec.generate")?
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let field = format!("spec.generate[{i}].expression");
                    compile_expr(g.expression.as_deref(), &kind, &name, &field)
                })
                .collect::<Result<_>>()?;
        if generates.is_empty() {
            return Err(Error::invalid(
                &kind,
                &name,
                "spec.generate",
                "at least one generate expression is required",
            ));
        }
        let e = &header.evaluation;
        Ok(GeneratingPolicy {
            name: Arc::from(name.as_str()),
            namespace,
            matching: header.match_constraints.unwrap_or_default(),
            conditions,
            variables,
            generates,
            synchronize: Enabled::or(&e.synchronize, false),
            generate_existing: Enabled::or(&e.generate_existing, false),
            orphan_on_policy_delete: Enabled::or(&e.orphan_downstream_on_policy_delete, false),
            kind,
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `GeneratingPolicy` or `NamespacedGeneratingPolicy`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The namespace of a NamespacedGeneratingPolicy.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The key downstream labels name the policy by: `name`, or
    /// `namespace/name` for a NamespacedGeneratingPolicy (as for classic
    /// policies).
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.to_string(),
        }
    }

    /// `evaluation.synchronize.enabled`.
    pub fn synchronize(&self) -> bool {
        self.synchronize
    }

    /// `evaluation.generateExisting.enabled`.
    pub fn generate_existing(&self) -> bool {
        self.generate_existing
    }

    /// `evaluation.orphanDownstreamOnPolicyDelete.enabled`.
    pub fn orphan_on_policy_delete(&self) -> bool {
        self.orphan_on_policy_delete
    }

    /// `(group, version, resource)` of every resource rule of the match
    /// constraints (the trigger kinds), wildcards as written.
    pub fn matched_resources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        self.matching.resources(&mut out);
        out
    }

    /// [`GeneratingPolicy::matched_resources`], each with the admission
    /// operations its resource rule names: what the webhook registers.
    pub fn matched_resource_operations(&self) -> Vec<crate::vpol::ResourceOperations> {
        let mut out = Vec::new();
        self.matching.resources_with_operations(&mut out);
        out
    }

    /// What the policy generates for a trigger: None when its match
    /// constraints do not select it; Skip when a match condition is false;
    /// Pass with the downstreams; Error when an expression fails.
    pub fn generate(&self, req: &EvalRequest, data: &dyn ClusterData) -> Option<Generated> {
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return None;
        }
        let target = Target::of(req);
        if !self.matching.matches(req, &target) {
            return None;
        }
        let (status, message, downstreams) = match self.run(req, data) {
            Ok(None) => (Status::Skip, "skip".to_string(), Vec::new()),
            Ok(Some(objects)) => (Status::Pass, "success".to_string(), objects),
            Err(e) => (
                Status::Error,
                format!("failed to evaluate policy: {e}"),
                Vec::new(),
            ),
        };
        Some(Generated {
            result: RuleResult {
                policy: self.name.clone(),
                rule: self.name.to_string(),
                status,
                message,
                source: Source::GeneratingPolicy,
            },
            downstreams,
            synchronize: self.synchronize,
            orphan_on_policy_delete: self.orphan_on_policy_delete,
            generate_existing: self.generate_existing,
        })
    }

    fn run(&self, req: &EvalRequest, data: &dyn ClusterData) -> Result<Option<Vec<Json>>, String> {
        let sink = GeneratedSink::default();
        let mut act = Activation::new(req, data);
        act.bind_generator(&sink);
        act.bind_variables(&self.variables);
        for (name, cond) in &self.conditions {
            if !cond
                .eval_bool(&act)
                .map_err(|e| format!("match condition '{name}': {e}"))?
            {
                return Ok(None);
            }
        }
        for (i, expr) in self.generates.iter().enumerate() {
            match expr.eval(&act).map_err(|e| format!("generate[{i}]: {e}"))? {
                ::cel::Value::Bool(_) => {}
                other => {
                    return Err(format!(
                        "generate[{i}]: output is expected to be of type bool (generator.Apply's), got {}",
                        other.type_of()
                    ));
                }
            }
        }
        drop(act);
        let labels = labels_for(
            self.name(),
            self.namespace.as_deref(),
            self.name(),
            &req.object,
        );
        let calls = sink
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        for (ns, objects) in &calls {
            // A list object (`resource.List`'s answer: `items`) stands for
            // its items, each generated into the namespace (as Kyverno).
            let objects = objects.iter().flat_map(|o| match o["items"].as_array() {
                Some(items) => items.iter().collect::<Vec<_>>(),
                None => vec![o],
            });
            for obj in objects {
                if !obj.is_object() || obj["kind"].as_str().is_none() {
                    return Err(format!(
                        "generator.Apply: every object needs a kind, got {obj}"
                    ));
                }
                let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
                out.push(with_labels(obj.clone(), &name, ns, &labels));
            }
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoClusterData;
    use serde_json::json;

    fn policy(generate: &str, conditions: Json) -> GeneratingPolicy {
        GeneratingPolicy::compile(&json!({
            "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "GeneratingPolicy",
            "metadata": {"name": "gen"},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["namespaces"]}]},
                "matchConditions": conditions,
                "variables": [{"name": "ns", "expression": "object.metadata.name"}],
                "generate": [{"expression": generate}]
            }
        }))
        .expect("compiles")
    }

    fn namespace(name: &str) -> EvalRequest {
        EvalRequest::create(Arc::new(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": "u", "labels": {"team": "a"}}
        })))
    }

    #[test]
    fn generator_apply_gives_labelled_downstreams_in_its_namespace() {
        let p = policy(
            r#"generator.Apply(variables.ns, [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}},
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}}
            ])"#,
            json!([]),
        );
        let g = p
            .generate(&namespace("team-a"), &NoClusterData)
            .expect("matches");
        assert_eq!(g.result.status, Status::Pass, "{}", g.result.message);
        assert_eq!(g.result.source, Source::GeneratingPolicy);
        assert_eq!(g.downstreams.len(), 2);
        let cm = &g.downstreams[0];
        assert_eq!(cm["metadata"]["namespace"], "team-a");
        assert_eq!(cm["data"]["k"], "v");
        assert_eq!(
            cm["metadata"]["labels"]["generate.kyverno.io/policy-name"],
            "gen"
        );
        assert_eq!(
            cm["metadata"]["labels"]["generate.kyverno.io/trigger-name"],
            "team-a"
        );
    }

    #[test]
    fn match_conditions_skip_and_bad_results_are_errors() {
        let p = policy(
            r#"generator.Apply("x", [{"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a"}}])"#,
            json!([{"name": "prod", "expression": "object.metadata.name == 'prod'"}]),
        );
        let g = p.generate(&namespace("dev"), &NoClusterData).unwrap();
        assert_eq!(g.result.status, Status::Skip);
        assert!(g.downstreams.is_empty());
        let p = policy("'not an apply'", json!([]));
        let g = p.generate(&namespace("dev"), &NoClusterData).unwrap();
        assert_eq!(g.result.status, Status::Error);
        assert!(
            g.result.message.contains("generator.Apply"),
            "{}",
            g.result.message
        );
        let pod = EvalRequest::create(Arc::new(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}
        })));
        assert!(p.generate(&pod, &NoClusterData).is_none(), "not matched");
    }

    /// `generator.Apply` returns true, so it can be called once per item
    /// of a list inside a macro; each call generates into its namespace.
    #[test]
    fn generator_apply_inside_a_macro_generates_per_call() {
        let p = policy(
            r#"['a', 'b'].all(ns, generator.Apply(ns, [{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]))"#,
            json!([]),
        );
        let g = p.generate(&namespace("x"), &NoClusterData).unwrap();
        assert_eq!(g.result.status, Status::Pass, "{}", g.result.message);
        let namespaces: Vec<&str> = g
            .downstreams
            .iter()
            .map(|d| d["metadata"]["namespace"].as_str().unwrap())
            .collect();
        assert_eq!(namespaces, ["a", "b"]);
    }

    /// A list object (what `resource.List` answers) stands for its items.
    #[test]
    fn generator_apply_of_a_list_generates_its_items() {
        let p = policy(
            r#"generator.Apply(variables.ns, [{"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a", "namespace": "default"}},
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b", "namespace": "default"}}
            ]}])"#,
            json!([]),
        );
        let g = p.generate(&namespace("team-a"), &NoClusterData).unwrap();
        let placed: Vec<(&str, &str)> = g
            .downstreams
            .iter()
            .map(|d| {
                (
                    d["metadata"]["name"].as_str().unwrap(),
                    d["metadata"]["namespace"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(placed, [("a", "team-a"), ("b", "team-a")]);
    }

    /// A CEL PolicyException naming the policy exempts the triggers its
    /// conditions select: Skip, nothing generated.
    #[test]
    fn cel_exceptions_exempt_triggers() {
        let mut engine = crate::Engine::new();
        engine
            .add_json(&json!({
                "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "GeneratingPolicy",
                "metadata": {"name": "gen"},
                "spec": {
                    "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["namespaces"]}]},
                    "generate": [{"expression": r#"generator.Apply(object.metadata.name, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}])"#}]
                }
            }))
            .unwrap();
        engine
            .add_json(&json!({
                "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "PolicyException",
                "metadata": {"name": "not-testing"},
                "spec": {"policyRefs": [{"name": "gen", "kind": "GeneratingPolicy"}],
                    "matchConditions": [{"name": "n", "expression": "object.metadata.name == 'testing'"}]}
            }))
            .unwrap();
        let run = |ns: &str| {
            let prepared = crate::Prepared::new(namespace(ns));
            let mut out = engine.generate_cel(&prepared, &NoClusterData);
            assert_eq!(out.len(), 1);
            out.remove(0).1
        };
        let exempt = run("testing");
        assert_eq!(
            (
                exempt.result.status,
                exempt.result.rule.as_str(),
                exempt.result.message.as_str()
            ),
            (
                Status::Skip,
                "exception",
                "rule is skipped due to policy exception: not-testing"
            )
        );
        assert!(exempt.downstreams.is_empty());
        let generated = run("prod");
        assert_eq!(generated.result.status, Status::Pass);
        assert_eq!(generated.downstreams.len(), 1);
    }

    #[test]
    fn a_policy_without_generate_expressions_does_not_compile() {
        let err = GeneratingPolicy::compile(&json!({
            "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "GeneratingPolicy",
            "metadata": {"name": "gen"}, "spec": {"generate": []}
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("spec.generate"), "{err}");
    }
}
