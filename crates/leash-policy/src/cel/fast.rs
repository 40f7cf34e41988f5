//! A fast path for the CEL that policies are mostly made of: field
//! selections (plain, optional, `has`), literals, boolean logic, equality
//! and ordering of scalars, `in`, `size`, list concatenation, the string
//! predicates, `orValue` and the comprehension macros (`all`, `exists`,
//! `exists_one`, `map`, `filter`), evaluated straight over the request's
//! JSON with nothing converted and nothing copied.
//!
//! It answers only when its answer is the interpreter's: every value it
//! produces is the value `cel` computes for the same expression, and on
//! anything else (a function it does not know, a missing field, a type the
//! operation does not take, an error of any kind, `request`, `params`, the
//! data libraries) it gives up with [`Fallback`], and the caller evaluates
//! the expression with the interpreter as before. Expressions are pure, so
//! evaluating again is sound. Most Pod Security checks, on most objects,
//! never leave this path; the interpreter's generic values (a boxed value
//! per JSON node, maps hashed per request, a call dispatched by name) cost
//! several times more per expression.

use std::rc::Rc;
use std::sync::LazyLock;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, Expr as Ast, IdedExpr, LiteralValue, operators,
};
use serde_json::Value as Json;

use super::Variable;

/// The fast path cannot answer: evaluate with the interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fallback;

type R<'a> = Result<V<'a>, Fallback>;

/// A value: JSON read in place, or built by the expression.
#[derive(Debug, Clone)]
enum V<'a> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Double(f64),
    Str(&'a str),
    OwnedStr(Rc<str>),
    List(&'a [Json]),
    Map(&'a serde_json::Map<String, Json>),
    /// A list the expression built (a literal, a concatenation, `map`).
    Built(Rc<Vec<V<'a>>>),
    Opt(Option<Rc<V<'a>>>),
}

impl<'a> V<'a> {
    /// A JSON value as `cel` types it (see `json::from_json`).
    fn of(j: &'a Json) -> V<'a> {
        match j {
            Json::Null => V::Null,
            Json::Bool(b) => V::Bool(*b),
            Json::Number(n) => {
                if let Some(i) = n.as_i64() {
                    V::Int(i)
                } else if let Some(u) = n.as_u64() {
                    V::UInt(u)
                } else {
                    V::Double(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Json::String(s) => V::Str(s),
            Json::Array(a) => V::List(a),
            Json::Object(m) => V::Map(m),
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            V::Str(s) => Some(s),
            V::OwnedStr(s) => Some(s),
            _ => None,
        }
    }

    fn bool(&self) -> Result<bool, Fallback> {
        match self {
            V::Bool(b) => Ok(*b),
            _ => Err(Fallback),
        }
    }

    /// The elements of a list, as values.
    fn elements(&self) -> Option<Vec<V<'a>>> {
        match self {
            V::List(items) => Some(items.iter().map(V::of).collect()),
            V::Built(items) => Some(items.as_ref().clone()),
            _ => None,
        }
    }

    fn len(&self) -> Option<usize> {
        match self {
            V::List(items) => Some(items.len()),
            V::Built(items) => Some(items.len()),
            V::Map(m) => Some(m.len()),
            _ => None,
        }
    }
}

static NULL: Json = Json::Null;
static EMPTY_MAP: LazyLock<serde_json::Map<String, Json>> = LazyLock::new(serde_json::Map::new);

/// The names an expression sees: the request's objects, the policy's
/// variables (evaluated when first read, each once), and the variables of
/// the comprehensions being evaluated.
pub(crate) struct Scope<'a> {
    object: &'a Json,
    old_object: &'a Json,
    vars: &'a [Variable],
    /// Each variable's value once read: `Some(Err)` when it fell back.
    values: Vec<Option<Result<V<'a>, Fallback>>>,
    /// How many of `vars` are visible: a variable sees only those before it.
    visible: usize,
    locals: Vec<(&'a str, V<'a>)>,
}

impl<'a> Scope<'a> {
    pub(crate) fn new(
        object: &'a Json,
        old_object: Option<&'a Json>,
        vars: &'a [Variable],
    ) -> Self {
        Scope {
            object,
            old_object: old_object.unwrap_or(&NULL),
            vars,
            values: vec![None; vars.len()],
            visible: vars.len(),
            locals: Vec::new(),
        }
    }

    /// Evaluates `e` to a bool, or falls back.
    pub(crate) fn eval_bool(&mut self, e: &'a IdedExpr) -> Result<bool, Fallback> {
        self.eval(e)?.bool()
    }

    fn eval(&mut self, e: &'a IdedExpr) -> R<'a> {
        match &e.expr {
            Ast::Literal(l) => literal(l),
            Ast::Ident(name) => self.ident(name),
            Ast::Select(s) => {
                if !s.test
                    && let Ast::Ident(root) = &s.operand.expr
                    && root == "variables"
                    && !self.is_local(root)
                {
                    return self.variable(&s.field);
                }
                match self.eval(&s.operand)? {
                    V::Map(m) if s.test => Ok(V::Bool(m.contains_key(&s.field))),
                    V::Map(m) => m.get(&s.field).map(V::of).ok_or(Fallback),
                    _ => Err(Fallback),
                }
            }
            Ast::Call(c) => self.call(c),
            Ast::Comprehension(c) => self.comprehension(c),
            // `{}`: an empty map (other map literals fall back).
            Ast::Map(m) if m.entries.is_empty() => Ok(V::Map(&EMPTY_MAP)),
            Ast::List(l) if l.optional_indices.is_empty() => {
                let items = l
                    .elements
                    .iter()
                    .map(|e| self.eval(e))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(V::Built(Rc::new(items)))
            }
            _ => Err(Fallback),
        }
    }

    fn is_local(&self, name: &str) -> bool {
        self.locals.iter().any(|(n, _)| *n == name)
    }

    fn ident(&mut self, name: &str) -> R<'a> {
        if let Some((_, v)) = self.locals.iter().rev().find(|(n, _)| *n == name) {
            return Ok(v.clone());
        }
        match name {
            "object" => Ok(V::of(self.object)),
            "oldObject" => Ok(V::of(self.old_object)),
            _ => Err(Fallback),
        }
    }

    /// `variables.<name>`: the last variable of that name among the visible
    /// ones, evaluated in its own scope (no comprehension variables, only
    /// the variables before it).
    fn variable(&mut self, name: &str) -> R<'a> {
        let vars = self.vars;
        let Some(i) = vars[..self.visible].iter().rposition(|v| v.name == name) else {
            return Err(Fallback);
        };
        if let Some(known) = &self.values[i] {
            return known.clone();
        }
        let locals = std::mem::take(&mut self.locals);
        let visible = std::mem::replace(&mut self.visible, i);
        let value = self.eval(vars[i].expr.ast());
        self.visible = visible;
        self.locals = locals;
        self.values[i] = Some(value.clone());
        value
    }

    fn comprehension(&mut self, c: &'a ComprehensionExpr) -> R<'a> {
        if c.iter_var2.is_some() {
            return Err(Fallback);
        }
        let range = self.eval(&c.iter_range)?;
        let items: Vec<V<'a>> = match &range {
            V::Map(m) => m.keys().map(|k| V::Str(k.as_str())).collect(),
            other => other.elements().ok_or(Fallback)?,
        };
        let mut accu = self.eval(&c.accu_init)?;
        let base = self.locals.len();
        for item in items {
            self.locals.push((&c.accu_var, accu));
            self.locals.push((&c.iter_var, item));
            let go = self.eval(&c.loop_cond).and_then(|v| v.bool());
            let step = match go {
                Ok(true) => self.eval(&c.loop_step),
                Ok(false) => {
                    // Stop: the accumulator is the one bound for this round.
                    self.locals.truncate(base + 1);
                    accu = self.locals.pop().map(|(_, v)| v).ok_or(Fallback)?;
                    break;
                }
                Err(f) => Err(f),
            };
            self.locals.truncate(base);
            accu = step?;
        }
        self.locals.push((&c.accu_var, accu));
        let result = self.eval(&c.result);
        self.locals.truncate(base);
        result
    }

    fn call(&mut self, c: &'a CallExpr) -> R<'a> {
        let f = c.func_name.as_str();
        if let Some(target) = &c.target {
            return self.method(f, target, &c.args);
        }
        match (f, c.args.as_slice()) {
            (operators::LOGICAL_AND, [a, b]) => {
                if !self.eval_bool(a)? {
                    return Ok(V::Bool(false));
                }
                Ok(V::Bool(self.eval_bool(b)?))
            }
            (operators::LOGICAL_OR, [a, b]) => {
                if self.eval_bool(a)? {
                    return Ok(V::Bool(true));
                }
                Ok(V::Bool(self.eval_bool(b)?))
            }
            (operators::LOGICAL_NOT, [a]) => Ok(V::Bool(!self.eval_bool(a)?)),
            (operators::NOT_STRICTLY_FALSE, [a]) => Ok(V::Bool(self.eval_bool(a)?)),
            (operators::CONDITIONAL, [cond, yes, no]) => {
                if self.eval_bool(cond)? {
                    self.eval(yes)
                } else {
                    self.eval(no)
                }
            }
            (operators::EQUALS, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                Ok(V::Bool(equal(&a, &b)?))
            }
            (operators::NOT_EQUALS, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                Ok(V::Bool(!equal(&a, &b)?))
            }
            (
                operators::LESS
                | operators::LESS_EQUALS
                | operators::GREATER
                | operators::GREATER_EQUALS,
                [a, b],
            ) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let ord = order(&a, &b)?;
                Ok(V::Bool(match f {
                    operators::LESS => ord.is_lt(),
                    operators::LESS_EQUALS => ord.is_le(),
                    operators::GREATER => ord.is_gt(),
                    _ => ord.is_ge(),
                }))
            }
            (operators::IN, [elem, range]) => {
                let (elem, range) = (self.eval(elem)?, self.eval(range)?);
                match &range {
                    V::Map(m) => Ok(V::Bool(m.contains_key(elem.str().ok_or(Fallback)?))),
                    V::List(items) => {
                        for item in items.iter() {
                            if equal(&elem, &V::of(item))? {
                                return Ok(V::Bool(true));
                            }
                        }
                        Ok(V::Bool(false))
                    }
                    V::Built(items) => {
                        for item in items.iter() {
                            if equal(&elem, item)? {
                                return Ok(V::Bool(true));
                            }
                        }
                        Ok(V::Bool(false))
                    }
                    _ => Err(Fallback),
                }
            }
            (operators::ADD, [a, b]) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                add(a, b)
            }
            (operators::SUBSTRACT, [a, b]) => match (self.eval(a)?, self.eval(b)?) {
                (V::Int(a), V::Int(b)) => a.checked_sub(b).map(V::Int).ok_or(Fallback),
                _ => Err(Fallback),
            },
            (operators::NEGATE, [a]) => match self.eval(a)? {
                V::Int(a) => a.checked_neg().map(V::Int).ok_or(Fallback),
                _ => Err(Fallback),
            },
            (operators::INDEX, [target, index]) => {
                let (target, index) = (self.eval(target)?, self.eval(index)?);
                index_into(&target, &index)?.ok_or(Fallback)
            }
            (operators::OPT_INDEX, [target, index]) => {
                let Some(target) = unwrap_optional(self.eval(target)?) else {
                    return Ok(V::Opt(None));
                };
                let index = self.eval(index)?;
                Ok(V::Opt(index_into(&target, &index)?.map(Rc::new)))
            }
            (operators::OPT_SELECT, [target, field]) => {
                let Some(target) = unwrap_optional(self.eval(target)?) else {
                    return Ok(V::Opt(None));
                };
                let field = self.eval(field)?;
                let field = field.str().ok_or(Fallback)?;
                // A target that is not a map has no field: none, as `cel`
                // gives.
                Ok(V::Opt(match target {
                    V::Map(m) => m.get(field).map(|v| Rc::new(V::of(v))),
                    _ => None,
                }))
            }
            ("size", [a]) => size(&self.eval(a)?),
            (super::compat::COMPAT_FUNCTION, [value, default]) => {
                // Both are evaluated, as a call's arguments are.
                let (value, default) = (self.eval(value)?, self.eval(default)?);
                Ok(match value {
                    V::Opt(Some(v)) => v.as_ref().clone(),
                    V::Opt(None) => default,
                    v => v,
                })
            }
            _ => Err(Fallback),
        }
    }

    fn method(&mut self, f: &str, target: &'a IdedExpr, args: &'a [IdedExpr]) -> R<'a> {
        match (f, args) {
            ("size", []) => size(&self.eval(target)?),
            ("hasValue", []) => match self.eval(target)? {
                V::Opt(v) => Ok(V::Bool(v.is_some())),
                _ => Err(Fallback),
            },
            ("startsWith" | "endsWith" | "contains", [arg]) => {
                let (s, a) = (self.eval(target)?, self.eval(arg)?);
                let (s, a) = (s.str().ok_or(Fallback)?, a.str().ok_or(Fallback)?);
                Ok(V::Bool(match f {
                    "startsWith" => s.starts_with(a),
                    "endsWith" => s.ends_with(a),
                    _ => s.contains(a),
                }))
            }
            _ => Err(Fallback),
        }
    }
}

/// The target of an optional selection or index: an optional's value, or
/// the value itself; None for an empty optional (the result is none).
fn unwrap_optional(v: V<'_>) -> Option<V<'_>> {
    match v {
        V::Opt(inner) => inner.map(|v| v.as_ref().clone()),
        v => Some(v),
    }
}

fn literal<'a>(l: &'a LiteralValue) -> R<'a> {
    Ok(match l {
        LiteralValue::Boolean(b) => V::Bool(*b.inner()),
        LiteralValue::Int(i) => V::Int(*i.inner()),
        LiteralValue::UInt(u) => V::UInt(*u.inner()),
        LiteralValue::Double(d) => V::Double(*d.inner()),
        LiteralValue::String(s) => V::Str(s.inner()),
        LiteralValue::Null => V::Null,
        LiteralValue::Bytes(_) => return Err(Fallback),
    })
}

/// Equality of values of one type (scalars and lists of them); values of
/// two types, maps and optionals fall back.
fn equal(a: &V<'_>, b: &V<'_>) -> Result<bool, Fallback> {
    if let (Some(a), Some(b)) = (a.str(), b.str()) {
        return Ok(a == b);
    }
    match (a, b) {
        (V::Null, V::Null) => Ok(true),
        (V::Bool(a), V::Bool(b)) => Ok(a == b),
        (V::Int(a), V::Int(b)) => Ok(a == b),
        (V::UInt(a), V::UInt(b)) => Ok(a == b),
        (V::Double(a), V::Double(b)) => Ok(a == b),
        (V::List(_) | V::Built(_), V::List(_) | V::Built(_)) => {
            let (a, b) = (a.elements().ok_or(Fallback)?, b.elements().ok_or(Fallback)?);
            if a.len() != b.len() {
                return Ok(false);
            }
            for (x, y) in a.iter().zip(&b) {
                if !equal(x, y)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        _ => Err(Fallback),
    }
}

/// Ordering of two ints, uints, doubles (not NaN) or strings.
fn order(a: &V<'_>, b: &V<'_>) -> Result<std::cmp::Ordering, Fallback> {
    if let (Some(a), Some(b)) = (a.str(), b.str()) {
        return Ok(a.cmp(b));
    }
    match (a, b) {
        (V::Int(a), V::Int(b)) => Ok(a.cmp(b)),
        (V::UInt(a), V::UInt(b)) => Ok(a.cmp(b)),
        (V::Double(a), V::Double(b)) => a.partial_cmp(b).ok_or(Fallback),
        _ => Err(Fallback),
    }
}

fn add<'a>(a: V<'a>, b: V<'a>) -> R<'a> {
    if let (Some(x), Some(y)) = (a.str(), b.str()) {
        return Ok(V::OwnedStr(Rc::from(format!("{x}{y}"))));
    }
    match (&a, &b) {
        (V::Int(x), V::Int(y)) => x.checked_add(*y).map(V::Int).ok_or(Fallback),
        (V::UInt(x), V::UInt(y)) => x.checked_add(*y).map(V::UInt).ok_or(Fallback),
        (V::Double(x), V::Double(y)) => Ok(V::Double(x + y)),
        (V::List(_) | V::Built(_), V::List(_) | V::Built(_)) => {
            let mut items = a.elements().ok_or(Fallback)?;
            items.extend(b.elements().ok_or(Fallback)?);
            Ok(V::Built(Rc::new(items)))
        }
        _ => Err(Fallback),
    }
}

fn size<'a>(v: &V<'a>) -> R<'a> {
    if let Some(s) = v.str() {
        return Ok(V::Int(s.chars().count() as i64));
    }
    let n = v.len().ok_or(Fallback)?;
    i64::try_from(n).map(V::Int).map_err(|_| Fallback)
}

/// `target[index]`: `Some` of a present key or an index in range, `None`
/// for a missing key or an index out of range; other types fall back.
fn index_into<'a>(target: &V<'a>, index: &V<'a>) -> Result<Option<V<'a>>, Fallback> {
    match (target, index) {
        (V::Map(m), k) => Ok(m.get(k.str().ok_or(Fallback)?).map(V::of)),
        (V::List(items), V::Int(i)) => Ok(usize::try_from(*i)
            .ok()
            .and_then(|i| items.get(i))
            .map(V::of)),
        (V::Built(items), V::Int(i)) => {
            Ok(usize::try_from(*i).ok().and_then(|i| items.get(i)).cloned())
        }
        _ => Err(Fallback),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cel::{Activation, Expr};
    use crate::request::{EvalRequest, NoClusterData};

    fn pod() -> Json {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"a/b": "x", "c": "runtime/default"}},
            "spec": {
                "hostNetwork": false,
                "securityContext": {"runAsNonRoot": true, "seLinuxOptions": {"type": "container_t"}},
                "containers": [
                    {"name": "a", "image": "nginx", "ports": [{"containerPort": 80, "hostPort": 0}],
                     "securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                                         "allowPrivilegeEscalation": false}},
                    {"name": "b", "image": "busybox", "securityContext": {"privileged": true},
                     "resources": {"limits": {"cpu": 1.5}}}
                ],
                "initContainers": [{"name": "i", "image": "alpine"}]
            }
        })
    }

    /// The fast path's answer and the interpreter's (None: fell back).
    fn both(expr: &str, vars: &[(&str, &str)]) -> (Option<Result<bool, ()>>, Result<bool, String>) {
        let object = pod();
        let variables: Vec<Variable> = vars
            .iter()
            .map(|(n, src)| Variable::new(n.to_string(), Expr::compile(src).unwrap()))
            .collect();
        let e = Expr::compile(expr).unwrap();
        let fast = match Scope::new(&object, None, &variables).eval(e.ast()) {
            Ok(V::Bool(b)) => Some(Ok(b)),
            Ok(_) => Some(Err(())),
            Err(Fallback) => None,
        };
        let req = EvalRequest::create(Arc::new(object.clone()));
        let mut act = Activation::new(&req, &NoClusterData);
        act.bind_variables(&variables);
        (fast, e.eval_bool(&act))
    }

    #[test]
    fn answers_as_the_interpreter_does() {
        let containers = (
            "containers",
            "object.spec.containers + object.spec.?initContainers.orValue([]) + object.spec.?ephemeralContainers.orValue([])",
        );
        let cases: &[(&str, bool)] = &[
            ("object.metadata.name == 'p'", true),
            ("object.metadata.name != 'p'", false),
            (
                "has(object.spec.hostNetwork) && !object.spec.hostNetwork",
                true,
            ),
            ("!has(object.spec.hostPID)", true),
            ("object.spec.?hostPID.orValue(false) == false", true),
            (
                "object.spec.?securityContext.?runAsNonRoot.orValue(false)",
                true,
            ),
            ("object.spec.?nope.?deeper.orValue('d') == 'd'", true),
            ("object.metadata.name.orValue('') == 'p'", true),
            (
                "object.spec.containers.size() == 2 && size(object.spec.containers) == 2",
                true,
            ),
            ("object.metadata.name.size() == 1", true),
            ("object.spec.containers.all(c, c.image != '')", true),
            ("object.spec.containers.exists(c, c.name == 'b')", true),
            (
                "object.spec.containers.exists_one(c, c.name.startsWith('a'))",
                true,
            ),
            ("object.spec.containers.map(c, c.name) == ['a', 'b']", true),
            (
                "object.spec.containers.filter(c, c.name == 'b').size() == 1",
                true,
            ),
            (
                "object.metadata.annotations.all(k, !k.startsWith('a/') || object.metadata.annotations[k] == 'x')",
                true,
            ),
            (
                "'c' in object.metadata.annotations && !('z' in object.metadata.annotations)",
                true,
            ),
            (
                "object.spec.containers[0].ports.all(p, p.?hostPort.orValue(0) == 0)",
                true,
            ),
            ("object.spec.containers[1].resources.limits.cpu > 1.0", true),
            (
                "object.spec.containers[0].ports[0].containerPort >= 80 && object.spec.containers[0].ports[0].containerPort < 81",
                true,
            ),
            ("object.spec.containers[?5].hasValue()", false),
            ("object.metadata[?'name'].orValue('') == 'p'", true),
            (
                "'NET_BIND_SERVICE' in object.spec.containers[0].securityContext.capabilities.add",
                true,
            ),
            (
                "object.spec.containers[0].image.endsWith('inx') && object.spec.containers[0].image.contains('gin')",
                true,
            ),
            ("(object.metadata.name + '-x') == 'p-x'", true),
            ("[1, 2] + [3] == [1, 2, 3]", true),
            ("1 + 2 == 3 && 3 - 1 == 2 && -1 < 0", true),
            ("object.spec.hostNetwork ? false : true", true),
            ("variables.containers.size() == 3", true),
            (
                "variables.containers.all(c, c.?securityContext.?privileged.orValue(false) == false)",
                false,
            ),
            (
                "[object.spec.?securityContext.?seLinuxOptions.orValue({})].all(o, !has(o.type) || o.type in ['container_t'])",
                true,
            ),
            ("{}.size() == 0", true),
        ];
        for (expr, want) in cases {
            let (fast, slow) = both(expr, &[containers]);
            assert_eq!(slow, Ok(*want), "interpreter on {expr}");
            assert_eq!(fast, Some(Ok(*want)), "fast path on {expr}");
        }
    }

    #[test]
    fn falls_back_where_it_cannot_be_sure() {
        let cases = [
            // errors: a missing field, a type an operator does not take
            "object.spec.hostPID == false",
            "object.metadata.name == 1",
            "object.metadata.name < 1",
            "object.spec.containers[7].name == 'a'",
            "object.metadata.name + 1 == 'p1'",
            // what it does not evaluate
            "request.operation == 'CREATE'",
            "params == null",
            "object.metadata.name.matches('^p$')",
            "{'a': 1}.a == 1",
            "b'x' == b'x'",
            "object.spec.containers.all(i, c, c.name != '')",
            "variables.undefined == 1",
            "optional.of(1).hasValue()",
            "int(object.spec.containers.size()) == 2",
            // equality of values of two types and of maps
            "object.spec.containers[1].resources.limits.cpu == 1",
            "object.spec.securityContext == object.spec.securityContext",
            "object.spec.containers.exists(c, c.name == 'b' && c.missing == 1)",
        ];
        for expr in cases {
            let (fast, slow) = both(expr, &[]);
            assert_eq!(
                fast, None,
                "fast path answered {expr} (the interpreter: {slow:?})"
            );
        }
    }

    #[test]
    fn variables_see_only_the_variables_before_them() {
        let (fast, slow) = both("variables.b == 1", &[("b", "variables.a"), ("a", "1")]);
        assert_eq!(fast, None);
        assert!(slow.is_err(), "{slow:?}");
        let (fast, slow) = both("variables.b == 1", &[("a", "1"), ("b", "variables.a")]);
        assert_eq!((fast, slow), (Some(Ok(true)), Ok(true)));
        // The last definition of a name wins.
        let (fast, slow) = both("variables.a == 2", &[("a", "1"), ("a", "2")]);
        assert_eq!((fast, slow), (Some(Ok(true)), Ok(true)));
    }
}
