//! The object store: per-collection persistent ordered maps, one global
//! resourceVersion, and a bounded history of change events for watches.
//!
//! # Invariants
//! 1. Every write happens under the `state` mutex. Each stored change (create,
//!    update, delete) takes the next resourceVersion (`rv + 1`); an [`Entry`]'s
//!    `rv` is the version of the write that stored it and is also the
//!    `metadata.resourceVersion` inside its JSON. Dry runs take no version.
//! 2. `history` holds, in strictly increasing rv order, one [`Event`] for every
//!    write with `rv > floor`; evicting the oldest event raises `floor` to its rv.
//!    So a watch from version `v` is exact iff `v >= floor`.
//! 3. Readers clone a collection's `OrdMap` (O(1), structurally shared) together
//!    with `rv` under the mutex: a snapshot is the whole collection exactly at `rv`.
//! 4. The mutex is never held across an `.await` or a channel send: each
//!    collection's wake-up channel is taken under the guard ([`Wake`]) and sent
//!    after it is dropped, with `max`, so its value never goes back even when two
//!    writers notify out of order. A write wakes only the watches of the
//!    collections it changed (a pod write wakes no ConfigMap watch). Watchers
//!    only use it as a wake-up and read events from `history`.
//! 6. `last_change` holds, for every collection, the version of its latest
//!    event: a watch whose cursor fell below `floor` missed nothing if its
//!    collection has not changed since the cursor (it moves on; a watch of a
//!    quiet kind does not expire because other kinds are written).
//! 5. `registry` is immutable behind an `Arc` and replaced whole when a CRD is
//!    created, changed or deleted, in the same critical section as the CRD object.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use imbl::OrdMap;
use serde_json::{Value, json};

use crate::object::Entry;
use crate::resources::{CollectionKey, Registry, ResourceType};
use crate::status::ApiError;
use crate::{Error, Result};

mod write;

/// A collection: `(namespace, name)` → entry; namespace is "" for cluster-scoped kinds.
pub(crate) type Objects = OrdMap<(String, String), Arc<Entry>>;

/// How many change events the store keeps for resuming watches.
pub(crate) const HISTORY_CAPACITY: usize = 10_000;

/// The namespaces a fresh cluster has.
pub(crate) const DEFAULT_NAMESPACES: [&str; 4] =
    ["default", "kube-node-lease", "kube-public", "kube-system"];

/// A watch event type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventKind {
    Added,
    Modified,
    Deleted,
}

impl EventKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One stored change.
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) coll: CollectionKey,
    pub(crate) kind: EventKind,
    /// The object as of this event (for DELETED: its last state, at the deletion's version).
    pub(crate) entry: Arc<Entry>,
}

/// The requested watch version is older than the history reaches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TooOld {
    pub(crate) floor: u64,
}

/// What an update changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The object; its status is kept when the type has a status subresource.
    Main,
    /// Only `.status`.
    Status,
}

struct State {
    rv: u64,
    registry: Arc<Registry>,
    collections: HashMap<CollectionKey, Objects>,
    history: VecDeque<Arc<Event>>,
    floor: u64,
    rng: fastrand::Rng,
    count: usize,
    /// The version of each collection's latest event (invariant 6).
    last_change: HashMap<CollectionKey, u64>,
    /// Each watched collection's wake-up channel (invariant 4).
    wakers: HashMap<CollectionKey, Arc<tokio::sync::watch::Sender<u64>>>,
    /// Collections changed since the last [`State::wake`].
    touched: Vec<CollectionKey>,
}

struct Inner {
    state: Mutex<State>,
}

/// The wake-ups a write owes, taken under the lock and sent after it is
/// dropped (invariant 4).
#[must_use = "a write's watchers are woken by `send`"]
pub(crate) struct Wake {
    senders: Vec<Arc<tokio::sync::watch::Sender<u64>>>,
    rv: u64,
}

impl Wake {
    pub(crate) fn send(self) {
        for s in self.senders {
            s.send_modify(|v| *v = (*v).max(self.rv));
        }
    }
}

/// The sandbox's objects. Cheap to clone (a shared handle); usable without HTTP and
/// without faults (for tests and loaders of initial data).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.resource_version())
            .field("objects", &self.object_count())
            .finish()
    }
}

impl Store {
    /// A store holding the built-in kinds and the four default namespaces.
    pub(crate) fn new(seed: u64) -> Self {
        let store = Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    rv: 0,
                    registry: Arc::new(Registry::with_builtins()),
                    collections: HashMap::new(),
                    history: VecDeque::new(),
                    floor: 0,
                    rng: fastrand::Rng::with_seed(seed),
                    count: 0,
                    last_change: HashMap::new(),
                    wakers: HashMap::new(),
                    touched: Vec::new(),
                }),
            }),
        };
        for ns in DEFAULT_NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            store
                .load(obj)
                .expect("a default namespace is valid and new");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written state: every
        // mutation is a sequence of whole-value replacements done after validation.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver woken after every write to `coll` (its value: the latest
    /// version written).
    pub(crate) fn subscribe(&self, coll: &CollectionKey) -> tokio::sync::watch::Receiver<u64> {
        let mut st = self.lock();
        let rv = st.rv;
        st.wakers
            .entry(coll.clone())
            .or_insert_with(|| Arc::new(tokio::sync::watch::channel(rv).0))
            .subscribe()
    }

    // ----- public API (no HTTP, no faults) -----

    /// Creates an object, like a POST: assigns uid, resourceVersion and creationTimestamp
    /// (and a name from `generateName`). A namespaced object without a namespace goes to
    /// `default`; its namespace must exist. Creating a CRD registers its kinds.
    ///
    /// Errors are [`Error::Api`] with the code the server would answer (404, 409, 422, 400).
    pub fn create(&self, obj: Value) -> Result<Value> {
        Ok(self.load(obj)?.value())
    }

    /// [`Store::create`] without parsing the stored object back (bulk loading).
    pub(crate) fn load(&self, obj: Value) -> Result<Arc<Entry>> {
        let rt = self.type_of(&obj)?;
        Ok(self.create_in(&rt, None, obj, false)?)
    }

    /// Replaces an object, like a PUT. With `metadata.resourceVersion` set, a stale version
    /// is a 409 Conflict; without it the update is unconditional.
    pub fn update(&self, obj: Value) -> Result<Value> {
        let rt = self.type_of(&obj)?;
        let meta = obj.get("metadata");
        let s = |k| {
            meta.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let ns = if rt.namespaced {
            Some(s("namespace"))
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into())
        } else {
            String::new()
        };
        let name = s("name");
        let entry = self.modify(&rt, &ns, &name, Part::Main, false, false, |_| Ok(obj))?;
        Ok(entry.value())
    }

    /// Deletes an object. Deleting a namespace deletes everything in it; deleting a CRD
    /// unregisters its kinds and deletes their objects.
    pub fn delete(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<()> {
        let rt = self.type_by_kind(api_version, kind)?;
        let ns = if rt.namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        self.delete_in(&rt, ns, name, None, false)?;
        Ok(())
    }

    /// The object, if it exists.
    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value> {
        let rt = self.type_by_kind(api_version, kind)?;
        let ns = if rt.namespaced {
            namespace.unwrap_or("default")
        } else {
            ""
        };
        Ok(self.get_in(&rt, ns, name)?.value())
    }

    /// Every object of a kind (in one namespace, or all), ordered by namespace and name,
    /// from one consistent snapshot.
    pub fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>> {
        let rt = self.type_by_kind(api_version, kind)?;
        let (objects, _) = self.snapshot(&rt);
        Ok(objects
            .values()
            .filter(|e| namespace.is_none_or(|ns| e.namespace == ns))
            .map(|e| e.value())
            .collect())
    }

    /// How many objects are stored (all kinds, including namespaces and CRDs).
    pub fn object_count(&self) -> usize {
        self.lock().count
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// How many watches are open (each holds a subscription from the moment
    /// its request is accepted until its stream ends); tests wait on it.
    pub fn open_watches(&self) -> usize {
        let st = self.lock();
        st.wakers.values().map(|w| w.receiver_count()).sum()
    }

    fn type_of(&self, obj: &Value) -> Result<Arc<ResourceType>> {
        let s = |k| obj.get(k).and_then(Value::as_str).unwrap_or("");
        self.type_by_kind(s("apiVersion"), s("kind"))
    }

    fn type_by_kind(&self, api_version: &str, kind: &str) -> Result<Arc<ResourceType>> {
        self.lock()
            .registry
            .by_kind(api_version, kind)
            .ok_or_else(|| {
                Error::Api(ApiError::new(
                    404,
                    "NotFound",
                    format!("no matches for kind \"{kind}\" in version \"{api_version}\""),
                ))
            })
    }

    // ----- operations used by the HTTP API -----

    /// The current registry (served types).
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.lock().registry.clone()
    }

    /// The collection of `rt` exactly at the returned version.
    pub(crate) fn snapshot(&self, rt: &ResourceType) -> (Objects, u64) {
        let st = self.lock();
        let objects = st
            .collections
            .get(&rt.collection())
            .cloned()
            .unwrap_or_default();
        (objects, st.rv)
    }

    pub(crate) fn get_in(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
    ) -> Result<Arc<Entry>, ApiError> {
        let st = self.lock();
        st.collections
            .get(&rt.collection())
            .and_then(|c| c.get(&(ns.to_string(), name.to_string())))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// Reads up to `max` events after version `after` that pass `filter`.
    /// Returns them and the version up to which the history was scanned.
    pub(crate) fn events_after(
        &self,
        after: u64,
        max: usize,
        coll: &CollectionKey,
        filter: impl Fn(&Event) -> bool,
    ) -> Result<(Vec<Arc<Event>>, u64), TooOld> {
        let st = self.lock();
        if after < st.floor {
            // Nothing of `coll` happened after `after` (invariant 6): no event
            // was missed, the cursor moves to now.
            if st.last_change.get(coll).is_none_or(|&rv| rv <= after) {
                return Ok((Vec::new(), st.rv));
            }
            return Err(TooOld { floor: st.floor });
        }
        let start = st.history.partition_point(|e| e.rv <= after);
        let mut out = Vec::new();
        let mut cursor = after;
        for e in st.history.range(start..) {
            cursor = e.rv;
            if filter(e) {
                out.push(e.clone());
                if out.len() >= max {
                    break;
                }
            }
        }
        if out.len() < max {
            cursor = cursor.max(st.rv);
        }
        Ok((out, cursor))
    }
}

impl State {
    fn get(&self, coll: &CollectionKey, ns: &str, name: &str) -> Option<Arc<Entry>> {
        self.collections
            .get(coll)
            .and_then(|c| c.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    fn exists(&self, coll: &CollectionKey, ns: &str, name: &str) -> bool {
        self.collections
            .get(coll)
            .is_some_and(|c| c.contains_key(&(ns.to_string(), name.to_string())))
    }

    /// Stores `entry` (which carries the next version) and records its event.
    fn commit(&mut self, coll: CollectionKey, kind: EventKind, entry: Arc<Entry>) {
        debug_assert_eq!(entry.rv, self.rv + 1);
        self.rv = entry.rv;
        let key = (entry.namespace.clone(), entry.name.clone());
        let objects = self.collections.entry(coll.clone()).or_default();
        if kind == EventKind::Deleted {
            if objects.remove(&key).is_some() {
                self.count -= 1;
            }
        } else if objects.insert(key, entry.clone()).is_none() {
            self.count += 1;
        }
        self.last_change.insert(coll.clone(), entry.rv);
        self.touched.push(coll.clone());
        self.history.push_back(Arc::new(Event {
            rv: entry.rv,
            coll,
            kind,
            entry,
        }));
        while self.history.len() > HISTORY_CAPACITY {
            if let Some(old) = self.history.pop_front() {
                self.floor = old.rv;
            }
        }
    }

    /// The wake-ups owed to the watches of the collections changed since the
    /// last call: to be sent once the guard is dropped.
    fn wake(&mut self) -> Wake {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        Wake {
            senders: touched
                .iter()
                .filter_map(|c| self.wakers.get(c).cloned())
                .collect(),
            rv: self.rv,
        }
    }

    /// Deletes one object as a new version; returns its last state at that version.
    fn remove(
        &mut self,
        rt: &ResourceType,
        coll: &CollectionKey,
        ns: &str,
        name: &str,
    ) -> Option<Arc<Entry>> {
        let current = self.get(coll, ns, name)?;
        let rv = self.rv + 1;
        let mut obj = current.value();
        obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
        let entry = Arc::new(Entry::new(rt, &obj, rv));
        self.commit(coll.clone(), EventKind::Deleted, entry.clone());
        Some(entry)
    }

    fn suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHABET[self.rng.usize(..ALPHABET.len())] as char)
            .collect()
    }

    fn uid(&mut self) -> String {
        let r = &mut self.rng;
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            r.u32(..),
            r.u16(..),
            r.u16(..0x1000),
            r.u16(0x8000..0xc000),
            r.u64(..1 << 48)
        )
    }
}

/// The current time as RFC 3339 with seconds, as the API server writes timestamps.
pub(crate) fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(ns: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"a": "1"}})
    }

    #[test]
    fn fresh_store_has_default_namespaces() {
        let s = Store::new(0);
        assert_eq!(s.object_count(), 4);
        assert_eq!(s.resource_version(), 4);
        assert!(s.get("v1", "Namespace", None, "kube-system").is_ok());
    }

    #[test]
    fn create_update_delete() {
        let s = Store::new(1);
        let created = s.create(cm("default", "a")).unwrap();
        assert_eq!(created["metadata"]["resourceVersion"], "5");
        assert!(created["metadata"]["uid"].as_str().unwrap().len() == 36);
        let Err(Error::Api(e)) = s.create(cm("default", "a")) else {
            panic!()
        };
        assert_eq!((e.code(), e.reason()), (409, "AlreadyExists"));
        let Err(Error::Api(e)) = s.create(cm("nope", "a")) else {
            panic!()
        };
        assert_eq!(
            (e.code(), e.message()),
            (404, "namespaces \"nope\" not found")
        );
        let mut stale = created.clone();
        stale["metadata"]["resourceVersion"] = json!("4");
        let Err(Error::Api(e)) = s.update(stale) else {
            panic!()
        };
        assert_eq!(e.reason(), "Conflict");
        let mut next = created.clone();
        next["data"]["a"] = json!("2");
        let updated = s.update(next).unwrap();
        assert_eq!(updated["metadata"]["resourceVersion"], "6");
        assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
        // An unchanged update writes nothing.
        assert_eq!(
            s.update(updated.clone()).unwrap()["metadata"]["resourceVersion"],
            "6"
        );
        assert_eq!(s.list("v1", "ConfigMap", Some("default")).unwrap().len(), 1);
        assert_eq!(s.list("v1", "ConfigMap", Some("other")).unwrap().len(), 0);
        assert_eq!(s.list("v1", "Namespace", None).unwrap().len(), 4);
        s.delete("v1", "ConfigMap", Some("default"), "a").unwrap();
        assert_eq!(s.object_count(), 4);
        let (events, cursor) = s
            .events_after(4, 100, &coll("configmaps"), |_| true)
            .unwrap();
        let kinds: Vec<_> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [EventKind::Added, EventKind::Modified, EventKind::Deleted]
        );
        assert_eq!(cursor, 7);
    }

    /// A Pod's spec changes on update only where kube-apiserver lets it
    /// (its images, added tolerations...), with its words (seen with
    /// testenv's control plane: chainsaw's re-apply of a Pod whose
    /// containers lost their defaulted fields is refused there).
    #[test]
    fn pod_spec_updates_are_refused_as_kube_apiserver_refuses_them() {
        let s = Store::new(3);
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "a", "image": "x:1",
                "volumeMounts": [{"name": "v", "mountPath": "/v"}]}],
                "tolerations": [{"key": "k", "operator": "Exists"}]}});
        let created = s.create(pod).unwrap();
        let refused = |change: &dyn Fn(&mut Value)| {
            let mut next = s.get("v1", "Pod", Some("default"), "p").unwrap();
            change(&mut next);
            match s.update(next) {
                Err(Error::Api(e)) => Some((e.code(), e.message().to_string())),
                Ok(_) => None,
                Err(e) => panic!("{e}"),
            }
        };
        // Allowed: an image, an added toleration, labels.
        assert_eq!(
            refused(&|p| p["spec"]["containers"][0]["image"] = json!("x:2")),
            None
        );
        assert_eq!(
            refused(&|p| p["spec"]["tolerations"]
                .as_array_mut()
                .unwrap()
                .push(json!({"key": "j", "operator": "Exists"}))),
            None
        );
        assert_eq!(
            refused(&|p| p["metadata"]["labels"] = json!({"a": "b"})),
            None
        );
        let (code, message) = refused(&|p| {
            p["spec"]["containers"][0]
                .as_object_mut()
                .unwrap()
                .remove("volumeMounts");
        })
        .expect("a removed volume mount is refused");
        assert_eq!(code, 422);
        assert!(
            message.starts_with("Pod \"p\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
            "{message}"
        );
        assert!(
            refused(&|p| p["spec"]["tolerations"] = json!([])).is_some(),
            "removed toleration"
        );
        let (_, message) = refused(&|p| {
            p["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "b", "image": "y"}))
        })
        .unwrap();
        assert!(
            message.ends_with(
                "spec.containers: Forbidden: pod updates may not add or remove containers"
            ),
            "{message}"
        );
        // An update that changes nothing of the spec is no change at all.
        assert_eq!(refused(&|_| {}), None);
        assert_eq!(
            s.get("v1", "Pod", Some("default"), "p").unwrap()["metadata"]["uid"],
            created["metadata"]["uid"]
        );
    }

    #[test]
    fn namespace_delete_cascades_and_crd_registers() {
        let s = Store::new(2);
        s.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}))
            .unwrap();
        s.create(cm("x", "a")).unwrap();
        s.delete("v1", "Namespace", None, "x").unwrap();
        assert_eq!(s.object_count(), 4);
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.leash.dev"}, "spec": {"group": "example.leash.dev",
            "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        s.create(crd).unwrap();
        // Another CRD for the same group and kind is refused.
        let clash = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgetz.example.leash.dev"}, "spec": {"group": "example.leash.dev",
            "scope": "Namespaced", "names": {"plural": "widgetz", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true}]}});
        let Err(Error::Api(e)) = s.create(clash) else {
            panic!("clash accepted")
        };
        assert_eq!(e.code(), 422);
        s.create(json!({"apiVersion": "example.leash.dev/v1", "kind": "Widget", "metadata": {"name": "w"}}))
            .unwrap();
        s.delete(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "widgets.example.leash.dev",
        )
        .unwrap();
        assert_eq!(s.object_count(), 4);
        assert!(s.get("example.leash.dev/v1", "Widget", None, "w").is_err());
    }

    #[test]
    fn generate_name_and_history_floor() {
        let s = Store::new(3);
        let o = s
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x-"}}))
            .unwrap();
        assert!(o["metadata"]["name"].as_str().unwrap().starts_with("x-"));
        for i in 0..HISTORY_CAPACITY {
            s.create(cm("default", &format!("c{i}"))).unwrap();
        }
        let cms = coll("configmaps");
        assert!(s.events_after(3, 1, &cms, |_| true).is_err());
        assert!(
            s.events_after(s.resource_version() - 10, 100, &cms, |_| true)
                .unwrap()
                .0
                .len()
                == 10
        );
    }

    fn coll(name: &str) -> CollectionKey {
        Arc::from(name)
    }

    /// A cursor below the history's floor has missed nothing when its
    /// collection has not changed since: it moves to the latest version. Once
    /// an event of the collection is evicted past the cursor, it is too old.
    #[test]
    fn a_quiet_collection_does_not_expire_while_others_are_written() {
        let s = Store::new(4);
        let start = s.resource_version();
        for i in 0..HISTORY_CAPACITY + 10 {
            s.create(cm("default", &format!("c{i}"))).unwrap();
        }
        let (events, cursor) = s.events_after(start, 100, &coll("pods"), |_| true).unwrap();
        assert!(events.is_empty());
        assert_eq!(cursor, s.resource_version());
        let (events, cursor) = s
            .events_after(start, 100, &coll("secrets"), |_| true)
            .unwrap();
        assert!(events.is_empty() && cursor == s.resource_version());
        assert!(
            s.events_after(start, 100, &coll("configmaps"), |_| true)
                .is_err()
        );

        let before_pod = s.resource_version();
        s.create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]}}))
            .unwrap();
        for i in 0..HISTORY_CAPACITY {
            s.create(cm("default", &format!("d{i}"))).unwrap();
        }
        let e = s.events_after(before_pod, 100, &coll("pods"), |_| true);
        assert!(e.is_err(), "the pod's event was evicted past the cursor");
    }

    /// A write wakes the watches of the collections it changed and no
    /// others; a namespace deletion wakes those of every kind it removed.
    #[test]
    fn writes_wake_only_the_watches_of_what_they_changed() {
        let s = Store::new(5);
        let mut pods = s.subscribe(&coll("pods"));
        let mut cms = s.subscribe(&coll("configmaps"));
        assert_eq!(s.open_watches(), 2);
        s.create(cm("default", "a")).unwrap();
        assert!(cms.has_changed().unwrap());
        assert!(
            !pods.has_changed().unwrap(),
            "a ConfigMap write woke a pod watch"
        );
        cms.borrow_and_update();
        s.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}))
            .unwrap();
        s.create(cm("x", "b")).unwrap();
        s.create(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "x"}, "spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]}}),
        )
        .unwrap();
        pods.borrow_and_update();
        cms.borrow_and_update();
        s.delete("v1", "Namespace", None, "x").unwrap();
        assert!(pods.has_changed().unwrap() && cms.has_changed().unwrap());
        assert_eq!(*cms.borrow_and_update(), s.resource_version());
    }
}
