//! A part of JMESPath evaluated on the request's JSON in place.
//!
//! Evaluating an expression through the `jmespath` crate needs the whole
//! context as its `Variable`s: a copy of the resource (a node and an `Arc`
//! per JSON value), built and freed once per request, and a copy of every
//! foreach element. On the Pod Security policies that copy and its drop
//! were a quarter of `leash apply`'s time. The expressions most policies
//! hold (`request.object.spec.[initContainers, containers][].image`,
//! `element.securityContext.capabilities.drop[] || \`[]\``) are field
//! chains, projections, flattens, multi-selects, `||`, `&&`, `!`, indexes,
//! literals and `keys()`; those are evaluated here on the JSON, borrowing
//! it, and only the result is built.
//!
//! Exactly as [`super::search_strict_var`] evaluates them: the crate's
//! interpreter for the operators, Kyverno's strict rule (a key missing along
//! a plain path is `Unknown key`) where `strict.rs` applies it. What is not
//! in this part (functions other than `keys`, filters, comparisons, slices,
//! multi-hashes, roots other than `request.object`, `request.oldObject` and
//! `element`) is not compiled, and [`Native::eval`] answers `None` when the
//! source cannot give a root exactly as the context holds it: the caller
//! then evaluates through the crate.

use jmespath::ast::{Ast, Comparator};
use serde_json::Value;

use super::{SearchError, normalize_number, to_json};

/// Where an expression starts reading: the context's `request.object`,
/// `request.oldObject` or `element`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Root {
    Object,
    OldObject,
    Element,
}

/// What gives the roots' JSON: `None` when the context may hold something
/// else (then the crate evaluates the expression).
pub(crate) trait Roots {
    fn root(&self, root: Root) -> Option<&Value>;
    /// No root this source gives holds a float (so a value borrowed from
    /// them needs no normalizing): lets [`Native::eval_items`] skip walking
    /// each item to look for one.
    fn float_free(&self) -> bool {
        false
    }
}

/// An expression compiled for in-place evaluation.
#[derive(Debug)]
pub(crate) struct Native {
    node: Node,
    /// A literal of the expression holds a float.
    float_literal: bool,
}

#[derive(Debug)]
enum Node {
    Root(Root),
    Identity,
    Field(String),
    Sub {
        lhs: Box<Node>,
        rhs: Box<Node>,
        /// `a | b`: the crate parses a pipe as a sub-expression too; the
        /// strict rule stops at it.
        pipe: bool,
    },
    Index(i32),
    Literal(Value),
    Or(Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Not(Box<Node>),
    Projection(Box<Node>, Box<Node>),
    Flatten(Box<Node>),
    MultiList(Vec<Node>),
    ObjectValues(Box<Node>),
    Keys(Box<Node>),
    /// `then` where `predicate` is truthy, else null (the crate's filters,
    /// and its `x.[a, b]`, which tests `@ != null`).
    Condition(Box<Node>, Box<Node>),
    /// `x == null` (`x != null` when `.1`): the only comparison compiled,
    /// whose answer does not depend on how the crate compares numbers.
    IsNull(Box<Node>, bool),
}

impl Native {
    /// `None` when the expression is not in the part evaluated here.
    pub(crate) fn compile(expr: &jmespath::Expression<'_>) -> Option<Native> {
        node(expr.as_ast(), expr.as_str(), true).map(|node| Native {
            float_literal: node.has_float_literal(),
            node,
        })
    }

    /// The expression's value, as [`super::search_strict_var`] and
    /// [`super::to_json`] give it; `None` when a root is not available.
    pub(crate) fn eval(&self, roots: &dyn Roots) -> Option<Result<Value, SearchError>> {
        let ev = Eval { roots };
        match ev.strict(&self.node, V::Context) {
            Ok(v) => Some(Ok(v.to_json())),
            Err(Stop::NotFound(key)) => Some(Err(SearchError::NotFound(key))),
            Err(Stop::Unavailable) => None,
        }
    }
}

impl Node {
    fn has_float_literal(&self) -> bool {
        match self {
            Node::Literal(v) => has_float(v),
            Node::Root(_) | Node::Identity | Node::Field(_) | Node::Index(_) => false,
            Node::Sub { lhs, rhs, .. }
            | Node::Or(lhs, rhs)
            | Node::And(lhs, rhs)
            | Node::Projection(lhs, rhs)
            | Node::Condition(lhs, rhs) => lhs.has_float_literal() || rhs.has_float_literal(),
            Node::Not(n) | Node::Flatten(n) | Node::ObjectValues(n) | Node::Keys(n) => {
                n.has_float_literal()
            }
            Node::IsNull(n, _) => n.has_float_literal(),
            Node::MultiList(items) => items.iter().any(Node::has_float_literal),
        }
    }
}

/// A foreach list's elements, borrowed where they can be.
pub(crate) type Items<'s> = Vec<std::borrow::Cow<'s, Value>>;

/// Whether `v` holds a float (which a round trip through the crate may
/// change: whole floats become integers).
pub(crate) fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}

impl Native {
    /// [`Native::eval`] for a foreach `list`: its elements (an array's, or
    /// the value itself; none for null), borrowed from the JSON where the
    /// crate's round trip would leave them unchanged; and whether they are
    /// all free of floats (read from float-free roots and literals).
    pub(crate) fn eval_items<'s>(
        &'s self,
        roots: &'s dyn Roots,
    ) -> Option<(Result<Items<'s>, SearchError>, bool)> {
        use std::borrow::Cow;
        let free = !self.float_literal && roots.float_free();
        let ev = Eval { roots };
        let item = |j: &'s Value| {
            if !free && has_float(j) {
                Cow::Owned(normalized(j))
            } else {
                Cow::Borrowed(j)
            }
        };
        let items = match ev.strict(&self.node, V::Context) {
            Ok(V::Json(Value::Null)) => Ok(Vec::new()),
            Ok(V::Json(Value::Array(a))) => Ok(a.iter().map(item).collect()),
            Ok(V::List(l)) => Ok(l
                .iter()
                .map(|v| match v {
                    V::Json(j) => item(j),
                    other => Cow::Owned(other.to_json()),
                })
                .collect()),
            Ok(other) => Ok(vec![Cow::Owned(other.to_json())]),
            Err(Stop::NotFound(key)) => Err(SearchError::NotFound(key)),
            Err(Stop::Unavailable) => return None,
        };
        Some((items, free))
    }
}

/// The field names of a plain chain (`a.b.c`, no pipe), outermost first.
fn chain<'a>(ast: &'a Ast, text: &str) -> Option<Vec<&'a str>> {
    match ast {
        Ast::Field { name, .. } => Some(vec![name.as_str()]),
        Ast::Subexpr { lhs, rhs, offset } if text.as_bytes().get(*offset) != Some(&b'|') => {
            let mut c = chain(lhs, text)?;
            match &**rhs {
                Ast::Field { name, .. } => c.push(name),
                _ => return None,
            }
            Some(c)
        }
        _ => None,
    }
}

/// A plain chain read from the context: a root, then fields.
fn rooted(ast: &Ast, text: &str) -> Option<Node> {
    let names = chain(ast, text)?;
    let (root, rest) = match names.as_slice() {
        ["element", rest @ ..] => (Root::Element, rest),
        ["request", "object", rest @ ..] => (Root::Object, rest),
        ["request", "oldObject", rest @ ..] => (Root::OldObject, rest),
        _ => return None,
    };
    Some(rest.iter().fold(Node::Root(root), |lhs, name| Node::Sub {
        lhs: Box::new(lhs),
        rhs: Box::new(Node::Field((*name).to_string())),
        pipe: false,
    }))
}

/// Compiles `ast`; `at_root` when it reads the context itself (where only a
/// rooted chain may read anything).
fn node(ast: &Ast, text: &str, at_root: bool) -> Option<Node> {
    if at_root && let Some(n) = rooted(ast, text) {
        return Some(n);
    }
    let boxed = |a: &Ast, root: bool| node(a, text, root).map(Box::new);
    Some(match ast {
        Ast::Field { name, .. } if !at_root => Node::Field(name.clone()),
        Ast::Identity { .. } if !at_root => Node::Identity,
        Ast::Index { idx, .. } if !at_root => Node::Index(*idx),
        Ast::Subexpr { offset, lhs, rhs } => Node::Sub {
            lhs: boxed(lhs, at_root)?,
            rhs: boxed(rhs, false)?,
            pipe: text.as_bytes().get(*offset) == Some(&b'|'),
        },
        Ast::Literal { value, .. } => Node::Literal(to_json(value)),
        Ast::Or { lhs, rhs, .. } => Node::Or(boxed(lhs, at_root)?, boxed(rhs, at_root)?),
        Ast::And { lhs, rhs, .. } => Node::And(boxed(lhs, at_root)?, boxed(rhs, at_root)?),
        Ast::Not { node: n, .. } => Node::Not(boxed(n, at_root)?),
        Ast::Projection { lhs, rhs, .. } => {
            Node::Projection(boxed(lhs, at_root)?, boxed(rhs, false)?)
        }
        Ast::Flatten { node: n, .. } => Node::Flatten(boxed(n, at_root)?),
        Ast::MultiList { elements, .. } => Node::MultiList(
            elements
                .iter()
                .map(|e| node(e, text, at_root))
                .collect::<Option<_>>()?,
        ),
        Ast::ObjectValues { node: n, .. } => Node::ObjectValues(boxed(n, at_root)?),
        Ast::Function { name, args, .. } if name == "keys" && args.len() == 1 => {
            Node::Keys(boxed(&args[0], at_root)?)
        }
        Ast::Condition {
            predicate, then, ..
        } => Node::Condition(boxed(predicate, at_root)?, boxed(then, at_root)?),
        Ast::Comparison {
            comparator: comparator @ (Comparator::Equal | Comparator::NotEqual),
            lhs,
            rhs,
            ..
        } => {
            let null = |a: &Ast| matches!(a, Ast::Literal { value, .. } if value.is_null());
            let other = match (null(lhs), null(rhs)) {
                (_, true) => lhs,
                (true, false) => rhs,
                (false, false) => return None,
            };
            Node::IsNull(boxed(other, at_root)?, *comparator == Comparator::NotEqual)
        }
        _ => return None,
    })
}

/// The root name and the path of a rooted chain.
fn split_root<'a, 'b>(names: &'b [&'a str]) -> Option<(Root, &'b [&'a str])> {
    match names {
        ["element", rest @ ..] => Some((Root::Element, rest)),
        ["request", "object", rest @ ..] => Some((Root::Object, rest)),
        ["request", "oldObject", rest @ ..] => Some((Root::OldObject, rest)),
        _ => None,
    }
}

/// What an expression outside the in-place part reads of the context: the
/// rooted chains at the places it reads the context from. JMESPath has no
/// other way to the context (no root reference; functions see only their
/// arguments), so the crate gives the same answer on a context holding
/// just those subtrees: [`Partial::context`] builds it, a few fields
/// instead of the whole resource.
#[derive(Debug)]
pub(crate) struct Partial {
    chains: Vec<(Root, Vec<String>)>,
}

impl Partial {
    /// `None` when the expression reads anything else of the context.
    pub(crate) fn analyze(expr: &jmespath::Expression<'_>) -> Option<Partial> {
        let mut chains = Vec::new();
        needs(expr.as_ast(), expr.as_str(), true, &mut chains)?;
        // Shorter first: a longer chain under a copied subtree adds nothing.
        chains.sort_by_key(|(_, path)| path.len());
        Some(Partial { chains })
    }

    /// The context the expression reads, as the crate's value; `None` when a
    /// root is not available.
    pub(crate) fn context(&self, roots: &dyn Roots) -> Option<jmespath::Rcvar> {
        let mut tree = Value::Object(serde_json::Map::new());
        let mut copied: Vec<Vec<&str>> = Vec::new();
        for (root, path) in &self.chains {
            let mut at = roots.root(*root)?;
            let mut full: Vec<&str> = match root {
                Root::Object => vec!["request", "object"],
                Root::OldObject => vec!["request", "oldObject"],
                Root::Element => vec!["element"],
            };
            // As far as the JSON goes: a missing key stays missing.
            let mut missing = false;
            for key in path {
                match at.as_object() {
                    Some(m) => match m.get(key) {
                        Some(v) => {
                            at = v;
                            full.push(key);
                        }
                        None => {
                            missing = true;
                            break;
                        }
                    },
                    None => break,
                }
            }
            if copied.iter().any(|c| full.starts_with(c)) {
                continue;
            }
            let leaf = if missing {
                Value::Object(serde_json::Map::new())
            } else {
                copied.push(full.clone());
                at.clone()
            };
            insert(&mut tree, &full, leaf);
        }
        Some(super::from_json(&tree))
    }
}

/// Sets `path` in `tree` to `leaf`, making objects on the way; an object
/// already there takes `leaf`'s keys (an empty object adds none).
fn insert(tree: &mut Value, path: &[&str], leaf: Value) {
    let Some((first, rest)) = path.split_first() else {
        match (tree, leaf) {
            (Value::Object(have), Value::Object(add)) => have.extend(add),
            (t, leaf) => *t = leaf,
        }
        return;
    };
    if !tree.is_object() {
        *tree = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(m) = tree {
        let child = m
            .entry((*first).to_string())
            .or_insert_with(|| Value::Object(serde_json::Map::new()));
        insert(child, rest, leaf);
    }
}

/// Collects the rooted chains `ast` reads the context through; `None` when
/// it reads the context any other way.
fn needs(ast: &Ast, text: &str, at_root: bool, out: &mut Vec<(Root, Vec<String>)>) -> Option<()> {
    if at_root && let Some(names) = chain(ast, text) {
        let (root, rest) = split_root(&names)?;
        out.push((root, rest.iter().map(|s| (*s).to_string()).collect()));
        return Some(());
    }
    let mut all =
        |nodes: &[&Ast], root: bool| nodes.iter().try_for_each(|n| needs(n, text, root, out));
    match ast {
        Ast::Field { .. } | Ast::Identity { .. } | Ast::Index { .. } | Ast::Slice { .. } => {
            (!at_root).then_some(())
        }
        Ast::Literal { .. } => Some(()),
        Ast::Subexpr { lhs, rhs, .. } | Ast::Projection { lhs, rhs, .. } => {
            all(&[lhs], at_root)?;
            all(&[rhs], false)
        }
        Ast::Flatten { node, .. } | Ast::Not { node, .. } | Ast::ObjectValues { node, .. } => {
            all(&[node], at_root)
        }
        Ast::Or { lhs, rhs, .. } | Ast::And { lhs, rhs, .. } | Ast::Comparison { lhs, rhs, .. } => {
            all(&[lhs, rhs], at_root)
        }
        Ast::Condition {
            predicate, then, ..
        } => all(&[predicate, then], at_root),
        Ast::MultiList { elements, .. } => all(&elements.iter().collect::<Vec<_>>(), at_root),
        Ast::MultiHash { elements, .. } => all(
            &elements.iter().map(|kv| &kv.value).collect::<Vec<_>>(),
            at_root,
        ),
        Ast::Function { args, .. } => all(&args.iter().collect::<Vec<_>>(), at_root),
        // Applied by a function to other values, never to the context.
        Ast::Expref { ast, .. } => all(&[ast], false),
    }
}

/// A value during evaluation: borrowed from the JSON or the expression.
#[derive(Clone)]
enum V<'a> {
    /// The context itself (only rooted chains read it).
    Context,
    Json(&'a Value),
    Str(&'a str),
    Bool(bool),
    List(Vec<V<'a>>),
}

static NULL: Value = Value::Null;

impl<'a> V<'a> {
    fn null() -> V<'a> {
        V::Json(&NULL)
    }

    fn is_null(&self) -> bool {
        matches!(self, V::Json(Value::Null))
    }

    /// JMESPath truthiness, as the crate's `is_truthy`.
    fn truthy(&self) -> bool {
        match self {
            V::Context => true,
            V::Json(v) => match v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(_) => true,
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
            },
            V::Str(s) => !s.is_empty(),
            V::Bool(b) => *b,
            V::List(l) => !l.is_empty(),
        }
    }

    /// The elements, when an array.
    fn items(&self) -> Option<Vec<V<'a>>> {
        match self {
            V::Json(Value::Array(a)) => Some(a.iter().map(V::Json).collect()),
            V::List(l) => Some(l.clone()),
            _ => None,
        }
    }

    fn to_json(&self) -> Value {
        match self {
            V::Context => Value::Null,
            V::Json(v) => normalized(v),
            V::Str(s) => Value::String((*s).to_string()),
            V::Bool(b) => Value::Bool(*b),
            V::List(l) => Value::Array(l.iter().map(V::to_json).collect()),
        }
    }
}

/// A copy of `v` with numbers as a round trip through the crate leaves
/// them (whole floats become integers).
fn normalized(v: &Value) -> Value {
    match v {
        Value::Number(n) if n.is_f64() => Value::Number(normalize_number(n)),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, x)| (k.clone(), normalized(x))).collect())
        }
        other => other.clone(),
    }
}

enum Stop {
    /// Kyverno's `Unknown key`.
    NotFound(String),
    /// A root the source cannot give.
    Unavailable,
}

struct Eval<'r> {
    roots: &'r dyn Roots,
}

impl<'r> Eval<'r> {
    fn root(&self, r: Root) -> Result<V<'r>, Stop> {
        self.roots.root(r).map(V::Json).ok_or(Stop::Unavailable)
    }

    /// `strict.rs`'s rule: fields along a plain path must exist.
    fn strict<'a>(&self, node: &'a Node, data: V<'a>) -> Result<V<'a>, Stop>
    where
        'r: 'a,
    {
        match node {
            Node::Field(name) => match data {
                V::Json(Value::Object(m)) => m
                    .get(name)
                    .map(V::Json)
                    .ok_or_else(|| Stop::NotFound(name.clone())),
                _ => Ok(V::null()),
            },
            Node::Sub {
                lhs,
                rhs,
                pipe: false,
            } => {
                let left = self.strict(lhs, data)?;
                if left.is_null() {
                    return Ok(left);
                }
                self.strict(rhs, left)
            }
            Node::And(lhs, rhs) => {
                let left = self.loose(lhs, data.clone())?;
                if !left.truthy() {
                    return Ok(left);
                }
                self.strict(rhs, data)
            }
            _ => self.loose(node, data),
        }
    }

    /// The crate's interpreter.
    fn loose<'a>(&self, node: &'a Node, data: V<'a>) -> Result<V<'a>, Stop>
    where
        'r: 'a,
    {
        Ok(match node {
            Node::Root(r) => self.root(*r)?,
            Node::Identity => data,
            Node::Field(name) => match data {
                V::Json(Value::Object(m)) => m.get(name).map_or_else(V::null, V::Json),
                _ => V::null(),
            },
            Node::Sub { lhs, rhs, .. } => {
                let left = self.loose(lhs, data)?;
                self.loose(rhs, left)?
            }
            Node::Index(i) => match data.items() {
                Some(items) => {
                    let at = if *i >= 0 {
                        usize::try_from(*i).ok()
                    } else {
                        items.len().checked_sub(i.unsigned_abs() as usize)
                    };
                    at.and_then(|at| items.get(at).cloned())
                        .unwrap_or_else(V::null)
                }
                None => V::null(),
            },
            Node::Literal(v) => V::Json(v),
            Node::Or(lhs, rhs) => {
                let left = self.loose(lhs, data.clone())?;
                if left.truthy() {
                    left
                } else {
                    self.loose(rhs, data)?
                }
            }
            Node::And(lhs, rhs) => {
                let left = self.loose(lhs, data.clone())?;
                if left.truthy() {
                    self.loose(rhs, data)?
                } else {
                    left
                }
            }
            Node::Not(n) => V::Bool(!self.loose(n, data)?.truthy()),
            Node::Projection(lhs, rhs) => match self.loose(lhs, data)?.items() {
                None => V::null(),
                Some(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        let v = self.loose(rhs, item)?;
                        if !v.is_null() {
                            out.push(v);
                        }
                    }
                    V::List(out)
                }
            },
            Node::Flatten(n) => match self.loose(n, data)?.items() {
                None => V::null(),
                Some(items) => {
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        match item.items() {
                            Some(inner) => out.extend(inner),
                            None => out.push(item),
                        }
                    }
                    V::List(out)
                }
            },
            Node::MultiList(elements) => {
                if data.is_null() {
                    return Ok(V::null());
                }
                let mut out = Vec::with_capacity(elements.len());
                for e in elements {
                    out.push(self.loose(e, data.clone())?);
                }
                V::List(out)
            }
            // The crate's objects are sorted maps: values and keys come in
            // key order (serde_json's map is sorted too).
            Node::ObjectValues(n) => match self.loose(n, data)? {
                V::Json(Value::Object(m)) => V::List(m.values().map(V::Json).collect()),
                _ => V::null(),
            },
            Node::Condition(predicate, then) => {
                if self.loose(predicate, data.clone())?.truthy() {
                    self.loose(then, data)?
                } else {
                    V::null()
                }
            }
            Node::IsNull(n, negate) => V::Bool(self.loose(n, data)?.is_null() != *negate),
            Node::Keys(n) => match self.loose(n, data)? {
                V::Json(Value::Object(m)) => V::List(m.keys().map(|k| V::Str(k)).collect()),
                // A type error: the crate words it.
                _ => return Err(Stop::Unavailable),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{compile, search_strict};
    use super::*;
    use serde_json::json;

    struct Json(Value);

    impl Roots for Json {
        fn root(&self, r: Root) -> Option<&Value> {
            match r {
                Root::Object => self.0.pointer("/request/object"),
                Root::OldObject => self.0.pointer("/request/oldObject"),
                Root::Element => self.0.get("element"),
            }
        }
        fn float_free(&self) -> bool {
            !has_float(&self.0)
        }
    }

    /// `v` with each float number made an integer.
    fn integers(v: &Value) -> Value {
        match v {
            Value::Number(n) if n.is_f64() => json!(n.as_f64().unwrap_or(0.0) as i64),
            Value::Array(a) => Value::Array(a.iter().map(integers).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), integers(x))).collect())
            }
            other => other.clone(),
        }
    }

    /// Every expression the native part compiles gives what the crate
    /// gives, errors included; the rest is not compiled.
    #[test]
    fn native_evaluation_agrees_with_the_crate() {
        let ctx = json!({
            "request": {
                "object": {
                    "metadata": {"name": "p", "labels": {"b": "2", "a": "1"}, "n": null},
                    "spec": {
                        "containers": [
                            {"name": "c1", "image": "x", "securityContext": {"capabilities": {"add": ["NET_RAW"], "drop": ["ALL"]}}},
                            {"name": "c2", "image": "y", "ports": [{"containerPort": 80.0}, {"containerPort": 8080}]},
                        ],
                        "initContainers": [{"name": "i1", "image": "z"}],
                        "volumes": [{"name": "v", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}],
                        "f": 1.5, "w": 2.0, "empty": [], "s": "",
                    },
                },
                "oldObject": {"spec": {"replicas": 3}},
            },
            "element": {"securityContext": {"capabilities": {"drop": ["ALL"]}}, "name": "c1"},
        });
        let native = [
            "request.object.metadata.name",
            "request.object.metadata.missing",
            "request.object.metadata.n.x",
            "request.object.metadata.name.x",
            "request.object.spec.[ephemeralContainers, initContainers, containers][].securityContext.capabilities.add[]",
            "request.object.spec.[ephemeralContainers, initContainers, containers][]",
            "request.object.spec.containers[].image",
            "request.object.spec.containers[*].ports[].containerPort",
            "request.object.spec.containers[0].name",
            "request.object.spec.containers[-1].name",
            "request.object.spec.containers[5].name",
            "request.object.spec.containers[0].nope",
            "request.object.spec.volumes[].keys(@)[] || `[]`",
            "request.object.spec.volumes[].keys(@)[]",
            "request.object.metadata.labels.*",
            "request.object.metadata.labels | keys(@)",
            "request.object.spec.f",
            "request.object.spec.w",
            "request.object.spec",
            "request.object.spec.empty || `[\"d\"]`",
            "request.object.spec.s || 'x'",
            "request.object.spec.nope || 'x'",
            "request.object.metadata.name && request.object.metadata.missing",
            "request.object.metadata.missing && request.object.metadata.name",
            "!(request.object.spec.empty)",
            "!(request.object.metadata.missing)",
            "[request.object.metadata.name, request.object.nope]",
            "request.object | metadata.name",
            "request.object | nope",
            "request.oldObject.spec.replicas",
            "element.securityContext.capabilities.drop[] || `[]`",
            "element.securityContext.capabilities.add[] || `[]`",
            "element.name",
            "element",
            "'lit'",
            "request.object.spec.containers[?securityContext != `null`].name",
            "request.object.spec.containers[?securityContext == `null`].name",
            "request.object.spec.nope.[a, b]",
        ];
        // With floats in the roots, and without (where the items' walk for
        // floats is skipped).
        let without = integers(&ctx);
        assert!(has_float(&ctx) && !has_float(&without));
        for (ctx, text) in [&ctx, &without]
            .into_iter()
            .flat_map(|c| native.iter().map(move |t| (c, *t)))
        {
            let expr = compile(text).unwrap();
            let n = Native::compile(&expr).unwrap_or_else(|| panic!("{text} not compiled"));
            let want = search_strict(&expr, ctx);
            let got = n.eval(&Json(ctx.clone())).expect(text);
            match (&want, &got) {
                (Err(SearchError::Other(_)), _) => panic!("{text}: {want:?}"),
                _ => assert_eq!(got, want, "{text}"),
            }
            // As a foreach list: the array's elements, null none, else itself.
            let roots = Json(ctx.clone());
            let (items, float_free) = n.eval_items(&roots).unwrap();
            let items = items.map(|v| v.into_iter().map(|c| c.into_owned()).collect::<Vec<_>>());
            assert_eq!(float_free, !has_float(ctx), "{text}");
            if float_free && let Ok(items) = &items {
                assert!(!items.iter().any(has_float), "{text}");
            }
            let want_items = want.clone().map(|w| match w {
                Value::Array(a) => a,
                Value::Null => Vec::new(),
                other => vec![other],
            });
            assert_eq!(items, want_items, "{text} as a list");
        }
        for text in [
            "request.operation",
            "request.object.spec.containers[?name == 'c1']",
            "length(request.object.spec.containers)",
            "@",
            "images.containers",
            "request.object.spec.containers[0:1]",
            "{a: request.object.metadata.name}",
            "request.object.spec.f == `1.5`",
            "request.object.spec.containers[?image == 'x']",
        ] {
            let expr = compile(text).unwrap();
            assert!(Native::compile(&expr).is_none(), "{text} compiled");
        }
        // The rest reads only rooted chains: the crate on the partial
        // context gives what it gives on the whole one.
        for text in [
            "items(request.object.metadata.labels || `{}`, 'key', 'value')[?starts_with(key, 'a') && value != 'x'] | length(@)",
            "length(request.object.spec.containers)",
            "request.object.spec.containers[?image == 'x'].name",
            "request.object.spec.containers[?name == 'c1'] | [0].securityContext.capabilities.add",
            "sort_by(request.object.spec.containers, &name)[].name",
            "{a: request.object.metadata.name, b: request.object.metadata.missing}",
            "request.object.metadata.missing.deeper == `null`",
            "length(request.object.metadata.labels) && request.object.metadata.name",
            "to_string(request.oldObject.spec.replicas)",
            "element.name == request.object.spec.containers[0].name",
            "join(',', request.object.spec.containers[].name)",
            "request.object.metadata.nope",
            "request.object.metadata.name.keys(@)",
        ] {
            let expr = compile(text).unwrap();
            let p = Partial::analyze(&expr).unwrap_or_else(|| panic!("{text} not analyzed"));
            let partial = p.context(&Json(ctx.clone())).unwrap();
            let want = search_strict(&expr, &ctx).map_err(|e| e.to_string());
            let got = super::super::search_strict_var(&expr, &partial)
                .map(|v| to_json(&v))
                .map_err(|e| e.to_string());
            assert_eq!(got, want, "{text}");
        }
        for text in [
            "request.operation",
            "images.containers",
            "@",
            "length(@)",
            "request | object",
        ] {
            let expr = compile(text).unwrap();
            assert!(Partial::analyze(&expr).is_none(), "{text} analyzed");
        }
        // keys() of a non-object: the crate's error.
        let expr = compile("request.object.metadata.name.keys(@)").unwrap();
        let n = Native::compile(&expr).unwrap();
        assert!(n.eval(&Json(ctx.clone())).is_none());
        // A root the source does not have.
        let expr = compile("element.name").unwrap();
        let n = Native::compile(&expr).unwrap();
        assert!(n.eval(&Json(json!({"request": {"object": {}}}))).is_none());
    }
}
