//! Many kinds on a small pool: no task is ever dropped.

use std::time::{Duration, Instant};

use leash_loader::{KindSelection, LoadOptions, NamespaceSelection};
use leash_sandbox::Faults;

use crate::support::{assert_exactly_once, client, crd_name, crds, drain, load_all, sandbox};

/// Seed 001, "pool drops tasks beyond 2x concurrency, then 5 min timeout per
/// missing result": 300 kinds at concurrency 2 (150x the queue the seed
/// had) must all load, every object, in seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_pool_drops_tasks() {
    let sb = sandbox(crds(300, 5), Faults::default(), 1).await;
    let options = LoadOptions {
        kinds: KindSelection::Names((0..300).map(crd_name).collect()),
        namespaces: NamespaceSelection::All,
        concurrency: 2,
        ..LoadOptions::default()
    };
    let start = Instant::now();
    let (objects, report) = load_all(client(&sb), options).await;
    let took = start.elapsed();
    assert!(
        report.is_complete(),
        "{:?}",
        report.failed().collect::<Vec<_>>()
    );
    assert_eq!(report.kinds.len(), 300);
    assert!(
        report.kinds.iter().all(|k| k.objects == 5),
        "a kind lost objects"
    );
    assert_eq!(assert_exactly_once(&objects), 1500);
    assert!(
        took < Duration::from_secs(20),
        "300 small kinds took {took:?}"
    );
    sb.shutdown().await.unwrap();
}

/// 1,000 kinds at concurrency 1 complete (the seed's pool could not even
/// queue them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_kinds_at_concurrency_one() {
    let sb = sandbox(crds(1000, 1), Faults::default(), 2).await;
    let options = LoadOptions {
        kinds: KindSelection::Names((0..1000).map(crd_name).collect()),
        namespaces: NamespaceSelection::All,
        concurrency: 1,
        ..LoadOptions::default()
    };
    let (objects, report) = load_all(client(&sb), options).await;
    assert!(
        report.is_complete(),
        "{:?}",
        report.failed().collect::<Vec<_>>()
    );
    assert_eq!(report.kinds.len(), 1000);
    assert_eq!(assert_exactly_once(&objects), 1000);
    sb.shutdown().await.unwrap();
}

/// `concurrency` bounds requests in flight (not just tasks): 8 one-page
/// kinds at concurrency 2 with 100 ms per request take 4 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_bounds_requests_in_flight() {
    let sb = sandbox(crds(8, 1), Faults::default(), 3).await;
    let loader = leash_loader::Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names((0..8).map(crd_name).collect()),
            namespaces: NamespaceSelection::All,
            concurrency: 2,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    sb.set_faults(Faults {
        latency: Duration::from_millis(100),
        ..Faults::default()
    });
    let start = Instant::now();
    let report = drain(loader.load(kinds, token)).await;
    let took = start.elapsed();
    assert!(report.is_complete());
    assert!(
        took >= Duration::from_millis(390),
        "more than 2 requests in flight: {took:?}"
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    sb.shutdown().await.unwrap();
}
