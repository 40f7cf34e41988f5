//! Creating and dropping the runtime's components leaves no task behind.

use std::convert::Infallible;
use std::time::Duration;

use leash_runtime::{Every, PoolConfig, Scope, TtlCache, WorkerPool};

use crate::support::{alive_tasks, settle_alive_tasks};

/// Seed rows: "cleanup goroutine started in `NewController`, never stopped"
/// and "TTL cache janitor goroutine with no lifecycle". 1,000 periodic jobs,
/// caches and pools are created and dropped (constructed only, and started
/// then dropped with their scope): the alive-task count returns to its
/// baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_cleanup_goroutine_leak() {
    let baseline = alive_tasks();

    // Constructed, never started: nothing may be spawned at all.
    for i in 0..1_000u64 {
        let job = Every::new(Duration::from_millis(1), || async {}).jitter(0.1);
        let cache = TtlCache::<u64, u64>::new(Duration::from_millis(1));
        cache.insert(i, i);
        let pool = WorkerPool::new(PoolConfig::new(4, 4), |n: u64, _| async move { n }).unwrap();
        drop((job, cache, pool));
    }
    assert_eq!(alive_tasks(), baseline, "a constructor spawned a task");

    // Started, then dropped with their owner: everything stops.
    for _ in 0..1_000 {
        let scope = Scope::new();
        let token = scope.token().clone();
        scope.spawn("periodic", async move {
            Every::new(Duration::from_millis(1), || async {})
                .run(token)
                .await;
            Ok::<(), Infallible>(())
        });
        let pool = WorkerPool::new(PoolConfig::new(2, 2), |n: u64, _| async move { n }).unwrap();
        let (submitter, results) = pool.start(&scope);
        submitter.try_submit(1).unwrap();
        drop((submitter, results, scope));
    }
    settle_alive_tasks(baseline, Duration::from_secs(5)).await;
}
