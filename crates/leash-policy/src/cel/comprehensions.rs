//! cel-go's two-variable comprehensions (`ext.TwoVarComprehensions`, which
//! Kyverno's CEL environment enables): on a list the first variable is the
//! index and the second the element, on a map the key and the value.
//! - `all(i, v, p)`, `exists(i, v, p)`, `existsOne(i, v, p)`;
//! - `transformList(i, v, t)` and `transformList(i, v, f, t)`: the list of
//!   `t` (for the entries `f` holds for);
//! - `transformMap(k, v, t)` and `transformMap(k, v, f, t)`: the map from
//!   each key (or index) to `t`;
//! - `transformMapEntry(k, v, e)` and `transformMapEntry(k, v, f, e)`: the
//!   map merged from the one-entry maps `e` (a key given twice is an
//!   error).
//!
//! `cel` 0.15's interpreter iterates one variable, so each macro expands
//! into a one-variable comprehension over `@twoVarPairs(range)` (the
//! `[index or key, value]` pairs) with both variables bound around the
//! body as `cel.bind` binds: `cel.bind(i, @p[0], cel.bind(v, @p[1], body))`.

use std::sync::Arc;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue, MapExpr, operators,
};
use cel::common::types::{DYN_TYPE, LIST_TYPE, MAP_TYPE};
use cel::common::value::{CowVal, Val};
use cel::objects::{Key, Map};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Env, ExecutionError, Value};

use super::bind::bind;

/// The function a range's pairs come from; `@` keeps it out of reach of
/// expressions.
const PAIRS: &str = "@twoVarPairs";
/// The function that adds an entry to a map being built.
const INSERT: &str = "@twoVarInsert";
/// The function that merges a one-entry map into a map being built.
const MERGE: &str = "@twoVarMerge";
/// The iteration variable over the pairs.
const PAIR: &str = "@pair";
/// The accumulator.
const RESULT: &str = "@result";

/// Registers the macros and the functions they expand to on `env`.
pub(super) fn register(env: &mut Env) {
    // Registration fails only on a duplicate declaration (a bug the tests
    // catch).
    for ty in [LIST_TYPE, MAP_TYPE] {
        let _ = env.add_overload(
            PAIRS,
            &format!("leash.{PAIRS}/{}", ty.name()),
            vec![ty],
            pairs,
        );
    }
    let _ = env.add_overload(
        INSERT,
        "leash.@twoVarInsert/3",
        vec![MAP_TYPE, DYN_TYPE, DYN_TYPE],
        insert,
    );
    let _ = env.add_overload(
        MERGE,
        "leash.@twoVarMerge/2",
        vec![MAP_TYPE, MAP_TYPE],
        merge,
    );
    for (name, kind) in [
        ("all", Kind::All),
        ("exists", Kind::Exists),
        ("existsOne", Kind::ExistsOne),
        ("exists_one", Kind::ExistsOne),
    ] {
        let _ = env.add_macro(Macro::receiver(name, 3, move |h, t, a| {
            expand(h, t, a, kind)
        }));
    }
    for (name, kind) in [
        ("transformList", Kind::List),
        ("transformMap", Kind::Map),
        ("transformMapEntry", Kind::MapEntry),
    ] {
        for arity in [3, 4] {
            let _ = env.add_macro(Macro::receiver(name, arity, move |h, t, a| {
                expand(h, t, a, kind)
            }));
        }
    }
}

/// What a macro computes.
#[derive(Debug, Clone, Copy)]
enum Kind {
    All,
    Exists,
    ExistsOne,
    List,
    Map,
    MapEntry,
}

fn expand(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
    kind: Kind,
) -> Result<Option<IdedExpr>, ParseError> {
    let range = target.take().expect("a receiver macro has a target");
    let mut args = std::mem::take(args).into_iter();
    let (Some(first), Some(second)) = (args.next(), args.next()) else {
        unreachable!("registered with 3 or 4 arguments");
    };
    let name = |helper: &MacroExprHelper<'_>, e: &IdedExpr, which: &str| match &e.expr {
        Expr::Ident(n) => Ok(n.clone()),
        _ => Err(helper.new_error(
            e.id,
            format!("{which} variable name must be a simple identifier"),
        )),
    };
    let (i, v) = (
        name(helper, &first, "first")?,
        name(helper, &second, "second")?,
    );
    if i == v {
        return Err(helper.new_error(second.id, format!("duplicate variable name: {v}")));
    }
    let rest: Vec<IdedExpr> = args.collect();
    // The body, with both variables bound to the current pair.
    let bound = |helper: &mut MacroExprHelper<'_>, body: IdedExpr| {
        let value = index(helper, 1);
        let inner = bind(helper, &v, value, body);
        let key = index(helper, 0);
        bind(helper, &i, key, inner)
    };
    let mut rest = rest.into_iter();
    let (filter, body) = match (rest.next(), rest.next()) {
        (Some(f), Some(t)) => (Some(f), t),
        (Some(t), None) => (None, t),
        _ => unreachable!("registered with 3 or 4 arguments"),
    };
    let body = bound(helper, body);
    let filter = filter.map(|f| bound(helper, f));
    let result = ident(helper, RESULT);
    let lit = |helper: &mut MacroExprHelper<'_>, b: bool| {
        helper.next_expr(Expr::Literal(LiteralValue::Boolean(b.into())))
    };
    let (init, cond, step, done) = match kind {
        Kind::All | Kind::Exists => {
            let all = matches!(kind, Kind::All);
            let init = lit(helper, all);
            // Stop once the answer is known (cel-go's short circuit).
            let accu = ident(helper, RESULT);
            let accu = if all {
                accu
            } else {
                call(helper, operators::LOGICAL_NOT, vec![accu])
            };
            let cond = call(helper, operators::NOT_STRICTLY_FALSE, vec![accu]);
            let op = if all {
                operators::LOGICAL_AND
            } else {
                operators::LOGICAL_OR
            };
            let accu = ident(helper, RESULT);
            let step = call(helper, op, vec![accu, body]);
            (init, cond, step, result)
        }
        Kind::ExistsOne => {
            let init = helper.next_expr(Expr::Literal(LiteralValue::Int(0.into())));
            let cond = lit(helper, true);
            let (accu, one, same) = (ident(helper, RESULT), int(helper, 1), ident(helper, RESULT));
            let plus = call(helper, operators::ADD, vec![accu, one]);
            let step = call(helper, operators::CONDITIONAL, vec![body, plus, same]);
            let one = int(helper, 1);
            let done = call(helper, operators::EQUALS, vec![result, one]);
            (init, cond, step, done)
        }
        Kind::List | Kind::Map | Kind::MapEntry => {
            let init = match kind {
                Kind::List => helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
                _ => helper.next_expr(Expr::Map(MapExpr {
                    entries: Vec::new(),
                })),
            };
            let cond = lit(helper, true);
            let accu = ident(helper, RESULT);
            let added = match kind {
                Kind::List => {
                    let one = helper.next_expr(Expr::List(ListExpr::new(vec![body])));
                    call(helper, operators::ADD, vec![accu, one])
                }
                Kind::Map => {
                    let key = index(helper, 0);
                    call(helper, INSERT, vec![accu, key, body])
                }
                _ => call(helper, MERGE, vec![accu, body]),
            };
            let step = match filter {
                Some(f) => {
                    let same = ident(helper, RESULT);
                    call(helper, operators::CONDITIONAL, vec![f, added, same])
                }
                None => added,
            };
            (init, cond, step, result)
        }
    };
    let range = call(helper, PAIRS, vec![range]);
    let loop_ = ComprehensionExpr {
        iter_range: range,
        iter_var: PAIR.to_owned(),
        iter_var2: None,
        accu_var: RESULT.to_owned(),
        accu_init: init,
        loop_cond: cond,
        loop_step: step,
        result: done,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(loop_)))))
}

fn ident(helper: &mut MacroExprHelper<'_>, name: &str) -> IdedExpr {
    helper.next_expr(Expr::Ident(name.to_owned()))
}

fn int(helper: &mut MacroExprHelper<'_>, n: i64) -> IdedExpr {
    helper.next_expr(Expr::Literal(LiteralValue::Int(n.into())))
}

fn call(helper: &mut MacroExprHelper<'_>, func: &str, args: Vec<IdedExpr>) -> IdedExpr {
    helper.next_expr(Expr::Call(CallExpr {
        func_name: func.to_owned(),
        target: None,
        args,
    }))
}

/// `@pair[n]`.
fn index(helper: &mut MacroExprHelper<'_>, n: i64) -> IdedExpr {
    let (pair, n) = (ident(helper, PAIR), int(helper, n));
    call(helper, operators::INDEX, vec![pair, n])
}

fn key_value(k: &Key) -> Value {
    match k {
        Key::Int(i) => Value::Int(*i),
        Key::Uint(u) => Value::UInt(*u),
        Key::Bool(b) => Value::Bool(*b),
        Key::String(s) => Value::String(s.clone()),
    }
}

fn owned<'b, 'v>(v: Value) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::Owned(Box::<dyn Val>::try_from(v)?))
}

/// `@twoVarPairs(range)`: `[[index, element], ...]` of a list, `[[key,
/// value], ...]` of a map.
fn pairs<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [range] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(1, args.len()));
    };
    let pair = |k: Value, v: Value| Value::List(Arc::new(vec![k, v]));
    let out: Vec<Value> = match Value::try_from(range.as_ref())? {
        Value::List(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| pair(Value::Int(i as i64), v.clone()))
            .collect(),
        Value::Map(m) => m
            .map
            .iter()
            .map(|(k, v)| pair(key_value(k), v.clone()))
            .collect(),
        other => {
            return Err(ExecutionError::function_error(
                "comprehension",
                format!("cannot iterate over {}", other.type_of()),
            ));
        }
    };
    owned(Value::List(Arc::new(out)))
}

fn map_arg(v: &CowVal<'_, '_>, function: &str) -> Result<Map, ExecutionError> {
    match Value::try_from(v.as_ref())? {
        Value::Map(m) => Ok(m),
        other => Err(ExecutionError::function_error(
            function,
            format!("expected a map, got {}", other.type_of()),
        )),
    }
}

/// `@twoVarInsert(map, key, value)`: `map` with `key` set to `value`.
fn insert<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [map, key, value] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(3, args.len()));
    };
    let mut entries = map_arg(map, "transformMap")?.map.as_ref().clone();
    let key: Key = Value::try_from(key.as_ref())?
        .try_into()
        .map_err(|_| ExecutionError::function_error("transformMap", "unsupported map key"))?;
    entries.insert(key, Value::try_from(value.as_ref())?);
    owned(Value::Map(Map {
        map: Arc::new(entries),
    }))
}

/// `@twoVarMerge(map, entry)`: `map` with `entry`'s entries, none of
/// whose keys it may hold already.
fn merge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [map, entry] = args.as_slice() else {
        return Err(ExecutionError::invalid_argument_count(2, args.len()));
    };
    let mut entries = map_arg(map, "transformMapEntry")?.map.as_ref().clone();
    for (k, v) in map_arg(entry, "transformMapEntry")?.map.iter() {
        if entries.insert(k.clone(), v.clone()).is_some() {
            return Err(ExecutionError::function_error(
                "transformMapEntry",
                format!("insert failed: key {k} already exists"),
            ));
        }
    }
    owned(Value::Map(Map {
        map: Arc::new(entries),
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::super::{Activation, Expr};
    use crate::request::{EvalRequest, NoClusterData};

    fn eval(source: &str) -> Result<cel::Value, String> {
        let object = json!({"list": [10, 20, 30], "map": {"a": 1, "b": 2}});
        let req = EvalRequest::create(Arc::new(object));
        let act = Activation::new(&req, &NoClusterData);
        Expr::compile(source)?.eval(&act)
    }

    /// Each macro on a list and on a map, with and without a filter, as
    /// cel-go evaluates them (each expression is true; seven of these forms
    /// on a Pod give Kyverno v1.19.1's CLI results too).
    #[test]
    fn two_variable_comprehensions() {
        for source in [
            "object.list.all(i, v, v == (i + 1) * 10)",
            "!object.list.all(i, v, v > 10)",
            "object.list.exists(i, v, i == 2 && v == 30)",
            "!object.list.existsOne(i, v, v > 15)",
            "object.list.exists_one(i, v, i == 0)",
            "object.map.all(k, v, k in ['a', 'b'] && v > 0)",
            "object.map.exists(k, v, k == 'b' && v == 2)",
            "object.list.transformList(i, v, i * 100 + v) == [10, 120, 230]",
            "object.list.transformList(i, v, i > 0, v) == [20, 30]",
            "object.map.transformList(k, v, v * 2).size() == 2",
            "object.list.transformMap(i, v, v + 1) == {0: 11, 1: 21, 2: 31}",
            "object.map.transformMap(k, v, v > 1, k + 'x') == {'b': 'bx'}",
            "object.map.transformMapEntry(k, v, {v: k}) == {1: 'a', 2: 'b'}",
            "[1, 2].all(i, v, [v].all(i, w, w == v && i == 0))",
            "object.list.all(x, x > 0) && object.list.exists(x, x == 20)",
        ] {
            assert_eq!(eval(source), Ok(cel::Value::Bool(true)), "{source}");
        }
        let dup = eval("object.list.transformMapEntry(i, v, {'k': v})");
        assert!(
            dup.as_ref().is_err_and(|e| e.contains("already exists")),
            "{dup:?}"
        );
        let err = eval("object.list.all(i, i, true)");
        assert!(err.is_err(), "{err:?}");
    }
}
