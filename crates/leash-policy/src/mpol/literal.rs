//! Typed object construction in mutation expressions: `Object{...}`,
//! `Object.spec.containers{...}` and `JSONPatch{...}`.
//!
//! # Why an AST rewrite
//!
//! The `cel` crate parses message construction (`T{field: value}`) into
//! `Expr::Struct`, but its interpreter constructs only struct types
//! registered by their exact name in the environment, and an
//! ApplyConfiguration names one type per path (`Object.spec.template.spec`,
//! ...), which no fixed registration covers. Kubernetes' typed objects are
//! only a way to spell a partial object: after evaluation both
//! MutatingAdmissionPolicy and Kyverno turn them into plain maps (the
//! ApplyConfiguration's unstructured object, the JSON Patch operations).
//! So each struct literal is rewritten, once at compile time, into the map
//! literal with the same fields (`{"field": value}`; `?field` stays an
//! optional entry). Evaluation is unchanged and the result is the map that
//! Kubernetes would have produced.
//!
//! What the types gave Kubernetes is kept as compile-time checks where the
//! literal itself shows it: an ApplyConfiguration may construct only
//! `Object` and its field types, a JSON Patch (and variables and match
//! conditions) those and `JSONPatch` with the fields `op`, `path`, `from`,
//! `value`, and a struct literal directly inside
//! another one (or in a list literal there) must be named after its field's
//! path (`Object.spec{containers: [Object.spec.containers{...}]}`).

use cel::common::ast::{
    EntryExpr, Expr, IdedEntryExpr, IdedExpr, LiteralValue, MapEntryExpr, MapExpr,
};
use cel::common::types::CelString;

/// Which struct types an expression may construct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Literals {
    /// `Object` and `Object.<path>` (ApplyConfiguration).
    Object,
    /// `JSONPatch` and `Object` (JSONPatch mutations, whose values may be
    /// typed objects; variables and match conditions).
    Any,
}

const JSON_PATCH_FIELDS: &[&str] = &["op", "path", "from", "value"];

/// Rewrites every struct literal of `ast` into a map literal, checking the
/// type names as described in the module docs.
pub(crate) fn rewrite(ast: &mut IdedExpr, allowed: Literals) -> Result<(), String> {
    let mut next_id = max_id(ast) + 1;
    walk(ast, allowed, None, &mut next_id)
}

fn check_name(name: &str, allowed: Literals, expected: Option<&str>) -> Result<(), String> {
    let name = name.strip_prefix('.').unwrap_or(name);
    match allowed {
        Literals::Object => {
            if name != "Object" && !name.starts_with("Object.") {
                return Err(format!(
                    "type {name:?} cannot be constructed in an ApplyConfiguration (only Object and its fields, e.g. Object.spec)"
                ));
            }
        }
        Literals::Any => {
            if name != "JSONPatch" && name != "Object" && !name.starts_with("Object.") {
                return Err(format!(
                    "type {name:?} cannot be constructed (only Object, its fields, and JSONPatch)"
                ));
            }
        }
    }
    if let Some(want) = expected
        && name != want
    {
        return Err(format!(
            "type mismatch: {name} is used where {want} is expected"
        ));
    }
    Ok(())
}

/// `expected`: the type name a struct literal at this position must have
/// (set for the direct field values of a struct literal).
fn walk(
    e: &mut IdedExpr,
    allowed: Literals,
    expected: Option<&str>,
    next_id: &mut u64,
) -> Result<(), String> {
    match &mut e.expr {
        Expr::Struct(s) => {
            let name = s
                .type_name
                .strip_prefix('.')
                .unwrap_or(&s.type_name)
                .to_string();
            check_name(&name, allowed, expected)?;
            let mut entries = Vec::with_capacity(s.entries.len());
            for entry in std::mem::take(&mut s.entries) {
                let EntryExpr::StructField(mut f) = entry.expr else {
                    return Err(format!("{name}: expected field initializers"));
                };
                if name == "JSONPatch" && !JSON_PATCH_FIELDS.contains(&f.field.as_str()) {
                    return Err(format!(
                        "JSONPatch has no field {:?} (op, path, from, value)",
                        f.field
                    ));
                }
                let child = format!("{name}.{}", f.field);
                let expect_child = (name != "JSONPatch").then_some(child.as_str());
                walk(&mut f.value, allowed, expect_child, next_id)?;
                let key = IdedExpr {
                    id: take(next_id),
                    expr: Expr::Literal(LiteralValue::String(CelString::from(f.field))),
                };
                entries.push(IdedEntryExpr {
                    id: entry.id,
                    expr: EntryExpr::MapEntry(MapEntryExpr {
                        key,
                        value: f.value,
                        optional: f.optional,
                    }),
                });
            }
            e.expr = Expr::Map(MapExpr { entries });
            Ok(())
        }
        Expr::List(l) => {
            // A list literal directly in a field keeps the field's element
            // type: `containers: [Object.spec.containers{...}]`.
            for el in &mut l.elements {
                walk(el, allowed, expected, next_id)?;
            }
            Ok(())
        }
        Expr::Call(c) => {
            if let Some(t) = &mut c.target {
                walk(t, allowed, None, next_id)?;
            }
            for a in &mut c.args {
                walk(a, allowed, None, next_id)?;
            }
            Ok(())
        }
        Expr::Comprehension(c) => {
            for x in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                walk(x, allowed, None, next_id)?;
            }
            Ok(())
        }
        Expr::Map(m) => {
            for entry in &mut m.entries {
                match &mut entry.expr {
                    EntryExpr::MapEntry(me) => {
                        walk(&mut me.key, allowed, None, next_id)?;
                        walk(&mut me.value, allowed, None, next_id)?;
                    }
                    EntryExpr::StructField(f) => walk(&mut f.value, allowed, None, next_id)?,
                }
            }
            Ok(())
        }
        Expr::Select(s) => walk(&mut s.operand, allowed, None, next_id),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Ok(()),
    }
}

fn take(next: &mut u64) -> u64 {
    let id = *next;
    *next += 1;
    id
}

fn max_id(e: &IdedExpr) -> u64 {
    let entry_ids = match &e.expr {
        Expr::Map(MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
            entries.iter().map(|entry| entry.id).collect()
        }
        _ => Vec::new(),
    };
    children(e)
        .into_iter()
        .map(max_id)
        .chain(entry_ids)
        .fold(e.id, u64::max)
}

/// The direct subexpressions of `e`.
pub(super) fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    let mut out: Vec<&IdedExpr> = Vec::new();
    match &e.expr {
        Expr::Call(c) => {
            out.extend(c.target.as_deref());
            out.extend(&c.args);
        }
        Expr::Comprehension(c) => {
            out.extend([
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]);
        }
        Expr::List(l) => out.extend(&l.elements),
        Expr::Map(MapExpr { entries })
        | Expr::Struct(cel::common::ast::StructExpr { entries, .. }) => {
            for entry in entries {
                match &entry.expr {
                    EntryExpr::MapEntry(me) => out.extend([&me.key, &me.value]),
                    EntryExpr::StructField(f) => out.push(&f.value),
                }
            }
        }
        Expr::Select(s) => out.push(&s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
    out
}
