//! Resolving KIND arguments as kubectl does.
//!
//! An argument is lower-cased, then split at its first dot into a name and
//! an optional group qualifier (`deployments.apps`,
//! `widgets.example.leash.dev`, or `deployments.v1.apps` with a version).
//! Matching follows kubectl's order: short names first (its shortcut
//! expander), then plural or singular resource names, then the kind. Among
//! several matches the catalog's priority decides (core group first, then
//! groups in discovery order); a resource's other served versions match
//! only after that, so `deployments.v1beta1.apps` reads v1beta1 while
//! `deployments` reads the preferred version. Unknown names are an error
//! naming them: a kind that cannot be mapped never yields an empty success
//! (seed 001).

use std::sync::Arc;

use crate::discovery::Catalog;
use crate::error::{Error, Result};
use crate::kind::ResolvedKind;

/// Which kinds to load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KindSelection {
    /// The named kinds, as kubectl accepts them (`pods`, `po`, `Pod`,
    /// `deployments.apps`, ...).
    Names(Vec<String>),
    /// Every listable kind except subresources; events only if asked.
    All {
        /// Include Events: core `events` (what `kubectl get events` reads),
        /// or `events.events.k8s.io` where the core API is not served; never
        /// both, which hold the same Events.
        include_events: bool,
    },
}

impl Default for KindSelection {
    fn default() -> Self {
        KindSelection::All {
            include_events: false,
        }
    }
}

/// Resolve a selection against the catalog. Duplicates (`pods po Pod`)
/// collapse to the first occurrence; the order of the arguments is kept.
/// One resource named at two versions is an error ([`Error::TwoVersions`]).
pub fn resolve(catalog: &Catalog, selection: &KindSelection) -> Result<Vec<Arc<ResolvedKind>>> {
    match selection {
        KindSelection::All { include_events } => {
            // One Event API, not both: the same Events are served as core
            // `events` and as `events.events.k8s.io`. Core `events` when
            // served, as `kubectl get events` reads it.
            let core_events = catalog
                .kinds()
                .iter()
                .any(|k| k.is_event() && k.group.is_empty() && k.is_listable());
            Ok(catalog
                .kinds()
                .iter()
                .filter(|k| {
                    k.is_listable()
                        && (!k.is_event()
                            || (*include_events && (k.group.is_empty() || !core_events)))
                })
                .cloned()
                .collect())
        }
        KindSelection::Names(names) => {
            let mut out: Vec<(Arc<ResolvedKind>, &String)> = Vec::with_capacity(names.len());
            for name in names {
                let kind = resolve_one(catalog, name)?;
                if !kind.is_listable() {
                    return Err(Error::NotListable { name: name.clone() });
                }
                let same = out
                    .iter()
                    .find(|(k, _)| k.group == kind.group && k.plural == kind.plural);
                match same {
                    None => out.push((kind, name)),
                    Some((k, _)) if k.version == kind.version => {}
                    Some((k, first)) => {
                        return Err(Error::TwoVersions {
                            resource: kind.qualified_name(),
                            first: (*first).clone(),
                            first_version: k.version.clone(),
                            second: name.clone(),
                            second_version: kind.version.clone(),
                        });
                    }
                }
            }
            Ok(out.into_iter().map(|(kind, _)| kind).collect())
        }
    }
}

/// Resolve one KIND argument.
pub fn resolve_one(catalog: &Catalog, arg: &str) -> Result<Arc<ResolvedKind>> {
    let lowered = arg.trim().to_lowercase();
    let unknown = || Error::UnknownKind {
        name: arg.to_owned(),
    };
    if lowered.is_empty() {
        return Err(unknown());
    }
    let (name, qualifier) = match lowered.split_once('.') {
        Some((name, rest)) => (name, Some(rest)),
        None => (lowered.as_str(), None),
    };
    let in_group = |k: &ResolvedKind| match qualifier {
        None => true,
        Some(q) => {
            q == k.group
                || q.split_once('.')
                    .is_some_and(|(version, group)| version == k.version && group == k.group)
                || (k.group.is_empty() && q == k.version)
        }
    };
    let matchers: [&dyn Fn(&ResolvedKind) -> bool; 3] = [
        &|k| k.short_names.iter().any(|s| s.eq_ignore_ascii_case(name)),
        &|k| k.plural == name || k.singular == name,
        &|k| k.kind.eq_ignore_ascii_case(name),
    ];
    for matches in matchers {
        let mut candidates = catalog.kinds().iter().chain(catalog.other_versions());
        if let Some(kind) = candidates.find(|k| in_group(k) && matches(k)) {
            return Ok(kind.clone());
        }
    }
    Err(unknown())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::tests::kind;

    fn catalog() -> Catalog {
        let mut pods = kind("", "v1", "Pod", "pods", true);
        pods.short_names = vec!["po".into()];
        let mut cms = kind("", "v1", "ConfigMap", "configmaps", true);
        cms.short_names = vec!["cm".into()];
        let mut deploy = kind("apps", "v1", "Deployment", "deployments", true);
        deploy.short_names = vec!["deploy".into()];
        let mut bindings = kind("", "v1", "Binding", "bindings", true);
        bindings.verbs = vec!["create".into()];
        Catalog::from_kinds(vec![
            pods,
            cms,
            kind("", "v1", "Namespace", "namespaces", false),
            kind("", "v1", "Event", "events", true),
            bindings,
            deploy,
            kind("events.k8s.io", "v1", "Event", "events", true),
            kind("example.leash.dev", "v1", "Widget", "widgets", true),
            // A second group with a colliding plural: lower priority.
            kind("other.dev", "v1", "Widget", "widgets", false),
            kind("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", true),
        ])
    }

    fn qualified(arg: &str) -> String {
        resolve_one(&catalog(), arg)
            .map(|k| k.qualified_name())
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn kubectl_spellings_resolve() {
        for arg in ["pods", "pod", "Pod", "po", "PODS", "pods.v1"] {
            assert_eq!(qualified(arg), "pods", "{arg}");
        }
        for arg in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
            "deploy.apps",
            "deployments.v1.apps",
        ] {
            assert_eq!(qualified(arg), "deployments.apps", "{arg}");
        }
        assert_eq!(qualified("cm"), "configmaps");
        assert_eq!(
            qualified("widgets.example.leash.dev"),
            "widgets.example.leash.dev"
        );
        assert_eq!(qualified("widget.other.dev"), "widgets.other.dev");
        assert_eq!(qualified("pods.metrics.k8s.io"), "pods.metrics.k8s.io");
    }

    #[test]
    fn ambiguity_follows_priority() {
        // Core before other groups, then discovery order.
        assert_eq!(qualified("pods"), "pods");
        assert_eq!(qualified("events"), "events");
        assert_eq!(qualified("widgets"), "widgets.example.leash.dev");
    }

    #[test]
    fn unknown_names_are_errors_naming_them() {
        for arg in [
            "nosuchkind",
            "pods.apps",
            "deployments.v2.apps",
            "",
            "widgets.example",
        ] {
            let err = resolve_one(&catalog(), arg).unwrap_err();
            assert!(
                matches!(err, Error::UnknownKind { ref name } if name == arg),
                "{arg}: {err}"
            );
        }
        let err = resolve(
            &catalog(),
            &KindSelection::Names(vec!["pods".into(), "nosuchkind".into()]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("\"nosuchkind\""), "{err}");
    }

    #[test]
    fn named_versions_reach_other_served_versions() {
        let catalog = Catalog::from_discovered(vec![
            kind("apps", "v1", "Deployment", "deployments", true),
            kind("apps", "v1beta1", "Deployment", "deployments", true),
        ]);
        let at = |arg: &str| {
            resolve_one(&catalog, arg)
                .map(|k| k.version.clone())
                .unwrap_or_else(|e| e.to_string())
        };
        assert_eq!(at("deployments"), "v1");
        assert_eq!(at("deployments.apps"), "v1");
        assert_eq!(at("deployments.v1.apps"), "v1");
        assert_eq!(at("deployments.v1beta1.apps"), "v1beta1");
        assert_eq!(at("Deployment.v1beta1.apps"), "v1beta1");
        assert!(at("deployments.v2.apps").contains("doesn't have"));
        // --all reads each resource once, at its preferred version.
        let all = resolve(&catalog, &KindSelection::default()).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].version, "v1");
        // The same version twice collapses; two versions are refused.
        let names =
            |args: &[&str]| KindSelection::Names(args.iter().map(|a| (*a).to_owned()).collect());
        let same = resolve(&catalog, &names(&["deployments.v1.apps", "deployment"])).unwrap();
        assert_eq!(same.len(), 1);
        let err = resolve(
            &catalog,
            &names(&["deployments.v1beta1.apps", "deployment"]),
        )
        .unwrap_err();
        assert!(matches!(err, Error::TwoVersions { .. }), "{err}");
        assert!(err.is_configuration());
        assert_eq!(
            err.to_string(),
            "\"deployments.v1beta1.apps\" and \"deployment\" name the same resource deployments.apps at versions v1beta1 and v1: name one version"
        );
    }

    #[test]
    fn unlistable_kinds_are_errors() {
        let err = resolve(&catalog(), &KindSelection::Names(vec!["bindings".into()])).unwrap_err();
        assert!(matches!(err, Error::NotListable { .. }), "{err}");
    }

    #[test]
    fn duplicates_collapse_in_argument_order() {
        let kinds = resolve(
            &catalog(),
            &KindSelection::Names(vec![
                "deploy".into(),
                "po".into(),
                "pods".into(),
                "Pod".into(),
            ]),
        )
        .unwrap();
        let names: Vec<_> = kinds.iter().map(|k| k.qualified_name()).collect();
        assert_eq!(names, ["deployments.apps", "pods"]);
    }

    #[test]
    fn all_skips_unlistable_and_events_unless_asked() {
        let names = |include_events| {
            resolve(&catalog(), &KindSelection::All { include_events })
                .unwrap()
                .iter()
                .map(|k| k.qualified_name())
                .collect::<Vec<_>>()
        };
        let without = names(false);
        assert!(
            !without.iter().any(|n| n.starts_with("events")),
            "{without:?}"
        );
        assert!(!without.contains(&"bindings".to_owned()));
        assert_eq!(without.len(), 7, "{without:?}");
        // Each Event once: core `events`, not also `events.events.k8s.io`
        // (the same Events through the other API).
        let with = names(true);
        assert!(with.contains(&"events".to_owned()), "{with:?}");
        assert!(
            !with.contains(&"events.events.k8s.io".to_owned()),
            "{with:?}"
        );
        assert_eq!(with.len(), without.len() + 1);
    }
}
