//! The merge strategies of Kubernetes lists, as the strategic merge needs
//! them: which lists are merged element by element (and by which key), and
//! which are replaced whole.
//!
//! Kyverno merges with kustomize's kyaml, which reads the
//! `x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key` of the
//! built-in OpenAPI schema for the resource's kind, and replaces every list
//! that has no merge strategy (lists of custom resources included: it does
//! not infer keys). This table holds the merge-strategy lists of the pod
//! and workload types and of object metadata; any other field of a known
//! kind has no strategy, so its lists are replaced, as kyaml replaces them.

/// How a list field merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListMerge {
    /// Replaced whole by the patch's list.
    Replace,
    /// Elements paired by this key and merged; new ones appended.
    ByKey(&'static str),
    /// A list of scalars: the union, the resource's items first.
    Union,
}

/// The schema of an object type: its fields with a known type or list
/// strategy (others have neither).
#[derive(Debug)]
pub(crate) struct TypeSchema {
    fields: &'static [(&'static str, Field)],
}

#[derive(Debug, Clone, Copy)]
struct Field {
    list: ListMerge,
    ty: Option<&'static TypeSchema>,
}

const fn obj(ty: &'static TypeSchema) -> Field {
    Field {
        list: ListMerge::Replace,
        ty: Some(ty),
    }
}

const fn keyed(key: &'static str, ty: Option<&'static TypeSchema>) -> Field {
    Field {
        list: ListMerge::ByKey(key),
        ty,
    }
}

impl TypeSchema {
    /// The type of a field (`None`: unknown, its lists are replaced).
    pub(crate) fn field(&self, name: &str) -> Option<&'static TypeSchema> {
        self.lookup(name).and_then(|f| f.ty)
    }

    /// How a list field of this type merges.
    pub(crate) fn list_merge(&self, name: &str) -> ListMerge {
        self.lookup(name).map_or(ListMerge::Replace, |f| f.list)
    }

    fn lookup(&self, name: &str) -> Option<Field> {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| *f)
    }
}

static OBJECT_META: TypeSchema = TypeSchema {
    fields: &[
        (
            "finalizers",
            Field {
                list: ListMerge::Union,
                ty: None,
            },
        ),
        ("ownerReferences", keyed("uid", None)),
    ],
};

static CONTAINER: TypeSchema = TypeSchema {
    fields: &[
        ("env", keyed("name", None)),
        ("ports", keyed("containerPort", None)),
        ("volumeMounts", keyed("mountPath", None)),
        ("volumeDevices", keyed("devicePath", None)),
    ],
};

static POD_SPEC: TypeSchema = TypeSchema {
    fields: &[
        ("containers", keyed("name", Some(&CONTAINER))),
        ("initContainers", keyed("name", Some(&CONTAINER))),
        ("ephemeralContainers", keyed("name", Some(&CONTAINER))),
        ("volumes", keyed("name", None)),
        ("imagePullSecrets", keyed("name", None)),
        ("hostAliases", keyed("ip", None)),
        ("topologySpreadConstraints", keyed("topologyKey", None)),
        ("resourceClaims", keyed("name", None)),
        ("schedulingGates", keyed("name", None)),
    ],
};

static POD_TEMPLATE: TypeSchema = TypeSchema {
    fields: &[("metadata", obj(&OBJECT_META)), ("spec", obj(&POD_SPEC))],
};

static WORKLOAD_SPEC: TypeSchema = TypeSchema {
    fields: &[("template", obj(&POD_TEMPLATE))],
};

static JOB_TEMPLATE: TypeSchema = TypeSchema {
    fields: &[
        ("metadata", obj(&OBJECT_META)),
        ("spec", obj(&WORKLOAD_SPEC)),
    ],
};

static CRONJOB_SPEC: TypeSchema = TypeSchema {
    fields: &[("jobTemplate", obj(&JOB_TEMPLATE))],
};

static SERVICE_SPEC: TypeSchema = TypeSchema {
    fields: &[("ports", keyed("port", None))],
};

static POD: TypeSchema = TypeSchema {
    fields: &[("metadata", obj(&OBJECT_META)), ("spec", obj(&POD_SPEC))],
};

static WORKLOAD: TypeSchema = TypeSchema {
    fields: &[
        ("metadata", obj(&OBJECT_META)),
        ("spec", obj(&WORKLOAD_SPEC)),
    ],
};

static CRONJOB: TypeSchema = TypeSchema {
    fields: &[
        ("metadata", obj(&OBJECT_META)),
        ("spec", obj(&CRONJOB_SPEC)),
    ],
};

static SERVICE: TypeSchema = TypeSchema {
    fields: &[
        ("metadata", obj(&OBJECT_META)),
        ("spec", obj(&SERVICE_SPEC)),
    ],
};

static SERVICE_ACCOUNT: TypeSchema = TypeSchema {
    fields: &[
        ("metadata", obj(&OBJECT_META)),
        ("secrets", keyed("name", None)),
    ],
};

static POD_TEMPLATE_OBJECT: TypeSchema = TypeSchema {
    fields: &[
        ("metadata", obj(&OBJECT_META)),
        ("template", obj(&POD_TEMPLATE)),
    ],
};

static OTHER_BUILT_IN: TypeSchema = TypeSchema {
    fields: &[("metadata", obj(&OBJECT_META))],
};

/// The schema of a resource, from its `apiVersion` and `kind`; `None` for
/// kinds that are not built into Kubernetes (custom resources).
pub(crate) fn for_resource(api_version: &str, kind: &str) -> Option<&'static TypeSchema> {
    let group = match api_version.split_once('/') {
        Some((g, _)) => g,
        None => "",
    };
    let built_in = group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io");
    if !built_in {
        return None;
    }
    Some(match (group, kind) {
        ("", "Pod") => &POD,
        ("", "PodTemplate") => &POD_TEMPLATE_OBJECT,
        ("", "ReplicationController")
        | ("apps", "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet")
        | ("batch", "Job") => &WORKLOAD,
        ("batch", "CronJob") => &CRONJOB,
        ("", "Service") => &SERVICE,
        ("", "ServiceAccount") => &SERVICE_ACCOUNT,
        _ => &OTHER_BUILT_IN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let pod = for_resource("v1", "Pod").unwrap();
        let spec = pod.field("spec").unwrap();
        assert_eq!(spec.list_merge("containers"), ListMerge::ByKey("name"));
        assert_eq!(spec.list_merge("tolerations"), ListMerge::Replace);
        let c = spec.field("containers").unwrap();
        assert_eq!(c.list_merge("env"), ListMerge::ByKey("name"));
        assert_eq!(c.list_merge("envFrom"), ListMerge::Replace);
        let cron = for_resource("batch/v1", "CronJob").unwrap();
        let tmpl = cron
            .field("spec")
            .and_then(|s| s.field("jobTemplate"))
            .and_then(|j| j.field("spec"))
            .and_then(|s| s.field("template"))
            .and_then(|t| t.field("spec"))
            .unwrap();
        assert_eq!(tmpl.list_merge("volumes"), ListMerge::ByKey("name"));
        assert!(for_resource("external-secrets.io/v1beta1", "ExternalSecret").is_none());
        assert!(for_resource("v1", "Namespace").is_some());
    }
}
