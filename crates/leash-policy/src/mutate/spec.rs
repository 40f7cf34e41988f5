//! A rule's `mutate`, compiled: which patch it applies and, for `foreach`,
//! over which list.

use serde_json::Value;

use crate::conditions::Conditions;
use crate::error::Result;
use crate::policy::{ContextEntry, ErrFn, compile_conditions, compile_context};
use crate::vars::ExprCache;

/// A compiled `mutate` block.
#[derive(Debug)]
pub(crate) enum MutateSpec {
    /// `patchStrategicMerge`: an overlay with Kyverno's anchors.
    StrategicMerge(Value),
    /// `patchesJson6902`: RFC 6902 operations as YAML (or JSON) text,
    /// parsed after its variables are substituted.
    Json6902(String),
    /// `foreach`: one patch per element of a list.
    Foreach(Vec<MutateForeach>),
    /// `targets`: the patch applies to existing resources (looked up in the
    /// caller's cluster data), not to the admitted one.
    Existing {
        targets: Vec<TargetSpec>,
        patch: Box<MutateSpec>,
    },
}

/// One `mutate.targets` entry; its strings may hold variables of the
/// triggering request.
#[derive(Debug)]
pub(crate) struct TargetSpec {
    pub api_version: String,
    pub kind: String,
    /// Empty: any; wildcards allowed.
    pub name: String,
    /// Empty: any; wildcards allowed.
    pub namespace: String,
    pub selector: Option<Value>,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
}

/// Element order of a `foreach`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    Ascending,
    Descending,
}

/// One `mutate.foreach` declaration.
#[derive(Debug)]
pub(crate) struct MutateForeach {
    /// The list expression (JMESPath, without `{{ }}`).
    pub list: String,
    /// `order`; `None` is Kyverno's default (descending for a strategic
    /// merge patch, ascending otherwise).
    pub order: Option<Order>,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
    pub patch: ForeachPatch,
}

/// What one element of a `foreach` applies.
#[derive(Debug)]
pub(crate) enum ForeachPatch {
    StrategicMerge(Value),
    Json6902(String),
    /// A nested `foreach`.
    Nested(Vec<MutateForeach>),
}

impl MutateSpec {
    /// Compiles a rule's `mutate` (`field` is its path, for errors).
    pub(crate) fn compile(
        m: &Value,
        field: &str,
        err: &ErrFn<'_>,
        cache: &mut ExprCache,
    ) -> Result<MutateSpec> {
        if !m.is_object() {
            return Err(err(field.to_string(), "must be an object".into()));
        }
        if let Some(targets) = m["targets"].as_array().filter(|t| !t.is_empty()) {
            let mut specs = Vec::new();
            for (i, t) in targets.iter().enumerate() {
                specs.push(compile_target(
                    t,
                    &format!("{field}.targets[{i}]"),
                    err,
                    cache,
                )?);
            }
            let mut rest = m.clone();
            if let Some(obj) = rest.as_object_mut() {
                obj.remove("targets");
            }
            let patch = MutateSpec::compile(&rest, field, err, cache)?;
            return Ok(MutateSpec::Existing {
                targets: specs,
                patch: Box::new(patch),
            });
        }
        // Kyverno's precedence: a foreach, else the strategic merge patch,
        // else the JSON patch.
        if let Some(f) = present(m, "foreach") {
            return compile_foreach(f, &format!("{field}.foreach"), err, cache)
                .map(MutateSpec::Foreach);
        }
        if let Some(p) = present(m, "patchStrategicMerge") {
            collect(cache, p, &format!("{field}.patchStrategicMerge"), err)?;
            return Ok(MutateSpec::StrategicMerge(p.clone()));
        }
        if let Some(p) = present(m, "patchesJson6902") {
            let text = json6902_text(p, &format!("{field}.patchesJson6902"), err, cache)?;
            return Ok(MutateSpec::Json6902(text));
        }
        Err(err(
            field.to_string(),
            "needs one of patchStrategicMerge, patchesJson6902 or foreach".into(),
        ))
    }
}

fn compile_target(
    t: &Value,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<TargetSpec> {
    let text = |key: &str, cache: &mut ExprCache| -> Result<String> {
        match &t[key] {
            Value::Null => Ok(String::new()),
            Value::String(s) => {
                collect(cache, &t[key], &format!("{field}.{key}"), err)?;
                Ok(s.clone())
            }
            _ => Err(err(format!("{field}.{key}"), "must be a string".into())),
        }
    };
    let kind = text("kind", cache)?;
    if kind.is_empty() {
        return Err(err(format!("{field}.kind"), "is required".into()));
    }
    let selector = present(t, "selector").cloned();
    if let Some(s) = &selector {
        collect(cache, s, &format!("{field}.selector"), err)?;
    }
    Ok(TargetSpec {
        api_version: text("apiVersion", cache)?,
        kind,
        name: text("name", cache)?,
        namespace: text("namespace", cache)?,
        selector,
        context: compile_context(&t["context"], &format!("{field}.context"), err, cache)?,
        preconditions: compile_conditions(
            &t["preconditions"],
            &format!("{field}.preconditions"),
            err,
            cache,
        )?,
    })
}

fn present<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn collect(cache: &mut ExprCache, doc: &Value, field: &str, err: &ErrFn<'_>) -> Result<()> {
    cache.collect(doc).map_err(|e| err(field.to_string(), e))
}

fn json6902_text(p: &Value, field: &str, err: &ErrFn<'_>, cache: &mut ExprCache) -> Result<String> {
    let text = match p {
        Value::String(s) => s.clone(),
        // A list of operations written inline is accepted as its JSON text.
        Value::Array(_) => p.to_string(),
        _ => {
            return Err(err(
                field.to_string(),
                "must be a string of RFC 6902 operations".into(),
            ));
        }
    };
    collect(cache, &Value::String(text.clone()), field, err)?;
    Ok(text)
}

fn compile_foreach(
    f: &Value,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Vec<MutateForeach>> {
    let mut out = Vec::new();
    for d in crate::policy::foreach_decls(f, field, err, cache)? {
        let (decl, df) = (d.decl, d.field.clone());
        let order = match decl["order"].as_str() {
            None => None,
            Some("Ascending") => Some(Order::Ascending),
            Some("Descending") => Some(Order::Descending),
            Some(other) => {
                return Err(err(
                    format!("{df}.order"),
                    format!("{other:?} is not Ascending or Descending"),
                ));
            }
        };
        // As Kyverno: a nested foreach first, then the strategic merge
        // patch, then the JSON patch.
        let patch = if let Some(nested) = present(decl, "foreach") {
            ForeachPatch::Nested(compile_foreach(
                nested,
                &format!("{df}.foreach"),
                err,
                cache,
            )?)
        } else if let Some(p) = present(decl, "patchStrategicMerge") {
            collect(cache, p, &format!("{df}.patchStrategicMerge"), err)?;
            ForeachPatch::StrategicMerge(p.clone())
        } else if let Some(p) = present(decl, "patchesJson6902") {
            ForeachPatch::Json6902(json6902_text(
                p,
                &format!("{df}.patchesJson6902"),
                err,
                cache,
            )?)
        } else {
            return Err(err(
                df,
                "needs one of patchStrategicMerge, patchesJson6902 or foreach".into(),
            ));
        };
        out.push(MutateForeach {
            list: d.list,
            order,
            context: d.context,
            preconditions: d.preconditions,
            patch,
        });
    }
    Ok(out)
}
