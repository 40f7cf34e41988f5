//! RFC 6902 JSON Patch, applied as MutatingAdmissionPolicy applies a
//! `JSONPatch` mutation (with the evanphx/json-patch v4 library Kubernetes
//! uses): the operations in order, on a copy of the object; the first
//! operation that does not apply fails the whole patch, except that a
//! failing `test` leaves the object unchanged without an error
//! ([`Failure::TestFailed`]).
//!
//! Paths are RFC 6901 JSON Pointers: `""` is the whole document, `~1` is
//! `/` and `~0` is `~` in a reference token, and `-` names the position
//! after an array's last element (only `add`, and the target of `move` /
//! `copy`, may use it). As in that library, an array index is a decimal
//! integer (a sign and leading zeros are accepted) and a negative one
//! counts from the end (`-1` is the last element; for `add`, the position
//! after it).

use serde_json::Value as Json;

/// One JSON Patch operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    /// `add`: insert into an array, or set a member.
    Add { path: String, value: Json },
    /// `remove`: the target must exist.
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

/// Why a patch did not apply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Failure {
    /// A `test` operation did not hold: the patch is not applied, and that
    /// is not an error.
    TestFailed(String),
    /// Any other operation did not apply: an error.
    Invalid(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Invalid(s)
    }
}

/// Applies `ops` in order to a copy of `doc`.
pub(crate) fn apply(doc: &Json, ops: &[Op]) -> Result<Json, Failure> {
    let mut out = doc.clone();
    for op in ops {
        apply_one(&mut out, op)?;
    }
    Ok(out)
}

fn apply_one(doc: &mut Json, op: &Op) -> Result<(), Failure> {
    match op {
        Op::Add { path, value } => Ok(add(doc, path, value.clone())?),
        Op::Remove { path } => Ok(remove(doc, path).map(drop)?),
        Op::Replace { path, value } => {
            let target = get_mut(doc, path)?.ok_or_else(|| {
                format!("replace operation does not apply: {path:?} does not exist")
            })?;
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
            let value = remove(doc, from)?;
            Ok(add(doc, path, value)?)
        }
        Op::Copy { from, path } => {
            let value = get_mut(doc, from)?
                .ok_or_else(|| format!("copy operation does not apply: {from:?} does not exist"))?
                .clone();
            Ok(add(doc, path, value)?)
        }
        Op::Test { path, value } => match get_mut(doc, path)? {
            Some(target) if target == value => Ok(()),
            // A missing value tests equal to null.
            None if value.is_null() => Ok(()),
            Some(target) => Err(Failure::TestFailed(format!(
                "test operation failed: {path:?} is {target}, not {value}"
            ))),
            None => Err(Failure::TestFailed(format!(
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
/// counting from the end; `None` when out of range.
fn index(token: &str, positions: usize, path: &str) -> Result<Option<usize>, String> {
    let digits = token.strip_prefix(['-', '+']).unwrap_or(token);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{path:?}: {token:?} is not an array index"));
    }
    let i: i64 = token
        .parse()
        .map_err(|_| format!("{path:?}: array index {token} is too large"))?;
    let n = i64::try_from(positions).unwrap_or(i64::MAX);
    let i = if i < 0 { i + n } else { i };
    Ok(usize::try_from(i).ok().filter(|&i| i < positions))
}

fn get_mut<'a>(doc: &'a mut Json, path: &str) -> Result<Option<&'a mut Json>, String> {
    get_by_tokens(doc, &tokens(path)?, path)
}

fn get_by_tokens<'a>(
    doc: &'a mut Json,
    toks: &[String],
    path: &str,
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
                match index(t, a.len(), path)? {
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
fn parent<'a>(doc: &'a mut Json, path: &str) -> Result<Option<(&'a mut Json, String)>, String> {
    let mut toks = tokens(path)?;
    let Some(last) = toks.pop() else {
        return Ok(None);
    };
    match get_by_tokens(doc, &toks, path)? {
        Some(p) if p.is_object() || p.is_array() => Ok(Some((p, last))),
        Some(_) => Err(format!(
            "{path:?}: the parent of the target is neither an object nor an array"
        )),
        None => Err(format!("{path:?}: the parent of the target does not exist")),
    }
}

fn add(doc: &mut Json, path: &str, value: Json) -> Result<(), String> {
    let Some((p, last)) = parent(doc, path)? else {
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
                index(&last, a.len() + 1, path)?
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

fn remove(doc: &mut Json, path: &str) -> Result<Json, String> {
    let Some((p, last)) = parent(doc, path)? else {
        return Ok(std::mem::take(doc));
    };
    let missing = || format!("remove operation does not apply: {path:?} does not exist");
    match p {
        Json::Object(m) => m.remove(&last).ok_or_else(missing),
        Json::Array(a) => {
            if last == "-" {
                return Err(missing());
            }
            match index(&last, a.len(), path)? {
                Some(i) => Ok(a.remove(i)),
                None => Err(missing()),
            }
        }
        _ => unreachable!("parent() returns only objects and arrays"),
    }
}
