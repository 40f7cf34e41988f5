//! kyverno-authz's response builders, for ValidatingPolicies evaluating
//! HTTP (`evaluation.mode: HTTP`) and Envoy (`Envoy`) authorization
//! requests: `http.Allowed()`, `http.Denied(reason)`, `envoy.Allowed()`,
//! `envoy.Denied(code)`, `.WithBody(body)`, `.WithHeader(key, value)` and
//! `.Response()`. A response is a map marked with [`AUTHZ_MARK`]
//! (`"ok"` or `"denied"`), which the policy evaluator reads.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The key of a response map: `"ok"` or `"denied"`.
pub(crate) const AUTHZ_MARK: &str = "@leash.authz";

pub(super) static ENVOY_TYPE: Type = Type::new_unspecified_type("kyverno.envoy");

/// `envoy`: the Envoy authorization library (its response builders).
#[derive(Debug, Clone, Copy)]
pub(super) struct EnvoyVal;

impl Val for EnvoyVal {
    fn get_type(&self) -> &Type {
        &ENVOY_TYPE
    }

    fn cel_type() -> &'static Type
    where
        Self: Sized,
    {
        &ENVOY_TYPE
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }
}

/// Binds `envoy` in `ctx`.
pub(crate) fn bind_envoy(ctx: &mut Context<'_, '_>) {
    ctx.add_variable_as_val("envoy", Box::new(EnvoyVal));
}

/// Which library a builder call targets.
fn library(target: &dyn Val) -> Option<&'static str> {
    let t = target.get_type();
    if t == &HTTP_TYPE {
        Some("http")
    } else if t == &ENVOY_TYPE {
        Some("envoy")
    } else {
        None
    }
}

fn owned<'b, 'v>(v: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::Owned(Box::<dyn Val>::try_from(v)?))
}

/// `http.Allowed()`, `envoy.Allowed()`.
pub(super) fn authz_allowed<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let lib = args
        .first()
        .and_then(|t| library(t.as_ref()))
        .ok_or_else(|| ferr("Allowed", "no such function on this value"))?;
    owned(super::super::map(vec![
        (AUTHZ_MARK, s("ok")),
        ("library", s(lib)),
    ]))
}

/// `http.Denied(reason)`, `envoy.Denied(code)`.
pub(super) fn authz_denied<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let lib = args
        .first()
        .and_then(|t| library(t.as_ref()))
        .ok_or_else(|| ferr("Denied", "no such function on this value"))?;
    let arg = match args.get(1) {
        Some(a) => Value::try_from(a.as_ref())?,
        None => return Err(ExecutionError::missing_argument_or_target()),
    };
    let detail = match (lib, arg) {
        ("http", Value::String(reason)) => ("reason", Value::String(reason)),
        ("envoy", Value::Int(code)) => ("code", Value::Int(code)),
        (_, other) => {
            return Err(ferr(
                &format!("{lib}.Denied"),
                format!("no such overload for {}", other.type_of()),
            ));
        }
    };
    owned(super::super::map(vec![
        (AUTHZ_MARK, s("denied")),
        ("library", s(lib)),
        detail,
    ]))
}

/// The response map a builder method is called on, with its entries.
fn response_of(function: &str, target: &dyn Val) -> Result<Vec<(Key, Value)>, ExecutionError> {
    match Value::try_from(target)? {
        Value::Map(m)
            if m.map
                .contains_key(&Key::String(Arc::new(AUTHZ_MARK.into()))) =>
        {
            Ok(m.map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        }
        _ => Err(ferr(function, "no such function on this value")),
    }
}

fn rebuilt(entries: Vec<(Key, Value)>) -> Value {
    Value::Map(Map {
        map: Arc::new(entries.into_iter().collect()),
    })
}

/// `.WithBody(body)` on a response.
pub(super) fn authz_with_body<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let target = args
        .first()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let mut entries = response_of("WithBody", target.as_ref())?;
    let body = match args.get(1) {
        Some(a) => Value::try_from(a.as_ref())?,
        None => return Err(ExecutionError::missing_argument_or_target()),
    };
    entries.retain(|(k, _)| k != &Key::String(Arc::new("body".into())));
    entries.push((Key::String(Arc::new("body".into())), body));
    owned(rebuilt(entries))
}

/// `.WithHeader(key, value)` on a response.
pub(super) fn authz_with_header<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let target = args
        .first()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    let mut entries = response_of("WithHeader", target.as_ref())?;
    let (key, value) = match (args.get(1), args.get(2)) {
        (Some(k), Some(v)) => (Value::try_from(k.as_ref())?, Value::try_from(v.as_ref())?),
        _ => return Err(ExecutionError::missing_argument_or_target()),
    };
    let headers_key = Key::String(Arc::new("headers".into()));
    let mut headers = match entries.iter().find(|(k, _)| k == &headers_key) {
        Some((_, Value::List(l))) => l.as_ref().clone(),
        _ => Vec::new(),
    };
    headers.push(super::super::map(vec![("key", key), ("value", value)]));
    entries.retain(|(k, _)| k != &headers_key);
    entries.push((headers_key, Value::List(Arc::new(headers))));
    owned(rebuilt(entries))
}

/// `.Response()`: the response itself.
pub(super) fn authz_response<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let target = args
        .first()
        .ok_or_else(ExecutionError::missing_argument_or_target)?;
    response_of("Response", target.as_ref())?;
    Ok(args.swap_remove(0))
}
