//! Kubernetes `admissionregistration.k8s.io` MutatingAdmissionPolicy and
//! MutatingAdmissionPolicyBinding (`v1alpha1`, `v1beta1`, `v1`), evaluated
//! as Kyverno's CLI evaluates them without a cluster. The policy's match
//! conditions, variables and mutations are a MutatingPolicy's (the same
//! [`Body`], compiled and run by the parent module: ApplyConfiguration
//! merges, JSONPatch lists, lazy variables).
//!
//! - A policy without bindings applies where its `matchConstraints` select
//!   the request.
//! - A policy with bindings applies through each binding whose
//!   `matchResources` select the request (a binding without them, or
//!   without `resourceRules` in them, selects every resource); the policy's
//!   own `matchConstraints` are not consulted then. Each binding that
//!   applies runs the mutations on the object the one before produced,
//!   with its own `params` (Kubernetes' order; Kyverno v1.19.1's CLI
//!   starts every binding from the request's object and keeps the last
//!   one's output, which differs only when two bindings apply); the last
//!   one's result is the policy's.
//! - `params`: the resources of the policy's `paramKind` a binding's
//!   `paramRef` selects, read through [`ClusterData`] in the `paramRef`'s
//!   namespace (the request's when it names none and the kind is
//!   namespaced): by `name`, that object; by `selector`, every object whose
//!   labels it selects, as a list `{"items": [...]}` (Kyverno's CLI hands
//!   the selected parameters to the expressions so). None found (or no
//!   `paramRef`): `params` is null.
//! - The result is Pass ("mutation is successfully applied") when the
//!   mutations ran, Skip ("match conditions aren't met") when a match
//!   condition is false, or fails to evaluate under `failurePolicy:
//!   Ignore`. A match condition or mutation that fails otherwise gives no
//!   result for that binding, as Kyverno's CLI logs and drops it.

use std::sync::Arc;

use serde_json::{Value as Json, json};

use super::{Body, Reinvocation, RunError, compile_body, run};
use crate::cel::rule::{Header, ParamRef, SpecFields, is_kind_in};
use crate::error::{Error, Result};
use crate::eval::Prepared;
use crate::request::{ClusterData, EvalRequest, labels_of};
use crate::result::{RuleResult, Source, Status};
use crate::vpol::{MatchResources, Target};

const GROUP: &str = "admissionregistration.k8s.io";

/// The kind [`MutatingAdmissionPolicy::compile`] accepts.
pub const POLICY_KIND: &str = "MutatingAdmissionPolicy";

/// The kind [`MutatingAdmissionPolicyBinding::compile`] accepts.
pub const BINDING_KIND: &str = "MutatingAdmissionPolicyBinding";

/// Kyverno's message for a result whose mutations ran.
const APPLIED: &str = "mutation is successfully applied";

/// Kyverno's message for a result whose match conditions are not met.
const NOT_MET: &str = "match conditions aren't met";

/// Whether `doc` is `kind` of one of the group's versions that serve it.
fn is_kind(doc: &Json, kind: &str) -> bool {
    is_kind_in(doc, GROUP, &[kind])
        && matches!(
            doc["apiVersion"].as_str().unwrap_or("").split_once('/'),
            Some((_, "v1alpha1" | "v1beta1" | "v1"))
        )
}

/// Whether `doc` is a MutatingAdmissionPolicy.
pub fn is_mutating_admission_policy(doc: &Json) -> bool {
    is_kind(doc, POLICY_KIND)
}

/// Whether `doc` is a MutatingAdmissionPolicyBinding.
pub fn is_mutating_admission_policy_binding(doc: &Json) -> bool {
    is_kind(doc, BINDING_KIND)
}

/// A compiled MutatingAdmissionPolicy. Immutable; evaluate from any thread.
#[derive(Debug, Clone)]
pub struct MutatingAdmissionPolicy {
    name: Arc<str>,
    /// `spec.paramKind`: (apiVersion, kind).
    param_kind: Option<(String, String)>,
    ignore_failures: bool,
    reinvocation: Reinvocation,
    body: Body,
}

/// A compiled MutatingAdmissionPolicyBinding.
#[derive(Debug, Clone)]
pub struct MutatingAdmissionPolicyBinding {
    name: String,
    policy_name: String,
    /// `spec.matchResources`, when given.
    matching: Option<MatchResources>,
    param_ref: Option<ParamRef>,
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

impl MutatingAdmissionPolicyBinding {
    /// Compiles a binding document; errors name the field.
    pub fn compile(doc: &Json) -> Result<MutatingAdmissionPolicyBinding> {
        let Header { name, .. } = Header::in_group(doc, GROUP, &[BINDING_KIND])?;
        if !is_mutating_admission_policy_binding(doc) {
            return Err(Error::Unsupported(format!("{BINDING_KIND} {name}")));
        }
        Error::check_schema(doc)?;
        let spec = &doc["spec"];
        let header = SpecFields::of(spec, BINDING_KIND, &name)?;
        let policy_name = non_empty(header.policy_name)
            .ok_or_else(|| Error::invalid(BINDING_KIND, &name, "spec.policyName", "is required"))?;
        let matching = header.match_resources;
        let param_ref = header.param_ref.map(|r| ParamRef {
            name: non_empty(r.name),
            namespace: non_empty(r.namespace),
            selector: r.selector,
        });
        Ok(MutatingAdmissionPolicyBinding {
            name,
            policy_name,
            matching,
            param_ref,
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

    /// The `params` this binding gives `policy` on `req` (see the module
    /// docs).
    fn params(
        &self,
        policy: &MutatingAdmissionPolicy,
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Option<Json> {
        let r = self.param_ref.as_ref()?;
        let (api_version, kind) = policy.param_kind.as_ref()?;
        let namespaced = match crate::kinds::by_kind(kind) {
            Some(k) => k.namespaced,
            None => !kind.starts_with("Cluster"),
        };
        let namespace = match &r.namespace {
            Some(ns) => ns.as_str(),
            None if namespaced => req.namespace(),
            None => "",
        };
        if let Some(selector) = &r.selector {
            let items: Vec<Json> = data
                .list(api_version, kind, namespace)
                .into_iter()
                .filter(|o| selector.matches(&labels_of(o)))
                .map(|o| (*o).clone())
                .collect();
            return (!items.is_empty()).then(|| json!({ "items": items }));
        }
        let name = r.name.as_deref()?;
        data.get(api_version, kind, namespace, name)
            .map(|o| (*o).clone())
    }
}

impl MutatingAdmissionPolicy {
    /// Compiles a policy document; errors name the field.
    pub fn compile(doc: &Json) -> Result<MutatingAdmissionPolicy> {
        let Header { name, .. } = Header::in_group(doc, GROUP, &[POLICY_KIND])?;
        if !is_mutating_admission_policy(doc) {
            return Err(Error::Unsupported(format!("{POLICY_KIND} {name}")));
        }
        Error::check_schema(doc)?;
        let spec = &doc["spec"];
        let header = SpecFields::of(spec, POLICY_KIND, &name)?;
        let ignore_failures = header.ignores_failures();
        let param_kind = match header.param_kind {
            None => None,
            Some(p) => {
                let field = |v: Option<String>, f: &str| {
                    non_empty(v).ok_or_else(|| {
                        Error::invalid(
                            POLICY_KIND,
                            &name,
                            format!("spec.paramKind.{f}"),
                            "is required",
                        )
                    })
                };
                Some((field(p.api_version, "apiVersion")?, field(p.kind, "kind")?))
            }
        };
        Ok(MutatingAdmissionPolicy {
            body: compile_body(spec, POLICY_KIND, &name)?,
            param_kind,
            ignore_failures,
            reinvocation: header.reinvocation_policy.unwrap_or_default(),
            name: Arc::from(name.as_str()),
        })
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `spec.reinvocationPolicy`.
    pub fn reinvocation(&self) -> Reinvocation {
        self.reinvocation
    }

    /// Mutates `req.object` through `bindings` (those whose `policyName`
    /// names this policy; see the module docs): None when the policy does
    /// not apply (or every binding that applies failed); otherwise the
    /// result (rule = policy name, source `MutatingAdmissionPolicy`) and
    /// the object, mutated on Pass and `req.object` unchanged on Skip.
    pub fn mutate(
        &self,
        req: &EvalRequest,
        bindings: &[&MutatingAdmissionPolicyBinding],
        data: &dyn ClusterData,
    ) -> Option<(RuleResult, Json)> {
        let target = Target::of(req);
        let mut object = (*req.object).clone();
        let mut last = None;
        if bindings.is_empty() {
            if !self.body.matching.matches(req, &target) {
                return None;
            }
            last = self.run_once(req, data, &mut object, None);
        }
        for b in bindings {
            let applies = b
                .matching
                .as_ref()
                .is_none_or(|m| m.matches_unruled_as_all(req, &target));
            if !applies {
                continue;
            }
            let params = b.params(self, req, data);
            let current = EvalRequest {
                object: Arc::new(object.clone()),
                ..req.clone()
            };
            if let Some(status) = self.run_once(&current, data, &mut object, params.as_ref()) {
                last = Some(status);
            }
        }
        let status = last?;
        let message = match status {
            Status::Pass => APPLIED,
            _ => NOT_MET,
        };
        let result = RuleResult {
            policy: self.name.clone(),
            rule: self.name.to_string(),
            status,
            message: message.to_string(),
            source: Source::MutatingAdmissionPolicy,
        };
        Some((result, object))
    }

    /// Runs the body once on `req`, leaving the mutated object in
    /// `object`: the status, or None when it failed.
    fn run_once(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
        object: &mut Json,
        params: Option<&Json>,
    ) -> Option<Status> {
        match run(&self.body, &Prepared::new(req.clone()), data, params) {
            Ok(Some(mutated)) => {
                *object = mutated;
                Some(Status::Pass)
            }
            Ok(None) => Some(Status::Skip),
            Err(RunError::Condition(_)) if self.ignore_failures => Some(Status::Skip),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
