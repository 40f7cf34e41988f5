//! Stored objects: the immutable [`Entry`] (JSON serialized once) and the
//! metadata rules of create, update and merge patch.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::resources::{ResourceType, is_dns_label, is_dns_subdomain};
use crate::status::ApiError;

/// One stored version of an object. Immutable; shared by snapshots and watch events.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) rv: u64,
    pub(crate) labels: BTreeMap<String, String>,
    /// Values of the type's extra field-selector paths.
    pub(crate) fields: Vec<(&'static str, String)>,
    /// The `apiVersion` it was written at (`json` holds it).
    api_version: String,
    /// The object as JSON, serialized once when stored.
    pub(crate) json: Bytes,
}

impl Entry {
    /// Builds the entry for `obj`, whose `metadata.resourceVersion` must already be `rv`.
    pub(crate) fn new(rt: &ResourceType, obj: &Value, rv: u64) -> Self {
        let meta = obj.get("metadata");
        let s = |k: &str| {
            meta.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|l| {
                l.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let fields = rt
            .fields
            .iter()
            .map(|path| (*path, field_value(obj, path)))
            .collect();
        let mut json = serde_json::to_vec(obj).unwrap_or_default();
        // serde grows the buffer by doubling; stored for the object's life, it is trimmed.
        json.shrink_to_fit();
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Self {
            api_version,
            namespace: s("namespace"),
            name: s("name"),
            rv,
            labels,
            fields,
            json: Bytes::from(json),
        }
    }

    /// The object's JSON as served at `api_version` (`v1`, `group/version`): the
    /// stored bytes (shared, not copied) when it was written at that version, else a copy
    /// with `apiVersion` set to it. The versions of a CustomResourceDefinition share their
    /// objects; this is the API server's conversion without a webhook (`strategy: None`).
    pub(crate) fn json_at(&self, api_version: &str) -> Bytes {
        if self.api_version == api_version {
            return self.json.clone();
        }
        let mut obj = self.value();
        obj["apiVersion"] = Value::String(api_version.to_owned());
        Bytes::from(serde_json::to_vec(&obj).unwrap_or_default())
    }

    /// The parsed object.
    pub(crate) fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// An object's value for a field-selector path.
    pub(crate) fn field(&self, path: &str) -> Option<&str> {
        match path {
            "metadata.name" => Some(&self.name),
            "metadata.namespace" => Some(&self.namespace),
            _ => self
                .fields
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, v)| v.as_str()),
        }
    }
}

fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Object(o) if path == "source" => o
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        _ => String::new(),
    }
}

/// Checks `apiVersion`/`kind` against the type (filling them in when absent) and that
/// `metadata` is an object. Returns the metadata map.
pub(crate) fn check_type<'a>(
    rt: &ResourceType,
    obj: &'a mut Value,
) -> Result<&'a mut Map<String, Value>, ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request was in an unknown format: expected a JSON object",
        ));
    };
    let api_version = rt.api_version();
    match map.get("apiVersion") {
        None | Some(Value::Null) => {
            map.insert("apiVersion".into(), Value::String(api_version));
        }
        Some(Value::String(v)) if *v == api_version => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({api_version})",
                v.as_str().unwrap_or("?")
            )));
        }
    }
    match map.get("kind") {
        None | Some(Value::Null) => {
            map.insert("kind".into(), Value::String(rt.kind.clone()));
        }
        Some(Value::String(k)) if *k == rt.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({})",
                k.as_str().unwrap_or("?"),
                rt.kind
            )));
        }
    }
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if meta.is_null() {
        *meta = Value::Object(Map::new());
    }
    let meta = meta
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata must be an object"))?;
    for key in ["labels", "annotations"] {
        match meta.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {}
            Some(_) => {
                return Err(ApiError::bad_request(format!(
                    "metadata.{key} must be a map of strings"
                )));
            }
        }
    }
    Ok(meta)
}

/// Resolves the namespace of an object written through a path with `path_ns`.
pub(crate) fn check_namespace(
    rt: &ResourceType,
    meta: &mut Map<String, Value>,
    path_ns: Option<&str>,
) -> Result<String, ApiError> {
    if !rt.namespaced {
        meta.remove("namespace");
        return Ok(String::new());
    }
    let body_ns = meta
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    let ns = match (path_ns, body_ns) {
        (Some(p), Some(b)) if p != b => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(p), _) => p.to_string(),
        (None, Some(b)) => b.to_string(),
        (None, None) => "default".to_string(),
    };
    meta.insert("namespace".into(), Value::String(ns.clone()));
    Ok(ns)
}

/// Validates an object name for its type, as kube-apiserver 1.37 does.
pub(crate) fn check_name(rt: &ResourceType, name: &str) -> Result<(), ApiError> {
    // ValidatePathSegmentName: custom resources, RBAC objects
    // (`system:openshift:scc:privileged`, `kyverno:kubevirt`) and
    // PodDisruptionBudgets, whose validation checks no name rule beyond it
    // (kube-apiserver stores `good-maxUnavailable-pdb01`).
    let path_segment =
        !name.is_empty() && !name.contains(['/', '%']) && name != "." && name != "..";
    let label = rt.group.is_empty() && matches!(rt.plural.as_str(), "namespaces" | "services");
    let ok = if label {
        is_dns_label(name)
    } else {
        is_dns_subdomain(name)
            || ((rt.crd.is_some()
                || rt.group == "rbac.authorization.k8s.io"
                || (rt.group == "policy" && rt.plural == "poddisruptionbudgets"))
                && path_segment)
    };
    if ok {
        return Ok(());
    }
    let rule = if label {
        "label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
    } else {
        "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    };
    Err(ApiError::invalid(
        &rt.kind,
        name,
        format!("metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 {rule}"),
    ))
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// RFC 6902 JSON patch (add, remove, replace, move, copy, test).
pub(crate) fn json_patch(target: &mut Value, ops: &Value) -> Result<(), ApiError> {
    let bad = |m: String| ApiError::new(422, "Invalid", m);
    let ops = ops
        .as_array()
        .ok_or_else(|| ApiError::bad_request("a JSON patch must be an array of operations"))?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let path = op.get("path").and_then(Value::as_str).unwrap_or("");
        match kind {
            "add" | "replace" | "test" => {
                let value = op
                    .get("value")
                    .cloned()
                    .ok_or_else(|| bad(format!("{kind} operation needs a value")))?;
                if kind == "test" {
                    if target.pointer(path) != Some(&value) {
                        return Err(bad(format!("test operation failed at {path}")));
                    }
                } else {
                    if kind == "replace" && target.pointer(path).is_none() {
                        return Err(bad(format!(
                            "replace operation does not apply: doc is missing key: {path}"
                        )));
                    }
                    pointer_set(target, path, value, kind == "add").map_err(bad)?;
                }
            }
            "remove" => {
                pointer_remove(target, path).map_err(bad)?;
            }
            "move" | "copy" => {
                let from = op.get("from").and_then(Value::as_str).unwrap_or("");
                let value = if kind == "move" {
                    pointer_remove(target, from).map_err(bad)?
                } else {
                    target
                        .pointer(from)
                        .cloned()
                        .ok_or_else(|| bad(format!("missing from path {from}")))?
                };
                pointer_set(target, path, value, true).map_err(bad)?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown JSON patch operation {other:?}"
                )));
            }
        }
    }
    Ok(())
}

fn split_pointer(path: &str) -> Result<(String, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid path {path:?}"))?;
    Ok((
        parent.to_string(),
        last.replace("~1", "/").replace("~0", "~"),
    ))
}

fn pointer_set(target: &mut Value, path: &str, value: Value, insert: bool) -> Result<(), String> {
    if path.is_empty() {
        *target = value;
        return Ok(());
    }
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => {
            m.insert(last, value);
            Ok(())
        }
        Some(Value::Array(a)) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse().map_err(|_| format!("bad index in {path}"))?
            };
            if insert && idx <= a.len() {
                a.insert(idx, value);
                Ok(())
            } else if !insert && idx < a.len() {
                a[idx] = value;
                Ok(())
            } else {
                Err(format!("index out of range in {path}"))
            }
        }
        _ => Err(format!("doc is missing path: {path}")),
    }
}

fn pointer_remove(target: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, last) = split_pointer(path)?;
    match target.pointer_mut(&parent) {
        Some(Value::Object(m)) => m
            .remove(&last)
            .ok_or_else(|| format!("doc is missing key: {path}")),
        Some(Value::Array(a)) => {
            let idx: usize = last.parse().map_err(|_| format!("bad index in {path}"))?;
            if idx < a.len() {
                Ok(a.remove(idx))
            } else {
                Err(format!("index out of range in {path}"))
            }
        }
        _ => Err(format!("doc is missing path: {path}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// kube-apiserver names RBAC objects and PodDisruptionBudgets by path
    /// segment (Kyverno's policies create `kyverno:kubevirt`), Services and
    /// Namespaces by DNS label, other built-ins by DNS subdomain.
    #[test]
    fn rbac_names_are_path_segments() {
        let types = crate::resources::builtins();
        let rt = |plural: &str| types.iter().find(|t| t.plural == plural).unwrap();
        for plural in [
            "clusterroles",
            "roles",
            "rolebindings",
            "clusterrolebindings",
        ] {
            assert!(check_name(rt(plural), "system:openshift:scc:privileged").is_ok());
            assert!(check_name(rt(plural), "a/b").is_err());
            assert!(check_name(rt(plural), "..").is_err());
        }
        assert!(check_name(rt("configmaps"), "kyverno:kubevirt").is_err());
        assert!(check_name(rt("poddisruptionbudgets"), "good-maxUnavailable-pdb01").is_ok());
        assert!(check_name(rt("deployments"), "Upper-dep").is_err());
        // Services and Namespaces are labels: no dots.
        assert!(check_name(rt("services"), "a.b").is_err());
        assert!(check_name(rt("namespaces"), "a.b").is_err());
        assert!(check_name(rt("configmaps"), "a.b").is_ok());
        let err = check_name(rt("services"), "Upper-svc")
            .unwrap_err()
            .to_string();
        assert!(err.contains("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"), "{err}");
    }

    #[test]
    fn merge_patch_rfc7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        merge_patch(&mut t, &json!({"a": [1]}));
        assert_eq!(t["a"], json!([1]));
    }

    #[test]
    fn json_patch_ops() {
        let mut t = json!({"a": {"b": [1, 2]}});
        json_patch(
            &mut t,
            &json!([
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "replace", "path": "/a/b/0", "value": 0},
                {"op": "remove", "path": "/a/b/1"},
                {"op": "add", "path": "/x~1y", "value": true},
                {"op": "test", "path": "/x~1y", "value": true}
            ]),
        )
        .unwrap();
        assert_eq!(t, json!({"a": {"b": [0, 3]}, "x/y": true}));
        assert!(json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(json_patch(&mut t, &json!({"op": "add"})).is_err());
    }
}
