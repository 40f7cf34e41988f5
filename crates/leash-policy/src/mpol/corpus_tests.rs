//! The MutatingPolicies of Kyverno's policy library (the conformance corpus,
//! when present): each one compiles, and for each `kyverno test` row the
//! policy gives the expected result and, for a `pass` row, the object of
//! `patchedResources` with the same kind and name. Prints what differs; the
//! test fails on any row that differs.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{MutatingPolicy, is_mutating_policy};
use crate::request::{EvalRequest, NoClusterData};
use crate::result::Status;
use crate::vpol::tests::files_under;

const CORPUS: &str = "/work/shared/kyverno-policies";

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_default()
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Kyverno's `Tidy` before comparing: nulls, empty maps and empty lists
/// removed (recursively).
fn tidy(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            let out: serde_json::Map<String, Value> = m
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

/// The labels of namespaces in the test's values file.
fn namespace_labels(values: &Value, ns: &str) -> Option<BTreeMap<String, String>> {
    values["namespaceSelector"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == ns)
        .map(|n| {
            n["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                .collect()
        })
}

fn same_object(a: &Value, b: &Value) -> bool {
    a["kind"] == b["kind"] && a["metadata"]["name"] == b["metadata"]["name"]
}

#[test]
fn corpus_mutating_policies() {
    let tests = files_under(Path::new(CORPUS), |p| {
        p.file_name().is_some_and(|n| n == "kyverno-test.yaml")
    });
    let mut rows = 0;
    let mut wrong = Vec::new();
    for test_path in tests {
        let dir = test_path.parent().unwrap_or(Path::new("."));
        let test = docs(&test_path).into_iter().next().unwrap_or_default();
        let rel = |v: &Value| v.as_str().map(|p| dir.join(p));
        let policies: Vec<MutatingPolicy> = test["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(rel)
            .flat_map(|p| docs(&p))
            .filter(is_mutating_policy)
            .map(|d| {
                MutatingPolicy::compile(&d)
                    .unwrap_or_else(|e| panic!("{}: {e}", test_path.display()))
            })
            .collect();
        if policies.is_empty() {
            continue;
        }
        let mut resources: Vec<Value> = test["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(rel)
            .flat_map(|p| docs(&p))
            .collect();
        for r in &mut resources {
            if r["metadata"]["namespace"].is_null() && r["kind"] != "Namespace" {
                r["metadata"]["namespace"] = Value::from("default");
            }
        }
        let values = rel(&test["variables"])
            .or_else(|| rel(&test["values"]))
            .map(|p| docs(&p).into_iter().next().unwrap_or_default())
            .unwrap_or_default();
        for row in test["results"].as_array().into_iter().flatten() {
            let Some(p) = policies.iter().find(|p| row["policy"] == p.name()) else {
                continue;
            };
            let want = Status::parse(row["result"].as_str().unwrap_or("")).unwrap_or(Status::Skip);
            for name in row["resources"].as_array().into_iter().flatten() {
                let name = name.as_str().unwrap_or("");
                let name = name.rsplit('/').next().unwrap_or(name);
                let Some(res) = resources.iter().find(|r| r["metadata"]["name"] == name) else {
                    continue;
                };
                rows += 1;
                let mut req = EvalRequest::create(Arc::new(res.clone()));
                req.namespace_labels =
                    namespace_labels(&values, res["metadata"]["namespace"].as_str().unwrap_or(""));
                let (status, message, out) = match p.mutate(&req, &NoClusterData) {
                    Some((r, out)) => (r.status, r.message, out),
                    None => (Status::Skip, "no match".into(), res.clone()),
                };
                let label = format!("{} {} {name}", test_path.display(), p.name());
                if status != want {
                    wrong.push(format!("{label}: got {status} ({message}), want {want}"));
                    continue;
                }
                if want != Status::Pass {
                    continue;
                }
                let Some(patched) = rel(&row["patchedResources"]) else {
                    continue;
                };
                let expected = docs(&patched);
                let Some(mut exp) = expected.into_iter().find(|e| same_object(e, &out)) else {
                    continue;
                };
                if exp["metadata"]["namespace"].is_null() {
                    exp["metadata"]["namespace"] = out["metadata"]["namespace"].clone();
                }
                if tidy(&exp) != tidy(&out) {
                    wrong.push(format!(
                        "{label}: patched resource differs:\n  got  {out}\n  want {exp}"
                    ));
                }
            }
        }
    }
    for w in &wrong {
        eprintln!("{w}");
    }
    eprintln!("{} of {rows} MutatingPolicy rows differ", wrong.len());
    assert!(wrong.is_empty(), "{} rows differ", wrong.len());
}
