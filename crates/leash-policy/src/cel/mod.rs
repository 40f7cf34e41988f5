//! CEL: `validate.cel` of classic rules, with Kubernetes' and Kyverno's CEL
//! libraries.
//!
//! # Why our own libraries
//!
//! The `kube-cel` crate ports Kubernetes' CEL libraries to Rust, but it is
//! pinned to `cel` 0.13, whose parser rejects CEL's optional syntax
//! (`object.spec.?initContainers.orValue([])`, `m[?'k']`), which most
//! Kyverno ValidatingPolicies use. `cel` 0.15 parses it and ships cel-go's
//! `strings`, `lists`, `math` and `encoders` extensions, so we build on 0.15
//! and port the few Kubernetes and Kyverno functions the policies need on top
//! of it (see [`libs`](self) source): lists (`isSorted`, `sum`, `min`, `max`,
//! `indexOf`, `lastIndexOf`), sets (`sets.contains`, `sets.equivalent`,
//! `sets.intersects`), `jsonpatch.escapeKey`, the `cel.bind` macro, regex (`find`, `findAll`), `quantity`, `url`,
//! `ip`/`cidr`, `semver`, Kyverno's `image`, `resource.Get/List` and
//! `globalContext.Get`, and Kyverno's `orValue` on a value that is not an
//! optional (it returns the value, as cel-go before v0.28; see `compat`).
//!
//! # Evaluation model
//!
//! One [`cel::Env`] with every library is built once (a `LazyLock`) and
//! shared; compiled expressions (parsed ASTs) are immutable and `Send + Sync` and are
//! shared behind `Arc`s. Each evaluation builds a fresh [`cel::Context`] on
//! that environment holding the activation (`object`, `oldObject`,
//! `request`, `namespaceObject`, `params`, `variables`) and two data handles
//! (`resource`, `globalContext`) that borrow the caller's [`ClusterData`] for
//! the evaluation only. Variables are evaluated in order, each seeing the
//! ones before it; a variable that fails is left out of `variables`, and an
//! expression that then reads it fails with that variable's error (the
//! effect of Kubernetes' lazy variables: an unused failing variable is
//! harmless).

mod bind;
mod compat;
mod json;
mod jsonpatch;
pub(crate) mod libs;
pub(crate) mod rule;
mod sets;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use ::cel::objects::{Key, Map};
use ::cel::{Context, Env, ExecutionError, IdedExpr, Value};

use crate::request::{ClusterData, EvalRequest};

pub use rule::CelRule;

pub(crate) use json::from_json;

/// The environment every program is compiled and run with.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Registration only fails on a duplicate declaration, a bug caught by
    // the tests; never abort the process for it.
    let _ = env.add_extension(::cel::extensions::strings);
    let _ = env.add_extension(::cel::extensions::lists);
    let _ = env.add_extension(::cel::extensions::math);
    let _ = env.add_extension(::cel::extensions::encoders);
    libs::register(&mut env);
    jsonpatch::register(&mut env);
    sets::register(&mut env);
    bind::register(&mut env);
    compat::register(&mut env);
    Arc::new(env)
});

/// One compiled CEL expression and its source: the parsed expression, its
/// macros expanded (what a `cel::Program` holds), kept as an AST so that a
/// caller can rewrite it once at compile time (see [`Expr::compile_rewritten`]).
#[derive(Debug, Clone)]
pub(crate) struct Expr {
    source: Arc<str>,
    ast: Arc<IdedExpr>,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Expr>();
};

impl Expr {
    /// Compiles `source`; the error is the parser's message.
    pub(crate) fn compile(source: &str) -> Result<Expr, String> {
        Expr::compile_rewritten(source, |_| Ok(()))
    }

    /// Compiles `source` and then transforms its AST with `rewrite` (which
    /// may reject it with a message); the result is evaluated like any
    /// other expression.
    pub(crate) fn compile_rewritten(
        source: &str,
        rewrite: impl FnOnce(&mut IdedExpr) -> Result<(), String>,
    ) -> Result<Expr, String> {
        let mut ast = ENV.parser().parse(source).map_err(|e| e.to_string())?;
        rewrite(&mut ast)?;
        Ok(Expr {
            source: Arc::from(source),
            ast: Arc::new(ast),
        })
    }

    /// The expression's source text.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The parsed expression.
    pub(crate) fn ast(&self) -> &IdedExpr {
        &self.ast
    }

    /// Evaluates in `act`; the error is the evaluation error's text.
    pub(crate) fn eval(&self, act: &Activation<'_>) -> Result<Value, String> {
        let ctx = act.context();
        match Value::resolve(&self.ast, &ctx) {
            Ok(v) => Ok(v),
            Err(e) => Err(act.explain(&e)),
        }
    }

    /// Evaluates to a bool; other results are an error.
    pub(crate) fn eval_bool(&self, act: &Activation<'_>) -> Result<bool, String> {
        match self.eval(act)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{}' resulted in a {} value, expected bool",
                self.source,
                other.type_of()
            )),
        }
    }

    /// Evaluates to a string (a message expression).
    pub(crate) fn eval_string(&self, act: &Activation<'_>) -> Result<String, String> {
        match self.eval(act)? {
            Value::String(s) => Ok(s.to_string()),
            other => Err(format!(
                "expression '{}' resulted in a {} value, expected string",
                self.source,
                other.type_of()
            )),
        }
    }
}

/// A named variable (`variables.<name>`).
#[derive(Debug, Clone)]
pub(crate) struct Variable {
    pub(crate) name: String,
    pub(crate) expr: Expr,
}

/// The values an expression sees. The objects are converted into the
/// interpreter's values once, into `base`; every expression runs in an inner
/// scope of it that adds `variables` (converting `object` per expression
/// was most of a CEL evaluation's time).
pub(crate) struct Activation<'a> {
    base: Context<'a, 'a>,
    variables: HashMap<Key, Value>,
    /// Variables that failed, with their error.
    failed: Vec<(String, String)>,
    data: &'a dyn ClusterData,
}

impl<'a> Activation<'a> {
    /// The activation of an admission request (or a background scan).
    pub(crate) fn new(req: &EvalRequest, data: &'a dyn ClusterData) -> Activation<'a> {
        Activation::with_objects(
            req,
            from_json(&req.object),
            req.old_object
                .as_deref()
                .map(from_json)
                .unwrap_or(Value::Null),
            data,
        )
    }

    /// As [`Activation::new`] with the objects given (already converted).
    pub(crate) fn with_objects(
        req: &EvalRequest,
        object: Value,
        old_object: Value,
        data: &'a dyn ClusterData,
    ) -> Activation<'a> {
        let mut base = Context::with_env(ENV.clone());
        bind(&mut base, "object", object);
        bind(&mut base, "oldObject", old_object);
        bind(&mut base, "request", request_value(req));
        bind(&mut base, "namespaceObject", namespace_object(req));
        bind(&mut base, "params", Value::Null);
        libs::bind_data(&mut base, data);
        Activation {
            base,
            variables: HashMap::new(),
            failed: Vec::new(),
            data,
        }
    }

    /// Evaluates `vars` in order into `variables`.
    pub(crate) fn bind_variables(&mut self, vars: &[Variable]) {
        for var in vars {
            match var.expr.eval(self) {
                Ok(v) => {
                    self.variables
                        .insert(Key::String(Arc::new(var.name.clone())), v);
                }
                Err(e) => self.failed.push((var.name.clone(), e)),
            }
        }
    }

    /// Rebinds `object` (a mutating policy's next mutation sees the object
    /// the previous one produced); variables already evaluated keep their
    /// values.
    pub(crate) fn set_object(&mut self, object: Value) {
        bind(&mut self.base, "object", object);
    }

    fn context(&self) -> Context<'_, 'a> {
        let mut ctx = self.base.new_inner_scope();
        bind(
            &mut ctx,
            "variables",
            Value::Map(Map {
                map: Arc::new(self.variables.clone()),
            }),
        );
        ctx
    }

    /// The text of an evaluation error; reading a failed variable reports
    /// that variable's error.
    fn explain(&self, e: &ExecutionError) -> String {
        if let ExecutionError::NoSuchKey(k) = e
            && let Some((name, err)) = self.failed.iter().find(|(n, _)| n == k.as_str())
        {
            return format!("variable '{name}': {err}");
        }
        e.to_string()
    }
}

impl std::fmt::Debug for Activation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation")
            .field("variables", &self.variables)
            .field("failed", &self.failed)
            .field("data", &self.data)
            .finish_non_exhaustive()
    }
}

/// `namespaceObject`: the request's Namespace when known; otherwise, for a
/// namespaced object, a Namespace carrying only its name (and the labels
/// known for it), as Kyverno builds it outside a cluster; null for
/// cluster-scoped objects and Namespaces.
fn namespace_object(req: &EvalRequest) -> Value {
    if let Some(ns) = req.namespace_object.as_deref() {
        return from_json(ns);
    }
    let ns = req.namespace();
    if ns.is_empty() || req.kind() == "Namespace" {
        return Value::Null;
    }
    let mut meta = vec![("name", s(ns))];
    if let Some(labels) = &req.namespace_labels {
        meta.push((
            "labels",
            Value::Map(Map {
                map: Arc::new(
                    labels
                        .iter()
                        .map(|(k, v)| (Key::String(Arc::new(k.clone())), s(v)))
                        .collect(),
                ),
            }),
        ));
    }
    map(vec![
        ("apiVersion", s("v1")),
        ("kind", s("Namespace")),
        ("metadata", map(meta)),
    ])
}

fn bind(ctx: &mut Context<'_, '_>, name: &str, v: Value) {
    if let Ok(val) = Box::<dyn ::cel::common::value::Val>::try_from(v) {
        ctx.add_variable_as_val(name, val);
    }
}

fn s(v: &str) -> Value {
    Value::String(Arc::new(v.to_string()))
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(Map {
        map: Arc::new(
            entries
                .into_iter()
                .map(|(k, v)| (Key::String(Arc::new(k.to_string())), v))
                .collect(),
        ),
    })
}

/// `request`: the admission request Kubernetes gives CEL.
fn request_value(req: &EvalRequest) -> Value {
    let (group, version) = crate::kinds::split_api_version(req.api_version());
    let kind = req.kind();
    let plural = crate::kinds::plural_of(kind);
    let gvk = map(vec![
        ("group", s(group)),
        ("version", s(version)),
        ("kind", s(kind)),
    ]);
    let gvr = map(vec![
        ("group", s(group)),
        ("version", s(version)),
        ("resource", s(&plural)),
    ]);
    let name = req.name();
    map(vec![
        ("uid", s("")),
        ("kind", gvk.clone()),
        ("resource", gvr.clone()),
        ("subResource", s("")),
        ("requestKind", gvk),
        ("requestResource", gvr),
        ("requestSubResource", s("")),
        ("name", s(name)),
        ("namespace", s(req.namespace())),
        ("operation", s(req.operation.as_str())),
        (
            "userInfo",
            map(vec![
                ("username", s(&req.user_info.username)),
                ("uid", s(&req.user_info.uid)),
                (
                    "groups",
                    Value::List(Arc::new(
                        req.user_info.groups.iter().map(|g| s(g)).collect(),
                    )),
                ),
            ]),
        ),
        ("dryRun", Value::Bool(false)),
    ])
}

#[cfg(test)]
mod tests;
