//! The built-in Kubernetes kinds the engine knows without discovery: group,
//! version, plural and scope. Used to match `resources: [pods]` rules
//! (ValidatingPolicy) against objects that carry only `apiVersion`/`kind`,
//! and by the CLI to turn policy kinds into resources to load.

/// One built-in kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindInfo {
    /// API group ("" for core).
    pub group: &'static str,
    /// Preferred version.
    pub version: &'static str,
    /// Kind (`Pod`).
    pub kind: &'static str,
    /// Resource plural (`pods`).
    pub plural: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

macro_rules! kinds {
    ($(($g:expr, $v:expr, $k:expr, $p:expr, $n:expr)),* $(,)?) => {
        &[$(KindInfo { group: $g, version: $v, kind: $k, plural: $p, namespaced: $n }),*]
    };
}

/// Built-in kinds, by group.
pub static BUILTIN_KINDS: &[KindInfo] = kinds![
    ("", "v1", "Pod", "pods", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Node", "nodes", false),
    ("", "v1", "PersistentVolume", "persistentvolumes", false),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        true
    ),
    (
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        true
    ),
    ("", "v1", "Endpoints", "endpoints", true),
    ("", "v1", "Event", "events", true),
    ("", "v1", "LimitRange", "limitranges", true),
    ("", "v1", "ResourceQuota", "resourcequotas", true),
    ("", "v1", "PodTemplate", "podtemplates", true),
    ("", "v1", "Binding", "bindings", true),
    ("apps", "v1", "Deployment", "deployments", true),
    ("apps", "v1", "StatefulSet", "statefulsets", true),
    ("apps", "v1", "DaemonSet", "daemonsets", true),
    ("apps", "v1", "ReplicaSet", "replicasets", true),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        true
    ),
    ("batch", "v1", "Job", "jobs", true),
    ("batch", "v1", "CronJob", "cronjobs", true),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true
    ),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", true),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        false
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        true
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false
    ),
    ("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        "volumeattachments",
        false
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        false
    ),
    ("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", false),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false
    ),
    ("coordination.k8s.io", "v1", "Lease", "leases", true),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        true
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false
    ),
];

/// The built-in kind named `kind` (case-sensitive, as `kind` fields are).
pub fn by_kind(kind: &str) -> Option<&'static KindInfo> {
    BUILTIN_KINDS.iter().find(|k| k.kind == kind)
}

/// The built-in kind of a group and a resource plural.
pub fn by_resource(group: &str, plural: &str) -> Option<&'static KindInfo> {
    BUILTIN_KINDS
        .iter()
        .find(|k| k.group == group && k.plural == plural)
}

/// The resource plural of a kind: the built-in one, or Kubernetes' default
/// guess (lower case, `s`, `es` after s/x/ch/sh, `ies` after a consonant + y)
/// for custom kinds.
pub fn plural_of(kind: &str) -> String {
    if let Some(k) = by_kind(kind) {
        return k.plural.to_string();
    }
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y') {
        if stem.ends_with(['a', 'e', 'i', 'o', 'u']) {
            format!("{lower}s")
        } else {
            format!("{stem}ies")
        }
    } else {
        format!("{lower}s")
    }
}

/// Splits an `apiVersion` into group and version (`apps/v1` → `("apps", "v1")`,
/// `v1` → `("", "v1")`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals() {
        for (kind, plural) in [
            ("Pod", "pods"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("Gateway", "gateways"),
            ("Policy", "policies"),
            ("Endpoints", "endpoints"),
            ("Proxy", "proxies"),
            ("Mesh", "meshes"),
        ] {
            assert_eq!(plural_of(kind), plural, "{kind}");
        }
    }
}
