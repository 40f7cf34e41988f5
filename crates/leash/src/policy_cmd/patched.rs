//! `patchedResources` of `leash test`: the mutated resource compared with
//! the expected one in a file, as `kyverno test` compares them.
//!
//! The expected resource is the document of the file with the same
//! apiVersion, kind, namespace and name. Both sides are tidied first (null
//! values, empty maps and empty lists removed, recursively), the labels
//! Kyverno rewrites on generated resources (`generate.kyverno.io/*`,
//! `app.kubernetes.io/managed-by`) are ignored, and numbers compare by
//! value (`1` equals `1.0`), as Kyverno's JSON merge-patch comparison does.

use std::path::Path;

use anyhow::Result;
use serde_json::{Map, Value};

use super::files;
use super::load;

/// How a mutated resource compares with the file's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PatchCheck {
    /// Equal.
    Equal,
    /// Different: the differing fields, one line each.
    Differs(Vec<String>),
    /// The file holds no resource with this identity; `kyverno test` then
    /// leaves the row out, and so does leash (reported, not counted).
    NotInFile(String),
}

fn identity(v: &Value) -> (String, String, String, String) {
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let ns = match v["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".to_string(),
    };
    (
        s(&v["apiVersion"]),
        s(&v["kind"]),
        ns,
        s(&v["metadata"]["name"]),
    )
}

/// Compares `actual` with the resource of the same identity in `file`.
pub(crate) fn check(actual: &Value, file: &Path) -> Result<PatchCheck> {
    let docs = files::read_file(file)?;
    let want = identity(actual);
    let Some(mut expected) = docs
        .into_iter()
        .map(|d| d.value)
        .find(|v| identity(v) == want)
    else {
        return Ok(PatchCheck::NotInFile(format!(
            "{} has no {} {}/{} (apiVersion {})",
            file.display(),
            want.1,
            want.2,
            want.3,
            want.0
        )));
    };
    load::default_namespace(&mut expected);
    let a = normalize(actual);
    let e = normalize(&expected);
    let mut diffs = Vec::new();
    diff(&e, &a, "", &mut diffs);
    Ok(if diffs.is_empty() {
        PatchCheck::Equal
    } else {
        PatchCheck::Differs(diffs)
    })
}

fn normalize(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(labels) = v
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        labels.retain(|k, _| {
            !k.starts_with("generate.kyverno.io/") && k != "app.kubernetes.io/managed-by"
        });
    }
    tidy(&v).unwrap_or(Value::Object(Map::new()))
}

/// Kyverno's `TidyObject`: nulls, empty maps and empty lists removed.
fn tidy(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, v)| tidy(v).map(|v| (k.clone(), v)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        Value::Array(a) => {
            let out: Vec<Value> = a.iter().filter_map(tidy).collect();
            (!out.is_empty()).then_some(Value::Array(out))
        }
        other => Some(other.clone()),
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}...", s.chars().take(77).collect::<String>())
    } else {
        s
    }
}

fn diff(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    let at = if path.is_empty() { "/" } else { path };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}/{k}");
                match a.get(k) {
                    Some(av) => diff(ev, av, &p, out),
                    None => out.push(format!("{p}: only in expected: {}", show(ev))),
                }
            }
            for (k, av) in a {
                if !e.contains_key(k) {
                    out.push(format!("{path}/{k}: only in actual: {}", show(av)));
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                diff(ev, av, &format!("{path}/{i}"), out);
            }
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => {}
        (e, a) if e == a => {}
        (e, a) => out.push(format!("{at}: expected {}, got {}", show(e), show(a))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tidy_and_numbers() {
        let e = normalize(
            &json!({"a": {"b": {}}, "c": [], "d": 1.0, "e": null, "metadata": {"labels": {"app.kubernetes.io/managed-by": "kyverno"}}}),
        );
        let a = normalize(&json!({"d": 1}));
        let mut d = Vec::new();
        diff(&e, &a, "", &mut d);
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn differences_are_named() {
        let mut d = Vec::new();
        diff(
            &json!({"spec": {"containers": [{"name": "a", "image": "x"}]}, "k": 1}),
            &json!({"spec": {"containers": [{"name": "a", "image": "y"}]}, "z": 2}),
            "",
            &mut d,
        );
        assert_eq!(
            d,
            vec![
                "/k: only in expected: 1".to_string(),
                "/spec/containers/0/image: expected \"x\", got \"y\"".to_string(),
                "/z: only in actual: 2".to_string(),
            ]
        );
    }
}
