//! The shared state of one running entry: its snapshot and its status.
//!
//! # Invariants
//! 1. The snapshot is only ever replaced whole (`ArcSwapOption::store` of a
//!    fully computed [`Snapshot`]); readers load an `Arc` and keep it as long
//!    as they like (house rule 7).
//! 2. A refresh whose fetch or projection fails leaves the snapshot as it
//!    was and records the error in the status.
//! 3. The status mutex is a `std::sync::Mutex` held only for a few
//!    assignments: never across an `.await`, a channel send or a join
//!    (house rule 5). The snapshot swap happens inside it so that a reader
//!    who takes the status lock sees a status that matches the snapshot.
//! 4. Every change (snapshot or status) bumps the entry's version
//!    (`watch::Sender::send_modify`, which never blocks) and then the
//!    store's change counter, both after the status lock is released.
//!
//! # Lock order
//! Only one lock (the status mutex); nothing else is acquired under it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use serde_json::Value;
use tokio::sync::watch;

use crate::entry::ContextEntry;
use crate::error::{Error, chain};
use crate::snapshot::Snapshot;
use crate::status::{EntryState, EntryStatus};

/// Identity of one running incarnation of an entry: a replaced entry gets a
/// new id, so holders of an old id cannot touch the new one (house rule 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryId(pub(crate) u64);

pub(crate) struct EntryCell {
    pub(crate) id: EntryId,
    pub(crate) entry: ContextEntry,
    snapshot: ArcSwapOption<Snapshot>,
    status: Mutex<EntryStatus>,
    version: watch::Sender<u64>,
    store_changes: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for EntryCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryCell")
            .field("id", &self.id)
            .field("name", &self.entry.name())
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl EntryCell {
    pub(crate) fn new(
        id: EntryId,
        entry: ContextEntry,
        store_changes: Arc<watch::Sender<u64>>,
    ) -> EntryCell {
        EntryCell {
            id,
            entry,
            snapshot: ArcSwapOption::empty(),
            status: Mutex::new(EntryStatus::default()),
            version: watch::Sender::new(0),
            store_changes,
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.entry.name()
    }

    pub(crate) fn status(&self) -> EntryStatus {
        self.lock_status().clone()
    }

    /// Snapshot and status read under the status lock: they match.
    pub(crate) fn view(&self) -> (Option<Arc<Snapshot>>, EntryStatus) {
        let status = self.lock_status();
        (self.snapshot.load_full(), status.clone())
    }

    pub(crate) fn version(&self) -> u64 {
        *self.version.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    fn lock_status(&self) -> MutexGuard<'_, EntryStatus> {
        // A panic while holding this lock leaves a status that is still a
        // valid value (plain assignments), so poisoning is ignored.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Compute projections over `data` and swap the snapshot in; on a
    /// projection failure keep the previous snapshot and record the error.
    /// Data equal to the current snapshot's is not an update: the snapshot
    /// (and its `computed_at`) stays, `last_refresh_time` moves on, and
    /// subscribers hear of it only if the status changed (a recovery).
    pub(crate) fn publish(&self, data: Value) {
        if self
            .snapshot
            .load()
            .as_ref()
            .is_some_and(|current| current.data == data)
        {
            let changed = {
                let mut status = self.lock_status();
                status.last_refresh_time = Some(SystemTime::now());
                let changed = status.state != EntryState::Ready || status.last_error.is_some();
                status.state = EntryState::Ready;
                status.reason = None;
                status.last_error = None;
                status.last_error_time = None;
                changed
            };
            if changed {
                self.notify();
            }
            return;
        }
        match Snapshot::compute(data, self.entry.projections()) {
            Ok(snapshot) => {
                let computed_at = snapshot.computed_at;
                {
                    let mut status = self.lock_status();
                    self.snapshot.store(Some(Arc::new(snapshot)));
                    status.state = EntryState::Ready;
                    status.reason = None;
                    status.last_refresh_time = Some(computed_at);
                    status.last_error = None;
                    status.last_error_time = None;
                    status.updates += 1;
                }
                self.notify();
            }
            Err(err) => self.record_error(&err),
        }
    }

    /// Record a failed refresh; the snapshot stays as it is.
    pub(crate) fn record_error(&self, err: &Error) {
        let text = chain(err);
        tracing::warn!(entry = self.name(), error = %text, "global context entry refresh failed");
        {
            let mut status = self.lock_status();
            if status.state == EntryState::Ready {
                status.state = EntryState::Stale;
            }
            status.last_error = Some(text);
            status.last_error_time = Some(SystemTime::now());
            status.errors += 1;
        }
        self.notify();
    }

    /// Readiness bound passed without data: mark the entry failed. Returns
    /// false if data arrived meanwhile (nothing changed).
    pub(crate) fn mark_not_ready(&self, bound: std::time::Duration) -> bool {
        {
            let mut status = self.lock_status();
            if status.state != EntryState::Pending {
                return false;
            }
            status.state = EntryState::Failed;
            let why = status
                .last_error
                .as_deref()
                .map_or_else(|| "no data yet".to_owned(), |e| format!("last error: {e}"));
            status.reason = Some(format!("not ready within {bound:?}: {why}"));
        }
        self.notify();
        true
    }

    /// The refresh task ended although nobody stopped the entry (an error
    /// or a panic): the entry is `Failed` with the reason, data kept, until
    /// its restart after `restart_in` brings data again.
    pub(crate) fn mark_stopped(&self, why: &str, restart_in: std::time::Duration) {
        tracing::error!(
            entry = self.name(),
            reason = why,
            restart_in = ?restart_in,
            "global context entry stopped refreshing"
        );
        {
            let mut status = self.lock_status();
            status.state = EntryState::Failed;
            status.reason = Some(format!(
                "stopped refreshing: {why}; restarting in {restart_in:?}"
            ));
            status.last_error = Some(why.to_owned());
            status.last_error_time = Some(SystemTime::now());
        }
        self.notify();
    }

    /// The refresh task was started again after it stopped.
    pub(crate) fn mark_restarted(&self) {
        self.lock_status().restarts += 1;
        self.notify();
    }

    fn notify(&self) {
        self.version.send_modify(|v| *v += 1);
        self.store_changes.send_modify(|v| *v += 1);
    }
}
