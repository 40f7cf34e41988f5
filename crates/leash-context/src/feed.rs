//! `--watch-crds`: feed the store from `GlobalContextEntry` objects in the
//! cluster (`kyverno.io/v2beta1`, `globalcontextentries`).
//!
//! # Invariants
//! 1. [`CrdFeeder::new`] starts nothing; [`CrdFeeder::run`] watches until its
//!    token is cancelled, every await raced against it. It spawns nothing.
//! 2. The feeder only touches entries it added: it remembers, per name, the
//!    object's UID and the [`EntryId`] the store gave it, and replaces or
//!    removes an entry only while the store still holds that incarnation
//!    (house rule 8). Names held by other entries (from files) are left
//!    alone, with a warning.
//! 3. Objects whose spec did not change (status or metadata updates) do not
//!    restart their entry.
//! 4. After each (re)list (`InitDone`), entries whose object no longer exists
//!    are removed, so a deletion missed while disconnected is not kept.
//! 5. Nothing is dropped silently: an object refused because the store is
//!    full is kept aside, logged, and retried after every removal and every
//!    retry interval (Kyverno requeues after a minute) until it fits or its
//!    object is deleted. Invalid objects are logged; a running entry of that
//!    name keeps running.
//! 6. Watch errors are logged and retried by the watcher's backoff.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use leash_runtime::{CancellationToken, cancellable};

use crate::cell::EntryId;
use crate::entry::ContextEntry;
use crate::error::{Error, chain};
use crate::parse::decode_entry;
use crate::spec::{GROUP, GlobalContextEntrySpec, KIND, PLURAL, STORAGE_VERSION};
use crate::store::Store;

/// Kyverno's requeue delay when the store is full.
pub const DEFAULT_FULL_RETRY: Duration = Duration::from_secs(60);

/// Watches `GlobalContextEntry` objects and keeps the store in step.
pub struct CrdFeeder {
    store: Store,
    client: kube::Client,
    owned: HashMap<String, Owned>,
    deferred: BTreeMap<String, DynamicObject>,
    full_retry: Duration,
    handled: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for CrdFeeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdFeeder")
            .field("store", &self.store)
            .field("owned", &self.owned)
            .field("deferred", &self.deferred.keys().collect::<Vec<_>>())
            .field("full_retry", &self.full_retry)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Owned {
    uid: Option<String>,
    id: EntryId,
    spec: GlobalContextEntrySpec,
}

/// The `ApiResource` of Kyverno's storage version.
pub fn global_context_entry_resource() -> ApiResource {
    ApiResource {
        group: GROUP.to_owned(),
        version: STORAGE_VERSION.to_owned(),
        api_version: format!("{GROUP}/{STORAGE_VERSION}"),
        kind: KIND.to_owned(),
        plural: PLURAL.to_owned(),
    }
}

impl CrdFeeder {
    /// A feeder for `store`. Starts nothing.
    pub fn new(store: Store, client: kube::Client) -> CrdFeeder {
        CrdFeeder {
            store,
            client,
            owned: HashMap::new(),
            deferred: BTreeMap::new(),
            full_retry: DEFAULT_FULL_RETRY,
            handled: tokio::sync::watch::Sender::new(0),
        }
    }

    /// How many watch events (and timed retries of deferred objects) the
    /// feeder has finished handling: the store reflects every change the
    /// watch delivered before the count reached its value. A readiness
    /// signal for callers that must know a change was seen (and, say,
    /// refused) rather than guess with a timer.
    pub fn events_handled(&self) -> tokio::sync::watch::Receiver<u64> {
        self.handled.subscribe()
    }

    /// How long to wait before retrying objects refused by a full store
    /// (default [`DEFAULT_FULL_RETRY`]; they are also retried after every
    /// removal).
    pub fn full_retry(mut self, after: Duration) -> CrdFeeder {
        self.full_retry = after;
        self
    }

    /// Watch until `token` is cancelled. Entries it added stay in the store
    /// (the store's owner shuts them down).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops the watch; entries already
    /// added stay.
    pub async fn run(mut self, token: CancellationToken) -> crate::Result<()> {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &global_context_entry_resource());
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        let mut listed: HashSet<String> = HashSet::new();
        loop {
            let retry_delay = if self.deferred.is_empty() {
                None
            } else {
                Some(self.full_retry)
            };
            let next = tokio::select! {
                () = token.cancelled() => return Ok(()),
                next = stream.next() => next,
                () = sleep_or_never(retry_delay) => {
                    if cancellable(&token, self.retry_deferred()).await.is_none() {
                        return Ok(());
                    }
                    self.handled.send_modify(|n| *n += 1);
                    continue;
                }
            };
            let Some(event) = next else {
                token.cancelled().await;
                return Ok(());
            };
            let work = async {
                match event {
                    Ok(watcher::Event::Init) => listed.clear(),
                    Ok(watcher::Event::InitApply(object)) => {
                        if let Some(name) = object.metadata.name.clone() {
                            listed.insert(name);
                        }
                        self.apply(object).await;
                    }
                    Ok(watcher::Event::InitDone) => self.prune(&listed).await,
                    Ok(watcher::Event::Apply(object)) => self.apply(object).await,
                    Ok(watcher::Event::Delete(object)) => self.delete(object).await,
                    Err(err) => {
                        tracing::warn!(error = %chain(&err), "watch of GlobalContextEntry objects failed; retrying");
                    }
                }
            };
            if cancellable(&token, work).await.is_none() {
                return Ok(());
            }
            self.handled.send_modify(|n| *n += 1);
        }
    }

    async fn apply(&mut self, object: DynamicObject) {
        let Some(name) = object.metadata.name.clone() else {
            return;
        };
        let uid = object.metadata.uid.clone();
        let entry = match entry_from_object(object.clone()) {
            Ok(entry) => entry,
            Err(err) => {
                self.deferred.remove(&name);
                tracing::warn!(entry = %name, error = %chain(&err), "invalid GlobalContextEntry in the cluster; keeping what runs");
                return;
            }
        };
        match (self.owned.get(&name), self.store.entry_id(&name)) {
            (Some(owned), Some(id)) if owned.id == id => {
                if owned.uid == uid && owned.spec == entry.resource().spec {
                    return; // status or metadata change only
                }
            }
            (_, Some(_)) => {
                tracing::warn!(entry = %name, "a GlobalContextEntry has the name of an entry from a file; ignoring the cluster's");
                self.owned.remove(&name);
                self.deferred.remove(&name);
                return;
            }
            (_, None) => {}
        }
        let spec = entry.resource().spec.clone();
        match self.store.replace(entry).await {
            Ok(id) => {
                self.deferred.remove(&name);
                self.owned.insert(name, Owned { uid, id, spec });
            }
            Err(err @ Error::StoreFull { .. }) => {
                self.owned.remove(&name);
                tracing::warn!(entry = %name, error = %err, retry_in = ?self.full_retry, "GlobalContextEntry deferred until the store has room");
                self.deferred.insert(name, object);
            }
            Err(err) => {
                self.owned.remove(&name);
                self.deferred.remove(&name);
                tracing::warn!(entry = %name, error = %chain(&err), "cannot add GlobalContextEntry from the cluster");
            }
        }
    }

    async fn delete(&mut self, object: DynamicObject) {
        let Some(name) = object.metadata.name.clone() else {
            return;
        };
        self.deferred.remove(&name);
        let matches = self
            .owned
            .get(&name)
            .is_some_and(|owned| owned.uid.is_none() || owned.uid == object.metadata.uid);
        if matches
            && let Some(owned) = self.owned.remove(&name)
            && self.store.remove_exact(&name, owned.id).await
        {
            self.retry_deferred().await;
        }
    }

    async fn prune(&mut self, listed: &HashSet<String>) {
        self.deferred.retain(|name, _| listed.contains(name));
        let gone: Vec<String> = self
            .owned
            .keys()
            .filter(|name| !listed.contains(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(owned) = self.owned.remove(&name) {
                self.store.remove_exact(&name, owned.id).await;
            }
        }
        self.retry_deferred().await;
    }

    /// Try every deferred object again (each is deferred again if the store
    /// is still full).
    async fn retry_deferred(&mut self) {
        let deferred = std::mem::take(&mut self.deferred);
        for (_, object) in deferred {
            self.apply(object).await;
        }
    }
}

/// Sleeps for `delay`, or forever when there is nothing to wait for.
async fn sleep_or_never(delay: Option<Duration>) {
    match delay {
        Some(delay) => tokio::time::sleep(delay).await,
        None => std::future::pending().await,
    }
}

/// Validate a `GlobalContextEntry` read from the cluster (its status is ignored).
pub fn entry_from_object(object: DynamicObject) -> crate::Result<ContextEntry> {
    let mut value = serde_json::to_value(&object).map_err(|e| crate::Error::InvalidEntry {
        entry: object.metadata.name.clone().unwrap_or_default(),
        field: "<object>".to_owned(),
        reason: e.to_string(),
    })?;
    if let serde_json::Value::Object(map) = &mut value {
        map.entry("apiVersion")
            .or_insert_with(|| serde_json::Value::String(format!("{GROUP}/{STORAGE_VERSION}")));
        map.entry("kind")
            .or_insert_with(|| serde_json::Value::String(KIND.to_owned()));
        map.remove("status");
    }
    decode_entry(value).and_then(ContextEntry::from_resource)
}

/// List the cluster's `GlobalContextEntry` objects once (for `--once`):
/// the valid entries, and one error per invalid object.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn list_cluster_entries(
    client: &kube::Client,
) -> crate::Result<(Vec<ContextEntry>, Vec<crate::Error>)> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &global_context_entry_resource());
    let list =
        api.list(&Default::default())
            .await
            .map_err(|source| crate::Error::RequestFailed {
                method: "GET".to_owned(),
                path: format!("/apis/{GROUP}/{STORAGE_VERSION}/{PLURAL}"),
                source,
            })?;
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    for object in list.items {
        match entry_from_object(object) {
            Ok(entry) => entries.push(entry),
            Err(err) => errors.push(err),
        }
    }
    Ok((entries, errors))
}
