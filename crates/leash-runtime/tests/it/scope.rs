//! Scope: ownership, cancellation, joins and failure reporting.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leash_runtime::{MAX_KEPT_ERRORS, Scope, TaskError, cancellable, scoped};
use tokio::time::timeout;

use crate::support::{HANG, alive_tasks, settle_alive_tasks};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_task_errors_and_panics() {
    let scope = Scope::new();
    scope.spawn("ok", async { Ok::<(), Infallible>(()) });
    scope.spawn("fails", async { Err::<(), _>("disk on fire") });
    scope.spawn("panics", async {
        panic!("boom");
        #[allow(unreachable_code)]
        Ok::<(), Infallible>(())
    });
    let token = scope.token().clone();
    scope.spawn("waits", async move {
        token.cancelled().await;
        Ok::<(), Infallible>(())
    });
    let err = timeout(HANG, scope.shutdown()).await.unwrap().unwrap_err();
    assert_eq!(err.errors.len(), 2, "{err}");
    let mut seen: Vec<String> = err.errors.iter().map(ToString::to_string).collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            "task `fails` failed: disk on fire",
            "task `panics` panicked: boom"
        ]
    );
    assert!(matches!(
        err.errors.iter().find(|e| e.name() == "panics"),
        Some(TaskError::Panicked { message, .. }) if message == "boom"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_waits_without_cancelling() {
    let scope = Scope::new();
    let done = Arc::new(AtomicBool::new(false));
    let token = scope.token().clone();
    let d = done.clone();
    scope.spawn("slow", async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        // join must not have cancelled us.
        assert!(!token.is_cancelled());
        d.store(true, Ordering::SeqCst);
        Ok::<(), Infallible>(())
    });
    timeout(HANG, scope.join()).await.unwrap().unwrap();
    assert!(done.load(Ordering::SeqCst));
}

/// Seed row: "`createRules` returns before `wg.Wait()`". A producer spawns
/// tasks that append to a shared vector and fails midway (`?`-style early
/// return); every task spawned before the failure has finished (and
/// appended) when the producer returns, and no task is left alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_early_return_skips_join() {
    async fn create_rules(
        n: usize,
        fail_at: usize,
        rules: Arc<Mutex<Vec<usize>>>,
    ) -> Result<(), String> {
        let (produced, joined) = scoped(|scope| async move {
            for i in 0..n {
                if i == fail_at {
                    return Err(format!("fuzz input exhausted at rule {i}"));
                }
                let rules = rules.clone();
                scope.spawn(format!("rule-{i}"), async move {
                    // Late enough that an unjoined producer returns first.
                    tokio::time::sleep(Duration::from_millis(20 + (i as u64 % 5) * 5)).await;
                    rules.lock().unwrap().push(i);
                    Ok::<(), Infallible>(())
                });
            }
            Ok(())
        })
        .await;
        joined.map_err(|e| e.to_string())?;
        produced
    }

    let baseline = alive_tasks();
    let rules = Arc::new(Mutex::new(Vec::new()));
    let err = timeout(HANG, create_rules(100, 60, rules.clone()))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.contains("rule 60"), "{err}");
    // Returned with an error, yet all 60 spawned tasks had appended first.
    let mut at_return = rules.lock().unwrap().clone();
    at_return.sort_unstable();
    assert_eq!(at_return, (0..60).collect::<Vec<_>>());
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;
    // No writer is left to touch the vector after the producer returned.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(rules.lock().unwrap().len(), 60);
}

/// The early-return test above checks liveness; this one checks the data:
/// with `Scope::scoped`, the appends of all tasks spawned before the failure
/// are visible the moment the producer returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_joins_on_early_return_before_returning() {
    let parent = Scope::new();
    let rules = Arc::new(Mutex::new(Vec::new()));
    let shared = rules.clone();
    let (out, joined) = parent
        .scoped(|scope| async move {
            for i in 0..40usize {
                if i == 25 {
                    return Err("failed midway");
                }
                let rules = shared.clone();
                scope.spawn("rule", async move {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    rules.lock().unwrap().push(i);
                    Ok::<(), Infallible>(())
                });
            }
            Ok(())
        })
        .await;
    assert_eq!(out, Err("failed midway"));
    joined.unwrap();
    assert_eq!(rules.lock().unwrap().len(), 25);
    parent.join().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_scope_cancelled_by_parent_not_the_reverse() {
    let parent = Scope::new();
    let child = parent.child();
    let grandchild = child.child();

    let other_child = parent.child();
    other_child.cancel();
    assert!(!parent.is_cancelled(), "child cancel must not reach parent");
    assert!(!child.is_cancelled());

    let token = grandchild.token().clone();
    grandchild.spawn("waits", async move {
        token.cancelled().await;
        Ok::<(), Infallible>(())
    });
    parent.cancel();
    assert!(child.is_cancelled() && grandchild.is_cancelled());
    timeout(HANG, grandchild.join()).await.unwrap().unwrap();
    timeout(HANG, parent.join()).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_parent_token_follows_the_token() {
    let root = tokio_util::sync::CancellationToken::new();
    let scope = Scope::with_parent_token(&root);
    scope.cancel();
    assert!(!root.is_cancelled());
    let scope = Scope::with_parent_token(&root);
    root.cancel();
    assert!(scope.is_cancelled());
}

/// The parent's join waits for tasks of a child scope that is still alive
/// and was never joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_join_waits_for_child_tasks() {
    let parent = Scope::new();
    let child = parent.child();
    let grandchild = child.child();
    let done = Arc::new(AtomicUsize::new(0));
    for scope in [&child, &grandchild] {
        let done = done.clone();
        scope.spawn("slow", async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.fetch_add(1, Ordering::SeqCst);
            Ok::<(), Infallible>(())
        });
    }
    timeout(HANG, parent.join()).await.unwrap().unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 2);
    drop((child, grandchild));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_cancels_scope_tasks() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let token = scope.token().clone();
    scope.spawn("waits", async move {
        token.cancelled().await;
        let _ = tx.send(());
        Ok::<(), Infallible>(())
    });
    let child = scope.child();
    child.spawn("forever", std::future::pending::<Result<(), Infallible>>());
    let handle = child.handle();
    let racer = child.spawn_with_output(async move {
        handle
            .run_until_cancelled(std::future::pending::<()>())
            .await
    });
    drop(child);
    drop(scope);
    timeout(Duration::from_secs(1), rx).await.unwrap().unwrap();
    assert_eq!(timeout(HANG, racer).await.unwrap().unwrap(), None);
    // The `forever` task ignores its token: dropping the scope cancels but
    // does not abort. It stays alive, which is why owners shut down scopes
    // and tasks race their awaits against the token.
    assert!(alive_tasks() > baseline);
}

/// A task ignoring cancellation is still owned: shutdown waits for the rest,
/// run_until_cancelled is the tool that makes a pending await stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_until_cancelled_stops_pending_awaits() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    for i in 0..50 {
        let handle = scope.handle();
        scope.spawn(format!("io-{i}"), async move {
            // An I/O wait that never completes on its own.
            let out = handle
                .run_until_cancelled(std::future::pending::<u32>())
                .await;
            assert_eq!(out, None);
            Ok::<(), Infallible>(())
        });
    }
    let started = std::time::Instant::now();
    timeout(Duration::from_secs(1), scope.shutdown())
        .await
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;

    let token = tokio_util::sync::CancellationToken::new();
    assert_eq!(cancellable(&token, async { 7 }).await, Some(7));
    token.cancel();
    assert_eq!(cancellable(&token, async { 7 }).await, None);
}

/// Failures of a child scope dropped without join reach the parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_child_forwards_failures_to_parent() {
    let parent = Scope::new();
    let child = parent.child();
    // Fails before the child is dropped (buffered in the child's channel)...
    child.spawn("early", async { Err::<(), _>("early failure") });
    tokio::time::sleep(Duration::from_millis(20)).await;
    // ...and after (reported straight to the parent).
    let token = child.token().clone();
    child.spawn("late", async move {
        token.cancelled().await;
        Err::<(), _>("late failure")
    });
    drop(child);
    let err = timeout(HANG, parent.join()).await.unwrap().unwrap_err();
    let mut names: Vec<&str> = err.errors.iter().map(TaskError::name).collect();
    names.sort_unstable();
    assert_eq!(names, ["early", "late"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_with_output_returns_output_and_is_joined() {
    let scope = Scope::new();
    let h = scope.spawn_with_output(async { 40 + 2 });
    assert_eq!(h.await.unwrap(), 42);
    let p = scope.spawn_with_output(async {
        panic!("inside");
    });
    let err = p.await.unwrap_err();
    assert!(err.is_panic());
    timeout(HANG, scope.join()).await.unwrap().unwrap();
}

/// Issue 11: a long-lived scope with a task per connection must not buffer
/// every failure until it is joined. It keeps the first `MAX_KEPT_ERRORS`,
/// counts the rest (logged when they happen), and so does a parent that
/// receives a dropped child's failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_beyond_the_bound_are_counted_not_kept() {
    let extra = 25;
    let scope = Scope::new();
    for i in 0..MAX_KEPT_ERRORS + extra {
        scope.spawn(format!("conn-{i}"), async { Err::<(), _>("reset by peer") });
    }
    let err = timeout(HANG, scope.join()).await.unwrap().unwrap_err();
    assert_eq!(err.errors.len(), MAX_KEPT_ERRORS);
    assert_eq!(err.omitted, extra as u64);
    assert_eq!(err.total(), (MAX_KEPT_ERRORS + extra) as u64);
    assert!(
        err.to_string()
            .ends_with("; and 25 more (logged, not kept)")
    );
    // The first ones are the ones kept, in order of report.
    assert!(matches!(&err.errors[0], TaskError::Failed { name, .. } if name.starts_with("conn-")));

    // A child dropped unjoined hands its failures and its count to the parent.
    let parent = Scope::new();
    let child = parent.child();
    for i in 0..MAX_KEPT_ERRORS + extra {
        child.spawn(format!("child-{i}"), async { Err::<(), _>("gone") });
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    child.spawn("last", async move {
        let _ = rx.await;
        Ok::<(), std::convert::Infallible>(())
    });
    // Every failing child task has reported once only `last` is left.
    crate::support::wait_until("child failures reported", HANG, || child.task_count() == 1).await;
    drop(child);
    drop(tx);
    let err = timeout(HANG, parent.join()).await.unwrap().unwrap_err();
    assert_eq!(
        err.total(),
        (MAX_KEPT_ERRORS + extra) as u64,
        "{} kept",
        err.errors.len()
    );
    assert_eq!(err.errors.len(), MAX_KEPT_ERRORS);
}
