//! `leash serve --components admission,background`: generate triggers
//! admitted through the sandbox's admission chain get their downstreams,
//! with transient API failures and a `kill -9` in the middle.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use kube::core::{ApiResource, DynamicObject};
use leash_sandbox::{ApiRequest, Faults, Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::{BOUND, ChildGuard, free_port, leash};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn serve(url: &str, port: u16) -> ChildGuard {
    let listen = format!("127.0.0.1:{port}");
    let child = leash()
        .args(["serve", "--server", url, "--admission-listen", &listen])
        .args(["--components", "admission,background"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run leash serve");
    ChildGuard(child)
}

/// A ConfigMap `welcome` in every namespace labelled `gen: "yes"`; not
/// synchronized, so each downstream is made once, from its trigger.
const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: welcome}
spec:
  rules:
  - name: welcome
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector: {matchLabels: {gen: "yes"}}
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: welcome
      namespace: "{{ request.object.metadata.name }}"
      data:
        data: {namespace: "{{ request.object.metadata.name }}"}
"#;

fn welcome(sb: &Sandbox) -> BTreeMap<String, Value> {
    sb.store()
        .list("v1", "ConfigMap", None)
        .unwrap()
        .into_iter()
        .filter(|c| c["metadata"]["name"] == "welcome")
        .map(|c| (c["metadata"]["namespace"].as_str().unwrap().to_string(), c))
        .collect()
}

async fn wait_for(what: &str, bound: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < bound, "{what}: not true within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a namespace through the API (and so through admission) until
/// the API server has it: denials and transient errors are retried.
async fn create_namespace(api: &Api<DynamicObject>, name: &str) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"gen": "yes"}}
    }))
    .unwrap();
    let start = Instant::now();
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(_) => {}
        }
        assert!(start.elapsed() < BOUND, "namespace {name} never admitted");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// Seed row: "the CEL generating-policy handler created UpdateRequests in a
/// fire-and-forget goroutine: a trigger admitted with no UpdateRequest".
/// 200 namespaces are created through admission while 15% of requests fail
/// (UpdateRequest creation included), and `leash serve` is killed with
/// SIGKILL and restarted halfway: every admitted namespace ends with its
/// downstream, exactly one, created once; no UpdateRequest is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_fire_and_forget_update_request() {
    let mut objects =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")]).unwrap();
    objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}));
    let policy: Value = serde_saphyr::from_str(POLICY).unwrap();
    objects.push(policy);
    let sb = Sandbox::start(SandboxConfig {
        objects,
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let port = free_port();
    let mut leash_serve = serve(&sb.url(), port);
    let client =
        leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
    let ns_api: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    // The webhook is registered and generating before the run starts.
    create_namespace(&ns_api, "probe").await;
    wait_for("the probe's downstream", BOUND, || {
        welcome(&sb).contains_key("probe")
    })
    .await;

    sb.set_faults(Faults {
        fail_rate: 0.15,
        retry_after_secs: 0,
        ..Faults::default()
    });
    let names: Vec<String> = (0..200).map(|i| format!("team-{i:03}")).collect();
    let create_all = |names: Vec<String>| {
        let api = ns_api.clone();
        async move {
            // Eight concurrent creators, each in turn through its chunk.
            let creators = names.chunks(25).map(|chunk| {
                let (api, chunk) = (api.clone(), chunk.to_vec());
                async move {
                    for n in chunk {
                        create_namespace(&api, &n).await;
                    }
                }
            });
            futures::future::join_all(creators).await;
        }
    };
    create_all(names[..100].to_vec()).await;
    // Mid-queue: UpdateRequests may be pending and downstreams missing.
    leash_serve.0.kill().unwrap();
    let _ = leash_serve.0.wait();
    let mut leash_serve = serve(&sb.url(), port);
    create_all(names[100..].to_vec()).await;
    sb.set_faults(Faults::default());

    wait_for("every admitted namespace has its downstream", BOUND, || {
        let w = welcome(&sb);
        names.iter().all(|n| w.contains_key(n))
    })
    .await;
    let first = welcome(&sb);
    assert_eq!(first.len(), 201, "one downstream per namespace, no more");
    for (ns, cm) in &first {
        assert_eq!(cm["data"]["namespace"], ns.as_str());
    }
    wait_for(
        "every UpdateRequest is processed and removed",
        BOUND,
        || {
            sb.store()
                .list("kyverno.io/v2", "UpdateRequest", None)
                .unwrap()
                .is_empty()
        },
    )
    .await;
    // The UpdateRequest path was taken (created by admission, its status
    // written and the request deleted by the background component).
    let seen = sb.requests();
    for (verb, sub) in [("create", ""), ("update", "status"), ("delete", "")] {
        assert!(
            seen.iter().any(
                |r| matches!(r, ApiRequest::Resource { verb: v, resource, subresource, .. }
                if v == verb && resource == "updaterequests" && subresource == sub)
            ),
            "no {verb} {sub} of updaterequests in the request log"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = welcome(&sb);
    let uids = |m: &BTreeMap<String, Value>| -> Vec<Value> {
        m.values().map(|c| c["metadata"]["uid"].clone()).collect()
    };
    assert_eq!(uids(&first), uids(&again), "a downstream was made twice");
    leash_serve.0.kill().unwrap();
    let _ = leash_serve.0.wait();
    sb.shutdown().await.unwrap();
}
