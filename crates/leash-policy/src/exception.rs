//! `kyverno.io/v2` (and `v2beta1`) `PolicyException`: resources it matches
//! get `skip` for the rules it names. And the CEL form of
//! `policies.kyverno.io` (`spec.policyRefs` and `spec.matchConditions`):
//! a ValidatingPolicy it names gets `skip` (rule `exception`, "rule is
//! skipped due to policy exception: NS/NAME", as Kyverno's engine says) for
//! the resources every one of its match conditions holds for.

use serde_json::Value;

use crate::conditions::{self, CondOp};
use crate::error::{Error, Result};
use crate::eval::Prepared;
use crate::matching::{MatchBlock, Target};
use crate::vars::{ExprCache, substitute};
use crate::wildcard;

/// A compiled PolicyException.
#[derive(Debug)]
pub struct Exception {
    name: String,
    namespace: String,
    /// (policy name or `ns/name`, rule names; wildcards allowed).
    exceptions: Vec<(String, Vec<String>)>,
    match_: MatchBlock,
    conditions: Option<Value>,
    cache: ExprCache,
    /// `spec.podSecurity`: the Pod Security Standards controls exempted
    /// for a podSecurity rule (when set, the rule is evaluated and only
    /// those controls are exempted).
    pod_security: Vec<crate::podsecurity::Exclude>,
    /// The CEL form: the policies named (kind, name) and the conditions.
    cel: Option<CelForm>,
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
        let Some(list) = spec["exceptions"].as_array() else {
            return Err(err(
                "spec.exceptions".into(),
                "is required and must be a list".into(),
            ));
        };
        let mut exceptions = Vec::new();
        for (i, e) in list.iter().enumerate() {
            let Some(policy) = e["policyName"].as_str() else {
                return Err(err(
                    format!("spec.exceptions[{i}].policyName"),
                    "is required".into(),
                ));
            };
            let rules = e["ruleNames"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            exceptions.push((policy.to_string(), rules));
        }
        let match_ = MatchBlock::parse(&spec["match"], "spec.match", &err)?;
        let mut cache = ExprCache::default();
        let conditions = match &spec["conditions"] {
            Value::Null => None,
            c => {
                cache
                    .collect(c)
                    .map_err(|e| err("spec.conditions".into(), e))?;
                Some(c.clone())
            }
        };
        let pod_security =
            crate::podsecurity::parse_excludes(&spec["podSecurity"], "spec.podSecurity", &err)?;
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
        use crate::cel::rule::{as_list, compile_named_conditions};
        const KIND: &str = "PolicyException";
        let spec = &doc["spec"];
        let mut refs = Vec::new();
        let listed = as_list(spec.get("policyRefs"), KIND, &name, "spec.policyRefs")?;
        if listed.is_empty() {
            return Err(Error::invalid(
                KIND,
                &name,
                "spec.policyRefs",
                "must name at least one policy",
            ));
        }
        for (i, r) in listed.iter().enumerate() {
            let Some(policy) = r["name"].as_str().filter(|n| !n.is_empty()) else {
                return Err(Error::invalid(
                    KIND,
                    &name,
                    format!("spec.policyRefs[{i}].name"),
                    "is required",
                ));
            };
            let kind = r["kind"].as_str().unwrap_or("ValidatingPolicy");
            refs.push((kind.to_string(), policy.to_string()));
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
        match (&self.conditions, vars) {
            (None, _) => true,
            (Some(c), Some(vars)) => self.conditions_hold(c, vars),
            // Without the rule's context, the conditions see the request
            // (`request.object`, `request.operation`, ...), as Kyverno's
            // do.
            (Some(c), None) => self.conditions_hold(c, &crate::eval::base_vars(req, req.operation)),
        }
    }

    fn conditions_hold(&self, conds: &Value, vars: &crate::vars::Vars) -> bool {
        let one = |c: &Value| -> bool {
            let Some(op) = CondOp::parse(c["operator"].as_str().unwrap_or("")) else {
                return false;
            };
            let key = substitute(&c["key"], vars, &self.cache, false);
            let value = substitute(&c["value"], vars, &self.cache, false);
            match (key, value) {
                (Ok(k), Ok(v)) => conditions::evaluate(op, &k, &v),
                _ => false,
            }
        };
        let any = conds["any"].as_array();
        let all = conds["all"].as_array();
        any.is_none_or(|a| a.iter().any(one)) && all.is_none_or(|a| a.iter().all(one))
    }
}
