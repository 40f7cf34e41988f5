//! The audit hand-off under failing and slow report writes.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use leash_webhook::{AuditSettings, LossReason, Settings};

use crate::common::*;

fn audit_set() -> leash_policy::Engine {
    engine(&[NO_LATEST])
}

async fn admit(s: &TestServer, prefix: &str, n: usize) -> BTreeSet<String> {
    let pool = Pool::new(&s.client, 20).await;
    let answers = futures::future::join_all((0..n).map(|i| {
        let pool = pool.clone();
        let uid = format!("{prefix}-{i:04}");
        let body = serde_json::to_vec(&review(
            &uid,
            "CREATE",
            &pod(&format!("p{i}"), "prod", Some("a"), "nginx:latest"),
        ))
        .unwrap();
        async move {
            let (status, body) = pool.post("/validate", body).await;
            assert_eq!(status, 200);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["response"]["allowed"], true, "{v}");
            uid
        }
    }))
    .await;
    answers.into_iter().collect()
}

/// The answer never waits on report writing: with every write taking 5 s,
/// a review is still answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_do_not_wait_on_report_writes() {
    let s = TestServer::start(audit_set()).await;
    s.sink.delay_ms.store(5_000, Ordering::Relaxed);
    let pool = Pool::new(&s.client, 1).await;
    for i in 0..3 {
        let body = serde_json::to_vec(&review(
            &format!("w{i}"),
            "CREATE",
            &pod("p", "prod", Some("a"), "nginx:latest"),
        ))
        .unwrap();
        let start = Instant::now();
        let (status, _) = pool.post("/validate", body).await;
        assert_eq!(status, 200);
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "answer took {:?}",
            start.elapsed()
        );
    }
    s.sink.delay_ms.store(0, Ordering::Relaxed);
    let summary = s.stop().await;
    assert_eq!(summary.written + summary.lost.len() as u64, 3);
}

/// Seed: Kyverno's dummy WaitGroup and fire-and-forget background work. The
/// report sink fails half of its writes for a while: every audit result of
/// every admitted request is still written, each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_fire_and_forget_background() {
    let s = TestServer::start(audit_set()).await;
    s.sink.fail_per_mille.store(500, Ordering::Relaxed);
    let admitted = admit(&s, "a", 200).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The failures stop: the retries get everything through.
    s.sink.fail_per_mille.store(0, Ordering::Relaxed);
    let sink = s.sink.clone();
    let summary = s.stop().await;
    let written = sink.written_uids();
    assert_eq!(written.iter().cloned().collect::<BTreeSet<_>>(), admitted);
    assert_eq!(written.len(), admitted.len(), "each record written once");
    assert!(summary.lost.is_empty() && sink.lost_uids().is_empty());
    assert_eq!(summary.written, 200);
    assert!(
        sink.attempts.load(Ordering::Relaxed) > 200,
        "some writes failed and were retried"
    );
    for r in sink.written.lock().unwrap().iter() {
        assert_eq!(r.results.len(), 1);
        assert_eq!(r.results[0].policy.as_ref(), "no-latest");
    }
}

/// The same seed, with a shutdown in the middle: the drain stops at the
/// deadline, and the records reported lost (by name, to the sink and in the
/// summary) are exactly the ones not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_fire_and_forget_background_shutdown_midway() {
    let opts = Options {
        settings: Settings {
            shutdown_timeout: Duration::from_millis(300),
            audit: AuditSettings {
                concurrency: 4,
                initial_backoff: Duration::from_millis(5),
                max_backoff: Duration::from_millis(40),
                ..AuditSettings::default()
            },
            ..Options::default().settings
        },
        ..Options::default()
    };
    let s = TestServer::start_with(audit_set(), opts).await;
    s.sink.fail_per_mille.store(500, Ordering::Relaxed);
    s.sink.delay_ms.store(20, Ordering::Relaxed);
    let admitted = admit(&s, "b", 150).await;
    let sink = s.sink.clone();
    let summary = s.stop().await;
    let written: BTreeSet<String> = sink.written_uids().into_iter().collect();
    let lost: BTreeSet<String> = sink.lost_uids().into_iter().collect();
    assert!(
        !lost.is_empty(),
        "the deadline cut the drain short (else the test proves nothing)"
    );
    assert!(
        written.is_disjoint(&lost),
        "{:?}",
        written.intersection(&lost).collect::<Vec<_>>()
    );
    let unwritten: BTreeSet<String> = admitted.difference(&written).cloned().collect();
    assert_eq!(
        lost, unwritten,
        "the names reported lost are exactly the unwritten ones"
    );
    let summary_lost: BTreeSet<String> = summary.lost.iter().map(|r| r.uid.clone()).collect();
    assert_eq!(summary_lost, unwritten);
    assert!(
        sink.lost
            .lock()
            .unwrap()
            .iter()
            .all(|(_, why)| *why == LossReason::ShutdownDeadline)
    );
    assert_eq!(summary.written as usize, written.len());
}

/// A full queue never delays an answer; each record that does not fit is
/// reported lost by name (`QueueFull`), the others are written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_queue_reports_each_loss() {
    let opts = Options {
        settings: Settings {
            audit: AuditSettings {
                capacity: 4,
                concurrency: 1,
                ..Options::default().settings.audit
            },
            ..Options::default().settings
        },
        ..Options::default()
    };
    let s = TestServer::start_with(audit_set(), opts).await;
    s.sink.delay_ms.store(100, Ordering::Relaxed);
    let admitted = admit(&s, "c", 40).await;
    let sink = s.sink.clone();
    let summary = s.stop().await;
    let written: BTreeSet<String> = sink.written_uids().into_iter().collect();
    let lost: BTreeSet<String> = sink.lost_uids().into_iter().collect();
    assert!(!lost.is_empty());
    assert!(summary.lost.is_empty(), "what was queued was drained");
    assert!(
        sink.lost
            .lock()
            .unwrap()
            .iter()
            .all(|(_, why)| *why == LossReason::QueueFull)
    );
    assert_eq!(
        written.union(&lost).cloned().collect::<BTreeSet<_>>(),
        admitted
    );
    assert!(written.is_disjoint(&lost));
}

/// With admission reports off (Kyverno's `--admissionReports=false`),
/// requests are evaluated and answered as before (an Enforce failure
/// denies, an Audit failure allows) and nothing reaches the audit queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_reports_off_evaluates_and_queues_nothing() {
    let opts = Options {
        settings: Settings {
            reports: false,
            ..Options::default().settings
        },
        ..Options::default()
    };
    let s = TestServer::start_with(engine(&[NO_LATEST, REQUIRE_TEAM]), opts).await;
    let admitted = admit(&s, "off", 20).await;
    assert_eq!(admitted.len(), 20);
    let denied = s
        .review(
            "/validate",
            &review("d", "CREATE", &pod("web", "prod", None, "nginx:1")),
        )
        .await;
    assert_eq!(response(&denied)["allowed"], false, "{denied}");
    let sink = s.sink.clone();
    let summary = s.stop().await;
    assert_eq!(summary.written, 0);
    assert!(summary.lost.is_empty());
    assert!(sink.written_uids().is_empty() && sink.lost_uids().is_empty());
}
