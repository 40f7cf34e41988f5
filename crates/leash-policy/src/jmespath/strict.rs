//! Evaluation with Kyverno's "unknown key" rule.
//!
//! Kyverno's interpreter fails with `Unknown key "k" in path` when a field is
//! read from an object that lacks it, along a plain path only: `a.b`,
//! `a[0].b`, and the right side of `&&` pass the failure up; pipes, `||`,
//! function arguments, projections, filters, comparisons, `!` and
//! multi-selects turn it into `null`. The `jmespath` crate parses a pipe as a
//! sub-expression too, so pipes are told apart by the `|` at their offset.

use jmespath::ast::Ast;
use jmespath::{Context, Rcvar, Variable, interpret};
use serde_json::Value;

use super::{error_message, from_json, runtime, to_json};

/// Why [`search_strict`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchError {
    /// A field was missing along a plain path; the key is given. Kyverno
    /// reports this as `Unknown key "<key>" in path`.
    NotFound(String),
    /// Any other evaluation error (function errors, type errors).
    Other(String),
}

impl std::fmt::Display for SearchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchError::NotFound(key) => write!(f, "Unknown key \"{key}\" in path"),
            SearchError::Other(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for SearchError {}

/// Like [`super::search`], but a missing key along a plain path is
/// [`SearchError::NotFound`], as in Kyverno.
pub fn search_strict(expr: &jmespath::Expression<'_>, data: &Value) -> Result<Value, SearchError> {
    Ok(to_json(&*search_strict_var(expr, &from_json(data))?))
}

/// [`search_strict`] on a JMESPath value, without JSON conversion.
pub fn search_strict_var(
    expr: &jmespath::Expression<'_>,
    data: &Rcvar,
) -> Result<Rcvar, SearchError> {
    let text = expr.as_str();
    let mut ctx = Context::new(text, runtime());
    strict(data, expr.as_ast(), text, &mut ctx)
}

fn other(e: jmespath::JmespathError) -> SearchError {
    SearchError::Other(error_message(&e))
}

fn strict(
    data: &Rcvar,
    node: &Ast,
    text: &str,
    ctx: &mut Context<'_>,
) -> Result<Rcvar, SearchError> {
    match node {
        Ast::Field { name, .. } => match &**data {
            Variable::Object(m) => m
                .get(name)
                .cloned()
                .ok_or_else(|| SearchError::NotFound(name.clone())),
            _ => Ok(Rcvar::new(Variable::Null)),
        },
        Ast::Subexpr { offset, lhs, rhs } => {
            if text.as_bytes().get(*offset) == Some(&b'|') {
                return interpret(data, node, ctx).map_err(other);
            }
            let left = strict(data, lhs, text, ctx)?;
            if left.is_null() {
                return Ok(left);
            }
            strict(&left, rhs, text, ctx)
        }
        Ast::And { lhs, rhs, .. } => {
            let left = interpret(data, lhs, ctx).map_err(other)?;
            if !left.is_truthy() {
                return Ok(left);
            }
            strict(data, rhs, text, ctx)
        }
        _ => interpret(data, node, ctx).map_err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::super::compile;
    use super::{SearchError, search_strict};
    use serde_json::json;

    #[test]
    fn not_found_only_on_plain_paths() {
        let data = json!({"a": {"b": 1, "n": null, "s": "x", "l": [{"c": 2}]}});
        let cases: &[(&str, Result<serde_json::Value, SearchError>)] = &[
            ("a.b", Ok(json!(1))),
            ("a.n", Ok(json!(null))),
            ("a.n.x", Ok(json!(null))),
            ("a.s.x", Ok(json!(null))),
            ("a.x", Err(SearchError::NotFound("x".into()))),
            ("a.x.y", Err(SearchError::NotFound("x".into()))),
            ("x", Err(SearchError::NotFound("x".into()))),
            ("a.l[0].c", Ok(json!(2))),
            ("a.l[0].d", Err(SearchError::NotFound("d".into()))),
            ("a.l[5].d", Ok(json!(null))),
            ("a.x || 'd'", Ok(json!("d"))),
            ("a.x | length(@)", Err(SearchError::Other(String::new()))),
            ("a | x", Ok(json!(null))),
            ("length(a.x || '')", Ok(json!(0))),
            ("a.l[].d", Ok(json!([]))),
            ("a.b && a.x", Err(SearchError::NotFound("x".into()))),
            ("a.x && a.b", Ok(json!(null))),
            ("a.x == `null`", Ok(json!(true))),
            ("!(a.x)", Ok(json!(true))),
            ("[a.x]", Ok(json!([null]))),
        ];
        for (expr, want) in cases {
            let e = compile(expr).unwrap();
            let got = search_strict(&e, &data);
            match (want, &got) {
                (Err(SearchError::Other(_)), Err(SearchError::Other(_))) => {}
                _ => assert_eq!(&got, want, "{expr}"),
            }
        }
    }
}
