//! The webhooks of stored `ValidatingWebhookConfiguration` and
//! `MutatingWebhookConfiguration` objects, parsed, and which requests they match
//! (kube-apiserver's `rules`, `namespaceSelector`, `objectSelector` and
//! `matchConditions`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::Attributes;

/// kube-apiserver's default and largest `timeoutSeconds`.
const DEFAULT_TIMEOUT: u64 = 10;
const MAX_TIMEOUT: u64 = 30;

/// Where a webhook is called.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// `clientConfig.url`.
    Url(String),
    /// `clientConfig.service`.
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
    /// Neither (or both): the configuration is unusable; calling it fails.
    Invalid(String),
}

/// One webhook of a configuration.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
    pub(crate) name: String,
    pub(crate) target: Target,
    /// `clientConfig.caBundle`, still base64 (decoded when called, so a bad one is
    /// reported by the call, under the webhook's failure policy).
    pub(crate) ca_bundle: String,
    rules: Vec<Rule>,
    /// `failurePolicy: Ignore`.
    pub(crate) ignore_failures: bool,
    namespace_selector: Selector,
    object_selector: Selector,
    /// `sideEffects` is `None` or `NoneOnDryRun` (may be called for dry runs).
    pub(crate) dry_run_safe: bool,
    pub(crate) timeout: Duration,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks).
    pub(crate) reinvoke_if_needed: bool,
    /// `matchConditions`, compiled.
    conditions: Vec<Condition>,
}

/// One of a webhook's `matchConditions`: a CEL expression over `object`,
/// `oldObject` and `request` (the AdmissionRequest the webhook would get).
#[derive(Debug, Clone)]
struct Condition {
    name: String,
    /// The program, or why the expression does not compile (kube-apiserver
    /// refuses such a configuration when it is written; the sandbox stores it
    /// and fails the condition when it is evaluated).
    program: Result<Arc<cel::Program>, String>,
}

impl Condition {
    fn parse(c: &Value) -> Condition {
        let expression = s(c, "expression");
        Condition {
            name: s(c, "name").to_string(),
            program: cel::Program::compile(expression)
                .map(Arc::new)
                .map_err(|e| format!("compilation failed: {e}")),
        }
    }

    fn evaluate(&self, vars: &cel::Context) -> Result<bool, String> {
        let program = self.program.as_ref().map_err(Clone::clone)?;
        match program.execute(vars) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "expression must evaluate to bool, got {:?}",
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Rule {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
}

/// A `metav1.LabelSelector`; absent or `{}` matches everything.
#[derive(Debug, Clone, Default)]
struct Selector {
    match_labels: Vec<(String, String)>,
    expressions: Vec<Expression>,
    /// An operator this server does not know: matches nothing, as a selector that
    /// fails to convert does in kube-apiserver (which reports the webhook failing).
    invalid: bool,
}

#[derive(Debug, Clone)]
struct Expression {
    key: String,
    operator: String,
    values: Vec<String>,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

impl Selector {
    fn parse(v: Option<&Value>) -> Selector {
        let Some(v) = v.filter(|v| v.is_object()) else {
            return Selector::default();
        };
        let match_labels = v
            .get("matchLabels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let mut invalid = false;
        let expressions = v
            .get("matchExpressions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|e| {
                        let operator = s(e, "operator").to_string();
                        invalid |= !matches!(
                            operator.as_str(),
                            "In" | "NotIn" | "Exists" | "DoesNotExist"
                        );
                        Expression {
                            key: s(e, "key").to_string(),
                            operator,
                            values: strings(e.get("values")),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Selector {
            match_labels,
            expressions,
            invalid,
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.invalid {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// The labels of an object (empty if it has none).
pub(crate) fn labels_of(obj: Option<&Value>) -> BTreeMap<String, String> {
    obj.and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Every webhook of one configuration object, in order.
pub(crate) fn parse_configuration(config: &Value) -> Vec<Webhook> {
    let hooks = config
        .get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    hooks.iter().map(parse_webhook).collect()
}

fn parse_webhook(h: &Value) -> Webhook {
    let cc = h.get("clientConfig").cloned().unwrap_or_default();
    let target = match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
        (Some(url), None) => Target::Url(url.to_string()),
        (None, Some(svc)) => match svc.get("port").map(Value::as_u64) {
            None => service(svc, 443),
            Some(Some(p)) if (1..=65535).contains(&p) => service(svc, p as u16),
            Some(_) => Target::Invalid(format!(
                "clientConfig.service.port: Invalid value: {}: must be between 1 and 65535",
                svc["port"]
            )),
        },
        (Some(_), Some(_)) => {
            Target::Invalid("clientConfig: exactly one of url or service is required".into())
        }
        (None, None) => {
            Target::Invalid("clientConfig: exactly one of url or service is required".into())
        }
    };
    let rules = h
        .get("rules")
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .map(|r| Rule {
                    operations: strings(r.get("operations")),
                    api_groups: strings(r.get("apiGroups")),
                    api_versions: strings(r.get("apiVersions")),
                    resources: strings(r.get("resources")),
                    scope: s(r, "scope").to_string(),
                })
                .collect()
        })
        .unwrap_or_default();
    let timeout = h
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_TIMEOUT)
        .clamp(1, MAX_TIMEOUT);
    Webhook {
        name: s(h, "name").to_string(),
        target,
        ca_bundle: s(&cc, "caBundle").to_string(),
        rules,
        ignore_failures: s(h, "failurePolicy") == "Ignore",
        namespace_selector: Selector::parse(h.get("namespaceSelector")),
        object_selector: Selector::parse(h.get("objectSelector")),
        dry_run_safe: matches!(s(h, "sideEffects"), "None" | "NoneOnDryRun"),
        timeout: Duration::from_secs(timeout),
        reinvoke_if_needed: s(h, "reinvocationPolicy") == "IfNeeded",
        conditions: h
            .get("matchConditions")
            .and_then(Value::as_array)
            .map(|cs| cs.iter().map(Condition::parse).collect())
            .unwrap_or_default(),
    }
}

fn service(svc: &Value, port: u16) -> Target {
    let path = match s(svc, "path") {
        "" => "/".to_string(),
        p => p.to_string(),
    };
    Target::Service {
        namespace: s(svc, "namespace").to_string(),
        name: s(svc, "name").to_string(),
        port,
        path,
    }
}

impl Rule {
    fn matches(&self, a: &Attributes) -> bool {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        let scope = match self.scope.as_str() {
            "Cluster" => a.namespace.is_empty(),
            "Namespaced" => !a.namespace.is_empty(),
            _ => true,
        };
        scope
            && any(&self.operations, a.operation.as_str())
            && any(&self.api_groups, &a.resource.group)
            && any(&self.api_versions, &a.resource.version)
            && self.resources.iter().any(|r| {
                let (res, sub) = r.split_once('/').unwrap_or((r, ""));
                (res == "*" || res == a.resource.plural) && (sub == "*" || sub == a.sub_resource)
            })
    }
}

impl Webhook {
    /// Whether this webhook is called for `a`, whose namespace has `namespace_labels`
    /// (`None` for cluster-scoped objects other than namespaces: the selector is not
    /// consulted for them, as in kube-apiserver).
    pub(crate) fn matches(
        &self,
        a: &Attributes,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if !self.rules.iter().any(|r| r.matches(a)) {
            return false;
        }
        if let Some(labels) = namespace_labels
            && !self.namespace_selector.matches(labels)
        {
            return false;
        }
        // kube-apiserver: the object's labels or the old object's labels.
        let object = labels_of(a.object.as_ref());
        let old = labels_of(a.old_object.as_ref());
        let matched = |l: &BTreeMap<String, String>| self.object_selector.matches(l);
        (a.object.is_some() && matched(&object)) || (a.old_object.is_some() && matched(&old))
    }

    /// `matchConditions` for the AdmissionRequest `request` (which holds the
    /// object and the old one), in kube-apiserver's order: any condition
    /// false, `Ok(false)` (the webhook is not called); all true (or none),
    /// `Ok(true)`; otherwise, the first error, for the failure policy.
    pub(crate) fn conditions_hold(&self, request: &Value) -> Result<bool, String> {
        if self.conditions.is_empty() {
            return Ok(true);
        }
        let mut vars = cel::Context::default();
        let null = Value::Null;
        for (name, v) in [
            ("object", request.get("object").unwrap_or(&null)),
            ("oldObject", request.get("oldObject").unwrap_or(&null)),
            ("request", request),
        ] {
            vars.add_variable(name, v)
                .map_err(|e| format!("the request's {name} cannot be read by CEL: {e}"))?;
        }
        let mut first_error = None;
        for c in &self.conditions {
            match c.evaluate(&vars) {
                Ok(false) => return Ok(false),
                Ok(true) => {}
                Err(e) => {
                    first_error.get_or_insert_with(|| format!("matchCondition {:?}: {e}", c.name));
                }
            }
        }
        first_error.map_or(Ok(true), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_follow_label_selector_semantics() {
        let sel = Selector::parse(Some(&json!({
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "stage"]},
                {"key": "skip", "operator": "DoesNotExist"},
            ],
        })));
        assert!(sel.matches(&labels(&[("team", "a"), ("env", "prod")])));
        assert!(!sel.matches(&labels(&[("team", "a"), ("env", "dev")])));
        assert!(!sel.matches(&labels(&[("team", "a"), ("env", "prod"), ("skip", "")])));
        assert!(!sel.matches(&labels(&[("env", "prod")])));
        assert!(Selector::parse(Some(&json!({}))).matches(&labels(&[])));
        assert!(Selector::parse(None).matches(&labels(&[("x", "y")])));
        let bad = Selector::parse(Some(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
        ));
        assert!(!bad.matches(&labels(&[("a", "1")])));
    }

    #[test]
    fn timeouts_default_to_10_and_stop_at_30_and_targets_parse() {
        let hooks = parse_configuration(&json!({"webhooks": [
            {"name": "a", "clientConfig": {"url": "https://x/"}},
            {"name": "b", "timeoutSeconds": 90, "clientConfig": {"service": {"namespace": "n", "name": "s"}}},
            {"name": "c", "clientConfig": {}},
        ]}));
        assert_eq!(hooks[0].timeout, Duration::from_secs(10));
        assert_eq!(hooks[0].target, Target::Url("https://x/".into()));
        assert_eq!(hooks[1].timeout, Duration::from_secs(30));
        assert_eq!(
            hooks[1].target,
            Target::Service {
                namespace: "n".into(),
                name: "s".into(),
                port: 443,
                path: "/".into()
            }
        );
        assert!(matches!(hooks[2].target, Target::Invalid(_)));
        assert!(!hooks[0].ignore_failures);
    }
}
