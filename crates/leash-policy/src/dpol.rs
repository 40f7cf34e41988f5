//! `policies.kyverno.io` DeletingPolicy (CEL): match constraints, variables
//! and `conditions`. The cleanup controller deletes, on the policy's
//! `schedule`, every resource the policy selects; evaluating the policy on
//! one resource says whether it would be deleted.
//!
//! As Kyverno's CLI reports it: `pass` ("resource matched") when the match
//! constraints select the resource (whatever the operations they name: a
//! deletion is no admission request) and every condition holds; `fail`
//! ("resource did not match") otherwise, or when a CEL PolicyException
//! naming the policy exempts the resource; `error` when a condition fails
//! to evaluate and none is false. A JSON payload (a document without
//! `apiVersion` and `kind`) is not matched, only its conditions evaluated.

use std::sync::Arc;

use serde_json::Value as Json;

use crate::cel::rule::SpecFields;
use crate::cel::rule::{Header, compile_named_conditions, compile_variables};
use crate::cel::{Activation, Expr, Variable};
use crate::error::{Error, Result};
use crate::eval::Prepared;
use crate::exception::Exception;
use crate::request::ClusterData;
use crate::result::{RuleResult, Source, Status};
use crate::vpol::{MatchResources, Target};

/// The policy kinds [`DeletingPolicy::compile`] accepts.
pub const KINDS: &[&str] = &["DeletingPolicy", "NamespacedDeletingPolicy"];

/// Whether `doc` is a DeletingPolicy or NamespacedDeletingPolicy.
pub fn is_deleting_policy(doc: &Json) -> bool {
    crate::cel::rule::is_policy_kind(doc, KINDS)
}

/// A compiled DeletingPolicy. Immutable; evaluate from any thread.
#[derive(Debug, Clone)]
pub struct DeletingPolicy {
    name: Arc<str>,
    kind: String,
    namespace: Option<String>,
    /// `spec.matchConstraints`; without them the policy selects nothing.
    matching: Option<MatchResources>,
    conditions: Vec<(String, Expr)>,
    variables: Vec<Variable>,
    schedule: String,
}

/// Why a resource is not selected: a condition is false, or one failed.
enum Conditions {
    Hold,
    False,
    Failed(String),
}

impl DeletingPolicy {
    /// Compiles a policy document; errors name the field.
    pub fn compile(doc: &Json) -> Result<DeletingPolicy> {
        let Header {
            kind,
            name,
            namespace,
        } = Header::of(doc, KINDS)?;
        Error::check_schema(doc)?;
        let spec = &doc["spec"];
        let conditions =
            compile_named_conditions(spec.get("conditions"), &kind, &name, "spec.conditions")?;
        let variables = compile_variables(spec.get("variables"), &kind, &name, "spec.variables")?;
        let header = SpecFields::of(spec, &kind, &name)?;
        let Some(schedule) = header.schedule.filter(|s| !s.trim().is_empty()) else {
            return Err(Error::invalid(
                &kind,
                &name,
                "spec.schedule",
                "a cron schedule is required",
            ));
        };
        let matching = header.match_constraints;
        Ok(DeletingPolicy {
            name: Arc::from(name.as_str()),
            kind,
            namespace,
            matching,
            conditions,
            variables,
            schedule,
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `DeletingPolicy` or `NamespacedDeletingPolicy`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The namespace of a NamespacedDeletingPolicy.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// `spec.schedule`, a cron expression.
    pub fn schedule(&self) -> &str {
        &self.schedule
    }

    /// Whether the policy would delete the prepared resource (see the
    /// module docs), as one result named after the policy. `exceptions`
    /// are every PolicyException loaded; those naming this policy whose
    /// match conditions hold exempt the resource.
    pub fn evaluate(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
        exceptions: &[Arc<Exception>],
    ) -> RuleResult {
        let result = |status, message: String| RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message,
            source: Source::DeletingPolicy,
        };
        let not_matched = || result(Status::Fail, "resource did not match".to_string());
        if !self.selects(prepared) {
            return not_matched();
        }
        let exempt: Vec<String> = exceptions
            .iter()
            .filter(|e| e.exempts(&self.kind, &self.name, prepared.cel_objects(), data))
            .map(|e| e.key())
            .collect();
        if !exempt.is_empty() {
            return result(
                Status::Fail,
                format!(
                    "resource did not match: exempted by policy exception {}",
                    exempt.join(", ")
                ),
            );
        }
        match self.conditions(prepared, data) {
            Conditions::Hold => result(Status::Pass, "resource matched".to_string()),
            Conditions::False => not_matched(),
            Conditions::Failed(why) => result(Status::Error, why),
        }
    }

    /// Whether the match constraints (and a namespaced policy's namespace)
    /// select the resource, whatever operations they name.
    fn selects(&self, prepared: &Prepared) -> bool {
        let req = prepared.request();
        let api_version = req.object["apiVersion"].as_str().unwrap_or("");
        let kind = req.object["kind"].as_str().unwrap_or("");
        if api_version.is_empty() || kind.is_empty() {
            // A JSON payload: nothing to match it on.
            return true;
        }
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return false;
        }
        let Some(matching) = &self.matching else {
            return false;
        };
        matching.matches(req, &Target::of(req).any_operation())
    }

    /// Evaluates the conditions in order: the first false one decides;
    /// otherwise any that failed to evaluate make the result an error.
    fn conditions(&self, prepared: &Prepared, data: &dyn ClusterData) -> Conditions {
        let mut act = Activation::new(prepared.request(), data);
        act.bind_variables(&self.variables);
        let mut failed = Vec::new();
        for (name, cond) in &self.conditions {
            match cond.eval_bool(&act) {
                Ok(true) => {}
                Ok(false) => return Conditions::False,
                Err(e) => failed.push(format!("condition '{name}': {e}")),
            }
        }
        if failed.is_empty() {
            Conditions::Hold
        } else {
            Conditions::Failed(failed.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::{EvalRequest, NoClusterData};

    fn policy(extra: Json) -> DeletingPolicy {
        let mut doc = json!({
            "apiVersion": "policies.kyverno.io/v1beta1",
            "kind": "DeletingPolicy",
            "metadata": {"name": "old-pods"},
            "spec": {
                "schedule": "*/1 * * * *",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]
                }]},
                "conditions": [
                    {"name": "labelled", "expression": "has(object.metadata.labels) && object.metadata.labels.tier == variables.tier"}
                ],
                "variables": [{"name": "tier", "expression": "'scratch'"}]
            }
        });
        if let (Some(spec), Json::Object(more)) = (doc["spec"].as_object_mut(), extra) {
            spec.extend(more);
        }
        DeletingPolicy::compile(&doc).unwrap()
    }

    fn prepared(object: Json) -> Prepared {
        Prepared::new(EvalRequest::create(Arc::new(object)))
    }

    fn pod(tier: &str) -> Json {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "p", "namespace": "ns", "labels": {"tier": tier}}})
    }

    /// Each case: the resource, the status and message Kyverno's CLI gives.
    #[test]
    fn results_as_kyverno_cli_reports_them() {
        let p = policy(json!({}));
        let cases = [
            (pod("scratch"), Status::Pass, "resource matched"),
            (pod("prod"), Status::Fail, "resource did not match"),
            // Not selected by the match constraints: a fail, not a skip.
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {"tier": "scratch"}}}),
                Status::Fail,
                "resource did not match",
            ),
            // A JSON payload is not matched, only its conditions evaluated.
            (
                json!({"metadata": {"labels": {"tier": "scratch"}}}),
                Status::Pass,
                "resource matched",
            ),
        ];
        for (object, status, message) in cases {
            let r = p.evaluate(&prepared(object.clone()), &NoClusterData, &[]);
            assert_eq!(
                (r.status, r.message.as_str()),
                (status, message),
                "{object}"
            );
            assert_eq!((&*r.policy, r.rule.as_str()), ("old-pods", "old-pods"));
            assert_eq!(r.source, Source::DeletingPolicy);
        }
    }

    #[test]
    fn a_false_condition_wins_over_a_failing_one() {
        let failing = json!({"name": "boom", "expression": "object.spec.missing == 1"});
        let p = policy(json!({"conditions": [
            failing,
            {"name": "never", "expression": "false"}
        ]}));
        let r = p.evaluate(&prepared(pod("scratch")), &NoClusterData, &[]);
        assert_eq!(r.status, Status::Fail, "{}", r.message);
        let p = policy(json!({"conditions": [failing, {"name": "always", "expression": "true"}]}));
        let r = p.evaluate(&prepared(pod("scratch")), &NoClusterData, &[]);
        assert_eq!(r.status, Status::Error);
        assert!(r.message.contains("condition 'boom'"), "{}", r.message);
    }

    #[test]
    fn without_match_constraints_nothing_is_selected() {
        let mut doc = json!({
            "apiVersion": "policies.kyverno.io/v1beta1", "kind": "DeletingPolicy",
            "metadata": {"name": "d"},
            "spec": {"schedule": "0 * * * *", "conditions": [{"name": "t", "expression": "true"}]}
        });
        let p = DeletingPolicy::compile(&doc).unwrap();
        let r = p.evaluate(&prepared(pod("scratch")), &NoClusterData, &[]);
        assert_eq!(r.status, Status::Fail);
        doc["kind"] = json!("NamespacedDeletingPolicy");
        doc["metadata"]["namespace"] = json!("other");
        doc["spec"]["matchConstraints"] = json!({"resourceRules": [{
            "apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]});
        let p = DeletingPolicy::compile(&doc).unwrap();
        let r = p.evaluate(&prepared(pod("scratch")), &NoClusterData, &[]);
        assert_eq!(r.status, Status::Fail, "a resource of another namespace");
    }

    #[test]
    fn a_cel_exception_naming_the_policy_exempts() {
        let p = policy(json!({}));
        let exception = Exception::compile(&json!({
            "apiVersion": "policies.kyverno.io/v1beta1", "kind": "PolicyException",
            "metadata": {"name": "keep", "namespace": "ns"},
            "spec": {
                "policyRefs": [{"name": "old-pods", "kind": "DeletingPolicy"}],
                "matchConditions": [{"name": "named", "expression": "object.metadata.name == 'p'"}]
            }
        }))
        .unwrap();
        let r = p.evaluate(
            &prepared(pod("scratch")),
            &NoClusterData,
            &[Arc::new(exception)],
        );
        assert_eq!(r.status, Status::Fail);
        assert!(r.message.contains("ns/keep"), "{}", r.message);
    }

    #[test]
    fn compile_errors_name_the_field() {
        let cases = [
            (json!({"schedule": null}), "spec.schedule"),
            (
                json!({"conditions": [{"name": "x", "expression": "1 +"}]}),
                "spec.conditions[0].expression",
            ),
            (
                json!({"variables": [{"expression": "1"}]}),
                "spec.variables[0].name",
            ),
            (json!({"matchConstraints": "pods"}), "spec.matchConstraints"),
        ];
        for (extra, field) in cases {
            let mut doc = json!({
                "apiVersion": "policies.kyverno.io/v1beta1", "kind": "DeletingPolicy",
                "metadata": {"name": "d"}, "spec": {"schedule": "0 * * * *"}
            });
            if let (Some(spec), Json::Object(more)) = (doc["spec"].as_object_mut(), extra) {
                spec.extend(more);
            }
            let err = DeletingPolicy::compile(&doc).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }
}
