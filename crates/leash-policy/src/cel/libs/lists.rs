//! Kubernetes' list library: `isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`.

#[allow(clippy::wildcard_imports)]
use super::*;

pub(super) fn cmp_values(a: &Value, b: &Value, function: &str) -> Result<Ordering, ExecutionError> {
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

pub(super) fn extreme(args: &[Value], function: &str, want: Ordering) -> R {
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
