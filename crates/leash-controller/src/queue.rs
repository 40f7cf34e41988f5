//! A deduplicating work queue with per-key retry backoff, as client-go's
//! rate-limited workqueue: a key is queued at most once; a key being worked
//! on that is added again is worked on again after it is done; a failed key
//! comes back after an exponential backoff.
//!
//! # Invariants
//! 1. All state (`ready`, `queued`, `active`, `dirty`, the retry heap,
//!    attempt counts) is behind one `std::sync::Mutex`, taken for a few
//!    statements by each method and never held across an await (house rule
//!    5): [`WorkQueue::next`] computes its wake-up time under the lock,
//!    releases it, then waits. A poisoned lock is recovered, not propagated.
//! 2. Adding never blocks and never drops (house rule 4): `add` only takes
//!    the lock. `ready`/`queued` hold a key at most once, so memory is
//!    bounded by the number of distinct keys (one per object), except as
//!    invariant 4 says for the retry heap.
//! 3. A key that is being worked on (`active`) and is added again is marked
//!    `dirty`, not queued; `done` queues it again, `retry` drops the mark
//!    (the retry covers it). `done` also resets the key's backoff; `retry`
//!    doubles it from [`BASE_BACKOFF`] up to [`MAX_BACKOFF`].
//! 4. A key is never with two workers at once: an expired retry of a key
//!    that is active (added again during its backoff and handed out) marks
//!    it `dirty` instead of queueing it, as `add` does. (Until 2026-12-06
//!    `next` checked only `queued` there, and such a key was handed out a
//!    second time while the first worker still had it.)
//! 5. No lost wake-up: `next` registers its `Notify` waiter (`enable`)
//!    before it looks at the state, and `add`, `done` and `retry` call
//!    `notify_waiters` after releasing the lock whenever they made a key
//!    ready or scheduled a retry; a waiter also sleeps only until the
//!    earliest retry is due.
//! 6. `next` returns `None` once the caller's token is cancelled; nothing is
//!    spawned here, so a queue whose workers stopped is simply dropped with
//!    its state.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Backoff of the first retry; doubled per failure up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_millis(50);
/// The longest retry backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug)]
struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    active: HashSet<K>,
    dirty: HashSet<K>,
    delayed: BinaryHeap<Reverse<(Instant, u64, K)>>,
    attempts: HashMap<K, u32>,
    seq: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    notify: Notify,
}

impl<K: Clone + Eq + Hash + Ord> Default for WorkQueue<K> {
    fn default() -> Self {
        WorkQueue::new()
    }
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// An empty queue.
    pub fn new() -> WorkQueue<K> {
        WorkQueue {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                queued: HashSet::new(),
                active: HashSet::new(),
                dirty: HashSet::new(),
                delayed: BinaryHeap::new(),
                attempts: HashMap::new(),
                seq: 0,
            }),
            notify: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `key` (no-op if it is queued already).
    pub fn add(&self, key: K) {
        let added = {
            let mut s = self.lock();
            if s.active.contains(&key) {
                s.dirty.insert(key);
                false
            } else if s.queued.insert(key.clone()) {
                s.ready.push_back(key);
                true
            } else {
                false
            }
        };
        if added {
            self.notify.notify_waiters();
        }
    }

    /// The next key to work on; `None` once `token` is cancelled. The
    /// caller must call [`WorkQueue::done`] or [`WorkQueue::retry`] with it.
    pub async fn next(&self, token: &CancellationToken) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wake_at = {
                let mut s = self.lock();
                let now = Instant::now();
                while let Some(Reverse((at, _, _))) = s.delayed.peek() {
                    if *at > now {
                        break;
                    }
                    let Some(Reverse((_, _, key))) = s.delayed.pop() else {
                        break;
                    };
                    // A key being worked on (added again during its
                    // backoff, and handed out) is worked on again after it
                    // is done, never by a second worker meanwhile.
                    if s.active.contains(&key) {
                        s.dirty.insert(key);
                    } else if s.queued.insert(key.clone()) {
                        s.ready.push_back(key);
                    }
                }
                if let Some(key) = s.ready.pop_front() {
                    s.queued.remove(&key);
                    s.active.insert(key.clone());
                    return Some(key);
                }
                s.delayed.peek().map(|Reverse((at, _, _))| *at)
            };
            let sleep = async {
                match wake_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = token.cancelled() => return None,
                _ = &mut notified => {}
                _ = sleep => {}
            }
        }
    }

    /// `key` was worked on successfully: its backoff resets; if it was
    /// added meanwhile, it is queued again.
    pub fn done(&self, key: &K) {
        let requeued = {
            let mut s = self.lock();
            s.active.remove(key);
            s.attempts.remove(key);
            if s.dirty.remove(key) && s.queued.insert(key.clone()) {
                s.ready.push_back(key.clone());
                true
            } else {
                false
            }
        };
        if requeued {
            self.notify.notify_waiters();
        }
    }

    /// `key` failed: it comes back after its backoff. Returns the backoff.
    pub fn retry(&self, key: &K) -> Duration {
        let delay = {
            let mut s = self.lock();
            s.active.remove(key);
            s.dirty.remove(key);
            let attempts = s.attempts.entry(key.clone()).or_insert(0);
            *attempts = attempts.saturating_add(1);
            let exp = (*attempts - 1).min(16);
            let delay = BASE_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF);
            let seq = s.seq;
            s.seq += 1;
            s.delayed
                .push(Reverse((Instant::now() + delay, seq, key.clone())));
            delay
        };
        self.notify.notify_waiters();
        delay
    }

    /// Keys queued, waiting for a retry, or being worked on.
    pub fn len(&self) -> usize {
        let s = self.lock();
        s.ready.len() + s.delayed.len() + s.active.len()
    }

    /// Whether nothing is queued, delayed or being worked on.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn dedups_and_never_gives_one_key_to_two_workers() {
        let q = WorkQueue::new();
        let t = CancellationToken::new();
        q.add(1);
        q.add(1);
        q.add(2);
        assert_eq!(q.len(), 2);
        let a = q.next(&t).await.unwrap();
        assert_eq!(a, 1);
        q.add(1); // while active: dirty, not queued twice
        let b = q.next(&t).await.unwrap();
        assert_eq!(b, 2);
        q.done(&b);
        q.done(&a); // dirty: back in the queue
        assert_eq!(q.next(&t).await, Some(1));
        q.done(&1);
        assert!(q.is_empty());
        t.cancel();
        assert_eq!(q.next(&t).await, None);
    }

    /// A key that failed, was added again during its backoff and handed
    /// out, is not handed to a second worker when its backoff expires while
    /// the first still has it; it comes back once the first is done.
    #[tokio::test(start_paused = true)]
    async fn an_expired_retry_of_an_active_key_waits_for_it() {
        let q = WorkQueue::new();
        let t = CancellationToken::new();
        q.add("k");
        let k = q.next(&t).await.unwrap();
        q.retry(&k);
        q.add("k"); // during the backoff: queued at once
        let first = q.next(&t).await.unwrap();
        assert_eq!(first, "k");
        tokio::time::advance(BASE_BACKOFF * 2).await;
        let second = tokio::time::timeout(MAX_BACKOFF, q.next(&t)).await;
        assert!(
            second.is_err(),
            "the expired retry of the active key is not handed out: {second:?}"
        );
        q.done(&first);
        assert_eq!(q.next(&t).await, Some("k"), "worked on again after done");
        q.done(&"k");
        assert!(q.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn retries_back_off_exponentially_and_reset_on_success() {
        let q = Arc::new(WorkQueue::new());
        let t = CancellationToken::new();
        q.add("k");
        let k = q.next(&t).await.unwrap();
        assert_eq!(q.retry(&k), BASE_BACKOFF);
        let start = Instant::now();
        let k = q.next(&t).await.unwrap();
        assert!(start.elapsed() >= BASE_BACKOFF);
        assert_eq!(q.retry(&k), BASE_BACKOFF * 2);
        let k = q.next(&t).await.unwrap();
        q.done(&k);
        q.add("k");
        let k = q.next(&t).await.unwrap();
        assert_eq!(q.retry(&k), BASE_BACKOFF, "success resets the backoff");
        for _ in 0..40 {
            let k = q.next(&t).await.unwrap();
            assert!(q.retry(&k) <= MAX_BACKOFF);
        }
    }

    #[tokio::test]
    async fn a_waiting_worker_wakes_on_add() {
        let q = Arc::new(WorkQueue::new());
        let t = CancellationToken::new();
        let (q2, t2) = (q.clone(), t.clone());
        let waiter = async move { q2.next(&t2).await };
        let adder = async {
            tokio::task::yield_now().await;
            q.add(7);
        };
        let (got, ()) = tokio::join!(waiter, adder);
        assert_eq!(got, Some(7));
    }
}
