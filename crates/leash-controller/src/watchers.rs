//! The running watchers of a component, one per kind: the background scan
//! and generate keep theirs in a [`WatcherSet`] (Kyverno's dynamic watch
//! managers, with the seed's stale-watcher fix once).
//!
//! # Invariants
//! 1. One owner: the set is a plain value owned by its component's run
//!    loop (no lock); only that loop starts, stops or replaces watchers.
//! 2. Each watcher runs in a child [`Scope`] of the component's scope and
//!    has an id no other watcher of the set ever had. A watcher is stopped
//!    by cancelling and joining its scope ([`Scope::shutdown`]) before it
//!    is removed, replaced or its store dropped: nothing of an old watcher
//!    outlives it.
//! 3. A watcher that ends on its own says so through its [`Ended`] (an
//!    unbounded channel: sending never blocks a watcher). The loop stops and
//!    replaces it only if the set still holds that same watcher (its id):
//!    an ended notice of a watcher already stopped or replaced is ignored
//!    (house rule 8; seed: Kyverno replaced a watcher by key, so a stale
//!    watcher's exit removed its fresh successor).

use std::collections::HashMap;
use std::hash::Hash;

use leash_runtime::Scope;
use tokio::sync::mpsc;

/// How a watcher tells its set that it ended on its own.
#[derive(Debug)]
pub(crate) struct Ended<K> {
    tx: mpsc::UnboundedSender<(K, u64)>,
    key: K,
    id: u64,
}

impl<K> Ended<K> {
    /// Tells the set (the watcher's task calls this last).
    pub(crate) fn send(self) {
        // The set is gone when its component stopped: nothing to tell.
        let _ = self.tx.send((self.key, self.id));
    }
}

struct Running {
    scope: Scope,
    id: u64,
}

/// The running watchers, by kind (see the module docs).
pub(crate) struct WatcherSet<K> {
    running: HashMap<K, Running>,
    next_id: u64,
    tx: mpsc::UnboundedSender<(K, u64)>,
    rx: mpsc::UnboundedReceiver<(K, u64)>,
}

impl<K: Clone + Eq + Hash> WatcherSet<K> {
    /// An empty set.
    pub(crate) fn new() -> WatcherSet<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        WatcherSet {
            running: HashMap::new(),
            next_id: 0,
            tx,
            rx,
        }
    }

    /// Whether a watcher of `key` runs.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.running.contains_key(key)
    }

    /// The kinds watched.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &K> {
        self.running.keys()
    }

    /// Whether nothing is watched.
    pub(crate) fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Starts a watcher of `key` unless one runs: `start` spawns it in a
    /// child scope it returns (`None`: it could not start) and gives its
    /// task the [`Ended`] to send when it ends. Whether one runs now.
    pub(crate) fn start(&mut self, key: K, start: impl FnOnce(Ended<K>) -> Option<Scope>) -> bool {
        if self.running.contains_key(&key) {
            return true;
        }
        let id = self.next_id + 1;
        let ended = Ended {
            tx: self.tx.clone(),
            key: key.clone(),
            id,
        };
        match start(ended) {
            Some(scope) => {
                self.next_id = id;
                self.running.insert(key, Running { scope, id });
                true
            }
            None => false,
        }
    }

    /// Stops every watcher whose kind `keep` refuses (invariant 2), then
    /// calls `gone` with its kind.
    pub(crate) async fn retain(&mut self, keep: impl Fn(&K) -> bool, mut gone: impl FnMut(&K)) {
        let stale: Vec<K> = self.running.keys().filter(|k| !keep(k)).cloned().collect();
        for k in stale {
            if let Some(w) = self.running.remove(&k)
                && let Err(e) = w.scope.shutdown().await
            {
                tracing::warn!("a watcher ended with an error: {e}");
            }
            gone(&k);
        }
    }

    /// The next notice of a watcher that ended on its own (cancel safe:
    /// a notice is taken only when returned).
    pub(crate) async fn ended(&mut self) -> (K, u64) {
        // The set holds a sender: the channel never closes while it lives.
        match self.rx.recv().await {
            Some(notice) => notice,
            None => std::future::pending().await,
        }
    }

    /// Stops the watcher of `key` if it is the one with `id` (invariant 3);
    /// whether it was, so the caller may start another.
    pub(crate) async fn stop_if_current(&mut self, key: &K, id: u64) -> bool {
        if self.running.get(key).is_none_or(|w| w.id != id) {
            return false;
        }
        if let Some(w) = self.running.remove(key) {
            let _ = w.scope.shutdown().await;
        }
        true
    }

    /// Stops every watcher.
    pub(crate) async fn shutdown(&mut self) {
        for (_, w) in self.running.drain() {
            let _ = w.scope.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seed (stale watcher): the ended notice of a watcher that was
    /// replaced does not stop its successor; the current one's does.
    #[tokio::test]
    async fn a_stale_notice_never_stops_the_successor() {
        let scope = Scope::new();
        let mut set: WatcherSet<&str> = WatcherSet::new();
        let mut first = None;
        assert!(set.start("pods", |ended| {
            first = Some(ended);
            Some(scope.child())
        }));
        // Already running: not started twice.
        assert!(set.start("pods", |_| panic!("started twice")));
        // The first watcher is replaced (it ended, and was restarted).
        first.unwrap().send();
        let (k, id) = set.ended().await;
        assert!(set.stop_if_current(&k, id).await);
        let mut second = None;
        assert!(set.start("pods", |ended| {
            second = Some(ended);
            Some(scope.child())
        }));
        // A late duplicate of the first one's notice changes nothing.
        assert!(!set.stop_if_current(&"pods", id).await);
        assert!(set.contains(&"pods"));
        let second = second.unwrap();
        let second_id = second.id;
        second.send();
        assert_eq!(set.ended().await, ("pods", second_id));
        assert!(set.stop_if_current(&"pods", second_id).await);
        assert!(set.is_empty());
        // A watcher that could not start is not kept.
        assert!(!set.start("jobs", |_| None));
        assert!(!set.contains(&"jobs"));
        set.shutdown().await;
        scope.shutdown().await.unwrap();
    }

    #[tokio::test]
    async fn retain_stops_and_joins_what_is_not_kept() {
        let scope = Scope::new();
        let mut set: WatcherSet<&str> = WatcherSet::new();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel();
        for k in ["pods", "jobs"] {
            let done = done_tx.clone();
            set.start(k, |_| {
                let child = scope.child();
                let token = child.token().clone();
                child.spawn("watch", async move {
                    token.cancelled().await;
                    let _ = done.send(k);
                    Ok::<(), std::convert::Infallible>(())
                });
                Some(child)
            });
        }
        let mut gone = Vec::new();
        set.retain(|k| *k == "pods", |k| gone.push(*k)).await;
        assert_eq!(gone, ["jobs"]);
        // Joined before retain returned: its task already finished.
        assert_eq!(done_rx.try_recv(), Ok("jobs"));
        assert_eq!(set.keys().collect::<Vec<_>>(), [&"pods"]);
        set.shutdown().await;
        assert_eq!(done_rx.try_recv(), Ok("pods"));
        scope.shutdown().await.unwrap();
    }
}
