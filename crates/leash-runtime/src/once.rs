//! One-time async initialization of shared clients.
//!
//! Seed: several image-verification goroutines raced on `tuf.Initialize()`.
//! [`OnceCell::get_or_try_init`] runs the initializer once even when many
//! tasks ask at the same time: the others wait for it, and if it fails (or is
//! cancelled) the next caller tries again. That is everything the seed needs,
//! so this module re-exports tokio's type instead of wrapping it.
//!
//! # Invariants
//! 1. The initializer of a cell completes successfully at most once; readers
//!    after that see the same value.
//!
//! ```
//! use leash_runtime::OnceCell;
//! static CLIENT: OnceCell<String> = OnceCell::const_new();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! let c = CLIENT
//!     .get_or_try_init(|| async { Ok::<_, std::io::Error>("client".to_owned()) })
//!     .await
//!     .unwrap();
//! assert_eq!(c, "client");
//! # });
//! ```

pub use tokio::sync::OnceCell;
pub use tokio::sync::SetError;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_init_runs_once() {
        let cell = Arc::new(OnceCell::<usize>::new());
        let calls = Arc::new(AtomicUsize::new(0));
        let scope = crate::Scope::new();
        let mut handles = Vec::new();
        for _ in 0..16 {
            let (cell, calls) = (cell.clone(), calls.clone());
            handles.push(scope.spawn_with_output(async move {
                *cell
                    .get_or_init(|| async {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        42
                    })
                    .await
            }));
        }
        for h in handles {
            assert_eq!(h.await.unwrap(), 42);
        }
        scope.join().await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
