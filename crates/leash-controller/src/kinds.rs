//! Which kinds the policies match, among those the cluster serves.

use std::sync::Arc;

use leash_loader::{Catalog, ResolvedKind};
use leash_policy::{Engine, wildcard};

/// The kinds served by the cluster that the policies match, and those they
/// name that it does not serve.
pub fn select_kinds(engine: &Engine, catalog: &Catalog) -> (Vec<Arc<ResolvedKind>>, Vec<String>) {
    let mut chosen: Vec<Arc<ResolvedKind>> = Vec::new();
    let mut not_served = Vec::new();
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
                not_served.push(format!("{} (policy {})", selector, policy.key()));
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
                not_served.push(format!("{plural}.{g} (policy {})", vpol.name()));
            }
            for h in hits {
                add(h);
            }
        }
    }
    not_served.sort();
    not_served.dedup();
    (chosen, not_served)
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
}
