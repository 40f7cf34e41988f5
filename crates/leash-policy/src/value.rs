//! Leaf values of a validate `pattern`: a resource value against a pattern
//! scalar, with Kyverno's operators (`|` OR, `&` AND, `>`, `>=`, `<`, `<=`,
//! `!`, ranges `a-b` / `a!-b`), numbers, quantities, durations and
//! wildcard strings.

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
    match pattern {
        Value::Bool(p) => matches!(value, Value::Bool(v) if v == p),
        Value::Number(n) => {
            if let Some(p) = n.as_i64() {
                validate_int(value, p)
            } else {
                validate_float(value, n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::Null => match value {
            Value::Null => true,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Bool(b) => !b,
            _ => false,
        },
        Value::Object(_) => value.is_object(),
        Value::String(p) => validate_string_patterns(value, p),
        Value::Array(_) => false,
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

fn validate_string_patterns(value: &Value, pattern: &str) -> bool {
    if value.as_str() == Some(pattern) {
        return true;
    }
    pattern.split('|').any(|alternative| {
        alternative
            .trim_matches(' ')
            .split('&')
            .all(|condition| validate_string_pattern(value, condition.trim_matches(' ')))
    })
}

fn validate_string_pattern(value: &Value, pattern: &str) -> bool {
    match operator_of(pattern) {
        Op::InRange => {
            let mut ends = pattern.splitn(2, '-');
            let (lo, hi) = (ends.next().unwrap_or(""), ends.next().unwrap_or(""));
            validate_string(value, lo.trim(), Op::MoreEqual)
                && validate_string(value, hi.trim(), Op::LessEqual)
        }
        Op::NotInRange => {
            let mut ends = pattern.splitn(2, "!-");
            let (lo, hi) = (ends.next().unwrap_or(""), ends.next().unwrap_or(""));
            validate_string(value, lo.trim(), Op::Less)
                || validate_string(value, hi.trim(), Op::More)
        }
        op => validate_string(value, pattern[op.prefix_len()..].trim(), op),
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
fn number_string(value: &Value) -> Option<String> {
    match value {
        Value::Null => Some("0".to_string()),
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => i.to_string(),
            None => format!("{:.6}", n.as_f64().unwrap_or(0.0)),
        }),
        _ => None,
    }
}

fn validate_string(value: &Value, pattern: &str, op: Op) -> bool {
    // Durations first (both sides must be durations), then quantities (which
    // cover plain numbers), then strings (equality only, with wildcards).
    // The resource side is read only once the pattern side parsed.
    if let Some(p) = parse_duration_strict(pattern)
        && let Some(v) = number_string(value).and_then(|s| parse_duration_strict(&s))
        && let Some(ord) = v.partial_cmp(&p)
    {
        return ordering_satisfies(ord, op);
    }
    if let Some(p) = Quantity::parse(pattern)
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
        let matched = wildcard::matches(pattern, &text);
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
