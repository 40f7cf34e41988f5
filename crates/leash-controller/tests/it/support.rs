//! Shared test helpers: a sandbox with leash's CRDs, clients, waits.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_controller::{Breaker, ConfigSource, Metrics, PolicySource, Reports, ReportsSettings};
use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::Value;

/// Generous bound for anything that could hang.
pub(crate) const HANG_BOUND: Duration = Duration::from_secs(20);

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The CRDs of deploy/crds and the example policies.
pub(crate) fn crds_and_policies() -> Vec<Value> {
    let mut v = leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")]).unwrap();
    v.extend(
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/examples/policies")])
            .unwrap(),
    );
    v
}

pub(crate) async fn sandbox(objects: Vec<Value>) -> Sandbox {
    let mut all = crds_and_policies();
    all.extend(objects);
    Sandbox::start(SandboxConfig {
        objects: all,
        ..SandboxConfig::default()
    })
    .await
    .unwrap()
}

pub(crate) fn client(sb: &Sandbox) -> kube::Client {
    leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap()
}

pub(crate) fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// The alive-task count once it stopped moving (same for 200 ms, at most 3 s).
pub(crate) async fn stable_baseline() -> usize {
    let start = Instant::now();
    let mut last = alive_tasks();
    let mut same = 0;
    while same < 10 && start.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = alive_tasks();
        if now == last {
            same += 1;
        } else {
            same = 0;
            last = now;
        }
    }
    last
}

/// Waits until alive tasks are back to `baseline` (panics after 5 s).
pub(crate) async fn back_to(baseline: usize) {
    let start = Instant::now();
    while alive_tasks() > baseline {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "alive tasks stay at {} > baseline {baseline}",
            alive_tasks()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) async fn within<T>(what: &str, bound: Duration, f: impl Future<Output = T>) -> T {
    match tokio::time::timeout(bound, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {bound:?}"),
    }
}

/// Polls `check` until it is true (panics naming `what` after `bound`).
pub(crate) async fn eventually(what: &str, bound: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < bound, "{what}: not true within {bound:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The sources and a reports component for a sandbox, not started.
pub(crate) struct Parts {
    pub(crate) client: kube::Client,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) policies: PolicySource,
    pub(crate) config: ConfigSource,
    pub(crate) breaker: Arc<Breaker>,
    /// Watches the reports' kinds (until the last holder drops it).
    pub(crate) hub: Arc<leash_controller::WatchHub>,
}

impl Parts {
    pub(crate) fn new(sb: &Sandbox) -> Parts {
        let client = client(sb);
        let metrics = Arc::new(Metrics::unregistered());
        Parts {
            hub: leash_controller::WatchHub::owned(client.clone(), metrics.clone()),
            policies: PolicySource::new(client.clone(), metrics.clone()),
            config: ConfigSource::new(client.clone(), "kyverno", "kyverno", metrics.clone()),
            breaker: Arc::new(Breaker::new(10_000, metrics.clone())),
            client,
            metrics,
        }
    }

    pub(crate) fn reports(&self, settings: ReportsSettings) -> Reports {
        Reports::new(
            self.client.clone(),
            self.policies.subscribe(),
            self.config.subscribe(),
            self.breaker.clone(),
            self.metrics.clone(),
            self.hub.clone(),
            settings,
        )
    }
}
