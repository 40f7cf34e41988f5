//! kube-apiserver's Table column definitions for the built-in kinds the sandbox
//! serves (pkg/printers/internalversion/printers.go, read at Kubernetes 1.3x);
//! the cells are in `printers`.

use super::Column;

pub(crate) const NAME: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
pub(crate) const CREATION_TIMESTAMP: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

const CONTAINERS: &str = "Names of each container in the template.";
const IMAGES: &str = "Images referenced by each container in the template.";

/// `(name, type, priority, description)` of each column after Name (unless
/// the kind's Name column is elsewhere, as for events).
type Spec = (&'static str, &'static str, i64, &'static str);

pub(crate) fn name_column() -> Column {
    Column {
        name: "Name".into(),
        kind: "string",
        format: "name",
        description: NAME.into(),
        priority: 0,
    }
}

fn column(&(name, kind, priority, description): &Spec) -> Column {
    Column {
        name: name.into(),
        kind,
        format: if name == "Name" { "name" } else { "" },
        description: if description == "age" {
            CREATION_TIMESTAMP.into()
        } else {
            description.into()
        },
        priority,
    }
}

const AGE: Spec = ("Age", "string", 0, "age");

#[rustfmt::skip]
const POD: &[Spec] = &[
    (
        "Ready",
        "string",
        0,
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    (
        "Status",
        "string",
        0,
        "The aggregate status of the containers in this pod.",
    ),
    (
        "Restarts",
        "string",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    (
        "IP",
        "string",
        1,
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    (
        "Node",
        "string",
        1,
        "NodeName indicates in which node this pod is scheduled.",
    ),
    (
        "Nominated Node",
        "string",
        1,
        "nominatedNodeName is set only when this pod preempts other pods on the node.",
    ),
    (
        "Readiness Gates",
        "string",
        1,
        "If specified, all readiness gates will be evaluated for pod readiness.",
    ),
];
#[rustfmt::skip]
const DEPLOYMENT: &[Spec] = &[
    ("Ready", "string", 0, "Number of the pod with ready state"),
    (
        "Up-to-date",
        "string",
        0,
        "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
    ),
    (
        "Available",
        "string",
        0,
        "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    ("Containers", "string", 1, CONTAINERS),
    ("Images", "string", 1, IMAGES),
    ("Selector", "string", 1, "Label selector for pods."),
];
#[rustfmt::skip]
const REPLICA_SET: &[Spec] = &[
    (
        "Desired",
        "integer",
        0,
        "Replicas is the number of desired pods.",
    ),
    (
        "Current",
        "integer",
        0,
        "Replicas is the most recently observed number of non-terminating pods.",
    ),
    (
        "Ready",
        "integer",
        0,
        "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.",
    ),
    AGE,
    ("Containers", "string", 1, CONTAINERS),
    ("Images", "string", 1, IMAGES),
    (
        "Selector",
        "string",
        1,
        "Selector is a label query over pods that should match the replica count.",
    ),
];
#[rustfmt::skip]
const STATEFUL_SET: &[Spec] = &[
    ("Ready", "string", 0, "Number of the pod with ready state"),
    AGE,
    ("Containers", "string", 1, CONTAINERS),
    ("Images", "string", 1, IMAGES),
];
#[rustfmt::skip]
const DAEMON_SET: &[Spec] = &[
    (
        "Desired",
        "integer",
        0,
        "The total number of nodes that should be running the daemon pod.",
    ),
    (
        "Current",
        "integer",
        0,
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
    ),
    (
        "Ready",
        "integer",
        0,
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    ),
    (
        "Up-to-date",
        "integer",
        0,
        "The total number of nodes that are running updated daemon pod",
    ),
    (
        "Available",
        "integer",
        0,
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available.",
    ),
    (
        "Node Selector",
        "string",
        0,
        "NodeSelector is a selector which must be true for the pod to fit on a node.",
    ),
    AGE,
    ("Containers", "string", 1, CONTAINERS),
    ("Images", "string", 1, IMAGES),
    (
        "Selector",
        "string",
        1,
        "A label query over pods that are managed by the daemon set.",
    ),
];
#[rustfmt::skip]
const JOB: &[Spec] = &[
    ("Status", "string", 0, "Status of the job."),
    (
        "Completions",
        "string",
        0,
        "The number of pods which reached phase Succeeded.",
    ),
    (
        "Duration",
        "string",
        0,
        "Time required to complete the job.",
    ),
    AGE,
    ("Containers", "string", 1, CONTAINERS),
    ("Images", "string", 1, IMAGES),
    (
        "Selector",
        "string",
        1,
        "A label query over pods that should match the pod count.",
    ),
];
#[rustfmt::skip]
const CRON_JOB: &[Spec] = &[
    (
        "Schedule",
        "string",
        0,
        "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
    ),
    (
        "Timezone",
        "string",
        0,
        "The time zone name for the given schedule.",
    ),
    (
        "Suspend",
        "boolean",
        0,
        "This flag tells the controller to suspend subsequent executions.",
    ),
    (
        "Active",
        "integer",
        0,
        "A list of pointers to currently running jobs.",
    ),
    (
        "Last Schedule",
        "string",
        0,
        "Information when was the last time the job was successfully scheduled.",
    ),
    AGE,
    ("Containers", "string", 1, CONTAINERS),
    ("Images", "string", 1, IMAGES),
    (
        "Selector",
        "string",
        1,
        "A label query over pods that should match the pod count.",
    ),
];
#[rustfmt::skip]
const SERVICE: &[Spec] = &[
    (
        "Type",
        "string",
        0,
        "type determines how the Service is exposed.",
    ),
    (
        "Cluster-IP",
        "string",
        0,
        "clusterIP is the IP address of the service.",
    ),
    (
        "External-IP",
        "string",
        0,
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
    ),
    (
        "Port(s)",
        "string",
        0,
        "The list of ports that are exposed by this service.",
    ),
    AGE,
    (
        "Selector",
        "string",
        1,
        "Route service traffic to pods with label keys and values matching this selector.",
    ),
];
#[rustfmt::skip]
const NODE: &[Spec] = &[
    ("Status", "string", 0, "The status of the node"),
    ("Roles", "string", 0, "The roles of the node"),
    AGE,
    (
        "Version",
        "string",
        0,
        "Kubelet Version reported by the node.",
    ),
    (
        "Internal-IP",
        "string",
        1,
        "List of addresses reachable to the node.",
    ),
    (
        "External-IP",
        "string",
        1,
        "List of addresses reachable to the node.",
    ),
    (
        "OS-Image",
        "string",
        1,
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    (
        "Kernel-Version",
        "string",
        1,
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    (
        "Container-Runtime",
        "string",
        1,
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];
#[rustfmt::skip]
const EVENT: &[Spec] = &[
    (
        "Last Seen",
        "string",
        0,
        "The time at which the most recent occurrence of this event was recorded.",
    ),
    (
        "Type",
        "string",
        0,
        "Type of this event (Normal, Warning), new types could be added in the future",
    ),
    (
        "Reason",
        "string",
        0,
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    (
        "Object",
        "string",
        0,
        "The object that this event is about.",
    ),
    (
        "Subobject",
        "string",
        1,
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
    ),
    (
        "Source",
        "string",
        1,
        "The component reporting this event. Should be a short machine understandable string.",
    ),
    (
        "Message",
        "string",
        0,
        "A human-readable description of the status of this operation.",
    ),
    (
        "First Seen",
        "string",
        1,
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    ),
    (
        "Count",
        "string",
        1,
        "The number of times this event has occurred.",
    ),
    ("Name", "string", 1, NAME),
];
#[rustfmt::skip]
const NAMESPACE: &[Spec] = &[("Status", "string", 0, "The status of the namespace"), AGE];
#[rustfmt::skip]
const SECRET: &[Spec] = &[
    (
        "Type",
        "string",
        0,
        "Used to facilitate programmatic handling of secret data.",
    ),
    ("Data", "string", 0, "Data contains the secret data."),
    AGE,
];
#[rustfmt::skip]
const CONFIG_MAP: &[Spec] = &[
    ("Data", "string", 0, "Data contains the configuration data."),
    AGE,
];
#[rustfmt::skip]
const SERVICE_ACCOUNT: &[Spec] = &[
    (
        "Secrets",
        "string",
        0,
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
    ),
    AGE,
];
#[rustfmt::skip]
const LEASE: &[Spec] = &[
    (
        "Holder",
        "string",
        0,
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];
#[rustfmt::skip]
const WEBHOOK_CONFIGURATION: &[Spec] = &[
    ("Webhooks", "integer", 0, "Webhooks indicates the number of webhooks."),
    AGE,
];
#[rustfmt::skip]
const ROLE_BINDING: &[Spec] = &[
    ("Role", "string", 0, "RoleRef is the reference to the role that the binding applies to."),
    AGE,
    ("Users", "string", 1, "Users in the binding."),
    ("Groups", "string", 1, "Groups in the binding."),
    ("ServiceAccounts", "string", 1, "ServiceAccounts in the binding."),
];
/// The default table convertor's (CRDs and kinds without a printer).
#[rustfmt::skip]
const DEFAULT: &[Spec] = &[("Created At", "date", 0, "age")];

fn specs(group: &str, kind: &str) -> &'static [Spec] {
    match (group, kind) {
        ("", "Pod") => POD,
        ("", "Service") => SERVICE,
        ("", "Node") => NODE,
        ("", "Event") | ("events.k8s.io", "Event") => EVENT,
        ("", "Namespace") => NAMESPACE,
        ("", "Secret") => SECRET,
        ("", "ConfigMap") => CONFIG_MAP,
        ("", "ServiceAccount") => SERVICE_ACCOUNT,
        ("apps", "Deployment") => DEPLOYMENT,
        ("apps", "ReplicaSet") => REPLICA_SET,
        ("apps", "StatefulSet") => STATEFUL_SET,
        ("apps", "DaemonSet") => DAEMON_SET,
        ("batch", "Job") => JOB,
        ("batch", "CronJob") => CRON_JOB,
        ("coordination.k8s.io", "Lease") => LEASE,
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")
        | ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => WEBHOOK_CONFIGURATION,
        ("rbac.authorization.k8s.io", "RoleBinding")
        | ("rbac.authorization.k8s.io", "ClusterRoleBinding") => ROLE_BINDING,
        _ => DEFAULT,
    }
}

/// The columns kube-apiserver prints for a built-in kind.
pub(crate) fn columns(group: &str, kind: &str) -> Vec<Column> {
    let specs = specs(group, kind);
    let mut columns = Vec::with_capacity(specs.len() + 1);
    if specs != EVENT {
        columns.push(name_column());
    }
    columns.extend(specs.iter().map(column));
    columns
}
