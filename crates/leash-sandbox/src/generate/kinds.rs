//! The built-in kinds `--generate` can make, and the names kubectl knows
//! them by.

/// One built-in kind the generator can make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BuiltinKind {
    /// API group ("" for the core group).
    pub(super) group: &'static str,
    /// API version within the group.
    pub(super) version: &'static str,
    /// Kind, as in `kind:`.
    pub(super) kind: &'static str,
    /// Lower-case plural resource name.
    pub(super) plural: &'static str,
    /// Lower-case singular resource name.
    pub(super) singular: &'static str,
    /// kubectl short names.
    pub(super) short_names: &'static [&'static str],
    /// Whether objects live in a namespace.
    pub(super) namespaced: bool,
}

impl BuiltinKind {
    /// The canonical name kubectl prints: `pods`, `deployments.apps`.
    pub(super) fn canonical_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether `name` (any case) names this kind the way kubectl accepts:
    /// plural, singular, short name or kind, optionally followed by
    /// `.GROUP` or `.VERSION.GROUP` (`deploy`, `deployments.apps`,
    /// `deployment.v1.apps`, `Pod`).
    fn is_named(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        let (resource, qualifier) = match name.split_once('.') {
            Some((resource, qualifier)) => (resource.to_owned(), Some(qualifier.to_owned())),
            None => (name.clone(), None),
        };
        let resource_matches = resource == self.plural
            || resource == self.singular
            || resource == self.kind.to_ascii_lowercase()
            || self.short_names.contains(&resource.as_str());
        let qualifier_matches = match qualifier.as_deref() {
            None => true,
            Some(q) if self.group.is_empty() => q == self.version,
            Some(q) => q == self.group || q == format!("{}.{}", self.version, self.group),
        };
        resource_matches && qualifier_matches
    }
}

/// Every kind `--generate` can make, in the order `valid_names` lists them.
pub(super) const BUILTIN_KINDS: &[BuiltinKind] = &[
    core("Namespace", "namespaces", "namespace", &["ns"], false),
    core("Node", "nodes", "node", &["no"], false),
    core("Pod", "pods", "pod", &["po"], true),
    core("ConfigMap", "configmaps", "configmap", &["cm"], true),
    core("Secret", "secrets", "secret", &[], true),
    core("Service", "services", "service", &["svc"], true),
    core(
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccount",
        &["sa"],
        true,
    ),
    core("Event", "events", "event", &["ev"], true),
    apps("Deployment", "deployments", "deployment", &["deploy"]),
    apps("StatefulSet", "statefulsets", "statefulset", &["sts"]),
    apps("DaemonSet", "daemonsets", "daemonset", &["ds"]),
    apps("ReplicaSet", "replicasets", "replicaset", &["rs"]),
    batch("Job", "jobs", "job", &[]),
    batch("CronJob", "cronjobs", "cronjob", &["cj"]),
];

const fn core(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
) -> BuiltinKind {
    BuiltinKind {
        group: "",
        version: "v1",
        kind,
        plural,
        singular,
        short_names,
        namespaced,
    }
}

const fn apps(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
) -> BuiltinKind {
    BuiltinKind {
        group: "apps",
        version: "v1",
        kind,
        plural,
        singular,
        short_names,
        namespaced: true,
    }
}

const fn batch(
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
    short_names: &'static [&'static str],
) -> BuiltinKind {
    BuiltinKind {
        group: "batch",
        version: "v1",
        kind,
        plural,
        singular,
        short_names,
        namespaced: true,
    }
}

/// The kind `name` refers to, if any.
pub(super) fn resolve(name: &str) -> Option<&'static BuiltinKind> {
    BUILTIN_KINDS.iter().find(|kind| kind.is_named(name.trim()))
}

/// A human list of the accepted names: `pods (pod, po), deployments.apps
/// (deployment, deploy), ...`.
pub(super) fn valid_names() -> String {
    BUILTIN_KINDS
        .iter()
        .map(|kind| {
            let mut aliases = vec![kind.singular];
            aliases.extend_from_slice(kind.short_names);
            format!("{} ({})", kind.canonical_name(), aliases.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_spellings_resolve() {
        for (name, kind) in [
            ("pods", "Pod"),
            ("pod", "Pod"),
            ("po", "Pod"),
            ("Pod", "Pod"),
            ("pods.v1", "Pod"),
            ("deployments.apps", "Deployment"),
            ("deployment.apps", "Deployment"),
            ("deploy", "Deployment"),
            ("deployments.v1.apps", "Deployment"),
            ("cm", "ConfigMap"),
            ("svc", "Service"),
            ("sa", "ServiceAccount"),
            ("ns", "Namespace"),
            ("no", "Node"),
            ("ev", "Event"),
            ("sts", "StatefulSet"),
            ("ds", "DaemonSet"),
            ("rs", "ReplicaSet"),
            ("jobs.batch", "Job"),
            ("cj", "CronJob"),
        ] {
            assert_eq!(resolve(name).map(|k| k.kind), Some(kind), "{name}");
        }
    }

    #[test]
    fn wrong_group_or_unknown_name_does_not_resolve() {
        for name in ["deployments.batch", "pods.apps", "widgets", "", "po.v2"] {
            assert_eq!(resolve(name), None, "{name}");
        }
    }
}
