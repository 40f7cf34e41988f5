//! An ImageValidatingPolicy's image verification functions:
//! `verifyImageSignatures(image, attestors)`,
//! `verifyAttestationSignatures(image, attestation, attestors)`,
//! `extractPayload(image, attestation)` and `getImageData(image)`.
//!
//! They are global functions in Kyverno, but they need the evaluation's
//! registry data and the policy's attestations, which a `cel` overload
//! cannot reach (it sees only its arguments). So each is a parse-time macro
//! that rewrites `f(args)` into `__ivpol.f(args)`, a member call on a
//! receiver only an ImageValidatingPolicy's evaluation binds
//! ([`bind_ivpol`]); elsewhere the receiver is unbound and the call fails
//! naming it.

#[allow(clippy::wildcard_imports)]
use super::*;

use cel::common::ast::{CallExpr, Expr as AstExpr, IdedExpr};
use cel::parser::{Macro, MacroExprHelper, ParseError};

use crate::ivpol::Verifier;

/// The receiver the functions' macros expand into.
const RECEIVER: &str = "__ivpol";

/// The functions, their argument counts and their lookup keys.
const FUNCTIONS: &[(&str, usize)] = &[
    ("verifyImageSignatures", 2),
    ("verifyAttestationSignatures", 3),
    ("extractPayload", 2),
    ("getImageData", 1),
];

/// Registers the macros rewriting the global calls into receiver calls.
pub(crate) fn register_ivpol_macros(env: &mut Env) {
    for (name, n) in FUNCTIONS {
        let function = name.to_string();
        // Registration fails only on a duplicate macro (a bug the tests
        // catch).
        let _ = env.add_macro(Macro::global(*name, *n, move |helper, target, args| {
            expand(&function, helper, target, args)
        }));
    }
}

fn expand(
    function: &str,
    helper: &mut MacroExprHelper<'_>,
    _target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    let receiver = helper.next_expr(AstExpr::Ident(RECEIVER.to_string()));
    let call = CallExpr {
        func_name: function.to_string(),
        target: Some(Box::new(receiver)),
        args: std::mem::take(args),
    };
    Ok(Some(helper.next_expr(AstExpr::Call(call))))
}

/// The receiver: one evaluation's [`Verifier`].
#[derive(Clone, Copy)]
struct IvpolVal<'a> {
    state: &'a Verifier<'a>,
}

impl std::fmt::Debug for IvpolVal<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IvpolVal")
    }
}

/// Binds the receiver to `state` in `ctx`.
pub(crate) fn bind_ivpol<'a>(ctx: &mut Context<'_, 'a>, state: &'a Verifier<'a>) {
    ctx.add_variable_as_val(RECEIVER, Box::new(IvpolVal { state }));
}

// The data type: `data_call` reaches it as it reaches `resource`.
indexer_val!(IvpolVal, DATA_TYPE, lookup, "image verification");

fn json_arg(v: Option<&Value>, function: &str) -> Result<serde_json::Value, ExecutionError> {
    v.ok_or_else(ExecutionError::missing_argument_or_target)?
        .json()
        .map_err(|e| ferr(function, format!("argument is not data: {e}")))
}

fn text_arg<'k>(v: Option<&'k Value>, function: &str) -> Result<&'k str, ExecutionError> {
    match v {
        Some(Value::String(s)) => Ok(s.as_str()),
        _ => Err(ferr(function, "expected a string argument")),
    }
}

impl IvpolVal<'_> {
    fn lookup(&self, key: &[Value]) -> R {
        let op = text_arg(key.first(), "image verification")?;
        let args = &key[1..];
        let v = self.state;
        match op {
            "sigs" => {
                let f = "verifyImageSignatures";
                let image = text_arg(args.first(), f)?;
                let attestors = json_arg(args.get(1), f)?;
                v.signatures(image, &attestors)
                    .map(Value::Int)
                    .map_err(|e| ferr(f, e))
            }
            "atts" => {
                let f = "verifyAttestationSignatures";
                let image = text_arg(args.first(), f)?;
                let attestation = text_arg(args.get(1), f)?;
                let attestors = json_arg(args.get(2), f)?;
                v.attestations(image, attestation, &attestors)
                    .map(Value::Int)
                    .map_err(|e| ferr(f, e))
            }
            "payload" => {
                let f = "extractPayload";
                let image = text_arg(args.first(), f)?;
                let attestation = text_arg(args.get(1), f)?;
                v.payload(image, attestation)
                    .map(|p| from_json(&p))
                    .map_err(|e| ferr(f, e))
            }
            "data" => {
                let f = "getImageData";
                let image = text_arg(args.first(), f)?;
                v.image_data(image)
                    .map(|d| from_json(&d))
                    .map_err(|e| ferr(f, format!("failed to get imagedata: {e}")))
            }
            _ => Err(ferr(op, "no such function on this value")),
        }
    }
}
