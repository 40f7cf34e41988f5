//! Comparing a resource leash produced (a generated downstream) with the one
//! a test file expects, as Kyverno's CLI compares them: both sides tidied
//! (empty maps, empty lists and nulls dropped), the `generate.kyverno.io/*`
//! labels ignored, then equal as JSON.

use std::path::Path;

use anyhow::Result;
use serde_json::{Map, Value};

use super::files;

/// A resource without its empty maps, empty lists and nulls (`None` when
/// nothing is left).
pub(crate) fn tidy(v: &Value) -> Option<Value> {
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

/// The object with Kyverno's generate labels taken out (the controller's
/// bookkeeping, which a test file does not spell out).
fn without_generate_labels(v: &Value) -> Value {
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
    v
}

/// Where two resources differ (JSON paths, at most a few), empty when they
/// are equal as Kyverno's CLI compares them.
pub(crate) fn differences(actual: &Value, expected: &Value) -> Vec<String> {
    let a = tidy(&without_generate_labels(actual)).unwrap_or(Value::Null);
    let e = tidy(&without_generate_labels(expected)).unwrap_or(Value::Null);
    let mut out = Vec::new();
    diff(&a, &e, String::new(), &mut out);
    out
}

fn diff(a: &Value, e: &Value, path: String, out: &mut Vec<String>) {
    const MAX: usize = 5;
    if out.len() >= MAX || a == e {
        return;
    }
    match (a, e) {
        (Value::Object(am), Value::Object(em)) => {
            for (k, ev) in em {
                let p = format!("{path}/{k}");
                match am.get(k) {
                    Some(av) => diff(av, ev, p, out),
                    None => out.push(format!("{p}: missing")),
                }
                if out.len() >= MAX {
                    return;
                }
            }
            for k in am.keys().filter(|k| !em.contains_key(*k)) {
                out.push(format!("{path}/{k}: not expected"));
                if out.len() >= MAX {
                    return;
                }
            }
        }
        (Value::Array(aa), Value::Array(ea)) if aa.len() == ea.len() => {
            for (i, (av, ev)) in aa.iter().zip(ea).enumerate() {
                diff(av, ev, format!("{path}/{i}"), out);
            }
        }
        _ => out.push(format!(
            "{}: got {}, expected {}",
            if path.is_empty() { "/" } else { &path },
            short(a),
            short(e)
        )),
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}

/// The identity a resource is looked up by in an expected-resource file.
fn identity(v: &Value) -> (&str, &str, &str, &str) {
    (
        v["apiVersion"].as_str().unwrap_or(""),
        v["kind"].as_str().unwrap_or(""),
        v["metadata"]["namespace"].as_str().unwrap_or(""),
        v["metadata"]["name"].as_str().unwrap_or(""),
    )
}

/// Compares `actual` with the document of `file` that has its apiVersion,
/// kind, namespace and name. `Ok(None)` when equal, `Ok(Some(why))` when
/// not (or when the file has no such document).
pub(crate) fn against_file(actual: &Value, file: &Path) -> Result<Option<String>> {
    let docs = files::read_file(file)?;
    let want = identity(actual);
    let Some(doc) = docs.iter().find(|d| {
        let got = identity(&d.value);
        // A document without a namespace stands for the default one.
        got.0 == want.0
            && got.1 == want.1
            && got.3 == want.3
            && (got.2 == want.2 || (got.2.is_empty() && want.2 == "default"))
    }) else {
        return Ok(Some(format!(
            "{} has no {} {}/{}",
            file.display(),
            want.1,
            want.2,
            want.3
        )));
    };
    let mut expected = doc.value.clone();
    if expected["metadata"]["namespace"].is_null() && !want.2.is_empty() {
        expected["metadata"]["namespace"] = Value::String(want.2.to_string());
    }
    let diffs = differences(actual, &expected);
    Ok((!diffs.is_empty()).then(|| {
        format!(
            "{} {}/{} differs from {}: {}",
            want.1,
            want.2,
            want.3,
            file.display(),
            diffs.join("; ")
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tidy_drops_empty_values() {
        let v = json!({"a": {}, "b": [], "c": null, "d": [{}, 1], "e": {"f": {"g": null}}});
        assert_eq!(tidy(&v), Some(json!({"d": [1]})));
        assert_eq!(tidy(&json!({"a": {}})), None);
    }

    #[test]
    fn generate_labels_are_ignored_and_real_differences_named() {
        let actual = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "labels": {
                "generate.kyverno.io/rule-name": "r", "app.kubernetes.io/managed-by": "kyverno"}},
            "data": {"a": "1", "b": "2"}
        });
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n"}, "data": {"a": "1", "b": "2"}});
        assert!(differences(&actual, &same).is_empty());
        let other = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n"}, "data": {"a": "9", "c": "3"}});
        let d = differences(&actual, &other);
        assert_eq!(
            d,
            vec![
                "/data/a: got \"1\", expected \"9\"".to_string(),
                "/data/c: missing".to_string(),
                "/data/b: not expected".to_string()
            ]
        );
    }
}
