//! The readiness recorder and the status writer.

use std::time::{Duration, Instant};

use leash_runtime::{CancellationToken, Scope};
use leash_sandbox::{Faults, Sandbox, SandboxConfig};
use leash_webhook::{PolicyRef, Recorder, StatusWriter};
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use crate::common::*;

pub fn crd(group: &str, kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": scope,
            "names": {"plural": plural, "singular": kind.to_ascii_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

fn client(sandbox: &Sandbox) -> kube::Client {
    kube::Client::try_from(kube::Config::new(sandbox.url().parse().unwrap())).unwrap()
}

/// Seed: Kyverno's `Recorder.Record()` held a mutex while sending on an
/// unbuffered channel, blocking forever when the receiver was not ready. Here
/// a consumer that never reads, and a status writer stuck behind a slow API
/// server, block nothing: 10,000 `record` calls from 100 tasks finish, and the
/// status writer shuts down within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_recorder_send_under_lock() {
    let sandbox = Sandbox::start(SandboxConfig {
        objects: vec![crd(
            "kyverno.io",
            "ClusterPolicy",
            "clusterpolicies",
            "Cluster",
        )],
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    sandbox.set_faults(Faults {
        latency: Duration::from_millis(300),
        ..Faults::default()
    });
    let recorder = Recorder::new(&mut Registry::default());
    let never_read = recorder.subscribe();
    let scope = Scope::new();
    let token = CancellationToken::new();
    let writer = StatusWriter::new(client(&sandbox), &recorder);
    let t = token.clone();
    let writer = scope.spawn_with_output(async move { writer.run(t).await });
    let start = Instant::now();
    let calls: Vec<_> = (0..100)
        .map(|task| {
            let recorder = recorder.clone();
            scope.spawn_with_output(async move {
                for i in 0..100 {
                    recorder.record(PolicyRef::new(
                        "ClusterPolicy",
                        None,
                        &format!("p-{task}-{i}"),
                    ));
                    if i % 10 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    let all = futures::future::join_all(calls);
    tokio::time::timeout(Duration::from_secs(5), all)
        .await
        .expect("10,000 record calls finish while nobody reads");
    let took = start.elapsed();
    assert_eq!(recorder.readiness().served.len(), 10_000);
    assert!(
        never_read.has_changed().unwrap(),
        "the idle consumer is merely behind"
    );
    token.cancel();
    let stop = Instant::now();
    tokio::time::timeout(Duration::from_secs(1), writer)
        .await
        .expect("the status writer shuts down within 1 s")
        .expect("no panic")
        .expect("no error");
    assert!(stop.elapsed() < Duration::from_secs(1));
    scope.shutdown().await.unwrap();
    sandbox.shutdown().await.unwrap();
    eprintln!("10,000 record calls took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_policies_are_marked_ready_as_kyverno_reports_them() {
    let sandbox = Sandbox::start(SandboxConfig {
        objects: vec![
            crd("kyverno.io", "ClusterPolicy", "clusterpolicies", "Cluster"),
            crd("policies.kyverno.io", "ValidatingPolicy", "validatingpolicies", "Cluster"),
            crd("policies.kyverno.io", "GeneratingPolicy", "generatingpolicies", "Cluster"),
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy", "metadata": {"name": "gen"}, "spec": {}}),
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "require-team"}, "spec": {}}),
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "background-only"}, "spec": {}}),
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "vpol-deny"}, "spec": {}}),
        ],
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let s = TestServer::start(engine(&[
        REQUIRE_TEAM,
        BACKGROUND_ONLY,
        &vpol("vpol-deny", "Deny", "x"),
        GENERATING,
    ]))
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !s
        .recorder
        .is_ready(&PolicyRef::new("ClusterPolicy", None, "require-team"))
    {
        assert!(
            Instant::now() < deadline,
            "the running server records what it serves"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !s.recorder
            .is_ready(&PolicyRef::new("ClusterPolicy", None, "background-only")),
        "admission: false policies are not served by the webhook"
    );
    let scope = Scope::new();
    let token = CancellationToken::new();
    let writer = StatusWriter::new(client(&sandbox), &s.recorder)
        .with_retry_interval(Duration::from_millis(50));
    let t = token.clone();
    let writer = scope.spawn_with_output(async move { writer.run(t).await });
    let store = sandbox.store();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let cp = store
            .get("kyverno.io/v1", "ClusterPolicy", None, "require-team")
            .unwrap();
        let vp = store
            .get(
                "policies.kyverno.io/v1",
                "ValidatingPolicy",
                None,
                "vpol-deny",
            )
            .unwrap();
        let gp = store
            .get("policies.kyverno.io/v1", "GeneratingPolicy", None, "gen")
            .unwrap();
        if cp["status"]["ready"] == true
            && vp["status"]["conditionStatus"]["ready"] == true
            && gp["status"]["conditionStatus"]["ready"] == true
        {
            // A GeneratingPolicy's status is a ValidatingPolicy's (Kyverno's
            // other-gpol end-to-end test asserts both conditions).
            assert_eq!(
                gp["status"]["conditionStatus"]["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c["type"].as_str().unwrap())
                    .collect::<Vec<_>>(),
                ["WebhookConfigured", "RBACPermissionsGranted"]
            );
            let c = &cp["status"]["conditions"][0];
            assert_eq!(
                (
                    c["type"].as_str(),
                    c["status"].as_str(),
                    c["reason"].as_str(),
                    c["message"].as_str()
                ),
                (
                    Some("Ready"),
                    Some("True"),
                    Some("Succeeded"),
                    Some("Ready")
                )
            );
            assert!(c["lastTransitionTime"].is_string());
            let c = &vp["status"]["conditionStatus"]["conditions"][0];
            assert_eq!(
                (
                    c["type"].as_str(),
                    c["status"].as_str(),
                    c["message"].as_str()
                ),
                (
                    Some("WebhookConfigured"),
                    Some("True"),
                    Some("Webhook configured.")
                )
            );
            // Kyverno's end-to-end tests assert both conditions, in order.
            let types: Vec<&str> = vp["status"]["conditionStatus"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["type"].as_str().unwrap())
                .collect();
            assert_eq!(types, ["WebhookConfigured", "RBACPermissionsGranted"]);
            let c = &vp["status"]["conditionStatus"]["conditions"][1];
            assert_eq!(
                (
                    c["status"].as_str(),
                    c["reason"].as_str(),
                    c["message"].as_str()
                ),
                (
                    Some("True"),
                    Some("Succeeded"),
                    Some("Policy is ready for reporting.")
                )
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "statuses not written: {cp} {vp} {gp}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let bg = store
        .get("kyverno.io/v1", "ClusterPolicy", None, "background-only")
        .unwrap();
    assert!(
        bg.get("status").is_none_or(|s| s.get("ready").is_none()),
        "{bg}"
    );
    token.cancel();
    writer.await.unwrap().unwrap();
    scope.shutdown().await.unwrap();
    s.stop().await;
    sandbox.shutdown().await.unwrap();
}

/// A GeneratingPolicy the webhook serves (its triggers' UpdateRequests).
const GENERATING: &str = r#"
apiVersion: policies.kyverno.io/v1
kind: GeneratingPolicy
metadata: {name: gen}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [namespaces]
  generate:
  - expression: "[]"
"#;

/// An API server that answers `SelfSubjectAccessReview`s with `allowed`
/// (counted) and records the status patches of ValidatingPolicies.
#[derive(Default)]
struct Authorizer {
    allowed: std::sync::atomic::AtomicBool,
    reviews: std::sync::atomic::AtomicUsize,
    patches: std::sync::Mutex<Vec<Value>>,
}

async fn serve_authorizer(
    scope: &Scope,
    token: CancellationToken,
) -> (std::sync::Arc<Authorizer>, kube::Client) {
    use axum::extract::{Path, State};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    type Shared = Arc<Authorizer>;
    type Reply = (
        axum::http::StatusCode,
        [(axum::http::HeaderName, &'static str); 1],
        String,
    );
    let reply = |code, v: Value| -> Reply {
        (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
    };
    let review = move |State(a): State<Shared>, body: String| async move {
        a.reviews.fetch_add(1, Ordering::SeqCst);
        let mut r: Value = serde_json::from_str(&body).unwrap();
        r["status"] = json!({"allowed": a.allowed.load(Ordering::SeqCst)});
        reply(axum::http::StatusCode::CREATED, r)
    };
    let patch = move |State(a): State<Shared>, Path(name): Path<String>, body: String| async move {
        a.patches
            .lock()
            .unwrap()
            .push(serde_json::from_str(&body).unwrap());
        let policy = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name}});
        reply(axum::http::StatusCode::OK, policy)
    };
    let state = Shared::default();
    let app = axum::Router::new()
        .route(
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            axum::routing::post(review),
        )
        .route(
            "/apis/policies.kyverno.io/v1/validatingpolicies/{name}/status",
            axum::routing::patch(patch),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    scope.spawn("authorizer", async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { token.cancelled().await })
            .await
    });
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    (state, client)
}

/// A recorder serving one ValidatingPolicy on ClusterRoles, and its
/// status writer (retries and rechecks every `every`) against
/// [`serve_authorizer`].
async fn roles_policy_writer(
    scope: &Scope,
    token: &CancellationToken,
    every: Duration,
) -> (
    std::sync::Arc<Authorizer>,
    Recorder,
    tokio::task::JoinHandle<leash_webhook::Result<()>>,
) {
    let (authorizer, client) = serve_authorizer(scope, token.clone()).await;
    let recorder = Recorder::new(&mut Registry::default());
    let policy = PolicyRef::new("ValidatingPolicy", None, "roles");
    let roles = (
        "rbac.authorization.k8s.io".to_string(),
        "v1".to_string(),
        "clusterroles".to_string(),
    );
    recorder.serve_exactly(&[(policy, vec![roles])].into());
    let writer = StatusWriter::new(client, &recorder)
        .with_retry_interval(every)
        .with_recheck_interval(every);
    let t = token.clone();
    let writer = scope.spawn_with_output(async move { writer.run(t).await });
    (authorizer, recorder, writer)
}

/// `RBACPermissionsGranted` as the API server answers: `"False"` naming
/// each verb and resource leash may not scan (the policy not ready), asked
/// again while missing and rewritten only when the answer changes; once
/// granted, `"True"`, and no more asking.
#[tokio::test]
async fn rbac_permissions_granted_follows_the_api_servers_answers() {
    use std::sync::atomic::Ordering;
    let scope = Scope::new();
    let token = CancellationToken::new();
    let (authorizer, _recorder, writer) =
        roles_policy_writer(&scope, &token, Duration::from_millis(50)).await;
    let patch = |n: usize| {
        let authorizer = authorizer.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(p) = authorizer.patches.lock().unwrap().get(n) {
                    return p["status"]["conditionStatus"].clone();
                }
                assert!(Instant::now() < deadline, "no status patch {n}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let first = patch(0).await;
    assert_eq!(first["ready"], false, "{first}");
    let rbac = &first["conditions"][1];
    assert_eq!(
        (
            rbac["type"].as_str(),
            rbac["status"].as_str(),
            rbac["reason"].as_str()
        ),
        (
            Some("RBACPermissionsGranted"),
            Some("False"),
            Some("Failed")
        ),
        "{first}"
    );
    assert_eq!(
        rbac["message"],
        "Policy is not ready for reporting, missing permissions: \
        list rbac.authorization.k8s.io/v1, Resource=clusterroles; \
        watch rbac.authorization.k8s.io/v1, Resource=clusterroles."
    );
    // Asked again while missing (two reviews a pass), not rewritten.
    let deadline = Instant::now() + Duration::from_secs(10);
    while authorizer.reviews.load(Ordering::SeqCst) < 6 {
        assert!(
            Instant::now() < deadline,
            "the permissions were not asked again"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        authorizer.patches.lock().unwrap().len(),
        1,
        "an unchanged answer rewrote the status"
    );

    authorizer.allowed.store(true, Ordering::SeqCst);
    let second = patch(1).await;
    assert_eq!(second["ready"], true, "{second}");
    assert_eq!(second["conditions"][1]["status"], "True", "{second}");
    assert_eq!(
        second["conditions"][1]["message"],
        "Policy is ready for reporting."
    );
    let asked = authorizer.reviews.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        authorizer.reviews.load(Ordering::SeqCst),
        asked,
        "asked again with nothing missing"
    );
    assert_eq!(authorizer.patches.lock().unwrap().len(), 2);

    token.cancel();
    writer.await.unwrap().unwrap();
    scope.join().await.unwrap();
}

/// A writer whose recorder is gone, with a permission still missing, asks
/// again at its recheck pace, not in a loop (`changed` fails at once).
#[tokio::test]
async fn a_writer_whose_recorder_is_gone_does_not_spin() {
    use std::sync::atomic::Ordering;
    let scope = Scope::new();
    let token = CancellationToken::new();
    let (authorizer, recorder, writer) =
        roles_policy_writer(&scope, &token, Duration::from_millis(100)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while authorizer.patches.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "no status written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(recorder);
    let before = authorizer.reviews.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = authorizer.reviews.load(Ordering::SeqCst) - before;
    assert!(
        asked <= 24,
        "{asked} reviews in 500 ms with a 100 ms recheck"
    );
    token.cancel();
    writer.await.unwrap().unwrap();
    scope.join().await.unwrap();
}
