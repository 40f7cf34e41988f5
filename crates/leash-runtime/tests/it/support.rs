//! Helpers shared by the integration tests.

use std::time::{Duration, Instant};

/// Tasks alive on the current runtime.
pub fn alive_tasks() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Polls until the runtime's alive-task count equals `baseline`; panics with
/// the last count if it has not within `deadline` (wall clock).
pub async fn settle_alive_tasks(baseline: usize, deadline: Duration) {
    let start = Instant::now();
    loop {
        let alive = alive_tasks();
        if alive == baseline {
            return;
        }
        assert!(
            start.elapsed() < deadline,
            "{alive} tasks alive, baseline {baseline}, after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Polls `cond` until it holds; panics if it has not within `deadline`
/// (wall clock).
pub async fn wait_until(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Bound for operations that must finish "promptly": a hang bound, not a
/// performance claim.
pub const HANG: Duration = Duration::from_secs(10);
