//! Validate `pattern` matching with Kyverno's anchors.
//!
//! - `(key)` conditional: if the key is absent or its value does not match,
//!   the enclosing map is skipped (and a rule whose every map skipped skips).
//! - `<(key)` global: as conditional, but skips the whole rule.
//! - `=(key)` equality: if present, must match.
//! - `X(key)` negation: must be absent.
//! - `^(key)` existence: at least one element of the list matches.
//!
//! Anchors are checked before the other keys of a map; keys whose values
//! hold anchors are checked before plain keys. An array pattern whose first
//! element is a map applies that map to every element of the resource's
//! array; a scalar pattern against an array checks every element.

use serde_json::{Map, Value};

use crate::value;
use crate::wildcard;

/// The kind of an anchored key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Anchor {
    Condition,
    Global,
    Equality,
    Negation,
    Existence,
    AddIfNotPresent,
}

/// Splits an anchored key: `(name)` → `(Condition, "name")`.
pub(crate) fn parse_anchor(key: &str) -> Option<(Anchor, &str)> {
    let (anchor, rest) = match key.as_bytes().first()? {
        b'(' => (Anchor::Condition, key),
        b'<' => (Anchor::Global, &key[1..]),
        b'=' => (Anchor::Equality, &key[1..]),
        b'X' => (Anchor::Negation, &key[1..]),
        b'^' => (Anchor::Existence, &key[1..]),
        b'+' => (Anchor::AddIfNotPresent, &key[1..]),
        _ => return None,
    };
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    if inner.is_empty() {
        return None;
    }
    Some((anchor, inner))
}

/// Why a pattern did not match.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// The resource violates the pattern at `path`.
    Fail {
        /// JSON-pointer-like path with a trailing slash (`/spec/containers/0/image/`).
        path: String,
        /// What did not match.
        message: String,
    },
    /// A conditional or global anchor did not hold: the rule does not apply.
    Skip {
        /// Why.
        message: String,
    },
}

#[derive(Debug)]
enum Err {
    Fail(String, String),
    Negation(String, String),
    Conditional(String),
    Global(String),
}

impl Err {
    fn is_skip(&self) -> bool {
        matches!(self, Err::Conditional(_) | Err::Global(_))
    }
    fn message(&self) -> &str {
        match self {
            Err::Fail(_, m) | Err::Negation(_, m) | Err::Conditional(m) | Err::Global(m) => m,
        }
    }
}

/// Matches `resource` against `pattern` (variables already substituted).
pub fn match_pattern(resource: &Value, pattern: &Value) -> Result<(), Mismatch> {
    Compiled::new(pattern).matches(resource)
}

/// A pattern compiled once: each map's anchors parsed and its keys in the
/// order they are checked (anchors, then plain keys holding anchors, then
/// the rest), each leaf parsed ([`value::Leaf`]). Matching walks the
/// resource along it, parsing nothing of the pattern again.
#[derive(Debug, Clone)]
pub(crate) struct Compiled(Node);

#[derive(Debug, Clone)]
enum Node {
    Map(MapNode),
    Array(Vec<Node>),
    /// A scalar, as written (for messages) and parsed.
    Leaf(Value, value::Leaf),
}

#[derive(Debug, Clone)]
struct MapNode {
    /// The map as written, kept only when a wildcard key under its
    /// `metadata.labels` or `metadata.annotations` may be expanded against
    /// the resource (then the expanded map is compiled and matched).
    expands: Option<Map<String, Value>>,
    /// Anchored keys, in the map's order.
    anchored: Vec<(Anchor, String, Node)>,
    /// Plain keys: those holding nested anchors first; `true` for a `"*"`
    /// value (the key must be present).
    plain: Vec<(String, Node, bool)>,
}

impl Compiled {
    pub(crate) fn new(pattern: &Value) -> Compiled {
        Compiled(Node::new(pattern))
    }

    /// Matches `resource` against the pattern.
    pub(crate) fn matches(&self, resource: &Value) -> Result<(), Mismatch> {
        match element(resource, &self.0, &Path::ROOT) {
            Ok(()) => Ok(()),
            Err(e) if e.is_skip() => Err(Mismatch::Skip {
                message: e.message().to_string(),
            }),
            Err(Err::Fail(path, message)) | Err(Err::Negation(path, message)) => {
                Err(Mismatch::Fail { path, message })
            }
            Err(e) => Err(Mismatch::Fail {
                path: String::new(),
                message: e.message().to_string(),
            }),
        }
    }
}

impl Node {
    fn new(pattern: &Value) -> Node {
        match pattern {
            Value::Object(map) => Node::Map(MapNode::new(map)),
            Value::Array(items) => Node::Array(items.iter().map(Node::new).collect()),
            scalar => Node::Leaf(scalar.clone(), value::Leaf::compile(scalar)),
        }
    }
}

impl MapNode {
    fn new(pattern: &Map<String, Value>) -> MapNode {
        let mut anchored = Vec::new();
        let (mut nested, mut rest) = (Vec::new(), Vec::new());
        for (key, sub) in pattern {
            match parse_anchor(key) {
                Some((anchor, name)) => anchored.push((anchor, name.to_string(), Node::new(sub))),
                None => {
                    let entry = (key.clone(), Node::new(sub), sub.as_str() == Some("*"));
                    if has_nested_anchor(sub) {
                        nested.push(entry);
                    } else {
                        rest.push(entry);
                    }
                }
            }
        }
        nested.append(&mut rest);
        MapNode {
            expands: may_expand(pattern).then(|| pattern.clone()),
            anchored,
            plain: nested,
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "map",
    }
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_string(),
        other => other.to_string(),
    }
}

/// Where in the resource the matcher stands: a chain of segments on the
/// stack, rendered (`/spec/containers/0/`) only when a message needs it, so
/// that a pattern that holds costs no string building.
#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
}

#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path {
        parent: None,
        seg: Seg::Root,
    };

    fn key(&'a self, key: &'a str) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Key(key),
        }
    }

    fn index(&'a self, index: usize) -> Path<'a> {
        Path {
            parent: Some(self),
            seg: Seg::Index(index),
        }
    }
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(parent) = self.parent {
            parent.fmt(f)?;
        }
        match self.seg {
            Seg::Root => f.write_str("/"),
            Seg::Key(key) => write!(f, "{key}/"),
            Seg::Index(i) => write!(f, "{i}/"),
        }
    }
}

fn element(resource: &Value, pattern: &Node, path: &Path<'_>) -> Result<(), Err> {
    match pattern {
        Node::Map(p) => match resource {
            Value::Object(r) => map(r, p, path),
            other => Err(Err::Fail(
                path.to_string(),
                format!(
                    "pattern and resource have different structures. Path: {path}. Expected map, found {}",
                    type_name(other)
                ),
            )),
        },
        Node::Array(p) => match resource {
            Value::Array(r) => array(r, p, path),
            _ => Err(Err::Fail(
                path.to_string(),
                format!(
                    "validation rule failed at path {path}, resource does not satisfy the expected overlay pattern"
                ),
            )),
        },
        Node::Leaf(scalar, leaf) => {
            let ok = match resource {
                Value::Array(items) => items.iter().all(|item| leaf.matches(item)),
                other => leaf.matches(other),
            };
            if ok {
                Ok(())
            } else {
                Err(Err::Fail(
                    path.to_string(),
                    format!(
                        "resource value '{}' does not match '{}' at path {path}",
                        display(resource),
                        display(scalar)
                    ),
                ))
            }
        }
    }
}

fn has_nested_anchor(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| parse_anchor(k).is_some() || has_nested_anchor(v)),
        Value::Array(a) => a.iter().any(has_nested_anchor),
        _ => false,
    }
}

fn map(resource: &Map<String, Value>, pattern: &MapNode, path: &Path<'_>) -> Result<(), Err> {
    if let Some(expanded) = pattern
        .expands
        .as_ref()
        .and_then(|raw| expand_metadata_wildcards(raw, resource))
    {
        let mut compiled = MapNode::new(&expanded);
        // The expanded map's wildcards are the resource's keys now.
        compiled.expands = None;
        return map(resource, &compiled, path);
    }
    // Anchors first, then plain keys, those holding nested anchors first.
    for (anchor, name, sub) in &pattern.anchored {
        anchored(*anchor, name, sub, resource, path)?;
    }
    for (key, sub, star) in &pattern.plain {
        let current = path.key(key);
        let value = resource.get(key.as_str()).unwrap_or(&Value::Null);
        if *star {
            if value.is_null() {
                return Err(Err::Fail(
                    path.to_string(),
                    format!("{path}/{key} not found"),
                ));
            }
            continue;
        }
        element(value, sub, &current)?;
    }
    Ok(())
}

fn anchored(
    anchor: Anchor,
    key: &str,
    sub: &Node,
    resource: &Map<String, Value>,
    path: &Path<'_>,
) -> Result<(), Err> {
    let current = path.key(key);
    let value = resource.get(key);
    match anchor {
        Anchor::Condition => match value {
            Some(v) => element(v, sub, &current).map_err(|e| {
                Err::Conditional(format!("conditional anchor mismatch: {}", e.message()))
            }),
            None => Err(Err::Conditional(
                "conditional anchor key doesn't exist in the resource".to_string(),
            )),
        },
        Anchor::Global => match value {
            Some(v) => element(v, sub, &current)
                .map_err(|e| Err::Global(format!("global anchor mismatch: {}", e.message()))),
            None => Ok(()),
        },
        Anchor::Equality | Anchor::AddIfNotPresent => match value {
            Some(v) => element(v, sub, &current),
            None => Ok(()),
        },
        Anchor::Negation => match value {
            Some(_) => Err(Err::Negation(
                current.to_string(),
                format!("{current} is not allowed"),
            )),
            None => Ok(()),
        },
        Anchor::Existence => match value {
            None => Ok(()),
            Some(Value::Array(items)) => {
                let Node::Array(patterns) = sub else {
                    return Err(Err::Fail(
                        current.to_string(),
                        "invalid pattern: the existence anchor needs a list pattern".to_string(),
                    ));
                };
                for p in patterns {
                    if !matches!(p, Node::Map(_)) {
                        return Err(Err::Fail(
                            current.to_string(),
                            "invalid pattern: existence anchor list items must be maps".to_string(),
                        ));
                    }
                    let found = items
                        .iter()
                        .enumerate()
                        .any(|(i, item)| element(item, p, &current.index(i)).is_ok());
                    if !found {
                        return Err(Err::Fail(
                            current.to_string(),
                            format!("existence anchor validation failed at path {current}"),
                        ));
                    }
                }
                Ok(())
            }
            Some(other) => Err(Err::Fail(
                current.to_string(),
                format!(
                    "invalid resource type {}: existence ^() anchor can be used only on list/array type resource",
                    type_name(other)
                ),
            )),
        },
    }
}

fn array(resource: &[Value], pattern: &[Node], path: &Path<'_>) -> Result<(), Err> {
    let Some(first) = pattern.first() else {
        return Err(Err::Fail(
            path.to_string(),
            "pattern Array empty".to_string(),
        ));
    };
    match first {
        Node::Map(_) => {
            let mut applied = 0;
            let mut skips = Vec::new();
            for (i, item) in resource.iter().enumerate() {
                match element(item, first, &path.index(i)) {
                    Ok(()) => applied += 1,
                    Err(e) if e.is_skip() => skips.push(e),
                    Err(e) => return Err(e),
                }
            }
            if applied == 0 && !skips.is_empty() {
                let message = skips
                    .iter()
                    .map(Err::message)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(if skips.iter().any(|e| matches!(e, Err::Global(_))) {
                    Err::Global(message)
                } else {
                    Err::Conditional(message)
                });
            }
            Ok(())
        }
        Node::Array(_) => {
            if resource.len() < pattern.len() {
                return Err(Err::Fail(
                    path.to_string(),
                    format!(
                        "validate Array failed, array length mismatch, resource Array len is {} and pattern Array len is {}",
                        resource.len(),
                        pattern.len()
                    ),
                ));
            }
            let mut applied = 0;
            let mut skips = Vec::new();
            for (i, p) in pattern.iter().enumerate() {
                match element(&resource[i], p, &path.index(i)) {
                    Ok(()) => applied += 1,
                    Err(e) if e.is_skip() => skips.push(e),
                    Err(e) => return Err(e),
                }
            }
            if applied == 0 && !skips.is_empty() {
                let message = skips
                    .iter()
                    .map(Err::message)
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(Err::Conditional(message));
            }
            Ok(())
        }
        // A scalar pattern in a list: every element must match it (the
        // list is copied only for the message of a mismatch).
        Node::Leaf(_, leaf) if resource.iter().all(|item| leaf.matches(item)) => Ok(()),
        Node::Leaf(..) => element(&Value::Array(resource.to_vec()), first, path),
    }
}

/// Whether [`expand_metadata_wildcards`] may change `pattern` for some
/// resource: its `metadata` has a `labels` or `annotations` map (anchored
/// or not) with a wildcard key.
fn may_expand(pattern: &Map<String, Value>) -> bool {
    let Some(pmeta) = pattern.get("metadata").and_then(Value::as_object) else {
        return false;
    };
    pmeta.iter().any(|(pkey, pval)| {
        let field = parse_anchor(pkey).map_or(pkey.as_str(), |(_, inner)| inner);
        (field == "labels" || field == "annotations")
            && pval
                .as_object()
                .is_some_and(|m| m.keys().any(|k| wildcard::has_wildcard(k)))
    })
}

/// Kyverno's `ExpandInMetadata`: a wildcard key under `metadata.labels` or
/// `metadata.annotations` of the pattern (anchored or not; the maps
/// themselves anchored or not) becomes the first key of the resource it
/// matches, keeping its anchor and its pattern value (values are checked by
/// the pattern as usual). A key that matches nothing is left as it is.
fn expand_metadata_wildcards(
    pattern: &Map<String, Value>,
    resource: &Map<String, Value>,
) -> Option<Map<String, Value>> {
    let pmeta = pattern.get("metadata")?.as_object()?;
    let rmeta = resource.get("metadata")?.as_object()?;
    let mut changed = false;
    let mut new_meta = pmeta.clone();
    for (pkey, pval) in pmeta {
        let field = parse_anchor(pkey).map_or(pkey.as_str(), |(_, inner)| inner);
        if field != "labels" && field != "annotations" {
            continue;
        }
        let Value::Object(pmap) = pval else { continue };
        if !pmap.keys().any(|k| wildcard::has_wildcard(k)) {
            continue;
        }
        let Some(rmap) = rmeta.get(field).and_then(Value::as_object) else {
            continue;
        };
        let mut out = Map::new();
        for (k, v) in pmap {
            if !wildcard::has_wildcard(k) {
                out.insert(k.clone(), v.clone());
                continue;
            }
            let (prefix, inner, suffix) = match parse_anchor(k) {
                Some((_, inner)) => {
                    let open = k.find('(').unwrap_or(0);
                    (&k[..=open], inner, ")")
                }
                None => ("", k.as_str(), ""),
            };
            let key = match rmap.keys().find(|rk| wildcard::matches(inner, rk)) {
                Some(rk) => format!("{prefix}{rk}{suffix}"),
                None => k.clone(),
            };
            out.insert(key, v.clone());
        }
        new_meta.insert(pkey.clone(), Value::Object(out));
        changed = true;
    }
    if !changed {
        return None;
    }
    let mut p = pattern.clone();
    p.insert("metadata".to_string(), Value::Object(new_meta));
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, PartialEq)]
    enum Want {
        Pass,
        Fail,
        Skip,
    }

    fn run(resource: Value, pattern: Value) -> Want {
        match match_pattern(&resource, &pattern) {
            Ok(()) => Want::Pass,
            Err(Mismatch::Fail { .. }) => Want::Fail,
            Err(Mismatch::Skip { .. }) => Want::Skip,
        }
    }

    #[test]
    fn anchors_and_arrays() {
        let pod = |containers: Value| json!({"spec": {"containers": containers}});
        let cases = [
            // plain keys
            (
                "plain match",
                pod(json!([{"image": "a:1"}])),
                json!({"spec": {"containers": [{"image": "!*:latest"}]}}),
                Want::Pass,
            ),
            (
                "plain mismatch",
                pod(json!([{"image": "a:latest"}])),
                json!({"spec": {"containers": [{"image": "!*:latest"}]}}),
                Want::Fail,
            ),
            (
                "every element",
                pod(json!([{"image": "a:1"}, {"image": "b:latest"}])),
                json!({"spec": {"containers": [{"image": "!*:latest"}]}}),
                Want::Fail,
            ),
            (
                "missing key fails",
                pod(json!([{"name": "a"}])),
                json!({"spec": {"containers": [{"image": "?*"}]}}),
                Want::Fail,
            ),
            (
                "star needs presence",
                pod(json!([{"name": "a"}])),
                json!({"spec": {"containers": [{"image": "*"}]}}),
                Want::Fail,
            ),
            (
                "star present",
                pod(json!([{"image": ""}])),
                json!({"spec": {"containers": [{"image": "*"}]}}),
                Want::Pass,
            ),
            // conditional
            (
                "conditional holds, rest fails",
                pod(json!([{"image": "a:latest", "imagePullPolicy": "IfNotPresent"}])),
                json!({"spec": {"containers": [{"(image)": "*:latest", "imagePullPolicy": "Always"}]}}),
                Want::Fail,
            ),
            (
                "conditional holds, rest passes",
                pod(json!([{"image": "a:latest", "imagePullPolicy": "Always"}])),
                json!({"spec": {"containers": [{"(image)": "*:latest", "imagePullPolicy": "Always"}]}}),
                Want::Pass,
            ),
            (
                "conditional never holds skips",
                pod(json!([{"image": "a:1", "imagePullPolicy": "IfNotPresent"}])),
                json!({"spec": {"containers": [{"(image)": "*:latest", "imagePullPolicy": "Always"}]}}),
                Want::Skip,
            ),
            (
                "conditional key absent skips",
                json!({"metadata": {"name": "x"}}),
                json!({"metadata": {"(labels)": {"app": "x"}}}),
                Want::Skip,
            ),
            (
                "some elements skip, others pass",
                pod(json!([{"image": "a:1"}, {"image": "b:latest", "imagePullPolicy": "Always"}])),
                json!({"spec": {"containers": [{"(image)": "*:latest", "imagePullPolicy": "Always"}]}}),
                Want::Pass,
            ),
            // equality
            (
                "equality absent passes",
                json!({"spec": {}}),
                json!({"spec": {"=(hostNetwork)": false}}),
                Want::Pass,
            ),
            (
                "equality present mismatch fails",
                json!({"spec": {"hostNetwork": true}}),
                json!({"spec": {"=(hostNetwork)": false}}),
                Want::Fail,
            ),
            (
                "equality present match passes",
                json!({"spec": {"hostNetwork": false}}),
                json!({"spec": {"=(hostNetwork)": false}}),
                Want::Pass,
            ),
            // negation
            (
                "negation present fails",
                json!({"spec": {"hostPath": {}}}),
                json!({"spec": {"X(hostPath)": "null"}}),
                Want::Fail,
            ),
            (
                "negation absent passes",
                json!({"spec": {}}),
                json!({"spec": {"X(hostPath)": "null"}}),
                Want::Pass,
            ),
            // existence
            (
                "existence one matches",
                pod(json!([{"image": "a:1"}, {"image": "b:2"}])),
                json!({"spec": {"^(containers)": [{"image": "b:*"}]}}),
                Want::Pass,
            ),
            (
                "existence none matches",
                pod(json!([{"image": "a:1"}])),
                json!({"spec": {"^(containers)": [{"image": "b:*"}]}}),
                Want::Fail,
            ),
            // global
            (
                "global mismatch skips",
                pod(json!([{"image": "a:1", "x": "1"}])),
                json!({"spec": {"containers": [{"<(image)": "b:*", "x": "2"}]}}),
                Want::Skip,
            ),
            (
                "global holds then checks",
                pod(json!([{"image": "b:1", "x": "1"}])),
                json!({"spec": {"containers": [{"<(image)": "b:*", "x": "2"}]}}),
                Want::Fail,
            ),
            // structures
            (
                "map vs scalar fails",
                json!({"spec": "x"}),
                json!({"spec": {"a": 1}}),
                Want::Fail,
            ),
            (
                "null pattern absent",
                json!({"spec": {}}),
                json!({"spec": {"hostPID": null}}),
                Want::Pass,
            ),
            (
                "scalar array all elements",
                json!({"list": ["a", "b"]}),
                json!({"list": "?"}),
                Want::Pass,
            ),
            (
                "scalar pattern array",
                json!({"list": ["a", "bb"]}),
                json!({"list": ["?"]}),
                Want::Fail,
            ),
            // metadata wildcard keys
            (
                "label wildcard key present",
                json!({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}),
                json!({"metadata": {"labels": {"app.kubernetes.io/*": "?*"}}}),
                Want::Pass,
            ),
            (
                "anchored wildcard annotation, value checked",
                json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}}),
                json!({"metadata": {"=(annotations)": {"=(container.apparmor.security.beta.kubernetes.io/*)": "runtime/default | localhost/*"}}}),
                Want::Fail,
            ),
            (
                "anchored wildcard annotation, value allowed",
                json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "localhost/x"}}}),
                json!({"metadata": {"=(annotations)": {"=(container.apparmor.security.beta.kubernetes.io/*)": "runtime/default | localhost/*"}}}),
                Want::Pass,
            ),
            (
                "anchored wildcard annotation absent",
                json!({"metadata": {"annotations": {"other": "x"}}}),
                json!({"metadata": {"=(annotations)": {"=(container.apparmor.security.beta.kubernetes.io/*)": "runtime/default"}}}),
                Want::Pass,
            ),
            (
                "label wildcard key absent",
                json!({"metadata": {"labels": {"other": "x"}}}),
                json!({"metadata": {"labels": {"app.kubernetes.io/*": "x"}}}),
                Want::Fail,
            ),
        ];
        for (name, resource, pattern, want) in cases {
            assert_eq!(run(resource, pattern), want, "{name}");
        }
    }

    #[test]
    fn failure_paths() {
        let err = match_pattern(
            &json!({"spec": {"containers": [{"image": "a"}, {"image": "b:latest"}]}}),
            &json!({"spec": {"containers": [{"image": "!*:latest"}]}}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            Mismatch::Fail {
                path: "/spec/containers/1/image/".into(),
                message: "resource value 'b:latest' does not match '!*:latest' at path /spec/containers/1/image/".into()
            }
        );
    }

    #[test]
    fn anchor_parsing() {
        assert_eq!(parse_anchor("(name)"), Some((Anchor::Condition, "name")));
        assert_eq!(parse_anchor("=(name)"), Some((Anchor::Equality, "name")));
        assert_eq!(parse_anchor("X(name)"), Some((Anchor::Negation, "name")));
        assert_eq!(parse_anchor("^(name)"), Some((Anchor::Existence, "name")));
        assert_eq!(parse_anchor("<(name)"), Some((Anchor::Global, "name")));
        assert_eq!(parse_anchor("name"), None);
        assert_eq!(parse_anchor("()"), None);
        assert_eq!(parse_anchor("Xname"), None);
    }
}
