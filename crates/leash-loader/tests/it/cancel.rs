//! Cancellation reaches in-flight requests and leaves no task alive.

use std::time::{Duration, Instant};

use leash_loader::{Error, KindSelection, LoadOptions, Loader, NamespaceSelection};
use leash_sandbox::Faults;
use tokio_util::sync::CancellationToken;

use crate::support::{alive_tasks, client, crd_name, crds, drain, sandbox, wait_for_tasks_at_most};

/// Seed 001, "workers ignore cancellation": with every request waiting on a
/// 3 s latency, cancelling the token ends the load within a second (every
/// kind reported as cancelled), and the alive-task count returns to its
/// baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_workers_ignore_cancel() {
    let sb = sandbox(crds(8, 3), Faults::default(), 11).await;
    let loader = Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names((0..8).map(crd_name).collect()),
            namespaces: NamespaceSelection::All,
            concurrency: 4,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    // Client, its pooled connection and the sandbox exist: the baseline.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let baseline = alive_tasks();

    sb.set_faults(Faults {
        latency: Duration::from_secs(3),
        ..Faults::default()
    });
    let load = loader.load(kinds, token.clone());
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let at = Instant::now();
        token.cancel();
        at
    };
    let (report, (), cancelled_at) = tokio::join!(
        load.report,
        async {
            let mut objects = load.objects;
            while objects.next_page().await.is_some() {}
        },
        cancel
    );
    let took = cancelled_at.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the load took {took:?} to end after cancellation"
    );
    assert_eq!(report.kinds.len(), 8);
    for kind in &report.kinds {
        assert!(
            matches!(kind.error, Some(Error::Cancelled)),
            "{}: {:?}",
            kind.label(),
            kind.error
        );
        assert_eq!(kind.objects, 0);
    }
    wait_for_tasks_at_most(baseline, Duration::from_secs(10)).await;
    sb.set_faults(Faults::default());
    sb.shutdown().await.unwrap();
}

/// One deadline for the whole load: kinds still waiting when it passes are
/// reported as `DeadlineExceeded`, quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_covers_the_whole_load() {
    let sb = sandbox(crds(6, 2), Faults::default(), 12).await;
    let loader = Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names((0..6).map(crd_name).collect()),
            namespaces: NamespaceSelection::All,
            concurrency: 2,
            timeout: Some(Duration::from_millis(400)),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    sb.set_faults(Faults {
        latency: Duration::from_secs(5),
        ..Faults::default()
    });
    let started = Instant::now();
    let report = drain(loader.load(kinds, token)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1400),
        "deadline of 400 ms took {took:?}"
    );
    assert!(report.timed_out);
    assert_eq!(report.kinds.len(), 6, "a kind is missing from the report");
    for kind in &report.kinds {
        assert!(
            matches!(kind.error, Some(Error::DeadlineExceeded(_))),
            "{}: {:?}",
            kind.label(),
            kind.error
        );
    }
    sb.set_faults(Faults::default());
    sb.shutdown().await.unwrap();
}

/// Without `--continue-on-error` the first failure cancels the rest; with
/// it, the other kinds complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_failure_cancels_unless_continue_on_error() {
    let sb = sandbox(crds(4, 2), Faults::default(), 13).await;
    for fail_fast in [true, false] {
        let loader = Loader::new(
            client(&sb),
            LoadOptions {
                kinds: KindSelection::Names((0..4).map(crd_name).collect()),
                namespaces: NamespaceSelection::All,
                // One request at a time, and two pages a kind: whichever
                // kind's task gets the request slot first, the 404 comes
                // before any other kind's second page (the slot is handed
                // out in turn), so no other kind can complete first.
                concurrency: 1,
                page_size: 1,
                fail_fast,
                ..LoadOptions::default()
            },
        )
        .unwrap();
        let token = CancellationToken::new();
        let mut kinds = loader.resolve(&token).await.unwrap();
        // The first kind's CRD disappears: its list gets 404 (not retried).
        let mut gone = (*kinds[0]).clone();
        gone.plural = "nosuchplural".into();
        kinds[0] = std::sync::Arc::new(gone);
        // Every request takes 100 ms, so the cancel after the 404 reaches
        // the next kind while its request is still waiting.
        sb.set_faults(Faults {
            latency: Duration::from_millis(100),
            ..Faults::default()
        });
        let report = drain(loader.load(kinds, token)).await;
        sb.set_faults(Faults::default());
        assert!(
            matches!(report.kinds[0].error, Some(Error::Status { code: 404, .. })),
            "{:?}",
            report.kinds[0].error
        );
        let rest_complete = report.kinds[1..].iter().filter(|k| k.is_complete()).count();
        if fail_fast {
            assert_eq!(
                rest_complete, 0,
                "fail-fast loaded other kinds: {:?}",
                report.kinds
            );
            assert!(
                report.kinds[1..]
                    .iter()
                    .all(|k| matches!(k.error, Some(Error::Cancelled)))
            );
        } else {
            assert_eq!(rest_complete, 3, "{:?}", report.kinds);
        }
    }
    sb.shutdown().await.unwrap();
}
