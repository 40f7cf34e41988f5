//! Kyverno's policy kinds checked against their CustomResourceDefinitions'
//! structural schemas, as kube-apiserver checks them with strict field
//! validation (kubectl's default): an unknown field, a value outside an
//! enum, a value of the wrong type, a missing required field or a context
//! entry with two sources is an error naming the field's path.
//!
//! Without this a typo is silently ignored: `validationFailureActon`
//! leaves the policy in Audit, `kind:` for `kinds:` matches everything, a
//! `validate:` indented under `match` leaves a rule that checks nothing.
//!
//! The schemas are `schemas/kyverno.json`, written by `schemas/generate.py`
//! from the `config/crds` of the github.com/kyverno/kyverno Go module and,
//! for Kubernetes' ValidatingAdmissionPolicy and MutatingAdmissionPolicy
//! (and bindings), the OpenAPI v3 spec of k8s.io/kubernetes (only what
//! validation needs: no descriptions, defaults or status). They are
//! parsed once, on first use.
//!
//! # Invariants
//! No lock, no task: the one `OnceLock` static holds the schemas, built
//! once by its first reader and read-only afterwards.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;

/// The top-level fields of a policy object.
const TOP_LEVEL: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];

/// kube-apiserver's words for a field its schema does not have.
const UNKNOWN: &str = "Invalid value: value provided for unknown field";

/// How many problems one document reports at most (the rest are counted).
const MAX_PROBLEMS: usize = 20;

/// One problem with a document: the field's path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `spec.rules[0].match.any[0].resources.kind`.
    pub field: String,
    /// What is wrong, in kube-apiserver's words (as Kyverno's CLI prints
    /// them): `Invalid value: value provided for unknown field`,
    /// `Unsupported value: "Deni": supported values: "Deny", "Audit", "Warn"`,
    /// `Required value`.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

struct Schemas {
    /// The distinct `spec` schemas.
    list: Vec<Value>,
    /// `group/version/Kind` → its `spec` schema's index in `list` (46 kinds
    /// share 14 schemas: a copy per kind was 7 MB of every process's heap).
    kinds: BTreeMap<String, usize>,
}

impl Schemas {
    fn get(&self, key: &str) -> Option<&Value> {
        self.kinds.get(key).map(|&i| &self.list[i])
    }
}

fn schemas() -> &'static Schemas {
    static SCHEMAS: OnceLock<Schemas> = OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut file: Value = serde_json::from_str(include_str!("../schemas/kyverno.json"))
            .expect("schemas/kyverno.json is JSON");
        let Value::Array(list) = file["schemas"].take() else {
            panic!("schemas/kyverno.json has a list of schemas")
        };
        let kinds = file["kinds"]
            .as_object()
            .expect("schemas/kyverno.json has kinds")
            .iter()
            .map(|(key, index)| {
                let index = index.as_u64().expect("a schema index") as usize;
                assert!(index < list.len(), "schema index {index} of {key}");
                (key.clone(), index)
            })
            .collect();
        Schemas { list, kinds }
    })
}

/// Whether this module has the schema of `apiVersion`'s group and `kind`
/// (in any version): a policy kind of Kyverno's.
pub fn knows(api_version: &str, kind: &str) -> bool {
    let group = api_version.split('/').next().unwrap_or("");
    let prefix = format!("{group}/");
    let suffix = format!("/{kind}");
    schemas()
        .kinds
        .keys()
        .any(|k| k.starts_with(&prefix) && k.ends_with(&suffix))
}

/// The versions Kyverno serves of `group` and `kind`.
fn versions(group: &str, kind: &str) -> Vec<&'static str> {
    schemas()
        .kinds
        .keys()
        .filter_map(|k| {
            let mut parts = k.splitn(3, '/');
            let (g, v, kd) = (parts.next()?, parts.next()?, parts.next()?);
            (g == group && kd == kind).then_some(v)
        })
        .collect()
}

/// Checks a document of one of Kyverno's policy kinds against its schema.
/// Documents of other kinds have no problems here. An empty list means the
/// document is valid.
pub fn check(doc: &Value) -> Vec<Problem> {
    let (Some(api_version), Some(kind)) = (doc["apiVersion"].as_str(), doc["kind"].as_str()) else {
        return Vec::new();
    };
    let Some((group, version)) = api_version.split_once('/') else {
        return Vec::new();
    };
    let served = versions(group, kind);
    if served.is_empty() {
        return Vec::new();
    }
    let Some(schema) = schemas().get(&format!("{group}/{version}/{kind}")) else {
        return vec![Problem {
            field: "apiVersion".into(),
            message: format!(
                "{group}/{version} does not serve {kind}: served versions are {}",
                served.join(", ")
            ),
        }];
    };
    let mut out = Problems::default();
    if let Some(object) = doc.as_object() {
        for key in object.keys() {
            if !TOP_LEVEL.contains(&key.as_str()) {
                out.push(key.clone(), UNKNOWN.into());
            }
        }
    }
    match &doc["spec"] {
        Value::Null => out.push("spec".into(), "Required value".into()),
        spec => walk(schema, spec, "spec", &mut out),
    }
    out.finish()
}

#[derive(Default)]
struct Problems {
    list: Vec<Problem>,
    more: usize,
}

impl Problems {
    fn push(&mut self, field: String, message: String) {
        if self.list.len() < MAX_PROBLEMS {
            self.list.push(Problem { field, message });
        } else {
            self.more += 1;
        }
    }

    fn finish(mut self) -> Vec<Problem> {
        if self.more > 0 {
            self.list.push(Problem {
                field: "...".into(),
                message: format!("and {} more problems", self.more),
            });
        }
        self.list
    }
}

/// Validates `value` at `path` against `schema`, pushing each problem.
fn walk(schema: &Value, value: &Value, path: &str, out: &mut Problems) {
    // kube-apiserver drops a null before validating a field that is not
    // nullable (none of Kyverno's are): `exclude:` with nothing under it
    // is no exclude.
    if value.is_null() {
        return;
    }
    if let Some(want) = schema["type"].as_str() {
        let ok = match want {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            _ => true,
        };
        if !ok {
            out.push(
                path.to_string(),
                format!(
                    "Invalid value: \"{}\": must be of type {want}",
                    type_name(value)
                ),
            );
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        out.push(
            path.to_string(),
            format!(
                "Unsupported value: {value}: supported values: {}",
                supported.join(", ")
            ),
        );
    }
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            // A schema without a type (a oneOf alternative) says nothing of
            // which fields exist.
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true)
                || schema.get("type").is_none();
            let additional = schema.get("additionalProperties");
            for (key, sub) in map {
                let field = format!("{path}.{key}");
                if let Some(prop) = properties.and_then(|p| p.get(key)) {
                    walk(prop, sub, &field, out);
                } else if let Some(additional) = additional {
                    if additional.is_object() {
                        walk(additional, sub, &field, out);
                    } else if *additional == Value::Bool(false) && !preserve {
                        out.push(field, UNKNOWN.into());
                    }
                } else if !preserve {
                    out.push(field, UNKNOWN.into());
                }
            }
            for name in schema["required"].as_array().into_iter().flatten() {
                if let Some(name) = name.as_str()
                    && map.get(name).is_none_or(Value::is_null)
                {
                    out.push(format!("{path}.{name}"), "Required value".into());
                }
            }
            if let Some(options) = schema["oneOf"].as_array() {
                let valid = options
                    .iter()
                    .filter(|option| {
                        let mut probe = Problems::default();
                        walk(option, value, path, &mut probe);
                        probe.list.is_empty()
                    })
                    .count();
                if valid != 1 {
                    let names: Vec<String> = options
                        .iter()
                        .flat_map(|o| o["required"].as_array().into_iter().flatten())
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect();
                    out.push(
                        path.to_string(),
                        format!(
                            "Invalid value: must have exactly one of {} ({valid} given)",
                            names.join(", ")
                        ),
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cpol(spec: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
               "metadata": {"name": "p"}, "spec": spec})
    }

    fn rule(body: Value) -> Value {
        let mut rule = json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}});
        for (k, v) in body.as_object().unwrap() {
            rule[k] = v.clone();
        }
        rule
    }

    fn fields(doc: &Value) -> Vec<String> {
        check(doc).into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn a_valid_policy_has_no_problems() {
        let doc = cpol(
            json!({"validationFailureAction": "Enforce", "background": true, "rules": [rule(json!({
            "context": [{"name": "cm", "configMap": {"name": "c", "namespace": "n"}}],
            "validate": {"message": "m", "pattern": {"spec": {"=(hostNetwork)": false}}}}))]}),
        );
        assert_eq!(fields(&doc), Vec::<String>::new());
    }

    #[test]
    fn each_kind_of_mistake_names_its_field() {
        let vpol = |spec: Value| {
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
                   "metadata": {"name": "v"}, "spec": spec})
        };
        let cases = [
            (
                cpol(json!({"validationFailureActon": "Enforce", "rules": []})),
                "spec.validationFailureActon: Invalid value: value provided for unknown field",
            ),
            (
                cpol(
                    json!({"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}],
                    "validate": {"pattern": {}}}}]}),
                ),
                "spec.rules[0].match.validate: Invalid value: value provided for unknown field",
            ),
            (
                cpol(
                    json!({"rules": [{"name": "r", "match": {"any": [{"resources": {"kind": ["Pod"]}}]}}]}),
                ),
                "spec.rules[0].match.any[0].resources.kind: Invalid value: value provided for unknown field",
            ),
            (
                vpol(
                    json!({"validationActions": ["Deni"], "validations": [{"expression": "true"}]}),
                ),
                "spec.validationActions[0]: Unsupported value: \"Deni\": supported values: \"Deny\", \"Audit\", \"Warn\"",
            ),
            (
                cpol(json!({"background": "yes", "rules": []})),
                "spec.background: Invalid value: \"string\": must be of type boolean",
            ),
            (
                cpol(json!({"rules": [{"match": {"any": [{"resources": {"kinds": ["Pod"]}}]}}]})),
                "spec.rules[0].name: Required value",
            ),
            (
                cpol(json!({"rules": [rule(json!({"context": [{"name": "c",
                    "configMap": {"name": "c"}, "variable": {"value": 1}}]}))]})),
                "spec.rules[0].context[0]: Invalid value: must have exactly one of configMap, apiCall, imageRegistry, variable, globalReference (2 given)",
            ),
            (
                json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                       "metadata": {"name": "p"}, "specs": {}}),
                "specs: Invalid value: value provided for unknown field | spec: Required value",
            ),
            (
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
                       "metadata": {"name": "v"}, "spec": {"validations": [{"expresion": "true"}]}}),
                "spec.validations[0].expresion: Invalid value: value provided for unknown field | spec.validations[0].expression: Required value",
            ),
            (
                json!({"apiVersion": "kyverno.io/v9", "kind": "ClusterPolicy",
                       "metadata": {"name": "p"}, "spec": {}}),
                "apiVersion: kyverno.io/v9 does not serve ClusterPolicy: served versions are v1, v2beta1",
            ),
        ];
        for (doc, want) in cases {
            assert_eq!(fields(&doc).join(" | "), want, "{doc}");
        }
    }

    #[test]
    fn what_kyverno_leaves_open_stays_open() {
        // Patterns and patches keep any field; a null is no value.
        let doc = cpol(json!({"rules": [rule(json!({"exclude": null,
            "mutate": {"patchStrategicMerge": {"spec": {"anything": [{"+(x)": 1}]}}}}))]}));
        assert_eq!(fields(&doc), Vec::<String>::new());
        // Other kinds are not checked here.
        assert!(check(&json!({"apiVersion": "v1", "kind": "Pod", "spex": {}})).is_empty());
    }

    #[test]
    fn problems_are_capped() {
        let rules: Vec<Value> = (0..30)
            .map(|i| rule(json!({"name": format!("r{i}"), "typo": 1})))
            .collect();
        let found = check(&cpol(json!({ "rules": rules })));
        assert_eq!(found.len(), MAX_PROBLEMS + 1);
        assert_eq!(found[MAX_PROBLEMS].message, "and 10 more problems");
    }

    /// Every policy of Kyverno's policy library and of its CLI suite (when
    /// present here) follows its schema: the checks refuse no manifest
    /// Kyverno accepts. Documents without a `spec` (chainsaw's status
    /// asserts) are not policies.
    #[test]
    fn the_shared_corpora_follow_their_schemas() {
        let mut checked = 0;
        for corpus in ["/work/shared/kyverno-policies", "/work/shared/kyverno-cli"] {
            let dir = std::path::Path::new(corpus);
            if !dir.is_dir() {
                continue;
            }
            for doc in crate::vpol::tests::yaml_docs(dir) {
                if doc.get("spec").is_none()
                    || !knows(
                        doc["apiVersion"].as_str().unwrap_or(""),
                        doc["kind"].as_str().unwrap_or(""),
                    )
                {
                    continue;
                }
                checked += 1;
                assert_eq!(
                    fields(&doc),
                    Vec::<String>::new(),
                    "{corpus}: {}",
                    doc["metadata"]["name"]
                );
            }
        }
        eprintln!("{checked} policies checked");
    }
}
