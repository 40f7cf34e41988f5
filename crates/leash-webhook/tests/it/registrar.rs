//! The registrar against the sandbox.
//!
//! The sandbox on this branch does not serve `admissionregistration.k8s.io`;
//! the test then registers the kind with a CustomResourceDefinition (only
//! when the sandbox does not know it), so the registrar's real requests
//! (get, create, replace with resourceVersion, delete) go through kube-rs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_runtime::{CancellationToken, Scope};
use leash_sandbox::{Sandbox, SandboxConfig};
use leash_webhook::{Registrar, Settings};
use serde_json::Value;
use tokio::sync::watch;

use crate::common::*;
use crate::readiness::crd;

const API: &str = "admissionregistration.k8s.io/v1";
const KIND: &str = "ValidatingWebhookConfiguration";
const MUTATING: &str = "MutatingWebhookConfiguration";

async fn wait_for(sandbox: &Sandbox, what: &str, f: impl Fn(Option<Value>) -> bool) {
    wait_for_kind(sandbox, KIND, "leash-test-cfg", what, f).await
}

async fn wait_for_kind(
    sandbox: &Sandbox,
    kind: &str,
    name: &str,
    what: &str,
    f: impl Fn(Option<Value>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = sandbox.store().get(API, kind, None, name).ok();
        if f(got.clone()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_updates_and_cleans_up() {
    let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
    if sandbox.store().list(API, KIND, None).is_err() {
        sandbox
            .store()
            .create(crd(
                "admissionregistration.k8s.io",
                KIND,
                "validatingwebhookconfigurations",
                "Cluster",
            ))
            .unwrap();
    }
    let client = kube::Client::try_from(kube::Config::new(sandbox.url().parse().unwrap())).unwrap();
    let (tx, rx) = watch::channel(Arc::new(engine(&[REQUIRE_TEAM])));
    let settings = Settings {
        configuration_name: "leash-test-cfg".into(),
        mutating_configuration_name: "leash-test-mutating-cfg".into(),
        cleanup_webhooks: true,
        timeout_seconds: 5,
        ..Settings::default()
    };
    let registrar = Registrar::new(
        client,
        &settings,
        "https://127.0.0.1:9443/validate".into(),
        "CA PEM".into(),
        rx,
    )
    .with_retry_interval(Duration::from_millis(50));
    let registered = registrar.registered();
    assert!(!*registered.borrow(), "nothing written yet");
    let scope = Scope::new();
    let token = CancellationToken::new();
    let t = token.clone();
    let run = scope.spawn_with_output(async move { registrar.run(t).await });
    wait_for(&sandbox, "registered", |c| {
        c.is_some_and(|c| {
            c["webhooks"][0]["name"] == "validate.kyverno.svc-fail"
                && c["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/validate/fail"
                && c["webhooks"][0]["timeoutSeconds"] == 5
                && c["webhooks"][0]["rules"][0]["resources"]
                    == serde_json::json!([
                        "pods",
                        "pods/ephemeralcontainers",
                        "replicationcontrollers"
                    ])
        })
    })
    .await;
    // The flag is raised once both configurations are written (the
    // validating one is seen first): wait for it, bounded.
    // (The `Ref` wait_for returns holds the watch's read lock: dropped
    // at once, or the registrar's next send would wait for it.)
    let mut flag = registered.clone();
    let raised = tokio::time::timeout(Duration::from_secs(10), async {
        flag.wait_for(|r| *r).await.is_ok()
    })
    .await;
    assert_eq!(
        raised,
        Ok(true),
        "the configurations are written: registered"
    );
    // No mutating policy yet: the mutating configuration has no webhooks.
    wait_for_kind(
        &sandbox,
        MUTATING,
        "leash-test-mutating-cfg",
        "mutating registered",
        |c| c.is_some_and(|c| c["webhooks"].as_array().is_none_or(Vec::is_empty)),
    )
    .await;
    // A policy for Namespaces arrives: the rules follow.
    let deploy = REQUIRE_TEAM
        .replace("require-team", "require-team-ns")
        .replace("kinds: [Pod]", "kinds: [Namespace]");
    tx.send(Arc::new(engine(&[REQUIRE_TEAM, &deploy]))).unwrap();
    wait_for(&sandbox, "updated", |c| {
        c.is_some_and(|c| {
            c["webhooks"][0]["rules"].as_array().is_some_and(|r| {
                r.iter().any(|r| {
                    r["resources"] == serde_json::json!(["namespaces"]) && r["scope"] == "Cluster"
                })
            })
        })
    })
    .await;
    // A mutating policy arrives: the mutating webhook appears, at the
    // sibling path, reinvoked if needed, sent creates and updates only.
    let mutate = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-team}
spec:
  rules:
  - name: default-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge: {metadata: {labels: {+(team): platform}}}
"#;
    tx.send(Arc::new(engine(&[REQUIRE_TEAM, &deploy, mutate])))
        .unwrap();
    wait_for_kind(
        &sandbox,
        MUTATING,
        "leash-test-mutating-cfg",
        "mutating webhook added",
        |c| {
            c.is_some_and(|c| {
                let h = &c["webhooks"][0];
                h["name"] == "mutate.kyverno.svc-fail"
                    && h["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate/fail"
                    && h["reinvocationPolicy"] == "IfNeeded"
                    && h["rules"][0]["operations"] == serde_json::json!(["CREATE", "UPDATE"])
                    // The rule's autogen variants bring the pod controllers.
                    && h["rules"][0]["resources"]
                        == serde_json::json!([
                            "pods",
                            "pods/ephemeralcontainers",
                            "replicationcontrollers"
                        ])
                    && h["rules"][1]["resources"]
                        == serde_json::json!([
                            "daemonsets",
                            "deployments",
                            "replicasets",
                            "statefulsets"
                        ])
            })
        },
    )
    .await;
    token.cancel();
    run.await.unwrap().expect("cleanup succeeded");
    wait_for(&sandbox, "deleted on clean shutdown", |c| c.is_none()).await;
    wait_for_kind(
        &sandbox,
        MUTATING,
        "leash-test-mutating-cfg",
        "mutating deleted on clean shutdown",
        |c| c.is_none(),
    )
    .await;
    scope.shutdown().await.unwrap();
    sandbox.shutdown().await.unwrap();
}
