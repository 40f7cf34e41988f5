//! `--watch-crds`: feed the store from `GlobalContextEntry` objects in the
//! cluster (`kyverno.io/v2beta1`, `globalcontextentries`).
//!
//! # Invariants
//! 1. [`CrdFeeder::new`] starts nothing; [`CrdFeeder::run`] watches until its
//!    token is cancelled, every await raced against it.
//! 2. The feeder only touches entries it added: it remembers, per name, the
//!    object's UID and the [`EntryId`] the store gave it, and replaces or
//!    removes an entry only while the store still holds that incarnation
//!    (house rule 8). Names held by other entries (from files) are left
//!    alone, with a warning.
//! 3. Objects whose spec did not change (status or metadata updates) do not
//!    restart their entry.
//! 4. After each (re)list (`InitDone`), entries whose object no longer exists
//!    are removed, so a deletion missed while disconnected is not kept.
//! 5. Watch errors are logged and retried by the watcher's backoff.

use std::collections::{HashMap, HashSet};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use leash_runtime::{CancellationToken, cancellable};

use crate::cell::EntryId;
use crate::entry::ContextEntry;
use crate::error::chain;
use crate::parse::decode_entry;
use crate::spec::{GROUP, GlobalContextEntrySpec, KIND, PLURAL, STORAGE_VERSION};
use crate::store::Store;

/// Watches `GlobalContextEntry` objects and keeps the store in step.
pub struct CrdFeeder {
    store: Store,
    client: kube::Client,
    owned: HashMap<String, Owned>,
}

impl std::fmt::Debug for CrdFeeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdFeeder")
            .field("store", &self.store)
            .field("owned", &self.owned)
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
        }
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
            let Some(next) = cancellable(&token, stream.next()).await else {
                return Ok(());
            };
            let Some(event) = next else {
                token.cancelled().await;
                return Ok(());
            };
            let outcome = match event {
                Ok(watcher::Event::Init) => {
                    listed.clear();
                    None
                }
                Ok(watcher::Event::InitApply(object)) => {
                    if let Some(name) = object.metadata.name.clone() {
                        listed.insert(name);
                    }
                    Some(self.apply(object))
                }
                Ok(watcher::Event::InitDone) => Some(self.prune(&listed)),
                Ok(watcher::Event::Apply(object)) => Some(self.apply(object)),
                Ok(watcher::Event::Delete(object)) => Some(self.delete(object)),
                Err(err) => {
                    tracing::warn!(error = %chain(&err), "watch of GlobalContextEntry objects failed; retrying");
                    None
                }
            };
            if let Some(work) = outcome
                && cancellable(&token, work).await.is_none()
            {
                return Ok(());
            }
        }
    }

    /// Returns a future so that the caller races it against the token.
    fn apply(
        &mut self,
        object: DynamicObject,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let Some(name) = object.metadata.name.clone() else {
                return;
            };
            let uid = object.metadata.uid.clone();
            let entry = match entry_from_object(object) {
                Ok(entry) => entry,
                Err(err) => {
                    tracing::warn!(entry = %name, error = %chain(&err), "invalid GlobalContextEntry in the cluster; keeping what runs");
                    return;
                }
            };
            let current = self.store.entry_id(&name);
            match (self.owned.get(&name), current) {
                (Some(owned), Some(id)) if owned.id == id => {
                    if owned.uid == uid && owned.spec == entry.resource().spec {
                        return; // status or metadata change only
                    }
                }
                (_, Some(_)) => {
                    tracing::warn!(entry = %name, "a GlobalContextEntry has the name of an entry from a file; ignoring the cluster's");
                    self.owned.remove(&name);
                    return;
                }
                (_, None) => {}
            }
            let spec = entry.resource().spec.clone();
            match self.store.replace(entry).await {
                Ok(id) => {
                    self.owned.insert(name, Owned { uid, id, spec });
                }
                Err(err) => {
                    self.owned.remove(&name);
                    tracing::warn!(entry = %name, error = %chain(&err), "cannot add GlobalContextEntry from the cluster");
                }
            }
        })
    }

    fn delete(
        &mut self,
        object: DynamicObject,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let Some(name) = object.metadata.name.clone() else {
                return;
            };
            let matches = self
                .owned
                .get(&name)
                .is_some_and(|owned| owned.uid.is_none() || owned.uid == object.metadata.uid);
            if matches && let Some(owned) = self.owned.remove(&name) {
                self.store.remove_exact(&name, owned.id).await;
            }
        })
    }

    fn prune<'a>(
        &'a mut self,
        listed: &'a HashSet<String>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
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
        })
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
