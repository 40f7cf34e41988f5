//! API-call entries against a local service: refresh, POST, the seed
//! regressions for `Stop()` and partial projections, churn, limits and
//! readiness.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leash_context::{EntryState, Error, Store, StoreConfig};
use leash_runtime::Scope;
use serde_json::json;

use crate::common::{
    HANG_BOUND, entry, eventually, first_data, service_entry, settle_to, shutdown_store,
    stable_baseline, start_service, when_projection, within,
};

fn config() -> StoreConfig {
    StoreConfig {
        ready_timeout: Duration::from_secs(5),
        ..StoreConfig::default()
    }
}

/// Refresh: API data changes appear after `refreshInterval`, with every
/// projection recomputed from the new data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_api_data_after_interval() {
    let scope = Scope::new();
    let (url, service) = start_service(&scope, json!({"v": 1, "items": [1, 2]})).await;
    let store = Store::new(config(), None);
    store
        .add(service_entry(
            "e",
            &url,
            "200ms",
            &[("v", "v"), ("count", "length(items)")],
        ))
        .unwrap();
    let first = first_data(&store, "e").await;
    assert_eq!(first.data, json!({"v": 1, "items": [1, 2]}));
    assert_eq!(first.projections["v"], json!(1));
    assert_eq!(first.projections["count"], json!(2));

    let changed_at = Instant::now();
    service.set_answer(json!({"v": 2, "items": [1, 2, 3]}));
    let second = eventually(
        "new data",
        Duration::from_secs(5),
        when_projection(&store, "e", "v", json!(2)),
    )
    .await;
    // Whole: projections of the same data.
    assert_eq!(second.projections["count"], json!(3));
    assert_eq!(second.data["items"], json!([1, 2, 3]));
    assert!(second.computed_at > first.computed_at);
    // It came from polling at the interval, not from something else: at most
    // about one interval (plus scheduling) after the change.
    assert!(changed_at.elapsed() < Duration::from_secs(3));
    // And polling continues at that pace (several requests, no overlap).
    let before = service.requests.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let polled = service.requests.load(Ordering::SeqCst) - before;
    assert!(
        (2..=5).contains(&polled),
        "{polled} polls in 700ms at 200ms"
    );
    let status = store.status("e").unwrap();
    assert_eq!(status.state, EntryState::Ready);
    assert!(status.last_error.is_none());
    // Polls that return the same data are not updates: two distinct answers,
    // two updates; the snapshot is the one computed from the second answer,
    // while the last refresh time moves on.
    assert_eq!(status.updates, 2, "{status:?}");
    let unchanged = first_data(&store, "e").await;
    assert_eq!(unchanged.computed_at, second.computed_at);
    assert!(status.last_refresh_time.unwrap() > second.computed_at);

    shutdown_store(&store).await;
    scope.shutdown().await.unwrap();
}

/// POST sends `data` as a JSON object body, with the service's headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_sends_data_as_json_object() {
    let scope = Scope::new();
    let (url, service) = start_service(&scope, json!({"ok": true})).await;
    let store = Store::new(config(), None);
    store
        .add(entry(&format!(
            "apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata: {{name: poster}}
spec:
  apiCall:
    method: POST
    service:
      url: {url}
      headers: [{{key: X-Leash, value: yes-please}}]
    data:
    - {{key: kind, value: Pod}}
    - {{key: labels, value: {{app: web}}}}
"
        )))
        .unwrap();
    first_data(&store, "poster").await;
    let (method, headers, body) = service.last.lock().unwrap().clone().unwrap();
    assert_eq!(method, "POST");
    assert_eq!(headers["x-leash"], "yes-please");
    assert_eq!(headers["content-type"], "application/json");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body, json!({"kind": "Pod", "labels": {"app": "web"}}));
    store.shutdown().await.unwrap();
    scope.shutdown().await.unwrap();
}

/// Seed row "`Stop()` holds the lock while waiting" (seed 000,
/// GlobalContextEntry Store, mutex-guarded wait deadlock), against a real
/// service: stop, replace and remove an API-call entry while its poller is
/// mid-request and a reader holds a snapshot; each completes within a bound
/// and the reader's snapshot stays whole. (The row's real shape, a refresh
/// that needs the lock the stopper would hold, is the store's unit test
/// `seed_stop_holds_lock`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_stop_holds_lock_mid_request() {
    let scope = Scope::new();
    let (url, service) = start_service(&scope, json!({"v": 1})).await;
    let store = Store::new(config(), None);
    let bound = Duration::from_secs(2);

    store
        .add(service_entry("e", &url, "100ms", &[("v", "v")]))
        .unwrap();
    let held = first_data(&store, "e").await;
    assert_eq!(held.projections["v"], json!(1));

    // From now on the service answers after 60 s: every poll hangs mid-request.
    service.set_delay(Duration::from_secs(60));
    service.set_answer(json!({"v": 2}));
    let mid_request = || (service.in_flight.load(Ordering::SeqCst) > 0).then_some(());

    // Replace while mid-request.
    eventually("a poll in flight", HANG_BOUND, mid_request).await;
    let reads_while_busy = store.get("e").unwrap();
    assert_eq!(
        reads_while_busy.projections["v"],
        json!(1),
        "reads do not wait for the poller"
    );
    within(
        "replace during a request",
        bound,
        store.replace(service_entry("e", &url, "100ms", &[("v", "v")])),
    )
    .await
    .unwrap();
    // The old poller's request was abandoned (its connection closed).
    eventually("old request dropped", HANG_BOUND, || {
        (service.in_flight.load(Ordering::SeqCst) <= 1).then_some(())
    })
    .await;

    // Remove while the new entry is mid-request.
    eventually("a poll in flight", HANG_BOUND, mid_request).await;
    let removed = within("remove during a request", bound, store.remove("e"))
        .await
        .unwrap();
    assert!(removed);
    assert!(matches!(store.get("e"), Err(Error::UnknownEntry(_))));

    // Stop the whole store while a third incarnation is mid-request.
    store
        .add(service_entry("e", &url, "100ms", &[("v", "v")]))
        .unwrap();
    eventually("a poll in flight", HANG_BOUND, mid_request).await;
    within("store shutdown during a request", bound, store.shutdown())
        .await
        .unwrap();
    eventually("every request dropped", HANG_BOUND, || {
        (service.in_flight.load(Ordering::SeqCst) == 0).then_some(())
    })
    .await;

    // The reader's snapshot was never touched.
    assert_eq!(held.data, json!({"v": 1}));
    assert_eq!(held.projections["v"], json!(1));
    scope.shutdown().await.unwrap();
}

/// Seed row "projections updated in place, half-written on failure" (seed
/// 000, non-atomic projection updates): a projection that fails at run time
/// on new data leaves the previous snapshot whole and visible, and the
/// status shows the error; good data later recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_partial_projection() {
    let scope = Scope::new();
    let (url, service) = start_service(&scope, json!([10, 20, 30])).await;
    let store = Store::new(config(), None);
    // `first` succeeds on any data; `count` fails on a number. `first` comes
    // first, so an in-place update would already have overwritten it.
    store
        .add(service_entry(
            "e",
            &url,
            "100ms",
            &[("first", "[0]"), ("count", "length(@)")],
        ))
        .unwrap();
    let good = first_data(&store, "e").await;
    assert_eq!(good.projections["first"], json!(10));
    assert_eq!(good.projections["count"], json!(3));

    service.set_answer(json!(42));
    let status = eventually(
        "the projection error in the status",
        Duration::from_secs(5),
        || store.status("e").filter(|s| s.last_error.is_some()),
    )
    .await;
    assert_eq!(status.state, EntryState::Stale);
    let error = status.last_error.unwrap();
    assert!(error.contains("count"), "{error}");
    // Several failed refreshes later (counted, not timed), readers still
    // see the whole old snapshot.
    let failed_once = status.errors;
    eventually("two more failed refreshes", Duration::from_secs(5), || {
        store.status("e").filter(|s| s.errors >= failed_once + 2)
    })
    .await;
    let seen = store.get("e").unwrap();
    assert_eq!(seen.data, json!([10, 20, 30]));
    assert_eq!(seen.projections["first"], json!(10), "not half-updated");
    assert_eq!(seen.projections["count"], json!(3));
    assert_eq!(seen.computed_at, good.computed_at);
    assert_eq!(store.projection("e", "first").unwrap(), json!(10));

    service.set_answer(json!([1, 2]));
    let recovered = eventually(
        "recovery",
        Duration::from_secs(5),
        when_projection(&store, "e", "count", json!(2)),
    )
    .await;
    assert_eq!(recovered.projections["first"], json!(1));
    let status = store.status("e").unwrap();
    assert_eq!(status.state, EntryState::Ready);
    assert!(status.last_error.is_none());
    assert!(status.errors >= 1);
    store.shutdown().await.unwrap();
    scope.shutdown().await.unwrap();
}

/// Churn: 1,000 add/replace/remove cycles leave the alive-task count at its
/// baseline, with the store running and after shutdown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_leaves_no_tasks() {
    let scope = Scope::new();
    let (url, _service) = start_service(&scope, json!({"v": 1})).await;
    let store = Store::new(config(), None);
    // Warm up once so lazily created runtime state exists before the baseline.
    store.add(service_entry("warm", &url, "1h", &[])).unwrap();
    store.wait_ready("warm").await.unwrap();
    store.remove("warm").await.unwrap();
    let baseline = stable_baseline().await;

    let started = Instant::now();
    for i in 0..1000 {
        let name = format!("e{}", i % 7);
        store
            .add(service_entry(&name, &url, "1h", &[("v", "v")]))
            .unwrap();
        store
            .replace(service_entry(&name, &url, "2h", &[("v", "v")]))
            .await
            .unwrap();
        assert!(store.remove(&name).await.unwrap());
    }
    assert!(store.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "churn too slow: {:?}",
        started.elapsed()
    );
    let now = settle_to(baseline).await;
    assert!(
        now <= baseline,
        "alive tasks {now} > baseline {baseline} after churn"
    );

    shutdown_store(&store).await;
    let now = settle_to(baseline).await;
    assert!(
        now <= baseline,
        "alive tasks {now} > baseline {baseline} after shutdown"
    );
    scope.shutdown().await.unwrap();
}

/// A maximum number of entries, with a clear error; replacing is allowed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_entries_is_enforced() {
    let scope = Scope::new();
    let (url, _service) = start_service(&scope, json!({})).await;
    let store = Store::new(
        StoreConfig {
            max_entries: 2,
            ..config()
        },
        None,
    );
    store.add(service_entry("a", &url, "1h", &[])).unwrap();
    store.add(service_entry("b", &url, "1h", &[])).unwrap();
    let err = store.add(service_entry("c", &url, "1h", &[])).unwrap_err();
    assert!(
        matches!(err, Error::StoreFull { ref entry, max: 2 } if entry == "c"),
        "{err}"
    );
    assert!(err.to_string().contains("full"), "{err}");
    let err = store
        .replace(service_entry("c", &url, "1h", &[]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StoreFull { .. }), "{err}");
    store
        .replace(service_entry("a", &url, "2h", &[]))
        .await
        .unwrap();
    let err = store.add(service_entry("a", &url, "1h", &[])).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err}");
    store.remove("b").await.unwrap();
    store.add(service_entry("c", &url, "1h", &[])).unwrap();
    assert_eq!(store.names(), ["a", "c"]);
    store.shutdown().await.unwrap();
    assert!(matches!(
        store.add(service_entry("d", &url, "1h", &[])),
        Err(Error::ShutDown)
    ));
    scope.shutdown().await.unwrap();
}

/// Readiness is bounded: an entry without data within the bound is marked
/// failed with the reason, and waiting does not hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_timeout_marks_failed() {
    let scope = Scope::new();
    let (url, service) = start_service(&scope, json!({"late": true})).await;
    service.set_delay(Duration::from_secs(60));
    let store = Store::new(
        StoreConfig {
            ready_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_millis(100),
            ..StoreConfig::default()
        },
        None,
    );
    store.add(service_entry("slow", &url, "50ms", &[])).unwrap();
    let err = within("wait_ready", HANG_BOUND, store.wait_ready("slow"))
        .await
        .unwrap_err();
    let Error::NotReady { entry, reason } = err else {
        panic!("expected NotReady, got {err}")
    };
    assert_eq!(entry, "slow");
    assert!(reason.contains("not ready within 1s"), "{reason}");
    assert!(
        reason.contains("timed out"),
        "the last error is the reason: {reason}"
    );
    let status = store.status("slow").unwrap();
    assert_eq!(status.state, EntryState::Failed);
    assert!(status.reason.unwrap().contains("not ready within"));
    assert!(matches!(store.get("slow"), Err(Error::NotReady { .. })));

    // Still retrying: once the service answers, the entry becomes ready.
    service.set_delay(Duration::ZERO);
    let snapshot = eventually("late data", Duration::from_secs(5), || {
        store.get("slow").ok()
    })
    .await;
    assert_eq!(snapshot.data, json!({"late": true}));
    assert_eq!(store.status("slow").unwrap().state, EntryState::Ready);
    store.shutdown().await.unwrap();
    scope.shutdown().await.unwrap();
}

/// The change stream reports updates (coalesced) and removals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_report_updates_and_removals() {
    let scope = Scope::new();
    let (url, service) = start_service(&scope, json!({"v": 1})).await;
    let store = Store::new(config(), None);
    let mut changes = store.changes();
    store
        .add(service_entry("e", &url, "100ms", &[("v", "v")]))
        .unwrap();
    let mut seen_values = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !seen_values.contains(&json!(2)) {
        assert!(Instant::now() < deadline, "saw {seen_values:?}");
        if seen_values.contains(&json!(1)) {
            service.set_answer(json!({"v": 2}));
        }
        let batch = within("changes", HANG_BOUND, changes.next()).await.unwrap();
        for change in batch {
            assert_eq!(change.name, "e");
            if let leash_context::ChangeKind::Updated {
                snapshot: Some(s), ..
            } = change.kind
            {
                seen_values.push(s.projections["v"].clone());
            }
        }
    }
    store.remove("e").await.unwrap();
    let batch = within("removal", HANG_BOUND, changes.next()).await.unwrap();
    assert!(
        batch
            .iter()
            .any(|c| c.name == "e" && matches!(c.kind, leash_context::ChangeKind::Removed)),
        "{batch:?}"
    );
    store.shutdown().await.unwrap();
    assert!(
        within("end of changes", HANG_BOUND, changes.next())
            .await
            .is_none()
    );
    scope.shutdown().await.unwrap();
}
