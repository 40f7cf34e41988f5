//! What callers can read about an entry's health.

use std::time::SystemTime;

use serde::Serialize;

/// The life stage of an entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryState {
    /// Started; no data yet, readiness bound not reached.
    #[default]
    Pending,
    /// Has data and the latest refresh succeeded.
    Ready,
    /// Has data, but the latest refresh or projection failed: readers get the
    /// last good snapshot, `last_error` says what failed.
    Stale,
    /// No data within the readiness bound (still retrying: it becomes
    /// `Ready` if data arrives later), or the refresh task stopped on an
    /// error or a panic and waits for its restart (a snapshot it had stays
    /// readable). `reason` says which.
    Failed,
}

/// Status of one entry (Kyverno's `Ready` condition and `lastRefreshTime`,
/// plus the last error).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryStatus {
    /// Life stage.
    pub state: EntryState,
    /// Why the entry is `Failed` (readiness timeout and the last error, or
    /// why its refresh task stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the current snapshot was swapped in.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_time"
    )]
    pub last_refresh_time: Option<SystemTime>,
    /// The error of the latest failed refresh; cleared by a successful one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When `last_error` happened.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "serialize_time"
    )]
    pub last_error_time: Option<SystemTime>,
    /// Snapshots swapped in so far.
    pub updates: u64,
    /// Failed refreshes so far.
    pub errors: u64,
    /// Times the refresh task was started again after it failed, panicked
    /// or ended (see the store's restart backoff).
    pub restarts: u64,
}

#[allow(clippy::ref_option)] // serde's `serialize_with` passes `&Option<T>`
fn serialize_time<S: serde::Serializer>(
    time: &Option<SystemTime>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match time {
        Some(t) => serializer.collect_str(&humantime::format_rfc3339_millis(*t)),
        None => serializer.serialize_none(),
    }
}
