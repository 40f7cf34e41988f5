//! RFC 6902 JSON Patch with the options Kyverno applies patches with
//! (evanphx/json-patch `ApplyOptions{SupportNegativeIndices,
//! AllowMissingPathOnRemove, EnsurePathExistsOnAdd}`):
//!
//! - a negative index counts from the end (`-1` is the last element; for
//!   `add`, `-1` appends);
//! - `remove` of a missing path does nothing;
//! - `add` creates the missing parents on its path (a list when the next
//!   segment is an index or `-`, a map otherwise).
//!
//! The `json-patch` crate (already in the lock file through kube) has none
//! of these options, and Kyverno's policies rely on all three, so the
//! operations are implemented here.

use serde_json::{Map, Value};

/// One operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    Add { path: String, value: Value },
    Remove { path: String },
    Replace { path: String, value: Value },
    Move { from: String, path: String },
    Copy { from: String, path: String },
    Test { path: String, value: Value },
}

/// Parses a list of operations (`[{op, path, value}, ...]`).
pub(crate) fn parse(doc: &Value) -> Result<Vec<Op>, String> {
    let Some(list) = doc.as_array() else {
        return Err("a JSON patch must be a list of operations".into());
    };
    list.iter()
        .enumerate()
        .map(|(i, op)| parse_op(op).map_err(|e| format!("operation {i}: {e}")))
        .collect()
}

fn parse_op(op: &Value) -> Result<Op, String> {
    let field = |name: &str| -> Result<String, String> {
        op[name]
            .as_str()
            .map(String::from)
            .ok_or_else(|| format!("{name} is required and must be a string"))
    };
    let value = || -> Result<Value, String> {
        op.get("value")
            .cloned()
            .ok_or_else(|| "value is required".to_string())
    };
    let name = field("op")?;
    Ok(match name.as_str() {
        "add" => Op::Add {
            path: field("path")?,
            value: value()?,
        },
        "remove" => Op::Remove {
            path: field("path")?,
        },
        "replace" => Op::Replace {
            path: field("path")?,
            value: value()?,
        },
        "move" => Op::Move {
            from: field("from")?,
            path: field("path")?,
        },
        "copy" => Op::Copy {
            from: field("from")?,
            path: field("path")?,
        },
        "test" => Op::Test {
            path: field("path")?,
            value: value()?,
        },
        other => return Err(format!("unknown op {other:?}")),
    })
}

/// Applies the operations in order to a copy of `doc`.
pub(crate) fn apply(doc: &Value, ops: &[Op]) -> Result<Value, String> {
    let mut out = doc.clone();
    for op in ops {
        apply_one(&mut out, op)?;
    }
    Ok(out)
}

/// Splits a JSON pointer into its unescaped segments (`~1` is `/`, `~0` is `~`).
fn segments(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!("path {path:?} must start with /"));
    };
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn apply_one(doc: &mut Value, op: &Op) -> Result<(), String> {
    match op {
        Op::Add { path, value } => add(doc, path, value.clone()),
        Op::Remove { path } => remove(doc, path, true).map(|_| ()),
        Op::Replace { path, value } => {
            let parts = segments(path)?;
            let Some((last, parents)) = parts.split_last() else {
                *doc = value.clone();
                return Ok(());
            };
            let target = get_mut(doc, parents).ok_or_else(|| missing("replace", path))?;
            match target {
                Value::Object(m) => match m.get_mut(last.as_str()) {
                    Some(slot) => *slot = value.clone(),
                    None => return Err(missing("replace", path)),
                },
                Value::Array(a) => {
                    let i = index(last, a.len(), false).ok_or_else(|| missing("replace", path))?;
                    a[i] = value.clone();
                }
                _ => return Err(missing("replace", path)),
            }
            Ok(())
        }
        Op::Move { from, path } => {
            let value = remove(doc, from, false)?.ok_or_else(|| missing("move", from))?;
            add(doc, path, value)
        }
        Op::Copy { from, path } => {
            let value = get(doc, &segments(from)?)
                .cloned()
                .ok_or_else(|| missing("copy", from))?;
            add(doc, path, value)
        }
        Op::Test { path, value } => {
            let actual = get(doc, &segments(path)?);
            if actual != Some(value) {
                return Err(format!("testing value {path} failed"));
            }
            Ok(())
        }
    }
}

fn missing(op: &str, path: &str) -> String {
    format!("{op} operation does not apply: doc is missing path: {path}")
}

/// An index into a list of `len` elements; `-N` counts from the end. For
/// `add`, the index may equal `len` (and `-1` is `len`, the end).
fn index(seg: &str, len: usize, adding: bool) -> Option<usize> {
    let i: i64 = seg.parse().ok()?;
    let size = if adding { len + 1 } else { len } as i64;
    let i = if i < 0 { i + size } else { i };
    (0..size).contains(&i).then_some(i as usize)
}

fn get<'v>(doc: &'v Value, parts: &[String]) -> Option<&'v Value> {
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => m.get(p.as_str())?,
            Value::Array(a) => a.get(index(p, a.len(), false)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn get_mut<'v>(doc: &'v mut Value, parts: &[String]) -> Option<&'v mut Value> {
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => m.get_mut(p.as_str())?,
            Value::Array(a) => {
                let i = index(p, a.len(), false)?;
                a.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

/// Creates the missing parents of `parts`' last segment.
fn ensure_path(doc: &mut Value, parts: &[String]) -> Result<(), String> {
    let mut cur = doc;
    for (i, p) in parts.iter().enumerate().take(parts.len().saturating_sub(1)) {
        let next = &parts[i + 1];
        let make = || -> Value {
            if next == "-" || next.parse::<i64>().is_ok() {
                let pad = next.parse::<usize>().unwrap_or(0);
                Value::Array(vec![Value::Null; pad])
            } else {
                Value::Object(Map::new())
            }
        };
        cur = match cur {
            Value::Object(m) => m.entry(p.clone()).or_insert_with(make),
            Value::Array(a) => {
                let at = match index(p, a.len(), false) {
                    Some(at) => at,
                    // Missing: created as `add` would insert it (`-` and
                    // `-1` append; a larger index pads with nulls).
                    None if p == "-" => {
                        a.push(make());
                        a.len() - 1
                    }
                    None => match p.parse::<i64>() {
                        Ok(i) if i < 0 => {
                            let at = index(p, a.len(), true)
                                .ok_or_else(|| format!("invalid list index {p:?}"))?;
                            a.insert(at, make());
                            at
                        }
                        Ok(i) => {
                            let want = i as usize;
                            while a.len() < want {
                                a.push(Value::Null);
                            }
                            a.push(make());
                            want
                        }
                        Err(_) => return Err(format!("invalid list index {p:?}")),
                    },
                };
                &mut a[at]
            }
            _ => return Ok(()),
        };
        if cur.is_null() {
            *cur = make();
        }
    }
    Ok(())
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts = segments(path)?;
    let Some((last, parents)) = parts.split_last() else {
        *doc = value;
        return Ok(());
    };
    ensure_path(doc, &parts)?;
    let target = get_mut(doc, parents).ok_or_else(|| missing("add", path))?;
    match target {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i = index(last, a.len(), true)
                    .ok_or_else(|| format!("error in add for path {path}: invalid index {last}"))?;
                a.insert(i, value);
            }
        }
        _ => return Err(missing("add", path)),
    }
    Ok(())
}

/// Removes and returns the value at `path`; a missing path is `Ok(None)`
/// when `allow_missing`.
fn remove(doc: &mut Value, path: &str, allow_missing: bool) -> Result<Option<Value>, String> {
    let parts = segments(path)?;
    let Some((last, parents)) = parts.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    let removed = match get_mut(doc, parents) {
        Some(Value::Object(m)) => m.remove(last.as_str()),
        Some(Value::Array(a)) => index(last, a.len(), false).map(|i| a.remove(i)),
        _ => None,
    };
    match removed {
        None if !allow_missing => Err(missing("remove", path)),
        r => Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, ops: Value) -> Result<Value, String> {
        apply(&doc, &parse(&ops)?)
    }

    /// One row per operation rule.
    #[test]
    fn operation_table() {
        let doc = json!({"a": {"list": [1, 2, 3]}, "m": {"x/y": 1, "t~u": 2}});
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "add to a map",
                json!([{"op": "add", "path": "/a/b", "value": 5}]),
                json!({"a": {"list": [1, 2, 3], "b": 5}, "m": {"x/y": 1, "t~u": 2}}),
            ),
            (
                "add with - appends",
                json!([{"op": "add", "path": "/a/list/-", "value": 4}]),
                json!({"a": {"list": [1, 2, 3, 4]}, "m": {"x/y": 1, "t~u": 2}}),
            ),
            (
                "add at an index inserts",
                json!([{"op": "add", "path": "/a/list/0", "value": 0}]),
                json!({"a": {"list": [0, 1, 2, 3]}, "m": {"x/y": 1, "t~u": 2}}),
            ),
            (
                "add at -1 appends",
                json!([{"op": "add", "path": "/a/list/-1", "value": 9}]),
                json!({"a": {"list": [1, 2, 3, 9]}, "m": {"x/y": 1, "t~u": 2}}),
            ),
            (
                "add creates missing parents",
                json!([{"op": "add", "path": "/n/list/-", "value": "v"}]),
                json!({"a": {"list": [1, 2, 3]}, "m": {"x/y": 1, "t~u": 2}, "n": {"list": ["v"]}}),
            ),
            (
                "add creates missing parents through negative indices",
                json!([{"op": "add", "path": "/n/terms/-1/exprs/-1", "value": "v"}]),
                json!({"a": {"list": [1, 2, 3]}, "m": {"x/y": 1, "t~u": 2}, "n": {"terms": [{"exprs": ["v"]}]}}),
            ),
            (
                "-1 in the middle of a path is the last element",
                json!([{"op": "add", "path": "/a/list/-1", "value": 4}, {"op": "replace", "path": "/a/list/-1", "value": 5}]),
                json!({"a": {"list": [1, 2, 3, 5]}, "m": {"x/y": 1, "t~u": 2}}),
            ),
            (
                "escaped segments",
                json!([{"op": "replace", "path": "/m/x~1y", "value": 7}, {"op": "remove", "path": "/m/t~0u"}]),
                json!({"a": {"list": [1, 2, 3]}, "m": {"x/y": 7}}),
            ),
            (
                "remove of a missing path is a no-op",
                json!([{"op": "remove", "path": "/a/nope"}]),
                doc.clone(),
            ),
            (
                "remove with -1 removes the last",
                json!([{"op": "remove", "path": "/a/list/-1"}]),
                json!({"a": {"list": [1, 2]}, "m": {"x/y": 1, "t~u": 2}}),
            ),
            (
                "move",
                json!([{"op": "move", "from": "/a/list", "path": "/l"}]),
                json!({"a": {}, "m": {"x/y": 1, "t~u": 2}, "l": [1, 2, 3]}),
            ),
            (
                "copy",
                json!([{"op": "copy", "from": "/a/list/0", "path": "/first"}]),
                json!({"a": {"list": [1, 2, 3]}, "m": {"x/y": 1, "t~u": 2}, "first": 1}),
            ),
            (
                "test passes",
                json!([{"op": "test", "path": "/a/list/1", "value": 2}]),
                doc.clone(),
            ),
        ];
        for (name, ops, want) in cases {
            assert_eq!(run(doc.clone(), ops).unwrap(), want, "{name}");
        }
    }

    #[test]
    fn failures_name_the_problem() {
        let doc = json!({"a": 1});
        for (ops, needle) in [
            (
                json!([{"op": "replace", "path": "/b", "value": 1}]),
                "missing path: /b",
            ),
            (
                json!([{"op": "test", "path": "/a", "value": 2}]),
                "testing value /a failed",
            ),
            (json!([{"op": "frob", "path": "/a"}]), "unknown op \"frob\""),
            (json!([{"op": "add", "path": "/c"}]), "value is required"),
        ] {
            let err = run(doc.clone(), ops).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }
}
