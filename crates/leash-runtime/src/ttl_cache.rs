//! A TTL cache with lazy expiry and no background task.
//!
//! Seed: cluster-api's TTL cache started a janitor goroutine in `New` with no
//! way to stop it, so every cache leaked one goroutine. This cache has no
//! task at all: an entry's age is checked when it is read, and expired
//! entries are swept during `insert` (amortized) and `len`.
//!
//! Why not `moka`: moka's future cache keeps housekeeping machinery whose
//! lifetime is not tied to a scope, it reads its own clock (so tests cannot
//! use tokio's paused time and would have to sleep for real), and it is a
//! large extra dependency for a map plus a timestamp. This cache reads
//! `tokio::time::Instant`, so `#[tokio::test(start_paused = true)]` with
//! `advance()` tests expiry deterministically.
//!
//! # Invariants
//! 1. No task, no thread: nothing can outlive the cache.
//! 2. An entry inserted at `t` is visible to `get`/`contains` strictly before
//!    `t + ttl` and never at or after it.
//! 3. `len` counts only unexpired entries.
//! 4. Memory is bounded by the live entries plus the expired entries since
//!    the last sweep; a sweep runs whenever the map reaches twice its size
//!    after the previous sweep (at least 64), so sweeping is amortized O(1)
//!    per insert. [`TtlCache::insert_bounded`] holds it to at most `max`
//!    entries.
//! 5. The lock is a `std::sync::Mutex` held only inside these synchronous
//!    methods (never across an `.await`); values are cloned out, never
//!    borrowed out.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

const MIN_SWEEP_AT: usize = 64;

struct Inner<K, V> {
    map: HashMap<K, (V, Instant)>,
    sweep_at: usize,
}

impl<K: Hash + Eq, V> Inner<K, V> {
    fn sweep(&mut self, now: Instant) {
        self.map.retain(|_, (_, expires)| *expires > now);
        self.sweep_at = (self.map.len() * 2).max(MIN_SWEEP_AT);
    }
}

/// A map whose entries expire `ttl` after they were inserted. Share it by
/// reference or `Arc`; every method takes `&self`.
pub struct TtlCache<K, V> {
    ttl: Duration,
    inner: Mutex<Inner<K, V>>,
}

impl<K, V> fmt::Debug for TtlCache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtlCache")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    /// An empty cache whose entries live for `ttl`. Starts nothing.
    pub fn new(ttl: Duration) -> TtlCache<K, V> {
        TtlCache {
            ttl,
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                sweep_at: MIN_SWEEP_AT,
            }),
        }
    }

    /// The time to live of every entry.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn lock(&self) -> MutexGuard<'_, Inner<K, V>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (every mutation is one HashMap call), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Inserts or replaces `key`, valid for `ttl` from now. Returns the
    /// previous value if it had not expired.
    pub fn insert(&self, key: K, value: V) -> Option<V> {
        self.insert_bounded(key, value, usize::MAX)
    }

    /// [`Self::insert`], keeping at most `max` entries: when `key` is new
    /// and `max` are held, the expired ones go, then, if that is not
    /// enough, all of them. One lock for all of it, so concurrent inserts
    /// cannot pass the bound.
    pub fn insert_bounded(&self, key: K, value: V, max: usize) -> Option<V> {
        let now = Instant::now();
        let mut inner = self.lock();
        if inner.map.len() >= inner.sweep_at {
            inner.sweep(now);
        }
        if inner.map.len() >= max && !inner.map.contains_key(&key) {
            inner.sweep(now);
            if inner.map.len() >= max {
                inner.map.clear();
                inner.sweep_at = MIN_SWEEP_AT;
            }
        }
        let expires = now + self.ttl;
        inner
            .map
            .insert(key, (value, expires))
            .and_then(|(v, old)| (old > now).then_some(v))
    }

    /// A clone of the value for `key`, if present and not expired (an
    /// expired entry is removed).
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Instant::now();
        let mut inner = self.lock();
        match inner.map.get(key) {
            Some((v, expires)) if *expires > now => Some(v.clone()),
            Some(_) => {
                inner.map.remove(key);
                None
            }
            None => None,
        }
    }

    /// The value for `key` if present and not expired; else `make()`'s,
    /// inserted (valid for `ttl` from now) under the same lock, so of
    /// callers racing on a missing key exactly one inserts and every one
    /// gets that value.
    pub fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> V {
        let now = Instant::now();
        let mut inner = self.lock();
        if let Some((v, expires)) = inner.map.get(&key)
            && *expires > now
        {
            return v.clone();
        }
        if inner.map.len() >= inner.sweep_at {
            inner.sweep(now);
        }
        let value = make();
        inner.map.insert(key, (value.clone(), now + self.ttl));
        value
    }

    /// Removes `key` when its value satisfies `pred` (a caller removing
    /// the entry it inserted, not one a later caller replaced it with);
    /// whether it did.
    pub fn remove_if<Q>(&self, key: &Q, pred: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut inner = self.lock();
        match inner.map.get(key) {
            Some((v, _)) if pred(v) => {
                inner.map.remove(key);
                true
            }
            _ => false,
        }
    }

    /// Keeps only the entries for which `keep` holds (and drops expired
    /// ones).
    pub fn retain(&self, mut keep: impl FnMut(&K, &V) -> bool) {
        let now = Instant::now();
        let mut inner = self.lock();
        inner
            .map
            .retain(|k, (v, expires)| *expires > now && keep(k, v));
    }

    /// Whether `key` is present and not expired.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Instant::now();
        let inner = self.lock();
        inner.map.get(key).is_some_and(|(_, e)| *e > now)
    }

    /// Removes `key`; returns its value if it had not expired.
    pub fn remove<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = Instant::now();
        let mut inner = self.lock();
        inner
            .map
            .remove(key)
            .and_then(|(v, e)| (e > now).then_some(v))
    }

    /// Number of unexpired entries (sweeps expired ones).
    pub fn len(&self) -> usize {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.sweep(now);
        inner.map.len()
    }

    /// Whether there is no unexpired entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry.
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.map.clear();
        inner.sweep_at = MIN_SWEEP_AT;
    }

    #[cfg(test)]
    fn stored(&self) -> usize {
        self.lock().map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Racing callers on a missing key share the one value inserted; an
    /// expired entry is made anew; `remove_if` removes only a matching
    /// value.
    #[tokio::test(start_paused = true)]
    async fn get_or_insert_with_inserts_once_and_remove_if_checks_the_value() {
        let cache = std::sync::Arc::new(TtlCache::new(Duration::from_secs(10)));
        let made = std::sync::atomic::AtomicUsize::new(0);
        let values: Vec<usize> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let cache = cache.clone();
                    let made = &made;
                    s.spawn(move || {
                        cache.get_or_insert_with("k", || {
                            made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            i
                        })
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(made.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(values.iter().all(|v| *v == values[0]));
        assert!(!cache.remove_if("k", |v| *v != values[0]));
        assert!(cache.remove_if("k", |v| *v == values[0]));
        assert_eq!(cache.get("k"), None);
        assert_eq!(cache.get_or_insert_with("k", || 42), 42);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            cache.get_or_insert_with("k", || 43),
            43,
            "expired: made anew"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn entry_expires_exactly_at_ttl() {
        let cache = TtlCache::new(Duration::from_secs(10));
        assert_eq!(cache.insert("a", 1), None);
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert_eq!(cache.get("a"), Some(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(cache.get("a"), None);
        assert!(!cache.contains("a"));
        assert_eq!(cache.stored(), 0, "expired entry removed on get");
    }

    #[tokio::test(start_paused = true)]
    async fn insert_refreshes_and_returns_only_live_previous() {
        let cache = TtlCache::new(Duration::from_secs(10));
        cache.insert("a", 1);
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(cache.insert("a", 2), Some(1));
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(cache.get("a"), Some(2), "re-insert restarts the ttl");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            cache.insert("a", 3),
            None,
            "expired previous is not returned"
        );
        assert_eq!(cache.remove("a"), Some(3));
        assert_eq!(cache.remove("a"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_on_insert() {
        let cache = TtlCache::new(Duration::from_secs(1));
        for i in 0..1_000 {
            cache.insert(i, i);
        }
        tokio::time::advance(Duration::from_secs(2)).await;
        // 1,000 stored after the last sweep at 512: the next sweep is due at
        // 1,024 stored entries (invariant 4), which these inserts reach.
        for i in 1_000..1_030 {
            cache.insert(i, i);
        }
        assert!(cache.stored() <= 30, "stored {}", cache.stored());
        assert_eq!(cache.len(), 30);
    }
}
