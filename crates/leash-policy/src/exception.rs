//! `kyverno.io/v2` (and `v2beta1`) `PolicyException`: resources it matches
//! get `skip` for the rules it names.

use serde_json::Value;

use crate::conditions::{self, CondOp};
use crate::error::{Error, Result};
use crate::eval::Prepared;
use crate::matching::{MatchBlock, Target};
use crate::vars::{ExprCache, Mode, substitute};
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
        })
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
            (Some(_), None) => false,
        }
    }

    fn conditions_hold(&self, conds: &Value, vars: &crate::vars::Vars) -> bool {
        let one = |c: &Value| -> bool {
            let Some(op) = CondOp::parse(c["operator"].as_str().unwrap_or("")) else {
                return false;
            };
            let key = substitute(&c["key"], vars, &self.cache, Mode::Preconditions, false);
            let value = substitute(&c["value"], vars, &self.cache, Mode::Preconditions, false);
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
