//! cel-go's `cel.bind(name, init, body)` macro (Kubernetes enables it):
//! `body` evaluated with `name` bound to `init`, evaluated once. As cel-go
//! does, it expands into a comprehension over an empty list whose
//! accumulator is the variable: `init` is its initial value, and `body` its
//! result.

use cel::Env;
use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::parser::{Macro, MacroExprHelper, ParseError};

/// Registers `cel.bind` on `env`.
pub(super) fn register(env: &mut Env) {
    // Registration fails only on a duplicate macro (a bug the tests catch).
    let _ = env.add_macro(Macro::receiver("bind", 3, expand));
}

fn expand(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    // Only `cel.bind(..)`; any other `x.bind(..)` stays a call.
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel") {
        return Ok(None);
    }
    let (Some(body), Some(init), Some(name)) = (args.pop(), args.pop(), args.pop()) else {
        return Ok(None);
    };
    let Expr::Ident(var) = &name.expr else {
        return Err(helper.new_error(
            name.id,
            "cel.bind() variable name must be a simple identifier",
        ));
    };
    let var = var.clone();
    Ok(Some(bind(helper, &var, init, body)))
}

/// `body` with `var` bound to `init`: a comprehension over an empty list
/// whose accumulator is the variable (also the two-variable
/// comprehensions' binding of their variables).
pub(super) fn bind(
    helper: &mut MacroExprHelper<'_>,
    var: &str,
    init: IdedExpr,
    body: IdedExpr,
) -> IdedExpr {
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: var.to_owned(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(var.to_owned())),
        result: body,
    };
    helper.next_expr(Expr::Comprehension(Box::new(bind)))
}
