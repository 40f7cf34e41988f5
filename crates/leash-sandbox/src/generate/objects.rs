//! Generated configuration, networking, cluster and event objects:
//! ConfigMap, Secret, Service, ServiceAccount, Event, Node, Namespace.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::Context;
use super::entropy::{CORE_APPS, below, hex, image_digest, pick, suffix, timestamp, uid_for};

const EVENT_REASONS: &[(&str, &str, &str)] = &[
    (
        "Normal",
        "Scheduled",
        "Successfully assigned {ns}/{pod} to {node}",
    ),
    (
        "Normal",
        "Pulled",
        "Container image \"{image}\" already present on machine",
    ),
    ("Normal", "Created", "Created container: {app}"),
    ("Normal", "Started", "Started container {app}"),
    (
        "Warning",
        "Unhealthy",
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
    ),
    (
        "Warning",
        "BackOff",
        "Back-off restarting failed container {app} in pod {pod}",
    ),
];

/// A ConfigMap holding an application config file and a few flags.
pub(super) fn configmap(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("configmaps", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, CORE_APPS);
    let name = format!("{app}-config-{}", ctx.token("configmaps", index));
    let port = 8000 + rng.u32(..1000);
    let config = format!(
        "server:\n  port: {port}\n  readTimeout: 30s\n  writeTimeout: 30s\nlogging:\n  level: info\n  format: json\n\
         database:\n  host: {app}-db.{namespace}.svc.cluster.local\n  port: 5432\n  pool:\n    maxOpen: {}\n    maxIdle: 5\n\
         features:\n  newCheckout: {}\n  recommendations: {}\n",
        10 + rng.u32(..40),
        rng.bool(),
        rng.bool()
    );
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "helm" },
            "annotations": {
                "meta.helm.sh/release-name": format!("{app}-prod"),
                "meta.helm.sh/release-namespace": namespace,
            },
        },
        "data": {
            "config.yaml": config,
            "LOG_FORMAT": "json",
            "CACHE_TTL": format!("{}s", 30 * (1 + rng.u32(..10))),
            "FEATURE_FLAGS": "checkout-v2,search-suggest",
        },
    })
}

/// A Secret: Opaque credentials or a TLS pair (random bytes, base64).
pub(super) fn secret(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("secrets", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, CORE_APPS);
    let token = ctx.token("secrets", index);
    let mut random = |len: usize| {
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes);
        BASE64.encode(bytes)
    };
    let (name, kind, data) = if index.is_multiple_of(3) {
        (
            format!("{app}-tls-{token}"),
            "kubernetes.io/tls",
            json!({ "tls.crt": random(900), "tls.key": random(600) }),
        )
    } else {
        (
            format!("{app}-db-{token}"),
            "Opaque",
            json!({
                "username": BASE64.encode(app),
                "password": random(24),
                "url": BASE64.encode(format!("postgres://{app}@{app}-db.{namespace}:5432/{app}")),
            }),
        )
    };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/name": app },
        },
        "type": kind,
        "data": data,
    })
}

/// A ClusterIP Service selecting an app's pods.
pub(super) fn service(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("services", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, CORE_APPS);
    let name = format!("{app}-{}", ctx.token("services", index));
    // Bijective in the index, so no two services share a cluster IP.
    let ip = format!("10.96.{}.{}", (index / 250) % 256, 1 + index % 250);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "helm" },
        },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": ip,
            "clusterIPs": [ip],
            "ports": [
                { "name": "http", "port": 80, "targetPort": "http", "protocol": "TCP" },
                { "name": "metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP" },
            ],
            "selector": { "app": app },
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
        },
        "status": { "loadBalancer": {} },
    })
}

/// A ServiceAccount.
pub(super) fn serviceaccount(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("serviceaccounts", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, CORE_APPS);
    let name = format!("{app}-{}", ctx.token("serviceaccounts", index));
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/name": app },
            "annotations": {
                "eks.amazonaws.com/role-arn": format!("arn:aws:iam::{}:role/{app}", 100_000_000_000 + rng.u64(..900_000_000_000)),
            },
        },
        "automountServiceAccountToken": rng.bool(),
    })
}

/// A core/v1 Event about a pod.
pub(super) fn event(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("events", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, CORE_APPS);
    let pod = format!("{app}-{}-{}", suffix(&mut rng, 10), suffix(&mut rng, 5));
    let node = ctx.node_name(below(&mut rng, ctx.node_pool()));
    let (kind, reason, template) = EVENT_REASONS[below(&mut rng, EVENT_REASONS.len())];
    let message = template
        .replace("{ns}", namespace)
        .replace("{pod}", &pod)
        .replace("{node}", &node)
        .replace("{app}", app)
        .replace("{image}", &format!("ghcr.io/acme/{app}:2.14.0"));
    // Real event names are `<object>.<16 hex digits>`; the hex part is a
    // bijection of the index (an odd multiplier is invertible mod 2^64).
    let tag = (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ctx.seed;
    let name = format!("{pod}.{tag:016x}");
    let first = rng.u64(..30 * 86_400);
    let count = 1 + rng.u32(..20);
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name,
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": namespace,
            "name": pod,
            "uid": uid_for(ctx.seed, "Pod", namespace, &pod),
            "fieldPath": format!("spec.containers{{{app}}}"),
        },
        "reason": reason,
        "message": message,
        "source": { "component": "kubelet", "host": node },
        "firstTimestamp": timestamp(first),
        "lastTimestamp": timestamp(first + u64::from(count) * 30),
        "count": count,
        "type": kind,
        "eventTime": null,
        "reportingComponent": "kubelet",
        "reportingInstance": node,
    })
}

/// A ready worker node with capacity, conditions, addresses and images.
pub(super) fn node(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("nodes", index);
    let name = ctx.node_name(index);
    let zone = pick(&mut rng, &["us-east-1a", "us-east-1b", "us-east-1c"]);
    let (instance, cpu, memory_gib) = [
        ("m5.xlarge", 4, 16),
        ("m5.2xlarge", 8, 32),
        ("c5.4xlarge", 16, 32),
    ][below(&mut rng, 3)];
    let ip = node_ip(index);
    let since = rng.u64(..86_400);
    let heartbeat = since + 30 * 86_400;
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": kind, "status": status,
            "lastHeartbeatTime": timestamp(heartbeat), "lastTransitionTime": timestamp(since),
            "reason": reason, "message": message,
        })
    };
    let images: Vec<Value> = [
        "registry.k8s.io/kube-proxy:v1.32.4",
        "docker.io/calico/node:v3.28.2",
        "quay.io/prometheus/node-exporter:v1.8.2",
    ]
    .iter()
    .map(|image| {
        json!({
            "names": [image_digest(&mut rng, image), image],
            "sizeBytes": 10_000_000 + rng.u64(..90_000_000),
        })
    })
    .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": instance,
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": zone,
                "node-role.kubernetes.io/worker": "",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "podCIDR": format!("10.244.{}.0/24", index % 256),
            "podCIDRs": [format!("10.244.{}.0/24", index % 256)],
            "providerID": format!("aws:///{zone}/i-0{}", hex(&mut rng, 16)),
        },
        "status": {
            "capacity": {
                "cpu": cpu.to_string(), "memory": format!("{}Ki", memory_gib * 1024 * 1024),
                "pods": "110", "ephemeral-storage": "104845292Ki",
            },
            "allocatable": {
                "cpu": format!("{}m", cpu * 1000 - 90), "memory": format!("{}Ki", memory_gib * 1024 * 1024 - 700_000),
                "pods": "110", "ephemeral-storage": "95551679124",
            },
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [
                { "type": "InternalIP", "address": ip },
                { "type": "Hostname", "address": name },
            ],
            "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
            "nodeInfo": {
                "machineID": hex(&mut rng, 32),
                "systemUUID": hex(&mut rng, 32),
                "bootID": hex(&mut rng, 32),
                "kernelVersion": "6.1.112-124.190.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.6.20241031",
                "containerRuntimeVersion": "containerd://1.7.23",
                "kubeletVersion": "v1.32.4",
                "kubeProxyVersion": "v1.32.4",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": images,
        },
    })
}

/// The IP address of node `index`, a bijection of the index.
fn node_ip(index: usize) -> String {
    let n = index + 1;
    format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

/// The name of node `index`, in the style of a cloud provider's DNS names.
pub(super) fn node_name(index: usize) -> String {
    format!("ip-{}.ec2.internal", node_ip(index).replace('.', "-"))
}

/// An active Namespace named `name`.
pub(super) fn namespace(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": { "kubernetes.io/metadata.name": name },
        },
        "spec": { "finalizers": ["kubernetes"] },
        "status": { "phase": "Active" },
    })
}
