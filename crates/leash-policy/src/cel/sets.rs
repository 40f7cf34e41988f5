//! Kubernetes' `sets` CEL library, on lists: `sets.contains(a, b)` (every
//! element of `b` is in `a`), `sets.equivalent(a, b)` (each contains the
//! other) and `sets.intersects(a, b)` (some element is in both).

use cel::common::types::LIST_TYPE;
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError, Value};

/// Registers the `sets` functions on `env`.
pub(super) fn register(env: &mut Env) {
    // Registration fails only on a duplicate declaration (a bug the tests
    // catch).
    for (name, f) in [
        (
            "sets.contains",
            contains as cel::common::functions::Function,
        ),
        ("sets.equivalent", equivalent),
        ("sets.intersects", intersects),
    ] {
        let _ = env.add_overload(
            name,
            &format!("leash.{name}/2"),
            vec![LIST_TYPE, LIST_TYPE],
            f,
        );
    }
}

fn lists(
    args: &[CowVal<'_, '_>],
    function: &str,
) -> Result<(Vec<Value>, Vec<Value>), ExecutionError> {
    let [a, b] = args else {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    };
    let list = |v: &CowVal<'_, '_>| match Value::try_from(v.as_ref())? {
        Value::List(l) => Ok(l.as_ref().clone()),
        other => Err(ExecutionError::function_error(
            function,
            format!("expected a list, got {}", other.type_of()),
        )),
    };
    Ok((list(a)?, list(b)?))
}

fn bool_val<'b, 'v>(b: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::Owned(Box::<dyn Val>::try_from(Value::Bool(b))?))
}

fn all_in(sub: &[Value], of: &[Value]) -> bool {
    sub.iter().all(|x| of.contains(x))
}

fn contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = lists(&args, "sets.contains")?;
    bool_val(all_in(&b, &a))
}

fn equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = lists(&args, "sets.equivalent")?;
    bool_val(all_in(&a, &b) && all_in(&b, &a))
}

fn intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = lists(&args, "sets.intersects")?;
    bool_val(a.iter().any(|x| b.contains(x)))
}
