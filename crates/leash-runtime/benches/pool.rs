//! 100,000 no-op tasks through `WorkerPool` (4 workers) vs
//! `futures::StreamExt::buffer_unordered(4)` on the same tasks, on the same
//! multi-thread tokio runtime. Run: `cargo bench -p leash-runtime --bench pool`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::StreamExt;
use leash_runtime::{PoolConfig, Scope, WorkerPool};

const TASKS: u64 = 100_000;

/// The task both contenders run: no work, returns its input.
async fn noop(n: u64) -> u64 {
    n
}

async fn through_pool(queue_capacity: usize) -> u64 {
    let scope = Scope::new();
    let pool = WorkerPool::new(PoolConfig::new(4, queue_capacity), |n: u64, _token| noop(n))
        .expect("valid config");
    let (submitter, mut results) = pool.start(&scope);
    let producer = async move {
        for n in 0..TASKS {
            submitter.submit(n).await.expect("pool open");
        }
    };
    let consumer = async {
        let mut sum = 0;
        while let Some(r) = results.next().await {
            sum += r.outcome.expect("no-op task failed");
        }
        sum
    };
    let ((), sum) = tokio::join!(producer, consumer);
    drop(results);
    scope.join().await.expect("workers joined");
    sum
}

async fn through_buffer_unordered() -> u64 {
    futures::stream::iter(0..TASKS)
        .map(noop)
        .buffer_unordered(4)
        .fold(0, |acc, n| async move { acc + n })
        .await
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let expected = TASKS * (TASKS - 1) / 2;
    assert_eq!(rt.block_on(through_pool(8)), expected);
    assert_eq!(rt.block_on(through_buffer_unordered()), expected);

    let mut g = c.benchmark_group("noop_100k");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(TASKS));
    // Also measured from inside a runtime task (as a caller in a scope
    // would): the producer and consumer then run on runtime workers.
    g.bench_function("worker_pool_4w_q8_in_task", |b| {
        b.to_async(&rt).iter(|| async {
            let scope = Scope::new();
            let sum = scope.spawn_with_output(through_pool(8)).await.unwrap();
            scope.join().await.unwrap();
            black_box(sum)
        })
    });
    g.bench_function("buffer_unordered_4_in_task", |b| {
        b.to_async(&rt).iter(|| async {
            let scope = Scope::new();
            let sum = scope
                .spawn_with_output(through_buffer_unordered())
                .await
                .unwrap();
            scope.join().await.unwrap();
            black_box(sum)
        })
    });
    g.bench_function("worker_pool_4w_q8", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(through_pool(8).await) })
    });
    g.bench_function("worker_pool_4w_q256", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(through_pool(256).await) })
    });
    g.bench_function("buffer_unordered_4", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(through_buffer_unordered().await) })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
