//! Kyverno's arithmetic: `add`, `sum`, `subtract`, `multiply`, `divide`,
//! `modulo`, `round`, over numbers (scalars), quantities and durations.
//!
//! A number argument is a scalar; a string is a quantity if
//! `resource.ParseQuantity` accepts it (so `"1m"` is a milli-quantity), else
//! a duration if `time.ParseDuration` does; anything else is refused.
//!
//! | op | result |
//! |---|---|
//! | q ± q | quantity text, d ± d: duration text, s ± s: number; other mixes: error |
//! | q × s, s × q | quantity text; d × s, s × d: duration text; s × s: number |
//! | q ÷ q, d ÷ d, s ÷ s | number; q ÷ s: quantity text; d ÷ s: duration text |
//! | q % q | quantity text; d % d: duration text; s % s: number (integers only) |

use jmespath::{Rcvar, Runtime, Variable};

use super::duration;
use super::quantity::Quantity;
use super::ty::{a, any, n};
use super::{arg_num, ferr, int_number, num, register, string};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "add", vec![any(), any()], |x| binary("add", x, Op::Add));
    register(rt, "subtract", vec![any(), any()], |x| {
        binary("subtract", x, Op::Sub)
    });
    register(rt, "multiply", vec![any(), any()], |x| {
        binary("multiply", x, Op::Mul)
    });
    register(rt, "divide", vec![any(), any()], |x| {
        binary("divide", x, Op::Div)
    });
    register(rt, "modulo", vec![any(), any()], |x| {
        binary("modulo", x, Op::Mod)
    });
    // Replaces the standard `sum(array[number])`, as Kyverno does.
    register(rt, "sum", vec![a()], sum);
    register(rt, "round", vec![n(), n()], round);
}

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Clone, Copy)]
enum Operand {
    Scalar(f64),
    Quantity(Quantity),
    Duration(i64),
}

fn operand(v: &Variable) -> Option<Operand> {
    match v {
        Variable::Number(n) => n.as_f64().map(Operand::Scalar),
        Variable::String(s) => Quantity::parse(s)
            .map(Operand::Quantity)
            .ok()
            .or_else(|| duration::parse(s).ok().map(Operand::Duration)),
        _ => None,
    }
}

fn binary(name: &str, x: &[Rcvar], op: Op) -> Result<Rcvar, String> {
    let (Some(l), Some(r)) = (operand(&x[0]), operand(&x[1])) else {
        return Err(ferr(name, "invalid operands"));
    };
    apply(name, op, l, r)
}

fn apply(name: &str, op: Op, l: Operand, r: Operand) -> Result<Rcvar, String> {
    use Operand::{Duration as D, Quantity as Q, Scalar as S};
    let mismatch = || Err(ferr(name, "Types mismatch"));
    let zero = || Err(ferr(name, "Zero divisor passed"));
    let non_int = || Err(ferr(name, "Non-integer argument(s) passed for modulo"));
    let overflow = || Err(ferr(name, "quantity out of range"));
    let qtext = |q: Option<Quantity>| match q {
        Some(q) => Ok(string(q.canonical())),
        None => overflow(),
    };
    match (op, l, r) {
        (Op::Add, S(a), S(b)) => Ok(num(a + b)),
        (Op::Add, Q(a), Q(b)) => qtext(a.add(b)),
        (Op::Add, D(a), D(b)) => Ok(string(duration::format(a.wrapping_add(b)))),
        (Op::Sub, S(a), S(b)) => Ok(num(a - b)),
        (Op::Sub, Q(a), Q(b)) => qtext(a.sub(b)),
        (Op::Sub, D(a), D(b)) => Ok(string(duration::format(a.wrapping_sub(b)))),
        (Op::Add | Op::Sub, ..) => mismatch(),

        (Op::Mul, S(a), S(b)) => Ok(num(a * b)),
        (Op::Mul, Q(q), S(s)) | (Op::Mul, S(s), Q(q)) => qtext(q.mul(Quantity::from_f64(s)?)),
        (Op::Mul, D(d), S(s)) | (Op::Mul, S(s), D(d)) => {
            let secs = duration::seconds(d) * s;
            Ok(string(duration::format(duration::from_nanos_f64(
                secs * 1e9,
            ))))
        }
        (Op::Mul, ..) => mismatch(),

        (Op::Div, S(a), S(b)) => {
            if b == 0.0 {
                return zero();
            }
            Ok(num(a / b))
        }
        (Op::Div, Q(a), Q(b)) => {
            let d = b.to_f64();
            if d == 0.0 {
                return zero();
            }
            Ok(num(a.to_f64() / d))
        }
        (Op::Div, Q(q), S(s)) => {
            if s == 0.0 {
                return zero();
            }
            qtext(q.div(Quantity::from_f64(s)?))
        }
        (Op::Div, D(a), D(b)) => {
            if duration::seconds(b) == 0.0 {
                return zero();
            }
            Ok(num(duration::seconds(a) / duration::seconds(b)))
        }
        (Op::Div, D(d), S(s)) => {
            if s == 0.0 {
                return zero();
            }
            let secs = duration::seconds(d) / s;
            Ok(string(duration::format(duration::from_nanos_f64(
                secs * 1e9,
            ))))
        }
        (Op::Div, ..) => mismatch(),

        (Op::Mod, S(a), S(b)) => {
            let (Ok(x), Ok(y)) = (int_number(a), int_number(b)) else {
                return non_int();
            };
            if y == 0 {
                return zero();
            }
            Ok(num(x.wrapping_rem(y) as f64))
        }
        (Op::Mod, Q(a), Q(b)) => {
            let (fa, fb) = (a.to_f64(), b.to_f64());
            let (Ok(x), Ok(y)) = (int_number(fa), int_number(fb)) else {
                return non_int();
            };
            if y == 0 {
                return zero();
            }
            Ok(string(
                Quantity::from_int(x.wrapping_rem(y), a.format).canonical(),
            ))
        }
        (Op::Mod, D(a), D(b)) => {
            if b == 0 {
                return zero();
            }
            Ok(string(duration::format(a.wrapping_rem(b))))
        }
        (Op::Mod, ..) => mismatch(),
    }
}

/// Folds `add` over the array; each partial result is re-read as an operand,
/// as Kyverno does.
fn sum(x: &[Rcvar]) -> Result<Rcvar, String> {
    let items = x[0].as_array().cloned().unwrap_or_default();
    let Some(first) = items.first() else {
        return Err(ferr("sum", "at least one element in the array is required"));
    };
    let mut acc = first.clone();
    for item in &items[1..] {
        acc = binary("sum", &[acc, item.clone()], Op::Add)?;
    }
    Ok(acc)
}

fn round(x: &[Rcvar]) -> Result<Rcvar, String> {
    let value = arg_num(x, 0);
    let places = int_number(arg_num(x, 1))
        .map_err(|_| ferr("round", "Non-integer argument(s) passed for round off"))?;
    if places < 0 {
        return Err(ferr("round", "2 argument is out of bounds (0)"));
    }
    let shift = 10f64.powi(places.min(400) as i32);
    Ok(num((value * shift).round() / shift))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};

    #[test]
    fn arithmetic() {
        let cases: &[Case] = &[
            ("add(`12`, `13`)", "{}", Json("25")),
            ("add(`1.5`, `1`)", "{}", Json("2.5")),
            ("add('12', '13s')", "{}", Err("Types mismatch")),
            ("add(`12`, '13Ki')", "{}", Err("Types mismatch")),
            ("add(`12`, '13')", "{}", Err("Types mismatch")),
            ("add('12Ki', '13Ki')", "{}", Json(r#""25Ki""#)),
            ("add('12Ki', '13')", "{}", Json(r#""12301""#)),
            ("add('12Ki', `13`)", "{}", Err("Types mismatch")),
            ("add('12s', '13s')", "{}", Json(r#""25s""#)),
            ("add('1h', '30m0s')", "{}", Json(r#""1h30m0s""#)),
            // `30m` reads as 30 milli (a quantity) before it could be minutes.
            ("add('1h', '30m')", "{}", Err("Types mismatch")),
            ("add('1m', '1m')", "{}", Json(r#""2m""#)),
            ("add('100m', '900m')", "{}", Json(r#""1""#)),
            ("add('500Mi', '0.5Gi')", "{}", Json(r#""1012Mi""#)),
            ("add('x', `1`)", "{}", Err("invalid operands")),
            ("add(`true`, `1`)", "{}", Err("invalid operands")),
            ("add(a, b)", r#"{"a": "1Gi", "b": "1Gi"}"#, Json(r#""2Gi""#)),
            // `[]` alone flattens `@` (not an array here), so the type check fails.
            ("sum([])", "{}", Err("expects type array")),
            ("sum(`[]`)", "{}", Err("at least one element")),
            ("sum([`12`, `13`, `1`, `4`])", "{}", Json("30")),
            (
                "sum(['12Ki', '13Ki', '1Ki', '4Ki'])",
                "{}",
                Json(r#""30Ki""#),
            ),
            ("sum(['12Ki', '13'])", "{}", Json(r#""12301""#)),
            ("sum(['12s', '13s'])", "{}", Json(r#""25s""#)),
            ("sum(['12s', `13`])", "{}", Err("Types mismatch")),
            ("sum(['12'])", "{}", Json(r#""12""#)),
            (
                "sum(x[].r)",
                r#"{"x": [{"r": "100m"}, {"r": "250m"}]}"#,
                Json(r#""350m""#),
            ),
            ("subtract(`12`, `13`)", "{}", Json("-1")),
            ("subtract('12Ki', '13Ki')", "{}", Json(r#""-1Ki""#)),
            ("subtract('12Ki', '13')", "{}", Json(r#""12275""#)),
            ("subtract('12s', '13s')", "{}", Json(r#""-1s""#)),
            ("subtract('12s', `13`)", "{}", Err("Types mismatch")),
            ("multiply('12Ki', `2`)", "{}", Json(r#""24Ki""#)),
            ("multiply('12Ki', '12Ki')", "{}", Err("Types mismatch")),
            ("multiply('12s', `2`)", "{}", Json(r#""24s""#)),
            ("multiply('12s', '12s')", "{}", Err("Types mismatch")),
            ("multiply(`2.5`, `2.5`)", "{}", Json("6.25")),
            ("multiply(`2.5`, '12Ki')", "{}", Json(r#""30Ki""#)),
            ("multiply(`2.5`, '12')", "{}", Json(r#""30""#)),
            ("multiply(`2.5`, '40s')", "{}", Json(r#""1m40s""#)),
            ("multiply('250m', `4`)", "{}", Json(r#""1""#)),
            ("divide('256M', '256M')", "{}", Json("1")),
            ("divide('8', '3')", "{}", Json("2.6666666666666665")),
            ("divide('128M', '256M')", "{}", Json("0.5")),
            ("divide('12Ki', `3`)", "{}", Json(r#""4Ki""#)),
            ("divide('12Ki', '200')", "{}", Json("61.44")),
            ("divide('12Ki', '2s')", "{}", Err("Types mismatch")),
            ("divide('12s', `3`)", "{}", Json(r#""4s""#)),
            ("divide('12s', '5s')", "{}", Json("2.4")),
            ("divide('12s', '4')", "{}", Err("Types mismatch")),
            ("divide(`14`, `3`)", "{}", Json("4.666666666666667")),
            ("divide(`14`, '5s')", "{}", Err("Types mismatch")),
            ("divide(`14`, `0`)", "{}", Err("Zero divisor passed")),
            ("divide('4Ki', `0`)", "{}", Err("Zero divisor passed")),
            ("divide('4Ki', '0Ki')", "{}", Err("Zero divisor passed")),
            ("divide('4s', '0s')", "{}", Err("Zero divisor passed")),
            ("divide('4s', `0`)", "{}", Err("Zero divisor passed")),
            ("divide('10', `4`)", "{}", Json(r#""2""#)),
            ("divide('1.5', `2`)", "{}", Json(r#""700m""#)),
            ("modulo('12Ki', '5Ki')", "{}", Json(r#""2Ki""#)),
            ("modulo('12Ki', `13`)", "{}", Err("Types mismatch")),
            ("modulo('13s', '2s')", "{}", Json(r#""1s""#)),
            ("modulo('13s', `2`)", "{}", Err("Types mismatch")),
            ("modulo(`13`, `5`)", "{}", Json("3")),
            ("modulo(`-13`, `5`)", "{}", Json("-3")),
            ("modulo(`14`, `0`)", "{}", Err("Zero divisor passed")),
            ("modulo('4', '0')", "{}", Err("Zero divisor passed")),
            ("modulo('4', '1.5')", "{}", Err("Non-integer")),
            ("modulo('4.5', '1')", "{}", Err("Non-integer")),
            ("modulo(`14`, `1.5`)", "{}", Err("Non-integer")),
            ("modulo(`14.5`, `2`)", "{}", Err("Non-integer")),
            ("round(`3.14159`, `2`)", "{}", Json("3.14")),
            ("round(`2.5`, `0`)", "{}", Json("3")),
            ("round(`-2.5`, `0`)", "{}", Json("-3")),
            ("round(`1.5`, `0.5`)", "{}", Err("Non-integer")),
            ("round(`1.5`, `-1`)", "{}", Err("out of bounds")),
            ("round('1', `1`)", "{}", Err("number")),
        ];
        run(cases);
    }
}
