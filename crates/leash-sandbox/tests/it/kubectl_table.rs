//! `kubectl get` columns (the server's `meta.k8s.io/v1` Tables) for objects in
//! every state the printers distinguish, compared cell by cell with what a
//! real cluster prints for the same objects (kube-apiserver 1.3x's printers,
//! kubectl 1.32's layout). Ages are written `*`: the objects are created now.

use std::time::{Duration, SystemTime};

use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::kubectl::{Kubectl, block};

/// Splits kubectl's table output into cells: columns are at least 3 spaces
/// apart, and no cell holds 3 spaces in a row.
fn cells(line: &str) -> Vec<String> {
    line.split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect()
}

/// Asserts kubectl printed exactly `expected` (rows of `|`-separated cells;
/// `*` matches an age in seconds).
pub(crate) fn assert_table(out: &str, expected: &[&str]) {
    let got: Vec<Vec<String>> = out.lines().map(cells).collect();
    let want: Vec<Vec<&str>> = expected
        .iter()
        .map(|row| row.split(" | ").collect())
        .collect();
    assert_eq!(got.len(), want.len(), "rows of:\n{out}");
    for (g, w) in got.iter().zip(&want) {
        let same = g.len() == w.len()
            && g.iter().zip(w).all(|(g, w)| {
                g == w
                    || (*w == "*"
                        && g.strip_suffix('s')
                            .is_some_and(|n| n.parse::<u32>().is_ok()))
            });
        assert!(same, "row {g:?} is not {w:?} in:\n{out}");
    }
}

fn ago(secs: u64) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() - Duration::from_secs(secs)).to_string()
}

fn meta(kind: &str, api_version: &str, name: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "ns-0000"}})
}

fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

fn fixtures() -> Vec<Value> {
    let pod = |name: &str, extra: Value| with(meta("Pod", "v1", name), extra);
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-0000"}}),
        pod(
            "crashing",
            json!({
            "spec": {"containers": [{"name": "app", "image": "app:1"}, {"name": "sidecar", "image": "proxy:2"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIP": "10.244.0.7", "podIPs": [{"ip": "10.244.0.7"}], "containerStatuses": [
                {"name": "app", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": ago(7300)}}},
                {"name": "sidecar", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": ago(7200)}}}]}}),
        ),
        pod(
            "done",
            json!({
            "spec": {"containers": [{"name": "task", "image": "busybox"}], "restartPolicy": "Never", "nodeName": "node-1"},
            "status": {"phase": "Succeeded", "containerStatuses": [
                {"name": "task", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}}),
        ),
        pod(
            "initializing",
            json!({
            "spec": {"initContainers": [{"name": "migrate", "image": "db:1"}], "containers": [{"name": "app", "image": "app:1"}], "nodeName": "node-2"},
            "status": {"phase": "Pending", "podIPs": [{"ip": "10.244.1.3"}],
                "initContainerStatuses": [{"name": "migrate", "ready": false, "restartCount": 0, "state": {"running": {}}}],
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}}),
        ),
        pod(
            "gated",
            json!({
            "spec": {"containers": [{"name": "app", "image": "app:1"}], "readinessGates": [{"conditionType": "example.com/lb"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "nominatedNodeName": "node-2", "podIPs": [{"ip": "10.244.0.9"}],
                "conditions": [{"type": "example.com/lb", "status": "False"}, {"type": "Ready", "status": "False"}],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}}]}}),
        ),
        pod(
            "unscheduled",
            json!({"spec": {"containers": [{"name": "app", "image": "app:1"}]}}),
        ),
        with(
            meta("Deployment", "apps/v1", "web"),
            json!({
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}, {"name": "log", "image": "fluent:2"}]}}},
            "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}}),
        ),
        with(
            meta("ReplicaSet", "apps/v1", "web-5d9c"),
            json!({
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d9c"}},
                "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "5d9c"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2}}),
        ),
        with(
            meta("StatefulSet", "apps/v1", "db"),
            json!({
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "pg", "image": "postgres:16"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}}),
        ),
        with(
            meta("DaemonSet", "apps/v1", "agent"),
            json!({
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "agent", "image": "agent:3"}]}}},
            "status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1, "updatedNumberScheduled": 2, "numberAvailable": 1}}),
        ),
        with(
            meta("Job", "batch/v1", "migrate"),
            json!({
            "spec": {"completions": 1, "template": {"spec": {"containers": [{"name": "m", "image": "db:1"}], "restartPolicy": "Never"}}},
            "status": {"succeeded": 1, "startTime": ago(600), "completionTime": ago(570),
                "conditions": [{"type": "Complete", "status": "True"}]}}),
        ),
        with(
            meta("CronJob", "batch/v1", "nightly"),
            json!({
            "spec": {"schedule": "0 3 * * *", "timeZone": "Etc/UTC", "suspend": true,
                "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "backup:1"}], "restartPolicy": "OnFailure"}}}}},
            "status": {"lastScheduleTime": ago(7200)}}),
        ),
        with(
            meta("Service", "v1", "web"),
            json!({
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.10", "selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP"}]}}),
        ),
        with(
            meta("Service", "v1", "edge"),
            json!({
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.11", "selector": {"app": "web"}, "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}}),
        ),
        with(
            meta("Service", "v1", "public"),
            json!({
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.12", "ports": [{"port": 443, "nodePort": 31443, "protocol": "TCP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}}}),
        ),
        with(
            meta("Service", "v1", "docs"),
            json!({
            "spec": {"type": "ExternalName", "externalName": "docs.example.com"}}),
        ),
        with(
            meta("ConfigMap", "v1", "settings"),
            json!({"data": {"a": "1", "b": "2"}, "binaryData": {"c": "AAE="}}),
        ),
        with(
            meta("Secret", "v1", "tls"),
            json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "YQ==", "tls.key": "Yg=="}}),
        ),
        with(
            meta("ServiceAccount", "v1", "builder"),
            json!({"secrets": [{"name": "builder-token"}]}),
        ),
        with(
            meta("Lease", "coordination.k8s.io/v1", "leader"),
            json!({"spec": {"holderIdentity": "node-1_4f2a"}}),
        ),
        with(
            meta("Event", "v1", "crashing.17a"),
            json!({
            "involvedObject": {"kind": "Pod", "namespace": "ns-0000", "name": "crashing", "fieldPath": "spec.containers{sidecar}"},
            "reason": "BackOff", "type": "Warning", "message": "Back-off restarting failed container sidecar",
            "source": {"component": "kubelet", "host": "node-1"}, "count": 7,
            "firstTimestamp": ago(7200), "lastTimestamp": ago(1800)}),
        ),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "node-1"}],
                "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Debian GNU/Linux 12 (bookworm)", "kernelVersion": "6.1.0-18-amd64", "containerRuntimeVersion": "containerd://1.7.13"}}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-2"}, "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "ExternalIP", "address": "198.51.100.2"}],
                "nodeInfo": {"kubeletVersion": "v1.32.4"}}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.leash.dev"},
            "spec": {"group": "example.leash.dev", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    {"name": "v2", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "additionalPrinterColumns": [
                        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                        {"name": "Size", "type": "string", "priority": 1, "jsonPath": ".spec.size"}]}]}}),
        with(
            meta("Widget", "example.leash.dev/v1", "w-1"),
            json!({
            "spec": {"replicas": 2, "size": "large"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        ),
        with(
            meta("Widget", "example.leash.dev/v1", "w-2"),
            json!({"spec": {"replicas": 0}}),
        ),
    ]
}

async fn sandbox() -> Sandbox {
    Sandbox::start(SandboxConfig {
        objects: fixtures(),
        ..SandboxConfig::default()
    })
    .await
    .expect("start the sandbox")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_a_clusters_columns_for_every_builtin_kind() {
    let sandbox = sandbox().await;
    let Some(kubectl) = Kubectl::find(&sandbox.url()) else {
        sandbox.shutdown().await.unwrap();
        return;
    };
    let get = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-n", "ns-0000"]);
        block(|| kubectl.ok(&all))
    };
    assert_table(
        &get(&["get", "pods"]),
        &[
            "NAME | READY | STATUS | RESTARTS | AGE",
            "crashing | 1/2 | CrashLoopBackOff | 3 (120m ago) | *",
            "done | 0/1 | Completed | 0 | *",
            "gated | 1/1 | Running | 0 | *",
            "initializing | 0/1 | Init:0/1 | 0 | *",
            "unscheduled | 0/1 | Pending | 0 | *",
        ],
    );
    assert_table(
        &get(&["get", "pods", "-o", "wide"]),
        &[
            "NAME | READY | STATUS | RESTARTS | AGE | IP | NODE | NOMINATED NODE | READINESS GATES",
            "crashing | 1/2 | CrashLoopBackOff | 3 (120m ago) | * | 10.244.0.7 | node-1 | <none> | <none>",
            "done | 0/1 | Completed | 0 | * | <none> | node-1 | <none> | <none>",
            "gated | 1/1 | Running | 0 | * | 10.244.0.9 | node-1 | node-2 | 0/1",
            "initializing | 0/1 | Init:0/1 | 0 | * | 10.244.1.3 | node-2 | <none> | <none>",
            "unscheduled | 0/1 | Pending | 0 | * | <none> | <none> | <none> | <none>",
        ],
    );
    assert_table(
        &get(&["get", "deployments", "-o", "wide"]),
        &[
            "NAME | READY | UP-TO-DATE | AVAILABLE | AGE | CONTAINERS | IMAGES | SELECTOR",
            "web | 2/3 | 3 | 2 | * | nginx,log | nginx:1.27,fluent:2 | app=web",
        ],
    );
    assert_table(
        &get(&["get", "replicasets", "-o", "wide"]),
        &[
            "NAME | DESIRED | CURRENT | READY | AGE | CONTAINERS | IMAGES | SELECTOR",
            "web-5d9c | 3 | 3 | 2 | * | nginx | nginx:1.27 | app=web,pod-template-hash=5d9c",
        ],
    );
    assert_table(
        &get(&["get", "statefulsets"]),
        &["NAME | READY | AGE", "db | 1/3 | *"],
    );
    assert_table(
        &get(&["get", "daemonsets"]),
        &[
            "NAME | DESIRED | CURRENT | READY | UP-TO-DATE | AVAILABLE | NODE SELECTOR | AGE",
            "agent | 2 | 2 | 1 | 2 | 1 | kubernetes.io/os=linux | *",
        ],
    );
    assert_table(
        &get(&["get", "jobs"]),
        &[
            "NAME | STATUS | COMPLETIONS | DURATION | AGE",
            "migrate | Complete | 1/1 | 30s | *",
        ],
    );
    assert_table(
        &get(&["get", "cronjobs"]),
        &[
            "NAME | SCHEDULE | TIMEZONE | SUSPEND | ACTIVE | LAST SCHEDULE | AGE",
            "nightly | 0 3 * * * | Etc/UTC | True | 0 | 120m | *",
        ],
    );
    assert_table(
        &get(&["get", "services", "-o", "wide"]),
        &[
            "NAME | TYPE | CLUSTER-IP | EXTERNAL-IP | PORT(S) | AGE | SELECTOR",
            "docs | ExternalName | <none> | docs.example.com | <none> | * | <none>",
            "edge | NodePort | 10.96.0.11 | <none> | 80:30080/TCP | * | app=web",
            "public | LoadBalancer | 10.96.0.12 | 203.0.113.5 | 443:31443/TCP | * | <none>",
            "web | ClusterIP | 10.96.0.10 | <none> | 80/TCP,443/TCP | * | app=web",
        ],
    );
    assert_table(
        &get(&["get", "configmaps"]),
        &["NAME | DATA | AGE", "settings | 3 | *"],
    );
    assert_table(
        &get(&["get", "secrets"]),
        &[
            "NAME | TYPE | DATA | AGE",
            "tls | kubernetes.io/tls | 2 | *",
        ],
    );
    assert_table(
        &get(&["get", "serviceaccounts"]),
        &["NAME | SECRETS | AGE", "builder | 1 | *"],
    );
    assert_table(
        &get(&["get", "leases"]),
        &["NAME | HOLDER | AGE", "leader | node-1_4f2a | *"],
    );
    assert_table(
        &get(&["get", "events"]),
        &[
            "LAST SEEN | TYPE | REASON | OBJECT | MESSAGE",
            "30m | Warning | BackOff | pod/crashing | Back-off restarting failed container sidecar",
        ],
    );
    assert_table(
        &get(&["get", "events", "-o", "wide"]),
        &[
            "LAST SEEN | TYPE | REASON | OBJECT | SUBOBJECT | SOURCE | MESSAGE | FIRST SEEN | COUNT | NAME",
            "30m | Warning | BackOff | pod/crashing | spec.containers{sidecar} | kubelet, node-1 | Back-off restarting failed container sidecar | 120m | 7 | crashing.17a",
        ],
    );
    assert_table(
        &block(|| kubectl.ok(&["get", "nodes", "-o", "wide"])),
        &[
            "NAME | STATUS | ROLES | AGE | VERSION | INTERNAL-IP | EXTERNAL-IP | OS-IMAGE | KERNEL-VERSION | CONTAINER-RUNTIME",
            "node-1 | Ready | control-plane | * | v1.32.4 | 10.0.0.1 | <none> | Debian GNU/Linux 12 (bookworm) | 6.1.0-18-amd64 | containerd://1.7.13",
            "node-2 | NotReady,SchedulingDisabled | <none> | * | v1.32.4 | 10.0.0.2 | 198.51.100.2 | <unknown> | <unknown> | <unknown>",
        ],
    );
    let namespaces = block(|| kubectl.ok(&["get", "namespaces"]));
    assert_table(
        &namespaces,
        &[
            "NAME | STATUS | AGE",
            "default | Active | *",
            "kube-node-lease | Active | *",
            "kube-public | Active | *",
            "kube-system | Active | *",
            "ns-0000 | Active | *",
        ],
    );
    sandbox.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_crd_printer_columns() {
    let sandbox = sandbox().await;
    let Some(kubectl) = Kubectl::find(&sandbox.url()) else {
        sandbox.shutdown().await.unwrap();
        return;
    };
    let get = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["-n", "ns-0000"]);
        block(|| kubectl.ok(&all))
    };
    assert_table(
        &get(&["get", "widgets"]),
        &[
            "NAME | REPLICAS | READY | AGE",
            "w-1 | 2 | True | *",
            "w-2 | 0 | *",
        ],
    );
    assert_table(
        &get(&["get", "widgets", "-o", "wide"]),
        &[
            "NAME | REPLICAS | READY | AGE | SIZE",
            "w-1 | 2 | True | * | large",
            "w-2 | 0 | *",
        ],
    );
    // A path that finds nothing is a null cell, which kubectl prints empty.
    // kubectl reads the preferred version, v2 (as a cluster sorts versions);
    // v1 has no printer columns and gets the API server's default, Age.
    assert_table(
        &get(&["get", "widgets.v1.example.leash.dev"]),
        &["NAME | AGE", "w-1 | *", "w-2 | *"],
    );
    // CRDs themselves: the default table convertor's NAME and CREATED AT.
    let crds = block(|| kubectl.ok(&["get", "crds"]));
    let rows: Vec<Vec<String>> = crds.lines().map(cells).collect();
    assert_eq!(rows[0], ["NAME", "CREATED AT"], "{crds}");
    assert_eq!(rows[1][0], "widgets.example.leash.dev", "{crds}");
    assert!(
        humantime::parse_rfc3339(&rows[1][1]).is_ok(),
        "CREATED AT is RFC 3339: {crds}"
    );
    sandbox.shutdown().await.expect("shutdown");
}

/// `kubectl get -w` asks its watch for Tables too: each event arrives as a
/// one-row Table, printed in the list's columns (the header once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_prints_events_in_the_same_columns() {
    let sandbox = Sandbox::start(SandboxConfig {
        objects: vec![
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns-0000"}}),
            with(
                meta("ConfigMap", "v1", "first"),
                json!({"data": {"a": "1"}}),
            ),
        ],
        ..SandboxConfig::default()
    })
    .await
    .expect("start the sandbox");
    let Some(kubectl) = Kubectl::find(&sandbox.url()) else {
        sandbox.shutdown().await.unwrap();
        return;
    };
    let store = sandbox.store();
    let out = block(|| {
        std::thread::scope(|s| {
            // The watch ends with kubectl's request timeout.
            let watcher = s.spawn(|| {
                kubectl.ok(&[
                    "get",
                    "configmaps",
                    "-n",
                    "ns-0000",
                    "-w",
                    "--request-timeout=2s",
                ])
            });
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while store.open_watches() == 0 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "kubectl never watched"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let mut cm = store
                .create(with(
                    meta("ConfigMap", "v1", "second"),
                    json!({"data": {"a": "1"}}),
                ))
                .unwrap();
            cm["data"]["b"] = json!("2");
            store.update(cm).unwrap();
            watcher.join().expect("kubectl thread")
        })
    });
    assert_table(
        &out,
        &[
            "NAME | DATA | AGE",
            "first | 1 | *",
            "second | 1 | *",
            "second | 2 | *",
        ],
    );
    sandbox.shutdown().await.expect("shutdown");
}
