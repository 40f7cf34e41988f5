//! Kyverno's rule for background mode: a policy evaluated on existing
//! resources may not depend on who made a request, which a background scan
//! does not have. Kyverno's policy validation (`containsUserVariables` in
//! `pkg/policy`) refuses a policy with `spec.background` true whose rules
//! match or exclude on user info (`subjects`, `roles`, `clusterRoles`), or
//! whose variables read `request.userInfo`, `request.roles`,
//! `request.clusterRoles`, `serviceAccountName` or `serviceAccountNamespace`
//! (unless a rule mutates existing resources). [`user_info_error`] gives the
//! same verdict and message, so `leash serve` can keep such a policy out of
//! the scan and say why.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

/// A `{{ … }}` variable, as Kyverno's `RegexVariables` finds them (an
/// escaped `\{{` is not one).
static VARIABLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\\])(\{\{(?:\{[^{}]*\}|[^{}])*\}\})").expect("valid regex")
});

/// The variables a background policy may not read: each must not follow a
/// `.` (so `request.object.spec.serviceAccountName` is allowed).
static FORBIDDEN: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"[^.](serviceAccountName)\b",
        r"[^.](serviceAccountNamespace)\b",
        r"[^.](request.userInfo)\b",
        r"[^.](request.roles)\b",
        r"[^.](request.clusterRoles)\b",
    ]
    .iter()
    .map(|r| Regex::new(r).expect("valid regex"))
    .collect()
});

/// Why Kyverno would not run this policy (its whole document) in background
/// mode, in Kyverno's words; `None` if it would.
pub(crate) fn user_info_error(doc: &Value) -> Option<String> {
    let rules = doc["spec"]["rules"].as_array()?;
    let found = rules
        .iter()
        .enumerate()
        .find_map(|(i, r)| user_match_exclude(i, r))
        .or_else(|| {
            let mutates_existing = rules.iter().any(|r| {
                r["mutate"]["targets"]
                    .as_array()
                    .is_some_and(|t| !t.is_empty())
            });
            if mutates_existing {
                return None;
            }
            forbidden_variable(&doc.to_string())
        })?;
    Some(format!(
        "only select variables are allowed in background mode. Set spec.background=false to disable background mode for this policy rule: {found}"
    ))
}

/// `subjects`, `roles` or `clusterRoles` set in a match or exclude block.
fn user_match_exclude(idx: usize, rule: &Value) -> Option<String> {
    for block in ["match", "exclude"] {
        let b = &rule[block];
        if let Some(path) = user_info_defined(b) {
            return Some(format!(
                "invalid variable used at path: spec/rules[{idx}]/{block}/{path}"
            ));
        }
        for list in ["any", "all"] {
            for (i, filter) in b[list].as_array().into_iter().flatten().enumerate() {
                if let Some(path) = user_info_defined(filter) {
                    return Some(format!(
                        "invalid variable used at path: spec/rules[{idx}]/{block}/{list}[{i}]/{path}"
                    ));
                }
            }
        }
    }
    None
}

fn user_info_defined(filter: &Value) -> Option<&'static str> {
    let set = |k: &str| filter[k].as_array().is_some_and(|a| !a.is_empty());
    ["roles", "clusterRoles", "subjects"]
        .into_iter()
        .find(|k| set(k))
}

fn forbidden_variable(policy_json: &str) -> Option<String> {
    VARIABLE.captures_iter(policy_json).find_map(|c| {
        let var = c.get(1)?.as_str();
        FORBIDDEN
            .iter()
            .any(|r| r.is_match(var))
            .then(|| format!("variable {var} is not allowed"))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policy(rule: Value) -> Value {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "p"}, "spec": {"rules": [rule]}})
    }

    #[test]
    fn user_info_in_match_or_exclude_is_refused_with_its_path() {
        let cases = [
            (
                json!({"match": {"any": [{"resources": {"kinds": ["Pod"]}},
                    {"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "a"}]}]}}),
                "spec/rules[0]/match/any[1]/subjects",
            ),
            (
                json!({"match": {"resources": {"kinds": ["Pod"]}, "clusterRoles": ["admin"]}}),
                "spec/rules[0]/match/clusterRoles",
            ),
            (
                json!({"match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "exclude": {"all": [{"roles": ["ns:dev"]}]}}),
                "spec/rules[0]/exclude/all[0]/roles",
            ),
        ];
        for (rule, path) in cases {
            let err = user_info_error(&policy(rule)).expect("refused");
            assert!(
                err.ends_with(&format!("invalid variable used at path: {path}")),
                "{err}"
            );
            assert!(err.starts_with("only select variables are allowed in background mode"));
        }
    }

    #[test]
    fn request_variables_are_refused_object_fields_of_the_same_name_are_not() {
        let with = |expr: &str| {
            policy(
                json!({"match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": format!("by {expr}"), "deny": {}}}),
            )
        };
        for var in [
            "{{request.userInfo.username}}",
            "{{ request.roles }}",
            "{{request.clusterRoles}}",
            "{{serviceAccountName}}",
            "{{ serviceAccountNamespace }}",
        ] {
            let err = user_info_error(&with(var)).unwrap_or_else(|| panic!("{var} allowed"));
            assert!(
                err.ends_with(&format!("variable {var} is not allowed")),
                "{err}"
            );
        }
        for var in [
            "{{request.object.spec.serviceAccountName}}",
            "{{request.object.metadata.name}}",
            "\\\\{{request.userInfo}}",
        ] {
            assert_eq!(user_info_error(&with(var)), None, "{var}");
        }
    }

    #[test]
    fn mutate_existing_rules_may_read_request_variables() {
        let p = json!({"spec": {"rules": [
            {"match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "mutate": {"targets": [{"apiVersion": "v1", "kind": "Secret"}],
                "patchStrategicMerge": {"metadata": {"labels": {"by": "{{request.userInfo.username}}"}}}}}]}});
        assert_eq!(user_info_error(&p), None);
    }
}
