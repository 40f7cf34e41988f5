//! Kubernetes `admissionregistration.k8s.io` ValidatingAdmissionPolicy and
//! ValidatingAdmissionPolicyBinding, evaluated as Kyverno's CLI evaluates
//! them without a cluster:
//!
//! - a policy without bindings applies where its `matchConstraints` select
//!   the request;
//! - a policy with bindings applies through each binding whose
//!   `matchResources` (when it has them) select the request, the last such
//!   binding's evaluation giving the result; a binding's `matchResources`
//!   without `resourceRules` select every resource; the policy's own
//!   `matchConstraints` are not consulted then;
//! - the result is `skip` when a match condition is false, `fail` with
//!   Kubernetes' message (the message expression's, the message, or
//!   `failed expression: <expression>`) for the first false validation,
//!   `error` when an expression fails (a match condition that fails under
//!   `failurePolicy: Ignore` skips), `pass` otherwise, whatever
//!   `validationActions` the binding names.
//!
//! `params` is null: the parameter resources a `paramRef` would select are
//! not supplied to the engine.

use std::sync::Arc;

use serde_json::Value as Json;

use crate::cel::rule::SpecFields;
use crate::cel::rule::{
    Header, Validation, compile_named_conditions, compile_validations, compile_variables,
    is_kind_in, run_validations,
};
use crate::cel::{Activation, Expr, Variable};
use crate::error::{Error, Result};
use crate::request::{ClusterData, EvalRequest};
use crate::result::{RuleResult, Source, Status};
use crate::vpol::{MatchResources, Target};

const GROUP: &str = "admissionregistration.k8s.io";

/// The kind [`AdmissionPolicy::compile`] accepts.
pub const POLICY_KIND: &str = "ValidatingAdmissionPolicy";

/// The kind [`AdmissionPolicyBinding::compile`] accepts.
pub const BINDING_KIND: &str = "ValidatingAdmissionPolicyBinding";

/// Whether `doc` is a ValidatingAdmissionPolicy.
pub fn is_admission_policy(doc: &Json) -> bool {
    is_kind_in(doc, GROUP, &[POLICY_KIND])
}

/// Whether `doc` is a ValidatingAdmissionPolicyBinding.
pub fn is_admission_policy_binding(doc: &Json) -> bool {
    is_kind_in(doc, GROUP, &[BINDING_KIND])
}

/// A compiled ValidatingAdmissionPolicy. Immutable; evaluate from any
/// thread.
#[derive(Debug, Clone)]
pub struct AdmissionPolicy {
    name: Arc<str>,
    matching: MatchResources,
    conditions: Vec<(String, Expr)>,
    variables: Vec<Variable>,
    validations: Vec<Validation>,
    ignore_failures: bool,
}

/// A compiled ValidatingAdmissionPolicyBinding.
#[derive(Debug, Clone)]
pub struct AdmissionPolicyBinding {
    name: String,
    policy_name: String,
    /// `spec.matchResources`, when given.
    matching: Option<MatchResources>,
}

impl AdmissionPolicyBinding {
    /// Compiles a binding document; errors name the field.
    pub fn compile(doc: &Json) -> Result<AdmissionPolicyBinding> {
        let Header { name, .. } = Header::in_group(doc, GROUP, &[BINDING_KIND])?;
        Error::check_schema(doc)?;
        let spec = &doc["spec"];
        let header = SpecFields::of(spec, BINDING_KIND, &name)?;
        let Some(policy_name) = header.policy_name.filter(|p| !p.is_empty()) else {
            return Err(Error::invalid(
                BINDING_KIND,
                &name,
                "spec.policyName",
                "is required",
            ));
        };
        let matching = header.match_resources;
        Ok(AdmissionPolicyBinding {
            name,
            policy_name,
            matching,
        })
    }

    /// The binding's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `spec.policyName`: the policy it binds.
    pub fn policy_name(&self) -> &str {
        &self.policy_name
    }
}

impl AdmissionPolicy {
    /// Compiles a policy document; errors name the field.
    pub fn compile(doc: &Json) -> Result<AdmissionPolicy> {
        let Header { name, .. } = Header::in_group(doc, GROUP, &[POLICY_KIND])?;
        Error::check_schema(doc)?;
        let spec = &doc["spec"];
        let conditions = compile_named_conditions(
            spec.get("matchConditions"),
            POLICY_KIND,
            &name,
            "spec.matchConditions",
        )?;
        let header = SpecFields::of(spec, POLICY_KIND, &name)?;
        Ok(AdmissionPolicy {
            ignore_failures: header.ignores_failures(),
            matching: header.match_constraints.unwrap_or_default(),
            conditions,
            variables: compile_variables(
                spec.get("variables"),
                POLICY_KIND,
                &name,
                "spec.variables",
            )?,
            validations: compile_validations(
                spec.get("validations"),
                POLICY_KIND,
                &name,
                "spec.validations",
            )?,
            name: Arc::from(name.as_str()),
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy's result on the request through `bindings` (those whose
    /// `policyName` names it; see the module docs); None when it does not
    /// apply.
    pub fn evaluate(
        &self,
        req: &EvalRequest,
        bindings: &[&AdmissionPolicyBinding],
        data: &dyn ClusterData,
    ) -> Option<RuleResult> {
        let target = Target::of(req);
        let applies = if bindings.is_empty() {
            self.matching.matches(req, &target)
        } else {
            bindings.iter().any(|b| {
                b.matching
                    .as_ref()
                    .is_none_or(|m| m.matches_unruled_as_all(req, &target))
            })
        };
        if !applies {
            return None;
        }
        // Every binding that applies evaluates the same expressions with
        // the same (null) params: the last one's result is this one.
        let (status, message) = self.run(req, data);
        Some(RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message,
            source: Source::ValidatingAdmissionPolicy,
        })
    }

    fn run(&self, req: &EvalRequest, data: &dyn ClusterData) -> (Status, String) {
        let mut act = Activation::new(req, data);
        let mut errors = Vec::new();
        for (name, cond) in &self.conditions {
            match cond.eval_bool(&act) {
                Ok(true) => {}
                Ok(false) => return (Status::Skip, "match conditions aren't met".to_string()),
                Err(e) => errors.push(format!("match condition '{name}': {e}")),
            }
        }
        if !errors.is_empty() {
            if self.ignore_failures {
                return (Status::Skip, "match conditions aren't met".to_string());
            }
            return (Status::Error, errors.join("; "));
        }
        act.bind_variables(&self.variables);
        run_validations(&self.validations, &act, Status::Error)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::NoClusterData;

    fn policy(spec: Json) -> AdmissionPolicy {
        AdmissionPolicy::compile(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "replicas"},
            "spec": spec
        }))
        .unwrap()
    }

    fn binding(mut spec: Json) -> AdmissionPolicyBinding {
        spec["validationActions"] = json!(["Deny"]);
        AdmissionPolicyBinding::compile(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "b"},
            "spec": spec
        }))
        .unwrap()
    }

    fn deployment(name: &str, ns: &str, replicas: i64, app: &str) -> EvalRequest {
        let mut req = EvalRequest::create(Arc::new(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "spec": {"replicas": replicas}
        })));
        req.namespace_labels = Some([("env".to_string(), ns.to_string())].into());
        req
    }

    fn deployments() -> Json {
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                                  "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    }

    fn status(
        p: &AdmissionPolicy,
        req: &EvalRequest,
        b: &[&AdmissionPolicyBinding],
    ) -> Option<Status> {
        p.evaluate(req, b, &NoClusterData).map(|r| r.status)
    }

    #[test]
    fn without_bindings_the_match_constraints_decide() {
        let p = policy(json!({
            "matchConstraints": deployments(),
            "validations": [{"expression": "object.spec.replicas <= 2"}]
        }));
        assert_eq!(
            status(&p, &deployment("a", "x", 1, "web"), &[]),
            Some(Status::Pass)
        );
        let r = p
            .evaluate(&deployment("a", "x", 3, "web"), &[], &NoClusterData)
            .unwrap();
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.message, "failed expression: object.spec.replicas <= 2");
        assert_eq!(r.source, Source::ValidatingAdmissionPolicy);
        let pod = EvalRequest::create(Arc::new(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
        ));
        assert_eq!(status(&p, &pod, &[]), None);
    }

    /// With bindings, only their `matchResources` select: a binding
    /// without resource rules selects every resource, even one the
    /// policy's own constraints (here: no operations) would not.
    #[test]
    fn with_bindings_their_match_resources_decide() {
        let p = policy(json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 2", "message": "too many"}]
        }));
        let plain = binding(json!({"policyName": "replicas", "validationActions": ["Deny"]}));
        assert_eq!(
            status(&p, &deployment("a", "x", 3, "web"), &[&plain]),
            Some(Status::Fail)
        );
        let by_ns = binding(json!({"policyName": "replicas", "matchResources": {
            "namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["staging"]}]}}}));
        assert_eq!(
            status(&p, &deployment("a", "staging", 1, "web"), &[&by_ns]),
            Some(Status::Pass)
        );
        assert_eq!(
            status(&p, &deployment("a", "testing", 1, "web"), &[&by_ns]),
            None
        );
        let excluding = binding(json!({"policyName": "replicas", "matchResources": {
            "excludeResourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                      "resources": ["deployments"], "resourceNames": ["nginx"]}]}}));
        assert_eq!(
            status(&p, &deployment("nginx", "x", 3, "web"), &[&excluding]),
            None
        );
        assert_eq!(
            status(&p, &deployment("busybox", "x", 3, "web"), &[&excluding]),
            Some(Status::Fail)
        );
        let by_label = binding(json!({"policyName": "replicas", "matchResources": {
            "objectSelector": {"matchLabels": {"app": "nginx"}}}}));
        assert_eq!(
            status(&p, &deployment("a", "x", 3, "other"), &[&by_label]),
            None
        );
        // Any binding that selects it applies the policy.
        assert_eq!(
            status(&p, &deployment("a", "x", 3, "other"), &[&by_label, &plain]),
            Some(Status::Fail)
        );
    }

    #[test]
    fn match_conditions_namespace_object_and_errors() {
        let p = policy(json!({
            "matchConstraints": deployments(),
            "matchConditions": [{"name": "big", "expression": "object.spec.replicas > 0"}],
            "validations": [
                {"expression": "namespaceObject.metadata.name != 'default'",
                 "messageExpression": "'namespace ' + namespaceObject.metadata.name"}
            ]
        }));
        assert_eq!(
            status(&p, &deployment("a", "default", 0, "w"), &[]),
            Some(Status::Skip)
        );
        let r = p
            .evaluate(&deployment("a", "default", 1, "w"), &[], &NoClusterData)
            .unwrap();
        assert_eq!(
            (r.status, r.message.as_str()),
            (Status::Fail, "namespace default")
        );
        assert_eq!(
            status(&p, &deployment("a", "prod", 1, "w"), &[]),
            Some(Status::Pass)
        );
        let failing = policy(json!({
            "matchConstraints": deployments(),
            "validations": [{"expression": "object.spec.missing == 1"}]
        }));
        assert_eq!(
            status(&failing, &deployment("a", "x", 1, "w"), &[]),
            Some(Status::Error)
        );
        let ignored = policy(json!({
            "matchConstraints": deployments(),
            "failurePolicy": "Ignore",
            "matchConditions": [{"name": "boom", "expression": "object.spec.missing == 1"}],
            "validations": [{"expression": "false"}]
        }));
        assert_eq!(
            status(&ignored, &deployment("a", "x", 1, "w"), &[]),
            Some(Status::Skip)
        );
    }

    #[test]
    fn compile_errors_name_the_field() {
        let err = AdmissionPolicy::compile(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "p"},
            "spec": {"validations": [{"expression": "1 +"}]}
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("spec.validations[0].expression"), "{err}");
        let err = AdmissionPolicyBinding::compile(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "b"}, "spec": {}
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("spec.policyName"), "{err}");
        let err = AdmissionPolicy::compile(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "p"}, "spec": {"failurePolicy": "Sometimes"}
        }))
        .unwrap_err()
        .to_string();
        assert!(err.contains("spec.failurePolicy"), "{err}");
    }
}
