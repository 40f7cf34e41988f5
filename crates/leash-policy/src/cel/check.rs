//! What can be checked of a CEL expression when it is compiled, before any
//! resource: every identifier is declared (a variable Kyverno binds, a
//! comprehension variable in scope, a type name) and every function it
//! calls exists, as cel-go's checker requires in Kyverno. `objct.spec`,
//! `variable.x` or `object.metadata.labls.exists(...)`-style typos of a
//! function (`startWith`) are then refused at load, naming the name,
//! instead of failing on every resource.
//!
//! Types are not checked: the `cel` crate has no checker, and without the
//! schemas of the matched resources most operands are `dyn` anyway.

use ::cel::common::ast::{EntryExpr, Expr as E};
use ::cel::{Context, IdedExpr};

use super::ENV;

/// The variables some Kyverno policy kind declares. leash binds all but
/// `authorizer` and `http` (an expression using those compiles as in
/// Kyverno and its evaluation says what is missing).
const ROOTS: &[&str] = &[
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "params",
    "variables",
    "resource",
    "globalContext",
    "image",
    "generator",
    "authorizer",
    "http",
    "envoy",
    // An ImageValidatingPolicy's: the matched images by container kind,
    // its attestations (by name) and attestors, an image reference in
    // `matchImageReferences` expressions, and the hidden receiver its
    // image verification functions expand into (see `libs::ivpol`).
    "images",
    "attestations",
    "attestors",
    "ref",
    "__ivpol",
];

/// Roots of Kyverno libraries leash does not implement (the authorizer):
/// calls on them compile as in Kyverno and fail when evaluated, saying so.
const UNIMPLEMENTED: &[&str] = &["authorizer"];

/// Type names an expression may use as values (`type(x) == string`).
const TYPES: &[&str] = &[
    "bool",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// The first undeclared name of `ast`, as cel-go names it.
pub(super) fn check(ast: &IdedExpr) -> Result<(), String> {
    let mut scope = Vec::new();
    walk(ast, &mut scope)
}

/// Macros with forms the parser does not expand (the two-variable
/// comprehensions `all(k, v, p)`, `exists(k, v, p)`, cel-go's
/// `transformList`/`transformMap`): their arguments bind names, so such a
/// call is not checked.
const MACROS: &[&str] = &[
    "all",
    "exists",
    "exists_one",
    "existsOne",
    "map",
    "filter",
    "transformList",
    "transformMap",
    "transformMapEntry",
];

/// Whether `name` is a function (global or member) of the environment.
fn declared(name: &str) -> bool {
    // The environment says only through `add_function`, which refuses a
    // name it declares; the probe context is thrown away.
    let mut probe = Context::with_env(ENV.clone());
    probe.add_function(name, |a: i64| a).is_err()
}

/// Whether `ns.name(...)` calls a namespaced library function
/// (`jsonpatch.escapeKey`, `base64.encode`), `ns` being no variable of a
/// policy kind (those that fetch data, `resource`, `http`, are roots).
pub(crate) fn is_namespaced_function(ns: &str, name: &str) -> bool {
    !ROOTS.contains(&ns) && declared(&format!("{ns}.{name}"))
}

/// An operator (`_==_`, `!_`, `@in`, ...): handled by the interpreter.
fn is_operator(name: &str) -> bool {
    !name.starts_with(|c: char| c.is_ascii_alphabetic())
}

/// The identifier a chain of selections and member calls starts from
/// (`http` of `http.Allowed().Response()`).
fn root(e: &IdedExpr) -> Option<&str> {
    match &e.expr {
        E::Ident(name) => Some(name),
        E::Select(s) => root(&s.operand),
        E::Call(c) => root(c.target.as_deref()?),
        _ => None,
    }
}

fn walk<'a>(e: &'a IdedExpr, scope: &mut Vec<&'a str>) -> Result<(), String> {
    match &e.expr {
        E::Ident(name) => {
            let known = scope.contains(&name.as_str())
                || ROOTS.contains(&name.as_str())
                || TYPES.contains(&name.as_str());
            if !known {
                return Err(format!("undeclared reference to '{name}'"));
            }
        }
        E::Call(call)
            if call
                .target
                .as_deref()
                .and_then(root)
                .is_some_and(|r| UNIMPLEMENTED.contains(&r)) =>
        {
            for arg in &call.args {
                walk(arg, scope)?;
            }
        }
        E::Call(call) if MACROS.contains(&call.func_name.as_str()) => {
            if let Some(target) = &call.target {
                walk(target, scope)?;
            }
        }
        E::Call(call) => {
            let name = call.func_name.as_str();
            // `base64.encode(x)`, `math.greatest(...)`: a namespaced function,
            // its namespace no variable.
            let namespaced = match call.target.as_deref().map(|t| &t.expr) {
                Some(E::Ident(ns))
                    if !scope.contains(&ns.as_str()) && !ROOTS.contains(&ns.as_str()) =>
                {
                    declared(&format!("{ns}.{name}")).then_some(())
                }
                _ => None,
            };
            if namespaced.is_none() {
                if !is_operator(name) && !declared(name) {
                    return Err(format!("undeclared reference to '{name}'"));
                }
                if let Some(target) = &call.target {
                    walk(target, scope)?;
                }
            }
            for arg in &call.args {
                walk(arg, scope)?;
            }
        }
        E::Select(select) => walk(&select.operand, scope)?,
        E::List(list) => {
            for element in &list.elements {
                walk(element, scope)?;
            }
        }
        E::Map(map) => {
            for entry in &map.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    walk(&m.key, scope)?;
                    walk(&m.value, scope)?;
                }
            }
        }
        E::Struct(s) => {
            for entry in &s.entries {
                if let EntryExpr::StructField(f) = &entry.expr {
                    walk(&f.value, scope)?;
                }
            }
        }
        E::Comprehension(c) => {
            walk(&c.iter_range, scope)?;
            walk(&c.accu_init, scope)?;
            let depth = scope.len();
            scope.push(c.iter_var.as_str());
            if let Some(v) = &c.iter_var2 {
                scope.push(v.as_str());
            }
            scope.push(c.accu_var.as_str());
            let inner = walk(&c.loop_cond, scope)
                .and_then(|()| walk(&c.loop_step, scope))
                .and_then(|()| walk(&c.result, scope));
            scope.truncate(depth);
            inner?;
        }
        E::Literal(_) | E::Unspecified => {}
        // Any later kind of node (optional selections are calls): nothing
        // to check.
        #[allow(unreachable_patterns)]
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(src: &str) -> Result<(), String> {
        check(&ENV.parser().parse(src).unwrap())
    }

    #[test]
    fn what_kyverno_declares_passes() {
        for src in [
            "object.spec.containers.all(c, c.image.startsWith('r/'))",
            "variables.x.exists(k, v, v == 'a') && has(object.metadata.labels)",
            "object.spec.containers.all(i, c, c.name != '' && i >= 0)",
            "object.spec.?initContainers.orValue([]).map(c, c.name).size() > 0",
            "base64.encode(b'x') != '' && math.greatest(1, 2) == 2",
            "type(object) == map && quantity('1Gi').isGreaterThan(quantity('1Mi'))",
            "cel.bind(x, object.metadata.name, x.lowerAscii() == x)",
            "[1, 2].filter(i, i > 1) == [2] && {'a': 1}.a == 1",
            "sets.contains([1], [1]) && 'a'.matches('a') && int('1') == 1",
            "resource.Get('v1', 'configmaps', 'ns', 'n').data.x == 'y'",
            "request.operation == 'CREATE' ? oldObject == null : true",
        ] {
            assert_eq!(checked(src), Ok(()), "{src}");
        }
    }

    #[test]
    fn undeclared_names_are_named() {
        for (src, name) in [
            ("objct.spec.replicas > 1", "objct"),
            ("variable.x == 1", "variable"),
            ("nosuch(object)", "nosuch"),
            ("object.metadata.name.startWith('a')", "startWith"),
            ("object.spec.containers.all(c, d.image == '')", "d"),
            ("[1].map(x, x) == [y]", "y"),
        ] {
            assert_eq!(
                checked(src),
                Err(format!("undeclared reference to '{name}'")),
                "{src}"
            );
        }
    }
}
