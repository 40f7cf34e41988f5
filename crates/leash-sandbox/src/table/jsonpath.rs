//! The JSONPath subset CRD printer columns use: `.a.b`, `.a[0]`, `.a['k.with.dots']`,
//! and a filter on a list, `.conditions[?(@.type=="Ready")].status` (first match).

use serde_json::Value;

/// A parsed printer-column path.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath(Vec<Step>);

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(usize),
    /// `[?(@.path=="value")]`: the first element whose `path` equals `value`.
    Filter(Vec<String>, Value),
}

impl JsonPath {
    /// Parses `path`, with or without the surrounding `{}` and a leading `$`.
    pub(crate) fn parse(path: &str) -> Result<Self, String> {
        let mut rest = path.trim();
        if let Some(inner) = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            rest = inner.trim();
        }
        rest = rest.strip_prefix('$').unwrap_or(rest);
        if rest.is_empty() {
            return Err(format!("{path:?}: an empty path"));
        }
        let mut steps = Vec::new();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['.', '[']).unwrap_or(r.len());
                if end == 0 {
                    return Err(format!("{path:?}: an empty field name"));
                }
                steps.push(Step::Field(r[..end].to_string()));
                rest = &r[end..];
            } else if let Some(r) = rest.strip_prefix('[') {
                let end = r.find(']').ok_or_else(|| format!("{path:?}: unclosed ["))?;
                let inner = r[..end].trim();
                rest = &r[end + 1..];
                steps.push(
                    bracket(inner).ok_or_else(|| format!("{path:?}: unsupported [{inner}]"))?,
                );
            } else {
                return Err(format!("{path:?}: expected . or [ at {rest:?}"));
            }
        }
        Ok(Self(steps))
    }

    /// The value at this path in `object`, if any.
    pub(crate) fn find<'a>(&self, object: &'a Value) -> Option<&'a Value> {
        self.0.iter().try_fold(object, |v, step| match step {
            Step::Field(name) => v.get(name),
            Step::Index(i) => v.get(*i),
            Step::Filter(path, want) => v
                .as_array()?
                .iter()
                .find(|item| lookup(item, path) == Some(want)),
        })
    }
}

fn lookup<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn unquote(s: &str) -> Option<&str> {
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
}

fn bracket(inner: &str) -> Option<Step> {
    if let Ok(i) = inner.parse::<usize>() {
        return Some(Step::Index(i));
    }
    if let Some(key) = unquote(inner) {
        return Some(Step::Field(key.to_string()));
    }
    let cond = inner.strip_prefix("?(")?.strip_suffix(')')?;
    let (lhs, rhs) = cond.split_once("==")?;
    let path: Vec<String> = lhs
        .trim()
        .strip_prefix("@.")?
        .split('.')
        .map(str::to_string)
        .collect();
    let rhs = rhs.trim();
    let want = match unquote(rhs) {
        Some(s) => Value::String(s.to_string()),
        None => serde_json::from_str(rhs).ok()?,
    };
    Some(Step::Filter(path, want))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths() {
        let o = json!({"spec": {"replicas": 3, "a.b": "dotted"},
            "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]},
            "items": ["x", "y"]});
        let at = |p: &str| JsonPath::parse(p).unwrap().find(&o).cloned();
        assert_eq!(at(".spec.replicas"), Some(json!(3)));
        assert_eq!(at("{.spec.replicas}"), Some(json!(3)));
        assert_eq!(at("$.spec['a.b']"), Some(json!("dotted")));
        assert_eq!(at(".items[1]"), Some(json!("y")));
        assert_eq!(
            at(r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("True"))
        );
        assert_eq!(at(".status.conditions[?(@.type=='Gone')].status"), None);
        assert_eq!(at(".spec.missing"), None);
        for bad in ["", ".", "spec", ".a[", ".a[*]", ".a..b"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad:?}");
        }
    }
}
