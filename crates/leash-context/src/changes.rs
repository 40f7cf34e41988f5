//! A stream of store changes for printers and servers.
//!
//! Coalescing, never lossy for the latest state: each call to
//! [`Changes::next`] reports every entry whose snapshot or status changed
//! since the previous call (with its current values) and every entry that
//! was removed. Intermediate states superseded before the consumer looked
//! are not repeated; the latest one always is. Nothing is queued, so a slow
//! consumer cannot make the store wait or grow memory.
//!
//! # Invariants
//! 1. The store's change counter is marked seen (`borrow_and_update`)
//!    *before* the entries are scanned, so a change made during or after a
//!    scan wakes the next `changed().await`: no update is missed.
//! 2. A scan takes the store's map lock only to copy the entry list, and
//!    each entry's status lock only to copy its status (no lock is held
//!    while the caller awaits).

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::cell::EntryId;
use crate::snapshot::Snapshot;
use crate::status::EntryStatus;
use crate::store::Store;

/// Changes of a [`Store`]; see the module docs.
#[derive(Debug)]
pub struct Changes {
    store: Store,
    counter: watch::Receiver<u64>,
    seen: HashMap<String, (EntryId, u64)>,
}

/// One entry's change.
#[derive(Clone, Debug)]
pub struct Change {
    /// The entry.
    pub name: String,
    /// What changed.
    pub kind: ChangeKind,
}

/// What happened to an entry.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ChangeKind {
    /// Added, or its snapshot or status changed: the current values.
    Updated {
        /// The incarnation.
        id: EntryId,
        /// The current snapshot, if it has data.
        snapshot: Option<Arc<Snapshot>>,
        /// The current status.
        status: EntryStatus,
    },
    /// Removed from the store.
    Removed,
}

impl Changes {
    pub(crate) fn new(store: Store, counter: watch::Receiver<u64>) -> Changes {
        Changes {
            store,
            counter,
            seen: HashMap::new(),
        }
    }

    /// The next batch of changes (the first call reports every entry).
    /// `None` once the store is shut down and everything was reported.
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet returned is returned by the next call.
    pub async fn next(&mut self) -> Option<Vec<Change>> {
        loop {
            self.counter.borrow_and_update();
            let batch = self.scan();
            if !batch.is_empty() {
                return Some(batch);
            }
            if self.store.is_shut_down() {
                return None;
            }
            if self.counter.changed().await.is_err() {
                return None;
            }
        }
    }

    fn scan(&mut self) -> Vec<Change> {
        let current = self.store.versions();
        let mut batch = Vec::new();
        let mut present: HashMap<String, (EntryId, u64)> = HashMap::with_capacity(current.len());
        for (id, version, cell) in current {
            let name = cell.name().to_owned();
            if self.seen.get(&name) != Some(&(id, version)) {
                let (snapshot, status) = cell.view();
                batch.push(Change {
                    name: name.clone(),
                    kind: ChangeKind::Updated {
                        id,
                        snapshot,
                        status,
                    },
                });
            }
            present.insert(name, (id, version));
        }
        let mut removed: Vec<String> = self
            .seen
            .keys()
            .filter(|name| !present.contains_key(*name))
            .cloned()
            .collect();
        removed.sort();
        batch.extend(removed.into_iter().map(|name| Change {
            name,
            kind: ChangeKind::Removed,
        }));
        self.seen = present;
        batch
    }
}
