//! `{{@}}` in a patch: the resource's value at the same path. Kyverno
//! replaces the variable name `@` by the JMESPath of the leaf's position in
//! the patch, rooted at `request.object` (`spec.containers[0].image`);
//! rewriting the text before substitution gives the same value, nested
//! variables included (`{{ regex_replace_all('^[^/]+', '{{@}}', 'x') }}`).

use serde_json::Value;

use crate::pattern::parse_anchor;

/// Whether a string holds a `{{@}}` reference (spaces allowed).
fn has_at(s: &str) -> bool {
    let mut rest = s;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        if let Some(end) = after.find("}}")
            && after[..end].trim() == "@"
        {
            return true;
        }
        rest = after;
    }
    false
}

/// Whether any string of the document holds `{{@}}`.
pub(crate) fn any(doc: &Value) -> bool {
    match doc {
        Value::String(s) => has_at(s),
        Value::Array(a) => a.iter().any(any),
        Value::Object(m) => m.values().any(any),
        _ => false,
    }
}

/// The JMESPath of a position below `root`.
fn jmespath(root: &str, path: &[String]) -> String {
    let mut out = String::from(root);
    for seg in path {
        if seg.parse::<usize>().is_ok() {
            out.push_str(&format!("[{seg}]"));
        } else if !seg.is_empty()
            && seg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !seg.starts_with(|c: char| c.is_ascii_digit())
        {
            out.push('.');
            out.push_str(seg);
        } else {
            out.push_str(&format!(
                ".\"{}\"",
                seg.replace('\\', "\\\\").replace('"', "\\\"")
            ));
        }
    }
    out
}

fn rewrite(s: &str, root: &str, path: &[String]) -> String {
    let target = jmespath(root, path);
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("{{") {
        let after = &rest[i + 2..];
        match after.find("}}") {
            Some(end) if after[..end].trim() == "@" => {
                out.push_str(&rest[..i]);
                out.push_str("{{");
                out.push_str(&target);
                out.push_str("}}");
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str(&rest[..i + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Rewrites every `{{@}}` of a patch into the reference it stands for,
/// below `root` (`request.object`, or `target` for mutate-existing).
pub(crate) fn resolve(doc: &Value, root: &str) -> Value {
    fn walk(v: &Value, root: &str, path: &mut Vec<String>) -> Value {
        match v {
            Value::String(s) if has_at(s) => Value::String(rewrite(s, root, path)),
            Value::Array(a) => Value::Array(
                a.iter()
                    .enumerate()
                    .map(|(i, x)| {
                        path.push(i.to_string());
                        let r = walk(x, root, path);
                        path.pop();
                        r
                    })
                    .collect(),
            ),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| {
                        let key = parse_anchor(k).map_or(k.as_str(), |(_, inner)| inner);
                        path.push(key.to_string());
                        let r = walk(x, root, path);
                        path.pop();
                        (k.clone(), r)
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    walk(doc, root, &mut Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn at_becomes_the_path_of_the_leaf() {
        let patch = json!({"spec": {"containers": [{"(name)": "*", "image": "{{ regex_replace_all('^[^/]+', '{{@}}', 'r.io') }}"}]},
                           "metadata": {"annotations": {"a.b/c": "{{ @ }}"}}, "x": "{{y}}"});
        assert!(any(&patch));
        let got = resolve(&patch, "request.object");
        assert_eq!(
            got["spec"]["containers"][0]["image"],
            "{{ regex_replace_all('^[^/]+', '{{request.object.spec.containers[0].image}}', 'r.io') }}"
        );
        assert_eq!(
            got["metadata"]["annotations"]["a.b/c"],
            "{{request.object.metadata.annotations.\"a.b/c\"}}"
        );
        assert_eq!(got["x"], "{{y}}");
        assert!(!any(&json!({"x": "{{y}}", "z": "@"})));
    }
}
