//! A resource kind as discovery describes it.

/// One listable resource of the cluster (a group, version and resource),
/// as the loader resolved it through discovery. Shared as `Arc<ResolvedKind>`
/// by every object loaded for it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedKind {
    /// API group (`""` for the core group).
    pub group: String,
    /// The version it is read at: the group's preferred version, or the first
    /// other one that serves it, or the version a KIND argument named.
    pub version: String,
    /// `Pod`, `Deployment`.
    pub kind: String,
    /// Plural resource name used in URLs (`pods`).
    pub plural: String,
    /// Singular resource name (`pod`); discovery may leave it empty, then
    /// the lower-cased kind stands in (as kubectl does).
    pub singular: String,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// Verbs the resource supports.
    pub verbs: Vec<String>,
    /// Short names (`po`, `deploy`).
    pub short_names: Vec<String>,
}

impl ResolvedKind {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// kubectl's fully qualified resource name: `pods`, `deployments.apps`.
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The prefix kubectl's `-o name` prints: `pod`, `deployment.apps`.
    pub fn name_prefix(&self) -> String {
        let kind = self.kind.to_lowercase();
        if self.group.is_empty() {
            kind
        } else {
            format!("{kind}.{}", self.group)
        }
    }

    /// True if the resource supports `list`.
    pub fn is_listable(&self) -> bool {
        self.verbs.iter().any(|v| v == "list")
    }

    /// True for `events` (core) and `events.events.k8s.io`, which `--all`
    /// skips unless asked.
    pub fn is_event(&self) -> bool {
        self.plural == "events" && (self.group.is_empty() || self.group == "events.k8s.io")
    }

    /// The list URL path: `/api/v1/pods`, `/apis/apps/v1/namespaces/ns/deployments`.
    /// `namespace` is ignored for cluster-scoped kinds.
    pub fn list_path(&self, namespace: Option<&str>) -> String {
        let prefix = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        match namespace {
            Some(ns) if self.namespaced => format!("{prefix}/namespaces/{ns}/{}", self.plural),
            _ => format!("{prefix}/{}", self.plural),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn kind(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
    ) -> ResolvedKind {
        ResolvedKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            verbs: vec!["get".into(), "list".into(), "watch".into()],
            short_names: vec![],
        }
    }

    #[test]
    fn names_and_paths() {
        let pod = kind("", "v1", "Pod", "pods", true);
        assert_eq!(pod.api_version(), "v1");
        assert_eq!(pod.qualified_name(), "pods");
        assert_eq!(pod.name_prefix(), "pod");
        assert_eq!(pod.list_path(None), "/api/v1/pods");
        assert_eq!(
            pod.list_path(Some("kube-system")),
            "/api/v1/namespaces/kube-system/pods"
        );

        let deploy = kind("apps", "v1", "Deployment", "deployments", true);
        assert_eq!(deploy.api_version(), "apps/v1");
        assert_eq!(deploy.qualified_name(), "deployments.apps");
        assert_eq!(deploy.name_prefix(), "deployment.apps");
        assert_eq!(
            deploy.list_path(Some("a")),
            "/apis/apps/v1/namespaces/a/deployments"
        );

        let ns = kind("", "v1", "Namespace", "namespaces", false);
        assert_eq!(ns.list_path(Some("ignored")), "/api/v1/namespaces");
    }

    #[test]
    fn events_are_recognised() {
        assert!(kind("", "v1", "Event", "events", true).is_event());
        assert!(kind("events.k8s.io", "v1", "Event", "events", true).is_event());
        assert!(!kind("example.com", "v1", "Event", "events", true).is_event());
    }
}
