//! A rule's `mutate`, compiled: which patch it applies and, for `foreach`,
//! over which list.

use serde_json::Value;

use crate::conditions::Conditions;
use crate::error::Result;
use crate::model;
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

pub(crate) use crate::model::Order;

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
        m: &model::Mutate,
        field: &str,
        err: &ErrFn<'_>,
        cache: &mut ExprCache,
    ) -> Result<MutateSpec> {
        match m.targets.as_deref() {
            Some(targets @ [_, ..]) => {
                let mut specs = Vec::new();
                for (i, t) in targets.iter().enumerate() {
                    let tf = format!("{field}.targets[{i}]");
                    specs.push(compile_target(t, &tf, err, cache)?);
                }
                let patch = compile_patch(m.foreach.as_deref(), m, field, err, cache)?;
                Ok(MutateSpec::Existing {
                    targets: specs,
                    patch: Box::new(patch),
                })
            }
            _ => compile_patch(m.foreach.as_deref(), m, field, err, cache),
        }
    }
}

/// What mutates: a foreach, else the strategic merge patch, else the JSON
/// patch (Kyverno's precedence).
fn compile_patch(
    foreach: Option<&[model::Block]>,
    m: &model::Mutate,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<MutateSpec> {
    if let Some(f) = foreach {
        return compile_foreach(f, &format!("{field}.foreach"), err, cache)
            .map(MutateSpec::Foreach);
    }
    match patch(
        &m.patch_strategic_merge,
        &m.patches_json6902,
        field,
        err,
        cache,
    )? {
        Some(ForeachPatch::StrategicMerge(p)) => Ok(MutateSpec::StrategicMerge(p)),
        Some(ForeachPatch::Json6902(text)) => Ok(MutateSpec::Json6902(text)),
        _ => Err(err(
            field.to_string(),
            "needs one of patchStrategicMerge, patchesJson6902 or foreach".into(),
        )),
    }
}

/// The strategic merge patch, else the JSON patch, of a mutate or a
/// foreach declaration at `field` (None: neither).
fn patch(
    strategic: &Option<Value>,
    json6902: &Option<Value>,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Option<ForeachPatch>> {
    if let Some(p) = strategic {
        collect(cache, p, &format!("{field}.patchStrategicMerge"), err)?;
        return Ok(Some(ForeachPatch::StrategicMerge(p.clone())));
    }
    let Some(p) = json6902 else {
        return Ok(None);
    };
    let field = format!("{field}.patchesJson6902");
    let text = match p {
        Value::String(s) => s.clone(),
        // A list of operations written inline is accepted as its JSON text.
        Value::Array(_) => p.to_string(),
        _ => {
            return Err(err(field, "must be a string of RFC 6902 operations".into()));
        }
    };
    collect(cache, &Value::String(text.clone()), &field, err)?;
    Ok(Some(ForeachPatch::Json6902(text)))
}

fn compile_target(
    t: &model::Target,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<TargetSpec> {
    if t.kind.is_empty() {
        return Err(err(format!("{field}.kind"), "is required".into()));
    }
    for (key, text) in [
        ("apiVersion", &t.api_version),
        ("kind", &t.kind),
        ("name", &t.name),
        ("namespace", &t.namespace),
    ] {
        collect(
            cache,
            &Value::String(text.clone()),
            &format!("{field}.{key}"),
            err,
        )?;
    }
    if let Some(s) = &t.selector {
        collect(cache, s, &format!("{field}.selector"), err)?;
    }
    Ok(TargetSpec {
        api_version: t.api_version.clone(),
        kind: t.kind.clone(),
        name: t.name.clone(),
        namespace: t.namespace.clone(),
        selector: t.selector.clone(),
        context: compile_context(&t.context, &format!("{field}.context"), err, cache)?,
        preconditions: compile_conditions(
            &t.preconditions,
            &format!("{field}.preconditions"),
            err,
            cache,
        )?,
    })
}

fn collect(cache: &mut ExprCache, doc: &Value, field: &str, err: &ErrFn<'_>) -> Result<()> {
    cache.collect(doc).map_err(|e| err(field.to_string(), e))
}

fn compile_foreach(
    f: &[model::Block],
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Vec<MutateForeach>> {
    let mut out = Vec::new();
    for d in crate::policy::foreach_decls(f, field, err, cache)? {
        let (decl, df) = (d.decl, d.field.clone());
        // As Kyverno: a nested foreach first, then the strategic merge
        // patch, then the JSON patch.
        let patch = match &decl.foreach {
            Some(nested) => Some(ForeachPatch::Nested(compile_foreach(
                nested,
                &format!("{df}.foreach"),
                err,
                cache,
            )?)),
            None => patch(
                &decl.patch_strategic_merge,
                &decl.patches_json6902,
                &df,
                err,
                cache,
            )?,
        };
        let Some(patch) = patch else {
            return Err(err(
                df,
                "needs one of patchStrategicMerge, patchesJson6902 or foreach".into(),
            ));
        };
        out.push(MutateForeach {
            list: d.list,
            order: decl.order,
            context: d.context,
            preconditions: d.preconditions,
            patch,
        });
    }
    Ok(out)
}
