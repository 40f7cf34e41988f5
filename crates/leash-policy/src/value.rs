//! Leaf values of a validate `pattern`: a resource value against a pattern
//! scalar, with Kyverno's operators (`|` OR, `&` AND, `>`, `>=`, `<`, `<=`,
//! `!`, ranges `a-b` / `a!-b`), numbers, quantities, durations and
//! wildcard strings.
//!
//! # Invariants
//! No lock, no task: the one `OnceLock` static holds its regular expressions, built
//! once by its first reader and read-only afterwards.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use crate::quantity::{Quantity, parse_duration};
use crate::wildcard;

/// A comparison operator prefixing a pattern string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Equal,
    NotEqual,
    More,
    MoreEqual,
    Less,
    LessEqual,
    InRange,
    NotInRange,
}

impl Op {
    fn prefix_len(self) -> usize {
        match self {
            Op::Equal | Op::InRange | Op::NotInRange => 0,
            Op::NotEqual | Op::More | Op::Less => 1,
            Op::MoreEqual | Op::LessEqual => 2,
        }
    }
}

fn range_regexes() -> &'static (Regex, Regex) {
    static RE: OnceLock<(Regex, Regex)> = OnceLock::new();
    RE.get_or_init(|| {
        (
            Regex::new(r"^(\d+(\.\d+)?)([^-]*)!-(\d+(\.\d+)?)([^-]*)$").expect("valid regex"),
            Regex::new(r"^(\d+(\.\d+)?)([^-]*)-(\d+(\.\d+)?)([^-]*)$").expect("valid regex"),
        )
    })
}

/// The operator a pattern string starts with (Kyverno's
/// `GetOperatorFromStringPattern`).
pub(crate) fn operator_of(pattern: &str) -> Op {
    if pattern.len() < 2 {
        return Op::Equal;
    }
    if pattern.starts_with(">=") {
        return Op::MoreEqual;
    }
    if pattern.starts_with("<=") {
        return Op::LessEqual;
    }
    if pattern.starts_with('>') {
        return Op::More;
    }
    if pattern.starts_with('<') {
        return Op::Less;
    }
    if pattern.starts_with('!') {
        return Op::NotEqual;
    }
    let (not_in, in_range) = range_regexes();
    if not_in.is_match(pattern) {
        return Op::NotInRange;
    }
    if in_range.is_match(pattern) {
        return Op::InRange;
    }
    Op::Equal
}

/// Whether a resource `value` satisfies a scalar (or map) `pattern`.
pub fn validate(value: &Value, pattern: &Value) -> bool {
    Leaf::compile(pattern).matches(value)
}

/// A scalar (or map) pattern parsed once: a string's alternatives (`|`),
/// conditions (`&`), operators, range ends, and the duration and quantity
/// each operand reads as. Matching then parses only the resource's side.
#[derive(Debug, Clone)]
pub(crate) enum Leaf {
    Bool(bool),
    Int(i64),
    Float(f64),
    Null,
    /// A map pattern: the value must be a map.
    Object,
    /// An array where a scalar was expected: matches nothing.
    Never,
    Str(StrPattern),
}

#[derive(Debug, Clone)]
pub(crate) struct StrPattern {
    /// The pattern as written: a resource string equal to it matches.
    whole: String,
    /// `a & b | c`: any alternative whose every condition holds.
    alternatives: Vec<Vec<Cond>>,
}

#[derive(Debug, Clone)]
enum Cond {
    /// `lo-hi`.
    InRange(Operand, Operand),
    /// `lo!-hi`.
    NotInRange(Operand, Operand),
    Compare(Op, Operand),
}

/// One side of a comparison as the pattern gives it.
#[derive(Debug, Clone)]
struct Operand {
    text: String,
    duration: Option<f64>,
    quantity: Option<Quantity>,
}

impl Operand {
    fn new(text: &str) -> Operand {
        Operand {
            duration: parse_duration_strict(text),
            quantity: Quantity::parse(text),
            text: text.to_string(),
        }
    }
}

impl Cond {
    fn new(pattern: &str) -> Cond {
        match operator_of(pattern) {
            Op::InRange => {
                let mut ends = pattern.splitn(2, '-');
                let (lo, hi) = (ends.next().unwrap_or(""), ends.next().unwrap_or(""));
                Cond::InRange(Operand::new(lo.trim()), Operand::new(hi.trim()))
            }
            Op::NotInRange => {
                let mut ends = pattern.splitn(2, "!-");
                let (lo, hi) = (ends.next().unwrap_or(""), ends.next().unwrap_or(""));
                Cond::NotInRange(Operand::new(lo.trim()), Operand::new(hi.trim()))
            }
            op => Cond::Compare(op, Operand::new(pattern[op.prefix_len()..].trim())),
        }
    }

    fn holds(&self, value: &Value) -> bool {
        match self {
            Cond::InRange(lo, hi) => {
                compare(value, lo, Op::MoreEqual) && compare(value, hi, Op::LessEqual)
            }
            Cond::NotInRange(lo, hi) => {
                compare(value, lo, Op::Less) || compare(value, hi, Op::More)
            }
            Cond::Compare(op, operand) => compare(value, operand, *op),
        }
    }
}

impl Leaf {
    pub(crate) fn compile(pattern: &Value) -> Leaf {
        match pattern {
            Value::Bool(p) => Leaf::Bool(*p),
            Value::Number(n) => match n.as_i64() {
                Some(p) => Leaf::Int(p),
                None => Leaf::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::Null => Leaf::Null,
            Value::Object(_) => Leaf::Object,
            Value::Array(_) => Leaf::Never,
            Value::String(p) => Leaf::Str(StrPattern {
                whole: p.clone(),
                alternatives: p
                    .split('|')
                    .map(|alternative| {
                        alternative
                            .trim_matches(' ')
                            .split('&')
                            .map(|condition| Cond::new(condition.trim_matches(' ')))
                            .collect()
                    })
                    .collect(),
            }),
        }
    }

    pub(crate) fn matches(&self, value: &Value) -> bool {
        match self {
            Leaf::Bool(p) => matches!(value, Value::Bool(v) if v == p),
            Leaf::Int(p) => validate_int(value, *p),
            Leaf::Float(p) => validate_float(value, *p),
            Leaf::Null => match value {
                Value::Null => true,
                Value::Number(n) => n.as_f64() == Some(0.0),
                Value::String(s) => s.is_empty(),
                Value::Bool(b) => !b,
                _ => false,
            },
            Leaf::Object => value.is_object(),
            Leaf::Never => false,
            Leaf::Str(p) => {
                value.as_str() == Some(p.whole.as_str())
                    || p.alternatives
                        .iter()
                        .any(|conds| conds.iter().all(|c| c.holds(value)))
            }
        }
    }
}

fn validate_int(value: &Value, pattern: i64) -> bool {
    match value {
        Value::Number(n) => match n.as_i64() {
            Some(v) => v == pattern,
            None => n
                .as_f64()
                .is_some_and(|f| f.trunc() == f && f == pattern as f64),
        },
        Value::String(s) => s.parse::<i64>().is_ok_and(|v| v == pattern),
        _ => false,
    }
}

fn validate_float(value: &Value, pattern: f64) -> bool {
    match value {
        Value::Number(n) => n.as_f64() == Some(pattern),
        Value::String(s) => s.parse::<f64>().is_ok_and(|v| v == pattern),
        _ => false,
    }
}

fn ordering_satisfies(ord: Ordering, op: Op) -> bool {
    match op {
        Op::Equal => ord == Ordering::Equal,
        Op::NotEqual => ord != Ordering::Equal,
        Op::More => ord == Ordering::Greater,
        Op::Less => ord == Ordering::Less,
        Op::MoreEqual => ord != Ordering::Less,
        Op::LessEqual => ord != Ordering::Greater,
        Op::InRange | Op::NotInRange => false,
    }
}

/// A resource value as the string Kyverno compares as a number/quantity
/// (`convertNumberToString`): null is "0".
fn number_string(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::Null => Some(Cow::Borrowed("0")),
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Number(n) => Some(Cow::Owned(match n.as_i64() {
            Some(i) => i.to_string(),
            None => format!("{:.6}", n.as_f64().unwrap_or(0.0)),
        })),
        _ => None,
    }
}

fn compare(value: &Value, pattern: &Operand, op: Op) -> bool {
    // Durations first (both sides must be durations), then quantities (which
    // cover plain numbers), then strings (equality only, with wildcards).
    // The resource side is read only when the pattern side parsed.
    if let Some(p) = pattern.duration
        && let Some(v) = number_string(value).and_then(|s| parse_duration_strict(&s))
        && let Some(ord) = v.partial_cmp(&p)
    {
        return ordering_satisfies(ord, op);
    }
    if let Some(p) = pattern.quantity
        && let Some(v) = number_string(value).and_then(|s| Quantity::parse(&s))
    {
        return ordering_satisfies(v.cmp_to(p), op);
    }
    if matches!(op, Op::Equal | Op::NotEqual) {
        let text: Cow<'_, str> = match value {
            Value::String(s) => Cow::Borrowed(s),
            Value::Number(n) => Cow::Owned(match n.as_i64() {
                Some(i) => i.to_string(),
                None => format!("{:E}", n.as_f64().unwrap_or(0.0)),
            }),
            Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
            _ => return false,
        };
        let matched = wildcard::matches(&pattern.text, &text);
        return if op == Op::NotEqual {
            !matched
        } else {
            matched
        };
    }
    false
}

/// A Go duration that is not a bare number (so `"1"` stays a quantity).
fn parse_duration_strict(s: &str) -> Option<f64> {
    if s.trim() == "0" || s.trim().parse::<f64>().is_ok() {
        return None;
    }
    parse_duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn value_table() {
        for (value, pattern, want) in [
            // strings and wildcards
            (json!("nginx:1.2"), json!("*:latest"), false),
            (json!("nginx:latest"), json!("*:latest"), true),
            (json!("nginx:latest"), json!("!*:latest"), false),
            (json!("nginx:1.2"), json!("!*:latest"), true),
            (json!("abc"), json!("?*"), true),
            (json!(""), json!("?*"), false),
            (json!("b"), json!("a | b"), true),
            (json!("c"), json!("a | b"), false),
            // numbers and operators
            (json!(5), json!(">3"), true),
            (json!(5), json!(">=5"), true),
            (json!(5), json!("<5"), false),
            (json!(5), json!("<=5"), true),
            (json!(5), json!("!5"), false),
            (json!(5), json!("1-10"), true),
            (json!(11), json!("1-10"), false),
            (json!(11), json!("1!-10"), true),
            (json!(5), json!("1!-10"), false),
            (json!(5), json!(">1 & <10"), true),
            (json!(15), json!(">1 & <10"), false),
            (json!(15), json!("<1 | >10"), true),
            (json!("3"), json!(3), true),
            (json!(3), json!(3), true),
            (json!(3.5), json!(3), false),
            (json!(true), json!(true), true),
            (json!("true"), json!(true), false),
            // quantities
            (json!("500m"), json!("<1"), true),
            (json!("2Gi"), json!("<=1Gi"), false),
            (json!("1024Mi"), json!("1Gi"), true),
            (json!("100Mi"), json!("64Mi-1Gi"), true),
            // durations
            (json!("2h"), json!(">1h"), true),
            (json!("30m"), json!(">1h"), false),
            // null pattern
            (Value::Null, Value::Null, true),
            (json!(""), Value::Null, true),
            (json!(0), Value::Null, true),
            (json!(false), Value::Null, true),
            (json!("x"), Value::Null, false),
            // null resource against numbers
            (Value::Null, json!("<1"), true),
            // map pattern: existence of a map
            (json!({"a": 1}), json!({}), true),
            (json!("a"), json!({}), false),
        ] {
            assert_eq!(
                validate(&value, &pattern),
                want,
                "{value} against {pattern}"
            );
        }
    }
}
