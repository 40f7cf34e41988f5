//! Test helpers: a local JSON service, entry builders, leak checks.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use leash_context::{ContextEntry, Snapshot, Store, parse_entries};
use leash_runtime::Scope;
use serde_json::Value;

/// Generous bound for things that should take milliseconds.
pub(crate) const HANG_BOUND: Duration = Duration::from_secs(10);

/// What the local service answers, and what it saw.
#[derive(Debug, Default)]
pub(crate) struct ServiceState {
    /// Answer body (JSON).
    pub(crate) answer: Mutex<Value>,
    /// Delay before answering, in milliseconds.
    pub(crate) delay_ms: AtomicU64,
    /// Requests received so far.
    pub(crate) requests: AtomicUsize,
    /// Requests currently being answered.
    pub(crate) in_flight: AtomicUsize,
    /// Method, headers and body of the last request.
    pub(crate) last: Mutex<Option<(String, HeaderMap, String)>>,
}

impl ServiceState {
    pub(crate) fn set_answer(&self, value: Value) {
        *self.answer.lock().unwrap() = value;
    }
    pub(crate) fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

/// Decrements `in_flight` when the handler ends or is dropped.
struct InFlight(Arc<ServiceState>);
impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(
    State(state): State<Arc<ServiceState>>,
    method: axum::http::Method,
    headers: HeaderMap,
    body: String,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    state.requests.fetch_add(1, Ordering::SeqCst);
    state.in_flight.fetch_add(1, Ordering::SeqCst);
    let _guard = InFlight(state.clone());
    *state.last.lock().unwrap() = Some((method.to_string(), headers, body));
    let delay = state.delay_ms.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let value = state.answer.lock().unwrap().clone();
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        value.to_string(),
    )
}

/// A local JSON service on 127.0.0.1:0, served by a task of `scope`.
pub(crate) async fn start_service(scope: &Scope, initial: Value) -> (String, Arc<ServiceState>) {
    let state = Arc::new(ServiceState::default());
    state.set_answer(initial);
    let router = Router::new()
        .fallback(any(answer))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/data", listener.local_addr().unwrap());
    let token = scope.token().clone();
    scope.spawn("test service", async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
    });
    (url, state)
}

/// One validated entry from YAML.
pub(crate) fn entry(yaml: &str) -> ContextEntry {
    let mut entries = parse_entries(yaml, "test").unwrap();
    assert_eq!(entries.len(), 1);
    entries.remove(0)
}

/// A service entry with the given projections (`name: expr` pairs).
pub(crate) fn service_entry(
    name: &str,
    url: &str,
    interval: &str,
    projections: &[(&str, &str)],
) -> ContextEntry {
    let mut yaml = format!(
        "apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata:
  name: {name}
spec:
  apiCall:
    service:
      url: {url}
    refreshInterval: {interval}
    retryLimit: 1
"
    );
    if !projections.is_empty() {
        yaml.push_str("  projections:\n");
        for (p, expr) in projections {
            yaml.push_str(&format!("  - name: {p}\n    jmesPath: \"{expr}\"\n"));
        }
    }
    entry(&yaml)
}

/// `name`'s first data, waited for at most [`HANG_BOUND`].
pub(crate) async fn first_data(store: &Store, name: &str) -> Arc<Snapshot> {
    within(
        &format!("first data of {name}"),
        HANG_BOUND,
        store.wait_ready(name),
    )
    .await
    .unwrap()
}

/// For [`eventually`]: `entry`'s snapshot once its projection `projection`
/// is `want`.
pub(crate) fn when_projection<'a>(
    store: &'a Store,
    entry: &'a str,
    projection: &'a str,
    want: Value,
) -> impl FnMut() -> Option<Arc<Snapshot>> + 'a {
    move || {
        store
            .get(entry)
            .ok()
            .filter(|s| s.projections[projection] == want)
    }
}

/// Shut the store down, within [`HANG_BOUND`].
pub(crate) async fn shutdown_store(store: &Store) {
    within("store shutdown", HANG_BOUND, store.shutdown())
        .await
        .unwrap();
}

pub(crate) fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// The alive-task count once it has stopped moving (same value for 200 ms,
/// at most 3 s): the baseline for leak checks.
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

/// Polls until the alive-task count is at most `baseline` (or the deadline).
pub(crate) async fn settle_to(baseline: usize) -> usize {
    let start = Instant::now();
    loop {
        let now = alive_tasks();
        if now <= baseline || start.elapsed() > HANG_BOUND {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `check` every 10 ms until it returns `Some`, or panics after `bound`.
pub(crate) async fn eventually<T>(
    what: &str,
    bound: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            start.elapsed() < bound,
            "timed out after {bound:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `fut`, panicking if it takes longer than `bound`.
pub(crate) async fn within<F: std::future::Future>(
    what: &str,
    bound: Duration,
    fut: F,
) -> F::Output {
    match tokio::time::timeout(bound, fut).await {
        Ok(out) => out,
        Err(_) => panic!("{what} did not complete within {bound:?}"),
    }
}
