//! RFC 6902 JSON Patch, one engine for both ways Kyverno applies one
//! (evanphx/json-patch):
//!
//! - [`Mode::Kyverno`]: a classic rule's `patchesJson6902`, applied with
//!   `ApplyOptions{SupportNegativeIndices, AllowMissingPathOnRemove,
//!   EnsurePathExistsOnAdd}`: `remove` of a missing path does nothing,
//!   `add` creates the missing parents on its path (a list when the next
//!   token is an index or `-`, a map otherwise), a failing `test` is an
//!   error, and a token that is not an index reads nothing of a list.
//! - [`Mode::Strict`]: a MutatingPolicy's `JSONPatch` mutation, as
//!   Kubernetes applies it: every target must exist, a failing `test`
//!   leaves the object unchanged without an error ([`Failure::TestFailed`]),
//!   a missing value tests equal to `null`.
//!
//! In both, paths are RFC 6901 JSON Pointers (`""` is the whole document,
//! `~1` is `/` and `~0` is `~`), `-` names the position after a list's
//! last element, and an index is a decimal integer (a sign and leading
//! zeros accepted), a negative one counting from the end (`-1` is the last
//! element; for `add`, the position after it).
//!
//! The `json-patch` crate (in the lock file through kube) has none of
//! Kyverno's options, and its errors do not name the operation.

use serde_json::{Map, Value as Json};

/// One JSON Patch operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// `add`: insert into an array, or set a member.
    Add { path: String, value: Json },
    /// `remove`.
    Remove { path: String },
    /// `replace`: the target must exist.
    Replace { path: String, value: Json },
    /// `move`: remove from `from`, add at `path`.
    Move { from: String, path: String },
    /// `copy`: add a copy of `from` at `path`.
    Copy { from: String, path: String },
    /// `test`: the target must equal `value`.
    Test { path: String, value: Json },
}

/// How a patch is applied (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A classic rule's `patchesJson6902`.
    Kyverno,
    /// A MutatingPolicy's `JSONPatch`.
    Strict,
}

/// Why a patch did not apply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// A `test` did not hold in [`Mode::Strict`]: the patch is not
    /// applied, and that is not an error.
    TestFailed(String),
    /// Any other operation did not apply: an error.
    Invalid(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Invalid(s)
    }
}

impl Op {
    /// Reads one operation (`{op, path, value, from}`); errors name what is
    /// missing or wrong.
    pub(crate) fn parse(v: &Json) -> Result<Op, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("a JSON Patch operation must be an object, got {v}"))?;
        let text = |k: &str| -> Result<String, String> {
            match obj.get(k) {
                Some(Json::String(s)) => Ok(s.clone()),
                Some(other) => Err(format!(
                    "JSON Patch field {k:?} must be a string, got {other}"
                )),
                None => Err(format!("JSON Patch operation has no {k:?}")),
            }
        };
        let op = text("op")?;
        let path = text("path")?;
        let value = || {
            obj.get("value")
                .cloned()
                .ok_or_else(|| format!("JSON Patch {op:?} operation at {path:?} has no \"value\""))
        };
        Ok(match op.as_str() {
            "add" => Op::Add {
                value: value()?,
                path,
            },
            "remove" => Op::Remove { path },
            "replace" => Op::Replace {
                value: value()?,
                path,
            },
            "move" => Op::Move {
                from: text("from")?,
                path,
            },
            "copy" => Op::Copy {
                from: text("from")?,
                path,
            },
            "test" => Op::Test {
                value: value()?,
                path,
            },
            other => {
                return Err(format!(
                    "unsupported JSON Patch op {other:?} (add, remove, replace, move, copy, test)"
                ));
            }
        })
    }
}

/// Reads a list of operations (`[{op, path, value}, ...]`); an error names
/// the operation's position.
pub(crate) fn parse(doc: &Json) -> Result<Vec<Op>, String> {
    let Some(list) = doc.as_array() else {
        return Err("a JSON patch must be a list of operations".into());
    };
    list.iter()
        .enumerate()
        .map(|(i, op)| Op::parse(op).map_err(|e| format!("operation {i}: {e}")))
        .collect()
}

/// Applies `ops` in order to a copy of `doc`.
pub(crate) fn apply(doc: &Json, ops: &[Op], mode: Mode) -> Result<Json, Failure> {
    let mut out = doc.clone();
    for op in ops {
        apply_one(&mut out, op, mode)?;
    }
    Ok(out)
}

fn missing(op: &str, path: &str) -> String {
    format!("{op} operation does not apply: {path:?} does not exist")
}

fn apply_one(doc: &mut Json, op: &Op, mode: Mode) -> Result<(), Failure> {
    match op {
        Op::Add { path, value } => Ok(add(doc, path, value.clone(), mode)?),
        Op::Remove { path } => match remove(doc, path, mode)? {
            Some(_) => Ok(()),
            None if mode == Mode::Kyverno => Ok(()),
            None => Err(missing("remove", path).into()),
        },
        Op::Replace { path, value } => {
            let target = get_mut(doc, path, mode)?.ok_or_else(|| missing("replace", path))?;
            *target = value.clone();
            Ok(())
        }
        Op::Move { from, path } => {
            if path == from {
                return Ok(());
            }
            if path.starts_with(&format!("{from}/")) {
                return Err(format!("cannot move {from:?} into its own child {path:?}").into());
            }
            let value = remove(doc, from, mode)?.ok_or_else(|| missing("move", from))?;
            Ok(add(doc, path, value, mode)?)
        }
        Op::Copy { from, path } => {
            let value = get_mut(doc, from, mode)?
                .ok_or_else(|| missing("copy", from))?
                .clone();
            Ok(add(doc, path, value, mode)?)
        }
        Op::Test { path, value } => match (get_mut(doc, path, mode)?, mode) {
            (Some(target), _) if target == value => Ok(()),
            (_, Mode::Kyverno) => Err(format!("testing value {path} failed").into()),
            // A missing value tests equal to null.
            (None, Mode::Strict) if value.is_null() => Ok(()),
            (Some(target), Mode::Strict) => Err(Failure::TestFailed(format!(
                "test operation failed: {path:?} is {target}, not {value}"
            ))),
            (None, Mode::Strict) => Err(Failure::TestFailed(format!(
                "test operation failed: {path:?} does not exist"
            ))),
        },
    }
}

/// The reference tokens of a JSON Pointer, unescaped.
fn tokens(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(format!(
            "JSON Pointer {path:?} must be empty or start with '/'"
        ));
    };
    rest.split('/')
        .map(|t| {
            let mut out = String::with_capacity(t.len());
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => {
                            return Err(format!("JSON Pointer {path:?} has an invalid '~' escape"));
                        }
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(out)
        })
        .collect()
}

/// An array index token as one of `positions` positions (an array's
/// length, or one more for `add`): a decimal integer, a negative one
/// counting from the end; `None` when out of range (and, in Kyverno's
/// mode, when not an index).
fn index(token: &str, positions: usize, path: &str, mode: Mode) -> Result<Option<usize>, String> {
    let digits = token.strip_prefix(['-', '+']).unwrap_or(token);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return match mode {
            Mode::Kyverno => Ok(None),
            Mode::Strict => Err(format!("{path:?}: {token:?} is not an array index")),
        };
    }
    let i: i64 = token
        .parse()
        .map_err(|_| format!("{path:?}: array index {token} is too large"))?;
    let n = i64::try_from(positions).unwrap_or(i64::MAX);
    let i = if i < 0 { i + n } else { i };
    Ok(usize::try_from(i).ok().filter(|&i| i < positions))
}

fn get_mut<'a>(doc: &'a mut Json, path: &str, mode: Mode) -> Result<Option<&'a mut Json>, String> {
    get_by_tokens(doc, &tokens(path)?, path, mode)
}

fn get_by_tokens<'a>(
    doc: &'a mut Json,
    toks: &[String],
    path: &str,
    mode: Mode,
) -> Result<Option<&'a mut Json>, String> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Json::Object(m) => match m.get_mut(t) {
                Some(v) => v,
                None => return Ok(None),
            },
            Json::Array(a) => {
                if t == "-" {
                    return Ok(None);
                }
                match index(t, a.len(), path, mode)? {
                    Some(i) => &mut a[i],
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
    }
    Ok(Some(cur))
}

/// The parent of `path`'s target and the last token; `None` for the root.
fn parent<'a>(
    doc: &'a mut Json,
    path: &str,
    mode: Mode,
) -> Result<Option<(&'a mut Json, String)>, String> {
    let mut toks = tokens(path)?;
    let Some(last) = toks.pop() else {
        return Ok(None);
    };
    match get_by_tokens(doc, &toks, path, mode)? {
        Some(p) if p.is_object() || p.is_array() => Ok(Some((p, last))),
        Some(_) => Err(format!(
            "{path:?}: the parent of the target is neither an object nor an array"
        )),
        None => Err(format!("{path:?}: the parent of the target does not exist")),
    }
}

/// Creates the missing parents of `path`'s target (Kyverno's
/// `EnsurePathExistsOnAdd`): each as a list when the token after it is an
/// index or `-`, else a map; a missing list element is added as `add`
/// would insert it (`-` and `-1` append; a larger index pads with nulls).
fn ensure_path(doc: &mut Json, path: &str) -> Result<(), String> {
    let toks = tokens(path)?;
    let mut cur = doc;
    for (i, t) in toks.iter().enumerate().take(toks.len().saturating_sub(1)) {
        let next = &toks[i + 1];
        let make = || -> Json {
            if next == "-" || next.parse::<i64>().is_ok() {
                let pad = next.parse::<usize>().unwrap_or(0);
                Json::Array(vec![Json::Null; pad])
            } else {
                Json::Object(Map::new())
            }
        };
        cur = match cur {
            Json::Object(m) => m.entry(t.clone()).or_insert_with(make),
            Json::Array(a) => {
                let at = match index(t, a.len(), path, Mode::Kyverno)? {
                    Some(at) => at,
                    None if t == "-" => {
                        a.push(make());
                        a.len() - 1
                    }
                    None => match t.parse::<i64>() {
                        Ok(n) if n < 0 => {
                            let at = index(t, a.len() + 1, path, Mode::Kyverno)?
                                .ok_or_else(|| format!("invalid list index {t:?}"))?;
                            a.insert(at, make());
                            at
                        }
                        Ok(n) => {
                            let want = n as usize;
                            while a.len() < want {
                                a.push(Json::Null);
                            }
                            a.push(make());
                            want
                        }
                        Err(_) => return Err(format!("invalid list index {t:?}")),
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

fn add(doc: &mut Json, path: &str, value: Json, mode: Mode) -> Result<(), String> {
    if mode == Mode::Kyverno {
        ensure_path(doc, path)?;
    }
    let Some((p, last)) = parent(doc, path, mode)? else {
        *doc = value;
        return Ok(());
    };
    match p {
        Json::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Json::Array(a) => {
            let i = if last == "-" {
                Some(a.len())
            } else {
                index(&last, a.len() + 1, path, Mode::Strict)?
            };
            let Some(i) = i else {
                return Err(format!(
                    "add operation does not apply: {path:?} is outside an array of {}",
                    a.len()
                ));
            };
            a.insert(i, value);
            Ok(())
        }
        _ => unreachable!("parent() returns only objects and arrays"),
    }
}

/// Removes and returns the target; `None` when it does not exist.
fn remove(doc: &mut Json, path: &str, mode: Mode) -> Result<Option<Json>, String> {
    let toks = tokens(path)?;
    if toks.is_empty() {
        return match mode {
            Mode::Kyverno => Err("cannot remove the whole document".into()),
            Mode::Strict => Ok(Some(std::mem::take(doc))),
        };
    }
    let parent = match parent(doc, path, mode) {
        Ok(p) => p,
        // A missing parent is a missing target.
        Err(_) if mode == Mode::Kyverno => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some((p, last)) = parent else {
        return Ok(None);
    };
    Ok(match p {
        Json::Object(m) => m.remove(&last),
        Json::Array(a) if last == "-" => None,
        Json::Array(a) => index(&last, a.len(), path, mode)?.map(|i| a.remove(i)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Json, ops: Json) -> Result<Json, String> {
        apply(&doc, &parse(&ops)?, Mode::Kyverno).map_err(|e| match e {
            Failure::Invalid(e) | Failure::TestFailed(e) => e,
        })
    }

    /// One row per operation rule, in Kyverno's mode (the strict mode's
    /// table is mpol's `json_patch_operations`).
    #[test]
    fn kyverno_operation_table() {
        let doc = json!({"a": {"list": [1, 2, 3]}, "m": {"x/y": 1, "t~u": 2}});
        let cases: Vec<(&str, Json, Json)> = vec![
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
                json!([{"op": "remove", "path": "/a/nope"}, {"op": "remove", "path": "/x/y/z"}]),
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
            assert_eq!(run(doc.clone(), ops), Ok(want), "{name}");
        }
    }

    #[test]
    fn kyverno_failures_name_the_problem() {
        let doc = json!({"a": 1});
        for (ops, needle) in [
            (
                json!([{"op": "replace", "path": "/b", "value": 1}]),
                "\"/b\" does not exist",
            ),
            (
                json!([{"op": "test", "path": "/a", "value": 2}]),
                "testing value /a failed",
            ),
            (
                json!([{"op": "frob", "path": "/a"}]),
                "operation 0: unsupported JSON Patch op \"frob\"",
            ),
            (json!([{"op": "add", "path": "/c"}]), "has no \"value\""),
            (json!([{"op": "remove", "path": ""}]), "the whole document"),
        ] {
            let err = run(doc.clone(), ops).unwrap_err();
            assert!(err.contains(needle), "{err} should contain {needle}");
        }
    }
}
