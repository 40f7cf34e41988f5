//! `kyverno.io/v2` (and `v2beta1`) `PolicyException`: resources it matches
//! get `skip` for the rules it names. And the CEL form of
//! `policies.kyverno.io` (`spec.policyRefs` and `spec.matchConditions`):
//! a ValidatingPolicy it names gets `skip` (rule `exception`, "rule is
//! skipped due to policy exception: NS/NAME", as Kyverno's engine says) for
//! the resources every one of its match conditions holds for.

use serde_json::Value;

use crate::conditions::Conditions;
use crate::error::{Error, Result};
use crate::eval::Prepared;
use crate::matching::{MatchBlock, Target};
use crate::vars::ExprCache;
use crate::wildcard;

/// A compiled PolicyException.
#[derive(Debug)]
pub struct Exception {
    name: String,
    namespace: String,
    /// (policy name or `ns/name`, rule names; wildcards allowed).
    exceptions: Vec<(String, Vec<String>)>,
    match_: MatchBlock,
    conditions: Option<Conditions>,
    cache: ExprCache,
    /// `spec.podSecurity`: the Pod Security Standards controls exempted
    /// for a podSecurity rule (when set, the rule is evaluated and only
    /// those controls are exempted).
    pod_security: Vec<crate::podsecurity::Exclude>,
    /// The CEL form: the policies named (kind, name) and the conditions.
    cel: Option<CelForm>,
}

/// A classic PolicyException's `spec`, as written.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    exceptions: Option<Vec<PolicyRules>>,
    #[serde(rename = "match", default, deserialize_with = "crate::model::nullable")]
    match_: MatchBlock,
    conditions: Option<crate::conditions::ConditionsDoc>,
    #[serde(default, deserialize_with = "crate::model::nullable")]
    pod_security: Vec<crate::podsecurity::ExcludeDoc>,
}

/// One `spec.exceptions` entry.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyRules {
    policy_name: Option<String>,
    #[serde(default, deserialize_with = "crate::model::nullable")]
    rule_names: Vec<String>,
}

#[derive(Debug)]
struct CelForm {
    refs: Vec<(String, String)>,
    conditions: Vec<(String, crate::cel::Expr)>,
}

impl Exception {
    /// Parses a `PolicyException` document.
    pub fn compile(doc: &Value) -> Result<Exception> {
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let namespace = doc["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let err = |field: String, message: String| {
            Error::invalid("PolicyException", name.clone(), field, message)
        };
        let spec = &doc["spec"];
        if spec.get("policyRefs").is_some() {
            return Exception::compile_cel(doc, name, namespace);
        }
        let spec: Spec = crate::model::parse(spec, "spec", &err)?;
        let Some(list) = spec.exceptions else {
            return Err(err(
                "spec.exceptions".into(),
                "is required and must be a list".into(),
            ));
        };
        let mut exceptions = Vec::new();
        for (i, e) in list.into_iter().enumerate() {
            let Some(policy) = e.policy_name else {
                return Err(err(
                    format!("spec.exceptions[{i}].policyName"),
                    "is required".into(),
                ));
            };
            exceptions.push((policy, e.rule_names));
        }
        let match_ = spec.match_;
        let mut cache = ExprCache::default();
        let conditions = crate::policy::compile_conditions(
            &spec.conditions,
            "spec.conditions",
            &err,
            &mut cache,
        )?;
        let pod_security =
            crate::podsecurity::parse_excludes(&spec.pod_security, "spec.podSecurity", &err)?;
        Ok(Exception {
            name,
            namespace,
            exceptions,
            match_,
            conditions,
            cache,
            pod_security,
            cel: None,
        })
    }

    /// The CEL form (`policyRefs`, `matchConditions`).
    fn compile_cel(doc: &Value, name: String, namespace: String) -> Result<Exception> {
        use crate::cel::rule::{compile_named_conditions, typed_list};
        const KIND: &str = "PolicyException";
        let spec = &doc["spec"];
        /// One `spec.policyRefs` entry.
        #[derive(serde::Deserialize)]
        struct PolicyRef {
            name: Option<String>,
            kind: Option<String>,
        }
        let listed =
            typed_list::<PolicyRef>(spec.get("policyRefs"), KIND, &name, "spec.policyRefs")?;
        if listed.is_empty() {
            return Err(Error::invalid(
                KIND,
                &name,
                "spec.policyRefs",
                "must name at least one policy",
            ));
        }
        let mut refs = Vec::new();
        for (i, r) in listed.into_iter().enumerate() {
            let Some(policy) = r.name.filter(|n| !n.is_empty()) else {
                return Err(Error::invalid(
                    KIND,
                    &name,
                    format!("spec.policyRefs[{i}].name"),
                    "is required",
                ));
            };
            refs.push((r.kind.unwrap_or("ValidatingPolicy".into()), policy));
        }
        let conditions = compile_named_conditions(
            spec.get("matchConditions"),
            KIND,
            &name,
            "spec.matchConditions",
        )?;
        Ok(Exception {
            name,
            namespace,
            exceptions: Vec::new(),
            match_: MatchBlock::default(),
            conditions: None,
            cache: ExprCache::default(),
            pod_security: Vec::new(),
            cel: Some(CelForm { refs, conditions }),
        })
    }

    /// Whether this (CEL) exception exempts the resource from the
    /// ValidatingPolicy `kind`/`name`: it names the policy and each of its
    /// match conditions holds (a condition that fails to evaluate does
    /// not hold).
    pub(crate) fn exempts(
        &self,
        kind: &str,
        name: &str,
        objects: &crate::cel::CelObjects,
        data: &dyn crate::request::ClusterData,
    ) -> bool {
        let Some(cel) = &self.cel else {
            return false;
        };
        if !cel.refs.iter().any(|(k, n)| k == kind && n == name) {
            return false;
        }
        let act = crate::cel::Activation::shared(objects, data);
        cel.conditions
            .iter()
            .all(|(_, c)| c.eval_bool(&act).unwrap_or(false))
    }

    /// `namespace/name` (or `name`).
    pub fn key(&self) -> String {
        if self.namespace.is_empty() {
            self.name.clone()
        } else {
            format!("{}/{}", self.namespace, self.name)
        }
    }

    /// The `podSecurity` exclusions (empty when the exception has none).
    pub(crate) fn pod_security(&self) -> &[crate::podsecurity::Exclude] {
        &self.pod_security
    }

    /// Whether this exception covers `rule` (or the autogen rule derived
    /// from `base_rule`) of `policy` for the prepared resource.
    pub(crate) fn applies(
        &self,
        policy: &str,
        rule: &str,
        base_rule: &str,
        prepared: &Prepared,
        vars: Option<&crate::vars::Vars>,
    ) -> bool {
        let named = self.exceptions.iter().any(|(p, rules)| {
            wildcard::matches(p, policy)
                && rules
                    .iter()
                    .any(|r| wildcard::matches(r, rule) || wildcard::matches(r, base_rule))
        });
        if !named {
            return false;
        }
        let req = prepared.request();
        let target = Target::of(
            &req.object,
            req.namespace_labels.as_ref(),
            req.operation,
            &req.user_info,
        );
        if !self.match_.matches(&target) {
            return false;
        }
        // A condition that cannot be evaluated does not hold. Without the
        // rule's context, the conditions see the request
        // (`request.object`, `request.operation`, ...), as Kyverno's do.
        let hold = |c: &Conditions, vars: &dyn crate::vars::Source| {
            c.hold(vars, &self.cache, false).unwrap_or(false)
        };
        match (&self.conditions, vars) {
            (None, _) => true,
            (Some(c), Some(vars)) => hold(c, vars),
            (Some(c), None) => hold(c, &crate::eval::base_vars(req, req.operation)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn exception(conditions: serde_json::Value) -> Result<Exception> {
        Exception::compile(
            &json!({"apiVersion": "kyverno.io/v2", "kind": "PolicyException",
            "metadata": {"name": "e", "namespace": "default"},
            "spec": {"exceptions": [{"policyName": "p", "ruleNames": ["r"]}],
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "conditions": conditions}}),
        )
    }

    /// An exception's conditions are compiled as a rule's are: an unknown
    /// operator is refused naming its field (it would never hold), and
    /// they are evaluated on the request, a condition that cannot be
    /// evaluated not holding.
    #[test]
    fn conditions_compile_as_a_rules_do() {
        let err = exception(json!({"any": [{"key": "a", "operator": "Matches", "value": "a"}]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.conditions.any[0].operator"), "{err}");
        let blue = exception(json!({"any": [
            {"key": "{{ request.object.metadata.labels.color || '' }}", "operator": "Equals", "value": "blue"}]}))
        .unwrap();
        let applies = |labels: serde_json::Value| {
            let pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "x", "namespace": "default", "labels": labels}});
            let prepared = Prepared::new(crate::EvalRequest::create(std::sync::Arc::new(pod)));
            blue.applies("p", "r", "r", &prepared, None)
        };
        assert!(applies(json!({"color": "blue"})));
        assert!(!applies(json!({"color": "red"})));
        let broken = exception(json!({"all": [
            {"key": "{{ nosuchfunction(request.object.metadata.name) }}", "operator": "Equals", "value": "x"}]}))
        .unwrap();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "default"}});
        let prepared = Prepared::new(crate::EvalRequest::create(std::sync::Arc::new(pod)));
        assert!(!broken.applies("p", "r", "r", &prepared, None));
    }
}
