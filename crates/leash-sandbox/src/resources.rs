//! The kinds the sandbox serves: built-in types and the ones CRDs register.

use std::sync::Arc;

use serde_json::Value;

use crate::status::ApiError;

/// Verbs of every served resource (all are implemented).
pub(crate) const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One served resource in one group version.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResourceType {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) list_kind: String,
    pub(crate) namespaced: bool,
    pub(crate) short_names: Vec<String>,
    pub(crate) categories: Vec<String>,
    /// Served subresources (`status`).
    pub(crate) subresources: Vec<String>,
    /// Field paths usable in a fieldSelector besides metadata.name and metadata.namespace.
    pub(crate) fields: &'static [&'static str],
    /// The CRD that registered it, if any.
    pub(crate) crd: Option<String>,
    /// A CRD version's `additionalPrinterColumns` (empty for built-in kinds,
    /// whose Table columns are kube-apiserver's, in `table::printers`).
    pub(crate) printer_columns: Vec<PrinterColumn>,
    /// A CRD version's `openAPIV3Schema`: its objects are defaulted, pruned
    /// and validated against it ([`crate::schema`]).
    pub(crate) schema: Option<std::sync::Arc<Value>>,
}

/// One of a CRD version's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PrinterColumn {
    pub(crate) name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub(crate) kind: String,
    pub(crate) format: String,
    pub(crate) description: String,
    pub(crate) priority: i64,
    pub(crate) json_path: String,
}

/// Identifies a collection of objects: `plural` or `plural.group`. All served versions of a
/// kind share it.
pub(crate) type CollectionKey = Arc<str>;

impl ResourceType {
    /// `v1` or `group/version`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The collection this resource's objects live in.
    pub(crate) fn collection(&self) -> CollectionKey {
        Arc::from(crate::status::qualified(&self.group, &self.plural))
    }

    pub(crate) fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }

    /// Whether it serves the `scale` subresource (`autoscaling/v1` `Scale`).
    pub(crate) fn has_scale(&self) -> bool {
        self.subresources.iter().any(|s| s == "scale")
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

/// A built-in resource, as a row of [`BUILTINS`]: group, plural, kind,
/// namespaced, short names, in the category `all`, has a `status`
/// subresource, extra field-selector paths. Every one is version `v1`.
type BuiltinRow = (
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    bool,
    &'static [&'static str],
);

/// The built-in resources, in discovery order (columns as [`BuiltinRow`]).
#[rustfmt::skip]
const BUILTINS: &[BuiltinRow] = &[
    // group, plural, kind, namespaced, short names, in `all`, status, field selectors
    ("", "configmaps", "ConfigMap", true, &["cm"], false, false, &[]),
    ("", "events", "Event", true, &["ev"], false, false, EVENT_FIELDS),
    ("", "limitranges", "LimitRange", true, &["limits"], false, false, &[]),
    ("", "namespaces", "Namespace", false, &["ns"], false, true, &["status.phase"]),
    ("", "nodes", "Node", false, &["no"], false, true, &["spec.unschedulable"]),
    ("", "persistentvolumeclaims", "PersistentVolumeClaim", true, &["pvc"], false, true, &[]),
    ("", "persistentvolumes", "PersistentVolume", false, &["pv"], false, true, &[]),
    ("", "pods", "Pod", true, &["po"], true, true, POD_FIELDS),
    ("", "replicationcontrollers", "ReplicationController", true, &["rc"], true, true, &[]),
    ("", "resourcequotas", "ResourceQuota", true, &["quota"], false, true, &[]),
    ("", "secrets", "Secret", true, &[], false, false, &["type"]),
    ("", "serviceaccounts", "ServiceAccount", true, &["sa"], false, false, &[]),
    ("", "services", "Service", true, &["svc"], true, true, &[]),
    ("apps", "daemonsets", "DaemonSet", true, &["ds"], true, true, &[]),
    ("apps", "deployments", "Deployment", true, &["deploy"], true, true, &[]),
    ("apps", "replicasets", "ReplicaSet", true, &["rs"], true, true, &[]),
    ("apps", "statefulsets", "StatefulSet", true, &["sts"], true, true, &[]),
    ("batch", "cronjobs", "CronJob", true, &["cj"], true, true, &[]),
    ("batch", "jobs", "Job", true, &[], true, true, &[]),
    ("coordination.k8s.io", "leases", "Lease", true, &[], false, false, &[]),
    ("networking.k8s.io", "ingressclasses", "IngressClass", false, &[], false, false, &[]),
    ("networking.k8s.io", "ingresses", "Ingress", true, &["ing"], false, true, &[]),
    ("networking.k8s.io", "networkpolicies", "NetworkPolicy", true, &["netpol"], false, false, &[]),
    ("policy", "poddisruptionbudgets", "PodDisruptionBudget", true, &["pdb"], false, true, &[]),
    ("scheduling.k8s.io", "priorityclasses", "PriorityClass", false, &["pc"], false, false, &[]),
    ("storage.k8s.io", "storageclasses", "StorageClass", false, &["sc"], false, false, &[]),
    ("node.k8s.io", "runtimeclasses", "RuntimeClass", false, &[], false, false, &[]),
    ("apiextensions.k8s.io", "customresourcedefinitions", "CustomResourceDefinition", false, &["crd", "crds"], false, true, &[]),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", false, &[], false, false, &[]),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", false, &[], false, false, &[]),
    ("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", false, &[], false, false, &[]),
    ("rbac.authorization.k8s.io", "clusterroles", "ClusterRole", false, &[], false, false, &[]),
    ("rbac.authorization.k8s.io", "rolebindings", "RoleBinding", true, &[], false, false, &[]),
    ("rbac.authorization.k8s.io", "roles", "Role", true, &[], false, false, &[]),
];

/// The built-in kinds with a `scale` subresource.
fn scaled(group: &str, plural: &str) -> bool {
    group == "apps" && matches!(plural, "deployments" | "replicasets" | "statefulsets")
}

/// The built-in resources, in discovery order.
pub(crate) fn builtins() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(
            |&(group, plural, kind, namespaced, short, all, status, fields)| ResourceType {
                group: group.into(),
                version: "v1".into(),
                plural: plural.into(),
                singular: kind.to_lowercase(),
                kind: kind.into(),
                list_kind: format!("{kind}List"),
                namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                categories: if all { vec!["all".into()] } else { Vec::new() },
                subresources: [
                    status.then_some("status"),
                    scaled(group, plural).then_some("scale"),
                ]
                .into_iter()
                .flatten()
                .map(str::to_string)
                .collect(),
                fields,
                crd: None,
                printer_columns: Vec::new(),
                schema: None,
            },
        )
        .collect()
}

/// The resource types a CRD object defines (one per served version), validated.
pub(crate) fn from_crd(crd: &Value) -> Result<Vec<ResourceType>, ApiError> {
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let invalid = |msg: &str| ApiError::invalid("CustomResourceDefinition", name, msg.to_string());
    let spec = crd
        .get("spec")
        .ok_or_else(|| invalid("spec: Required value"))?;
    let s = |p: &str| {
        spec.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let group = s("/group");
    let plural = s("/names/plural");
    let kind = s("/names/kind");
    if group.is_empty() || !group.contains('.') {
        return Err(invalid(
            "spec.group: Invalid value: should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() || !is_dns_label(&plural) {
        return Err(invalid(
            "spec.names.plural: Invalid value: must be a lowercase DNS label",
        ));
    }
    if kind.is_empty() {
        return Err(invalid("spec.names.kind: Required value"));
    }
    if name != format!("{plural}.{group}") {
        return Err(invalid(
            "metadata.name: Invalid value: must be spec.names.plural+\".\"+spec.group",
        ));
    }
    let singular = match s("/names/singular") {
        x if x.is_empty() => kind.to_lowercase(),
        x => x,
    };
    let list_kind = match s("/names/listKind") {
        x if x.is_empty() => format!("{kind}List"),
        x => x,
    };
    let namespaced = match s("/scope").as_str() {
        "Namespaced" => true,
        "Cluster" => false,
        _ => {
            return Err(invalid(
                "spec.scope: Unsupported value: supported values: \"Cluster\", \"Namespaced\"",
            ));
        }
    };
    let strings = |p: &str| -> Vec<String> {
        spec.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = strings("/names/shortNames");
    let categories = strings("/names/categories");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("spec.versions: Invalid value: must have exactly one version marked as storage version"))?;
    let mut out = Vec::new();
    for v in versions {
        let vname = v.get("name").and_then(Value::as_str).unwrap_or_default();
        if vname.is_empty() || !is_dns_label(vname) {
            return Err(invalid(
                "spec.versions[].name: Invalid value: must be a DNS label",
            ));
        }
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let mut subresources = Vec::new();
        if v.pointer("/subresources/status").is_some() {
            subresources.push("status".to_string());
        }
        let printer_columns = printer_columns(v).map_err(|m| invalid(&m))?;
        out.push(ResourceType {
            group: group.clone(),
            version: vname.to_string(),
            plural: plural.clone(),
            singular: singular.clone(),
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            subresources,
            fields: &[],
            crd: Some(name.to_string()),
            printer_columns,
            schema: v
                .pointer("/schema/openAPIV3Schema")
                .filter(|s| s.is_object())
                .cloned()
                .map(std::sync::Arc::new),
        });
    }
    Ok(out)
}

/// A CRD version's `additionalPrinterColumns`, validated as the API server does
/// (name, type and a JSONPath the Table printer can evaluate).
fn printer_columns(version: &Value) -> Result<Vec<PrinterColumn>, String> {
    let Some(columns) = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
    else {
        return Ok(Vec::new());
    };
    columns
        .iter()
        .map(|c| {
            let s = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let column = PrinterColumn {
                name: s("name"),
                kind: s("type"),
                format: s("format"),
                description: s("description"),
                priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                json_path: s("jsonPath"),
            };
            if column.name.is_empty() {
                return Err(
                    "spec.versions[].additionalPrinterColumns[].name: Required value".into(),
                );
            }
            if !["string", "integer", "number", "boolean", "date"].contains(&column.kind.as_str()) {
                return Err(format!(
                    "spec.versions[].additionalPrinterColumns[].type: Unsupported value: {:?}",
                    column.kind
                ));
            }
            crate::table::JsonPath::parse(&column.json_path).map_err(|e| {
                format!("spec.versions[].additionalPrinterColumns[].JSONPath: Invalid value: {e}")
            })?;
            Ok(column)
        })
        .collect()
}

/// A lowercase RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A lowercase RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Every served resource type, indexed for the lookups requests need. Immutable once
/// shared: registering a CRD changes a clone (persistent maps: the clone is O(1) and
/// each change O(log n), so hundreds of CRDs stay cheap).
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    /// `(group, version, plural)` → type.
    by_path: imbl::OrdMap<(String, String, String), Arc<ResourceType>>,
    /// `(group, version, kind)` → type.
    by_kind: imbl::OrdMap<(String, String, String), Arc<ResourceType>>,
}

impl Registry {
    pub(crate) fn with_builtins() -> Self {
        let mut r = Self::default();
        for t in builtins() {
            r.insert(t);
        }
        r
    }

    pub(crate) fn insert(&mut self, t: ResourceType) {
        let t = Arc::new(t);
        self.by_kind.insert(
            (t.group.clone(), t.version.clone(), t.kind.clone()),
            t.clone(),
        );
        self.by_path
            .insert((t.group.clone(), t.version.clone(), t.plural.clone()), t);
    }

    /// Removes every version registered by `crd`.
    pub(crate) fn remove_crd(&mut self, crd: &str) {
        let gone: Vec<Arc<ResourceType>> = self
            .by_path
            .values()
            .filter(|t| t.crd.as_deref() == Some(crd))
            .cloned()
            .collect();
        for t in gone {
            self.by_path
                .remove(&(t.group.clone(), t.version.clone(), t.plural.clone()));
            self.by_kind
                .remove(&(t.group.clone(), t.version.clone(), t.kind.clone()));
        }
    }

    /// True if a type not registered by `crd` already serves `(group, plural)` or `(group, kind)`.
    pub(crate) fn taken(&self, group: &str, plural: &str, kind: &str, crd: &str) -> bool {
        self.by_path
            .range((group.to_string(), String::new(), String::new())..)
            .take_while(|((g, _, _), _)| g == group)
            .any(|(_, t)| (t.plural == plural || t.kind == kind) && t.crd.as_deref() != Some(crd))
    }

    pub(crate) fn by_path(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<Arc<ResourceType>> {
        self.by_path
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// The type for an object's `apiVersion` and `kind`.
    pub(crate) fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        self.by_kind
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .cloned()
    }

    /// All types, ordered by group, version, plural.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.by_path.values()
    }

    /// Whether `group/version` is served at all.
    pub(crate) fn serves(&self, group: &str, version: &str) -> bool {
        self.by_path
            .range((group.to_string(), version.to_string(), String::new())..)
            .next()
            .is_some_and(|((g, v, _), _)| g == group && v == version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn crd_versions_become_types() {
        let crd = json!({"metadata": {"name": "widgets.example.leash.dev"}, "spec": {
            "group": "example.leash.dev", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wg"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                         {"name": "v2", "served": false, "storage": false}]}});
        let types = from_crd(&crd).unwrap();
        assert_eq!(types.len(), 1);
        assert_eq!(types[0].singular, "widget");
        assert_eq!(types[0].list_kind, "WidgetList");
        assert_eq!(types[0].short_names, vec!["wg"]);
        assert!(types[0].has_status());
    }

    #[test]
    fn crd_name_must_match() {
        let crd = json!({"metadata": {"name": "x.example.leash.dev"}, "spec": {
            "group": "example.leash.dev", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        assert_eq!(from_crd(&crd).unwrap_err().code(), 422);
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("A"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_label("-a"));
    }
}
