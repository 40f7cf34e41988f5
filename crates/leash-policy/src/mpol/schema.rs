//! The part of the Kubernetes schema structured merge needs: for each field,
//! whether its list is atomic, a set, or a map keyed by some fields
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`), and whether a
//! struct is atomic (`x-kubernetes-map-type: atomic`).
//!
//! The table covers the built-in workload kinds mutating policies target
//! (Pod and the pod controllers, Service) and `metadata` of every kind, as
//! Kubernetes' generated OpenAPI declares them. Anything not in the table
//! is merged as structured merge treats a schema-less ("deduced") value:
//! maps field by field, lists and scalars replaced whole.

/// How a value merges.
#[derive(Debug)]
pub(crate) enum Shape {
    /// A struct or map merged field by field; the listed fields have their
    /// own shape, others are [`Shape::Deduced`].
    Fields(&'static [(&'static str, &'static Shape)]),
    /// Replaced whole (an atomic list or struct).
    Atomic,
    /// A list of scalars merged as a set.
    Set,
    /// A list of objects merged by the key fields; `defaults` gives a key
    /// field's value when an item leaves it out.
    ListMap {
        keys: &'static [&'static str],
        defaults: &'static [(&'static str, &'static str)],
        item: &'static Shape,
    },
    /// No schema: maps merge field by field, anything else is replaced.
    Deduced,
}

impl Shape {
    /// The shape of field `name` of a value of this shape.
    pub(crate) fn field(&self, name: &str) -> &'static Shape {
        match self {
            Shape::Fields(fields) => fields
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(&DEDUCED, |(_, s)| *s),
            _ => &DEDUCED,
        }
    }
}

static DEDUCED: Shape = Shape::Deduced;
static ATOMIC: Shape = Shape::Atomic;
static SET: Shape = Shape::Set;

const fn by(keys: &'static [&'static str], item: &'static Shape) -> Shape {
    Shape::ListMap {
        keys,
        defaults: &[],
        item,
    }
}

static BY_NAME: Shape = by(&["name"], &DEDUCED);

static OBJECT_META: Shape = Shape::Fields(&[
    ("finalizers", &SET),
    ("ownerReferences", &OWNER_REFERENCES),
    ("managedFields", &ATOMIC),
]);
static OWNER_REFERENCES: Shape = by(&["uid"], &DEDUCED);

/// `metav1.LabelSelector` is `+structType=atomic`.
static LABEL_SELECTOR: Shape = Shape::Atomic;

static RESOURCES: Shape = Shape::Fields(&[("claims", &BY_NAME)]);

static CONTAINER: Shape = Shape::Fields(&[
    ("env", &BY_NAME),
    ("ports", &CONTAINER_PORTS),
    ("volumeMounts", &VOLUME_MOUNTS),
    ("volumeDevices", &VOLUME_DEVICES),
    ("resources", &RESOURCES),
]);
static CONTAINERS: Shape = by(&["name"], &CONTAINER);
static CONTAINER_PORTS: Shape = Shape::ListMap {
    keys: &["containerPort", "protocol"],
    defaults: &[("protocol", "TCP")],
    item: &DEDUCED,
};
static VOLUME_MOUNTS: Shape = by(&["mountPath"], &DEDUCED);
static VOLUME_DEVICES: Shape = by(&["devicePath"], &DEDUCED);

static POD_SPEC: Shape = Shape::Fields(&[
    ("containers", &CONTAINERS),
    ("initContainers", &CONTAINERS),
    ("ephemeralContainers", &CONTAINERS),
    ("volumes", &BY_NAME),
    ("imagePullSecrets", &BY_NAME),
    ("hostAliases", &HOST_ALIASES),
    ("topologySpreadConstraints", &TOPOLOGY_SPREAD),
    ("resourceClaims", &BY_NAME),
    ("schedulingGates", &BY_NAME),
]);
static HOST_ALIASES: Shape = by(&["ip"], &DEDUCED);
static TOPOLOGY_SPREAD: Shape = by(&["topologyKey", "whenUnsatisfiable"], &DEDUCED);

static POD_TEMPLATE: Shape = Shape::Fields(&[("metadata", &OBJECT_META), ("spec", &POD_SPEC)]);

static WORKLOAD_SPEC: Shape =
    Shape::Fields(&[("template", &POD_TEMPLATE), ("selector", &LABEL_SELECTOR)]);

static POD: Shape = Shape::Fields(&[("metadata", &OBJECT_META), ("spec", &POD_SPEC)]);
static WORKLOAD: Shape = Shape::Fields(&[("metadata", &OBJECT_META), ("spec", &WORKLOAD_SPEC)]);
static CRONJOB: Shape = Shape::Fields(&[("metadata", &OBJECT_META), ("spec", &CRONJOB_SPEC)]);
static CRONJOB_SPEC: Shape = Shape::Fields(&[("jobTemplate", &JOB_TEMPLATE)]);
static JOB_TEMPLATE: Shape = Shape::Fields(&[("metadata", &OBJECT_META), ("spec", &WORKLOAD_SPEC)]);
static SERVICE: Shape = Shape::Fields(&[("metadata", &OBJECT_META), ("spec", &SERVICE_SPEC)]);
static SERVICE_SPEC: Shape = Shape::Fields(&[("ports", &SERVICE_PORTS)]);
static SERVICE_PORTS: Shape = Shape::ListMap {
    keys: &["port", "protocol"],
    defaults: &[("protocol", "TCP")],
    item: &DEDUCED,
};
static OTHER: Shape = Shape::Fields(&[("metadata", &OBJECT_META)]);

/// The shape of a whole object of `api_version`/`kind`.
pub(crate) fn for_kind(api_version: &str, kind: &str) -> &'static Shape {
    let (group, _) = crate::kinds::split_api_version(api_version);
    match (group, kind) {
        ("", "Pod") => &POD,
        ("", "PodTemplate") => &POD_TEMPLATE_OBJECT,
        ("", "ReplicationController")
        | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job") => &WORKLOAD,
        ("batch", "CronJob") => &CRONJOB,
        ("", "Service") => &SERVICE,
        _ => &OTHER,
    }
}

static POD_TEMPLATE_OBJECT: Shape =
    Shape::Fields(&[("metadata", &OBJECT_META), ("template", &POD_TEMPLATE)]);
