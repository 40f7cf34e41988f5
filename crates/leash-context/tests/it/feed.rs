//! `--watch-crds`: the shipped CRD loads into the sandbox, and the feeder
//! adds, replaces and removes entries as GlobalContextEntry objects change.

use std::path::PathBuf;
use std::time::Duration;

use leash_context::{CrdFeeder, Store, StoreConfig};
use leash_runtime::Scope;
use leash_sandbox::Sandbox;
use serde_json::{Value, json};

use crate::common::{HANG_BOUND, eventually, service_entry, shutdown_store, start_service, within};
use crate::sandbox;

fn crd_manifest() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/crds/kyverno.io_globalcontextentries.yaml");
    let objects = leash_sandbox::manifests::load_manifests(&[path]).unwrap();
    assert_eq!(objects.len(), 1);
    objects.into_iter().next().unwrap()
}

fn gctx(name: &str, url: &str, projection: &str) -> Value {
    json!({
        "apiVersion": "kyverno.io/v2beta1",
        "kind": "GlobalContextEntry",
        "metadata": {"name": name},
        "spec": {
            "apiCall": {"service": {"url": url}, "refreshInterval": "1h"},
            "projections": [{"name": "p", "jmesPath": projection}]
        }
    })
}

/// A store on `sandbox` (readiness bound 5 s; at most `max_entries`, 0 for
/// no limit) holding the file entry `from-file` (`p` projects `b`).
fn store_with_file_entry(sandbox: &Sandbox, url: &str, max_entries: usize) -> Store {
    let store = Store::new(
        StoreConfig {
            max_entries,
            ready_timeout: Duration::from_secs(5),
            ..StoreConfig::default()
        },
        Some(sandbox::client(sandbox)),
    );
    store
        .add(service_entry("from-file", url, "1h", &[("p", "b")]))
        .unwrap();
    store
}

/// Run `feeder` in a child scope of `scope`; shutting that scope down stops it.
fn start_feeder(scope: &Scope, feeder: CrdFeeder) -> Scope {
    let feeder_scope = scope.child();
    let token = feeder_scope.token().clone();
    feeder_scope.spawn("feeder", feeder.run(token));
    feeder_scope
}

/// Waits until `entry`'s projection `p` is `want`.
async fn projection_becomes(store: &Store, what: &str, entry: &str, want: Value) {
    eventually(what, HANG_BOUND, || {
        store.projection(entry, "p").ok().filter(|v| v == &want)
    })
    .await;
}

/// The cluster's GlobalContextEntry object `name`.
fn cluster_entry(sandbox: &Sandbox, name: &str) -> Value {
    sandbox
        .store()
        .get("kyverno.io/v2beta1", "GlobalContextEntry", None, name)
        .unwrap()
}

/// Delete the cluster's GlobalContextEntry object `name`.
fn delete_cluster_entry(sandbox: &Sandbox, name: &str) {
    sandbox
        .store()
        .delete("kyverno.io/v2beta1", "GlobalContextEntry", None, name)
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_crds_adds_replaces_and_removes_entries() {
    let scope = Scope::new();
    let (url, _service) = start_service(&scope, json!({"a": 1, "b": 2})).await;
    let sandbox = sandbox::start(vec![crd_manifest(), gctx("from-cluster", &url, "a")]).await;
    // A file entry whose name a cluster object will also use.
    let store = store_with_file_entry(&sandbox, &url, 0);
    let feeder_scope = start_feeder(
        &scope,
        CrdFeeder::new(store.clone(), sandbox::client(&sandbox)),
    );

    // Listed at start.
    projection_becomes(&store, "the listed entry", "from-cluster", json!(1)).await;
    let first_id = store.entry_id("from-cluster").unwrap();

    // Status-only change: not restarted.
    let mut object = cluster_entry(&sandbox, "from-cluster");
    object["status"] = json!({"lastRefreshTime": "2026-01-01T00:00:00Z"});
    sandbox.store().update(object).unwrap();
    // A later change proves the status event was processed before it.
    sandbox.store().create(gctx("second", &url, "b")).unwrap();
    projection_becomes(&store, "the added entry", "second", json!(2)).await;
    assert_eq!(
        store.entry_id("from-cluster"),
        Some(first_id),
        "status change restarted the entry"
    );

    // Spec change: replaced.
    let mut object = cluster_entry(&sandbox, "from-cluster");
    object["spec"]["projections"][0]["jmesPath"] = json!("b");
    sandbox.store().update(object).unwrap();
    projection_becomes(&store, "the replaced entry", "from-cluster", json!(2)).await;
    assert_ne!(store.entry_id("from-cluster"), Some(first_id));

    // Invalid spec in the cluster: the running entry is kept.
    sandbox
        .store()
        .create(gctx("from-file", &url, "a"))
        .unwrap();
    let mut bad = gctx("bad", &url, "a");
    bad["spec"]["projections"][0]["jmesPath"] = json!("[?");
    sandbox.store().create(bad).unwrap();

    // Deletion: removed.
    delete_cluster_entry(&sandbox, "second");
    eventually("the removal", HANG_BOUND, || {
        store.entry_id("second").is_none().then_some(())
    })
    .await;
    // The file entry of the same name as a cluster object was left alone,
    // and deleting that cluster object does not remove it either.
    assert_eq!(store.projection("from-file", "p").unwrap(), json!(2));
    delete_cluster_entry(&sandbox, "from-file");
    // A later change proves the invalid entry and the deletion were seen.
    sandbox.store().create(gctx("probe", &url, "a")).unwrap();
    projection_becomes(&store, "the probe entry", "probe", json!(1)).await;
    assert!(
        store.entry_id("bad").is_none(),
        "an invalid entry was added"
    );
    assert_eq!(store.names(), ["from-cluster", "from-file", "probe"]);

    within("feeder stop", HANG_BOUND, feeder_scope.shutdown())
        .await
        .unwrap();
    shutdown_store(&store).await;
    sandbox.shutdown().await.unwrap();
    scope.shutdown().await.unwrap();
}

/// `leash context --once --watch-crds` reads the cluster's entries once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_cluster_entries_reads_every_version() {
    let sandbox = sandbox::start(vec![crd_manifest()]).await;
    for (name, version) in [("a", "v2alpha1"), ("b", "v2beta1"), ("c", "v2")] {
        let mut object = gctx(name, "http://127.0.0.1:9/x", "@");
        object["apiVersion"] = json!(format!("kyverno.io/{version}"));
        sandbox.store().create(object).unwrap();
    }
    let mut bad = gctx("bad", "http://127.0.0.1:9/x", "@");
    bad["spec"]["projections"][0]["jmesPath"] = json!("[?");
    sandbox.store().create(bad).unwrap();
    let (entries, errors) = leash_context::list_cluster_entries(&sandbox::client(&sandbox))
        .await
        .unwrap();
    let mut names: Vec<&str> = entries.iter().map(|e| e.name()).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(errors.len(), 1);
    let text = errors[0].to_string();
    assert!(
        text.contains("\"bad\"") && text.contains("spec.projections[0].jmesPath"),
        "{text}"
    );
    sandbox.shutdown().await.unwrap();
}

/// Kyverno requeues entries refused by a full store; here they are kept
/// aside and retried after a removal and on a timer, never dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_crds_retries_entries_refused_by_a_full_store() {
    let scope = Scope::new();
    let (url, _service) = start_service(&scope, json!({"a": 1, "b": 2})).await;
    let sandbox = sandbox::start(vec![crd_manifest()]).await;
    // The only slot is taken by a file entry.
    let store = store_with_file_entry(&sandbox, &url, 1);
    sandbox.store().create(gctx("one", &url, "a")).unwrap();
    let feeder = CrdFeeder::new(store.clone(), sandbox::client(&sandbox))
        .full_retry(Duration::from_millis(200));
    let mut handled = feeder.events_handled();
    let feeder_scope = start_feeder(&scope, feeder);
    // The initial list handled (Init, "one", InitDone): "one" was refused.
    within(
        "the initial list",
        HANG_BOUND,
        handled.wait_for(|n| *n >= 3),
    )
    .await
    .unwrap();
    assert_eq!(store.names(), ["from-file"], "the store is full");

    // Room appears outside the feeder: the timer retry adds the entry.
    store.remove("from-file").await.unwrap();
    projection_becomes(&store, "the deferred entry", "one", json!(1)).await;

    // Full again; a removal through the feeder admits the waiting one.
    let before = *handled.borrow_and_update();
    sandbox.store().create(gctx("two", &url, "b")).unwrap();
    within(
        "the new object handled",
        HANG_BOUND,
        handled.wait_for(|n| *n > before),
    )
    .await
    .unwrap();
    assert_eq!(store.names(), ["one"]);
    delete_cluster_entry(&sandbox, "one");
    projection_becomes(&store, "the second deferred entry", "two", json!(2)).await;
    assert_eq!(store.names(), ["two"]);

    within("feeder stop", HANG_BOUND, feeder_scope.shutdown())
        .await
        .unwrap();
    store.shutdown().await.unwrap();
    sandbox.shutdown().await.unwrap();
    scope.shutdown().await.unwrap();
}
