//! Kyverno's string, encoding, matching and object functions.
//!
//! # Invariants
//! 1. The one shared state is the process-wide cache of compiled regular
//!    expressions (`cached_regex`): a `std::sync::Mutex` held only to look
//!    up or insert (a regular expression is compiled with no lock held; two
//!    threads compiling the same one keep the first inserted), never across
//!    a call into the engine; a poisoned lock is recovered. It holds at most
//!    512 expressions (cleared when full), so policies cannot grow it
//!    without bound.
//! 2. Every function is a pure function of its arguments besides that
//!    cache: no task, no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use jmespath::{Rcvar, Runtime, Variable};
use regex::Regex;

use super::ty::{a, any, n, o, oa, s, sn};
use super::{
    arg_num, arg_str, boolean, ferr, from_json, iface_to_string, int_number, num, register, string,
    to_json, type_err,
};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "compare", vec![s(), s()], compare);
    register(rt, "equal_fold", vec![s(), s()], equal_fold);
    register(rt, "replace", vec![s(), s(), s(), n()], replace);
    register(rt, "replace_all", vec![s(), s(), s()], replace_all);
    register(rt, "to_upper", vec![s()], |x| {
        Ok(string(arg_str(x, 0).to_uppercase()))
    });
    register(rt, "to_lower", vec![s()], |x| {
        Ok(string(arg_str(x, 0).to_lowercase()))
    });
    register(rt, "trim", vec![s(), s()], trim);
    register(rt, "trim_prefix", vec![s(), s()], trim_prefix);
    register(rt, "split", vec![s(), s()], split);
    register(
        rt,
        "regex_replace_all",
        vec![s(), sn(), sn()],
        regex_replace_all,
    );
    register(
        rt,
        "regex_replace_all_literal",
        vec![s(), sn(), sn()],
        regex_replace_all_literal,
    );
    register(rt, "regex_match", vec![s(), sn()], regex_match);
    register(rt, "pattern_match", vec![s(), sn()], pattern_match);
    register(rt, "label_match", vec![o(), o()], label_match);
    register(rt, "to_boolean", vec![s()], to_boolean);
    register(rt, "base64_decode", vec![s()], base64_decode);
    register(rt, "base64_encode", vec![s()], |x| {
        Ok(string(STANDARD.encode(arg_str(x, 0))))
    });
    register(rt, "path_canonicalize", vec![s()], |x| {
        Ok(string(go_clean_path(arg_str(x, 0))))
    });
    register(rt, "truncate", vec![s(), n()], truncate);
    register(rt, "parse_json", vec![s()], parse_json);
    register(rt, "parse_yaml", vec![s()], parse_yaml);
    register(rt, "lookup", vec![oa(), sn()], lookup);
    register(rt, "items", vec![oa(), s(), s()], items);
    register(rt, "object_from_lists", vec![a(), a()], object_from_lists);
    register(rt, "x509_decode", vec![s()], |x| {
        super::x509::decode(arg_str(x, 0))
            .map(|v| from_json(&v))
            .map_err(|e| ferr("x509_decode", e))
    });
    // Go's `to_string` marshals numbers without a fraction when whole.
    register(rt, "to_string", vec![any()], to_go_string);
}

fn compare(x: &[Rcvar]) -> Result<Rcvar, String> {
    Ok(num(match arg_str(x, 0).cmp(arg_str(x, 1)) {
        std::cmp::Ordering::Less => -1.0,
        std::cmp::Ordering::Equal => 0.0,
        std::cmp::Ordering::Greater => 1.0,
    }))
}

/// Go's `strings.EqualFold`: equal under simple Unicode case folding.
fn equal_fold(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (l, r) = (arg_str(x, 0), arg_str(x, 1));
    let same = l.chars().count() == r.chars().count()
        && l.chars().zip(r.chars()).all(|(p, q)| {
            p == q || p.to_lowercase().eq(q.to_lowercase()) || p.to_uppercase().eq(q.to_uppercase())
        });
    Ok(boolean(same))
}

fn replace(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (src, old, new) = (arg_str(x, 0), arg_str(x, 1), arg_str(x, 2));
    let n = arg_num(x, 3) as i64;
    Ok(string(if n < 0 {
        src.replace(old, new)
    } else {
        src.replacen(old, new, n as usize)
    }))
}

fn replace_all(x: &[Rcvar]) -> Result<Rcvar, String> {
    Ok(string(arg_str(x, 0).replace(arg_str(x, 1), arg_str(x, 2))))
}

fn trim(x: &[Rcvar]) -> Result<Rcvar, String> {
    let cut = arg_str(x, 1);
    Ok(string(arg_str(x, 0).trim_matches(|c| cut.contains(c))))
}

fn trim_prefix(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (src, prefix) = (arg_str(x, 0), arg_str(x, 1));
    Ok(string(src.strip_prefix(prefix).unwrap_or(src)))
}

/// Go's `strings.Split`: an empty separator splits into characters.
fn split(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (src, sep) = (arg_str(x, 0), arg_str(x, 1));
    let parts: Vec<Rcvar> = if sep.is_empty() {
        src.chars().map(|c| string(c.to_string())).collect()
    } else {
        src.split(sep).map(string).collect()
    };
    Ok(Rcvar::new(Variable::Array(parts)))
}

/// Compiled regular expressions, shared across evaluations (invariant 1).
fn cached_regex(pattern: &str) -> Result<Arc<Regex>, regex::Error> {
    static CACHE: Mutex<Option<HashMap<String, Arc<Regex>>>> = Mutex::new(None);
    let lock = || CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(re) = lock().as_ref().and_then(|m| m.get(pattern)) {
        return Ok(re.clone());
    }
    // Compiled without the lock: other threads' lookups never wait for it.
    let re = Arc::new(Regex::new(pattern)?);
    let mut guard = lock();
    let map = guard.get_or_insert_with(HashMap::new);
    if map.len() >= 512 {
        map.clear();
    }
    Ok(map.entry(pattern.to_string()).or_insert(re).clone())
}

fn str_or_num(name: &str, x: &[Rcvar], i: usize) -> Result<String, String> {
    x.get(i)
        .and_then(|v| iface_to_string(v))
        .ok_or_else(|| type_err(name, i + 1, "String or Real"))
}

fn regex_replace(name: &str, x: &[Rcvar], literal: bool) -> Result<Rcvar, String> {
    let src = str_or_num(name, x, 1)?;
    let repl = str_or_num(name, x, 2)?;
    let re = cached_regex(arg_str(x, 0)).map_err(|e| ferr(name, e))?;
    let out = if literal {
        re.replace_all(&src, regex::NoExpand(&repl)).into_owned()
    } else {
        re.replace_all(&src, repl.as_str()).into_owned()
    };
    Ok(string(out))
}

fn regex_replace_all(x: &[Rcvar]) -> Result<Rcvar, String> {
    regex_replace("regex_replace_all", x, false)
}

fn regex_replace_all_literal(x: &[Rcvar]) -> Result<Rcvar, String> {
    regex_replace("regex_replace_all_literal", x, true)
}

fn regex_match(x: &[Rcvar]) -> Result<Rcvar, String> {
    let src = str_or_num("regex_match", x, 1)?;
    // Go's regexp.Match returns the compile error unprefixed.
    let re = cached_regex(arg_str(x, 0)).map_err(|e| format!("error parsing regexp: {e}"))?;
    Ok(boolean(re.is_match(&src)))
}

fn pattern_match(x: &[Rcvar]) -> Result<Rcvar, String> {
    let src = str_or_num("pattern_match", x, 1)?;
    Ok(boolean(wildcard_match(arg_str(x, 0), &src)))
}

/// Kyverno's wildcard match: `*` any run of characters, `?` exactly one
/// (the engine's own, so patterns and functions agree).
pub(crate) fn wildcard_match(pattern: &str, text: &str) -> bool {
    crate::wildcard::matches(pattern, text)
}

fn label_match(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (Some(labels), Some(target)) = (x[0].as_object(), x[1].as_object()) else {
        return Err(type_err("label_match", 1, "Object"));
    };
    Ok(boolean(
        labels
            .iter()
            .all(|(k, v)| target.get(k).is_some_and(|t| t == v)),
    ))
}

fn to_boolean(x: &[Rcvar]) -> Result<Rcvar, String> {
    let input = arg_str(x, 0);
    match input.to_lowercase().as_str() {
        "true" => Ok(boolean(true)),
        "false" => Ok(boolean(false)),
        _ => Err(ferr(
            "to_boolean",
            format!("lowercase argument must be 'true' or 'false' (provided: '{input}')"),
        )),
    }
}

/// Go's `base64.StdEncoding.DecodeString`: padded, newlines ignored.
fn base64_decode(x: &[Rcvar]) -> Result<Rcvar, String> {
    let input: String = arg_str(x, 0)
        .chars()
        .filter(|c| *c != '\r' && *c != '\n')
        .collect();
    let bytes = STANDARD
        .decode(input.as_bytes())
        .map_err(|e| format!("illegal base64 data: {e}"))?;
    Ok(string(String::from_utf8_lossy(&bytes).into_owned()))
}

/// Go's `filepath.Join(p)` on Unix, i.e. `Clean` except that "" stays "".
pub(crate) fn go_clean_path(p: &str) -> String {
    if p.is_empty() {
        return String::new();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".to_string(),
        (false, false) => body,
    }
}

fn truncate(x: &[Rcvar]) -> Result<Rcvar, String> {
    let src = arg_str(x, 0);
    let len = arg_num(x, 1).max(0.0) as usize;
    Ok(string(src.chars().take(len).collect::<String>()))
}

fn parse_json(x: &[Rcvar]) -> Result<Rcvar, String> {
    let v: serde_json::Value = serde_json::from_str(arg_str(x, 0)).map_err(|e| e.to_string())?;
    Ok(from_json(&v))
}

fn parse_yaml(x: &[Rcvar]) -> Result<Rcvar, String> {
    // `0644` is 420, as Kyverno's sigs.k8s.io/yaml reads YAML (1.1).
    let options = serde_saphyr::options! { legacy_octal_numbers: true };
    let v: serde_json::Value = serde_saphyr::from_str_with_options(arg_str(x, 0), options)
        .map_err(|e| format!("error converting YAML to JSON: {e}"))?;
    Ok(from_json(&v))
}

fn lookup(x: &[Rcvar]) -> Result<Rcvar, String> {
    match &*x[0] {
        Variable::Object(m) => {
            let Some(key) = x[1].as_string() else {
                return Err(type_err("lookup", 2, "String"));
            };
            Ok(m.get(key)
                .cloned()
                .unwrap_or_else(|| Rcvar::new(Variable::Null)))
        }
        Variable::Array(items) => {
            let Some(key) = x[1].as_number() else {
                return Err(type_err("lookup", 2, "Number"));
            };
            let idx = int_number(key)
                .map_err(|e| format!("JMESPath function 'lookup': argument #2: {e}"))?;
            Ok(usize::try_from(idx)
                .ok()
                .and_then(|i| items.get(i).cloned())
                .unwrap_or_else(|| Rcvar::new(Variable::Null)))
        }
        _ => Err(type_err("lookup", 1, "Object or Array")),
    }
}

fn items(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (key_name, val_name) = (arg_str(x, 1), arg_str(x, 2));
    let pair = |k: Rcvar, v: Rcvar| {
        let mut m = BTreeMap::new();
        m.insert(key_name.to_string(), k);
        m.insert(val_name.to_string(), v);
        Rcvar::new(Variable::Object(m))
    };
    let out: Vec<Rcvar> = match &*x[0] {
        // BTreeMap iterates in sorted key order, as Kyverno sorts.
        Variable::Object(m) => m
            .iter()
            .map(|(k, v)| pair(string(k.clone()), v.clone()))
            .collect(),
        Variable::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| pair(num(i as f64), v.clone()))
            .collect(),
        _ => return Err(type_err("items", 1, "Object or Array")),
    };
    Ok(Rcvar::new(Variable::Array(out)))
}

fn object_from_lists(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (Some(keys), Some(values)) = (x[0].as_array(), x[1].as_array()) else {
        return Err(type_err("object_from_lists", 1, "Array"));
    };
    let mut out = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        let key =
            iface_to_string(k).ok_or_else(|| type_err("object_from_lists", 1, "StringArray"))?;
        out.insert(
            key,
            values
                .get(i)
                .cloned()
                .unwrap_or_else(|| Rcvar::new(Variable::Null)),
        );
    }
    Ok(Rcvar::new(Variable::Object(out)))
}

fn to_go_string(x: &[Rcvar]) -> Result<Rcvar, String> {
    match &*x[0] {
        Variable::String(s) => Ok(string(s.clone())),
        other => Ok(string(
            serde_json::to_string(&to_json(other)).map_err(|e| e.to_string())?,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};

    #[test]
    fn string_functions() {
        let cases: &[Case] = &[
            ("compare('a', 'b')", "{}", Json("-1")),
            ("compare('b', 'a')", "{}", Json("1")),
            ("compare('a', 'a')", "{}", Json("0")),
            ("compare('a', `1`)", "{}", Err("string")),
            ("equal_fold('Go', 'GO')", "{}", Json("true")),
            ("equal_fold('Go', 'Goo')", "{}", Json("false")),
            ("replace('aaaa', 'a', 'b', `2`)", "{}", Json(r#""bbaa""#)),
            ("replace('aaaa', 'a', 'b', `-1`)", "{}", Json(r#""bbbb""#)),
            ("replace('abc', '', 'x', `2`)", "{}", Json(r#""xaxbc""#)),
            ("replace_all('a.b.c', '.', '-')", "{}", Json(r#""a-b-c""#)),
            ("to_upper(name)", r#"{"name": "abc"}"#, Json(r#""ABC""#)),
            ("to_lower('ABC')", "{}", Json(r#""abc""#)),
            ("to_lower(`1`)", "{}", Err("string")),
            ("trim('--a-b--', '-')", "{}", Json(r#""a-b""#)),
            (
                "trim_prefix('docker.io/nginx', 'docker.io/')",
                "{}",
                Json(r#""nginx""#),
            ),
            (
                "trim_prefix('nginx', 'docker.io/')",
                "{}",
                Json(r#""nginx""#),
            ),
            ("split('a,b,c', ',')", "{}", Json(r#"["a","b","c"]"#)),
            ("split('abc', '')", "{}", Json(r#"["a","b","c"]"#)),
            ("split('', ',')", "{}", Json(r#"[""]"#)),
            (
                "regex_replace_all('([a-z]+)-([0-9]+)', 'ab-12', '${2}_$1')",
                "{}",
                Json(r#""12_ab""#),
            ),
            (
                "regex_replace_all('[0-9]', `123`, 'x')",
                "{}",
                Json(r#""xxx""#),
            ),
            (
                "regex_replace_all('(', 'a', 'b')",
                "{}",
                Err("regex_replace_all"),
            ),
            (
                "regex_replace_all_literal('[0-9]+', 'a12b', '$1')",
                "{}",
                Json(r#""a$1b""#),
            ),
            ("regex_match('^[0-9]+%$', '50%')", "{}", Json("true")),
            ("regex_match('^[0-9]+$', `12`)", "{}", Json("true")),
            ("regex_match('\\bls\\b', 'ls -l')", "{}", Json("true")),
            ("regex_match('a', `true`)", "{}", Err("string|number")),
            ("regex_match('(', 'a')", "{}", Err("error parsing regexp")),
            ("pattern_match('ngin?', 'nginx')", "{}", Json("true")),
            (
                "pattern_match('*.io/*', 'docker.io/nginx')",
                "{}",
                Json("true"),
            ),
            ("pattern_match('a*', 'b')", "{}", Json("false")),
            ("pattern_match('1*', `123`)", "{}", Json("true")),
            (
                "label_match(`{\"a\":\"1\"}`, `{\"a\":\"1\",\"b\":\"2\"}`)",
                "{}",
                Json("true"),
            ),
            (
                "label_match(`{\"a\":\"1\"}`, `{\"a\":\"2\"}`)",
                "{}",
                Json("false"),
            ),
            ("label_match(`{}`, `{}`)", "{}", Json("true")),
            ("label_match('a', `{}`)", "{}", Err("object")),
            ("to_boolean('TruE')", "{}", Json("true")),
            ("to_boolean('false')", "{}", Json("false")),
            ("to_boolean('yes')", "{}", Err("must be 'true' or 'false'")),
            ("base64_encode('hello')", "{}", Json(r#""aGVsbG8=""#)),
            ("base64_decode('aGVsbG8=')", "{}", Json(r#""hello""#)),
            ("base64_decode('aGVsbG8')", "{}", Err("base64")),
            (
                "path_canonicalize('//etc//passwd/')",
                "{}",
                Json(r#""/etc/passwd""#),
            ),
            ("path_canonicalize('/a/b/../c/.')", "{}", Json(r#""/a/c""#)),
            ("path_canonicalize('a/../..')", "{}", Json(r#""..""#)),
            ("path_canonicalize('')", "{}", Json(r#""""#)),
            ("truncate('hello', `3`)", "{}", Json(r#""hel""#)),
            ("truncate('hello', `-1`)", "{}", Json(r#""""#)),
            ("truncate('hé', `10`)", "{}", Json(r#""hé""#)),
            (
                "parse_json('{\"a\": [1, 2.5]}')",
                "{}",
                Json(r#"{"a":[1,2.5]}"#),
            ),
            ("parse_json('{')", "{}", Err("EOF")),
            (
                "parse_yaml('a: 1\nb: [x, z]')",
                "{}",
                Json(r#"{"a":1,"b":["x","z"]}"#),
            ),
            // YAML 1.1 booleans, as Kyverno's go-yaml reads them.
            (
                "parse_yaml('[y, yes, on, off, no]')",
                "{}",
                Json("[true,true,true,false,false]"),
            ),
            ("parse_yaml('a: [')", "{}", Err("YAML")),
            (
                "data | parse_yaml(@).name",
                r#"{"data": "name: kind\n"}"#,
                Json(r#""kind""#),
            ),
            ("lookup(`{\"a\":1}`, 'a')", "{}", Json("1")),
            ("lookup(`{\"a\":1}`, 'b')", "{}", Json("null")),
            ("lookup(`[1,2]`, `1`)", "{}", Json("2")),
            ("lookup(`[1,2]`, `5`)", "{}", Json("null")),
            ("lookup(`[1,2]`, `0.5`)", "{}", Err("expected an integer")),
            ("lookup(`[1,2]`, 'a')", "{}", Err("Number")),
            ("lookup(`{}`, `1`)", "{}", Err("String")),
            (
                "items(`{\"b\":2,\"a\":1}`, 'k', 'v')",
                "{}",
                Json(r#"[{"k":"a","v":1},{"k":"b","v":2}]"#),
            ),
            (
                "items(`[\"x\"]`, 'i', 'v')",
                "{}",
                Json(r#"[{"i":0,"v":"x"}]"#),
            ),
            (
                "object_from_lists(`[\"a\",\"b\"]`, `[1]`)",
                "{}",
                Json(r#"{"a":1,"b":null}"#),
            ),
            (
                "object_from_lists(`[1, true]`, `[1, 2]`)",
                "{}",
                Json(r#"{"1":1,"true":2}"#),
            ),
            ("object_from_lists(`[{}]`, `[1]`)", "{}", Err("StringArray")),
            ("x509_decode('x')", "{}", Err("failed to decode PEM block")),
        ];
        run(cases);
    }

    #[test]
    fn wildcard() {
        assert!(super::wildcard_match("*", ""));
        assert!(super::wildcard_match("a*b*c", "aXXbYYc"));
        assert!(!super::wildcard_match("a?c", "ac"));
        assert!(super::wildcard_match("**", "x"));
    }
}
