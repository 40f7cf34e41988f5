//! One view of the cluster for the whole process: the admission webhook,
//! the background scan and generate subscribe to a [`WatchHub`] instead of
//! watching on their own, so a kind more than one of them needs
//! (Namespaces: the scan's and admission's selectors, a generate rule's
//! trigger) is listed and watched once, into one [`Cache`] they all read;
//! and they share one answer cache for what they read on demand
//! ([`WatchHub::lookups`]).
//!
//! A [`Subscription`] keeps its kind watched while it lives; the watch
//! stops, and the kind's store leaves the cache, when the last one is
//! dropped. A subscriber that asked for changes gets the kind's changes
//! after it subscribed, and first the objects already stored (as
//! `Applied`, then `Listed` when the store is synced), so a late
//! subscriber misses nothing an early one saw; one that lags gets each
//! changed object's latest state ([`crate::feed`]), its backlog bounded by
//! the kind's objects.
//!
//! # Invariants
//! 1. One watch per kind: the map of watched kinds is a `std::sync::Mutex`
//!    under which a kind's watch is started (with its subscriber), a
//!    subscriber is added or removed, and the last one's removal cancels
//!    the watch and drops the store. It is never held across an await: the
//!    watch task calls [`WatchHub::fan_out`] synchronously from its change
//!    callback.
//! 2. No change is dropped and none waits unboundedly: changes go to each
//!    subscriber through its [`crate::feed`] (pushing never blocks the
//!    watch; at most one change waits per object, its latest), and the
//!    replay of the stored objects is pushed under the same lock a
//!    subscriber is added under, after it is added: a change stored before
//!    the replay is in it, one after it is pushed to the subscriber
//!    (either may replace the other, or come twice, which the consumers'
//!    queues absorb).
//! 3. Watch tasks run in the scope the hub was made with (its owner joins
//!    them), or in the hub's own ([`WatchHub::owned`], cancelled when the
//!    hub is dropped); each has its own child token, cancelled when its kind's last
//!    subscriber leaves. A watch whose kind stops being served (a deleted
//!    CRD) is tried again after [`RESTART_DELAY`], until cancelled.
//!
//! # Lock order
//! The hub's map lock, then a store's lock (the replay reads the store) or
//! a feed's (a push), never the other way round (the watch stores a change
//! before it calls `fan_out`, with no store lock held; a subscriber takes
//! from its feed holding no other lock).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::core::ApiResource;
use leash_runtime::{Scope, ScopeHandle};
use tokio_util::sync::CancellationToken;

use crate::cache::{Cache, KindKey, KindStore, kind_key};
use crate::feed::{Feed, Taker};
use crate::watch::{Change, Seen, WatchScope, watch_into};

/// How long a watch whose kind is not served waits before trying again.
pub const RESTART_DELAY: Duration = Duration::from_secs(5);

/// See the module docs.
pub struct WatchHub {
    client: kube::Client,
    metrics: Arc<crate::Metrics>,
    cache: Arc<Cache>,
    /// What evaluations read beyond the watched kinds (`configMap`,
    /// `apiCall`), kept for its TTL: one answer cache for every subscriber.
    lookups: Arc<crate::lookups::Lookups>,
    /// Kyverno's global context entries, when `serve` feeds them: set once,
    /// before the components read it.
    global: std::sync::OnceLock<leash_context::Store>,
    kinds: Mutex<HashMap<KindKey, Watched>>,
    next_id: AtomicU64,
    scope: ScopeHandle,
    /// The hub's own scope ([`WatchHub::owned`]): dropped with the hub,
    /// which cancels its watches.
    _own: Option<Scope>,
}

impl std::fmt::Debug for WatchHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchHub")
            .field("kinds", &self.watched().len())
            .finish_non_exhaustive()
    }
}

struct Watched {
    /// This watch's number: a cancelled watch of the kind still finishing
    /// does not reach a later watch's subscribers.
    watch: u64,
    subscribers: HashMap<u64, Option<Feed>>,
    token: CancellationToken,
}

/// A kind kept watched for its holder (see the module docs).
#[derive(Debug)]
pub struct Subscription {
    hub: Arc<WatchHub>,
    key: KindKey,
    id: u64,
    changes: Option<Taker>,
}

impl Subscription {
    /// The kind's store (in the hub's cache).
    pub fn store(&self) -> Option<Arc<KindStore>> {
        self.hub.cache.get_store(&self.key)
    }

    /// The next change of the kind, once there is one; None when the
    /// subscription was made without changes.
    pub async fn next(&mut self) -> Option<Change> {
        match &mut self.changes {
            Some(taker) => taker.next().await,
            None => None,
        }
    }
}

impl Subscription {
    /// [`Subscription::next`], or None once `token` is cancelled.
    pub async fn next_until(&mut self, token: &CancellationToken) -> Option<Change> {
        token.run_until_cancelled(self.next()).await.flatten()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.release(&self.key, self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic under the lock left the map whole (each section is one map
    // operation and channel sends).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WatchHub {
    /// A hub whose watches run in `scope` (its owner joins them when it
    /// shuts the scope down). Starts nothing until a kind is subscribed.
    pub fn new(client: kube::Client, metrics: Arc<crate::Metrics>, scope: &Scope) -> Arc<WatchHub> {
        Self::with(client, metrics, scope.handle(), None)
    }

    /// A hub whose watches run in a scope of its own, cancelled (not
    /// joined) when the last holder drops the hub: for callers with no
    /// scope to give (tests, one-off components).
    pub fn owned(client: kube::Client, metrics: Arc<crate::Metrics>) -> Arc<WatchHub> {
        let own = Scope::new();
        Self::with(client, metrics, own.handle(), Some(own))
    }

    fn with(
        client: kube::Client,
        metrics: Arc<crate::Metrics>,
        scope: ScopeHandle,
        own: Option<Scope>,
    ) -> Arc<WatchHub> {
        Arc::new(WatchHub {
            client,
            metrics,
            cache: Arc::new(Cache::new()),
            lookups: Arc::new(crate::lookups::Lookups::default()),
            global: std::sync::OnceLock::new(),
            kinds: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            scope,
            _own: own,
        })
    }

    /// The cache every watched kind's store is in.
    pub fn cache(&self) -> Arc<Cache> {
        self.cache.clone()
    }

    /// The answer cache of on-demand reads, shared by the hub's users
    /// (see [`crate::lookups::Lookups`]: one read per lookup in flight, and
    /// a waiter whose reader was cancelled reads itself).
    pub fn lookups(&self) -> Arc<crate::lookups::Lookups> {
        self.lookups.clone()
    }

    /// Serves `store`'s global context entries (`globalReference`, CEL
    /// `globalContext.Get`) to the hub's users; false when a store was set
    /// already (it is kept).
    pub fn serve_global(&self, store: leash_context::Store) -> bool {
        self.global.set(store).is_ok()
    }

    /// The global context entries, when served.
    pub fn global(&self) -> Option<leash_context::Store> {
        self.global.get().cloned()
    }

    /// The cluster view of one evaluation: the hub's cache, its answer
    /// cache and, when served, the global context entries.
    pub fn data(&self) -> crate::lookups::ScanData {
        let data = crate::lookups::ScanData::new(self.cache.clone(), self.lookups.clone());
        match self.global.get() {
            Some(store) => data.with_global(store.clone()),
            None => data,
        }
    }

    /// The kinds watched now.
    pub fn watched(&self) -> Vec<KindKey> {
        lock(&self.kinds).keys().cloned().collect()
    }

    /// Keeps `resource` watched while the subscription lives, its store in
    /// the cache; with `changes`, the subscription receives them (after
    /// the objects stored already).
    pub fn subscribe(
        self: &Arc<Self>,
        resource: &ApiResource,
        namespaced: bool,
        changes: bool,
    ) -> Subscription {
        let key = kind_key(resource);
        // Relaxed: a unique number, ordering nothing.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (feed, taker) = if changes {
            let (feed, taker) = crate::feed::feed();
            (Some(feed), Some(taker))
        } else {
            (None, None)
        };
        let mut kinds = lock(&self.kinds);
        match kinds.get_mut(&key) {
            Some(watched) => {
                watched.subscribers.insert(id, feed);
                let feed = &watched.subscribers[&id];
                if let (Some(feed), Some(store)) = (feed, self.cache.get_store(&key)) {
                    for (namespace, name) in store.keys() {
                        if let Some(stored) = store.get_stored(&namespace, &name) {
                            feed.push(Change::Applied(Seen::from_stored(stored)));
                        }
                    }
                    if store.is_synced() {
                        feed.push(Change::Listed {
                            removed: Vec::new(),
                        });
                    }
                }
            }
            None => {
                let store = self.cache.store(resource, namespaced);
                let token = self.scope.token().child_token();
                kinds.insert(
                    key.clone(),
                    Watched {
                        watch: id,
                        subscribers: HashMap::from([(id, feed)]),
                        token: token.clone(),
                    },
                );
                self.start(resource.clone(), key.clone(), id, store, token);
            }
        }
        Subscription {
            hub: self.clone(),
            key,
            id,
            changes: taker,
        }
    }

    fn start(
        self: &Arc<Self>,
        resource: ApiResource,
        key: KindKey,
        watch: u64,
        store: Arc<KindStore>,
        token: CancellationToken,
    ) {
        // The task holds the hub weakly: a hub nobody holds any more ends
        // its watches (their tokens are its scope's children).
        let hub = Arc::downgrade(self);
        let (client, metrics) = (self.client.clone(), self.metrics.clone());
        self.scope
            .spawn(format!("watch {}", resource.plural), async move {
                while !token.is_cancelled() {
                    let fan = hub.clone();
                    let k = key.clone();
                    watch_into(
                        client.clone(),
                        resource.clone(),
                        WatchScope {
                            end_on_not_found: true,
                            ..WatchScope::default()
                        },
                        store.clone(),
                        token.clone(),
                        |change| {
                            if let Some(hub) = fan.upgrade() {
                                hub.fan_out(&k, watch, change);
                            }
                        },
                        |_| {
                            metrics.api_errors.inc();
                        },
                    )
                    .await;
                    // Not served (or cancelled): try again later.
                    if token
                        .run_until_cancelled(tokio::time::sleep(RESTART_DELAY))
                        .await
                        .is_none()
                    {
                        break;
                    }
                }
                Ok::<(), std::convert::Infallible>(())
            });
    }

    /// Sends a change of `key` to its subscribers that asked for changes.
    fn fan_out(&self, key: &KindKey, watch: u64, change: Change) {
        let kinds = lock(&self.kinds);
        if let Some(watched) = kinds.get(key).filter(|w| w.watch == watch) {
            for feed in watched.subscribers.values().flatten() {
                feed.push(change.clone());
            }
        }
    }

    fn release(&self, key: &KindKey, id: u64) {
        let mut kinds = lock(&self.kinds);
        let Some(watched) = kinds.get_mut(key) else {
            return;
        };
        watched.subscribers.remove(&id);
        if watched.subscribers.is_empty() {
            watched.token.cancel();
            kinds.remove(key);
            self.cache.drop_store(key);
        }
    }
}
