use std::time::Duration;

use futures::StreamExt;
use leash_runtime::{PoolConfig, Scope, WorkerPool};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke() {
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(2, 4), |x: u64, _t| async move { x * 2 }).unwrap();
    let (sub, mut results) = pool.start(&scope);
    let producer = async move {
        for i in 0..100u64 {
            sub.submit(i).await.unwrap();
        }
    };
    let consumer = async {
        let mut sum = 0;
        while let Some(r) = results.next().await {
            sum += r.outcome.unwrap();
        }
        sum
    };
    let ((), sum) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(producer, consumer)
    })
    .await
    .unwrap();
    assert_eq!(sum, 2 * (0..100).sum::<u64>());
    drop(results);
    scope.join().await.unwrap();
}
