//! Strategic merge of an overlay into a resource, with kyaml's rules (the
//! merge Kyverno runs after resolving the anchors):
//!
//! - maps merge key by key; a `null` in the overlay removes the key;
//! - scalars and lists without a merge strategy are replaced;
//! - lists with a merge key ([`super::schema`]) pair elements by the key's
//!   value and merge pairs; the overlay's elements come first, in its
//!   order, then the resource's others (kyaml's order: Kyverno prepends);
//! - `$patch: delete` removes a map (or a keyed list element), `$patch:
//!   replace` replaces it; a list element `{$patch: replace}` replaces the
//!   list.
//! - content added where the resource has none loses its `null` fields.

use serde_json::{Map, Value};

use super::schema::{ListMerge, TypeSchema};

const DIRECTIVE: &str = "$patch";

/// Merges `overlay` into `resource` (`schema`: the resource's type).
pub(crate) fn merge(
    resource: &Value,
    overlay: &Value,
    schema: Option<&'static TypeSchema>,
) -> Result<Value, String> {
    match merge_value(Some(resource), overlay, schema, ListMerge::Replace, "")? {
        Some(v) => Ok(v),
        None => Err("the patch deletes the whole resource".into()),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Object(_) => "map",
        Value::Array(_) => "list",
        Value::Null => "null",
        _ => "scalar",
    }
}

fn directive(m: &Map<String, Value>, path: &str) -> Result<Option<&'static str>, String> {
    match m.get(DIRECTIVE) {
        None => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "delete" => Ok(Some("delete")),
            "replace" => Ok(Some("replace")),
            "merge" => Ok(Some("merge")),
            other => Err(format!("unknown {DIRECTIVE} directive {other:?} at {path}")),
        },
        Some(other) => Err(format!(
            "{DIRECTIVE} at {path} must be a string, not {other}"
        )),
    }
}

/// The merged value; `None` when the field is to be removed.
fn merge_value(
    dest: Option<&Value>,
    src: &Value,
    schema: Option<&'static TypeSchema>,
    list: ListMerge,
    path: &str,
) -> Result<Option<Value>, String> {
    let dest = dest.filter(|d| !d.is_null());
    match src {
        Value::Null => Ok(None),
        Value::Object(sm) => {
            let d = match dest {
                None => return Ok(added(src)),
                Some(Value::Object(d)) => d,
                Some(other) => {
                    return Err(format!(
                        "cannot merge a map into a {} at {}",
                        kind(other),
                        display(path)
                    ));
                }
            };
            match directive(sm, path)? {
                Some("delete") => return Ok(None),
                Some("replace") => return Ok(added(src)),
                _ => {}
            }
            let mut out = d.clone();
            for (key, sv) in sm {
                if key == DIRECTIVE {
                    continue;
                }
                let child_path = format!("{path}/{key}");
                let child = schema.and_then(|s| s.field(key));
                let strategy = schema.map_or(ListMerge::Replace, |s| s.list_merge(key));
                match merge_value(d.get(key), sv, child, strategy, &child_path)? {
                    Some(v) => {
                        out.insert(key.clone(), v);
                    }
                    None => {
                        out.remove(key);
                    }
                }
            }
            Ok(Some(Value::Object(out)))
        }
        Value::Array(items) => {
            if let Some(d) = &dest
                && !d.is_array()
            {
                return Err(format!(
                    "cannot merge a list into a {} at {}",
                    kind(d),
                    display(path)
                ));
            }
            let (items, list_directive) = list_directive(items, path)?;
            match list_directive {
                Some("delete") => return Ok(None),
                Some("replace") => return Ok(Some(Value::Array(added_list(&items)))),
                _ => {}
            }
            let Some(Value::Array(d)) = dest else {
                return Ok(Some(Value::Array(added_list(&items))));
            };
            Ok(Some(Value::Array(match list {
                ListMerge::Replace => added_list(&items),
                ListMerge::Union => union(d, &items),
                ListMerge::ByKey(key) => by_key(d, &items, key, schema, path)?,
            })))
        }
        scalar => match dest {
            Some(d @ (Value::Object(_) | Value::Array(_))) => Err(format!(
                "cannot merge a scalar into a {} at {}",
                kind(d),
                display(path)
            )),
            _ => Ok(Some(scalar.clone())),
        },
    }
}

fn display(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

/// A list's `{$patch: ...}` element, taken out.
fn list_directive(
    items: &[Value],
    path: &str,
) -> Result<(Vec<Value>, Option<&'static str>), String> {
    let mut found = None;
    let mut rest = Vec::with_capacity(items.len());
    for item in items {
        if let Value::Object(m) = item
            && m.len() == 1
            && let Some(d) = directive(m, path)?
        {
            found = Some(d);
            continue;
        }
        rest.push(item.clone());
    }
    Ok((rest, found))
}

/// Content added where the resource has none: `null` fields and
/// directives dropped, `$patch: delete` maps left out.
fn added(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Object(m) => {
            if matches!(m.get(DIRECTIVE), Some(Value::String(s)) if s == "delete") {
                return None;
            }
            let mut out = Map::new();
            for (k, v) in m {
                if k == DIRECTIVE {
                    continue;
                }
                if let Some(v) = added(v) {
                    out.insert(k.clone(), v);
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(items) => Some(Value::Array(added_list(items))),
        other => Some(other.clone()),
    }
}

fn added_list(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter_map(|i| {
            if i.is_null() {
                Some(Value::Null)
            } else {
                added(i)
            }
        })
        .collect()
}

/// A scalar's text, as kyaml compares merge keys (so `80` pairs with `"80"`).
fn key_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A merged list of scalars: the overlay's items first, in its order,
/// then the resource's other items (kyaml's order, which Kyverno gives).
fn union(dest: &[Value], src: &[Value]) -> Vec<Value> {
    let same = |a: &Value, b: &Value| {
        *a == *b || key_text(a).is_some_and(|t| key_text(b).as_ref() == Some(&t))
    };
    let mut out: Vec<Value> = Vec::new();
    for item in src.iter().chain(dest) {
        if !out.iter().any(|o| same(o, item)) {
            out.push(item.clone());
        }
    }
    out
}

/// A list merged by `key`: the overlay's elements first, in its order,
/// each merged with the resource's element of the same key (or added),
/// then the resource's other elements in their order, then the overlay's
/// elements without the key. This is the order kyaml's merge gives (and so
/// Kyverno's): `imagePullSecrets: [{name: a}]` merged into `[{name: b}]`
/// is `[a, b]`.
fn by_key(
    dest: &[Value],
    src: &[Value],
    key: &str,
    schema: Option<&'static TypeSchema>,
    path: &str,
) -> Result<Vec<Value>, String> {
    let elem_key = |v: &Value| v.get(key).and_then(key_text);
    let mut front: Vec<Value> = Vec::new();
    let mut keyless: Vec<Value> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for s in src {
        let Some(k) = elem_key(s) else {
            // Without the merge key an element cannot be paired: appended.
            if let Some(v) = added(s) {
                keyless.push(v);
            }
            continue;
        };
        if seen.contains(&k) {
            continue;
        }
        seen.push(k.clone());
        let existing = dest.iter().find(|d| elem_key(d).as_deref() == Some(&k));
        let elem_path = format!("{path}/{k}");
        let merged = merge_value(existing, s, schema, ListMerge::Replace, &elem_path)?;
        match merged {
            // Deleted (`$patch: delete`), or emptied.
            None => {}
            Some(Value::Object(m)) if m.is_empty() => {}
            Some(mut v) => {
                ensure_key(&mut v, key, s);
                front.push(v);
            }
        }
    }
    let rest = dest
        .iter()
        .filter(|d| elem_key(d).is_none_or(|k| !seen.contains(&k)))
        .cloned();
    Ok(front.into_iter().chain(rest).chain(keyless).collect())
}

fn ensure_key(v: &mut Value, key: &str, src: &Value) {
    if let (Value::Object(m), Some(k)) = (v, src.get(key))
        && !m.contains_key(key)
    {
        m.insert(key.to_string(), k.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::super::schema;
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    fn run(resource: Value, overlay: Value) -> Result<Value, String> {
        let s = schema::for_resource(
            resource["apiVersion"].as_str().unwrap_or(""),
            resource["kind"].as_str().unwrap_or(""),
        );
        merge(&resource, &overlay, s)
    }

    /// One row per merge rule: resource, overlay, expected result.
    #[test]
    fn merge_table() {
        let cases: Vec<(&str, Value, Value, Value)> = vec![
            (
                "maps merge, scalars replace",
                pod(json!({"dnsPolicy": "Default", "hostname": "h"})),
                json!({"spec": {"dnsPolicy": "None", "nodeSelector": {"a": "b"}}}),
                pod(json!({"dnsPolicy": "None", "hostname": "h", "nodeSelector": {"a": "b"}})),
            ),
            (
                "null removes a key",
                pod(json!({"dnsPolicy": "Default", "hostname": "h"})),
                json!({"spec": {"hostname": null}}),
                pod(json!({"dnsPolicy": "Default"})),
            ),
            (
                // Kyverno v1.19.1's CLI gives this order (the overlay's
                // elements first, then the resource's others).
                "containers merge by name; the overlay's come first",
                pod(
                    json!({"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}),
                ),
                json!({"spec": {"containers": [{"name": "c", "image": "c:1"}, {"name": "a", "imagePullPolicy": "Always"}]}}),
                pod(json!({"containers": [
                    {"name": "c", "image": "c:1"},
                    {"name": "a", "image": "a:1", "imagePullPolicy": "Always"},
                    {"name": "b", "image": "b:1"}
                ]})),
            ),
            (
                "env merges by name inside a container",
                pod(json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]})),
                json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]}]}}),
                pod(
                    json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]}]}),
                ),
            ),
            (
                "ports merge by containerPort",
                pod(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}),
                ),
                json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]}]}}),
                pod(
                    json!({"containers": [{"name": "a", "ports": [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}]}]}),
                ),
            ),
            (
                "lists without a strategy are replaced",
                pod(
                    json!({"tolerations": [{"key": "a"}], "containers": [{"name": "a", "args": ["x", "y"]}]}),
                ),
                json!({"spec": {"tolerations": [{"key": "b"}], "containers": [{"name": "a", "args": ["z"]}]}}),
                pod(
                    json!({"tolerations": [{"key": "b"}], "containers": [{"name": "a", "args": ["z"]}]}),
                ),
            ),
            (
                "imagePullSecrets and volumes merge by name",
                pod(
                    json!({"imagePullSecrets": [{"name": "a"}], "volumes": [{"name": "v", "emptyDir": {}}]}),
                ),
                json!({"spec": {"imagePullSecrets": [{"name": "b"}], "volumes": [{"name": "v", "emptyDir": {"medium": "Memory"}}]}}),
                pod(
                    json!({"imagePullSecrets": [{"name": "b"}, {"name": "a"}], "volumes": [{"name": "v", "emptyDir": {"medium": "Memory"}}]}),
                ),
            ),
            (
                "$patch: delete removes a keyed element",
                pod(json!({"containers": [{"name": "a"}, {"name": "b"}]})),
                json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}),
                pod(json!({"containers": [{"name": "b"}]})),
            ),
            (
                "$patch: replace replaces a map",
                pod(json!({"nodeSelector": {"a": "1", "b": "2"}})),
                json!({"spec": {"nodeSelector": {"$patch": "replace", "c": "3"}}}),
                pod(json!({"nodeSelector": {"c": "3"}})),
            ),
            (
                "a list element {$patch: replace} replaces a keyed list",
                pod(json!({"containers": [{"name": "a"}, {"name": "b"}]})),
                json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "c"}]}}),
                pod(json!({"containers": [{"name": "c"}]})),
            ),
            (
                "added content drops its nulls",
                pod(json!({})),
                json!({"spec": {"securityContext": {"runAsUser": 1, "fsGroup": null}}}),
                pod(json!({"securityContext": {"runAsUser": 1}})),
            ),
            (
                "custom resources: lists are replaced, not merged",
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"items": [{"name": "a"}]}}),
                json!({"spec": {"items": [{"name": "b"}]}}),
                json!({"apiVersion": "example.com/v1", "kind": "Widget", "spec": {"items": [{"name": "b"}]}}),
            ),
            (
                "finalizers are a union, the overlay's order first (as Kyverno v1.19.1)",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"finalizers": ["a"]}}),
                json!({"metadata": {"finalizers": ["b", "a"]}}),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"finalizers": ["b", "a"]}}),
            ),
            (
                "pod template of a Deployment",
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}}),
                json!({"spec": {"template": {"spec": {"containers": [{"name": "b"}]}}}}),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {"containers": [{"name": "b"}, {"name": "a"}]}}}}),
            ),
        ];
        for (name, resource, overlay, want) in cases {
            assert_eq!(run(resource, overlay).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn kind_mismatch_is_an_error() {
        let err = run(
            pod(json!({"hostname": "h"})),
            json!({"spec": {"hostname": {"a": 1}}}),
        )
        .unwrap_err();
        assert!(err.contains("/spec/hostname"), "{err}");
    }
}
