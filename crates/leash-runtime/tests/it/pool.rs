//! WorkerPool: backpressure, no lost task, cancellation, shutdown.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use leash_runtime::{
    CancellationToken, PoolConfig, PoolError, Scope, SubmitError, TaskFailure, TaskResult,
    TrySubmitError, WorkerPool,
};
use tokio::sync::Semaphore;
use tokio::time::timeout;

use crate::support::{HANG, alive_tasks, settle_alive_tasks, wait_until};

/// A pool whose handler waits for a permit of `gate` before returning its
/// input; `started` counts tasks that began.
fn gated_pool(
    config: PoolConfig,
    gate: Arc<Semaphore>,
    started: Arc<AtomicUsize>,
) -> WorkerPool<String, String> {
    WorkerPool::new(config, move |task: String, _token| {
        let gate = gate.clone();
        let started = started.clone();
        async move {
            started.fetch_add(1, Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            task
        }
    })
    .unwrap()
}

#[test]
fn config_is_validated() {
    let pool = |w, q| WorkerPool::<u8, u8>::new(PoolConfig::new(w, q), |t, _| async move { t });
    assert_eq!(
        pool(0, 1).unwrap_err(),
        PoolError::InvalidWorkers { got: 0, max: 256 }
    );
    assert_eq!(
        pool(257, 1).unwrap_err(),
        PoolError::InvalidWorkers { got: 257, max: 256 }
    );
    assert!(matches!(
        pool(1, 0).unwrap_err(),
        PoolError::InvalidQueueCapacity { got: 0, .. }
    ));
    assert!(pool(1, 1).is_ok());
    assert!(pool(256, 1).is_ok());
}

/// Seed row: "pool drops tasks beyond 2x concurrency, then 5 min timeout per
/// missing result". 1,000 tasks submitted as fast as possible into 2 workers
/// and a queue of 4: every result arrives, each id exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_pool_drops_tasks() {
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(2, 4), |n: u32, _token| async move {
        tokio::task::yield_now().await;
        n
    })
    .unwrap();
    let (submitter, mut results) = pool.start(&scope);
    let producer = async move {
        let mut ids = HashSet::new();
        for n in 0..1_000u32 {
            let id = submitter.submit(n).await.expect("pool refused a task");
            assert!(ids.insert(id), "duplicate id {id}");
        }
        ids
        // submitter dropped: the stream ends once every task is done.
    };
    let consumer = async {
        let mut ids = HashSet::new();
        let mut payloads = HashSet::new();
        while let Some(TaskResult { id, outcome }) = results.next().await {
            assert!(ids.insert(id), "result for {id} twice");
            assert!(payloads.insert(outcome.expect("task failed")));
        }
        (ids, payloads)
    };
    let (submitted, (received, payloads)) = timeout(Duration::from_secs(10), async {
        tokio::join!(producer, consumer)
    })
    .await
    .expect("1,000 tasks did not complete within 10 s");
    assert_eq!(submitted.len(), 1_000);
    assert_eq!(received, submitted);
    assert_eq!(payloads, (0..1_000).collect::<HashSet<u32>>());
    assert_eq!(results.undelivered(), 0);
    timeout(HANG, results.join()).await.unwrap().unwrap();
    timeout(HANG, scope.join()).await.unwrap().unwrap();
}

/// Seed row: "workers on `context.Background()`". Tasks blocked forever on a
/// pending future (ignoring their token) stop within 1 s of cancelling, the
/// queued ones report `Cancelled`, and the runtime's alive-task count
/// returns to its baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_pool_ignores_cancel() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let pool = WorkerPool::new(PoolConfig::new(4, 4), move |_: u32, _token| {
        let s = s.clone();
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
    })
    .unwrap();
    let (submitter, results) = pool.start(&scope);
    assert_eq!(alive_tasks(), baseline + 4, "4 workers");
    for n in 0..4 {
        submitter.submit(n).await.unwrap();
    }
    wait_until("4 tasks in flight", HANG, || {
        started.load(Ordering::SeqCst) == 4
    })
    .await;
    for n in 4..8 {
        submitter.try_submit(n).unwrap();
    }

    let cancelled_at = std::time::Instant::now();
    submitter.cancel();
    let all: Vec<_> = timeout(Duration::from_secs(1), results.collect::<Vec<_>>())
        .await
        .expect("pool did not stop within 1 s of cancel");
    assert!(cancelled_at.elapsed() < Duration::from_secs(1));
    assert_eq!(all.len(), 8, "every accepted task reports");
    assert!(all.iter().all(|r| r.outcome == Err(TaskFailure::Cancelled)));
    assert_eq!(started.load(Ordering::SeqCst), 4, "queued tasks never ran");
    assert!(matches!(
        submitter.submit(9).await,
        Err(SubmitError::Cancelled(9))
    ));
    timeout(Duration::from_secs(1), scope.join())
        .await
        .unwrap()
        .unwrap();
    settle_alive_tasks(baseline, Duration::from_secs(1)).await;
}

/// Seed row: the pool's `Close` waited for workers blocked sending to a
/// result channel nobody read. The consumer reads one result and stops (but
/// keeps `Results`); workers fill the result channel and block; the
/// producer blocks on a full queue. Close + cancel + shutdown still complete
/// within the bound, and no worker is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_close_deadlock() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let h = handled.clone();
    let pool = WorkerPool::new(PoolConfig::new(2, 2), move |n: u32, _token| {
        h.fetch_add(1, Ordering::SeqCst);
        async move { n }
    })
    .unwrap();
    let (submitter, mut results) = pool.start(&scope);
    // Result channel: 2 + 2 = 4 slots. Producer submits far more.
    let producer = {
        let submitter = submitter.clone();
        scope.spawn_with_output(async move {
            let mut accepted = 0;
            let mut refused = Vec::new();
            for n in 0..100u32 {
                match submitter.submit(n).await {
                    Ok(_) => accepted += 1,
                    Err(e) => refused.push(e.into_inner()),
                }
            }
            (accepted, refused)
        })
    };
    assert!(results.next().await.is_some());
    // The consumer stops reading. 1 read + 4 buffered + 2 held by blocked
    // workers = 7 handled; then queue (2) full and the producer blocked.
    wait_until("workers blocked on the result channel", HANG, || {
        handled.load(Ordering::SeqCst) == 7
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(handled.load(Ordering::SeqCst), 7, "workers are blocked");

    let start = std::time::Instant::now();
    submitter.close();
    submitter.close(); // idempotent
    submitter.cancel();
    timeout(Duration::from_secs(2), scope.shutdown())
        .await
        .expect("shutdown deadlocked on a consumer that stopped reading")
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(2));
    let (accepted, refused) = producer.await.unwrap();
    assert_eq!(accepted + refused.len(), 100, "no task vanished");
    // Everything accepted is accounted for: read, still buffered, or
    // counted as undelivered (queued-then-cancelled results found no room).
    let buffered: Vec<_> = timeout(HANG, results.by_ref().collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(
        1 + buffered.len() as u64 + results.undelivered(),
        accepted as u64
    );
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;
}

/// Close without cancel, consumer not reading: `Results::join` drains and
/// returns; afterwards no worker is alive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_then_join_completes_without_a_reader() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(3, 2), |n: u32, _| async move { n }).unwrap();
    let (submitter, results) = pool.start(&scope);
    for n in 0..5 {
        submitter.submit(n).await.unwrap();
    }
    submitter.close();
    assert!(submitter.is_closed());
    assert!(matches!(
        submitter.submit(99).await,
        Err(SubmitError::Closed(99))
    ));
    timeout(Duration::from_secs(2), results.join())
        .await
        .unwrap()
        .unwrap();
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;
    scope.join().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_panic_is_a_result_and_the_worker_survives() {
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(1, 2), |n: u32, _| async move {
        if n == 2 {
            panic!("task {n} exploded");
        }
        n
    })
    .unwrap();
    let (submitter, results) = pool.start(&scope);
    let producer = async move {
        let mut ids = Vec::new();
        for n in 0..6 {
            ids.push(submitter.submit(n).await.unwrap());
        }
        ids
    };
    let (ids, all) = timeout(HANG, async {
        tokio::join!(producer, results.collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(all.len(), 6, "the single worker kept going after the panic");
    for r in all {
        let n = ids.iter().position(|id| *id == r.id).unwrap() as u32;
        if n == 2 {
            assert_eq!(
                r.outcome,
                Err(TaskFailure::Panicked("task 2 exploded".into()))
            );
        } else {
            assert_eq!(r.outcome, Ok(n));
        }
    }
    // A task panic is a result, not a worker failure.
    timeout(HANG, scope.join()).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_submit_full_hands_back_the_task() {
    let scope = Scope::new();
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let pool = gated_pool(PoolConfig::new(1, 1), gate.clone(), started.clone());
    let (submitter, results) = pool.start(&scope);
    submitter.try_submit("a".to_owned()).unwrap();
    wait_until("a started", HANG, || started.load(Ordering::SeqCst) == 1).await;
    submitter.try_submit("b".to_owned()).unwrap();
    assert_eq!(
        submitter.try_submit("c".to_owned()),
        Err(TrySubmitError::Full("c".to_owned()))
    );
    // submit waits for room (backpressure) instead of failing.
    {
        let pending = submitter.submit("c".to_owned());
        tokio::pin!(pending);
        assert!(
            timeout(Duration::from_millis(50), &mut pending)
                .await
                .is_err(),
            "submit must wait while the queue is full"
        );
        gate.add_permits(3);
        timeout(HANG, &mut pending).await.unwrap().unwrap();
    }
    drop(submitter);
    let mut out: Vec<String> = timeout(HANG, results.map(|r| r.outcome.unwrap()).collect())
        .await
        .unwrap();
    out.sort();
    assert_eq!(out, ["a", "b", "c"]);
    scope.join().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_after_close_or_cancel_hands_back_the_task() {
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(1, 1), |s: String, _| async move { s }).unwrap();
    let (submitter, results) = pool.start(&scope);
    let clone = submitter.clone();
    submitter.close();
    assert_eq!(
        clone.submit("x".to_owned()).await,
        Err(SubmitError::Closed("x".to_owned()))
    );
    assert_eq!(
        clone.try_submit("y".to_owned()),
        Err(TrySubmitError::Closed("y".to_owned()))
    );
    timeout(HANG, results.join()).await.unwrap().unwrap();

    let pool = WorkerPool::new(PoolConfig::new(1, 1), |s: String, _| async move { s }).unwrap();
    let (submitter, results) = pool.start(&scope);
    submitter.cancel();
    assert_eq!(
        submitter.submit("z".to_owned()).await,
        Err(SubmitError::Cancelled("z".to_owned()))
    );
    timeout(HANG, results.join()).await.unwrap().unwrap();
    scope.join().await.unwrap();
}

/// A submit blocked on a full queue returns the task when the pool closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_submit_hands_back_the_task_on_close() {
    let scope = Scope::new();
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let pool = gated_pool(PoolConfig::new(1, 1), gate.clone(), started.clone());
    let (submitter, results) = pool.start(&scope);
    submitter.submit("a".to_owned()).await.unwrap();
    wait_until("a started", HANG, || started.load(Ordering::SeqCst) == 1).await;
    submitter.submit("b".to_owned()).await.unwrap();
    let blocked = {
        let submitter = submitter.clone();
        scope.spawn_with_output(async move { submitter.submit("c".to_owned()).await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    submitter.close();
    assert_eq!(
        timeout(HANG, blocked).await.unwrap().unwrap(),
        Err(SubmitError::Closed("c".to_owned()))
    );
    gate.add_permits(2);
    let out: Vec<_> = timeout(HANG, results.collect::<Vec<_>>()).await.unwrap();
    assert_eq!(out.len(), 2, "queued work still runs after close");
    scope.join().await.unwrap();
}

/// Each task gets a child token of the pool: cancelling the pool cancels it,
/// a task cancelling its own token affects nobody else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_tokens_are_children_of_the_pool() {
    let scope = Scope::new();
    let tokens: Arc<Mutex<Vec<CancellationToken>>> = Arc::default();
    let t = tokens.clone();
    let pool = WorkerPool::new(PoolConfig::new(2, 4), move |n: u32, token| {
        t.lock().unwrap().push(token.clone());
        async move {
            if n == 0 {
                token.cancel(); // cancels only this task
                std::future::pending::<()>().await;
            }
            token.cancelled().await;
            n
        }
    })
    .unwrap();
    let (submitter, mut results) = pool.start(&scope);
    submitter.submit(0).await.unwrap();
    let first = timeout(HANG, results.next()).await.unwrap().unwrap();
    assert_eq!(first.outcome, Err(TaskFailure::Cancelled));
    assert!(!submitter.is_closed());
    submitter.submit(1).await.unwrap();
    submitter.submit(2).await.unwrap();
    wait_until("both running", HANG, || tokens.lock().unwrap().len() == 3).await;
    assert!(!tokens.lock().unwrap()[1].is_cancelled());
    scope.cancel();
    let rest: Vec<_> = timeout(HANG, results.collect::<Vec<_>>()).await.unwrap();
    assert_eq!(rest.len(), 2);
    assert!(tokens.lock().unwrap().iter().all(|t| t.is_cancelled()));
    scope.join().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_results_cancels_the_pool() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(2, 2), |_: u32, _| {
        std::future::pending::<()>()
    })
    .unwrap();
    let (submitter, results) = pool.start(&scope);
    submitter.submit(1).await.unwrap();
    submitter.submit(2).await.unwrap();
    drop(results);
    assert!(matches!(
        submitter.submit(3).await,
        Err(SubmitError::Cancelled(3))
    ));
    timeout(Duration::from_secs(1), scope.join())
        .await
        .unwrap()
        .unwrap();
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;
}

/// All submitters dropped (never closed): the stream ends, workers exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_end_when_every_submitter_is_dropped() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(8, 4), |n: u32, _| async move { n * 2 }).unwrap();
    let (submitter, results) = pool.start(&scope);
    let second = submitter.clone();
    submitter.submit(1).await.unwrap();
    second.submit(2).await.unwrap();
    drop(submitter);
    drop(second);
    let mut out: Vec<u32> = timeout(HANG, results.map(|r| r.outcome.unwrap()).collect())
        .await
        .unwrap();
    out.sort_unstable();
    assert_eq!(out, [2, 4]);
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;
    scope.join().await.unwrap();
}

/// A worker failure (not a task failure) surfaces from the pool's scope:
/// here the parent scope's shutdown sees pool workers were joined cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parent_shutdown_stops_a_running_pool() {
    let baseline = alive_tasks();
    let scope = Scope::new();
    let pool = WorkerPool::new(
        PoolConfig::new(4, 4),
        |_: u32, token: CancellationToken| async move {
            token.cancelled().await;
        },
    )
    .unwrap();
    let (submitter, results) = pool.start(&scope);
    for n in 0..8 {
        submitter.submit(n).await.unwrap();
    }
    timeout(Duration::from_secs(1), scope.shutdown())
        .await
        .unwrap()
        .unwrap();
    assert!(submitter.is_closed());
    drop(results);
    settle_alive_tasks(baseline, Duration::from_secs(2)).await;
}

/// Seed row: "pool drops tasks beyond 2x concurrency, then 5 min timeout per
/// missing result", in the seed's exact shape: submit every task first,
/// collect the results after. With the two-handle form that shape waits
/// forever once `2 * (workers + queue)` tasks are in (the documented
/// hazard); `run_all` in the same shape delivers every result.
#[tokio::test(start_paused = true)]
async fn seed_submit_all_then_collect() {
    let scope = Scope::new();
    let square = |n: u32, _token| async move { n * n };
    let config = PoolConfig::new(2, 4);

    // Two handles, submit-all-then-collect: blocked. Paused time makes the
    // one-minute bound elapse as soon as every task is idle.
    let (submitter, results) = WorkerPool::new(config, square).unwrap().start(&scope);
    let mut accepted = 0;
    let submit_all = async {
        for n in 0..100u32 {
            submitter.submit(n).await.expect("pool open");
            accepted += 1;
        }
    };
    assert!(
        timeout(Duration::from_secs(60), submit_all).await.is_err(),
        "the two-handle form in the seed's shape must block"
    );
    assert_eq!(accepted, 2 * (2 + 4), "queue + results + one per worker");
    drop(submitter);
    timeout(HANG, results.shutdown()).await.unwrap().unwrap();

    // One call, the same shape: every task "submitted", then collected.
    let batch = WorkerPool::new(config, square)
        .unwrap()
        .run_all(&scope, 0..100u32);
    let collected: Vec<TaskResult<u32>> = timeout(HANG, batch.collect())
        .await
        .expect("run_all delivers every result");
    let mut by_index: Vec<(usize, u32)> = collected
        .into_iter()
        .map(|r| (r.id.index(), r.outcome.expect("no failure")))
        .collect();
    by_index.sort_unstable();
    assert_eq!(
        by_index,
        (0..100u32).map(|n| (n as usize, n * n)).collect::<Vec<_>>(),
        "task i gets id i and its own result"
    );
    timeout(HANG, scope.shutdown()).await.unwrap().unwrap();
}

/// A cancelled `run_all` stops submitting; the tasks it never queued are
/// handed back, so results plus unsubmitted account for every task.
#[tokio::test(start_paused = true)]
async fn run_all_cancelled_hands_back_what_it_never_queued() {
    let scope = Scope::new();
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let pool = gated_pool(PoolConfig::new(2, 2), gate.clone(), started.clone());
    let mut batch = pool.run_all(&scope, (0..50).map(|i| i.to_string()));
    // One poll queues what fits; two tasks start, the rest wait.
    assert!(
        futures::FutureExt::now_or_never(batch.next()).is_none(),
        "no result while every task is gated"
    );
    wait_until("two running", HANG, || started.load(Ordering::SeqCst) == 2).await;
    batch.cancel();
    let mut seen = Vec::new();
    while let Some(r) = timeout(HANG, batch.next()).await.expect("stream ends") {
        assert_eq!(r.outcome, Err(TaskFailure::Cancelled));
        seen.push(r.id.index());
    }
    let unsubmitted: Vec<String> = batch.into_unsubmitted().collect();
    assert_eq!(
        seen.len() + unsubmitted.len(),
        50,
        "{seen:?} + {unsubmitted:?}"
    );
    seen.sort_unstable();
    assert_eq!(seen, (0..seen.len()).collect::<Vec<_>>());
    assert_eq!(
        unsubmitted.first().map(String::as_str),
        Some(&*seen.len().to_string())
    );
    timeout(HANG, scope.shutdown()).await.unwrap().unwrap();
}
