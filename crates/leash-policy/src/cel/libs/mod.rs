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
        pub(super) fn $name<'b, 'v>(
            args: Vec<CowVal<'b, 'v>>,
        ) -> Result<CowVal<'b, 'v>, ExecutionError> {
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

/// `Val` for a `Copy` handle of CEL type `$ty` that answers through its
/// `Indexer` (the data handles: `resource`, `http`, `generator`, an
/// ImageValidatingPolicy's receiver).
macro_rules! indexer_val {
    // With `lookup`: its `Indexer` too, answering a list key (`[op,
    // args...]`) with `self.lookup(&key)`; `$what` names it in errors.
    ($name:ident, $ty:expr, lookup, $what:expr) => {
        indexer_val!($name, $ty);

        impl Indexer for $name<'_> {
            fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
            where
                Self: 'v,
            {
                let key = match Value::try_from(idx)? {
                    Value::List(l) => l,
                    _ => return Err(ferr($what, "unknown lookup")),
                };
                let out = self.lookup(&key)?;
                Ok(CowVal::Owned(Box::<dyn Val>::try_from(out)?))
            }

            fn steal<'v>(
                self: Box<Self>,
                idx: &dyn Val,
            ) -> Result<Box<dyn Val + 'v>, ExecutionError>
            where
                Self: 'v,
            {
                self.get(idx).map(CowVal::into_owned)
            }
        }
    };
    ($name:ident, $ty:expr) => {
        impl Val for $name<'_> {
            fn get_type(&self) -> &Type {
                &$ty
            }

            fn cel_type() -> &'static Type
            where
                Self: Sized,
            {
                &$ty
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
    };
}

// One file per library; each sees this module's helpers.
mod authz;
mod data;
mod encoding;
mod image;
mod ip;
mod ivpol;
mod lists;
mod quantity;
mod regexp;
mod url;
mod user;
mod version;

pub(crate) use authz::*;
pub(crate) use data::*;
use encoding::*;
pub(crate) use image::*;
pub(crate) use ip::*;
pub(crate) use ivpol::{bind_ivpol, register_ivpol_macros};
use lists::*;
pub(crate) use quantity::*;
use regexp::*;
pub(crate) use url::*;
use user::*;
pub(crate) use version::*;

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
        ("Get", 4, |a| data_call("get", a)),
        ("List", 3, |a| data_call("list", a)),
        ("Get", 2, data_global),
        ("GetMetadata", 1, data_image),
        // An ImageValidatingPolicy's image verification functions, on the
        // receiver their macros expand into (`libs::ivpol`).
        ("verifyImageSignatures", 2, |a| data_call("sigs", a)),
        ("verifyAttestationSignatures", 3, |a| data_call("atts", a)),
        ("extractPayload", 2, |a| data_call("payload", a)),
        ("getImageData", 1, |a| data_call("data", a)),
        // Kyverno's http library (`Get` with headers is `data_global`'s).
        ("Get", 1, |a| http_call("GET", a)),
        ("Post", 2, |a| http_call("POST", a)),
        ("Post", 3, |a| http_call("POST", a)),
        ("Client", 1, http_client),
        // kyverno-authz's response builders (HTTP and Envoy payloads).
        ("Allowed", 0, authz_allowed),
        ("Denied", 1, authz_denied),
        ("WithBody", 1, authz_with_body),
        ("WithHeader", 2, authz_with_header),
        ("Response", 0, authz_response),
        // Kyverno's GeneratingPolicy: generator.Apply(namespace, objects).
        ("Apply", 2, generator_apply),
        // The lower-case spellings Kyverno (v1.19) accepts beside them:
        // `resource.get/list`, `generator.apply`.
        ("get", 4, |a| data_call("get", a)),
        ("list", 3, |a| data_call("list", a)),
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
