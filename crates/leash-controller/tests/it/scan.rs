//! The background scan reads what its policies' context entries name: a
//! `configMap` entry and an `apiCall` `urlPath` of kinds no policy matches
//! (so no watch holds them) are read from the API server.

use leash_controller::ReportsSettings;
use leash_runtime::Scope;
use leash_sandbox::Sandbox;
use serde_json::{Value, json};

use crate::support::*;

fn pod(name: &str, registry: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "labels": {"registry": registry}},
        "spec": {"containers": [{"name": "c", "image": format!("{registry}/app:1")}]}})
}

fn policy() -> Value {
    json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "lookups"},
        "spec": {"validationFailureAction": "Audit", "rules": [
            {"name": "allowed-registry",
             "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "context": [{"name": "allowed", "configMap": {"name": "allowed", "namespace": "kyverno"}}],
             "validate": {"message": "registry not allowed",
                "deny": {"conditions": {"any": [{"key": "{{ request.object.metadata.labels.registry }}",
                    "operator": "NotEquals", "value": "{{ allowed.data.registry }}"}]}}}},
            {"name": "no-services",
             "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "context": [{"name": "services", "apiCall": {
                "urlPath": "/api/v1/namespaces/{{ request.namespace }}/services",
                "jmesPath": "items | length(@)"}}],
             "validate": {"message": "{{ services }} services in the namespace",
                "deny": {"conditions": {"any": [{"key": "{{ services }}",
                    "operator": "GreaterThan", "value": 0}]}}}}]}})
}

/// Runs the policy source and the reports component (default settings)
/// on `sb` in `scope`. The configuration source is neither run nor kept:
/// once it is gone its last snapshot (the defaults) stays in force, and the
/// scan goes on with it (before, the scan ended there, silently, and no
/// report was ever written: these tests would hang).
fn run_reports(scope: &Scope, sb: &Sandbox) {
    let parts = Parts::new(sb);
    let reports = parts.reports(ReportsSettings::default());
    let t = scope.token().clone();
    scope.spawn("policies", parts.policies.run(t.clone()));
    scope.spawn("reports", reports.run(t));
}

/// `(pod name, rule, result)` of the policy `lookups` in the reports of `team`.
fn results(sb: &Sandbox) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for rep in sb
        .store()
        .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", Some("team"))
        .unwrap()
    {
        let pod = rep["scope"]["name"].as_str().unwrap_or("").to_string();
        for r in rep["results"].as_array().into_iter().flatten() {
            if r["policy"] == "lookups" {
                out.push((
                    pod.clone(),
                    r["rule"].as_str().unwrap_or("").to_string(),
                    r["result"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn want(pod: &str, rule: &str, result: &str) -> (String, String, String) {
    (pod.to_string(), rule.to_string(), result.to_string())
}

/// Waits until the reports of `team` hold exactly `expected`.
async fn reports_hold(sb: &Sandbox, expected: &[(String, String, String)]) {
    let start = std::time::Instant::now();
    loop {
        let got = results(sb);
        if got == expected {
            return;
        }
        assert!(
            start.elapsed() < HANG_BOUND,
            "the reports hold {got:?}, not {expected:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_reads_configmap_and_api_call_context_from_the_api_server() {
    let sb = sandbox(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "allowed", "namespace": "kyverno"}, "data": {"registry": "ghcr.io"}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "namespace": "team"},
            "spec": {"ports": [{"port": 80}]}}),
        pod("good", "ghcr.io"),
        pod("bad", "docker.io"),
        policy(),
    ])
    .await;
    let scope = Scope::new();
    run_reports(&scope, &sb);
    let expected = vec![
        want("bad", "allowed-registry", "fail"),
        want("bad", "no-services", "fail"),
        want("good", "allowed-registry", "pass"),
        want("good", "no-services", "fail"),
    ];
    reports_hold(&sb, &expected).await;
    scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// A minimal HTTP service on 127.0.0.1: answers `{"allowed": true}` when the
/// POSTed body names the pod `good`, false otherwise; counts its calls.
async fn verdict_service(
    scope: &Scope,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/verdict", listener.local_addr().unwrap());
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let token = scope.token().clone();
    scope.spawn("verdict service", async move {
        loop {
            let (mut conn, _) = tokio::select! {
                _ = token.cancelled() => break,
                c = listener.accept() => c.unwrap(),
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let body = loop {
                let n = conn.read(&mut chunk).await.unwrap();
                if n == 0 {
                    break String::new();
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if body.len() >= len {
                        break body.to_string();
                    }
                }
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let doc: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let answer = json!({"allowed": doc["name"] == "good"}).to_string();
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            conn.write_all(reply.as_bytes()).await.unwrap();
        }
        Ok::<(), std::convert::Infallible>(())
    });
    (url, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_calls_an_api_call_service_with_the_posted_data() {
    let scope = Scope::new();
    let (url, calls) = verdict_service(&scope).await;
    let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "lookups"},
        "spec": {"validationFailureAction": "Audit", "rules": [
            {"name": "service-verdict",
             "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "context": [{"name": "verdict", "apiCall": {
                "method": "POST", "service": {"url": url},
                "data": [{"key": "name", "value": "{{ request.object.metadata.name }}"}],
                "jmesPath": "allowed"}}],
             "validate": {"message": "the service refused {{ request.object.metadata.name }}",
                "deny": {"conditions": {"any": [{"key": "{{ verdict }}",
                    "operator": "Equals", "value": false}]}}}}]}});
    let sb = sandbox(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        pod("good", "ghcr.io"),
        pod("bad", "docker.io"),
        policy,
    ])
    .await;
    run_reports(&scope, &sb);
    let expected = vec![
        want("bad", "service-verdict", "fail"),
        want("good", "service-verdict", "pass"),
    ];
    reports_hold(&sb, &expected).await;
    // One call per distinct body (per pod), not one per evaluation round.
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// README, `leash serve` reports: the scan watches every kind a background
/// policy matches, and its watchers come and go as policies change. A
/// policy on ConfigMaps arrives: a ConfigMap watch opens; it is deleted:
/// that watch ends, while the example policies' watches stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_come_and_go_with_the_policies() {
    let sb = sandbox(vec![]).await;
    let scope = Scope::new();
    run_reports(&scope, &sb);
    until_watches(&sb, "the example policies' pods watched", |w| {
        w.contains_key("pods")
    })
    .await;
    assert!(!sb.open_watches().contains_key("configmaps"));
    sb.store()
        .create(json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "configmaps-labelled"},
            "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
                "validate": {"message": "m", "pattern": {"metadata": {"labels": {"team": "?*"}}}}}]}}))
        .unwrap();
    until_watches(&sb, "a ConfigMap watch", |w| {
        w.get("configmaps") == Some(&1)
    })
    .await;
    sb.store()
        .delete(
            "kyverno.io/v1",
            "ClusterPolicy",
            None,
            "configmaps-labelled",
        )
        .unwrap();
    until_watches(&sb, "the ConfigMap watch ended", |w| {
        !w.contains_key("configmaps")
    })
    .await;
    assert!(
        sb.open_watches().contains_key("pods"),
        "{:?}",
        sb.open_watches()
    );
    scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// Waits until the sandbox's open watches satisfy `ok`.
async fn until_watches(
    sb: &Sandbox,
    what: &str,
    ok: impl Fn(&std::collections::BTreeMap<String, usize>) -> bool,
) {
    let start = std::time::Instant::now();
    while !ok(&sb.open_watches()) {
        assert!(
            start.elapsed() < HANG_BOUND,
            "{what}: {:?}",
            sb.open_watches()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// README, "Context entries in `leash serve`": a ConfigMap read by every
/// pod's rule is read once and kept (30 s), so many pods cost one GET:
/// workers that miss it at the same moment wait for the one reading it.
/// 1,000 pods on 8 workers, one `configMap` entry: every pod is reported,
/// and the sandbox served one GET of that ConfigMap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_reads_a_configmap_once_for_many_pods() {
    const PODS: usize = 1000;
    let rule = &policy()["spec"]["rules"][0];
    let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "lookups"},
        "spec": {"validationFailureAction": "Audit", "rules": [rule]}});
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "allowed", "namespace": "kyverno"}, "data": {"registry": "ghcr.io"}}),
        policy,
    ];
    objects.extend((0..PODS).map(|i| pod(&format!("p{i:04}"), "ghcr.io")));
    let sb = sandbox(objects).await;
    let workers = ReportsSettings::default().scan.workers;
    let scope = Scope::new();
    run_reports(&scope, &sb);
    let mut expected: Vec<_> = (0..PODS)
        .map(|i| want(&format!("p{i:04}"), "allowed-registry", "pass"))
        .collect();
    expected.sort();
    reports_hold(&sb, &expected).await;
    scope.shutdown().await.unwrap();
    let get = leash_sandbox::ApiRequest::Resource {
        verb: "get".into(),
        group: String::new(),
        resource: "configmaps".into(),
        subresource: String::new(),
        namespace: "kyverno".into(),
    };
    let gets = sb.request_counts().get(&get).copied().unwrap_or(0);
    assert!(
        gets == 1,
        "{gets} GETs of the ConfigMap for {PODS} pods ({workers} workers)"
    );
    sb.shutdown().await.unwrap();
}
