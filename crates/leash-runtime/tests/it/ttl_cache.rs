//! TtlCache: expiry under paused time, no task.

use std::sync::Arc;
use std::time::Duration;

use leash_runtime::{Scope, TtlCache};
use tokio::time::advance;

#[tokio::test(start_paused = true)]
async fn ttl_expiry_under_paused_time() {
    let cache = TtlCache::new(Duration::from_secs(30));
    cache.insert("a".to_owned(), 1);
    advance(Duration::from_secs(10)).await;
    cache.insert("b".to_owned(), 2);
    assert_eq!(cache.len(), 2);

    advance(Duration::from_secs(20) - Duration::from_millis(1)).await;
    assert_eq!(cache.get("a"), Some(1), "just before a's ttl");
    advance(Duration::from_millis(1)).await;
    assert_eq!(cache.get("a"), None, "a expired at exactly 30 s");
    assert!(!cache.contains("a"));
    assert!(cache.contains("b"));
    assert_eq!(cache.len(), 1);

    advance(Duration::from_secs(10)).await;
    assert_eq!(cache.len(), 0);
    assert!(cache.is_empty());

    cache.insert("c".to_owned(), 3);
    cache.clear();
    assert_eq!(cache.get("c"), None);
    assert_eq!(cache.ttl(), Duration::from_secs(30));
}

/// `insert_bounded` holds at most `max` entries: a new key past the bound
/// drops the expired ones first, then, if none had expired, all; a key
/// already held is replaced without dropping anything.
#[tokio::test(start_paused = true)]
async fn insert_bounded_keeps_at_most_max() {
    let cache = TtlCache::new(Duration::from_secs(30));
    cache.insert_bounded("old", 0, 3);
    advance(Duration::from_secs(30)).await;
    cache.insert_bounded("a", 1, 3);
    cache.insert_bounded("b", 2, 3);
    // "old" expired but is still stored: the bound sweeps it, not a.
    cache.insert_bounded("c", 3, 3);
    assert_eq!(
        (cache.get("a"), cache.get("b"), cache.get("c")),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(
        cache.insert_bounded("a", 10, 3),
        Some(1),
        "replaced, nothing dropped"
    );
    assert_eq!(cache.len(), 3);
    cache.insert_bounded("d", 4, 3);
    assert_eq!(cache.len(), 1, "none expired: all dropped for the new key");
    assert_eq!(cache.get("d"), Some(4));
}

/// Shared across tasks by `Arc`; every insert is seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_between_tasks() {
    let cache = Arc::new(TtlCache::new(Duration::from_secs(60)));
    let scope = Scope::new();
    for t in 0..4u32 {
        let cache = cache.clone();
        scope.spawn(format!("writer-{t}"), async move {
            for i in 0..250 {
                cache.insert(t * 1_000 + i, i);
                tokio::task::yield_now().await;
            }
            Ok::<(), std::convert::Infallible>(())
        });
    }
    scope.join().await.unwrap();
    assert_eq!(cache.len(), 1_000);
    assert_eq!(cache.get(&3_249), Some(249));
    assert_eq!(cache.remove(&3_249), Some(249));
    assert_eq!(cache.len(), 999);
}
