//! What cel-go's type checker refuses that can be told from an expression
//! alone: an operator applied to operands whose types are known and have no
//! overload together (`1 == "a"`, `size(x) + "s"`, `!"yes"`), with cel-go's
//! message (`found no matching overload for '_==_' applied to '(int,
//! string)'`). Kyverno compiles policies with the checker, so such a policy
//! is refused when it is loaded; without this, it compiles here and errs on
//! every resource.
//!
//! Only types an expression fixes are known: literals, the results of
//! operators, conversions (`int(x)`, `string(x)`) and a few functions
//! (`size`, the string predicates); a resource's fields, variables and
//! everything else are `dyn`, which cel-go accepts with any operand. Numbers
//! are not told apart (cel-go's cross-type numeric comparisons, and no
//! overload is claimed missing where one might exist), so what is refused is
//! refused by cel-go too.

use ::cel::IdedExpr;
use ::cel::common::ast::{EntryExpr, Expr as E, LiteralValue, operators};

/// A type an expression is known to have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Number(&'static str),
    String,
    Bool,
    Bytes,
    /// A list, with its elements' type when a literal's are all one.
    List(&'static str),
    Map,
    Timestamp,
    Duration,
    /// Anything (a resource's field, a variable, an unknown function).
    Dyn,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Number(n) => n,
            Ty::String => "string",
            Ty::Bool => "bool",
            Ty::Bytes => "bytes",
            Ty::List(element) => match element {
                "int" => "list(int)",
                "uint" => "list(uint)",
                "double" => "list(double)",
                "string" => "list(string)",
                "bool" => "list(bool)",
                _ => "list(dyn)",
            },
            Ty::Map => "map(dyn, dyn)",
            Ty::Timestamp => "timestamp",
            Ty::Duration => "duration",
            Ty::Dyn => "dyn",
        }
    }

    /// The class operators are overloaded by (numbers together).
    fn class(self) -> Option<u8> {
        match self {
            Ty::Number(_) => Some(0),
            Ty::String => Some(1),
            Ty::Bool => Some(2),
            Ty::Bytes => Some(3),
            Ty::List(_) => Some(4),
            Ty::Map => Some(5),
            Ty::Timestamp => Some(6),
            Ty::Duration => Some(7),
            Ty::Dyn => None,
        }
    }
}

/// The types of a policy's variables known so far, by name, and of the
/// comprehension variables in scope (by [`iter_key`]).
type Vars = std::collections::HashMap<String, Ty>;

/// The key of a comprehension variable in [`Vars`] (no policy variable's
/// name starts with `@`).
fn iter_key(name: &str) -> String {
    format!("@{name}")
}

/// The type of a list's elements, by [`Ty::List`]'s name of it.
fn element_ty(element: &'static str) -> Ty {
    match element {
        "int" | "uint" | "double" => Ty::Number(element),
        "string" => Ty::String,
        "bool" => Ty::Bool,
        _ => Ty::Dyn,
    }
}

/// The first operator `ast` applies to operands no overload takes.
pub(super) fn check(ast: &IdedExpr) -> Result<(), String> {
    ty(ast, &Vars::new()).map(|_| ())
}

/// [`check`] with the policy's variables typed as their expressions are
/// (`variables.count` of `count: size(object.spec.containers)` is an
/// int), as cel-go types Kubernetes' composited variables: each variable
/// in order (seeing those before it), then each use. The error names the
/// field (the variable's, or the use's) and the overload.
pub(super) fn check_with_variables<'a>(
    variables: impl IntoIterator<Item = (String, &'a str, &'a IdedExpr)>,
    uses: impl IntoIterator<Item = (String, &'a IdedExpr)>,
) -> Result<(), (String, String)> {
    let mut vars = Vars::new();
    for (field, name, ast) in variables {
        let t = ty(ast, &vars).map_err(|e| (field, e))?;
        vars.insert(name.to_string(), t);
    }
    for (field, ast) in uses {
        ty(ast, &vars).map_err(|e| (field, e))?;
    }
    Ok(())
}

fn mismatch(op: &str, types: &[Ty]) -> String {
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    format!(
        "found no matching overload for '{op}' applied to '({})'",
        names.join(", ")
    )
}

fn ty(e: &IdedExpr, vars: &Vars) -> Result<Ty, String> {
    Ok(match &e.expr {
        E::Literal(l) => match l {
            LiteralValue::Int(_) => Ty::Number("int"),
            LiteralValue::UInt(_) => Ty::Number("uint"),
            LiteralValue::Double(_) => Ty::Number("double"),
            LiteralValue::String(_) => Ty::String,
            LiteralValue::Boolean(_) => Ty::Bool,
            LiteralValue::Bytes(_) => Ty::Bytes,
            LiteralValue::Null => Ty::Dyn,
        },
        E::List(l) => {
            let mut element = None;
            for e in &l.elements {
                let t = ty(e, vars)?;
                element = match element {
                    None => Some(t),
                    Some(prev) if prev == t => Some(t),
                    Some(_) => Some(Ty::Dyn),
                };
            }
            Ty::List(match element {
                Some(Ty::Number(n)) => n,
                Some(Ty::String) => "string",
                Some(Ty::Bool) => "bool",
                _ => "dyn",
            })
        }
        E::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(m) = &entry.expr {
                    ty(&m.key, vars)?;
                    ty(&m.value, vars)?;
                }
            }
            Ty::Map
        }
        E::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::StructField(f) => {
                        ty(&f.value, vars)?;
                    }
                    EntryExpr::MapEntry(m) => {
                        ty(&m.key, vars)?;
                        ty(&m.value, vars)?;
                    }
                }
            }
            Ty::Dyn
        }
        E::Select(s) => {
            if !s.test
                && let E::Ident(root) = &s.operand.expr
                && root == "variables"
            {
                return Ok(vars.get(&s.field).copied().unwrap_or(Ty::Dyn));
            }
            ty(&s.operand, vars)?;
            if s.test { Ty::Bool } else { Ty::Dyn }
        }
        E::Ident(name) => vars.get(&iter_key(name)).copied().unwrap_or(Ty::Dyn),
        E::Comprehension(c) => {
            // The iteration variable is the range's element: a list
            // literal's known element type (`[1, 2].exists(x, x == 'a')`
            // compares an int with a string).
            let element = match ty(&c.iter_range, vars)? {
                Ty::List(element) => element_ty(element),
                _ => Ty::Dyn,
            };
            let mut inner = vars.clone();
            match &c.iter_var2 {
                // Two variables: the index (or key), then the element.
                Some(second) => {
                    inner.remove(&iter_key(&c.iter_var));
                    inner.insert(iter_key(second), element);
                }
                None => {
                    inner.insert(iter_key(&c.iter_var), element);
                }
            }
            inner.remove(&iter_key(&c.accu_var));
            for part in [&c.loop_cond, &c.loop_step] {
                ty(part, &inner)?;
            }
            let accu = ty(&c.accu_init, vars)?;
            // The macros' results: `all`, `exists` (and `map`, `filter`)
            // give the accumulator (a bool, or a list), `exists_one`
            // compares it.
            match &c.result.expr {
                E::Ident(name) if *name == c.accu_var => accu,
                _ => ty(&c.result, &inner)?,
            }
        }
        E::Call(c) => {
            let target = c.target.as_deref().map(|t| ty(t, vars)).transpose()?;
            let args = c
                .args
                .iter()
                .map(|a| ty(a, vars))
                .collect::<Result<Vec<_>, _>>()?;
            // `sets.contains(a, b)`, `math.greatest(..)`: a name qualified
            // by a bare identifier may be a library's function, not a
            // member call.
            if matches!(c.target.as_deref().map(|t| &t.expr), Some(E::Ident(_))) {
                Ty::Dyn
            } else {
                call(&c.func_name, target, &args)?
            }
        }
        _ => Ty::Dyn,
    })
}

fn call(name: &str, target: Option<Ty>, args: &[Ty]) -> Result<Ty, String> {
    use operators as op;
    let known_apart = |a: Ty, b: Ty| matches!((a.class(), b.class()), (Some(x), Some(y)) if x != y);
    Ok(match (name, target, args) {
        (op::EQUALS | op::NOT_EQUALS, None, [a, b]) => {
            if known_apart(*a, *b) {
                return Err(mismatch(name, &[*a, *b]));
            }
            Ty::Bool
        }
        (op::ADD | op::SUBSTRACT, None, [a, b]) if time_arith(name, *a, *b).is_some() => {
            time_arith(name, *a, *b)
                .flatten()
                .ok_or_else(|| mismatch(name, &[*a, *b]))?
        }
        (op::LESS | op::LESS_EQUALS | op::GREATER | op::GREATER_EQUALS, None, [a, b]) => {
            // Lists, maps and booleans have no ordering but bool's; mixed
            // known classes none.
            let unordered = |t: Ty| matches!(t, Ty::List(_) | Ty::Map);
            if known_apart(*a, *b) || unordered(*a) || unordered(*b) {
                return Err(mismatch(name, &[*a, *b]));
            }
            Ty::Bool
        }
        (op::ADD, None, [a, b]) => {
            if known_apart(*a, *b)
                || matches!(a, Ty::Bool | Ty::Map)
                || matches!(b, Ty::Bool | Ty::Map)
            {
                return Err(mismatch(name, &[*a, *b]));
            }
            if a == b { *a } else { Ty::Dyn }
        }
        (op::SUBSTRACT | op::MULTIPLY | op::DIVIDE | op::MODULO, None, [a, b]) => {
            let not_number = |t: Ty| {
                matches!(
                    t,
                    Ty::String
                        | Ty::Bool
                        | Ty::Bytes
                        | Ty::List(_)
                        | Ty::Map
                        | Ty::Timestamp
                        | Ty::Duration
                )
            };
            if not_number(*a) || not_number(*b) {
                return Err(mismatch(name, &[*a, *b]));
            }
            if a == b { *a } else { Ty::Dyn }
        }
        (op::LOGICAL_AND | op::LOGICAL_OR, None, [a, b]) => {
            let not_bool = |t: Ty| !matches!(t, Ty::Bool | Ty::Dyn);
            if not_bool(*a) || not_bool(*b) {
                return Err(mismatch(name, &[*a, *b]));
            }
            Ty::Bool
        }
        (op::LOGICAL_NOT, None, [a]) => {
            if !matches!(a, Ty::Bool | Ty::Dyn) {
                return Err(mismatch(name, &[*a]));
            }
            Ty::Bool
        }
        (op::CONDITIONAL, None, [c, a, b]) => {
            if !matches!(c, Ty::Bool | Ty::Dyn) {
                return Err(mismatch(name, &[*c, *a, *b]));
            }
            if a == b { *a } else { Ty::Dyn }
        }
        (op::IN, None, [a, b]) => {
            // `x in list` and `x in map` only; the element a list literal
            // is known to hold must be x's class.
            let apart = match b {
                Ty::List(element) => known_apart(*a, element_ty(element)),
                Ty::Map | Ty::Dyn => false,
                _ => true,
            };
            if apart {
                return Err(mismatch(name, &[*a, *b]));
            }
            Ty::Bool
        }
        (op::NOT_STRICTLY_FALSE, None, _) => Ty::Bool,
        ("size", None, [a]) => {
            if !sized(*a) {
                return Err(mismatch(name, &[*a]));
            }
            Ty::Number("int")
        }
        ("size", Some(receiver), []) => {
            if !sized(receiver) {
                return Err(format!(
                    "found no matching overload for 'size' applied to '{}.()'",
                    receiver.name()
                ));
            }
            Ty::Number("int")
        }
        ("int", None, [_]) => Ty::Number("int"),
        ("uint", None, [_]) => Ty::Number("uint"),
        ("double", None, [_]) => Ty::Number("double"),
        ("string", None, [_]) => Ty::String,
        ("timestamp", None, [_]) => Ty::Timestamp,
        ("duration", None, [_]) => Ty::Duration,
        (name, Some(receiver), args) => return member(name, receiver, args),
        _ => Ty::Dyn,
    })
}

/// Whether `size` takes a value of type `t`.
fn sized(t: Ty) -> bool {
    matches!(t, Ty::String | Ty::Bytes | Ty::List(_) | Ty::Map | Ty::Dyn)
}

/// `+` and `-` where a timestamp or a duration takes part: `None` when
/// neither does (the other rules apply), `Some(None)` when no overload
/// takes the two, else the result.
fn time_arith(op: &str, a: Ty, b: Ty) -> Option<Option<Ty>> {
    use Ty::{Duration as D, Dyn, Timestamp as T};
    if !matches!(a, T | D) && !matches!(b, T | D) {
        return None;
    }
    Some(match (op == operators::ADD, a, b) {
        (_, Dyn, _) | (_, _, Dyn) => Some(Dyn),
        (true, T, D) | (true, D, T) => Some(T),
        (true, D, D) => Some(D),
        (false, T, T) | (false, D, D) => Some(D),
        (false, T, D) => Some(T),
        _ => None,
    })
}

/// A member function's result, or cel-go's refusal when the receiver is a
/// string or `dyn` and no overload of these functions (strings' only)
/// takes the arguments: `found no matching overload for 'startsWith'
/// applied to 'string.(int)'`. Only functions whose every overload gives
/// one type are typed.
fn member(name: &str, receiver: Ty, args: &[Ty]) -> Result<Ty, String> {
    // Functions of strings only, with the arguments they take.
    let (takes, gives): (&[Overload], Ty) = match name {
        "startsWith" | "endsWith" | "matches" | "contains" => (&[&[string_arg]], Ty::Bool),
        "lowerAscii" | "upperAscii" | "trim" => (&[&[]], Ty::String),
        "split" => (
            &[&[string_arg], &[string_arg, number_arg]],
            Ty::List("string"),
        ),
        // The strings extension's (version 2, as Kubernetes').
        "charAt" => (&[&[number_arg]], Ty::String),
        "substring" => (&[&[number_arg], &[number_arg, number_arg]], Ty::String),
        "replace" => (
            &[
                &[string_arg, string_arg],
                &[string_arg, string_arg, number_arg],
            ],
            Ty::String,
        ),
        // Of strings and (Kubernetes' lists library) of lists: an int
        // either way, refused only on a string.
        "indexOf" | "lastIndexOf" => {
            let on_string: &[Overload] = &[&[string_arg], &[string_arg, number_arg]];
            return match receiver {
                Ty::String => typed(name, receiver, args, on_string, Ty::Number("int")),
                Ty::Dyn | Ty::List(_) => Ok(Ty::Number("int")),
                _ => Ok(Ty::Dyn),
            };
        }
        _ => return Ok(Ty::Dyn),
    };
    if !matches!(receiver, Ty::String | Ty::Dyn) {
        return Ok(Ty::Dyn);
    }
    typed(name, receiver, args, takes, gives)
}

/// `gives` when one of the overloads `takes` fits `args`, else cel-go's
/// refusal of the member call `name` on `receiver`.
fn typed(
    name: &str,
    receiver: Ty,
    args: &[Ty],
    takes: &[Overload],
    gives: Ty,
) -> Result<Ty, String> {
    let fits = |overload: &Overload| {
        overload.len() == args.len() && overload.iter().zip(args).all(|(ok, a)| ok(a))
    };
    if takes.iter().any(fits) {
        return Ok(gives);
    }
    let names: Vec<&str> = args.iter().map(|t| t.name()).collect();
    Err(format!(
        "found no matching overload for '{name}' applied to '{}.({})'",
        receiver.name(),
        names.join(", ")
    ))
}

/// The arguments one overload takes, each a test of a known type.
type Overload = &'static [fn(&Ty) -> bool];

fn string_arg(t: &Ty) -> bool {
    matches!(t, Ty::String | Ty::Dyn)
}

fn number_arg(t: &Ty) -> bool {
    matches!(t, Ty::Number(_) | Ty::Dyn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(source: &str) -> Result<(), String> {
        let ast = super::super::ENV
            .parser()
            .parse(source)
            .map_err(|e| e.to_string())?;
        check(&ast)
    }

    #[test]
    fn what_cel_go_refuses() {
        for (source, message) in [
            (
                "1 == \"a\"",
                "found no matching overload for '_==_' applied to '(int, string)'",
            ),
            (
                "object.x == 1 && \"a\" != true",
                "found no matching overload for '_!=_' applied to '(string, bool)'",
            ),
            (
                "size(object.spec.containers) > \"3\"",
                "found no matching overload for '_>_' applied to '(int, string)'",
            ),
            (
                "'prefix-' + 1",
                "found no matching overload for '_+_' applied to '(string, int)'",
            ),
            (
                "!\"yes\"",
                "found no matching overload for '!_' applied to '(string)'",
            ),
            (
                "1 && true",
                "found no matching overload for '_&&_' applied to '(int, bool)'",
            ),
            (
                "[1] < [2]",
                "found no matching overload for '_<_' applied to '(list(int), list(int))'",
            ),
            (
                "[1, 'a'] == 1",
                "found no matching overload for '_==_' applied to '(list(dyn), int)'",
            ),
            (
                "object.items.all(i, i.name == 1 || i.count - \"1\" > 0)",
                "found no matching overload for '_-_' applied to '(dyn, string)'",
            ),
            (
                "string(object.x) == 3",
                "found no matching overload for '_==_' applied to '(string, int)'",
            ),
            // Kyverno v1.19.1's CLI refuses each of these with this
            // message (a ValidatingPolicy's validation, `kyverno apply`).
            (
                "object.metadata.name.startsWith(1)",
                "found no matching overload for 'startsWith' applied to 'dyn.(int)'",
            ),
            (
                "'abc'.startsWith(1)",
                "found no matching overload for 'startsWith' applied to 'string.(int)'",
            ),
            (
                "object.spec.containers.all(c, c.name == 'c') == 1",
                "found no matching overload for '_==_' applied to '(bool, int)'",
            ),
            (
                "object.spec.containers.exists(c, c.name == 'c') + 1 > 0",
                "found no matching overload for '_+_' applied to '(bool, int)'",
            ),
            (
                "object.metadata.name.matches(1)",
                "found no matching overload for 'matches' applied to 'dyn.(int)'",
            ),
            (
                "object.metadata.name.lowerAscii() == 1",
                "found no matching overload for '_==_' applied to '(string, int)'",
            ),
            (
                "object.spec.containers.map(c, c.name) == 1",
                "found no matching overload for '_==_' applied to '(list(dyn), int)'",
            ),
            (
                "object.spec.containers.contains(1)",
                "found no matching overload for 'contains' applied to 'dyn.(int)'",
            ),
            (
                "'abc'.contains('b', 'c')",
                "found no matching overload for 'contains' applied to 'string.(string, string)'",
            ),
            (
                "object.metadata.name.split('-') == 'a'",
                "found no matching overload for '_==_' applied to '(list(string), string)'",
            ),
            (
                "timestamp('2020-01-01T00:00:00Z') == 1",
                "found no matching overload for '_==_' applied to '(timestamp, int)'",
            ),
            (
                "timestamp(object.a) + timestamp(object.b) > timestamp(object.c)",
                "found no matching overload for '_+_' applied to '(timestamp, timestamp)'",
            ),
            // Kyverno v1.19.1's CLI refuses these too, with these messages.
            (
                "size(1) > 0",
                "found no matching overload for 'size' applied to '(int)'",
            ),
            (
                "'a' in 1",
                "found no matching overload for '@in' applied to '(string, int)'",
            ),
            (
                "'a' in [1, 2]",
                "found no matching overload for '@in' applied to '(string, list(int))'",
            ),
            (
                "[1, 2].exists(x, x == 'a')",
                "found no matching overload for '_==_' applied to '(int, string)'",
            ),
            (
                "'abc'.substring(1) == 2",
                "found no matching overload for '_==_' applied to '(string, int)'",
            ),
            (
                "object.metadata.name.substring('a')",
                "found no matching overload for 'substring' applied to 'dyn.(string)'",
            ),
            (
                "'abc'.indexOf(1)",
                "found no matching overload for 'indexOf' applied to 'string.(int)'",
            ),
        ] {
            assert_eq!(checked(source), Err(message.to_string()), "{source}");
        }
    }

    /// Variables are typed by their expressions, each seeing those before
    /// (Kyverno v1.19.1: `variables.count == "x"` with `count:
    /// size(object.spec.containers)` is refused with this message).
    #[test]
    fn variables_are_typed_by_their_expressions() {
        let parse = |s: &str| super::super::ENV.parser().parse(s).unwrap();
        let (count, label, twice) = (
            parse("size(object.spec.containers)"),
            parse("object.metadata.labels.app"),
            parse("variables.count * 2"),
        );
        let vars = || {
            [
                ("v[0]".to_string(), "count", &count),
                ("v[1]".to_string(), "label", &label),
                ("v[2]".to_string(), "twice", &twice),
            ]
        };
        let wrong = parse("variables.twice == \"x\"");
        assert_eq!(
            check_with_variables(vars(), [("e[0]".to_string(), &wrong)]),
            Err((
                "e[0]".to_string(),
                "found no matching overload for '_==_' applied to '(int, string)'".to_string()
            ))
        );
        let fine =
            parse("variables.label == 'web' && variables.count > 1 && variables.other == 'x'");
        assert_eq!(
            check_with_variables(vars(), [("e[0]".to_string(), &fine)]),
            Ok(())
        );
        let bad_var = parse("variables.count + 'x'");
        assert_eq!(
            check_with_variables(
                vars()
                    .into_iter()
                    .chain([("v[3]".to_string(), "bad", &bad_var)]),
                []
            ),
            Err((
                "v[3]".to_string(),
                "found no matching overload for '_+_' applied to '(int, string)'".to_string()
            ))
        );
    }

    #[test]
    fn what_cel_go_accepts() {
        for source in [
            "object.spec.replicas > 3",
            "object.metadata.name == 'a' || object.x == 1",
            "1 == 1.0 && 2u < 3 && 1.5 > 1",
            "size(object.spec.containers) + object.extra > 0",
            "'a' + string(object.x) + object.y",
            "object.x == null && null != object.y",
            "has(object.spec.x) ? object.spec.x : 'none'",
            "[1, 2] + object.more",
            "{'a': 1}['a'] == 1",
            "object.list.map(x, x * 2).filter(y, y > 1).size() == 2",
            "duration('1h') + object.d < duration('2h')",
            "!(object.flag)",
            "timestamp(object.a) + duration('1h') > timestamp(object.b)",
            "timestamp(object.a) - timestamp(object.b) < duration('5m')",
            "object.items.exists(i, i.x) && object.items.all(i, i.y)",
            "object.items.exists_one(i, i.x) || object.items.filter(i, i.y).size() > 0",
            "'a-b'.split('-').size() == 2 && object.x.split('-')[0] == 'a'",
            "object.name.startsWith(object.prefix) && object.name.contains(object.part)",
            "object.name.split('-', 2)[1] == 'b'",
            "object.items.indexOf(object.x) >= 0 && object.name.indexOf('-') > 0",
            "[1, 2].exists(x, x > 1) && ['a'].all(s, s.startsWith('a'))",
            "[1, 2].exists(x, [x].exists(x, x == 1))",
            "object.x in [1, 2] && object.y in {'a': 1} && 'a' in object.z",
            "size(object.x) + size('ab') + object.list.size() > 0",
            "'a-b'.replace('-', '_').charAt(0) == 'a'",
        ] {
            assert_eq!(checked(source), Ok(()), "{source}");
        }
    }
}
