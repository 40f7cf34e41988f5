//! What of a resource a set of policies can read, so that a resource read
//! from JSON text can be built with just those parts (`leash apply
//! --cluster` parses 100,000 pods: most of a pod's text, `status` and the
//! parts of its spec no control looks at, is then skipped instead of built).
//!
//! The analysis is conservative: every part of a rule that reads the
//! resource is looked at, and anything it cannot bound (`podSecurity`,
//! mutate and generate rules, a variable it cannot follow, `$(...)`
//! references, wildcard keys) reads the whole resource. What it can bound:
//! - `apiVersion`, `kind` and the metadata that names an object and that
//!   matching selects by (`name`, `generateName`, `namespace`, `uid`,
//!   `labels`, `annotations`) are always read;
//! - a `pattern` reads the keys it names (anchors stripped), and at its
//!   leaves what is under them;
//! - a variable `{{ ... }}` anywhere in a rule (conditions, messages,
//!   context entries, pattern values) reads the subtree at each plain field
//!   chain it starts from `request.object` or `request.oldObject`
//!   (JMESPath has no other way to the context: no root reference, and
//!   functions see only their arguments), and through the fields, indexes,
//!   projections and multi-selects that follow, down to the values that a
//!   comparison, a function or the result takes whole;
//! - a context `variable.jmesPath` likewise;
//! - a `foreach` reads under each path its list yields what its body reads
//!   of the element (its patterns, `element` in its variables, nested
//!   declarations);
//! - CEL expressions (a classic rule's `validate.cel`; a ValidatingPolicy's
//!   match conditions, variables, validations and message expressions, of
//!   the policy and its autogen variants) read the subtree at the end of each chain of field
//!   selections from `object` or `oldObject`, and the whole object where
//!   either is used otherwise, followed through variables and comprehension
//!   variables into the fields they select ([`crate::cel::reads`]).
//!
//! Lists are transparent: what is read under a list is read under each of
//! its elements. A part that is not read is absent from the built value;
//! a part that is read keeps its type, so a pattern that finds a map where
//! it wants a list says so as it would on the whole resource.
//!
//! `leash test` evaluates its resources narrowed the same way, so the
//! conformance corpus checks this analysis on every policy it holds.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::conditions::{Conditions, Operand};
use crate::matching::ResourceDesc;
use crate::pattern::parse_anchor;
use crate::policy::{Check, ContextEntry, ContextSource, Rule};
use crate::vars::scan_vars;

mod mutation;
pub use mutation::MutationKey;
pub(crate) use mutation::{cel_writes_name, key_of_mutate_rules};

/// The parts of a resource some policies read ([`crate::Engine::reads`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadSet {
    root: Node,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    /// The whole subtree.
    All,
    /// These keys of a map (of each element, under a list); a scalar is
    /// kept as it is.
    Fields(BTreeMap<String, Node>),
    /// Under a list, each element as the inner node reads it; anything else
    /// whole (a map iterated for its keys; a scalar). What a CEL
    /// comprehension reads of the value it iterates.
    Items(Box<Node>),
    /// Every key of a map, with the values of these keys (as `Fields`) and
    /// null for the others: what `keys(@)` reads. Under a list, of each
    /// element.
    Keys(BTreeMap<String, Node>),
}

/// One step of a path into a resource: a map's field, or each element of a
/// list (each key and value of a map).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seg<'a> {
    Field(&'a str),
    Item,
}

impl Node {
    /// Marks `path` (below this node) as read whole.
    fn add(&mut self, path: &[&str]) {
        let segs: Vec<Seg<'_>> = path.iter().map(|f| Seg::Field(f)).collect();
        self.add_segs(&segs, true);
    }

    /// Keeps `path` (below this node) without reading it: a value there
    /// keeps its type, and so whether it is null.
    fn touch(&mut self, path: &[&str]) {
        let segs: Vec<Seg<'_>> = path.iter().map(|f| Seg::Field(f)).collect();
        self.add_segs(&segs, false);
    }

    /// Marks `path` as read (`whole`), or kept with its type.
    fn add_segs(&mut self, path: &[Seg<'_>], whole: bool) {
        match (&mut *self, path.split_first()) {
            (Node::All, _) => {}
            (_, None) => {
                if whole {
                    *self = Node::All;
                }
            }
            // A field under a list is each element's (lists are
            // transparent); under a map read for its items, one of those.
            (Node::Items(inner), Some((Seg::Item, rest))) => inner.add_segs(rest, whole),
            (Node::Items(inner), Some((Seg::Field(_), _))) => inner.add_segs(path, whole),
            (Node::Fields(fields) | Node::Keys(fields), Some((Seg::Field(f), rest))) => fields
                .entry((*f).to_string())
                .or_insert_with(|| Node::Fields(BTreeMap::new()))
                .add_segs(rest, whole),
            (Node::Fields(_) | Node::Keys(_), Some((Seg::Item, rest))) => {
                // What was read of each element stays read of each element.
                let mut inner = std::mem::replace(self, Node::All);
                inner.add_segs(rest, whole);
                *self = Node::Items(Box::new(inner));
            }
        }
    }

    /// Whether the field chain `path` may be read: a node on the way read
    /// whole (or for its items or keys), or the field itself kept.
    fn may_read(&self, path: &[&str]) -> bool {
        match (self, path.split_first()) {
            (_, None) => true,
            (Node::Fields(fields), Some((first, rest))) => {
                fields.get(*first).is_some_and(|n| n.may_read(rest))
            }
            // Every key is read: whether the field is there is.
            (Node::All | Node::Items(_) | Node::Keys(_), Some(_)) => true,
        }
    }

    /// Reads every key of the map at `path` ([`Node::Keys`]).
    fn keys_at(&mut self, path: &[&str]) {
        match (&mut *self, path.split_first()) {
            (Node::Fields(fields), None) => *self = Node::Keys(std::mem::take(fields)),
            (Node::Fields(fields) | Node::Keys(fields), Some((first, rest))) => fields
                .entry((*first).to_string())
                .or_insert_with(|| Node::Fields(BTreeMap::new()))
                .keys_at(rest),
            (Node::Items(inner), Some(_)) => inner.keys_at(path),
            // The whole map, a map already read for its keys, or a list
            // (whose keys are an error however much of it is kept).
            (Node::All | Node::Keys(_) | Node::Items(_), _) => {}
        }
    }

    fn merge(&mut self, other: &Node) {
        match (&mut *self, other) {
            (Node::All, _) => {}
            (_, Node::All) => *self = Node::All,
            (Node::Fields(_), Node::Keys(_)) => {
                let Node::Fields(mine) = std::mem::replace(self, Node::All) else {
                    unreachable!()
                };
                *self = Node::Keys(mine);
                self.merge(other);
            }
            (Node::Fields(mine) | Node::Keys(mine), Node::Fields(theirs) | Node::Keys(theirs)) => {
                for (k, n) in theirs {
                    match mine.get_mut(k) {
                        Some(m) => m.merge(n),
                        None => {
                            mine.insert(k.clone(), n.clone());
                        }
                    }
                }
            }
            (Node::Items(mine), Node::Items(theirs)) => mine.merge(theirs),
            (Node::Items(mine), theirs @ (Node::Fields(_) | Node::Keys(_))) => mine.merge(theirs),
            (Node::Fields(_) | Node::Keys(_), Node::Items(theirs)) => {
                let mut inner = std::mem::replace(self, Node::All);
                inner.merge(theirs);
                *self = Node::Items(Box::new(inner));
            }
        }
    }

    fn prune(&self, v: &Value) -> Value {
        match (self, v) {
            (Node::All, v) => v.clone(),
            (Node::Items(inner), Value::Array(items)) => {
                Value::Array(items.iter().map(|i| inner.prune(i)).collect())
            }
            (Node::Items(_), v) => v.clone(),
            (Node::Fields(fields), Value::Object(m)) => Value::Object(
                m.iter()
                    .filter_map(|(k, v)| fields.get(k).map(|n| (k.clone(), n.prune(v))))
                    .collect(),
            ),
            (Node::Keys(fields), Value::Object(m)) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), fields.get(k).map_or(Value::Null, |n| n.prune(v))))
                    .collect(),
            ),
            (node, Value::Array(items)) => {
                Value::Array(items.iter().map(|i| node.prune(i)).collect())
            }
            (_, scalar) => scalar.clone(),
        }
    }
}

impl ReadSet {
    /// Everything: what is read when nothing can be bounded.
    pub fn all() -> ReadSet {
        ReadSet { root: Node::All }
    }

    /// A resource's whole identity: its naming ([`ReadSet::naming`]) and
    /// what `match`/`exclude` can select by (labels, annotations); what a
    /// rule reaching the request's identity fields reads.
    pub(crate) fn identity() -> ReadSet {
        let mut root = Node::Fields(BTreeMap::new());
        root.add(&["apiVersion"]);
        root.add(&["kind"]);
        for key in [
            "name",
            "generateName",
            "namespace",
            "uid",
            "labels",
            "annotations",
        ] {
            root.add(&["metadata", key]);
        }
        ReadSet { root }
    }

    /// What every resource's evaluation reads of its identity, whatever
    /// the rules: kind, name, namespace, uid (`generateName` names an
    /// object without a name). Labels and annotations are read by the
    /// rules that select by them ([`ReadSet::add_selected`]) or name them.
    pub(crate) fn naming() -> ReadSet {
        let mut root = Node::Fields(BTreeMap::new());
        root.add(&["apiVersion"]);
        root.add(&["kind"]);
        for key in ["name", "generateName", "namespace", "uid"] {
            root.add(&["metadata", key]);
        }
        ReadSet { root }
    }

    /// Adds what matching a compiled classic `rule` reads of the
    /// resource's identity beyond its naming: the labels for a `selector`
    /// or `namespaceSelector`, the annotations for `annotations`, all of it
    /// when its expressions reach the request's identity fields
    /// (`request.name`, `request.kind`, ...).
    fn add_selected(&mut self, rule: &Rule, uses: &Uses) {
        let selects = |what: fn(&ResourceDesc) -> bool| {
            [&rule.match_, &rule.exclude].iter().any(|block| {
                block
                    .any
                    .iter()
                    .chain(&block.all)
                    .any(|f| what(&f.resources))
            })
        };
        if selects(|r| r.selector.is_some() || r.namespace_selector.is_some()) {
            self.add_path(&["metadata", "labels"]);
        }
        if selects(|r| !r.annotations.is_empty()) {
            self.add_path(&["metadata", "annotations"]);
        }
        if uses.identity {
            self.merge(&ReadSet::identity());
        }
    }

    /// Whether the field chain `path` may be read (it, under it, or
    /// something above it whole).
    pub(crate) fn may_read(&self, path: &[&str]) -> bool {
        self.root.may_read(path)
    }

    /// Whether the whole resource is read.
    pub fn is_all(&self) -> bool {
        self.root == Node::All
    }

    /// Adds what `other` reads.
    pub fn merge(&mut self, other: &ReadSet) {
        self.root.merge(&other.root);
    }

    /// `value` with only the parts read.
    pub fn prune(&self, value: &Value) -> Value {
        self.root.prune(value)
    }

    /// The JSON text `json`, built with only the parts read (the rest is
    /// checked as JSON and skipped). Errors are serde_json's. To build many
    /// values, [`ReadSet::builder`] once.
    pub fn parse(&self, json: &str) -> serde_json::Result<Value> {
        self.builder().parse(json)
    }

    /// This set compiled for building values with only the parts read.
    pub fn builder(&self) -> Builder {
        Builder {
            root: Build::of(&self.root),
        }
    }

    /// Adds the subtree at `path` (the whole resource for an empty path)
    /// when `whole`, else keeps what is there with its type.
    pub(crate) fn add_segs(&mut self, path: &[Seg<'_>], whole: bool) {
        self.root.add_segs(path, whole);
    }

    fn add_path(&mut self, path: &[&str]) {
        self.root.add(path);
    }

    /// Adds what one compiled rule (its own or autogen's) reads: of the
    /// resource, and of its identity what its matching selects by.
    pub(crate) fn add_rule(&mut self, rule: &Rule) {
        if self.is_all() {
            return;
        }
        let mut uses = Uses::default();
        rule_reads(rule, &mut self.root, &mut uses);
        if uses.unbounded || rule.mutate.is_some() {
            self.root = Node::All;
        } else {
            self.add_selected(rule, &uses);
        }
    }
}

impl ReadSet {
    /// Nothing read.
    pub(crate) fn empty() -> ReadSet {
        ReadSet {
            root: Node::Fields(BTreeMap::new()),
        }
    }

    /// What the results of a classic policy's compiled `rules` (autogen's
    /// among them) depend on, for remembering them ([`crate::memo`]): what
    /// the rules read, the kind, and of the identity only what they use
    /// (`names` the name, `selector` the labels, `annotations` the
    /// annotations; a variable on the request's other fields all of it).
    /// `None` when the results depend on more than the resource: a context
    /// entry that fetches data, `time_now` or `random`, or reads that
    /// cannot be bounded. The namespace and operation are the memo's to key
    /// on.
    pub(crate) fn key_of_rules<'r>(rules: impl IntoIterator<Item = &'r Rule>) -> Option<ReadSet> {
        let mut key = ReadSet::empty();
        key.add_path(&["apiVersion"]);
        key.add_path(&["kind"]);
        for rule in rules {
            let mut uses = Uses::default();
            rule_reads(rule, &mut key.root, &mut uses);
            if uses.unbounded || uses.fetches || uses.impure || rule.mutate.is_some() {
                return None;
            }
            if selects_by_name(rule) {
                key.add_path(&["metadata", "name"]);
                key.add_path(&["metadata", "generateName"]);
            }
            key.add_selected(rule, &uses);
        }
        Some(key)
    }

    /// Feeds what of `v` is read to `h`: two values that agree on every
    /// part read hash alike.
    pub(crate) fn hash_read<H: std::hash::Hasher>(&self, v: &Value, h: &mut H) {
        hash_node(&self.root, v, h);
    }

    /// Whether `v` reads as `kept` does, `kept` being what [`ReadSet::prune`]
    /// kept of another value.
    pub(crate) fn same_read(&self, v: &Value, kept: &Value) -> bool {
        same_node(&self.root, v, kept)
    }
}

fn hash_node<H: std::hash::Hasher>(node: &Node, v: &Value, h: &mut H) {
    match (node, v) {
        (Node::Items(_) | Node::Fields(_) | Node::Keys(_), Value::Array(items)) => {
            let inner = match node {
                Node::Items(inner) => inner,
                node => node,
            };
            h.write_u8(b'[');
            h.write_usize(items.len());
            for i in items {
                hash_node(inner, i, h);
            }
        }
        (Node::Fields(fields), Value::Object(m)) => {
            h.write_u8(b'{');
            // A field is named by its place in the node (the same for
            // every value hashed with it).
            present(fields, m, |i, _, n, x| {
                h.write_usize(i);
                hash_node(n, x, h);
                true
            });
            h.write_u8(b'}');
        }
        (Node::Keys(fields), Value::Object(m)) => {
            h.write_u8(b'(');
            h.write_usize(m.len());
            for (k, x) in m {
                h.write(k.as_bytes());
                if let Some(n) = fields.get(k) {
                    hash_node(n, x, h);
                }
            }
        }
        (_, v) => hash_value(v, h),
    }
}

/// Calls `each` with the place in `fields`, the key, the node and the
/// value of every field both have, in key order, while it returns true;
/// whether it always did. Both maps are sorted by key: a merge, not a
/// lookup per field, when the value is about as big as the node (as a value
/// built by [`ReadSet::parse`] is).
fn present<'a>(
    fields: &'a BTreeMap<String, Node>,
    m: &'a Map<String, Value>,
    mut each: impl FnMut(usize, &'a str, &'a Node, &'a Value) -> bool,
) -> bool {
    if m.len() > 4 * fields.len() {
        return fields.iter().enumerate().all(|(i, (k, n))| match m.get(k) {
            Some(x) => each(i, k, n, x),
            None => true,
        });
    }
    let mut fs = fields.iter().enumerate().peekable();
    let mut vs = m.iter().peekable();
    while let (Some(&(i, (fk, n))), Some(&(vk, x))) = (fs.peek(), vs.peek()) {
        match fk.as_str().cmp(vk.as_str()) {
            std::cmp::Ordering::Less => {
                fs.next();
            }
            std::cmp::Ordering::Greater => {
                vs.next();
            }
            std::cmp::Ordering::Equal => {
                if !each(i, fk, n, x) {
                    return false;
                }
                fs.next();
                vs.next();
            }
        }
    }
    true
}

fn hash_value<H: std::hash::Hasher>(v: &Value, h: &mut H) {
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
        Value::Number(n) => {
            h.write_u8(3);
            match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => h.write_i64(i),
                (_, Some(u), _) => h.write_u64(u),
                (_, _, f) => h.write_u64(f.unwrap_or(0.0).to_bits()),
            }
        }
        Value::String(s) => {
            h.write_u8(4);
            h.write(s.as_bytes());
            h.write_u8(0xff);
        }
        Value::Array(a) => {
            h.write_u8(5);
            h.write_usize(a.len());
            a.iter().for_each(|x| hash_value(x, h));
        }
        Value::Object(m) => {
            h.write_u8(6);
            h.write_usize(m.len());
            for (k, x) in m {
                h.write(k.as_bytes());
                h.write_u8(0xff);
                hash_value(x, h);
            }
        }
    }
}

fn same_node(node: &Node, v: &Value, kept: &Value) -> bool {
    match (node, v, kept) {
        (Node::Items(_) | Node::Fields(_) | Node::Keys(_), Value::Array(a), Value::Array(b)) => {
            let inner = match node {
                Node::Items(inner) => inner,
                node => node,
            };
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same_node(inner, x, y))
        }
        (Node::Fields(fields), Value::Object(m), Value::Object(k)) => {
            // `kept` holds exactly the fields `v`'s counterpart had, in
            // key order: the same fields, each read the same.
            let mut kept = k.iter();
            present(
                fields,
                m,
                |_, key, n, x| matches!(kept.next(), Some((ky, y)) if ky == key && same_node(n, x, y)),
            ) && kept.next().is_none()
        }
        (Node::Keys(fields), Value::Object(m), Value::Object(k)) => {
            m.len() == k.len()
                && m.iter()
                    .all(|(key, x)| match (k.get(key), fields.get(key)) {
                        (Some(y), Some(n)) => same_node(n, x, y),
                        (Some(y), None) => y.is_null(),
                        (None, _) => false,
                    })
        }
        (Node::Fields(_) | Node::Keys(_), Value::Object(_) | Value::Array(_), _) => false,
        (Node::Items(_), Value::Array(_), _) => false,
        (_, v, kept) => v == kept,
    }
}

/// What an analysis found a rule to use besides what it reads of the
/// resource. Every part of a rule is looked at even once its reads are
/// unbounded, so that what it fetches and calls is always known.
#[derive(Debug, Default)]
struct Uses {
    /// Its reads cannot be bounded (the whole resource).
    unbounded: bool,
    /// The request's fields that come from the resource's identity
    /// (`request.name`, `request.kind`, ...): any field of `request` but
    /// [`REQUEST_OTHERS`].
    identity: bool,
    /// A context entry that fetches data (anything but a `variable`).
    fetches: bool,
    /// `time_now*` or `random`.
    impure: bool,
}

/// The fields of `request` that do not come from the resource's identity.
const REQUEST_OTHERS: [&str; 7] = [
    "object",
    "oldObject",
    "operation",
    "namespace",
    "userInfo",
    "roles",
    "clusterRoles",
];

/// Where reads go: the resource, and inside a `foreach` the element (read
/// under each path its list yields); what else is used, in `uses`.
struct Scope<'a> {
    resource: &'a mut Node,
    element: Node,
    uses: &'a mut Uses,
}

impl<'a> Scope<'a> {
    fn new(resource: &'a mut Node, uses: &'a mut Uses) -> Scope<'a> {
        Scope {
            resource,
            element: Node::Fields(BTreeMap::new()),
            uses,
        }
    }

    /// Records a part whose reads cannot be bounded.
    fn unbounded(&mut self) {
        self.uses.unbounded = true;
    }
}

/// Whether a rule's `match` or `exclude` names the resources it selects.
fn selects_by_name(rule: &Rule) -> bool {
    [&rule.match_, &rule.exclude].iter().any(|b| {
        b.any
            .iter()
            .chain(&b.all)
            .any(|f| !f.resources.names.is_empty())
    })
}

/// Adds what the compiled `rule`'s parts read of the resource to `root`,
/// and what else they use to `uses`. Matching reads only the identity and
/// the metadata it selects by ([`ReadSet::add_selected`]).
fn rule_reads(rule: &Rule, root: &mut Node, uses: &mut Uses) {
    let s = &mut Scope::new(root, uses);
    conditions_reads(rule.preconditions.as_ref(), s);
    context_reads(&rule.context, s);
    if let Some(v) = &rule.validate {
        v.message.iter().for_each(|m| str_reads(m, s));
        check_reads(&v.check, s, true);
    }
    // What a patch's variables read; the patched resource is the whole
    // resource ([`ReadSet::add_rule`]).
    if let Some(m) = &rule.mutate {
        mutation::mutate_reads(m, s);
    }
    // celPreconditions and generate rules are not bounded.
    if rule.cel_preconditions.is_some() || rule.generate.is_some() {
        s.unbounded();
    }
}

/// What a validate check reads: a pattern's keys of the resource at the
/// `top`, of the element inside a foreach.
fn check_reads(check: &Check, s: &mut Scope<'_>, top: bool) {
    let pattern = |p: &crate::policy::Pattern, s: &mut Scope<'_>| {
        let into = if top {
            &mut *s.resource
        } else {
            &mut s.element
        };
        if !pattern_reads(&p.doc, &mut Vec::new(), into) {
            s.unbounded();
        }
        vars_read(&p.doc, s);
    };
    match check {
        Check::Pattern(p) => pattern(p, s),
        Check::AnyPattern(ps) => ps.iter().for_each(|p| pattern(p, s)),
        Check::Deny(c) => conditions_reads(Some(c), s),
        Check::Foreach(decls) => {
            for d in decls {
                // `elementScope: false`: its patterns are matched against
                // the resource, not the element.
                if d.element_scope == Some(false) {
                    s.unbounded();
                }
                foreach_reads(&d.list, &d.context, d.preconditions.as_ref(), s, |inner| {
                    check_reads(&d.check, inner, false)
                });
            }
        }
        // The paths its CEL reads of `object` (the rule as autogen wrote
        // it: the pod template's paths for a controller's rule).
        Check::Cel(rule) => {
            let resource = &mut *s.resource;
            let uses = rule.reads(&mut |path, whole| resource.add_segs(path, whole));
            s.uses.identity |= uses.request;
        }
        Check::PodSecurity(_) | Check::VerifyImages(_) | Check::Unsupported(_) => s.unbounded(),
    }
}

/// What the conditions read (their keys' and values' variables).
fn conditions_reads(c: Option<&Conditions>, s: &mut Scope<'_>) {
    for c in c
        .into_iter()
        .flat_map(|c| c.any.iter().chain(&c.all).flatten())
    {
        for o in [&c.key, &c.value] {
            match o {
                Operand::Literal(_) => {}
                Operand::Variable(expr) => expr_reads(expr.trim(), s),
                Operand::Template(doc) => vars_read(doc, s),
            }
        }
    }
}

/// What context entries read: the variables in their fields, and a
/// `variable.jmesPath` without a `value` (it queries the whole context).
/// Other entries' `jmesPath` query what they fetched: only the variables
/// in it read the context.
fn context_reads(entries: &[ContextEntry], s: &mut Scope<'_>) {
    let query = |q: &Option<String>, s: &mut Scope<'_>| {
        if let Some(q) = q {
            s.uses.impure |= impure(q);
            str_reads(q, s);
        }
    };
    for entry in entries {
        // An entry that shadows the request's roots.
        if ["request", "images", "element"].iter().any(|root| {
            entry
                .name
                .strip_prefix(root)
                .is_some_and(|r| r.is_empty() || r.starts_with('.'))
        }) {
            s.unbounded();
        }
        if !matches!(entry.source, ContextSource::Variable { .. }) {
            s.uses.fetches = true;
        }
        match &entry.source {
            ContextSource::Variable {
                value,
                jmes_path,
                default,
            } => {
                match (jmes_path, value) {
                    (Some(q), None) => {
                        str_reads(q, s);
                        expr_reads(q, s);
                    }
                    _ => query(jmes_path, s),
                }
                value.iter().chain(default).for_each(|v| vars_read(v, s));
            }
            ContextSource::ConfigMap { name, namespace } => {
                str_reads(name, s);
                str_reads(namespace, s);
            }
            ContextSource::ApiCall {
                url_path,
                jmes_path,
                default,
            } => {
                str_reads(url_path, s);
                query(jmes_path, s);
                default.iter().for_each(|v| vars_read(v, s));
            }
            ContextSource::ApiService {
                url,
                ca_bundle,
                method: _,
                data,
                jmes_path,
                default,
            } => {
                std::iter::once(url)
                    .chain(ca_bundle)
                    .for_each(|t| str_reads(t, s));
                for (k, v) in data {
                    str_reads(k, s);
                    vars_read(v, s);
                }
                query(jmes_path, s);
                default.iter().for_each(|v| vars_read(v, s));
            }
            ContextSource::GlobalReference {
                name,
                projection,
                jmes_path,
            } => {
                std::iter::once(name)
                    .chain(projection)
                    .for_each(|t| str_reads(t, s));
                query(jmes_path, s);
            }
            ContextSource::ImageRegistry {
                reference,
                jmes_path,
            } => {
                str_reads(reference, s);
                query(jmes_path, s);
            }
        }
    }
}

/// A foreach declaration (validate's or mutate's) reads, under each path
/// its `list` yields, what its `body` reads of the element (into the
/// scope's `element`); its context, preconditions and the rest of its body
/// read what they read of the resource.
fn foreach_reads(
    list: &str,
    context: &[ContextEntry],
    preconditions: Option<&Conditions>,
    s: &mut Scope<'_>,
    body: impl FnOnce(&mut Scope<'_>),
) {
    s.uses.impure |= impure(list);
    let (roots, paths) = context_of(list, false).unwrap_or_else(|| {
        s.unbounded();
        Default::default()
    });
    apply_roots(&roots, s);
    let mut inner = Scope {
        resource: &mut *s.resource,
        element: Node::Fields(BTreeMap::new()),
        uses: &mut *s.uses,
    };
    context_reads(context, &mut inner);
    conditions_reads(preconditions, &mut inner);
    body(&mut inner);
    let element = inner.element;
    // The elements are where the list took them from.
    for path in &paths {
        let target = match path.split_first() {
            Some((root, rest)) if root == "element" => {
                graft(&mut s.element, rest, &element);
                continue;
            }
            Some((request, rest)) if request == "request" => match rest.split_first() {
                Some((object, rest))
                    if (object == "object" || object == "oldObject") && !rest.is_empty() =>
                {
                    rest
                }
                // The request's other fields.
                Some((other, _)) if !["object", "oldObject"].contains(&other.as_str()) => {
                    continue;
                }
                _ => {
                    s.unbounded();
                    continue;
                }
            },
            // The whole context.
            None => {
                s.unbounded();
                continue;
            }
            // A context entry: bounded where it is defined.
            Some(_) => continue,
        };
        graft(s.resource, target, &element);
    }
}

/// Whether a JMESPath expression calls the clock or randomness.
fn impure(expr: &str) -> bool {
    expr.contains("time_now") || expr.contains("random(")
}

/// Merges `node` in at `path` below `into`.
fn graft(into: &mut Node, path: &[String], node: &Node) {
    match (into, path.split_first()) {
        (into, None) => into.merge(node),
        (Node::All, _) => {}
        (Node::Items(inner), Some(_)) => graft(inner, path, node),
        (Node::Fields(fields) | Node::Keys(fields), Some((first, rest))) => graft(
            fields
                .entry(first.clone())
                .or_insert_with(|| Node::Fields(BTreeMap::new())),
            rest,
            node,
        ),
    }
}

/// What a pattern reads of the resource at `path`: the keys it names, and
/// under each leaf everything.
fn pattern_reads(p: &Value, path: &mut Vec<String>, root: &mut Node) -> bool {
    match p {
        Value::Object(m) => {
            for (key, sub) in m {
                let name = parse_anchor(key).map_or(key.as_str(), |(_, inner)| inner);
                // A `$(...)` reference reads another part of the resource.
                if name.starts_with("$(") || name.contains("{{") {
                    return false;
                }
                if crate::wildcard::has_wildcard(name) {
                    // Any key of this map may match.
                    add(root, path);
                    continue;
                }
                path.push(name.to_string());
                let ok = pattern_reads(sub, path, root);
                path.pop();
                if !ok {
                    return false;
                }
            }
            true
        }
        Value::Array(items) => items.iter().all(|item| pattern_reads(item, path, root)),
        Value::String(s) if s.contains("$(") => false,
        _ => {
            add(root, path);
            true
        }
    }
}

fn add(root: &mut Node, path: &[String]) {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    root.add(&path);
}

/// Adds what the variables in the keys and strings of `doc` read.
fn vars_read(doc: &Value, s: &mut Scope<'_>) {
    match doc {
        Value::String(text) => str_reads(text, s),
        Value::Array(a) => a.iter().for_each(|v| vars_read(v, s)),
        Value::Object(m) => m.iter().for_each(|(k, v)| {
            str_reads(k, s);
            vars_read(v, s);
        }),
        _ => {}
    }
}

fn str_reads(text: &str, s: &mut Scope<'_>) {
    if !text.contains("{{") {
        return;
    }
    if nested(text) {
        // The inner variable's value becomes part of the outer's text.
        s.uses.impure |= impure(text);
        s.unbounded();
        return;
    }
    for (expr, _) in scan_vars(text) {
        expr_reads(expr.trim(), s);
    }
}

/// Whether a `{{` opens inside another variable.
fn nested(s: &str) -> bool {
    let mut depth = 0usize;
    let mut rest = s;
    while let Some(i) = rest.find(['{', '}']) {
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("{{") {
            depth += 1;
            if depth > 1 {
                return true;
            }
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            depth = depth.saturating_sub(1);
            rest = after;
        } else {
            rest = &tail[1..];
        }
    }
    false
}

/// Adds what one JMESPath expression reads (its result whole).
fn expr_reads(expr: &str, s: &mut Scope<'_>) {
    s.uses.impure |= impure(expr);
    match context_of(expr, true) {
        Some((roots, _)) => apply_roots(&roots, s),
        None => s.unbounded(),
    }
}

/// What `expr` reads of its context, by root, and the paths of the values
/// it yields (read whole too when `whole_result`); `None` when it cannot
/// be bounded (it does not compile, or it reads the whole context).
fn context_of(expr: &str, whole_result: bool) -> Option<(BTreeMap<String, Node>, Vec<Path>)> {
    let compiled = crate::jmespath::compile(expr).ok()?;
    let mut ctx = Node::Fields(BTreeMap::new());
    let result = walk(compiled.as_ast(), &[Vec::new()], &mut ctx);
    if whole_result {
        mark(&mut ctx, &result);
    }
    match ctx {
        Node::Fields(roots) => Some((roots, result)),
        Node::All | Node::Items(_) | Node::Keys(_) => None,
    }
}

/// Adds the reads of the context's roots to the scope: `request.object`
/// and `request.oldObject` to the resource, `element` to the element.
/// Other roots are the request's other fields, user info and context
/// entries (bounded where they are defined).
fn apply_roots(roots: &BTreeMap<String, Node>, s: &mut Scope<'_>) {
    if roots.contains_key("images") {
        // Computed from the resource's containers.
        s.unbounded();
    }
    if let Some(element) = roots.get("element") {
        s.element.merge(element);
    }
    match roots.get("request") {
        None => {}
        Some(Node::Fields(request)) => {
            s.uses.identity |= request
                .keys()
                .any(|k| !REQUEST_OTHERS.contains(&k.as_str()));
            for object in ["object", "oldObject"] {
                match request.get(object) {
                    Some(Node::All | Node::Items(_) | Node::Keys(_)) => s.unbounded(),
                    Some(read) => s.resource.merge(read),
                    None => {}
                }
            }
        }
        Some(Node::All | Node::Items(_) | Node::Keys(_)) => {
            s.uses.identity = true;
            s.unbounded();
        }
    }
}

type Path = Vec<String>;

/// The paths (of the context) whose values `ast`, applied to the values at
/// `cur`, yields; what it reads on the way is marked in `ctx`. Lists are
/// transparent, so an index, a projection or a flatten keeps the paths;
/// what consumes a value (a comparison, a function, a filter's
/// predicate) reads it whole; a new value (a literal, a function's
/// result) is at no path.
fn walk(ast: &jmespath::ast::Ast, cur: &[Path], ctx: &mut Node) -> Vec<Path> {
    use jmespath::ast::{Ast, Comparator};
    match ast {
        Ast::Field { name, .. } => cur
            .iter()
            .map(|p| {
                let mut p = p.clone();
                p.push(name.clone());
                p
            })
            .collect(),
        Ast::Identity { .. } | Ast::Index { .. } | Ast::Slice { .. } => cur.to_vec(),
        Ast::Subexpr { lhs, rhs, .. } | Ast::Projection { lhs, rhs, .. } => {
            let at = walk(lhs, cur, ctx);
            walk(rhs, &at, ctx)
        }
        Ast::Flatten { node, .. } => walk(node, cur, ctx),
        Ast::MultiList { elements, .. } => {
            elements.iter().flat_map(|e| walk(e, cur, ctx)).collect()
        }
        Ast::ObjectValues { node, .. } => {
            // Any key's value: the object whole.
            let at = walk(node, cur, ctx);
            mark(ctx, &at);
            at
        }
        Ast::Literal { .. } => Vec::new(),
        Ast::Condition {
            predicate, then, ..
        } => {
            let tested = walk(predicate, cur, ctx);
            mark(ctx, &tested);
            walk(then, cur, ctx)
        }
        Ast::Or { lhs, rhs, .. } | Ast::And { lhs, rhs, .. } => {
            // Truthiness reads each side whole; the result is one of them.
            let mut at = walk(lhs, cur, ctx);
            let other = walk(rhs, cur, ctx);
            mark(ctx, &at);
            mark(ctx, &other);
            at.extend(other);
            at
        }
        Ast::Not { node, .. } => {
            let at = walk(node, cur, ctx);
            mark(ctx, &at);
            Vec::new()
        }
        Ast::Comparison {
            comparator: Comparator::Equal | Comparator::NotEqual,
            lhs,
            rhs,
            ..
        } if is_null(lhs) || is_null(rhs) => {
            // Whether a value is null (what `a.[b, c]` asks of `a`): a
            // value kept at its path keeps that.
            for side in [lhs, rhs] {
                for p in walk(side, cur, ctx) {
                    let p: Vec<&str> = p.iter().map(String::as_str).collect();
                    ctx.touch(&p);
                }
            }
            Vec::new()
        }
        Ast::Comparison { lhs, rhs, .. } => {
            for side in [lhs, rhs] {
                let at = walk(side, cur, ctx);
                mark(ctx, &at);
            }
            Vec::new()
        }
        Ast::Function { name, args, .. } if name == "keys" && args.len() == 1 => {
            // The keys of a map, none of its values.
            for p in walk(&args[0], cur, ctx) {
                let p: Vec<&str> = p.iter().map(String::as_str).collect();
                ctx.keys_at(&p);
            }
            Vec::new()
        }
        Ast::Function { args, .. } => {
            for arg in args {
                let at = walk(arg, cur, ctx);
                mark(ctx, &at);
            }
            Vec::new()
        }
        Ast::MultiHash { elements, .. } => {
            for kv in elements {
                let at = walk(&kv.value, cur, ctx);
                mark(ctx, &at);
            }
            Vec::new()
        }
        // Applied by a function to the values of its other arguments,
        // which are read whole: at no path of the context.
        Ast::Expref { ast, .. } => {
            walk(ast, &[], ctx);
            Vec::new()
        }
    }
}

fn is_null(ast: &jmespath::ast::Ast) -> bool {
    matches!(ast, jmespath::ast::Ast::Literal { value, .. } if value.is_null())
}

fn mark(ctx: &mut Node, paths: &[Path]) {
    for p in paths {
        add(ctx, p);
    }
}

/// A [`ReadSet`] compiled for building values with only the parts read
/// ([`ReadSet::builder`]).
#[derive(Debug, Clone)]
pub struct Builder {
    root: Build,
}

impl Builder {
    /// The JSON text `json`, built with only the parts read (the rest is
    /// checked as JSON and skipped). Errors are serde_json's.
    pub fn parse(&self, json: &str) -> serde_json::Result<Value> {
        let mut de = serde_json::Deserializer::from_str(json);
        let v = self.parse_from(&mut de)?;
        de.end()?;
        Ok(v)
    }

    /// The next JSON value of `de`, built with only the parts read (as
    /// [`Builder::parse`]); what follows it is left to the caller, so a
    /// value inside a larger document (an item of a list page) is read in
    /// the same scan as the document.
    pub fn parse_from<'de, R: serde_json::de::Read<'de>>(
        &self,
        de: &mut serde_json::Deserializer<R>,
    ) -> serde_json::Result<Value> {
        Seed(&self.root).deserialize(de)
    }
}

/// A [`Node`] as values are built with it: each map's fields in a list
/// whose entries tell most keys apart by length and last byte, so that a
/// key no policy reads (most of a resource's) is rejected without a string
/// comparison; a node names a few fields.
#[derive(Debug, Clone)]
enum Build {
    All,
    Fields(Vec<Field>),
    Items(Box<Build>),
    Keys(Vec<Field>),
}

#[derive(Debug, Clone)]
struct Field {
    name: Box<str>,
    last: u8,
    node: Build,
}

impl Build {
    fn of(node: &Node) -> Build {
        let fields = |m: &BTreeMap<String, Node>| {
            m.iter()
                .map(|(k, n)| Field {
                    name: k.as_str().into(),
                    last: k.as_bytes().last().copied().unwrap_or(0),
                    node: Build::of(n),
                })
                .collect()
        };
        match node {
            Node::All => Build::All,
            Node::Fields(m) => Build::Fields(fields(m)),
            Node::Items(inner) => Build::Items(Box::new(Build::of(inner))),
            Node::Keys(m) => Build::Keys(fields(m)),
        }
    }
}

/// The node of `key` among `fields`.
fn field<'b>(fields: &'b [Field], key: &str) -> Option<&'b Build> {
    let last = key.as_bytes().last().copied().unwrap_or(0);
    fields
        .iter()
        .find(|f| f.name.len() == key.len() && f.last == last && *f.name == *key)
        .map(|f| &f.node)
}

/// Builds a value with only the parts `node` reads.
struct Seed<'n>(&'n Build);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        match self.0 {
            Build::All => serde::Deserialize::deserialize(d),
            Build::Fields(_) | Build::Items(_) | Build::Keys(_) => {
                d.deserialize_any(Narrow { node: self.0 })
            }
        }
    }
}

/// Builds a value as a `Fields` or `Items` node reads it.
struct Narrow<'n> {
    node: &'n Build,
}

impl<'de> Visitor<'de> for Narrow<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let each = match self.node {
            Build::Items(inner) => inner,
            node => node,
        };
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Seed(each))? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let (fields, every_key) = match self.node {
            Build::Fields(fields) => (fields, false),
            Build::Keys(fields) => (fields, true),
            // Read for its items: whole.
            _ => {
                return serde::Deserialize::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                );
            }
        };
        let mut out = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            match field(fields, &key) {
                Some(node) => {
                    let v = map.next_value_seed(Seed(node))?;
                    out.insert(key.into_owned(), v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                    if every_key {
                        out.insert(key.into_owned(), Value::Null);
                    }
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// A map key, borrowed from the text when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An engine with the policies `docs`.
    fn engine_with(docs: impl IntoIterator<Item = Value>) -> crate::Engine {
        let mut engine = crate::Engine::new();
        for doc in docs {
            engine.add(
                crate::Document::compile(&doc)
                    .expect("compiles")
                    .expect("a policy"),
            );
        }
        engine
    }

    /// An engine with the ClusterPolicy `p` of these rules.
    fn classic_engine(rules: Value) -> crate::Engine {
        engine_with([json!({
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "p"},
            "spec": {"rules": rules},
        })])
    }

    fn reads_of(rules: Value) -> ReadSet {
        classic_engine(rules).reads()
    }

    /// What `engine` gives when it validates a CREATE of `object`.
    fn validate(engine: &crate::Engine, object: Value) -> Vec<crate::RuleResult> {
        engine
            .evaluation(&crate::NoClusterData)
            .validate(&crate::Prepared::new(crate::EvalRequest::create(
                std::sync::Arc::new(object),
            )))
            .into_vec()
    }

    /// The memo key of a one-rule policy ([`ReadSet::key_of_rules`]).
    fn memo_key(rule: Value) -> Option<ReadSet> {
        let doc = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "p"}, "spec": {"rules": [rule]}});
        match crate::Document::compile(&doc) {
            Ok(Some(crate::Document::Policy(p))) => p.memo_key,
            other => panic!("{doc}: {other:?}"),
        }
    }

    /// Results that depend on fetched data or the clock, wherever in the
    /// rule the entry or call is (a foreach's context, a variable's
    /// jmesPath over its value), are never remembered; a pattern's are,
    /// keyed on what it reads.
    #[test]
    fn fetched_data_anywhere_in_a_rule_is_never_remembered() {
        let pods = json!({"any": [{"resources": {"kinds": ["Pod"]}}]});
        let foreach = |context: Value| {
            json!({"name": "r", "match": pods, "validate": {"foreach": [{
                "list": "request.object.spec.containers", "context": context,
                "deny": {"conditions": {"any": [{"key": "{{ element.name }}", "operator": "Equals", "value": "x"}]}}}]}})
        };
        for rule in [
            foreach(json!([{"name": "ns", "apiCall": {"urlPath": "/api/v1/namespaces"}}])),
            foreach(json!([{"name": "cm", "configMap": {"name": "c", "namespace": "d"}}])),
            foreach(
                json!([{"name": "t", "variable": {"value": "x", "jmesPath": "time_now_utc()"}}]),
            ),
            json!({"name": "r", "match": pods, "validate": {"message": "{{ random('[a-z]{4}') }}",
                "pattern": {"spec": {"hostNetwork": false}}}}),
        ] {
            assert_eq!(memo_key(rule.clone()), None, "{rule}");
        }
        let pattern = json!({"name": "r", "match": pods, "validate": {"message": "m",
            "pattern": {"spec": {"hostNetwork": false}}}});
        let key = memo_key(pattern).expect("a key");
        assert!(key.may_read(&["spec", "hostNetwork"]) && !key.may_read(&["spec", "containers"]));
        // A variable on the element only reads the containers' names.
        let key = memo_key(foreach(json!([]))).expect("a key");
        assert!(key.may_read(&["spec", "containers", "name"]));
        assert!(!key.may_read(&["spec", "containers", "image"]));
    }

    #[test]
    fn pss_controls_read_the_container_fields_they_name() {
        let reads = reads_of(json!([
            {"name": "caps", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "validate": {"message": "no caps on {{ request.object.metadata.name }}", "deny": {"conditions": {"all": [
                {"key": "{{ request.object.spec.[ephemeralContainers, initContainers, containers][].securityContext.capabilities.add[] }}",
                 "operator": "AnyNotIn", "value": ["CHOWN"]}]}}}},
            {"name": "host", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "validate": {"pattern": {"spec": {"=(hostNetwork)": "false",
                "containers": [{"=(ports)": [{"=(hostPort)": 0}]}]}}}},
        ]));
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {
                "hostNetwork": false,
                "containers": [{"name": "c", "image": "i", "env": [{"name": "E"}],
                    "ports": [{"hostPort": 80, "containerPort": 80}],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}, "runAsUser": 0}}],
                "volumes": [{"name": "v"}],
            },
            "status": {"phase": "Running"},
        });
        // The labels are not read: no rule selects by them.
        let want = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a"},
            "spec": {
                "hostNetwork": false,
                "containers": [{"ports": [{"hostPort": 80}],
                    "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
            },
        });
        assert_eq!(reads.prune(&pod), want);
        assert_eq!(reads.parse(&pod.to_string()).expect("parses"), want);
    }

    /// Labels and annotations are read by the rules that select by them
    /// (in `match` or `exclude`), the whole identity by a rule that reaches
    /// the request's identity fields; a ValidatingPolicy's selectors read
    /// the labels.
    #[test]
    fn the_identity_is_read_as_far_as_the_rules_select_by_it() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "generateName": "a-",
                "labels": {"x": "y"}, "annotations": {"k": "v"}, "resourceVersion": "9"},
            "spec": {"containers": [{"name": "c"}]},
        });
        let meta = |reads: &ReadSet| reads.prune(&pod)["metadata"].clone();
        let naming = json!({"name": "a", "namespace": "n", "uid": "u", "generateName": "a-"});
        let rule = |m: Value, message: &str| {
            json!([{"name": "r", "match": m,
                "validate": {"message": message, "pattern": {"spec": {"containers": [{"name": "?*"}]}}}}])
        };
        let pods = json!({"any": [{"resources": {"kinds": ["Pod"]}}]});
        assert_eq!(meta(&reads_of(rule(pods.clone(), "m"))), naming);
        let selected = json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"x": "y"}}}}]});
        let mut want = naming.clone();
        want["labels"] = json!({"x": "y"});
        assert_eq!(meta(&reads_of(rule(selected, "m"))), want);
        let annotated =
            json!({"any": [{"resources": {"kinds": ["Pod"], "annotations": {"k": "v"}}}]});
        let mut want = naming.clone();
        want["annotations"] = json!({"k": "v"});
        assert_eq!(meta(&reads_of(rule(annotated, "m"))), want);
        // `request.name` is the object's identity: all of it.
        let mut want = naming.clone();
        want["labels"] = json!({"x": "y"});
        want["annotations"] = json!({"k": "v"});
        assert_eq!(meta(&reads_of(rule(pods, "{{ request.name }}"))), want);
        // A ValidatingPolicy with an objectSelector.
        let vpol = json!({
            "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "ValidatingPolicy",
            "metadata": {"name": "v"},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                        "operations": ["CREATE"], "resources": ["pods"]}],
                    "objectSelector": {"matchLabels": {"x": "y"}},
                },
                "validations": [{"expression": "object.spec.containers.size() > 0"}],
            },
        });
        let engine = engine_with([vpol]);
        let mut want = naming.clone();
        want["labels"] = json!({"x": "y"});
        assert_eq!(meta(&engine.reads()), want);
    }
    /// The Pod Security set of bench/ (17 classic policies, patterns,
    /// deny conditions and foreach): pods narrowed to what it reads get
    /// the results the whole pods get, and `status` and the containers'
    /// `env` are not read.
    #[test]
    fn the_pod_security_set_gets_the_same_results_on_narrowed_pods() {
        pod_security_set_on_narrowed_pods(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/policies/pss-classic"
        ));
    }

    /// The same controls as 17 ValidatingPolicies (CEL): the same results
    /// narrowed and whole; neither `status` nor the parts of a container
    /// no control looks at are read, though the policies reach the
    /// containers through a variable and comprehension variables.
    #[test]
    fn the_cel_pod_security_set_gets_the_same_results_on_narrowed_pods() {
        pod_security_set_on_narrowed_pods(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../bench/policies/pss-cel"
        ));
    }

    fn pod_security_set_on_narrowed_pods(dir: &str) {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("bench policies")
            .map(|f| f.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        assert_eq!(files.len(), 17);
        let engine = engine_with(files.iter().flat_map(|f| {
            let text = std::fs::read_to_string(f).expect("readable");
            serde_saphyr::from_multiple::<Value>(&text).expect("YAML")
        }));
        let reads = engine.reads();
        assert!(!reads.is_all());
        let container = |name: &str, security: Value| {
            json!({"name": name, "image": "nginx:1.27", "env": [{"name": "A", "value": "b"}],
                   "ports": [{"containerPort": 80}], "securityContext": security})
        };
        let restricted = json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
        let pods = [
            json!({"spec": {"containers": [container("a", restricted.clone())]}}),
            json!({"spec": {"hostNetwork": true, "hostPID": false,
                "initContainers": [container("i", json!({"privileged": true}))],
                "containers": [container("a", json!({"capabilities": {"add": ["NET_ADMIN", "CHOWN"]},
                    "procMount": "Unmasked", "seLinuxOptions": {"type": "spc_t"}})),
                    container("b", json!({"runAsUser": 0}))],
                "volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}],
                "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}],
                    "seccompProfile": {"type": "Unconfined"}}}}),
            json!({"metadata": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/a": "unconfined"}},
                "spec": {"containers": [container("a", json!({"windowsOptions": {"hostProcess": true}})),
                    container("b", json!({"runAsNonRoot": false}))],
                "ephemeralContainers": [container("e", json!({"capabilities": {"add": ["SYS_ADMIN"]}}))]}}),
        ];
        let mut failures = 0;
        for (i, p) in pods.iter().enumerate() {
            let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "default"},
                "status": {"phase": "Running", "podIP": "10.0.0.1"}});
            for (k, v) in p.as_object().expect("object") {
                match (pod.get_mut(k), v) {
                    (Some(Value::Object(have)), Value::Object(add)) => have.extend(add.clone()),
                    _ => {
                        pod[k] = v.clone();
                    }
                }
            }
            let narrowed = reads.parse(&pod.to_string()).expect("parses");
            assert_eq!(narrowed, reads.prune(&pod));
            assert!(narrowed.get("status").is_none());
            assert!(
                narrowed["spec"]["containers"][0].get("env").is_none(),
                "{reads:?}"
            );
            assert!(
                narrowed["spec"]["containers"][0]
                    .get("securityContext")
                    .is_some()
            );
            let whole = validate(&engine, pod.clone());
            failures += whole
                .iter()
                .filter(|r| r.status == crate::result::Status::Fail)
                .count();
            assert_eq!(validate(&engine, narrowed), whole, "pod {i}");
        }
        // The pods are built to fail many controls, not to pass vacuously.
        assert!(failures >= 15, "{failures} failures");
    }
    #[test]
    fn what_cannot_be_bounded_reads_everything() {
        let pod_rule = |validate: Value| {
            json!([{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "validate": validate}])
        };
        for (what, validate) in [
            (
                "the whole object",
                json!({"message": "{{ to_string(request.object) }}", "deny": {}}),
            ),
            (
                "the context",
                json!({"message": "{{ length(@) }}", "deny": {}}),
            ),
            (
                "a nested variable",
                json!({"message": "{{ request.object.{{ request.object.metadata.name }} }}", "deny": {}}),
            ),
            (
                "images",
                json!({"message": "{{ images.containers }}", "deny": {}}),
            ),
            ("a reference", json!({"pattern": {"spec": {"a": "$(./b)"}}})),
            (
                "CEL using the object whole",
                json!({"cel": {"expressions": [{"expression": "object != null"}]}}),
            ),
            (
                "podSecurity",
                json!({"podSecurity": {"level": "baseline", "version": "latest"}}),
            ),
            (
                "elementScope false",
                json!({"foreach": [{"list": "request.object.spec.containers",
                "elementScope": false, "pattern": {"spec": {"x": 1}}}]}),
            ),
            (
                "foreach over the object",
                json!({"foreach": [{"list": "request.object",
                "deny": {}}]}),
            ),
        ] {
            let reads = reads_of(pod_rule(validate));
            assert!(reads.is_all(), "{what}: {reads:?}");
        }
        // `{{ element }}` reads the elements whole, and not the rest.
        let reads = reads_of(pod_rule(
            json!({"foreach": [{"list": "request.object.spec.containers",
            "deny": {"conditions": {"any": [{"key": "{{ element }}", "operator": "Equals", "value": 1}]}}}]}),
        ));
        assert_eq!(
            reads.prune(&json!({"spec": {"a": 1, "containers": [{"x": {"y": 1}}]}, "status": 1})),
            json!({"spec": {"containers": [{"x": {"y": 1}}]}})
        );
    }

    /// A classic rule's `validate.cel` reads what its expressions select
    /// of `object`, and its autogen rule the pod template's paths.
    #[test]
    fn a_classic_cel_rule_reads_what_its_expressions_select() {
        let engine = engine_with([
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "c"},
                "spec": {"rules": [{"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "validate": {"cel": {
                        "variables": [{"name": "n", "expression": "object.spec.?nodeName.orValue('')"}],
                        "expressions": [{"expression": "variables.n != 'bad' && !has(object.spec.hostPID)",
                                         "messageExpression": "'on ' + object.metadata.name"}]}}}]}}),
        ]);
        let reads = engine.reads();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"nodeName": "bad", "hostPID": true, "containers": [{"name": "c"}]}, "status": {}});
        assert_eq!(
            reads.prune(&pod),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"nodeName": "bad", "hostPID": true}}),
            "{reads:?}"
        );
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": 1, "template": {"spec": pod["spec"].clone()}}});
        assert_eq!(
            reads.prune(&deployment)["spec"],
            json!({"template": {"spec": {"nodeName": "bad", "hostPID": true}}}),
            "{reads:?}"
        );
        for object in [pod, deployment] {
            let whole = validate(&engine, object.clone());
            assert_eq!(whole.len(), 1, "{object}");
            assert_eq!(whole[0].status, crate::result::Status::Fail);
            assert_eq!(validate(&engine, reads.prune(&object)), whole, "{object}");
        }
    }

    fn vpol_engine(spec: Value) -> crate::Engine {
        engine_with([json!({"apiVersion": "policies.kyverno.io/v1",
            "kind": "ValidatingPolicy", "metadata": {"name": "v"}, "spec": spec})])
    }

    /// A ValidatingPolicy reads the subtree at the end of each chain of
    /// field selections on `object` / `oldObject` in its match conditions,
    /// variables, validations and message expressions (and those of its
    /// autogen variants, which read the pod template), and nothing else; and
    /// evaluating a narrowed resource gives the results the whole one gives.
    #[test]
    fn a_validating_policy_reads_what_its_expressions_select() {
        let engine = vpol_engine(json!({
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "labelled",
                "expression": "object.metadata.?labels[?'skip'].orValue('') != 'yes'"}],
            "variables": [{"name": "containers",
                "expression": "object.spec.containers + object.spec.?initContainers.orValue([])"}],
            "validations": [
                {"expression": "variables.containers.all(c, !has(c.securityContext) || c.securityContext.privileged != true)",
                 "messageExpression": "'privileged: ' + object.spec['nodeName']"},
                {"expression": "!has(object.spec.hostNetwork) || !object.spec.hostNetwork"},
                {"expression": "object.spec.?priority.orValue(0) >= 0"}
            ]
        }));
        let reads = engine.reads();
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "n", "labels": {"skip": "no"}, "managedFields": [{"x": 1}]},
            "spec": {
                "containers": [{"name": "c", "image": "i", "securityContext": {"privileged": true}}],
                "initContainers": [{"name": "i", "image": "j"}],
                "nodeName": "node-1", "hostNetwork": true, "priority": 5,
                "volumes": [{"name": "v", "emptyDir": {}}], "dnsPolicy": "ClusterFirst"
            },
            "status": {"phase": "Running"}
        });
        let narrowed = reads.prune(&pod);
        assert_eq!(
            narrowed,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "n", "labels": {"skip": "no"}},
                "spec": {
                    // what the comprehension reads of each element of the
                    // variable's lists
                    "containers": [{"securityContext": {"privileged": true}}],
                    "initContainers": [{}],
                    "nodeName": "node-1", "hostNetwork": true, "priority": 5,
                    // autogen: the controllers' variants read `spec.template`
                }
            }),
            "{reads:?}"
        );
        // Pods, and a Deployment through the autogen variant: the same
        // results narrowed and whole.
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "n"},
            "spec": {"replicas": 2, "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod["spec"].clone()}},
            "status": {"replicas": 2}
        });
        let mut quiet = pod.clone();
        quiet["spec"]["containers"][0]["securityContext"]["privileged"] = json!(false);
        quiet["spec"]["hostNetwork"] = json!(false);
        let mut skipped = pod.clone();
        skipped["metadata"]["labels"]["skip"] = json!("yes");
        for object in [pod, quiet, skipped, deployment] {
            let narrowed = reads.prune(&object);
            let whole = validate(&engine, object.clone());
            let got = validate(&engine, narrowed);
            assert!(!whole.is_empty(), "{object}");
            assert_eq!(format!("{got:?}"), format!("{whole:?}"), "{object}");
        }
        // A root used otherwise than through field selections reads the
        // object whole, or the subtree where the selections stop.
        let sample = json!({"kind": "Pod", "spec": {"containers": [{"image": "i", "name": "c"}], "x": 1}, "status": 1});
        for (expr, spec) in [
            ("object != null", None),
            ("string(oldObject) != ''", None),
            (
                "object.spec[variables.k] != null",
                Some(sample["spec"].clone()),
            ),
            (
                "object.spec.containers[0].image != ''",
                Some(json!({"containers": [{"image": "i"}]})),
            ),
        ] {
            let reads = vpol_engine(json!({
                "variables": [{"name": "k", "expression": "'x'"}],
                "validations": [{"expression": expr}]
            }))
            .reads();
            match spec {
                None => assert!(reads.is_all(), "{expr}: {reads:?}"),
                Some(spec) => {
                    let kept = reads.prune(&sample);
                    assert_eq!(kept["spec"], spec, "{expr}: {reads:?}");
                    assert!(kept.get("status").is_none(), "{expr}: {reads:?}");
                }
            }
        }
    }

    /// What a ValidatingPolicy reads through variables, comprehension
    /// variables, `has`, optionals, ternaries and literals: on pods built to
    /// catch what a too narrow analysis would lose (a comprehension that
    /// never looks at its elements, a map iterated for its keys, a list
    /// where a map is expected), narrowed and whole give the same results.
    #[test]
    fn cel_reads_follow_variables_and_comprehensions() {
        let exprs = [
            "object.spec.containers.all(c, true)",
            "object.spec.containers.exists(c, has(c.securityContext))",
            "object.metadata.?annotations.orValue({}).all(k, k.startsWith('a'))",
            "object.spec.containers.map(c, c.name).exists(n, n == 'b')",
            "object.spec.containers.filter(c, c.image.startsWith('n')).size() > 1",
            "object.spec.volumes.all(v, v.all(k, k != 'hostPath'))",
            "variables.cs.all(c, c.?securityContext.?privileged.orValue(false) == false)",
            "variables.cs.exists_one(c, c.name == 'a')",
            "variables.first.?securityContext.hasValue()",
            "cel.bind(x, object.spec.containers, x.all(c, c.name != ''))",
            "[object.spec.containers[0]].all(c, c.name != 'x')",
            "(object.spec.?hostNetwork.orValue(false) ? object.spec.containers : variables.cs).all(c, c.image != '')",
            "size(object.spec.containers[0].ports) == 1",
            "object.spec.?containers[?0].?name.orValue('') == 'a'",
            "object.spec.containers.all(c, c.?ports.orValue([]).all(p, p.?hostPort.orValue(0) == 0))",
            "variables.cs.map(c, c.securityContext).all(s, s != null)",
        ];
        let container = |name: &str, extra: Value| {
            let mut c = json!({"name": name, "image": "nginx", "env": [{"name": "A", "value": "b"}],
                "ports": [{"containerPort": 80}]});
            c.as_object_mut()
                .expect("object")
                .extend(extra.as_object().expect("object").clone());
            c
        };
        let pods = [
            json!({"containers": [container("a", json!({"securityContext": {"privileged": true}})),
                container("b", json!({"ports": [{"containerPort": 1, "hostPort": 1}, {"containerPort": 2}]}))],
                "initContainers": [container("i", json!({}))], "hostNetwork": true,
                "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
            json!({"containers": [container("a", json!({"securityContext": {}}))],
                "volumes": [{"name": "e", "emptyDir": {}}]}),
            // What the API server would reject: containers as a map.
            json!({"containers": {"a": {"name": "a", "image": "x"}}, "volumes": []}),
            json!({"containers": [], "volumes": [{"name": "x"}]}),
        ];
        let annotations = [json!({"a": "1"}), json!({"b": "2"}), Value::Null];
        let mut compared = 0;
        for expr in exprs {
            let engine = vpol_engine(json!({
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "variables": [
                    {"name": "cs", "expression": "object.spec.containers + object.spec.?initContainers.orValue([])"},
                    {"name": "first", "expression": "variables.cs[0]"}
                ],
                "validations": [{"expression": expr, "messageExpression": "'fails'"}]
            }));
            let reads = engine.reads();
            assert!(!reads.is_all(), "{expr}");
            for (spec, annotations) in pods
                .iter()
                .flat_map(|p| annotations.iter().map(move |a| (p, a)))
            {
                let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "namespace": "n"}, "spec": spec, "status": {"phase": "Running"}});
                if !annotations.is_null() {
                    pod["metadata"]["annotations"] = annotations.clone();
                }
                let narrowed = reads.parse(&pod.to_string()).expect("parses");
                assert_eq!(narrowed, reads.prune(&pod), "{expr}");
                assert!(narrowed.get("status").is_none(), "{expr}");
                // An error's message may print a CEL map, in no set order.
                let outcome = |o: Value| -> Vec<(crate::result::Status, String)> {
                    validate(&engine, o)
                        .into_iter()
                        .map(|r| match r.status {
                            crate::result::Status::Error => (r.status, String::new()),
                            _ => (r.status, r.message),
                        })
                        .collect()
                };
                let whole = outcome(pod.clone());
                assert_eq!(whole.len(), 1, "{expr}");
                assert_eq!(
                    outcome(narrowed.clone()),
                    whole,
                    "{expr} on {pod} narrowed to {narrowed}"
                );
                compared += 1;
            }
        }
        assert_eq!(compared, exprs.len() * 12);
        // Nothing of a container but what is selected is read.
        let reads = vpol_engine(json!({
            "variables": [{"name": "cs", "expression": "object.spec.containers"}],
            "validations": [{"expression": "variables.cs.all(c, c.?securityContext.?privileged.orValue(false) == false)"}]
        }))
        .reads();
        assert_eq!(
            reads.prune(&json!({"spec": {"containers": [container("a", json!({"securityContext": {"privileged": true, "x": 1}}))]}}))["spec"],
            json!({"containers": [{"securityContext": {"privileged": true}}]})
        );
    }

    /// `keys(@)` reads every key of each map it is given and none of their
    /// values (null in the built value), unless something else reads them;
    /// results narrowed and whole are the same.
    #[test]
    fn keys_read_only_the_keys() {
        let reads = reads_of(json!([
            {"name": "path", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "validate": {"message": "not /",
                "pattern": {"spec": {"=(volumes)": [{"=(hostPath)": {"path": "!/"}}]}}}},
            {"name": "types", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "validate": {"message": "only some volume types",
                "deny": {"conditions": {"any": [{"key": "{{ request.object.spec.volumes[].keys(@)[] || `[]` }}",
                    "operator": "AnyNotIn", "value": ["name", "emptyDir", "hostPath"]}]}}}}]));
        let pod = |volumes: Value| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
                "spec": {"volumes": volumes, "containers": [{"name": "c"}]}, "status": {}})
        };
        let mixed = pod(
            json!([{"name": "a", "hostPath": {"path": "/x", "type": "Directory"}},
            {"name": "token-abc12", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]),
        );
        assert_eq!(
            reads.prune(&mixed)["spec"],
            json!({"volumes": [{"name": null, "hostPath": {"path": "/x"}}, {"name": null, "projected": null}]}),
            "{reads:?}"
        );
        assert_eq!(
            reads.parse(&mixed.to_string()).expect("parses"),
            reads.prune(&mixed)
        );
        let engine = classic_engine(json!([{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "only some volume types", "deny": {"conditions": {"any": [
                    {"key": "{{ request.object.spec.volumes[].keys(@)[] || `[]` }}",
                     "operator": "AnyNotIn", "value": ["name", "emptyDir", "hostPath"]}]}}}}]));
        let reads = engine.reads();
        let mut statuses = Vec::new();
        for p in [
            mixed,
            pod(json!([{"name": "e", "emptyDir": {}}])),
            pod(json!([])),
            pod(json!({"name": "not a list"})),
        ] {
            let whole = validate(&engine, p.clone());
            assert_eq!(validate(&engine, reads.prune(&p)), whole, "{p}");
            statuses.extend(whole.into_iter().map(|r| r.status));
        }
        use crate::result::Status;
        assert!(
            statuses.contains(&Status::Fail) && statuses.contains(&Status::Pass),
            "{statuses:?}"
        );
    }
}
