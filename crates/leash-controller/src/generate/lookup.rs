//! Cluster data for one generate evaluation, fetched on demand.
//!
//! The engine is pure and synchronous; a clone rule or a `configMap`
//! context needs objects from the API server. [`Fetched`] answers from what
//! it holds and records every lookup it could not answer; the caller
//! fetches those (async, no lock held) and evaluates again, until nothing
//! new is asked for.
//!
//! # Invariants
//! 1. A [`Fetched`] belongs to one reconcile; nothing is spawned and
//!    nothing awaited while a lock is held (house rule 5). The objects and
//!    lists it holds change only through `&mut self` (`put_object`,
//!    `put_list`), between evaluations.
//! 2. The lookups an evaluation missed go into a `std::sync::Mutex<Vec>`
//!    (the engine reads through `&self`), each push under its own short
//!    guard; [`Fetched::take_missed`] takes the whole list out (sorted,
//!    deduplicated) and leaves it empty.
//! 3. `apiCall` answers are delegated to a [`crate::lookups::ScanData`]
//!    over the component's shared [`crate::lookups::Lookups`], with that
//!    module's invariants (one read per lookup in flight, cancellable).
//!
//! # Lock order
//! No two locks are held together: this module's `missed` lock is taken
//! alone, and the `ScanData` it delegates to is called with none held.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use leash_policy::ClusterData;
use serde_json::Value;

/// A lookup the engine made: `(apiVersion, kind or plural, namespace, name)`;
/// an empty name is a list.
pub type Lookup = (String, String, String, String);

/// See the module docs.
#[derive(Debug)]
pub struct Fetched {
    objects: HashMap<Lookup, Option<Arc<Value>>>,
    lists: HashMap<Lookup, Vec<Arc<Value>>>,
    missed: Mutex<Vec<Lookup>>,
    /// `apiCall` answers (`urlPath` and `service`), read as the scan reads
    /// them (kept for the scan's 30 s).
    calls: crate::lookups::ScanData,
}

impl Default for Fetched {
    fn default() -> Fetched {
        Fetched::new(Arc::new(crate::lookups::Lookups::default()))
    }
}

impl Fetched {
    /// Nothing held yet; `apiCall` answers come from (and go to) `calls`.
    pub fn new(calls: Arc<crate::lookups::Lookups>) -> Fetched {
        Fetched {
            objects: HashMap::new(),
            lists: HashMap::new(),
            missed: Mutex::new(Vec::new()),
            calls: crate::lookups::ScanData::new(Arc::new(crate::Cache::new()), calls),
        }
    }

    /// Reads the `apiCall`s evaluations asked for and did not find since
    /// the last call; false when there were none.
    pub async fn fetch_missed_calls(
        &self,
        client: &kube::Client,
        token: &tokio_util::sync::CancellationToken,
    ) -> bool {
        self.calls.fetch_missed(client, token).await
    }

    /// The lookups not answered since the last call (each once).
    pub fn take_missed(&self) -> Vec<Lookup> {
        let mut m = std::mem::take(&mut *self.missed.lock().unwrap_or_else(|e| e.into_inner()));
        m.sort();
        m.dedup();
        m
    }

    /// Records the answer of a get (`None`: not found).
    pub fn put_object(&mut self, key: Lookup, v: Option<Arc<Value>>) {
        self.objects.insert(key, v);
    }

    /// Records the answer of a list.
    pub fn put_list(&mut self, key: Lookup, v: Vec<Arc<Value>>) {
        self.lists.insert(key, v);
    }

    fn miss(&self, key: Lookup) {
        self.missed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(key);
    }
}

impl ClusterData for Fetched {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        let key = (
            api_version.to_string(),
            resource.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        match self.objects.get(&key) {
            Some(v) => v.clone(),
            None => {
                self.miss(key);
                None
            }
        }
    }

    fn api_get(&self, url_path: &str) -> Option<Value> {
        self.calls.api_get(url_path)
    }

    fn api_service(&self, call: &leash_policy::ServiceCall) -> Option<Value> {
        self.calls.api_service(call)
    }

    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        let key = (
            api_version.to_string(),
            resource.to_string(),
            namespace.to_string(),
            String::new(),
        );
        match self.lists.get(&key) {
            Some(v) => v.clone(),
            None => {
                self.miss(key);
                Vec::new()
            }
        }
    }
}
