//! Writes each cluster entry's state back to its `GlobalContextEntry`
//! object's `status` subresource, as Kyverno does: a `Ready` condition
//! (reason `Succeeded`, or `Failed` with why) and `lastRefreshTime` (the
//! `Last refresh` column of `kubectl get globalcontextentries`).
//!
//! # Invariants
//! 1. [`StatusWriter::new`] starts nothing; [`StatusWriter::run`] follows
//!    the store's [`crate::Changes`] until its token is cancelled or the
//!    store shuts down, every await raced against the token. It spawns
//!    nothing and holds no lock.
//! 2. A status is written when the entry's readiness or message changes,
//!    and otherwise at most once per [`REFRESH_WRITE_INTERVAL`] for a new
//!    snapshot (a `kubernetesResource` entry's snapshot changes with every
//!    change of what it mirrors; its status is not rewritten each time).
//! 3. A failed write is kept and retried every [`RETRY_INTERVAL`] until it
//!    succeeds, the entry is removed, or its object is gone (404: an entry
//!    loaded from a file has no object, and is not retried).

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use leash_runtime::CancellationToken;
use serde_json::{Value, json};

use crate::changes::ChangeKind;
use crate::feed::global_context_entry_resource;
use crate::status::{EntryState, EntryStatus};
use crate::store::Store;

/// How often a new snapshot alone (readiness unchanged) rewrites the
/// status's `lastRefreshTime`.
pub(crate) const REFRESH_WRITE_INTERVAL: Duration = Duration::from_secs(60);

/// How long a failed write waits before it is tried again.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// See the module docs.
pub struct StatusWriter {
    store: Store,
    client: kube::Client,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// What was last written for an entry.
#[derive(Debug)]
struct Written {
    ready: bool,
    message: String,
    /// When readiness last changed (the condition's
    /// `lastTransitionTime`).
    transition: SystemTime,
    refresh: Option<SystemTime>,
    at: Instant,
}

impl StatusWriter {
    /// A writer of `store`'s entries' statuses through `client`.
    pub fn new(store: Store, client: kube::Client) -> StatusWriter {
        StatusWriter { store, client }
    }

    /// Writes statuses until `token` is cancelled or the store shuts down.
    ///
    /// # Cancel safety
    /// Cancel safe: what was not written is written by the next `run`
    /// (its first batch reports every entry).
    pub async fn run(self, token: CancellationToken) {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &global_context_entry_resource());
        let mut changes = self.store.changes();
        let mut written: HashMap<String, Written> = HashMap::new();
        // Statuses to write, by entry: the latest of each.
        let mut pending: HashMap<String, EntryStatus> = HashMap::new();
        loop {
            for (name, status) in std::mem::take(&mut pending) {
                match token
                    .run_until_cancelled(write(&api, &name, &status, written.get(&name)))
                    .await
                {
                    None => return,
                    Some(Ok(Some(w))) => {
                        written.insert(name, w);
                    }
                    // Not written on purpose (pending, or nothing new).
                    Some(Ok(None)) => {}
                    Some(Err(kube::Error::Api(s))) if s.code == 404 => {
                        tracing::debug!(entry = %name, "no GlobalContextEntry object: status not written");
                    }
                    Some(Err(e)) => {
                        tracing::warn!(entry = %name, error = %e, "writing GlobalContextEntry status failed; will retry");
                        pending.insert(name, status);
                    }
                }
            }
            let next = async {
                if pending.is_empty() {
                    Some(changes.next().await)
                } else {
                    tokio::time::timeout(RETRY_INTERVAL, changes.next())
                        .await
                        .ok()
                }
            };
            match token.run_until_cancelled(next).await {
                None | Some(Some(None)) => return,
                // The retry interval passed.
                Some(None) => {}
                Some(Some(Some(batch))) => {
                    for change in batch {
                        match change.kind {
                            ChangeKind::Updated { status, .. } => {
                                pending.insert(change.name, status);
                            }
                            ChangeKind::Removed => {
                                pending.remove(&change.name);
                                written.remove(&change.name);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Readiness and message of a state; `None` while it is pending.
fn readiness(status: &EntryStatus) -> Option<(bool, String)> {
    match status.state {
        EntryState::Pending => None,
        EntryState::Ready => Some((true, "Entry is ready".to_string())),
        // Readers still get the last good snapshot.
        EntryState::Stale => Some((
            true,
            format!(
                "Entry is ready; its latest refresh failed: {}",
                status.last_error.as_deref().unwrap_or("unknown error")
            ),
        )),
        EntryState::Failed => Some((
            false,
            status
                .reason
                .clone()
                .unwrap_or_else(|| "Entry has no data".to_string()),
        )),
    }
}

/// Writes `status` unless `before` says it is written already: the new
/// record, or `None` when nothing was written.
async fn write(
    api: &Api<DynamicObject>,
    name: &str,
    status: &EntryStatus,
    before: Option<&Written>,
) -> Result<Option<Written>, kube::Error> {
    let Some((ready, message)) = readiness(status) else {
        return Ok(None);
    };
    let refresh = status.last_refresh_time;
    if let Some(b) = before
        && b.ready == ready
        && b.message == message
        && (b.refresh == refresh || b.at.elapsed() < REFRESH_WRITE_INTERVAL)
    {
        return Ok(None);
    }
    let transition = match before {
        Some(b) if b.ready == ready => b.transition,
        _ => SystemTime::now(),
    };
    let condition = json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "Succeeded" } else { "Failed" },
        "message": message,
        "lastTransitionTime": rfc3339(transition),
    });
    // Kyverno's CRD has no `ready` in its status schema any more (the API
    // server would prune it): the condition says it.
    let mut body = json!({"status": {"conditions": [condition]}});
    if let Some(t) = refresh {
        body["status"]["lastRefreshTime"] = Value::String(rfc3339(t));
    }
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    Ok(Some(Written {
        ready,
        message,
        transition,
        refresh,
        at: Instant::now(),
    }))
}

/// `t` as Kubernetes writes times (RFC 3339, whole seconds, UTC).
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_state() {
        let mut status = EntryStatus::default();
        assert_eq!(readiness(&status), None);
        status.state = EntryState::Ready;
        assert_eq!(readiness(&status), Some((true, "Entry is ready".into())));
        status.state = EntryState::Stale;
        status.last_error = Some("502".into());
        assert!(readiness(&status).is_some_and(|(r, m)| r && m.contains("502")));
        status.state = EntryState::Failed;
        status.reason = Some("no data within 10s: 403".into());
        assert_eq!(
            readiness(&status),
            Some((false, "no data within 10s: 403".into()))
        );
    }
}
