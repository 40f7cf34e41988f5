//! Cluster data the watched kinds do not hold: a `configMap` context entry,
//! an `apiCall` `urlPath` or `service`, a CEL `resource.Get`/`List` of a
//! kind no policy matches. [`ScanData`] is the one cluster view of the
//! background scan, admission, generate ([`ScanData::reading_afresh`]) and
//! `leash apply --cluster`.
//!
//! The engine is pure and synchronous, so it never waits on the network.
//! [`ScanData`] answers an evaluation from the watched [`Cache`] and from
//! [`Lookups`], the API server's answers kept for a short while (one GET per
//! distinct path per [`Lookups::ttl`], however many resources ask: workers
//! that miss the same path at the same moment wait for the one that reads
//! it), and records what neither holds; the worker fetches those (async, no
//! lock held, cancellable) and evaluates again ([`ScanData::settle`]: the
//! one evaluate-fetch-evaluate loop of the scan, admission and `leash apply
//! --cluster`). A failed read is kept as "no data" for the same while, so a
//! policy whose `apiCall` fails gives the rule's error (or its `default`)
//! without a GET per resource; [`Lookups::retrying_failures`] keeps only
//! answers (a 404 is one), and a failed read is "no data" for the one
//! evaluation that asked (`leash apply --cluster`: the next object tries
//! again).
//!
//! # Invariants
//! 1. A [`Lookups`] is shared (behind an `Arc`): in `serve`, one instance
//!    (the [`crate::WatchHub`]'s) by the scan's workers, generate and
//!    admission's reviews. Its `answers` are the runtime's
//!    [`leash_runtime::TtlCache`] (its lock held inside its methods) and
//!    its `reading` map is behind a `std::sync::Mutex` taken for a few
//!    statements; neither is held across an await (house rule 5):
//!    [`Lookups::fetch`] decides its turn under the locks, releases them,
//!    then reads from the network.
//! 2. At most one read per lookup is in flight: the first worker that
//!    misses a key inserts a claim into `reading` (under its lock, after
//!    checking it is absent); later ones wait on that claim's `watch`
//!    receiver. The answer is kept before the claim is dropped, and the
//!    claim's `Drop` removes the map entry before its sender goes, so a
//!    woken waiter finds the answer, or (the reader failed, was cancelled
//!    or dropped) no claim and takes the read itself.
//! 3. Every wait and every read is raced against the token; `fetch`
//!    returns `false` when it is cancelled, and the claim is released by
//!    `Drop` on every path, a cancelled or dropped future included.
//! 4. Memory is bounded: at most `max` answers (past it, expired ones go,
//!    then all), and `reading` holds only reads in progress. An answer,
//!    a failure as "no data" included, is used for `ttl` only.
//! 5. A [`ScanData`] lives for one work item (or one review, or one object
//!    of `leash apply --cluster`): its `missed` list and its `failed` set
//!    are each behind its own `std::sync::Mutex` (the engine takes
//!    `&self`), appended to during the synchronous evaluations or between
//!    them by [`ScanData::fetch_all`], never across an await.
//!
//! # Lock order
//! No two locks are held together: `turn` releases `answers` before it
//! takes `reading` and drops `reading` before it looks at `answers` again;
//! `ScanData` takes its `failed`, releases it, takes `answers` (through
//! `Lookups::answer`) and then, after it is released, its own `missed`; the
//! cache's locks are taken alone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leash_policy::{ClusterData, ImageTrust, ServiceCall};
use leash_runtime::TtlCache;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cache::Cache;

/// One lookup an evaluation made.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lookup {
    /// An object: `apiVersion`, resource (plural), namespace, name.
    Get(String, String, String, String),
    /// A list: `apiVersion`, resource (plural), namespace ("" for all).
    List(String, String, String),
    /// An `apiCall` `urlPath`.
    Api(String),
    /// An `apiCall` `service` call.
    Service(ServiceCall),
}

impl Lookup {
    /// The API path read for it. A kind (`ConfigMap`) is read as its
    /// conventional plural (`configmaps`); `None` without an apiVersion.
    fn path(&self) -> Option<String> {
        let prefix = |av: &str| {
            if av.contains('/') {
                format!("/apis/{av}")
            } else {
                format!("/api/{av}")
            }
        };
        let plural = |r: &str| {
            if r.starts_with(|c: char| c.is_ascii_uppercase()) {
                leash_policy::kinds::plural_of(r)
            } else {
                r.to_string()
            }
        };
        let scoped = |ns: &str| {
            if ns.is_empty() {
                String::new()
            } else {
                format!("/namespaces/{ns}")
            }
        };
        match self {
            Lookup::Get(av, r, ns, name) if !r.is_empty() && !av.is_empty() => {
                Some(format!("{}{}/{}/{name}", prefix(av), scoped(ns), plural(r)))
            }
            Lookup::List(av, r, ns) if !r.is_empty() && !av.is_empty() => {
                Some(format!("{}{}/{}", prefix(av), scoped(ns), plural(r)))
            }
            Lookup::Api(path) => Some(path.clone()),
            Lookup::Service(call) => Some(call.url.clone()),
            _ => None,
        }
    }
}

/// The API server's answers, shared by the scan's workers. See the module docs.
#[derive(Debug)]
pub struct Lookups {
    max: usize,
    /// Whether a failed read is kept as "no data" (see the module docs).
    keep_failures: bool,
    /// Answers kept `ttl`: `None` is a failed read kept as "no data".
    answers: TtlCache<Lookup, Option<Arc<Value>>>,
    /// The reads in progress: a waiter's receiver ends when the reader's
    /// [`Reading`] is dropped (read, failed or cancelled).
    reading: Mutex<HashMap<Lookup, watch::Receiver<()>>>,
}

/// What a worker that missed a lookup does about it.
enum Turn<'a> {
    /// It is answered now.
    Answered,
    /// Another worker is reading it: wait for that.
    Wait(watch::Receiver<()>),
    /// Read it (the others wait until this is dropped).
    Read(Reading<'a>),
}

/// The claim on one read; dropping it wakes the workers waiting for it.
struct Reading<'a> {
    lookups: &'a Lookups,
    key: Lookup,
    _done: watch::Sender<()>,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        self.lookups
            .reading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups::new(Duration::from_secs(30), 10_000)
    }
}

impl Lookups {
    /// Answers kept `ttl`, at most `max` of them.
    pub fn new(ttl: Duration, max: usize) -> Lookups {
        Lookups {
            max: max.max(1),
            keep_failures: true,
            answers: TtlCache::new(ttl),
            reading: Mutex::new(HashMap::new()),
        }
    }

    /// Keeps answers only: a failed read (no connection, a 5xx, a 403) is
    /// not kept, and the next evaluation that asks reads again. A 404 is an
    /// answer.
    pub fn retrying_failures(mut self) -> Lookups {
        self.keep_failures = false;
        self
    }

    /// How long an answer is used.
    pub fn ttl(&self) -> Duration {
        self.answers.ttl()
    }

    /// A fresh answer: `Some(None)` is a kept failure.
    fn answer(&self, key: &Lookup) -> Option<Option<Arc<Value>>> {
        self.answers.get(key)
    }

    fn keep(&self, key: Lookup, v: Option<Arc<Value>>) {
        self.answers.insert_bounded(key, v, self.max);
    }

    /// Whether `key` is answered, being read by another worker, or this
    /// one's to read. Each map's lock is taken alone, for a few statements.
    fn turn(&self, key: &Lookup) -> Turn<'_> {
        if self.answer(key).is_some() {
            return Turn::Answered;
        }
        let mut reading = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rx) = reading.get(key) {
            return Turn::Wait(rx.clone());
        }
        let (tx, rx) = watch::channel(());
        reading.insert(key.clone(), rx);
        drop(reading);
        let claim = Reading {
            lookups: self,
            key: key.clone(),
            _done: tx,
        };
        // A reader that finished between the two looks: nothing to read.
        if self.answer(key).is_some() {
            return Turn::Answered;
        }
        Turn::Read(claim)
    }

    /// Reads each lookup from the API server and keeps the answer (a
    /// failure as no data, unless [`Self::retrying_failures`]); a lookup
    /// another worker is reading is waited for, not read twice. Returns
    /// `None` if `token` was cancelled first, else the lookups whose read
    /// failed and was not kept.
    pub async fn fetch(
        &self,
        client: &kube::Client,
        missed: Vec<Lookup>,
        token: &CancellationToken,
    ) -> Option<Vec<Lookup>> {
        let mut failed = Vec::new();
        for key in missed {
            loop {
                match self.turn(&key) {
                    Turn::Answered => break,
                    Turn::Wait(mut rx) => {
                        // Ends (Err) when the reader's claim is dropped;
                        // then the answer is kept, or the read was given
                        // up (or failed, not kept) and this worker takes
                        // its turn.
                        tokio::select! {
                            _ = token.cancelled() => return None,
                            _ = rx.changed() => {}
                        }
                    }
                    Turn::Read(claim) => {
                        match self.read(client, &key, token).await? {
                            Read::Answer(got) => self.keep(key.clone(), got),
                            Read::Failed if self.keep_failures => self.keep(key.clone(), None),
                            Read::Failed => failed.push(key.clone()),
                        }
                        drop(claim);
                        break;
                    }
                }
            }
        }
        Some(failed)
    }

    /// One read of `key`: `None` if `token` was cancelled first.
    async fn read(
        &self,
        client: &kube::Client,
        key: &Lookup,
        token: &CancellationToken,
    ) -> Option<Read> {
        let Some(path) = key.path() else {
            return Some(Read::Answer(None));
        };
        if let Lookup::Service(call) = key {
            let body = call
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str::<Value>(b).ok());
            let method = if call.method == "POST" {
                leash_context::spec::Method::Post
            } else {
                leash_context::spec::Method::Get
            };
            let answer = tokio::select! {
                _ = token.cancelled() => return None,
                r = leash_context::call_service(&call.url, call.ca_bundle.as_deref(), method, body.as_ref()) => r,
            };
            return Some(match answer {
                Ok(v) => Read::Answer(Some(Arc::new(v))),
                Err(e) => {
                    tracing::debug!("service call {}: {e}", call.url);
                    Read::Failed
                }
            });
        }
        let read = async {
            let req = http::Request::get(&path)
                .body(Vec::new())
                .map_err(kube::Error::HttpError)?;
            client.request_text(req).await
        };
        let got = tokio::select! {
            _ = token.cancelled() => return None,
            got = read => got,
        };
        Some(match got {
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                // A Status answer is no data.
                Ok(v) if v["kind"] != "Status" => Read::Answer(Some(Arc::new(v))),
                Ok(_) => Read::Answer(None),
                Err(e) => {
                    tracing::debug!("lookup {path}: not JSON: {e}");
                    Read::Failed
                }
            },
            Err(kube::Error::Api(status)) if status.code == 404 => Read::Answer(None),
            Err(e) => {
                tracing::debug!("lookup {path}: {e}");
                Read::Failed
            }
        })
    }
}

/// What one read gave.
enum Read {
    /// The server's answer (`None`: not found, no data).
    Answer(Option<Arc<Value>>),
    /// No answer (no connection, an error status, not JSON).
    Failed,
}

/// One evaluation's cluster data. See the module docs.
pub struct ScanData {
    cache: Arc<Cache>,
    lookups: Arc<Lookups>,
    missed: Mutex<Vec<Lookup>>,
    /// Lookups whose read failed and was not kept
    /// ([`Lookups::retrying_failures`]): no data for this evaluation.
    failed: Mutex<HashSet<Lookup>>,
    /// Whether `apiCall` `service` calls are made (`leash apply` makes
    /// none: they are no data).
    services: bool,
    /// Image data, when registries are read.
    images: Option<leash_images::ImageLookup>,
    /// Kyverno's global context entries (`globalReference`,
    /// `globalContext.Get`), when they are read.
    global: Option<leash_context::Store>,
    /// With [`Self::reading_afresh`]: the objects and lists read for this
    /// evaluation alone (generate's), by the lookup as the engine made it.
    own: Option<Mutex<HashMap<Lookup, Held>>>,
}

/// An object or a list read for one evaluation.
#[derive(Debug, Clone)]
enum Held {
    Object(Option<Arc<Value>>),
    List(Vec<Arc<Value>>),
}

impl std::fmt::Debug for ScanData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanData").finish_non_exhaustive()
    }
}

/// How many times [`ScanData::settle`] evaluates at most: a lookup found
/// may lead to another.
pub const ROUNDS: usize = 4;

impl ScanData {
    /// Data from `cache`, then from `lookups`.
    pub fn new(cache: Arc<Cache>, lookups: Arc<Lookups>) -> ScanData {
        ScanData {
            cache,
            lookups,
            missed: Mutex::new(Vec::new()),
            failed: Mutex::new(HashSet::new()),
            services: true,
            images: None,
            global: None,
            own: None,
        }
    }

    /// Objects and lists (`Get`, `List`) are neither taken from the cache
    /// nor from the kept answers: every one this evaluation asks for is
    /// missed until the caller reads it and gives it with
    /// [`Self::put_object`] or [`Self::put_list`] (generate: a clone's
    /// source as it is now). `apiCall`s are answered as usual.
    pub fn reading_afresh(mut self) -> ScanData {
        self.own = Some(Mutex::new(HashMap::new()));
        self
    }

    /// Gives the object a `Get` lookup asked for (`None`: not found), with
    /// [`Self::reading_afresh`].
    pub fn put_object(&self, key: Lookup, object: Option<Arc<Value>>) {
        self.hold(key, Held::Object(object));
    }

    /// Gives the objects a `List` lookup asked for, with
    /// [`Self::reading_afresh`].
    pub fn put_list(&self, key: Lookup, objects: Vec<Arc<Value>>) {
        self.hold(key, Held::List(objects));
    }

    fn hold(&self, key: Lookup, held: Held) {
        if let Some(own) = &self.own {
            own.lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, held);
        }
    }

    /// What this evaluation holds of `key` (with
    /// [`Self::reading_afresh`]): `None` when nothing, and the miss is
    /// recorded.
    fn held(&self, key: Lookup) -> Option<Held> {
        let own = self.own.as_ref()?;
        let held = own
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if held.is_none() {
            self.lock_missed().push(key);
        }
        held
    }

    /// Reads `lookups` (`apiCall`s) into the kept answers as
    /// [`Self::fetch_missed`] does; false if `token` was cancelled.
    pub async fn fetch(
        &self,
        client: &kube::Client,
        lookups: Vec<Lookup>,
        token: &CancellationToken,
    ) -> bool {
        match self.lookups.fetch(client, lookups, token).await {
            Some(failed) => {
                self.lock_failed().extend(failed);
                true
            }
            None => false,
        }
    }

    /// Reads image data from `registry` ([`leash_images::ImageLookup`]:
    /// what an evaluation missed is fetched by [`Self::fetch_missed_images`]).
    pub fn with_images(mut self, registry: Arc<leash_images::Registry>) -> ScanData {
        self.images = Some(leash_images::ImageLookup::new(registry));
        self
    }

    /// Serves global context entries from `store`.
    pub fn with_global(mut self, store: leash_context::Store) -> ScanData {
        self.global = Some(store);
        self
    }

    /// Makes no `apiCall` `service` call: each is no data.
    pub fn without_service_calls(mut self) -> ScanData {
        self.services = false;
        self
    }

    /// Fetches the images evaluations missed since the last call; false
    /// when none was missed (or no registry is read).
    pub async fn fetch_missed_images(&self) -> bool {
        match &self.images {
            Some(images) => images.fetch_missed().await,
            None => false,
        }
    }

    /// Fetches what was missed since the last call (see [`Lookups::fetch`]);
    /// false if nothing was missed or `token` was cancelled.
    pub async fn fetch_missed(&self, client: &kube::Client, token: &CancellationToken) -> bool {
        let missed = self.take_missed();
        if missed.is_empty() {
            return false;
        }
        match self.lookups.fetch(client, missed, token).await {
            Some(failed) => {
                self.lock_failed().extend(failed);
                true
            }
            None => false,
        }
    }

    /// Fetches the objects and the images missed since the last call, both
    /// at once: `None` if `token` was cancelled, else whether anything was
    /// missed (and so is now answered).
    pub async fn fetch_all(
        &self,
        client: &kube::Client,
        token: &CancellationToken,
    ) -> Option<bool> {
        let missed = self.take_missed();
        let objects_missed = !missed.is_empty();
        let (objects, images) = futures::join!(
            async {
                if objects_missed {
                    self.lookups.fetch(client, missed, token).await
                } else {
                    Some(Vec::new())
                }
            },
            // Boxed: the registry's futures are large.
            leash_runtime::cancellable(token, Box::pin(self.fetch_missed_images())),
        );
        self.lock_failed().extend(objects?);
        Some(objects_missed || images?)
    }

    /// Evaluates with `evaluate` until it misses nothing ([`ROUNDS`] times at
    /// most), fetching what each round missed between them: the engine
    /// never waits on the network. `None` if `token` was cancelled.
    pub async fn settle<T>(
        &self,
        client: &kube::Client,
        token: &CancellationToken,
        mut evaluate: impl FnMut(&ScanData) -> T,
    ) -> Option<T> {
        let mut out = evaluate(self);
        for _ in 1..ROUNDS {
            if !self.fetch_all(client, token).await? {
                break;
            }
            out = evaluate(self);
        }
        Some(out)
    }

    /// Whether the evaluations since the last fetch missed anything (an
    /// object or an image): then they must be evaluated again where
    /// waiting is allowed.
    pub fn missed_any(&self) -> bool {
        !self.lock_missed().is_empty() || self.images.as_ref().is_some_and(|i| i.missed_any())
    }

    /// The lookups neither held since the last call (each once).
    pub fn take_missed(&self) -> Vec<Lookup> {
        let mut m = std::mem::take(&mut *self.lock_missed());
        m.sort();
        m.dedup();
        m
    }

    fn lock_missed(&self) -> std::sync::MutexGuard<'_, Vec<Lookup>> {
        self.missed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_failed(&self) -> std::sync::MutexGuard<'_, HashSet<Lookup>> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn looked_up(&self, key: Lookup) -> Option<Arc<Value>> {
        if self.lock_failed().contains(&key) {
            return None;
        }
        match self.lookups.answer(&key) {
            Some(v) => v,
            None => {
                self.lock_missed().push(key);
                None
            }
        }
    }
}

impl ClusterData for ScanData {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        let key = || {
            Lookup::Get(
                api_version.into(),
                resource.into(),
                namespace.into(),
                name.into(),
            )
        };
        if self.own.is_some() {
            return match self.held(key()) {
                Some(Held::Object(o)) => o,
                _ => None,
            };
        }
        if self.cache.serves(api_version, resource) {
            return self.cache.get(api_version, resource, namespace, name);
        }
        self.looked_up(key())
    }

    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        if self.own.is_some() {
            let key = Lookup::List(api_version.into(), resource.into(), namespace.into());
            return match self.held(key) {
                Some(Held::List(l)) => l,
                _ => Vec::new(),
            };
        }
        if self.cache.serves(api_version, resource) {
            return self.cache.list(api_version, resource, namespace);
        }
        let list = self.looked_up(Lookup::List(
            api_version.into(),
            resource.into(),
            namespace.into(),
        ));
        list.and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn api_get(&self, url_path: &str) -> Option<Value> {
        // A path of a watched kind without a query is answered from the cache.
        if !url_path.contains('?')
            && let Some((api_version, _, resource, _)) = split_path(url_path)
            && self.cache.serves(&api_version, resource)
        {
            return answer_path(&*self.cache, url_path);
        }
        self.looked_up(Lookup::Api(url_path.to_string()))
            .map(|v| (*v).clone())
    }

    fn api_service(&self, call: &ServiceCall) -> Option<Value> {
        if !self.services {
            return None;
        }
        self.looked_up(Lookup::Service(call.clone()))
            .map(|v| (*v).clone())
    }

    fn global(&self, entry: &str, projection: Option<&str>) -> Option<Value> {
        let store = self.global.as_ref()?;
        match projection {
            Some(p) => store.projection(entry, p).ok(),
            None => store.get(entry).ok().map(|s| s.data.clone()),
        }
    }

    fn image_data(&self, image: &str) -> Result<Value, String> {
        match &self.images {
            Some(images) => images.get(image),
            None => Err(format!(
                "no image data for {image}: no image registry is read here"
            )),
        }
    }

    fn fresh_image(&self, image: &str) {
        if let Some(images) = &self.images {
            images.fresh(image);
        }
    }

    fn verify_image(&self, image: &str, trust: &ImageTrust) -> Result<String, String> {
        match &self.images {
            Some(images) => images.verify(image, &cosign_trust(trust)),
            None => Err(format!(
                "cannot verify {image}: no image registry is read here"
            )),
        }
    }

    fn verify_attestations(&self, image: &str, trust: &ImageTrust) -> Result<Vec<Value>, String> {
        match &self.images {
            Some(images) => images.attestations(image, &cosign_trust(trust)),
            None => Err(format!(
                "cannot verify the attestations of {image}: no image registry is read here"
            )),
        }
    }

    fn verify_referrers(
        &self,
        image: &str,
        artifact_type: &str,
        trust: &ImageTrust,
    ) -> Result<Value, String> {
        match &self.images {
            Some(images) => images.referrer_payload(image, artifact_type, &cosign_trust(trust)),
            None => Err(format!(
                "cannot verify the referrers of {image}: no image registry is read here"
            )),
        }
    }
}

/// What a policy trusts (leash-policy's words) as the verifier takes it
/// (leash-images'): the engine knows no registry crate, the registry crate
/// no policy.
pub fn cosign_trust(trust: &ImageTrust) -> leash_images::cosign::Trust {
    use leash_images::cosign::{Identity, Keyless, Trust};
    match trust {
        ImageTrust::Keys(pem) => Trust::Keys(pem.clone()),
        ImageTrust::Keyless { roots, identities } => Trust::Keyless(Keyless {
            roots: roots.clone(),
            identities: identities
                .iter()
                .map(|i| Identity {
                    issuer: i.issuer.clone(),
                    subject: i.subject.clone(),
                    issuer_regexp: i.issuer_regexp.clone(),
                    subject_regexp: i.subject_regexp.clone(),
                    wildcards: i.wildcards,
                })
                .collect(),
        }),
        ImageTrust::Notary { certs } => Trust::Notary(certs.clone()),
        ImageTrust::Certificate { cert, chain } => Trust::Certificate {
            cert: cert.clone(),
            chain: chain.clone(),
        },
        // The engine reads a Secret's key before it asks (see
        // `ImageTrust::Secret`); no key verifies nothing.
        ImageTrust::Secret { .. } => Trust::Keys(String::new()),
    }
}

/// Answers a resource path (`/api/v1/namespaces/ns/pods`,
/// `/apis/apps/v1/deployments/x`; a query is ignored) from `data`'s get and
/// list: an object, or a `List` of the objects.
pub fn answer_path(data: &dyn ClusterData, url_path: &str) -> Option<Value> {
    let (api_version, namespace, resource, name) = split_path(url_path)?;
    match name {
        Some(name) => data
            .get(&api_version, resource, namespace, name)
            .map(|o| (*o).clone()),
        None => {
            let items: Vec<Value> = data
                .list(&api_version, resource, namespace)
                .iter()
                .map(|o| (**o).clone())
                .collect();
            Some(json!({"apiVersion": api_version, "kind": "List", "metadata": {}, "items": items}))
        }
    }
}

/// `(apiVersion, namespace, resource, name)` of a resource path (its query
/// cut off).
fn split_path(path: &str) -> Option<(String, &str, &str, Option<&str>)> {
    let path = path.split('?').next().unwrap_or("");
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => (v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
        _ => ("", rest),
    };
    match rest {
        [resource] => Some((api_version, namespace, resource, None)),
        [resource, name] => Some((api_version, namespace, resource, Some(name))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::api_resource;

    /// One read per lookup: while a worker holds the read, another that
    /// misses the lookup waits; when the reader keeps an answer the waiter
    /// finds it, and when the reader gives up (cancelled: its claim is
    /// dropped) the waiter is woken and takes the read itself.
    #[tokio::test]
    async fn a_lookup_has_one_reader_and_a_given_up_read_passes_on() {
        let lookups = Lookups::default();
        let key = Lookup::Api("/api/v1/namespaces/a/services".into());

        let Turn::Read(claim) = lookups.turn(&key) else {
            panic!("the first worker reads")
        };
        let Turn::Wait(mut waiting) = lookups.turn(&key) else {
            panic!("a second worker waits")
        };
        lookups.keep(key.clone(), Some(Arc::new(json!({"items": []}))));
        drop(claim);
        assert!(waiting.changed().await.is_err(), "woken when the read ends");
        assert!(matches!(lookups.turn(&key), Turn::Answered));

        let other = Lookup::Api("/api/v1/namespaces/b/services".into());
        let Turn::Read(claim) = lookups.turn(&other) else {
            panic!("the first worker reads")
        };
        let Turn::Wait(mut waiting) = lookups.turn(&other) else {
            panic!("a second worker waits")
        };
        drop(claim); // cancelled: nothing kept
        assert!(
            waiting.changed().await.is_err(),
            "woken when the read is given up"
        );
        assert!(
            matches!(lookups.turn(&other), Turn::Read(_)),
            "the waiter takes the read"
        );
        assert!(
            lookups.reading.lock().unwrap().is_empty(),
            "no claim left behind"
        );
    }

    #[test]
    fn lookups_have_the_paths_kubectl_would_read() {
        let get = |av: &str, r: &str, ns: &str, n: &str| {
            Lookup::Get(av.into(), r.into(), ns.into(), n.into()).path()
        };
        assert_eq!(
            get("v1", "configmaps", "kyverno", "allowed").as_deref(),
            Some("/api/v1/namespaces/kyverno/configmaps/allowed")
        );
        assert_eq!(
            get("apps/v1", "deployments", "", "x").as_deref(),
            Some("/apis/apps/v1/deployments/x")
        );
        assert_eq!(
            Lookup::List("v1".into(), "pods".into(), "a".into())
                .path()
                .as_deref(),
            Some("/api/v1/namespaces/a/pods")
        );
        assert_eq!(
            get("v1", "ConfigMap", "a", "b").as_deref(),
            Some("/api/v1/namespaces/a/configmaps/b")
        );
        assert_eq!(get("", "configmaps", "a", "b"), None);
    }

    /// Generate's view: objects and lists are never taken from the cache
    /// (a clone's source as it is now), each is missed until given, and
    /// a list stays a list; `apiCall`s still go through the kept answers.
    #[test]
    fn read_afresh_objects_are_missed_until_given() {
        let cache = Cache::new();
        let cms = cache.store(&api_resource("", "v1", "ConfigMap", "configmaps"), true);
        cms.put(
            "a",
            "cm",
            &json!({"metadata": {"name": "cm"}, "data": {"k": "cached"}}),
        );
        cms.mark_synced();
        let lookups = Arc::new(Lookups::new(Duration::from_secs(60), 10));
        let data = ScanData::new(Arc::new(cache), lookups.clone()).reading_afresh();
        assert!(
            data.get("v1", "ConfigMap", "a", "cm").is_none(),
            "not the cache's"
        );
        assert!(data.list("v1", "ConfigMap", "a").is_empty());
        assert!(data.api_get("/api/v1/namespaces/a/secrets").is_none());
        let get = Lookup::Get("v1".into(), "ConfigMap".into(), "a".into(), "cm".into());
        let list = Lookup::List("v1".into(), "ConfigMap".into(), "a".into());
        let api = Lookup::Api("/api/v1/namespaces/a/secrets".into());
        assert_eq!(data.take_missed(), [get.clone(), list.clone(), api.clone()]);
        data.put_object(get, Some(Arc::new(json!({"data": {"k": "now"}}))));
        data.put_list(list, vec![Arc::new(json!({"metadata": {"name": "x"}}))]);
        lookups.keep(api, Some(Arc::new(json!({"items": []}))));
        assert_eq!(
            data.get("v1", "ConfigMap", "a", "cm").unwrap()["data"]["k"],
            "now"
        );
        assert_eq!(data.list("v1", "ConfigMap", "a").len(), 1);
        assert_eq!(
            data.api_get("/api/v1/namespaces/a/secrets"),
            Some(json!({"items": []}))
        );
        assert!(
            data.take_missed().is_empty(),
            "everything given is answered"
        );
        assert!(data.get("v1", "ConfigMap", "a", "other").is_none());
        assert_eq!(data.take_missed().len(), 1, "a new lookup is missed");
    }

    #[test]
    fn watched_kinds_come_from_the_cache_the_rest_is_recorded_once_then_answered() {
        let cache = Cache::new();
        let ns = cache.store(&api_resource("", "v1", "Namespace", "namespaces"), false);
        ns.put("", "a", &json!({"metadata": {"name": "a"}}));
        ns.mark_synced();
        let lookups = Lookups::new(Duration::from_secs(60), 10);
        let lookups = Arc::new(lookups);
        let data = ScanData::new(Arc::new(cache), lookups.clone());
        assert!(data.get("v1", "namespaces", "", "a").is_some());
        assert_eq!(
            data.api_get("/api/v1/namespaces").unwrap()["items"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        assert!(data.get("v1", "configmaps", "a", "cm").is_none());
        assert!(data.api_get("/api/v1/namespaces/a/pods").is_none());
        assert!(data.get("v1", "configmaps", "a", "cm").is_none());
        assert_eq!(
            data.take_missed(),
            [
                Lookup::Get("v1".into(), "configmaps".into(), "a".into(), "cm".into()),
                Lookup::Api("/api/v1/namespaces/a/pods".into()),
            ]
        );
        lookups.keep(
            Lookup::Get("v1".into(), "configmaps".into(), "a".into(), "cm".into()),
            Some(Arc::new(json!({"data": {"k": "v"}}))),
        );
        lookups.keep(Lookup::Api("/api/v1/namespaces/a/pods".into()), None);
        assert_eq!(
            data.get("v1", "configmaps", "a", "cm").unwrap()["data"]["k"],
            "v"
        );
        assert!(data.api_get("/api/v1/namespaces/a/pods").is_none());
        assert!(
            data.take_missed().is_empty(),
            "kept answers are not missed again"
        );
        let expired = Lookups::new(Duration::ZERO, 10);
        expired.keep(Lookup::Api("/x".into()), None);
        assert!(expired.answer(&Lookup::Api("/x".into())).is_none());
        // README: the scan's and the webhook's answers are kept 30 s.
        assert_eq!(Lookups::default().ttl(), Duration::from_secs(30));
    }
}
