//! JMESPath with Kyverno's custom functions.
//!
//! Kyverno evaluates `{{ ... }}` variables as JMESPath. [`runtime`] holds the
//! standard functions of the `jmespath` crate plus every Kyverno function of
//! `pkg/engine/jmespath` (strings, arithmetic on numbers, Kubernetes
//! quantities and Go durations, time, semver, image references, random
//! strings). [`compile`] and [`search`] are the entry points; [`search_strict`]
//! additionally reports Kyverno's "unknown key" errors.
//!
//! # Differences from Kyverno's JMESPath that the caller must know
//!
//! * **Numbers.** Kyverno (Go) holds every number as `float64` and prints
//!   whole numbers without a fraction (`3`, not `3.0`). [`search`] returns
//!   whole finite numbers as JSON integers, and the Kyverno functions here
//!   produce integers when the result is whole. `to_string` is replaced so
//!   `` to_string(`3.0`) `` is `"3"` as in Go.
//! * **Missing keys.** Kyverno's interpreter raises `Unknown key "x" in path`
//!   when a field is looked up on an object that lacks it, but only along a
//!   plain path (`a.b.c`, `a[0].b`, the right side of `&&`); inside function
//!   arguments, `||`, pipes, projections, filters and comparisons the error is
//!   swallowed and the value is `null`. Standard JMESPath (and [`search`])
//!   always yields `null`. [`search_strict`] reproduces Kyverno's rule and
//!   returns [`SearchError::NotFound`]; variable substitution uses it to
//!   report unresolved variables.
//! * **Comparisons.** `<`, `<=`, `>`, `>=` between non-numbers give `null` in
//!   both implementations; `==`/`!=` compare deeply. Numbers compare as
//!   floats in both.
//! * **Syntax.** Recent Kyverno releases parse with jmespath-community, which
//!   adds arithmetic operators (`a + b`, `a - b`, `*`, `/`, `%`, `//`), `$`
//!   (root), `let` expressions and more functions. The `jmespath` 0.5 crate
//!   implements the original specification only, so such expressions fail to
//!   [`compile`]. None of the expressions in Kyverno's policy library need
//!   them (see the corpus test). Note that `a-b` inside an unquoted
//!   identifier is *not* valid in either: keys with `-` or `/` need quotes.
//! * **Raw strings** `'...'` are strings in both; `\'` is the only escape.
//! * **Variable text.** Kyverno trims spaces inside `{{ }}` and substitutes
//!   nested variables innermost first (`'{{ a }}'` inside an outer variable is
//!   replaced by the inner value's text before the outer one is evaluated).
//!   `{{@}}` and `element`/`elementIndex` are Kyverno context names, resolved
//!   by the caller's data, not by JMESPath. Escaped variables `\{{ }}` are
//!   left alone by Kyverno.
//! * **Argument errors** come from the `jmespath` crate's signature check for
//!   wrong types or arity, so their text differs from Kyverno's; errors raised
//!   by the functions themselves use Kyverno's text
//!   (`JMESPath function 'divide': Zero divisor passed`).
//! * **Null sub-expressions.** Go stops `a.f(@)` at a `null` `a` (result
//!   `null`); the `jmespath` crate would call `f(null)` and fail on the type.
//!   [`compile`] rewrites dotted steps so the Go behaviour holds; a pipe
//!   (`a | f(@)`) still calls `f(null)` in both.
//! * **Precedence traps** (same in both, but surprising): `!a.b` is `(!a).b`;
//!   a bare `[]` flattens `@` (use `` `[]` `` for an empty array).
//! * **Quantities first.** Arithmetic strings are read as Kubernetes
//!   quantities before Go durations, so `'30m'` is 30 milli, not 30 minutes;
//!   write `'30m0s'`.
//! * **Numbers as text** in `regex_*`, `pattern_match` and
//!   `object_from_lists` keys are printed as `float32` (Go's
//!   `FormatFloat(f, 'f', -1, 32)`), so `123456789` becomes `"123456790"`.
//! * **Regular expressions** use the `regex` crate (RE2 syntax like Go's),
//!   but `\d`, `\w`, `\s`, `\b` are Unicode-aware here and ASCII-only in Go.
//! * `parse_yaml` reads YAML 1.1 booleans (`y`, `yes`, `on`, `off`, `no`)
//!   as Kyverno's go-yaml does.
//! * `x509_decode` decodes a `CERTIFICATE` (`CERTIFICATE REQUEST`) into
//!   Go's `x509.Certificate` (`x509.CertificateRequest`) JSON layout with
//!   its own DER reader (`x509.rs`).
//!
//! # Functions
//!
//! Standard: `abs avg ceil contains ends_with floor join keys length map max
//! max_by merge min min_by not_null reverse sort sort_by starts_with to_array
//! to_number type values`, plus `to_string` (Go's number printing) and `sum`
//! (Kyverno's). Kyverno: `compare equal_fold replace replace_all to_upper
//! to_lower trim trim_prefix split regex_replace_all
//! regex_replace_all_literal regex_match pattern_match label_match
//! to_boolean add sum subtract multiply divide modulo round base64_decode
//! base64_encode path_canonicalize truncate semver_compare parse_json
//! parse_yaml lookup items object_from_lists random x509_decode md5 sha1 sha256
//! image_normalize time_since time_now time_now_utc time_add time_parse
//! time_to_cron time_utc time_diff time_before time_after time_between
//! time_truncate`.
//!
//! # Invariants
//! No lock, no task: the one `OnceLock` static holds the JMESPath runtime (every function registered), built
//! once by its first reader and read-only afterwards.

mod arithmetic;
#[cfg(test)]
mod corpus_tests;
pub(crate) mod duration;
pub(crate) mod hash;
mod image;
pub(crate) mod native;
pub(crate) mod quantity;
mod random;
mod semver;
mod strict;
mod strings;
mod time;
mod x509;

use std::sync::OnceLock;

use jmespath::ast::{Ast, Comparator, KeyValuePair};
use jmespath::functions::{ArgumentType, CustomFunction, Signature};
use jmespath::{Context, ErrorReason, JmespathError, Rcvar, Variable};
use serde_json::{Number, Value};

pub use strict::{SearchError, search_strict, search_strict_var};

/// The shared runtime: JMESPath's built-in functions plus Kyverno's.
pub fn runtime() -> &'static jmespath::Runtime {
    static RUNTIME: OnceLock<jmespath::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let mut rt = jmespath::Runtime::new();
        rt.register_builtin_functions();
        strings::register_all(&mut rt);
        arithmetic::register_all(&mut rt);
        time::register_all(&mut rt);
        semver::register_all(&mut rt);
        random::register_all(&mut rt);
        image::register_all(&mut rt);
        hash::register_all(&mut rt);
        rt
    })
}

/// Compiles `expr` with [`runtime`]. The error is the parser's message.
///
/// The tree is adjusted so that `a.f(@)` is `null` when `a` is `null`, as in
/// Go's JMESPath (the `jmespath` crate would call `f(null)`); pipes still
/// pass `null` on (`a | f(@)` calls `f(null)` in both).
pub fn compile(expr: &str) -> Result<jmespath::Expression<'static>, String> {
    let (ast, text) = parse_lenient(expr)?;
    Ok(jmespath::Expression::new(
        &text,
        null_safe(ast, &text),
        runtime(),
    ))
}

/// Parses `expr` as Kyverno's parser does, which (unlike the JMESPath
/// grammar) reads the key-value pairs of a multi-select hash without a
/// comma between them (`{op: 'add', path: p value: v}`): a pair that
/// follows a value directly gets its comma, and the parse is retried. The
/// text parsed is returned with the tree (the tree's offsets are into it).
fn parse_lenient(expr: &str) -> Result<(Ast, String), String> {
    let mut text = expr.to_string();
    // One retry per missing comma; each adds a character, so this ends.
    for _ in 0..=expr.len() {
        match jmespath::parse(&text) {
            Ok(ast) => return Ok((ast, text)),
            Err(e) => {
                let missing_comma = matches!(
                    &e.reason,
                    jmespath::ErrorReason::Parse(m)
                        if m.starts_with("Expected '}' or ',' -- found Identifier(")
                            || m.starts_with("Expected '}' or ',' -- found QuotedIdentifier(")
                );
                if !missing_comma || !text.is_char_boundary(e.offset) {
                    return Err(e.to_string());
                }
                text.insert(e.offset, ',');
            }
        }
    }
    jmespath::parse(&text)
        .map(|ast| (ast, text.clone()))
        .map_err(|e| e.to_string())
}

/// Guards the right side of every dotted step (`lhs.f(...)`, `lhs.[a, b]`)
/// so it yields `null` on a `null` left side (Go's sub-expressions stop at
/// `null`). Pipes are left alone.
fn null_safe(ast: Ast, text: &str) -> Ast {
    let b = |a: Box<Ast>| Box::new(null_safe(*a, text));
    match ast {
        Ast::Subexpr { offset, lhs, rhs } => {
            let is_pipe = text.as_bytes().get(offset) == Some(&b'|');
            let fo = offset;
            let rhs = b(rhs);
            let rhs = match *rhs {
                // Fields and indexes of null are null already.
                Ast::Field { .. } | Ast::Index { .. } => rhs,
                _ if is_pipe => rhs,
                _ => Box::new(Ast::Condition {
                    offset: fo,
                    predicate: Box::new(Ast::Comparison {
                        offset: fo,
                        comparator: Comparator::NotEqual,
                        lhs: Box::new(Ast::Identity { offset: fo }),
                        rhs: Box::new(Ast::Literal {
                            offset: fo,
                            value: Rcvar::new(Variable::Null),
                        }),
                    }),
                    then: rhs,
                }),
            };
            Ast::Subexpr {
                offset,
                lhs: b(lhs),
                rhs,
            }
        }
        Ast::Comparison {
            offset,
            comparator,
            lhs,
            rhs,
        } => Ast::Comparison {
            offset,
            comparator,
            lhs: b(lhs),
            rhs: b(rhs),
        },
        Ast::Condition {
            offset,
            predicate,
            then,
        } => Ast::Condition {
            offset,
            predicate: b(predicate),
            then: b(then),
        },
        Ast::Expref { offset, ast } => Ast::Expref {
            offset,
            ast: b(ast),
        },
        Ast::Flatten { offset, node } => Ast::Flatten {
            offset,
            node: b(node),
        },
        Ast::Function { offset, name, args } => Ast::Function {
            offset,
            name,
            args: args.into_iter().map(|a| null_safe(a, text)).collect(),
        },
        Ast::MultiList { offset, elements } => Ast::MultiList {
            offset,
            elements: elements.into_iter().map(|a| null_safe(a, text)).collect(),
        },
        Ast::MultiHash { offset, elements } => Ast::MultiHash {
            offset,
            elements: elements
                .into_iter()
                .map(|kv| KeyValuePair {
                    key: kv.key,
                    value: null_safe(kv.value, text),
                })
                .collect(),
        },
        Ast::Not { offset, node } => Ast::Not {
            offset,
            node: b(node),
        },
        Ast::Projection { offset, lhs, rhs } => Ast::Projection {
            offset,
            lhs: b(lhs),
            rhs: b(rhs),
        },
        Ast::ObjectValues { offset, node } => Ast::ObjectValues {
            offset,
            node: b(node),
        },
        Ast::And { offset, lhs, rhs } => Ast::And {
            offset,
            lhs: b(lhs),
            rhs: b(rhs),
        },
        Ast::Or { offset, lhs, rhs } => Ast::Or {
            offset,
            lhs: b(lhs),
            rhs: b(rhs),
        },
        leaf @ (Ast::Identity { .. }
        | Ast::Field { .. }
        | Ast::Index { .. }
        | Ast::Literal { .. }
        | Ast::Slice { .. }) => leaf,
    }
}

/// Evaluates a compiled expression against JSON data and returns JSON.
///
/// Whole finite numbers come back as integers (`3`, not `3.0`), as Kyverno
/// prints them.
pub fn search(expr: &jmespath::Expression<'_>, data: &Value) -> Result<Value, String> {
    Ok(to_json(&*search_var(expr, &from_json(data))?))
}

/// Evaluates a compiled expression against a JMESPath value (no JSON
/// conversion on the way in or out). Errors are [`error_message`] text.
pub fn search_var(expr: &jmespath::Expression<'_>, data: &Rcvar) -> Result<Rcvar, String> {
    let mut ctx = Context::new(expr.as_str(), runtime());
    jmespath::interpret(data, expr.as_ast(), &mut ctx).map_err(|e| error_message(&e))
}

/// Converts JSON to a JMESPath value.
pub fn from_json(v: &Value) -> Rcvar {
    Rcvar::new(match v {
        Value::Null => Variable::Null,
        Value::Bool(b) => Variable::Bool(*b),
        Value::Number(n) => Variable::Number(n.clone()),
        Value::String(s) => Variable::String(s.clone()),
        Value::Array(a) => Variable::Array(a.iter().map(from_json).collect()),
        Value::Object(o) => {
            Variable::Object(o.iter().map(|(k, x)| (k.clone(), from_json(x))).collect())
        }
    })
}

/// Converts a JMESPath value to JSON, turning whole floats into integers
/// (`3.0` becomes `3`), as Go prints them.
pub fn to_json(v: &Variable) -> Value {
    match v {
        Variable::Null | Variable::Expref(_) => Value::Null,
        Variable::Bool(b) => Value::Bool(*b),
        Variable::String(s) => Value::String(s.clone()),
        Variable::Number(n) => Value::Number(normalize_number(n)),
        Variable::Array(a) => Value::Array(a.iter().map(|x| to_json(x)).collect()),
        Variable::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), to_json(x))).collect())
        }
    }
}

pub(crate) fn normalize_number(n: &Number) -> Number {
    match n.as_f64().filter(|_| n.is_f64()).and_then(whole) {
        Some(i) => Number::from(i),
        None => n.clone(),
    }
}

/// `Some(i)` when `f` is a whole number that an `i64` holds exactly.
fn whole(f: f64) -> Option<i64> {
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
    (f.is_finite() && f.fract() == 0.0 && f.abs() <= LIMIT).then_some(f as i64)
}

/// The text of an evaluation error: a function's own message as Kyverno
/// words it (`JMESPath function 'divide': Zero divisor passed`), or the
/// crate's formatted message for type and arity errors.
///
/// Function errors travel as `ErrorReason::Parse` (the crate has no
/// free-text runtime error) and nothing else raises that reason at run
/// time, so `e.to_string()` on them reads "Parse error: ..."; use this
/// instead.
pub fn error_message(e: &JmespathError) -> String {
    match &e.reason {
        ErrorReason::Parse(msg) => msg.clone(),
        ErrorReason::Runtime(_) => e.to_string(),
    }
}

/// A number as a JMESPath value: an integer when whole, as Go prints it.
pub(crate) fn num(f: f64) -> Rcvar {
    Rcvar::new(match whole(f) {
        Some(i) => Variable::Number(Number::from(i)),
        None => Number::from_f64(f).map_or(Variable::Null, Variable::Number),
    })
}

/// A string as a JMESPath value.
pub(crate) fn string(s: impl Into<String>) -> Rcvar {
    Rcvar::new(Variable::String(s.into()))
}

/// A boolean as a JMESPath value.
pub(crate) fn boolean(b: bool) -> Rcvar {
    Rcvar::new(Variable::Bool(b))
}

/// Kyverno's message prefix: `JMESPath function 'name': msg`.
pub(crate) fn ferr(name: &str, msg: impl std::fmt::Display) -> String {
    format!("JMESPath function '{name}': {msg}")
}

/// Kyverno's "argument #n is not of type T" error (1-based `n`).
pub(crate) fn type_err(name: &str, n: usize, ty: &str) -> String {
    ferr(name, format!("argument #{n} is not of type {ty}"))
}

/// A function body: arguments already checked against the signature.
pub(crate) type Handler = fn(&[Rcvar]) -> Result<Rcvar, String>;

/// Registers `f` under `name` with a signature check first.
pub(crate) fn register(
    rt: &mut jmespath::Runtime,
    name: &'static str,
    inputs: Vec<ArgumentType>,
    f: Handler,
) {
    let sig = Signature::new(inputs, None);
    let func = CustomFunction::new(
        sig,
        Box::new(move |args: &[Rcvar], ctx: &mut Context<'_>| {
            f(args).map_err(|msg| JmespathError::from_ctx(ctx, ErrorReason::Parse(msg)))
        }),
    );
    rt.register_function(name, Box::new(func));
}

/// The string argument `i` (empty when the signature let another type in).
pub(crate) fn arg_str(args: &[Rcvar], i: usize) -> &str {
    args.get(i)
        .and_then(|a| a.as_string())
        .map_or("", String::as_str)
}

/// The number argument `i` (`0.0` when absent).
pub(crate) fn arg_num(args: &[Rcvar], i: usize) -> f64 {
    args.get(i).and_then(|a| a.as_number()).unwrap_or(0.0)
}

/// Go's `strconv.FormatFloat(f, 'f', -1, 32)`: shortest text that reads
/// back as the same `float32`.
pub(crate) fn go_float32_text(f: f64) -> String {
    format!("{}", f as f32)
}

/// Kyverno's `ifaceToString`: strings as is, numbers as `float32` text,
/// booleans as `true`/`false`; anything else is refused.
pub(crate) fn iface_to_string(v: &Variable) -> Option<String> {
    match v {
        Variable::String(s) => Some(s.clone()),
        Variable::Number(n) => Some(match n.as_i64() {
            Some(i) => go_float32_text(i as f64),
            None => go_float32_text(n.as_f64().unwrap_or(0.0)),
        }),
        Variable::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Go's `intNumber`: the number as an integer, or why it is not one.
pub(crate) fn int_number(f: f64) -> Result<i64, String> {
    if !f.is_finite() || f.trunc() != f {
        return Err(format!("expected an integer number but got: {}", go_g(f)));
    }
    if f.abs() >= 9.223_372_036_854_776e18 {
        return Err(format!(
            "number is outside the range of integer numbers: {}",
            go_g(f)
        ));
    }
    Ok(f as i64)
}

/// Approximates Go's `%g` for error messages.
fn go_g(f: f64) -> String {
    format!("{f}")
}

/// Argument types shorthand.
pub(crate) mod ty {
    use jmespath::functions::ArgumentType;

    /// A string.
    pub(crate) fn s() -> ArgumentType {
        ArgumentType::String
    }
    /// A number.
    pub(crate) fn n() -> ArgumentType {
        ArgumentType::Number
    }
    /// Anything.
    pub(crate) fn any() -> ArgumentType {
        ArgumentType::Any
    }
    /// An object.
    pub(crate) fn o() -> ArgumentType {
        ArgumentType::Object
    }
    /// An array.
    pub(crate) fn a() -> ArgumentType {
        ArgumentType::Array
    }
    /// A string or a number.
    pub(crate) fn sn() -> ArgumentType {
        ArgumentType::Union(vec![ArgumentType::String, ArgumentType::Number])
    }
    /// An object or an array.
    pub(crate) fn oa() -> ArgumentType {
        ArgumentType::Union(vec![ArgumentType::Object, ArgumentType::Array])
    }
}

/// Table-driven test support shared by the families.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;

    /// What a case expects.
    #[derive(Debug)]
    pub(crate) enum Want {
        /// This JSON value.
        Json(&'static str),
        /// An error containing this text.
        Err(&'static str),
    }

    /// Expression, input JSON, expectation.
    pub(crate) type Case = (&'static str, &'static str, Want);

    /// Runs every case and reports all failures at once.
    pub(crate) fn run(cases: &[Case]) {
        let mut failures = Vec::new();
        for (expr, input, want) in cases {
            let data: Value = serde_json::from_str(input).expect("test input is JSON");
            let got = super::compile(expr).and_then(|e| super::search(&e, &data));
            match (want, &got) {
                (Want::Json(j), Ok(v)) => {
                    let w: Value = serde_json::from_str(j).expect("expected value is JSON");
                    if &w != v {
                        failures.push(format!("{expr}: want {w}, got {v}"));
                    }
                }
                (Want::Err(t), Err(e)) => {
                    if !e.contains(t) {
                        failures.push(format!("{expr}: want error with {t:?}, got error {e:?}"));
                    }
                }
                (Want::Json(j), Err(e)) => {
                    failures.push(format!("{expr}: want {j}, got error {e}"))
                }
                (Want::Err(t), Ok(v)) => {
                    failures.push(format!("{expr}: want error {t:?}, got {v}"))
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} cases failed:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Case, Want::*, run};

    #[test]
    fn numbers_stay_integers() {
        let cases: &[Case] = &[
            ("a", r#"{"a": 3}"#, Json("3")),
            ("a", r#"{"a": 3.5}"#, Json("3.5")),
            ("`3.0`", "{}", Json("3")),
            ("to_string(`3.0`)", "{}", Json(r#""3""#)),
            (
                "to_string(a)",
                r#"{"a": {"b": 2.0}}"#,
                Json(r#""{\"b\":2}""#),
            ),
            ("to_string('x')", "{}", Json(r#""x""#)),
            ("floor(`2.5`)", "{}", Json("2")),
            ("a < b", r#"{"a": "x", "b": "y"}"#, Json("null")),
            ("a == b", r#"{"a": 1, "b": 1.0}"#, Json("true")),
            ("missing.x", "{}", Json("null")),
            // Go stops a dotted path at null; a pipe passes null on.
            ("a.keys(@)", "{}", Json("null")),
            ("a.keys(@)[0]", "{}", Json("null")),
            ("a.b.to_upper(@)", r#"{"a": {}}"#, Json("null")),
            ("a.keys(@)", r#"{"a": {"x": 1}}"#, Json(r#"["x"]"#)),
            ("a | keys(@)", "{}", Err("expects type object")),
            (
                "a[].to_upper(@)",
                r#"{"a": ["x", "y"]}"#,
                Json(r#"["X","Y"]"#),
            ),
            ("nope(@)", "{}", Err("undefined function")),
            ("a +", "{}", Err("")),
        ];
        run(cases);
    }

    /// Kyverno's parser reads a multi-select hash's pairs without commas
    /// between them; anything else missing is still an error.
    #[test]
    fn multi_select_hash_pairs_need_no_comma() {
        let cases: &[Case] = &[
            (
                "{op: 'add', path: a\n value: b}",
                r#"{"a": "/x", "b": 1}"#,
                Json(r#"{"op":"add","path":"/x","value":1}"#),
            ),
            (
                "[{x: a \"y\": b.c z: `3`}][0]",
                r#"{"a": 1, "b": {"c": 2}}"#,
                Json(r#"{"x":1,"y":2,"z":3}"#),
            ),
            ("{x: a 'y'}", "{}", Err("")),
            ("{x: a y}", "{}", Err("")),
        ];
        run(cases);
    }
}

#[cfg(test)]
mod api_tests {
    use super::*;

    #[test]
    fn function_errors_read_as_kyverno_words_them() {
        let e = compile("divide(`1`, `0`)").unwrap();
        assert_eq!(
            search(&e, &Value::Null).unwrap_err(),
            "JMESPath function 'divide': Zero divisor passed"
        );
        let e = compile("a.b").unwrap();
        let data = from_json(&serde_json::json!({"a": {"b": 2.0}}));
        assert_eq!(
            to_json(&search_var(&e, &data).unwrap()),
            serde_json::json!(2)
        );
        assert!(compile("a[").unwrap_err().contains("Parse error"));
    }
}
