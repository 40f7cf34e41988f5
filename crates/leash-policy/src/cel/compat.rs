//! `orValue` on a value that is not an optional returns the value.
//!
//! cel-go before v0.28 evaluated `x.orValue(y)` by returning `x` itself when
//! `x` is not an optional (its `evalOptionalOrValue` only unwraps
//! optionals), and Kyverno keeps that behaviour on newer cel-go
//! (`OrValueCompatEnvOptions` in its CEL compiler): a macro rewrites every
//! `x.orValue(y)` into `__orValueCompat__(x, y)`, which unwraps an optional
//! (`some` gives its value, `none` the default) and returns anything else
//! unchanged. Policies rely on it: `container.securityContext.capabilities
//! .add.orValue([])` on a plain field means the field.
//!
//! `cel` 0.15's `orValue` overload is declared for optional receivers, but
//! its optional type accepts any value at dispatch, so a second overload for
//! other receivers is never reached; hence the same macro as Kyverno's. As
//! there, the call is strict: a receiver that fails to evaluate (a missing
//! field) is an error, not the default.

use cel::common::ast::{CallExpr, Expr, IdedExpr};
use cel::common::types::{CelOptional, DYN_TYPE};
use cel::common::value::CowVal;
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Env, ExecutionError};

/// The function `x.orValue(y)` is rewritten to call.
pub(super) const COMPAT_FUNCTION: &str = "__orValueCompat__";

/// Registers the `orValue` macro and its function on `env`.
pub(super) fn register(env: &mut Env) {
    // Registration fails only on a duplicate (a bug the tests catch).
    let _ = env.add_macro(Macro::receiver("orValue", 1, expand));
    let _ = env.add_overload(
        COMPAT_FUNCTION,
        "leash.orValueCompat_dyn_dyn",
        vec![DYN_TYPE, DYN_TYPE],
        or_value_compat,
    );
}

fn expand(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    let (Some(target), Some(default)) = (target.take(), args.pop()) else {
        return Ok(None);
    };
    Ok(Some(helper.next_expr(Expr::Call(CallExpr {
        func_name: COMPAT_FUNCTION.to_owned(),
        target: None,
        args: vec![target, default],
    }))))
}

fn or_value_compat<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let default = args.pop();
    let value = args.pop();
    let (Some(value), Some(default)) = (value, default) else {
        return Err(ExecutionError::function_error(
            "orValue",
            "expects a receiver and one argument",
        ));
    };
    let unwrapped = value
        .downcast_ref::<CelOptional>()
        .map(|opt| opt.option().map(|inner| inner.clone_as_boxed()));
    Ok(match unwrapped {
        None => value,
        Some(Some(inner)) => CowVal::Owned(inner),
        Some(None) => default,
    })
}
