//! Kyverno's anchors in a `patchStrategicMerge` overlay, resolved against
//! the resource before the merge (Kyverno's `strategicPreprocessing.go`).
//!
//! - `+(key)`: add if not present. Dropped from the overlay when the
//!   resource has the key, otherwise the plain key is merged.
//! - `(key)`: conditional. The value must match the resource's (with the
//!   validate pattern rules, so `=(key)`, `X(key)` and wildcards work inside
//!   it). In a map, a failed condition skips the whole patch; in a list of
//!   maps, it selects the resource elements the overlay element applies to
//!   (a copy of the element, named after each matching resource element, is
//!   added to the overlay).
//! - `<(key)`: global. As conditional, but when no element of the list
//!   satisfies it the whole patch is skipped.
//!
//! Anchored keys are then removed: conditions whose value is a scalar go,
//! conditions whose value is a map stay as plain keys (so they are merged),
//! and list elements that held anchors are replaced by their named copies.
//! Other anchors (`=(key)`, `X(key)`, `^(key)`) are not mutate anchors and
//! are left in the overlay, as Kyverno leaves them.

use serde_json::{Map, Value};

use crate::pattern::{self, Anchor, parse_anchor};

/// Why the overlay does not apply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Skip {
    /// A conditional anchor did not hold.
    Condition(String),
    /// A global anchor did not hold.
    Global(String),
}

/// Resolves the anchors of `overlay` against `resource`; `Err` when a
/// condition does not hold (the patch then changes nothing).
pub(crate) fn preprocess(overlay: &mut Value, resource: &Value) -> Result<(), Skip> {
    walk(overlay, Some(resource))?;
    if let Value::Object(m) = overlay {
        delete_condition_elements(m);
    }
    Ok(())
}

fn is_condition(a: Anchor) -> bool {
    matches!(a, Anchor::Condition | Anchor::Global)
}

/// `hasAnchor`: a condition, global or add-if-not-present anchor.
fn is_mutate_anchor(a: Anchor) -> bool {
    is_condition(a) || a == Anchor::AddIfNotPresent
}

fn anchor_of(key: &str) -> Option<Anchor> {
    parse_anchor(key).map(|(a, _)| a)
}

fn walk(overlay: &mut Value, resource: Option<&Value>) -> Result<(), Skip> {
    match overlay {
        Value::Object(m) => walk_map(m, resource),
        Value::Array(list) => {
            if list.first().is_some_and(Value::is_object) {
                walk_list_of_maps(list, resource)
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}

fn walk_map(overlay: &mut Map<String, Value>, resource: Option<&Value>) -> Result<(), Skip> {
    add_if_not_present(overlay, resource);
    check_conditions(overlay, resource)?;
    let plain: Vec<String> = overlay
        .keys()
        .filter(|k| anchor_of(k).is_none_or(|a| !is_mutate_anchor(a)))
        .cloned()
        .collect();
    for key in plain {
        let sub = resource.and_then(|r| r.get(&key));
        if let Some(v) = overlay.get_mut(&key) {
            walk(v, sub)?;
        }
    }
    Ok(())
}

/// `+(key)`: drops the key when the resource has it, else un-anchors it.
/// Returns how many such anchors the map held.
fn add_if_not_present(overlay: &mut Map<String, Value>, resource: Option<&Value>) -> usize {
    let anchored: Vec<(String, String)> = overlay
        .keys()
        .filter_map(|k| match parse_anchor(k) {
            Some((Anchor::AddIfNotPresent, inner)) => Some((k.clone(), inner.to_string())),
            _ => None,
        })
        .collect();
    for (key, inner) in &anchored {
        let present = resource
            .and_then(Value::as_object)
            .is_some_and(|r| r.contains_key(inner));
        let value = overlay.remove(key);
        if !present && let Some(v) = value {
            overlay.insert(inner.clone(), v);
        }
    }
    anchored.len()
}

/// Global anchors first, then conditional ones.
fn check_conditions(
    overlay: &mut Map<String, Value>,
    resource: Option<&Value>,
) -> Result<(), Skip> {
    check_anchors(overlay, resource, Anchor::Global).map_err(Skip::Global)?;
    check_anchors(overlay, resource, Anchor::Condition).map_err(Skip::Condition)
}

fn check_anchors(
    overlay: &mut Map<String, Value>,
    resource: Option<&Value>,
    kind: Anchor,
) -> Result<(), String> {
    let keys: Vec<(String, String)> = overlay
        .keys()
        .filter_map(|k| match parse_anchor(k) {
            Some((a, inner)) if a == kind => Some((k.clone(), inner.to_string())),
            _ => None,
        })
        .collect();
    for (key, inner) in keys {
        let Some(actual) = resource.and_then(|r| r.get(&inner)) else {
            return Err(format!("could not found \"{inner}\" key in the resource"));
        };
        let Some(expected) = overlay.get_mut(&key) else {
            continue;
        };
        if let Value::Object(m) = expected
            && add_if_not_present(m, Some(actual)) > 0
        {
            continue;
        }
        if let Err(e) = pattern::match_pattern(actual, expected) {
            return Err(match e {
                pattern::Mismatch::Fail { path, message } if !path.is_empty() => {
                    format!("{message} at path {path}")
                }
                pattern::Mismatch::Fail { message, .. } | pattern::Mismatch::Skip { message } => {
                    message
                }
            });
        }
    }
    Ok(())
}

/// Whether a value holds an anchor `wanted` accepts (a scalar that reads
/// as a condition anchor counts, as in Kyverno).
fn has_anchors(v: &Value, wanted: fn(Anchor) -> bool) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| anchor_of(k).is_some_and(wanted) || has_anchors(v, wanted)),
        Value::Array(list) => list.iter().any(|e| has_anchors(e, wanted)),
        Value::String(s) => anchor_of(s).is_some_and(is_condition),
        _ => false,
    }
}

fn walk_list_of_maps(overlay: &mut Vec<Value>, resource: Option<&Value>) -> Result<(), Skip> {
    let elements: &[Value] = resource
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let original = overlay.len();
    for i in 0..original {
        let element = &overlay[i];
        if !has_anchors(element, is_mutate_anchor) {
            continue;
        }
        let global = has_anchors(element, |a| a == Anchor::Global);
        // One copy for every resource element, as Kyverno: anchors it
        // resolved against an earlier element stay resolved.
        let mut copy = element.clone();
        let mut global_passed = false;
        let mut last_global: Option<Skip> = None;
        for item in elements {
            match walk(&mut copy, Some(item)) {
                Err(Skip::Condition(_)) => continue,
                Err(g @ Skip::Global(_)) => {
                    last_global = Some(g);
                    continue;
                }
                Ok(()) => {}
            }
            if global {
                global_passed = true;
            } else {
                add_named_copy(overlay, &copy, item);
            }
        }
        if resource.is_none() {
            match walk(&mut copy, None) {
                Err(Skip::Condition(_)) => continue,
                Err(g) => return Err(g),
                Ok(()) => global_passed |= global,
            }
        }
        if !global_passed && let Some(g) = last_global {
            return Err(g);
        }
    }
    Ok(())
}

/// A matched element: the overlay element without its anchors, named after
/// the resource element (strategic merge pairs list elements by name).
fn add_named_copy(overlay: &mut Vec<Value>, element: &Value, item: &Value) {
    let Some(name) = item.get("name").filter(|n| !is_nil_or_empty(n)) else {
        return;
    };
    let mut named = element.clone();
    if delete_anchors(&mut named, true) {
        return;
    }
    if let Value::Object(m) = &mut named {
        m.insert("name".into(), name.clone());
        overlay.push(named);
    }
}

fn is_nil_or_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn delete_condition_elements(overlay: &mut Map<String, Value>) {
    let keys: Vec<String> = overlay.keys().cloned().collect();
    for key in keys {
        let scalar = anchor_of(&key).is_some_and(is_condition);
        let Some(v) = overlay.get_mut(&key) else {
            continue;
        };
        if delete_anchors(v, scalar) {
            overlay.remove(&key);
        }
    }
}

/// Removes the anchors below `node`; `true` when the node itself must go
/// (it held nothing but anchors, or is a scalar and `delete_scalar`).
fn delete_anchors(node: &mut Value, delete_scalar: bool) -> bool {
    match node {
        Value::Object(m) => delete_anchors_in_map(m),
        Value::Array(list) => delete_anchors_in_list(list),
        _ => delete_scalar,
    }
}

fn delete_anchors_in_map(node: &mut Map<String, Value>) -> bool {
    let anchored: Vec<(String, String)> = node
        .keys()
        .filter_map(|k| match parse_anchor(k) {
            Some((a, inner)) if is_condition(a) => Some((k.clone(), inner.to_string())),
            _ => None,
        })
        .collect();
    let mut kept = Vec::new();
    for (key, inner) in anchored {
        let Some(v) = node.get_mut(&key) else {
            continue;
        };
        if delete_anchors(v, true) {
            node.remove(&key);
        } else {
            kept.push((key, inner));
        }
    }
    for (key, inner) in kept {
        if let Some(v) = node.remove(&key) {
            node.insert(inner, v);
        }
    }
    let keys: Vec<String> = node.keys().cloned().collect();
    let mut delete = true;
    for key in keys {
        let Some(v) = node.get_mut(&key) else {
            continue;
        };
        if delete_anchors(v, false) {
            node.remove(&key);
        } else {
            delete = false;
        }
    }
    delete
}

fn delete_anchors_in_list(list: &mut Vec<Value>) -> bool {
    let was_empty = list.is_empty();
    list.retain_mut(|element| {
        if has_anchors(element, is_mutate_anchor) {
            return false;
        }
        !delete_anchors(element, false)
    });
    list.is_empty() && !was_empty
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(overlay: Value, resource: Value) -> Result<Value, Skip> {
        let mut o = overlay;
        preprocess(&mut o, &resource).map(|()| o)
    }

    /// One row per anchor rule: overlay, resource, the overlay left for the
    /// merge (or the skip).
    #[test]
    fn anchor_table() {
        let pod = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "a", "image": "corp.reg.com/a:1"}, {"name": "b", "image": "docker.io/b:1", "imagePullPolicy": "Never"}
        ]}});
        let cases: Vec<(&str, Value, Result<Value, &str>)> = vec![
            (
                "add-if-not-present adds a missing key",
                json!({"metadata": {"labels": {"+(team)": "x"}}}),
                Ok(json!({"metadata": {"labels": {"team": "x"}}})),
            ),
            (
                "add-if-not-present drops a present key",
                json!({"metadata": {"labels": {"+(app)": "other"}}}),
                Ok(json!({})),
            ),
            (
                "conditional in a map holds",
                json!({"metadata": {"labels": {"(app)": "web", "tier": "1"}}}),
                Ok(json!({"metadata": {"labels": {"tier": "1"}}})),
            ),
            (
                "conditional in a map fails",
                json!({"metadata": {"labels": {"(app)": "db", "tier": "1"}}}),
                Err("condition"),
            ),
            (
                "conditional on a missing key fails",
                json!({"spec": {"(hostNetwork)": true, "dnsPolicy": "x"}}),
                Err("condition"),
            ),
            (
                "conditional in a list selects elements by name",
                json!({"spec": {"containers": [{"(image)": "corp.reg.com/*", "imagePullPolicy": "Always"}]}}),
                Ok(json!({"spec": {"containers": [{"name": "a", "imagePullPolicy": "Always"}]}})),
            ),
            (
                "conditional in a list matching nothing leaves nothing",
                json!({"spec": {"containers": [{"(image)": "quay.io/*", "imagePullPolicy": "Always"}]}}),
                Ok(json!({})),
            ),
            (
                "other anchors are no mutate anchors: kept as literal keys",
                json!({"spec": {"containers": [{"(name)": "b", "=(imagePullPolicy)": "Never"}]}}),
                Ok(json!({"spec": {"containers": [{"name": "b", "=(imagePullPolicy)": "Never"}]}})),
            ),
            (
                "negated wildcard in a condition",
                json!({"spec": {"containers": [{"(image)": "!corp.reg.com/*", "imagePullPolicy": "Always"}]}}),
                Ok(json!({"spec": {"containers": [{"name": "b", "imagePullPolicy": "Always"}]}})),
            ),
            (
                "global anchor holds: the rest of the patch applies",
                json!({"spec": {"containers": [{"<(image)": "corp.reg.com/*"}], "imagePullSecrets": [{"name": "s"}]}}),
                Ok(json!({"spec": {"imagePullSecrets": [{"name": "s"}]}})),
            ),
            (
                "global anchor fails: the whole patch skips",
                json!({"spec": {"containers": [{"<(image)": "quay.io/*"}], "imagePullSecrets": [{"name": "s"}]}}),
                Err("global"),
            ),
            (
                "conditional with a map value stays as a plain key",
                json!({"metadata": {"(labels)": {"app": "web"}, "annotations": {"a": "1"}}}),
                Ok(json!({"metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}}})),
            ),
        ];
        for (name, overlay, want) in cases {
            let got = run(overlay, pod.clone());
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{name}"),
                (Err(Skip::Condition(_)), Err("condition")) => {}
                (Err(Skip::Global(_)), Err("global")) => {}
                (g, w) => panic!("{name}: got {g:?}, want {w:?}"),
            }
        }
    }

    /// `=(key)` inside a condition's value: absent or equal holds.
    #[test]
    fn equality_inside_a_condition() {
        let overlay = json!({"(metadata)": {"=(labels)": {"app": "web"}}, "spec": {"x": 1}});
        for (resource, holds) in [
            (json!({"metadata": {"labels": {"app": "web"}}}), true),
            (json!({"metadata": {"name": "n"}}), true),
            (json!({"metadata": {"labels": {"app": "db"}}}), false),
        ] {
            let got = run(overlay.clone(), resource.clone());
            assert_eq!(got.is_ok(), holds, "{resource}: {got:?}");
        }
    }

    #[test]
    fn nested_add_if_not_present_in_matched_element() {
        let resource = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}}},
            {"name": "b"}
        ]}});
        let overlay = json!({"spec": {"containers": [{"(name)": "b", "resources": {"requests": {"+(cpu)": "100m", "+(memory)": "1Mi"}}}]}});
        let got = run(overlay, resource).unwrap();
        assert_eq!(
            got,
            json!({"spec": {"containers": [{"name": "b", "resources": {"requests": {"cpu": "100m", "memory": "1Mi"}}}]}})
        );
    }
}
