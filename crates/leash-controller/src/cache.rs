//! The objects the watchers keep: one store per kind, shared read-only by
//! the workers, the admission webhook and the engine's lookups.
//!
//! A store maps `(namespace, name)` to a [`Stored`] (the object's JSON text
//! in an `Arc<[u8]>` and its resourceVersion): an update replaces the entry,
//! nobody ever writes into a stored object, and every read parses its own
//! `Value` (seed 000: background scan goroutines wrote into one shared map
//! of the informer cache).
//!
//! # Invariants
//! 1. A [`KindStore`]'s objects are behind a `std::sync::RwLock` held only
//!    to clone a `Stored` (or the keys) out, or to insert, remove or swap
//!    entries; parsing (`decode`) happens after the guard is dropped. No
//!    guard lives across an await (house rule 5; nothing here is async but
//!    [`CacheWatcher::run`], which holds none). Poisoned locks are
//!    recovered.
//! 2. A store's `generation` is bumped (Release) after every change, once
//!    the write guard is dropped; a reader that loads it (Acquire) sees that
//!    change. Values come from one process-wide `AtomicU64`, so no two
//!    stores, not even one dropped and made again, share a generation.
//! 3. `synced` (an `AtomicBool`, Release/Acquire) only goes from false to
//!    true, set by the watch after it stored its first list
//!    (`replace_all`, then `mark_synced`): a reader that sees it true sees
//!    that list.
//! 4. A `put_if_newer` never puts back an older numeric resourceVersion
//!    than the one stored; the check and the insert are under one write
//!    guard.
//! 5. The [`Cache`]'s map of stores is a `std::sync::RwLock` held only to
//!    clone an `Arc<KindStore>` out or insert/remove one; [`Cache::store`]
//!    drops its read guard before taking the write guard and creates the
//!    store under it, so a kind never has two stores at once.
//! 6. [`CacheWatcher::run`] spawns one watch per kind in a child scope of
//!    the caller's token; after the token is cancelled it shuts that scope
//!    down (cancel, then join every watch) before it returns. The stores
//!    stay in the cache with their last contents.
//!
//! # Lock order
//! No two locks are ever held together: the cache's map guard is released
//! before a store's lock is taken (lookups clone the store's `Arc` out
//! first), and no store's lock is held while another store's is taken.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use kube::core::ApiResource;
use leash_policy::ClusterData;
use serde_json::Value;

/// `(apiVersion, kind)` of a watched kind.
pub type KindKey = (String, String);

/// The key of a kind's resource: `(apiVersion, kind)`.
pub fn kind_key(ar: &ApiResource) -> KindKey {
    (ar.api_version.clone(), ar.kind.clone())
}

/// One stored object: its compact JSON (a parsed `Value` takes several
/// times the memory of its text; 10,000 pods are ~50 MB of text) and its
/// resourceVersion. Parsed again on each read: a reader gets its own
/// `Value`, so nothing it does can change what the store holds.
#[derive(Debug, Clone)]
pub struct Stored {
    rv: Option<u64>,
    bytes: Arc<[u8]>,
}

impl Stored {
    /// Encodes an object.
    pub fn encode(v: &Value) -> Stored {
        Stored {
            rv: v["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse().ok()),
            bytes: serde_json::to_vec(v).unwrap_or_default().into(),
        }
    }

    /// An object's JSON text as a watch sent it (not parsed here).
    pub fn from_json(resource_version: Option<&str>, json: &str) -> Stored {
        Stored {
            rv: resource_version.and_then(|s| s.parse().ok()),
            bytes: json.as_bytes().into(),
        }
    }

    /// `metadata.resourceVersion`, when it is a number.
    pub fn resource_version(&self) -> Option<u64> {
        self.rv
    }

    /// The object's JSON text.
    pub fn json(&self) -> &[u8] {
        &self.bytes
    }

    /// The object, parsed.
    pub fn decode(&self) -> Option<Arc<Value>> {
        serde_json::from_slice(&self.bytes).ok().map(Arc::new)
    }

    /// Whether two encodings hold the same document.
    pub fn same(&self, other: &Stored) -> bool {
        self.bytes == other.bytes
    }
}

/// The source of [`KindStore::generation`]s: one counter for the process,
/// so a store made again after it was dropped never repeats a value.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, Ordering::Relaxed)
}

/// The objects of one kind.
#[derive(Debug)]
pub struct KindStore {
    /// The kind's resource.
    pub resource: ApiResource,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    objects: RwLock<HashMap<(String, String), Stored>>,
    synced: AtomicBool,
    /// Changes after every change of `objects` (see [`KindStore::generation`]).
    generation: AtomicU64,
}

impl KindStore {
    /// An empty store.
    pub fn new(resource: ApiResource, namespaced: bool) -> KindStore {
        KindStore {
            resource,
            namespaced,
            objects: RwLock::new(HashMap::new()),
            synced: AtomicBool::new(false),
            generation: AtomicU64::new(next_generation()),
        }
    }

    /// A number that differs after every change of the stored objects (and
    /// between stores): what is computed from a list may be kept while the
    /// generation read before the list is still the current one. Bumped
    /// after the change is stored (Release), so a reader that sees a
    /// generation (Acquire) sees its change too.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn changed(&self) {
        self.generation.store(next_generation(), Ordering::Release);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<(String, String), Stored>> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<(String, String), Stored>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let stored = self
            .read()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()?;
        stored.decode()
    }

    /// One object's encoding.
    pub fn get_stored(&self, namespace: &str, name: &str) -> Option<Stored> {
        self.read()
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Whether an object is stored.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.read()
            .contains_key(&(namespace.to_string(), name.to_string()))
    }

    /// Stores (or replaces) an object.
    pub fn put(&self, namespace: &str, name: &str, object: &Value) {
        let stored = Stored::encode(object);
        self.write()
            .insert((namespace.to_string(), name.to_string()), stored);
        self.changed();
    }

    /// Stores an object unless the store holds a newer version of it (by
    /// numeric resourceVersion): a watch event that trails a write this
    /// process made must not put the older version back.
    pub fn put_if_newer(&self, namespace: &str, name: &str, object: &Value) {
        self.put_stored_if_newer(namespace, name, Stored::encode(object));
    }

    /// [`KindStore::put_if_newer`] of an encoded object.
    pub fn put_stored_if_newer(&self, namespace: &str, name: &str, stored: Stored) {
        {
            let mut map = self.write();
            let key = (namespace.to_string(), name.to_string());
            if let Some(old) = map.get(&key)
                && let (Some(old_rv), Some(new_rv)) = (old.rv, stored.rv)
                && new_rv < old_rv
            {
                return;
            }
            map.insert(key, stored);
        }
        self.changed();
    }

    /// Removes an object.
    pub fn remove(&self, namespace: &str, name: &str) -> bool {
        let removed = self
            .write()
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// Replaces every object (a watcher's re-list).
    pub fn replace_all(&self, objects: HashMap<(String, String), Stored>) {
        *self.write() = objects;
        self.changed();
    }

    /// Every object of a namespace ("" for all).
    pub fn list(&self, namespace: &str) -> Vec<Arc<Value>> {
        let stored: Vec<Stored> = self
            .read()
            .iter()
            .filter(|((ns, _), _)| namespace.is_empty() || ns == namespace)
            .map(|(_, v)| v.clone())
            .collect();
        stored.iter().filter_map(Stored::decode).collect()
    }

    /// Every object's `(namespace, name)`.
    pub fn keys(&self) -> Vec<(String, String)> {
        self.read().keys().cloned().collect()
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the first list has been stored.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Marks the first list stored.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }
}

/// Every watched kind's store.
#[derive(Debug, Default)]
pub struct Cache {
    kinds: RwLock<HashMap<KindKey, Arc<KindStore>>>,
}

impl Cache {
    /// An empty cache.
    pub fn new() -> Cache {
        Cache::default()
    }

    /// The store of a kind, created empty if new.
    pub fn store(&self, resource: &ApiResource, namespaced: bool) -> Arc<KindStore> {
        let key = kind_key(resource);
        if let Some(s) = self
            .kinds
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return s.clone();
        }
        let mut kinds = self.kinds.write().unwrap_or_else(|e| e.into_inner());
        kinds
            .entry(key)
            .or_insert_with(|| Arc::new(KindStore::new(resource.clone(), namespaced)))
            .clone()
    }

    /// The store of a kind, if watched.
    pub fn get_store(&self, key: &KindKey) -> Option<Arc<KindStore>> {
        self.kinds
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Drops a kind's store (its watcher stopped).
    pub fn drop_store(&self, key: &KindKey) {
        self.kinds
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Every store.
    pub fn stores(&self) -> Vec<Arc<KindStore>> {
        self.kinds
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// The store for an `apiVersion` and a kind or plural (`Pod`, `pods`).
    fn find(&self, api_version: &str, resource: &str) -> Option<Arc<KindStore>> {
        let kinds = self.kinds.read().unwrap_or_else(|e| e.into_inner());
        kinds
            .values()
            .find(|s| {
                (api_version.is_empty() || s.resource.api_version == api_version)
                    && (s.resource.kind == resource || s.resource.plural == resource)
            })
            .cloned()
    }

    /// Whether a kind (by `apiVersion` and kind or plural) is watched and
    /// its first list stored: what the cache answers for it is complete.
    pub fn serves(&self, api_version: &str, resource: &str) -> bool {
        self.find(api_version, resource)
            .is_some_and(|s| s.is_synced())
    }

    /// The labels of a namespace, when namespaces are watched.
    pub fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        self.find("v1", "Namespace")?.get("", name)
    }
}

impl ClusterData for Cache {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.find(api_version, resource)?.get(namespace, name)
    }

    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        self.find(api_version, resource)
            .map(|s| s.list(namespace))
            .unwrap_or_default()
    }

    fn generation(&self, api_version: &str, resource: &str) -> Option<u64> {
        self.find(api_version, resource).map(|s| s.generation())
    }
}

/// Keeps a fixed set of kinds in a [`Cache`] (the admission webhook's
/// lookups: namespaces for selectors, role bindings for the user's roles):
/// watched on its own, or through a [`crate::WatchHub`]
/// ([`CacheWatcher::on_hub`]: its cache, one watch per kind shared with
/// the background scan). Starts nothing until [`CacheWatcher::run`].
pub struct CacheWatcher {
    client: kube::Client,
    kinds: Vec<(ApiResource, bool)>,
    cache: Arc<Cache>,
    metrics: Arc<crate::Metrics>,
    hub: Option<Arc<crate::WatchHub>>,
}

impl std::fmt::Debug for CacheWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWatcher")
            .field("kinds", &self.kinds.len())
            .finish_non_exhaustive()
    }
}

impl CacheWatcher {
    /// Namespaces, RoleBindings and ClusterRoleBindings.
    pub fn for_admission(client: kube::Client, metrics: Arc<crate::Metrics>) -> CacheWatcher {
        use crate::object::api_resource;
        CacheWatcher {
            client,
            kinds: vec![
                (api_resource("", "v1", "Namespace", "namespaces"), false),
                (
                    api_resource(
                        "rbac.authorization.k8s.io",
                        "v1",
                        "RoleBinding",
                        "rolebindings",
                    ),
                    true,
                ),
                (
                    api_resource(
                        "rbac.authorization.k8s.io",
                        "v1",
                        "ClusterRoleBinding",
                        "clusterrolebindings",
                    ),
                    false,
                ),
            ],
            cache: Arc::new(Cache::new()),
            metrics,
            hub: None,
        }
    }

    /// The same kinds, kept watched through `hub` (subscribed while
    /// [`CacheWatcher::run`] runs), in its cache.
    pub fn on_hub(mut self, hub: Arc<crate::WatchHub>) -> CacheWatcher {
        self.cache = hub.cache();
        self.hub = Some(hub);
        self
    }

    /// The cache it fills.
    pub fn cache(&self) -> Arc<Cache> {
        self.cache.clone()
    }

    /// Watches until `token` is cancelled.
    pub async fn run(
        self,
        token: tokio_util::sync::CancellationToken,
    ) -> Result<(), leash_runtime::ScopeError> {
        if let Some(hub) = &self.hub {
            let held: Vec<crate::Subscription> = self
                .kinds
                .iter()
                .map(|(ar, namespaced)| hub.subscribe(ar, *namespaced, false))
                .collect();
            token.cancelled().await;
            drop(held);
            return Ok(());
        }
        let scope = leash_runtime::Scope::with_parent_token(&token);
        for (ar, namespaced) in self.kinds {
            let store = self.cache.store(&ar, namespaced);
            let (client, metrics, token) = (
                self.client.clone(),
                self.metrics.clone(),
                scope.token().clone(),
            );
            scope.spawn(format!("cache watch {}", ar.plural), async move {
                crate::watch::watch_into(
                    client,
                    ar,
                    crate::watch::WatchScope::default(),
                    store,
                    token,
                    |_| {},
                    |_| {
                        metrics.api_errors.inc();
                    },
                )
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        token.cancelled().await;
        scope.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::object::api_resource;

    #[test]
    fn stores_by_kind_and_answers_lookups_by_kind_or_plural() {
        let cache = Cache::new();
        let pods = cache.store(&api_resource("", "v1", "Pod", "pods"), true);
        let again = cache.store(&api_resource("", "v1", "Pod", "pods"), true);
        assert!(Arc::ptr_eq(&pods, &again));
        pods.put("a", "p", &json!({"kind": "Pod"}));
        assert!(cache.get("v1", "pods", "a", "p").is_some());
        assert!(cache.get("v1", "Pod", "a", "p").is_some());
        assert!(cache.get("apps/v1", "pods", "a", "p").is_none());
        assert_eq!(cache.list("", "pods", "").len(), 1);
        assert_eq!(cache.list("", "pods", "b").len(), 0);
        let ns = cache.store(&api_resource("", "v1", "Namespace", "namespaces"), false);
        ns.put("", "a", &json!({"metadata": {"labels": {"x": "y"}}}));
        assert_eq!(
            cache.namespace("a").unwrap()["metadata"]["labels"]["x"],
            "y"
        );
        cache.drop_store(&kind_key(&pods.resource));
        assert!(cache.get("v1", "pods", "a", "p").is_none());
    }

    #[test]
    fn the_generation_changes_with_every_change_and_between_stores() {
        let cache = Cache::new();
        let ar = api_resource(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        );
        let store = cache.store(&ar, true);
        let rv = |n: u64| json!({"metadata": {"resourceVersion": n.to_string()}});
        let mut seen = vec![store.generation()];
        let mut changed = |what: &str| {
            let now = cache
                .generation("rbac.authorization.k8s.io/v1", "rolebindings")
                .unwrap();
            assert!(
                !seen.contains(&now),
                "{what}: the generation did not change"
            );
            seen.push(now);
        };
        store.put("a", "x", &rv(5));
        changed("put");
        store.put_if_newer("a", "x", &rv(6));
        changed("put_if_newer");
        let before = store.generation();
        store.put_if_newer("a", "x", &rv(2));
        assert_eq!(store.generation(), before, "an older version is not stored");
        assert!(!store.remove("a", "missing"));
        assert_eq!(store.generation(), before, "nothing removed");
        store.remove("a", "x");
        changed("remove");
        store.replace_all(HashMap::new());
        changed("replace_all");
        cache.drop_store(&kind_key(&ar));
        assert_eq!(
            cache.generation("rbac.authorization.k8s.io/v1", "rolebindings"),
            None
        );
        cache.store(&ar, true);
        changed("a store made again");
    }
}
