//! Kubernetes-backed entries against the in-process sandbox: Kyverno's own
//! examples, watch-driven refresh, and the self-join seed.

use std::time::Duration;

use leash_context::{EntryState, Store, StoreConfig};
use serde_json::json;

use crate::common::{
    HANG_BOUND, entry, eventually, first_data, settle_to, shutdown_store, stable_baseline,
    when_projection, within,
};
use crate::sandbox::{self, WIDGET_CRD, deployment, namespace, widget, widget_crd};

fn config() -> StoreConfig {
    StoreConfig {
        ready_timeout: Duration::from_secs(10),
        ..StoreConfig::default()
    }
}

const DEPLOYMENTS_ENTRY: &str = r#"
apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata:
  name: deployments
spec:
  kubernetesResource:
    group: apps
    version: v1
    resource: deployments
  projections:
  - name: in-x
    jmesPath: "[?metadata.namespace=='x'] | length(@)"
  - name: names
    jmesPath: "[].metadata.name"
"#;

/// Kyverno's example: a `kubernetesResource` entry over apps/v1 deployments
/// counting one namespace's deployments; Kubernetes changes appear after
/// the watch event (refresh by watch, not by polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_resource_counts_deployments_and_follows_watch() {
    let sandbox = sandbox::start(vec![
        namespace("x"),
        namespace("y"),
        deployment("x", "a"),
        deployment("x", "b"),
        deployment("y", "c"),
    ])
    .await;
    let store = Store::new(config(), Some(sandbox::client(&sandbox)));
    store.add(entry(DEPLOYMENTS_ENTRY)).unwrap();
    // The same resource limited to one namespace.
    store
        .add(entry(
            "apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata: {name: deployments-in-y}
spec:
  kubernetesResource: {group: apps, version: v1, resource: deployments, namespace: 'y'}
  projections: [{name: names, jmesPath: '[].metadata.name'}]
",
        ))
        .unwrap();
    let in_y = first_data(&store, "deployments-in-y").await;
    assert_eq!(in_y.projections["names"], json!(["c"]));
    let first = first_data(&store, "deployments").await;
    assert_eq!(first.projections["in-x"], json!(2));
    assert_eq!(first.projections["names"], json!(["a", "b", "c"]));
    // The data is the list of objects, with their kind filled in.
    let data = first.data.as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[0]["kind"], "Deployment");
    assert_eq!(data[0]["apiVersion"], "apps/v1");

    sandbox.store().create(deployment("x", "d")).unwrap();
    let after_add = eventually(
        "the added deployment",
        HANG_BOUND,
        when_projection(&store, "deployments", "in-x", json!(3)),
    )
    .await;
    assert_eq!(after_add.projections["names"], json!(["a", "b", "d", "c"]));

    sandbox
        .store()
        .delete("apps/v1", "Deployment", Some("x"), "a")
        .unwrap();
    sandbox
        .store()
        .delete("apps/v1", "Deployment", Some("y"), "c")
        .unwrap();
    let after_delete = eventually(
        "the deletions",
        HANG_BOUND,
        when_projection(&store, "deployments", "names", json!(["b", "d"])),
    )
    .await;
    assert_eq!(after_delete.projections["in-x"], json!(2));
    assert_eq!(
        store.status("deployments").unwrap().state,
        EntryState::Ready
    );

    shutdown_store(&store).await;
    sandbox.shutdown().await.unwrap();
}

/// Kyverno's example: an `apiCall` with `urlPath: /apis/apps/v1/deployments`
/// whose projection starts at `items[...]`, sent with the client's
/// credentials (the sandbox requires a token here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_call_url_path_lists_deployments() {
    let sandbox = leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig {
        token: Some("s3cret".into()),
        objects: vec![
            namespace("x"),
            namespace("y"),
            deployment("x", "a"),
            deployment("y", "c"),
            deployment("x", "b"),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut kube_config = kube::Config::new(sandbox.url().parse().unwrap());
    kube_config.auth_info.token = Some("s3cret".to_owned().into());
    let client = kube::Client::try_from(kube_config).unwrap();
    let store = Store::new(config(), Some(client));
    store
        .add(entry(
            r#"
apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata:
  name: deployments-api
spec:
  apiCall:
    urlPath: /apis/apps/v1/deployments
    refreshInterval: 200ms
  projections:
  - name: x-names
    jmesPath: "sort(items[?metadata.namespace=='x'].metadata.name)"
  - name: total
    jmesPath: "length(items)"
"#,
        ))
        .unwrap();
    let snapshot = first_data(&store, "deployments-api").await;
    assert_eq!(snapshot.projections["x-names"], json!(["a", "b"]));
    assert_eq!(snapshot.projections["total"], json!(3));
    assert_eq!(snapshot.data["kind"], "DeploymentList");

    sandbox.store().create(deployment("x", "e")).unwrap();
    eventually(
        "the next poll",
        HANG_BOUND,
        when_projection(&store, "deployments-api", "total", json!(4)),
    )
    .await;
    shutdown_store(&store).await;
    sandbox.shutdown().await.unwrap();
}

const WIDGETS_ENTRY: &str = r#"
apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata:
  name: widgets
spec:
  kubernetesResource:
    group: example.leash.dev
    version: v1
    resource: widgets
  projections:
  - name: count
    jmesPath: "length(@)"
  - name: sizes
    jmesPath: "[].spec.size"
"#;

/// Seed row "self-join in the watch error handler" (seed 000,
/// GlobalContextEntry Store): the watched resource's CRD is deleted
/// mid-run and the server answers with errors (404 on every re-watch and
/// relist). The entry reports the error, the store keeps serving the last
/// good snapshot, the entry recovers when the CRD and objects return,
/// nothing hangs, and no task leaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_watch_error_self_join() {
    let sandbox = sandbox::start(vec![
        namespace("w"),
        widget_crd(),
        widget("w", "one", 1),
        widget("w", "two", 2),
    ])
    .await;
    let baseline = stable_baseline().await;
    let client = sandbox::client(&sandbox);
    // Short server-side watch timeout: the watcher re-watches every second,
    // so it meets the missing resource quickly.
    let store = Store::new(
        StoreConfig {
            watch_timeout: Duration::from_secs(1),
            ..config()
        },
        Some(client),
    );
    store.add(entry(WIDGETS_ENTRY)).unwrap();
    let good = first_data(&store, "widgets").await;
    assert_eq!(good.projections["count"], json!(2));

    // The resource disappears: its CRD is deleted (and with it the widgets,
    // whose DELETED events may arrive before the errors, as in Kubernetes).
    sandbox
        .store()
        .delete(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            WIDGET_CRD,
        )
        .unwrap();
    let status = eventually(
        "the watch error in the status",
        Duration::from_secs(30),
        || store.status("widgets").filter(|s| s.last_error.is_some()),
    )
    .await;
    assert_eq!(status.state, EntryState::Stale, "{status:?}");
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap()
            .contains("example.leash.dev/v1/widgets"),
        "{status:?}"
    );
    // The store keeps serving the last good snapshot, promptly and whole.
    let served = within("a read during errors", Duration::from_millis(100), async {
        store.get("widgets")
    })
    .await
    .unwrap();
    let count = served.data.as_array().unwrap().len();
    assert_eq!(served.projections["count"], json!(count));
    assert!(served.computed_at <= status.last_error_time.unwrap());
    // Errors keep coming while the CRD is gone (the entry keeps retrying:
    // its error path did not stop or join its own task), and no new
    // snapshot replaces the last good one meanwhile.
    let errors = status.errors;
    let later = eventually("more retries", Duration::from_secs(30), || {
        store.status("widgets").filter(|s| s.errors > errors)
    })
    .await;
    assert_eq!(later.updates, status.updates);
    assert_eq!(
        store.get("widgets").unwrap().computed_at,
        served.computed_at
    );

    // The CRD and the objects return: the entry recovers by itself.
    sandbox.store().create(widget_crd()).unwrap();
    sandbox.store().create(widget("w", "three", 3)).unwrap();
    sandbox.store().create(widget("w", "four", 4)).unwrap();
    sandbox.store().create(widget("w", "five", 5)).unwrap();
    let recovered = eventually(
        "recovery",
        Duration::from_secs(60),
        when_projection(&store, "widgets", "count", json!(3)),
    )
    .await;
    assert_eq!(recovered.projections["sizes"], json!([5, 4, 3]));
    let status = store.status("widgets").unwrap();
    assert_eq!(status.state, EntryState::Ready, "{status:?}");
    assert!(status.last_error.is_none());

    // Stopping does not hang, and every task is gone afterwards.
    shutdown_store(&store).await;
    drop(store);
    let now = settle_to(baseline).await;
    assert!(now <= baseline, "alive tasks {now} > baseline {baseline}");
    sandbox.shutdown().await.unwrap();
}

/// A resource the server does not have: discovery fails, the entry retries
/// and, after the readiness bound, is failed with the discovery error as
/// the reason (not hung).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_resource_fails_readiness_with_the_reason() {
    let sandbox = sandbox::start(Vec::new()).await;
    let store = Store::new(
        StoreConfig {
            ready_timeout: Duration::from_secs(1),
            ..StoreConfig::default()
        },
        Some(sandbox::client(&sandbox)),
    );
    store
        .add(entry(
            "apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata: {name: ghosts}
spec:
  kubernetesResource: {group: example.leash.dev, version: v1, resource: ghosts}
",
        ))
        .unwrap();
    let err = within("wait_ready", HANG_BOUND, store.wait_ready("ghosts"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("not ready within 1s"), "{text}");
    assert!(
        text.contains("discovery of example.leash.dev/v1/ghosts failed"),
        "{text}"
    );
    assert_eq!(store.status("ghosts").unwrap().state, EntryState::Failed);
    shutdown_store(&store).await;
    sandbox.shutdown().await.unwrap();
}
