//! What a load did: per kind and in total.
//!
//! # Invariants
//! 1. [`Progress`] counters are statistics only: every update and read is
//!    `Ordering::Relaxed` and synchronizes nothing; the authoritative counts
//!    are in [`LoadReport`], built after every task is joined.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::Error;
use crate::kind::ResolvedKind;

/// The outcome of one list task: a kind, or a kind in one namespace.
#[derive(Debug)]
pub struct KindReport {
    /// The kind.
    pub kind: Arc<ResolvedKind>,
    /// The namespace listed (`None`: all namespaces, or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// Objects written (each exactly once).
    pub objects: u64,
    /// Pages received.
    pub pages: u64,
    /// Requests retried.
    pub retries: u64,
    /// Lists restarted from a new snapshot.
    pub restarts: u32,
    /// Wall time of the task.
    pub elapsed: Duration,
    /// The list was resumed with a fresh token after a 410 Expired: its
    /// objects come from more than one snapshot.
    pub across_snapshots: bool,
    /// Why the kind is incomplete; `None` when every object was written.
    pub error: Option<Error>,
}

impl KindReport {
    /// True if every object of the kind was written.
    pub fn is_complete(&self) -> bool {
        self.error.is_none()
    }

    /// `pods`, or `pods (namespace a)` when the kind was listed per namespace.
    pub fn label(&self) -> String {
        match &self.namespace {
            Some(ns) if self.kind.namespaced => format!("{} -n {ns}", self.kind.qualified_name()),
            _ => self.kind.qualified_name(),
        }
    }
}

/// The outcome of a whole load, one entry per task in submission order.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Per task (kind, or kind and namespace).
    pub kinds: Vec<KindReport>,
    /// Wall time of the load (not counting discovery).
    pub elapsed: Duration,
    /// The deadline passed before the load ended.
    pub timed_out: bool,
    /// Failures outside any kind (a pool that could not start, a panicked worker).
    pub errors: Vec<Error>,
}

impl LoadReport {
    /// True if every kind was written completely and nothing else failed.
    pub fn is_complete(&self) -> bool {
        self.errors.is_empty() && self.kinds.iter().all(KindReport::is_complete)
    }

    /// The incomplete kinds.
    pub fn failed(&self) -> impl Iterator<Item = &KindReport> {
        self.kinds.iter().filter(|k| !k.is_complete())
    }

    /// Total objects written.
    pub fn objects(&self) -> u64 {
        self.kinds.iter().map(|k| k.objects).sum()
    }

    /// Total pages.
    pub fn pages(&self) -> u64 {
        self.kinds.iter().map(|k| k.pages).sum()
    }

    /// Total retries.
    pub fn retries(&self) -> u64 {
        self.kinds.iter().map(|k| k.retries).sum()
    }

    /// Total restarts.
    pub fn restarts(&self) -> u64 {
        self.kinds.iter().map(|k| u64::from(k.restarts)).sum()
    }
}

/// Live counters of a running load, for progress displays. Statistics
/// only: every counter is updated and read with `Relaxed` ordering, and
/// nothing is synchronized through them.
#[derive(Debug, Default)]
pub struct Progress {
    kinds_total: AtomicU64,
    kinds_done: AtomicU64,
    objects: AtomicU64,
    pages: AtomicU64,
    retries: AtomicU64,
}

/// A reading of [`Progress`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgressSnapshot {
    /// Tasks to run.
    pub kinds_total: u64,
    /// Tasks finished (complete or not).
    pub kinds_done: u64,
    /// Objects handed to the stream.
    pub objects: u64,
    /// Pages received.
    pub pages: u64,
    /// Requests retried.
    pub retries: u64,
}

impl Progress {
    /// Read every counter.
    pub fn snapshot(&self) -> ProgressSnapshot {
        ProgressSnapshot {
            kinds_total: self.kinds_total.load(Ordering::Relaxed),
            kinds_done: self.kinds_done.load(Ordering::Relaxed),
            objects: self.objects.load(Ordering::Relaxed),
            pages: self.pages.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn set_total(&self, n: u64) {
        self.kinds_total.store(n, Ordering::Relaxed);
    }
    pub(crate) fn kind_done(&self) {
        self.kinds_done.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn page(&self) {
        self.pages.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn objects(&self, n: u64) {
        self.objects.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn retried(&self, n: u64) {
        if n > 0 {
            self.retries.fetch_add(n, Ordering::Relaxed);
        }
    }
}
