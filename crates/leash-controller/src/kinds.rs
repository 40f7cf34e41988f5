//! Which kinds the policies match, among those the cluster serves.

use std::sync::Arc;

use leash_loader::{Catalog, ResolvedKind};
use leash_policy::{Engine, wildcard};

/// The kinds served by the cluster that the policies match, and those they
/// name that it does not serve.
pub fn select_kinds(engine: &Engine, catalog: &Catalog) -> (Vec<Arc<ResolvedKind>>, Vec<String>) {
    let mut chosen: Vec<Arc<ResolvedKind>> = Vec::new();
    // Each kind not served, with the policies that name it.
    let mut not_served: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut add = |k: &Arc<ResolvedKind>| {
        if k.is_listable()
            && !chosen
                .iter()
                .any(|c| c.group == k.group && c.plural == k.plural)
        {
            chosen.push(k.clone());
        }
    };
    for policy in engine.policies() {
        for selector in policy.matched_kinds() {
            let parts: Vec<&str> = selector.split('/').collect();
            let (g, v, kind) = match parts.as_slice() {
                [k] => ("*", "*", *k),
                [v, k] => ("*", *v, *k),
                [g, v, k, ..] => (*g, *v, *k),
                [] => continue,
            };
            let hits: Vec<&Arc<ResolvedKind>> = catalog
                .kinds()
                .iter()
                .filter(|c| {
                    wildcard::matches(g, &c.group)
                        && wildcard::matches(v, &c.version)
                        && wildcard::matches(kind, &c.kind)
                })
                .filter(|c| !c.is_event() || kind != "*")
                .collect();
            if hits.is_empty() {
                not_served
                    .entry(selector.to_string())
                    .or_default()
                    .push(policy.key().to_string());
            }
            for h in hits {
                add(h);
            }
        }
    }
    for vpol in engine.validating_policies() {
        for (g, _v, plural) in vpol.matched_resources() {
            let hits: Vec<&Arc<ResolvedKind>> = catalog
                .kinds()
                .iter()
                .filter(|c| (g == "*" || g == c.group) && (plural == "*" || plural == c.plural))
                .collect();
            if hits.is_empty() {
                not_served
                    .entry(format!("{plural}.{g}"))
                    .or_default()
                    .push(vpol.name().to_string());
            }
            for h in hits {
                add(h);
            }
        }
    }
    let not_served = not_served
        .into_iter()
        .map(|(kind, mut policies)| {
            policies.sort();
            policies.dedup();
            format!("{kind} ({})", named(&policies))
        })
        .collect();
    (chosen, not_served)
}

/// `policy a`, `policies a, b`, or past three `17 policies: a, b, c, ...`:
/// one note per kind, however many policies name it.
fn named(policies: &[String]) -> String {
    match policies {
        [one] => format!("policy {one}"),
        few if few.len() <= 3 => format!("policies {}", few.join(", ")),
        many => format!("{} policies: {}, ...", many.len(), many[..3].join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn kind(group: &str, version: &str, kind: &str, plural: &str) -> ResolvedKind {
        ResolvedKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: String::new(),
            namespaced: true,
            verbs: vec!["list".into(), "watch".into()],
            short_names: Vec::new(),
        }
    }

    #[test]
    fn selects_matched_served_kinds_and_names_the_others() {
        let catalog = Catalog::from_kinds(vec![
            kind("", "v1", "Pod", "pods"),
            kind("apps", "v1", "Deployment", "deployments"),
            kind("", "v1", "ConfigMap", "configmaps"),
        ]);
        let mut engine = Engine::new();
        engine
            .add_json(&json!({
                "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                "spec": {"rules": [
                    {"name": "pods",
                     "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                     "validate": {"pattern": {"metadata": {"name": "?*"}}}},
                    {"name": "others",
                     "match": {"any": [{"resources": {"kinds": ["batch/*/CronJob", "example.io/v1/Widget"]}}]},
                     "validate": {"pattern": {"metadata": {"name": "?*"}}}}
                ]}
            }))
            .unwrap();
        let (kinds, not_served) = select_kinds(&engine, &catalog);
        let names: Vec<&str> = kinds.iter().map(|k| k.plural.as_str()).collect();
        // Pod, plus the autogen rule's controllers the cluster serves (Deployment).
        assert!(
            names.contains(&"pods") && names.contains(&"deployments"),
            "{names:?}"
        );
        assert!(!names.contains(&"configmaps"));
        assert!(
            not_served
                .iter()
                .any(|n| n.starts_with("example.io/v1/Widget")),
            "{not_served:?}"
        );
        assert!(
            not_served.iter().any(|n| n.starts_with("batch/*/CronJob")),
            "{not_served:?}"
        );
    }
    #[test]
    fn a_kind_not_served_is_noted_once_with_the_policies_naming_it() {
        let catalog = Catalog::from_kinds(vec![kind("", "v1", "Pod", "pods")]);
        let mut engine = Engine::new();
        for (i, kinds) in [["Widget"], ["Widget"], ["Widget"], ["Widget"], ["Gadget"]]
            .iter()
            .enumerate()
        {
            engine
                .add_json(&json!({
                    "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                    "metadata": {"name": format!("p{i}")},
                    "spec": {"rules": [{"name": "r",
                        "match": {"any": [{"resources": {"kinds": kinds}}]},
                        "validate": {"pattern": {"metadata": {"name": "?*"}}}}]}
                }))
                .unwrap();
        }
        let (_, not_served) = select_kinds(&engine, &catalog);
        assert_eq!(
            not_served,
            ["Gadget (policy p4)", "Widget (4 policies: p0, p1, p2, ...)"]
        );
        assert_eq!(named(&["a".into(), "b".into()]), "policies a, b");
    }
}
