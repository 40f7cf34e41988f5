//! Shared helpers: a sandbox, a client without kube's retries, a load that
//! collects every object.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use leash_loader::{Load, LoadOptions, LoadReport, LoadedObject, Loader, RetryPolicy};
use leash_sandbox::generate::{GenerateSpec, generate};
use leash_sandbox::{Faults, Sandbox, SandboxConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Start a sandbox with `objects` and `faults`.
pub(crate) async fn sandbox(objects: Vec<Value>, faults: Faults, seed: u64) -> Sandbox {
    Sandbox::start(SandboxConfig {
        objects,
        faults,
        seed,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts")
}

/// A client for `sandbox` (kube's retries off).
pub(crate) fn client(sandbox: &Sandbox) -> kube::Client {
    leash_loader::client_from_config(kube::Config::new(sandbox.url().parse().unwrap())).unwrap()
}

/// `k` custom kinds with `m` objects each, over 4 generated namespaces.
pub(crate) fn crds(k: usize, m: usize) -> Vec<Value> {
    generate(&GenerateSpec {
        kinds: vec![],
        namespaces: 4,
        crds: Some((k, m)),
        seed: 0,
    })
    .unwrap()
}

/// The plural.group of custom kind `i`.
pub(crate) fn crd_name(i: usize) -> String {
    format!("widget{i:04}s.example.leash.dev")
}

/// A configmap in `namespace` with `labels`.
pub(crate) fn configmap(namespace: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": namespace, "labels": labels },
        "data": { "k": name }
    })
}

/// A namespace.
pub(crate) fn namespace(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } })
}

/// Retries fast enough for tests: tiny backoff, Retry-After capped at 5 ms.
pub(crate) fn fast_retry(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(20),
        max_retry_after: Duration::from_millis(5),
        ..RetryPolicy::default()
    }
}

/// Resolve and load everything `options` selects; every object and the report.
pub(crate) async fn load_all(
    client: kube::Client,
    options: LoadOptions,
) -> (Vec<LoadedObject>, LoadReport) {
    let loader = Loader::new(client, options).expect("valid options");
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.expect("resolves");
    let load = loader.load(kinds, token);
    let mut objects = load.objects;
    let collect = async {
        let mut all = Vec::new();
        while let Some(object) = objects.next().await {
            all.push(object);
        }
        all
    };
    let (report, all) = tokio::join!(load.report, collect);
    (all, report)
}

/// Run `load` to its end, discarding the objects page by page; its report.
pub(crate) async fn drain(load: Load) -> LoadReport {
    let mut objects = load.objects;
    let (report, ()) = tokio::join!(load.report, async {
        while objects.next_page().await.is_some() {}
    });
    report
}

/// Objects per uid: every value must be 1 for "exactly once".
pub(crate) fn uid_counts(objects: &[LoadedObject]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for o in objects {
        *counts
            .entry(o.uid().expect("every sandbox object has a uid").to_owned())
            .or_insert(0) += 1;
    }
    counts
}

/// Assert every object arrived exactly once; returns the number of objects.
#[track_caller]
pub(crate) fn assert_exactly_once(objects: &[LoadedObject]) -> usize {
    let counts = uid_counts(objects);
    let duplicated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        duplicated.is_empty(),
        "objects written more than once: {duplicated:?}"
    );
    counts.len()
}

/// Alive tasks of the current runtime.
pub(crate) fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Poll until the alive-task count is at most `baseline`, or panic at `deadline`.
pub(crate) async fn wait_for_tasks_at_most(baseline: usize, deadline: Duration) {
    let start = tokio::time::Instant::now();
    loop {
        let now = alive_tasks();
        if now <= baseline {
            return;
        }
        assert!(
            start.elapsed() < deadline,
            "alive tasks {now} > baseline {baseline} after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
