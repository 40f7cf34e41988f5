//! The store: named entries, each running in its own scope, read as
//! immutable snapshots.
//!
//! # Invariants
//! 1. The entry map's lock (`std::sync::Mutex`) is held only to look up,
//!    insert or take out entries and to spawn an entry's tasks (spawning
//!    does not wait). It is never held across an `.await`, a channel send or
//!    a join (house rule 5; seed: `Stop()` held the entry lock while waiting
//!    for the poller).
//! 2. Replace and remove take the old entry out of the map first, then stop
//!    it (cancel + join its scope) with no lock held.
//! 3. Entry tasks never call into the store's map and never stop their own
//!    scope: only the store (the owner) joins an entry, from outside the
//!    entry's tasks (house rule 6; seed: watch error handler self-join).
//! 4. Every entry scope is a child of the store's root scope, so
//!    [`Store::shutdown`] waits for every task the store ever started.
//! 5. Removal by [`EntryId`] removes only that incarnation (house rule 8).
//! 6. Once shut down, the store accepts no entries.
//! 7. An entry whose refresh task fails, panics or ends without being
//!    stopped is marked `Failed` and restarted after a backoff
//!    ([`FIRST_RESTART_DELAY`] doubling to [`MAX_RESTART_DELAY`]), inside
//!    its own scope: the restart is of that incarnation only, and ends with
//!    it (house rule 8; seed: a dead `dynamicWatchers` entry is never
//!    recreated).
//!
//! # Lock order
//! No nesting: the map lock (`state`) is released before any entry's status
//! lock is taken (readers copy the entry's `Arc` out first), and the
//! root-scope lock is taken alone, once, by `shutdown`.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use leash_runtime::{CancellationToken, Scope, ScopeError, ScopeHandle, cancellable};
use serde_json::Value;
use tokio::sync::watch;

use crate::cell::{EntryCell, EntryId};
use crate::entry::{ContextEntry, EntrySource};
use crate::error::{Error, Result};
use crate::snapshot::Snapshot;
use crate::status::{EntryState, EntryStatus};
use crate::{api_call, kubernetes};

/// One run of an entry's refresh (see [`Store::start_with`]).
type Runner = std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// Pause before a failed refresh task is started again; doubled after each
/// consecutive failure, up to [`MAX_RESTART_DELAY`].
pub const FIRST_RESTART_DELAY: Duration = Duration::from_secs(1);
/// Longest pause between restarts of a failing refresh task. A run that
/// lasted at least this long before failing restarts after
/// [`FIRST_RESTART_DELAY`] again.
pub const MAX_RESTART_DELAY: Duration = Duration::from_secs(60);

/// Kyverno's cache-sync timeout.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// kube-runtime's watch timeout.
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(290);
/// Bound on one API call attempt.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of a [`Store`].
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Most entries at once; 0 = unbounded (Kyverno's `--maxGlobalContextEntries`).
    pub max_entries: usize,
    /// How long an entry may go without its first data before it is marked
    /// [`EntryState::Failed`] (Kyverno waits 30 s for a cache sync).
    pub ready_timeout: Duration,
    /// Bound on one API call attempt.
    pub request_timeout: Duration,
    /// Server-side timeout of each watch request of Kubernetes entries
    /// (`timeoutSeconds`, whole seconds, at least 1); the watcher then
    /// re-watches. Default 290 s, kube-runtime's.
    pub watch_timeout: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            max_entries: 0,
            ready_timeout: DEFAULT_READY_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            watch_timeout: DEFAULT_WATCH_TIMEOUT,
        }
    }
}

/// The global context store. A cheap handle (`Clone`): every clone is the
/// same store.
///
/// [`Store::new`] starts nothing; each [`Store::add`] / [`Store::replace`]
/// starts that entry's tasks (it must run inside a tokio runtime).
/// [`Store::shutdown`] stops and joins everything.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<StoreInner>,
}

struct StoreInner {
    config: StoreConfig,
    client: Option<kube::Client>,
    root: Mutex<Option<Scope>>,
    spawner: ScopeHandle,
    state: Mutex<State>,
    changes: Arc<watch::Sender<u64>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for StoreInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreInner")
            .field("config", &self.config)
            .field("has_client", &self.client.is_some())
            .field("spawner", &self.spawner)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct State {
    entries: HashMap<String, Running>,
    closed: bool,
}

/// A running entry: its shared cell and the scope that owns its tasks.
#[derive(Debug)]
struct Running {
    cell: Arc<EntryCell>,
    scope: Scope,
}

impl Running {
    /// Cancel and join the entry's tasks. Called with no lock held, never
    /// from one of the entry's own tasks (invariants 2, 3).
    async fn stop(self) -> Result<(), ScopeError> {
        let name = self.cell.name().to_owned();
        let result = self.scope.shutdown().await;
        if let Err(err) = &result {
            tracing::warn!(entry = %name, error = %err, "global context entry stopped with errors");
        }
        result
    }
}

impl Store {
    /// A store; `client` is needed by Kubernetes entries and `urlPath` calls.
    /// Starts nothing.
    pub fn new(config: StoreConfig, client: Option<kube::Client>) -> Store {
        let root = Scope::new();
        let spawner = root.handle();
        Store {
            inner: Arc::new(StoreInner {
                config,
                client,
                root: Mutex::new(Some(root)),
                spawner,
                state: Mutex::new(State::default()),
                changes: Arc::new(watch::Sender::new(0)),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    /// The store's settings.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    fn lock_state(&self) -> MutexGuard<'_, State> {
        // Map operations are single inserts/removes: a panic cannot leave
        // the map half-changed, so poisoning is ignored.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Add a new entry and start it (call it inside a tokio runtime: it
    /// spawns the entry's tasks). Errors: [`Error::AlreadyExists`],
    /// [`Error::StoreFull`], [`Error::ClientRequired`], [`Error::ShutDown`].
    pub fn add(&self, entry: ContextEntry) -> Result<EntryId> {
        self.check_client(&entry)?;
        let mut state = self.lock_open_state()?;
        if state.entries.contains_key(entry.name()) {
            return Err(Error::AlreadyExists(entry.name().to_owned()));
        }
        self.check_capacity(&state, &entry)?;
        let id = self.start_into(&mut state, entry);
        drop(state);
        self.notify();
        Ok(id)
    }

    /// Add the entry, or replace the entry of the same name: the old one is
    /// taken out of the map, the new one started, then the old one stopped
    /// with no lock held. Returns when the old entry has stopped.
    ///
    /// # Cancel safety
    /// The new entry is in place as soon as this is first polled; dropping
    /// the future early drops the old entry's scope, which cancels its tasks
    /// without waiting for them.
    pub async fn replace(&self, entry: ContextEntry) -> Result<EntryId> {
        self.check_client(&entry)?;
        let (id, old) = {
            let mut state = self.lock_open_state()?;
            let old = state.entries.remove(entry.name());
            if old.is_none() {
                self.check_capacity(&state, &entry)?;
            }
            (self.start_into(&mut state, entry), old)
        };
        self.notify();
        if let Some(old) = old {
            let _ = old.stop().await;
        }
        Ok(id)
    }

    /// Remove an entry and stop it (outside any lock). `Ok(false)` if there
    /// was no such entry.
    ///
    /// # Cancel safety
    /// The entry is out of the map as soon as this is first polled; dropping
    /// the future early cancels its tasks without waiting for them.
    pub async fn remove(&self, name: &str) -> Result<bool> {
        let old = self.lock_state().entries.remove(name);
        Ok(self.stop_removed(old).await)
    }

    /// Remove `name` only if it is still the incarnation `id` (house rule 8).
    ///
    /// # Cancel safety
    /// As [`Store::remove`].
    pub async fn remove_exact(&self, name: &str, id: EntryId) -> bool {
        let old = {
            let mut state = self.lock_state();
            match state.entries.get(name) {
                Some(running) if running.cell.id == id => state.entries.remove(name),
                _ => None,
            }
        };
        self.stop_removed(old).await
    }

    /// After an entry was taken out of the map (lock released): notify, then
    /// stop it. Whether there was one.
    async fn stop_removed(&self, old: Option<Running>) -> bool {
        match old {
            Some(old) => {
                self.notify();
                let _ = old.stop().await;
                true
            }
            None => false,
        }
    }

    /// The map lock, unless the store is shut down (invariant 6).
    fn lock_open_state(&self) -> Result<MutexGuard<'_, State>> {
        let state = self.lock_state();
        if state.closed {
            return Err(Error::ShutDown);
        }
        Ok(state)
    }

    /// Start `entry` and put it in the map (the caller holds the lock).
    fn start_into(&self, state: &mut State, entry: ContextEntry) -> EntryId {
        let running = self.start(entry);
        let id = running.cell.id;
        state
            .entries
            .insert(running.cell.name().to_owned(), running);
        id
    }

    fn check_client(&self, entry: &ContextEntry) -> Result<()> {
        if entry.needs_kube_client() && self.inner.client.is_none() {
            return Err(Error::ClientRequired(entry.name().to_owned()));
        }
        Ok(())
    }

    fn check_capacity(&self, state: &State, entry: &ContextEntry) -> Result<()> {
        let max = self.inner.config.max_entries;
        if max != 0 && state.entries.len() >= max {
            return Err(Error::StoreFull {
                entry: entry.name().to_owned(),
                max,
            });
        }
        Ok(())
    }

    /// Create the entry's cell and scope and spawn its tasks (no waiting).
    fn start(&self, entry: ContextEntry) -> Running {
        let client = self.inner.client.clone();
        let watch_timeout = self.inner.config.watch_timeout;
        let request_timeout = self.inner.config.request_timeout;
        let source = entry.source().clone();
        self.start_with(entry, move |cell, token| -> Runner {
            match source.clone() {
                EntrySource::Kubernetes(source) => {
                    let client = client.clone();
                    Box::pin(async move {
                        match client {
                            Some(client) => {
                                kubernetes::run(cell, source, client, watch_timeout, token).await
                            }
                            None => Err(Error::ClientRequired(cell.name().to_owned())),
                        }
                    })
                }
                EntrySource::ApiCall(source) => {
                    let client = client.clone();
                    Box::pin(async move {
                        api_call::run(cell, source, client, request_timeout, token).await
                    })
                }
            }
        })
    }

    /// [`Store::start`] with the refresh given as a factory of runs: the
    /// supervisor below starts a run, and starts a new one after a failure.
    fn start_with<F>(&self, entry: ContextEntry, mut runner: F) -> Running
    where
        F: FnMut(Arc<EntryCell>, CancellationToken) -> Runner + Send + 'static,
    {
        // Relaxed: the counter only has to hand out distinct values.
        let id = EntryId(self.inner.next_id.fetch_add(1, Ordering::Relaxed));
        let cell = Arc::new(EntryCell::new(
            id,
            entry.clone(),
            self.inner.changes.clone(),
        ));
        let scope = self.inner.spawner.child();
        let token = scope.token().clone();
        let name = entry.name().to_owned();
        // A run only returns when cancelled. If it fails, panics or ends, the
        // entry would silently stop refreshing while still in the map (seed:
        // the stale `dynamicWatchers` entry): say so in its status, and start
        // it again after a backoff (invariant 7). The restarts live in the
        // entry's own scope, so they stop with this incarnation: a removed or
        // replaced entry is never restarted.
        let watched = cell.clone();
        let run_token = token.clone();
        scope.spawn(format!("context entry {name}: refresh"), async move {
            let mut delay = FIRST_RESTART_DELAY;
            loop {
                let began = tokio::time::Instant::now();
                let run = runner(watched.clone(), run_token.clone());
                let why = match AssertUnwindSafe(run).catch_unwind().await {
                    _ if run_token.is_cancelled() => return Ok::<(), Error>(()),
                    Ok(Ok(())) => "the refresh task ended".to_owned(),
                    Ok(Err(err)) => crate::error::chain(&err),
                    Err(panic) => format!("the refresh task panicked: {}", panic_text(&*panic)),
                };
                if began.elapsed() >= MAX_RESTART_DELAY {
                    // It ran fine for a while: this failure is a first one.
                    delay = FIRST_RESTART_DELAY;
                }
                watched.mark_stopped(&why, delay);
                if cancellable(&run_token, tokio::time::sleep(delay))
                    .await
                    .is_none()
                {
                    return Ok(());
                }
                delay = (delay * 2).min(MAX_RESTART_DELAY);
                watched.mark_restarted();
            }
        });
        let bound = self.inner.config.ready_timeout;
        let watched = cell.clone();
        scope.spawn(format!("context entry {name}: readiness"), async move {
            let first_data = first_data(&watched);
            if let Some(Err(_elapsed)) =
                cancellable(&token, tokio::time::timeout(bound, first_data)).await
            {
                watched.mark_not_ready(bound);
            }
            Ok::<(), Error>(())
        });
        Running { cell, scope }
    }

    fn notify(&self) {
        self.inner.changes.send_modify(|v| *v += 1);
    }

    fn cell(&self, name: &str) -> Option<Arc<EntryCell>> {
        self.lock_state()
            .entries
            .get(name)
            .map(|running| running.cell.clone())
    }

    fn cells(&self) -> Vec<Arc<EntryCell>> {
        let mut cells: Vec<_> = self
            .lock_state()
            .entries
            .values()
            .map(|running| running.cell.clone())
            .collect();
        cells.sort_by(|a, b| a.name().cmp(b.name()));
        cells
    }

    /// The current snapshot of `name`. Errors: [`Error::UnknownEntry`];
    /// [`Error::NotReady`] while it has no data (with the reason).
    pub fn get(&self, name: &str) -> Result<Arc<Snapshot>> {
        let cell = self
            .cell(name)
            .ok_or_else(|| Error::UnknownEntry(name.to_owned()))?;
        let (snapshot, status) = cell.view();
        snapshot.ok_or_else(|| Error::NotReady {
            entry: name.to_owned(),
            reason: not_ready_reason(&status),
        })
    }

    /// One projection of `name` (Kyverno's `"<entry>.<projection>"`).
    pub fn projection(&self, name: &str, projection: &str) -> Result<Value> {
        let cell = self
            .cell(name)
            .ok_or_else(|| Error::UnknownEntry(name.to_owned()))?;
        if !cell
            .entry
            .projections()
            .iter()
            .any(|p| p.name == projection)
        {
            return Err(Error::UnknownProjection {
                entry: name.to_owned(),
                projection: projection.to_owned(),
            });
        }
        let (snapshot, status) = cell.view();
        let snapshot = snapshot.ok_or_else(|| Error::NotReady {
            entry: name.to_owned(),
            reason: not_ready_reason(&status),
        })?;
        Ok(snapshot
            .projection(projection)
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// The status of `name`.
    pub fn status(&self, name: &str) -> Option<EntryStatus> {
        self.cell(name).map(|cell| cell.status())
    }

    /// Every entry's status, by name.
    pub fn statuses(&self) -> Vec<(String, EntryStatus)> {
        self.cells()
            .into_iter()
            .map(|cell| (cell.name().to_owned(), cell.status()))
            .collect()
    }

    /// The running incarnation of `name`.
    pub fn entry_id(&self, name: &str) -> Option<EntryId> {
        self.cell(name).map(|cell| cell.id)
    }

    /// The entry definition of `name`.
    pub fn entry(&self, name: &str) -> Option<ContextEntry> {
        self.cell(name).map(|cell| cell.entry.clone())
    }

    /// Entry names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.cells()
            .into_iter()
            .map(|cell| cell.name().to_owned())
            .collect()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.lock_state().entries.len()
    }

    /// True when the store has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wait for the first data of `name`, at most the readiness bound (plus
    /// a second of slack for the entry's own readiness timer). On timeout
    /// the entry is marked [`EntryState::Failed`] and [`Error::NotReady`]
    /// says why; a `Failed` entry answers at once.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn wait_ready(&self, name: &str) -> Result<Arc<Snapshot>> {
        let cell = self
            .cell(name)
            .ok_or_else(|| Error::UnknownEntry(name.to_owned()))?;
        let bound = self.inner.config.ready_timeout;
        let mut changes = cell.subscribe();
        let wait = async {
            loop {
                changes.borrow_and_update();
                let (snapshot, status) = cell.view();
                match (snapshot, status.state) {
                    (Some(snapshot), _) => return Ok(snapshot),
                    (None, EntryState::Failed) => {
                        return Err(Error::NotReady {
                            entry: name.to_owned(),
                            reason: not_ready_reason(&status),
                        });
                    }
                    (None, _) => {}
                }
                if changes.changed().await.is_err() {
                    return Err(Error::ShutDown);
                }
            }
        };
        match tokio::time::timeout(bound + Duration::from_secs(1), wait).await {
            Ok(result) => result,
            Err(_elapsed) => {
                cell.mark_not_ready(bound);
                Err(Error::NotReady {
                    entry: name.to_owned(),
                    reason: not_ready_reason(&cell.status()),
                })
            }
        }
    }

    /// [`Store::wait_ready`] for every entry, concurrently; results by name.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn wait_all_ready(&self) -> Vec<(String, Result<Arc<Snapshot>>)> {
        let names = self.names();
        let waits = names.iter().map(|name| self.wait_ready(name));
        let results = futures::future::join_all(waits).await;
        names.into_iter().zip(results).collect()
    }

    /// A stream of changes (snapshots, statuses, additions, removals).
    pub fn changes(&self) -> crate::changes::Changes {
        crate::changes::Changes::new(self.clone(), self.inner.changes.subscribe())
    }

    /// Every entry's incarnation, version and cell, sorted by name (for
    /// [`crate::Changes`]).
    pub(crate) fn versions(&self) -> Vec<(EntryId, u64, Arc<EntryCell>)> {
        self.cells()
            .into_iter()
            .map(|cell| (cell.id, cell.version(), cell))
            .collect()
    }

    /// Whether [`Store::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.lock_state().closed
    }

    /// Stop every entry and join every task the store started. Idempotent.
    /// Returns the tasks' failures, if any.
    ///
    /// # Cancel safety
    /// Not cancel safe: the entries are taken out first; dropping the
    /// future drops their scopes, which cancels them without waiting.
    pub async fn shutdown(&self) -> Result<(), ScopeError> {
        let entries: Vec<Running> = {
            let mut state = self.lock_state();
            state.closed = true;
            state.entries.drain().map(|(_, running)| running).collect()
        };
        self.notify();
        let results = futures::future::join_all(entries.into_iter().map(Running::stop)).await;
        let root = self
            .inner
            .root
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut failed = ScopeError::new(Vec::new());
        let root_result = match root {
            Some(root) => root.shutdown().await,
            None => Ok(()),
        };
        for e in results
            .into_iter()
            .chain([root_result])
            .filter_map(Result::err)
        {
            failed.errors.extend(e.errors);
            failed.omitted += e.omitted;
        }
        if failed.total() == 0 {
            Ok(())
        } else {
            Err(failed)
        }
    }
}

async fn first_data(cell: &EntryCell) {
    let mut changes = cell.subscribe();
    loop {
        changes.borrow_and_update();
        if cell.status().state != EntryState::Pending {
            return;
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// A panic payload's message.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic".to_owned())
}

fn not_ready_reason(status: &EntryStatus) -> String {
    if let Some(reason) = &status.reason {
        return reason.clone();
    }
    match &status.last_error {
        Some(err) => format!("no data yet; last error: {err}"),
        None => "no data yet".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use serde_json::json;

    use super::*;

    fn entry(name: &str) -> ContextEntry {
        let yaml = format!(
            "apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata: {{name: {name}}}
spec:
  apiCall:
    service: {{url: 'http://127.0.0.1:9/unused'}}
    refreshInterval: 1h
"
        );
        crate::parse::parse_entries(&yaml, "test")
            .unwrap()
            .remove(0)
    }

    /// Puts `entry` in the map, its refresh runs made by `runner`.
    fn add_with<F>(store: &Store, entry: ContextEntry, runner: F) -> EntryId
    where
        F: FnMut(Arc<EntryCell>, CancellationToken) -> Runner + Send + 'static,
    {
        let mut state = store.lock_open_state().unwrap();
        let running = store.start_with(entry, runner);
        let id = running.cell.id;
        state
            .entries
            .insert(running.cell.name().to_owned(), running);
        id
    }

    /// Waits (on the entry's own change signal) until `name` is `state`;
    /// panics after a bound of ten restart delays (paused time: at once).
    async fn until_state(store: &Store, name: &str, state: EntryState) -> EntryStatus {
        let cell = store.cell(name).expect("entry in the map");
        let mut changes = cell.subscribe();
        let wait = async {
            loop {
                changes.borrow_and_update();
                let status = cell.status();
                if status.state == state {
                    return status;
                }
                changes.changed().await.expect("entry alive");
            }
        };
        tokio::time::timeout(MAX_RESTART_DELAY * 10, wait)
            .await
            .unwrap_or_else(|_| panic!("{name} never became {state:?}: {:?}", cell.status()))
    }

    /// Seed row "dead watcher left in the map, never recreated" (seed 000:
    /// the stale `dynamicWatchers` entry). An entry's refresh task panics,
    /// then fails for good on its second run; the store starts it again with
    /// a backoff, and the same incarnation is Ready with data from its third
    /// run. A removed or replaced incarnation is never restarted.
    #[tokio::test(start_paused = true)]
    async fn seed_dead_entry_recreated() {
        let store = Store::new(StoreConfig::default(), None);
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let began = tokio::time::Instant::now();
        let id = add_with(&store, entry("e"), move |cell, token| {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                match n {
                    0 => panic!("the watcher died"),
                    1 => Err(Error::ClientRequired(cell.name().to_owned())),
                    _ => {
                        cell.publish(json!({"run": n}));
                        token.cancelled().await;
                        Ok(())
                    }
                }
            })
        });
        let status = until_state(&store, "e", EntryState::Ready).await;
        assert_eq!(status.restarts, 2, "{status:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(store.get("e").unwrap().data, json!({"run": 2}));
        assert_eq!(store.entry_id("e"), Some(id), "the same entry came back");
        assert!(
            began.elapsed() >= FIRST_RESTART_DELAY * 3,
            "restarted after 1 s, then 2 s: {:?}",
            began.elapsed()
        );

        // An entry that always dies, replaced: its incarnation is not
        // restarted once the replacement is in.
        let dying = Arc::new(AtomicUsize::new(0));
        let counted = dying.clone();
        add_with(&store, entry("d"), move |_cell, _token| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(Error::ClientRequired("d".into())) })
        });
        until_state(&store, "d", EntryState::Failed).await;
        let old = store.lock_state().entries.remove("d");
        assert!(store.stop_removed(old).await);
        let after_stop = dying.load(Ordering::SeqCst);
        tokio::time::advance(MAX_RESTART_DELAY * 4).await;
        assert_eq!(dying.load(Ordering::SeqCst), after_stop);
        store.shutdown().await.unwrap();
    }

    /// README, `leash context`: a refresh task that keeps failing is
    /// restarted after 1 s, then after twice the previous pause, up to 60 s
    /// (paused time: each run's start is exact).
    #[tokio::test(start_paused = true)]
    async fn restarts_back_off_from_one_second_doubling_to_a_minute() {
        let store = Store::new(StoreConfig::default(), None);
        let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = starts.clone();
        add_with(&store, entry("f"), move |_cell, _token| {
            recorded.lock().unwrap().push(tokio::time::Instant::now());
            Box::pin(async { Err(Error::ClientRequired("f".into())) })
        });
        let deadline = tokio::time::Instant::now() + MAX_RESTART_DELAY * 10;
        while starts.lock().unwrap().len() < 10 {
            assert!(tokio::time::Instant::now() < deadline, "too few restarts");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let starts = starts.lock().unwrap().clone();
        let pauses: Vec<u64> = starts
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64().round() as u64)
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(FIRST_RESTART_DELAY, Duration::from_secs(1));
        assert_eq!(MAX_RESTART_DELAY, Duration::from_secs(60));
        store.shutdown().await.unwrap();
    }

    /// Seed row "`Stop()` holds the lock while waiting" (seed 000), in its
    /// real shape: the refresh, once told to stop, needs the store's map
    /// lock before it can return (Kyverno's poller needed the mutex its
    /// stopper held). Remove, replace and shutdown each finish within a
    /// bound; holding the map lock across the join would never finish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seed_stop_holds_lock() {
        let bound = Duration::from_secs(5);
        let store = Store::new(StoreConfig::default(), None);
        let mid_refresh = Arc::new(tokio::sync::Notify::new());
        let needs_lock = |store: Store, mid_refresh: Arc<tokio::sync::Notify>| {
            move |_cell: Arc<EntryCell>, token: CancellationToken| -> Runner {
                let store = store.clone();
                let mid_refresh = mid_refresh.clone();
                Box::pin(async move {
                    mid_refresh.notify_one();
                    token.cancelled().await;
                    // The lock, without blocking the thread: a stopper that
                    // held it would make this spin until the bound.
                    loop {
                        if store.inner.state.try_lock().is_ok() {
                            return Ok(());
                        }
                        tokio::task::yield_now().await;
                    }
                })
            }
        };
        for step in ["remove", "replace", "shutdown"] {
            add_with(
                &store,
                entry("e"),
                needs_lock(store.clone(), mid_refresh.clone()),
            );
            tokio::time::timeout(bound, mid_refresh.notified())
                .await
                .expect("refresh started");
            let stop = async {
                match step {
                    "remove" => {
                        assert!(store.remove("e").await.unwrap());
                    }
                    "replace" => {
                        // The replacement waits for stop too (and is removed next).
                        let old = store.lock_state().entries.remove("e");
                        assert!(store.stop_removed(old).await);
                    }
                    _ => store.shutdown().await.unwrap(),
                }
            };
            tokio::time::timeout(bound, stop)
                .await
                .unwrap_or_else(|_| panic!("{step} while the refresh needs the map lock hung"));
        }
        assert!(store.is_empty());
    }
}
