//! `preconditions` and `deny.conditions`: `any` / `all` blocks (or a legacy
//! list) of `{key, operator, value, message}` with Kyverno's operators.

use std::borrow::Cow;

use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::quantity::{Quantity, parse_duration};
use crate::value;
use crate::vars::{ExprCache, Source, go_format, has_vars, substitute};
use crate::wildcard;

/// A condition operator, spelled as Kyverno's policy validation accepts
/// it (its `Duration...` forms compare durations, as the plain ones do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) enum CondOp {
    Equals,
    NotEquals,
    In,
    AnyIn,
    AllIn,
    NotIn,
    AnyNotIn,
    AllNotIn,
    GreaterThan,
    GreaterThanOrEquals,
    LessThan,
    LessThanOrEquals,
}

/// Each spelling Kyverno accepts, with its operator.
const OPERATORS: [(&str, CondOp); 18] = [
    ("Equals", CondOp::Equals),
    ("Equal", CondOp::Equals),
    ("NotEquals", CondOp::NotEquals),
    ("NotEqual", CondOp::NotEquals),
    ("In", CondOp::In),
    ("AnyIn", CondOp::AnyIn),
    ("AllIn", CondOp::AllIn),
    ("NotIn", CondOp::NotIn),
    ("AnyNotIn", CondOp::AnyNotIn),
    ("AllNotIn", CondOp::AllNotIn),
    ("GreaterThan", CondOp::GreaterThan),
    ("GreaterThanOrEquals", CondOp::GreaterThanOrEquals),
    ("LessThan", CondOp::LessThan),
    ("LessThanOrEquals", CondOp::LessThanOrEquals),
    ("DurationGreaterThan", CondOp::GreaterThan),
    ("DurationGreaterThanOrEquals", CondOp::GreaterThanOrEquals),
    ("DurationLessThan", CondOp::LessThan),
    ("DurationLessThanOrEquals", CondOp::LessThanOrEquals),
];

impl TryFrom<String> for CondOp {
    type Error = String;
    fn try_from(op: String) -> Result<CondOp, String> {
        CondOp::parse(&op).ok_or_else(|| {
            let valid: Vec<&str> = OPERATORS.iter().map(|(n, _)| *n).collect();
            format!("unknown operator {op:?} (valid: {})", valid.join(", "))
        })
    }
}

impl CondOp {
    /// The operator of a spelling, case and all (Kyverno's policy
    /// validation refuses `equals`).
    pub(crate) fn parse(s: &str) -> Option<CondOp> {
        OPERATORS.iter().find(|(n, _)| *n == s).map(|(_, op)| *op)
    }
}

/// `any` / `all` conditions compiled once, when the policy is: each
/// operator parsed and each operand sorted into a literal or a variable
/// template, so that an evaluation neither parses nor scans them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conditions {
    /// `any`: at least one must hold (`None`: no such block).
    pub(crate) any: Option<Vec<Condition>>,
    /// `all`, or a legacy list: every one must hold.
    pub(crate) all: Option<Vec<Condition>>,
}

/// One compiled `{key, operator, value}`.
#[derive(Debug, Clone)]
pub(crate) struct Condition {
    pub(crate) op: CondOp,
    pub(crate) key: Operand,
    pub(crate) value: Operand,
}

/// A condition's key or value.
#[derive(Debug, Clone)]
pub(crate) enum Operand {
    /// Holds no variable: used as written.
    Literal(Value),
    /// A string that is one variable, `{{ expr }}` (its value keeps its
    /// type): the expression's text.
    Variable(String),
    /// Variables in a longer string, a list or a map.
    Template(Value),
}

impl Operand {
    fn new(v: &Value) -> Operand {
        if !has_vars(v) {
            return Operand::Literal(v.clone());
        }
        if let Value::String(s) = v
            && let Some(expr) = whole_variable(s)
        {
            return Operand::Variable(expr.to_string());
        }
        Operand::Template(v.clone())
    }
}

/// The expression of a string that is one variable and nothing else, cut
/// where `vars::substitute` cuts it: from the opening `{{` to the first
/// `}}`, with no `{{` between (a JMESPath literal's single braces, as in
/// `{{ a || \`{}\` }}`, are part of it).
fn whole_variable(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    if !s.starts_with("{{") {
        return None;
    }
    let mut i = 2;
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'{', b'{') => return None,
            (b'}', b'}') => return (i + 2 == b.len()).then(|| &s[2..i]),
            _ => i += 1,
        }
    }
    None
}

/// `any` / `all` conditions, or a legacy list (`all`), as written.
#[derive(Debug, Default)]
pub(crate) struct ConditionsDoc {
    pub(crate) any: Option<Vec<ConditionDoc>>,
    pub(crate) all: Option<Vec<ConditionDoc>>,
    /// Written as a list.
    pub(crate) legacy: bool,
}

/// One `{key, operator, value}` as written (`message` is not read).
#[derive(Debug, Deserialize)]
pub(crate) struct ConditionDoc {
    #[serde(default)]
    pub(crate) key: Value,
    pub(crate) operator: CondOp,
    #[serde(default)]
    pub(crate) value: Value,
}

impl<'de> Deserialize<'de> for ConditionsDoc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ConditionsDoc, D::Error> {
        struct Shape;
        impl<'de> Visitor<'de> for Shape {
            type Value = ConditionsDoc;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any/all conditions or a list of conditions")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ConditionsDoc, A::Error> {
                let all = Vec::deserialize(SeqAccessDeserializer::new(seq))?;
                Ok(ConditionsDoc {
                    any: None,
                    all: Some(all),
                    legacy: true,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ConditionsDoc, A::Error> {
                #[derive(Deserialize)]
                struct Block {
                    any: Option<Vec<ConditionDoc>>,
                    all: Option<Vec<ConditionDoc>>,
                }
                let Block { any, all } = Block::deserialize(MapAccessDeserializer::new(map))?;
                Ok(ConditionsDoc {
                    any,
                    all,
                    legacy: false,
                })
            }
        }
        d.deserialize_any(Shape)
    }
}

impl ConditionsDoc {
    /// Compiled: each operand sorted into a literal or a variable.
    pub(crate) fn compile(&self) -> Conditions {
        let list = |l: &Option<Vec<ConditionDoc>>| {
            l.as_ref().map(|l| {
                l.iter()
                    .map(|c| Condition {
                        op: c.operator,
                        key: Operand::new(&c.key),
                        value: Operand::new(&c.value),
                    })
                    .collect()
            })
        };
        Conditions {
            any: list(&self.any),
            all: list(&self.all),
        }
    }
}

impl Operand {
    /// The operand with its variables resolved; a literal is borrowed
    /// (most values: lists of allowed names), not copied.
    fn resolve<'v>(
        &'v self,
        vars: &dyn Source,
        cache: &ExprCache,
        delete: bool,
    ) -> Result<Cow<'v, Value>, String> {
        match self {
            Operand::Literal(v) => Ok(Cow::Borrowed(v)),
            Operand::Variable(expr) => {
                crate::vars::resolve(expr, vars, cache, delete).map(Cow::Owned)
            }
            Operand::Template(v) => substitute(v, vars, cache, delete).map(Cow::Owned),
        }
    }
}

impl Conditions {
    /// Whether they hold: one of `any` (when given) and every one of `all`
    /// (or of a legacy list). The first condition whose variables cannot
    /// be resolved is the error. `cache` holds the policy's compiled
    /// expressions; `delete` reads `request.object` as `oldObject`.
    pub(crate) fn hold(
        &self,
        vars: &dyn Source,
        cache: &ExprCache,
        delete: bool,
    ) -> Result<bool, String> {
        let one = |c: &Condition| -> Result<bool, String> {
            let key = c.key.resolve(vars, cache, delete)?;
            let value = c.value.resolve(vars, cache, delete)?;
            Ok(evaluate(c.op, &key, &value))
        };
        if let Some(any) = &self.any {
            let mut held = false;
            for c in any {
                if one(c)? {
                    held = true;
                    break;
                }
            }
            if !held {
                return Ok(false);
            }
        }
        for c in self.all.iter().flatten() {
            if !one(c)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Evaluates one condition on substituted `key` and `value`.
pub(crate) fn evaluate(op: CondOp, key: &Value, value: &Value) -> bool {
    match op {
        CondOp::Equals => equals(key, value),
        CondOp::NotEquals => !equals(key, value),
        CondOp::AnyIn => match key {
            Value::Array(keys) => any_in(&strings(keys), value, false),
            k => scalar_in(k, value).unwrap_or(false),
        },
        CondOp::AllIn | CondOp::In => match key {
            Value::Array(keys) => all_in(&strings(keys), value),
            k => scalar_in(k, value).unwrap_or(false),
        },
        CondOp::AnyNotIn => match key {
            Value::Array(keys) => any_in(&strings(keys), value, true),
            k => scalar_in(k, value).is_some_and(|found| !found),
        },
        CondOp::AllNotIn => match key {
            Value::Array(keys) => {
                let keys = strings(keys);
                !any_in(&keys, value, false) && value_list(value).is_some()
            }
            k => scalar_in(k, value).is_some_and(|found| !found),
        },
        CondOp::NotIn => match key {
            Value::Array(keys) => !all_in(&strings(keys), value) && value_list(value).is_some(),
            k => scalar_in(k, value).is_some_and(|found| !found),
        },
        CondOp::GreaterThan
        | CondOp::GreaterThanOrEquals
        | CondOp::LessThan
        | CondOp::LessThanOrEquals => numeric(op, key, value),
    }
}

fn strings(items: &[Value]) -> Vec<String> {
    items.iter().map(go_format).collect()
}

fn scalar_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(_) | Value::Bool(_) => Some(go_format(v)),
        _ => None,
    }
}

/// The list a value stands for: an array, a JSON array in a string, or the
/// string itself. `None` for other types.
fn value_list(value: &Value) -> Option<Vec<String>> {
    match value {
        Value::Array(items) => Some(strings(items)),
        Value::Number(_) => Some(vec![go_format(value)]),
        Value::String(s) => {
            if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(s) {
                return Some(strings(&items));
            }
            Some(vec![s.clone()])
        }
        _ => None,
    }
}

fn either_matches(a: &str, b: &str) -> bool {
    wildcard::matches(a, b) || wildcard::matches(b, a)
}

fn is_range(s: &str) -> bool {
    value::operator_of(s) == value::Op::InRange
}

/// Whether a scalar key is in `value`; `None` when the types do not fit.
fn scalar_in(key: &Value, value: &Value) -> Option<bool> {
    let key = scalar_string(key)?;
    match value {
        Value::Array(items) => Some(strings(items).iter().any(|v| either_matches(v, &key))),
        Value::String(s) => {
            if wildcard::matches(s, &key) {
                return Some(true);
            }
            if is_range(s) {
                return Some(value::validate(&Value::String(key), value));
            }
            match serde_json::from_str::<Value>(s) {
                Ok(Value::Array(items)) => Some(strings(&items).contains(&key)),
                Ok(_) | Err(_) => Some(*s == key),
            }
        }
        _ => None,
    }
}

fn in_range(key: &str, range: &str) -> bool {
    value::validate(
        &Value::String(key.to_string()),
        &Value::String(range.to_string()),
    )
}

fn any_in(keys: &[String], value: &Value, not_in: bool) -> bool {
    if let Value::String(s) = value {
        if keys.len() == 1 && keys[0] == *s {
            return !not_in;
        }
        if is_range(s) {
            return if not_in {
                let not_range = s.replacen('-', "!-", 1);
                keys.iter().any(|k| in_range(k, &not_range))
            } else {
                keys.iter().any(|k| in_range(k, s))
            };
        }
    }
    let Some(values) = value_list(value) else {
        return false;
    };
    if not_in {
        keys.iter()
            .any(|k| !values.iter().any(|v| either_matches(k, v)))
    } else {
        keys.iter()
            .any(|k| values.iter().any(|v| either_matches(k, v)))
    }
}

fn all_in(keys: &[String], value: &Value) -> bool {
    if let Value::String(s) = value {
        if keys.len() == 1 && keys[0] == *s {
            return true;
        }
        if is_range(s) {
            return keys.iter().all(|k| in_range(k, s));
        }
    }
    let Some(values) = value_list(value) else {
        return false;
    };
    keys.iter()
        .all(|k| values.iter().any(|v| either_matches(k, v)))
}

/// Kyverno's `parseDuration`: at least one side is a duration string; a
/// number on the other side counts as seconds.
fn durations(key: &Value, value: &Value) -> Option<(f64, f64)> {
    let dur = |v: &Value| match v {
        Value::String(s) if s != "0" => parse_duration(s),
        _ => None,
    };
    let (k, v) = (dur(key), dur(value));
    if k.is_none() && v.is_none() {
        return None;
    }
    let secs = |d: Option<f64>, raw: &Value| d.or_else(|| raw.as_f64());
    Some((secs(k, key)?, secs(v, value)?))
}

fn equals(key: &Value, value: &Value) -> bool {
    match key {
        Value::Bool(k) => value.as_bool() == Some(*k),
        Value::Number(k) => {
            let k = k.as_f64().unwrap_or(f64::NAN);
            match value {
                Value::Number(v) => v.as_f64() == Some(k),
                Value::String(s) => s.parse::<f64>().is_ok_and(|v| v == k),
                _ => false,
            }
        }
        Value::String(k) => {
            if let Some((a, b)) = durations(key, value) {
                return a == b;
            }
            if let (Some(a), Value::String(v)) = (Quantity::parse(k), value) {
                return Quantity::parse(v).is_some_and(|b| a == b);
            }
            match value {
                Value::String(v) => wildcard::matches(v, k),
                _ => false,
            }
        }
        Value::Object(_) | Value::Array(_) => key == value,
        Value::Null => value.is_null(),
    }
}

fn compare(op: CondOp, k: f64, v: f64) -> bool {
    match op {
        CondOp::GreaterThan => k > v,
        CondOp::GreaterThanOrEquals => k >= v,
        CondOp::LessThan => k < v,
        CondOp::LessThanOrEquals => k <= v,
        _ => false,
    }
}

fn numeric(op: CondOp, key: &Value, value: &Value) -> bool {
    let num_of = |v: &Value| match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse::<f64>().ok(),
        _ => None,
    };
    match key {
        Value::Number(k) => {
            let k = k.as_f64().unwrap_or(f64::NAN);
            if let Some((a, b)) = durations(key, value) {
                return compare(op, a, b);
            }
            num_of(value).is_some_and(|v| compare(op, k, v))
        }
        Value::String(k) => {
            if let Some((a, b)) = durations(key, value) {
                return compare(op, a, b);
            }
            if let (Some(a), Value::String(v)) = (Quantity::parse(k), value)
                && let Some(b) = Quantity::parse(v)
            {
                let ord = a.cmp_to(b) as i32 as f64;
                return compare(op, ord, 0.0);
            }
            if let Ok(kf) = k.parse::<f64>() {
                if let Some((a, b)) = durations(&Value::from(kf), value) {
                    return compare(op, a, b);
                }
                return num_of(value).is_some_and(|v| compare(op, kf, v));
            }
            if let (Ok(a), Value::String(v)) = (semver::Version::parse(k), value)
                && let Ok(b) = semver::Version::parse(v)
            {
                let ord = a.cmp(&b) as i32 as f64;
                return compare(op, ord, 0.0);
            }
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A string is one whole variable exactly when `vars::substitute`
    /// would return the variable's own (typed) value for it.
    #[test]
    fn whole_variables_are_cut_as_substitution_cuts_them() {
        for (s, want) in [
            ("{{ a.b }}", Some(" a.b ")),
            ("{{ a || `{}` }}", Some(" a || `{}` ")),
            (
                "{{ items(a || `{}`, 'k', 'v') | length(@) }}",
                Some(" items(a || `{}`, 'k', 'v') | length(@) "),
            ),
            ("x{{ a }}", None),
            ("{{ a }}x", None),
            ("{{ a }}{{ b }}", None),
            ("{{ {{ a }} }}", None),
            ("{{ a }", None),
            ("{{}}", Some("")),
            ("plain", None),
        ] {
            assert_eq!(whole_variable(s), want, "{s}");
        }
        assert!(matches!(
            Operand::new(&json!("{{ a || `{}` }}")),
            Operand::Variable(_)
        ));
        assert!(matches!(
            Operand::new(&json!("x-{{ a }}")),
            Operand::Template(_)
        ));
        assert!(matches!(
            Operand::new(&json!(["{{ a }}"])),
            Operand::Template(_)
        ));
        assert!(matches!(
            Operand::new(&json!(["a", "b"])),
            Operand::Literal(_)
        ));
    }

    #[test]
    fn operator_table() {
        use CondOp::*;
        for (op, key, value, want) in [
            (Equals, json!("abc"), json!("abc"), true),
            (Equals, json!("abc"), json!("a*"), true),
            (Equals, json!("abc"), json!("b*"), false),
            (Equals, json!(3), json!(3), true),
            (Equals, json!(3), json!("3"), true),
            (Equals, json!("1Gi"), json!("1024Mi"), true),
            (Equals, json!("1h"), json!("60m"), true),
            (Equals, json!(true), json!(true), true),
            (Equals, json!(true), json!("true"), false),
            (Equals, json!({"a": 1}), json!({"a": 1}), true),
            (Equals, json!(["a"]), json!(["a"]), true),
            (Equals, Value::Null, Value::Null, true),
            (Equals, Value::Null, json!(""), false),
            (NotEquals, json!("abc"), json!("abd"), true),
            (NotEquals, json!(""), json!(""), false),
            (AnyIn, json!("a"), json!(["a", "b"]), true),
            (AnyIn, json!("c"), json!(["a", "b"]), false),
            (AnyIn, json!(["c", "a"]), json!(["a", "b"]), true),
            (AnyIn, json!(["c", "d"]), json!(["a", "b"]), false),
            (AnyIn, json!(["nginx:1"]), json!(["nginx:*"]), true),
            (AnyIn, json!("CREATE"), json!(["CREATE", "UPDATE"]), true),
            (AnyIn, json!(5), json!("1-10"), true),
            (AnyIn, json!([5, 20]), json!("1-10"), true),
            (AnyIn, json!("a"), json!("[\"a\", \"b\"]"), true),
            (AllIn, json!(["a", "b"]), json!(["a", "b", "c"]), true),
            (AllIn, json!(["a", "d"]), json!(["a", "b", "c"]), false),
            (AllIn, json!([]), json!(["a"]), true),
            (AnyNotIn, json!(["a", "d"]), json!(["a", "b"]), true),
            (AnyNotIn, json!(["a", "b"]), json!(["a", "b"]), false),
            (AnyNotIn, json!("x"), json!(["a"]), true),
            (AllNotIn, json!(["c", "d"]), json!(["a", "b"]), true),
            (AllNotIn, json!(["c", "a"]), json!(["a", "b"]), false),
            (
                AllNotIn,
                json!("livenessProbe"),
                json!(["name", "image"]),
                true,
            ),
            (AllNotIn, json!("name"), json!(["name", "image"]), false),
            (NotIn, json!("c"), json!(["a", "b"]), true),
            (NotIn, json!("a"), json!(["a", "b"]), false),
            (In, json!("a"), json!(["a", "b"]), true),
            (GreaterThan, json!(5), json!(3), true),
            (GreaterThan, json!("5"), json!(3), true),
            (GreaterThan, json!(3), json!(5), false),
            (GreaterThanOrEquals, json!(3), json!(3), true),
            (LessThan, json!("500m"), json!("1"), true),
            (LessThan, json!("2Gi"), json!("1Gi"), false),
            (GreaterThan, json!("2h"), json!("1h"), true),
            (GreaterThan, json!("30m"), json!("1h"), false),
            (GreaterThan, json!(7200), json!("1h"), true),
            (LessThan, json!("1.2.3"), json!("1.10.0"), true),
            (LessThanOrEquals, json!(1), json!(1), true),
            (GreaterThan, json!("abc"), json!(1), false),
        ] {
            assert_eq!(evaluate(op, &key, &value), want, "{key} {op:?} {value}");
        }
    }

    #[test]
    fn operator_names() {
        assert_eq!(CondOp::parse("AnyNotIn"), Some(CondOp::AnyNotIn));
        assert_eq!(CondOp::parse("Equal"), Some(CondOp::Equals));
        // Kyverno's policy validation refuses other cases.
        assert_eq!(CondOp::parse("equals"), None);
        assert_eq!(
            CondOp::parse("DurationGreaterThan"),
            Some(CondOp::GreaterThan)
        );
        assert_eq!(CondOp::parse("Bogus"), None);
    }
}
