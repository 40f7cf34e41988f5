//! The JMESPath context of an evaluation and Kyverno's `{{ ... }}`
//! variable substitution.
//!
//! The context is an immutable tree of `Arc`ed JMESPath variables: adding a
//! rule's context entry or a foreach element copies only the top-level map,
//! never the resource.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::Arc;

use jmespath::{Rcvar, Variable};

use serde_json::{Map, Value};

pub(crate) use crate::jmespath::native::{Native, Partial, Root};

/// A compiled JMESPath expression.
pub(crate) type Expr = jmespath::Expression<'static>;

/// Converts JSON into a JMESPath variable without a serde round trip.
pub(crate) fn to_var(v: &Value) -> Rcvar {
    crate::jmespath::from_json(v)
}

/// Converts a JMESPath variable back into JSON (whole numbers as integers,
/// as Kyverno prints them).
pub(crate) fn from_var(v: &Variable) -> Value {
    crate::jmespath::to_json(v)
}

/// The evaluation context: `request`, `element`, rule context entries, ...
#[derive(Debug, Clone)]
pub(crate) struct Vars {
    root: Rcvar,
}

impl Vars {
    pub(crate) fn new(top: BTreeMap<String, Rcvar>) -> Vars {
        Vars {
            root: Arc::new(Variable::Object(top)),
        }
    }

    /// A copy with `key` set at the top level.
    pub(crate) fn with(&self, key: &str, value: Rcvar) -> Vars {
        let mut v = self.clone();
        v.set_path(&[key], value);
        v
    }

    /// Whether a top-level variable is set (and not null).
    pub(crate) fn has(&self, key: &str) -> bool {
        match &*self.root {
            Variable::Object(m) => m.get(key).is_some_and(|v| !v.is_null()),
            _ => false,
        }
    }

    /// Sets a dotted path (`request.operation`), creating maps on the way.
    /// A segment in double quotes may hold dots
    /// (`metadata.annotations."example.com/a"`), as Kyverno splits a
    /// variable's name (a CSV record with `.` for the comma).
    pub(crate) fn set_dotted(&mut self, dotted: &str, value: Rcvar) {
        let parts = split_dotted(dotted);
        let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
        self.set_path(&parts, value);
    }

    fn set_path(&mut self, parts: &[&str], value: Rcvar) {
        fn set(node: &mut Rcvar, parts: &[&str], value: Rcvar) {
            let Some((first, rest)) = parts.split_first() else {
                *node = value;
                return;
            };
            let var = Arc::make_mut(node);
            if !var.is_object() {
                *var = Variable::Object(BTreeMap::new());
            }
            if let Variable::Object(map) = var {
                let child = map
                    .entry((*first).to_string())
                    .or_insert_with(|| Arc::new(Variable::Null));
                set(child, rest, value);
            }
        }
        set(&mut self.root, parts, value);
    }

    /// Evaluates a compiled expression with Kyverno's rules: a key missing
    /// along a plain path is an error (`Unknown key "k" in path`).
    pub(crate) fn eval(&self, expr: &Expr) -> Result<Value, String> {
        crate::jmespath::search_strict_var(expr, &self.root)
            .map(|v| from_var(&v))
            .map_err(|e| e.to_string())
    }

    /// Evaluates a compiled expression against another value.
    pub(crate) fn eval_on(expr: &Expr, data: &Value) -> Result<Value, String> {
        crate::jmespath::search_strict(expr, data).map_err(|e| e.to_string())
    }
}

/// The segments of a dotted name: split at dots outside double quotes; a
/// quoted segment loses its quotes, and `""` inside it is one quote.
fn split_dotted(dotted: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = dotted.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            '"' if quoted => quoted = false,
            '"' if cur.is_empty() => quoted = true,
            '.' if !quoted => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    parts
}

/// Where substitution reads variables from: the JMESPath context, built
/// on demand, and, for a plain field chain, the request's JSON directly.
pub(crate) trait Source {
    /// The whole context (built on first use).
    fn vars(&self) -> &Vars;
    /// The value at a field chain (`["request", "object", "metadata",
    /// "name"]`) read without building the context, when this source can
    /// answer it exactly as the context would; `None` sends the lookup to
    /// the context.
    fn raw(&self, chain: &[String]) -> Option<Value>;
    /// The JSON of `request.object`, `request.oldObject` or `element`, for
    /// expressions evaluated in place ([`Native`]), when this source holds
    /// it exactly as the context would.
    fn root(&self, _: Root) -> Option<&Value> {
        None
    }
}

impl Source for Vars {
    fn vars(&self) -> &Vars {
        self
    }
    fn raw(&self, _: &[String]) -> Option<Value> {
        None
    }
}

/// A source's roots, for [`Native::eval`].
pub(crate) struct Roots<'s>(pub(crate) &'s dyn Source);

impl crate::jmespath::native::Roots for Roots<'_> {
    fn root(&self, r: Root) -> Option<&Value> {
        self.0.root(r)
    }
}

/// The names of a pure field chain (`a.b.c`, no functions, projections,
/// filters or literals), or `None`.
fn field_chain(ast: &jmespath::ast::Ast) -> Option<Vec<String>> {
    use jmespath::ast::Ast;
    match ast {
        Ast::Field { name, .. } => Some(vec![name.clone()]),
        Ast::Subexpr { lhs, rhs, .. } => {
            let mut chain = field_chain(lhs)?;
            match &**rhs {
                Ast::Field { name, .. } => chain.push(name.clone()),
                _ => return None,
            }
            Some(chain)
        }
        _ => None,
    }
}

/// Walks a field chain through JSON: `Some` only when every key is there
/// (JMESPath and Kyverno's strict mode agree on a full path); the value
/// comes back as the context would return it (through a JMESPath value, so
/// numbers read the same).
pub(crate) fn walk(root: &Value, chain: &[String]) -> Option<Value> {
    let mut at = root;
    for key in chain {
        at = at.as_object()?.get(key)?;
    }
    Some(match at {
        Value::String(_) | Value::Bool(_) | Value::Null => at.clone(),
        // Whole numbers a JMESPath (f64) value holds exactly.
        Value::Number(n) if n.as_i64().is_some_and(|i| i.abs() <= 1 << 53) => at.clone(),
        other => from_var(&to_var(other)),
    })
}

/// Compiles a JMESPath expression with Kyverno's functions.
pub(crate) fn compile(expr: &str) -> Result<Expr, String> {
    crate::jmespath::compile(expr)
}

/// Expressions compiled once per policy, looked up by their text.
#[derive(Debug, Default)]
pub(crate) struct ExprCache {
    /// One entry an expression, so that resolving a variable hashes its
    /// text once.
    exprs: HashMap<String, Cached>,
}

/// One compiled expression and the faster ways to evaluate it.
#[derive(Debug)]
struct Cached {
    expr: Arc<Expr>,
    /// A plain field chain, split.
    chain: Option<Vec<String>>,
    /// Evaluated in place on the request's JSON.
    native: Option<Native>,
    /// Reads only parts of the request's objects: evaluated by the crate
    /// on a context of just those parts.
    partial: Option<Partial>,
}

impl ExprCache {
    /// Finds and compiles every `{{ ... }}` of a document (non-nested ones).
    pub(crate) fn collect(&mut self, doc: &Value) -> Result<(), String> {
        match doc {
            Value::String(s) => self.add_scanned(s)?,
            Value::Array(a) => {
                for v in a {
                    self.collect(v)?;
                }
            }
            Value::Object(m) => {
                for (k, v) in m {
                    self.add_scanned(k)?;
                    self.collect(v)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn add_scanned(&mut self, s: &str) -> Result<(), String> {
        for (expr, braces) in scan_vars(s) {
            match self.add(&expr) {
                Err(_) if braces => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Compiles and caches one expression.
    pub(crate) fn add(&mut self, expr: &str) -> Result<(), String> {
        let expr = expr.trim();
        if self.exprs.contains_key(expr) || expr.contains("{{") {
            return Ok(());
        }
        let compiled = compile(expr).map_err(|e| format!("invalid JMESPath {expr:?}: {e}"))?;
        let chain = field_chain(compiled.as_ast());
        let native = Native::compile(&compiled);
        let partial = if native.is_none() {
            Partial::analyze(&compiled)
        } else {
            None
        };
        self.exprs.insert(
            expr.to_string(),
            Cached {
                expr: Arc::new(compiled),
                chain,
                native,
                partial,
            },
        );
        Ok(())
    }

    /// Evaluates `expr` (compiled) as the context of `vars` would:
    /// in place when it can, else through the context.
    pub(crate) fn eval(&self, expr: &str, vars: &dyn Source) -> Result<Value, String> {
        let cached = self.exprs.get(expr);
        if let Some(r) = cached
            .and_then(|c| c.native.as_ref())
            .and_then(|n| n.eval(&Roots(vars)))
        {
            return r.map_err(|e| e.to_string());
        }
        let compiled = match cached {
            Some(c) => c.expr.clone(),
            None => Arc::new(compile(expr)?),
        };
        match cached.and_then(|c| partial(c, vars)) {
            Some(context) => context.eval(&compiled),
            None => vars.vars().eval(&compiled),
        }
    }

    /// A foreach `list`'s elements (see [`Native::eval_items`]), borrowed
    /// from the request where they can be.
    pub(crate) fn eval_items<'s>(
        &'s self,
        expr: &str,
        vars: &'s (impl Source + crate::jmespath::native::Roots),
    ) -> Result<(Vec<std::borrow::Cow<'s, Value>>, bool), String> {
        use std::borrow::Cow;
        if let Some((r, float_free)) = self
            .exprs
            .get(expr)
            .and_then(|c| c.native.as_ref())
            .and_then(|n| n.eval_items(vars))
        {
            return r
                .map(|items| (items, float_free))
                .map_err(|e| e.to_string());
        }
        let items = match self.eval(expr, vars)? {
            Value::Array(items) => items.into_iter().map(Cow::Owned).collect(),
            Value::Null => Vec::new(),
            other => vec![Cow::Owned(other)],
        };
        Ok((items, false))
    }

    pub(crate) fn get(&self, expr: &str) -> Result<Arc<Expr>, String> {
        if let Some(c) = self.exprs.get(expr) {
            return Ok(c.expr.clone());
        }
        compile(expr).map(Arc::new)
    }
}

/// The part of the context an expression reads, when it reads only parts
/// of the request's objects and `vars` holds them.
fn partial(cached: &Cached, vars: &dyn Source) -> Option<Vars> {
    let root = cached.partial.as_ref()?.context(&Roots(vars))?;
    Some(Vars { root })
}

/// The `{{ ... }}` expressions of a string that hold no nested variable,
/// cut exactly as `substitute_str` cuts them (so a JMESPath literal with
/// braces, `{{ a || \`{}\` }}`, is found and cached too). The flag says
/// whether the text holds a brace of its own: such a cut may not be a whole
/// expression, so failing to compile it is left to evaluation.
pub(crate) fn scan_vars(s: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    // Open variables, innermost last: their text so far, and whether a
    // nested variable was opened inside (then the text is not final).
    let mut stack: Vec<(String, bool)> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if stack.is_empty() {
            if c == '\\' && next == Some('{') && chars.get(i + 2) == Some(&'{') {
                // Escaped `\{{ x }}`: literal up to its `}}`.
                let rest: String = chars[i + 1..].iter().collect();
                let end = rest.find("}}").map(|e| e + 2).unwrap_or(rest.len());
                i += 1 + rest[..end].chars().count();
                continue;
            }
            if c == '{' && next == Some('{') {
                stack.push((String::new(), false));
                i += 2;
                continue;
            }
            i += 1;
            continue;
        }
        if c == '{' && next == Some('{') {
            if let Some(top) = stack.last_mut() {
                top.1 = true;
            }
            stack.push((String::new(), false));
            i += 2;
            continue;
        }
        if c == '}' && next == Some('}') {
            if let Some((text, nested)) = stack.pop()
                && !nested
            {
                let braces = text.contains(['{', '}']);
                out.push((text.trim().to_string(), braces));
            }
            i += 2;
            continue;
        }
        if let Some(top) = stack.last_mut() {
            top.0.push(c);
        }
        i += 1;
    }
    out
}

/// Substitutes every `{{ ... }}` in keys and string leaves of `doc`.
pub(crate) fn substitute(
    doc: &Value,
    vars: &dyn Source,
    cache: &ExprCache,
    delete: bool,
) -> Result<Value, String> {
    match doc {
        Value::String(s) => substitute_str(s, vars, cache, delete),
        Value::Array(a) => a
            .iter()
            .map(|v| substitute(v, vars, cache, delete))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = if k.contains("{{") {
                    match substitute_str(k, vars, cache, delete)? {
                        Value::String(s) => s,
                        other => go_format(&other),
                    }
                } else {
                    k.clone()
                };
                out.insert(key, substitute(v, vars, cache, delete)?);
            }
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

/// Whether a document holds any variable.
pub(crate) fn has_vars(doc: &Value) -> bool {
    match doc {
        Value::String(s) => s.contains("{{"),
        Value::Array(a) => a.iter().any(has_vars),
        Value::Object(m) => m.iter().any(|(k, v)| k.contains("{{") || has_vars(v)),
        _ => false,
    }
}

pub(crate) fn resolve(
    name: &str,
    vars: &dyn Source,
    cache: &ExprCache,
    delete: bool,
) -> Result<Value, String> {
    let name = name.trim();
    let replaced;
    let name = if delete && name.contains("request.object") {
        replaced = name.replace("request.object", "request.oldObject");
        replaced.as_str()
    } else {
        name
    };
    let cached = cache.exprs.get(name);
    if let Some(v) = cached
        .and_then(|c| c.chain.as_ref())
        .and_then(|chain| vars.raw(chain))
    {
        return Ok(v);
    }
    let native = cached
        .and_then(|c| c.native.as_ref())
        .and_then(|n| n.eval(&Roots(vars)));
    let result = match native {
        Some(r) => r.map_err(|e| format!("failed to resolve {name}: {e}")),
        None => {
            let compiled = match cached {
                Some(c) => Ok(c.expr.clone()),
                None => compile(name).map(Arc::new),
            };
            compiled
                .map_err(|e| format!("invalid variable {{{{{name}}}}}: {e}"))
                .and_then(|expr| {
                    let partial = cached.and_then(|c| partial(c, vars));
                    partial
                        .as_ref()
                        .unwrap_or_else(|| vars.vars())
                        .eval(&expr)
                        .map_err(|e| format!("failed to resolve {name}: {e}"))
                })
        }
    };
    // A failing query is an error everywhere, preconditions included:
    // Kyverno 1.19's preconditions resolver returns the query's error
    // (`newPreconditionsVariableResolver`; its comment still says it
    // answers an empty string, as releases before did), and the rule
    // errors with `failed to evaluate preconditions: ...`.
    result
}

fn substitute_str(
    s: &str,
    vars: &dyn Source,
    cache: &ExprCache,
    delete: bool,
) -> Result<Value, String> {
    if !s.contains("{{") {
        return Ok(Value::String(s.to_string()));
    }
    // The common shape, one whole-string variable (`{{ request.object.x }}`),
    // keeps the value's type and needs no scan.
    if let Some(inner) = s.strip_prefix("{{").and_then(|r| r.strip_suffix("}}"))
        && !inner.contains(['{', '}', '\\'])
    {
        return resolve(inner, vars, cache, delete);
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::new();
    let mut stack: Vec<String> = Vec::new();
    let mut i = 0;
    let mut dirty = false;
    while i < chars.len() {
        let c = chars[i];
        if stack.is_empty() {
            if c == '\\' && chars.get(i + 1) == Some(&'{') && chars.get(i + 2) == Some(&'{') {
                // Escaped: `\{{ x }}` stays literal, without the backslash.
                let rest: String = chars[i + 1..].iter().collect();
                let end = rest.find("}}").map(|e| e + 2).unwrap_or(rest.len());
                out.push_str(&rest[..end]);
                i += 1 + rest[..end].chars().count();
                dirty = true;
                continue;
            }
            if c == '{' && chars.get(i + 1) == Some(&'{') {
                stack.push(String::new());
                i += 2;
                continue;
            }
            out.push(c);
            dirty = true;
            i += 1;
            continue;
        }
        if c == '{' && chars.get(i + 1) == Some(&'{') {
            stack.push(String::new());
            i += 2;
            continue;
        }
        if c == '}' && chars.get(i + 1) == Some(&'}') {
            let name = stack.pop().unwrap_or_default();
            let value = resolve(&name, vars, cache, delete)?;
            i += 2;
            if let Some(outer) = stack.last_mut() {
                outer.push_str(&embedded(&value));
            } else if !dirty && i == chars.len() {
                return Ok(value);
            } else {
                out.push_str(&embedded(&value));
                dirty = true;
            }
            continue;
        }
        if let Some(top) = stack.last_mut() {
            top.push(c);
        }
        i += 1;
    }
    // An unterminated `{{` is kept as text.
    for unfinished in stack {
        out.push_str("{{");
        out.push_str(&unfinished);
    }
    Ok(Value::String(out))
}

/// A value embedded in a longer string, as Kyverno's substitution writes
/// it (`substituteVarInPattern`): a string as is, anything else as
/// `json.Marshal` does (`{"app":"nginx"}`, `["a","b"]`, `3`, `true`,
/// `null`), so that a JMESPath literal built from it parses.
fn embedded(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        // Go's float64 encoding: integral values below 1e21 without a
        // fraction or exponent.
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// Go's `fmt.Sprintf("%v", v)` of a JSON value (messages, condition
/// values).
pub(crate) fn go_format(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => go_float(i as f64),
            None => go_float(n.as_f64().unwrap_or(0.0)),
        },
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(go_format).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_format(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`, with Go's
/// exponent form `1e+06`).
fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Shortest round-trip digits and exponent, via Rust's `{:e}`.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    // Go's shortest %g switches to the exponent form at 1e6 (1000000.0
    // prints as 1e+06) and below 1e-4.
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> Vars {
        let mut top = BTreeMap::new();
        top.insert(
            "request".to_string(),
            to_var(&json!({"object": {"metadata": {"name": "web", "labels": {"app": "x"}}, "spec": {"replicas": 3}}, "operation": "CREATE"})),
        );
        Vars::new(top)
    }

    fn sub(s: &str) -> Result<Value, String> {
        substitute(&json!(s), &vars(), &ExprCache::default(), false)
    }

    #[test]
    fn substitution_table() {
        for (input, want) in [
            ("{{request.object.metadata.name}}", json!("web")),
            ("{{ request.object.spec.replicas }}", json!(3)),
            ("name-{{request.object.metadata.name}}", json!("name-web")),
            ("n={{request.object.spec.replicas}}", json!("n=3")),
            ("{{request.object.metadata.labels}}", json!({"app": "x"})),
            (
                "l={{request.object.metadata.labels}}",
                json!(r#"l={"app":"x"}"#),
            ),
            ("{{request.object.metadata.missing || 'd'}}", json!("d")),
            (
                "x={{request.object.metadata.missing | length(@ || '')}}",
                json!("x=0"),
            ),
            ("{{ request.object.metadata.labels.{{'app'}} }}", json!("x")),
            ("\\{{ not.a.var }}", json!("{{ not.a.var }}")),
            ("plain", json!("plain")),
        ] {
            assert_eq!(sub(input).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn every_expression_substitution_reads_is_compiled_up_front() {
        // What `scan_vars` cuts must be what substitution looks up, braces
        // of JMESPath literals included, or the expression is compiled
        // again on every evaluation.
        for (doc, want) in [
            ("{{ a.b }}", vec!["a.b"]),
            ("x-{{a}}-{{ b }}", vec!["a", "b"]),
            ("{{ a || `{}` }}", vec!["a || `{}`"]),
            (
                "{{ items(a || `{}`, 'k', 'v') | length(@) }}",
                vec!["items(a || `{}`, 'k', 'v') | length(@)"],
            ),
            ("{{ a.{{'b'}} }}", vec!["'b'"]),
            ("\\{{ not.a.var }} {{ c }}", vec!["c"]),
        ] {
            let got: Vec<String> = scan_vars(doc).into_iter().map(|(e, _)| e).collect();
            assert_eq!(got, want, "{doc}");
            let mut cache = ExprCache::default();
            cache.collect(&json!(doc)).unwrap();
            for e in want {
                assert!(cache.exprs.contains_key(e), "{doc}: {e} not cached");
            }
        }
        // A cut holding braces that does not compile is left to evaluation;
        // one without braces is the policy's error.
        let mut cache = ExprCache::default();
        assert!(cache.collect(&json!("{{ `{\"a\":{\"b\":1}}` }}")).is_ok());
        assert!(cache.collect(&json!("{{ a[ }}")).is_err());
    }

    #[test]
    fn missing_keys_are_errors_in_preconditions_too() {
        let err = sub("{{request.object.metadata.missing}}").unwrap_err();
        assert!(err.contains("Unknown key \"missing\""), "{err}");
        let pre = substitute(
            &json!("{{request.object.metadata.missing}}"),
            &vars(),
            &ExprCache::default(),
            false,
        )
        .unwrap_err();
        assert!(pre.contains("Unknown key \"missing\""), "{pre}");
    }

    #[test]
    fn delete_reads_old_object() {
        let mut v = vars();
        v.set_dotted(
            "request.oldObject",
            to_var(&json!({"metadata": {"name": "old"}})),
        );
        let got = substitute(
            &json!("{{request.object.metadata.name}}"),
            &v,
            &ExprCache::default(),
            true,
        )
        .unwrap();
        assert_eq!(got, json!("old"));
    }

    #[test]
    fn go_float_format() {
        for (f, want) in [
            (3.0, "3"),
            (0.5, "0.5"),
            (1e21, "1e+21"),
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1.5e-5, "1.5e-05"),
        ] {
            assert_eq!(go_float(f), want, "{f}");
        }
    }

    #[test]
    fn dotted_values() {
        let mut v = vars();
        v.set_dotted("request.operation", to_var(&json!("UPDATE")));
        v.set_dotted("imageData.configData.config.Volumes", to_var(&json!("1")));
        let e = compile("request.operation").unwrap();
        assert_eq!(v.eval(&e).unwrap(), json!("UPDATE"));
        let e = compile("request.object.metadata.name").unwrap();
        assert_eq!(v.eval(&e).unwrap(), json!("web"));
        v.set_dotted(
            "request.object.metadata.annotations.\"example.com/a.b\"",
            to_var(&json!("true")),
        );
        let e = compile("request.object.metadata.annotations.\"example.com/a.b\"").unwrap();
        assert_eq!(v.eval(&e).unwrap(), json!("true"));
        assert_eq!(
            super::split_dotted("a.\"b.\"\"c\"\"\".d"),
            ["a", "b.\"c\"", "d"]
        );
    }
}
