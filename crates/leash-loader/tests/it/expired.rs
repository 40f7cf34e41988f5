//! 410 Expired mid-list: continue with the fresh token, or restart.

use std::time::Duration;

use futures::StreamExt;
use leash_loader::{
    Error, KindSelection, LoadOptions, LoadReport, LoadedObject, Loader, NamespaceSelection,
};
use leash_sandbox::{Faults, Sandbox};
use tokio_util::sync::CancellationToken;

use crate::support::{assert_exactly_once, client, crd_name, crds, fast_retry, sandbox};

/// 60 objects in pages of 5 (12 pages) at 20 ms per request: ~240 ms of
/// paging against a 70 ms continue TTL.
fn short_ttl() -> Faults {
    Faults {
        latency: Duration::from_millis(20),
        continue_ttl: Duration::from_millis(70),
        ..Faults::default()
    }
}

fn options(consistent: bool, max_restarts: u32) -> LoadOptions {
    LoadOptions {
        kinds: KindSelection::Names(vec![crd_name(0)]),
        namespaces: NamespaceSelection::All,
        page_size: 5,
        consistent,
        max_restarts,
        retry: fast_retry(3),
        ..LoadOptions::default()
    }
}

/// Load with `options`; `during` runs alongside (e.g. to change faults).
async fn load_with(
    sb: &Sandbox,
    options: LoadOptions,
    during: impl Future<Output = ()>,
) -> (Vec<LoadedObject>, LoadReport) {
    let loader = Loader::new(client(sb), options).unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    let load = loader.load(kinds, token);
    let mut objects = load.objects;
    let collect = async {
        let mut all = Vec::new();
        while let Some(o) = objects.next().await {
            all.push(o);
        }
        all
    };
    let (report, all, ()) = tokio::join!(load.report, collect, during);
    (all, report)
}

/// Seed 001, "expired continue unhandled": by default the list resumes with
/// the server's fresh token; every object exactly once; the kind is marked
/// as read across snapshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_expired_continue() {
    let sb = sandbox(crds(1, 60), short_ttl(), 7).await;
    let (objects, report) = load_with(&sb, options(false, 3), async {}).await;
    let kind = &report.kinds[0];
    assert!(kind.is_complete(), "{:?}", kind.error);
    assert!(kind.across_snapshots, "the TTL never expired: {kind:?}");
    assert_eq!(kind.restarts, 0);
    assert_eq!(assert_exactly_once(&objects), 60);
    assert_eq!(objects.len(), 60);
    sb.shutdown().await.unwrap();
}

/// With `consistent`, an expiring list restarts from a new snapshot; when
/// every snapshot expires it fails loudly after `max_restarts`, never
/// silently partial, and still writes nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_expired_continue_consistent_fails_loudly() {
    let sb = sandbox(crds(1, 60), short_ttl(), 8).await;
    let (objects, report) = load_with(&sb, options(true, 2), async {}).await;
    let kind = &report.kinds[0];
    match &kind.error {
        Some(Error::ExpiredTooOften { restarts: 2, .. }) => {}
        other => panic!("expected ExpiredTooOften after 2 restarts, got {other:?}"),
    }
    assert_eq!(kind.restarts, 3);
    assert!(!kind.across_snapshots);
    assert!(!report.is_complete());
    let written = assert_exactly_once(&objects);
    assert!(
        written < 60,
        "an expiring list cannot have read everything: {written}"
    );
    sb.shutdown().await.unwrap();
}

/// With `consistent`, a restart that gets a long enough TTL completes: all
/// objects, exactly once, at least one restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_expired_continue_consistent_restarts_and_completes() {
    let sb = sandbox(crds(1, 60), short_ttl(), 9).await;
    let relax = async {
        // Once the sandbox has answered the first expired token (a readiness
        // signal, not a clock), tokens live long enough.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while sb.expired_continues() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no continue token expired"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        sb.set_faults(Faults {
            latency: Duration::from_millis(20),
            ..Faults::default()
        });
    };
    let (objects, report) = load_with(&sb, options(true, 5), relax).await;
    let kind = &report.kinds[0];
    assert!(kind.is_complete(), "{:?}", kind.error);
    assert!(kind.restarts >= 1, "never restarted: {kind:?}");
    assert!(!kind.across_snapshots);
    assert_eq!(assert_exactly_once(&objects), 60);
    assert_eq!(objects.len(), 60);
    sb.shutdown().await.unwrap();
}

/// Issue 38 #6, "an expired re-fetch is a malformed response": a page whose
/// items arrive cut short (`truncate_rate`) is fetched again with the
/// continue token it was fetched with; when that token expired meanwhile
/// (a 100 ms TTL), the 410 must resume the list with the Status's fresh
/// token, as any other 410 does, not fail the kind as "malformed response
/// (after 2 attempts)" whatever the retries. And a 410 Status cut short is
/// fetched again rather than read as one without a fresh token (which
/// restarts the kind, and fails it after `max_restarts`). Five seeded loads
/// of 3000 pods in 30 pages (the issue's `leash sandbox --generate
/// pods=3000 --truncate-rate 0.1 --continue-ttl 100ms --latency 30ms`,
/// `--page-size 100 --retries 20`): each completes with every pod exactly
/// once and no restart. Before the fix 4 runs in 5 failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_expired_refetch_of_a_truncated_page_resumes() {
    let pods = leash_sandbox::generate::generate(&leash_sandbox::generate::GenerateSpec {
        kinds: vec![("pods".into(), 3000)],
        namespaces: 4,
        crds: None,
        seed: 5,
    })
    .unwrap();
    let faults = Faults {
        latency: Duration::from_millis(30),
        truncate_rate: 0.1,
        continue_ttl: Duration::from_millis(100),
        ..Faults::default()
    };
    let options = LoadOptions {
        kinds: KindSelection::Names(vec!["pods".into()]),
        namespaces: NamespaceSelection::All,
        page_size: 100,
        retry: fast_retry(20),
        ..LoadOptions::default()
    };
    for seed in 1..=5 {
        let sb = sandbox(pods.clone(), faults.clone(), seed).await;
        let (objects, report) = load_with(&sb, options.clone(), async {}).await;
        let kind = &report.kinds[0];
        assert!(kind.is_complete(), "seed {seed}: {:?}", kind.error);
        assert!(
            sb.expired_continues() > 0,
            "seed {seed}: no continue token expired"
        );
        assert!(kind.retries > 0, "seed {seed}: nothing was truncated");
        assert_eq!(kind.restarts, 0, "seed {seed}: {kind:?}");
        assert_eq!(assert_exactly_once(&objects), 3000, "seed {seed}");
        assert_eq!(objects.len(), 3000, "seed {seed}");
        sb.shutdown().await.unwrap();
    }
}
