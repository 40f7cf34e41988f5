//! The Kubernetes and Kyverno CEL functions, ported onto `cel` 0.15.
//!
//! Every function is a `cel` overload working on [`Value`]s: arguments are
//! converted from the interpreter's values, the result converted back.
//! Kubernetes' typed values (quantity, URL, IP, CIDR, semver) and Kyverno's
//! image references are [`Value::Opaque`]s.

use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use cel::common::traits::Indexer;
use cel::common::types::{DYN_TYPE, LIST_TYPE, STRING_TYPE, Type};
use cel::common::value::{CowVal, Val};
use cel::objects::{Key, Map, Opaque};
use cel::{Context, Env, ExecutionError, Value};

use super::{from_json, s};
use crate::request::ClusterData;

type R = Result<Value, ExecutionError>;

fn ferr(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// Declares a `cel` overload function calling `$body(&[Value]) -> R`.
macro_rules! overload {
    ($name:ident, $body:expr) => {
        fn $name<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
            let vals = args
                .iter()
                .map(|a| Value::try_from(a.as_ref()))
                .collect::<Result<Vec<_>, _>>()?;
            let f: fn(&[Value]) -> R = $body;
            let out = f(&vals)?;
            Ok(CowVal::Owned(Box::<dyn Val>::try_from(out)?))
        }
    };
}

fn arg<'a>(args: &'a [Value], i: usize, function: &str) -> Result<&'a Value, ExecutionError> {
    args.get(i)
        .ok_or_else(|| ferr(function, "missing argument"))
}

fn str_arg<'a>(args: &'a [Value], i: usize, function: &str) -> Result<&'a str, ExecutionError> {
    match arg(args, i, function)? {
        Value::String(s) => Ok(s.as_str()),
        other => Err(ferr(
            function,
            format!("expected a string, got {}", other.type_of()),
        )),
    }
}

fn list_arg<'a>(args: &'a [Value], function: &str) -> Result<&'a [Value], ExecutionError> {
    match arg(args, 0, function)? {
        Value::List(l) => Ok(l.as_slice()),
        other => Err(ferr(
            function,
            format!("expected a list, got {}", other.type_of()),
        )),
    }
}

fn opaque<T: Opaque>(v: T) -> Value {
    Value::Opaque(Arc::new(v))
}

fn as_opaque<T: Opaque>(v: &Value) -> Option<&T> {
    match v {
        Value::Opaque(o) => o.downcast_ref::<T>(),
        _ => None,
    }
}

fn ordering(o: Ordering) -> Value {
    Value::Int(match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

/// Registers every function on `env`.
pub(super) fn register(env: &mut Env) {
    let d = || DYN_TYPE;
    let st = || STRING_TYPE;
    let mut member = |name: &str, n: usize, f: cel::common::functions::Function, target: Type| {
        let args: Vec<Type> = (0..n).map(|_| DYN_TYPE).collect();
        let id = format!("leash.{}.{name}/{n}", target.name());
        let _ = env.add_member_overload(name, &id, target, args, f);
    };
    // Lists.
    member("isSorted", 0, list_is_sorted, LIST_TYPE);
    member("sum", 0, list_sum, LIST_TYPE);
    member("min", 0, list_min, LIST_TYPE);
    member("max", 0, list_max, LIST_TYPE);
    member("indexOf", 1, list_index_of, LIST_TYPE);
    member("lastIndexOf", 1, list_last_index_of, LIST_TYPE);
    // Regex.
    member("find", 1, regex_find, STRING_TYPE);
    member("findAll", 1, regex_find_all, STRING_TYPE);
    member("findAll", 2, regex_find_all_n, STRING_TYPE);
    // Quantity, semver (shared comparison names).
    for (name, n, f) in [
        (
            "isInteger",
            0,
            q_is_integer as cel::common::functions::Function,
        ),
        ("asInteger", 0, q_as_integer),
        ("asApproximateFloat", 0, q_as_float),
        ("sign", 0, q_sign),
        ("add", 1, q_add),
        ("sub", 1, q_sub),
        ("compareTo", 1, compare_to),
        ("isGreaterThan", 1, is_greater_than),
        ("isLessThan", 1, is_less_than),
        ("major", 0, sv_major),
        ("minor", 0, sv_minor),
        ("patch", 0, sv_patch),
        // URL.
        ("getScheme", 0, url_scheme),
        ("getHost", 0, url_host),
        ("getHostname", 0, url_hostname),
        ("getPort", 0, url_port),
        ("getEscapedPath", 0, url_path),
        ("getQuery", 0, url_query),
        // IP and CIDR.
        ("family", 0, ip_family),
        ("isUnspecified", 0, ip_is_unspecified),
        ("isLoopback", 0, ip_is_loopback),
        ("isLinkLocalMulticast", 0, ip_is_ll_multicast),
        ("isLinkLocalUnicast", 0, ip_is_ll_unicast),
        ("isGlobalUnicast", 0, ip_is_global_unicast),
        ("containsIP", 1, cidr_contains_ip),
        ("containsCIDR", 1, cidr_contains_cidr),
        ("ip", 0, cidr_ip),
        ("masked", 0, cidr_masked),
        ("prefixLength", 0, cidr_prefix_length),
        // Kyverno image references.
        ("registry", 0, img_registry),
        ("repository", 0, img_repository),
        ("identifier", 0, img_identifier),
        ("tag", 0, img_tag),
        ("digest", 0, img_digest),
        ("containsDigest", 0, img_contains_digest),
        // Kyverno data: resource.Get/List, globalContext.Get,
        // image.GetMetadata.
        ("Get", 4, data_get),
        ("List", 3, data_list),
        ("Get", 2, data_global),
        ("GetMetadata", 1, data_image),
        // Kyverno's GeneratingPolicy: generator.Apply(namespace, objects).
        ("Apply", 2, generator_apply),
        // The lower-case spellings Kyverno (v1.19) accepts beside them:
        // `resource.get/list`, `generator.apply`.
        ("get", 4, data_get),
        ("list", 3, data_list),
        ("apply", 2, generator_apply),
    ] {
        member(name, n, f, d());
    }
    let mut global = |name: &str, args: Vec<Type>, f: cel::common::functions::Function| {
        let id = format!("leash.{name}/{}", args.len());
        let _ = env.add_overload(name, &id, args, f);
    };
    global("quantity", vec![st()], quantity_new);
    global("isQuantity", vec![st()], quantity_is);
    global("semver", vec![st()], semver_new);
    global("semver", vec![st(), d()], semver_new);
    global("isSemver", vec![st()], semver_is);
    global("isSemver", vec![st(), d()], semver_is);
    global("url", vec![st()], url_new);
    global("isURL", vec![st()], url_is);
    global("ip", vec![st()], ip_new);
    global("isIP", vec![st()], ip_is);
    global("ip.isCanonical", vec![st()], ip_is_canonical);
    global("cidr", vec![st()], cidr_new);
    global("isCIDR", vec![st()], cidr_is);
    global("image", vec![st()], img_new);
    global("isImage", vec![st()], img_is);
    global("parseImageReference", vec![st()], img_parse_reference);
    // Kyverno's hash, JSON and YAML libraries.
    global("md5", vec![st()], hash_md5);
    global("sha1", vec![st()], hash_sha1);
    global("sha256", vec![st()], hash_sha256);
    global("json.unmarshal", vec![d()], json_unmarshal);
    global("yaml.parse", vec![st()], yaml_parse);
    // Kyverno's user library.
    global(
        "parseServiceAccount",
        vec![st()],
        user_parse_service_account,
    );
}

// ---------------------------------------------------------------- user

// Kyverno's `parseServiceAccount(username)`: `system:serviceaccount:NS:NAME`
// gives `Namespace` NS and `Name` NAME (everything after the namespace's
// colon, colons included, as Kyverno splits it); any other username gives
// both empty. The field names are those of Kyverno's Go type, which CEL
// exposes unchanged (`variables.sa.Name`).
overload!(user_parse_service_account, |args| {
    let user = str_arg(args, 0, "parseServiceAccount")?;
    let (namespace, name) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .unwrap_or(("", ""));
    Ok(Value::Map(Map {
        map: Arc::new(
            [("Namespace", namespace), ("Name", name)]
                .into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k.to_string())), s(v)))
                .collect(),
        ),
    }))
});

// ---------------------------------------------------------------- hash, json, yaml

overload!(hash_md5, |args| {
    let text = str_arg(args, 0, "md5")?;
    Ok(s(&crate::jmespath::hash::hex(&crate::jmespath::hash::md5(
        text.as_bytes(),
    ))))
});

/// A ring digest of a string argument, as lowercase hex.
fn digest_hex(args: &[Value], function: &str, algorithm: &'static ring::digest::Algorithm) -> R {
    let text = str_arg(args, 0, function)?;
    Ok(s(&crate::jmespath::hash::hex(
        ring::digest::digest(algorithm, text.as_bytes()).as_ref(),
    )))
}

overload!(hash_sha1, |args| digest_hex(
    args,
    "sha1",
    &ring::digest::SHA1_FOR_LEGACY_USE_ONLY
));
overload!(hash_sha256, |args| digest_hex(
    args,
    "sha256",
    &ring::digest::SHA256
));
overload!(json_unmarshal, |args| {
    let text = str_arg(args, 0, "json.unmarshal")?;
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ferr("json.unmarshal", format!("invalid JSON: {e}")))?;
    Ok(from_json(&v))
});
overload!(yaml_parse, |args| {
    let text = str_arg(args, 0, "yaml.parse")?;
    let v: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| ferr("yaml.parse", format!("invalid YAML: {e}")))?;
    Ok(from_json(&v))
});

// ---------------------------------------------------------------- lists

fn cmp_values(a: &Value, b: &Value, function: &str) -> Result<Ordering, ExecutionError> {
    match (a, b) {
        (Value::Int(x), Value::Float(y)) => (*x as f64).partial_cmp(y),
        (Value::Float(x), Value::Int(y)) => x.partial_cmp(&(*y as f64)),
        (Value::Opaque(_), Value::Opaque(_)) => compare_opaque(a, b).ok(),
        _ => a.partial_cmp(b),
    }
    .ok_or_else(|| {
        ferr(
            function,
            format!("cannot compare {} and {}", a.type_of(), b.type_of()),
        )
    })
}

overload!(list_is_sorted, |args| {
    let l = list_arg(args, "isSorted")?;
    for w in l.windows(2) {
        if cmp_values(&w[0], &w[1], "isSorted")? == Ordering::Greater {
            return Ok(Value::Bool(false));
        }
    }
    Ok(Value::Bool(true))
});

overload!(list_sum, |args| {
    let l = list_arg(args, "sum")?;
    let mut acc = Value::Int(0);
    for (i, v) in l.iter().enumerate() {
        acc = match (&acc, v) {
            (_, v) if i == 0 => v.clone(),
            (Value::Int(a), Value::Int(b)) => Value::Int(
                a.checked_add(*b)
                    .ok_or_else(|| ferr("sum", "integer overflow"))?,
            ),
            (Value::UInt(a), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| ferr("sum", "integer overflow"))?,
            ),
            (Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (Value::Duration(a), Value::Duration(b)) => Value::Duration(*a + *b),
            (a, b) => {
                return Err(ferr(
                    "sum",
                    format!("cannot add {} and {}", a.type_of(), b.type_of()),
                ));
            }
        };
    }
    Ok(acc)
});

fn extreme(args: &[Value], function: &str, want: Ordering) -> R {
    let l = list_arg(args, function)?;
    let mut it = l.iter();
    let mut best = it
        .next()
        .ok_or_else(|| ferr(function, format!("{function} called on an empty list")))?;
    for v in it {
        if cmp_values(v, best, function)? == want {
            best = v;
        }
    }
    Ok(best.clone())
}

overload!(list_min, |args| extreme(args, "min", Ordering::Less));
overload!(list_max, |args| extreme(args, "max", Ordering::Greater));

overload!(list_index_of, |args| {
    let l = list_arg(args, "indexOf")?;
    let x = arg(args, 1, "indexOf")?;
    Ok(Value::Int(
        l.iter()
            .position(|v| v == x)
            .map(|i| i as i64)
            .unwrap_or(-1),
    ))
});

overload!(list_last_index_of, |args| {
    let l = list_arg(args, "lastIndexOf")?;
    let x = arg(args, 1, "lastIndexOf")?;
    Ok(Value::Int(
        l.iter()
            .rposition(|v| v == x)
            .map(|i| i as i64)
            .unwrap_or(-1),
    ))
});

// ---------------------------------------------------------------- regex

fn regex(args: &[Value], function: &str) -> Result<regex::Regex, ExecutionError> {
    let re = str_arg(args, 1, function)?;
    regex::Regex::new(re).map_err(|e| ferr(function, e))
}

overload!(regex_find, |args| {
    let hay = str_arg(args, 0, "find")?;
    let re = regex(args, "find")?;
    Ok(s(re.find(hay).map(|m| m.as_str()).unwrap_or("")))
});

fn find_all(args: &[Value], limit: i64) -> R {
    let hay = str_arg(args, 0, "findAll")?;
    let re = regex(args, "findAll")?;
    let n = if limit < 0 {
        usize::MAX
    } else {
        limit as usize
    };
    Ok(Value::List(Arc::new(
        re.find_iter(hay).take(n).map(|m| s(m.as_str())).collect(),
    )))
}

overload!(regex_find_all, |args| find_all(args, -1));
overload!(regex_find_all_n, |args| {
    let n = match arg(args, 2, "findAll")? {
        Value::Int(n) => *n,
        _ => return Err(ferr("findAll", "expected an int limit")),
    };
    find_all(args, n)
});

// ---------------------------------------------------------------- quantity

/// A Kubernetes resource quantity (one parser: [`crate::quantity`]).
pub(crate) use crate::quantity::Quantity;

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

const NANO: i128 = 1_000_000_000;

fn quantity_of(v: &Value, function: &str) -> Result<Quantity, ExecutionError> {
    match v {
        Value::Int(i) => Ok(Quantity::from_nanos(*i as i128 * NANO)),
        Value::String(s) => {
            Quantity::parse_exact(s).ok_or_else(|| ferr(function, "invalid quantity"))
        }
        other => as_opaque::<Quantity>(other)
            .copied()
            .ok_or_else(|| ferr(function, format!("expected a quantity, got {other:?}"))),
    }
}

overload!(quantity_new, |args| {
    let t = str_arg(args, 0, "quantity")?;
    Quantity::parse_exact(t)
        .map(opaque)
        .ok_or_else(|| ferr("quantity", format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {t}")))
});
overload!(quantity_is, |args| Ok(Value::Bool(
    Quantity::parse_exact(str_arg(args, 0, "isQuantity")?).is_some()
)));

fn this_quantity(args: &[Value], function: &str) -> Result<Quantity, ExecutionError> {
    let v = arg(args, 0, function)?;
    as_opaque::<Quantity>(v)
        .copied()
        .ok_or_else(|| ferr(function, format!("not a quantity: {}", v.type_of())))
}

overload!(q_is_integer, |args| Ok(Value::Bool(
    this_quantity(args, "isInteger")?.nanos() % NANO == 0
)));
overload!(q_as_integer, |args| {
    let q = this_quantity(args, "asInteger")?;
    if q.nanos() % NANO != 0 {
        return Err(ferr("asInteger", "quantity is not an integer"));
    }
    i64::try_from(q.nanos() / NANO)
        .map(Value::Int)
        .map_err(|_| ferr("asInteger", "quantity overflows int64"))
});
overload!(q_as_float, |args| Ok(Value::Float(
    this_quantity(args, "asApproximateFloat")?.nanos() as f64 / NANO as f64
)));
overload!(q_sign, |args| Ok(Value::Int(
    this_quantity(args, "sign")?.nanos().signum() as i64
)));
overload!(q_add, |args| {
    let a = this_quantity(args, "add")?;
    let b = quantity_of(arg(args, 1, "add")?, "add")?;
    a.nanos()
        .checked_add(b.nanos())
        .map(|nanos| opaque(Quantity::from_nanos(nanos)))
        .ok_or_else(|| ferr("add", "overflow"))
});
overload!(q_sub, |args| {
    let a = this_quantity(args, "sub")?;
    let b = quantity_of(arg(args, 1, "sub")?, "sub")?;
    a.nanos()
        .checked_sub(b.nanos())
        .map(|nanos| opaque(Quantity::from_nanos(nanos)))
        .ok_or_else(|| ferr("sub", "overflow"))
});

/// Compares two quantities or two semvers.
fn compare_opaque(a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
    if let Some(x) = as_opaque::<Quantity>(a) {
        let y = quantity_of(b, "compareTo")?;
        return Ok(x.nanos().cmp(&y.nanos()));
    }
    if let (Some(x), Some(y)) = (as_opaque::<Semver>(a), as_opaque::<Semver>(b)) {
        return Ok(x.0.cmp_precedence(&y.0));
    }
    Err(ferr("compareTo", format!("cannot compare {a:?} and {b:?}")))
}

overload!(compare_to, |args| Ok(ordering(compare_opaque(
    arg(args, 0, "compareTo")?,
    arg(args, 1, "compareTo")?
)?)));
overload!(is_greater_than, |args| Ok(Value::Bool(
    compare_opaque(
        arg(args, 0, "isGreaterThan")?,
        arg(args, 1, "isGreaterThan")?
    )? == Ordering::Greater
)));
overload!(is_less_than, |args| Ok(Value::Bool(
    compare_opaque(arg(args, 0, "isLessThan")?, arg(args, 1, "isLessThan")?)? == Ordering::Less
)));

// ---------------------------------------------------------------- semver

/// A semantic version (Kubernetes' `semver` library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Semver(semver::Version);

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

fn parse_semver(text: &str, normalize: bool) -> Option<semver::Version> {
    if !normalize {
        return semver::Version::parse(text).ok();
    }
    let t = text.strip_prefix('v').unwrap_or(text);
    let (core, rest) = match t.find(['-', '+']) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let mut parts: Vec<String> = core
        .split('.')
        .map(|p| {
            let trimmed = p.trim_start_matches('0');
            if trimmed.is_empty() {
                "0".into()
            } else {
                trimmed.into()
            }
        })
        .collect();
    while parts.len() < 3 {
        parts.push("0".into());
    }
    semver::Version::parse(&format!("{}{rest}", parts.join("."))).ok()
}

fn normalize_flag(args: &[Value]) -> bool {
    matches!(args.get(1), Some(Value::Bool(true)))
}

overload!(semver_new, |args| {
    let t = str_arg(args, 0, "semver")?;
    parse_semver(t, normalize_flag(args))
        .map(|v| opaque(Semver(v)))
        .ok_or_else(|| ferr("semver", format!("could not parse semver: {t}")))
});
overload!(semver_is, |args| Ok(Value::Bool(
    parse_semver(str_arg(args, 0, "isSemver")?, normalize_flag(args)).is_some()
)));

fn this_semver<'a>(args: &'a [Value], function: &str) -> Result<&'a Semver, ExecutionError> {
    let v = arg(args, 0, function)?;
    as_opaque::<Semver>(v).ok_or_else(|| ferr(function, "not a semver"))
}

overload!(sv_major, |args| Ok(Value::Int(
    this_semver(args, "major")?.0.major as i64
)));
overload!(sv_minor, |args| Ok(Value::Int(
    this_semver(args, "minor")?.0.minor as i64
)));
overload!(sv_patch, |args| Ok(Value::Int(
    this_semver(args, "patch")?.0.patch as i64
)));

// ---------------------------------------------------------------- url

/// A parsed URL (Kubernetes' `url` library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Url {
    scheme: String,
    host: String,
    path: String,
    query: String,
}

impl Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.URL"
    }
}

impl Url {
    /// Parses an absolute URL or an absolute path, as Go's
    /// `url.ParseRequestURI`.
    pub(crate) fn parse(text: &str) -> Option<Url> {
        if text.chars().any(|c| c.is_ascii_control() || c == ' ') {
            return None;
        }
        let text = text.split('#').next().unwrap_or("");
        let (rest, query) = match text.split_once('?') {
            Some((r, q)) => (r, q.to_string()),
            None => (text, String::new()),
        };
        if rest.starts_with('/') {
            return Some(Url {
                scheme: String::new(),
                host: String::new(),
                path: rest.to_string(),
                query,
            });
        }
        let (scheme, after) = rest.split_once(':')?;
        let mut chars = scheme.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) {
            return None;
        }
        let (host, path) = match after.strip_prefix("//") {
            Some(a) => match a.find('/') {
                Some(i) => (a[..i].to_string(), a[i..].to_string()),
                None => (a.to_string(), String::new()),
            },
            None if after.starts_with('/') => (String::new(), after.to_string()),
            None => return None,
        };
        let host = host
            .rsplit_once('@')
            .map(|(_, h)| h.to_string())
            .unwrap_or(host);
        Some(Url {
            scheme: scheme.to_string(),
            host,
            path,
            query,
        })
    }

    fn hostname_port(&self) -> (&str, &str) {
        let h = self.host.as_str();
        if let Some(rest) = h.strip_prefix('[') {
            return match rest.split_once(']') {
                Some((ip, port)) => (ip, port.strip_prefix(':').unwrap_or("")),
                None => (rest, ""),
            };
        }
        match h.rsplit_once(':') {
            Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => (name, port),
            _ => (h, ""),
        }
    }
}

overload!(url_new, |args| {
    let t = str_arg(args, 0, "url")?;
    Url::parse(t).map(opaque).ok_or_else(|| {
        ferr(
            "url",
            format!("URL parse error during conversion from string: {t}"),
        )
    })
});
overload!(url_is, |args| Ok(Value::Bool(
    Url::parse(str_arg(args, 0, "isURL")?).is_some()
)));

fn this_url<'a>(args: &'a [Value], function: &str) -> Result<&'a Url, ExecutionError> {
    as_opaque::<Url>(arg(args, 0, function)?).ok_or_else(|| ferr(function, "not a URL"))
}

overload!(url_scheme, |args| Ok(s(
    &this_url(args, "getScheme")?.scheme
)));
overload!(url_host, |args| Ok(s(&this_url(args, "getHost")?.host)));
overload!(url_hostname, |args| Ok(s(this_url(args, "getHostname")?
    .hostname_port()
    .0)));
overload!(url_port, |args| Ok(s(this_url(args, "getPort")?
    .hostname_port()
    .1)));
overload!(url_path, |args| Ok(s(
    &this_url(args, "getEscapedPath")?.path
)));
overload!(url_query, |args| {
    let u = this_url(args, "getQuery")?;
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    for pair in u.query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match out.iter_mut().find(|(key, _)| key == k) {
            Some((_, vals)) => vals.push(s(v)),
            None => out.push((k.to_string(), vec![s(v)])),
        }
    }
    Ok(Value::Map(Map {
        map: Arc::new(
            out.into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k)), Value::List(Arc::new(v))))
                .collect(),
        ),
    }))
});

// ---------------------------------------------------------------- ip, cidr

/// An IP address (Kubernetes' `ip` library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ip(IpAddr);

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        "net.IP"
    }
}

/// A CIDR (Kubernetes' `cidr` library): the address as written and the
/// prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        "net.CIDR"
    }
}

fn parse_ip(t: &str) -> Option<IpAddr> {
    if t.contains('%') {
        return None;
    }
    let ip: IpAddr = t.parse().ok()?;
    // IPv4-mapped IPv6 addresses are rejected.
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return None;
    }
    Some(ip)
}

fn parse_cidr(t: &str) -> Option<Cidr> {
    let (a, p) = t.split_once('/')?;
    let addr = parse_ip(a)?;
    if p.is_empty() || (p.len() > 1 && p.starts_with('0')) {
        return None;
    }
    let prefix: u8 = p.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (prefix <= max).then_some(Cidr { addr, prefix })
}

fn bits(ip: &IpAddr) -> (u128, u8) {
    match ip {
        IpAddr::V4(v4) => (u32::from(*v4) as u128, 32),
        IpAddr::V6(v6) => (u128::from(*v6), 128),
    }
}

fn mask(value: u128, width: u8, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let keep = u128::MAX << (128 - prefix as u32);
    let shifted = value << (128 - width as u32);
    (shifted & keep) >> (128 - width as u32)
}

impl Cidr {
    fn contains(&self, ip: &IpAddr) -> bool {
        let (a, w) = bits(&self.addr);
        let (b, w2) = bits(ip);
        w == w2 && mask(a, w, self.prefix) == mask(b, w, self.prefix)
    }

    fn network(&self) -> IpAddr {
        let (a, w) = bits(&self.addr);
        let m = mask(a, w, self.prefix);
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((m as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(m.into()),
        }
    }
}

overload!(ip_new, |args| {
    let t = str_arg(args, 0, "ip")?;
    parse_ip(t).map(|ip| opaque(Ip(ip))).ok_or_else(|| {
        ferr(
            "ip",
            format!("IP Address '{t}' parse error during conversion from string"),
        )
    })
});
overload!(ip_is, |args| Ok(Value::Bool(
    parse_ip(str_arg(args, 0, "isIP")?).is_some()
)));
overload!(ip_is_canonical, |args| {
    let t = str_arg(args, 0, "ip.isCanonical")?;
    let ip = parse_ip(t).ok_or_else(|| ferr("ip.isCanonical", "invalid IP"))?;
    Ok(Value::Bool(ip.to_string() == t))
});

fn this_ip(args: &[Value], function: &str) -> Result<IpAddr, ExecutionError> {
    as_opaque::<Ip>(arg(args, 0, function)?)
        .map(|i| i.0)
        .ok_or_else(|| ferr(function, "not an IP"))
}

overload!(ip_family, |args| Ok(Value::Int(
    if this_ip(args, "family")?.is_ipv4() {
        4
    } else {
        6
    }
)));
overload!(ip_is_unspecified, |args| Ok(Value::Bool(
    this_ip(args, "isUnspecified")?.is_unspecified()
)));
overload!(ip_is_loopback, |args| Ok(Value::Bool(
    this_ip(args, "isLoopback")?.is_loopback()
)));
overload!(ip_is_ll_multicast, |args| Ok(Value::Bool(
    match this_ip(args, "isLinkLocalMulticast")? {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] & 0xff0f == 0xff02,
    }
)));
fn is_ll_unicast(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.octets()[..2] == [169, 254],
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}
overload!(ip_is_ll_unicast, |args| Ok(Value::Bool(is_ll_unicast(
    &this_ip(args, "isLinkLocalUnicast")?
))));
overload!(ip_is_global_unicast, |args| {
    let ip = this_ip(args, "isGlobalUnicast")?;
    let broadcast = matches!(ip, IpAddr::V4(v4) if v4.is_broadcast());
    Ok(Value::Bool(
        !ip.is_unspecified()
            && !ip.is_loopback()
            && !ip.is_multicast()
            && !is_ll_unicast(&ip)
            && !broadcast,
    ))
});

overload!(cidr_new, |args| {
    let t = str_arg(args, 0, "cidr")?;
    parse_cidr(t).map(opaque).ok_or_else(|| {
        ferr(
            "cidr",
            format!("network address '{t}' parse error during conversion from string"),
        )
    })
});
overload!(cidr_is, |args| Ok(Value::Bool(
    parse_cidr(str_arg(args, 0, "isCIDR")?).is_some()
)));

fn this_cidr<'a>(args: &'a [Value], function: &str) -> Result<&'a Cidr, ExecutionError> {
    as_opaque::<Cidr>(arg(args, 0, function)?).ok_or_else(|| ferr(function, "not a CIDR"))
}

overload!(cidr_contains_ip, |args| {
    let c = this_cidr(args, "containsIP")?;
    let ip = match arg(args, 1, "containsIP")? {
        Value::String(t) => parse_ip(t).ok_or_else(|| ferr("containsIP", "invalid IP"))?,
        other => as_opaque::<Ip>(other)
            .map(|i| i.0)
            .ok_or_else(|| ferr("containsIP", "expected an IP"))?,
    };
    Ok(Value::Bool(c.contains(&ip)))
});
overload!(cidr_contains_cidr, |args| {
    let c = this_cidr(args, "containsCIDR")?;
    let other = match arg(args, 1, "containsCIDR")? {
        Value::String(t) => parse_cidr(t).ok_or_else(|| ferr("containsCIDR", "invalid CIDR"))?,
        other => as_opaque::<Cidr>(other)
            .cloned()
            .ok_or_else(|| ferr("containsCIDR", "expected a CIDR"))?,
    };
    Ok(Value::Bool(
        other.prefix >= c.prefix && c.contains(&other.addr),
    ))
});
overload!(cidr_ip, |args| {
    if let Some(c) = as_opaque::<Cidr>(arg(args, 0, "ip")?) {
        return Ok(opaque(Ip(c.addr)));
    }
    Err(ferr("ip", "not a CIDR"))
});
overload!(cidr_masked, |args| {
    let c = this_cidr(args, "masked")?;
    Ok(opaque(Cidr {
        addr: c.network(),
        prefix: c.prefix,
    }))
});
overload!(cidr_prefix_length, |args| Ok(Value::Int(
    this_cidr(args, "prefixLength")?.prefix as i64
)));

// ---------------------------------------------------------------- image

/// A container image reference (Kyverno's `image` library), normalized as
/// go-containerregistry does: `nginx` is `index.docker.io/library/nginx:latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Image {
    registry: String,
    repository: String,
    tag: String,
    digest: String,
}

impl Opaque for Image {
    fn runtime_type_name(&self) -> &str {
        "kyverno.Image"
    }
}

impl fmt::Display for Image {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if !self.tag.is_empty() {
            write!(f, ":{}", self.tag)?;
        }
        if !self.digest.is_empty() {
            write!(f, "@{}", self.digest)?;
        }
        Ok(())
    }
}

impl Image {
    /// Parses an image reference.
    pub(crate) fn parse(text: &str) -> Option<Image> {
        if text.is_empty() || text.chars().any(char::is_whitespace) {
            return None;
        }
        let (name, digest) = match text.split_once('@') {
            Some((n, d)) => {
                let (alg, hex) = d.split_once(':')?;
                if alg.is_empty() || hex.len() < 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    return None;
                }
                (n, d.to_string())
            }
            None => (text, String::new()),
        };
        let last_slash = name.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match name[last_slash..].rfind(':') {
            Some(i) => (
                &name[..last_slash + i],
                name[last_slash + i + 1..].to_string(),
            ),
            None => (name, String::new()),
        };
        if !tag.is_empty()
            && (tag.len() > 128
                || !tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)))
        {
            return None;
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => ("index.docker.io".to_string(), name.to_string()),
        };
        let repository = if registry == "index.docker.io" && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        let repo_ok = !repository.is_empty()
            && repository.split('/').all(|c| {
                !c.is_empty()
                    && c.chars().all(|ch| {
                        ch.is_ascii_lowercase() || ch.is_ascii_digit() || "._-".contains(ch)
                    })
            });
        if !repo_ok {
            return None;
        }
        let tag = if tag.is_empty() && digest.is_empty() {
            "latest".to_string()
        } else {
            tag
        };
        Some(Image {
            registry,
            repository,
            tag,
            digest,
        })
    }
}

overload!(img_new, |args| {
    let t = str_arg(args, 0, "image")?;
    Image::parse(t)
        .map(opaque)
        .ok_or_else(|| ferr("image", format!("could not parse image reference: {t}")))
});
overload!(img_is, |args| Ok(Value::Bool(
    Image::parse(str_arg(args, 0, "isImage")?).is_some()
)));
overload!(img_parse_reference, |args| {
    let t = str_arg(args, 0, "parseImageReference")?;
    let i =
        Image::parse(t).ok_or_else(|| ferr("parseImageReference", "invalid image reference"))?;
    Ok(super::map(vec![
        ("registry", s(&i.registry)),
        ("repository", s(&i.repository)),
        ("path", s(&i.repository)),
        ("tag", s(&i.tag)),
        ("digest", s(&i.digest)),
        ("reference", s(&i.to_string())),
    ]))
});

fn this_image<'a>(args: &'a [Value], function: &str) -> Result<&'a Image, ExecutionError> {
    as_opaque::<Image>(arg(args, 0, function)?).ok_or_else(|| ferr(function, "not an image"))
}

overload!(img_registry, |args| Ok(s(
    &this_image(args, "registry")?.registry
)));
overload!(img_repository, |args| Ok(s(&this_image(
    args,
    "repository"
)?
.repository)));
overload!(img_identifier, |args| {
    let i = this_image(args, "identifier")?;
    Ok(s(if i.digest.is_empty() {
        &i.tag
    } else {
        &i.digest
    }))
});
overload!(img_tag, |args| Ok(s(&this_image(args, "tag")?.tag)));
overload!(img_digest, |args| Ok(
    s(&this_image(args, "digest")?.digest)
));
overload!(img_contains_digest, |args| Ok(Value::Bool(
    !this_image(args, "containsDigest")?.digest.is_empty()
)));

// ---------------------------------------------------------------- data

static DATA_TYPE: Type = Type::new_unspecified_type("kyverno.data");

/// `resource`, `globalContext` and `image`: the caller's cluster data, borrowed for
/// one evaluation. Lookups go through [`Indexer::get`] with a list key
/// (`[op, args...]`), the one way an overload reaches a borrowed value.
#[derive(Debug, Clone, Copy)]
struct DataVal<'a> {
    data: &'a dyn ClusterData,
}

impl Val for DataVal<'_> {
    fn get_type(&self) -> &Type {
        &DATA_TYPE
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &DATA_TYPE
    }

    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
}

impl DataVal<'_> {
    fn lookup(&self, key: &[Value]) -> R {
        let text = |i: usize| -> &str {
            match key.get(i) {
                Some(Value::String(s)) => s.as_str(),
                _ => "",
            }
        };
        match text(0) {
            "get" => {
                let (api, res, ns, name) = (text(1), text(2), text(3), text(4));
                self.data
                    .get(api, res, ns, name)
                    .map(|v| from_json(&v))
                    .ok_or_else(|| {
                        ferr(
                            "resource.Get",
                            format!("{res} \"{name}\" not found in namespace \"{ns}\" ({api})"),
                        )
                    })
            }
            "list" => {
                let (api, res, ns) = (text(1), text(2), text(3));
                let items: Vec<Value> = self
                    .data
                    .list(api, res, ns)
                    .iter()
                    .map(|v| from_json(v))
                    .collect();
                Ok(super::map(vec![
                    ("apiVersion", s("v1")),
                    ("kind", s("List")),
                    ("items", Value::List(Arc::new(items))),
                ]))
            }
            "global" => {
                let (entry, projection) = (text(1), text(2));
                let projection = (!projection.is_empty()).then_some(projection);
                self.data
                    .global(entry, projection)
                    .map(|v| from_json(&v))
                    .ok_or_else(|| {
                        ferr(
                            "globalContext.Get",
                            format!("global context entry \"{entry}\" not found"),
                        )
                    })
            }
            "image" => {
                let image = text(1);
                self.data
                    .image_data(image)
                    .map(|v| from_json(&v))
                    .ok_or_else(|| {
                        ferr(
                            "image.GetMetadata",
                            format!("failed to get image data: image data for {image} not found"),
                        )
                    })
            }
            _ => Err(ferr("data", "unknown lookup")),
        }
    }
}

impl Indexer for DataVal<'_> {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let key = match Value::try_from(idx)? {
            Value::List(l) => l,
            _ => return Err(ferr("data", "unknown lookup")),
        };
        let out = self.lookup(&key)?;
        Ok(CowVal::Owned(Box::<dyn Val>::try_from(out)?))
    }

    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

fn data_call<'b, 'v>(
    op: &str,
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut it = args.into_iter();
    let target = it
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let mut key = vec![s(op)];
    for a in it {
        key.push(Value::try_from(a.as_ref())?);
    }
    let key = Box::<dyn Val>::try_from(Value::List(Arc::new(key)))?;
    let indexer = target
        .as_indexer()
        .filter(|_| target.get_type() == &DATA_TYPE)
        .ok_or_else(|| ferr(op, "no such function on this value"))?;
    let out = indexer.get(key.as_ref())?.into_owned();
    Ok(CowVal::Owned(out))
}

fn data_get<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    data_call("get", args)
}

fn data_list<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    data_call("list", args)
}

fn data_global<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    data_call("global", args)
}

fn data_image<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    data_call("image", args)
}

/// Binds `resource`, `globalContext` and `image` (the variable, beside the
/// `image(ref)` function) to `data` in `ctx`, and `generator`.
pub(super) fn bind_data<'a>(ctx: &mut Context<'_, 'a>, data: &'a dyn ClusterData) {
    ctx.add_variable_as_val("resource", Box::new(DataVal { data }));
    ctx.add_variable_as_val("globalContext", Box::new(DataVal { data }));
    ctx.add_variable_as_val("image", Box::new(DataVal { data }));
    ctx.add_variable_as_val("generator", Box::new(GeneratorVal));
}

static GENERATOR_TYPE: Type = Type::new_unspecified_type("kyverno.generator");

/// The key of the value `generator.Apply` returns (see [`generator_apply`]).
pub(crate) const GENERATE_MARK: &str = "@leash.generate";

/// `generator`: its one function, `Apply(namespace, objects)`, has no
/// effect of its own (evaluation stays pure): it returns a value that
/// names the namespace and the objects, `{"@leash.generate": {namespace,
/// objects}}`, which the GeneratingPolicy evaluator turns into downstreams.
#[derive(Debug, Clone, Copy)]
struct GeneratorVal;

impl Val for GeneratorVal {
    fn get_type(&self) -> &Type {
        &GENERATOR_TYPE
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &GENERATOR_TYPE
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
}

fn generator_apply<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let mut it = args.into_iter();
    let target = it
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    if target.get_type() != &GENERATOR_TYPE {
        return Err(ferr("Apply", "no such function on this value"));
    }
    let namespace = it
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let objects = it
        .next()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let namespace = match Value::try_from(namespace.as_ref())? {
        Value::String(s) => Value::String(s),
        Value::Null => s(""),
        other => {
            return Err(ferr(
                "generator.Apply",
                format!("namespace must be a string, got {}", other.type_of()),
            ));
        }
    };
    let objects = match Value::try_from(objects.as_ref())? {
        l @ Value::List(_) => l,
        other => {
            return Err(ferr(
                "generator.Apply",
                format!("objects must be a list, got {}", other.type_of()),
            ));
        }
    };
    let out = super::map(vec![(
        GENERATE_MARK,
        super::map(vec![("namespace", namespace), ("objects", objects)]),
    )]);
    Ok(CowVal::Owned(Box::<dyn Val>::try_from(out)?))
}
