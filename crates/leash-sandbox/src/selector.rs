//! Label and field selectors, parsed as the API server parses them.

use std::collections::BTreeMap;

use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector {
    reqs: Vec<(String, Op)>,
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k` (also `==`).
    pub(crate) fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        let bad = |why: &str| ApiError::bad_request(format!("unable to parse requirement: {why}"));
        let mut rest = s.trim();
        while !rest.is_empty() {
            // One requirement ends at a comma outside parentheses.
            let mut depth = 0usize;
            let mut comma = None;
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth = depth
                            .checked_sub(1)
                            .ok_or_else(|| bad("unbalanced parenthesis"))?
                    }
                    ',' if depth == 0 => {
                        comma = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = comma.unwrap_or(rest.len());
            let req = rest[..end].trim();
            if req.is_empty() {
                return Err(bad("found ',', expected: identifier"));
            }
            reqs.push(parse_requirement(req).map_err(|w| bad(&w))?);
            rest = match comma {
                Some(i) => {
                    let next = rest[i + 1..].trim_start();
                    if next.is_empty() {
                        return Err(bad("found '', expected: identifier after ','"));
                    }
                    next
                }
                None => "",
            };
        }
        Ok(Self { reqs })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.reqs.iter().all(|(k, op)| {
            let v = labels.get(k);
            match op {
                Op::Eq(x) => v == Some(x),
                Op::NotEq(x) => v != Some(x),
                Op::In(xs) => v.is_some_and(|v| xs.contains(v)),
                Op::NotIn(xs) => v.is_none_or(|v| !xs.contains(v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
            }
        })
    }
}

fn parse_requirement(req: &str) -> Result<(String, Op), String> {
    if let Some(key) = req.strip_prefix('!') {
        let key = key.trim();
        check_key(key)?;
        return Ok((key.to_string(), Op::NotExists));
    }
    for (sym, ctor) in [
        ("!=", Op::NotEq as fn(String) -> Op),
        ("==", Op::Eq),
        ("=", Op::Eq),
    ] {
        if let Some((k, v)) = req.split_once(sym) {
            let (k, v) = (k.trim(), v.trim());
            check_key(k)?;
            check_value(v)?;
            return Ok((k.to_string(), ctor(v.to_string())));
        }
    }
    // `key in (..)` / `key notin (..)` / `key`
    let mut parts = req.splitn(2, char::is_whitespace);
    let key = parts.next().unwrap_or_default().trim();
    check_key(key)?;
    let Some(rest) = parts.next().map(str::trim) else {
        return Ok((key.to_string(), Op::Exists));
    };
    let (is_in, list) = if let Some(l) = rest.strip_prefix("notin") {
        (false, l)
    } else if let Some(l) = rest.strip_prefix("in") {
        (true, l)
    } else {
        return Err(format!(
            "found '{rest}', expected: in, notin, =, ==, !=, or end of requirement"
        ));
    };
    let list = list.trim();
    let inner = list
        .strip_prefix('(')
        .and_then(|l| l.strip_suffix(')'))
        .ok_or_else(|| format!("found '{list}', expected: '(' values ')'"))?;
    let mut values = Vec::new();
    for v in inner.split(',') {
        let v = v.trim();
        check_value(v)?;
        values.push(v.to_string());
    }
    if values.is_empty() || (values.len() == 1 && values[0].is_empty() && inner.trim().is_empty()) {
        return Err("for 'in', 'notin' operators, values set can't be empty".into());
    }
    Ok((
        key.to_string(),
        if is_in {
            Op::In(values)
        } else {
            Op::NotIn(values)
        },
    ))
}

fn is_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

fn check_key(k: &str) -> Result<(), String> {
    let name = match k.split_once('/') {
        Some((prefix, name)) => {
            if !crate::resources::is_dns_subdomain(prefix) {
                return Err(format!(
                    "invalid label key \"{k}\": prefix part must be a DNS subdomain"
                ));
            }
            name
        }
        None => k,
    };
    if is_name_part(name) {
        Ok(())
    } else {
        Err(format!(
            "invalid label key \"{k}\": name part must consist of alphanumeric characters, '-', '_' or '.'"
        ))
    }
}

fn check_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_name_part(v) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"
        ))
    }
}

/// A parsed `fieldSelector`: `field=value`, `field==value`, `field!=value`, comma-separated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses and checks every field against `metadata.name`, `metadata.namespace` and `extra`.
    pub(crate) fn parse(s: &str, extra: &[&str]) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_unescaped(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if field != "metadata.name" && field != "metadata.namespace" && !extra.contains(&field)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, unescape(value.trim())));
        }
        Ok(Self { reqs })
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// `get(field)` gives an object's value for a field (missing fields compare as "").
    pub(crate) fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs
            .iter()
            .all(|(f, eq, v)| (get(f).unwrap_or("") == v) == *eq)
    }
}

fn split_unescaped(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut escaped) = (0, false);
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            ',' if !escaped => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => escaped = false,
        }
    }
    out.push(&s[start..]);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_operators() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&l);
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("app in (db, web)"));
        assert!(!m("app notin (db,web)"));
        assert!(m("tier,app"));
        assert!(!m("!tier"));
        assert!(m("!missing"));
        assert!(m("missing notin (x)"));
        assert!(m("example.com/x!=y,app=web"));
        assert!(m(""));
    }

    #[test]
    fn label_errors() {
        for bad in [
            "app=(",
            "=x",
            "app in x",
            "a,,b",
            "app in ()",
            "a b c",
            "x=y!",
            "-a",
        ] {
            assert_eq!(LabelSelector::parse(bad).unwrap_err().code(), 400, "{bad}");
        }
    }

    #[test]
    fn fields() {
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=b", &[]).unwrap();
        assert!(f.matches(|k| if k == "metadata.name" {
            Some("a")
        } else {
            Some("c")
        }));
        assert!(!f.matches(|k| if k == "metadata.name" {
            Some("a")
        } else {
            Some("b")
        }));
        assert_eq!(
            FieldSelector::parse("spec.x=1", &[]).unwrap_err().code(),
            400
        );
        assert_eq!(
            FieldSelector::parse("nonsense", &[]).unwrap_err().code(),
            400
        );
        assert!(FieldSelector::parse("status.phase=Running", &["status.phase"]).is_ok());
    }
}
