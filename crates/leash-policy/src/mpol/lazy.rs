//! When each variable is first read, to evaluate it as Kubernetes' lazy
//! variables are: on first use, then cached.
//!
//! A MutatingPolicy's mutations each see the object the previous one
//! produced. Kubernetes binds `variables` lazily (a variable is evaluated
//! the first time an expression reads it, and that value is kept), so a
//! variable first read by mutation `i` sees the object as mutations before
//! `i` left it. Reads are found in the expressions' text (`variables.x`,
//! `variables['x']`): each variable gets the stage of its first reader,
//! stage 0 being the match conditions and stage `i + 1` mutation `i`; a
//! variable read by another variable is due no later than that one. At each
//! stage the variables due are evaluated in declaration order, on the
//! current object. (A read in a branch that is not taken still counts as a
//! read here; Kubernetes would evaluate that variable later.)

use std::collections::BTreeSet;

use cel::common::ast::{Expr, IdedExpr, LiteralValue, operators};

use super::literal::children;

/// The names of the variables `e` reads.
pub(super) fn reads(e: &IdedExpr) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    collect(e, &mut out);
    out
}

fn collect(e: &IdedExpr, out: &mut BTreeSet<String>) {
    let is_variables = |x: &IdedExpr| matches!(&x.expr, Expr::Ident(n) if n == "variables");
    match &e.expr {
        Expr::Select(s) if is_variables(&s.operand) => {
            out.insert(s.field.clone());
        }
        Expr::Call(c)
            if c.args.len() == 2
                && is_variables(&c.args[0])
                && [
                    operators::INDEX,
                    operators::OPT_INDEX,
                    operators::OPT_SELECT,
                ]
                .contains(&c.func_name.as_str()) =>
        {
            if let Expr::Literal(LiteralValue::String(name)) = &c.args[1].expr {
                out.insert(name.inner().to_string());
            }
        }
        _ => {}
    }
    for child in children(e) {
        collect(child, out);
    }
}

/// For `vars` (names and the variables each reads, in declaration order)
/// and the variables each stage reads, the indices of the variables due at
/// each stage (`stages` long). Variables nothing reads are never due.
pub(super) fn schedule(
    vars: &[(String, BTreeSet<String>)],
    stages: &[BTreeSet<String>],
) -> Vec<Vec<usize>> {
    let mut due: Vec<Option<usize>> = vec![None; vars.len()];
    for (stage, reads) in stages.iter().enumerate() {
        for (i, (name, _)) in vars.iter().enumerate() {
            if due[i].is_none() && reads.contains(name) {
                due[i] = Some(stage);
            }
        }
    }
    // A variable is due no later than the variables that read it (a
    // variable reads only earlier ones, so one backward pass settles it).
    for i in (0..vars.len()).rev() {
        let Some(stage) = due[i] else { continue };
        for (j, (name, _)) in vars.iter().enumerate().take(i) {
            if vars[i].1.contains(name) && due[j].is_none_or(|d| d > stage) {
                due[j] = Some(stage);
            }
        }
    }
    let mut out = vec![Vec::new(); stages.len()];
    for (i, d) in due.iter().enumerate() {
        if let Some(stage) = d {
            out[*stage].push(i);
        }
    }
    out
}
