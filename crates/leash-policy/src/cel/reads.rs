//! What CEL expressions read of `object` and `oldObject`, for
//! [`crate::ReadSet`]: followed through variables and comprehension
//! variables into the fields they select, so that
//! `variables.containers.all(c, c.?securityContext.?privileged ...)` reads
//! each container's `securityContext.privileged`, not each container whole.
//!
//! Each expression is given the set of paths its value *is* (its aliases:
//! `object.spec` is the path `spec`; `variables.containers`, for
//! `object.spec.containers + object.spec.?initContainers.orValue([])`, is
//! both lists; a comprehension variable over a list is each element of the
//! list), and what consumes a value decides what of it is read:
//! - a field selection (`.f`, `.?f`, `["f"]`, `[?"f"]`) or an index with a
//!   literal (`[0]`: each element) extends the aliases, reading nothing yet;
//! - `has(x.f)` keeps `x.f` with its type (present or not), reading none of
//!   what is under it;
//! - `a + b`, `c ? a : b` and `a.orValue(b)` take the aliases of both sides
//!   (the condition is read whole);
//! - a comprehension keeps its range with its type, and each element as the
//!   body reads it (a map iterated for its keys is kept whole, see
//!   `Node::Items`); its accumulator is what its initial value and each
//!   step read whole;
//! - anything else (an operator, a function, a literal list or map holding
//!   the value, the result of the whole expression) reads the value whole.
//!
//! Roots other than `object`, `oldObject`, `variables` and comprehension
//! variables hold no part of the resource (`request` holds its identity,
//! which every evaluation reads; `namespaceObject` is the namespace's).

use ::cel::IdedExpr;
use ::cel::common::ast::{EntryExpr, Expr as E, LiteralValue, operators};

use super::{Expr, Variable, compat};
use crate::reads::Seg;

/// A path into the resource.
type Path<'a> = Vec<Seg<'a>>;

/// What else than `object` and `oldObject` expressions use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Uses {
    /// `request`: the resource's identity (name, kind, namespace).
    pub(crate) request: bool,
    /// A root that reaches other data (`resource`, `globalContext`,
    /// `image`, ...): their results depend on more than the request.
    pub(crate) data: bool,
}

/// Calls `out(path, whole)` for what `exprs`, with `variables` in scope,
/// read of `object` and `oldObject`: the subtree at `path` when `whole`,
/// else only the value's type (whether it is there).
pub(crate) fn object_reads<'a>(
    variables: &'a [Variable],
    exprs: impl IntoIterator<Item = &'a Expr>,
    out: &mut dyn FnMut(&[Seg<'a>], bool),
) -> Uses {
    let mut a = Analysis {
        variables: Vec::new(),
        out,
        uses: Uses::default(),
    };
    // Each variable sees the ones before it, as at evaluation; what it
    // reads outside its value is read even when nothing uses it.
    for v in variables {
        let aliases = a.value(v.expr.ast(), &mut Vec::new());
        a.variables.push((v.name.as_str(), aliases));
    }
    for e in exprs {
        a.read(e.ast(), &mut Vec::new());
    }
    a.uses
}

struct Analysis<'a, 'o> {
    /// Each variable analysed so far, with its aliases.
    variables: Vec<(&'a str, Vec<Path<'a>>)>,
    out: &'o mut dyn FnMut(&[Seg<'a>], bool),
    uses: Uses,
}

/// Comprehension variables in scope, innermost last.
type Scope<'a> = Vec<(&'a str, Vec<Path<'a>>)>;

fn extended<'a>(aliases: Vec<Path<'a>>, seg: Seg<'a>) -> Vec<Path<'a>> {
    aliases
        .into_iter()
        .map(|mut p| {
            p.push(seg);
            p
        })
        .collect()
}

impl<'a> Analysis<'a, '_> {
    /// Reads `e`'s value whole.
    fn read(&mut self, e: &'a IdedExpr, scope: &mut Scope<'a>) {
        for p in self.value(e, scope) {
            (self.out)(&p, true);
        }
    }

    fn bound(&self, name: &str, scope: &Scope<'a>) -> Option<Vec<Path<'a>>> {
        scope
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| a.clone())
    }

    /// `variables` itself, unless a comprehension variable shadows it.
    fn is_variables(e: &IdedExpr, scope: &Scope<'a>) -> bool {
        matches!(&e.expr, E::Ident(n) if n == "variables" && !scope.iter().any(|(s, _)| s == n))
    }

    fn variable(&self, name: &str) -> Vec<Path<'a>> {
        // One not yet defined is unbound when evaluated: it reads nothing.
        self.variables
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| a.clone())
            .unwrap_or_default()
    }

    /// The aliases of `operand` selected by the literal `key`, or `None`
    /// when the key is not a literal.
    fn select(
        &mut self,
        operand: &'a IdedExpr,
        key: &'a IdedExpr,
        scope: &mut Scope<'a>,
    ) -> Option<Vec<Path<'a>>> {
        let seg = match &key.expr {
            E::Literal(LiteralValue::String(k)) => Seg::Field(k.inner()),
            E::Literal(LiteralValue::Int(_) | LiteralValue::UInt(_)) => Seg::Item,
            _ => return None,
        };
        if let (true, Seg::Field(name)) = (Self::is_variables(operand, scope), seg) {
            return Some(self.variable(name));
        }
        Some(extended(self.value(operand, scope), seg))
    }

    /// The paths `e`'s value is; what it reads on the way is reported.
    fn value(&mut self, e: &'a IdedExpr, scope: &mut Scope<'a>) -> Vec<Path<'a>> {
        match &e.expr {
            E::Ident(name) => {
                if let Some(aliases) = self.bound(name, scope) {
                    aliases
                } else if name == "object" || name == "oldObject" {
                    vec![Vec::new()]
                } else if name == "variables" {
                    // The variables as a map: each of them.
                    self.variables
                        .iter()
                        .flat_map(|(_, a)| a.iter().cloned())
                        .collect()
                } else {
                    match name.as_str() {
                        "request" => self.uses.request = true,
                        // The namespace's object; null.
                        "namespaceObject" | "params" => {}
                        _ => self.uses.data = true,
                    }
                    Vec::new()
                }
            }
            E::Select(s) if s.test => {
                // `has(x.f)`: whether `f` is there.
                let aliases = if Self::is_variables(&s.operand, scope) {
                    Vec::new()
                } else {
                    self.value(&s.operand, scope)
                };
                for p in extended(aliases, Seg::Field(&s.field)) {
                    (self.out)(&p, false);
                }
                Vec::new()
            }
            E::Select(s) => {
                if Self::is_variables(&s.operand, scope) {
                    return self.variable(&s.field);
                }
                extended(self.value(&s.operand, scope), Seg::Field(&s.field))
            }
            E::Call(c) => self.call(c, scope),
            E::Comprehension(c) => {
                let range = self.value(&c.iter_range, scope);
                // The range keeps its type and length, and a map its keys.
                let items = extended(range, Seg::Item);
                for p in &items {
                    (self.out)(p, false);
                }
                let depth = scope.len();
                match &c.iter_var2 {
                    // (index or key, element or value)
                    Some(second) => {
                        scope.push((c.iter_var.as_str(), Vec::new()));
                        scope.push((second.as_str(), items));
                    }
                    None => scope.push((c.iter_var.as_str(), items)),
                }
                self.read(&c.accu_init, scope);
                scope.push((c.accu_var.as_str(), Vec::new()));
                self.read(&c.loop_cond, scope);
                self.read(&c.loop_step, scope);
                let result = self.value(&c.result, scope);
                scope.truncate(depth);
                result
            }
            E::List(l) => {
                for x in &l.elements {
                    self.read(x, scope);
                }
                Vec::new()
            }
            E::Map(m) => {
                self.entries(&m.entries, scope);
                Vec::new()
            }
            E::Struct(s) => {
                self.entries(&s.entries, scope);
                Vec::new()
            }
            E::Literal(_) | E::Unspecified => Vec::new(),
        }
    }

    fn entries(&mut self, entries: &'a [::cel::common::ast::IdedEntryExpr], scope: &mut Scope<'a>) {
        for entry in entries {
            match &entry.expr {
                EntryExpr::MapEntry(m) => {
                    self.read(&m.key, scope);
                    self.read(&m.value, scope);
                }
                EntryExpr::StructField(f) => self.read(&f.value, scope),
            }
        }
    }

    fn call(
        &mut self,
        c: &'a ::cel::common::ast::CallExpr,
        scope: &mut Scope<'a>,
    ) -> Vec<Path<'a>> {
        let name = c.func_name.as_str();
        match (name, c.target.as_deref(), c.args.as_slice()) {
            (operators::OPT_SELECT | operators::INDEX | operators::OPT_INDEX, None, [o, k]) => {
                if let Some(aliases) = self.select(o, k, scope) {
                    return aliases;
                }
            }
            (operators::ADD, None, [a, b]) => {
                let mut aliases = self.value(a, scope);
                aliases.extend(self.value(b, scope));
                return aliases;
            }
            (operators::CONDITIONAL, None, [cond, yes, no]) => {
                self.read(cond, scope);
                let mut aliases = self.value(yes, scope);
                aliases.extend(self.value(no, scope));
                return aliases;
            }
            (compat::COMPAT_FUNCTION, None, [value, default])
            | ("orValue", Some(value), [default]) => {
                let mut aliases = self.value(value, scope);
                aliases.extend(self.value(default, scope));
                return aliases;
            }
            ("value", Some(optional), []) => return self.value(optional, scope),
            _ => {}
        }
        if let Some(t) = &c.target {
            // `jsonpatch.escapeKey(k)`: a library's namespace, not a root.
            let namespace = matches!(&t.expr, E::Ident(ns)
                if self.bound(ns, scope).is_none()
                    && super::check::is_namespaced_function(ns, name));
            if !namespace {
                self.read(t, scope);
            }
        }
        for a in &c.args {
            self.read(a, scope);
        }
        Vec::new()
    }
}
