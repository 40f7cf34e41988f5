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
use leash_runtime::{Scope, ScopeError, ScopeHandle, TaskError, cancellable};
use serde_json::Value;
use tokio::sync::watch;

use crate::cell::{EntryCell, EntryId};
use crate::entry::{ContextEntry, EntrySource};
use crate::error::{Error, Result};
use crate::snapshot::Snapshot;
use crate::status::{EntryState, EntryStatus};
use crate::{api_call, kubernetes};

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
        let runner: std::pin::Pin<Box<dyn Future<Output = Result<()>> + Send>> = match entry
            .source()
            .clone()
        {
            EntrySource::Kubernetes(source) => {
                let client = self.inner.client.clone();
                let cell = cell.clone();
                let token = token.clone();
                let watch_timeout = self.inner.config.watch_timeout;
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
                let client = self.inner.client.clone();
                let timeout = self.inner.config.request_timeout;
                let cell = cell.clone();
                let token = token.clone();
                Box::pin(async move { api_call::run(cell, source, client, timeout, token).await })
            }
        };
        // A runner only returns when cancelled. If it fails or panics, the
        // entry would silently stop refreshing while still in the map: say
        // so in its status (then report the failure to the scope's owner).
        let watched = cell.clone();
        scope.spawn(format!("context entry {name}: refresh"), async move {
            match AssertUnwindSafe(runner).catch_unwind().await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(err)) => {
                    watched.mark_stopped(&crate::error::chain(&err));
                    Err(err)
                }
                Err(panic) => {
                    watched.mark_stopped("the refresh task panicked");
                    std::panic::resume_unwind(panic)
                }
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
        let mut errors: Vec<TaskError> = results
            .into_iter()
            .filter_map(Result::err)
            .flat_map(|e| e.errors)
            .collect();
        if let Some(root) = root
            && let Err(e) = root.shutdown().await
        {
            errors.extend(e.errors);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ScopeError { errors })
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

fn not_ready_reason(status: &EntryStatus) -> String {
    if let Some(reason) = &status.reason {
        return reason.clone();
    }
    match &status.last_error {
        Some(err) => format!("no data yet; last error: {err}"),
        None => "no data yet".to_owned(),
    }
}
