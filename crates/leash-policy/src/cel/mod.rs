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
//! `ip`/`cidr`, `semver`, Kyverno's `image`, `resource.Get/List`,
//! `globalContext.Get`, `http.Get/Post` (answered by the caller's data), kyverno-authz's `http`/`envoy` response builders, `md5`/`sha1`/`sha256`, `json.unmarshal`, `yaml.parse` and `parseServiceAccount`, and Kyverno's `orValue` on a value that is not an
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
//!
//! # Invariants
//! 1. Nothing here spawns a task or awaits: evaluation is synchronous and
//!    runs on the caller's thread.
//! 2. The environment (`ENV`) is built once by a `LazyLock` and never
//!    changed after; every context clones its `Arc`, and parsing reads it.
//!    A library's failed registration is ignored (a duplicate declaration,
//!    caught by the tests), never a panic in the initializer.
//! 3. One lock is the process-wide `std::sync::Mutex` of shareable
//!    variable ids in `Variable::shareable`, held only to look up or
//!    insert one id and dropped before the variable is built. Ids are
//!    assigned under it as `len() + 1`, so they are distinct and never 0
//!    (0: never shared); the map grows with the distinct variable
//!    definitions compiled, never with requests.
//!    The other lock, a GeneratingPolicy evaluation's `GeneratedSink`
//!    (`libs`), belongs to that one evaluation and is held only to push
//!    one `generator.Apply` call, so the two are never held together.
//! 4. A `VarMemo` is a `RefCell`, so it is `!Sync`: the engine makes one
//!    per evaluation of a request, used on that evaluation's thread only.
//!    `bind_variables` drops its `borrow()` before
//!    evaluating a variable and takes `borrow_mut()` only to insert the
//!    result, so the two never overlap.

mod bind;
mod check;
mod compat;
mod comprehensions;
pub(crate) mod fast;
mod json;
mod jsonpatch;
pub(crate) mod libs;
pub(crate) mod reads;
pub(crate) mod rule;
mod sets;
mod shared;
mod types;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use ::cel::common::types::{CelMap, CelMapKey, CelNull};
use ::cel::common::value::{CowVal, Val};
use ::cel::context::VariableResolver;
use ::cel::objects::{Key, Map};
use ::cel::{Context, Env, ExecutionError, IdedExpr, Value};

use crate::request::{ClusterData, EvalRequest};

pub use rule::CelRule;

pub(crate) use json::{from_json, to_val};

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
    comprehensions::register(&mut env);
    libs::register_ivpol_macros(&mut env);
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
    /// Compiles `source`; the error is the parser's message, or names the
    /// first undeclared variable or function (see `check`).
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
        check::check(&ast)?;
        types::check(&ast)?;
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
    pub(crate) fn eval(&self, act: &Activation<'_, '_>) -> Result<Value, String> {
        let ctx = act.context();
        match Value::resolve(&self.ast, ctx) {
            Ok(v) => Ok(v),
            Err(e) => Err(act.explain(&e)),
        }
    }

    /// Evaluates to a bool; other results are an error.
    pub(crate) fn eval_bool(&self, act: &Activation<'_, '_>) -> Result<bool, String> {
        match self.eval(act)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!(
                "expression '{}' resulted in a {} value, expected bool",
                self.source,
                other.type_of()
            )),
        }
    }

    /// Evaluates an ImageValidatingPolicy's `matchImageReferences`
    /// expression on one image reference (`ref`, the only variable it
    /// sees).
    pub(crate) fn eval_image_match(&self, image: &str) -> Result<bool, String> {
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_as_val("ref", to_val(&serde_json::Value::String(image.to_string())));
        match Value::resolve(&self.ast, &ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "expression '{}' resulted in a {} value, expected bool",
                self.source,
                other.type_of()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Evaluates to a string (a message expression).
    pub(crate) fn eval_string(&self, act: &Activation<'_, '_>) -> Result<String, String> {
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
    /// Equal for two variables exactly when they and every variable before
    /// them in their lists have the same names and expressions (so, on one
    /// request, the same value); 0: never shared. See [`VarMemo`].
    pub(crate) memo: usize,
}

impl Variable {
    /// A variable that is never shared between policies.
    pub(crate) fn new(name: String, expr: Expr) -> Variable {
        Variable {
            name,
            expr,
            memo: 0,
        }
    }

    /// A variable of a list whose values policies may share: `previous` is
    /// the one before it in its list.
    pub(crate) fn shareable(name: String, expr: Expr, previous: Option<&Variable>) -> Variable {
        type Ids = HashMap<(usize, String, Arc<str>), usize>;
        // Grows with the distinct variable definitions compiled in the
        // process's life (a few per policy), never with requests.
        static IDS: LazyLock<std::sync::Mutex<Ids>> = LazyLock::new(Default::default);
        let key = (
            previous.map_or(0, |p| p.memo),
            name.clone(),
            expr.source.clone(),
        );
        let mut ids = IDS.lock().unwrap_or_else(|e| e.into_inner());
        let next = ids.len() + 1;
        let memo = *ids.entry(key).or_insert(next);
        drop(ids);
        Variable { name, expr, memo }
    }
}

/// The values of shareable variables evaluated on one request, by
/// [`Variable::memo`]: ValidatingPolicies that define the same variables
/// (every Pod Security policy's `containers` list) evaluate them once per
/// request, not once per policy. Sound because such a variable reads only
/// what every policy's activation of the request holds alike: the shared
/// [`CelObjects`], the request's cluster data, `params` (null for
/// ValidatingPolicies) and the variables before it, which its id covers.
/// A failed variable is kept with its error.
pub(crate) type VarMemo<'a> = std::cell::RefCell<HashMap<usize, Result<Box<dyn Val + 'a>, String>>>;

/// A request's objects as CEL values (`object`, `oldObject`, `request`,
/// `namespaceObject`), converted once per request and shared by every CEL
/// policy evaluated on it: an [`Activation`] reads them in place, through
/// its context's variable resolver, with no copy per policy (converting the
/// objects for each policy was most of a CEL evaluation's time).
#[derive(Clone)]
pub(crate) struct CelObjects {
    object: Box<dyn Val>,
    old_object: Box<dyn Val>,
    request: Box<dyn Val>,
    namespace_object: Box<dyn Val>,
}

impl CelObjects {
    pub(crate) fn new(req: &EvalRequest) -> CelObjects {
        CelObjects {
            object: to_val(&req.object),
            old_object: req
                .old_object
                .as_deref()
                .map(to_val)
                .unwrap_or_else(|| Box::new(CelNull)),
            request: value_to_val(request_value(req)),
            namespace_object: value_to_val(namespace_object(req)),
        }
    }
}

impl VariableResolver for CelObjects {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let v = match variable {
            "object" => &self.object,
            "oldObject" => &self.old_object,
            "request" => &self.request,
            "namespaceObject" => &self.namespace_object,
            _ => return None,
        };
        Some(CowVal::Borrowed(v.as_ref()))
    }
}

impl std::fmt::Debug for CelObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CelObjects").finish_non_exhaustive()
    }
}

fn value_to_val(v: Value) -> Box<dyn Val> {
    Box::<dyn Val>::try_from(v).unwrap_or_else(|_| Box::new(CelNull))
}

/// The values an expression sees: the request's objects (bound once, or
/// read in place from shared [`CelObjects`]), the data handles, and
/// `variables`, kept as interpreter values (a variable is never converted
/// through [`Value`] and back).
pub(crate) struct Activation<'a, 'm> {
    base: Context<'a, 'a>,
    /// Whether the objects come from a resolver (then `set_object` cannot
    /// rebind them).
    shared: bool,
    variables: Vec<(String, Box<dyn Val + 'a>)>,
    /// Variables that failed, with their error.
    failed: Vec<(String, String)>,
    data: &'a dyn ClusterData,
    /// Shareable variables' values on this request (a shared activation's).
    memo: Option<&'m VarMemo<'a>>,
}

impl<'a, 'm> Activation<'a, 'm> {
    /// The activation of an admission request (or a background scan),
    /// converting its objects.
    pub(crate) fn new(req: &EvalRequest, data: &'a dyn ClusterData) -> Activation<'a, 'm> {
        let mut base = Context::with_env(ENV.clone());
        base.add_variable_as_val("object", to_val(&req.object));
        base.add_variable_as_val(
            "oldObject",
            req.old_object
                .as_deref()
                .map(to_val)
                .unwrap_or_else(|| Box::new(CelNull)),
        );
        base.add_variable_as_val("request", value_to_val(request_value(req)));
        base.add_variable_as_val("namespaceObject", value_to_val(namespace_object(req)));
        Activation::finish(base, false, data)
    }

    /// As [`Activation::new`], reading the request's objects from `objects`
    /// (converted once for the request).
    pub(crate) fn shared(objects: &'a CelObjects, data: &'a dyn ClusterData) -> Activation<'a, 'm> {
        let mut base = Context::with_env(ENV.clone());
        base.set_variable_resolver(objects);
        Activation::finish(base, true, data)
    }

    fn finish(
        mut base: Context<'a, 'a>,
        shared: bool,
        data: &'a dyn ClusterData,
    ) -> Activation<'a, 'm> {
        base.add_variable_as_val("params", Box::new(CelNull));
        libs::bind_data(&mut base, data);
        let mut act = Activation {
            base,
            shared,
            variables: Vec::new(),
            failed: Vec::new(),
            data,
            memo: None,
        };
        act.publish_variables();
        act
    }

    /// Reads and keeps shareable variables' values in `memo` (see
    /// [`VarMemo`]); only for an activation made by [`Activation::shared`].
    pub(crate) fn with_memo<'n>(self, memo: &'n VarMemo<'a>) -> Activation<'a, 'n> {
        debug_assert!(self.shared, "only shared objects make values shareable");
        Activation {
            memo: self.shared.then_some(memo),
            base: self.base,
            shared: self.shared,
            variables: self.variables,
            failed: self.failed,
            data: self.data,
        }
    }

    /// Evaluates `vars` in order into `variables`.
    pub(crate) fn bind_variables(&mut self, vars: &[Variable]) {
        for var in vars {
            let memo = self.memo.filter(|_| var.memo != 0);
            let kept = memo.and_then(|m| {
                m.borrow().get(&var.memo).map(|r| match r {
                    Ok(v) => Ok(v.clone_as_boxed()),
                    Err(e) => Err(e.clone()),
                })
            });
            let result = kept.unwrap_or_else(|| {
                // Shared: binding the map of variables after each one, and
                // keeping the value for the other policies, copies none of
                // it.
                let result = Value::resolve_val(var.expr.ast(), &self.base)
                    .map(|v| shared::Shared::boxed(v.into_owned()))
                    .map_err(|e| self.explain(&e));
                if let Some(m) = memo {
                    let copy = match &result {
                        Ok(v) => Ok(v.clone_as_boxed()),
                        Err(e) => Err(e.clone()),
                    };
                    m.borrow_mut().insert(var.memo, copy);
                }
                result
            });
            match result {
                Ok(v) => {
                    self.variables.retain(|(n, _)| n != &var.name);
                    self.variables.push((var.name.clone(), v));
                    self.publish_variables();
                }
                Err(e) => self.failed.push((var.name.clone(), e)),
            }
        }
    }

    /// Rebinds `object` (a mutating policy's next mutation sees the object
    /// the previous one produced); variables already evaluated keep their
    /// values. Only for an activation made by [`Activation::new`].
    pub(crate) fn set_object(&mut self, object: &serde_json::Value) {
        debug_assert!(
            !self.shared,
            "objects read from a resolver cannot be rebound"
        );
        self.base.add_variable_as_val("object", to_val(object));
    }

    /// Binds `name` to `value` (an ImageValidatingPolicy's `images`,
    /// `attestations`, `attestors`).
    pub(crate) fn bind_json(&mut self, name: &str, value: &serde_json::Value) {
        self.base.add_variable_as_val(name, to_val(value));
    }

    /// Binds the receiver of an ImageValidatingPolicy's image verification
    /// functions (`verifyImageSignatures`, ...) to `state`.
    pub(crate) fn bind_image_verifier(&mut self, state: &'a crate::ivpol::Verifier<'a>) {
        libs::bind_ivpol(&mut self.base, state);
    }

    /// Makes `generator.Apply` record its calls in `sink` (a
    /// GeneratingPolicy's evaluation).
    pub(crate) fn bind_generator(&mut self, sink: &'a libs::GeneratedSink) {
        libs::bind_generator(&mut self.base, sink);
    }

    /// Binds `params` (a Kubernetes admission policy's parameter resource,
    /// or the list of those a binding's `paramRef` selects).
    pub(crate) fn set_params(&mut self, params: &serde_json::Value) {
        self.base.add_variable_as_val("params", to_val(params));
    }

    /// Binds `variables` to the variables evaluated so far. Done once per
    /// variable, not per expression: the expressions that follow read the
    /// bound map in place.
    fn publish_variables(&mut self) {
        let variables: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> = self
            .variables
            .iter()
            .map(|(k, v)| (CelMapKey::from(k.clone()), v.clone()))
            .collect();
        self.base
            .add_variable_as_val("variables", Box::new(CelMap::from(variables)));
    }

    fn context(&self) -> &Context<'a, 'a> {
        &self.base
    }

    /// The text of an evaluation error; reading a failed variable reports
    /// that variable's error.
    fn explain(&self, e: &ExecutionError) -> String {
        if let ExecutionError::NoSuchKey(k) = e
            && let Some((name, err)) = self.failed.iter().find(|(n, _)| n == k.as_str())
        {
            return format!("variable '{name}': {err}");
        }
        match e {
            // cel-go's words, which Kyverno's messages carry.
            ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
            e => e.to_string(),
        }
    }
}

impl std::fmt::Debug for Activation<'_, '_> {
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
        ("namespace", s(req.request_namespace())),
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
