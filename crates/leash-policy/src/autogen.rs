//! Kyverno's autogen: a rule on Pods also applies to the pod template of the
//! pod controllers (`autogen-<rule>`) and of CronJobs
//! (`autogen-cronjob-<rule>`), unless the policy's
//! `pod-policies.kyverno.io/autogen-controllers` annotation narrows or
//! disables it, or a rule's match cannot be carried over (names,
//! selectors, annotations, or Pod mixed with other kinds).
//!
//! The generated rules are derived from the rule's JSON before compiling,
//! as Kyverno does: kinds replaced, patterns wrapped in the template path,
//! and `request.object.spec` / `.metadata` references moved into it.

use serde_json::{Map, Value, json};

use crate::matching::KindSel;

/// The annotation that selects the controllers.
pub(crate) const ANNOTATION: &str = "pod-policies.kyverno.io/autogen-controllers";

const DEFAULT_CONTROLLERS: &[&str] = &[
    "DaemonSet",
    "Deployment",
    "Job",
    "StatefulSet",
    "ReplicaSet",
    "ReplicationController",
    "CronJob",
];

/// Whether `kind` is a pod controller whose pod template is
/// `spec.template` (every autogen controller but CronJob, whose template
/// is `spec.jobTemplate.spec.template`).
pub(crate) fn has_pod_template(kind: &str) -> bool {
    kind != "CronJob" && DEFAULT_CONTROLLERS.contains(&kind)
}

fn descriptions(block: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    if block.is_null() {
        return out;
    }
    if !block["resources"].is_null() {
        out.push(&block["resources"]);
    }
    for key in ["any", "all"] {
        if let Some(list) = block[key].as_array() {
            out.extend(
                list.iter()
                    .map(|f| &f["resources"])
                    .filter(|r| !r.is_null()),
            );
        }
    }
    out
}

fn kinds_of(desc: &Value) -> Vec<String> {
    desc["kinds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|k| KindSel::parse(k).kind)
                .collect()
        })
        .unwrap_or_default()
}

fn block_kinds(block: &Value) -> Vec<String> {
    descriptions(block).into_iter().flat_map(kinds_of).collect()
}

/// Whether every rule's match and exclude can be carried over to
/// controllers, and at least one rule matches Pods (Kyverno's `CanAutoGen`).
fn can_autogen(rules: &[Value]) -> bool {
    let mut needed = false;
    for rule in rules {
        let foreach_json_patch = rule["mutate"]["foreach"]
            .as_array()
            .is_some_and(|f| f.iter().any(|d| !d["patchesJson6902"].is_null()));
        if !rule["mutate"]["patchesJson6902"].is_null()
            || foreach_json_patch
            || !rule["generate"].is_null()
        {
            return false;
        }
        for block in [&rule["match"], &rule["exclude"]] {
            for desc in descriptions(block) {
                let kinds = kinds_of(desc);
                let has_pod = kinds.iter().any(|k| k == "Pod");
                if !desc["name"].is_null()
                    || desc["names"].as_array().is_some_and(|n| !n.is_empty())
                    || !desc["selector"].is_null()
                    || !desc["annotations"].is_null()
                    || (kinds.len() > 1 && has_pod)
                {
                    return false;
                }
                needed |= has_pod;
            }
        }
    }
    needed
}

/// The controllers autogen applies to for a policy, in Kyverno's order.
pub(crate) fn controllers(annotations: &Map<String, Value>, rules: &[Value]) -> Vec<String> {
    if !can_autogen(rules) {
        return Vec::new();
    }
    match annotations.get(ANNOTATION).and_then(Value::as_str) {
        Some(list) if list.trim().eq_ignore_ascii_case("none") => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        None => DEFAULT_CONTROLLERS.iter().map(|s| s.to_string()).collect(),
    }
}

fn set_kinds(block: &mut Value, kinds: &[String]) {
    if block.is_null() {
        return;
    }
    let set = |desc: &mut Value| {
        if desc["kinds"].as_array().is_some_and(|k| !k.is_empty()) {
            desc["kinds"] = json!(kinds);
        }
    };
    if block["resources"].is_object() {
        set(&mut block["resources"]);
    }
    for key in ["any", "all"] {
        if let Some(list) = block[key].as_array_mut() {
            for f in list {
                if f["resources"].is_object() {
                    set(&mut f["resources"]);
                }
            }
        }
    }
}

fn replace_text(v: &Value, from_to: &[(&str, &str)]) -> Value {
    match v {
        Value::String(s) => {
            let mut s = s.clone();
            for (from, to) in from_to {
                s = replace_refs(&s, from, to);
            }
            Value::String(s)
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| replace_text(x, from_to)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let mut k = k.clone();
                    for (from, to) in from_to {
                        k = replace_refs(&k, from, to);
                    }
                    (k, replace_text(x, from_to))
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Replaces `from` by `to` where `from` is not part of a longer identifier
/// (so `request.object.spec` in `request.object.specification` stays).
fn replace_refs(s: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before_ok = rest[..i]
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'));
        let after = &rest[i + from.len()..];
        let after_ok = after
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        out.push_str(&rest[..i]);
        if before_ok && after_ok {
            out.push_str(to);
        } else {
            out.push_str(from);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

fn wrap_patterns(validate: &mut Value, wrap: &dyn Fn(Value) -> Value) {
    if let Some(p) = validate.get("pattern").cloned() {
        validate["pattern"] = wrap(p);
    }
    if let Some(Value::Array(ps)) = validate.get("anyPattern").cloned() {
        validate["anyPattern"] = Value::Array(ps.into_iter().map(wrap).collect());
    }
}

/// A mutate rule for controllers, as Kyverno writes it: the strategic
/// merge patch (of the rule, or of each `foreach`) moved under the pod
/// template; a `foreach` keeps its list, context and preconditions only.
fn wrap_mutate(mutate: &mut Value, wrap: &dyn Fn(Value) -> Value) {
    if mutate["targets"].as_array().is_some_and(|t| !t.is_empty()) {
        // The patch is for the targets, not for the pod template.
        return;
    }
    if let Some(p) = mutate.get("patchStrategicMerge").filter(|p| !p.is_null()) {
        *mutate = json!({"patchStrategicMerge": wrap(p.clone())});
        return;
    }
    let Some(list) = mutate.get("foreach").and_then(Value::as_array) else {
        return;
    };
    let decls: Vec<Value> = list
        .iter()
        .map(|decl| {
            let Some(p) = decl.get("patchStrategicMerge").filter(|p| !p.is_null()) else {
                return decl.clone();
            };
            let mut out = Map::new();
            for key in ["list", "context", "preconditions"] {
                if let Some(v) = decl.get(key) {
                    out.insert(key.to_string(), v.clone());
                }
            }
            out.insert("patchStrategicMerge".into(), wrap(p.clone()));
            Value::Object(out)
        })
        .collect();
    *mutate = json!({"foreach": decls});
}

const POD_REFS: &[(&str, &str)] = &[
    ("request.object.spec", "request.object.spec.template.spec"),
    (
        "request.oldObject.spec",
        "request.oldObject.spec.template.spec",
    ),
    (
        "request.object.metadata",
        "request.object.spec.template.metadata",
    ),
    (
        "request.oldObject.metadata",
        "request.oldObject.spec.template.metadata",
    ),
];

const CRONJOB_REFS: &[(&str, &str)] = &[
    (
        "request.object.spec",
        "request.object.spec.jobTemplate.spec",
    ),
    (
        "request.oldObject.spec",
        "request.oldObject.spec.jobTemplate.spec",
    ),
];

const CEL_POD_REFS: &[(&str, &str)] = &[
    ("object.spec", "object.spec.template.spec"),
    ("oldObject.spec", "oldObject.spec.template.spec"),
    ("object.metadata", "object.spec.template.metadata"),
    ("oldObject.metadata", "oldObject.spec.template.metadata"),
];

const CEL_CRONJOB_REFS: &[(&str, &str)] = &[
    ("object.spec", "object.spec.jobTemplate.spec"),
    ("oldObject.spec", "oldObject.spec.jobTemplate.spec"),
];

fn convert(
    rule: &Value,
    name: String,
    kinds: &[String],
    refs: &[(&str, &str)],
    cel_refs: &[(&str, &str)],
    wrap: &dyn Fn(Value) -> Value,
) -> Value {
    let mut out = Map::new();
    for (k, v) in rule.as_object().into_iter().flatten() {
        let v = match k.as_str() {
            "name" => Value::String(name.clone()),
            "match" | "exclude" => {
                let mut b = v.clone();
                set_kinds(&mut b, kinds);
                b
            }
            "validate" => {
                let mut val = v.clone();
                let cel = val.as_object_mut().and_then(|m| m.remove("cel"));
                // Kyverno keeps podSecurity as it is: the engine reads the
                // pod template of the controller it is evaluated on.
                let pss = val.as_object_mut().and_then(|m| m.remove("podSecurity"));
                let mut val = replace_text(&val, refs);
                wrap_patterns(&mut val, wrap);
                if let Some(cel) = cel {
                    val["cel"] = replace_text(&cel, cel_refs);
                }
                if let Some(pss) = pss {
                    val["podSecurity"] = pss;
                }
                val
            }
            "mutate" => {
                let mut m = replace_text(v, refs);
                wrap_mutate(&mut m, wrap);
                m
            }
            // CEL names the object `object`, not `request.object`.
            "celPreconditions" => replace_text(v, cel_refs),
            _ => replace_text(v, refs),
        };
        out.insert(k.clone(), v);
    }
    Value::Object(out)
}

/// The autogen rules of one rule (none when it does not match Pods).
pub(crate) fn rules_for(rule: &Value, controllers: &[String]) -> Vec<Value> {
    let name = rule["name"].as_str().unwrap_or("");
    if controllers.is_empty() || name.starts_with("autogen-") {
        return Vec::new();
    }
    let match_kinds = block_kinds(&rule["match"]);
    let exclude_kinds = block_kinds(&rule["exclude"]);
    if !match_kinds.iter().any(|k| k == "Pod")
        || (!exclude_kinds.is_empty() && !exclude_kinds.iter().any(|k| k == "Pod"))
    {
        return Vec::new();
    }
    let mut out = Vec::new();
    let pod_controllers: Vec<String> = controllers
        .iter()
        .filter(|c| *c != "CronJob")
        .cloned()
        .collect();
    let template_wrap = |p: Value| json!({"spec": {"template": p}});
    let job_rule = convert(
        rule,
        format!("autogen-{name}"),
        &pod_controllers,
        POD_REFS,
        CEL_POD_REFS,
        &template_wrap,
    );
    if !pod_controllers.is_empty() {
        out.push(job_rule.clone());
    }
    if controllers.iter().any(|c| c == "CronJob") {
        let cron_wrap = |p: Value| json!({"spec": {"jobTemplate": p}});
        out.push(convert(
            &job_rule,
            format!("autogen-cronjob-{name}"),
            &["CronJob".to_string()],
            CRONJOB_REFS,
            CEL_CRONJOB_REFS,
            &cron_wrap,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CEL rule's `celPreconditions` move to the pod template with its
    /// expressions (a Deployment's pod spec is `object.spec.template.spec`).
    #[test]
    fn cel_preconditions_follow_the_pod_template() {
        let rule = json!({"name": "r",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "celPreconditions": [{"name": "p",
                "expression": "object.spec.?volumes.orValue([]).exists(v, has(v.hostPath))"}],
            "validate": {"cel": {"expressions": [{"expression": "object.spec.volumes.size() > 0"}]}}});
        let rules = rules_for(&rule, &["Deployment".to_string(), "CronJob".to_string()]);
        assert_eq!(
            rules[0]["celPreconditions"][0]["expression"],
            "object.spec.template.spec.?volumes.orValue([]).exists(v, has(v.hostPath))"
        );
        assert_eq!(
            rules[1]["celPreconditions"][0]["expression"],
            "object.spec.jobTemplate.spec.template.spec.?volumes.orValue([]).exists(v, has(v.hostPath))"
        );
    }

    #[test]
    fn generates_controller_and_cronjob_rules() {
        let rule = json!({
            "name": "check",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {
                "message": "{{request.object.metadata.name}}",
                "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}},
                "deny": {"conditions": {"any": [{"key": "{{request.object.spec.hostNetwork}}", "operator": "Equals", "value": true}]}}
            }
        });
        let ctrls = controllers(&Map::new(), std::slice::from_ref(&rule));
        assert_eq!(ctrls.len(), 7);
        let generated = rules_for(&rule, &ctrls);
        assert_eq!(generated.len(), 2);
        let ctl = &generated[0];
        assert_eq!(ctl["name"], "autogen-check");
        assert_eq!(
            ctl["match"]["any"][0]["resources"]["kinds"]
                .as_array()
                .unwrap()
                .len(),
            6
        );
        assert_eq!(
            ctl["validate"]["pattern"]["spec"]["template"]["spec"]["containers"][0]["image"],
            "!*:latest"
        );
        assert_eq!(
            ctl["validate"]["message"],
            "{{request.object.spec.template.metadata.name}}"
        );
        let cron = &generated[1];
        assert_eq!(cron["name"], "autogen-cronjob-check");
        assert_eq!(
            cron["match"]["any"][0]["resources"]["kinds"],
            json!(["CronJob"])
        );
        assert_eq!(
            cron["validate"]["deny"]["conditions"]["any"][0]["key"],
            "{{request.object.spec.jobTemplate.spec.template.spec.hostNetwork}}"
        );
        assert!(
            cron["validate"]["pattern"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
                .is_object()
        );
    }

    #[test]
    fn mutate_rules_wrap_their_patches_in_the_template() {
        let rule = json!({
            "name": "m",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"patchStrategicMerge": {"spec": {"containers": [{"(name)": "*", "imagePullPolicy": "Always"}]}}}
        });
        let ctrls = controllers(&Map::new(), std::slice::from_ref(&rule));
        let generated = rules_for(&rule, &ctrls);
        assert_eq!(
            generated[0]["mutate"]["patchStrategicMerge"]["spec"]["template"]["spec"]["containers"]
                [0]["imagePullPolicy"],
            "Always"
        );
        assert_eq!(
            generated[1]["mutate"]["patchStrategicMerge"]["spec"]["jobTemplate"]["spec"]["template"]
                ["spec"]["containers"][0]["(name)"],
            "*"
        );
        let foreach = json!({
            "name": "f",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"foreach": [{"list": "request.object.spec.containers", "order": "Ascending",
                                     "patchStrategicMerge": {"metadata": {"labels": {"a": "b"}}}}]}
        });
        let generated = rules_for(&foreach, &ctrls);
        let decl = &generated[0]["mutate"]["foreach"][0];
        assert_eq!(decl["list"], "request.object.spec.template.spec.containers");
        assert_eq!(
            decl["patchStrategicMerge"]["spec"]["template"]["metadata"]["labels"]["a"],
            "b"
        );
        assert!(decl.get("order").is_none());
        let json_patch = json!({
            "name": "j",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"foreach": [{"list": "request.object.spec.containers", "patchesJson6902": "[]"}]}
        });
        assert!(controllers(&Map::new(), &[json_patch]).is_empty());
    }

    #[test]
    fn annotation_and_unsupported_matches() {
        let rule = json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}, "validate": {}});
        let mut ann = Map::new();
        ann.insert(ANNOTATION.into(), json!("none"));
        assert!(controllers(&ann, std::slice::from_ref(&rule)).is_empty());
        ann.insert(ANNOTATION.into(), json!("Deployment, CronJob"));
        assert_eq!(
            controllers(&ann, std::slice::from_ref(&rule)),
            vec!["Deployment", "CronJob"]
        );
        let named = json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"], "names": ["x"]}}]}});
        assert!(controllers(&Map::new(), &[named]).is_empty());
        let mixed =
            json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Pod", "Service"]}}]}});
        assert!(controllers(&Map::new(), &[mixed]).is_empty());
        let deploy_only =
            json!({"name": "r", "match": {"any": [{"resources": {"kinds": ["Deployment"]}}]}});
        assert!(controllers(&Map::new(), &[deploy_only]).is_empty());
    }

    #[test]
    fn reference_replacement_respects_identifiers() {
        assert_eq!(
            replace_refs("request.object.spec.x", "request.object.spec", "R"),
            "R.x"
        );
        assert_eq!(
            replace_refs("request.object.specs", "request.object.spec", "R"),
            "request.object.specs"
        );
        assert_eq!(
            replace_refs("oldObject.spec", "object.spec", "R"),
            "oldObject.spec"
        );
    }
}
