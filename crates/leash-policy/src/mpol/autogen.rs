//! Kyverno's autogen for MutatingPolicies: a policy matching only pods also
//! mutates the pod templates of the pod controllers (the same controllers
//! and `spec.autogen.podControllers.controllers` as a ValidatingPolicy's).
//!
//! Kyverno rewrites the text of the match conditions and of the
//! ApplyConfiguration expressions (JSONPatch expressions and variables are
//! left as written): `object.spec` / `Object.spec` become the pod
//! template's spec, `object.metadata.labels` / `.annotations` the
//! template's, and an expression that is one `Object{...}` literal is
//! wrapped so it builds the controller's object around the pod template.

use serde_json::Value as Json;

use crate::vpol::{AutogenTargets, autogen_targets};

/// The specs of the autogen variants of `spec` (none unless it matches
/// only pods).
pub(super) fn specs(spec: &Json) -> Vec<Json> {
    let mut out = Vec::new();
    for AutogenTargets {
        cronjob,
        match_constraints,
        ..
    } in autogen_targets(spec)
    {
        let mut s = spec.clone();
        if let Some(obj) = s.as_object_mut() {
            obj.remove("autogen");
            obj.insert("matchConstraints".into(), match_constraints);
        }
        if let Some(Json::Array(conds)) = s.get_mut("matchConditions") {
            for c in conds {
                if let Some(e) = c["expression"].as_str() {
                    c["expression"] = Json::String(to_template(e, cronjob));
                }
            }
        }
        if let Some(Json::Array(muts)) = s.get_mut("mutations") {
            for m in muts {
                if let Some(e) = m["applyConfiguration"]["expression"].as_str() {
                    m["applyConfiguration"]["expression"] = Json::String(to_template(e, cronjob));
                }
            }
        }
        out.push(s);
    }
    out
}

/// Rewrites a pod expression into the controller's pod template one.
pub(super) fn to_template(expr: &str, cronjob: bool) -> String {
    let (spec_to, meta_to) = if cronjob {
        (
            "spec.jobTemplate.spec.template.spec",
            "spec.jobTemplate.spec.template.metadata",
        )
    } else {
        ("spec.template.spec", "spec.template.metadata")
    };
    let mut e = expr.to_string();
    for root in ["object", "Object"] {
        e = e.replace(&format!("{root}.spec"), &format!("{root}.{spec_to}"));
    }
    for field in ["labels", "annotations"] {
        for root in ["object", "Object"] {
            e = e.replace(
                &format!("{root}.metadata.{field}"),
                &format!("{root}.{meta_to}.{field}"),
            );
        }
    }
    let trimmed = e.trim();
    let Some(content) = trimmed.strip_prefix("Object{") else {
        return e;
    };
    // The end of the outer literal: its closing brace.
    let mut depth = 1usize;
    let mut end = None;
    for (i, c) in content.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = Some(i);
                    break;
                }
            }
            _ => {}
        }
    }
    let Some(end) = end.filter(|&i| i > 0) else {
        return e;
    };
    let (inner, rest) = (&content[..end], &content[end + 1..]);
    let (open, close) = if cronjob {
        (
            "Object{spec: Object.spec{jobTemplate: Object.spec.jobTemplate{spec: Object.spec.jobTemplate.spec{template: Object.spec.jobTemplate.spec.template{",
            "}}}}}",
        )
    } else {
        (
            "Object{spec: Object.spec{template: Object.spec.template{",
            "}}}",
        )
    };
    format!("{open}{inner}{close}{rest}")
}
