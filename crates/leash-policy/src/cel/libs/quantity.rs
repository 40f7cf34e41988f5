//! Kubernetes' quantity library (`quantity`, `isQuantity`, comparisons and arithmetic) and the comparisons it shares with semver.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A Kubernetes resource quantity (one parser: [`crate::quantity`]).
pub(crate) use crate::quantity::Quantity;

impl Opaque for Quantity {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Quantity"
    }
}

pub(super) const NANO: i128 = 1_000_000_000;

pub(super) fn quantity_of(v: &Value, function: &str) -> Result<Quantity, ExecutionError> {
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

pub(super) fn this_quantity(args: &[Value], function: &str) -> Result<Quantity, ExecutionError> {
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
pub(super) fn compare_opaque(a: &Value, b: &Value) -> Result<Ordering, ExecutionError> {
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
