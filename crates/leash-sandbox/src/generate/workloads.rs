//! Pods and the workload kinds that template them: Deployment, ReplicaSet,
//! StatefulSet, DaemonSet, Job, CronJob.
//!
//! Shapes follow what a real cluster returns for `kubectl get -o json`
//! (defaults filled in, status populated), so sizes are realistic: a pod is
//! 2-6 KB of JSON with 1-3 containers.

use serde_json::{Map, Value, json};

use super::Context;
use super::entropy::{
    APPS, below, hex, image_digest, keyed_rng, pick, suffix, timestamp, uid_for, unique_token,
};

/// Main-container images (registry, repository and tag).
const IMAGES: &[&str] = &[
    "docker.io/library/nginx:1.27.3",
    "docker.io/library/redis:7.4.1",
    "docker.io/library/postgres:16.4",
    "ghcr.io/acme/api-server:2.14.0",
    "ghcr.io/acme/worker:2.14.0",
    "registry.k8s.io/e2e-test-images/agnhost:2.52",
    "quay.io/prometheus/node-exporter:v1.8.2",
    "docker.io/bitnami/kafka:3.8.0",
];

/// Sidecars: name, image, port.
const SIDECARS: &[(&str, &str, u16)] = &[
    ("istio-proxy", "docker.io/istio/proxyv2:1.23.2", 15090),
    (
        "log-shipper",
        "cr.fluentbit.io/fluent/fluent-bit:3.1.9",
        2020,
    ),
    (
        "metrics-exporter",
        "quay.io/prometheus/statsd-exporter:v0.27.1",
        9102,
    ),
];

const LOG_LEVELS: &[&str] = &["debug", "info", "warn", "error"];
const CPU_REQUESTS: &[&str] = &["50m", "100m", "250m", "500m", "1"];
const MEMORY_REQUESTS: &[&str] = &["64Mi", "128Mi", "256Mi", "512Mi", "1Gi"];
const SCHEDULES: &[&str] = &[
    "*/5 * * * *",
    "0 * * * *",
    "15 2 * * *",
    "0 0 * * 0",
    "30 6 1 * *",
];

/// Who owns a generated pod, which decides its name and owner reference.
#[derive(Clone, Copy)]
enum PodOwner {
    ReplicaSet,
    DaemonSet,
}

/// A pod, as a Deployment's ReplicaSet or a DaemonSet would have created it.
pub(super) fn pod(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("pods", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, APPS);
    let owner_kind = if rng.u32(..10) < 8 {
        PodOwner::ReplicaSet
    } else {
        PodOwner::DaemonSet
    };
    // Pods of one app in one namespace share their owner and template hash.
    let mut app_rng = keyed_rng(ctx.seed, &format!("{namespace}/{app}"));
    let template_hash = suffix(&mut app_rng, 10);
    let token = ctx.token("pods", index);
    let (name, owner_ref_kind, owner_name) = match owner_kind {
        PodOwner::ReplicaSet => (
            format!("{app}-{template_hash}-{token}"),
            "ReplicaSet",
            format!("{app}-{template_hash}"),
        ),
        PodOwner::DaemonSet => (
            format!("{app}-agent-{token}"),
            "DaemonSet",
            format!("{app}-agent"),
        ),
    };
    let mut labels = app_labels(app, "server");
    labels.remove("app.kubernetes.io/managed-by");
    labels.remove("app.kubernetes.io/version");
    if matches!(owner_kind, PodOwner::ReplicaSet) {
        labels.insert("pod-template-hash".into(), json!(template_hash));
    } else {
        labels.insert(
            "controller-revision-hash".into(),
            json!(hex(&mut app_rng, 10)),
        );
        labels.insert("pod-template-generation".into(), json!("1"));
    }
    let started = rng.u64(..30 * 86_400);
    let container_count = 1 + below(&mut rng, 3);
    let mut spec = pod_spec(&mut rng, app, container_count, true);
    let node = ctx.node_name(below(&mut rng, ctx.node_pool()));
    let spec_map = spec.as_object_mut().expect("pod_spec builds an object");
    spec_map.insert("nodeName".into(), json!(node));
    let host_ip = format!("10.0.{}.{}", rng.u8(..16), 1 + rng.u8(..250));
    let pod_ip = format!("10.244.{}.{}", rng.u8(..255), 1 + rng.u8(..250));
    let statuses: Vec<Value> = spec_map["containers"]
        .as_array()
        .expect("containers is an array")
        .iter()
        .map(|container| container_status(&mut rng, container, started + 5))
        .collect();
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": format!("{owner_name}-"),
            "namespace": namespace,
            "annotations": {
                "kubectl.kubernetes.io/default-container": app,
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
            },
            "ownerReferences": [owner_reference(owner_ref_kind, &owner_name, ctx.seed, namespace)],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                condition("Initialized", started + 1),
                condition("Ready", started + 12),
                condition("ContainersReady", started + 12),
                condition("PodScheduled", started),
            ],
            "hostIP": host_ip,
            "hostIPs": [{ "ip": host_ip }],
            "podIP": pod_ip,
            "podIPs": [{ "ip": pod_ip }],
            "startTime": timestamp(started),
            "qosClass": "Burstable",
        },
    });
    put(&mut pod["metadata"], "labels", labels);
    put(&mut pod, "spec", spec);
    put(&mut pod["status"], "containerStatuses", statuses);
    pod
}

/// A Deployment with its pod template and a settled rollout status.
pub(super) fn deployment(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("deployments", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, APPS);
    let name = format!("{app}-{}", ctx.token("deployments", index));
    let replicas = 1 + rng.u32(..5);
    let created = rng.u64(..30 * 86_400);
    let template = pod_template(&mut rng, app, &name);
    let mut object = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "labels": app_labels(app, "server"),
            "annotations": { "deployment.kubernetes.io/revision": "1" },
        },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": selector(app, &name) },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": { "maxUnavailable": "25%", "maxSurge": "25%" },
            },
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                {
                    "type": "Available", "status": "True",
                    "lastUpdateTime": timestamp(created + 30), "lastTransitionTime": timestamp(created + 30),
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                },
                {
                    "type": "Progressing", "status": "True",
                    "lastUpdateTime": timestamp(created + 30), "lastTransitionTime": timestamp(created),
                    "reason": "NewReplicaSetAvailable",
                    "message": format!("ReplicaSet \"{name}-{}\" has successfully progressed.", suffix(&mut rng, 10)),
                },
            ],
        },
    });
    put(&mut object["spec"], "template", template);
    object
}

/// A ReplicaSet owned by a Deployment.
pub(super) fn replicaset(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("replicasets", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, APPS);
    let token = unique_token(ctx.seed, "replicasets", index, ctx.token_len + 5);
    let owner = format!("{app}-{}", &token[..5]);
    let name = format!("{app}-{token}");
    let replicas = 1 + rng.u32(..5);
    let mut template = pod_template(&mut rng, app, &owner);
    template["metadata"]["labels"]["pod-template-hash"] = json!(token);
    let mut match_labels = selector(app, &owner);
    match_labels.insert("pod-template-hash".into(), json!(token));
    let mut labels = app_labels(app, "server");
    labels.insert("pod-template-hash".into(), json!(token));
    let mut object = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "labels": labels,
            "annotations": {
                "deployment.kubernetes.io/desired-replicas": replicas.to_string(),
                "deployment.kubernetes.io/max-replicas": (replicas + 1).to_string(),
                "deployment.kubernetes.io/revision": "1",
            },
            "ownerReferences": [owner_reference("Deployment", &owner, ctx.seed, namespace)],
        },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": match_labels },
        },
        "status": {
            "replicas": replicas,
            "fullyLabeledReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "observedGeneration": 1,
        },
    });
    put(&mut object["spec"], "template", template);
    object
}

/// A StatefulSet with a volume claim template.
pub(super) fn statefulset(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("statefulsets", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(
        &mut rng,
        &[
            "postgres",
            "redis",
            "kafka",
            "zookeeper",
            "etcd",
            "elasticsearch",
        ],
    );
    let name = format!("{app}-{}", ctx.token("statefulsets", index));
    let replicas = 1 + rng.u32(..5);
    let mut template = pod_template(&mut rng, app, &name);
    template["spec"]["containers"][0]["volumeMounts"]
        .as_array_mut()
        .expect("volumeMounts is an array")
        .push(json!({ "name": "data", "mountPath": "/var/lib/data" }));
    let revision = format!("{name}-{}", hex(&mut rng, 10));
    let mut object = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "labels": app_labels(app, "database"),
        },
        "spec": {
            "replicas": replicas,
            "serviceName": format!("{name}-headless"),
            "selector": { "matchLabels": selector(app, &name) },
            "volumeClaimTemplates": [{
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": { "name": "data" },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": { "requests": { "storage": format!("{}Gi", 1 << rng.u32(..7)) } },
                    "storageClassName": "standard",
                    "volumeMode": "Filesystem",
                },
                "status": { "phase": "Pending" },
            }],
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": { "type": "RollingUpdate", "rollingUpdate": { "partition": 0 } },
            "revisionHistoryLimit": 10,
            "persistentVolumeClaimRetentionPolicy": { "whenDeleted": "Retain", "whenScaled": "Retain" },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "availableReplicas": replicas,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        },
    });
    put(&mut object["spec"], "template", template);
    object
}

/// A DaemonSet (one pod per node).
pub(super) fn daemonset(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("daemonsets", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(
        &mut rng,
        &[
            "node-exporter",
            "fluent-bit",
            "kube-proxy",
            "calico-node",
            "csi-node",
        ],
    );
    let name = format!("{app}-{}", ctx.token("daemonsets", index));
    let nodes = ctx.node_pool() as u32;
    let mut template = pod_template(&mut rng, app, &name);
    template["spec"]["tolerations"] = json!([{ "operator": "Exists" }]);
    template["spec"]["hostNetwork"] = json!(true);
    let mut object = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "labels": app_labels(app, "agent"),
            "annotations": { "deprecated.daemonset.template.generation": "1" },
        },
        "spec": {
            "selector": { "matchLabels": selector(app, &name) },
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": { "maxUnavailable": 1, "maxSurge": 0 },
            },
            "revisionHistoryLimit": 10,
        },
        "status": {
            "currentNumberScheduled": nodes,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": nodes,
            "numberReady": nodes,
            "observedGeneration": 1,
            "updatedNumberScheduled": nodes,
            "numberAvailable": nodes,
        },
    });
    put(&mut object["spec"], "template", template);
    object
}

/// A completed Job.
pub(super) fn job(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("jobs", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, APPS);
    let name = format!("{app}-migrate-{}", ctx.token("jobs", index));
    let started = rng.u64(..30 * 86_400);
    let finished = started + 5 + rng.u64(..600);
    let spec = job_spec(&mut rng, app, &name);
    let mut object = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "labels": app_labels(app, "migration"),
        },
        "status": {
            "startTime": timestamp(started),
            "completionTime": timestamp(finished),
            "succeeded": 1,
            "ready": 0,
            "terminating": 0,
            "uncountedTerminatedPods": {},
            "conditions": [
                {
                    "type": "SuccessCriteriaMet", "status": "True",
                    "lastProbeTime": timestamp(finished), "lastTransitionTime": timestamp(finished),
                    "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods",
                },
                {
                    "type": "Complete", "status": "True",
                    "lastProbeTime": timestamp(finished), "lastTransitionTime": timestamp(finished),
                    "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods",
                },
            ],
        },
    });
    put(&mut object, "spec", spec);
    object
}

/// A CronJob with its job template.
pub(super) fn cronjob(ctx: &Context, index: usize) -> Value {
    let mut rng = ctx.rng("cronjobs", index);
    let namespace = ctx.namespace_for(index);
    let app = pick(&mut rng, APPS);
    let name = format!("{app}-nightly-{}", ctx.token("cronjobs", index));
    let last = rng.u64(..30 * 86_400);
    let mut spec = job_spec(&mut rng, app, &name);
    let spec_map = spec.as_object_mut().expect("job_spec builds an object");
    spec_map.remove("selector");
    spec_map.remove("manualSelector");
    let mut object = json!({
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "generation": 1,
            "labels": app_labels(app, "batch"),
        },
        "spec": {
            "schedule": pick(&mut rng, SCHEDULES),
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "suspend": false,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": { "metadata": {} },
        },
        "status": {
            "lastScheduleTime": timestamp(last),
            "lastSuccessfulTime": timestamp(last + 42),
        },
    });
    put(&mut object["spec"]["jobTemplate"], "spec", spec);
    object
}

fn job_spec(rng: &mut fastrand::Rng, app: &str, name: &str) -> Value {
    let mut template = pod_template(rng, app, name);
    template["spec"]["restartPolicy"] = json!("Never");
    let labels = template["metadata"]["labels"]
        .as_object_mut()
        .expect("labels is an object");
    labels.insert("batch.kubernetes.io/job-name".into(), json!(name));
    // The API server would select on a `controller-uid` label with the uid
    // it assigns; a generated job cannot know that uid, so it selects its
    // pods by the template's own labels (`manualSelector`).
    let mut spec = json!({
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "suspend": false,
        "podReplacementPolicy": "TerminatingOrFailed",
        "manualSelector": true,
        "selector": { "matchLabels": selector(app, name) },
    });
    put(&mut spec, "template", template);
    spec
}

/// A pod template (workload `spec.template`) labelled for `owner`.
fn pod_template(rng: &mut fastrand::Rng, app: &str, owner: &str) -> Value {
    let container_count = 1 + below(rng, 2);
    let mut labels = app_labels(app, "server");
    labels.extend(selector(app, owner));
    let mut template = json!({
        "metadata": {
            "annotations": { "kubectl.kubernetes.io/default-container": app },
        },
    });
    put(&mut template["metadata"], "labels", labels);
    put(
        &mut template,
        "spec",
        pod_spec(rng, app, container_count, false),
    );
    template
}

/// A pod spec with `container_count` containers; `bound` adds what the API
/// server and scheduler fill in on a real pod (service-account token volume).
fn pod_spec(rng: &mut fastrand::Rng, app: &str, container_count: usize, bound: bool) -> Value {
    let token_volume = format!("kube-api-access-{}", suffix(rng, 5));
    let containers: Vec<Value> = (0..container_count)
        .map(|i| container(rng, app, i, bound.then_some(token_volume.as_str())))
        .collect();
    let mut volumes = vec![json!({
        "name": "config",
        "configMap": { "name": format!("{app}-config"), "defaultMode": 420 },
    })];
    if bound {
        volumes.push(json!({
            "name": token_volume,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    { "serviceAccountToken": { "expirationSeconds": 3607, "path": "token" } },
                    { "configMap": { "name": "kube-root-ca.crt", "items": [{ "key": "ca.crt", "path": "ca.crt" }] } },
                    { "downwardAPI": { "items": [{
                        "path": "namespace",
                        "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.namespace" },
                    }] } },
                ],
            },
        }));
    }
    let mut spec = json!({
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": app,
        "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
        "schedulerName": "default-scheduler",
    });
    put(&mut spec, "containers", containers);
    put(&mut spec, "volumes", volumes);
    if bound {
        spec["serviceAccount"] = json!(app);
        spec["enableServiceLinks"] = json!(true);
        spec["preemptionPolicy"] = json!("PreemptLowerPriority");
        spec["priority"] = json!(0);
        spec["tolerations"] = json!([
            { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
            { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300 },
        ]);
    }
    spec
}

/// Container `position` of a pod of `app` (0 is the app itself, the others
/// sidecars); `token_volume` mounts the service-account token.
fn container(
    rng: &mut fastrand::Rng,
    app: &str,
    position: usize,
    token_volume: Option<&str>,
) -> Value {
    let (name, image, port) = if position == 0 {
        (app.to_owned(), pick(rng, IMAGES).to_owned(), 8080)
    } else {
        let (name, image, port) = SIDECARS[(position - 1) % SIDECARS.len()];
        (name.to_owned(), image.to_owned(), port)
    };
    if position > 0 {
        // Sidecars are leaner: one port, no probes, no app configuration.
        let mounts: Vec<Value> = token_volume.map(token_mount).into_iter().collect();
        let mut sidecar = json!({
            "name": name,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "ports": [{ "name": "admin", "containerPort": port, "protocol": "TCP" }],
            "resources": { "requests": { "cpu": "10m", "memory": "32Mi" }, "limits": { "memory": "64Mi" } },
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        });
        put(&mut sidecar, "volumeMounts", mounts);
        return sidecar;
    }
    let env = vec![
        json!({ "name": "APP_NAME", "value": app }),
        json!({ "name": "LOG_LEVEL", "value": pick(rng, LOG_LEVELS) }),
        json!({ "name": "POD_NAME", "valueFrom": { "fieldRef": { "apiVersion": "v1", "fieldPath": "metadata.name" } } }),
        json!({ "name": "DATABASE_URL", "valueFrom": { "secretKeyRef": { "name": format!("{app}-db"), "key": "url" } } }),
    ];
    let mut mounts = vec![json!({ "name": "config", "mountPath": "/etc/app", "readOnly": true })];
    mounts.extend(token_volume.map(token_mount));
    let cpu = below(rng, CPU_REQUESTS.len());
    let memory = below(rng, MEMORY_REQUESTS.len());
    let mut main = json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{ "name": "http", "containerPort": port, "protocol": "TCP" }],
        "resources": {
            "requests": { "cpu": CPU_REQUESTS[cpu], "memory": MEMORY_REQUESTS[memory] },
            "limits": {
                "cpu": CPU_REQUESTS[(cpu + 1).min(CPU_REQUESTS.len() - 1)],
                "memory": MEMORY_REQUESTS[(memory + 1).min(MEMORY_REQUESTS.len() - 1)],
            },
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "securityContext": { "allowPrivilegeEscalation": false, "capabilities": { "drop": ["ALL"] } },
    });
    put(&mut main, "env", env);
    put(&mut main, "livenessProbe", probe("/healthz", port, 10));
    put(&mut main, "readinessProbe", probe("/readyz", port, 5));
    put(&mut main, "volumeMounts", mounts);
    main
}

/// The mount of the service-account token volume `volume`.
fn token_mount(volume: &str) -> Value {
    json!({
        "name": volume,
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": true,
    })
}

fn probe(path: &str, port: u16, period: u32) -> Value {
    json!({
        "httpGet": { "path": path, "port": port, "scheme": "HTTP" },
        "initialDelaySeconds": 5,
        "periodSeconds": period,
        "timeoutSeconds": 1,
        "successThreshold": 1,
        "failureThreshold": 3,
    })
}

/// The running status of `container` (its name and image).
fn container_status(rng: &mut fastrand::Rng, container: &Value, started: u64) -> Value {
    let image = container["image"].as_str().unwrap_or_default();
    json!({
        "name": container["name"].as_str().unwrap_or_default(),
        "state": { "running": { "startedAt": timestamp(started) } },
        "lastState": {},
        "ready": true,
        "restartCount": rng.u32(..3),
        "image": image,
        "imageID": image_digest(rng, image),
        "containerID": format!("containerd://{}", hex(rng, 64)),
        "started": true,
    })
}

fn condition(kind: &str, at: u64) -> Value {
    json!({ "type": kind, "status": "True", "lastTransitionTime": timestamp(at) })
}

/// The recommended `app.kubernetes.io/*` labels.
fn app_labels(app: &str, component: &str) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert("app.kubernetes.io/name".into(), json!(app));
    labels.insert(
        "app.kubernetes.io/instance".into(),
        json!(format!("{app}-prod")),
    );
    labels.insert("app.kubernetes.io/component".into(), json!(component));
    labels.insert("app.kubernetes.io/part-of".into(), json!("shop"));
    labels.insert("app.kubernetes.io/managed-by".into(), json!("helm"));
    labels.insert("app.kubernetes.io/version".into(), json!("2.14.0"));
    labels
}

/// The labels a workload `owner` selects its pods by.
fn selector(app: &str, owner: &str) -> Map<String, Value> {
    let mut labels = Map::new();
    labels.insert("app".into(), json!(app));
    labels.insert("workload".into(), json!(owner));
    labels
}

fn owner_reference(kind: &str, name: &str, seed: u64, namespace: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": name,
        "uid": uid_for(seed, kind, namespace, name),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// Move `value` into the object `object` at `key`. (`json!` would copy an
/// interpolated `Value` by serializing it again; for pods that copying was
/// most of the generator's time.)
fn put(object: &mut Value, key: &str, value: impl Into<Value>) {
    object
        .as_object_mut()
        .expect("put into an object")
        .insert(key.to_owned(), value.into());
}
