//! Watches: a chunked stream of newline-delimited `{"type", "object"}` events.
//!
//! # Invariants
//! 1. A watch reads events only from the store's history, in resourceVersion order,
//!    strictly after its cursor; it subscribes to the store's wake-up channel and marks
//!    it seen *before* each read, so a write after a read always wakes it (no lost
//!    wake-up), and it never sees an event twice or out of order.
//! 2. Initial events (synthetic ADDED for `resourceVersion` ""/"0" or
//!    `sendInitialEvents=true`) come from one snapshot at version `v`, and the live
//!    phase starts at the cursor `v`, so nothing is missed or repeated between them.
//! 3. A watch whose cursor falls behind the history (too old a start version, or a
//!    reader slower than [`HISTORY_CAPACITY`](crate::store::HISTORY_CAPACITY) writes)
//!    gets one ERROR event with a 410 Status and the stream ends: the client relists.
//! 4. Every wait is raced against the server's cancellation token and the watch's
//!    deadline (`timeoutSeconds`), so a watch ends cleanly on shutdown or timeout; no
//!    lock is held across any await.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::list::Selection;
use crate::object::Entry;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::{Objects, Store};
use crate::transform::{self, MetaVersion};

/// Default watch duration when `timeoutSeconds` is absent (the server's min-request-timeout).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// The longest watch (larger `timeoutSeconds` are capped).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);
/// How often an idle watch with `allowWatchBookmarks=true` gets a BOOKMARK.
pub(crate) const BOOKMARK_INTERVAL: Duration = Duration::from_secs(5);
/// Events per history read (and per initial-events frame).
const BATCH: usize = 256;

/// The watch-specific query parameters.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchParams {
    pub(crate) resource_version: Option<String>,
    pub(crate) send_initial_events: Option<bool>,
    pub(crate) allow_bookmarks: bool,
    pub(crate) timeout: Option<Duration>,
    /// Events carry `PartialObjectMetadata`s of this version, not the
    /// objects (`Accept: …;as=PartialObjectMetadata`).
    pub(crate) metadata: Option<MetaVersion>,
}

enum Phase {
    /// Sending synthetic ADDED events from a snapshot, resuming after a key.
    Initial {
        objects: Objects,
        after: Option<(String, String)>,
        end_bookmark: bool,
    },
    Live,
    Done,
}

struct WatchState {
    store: Store,
    rt: Arc<ResourceType>,
    sel: Selection,
    cursor: u64,
    phase: Phase,
    rx: tokio::sync::watch::Receiver<u64>,
    token: CancellationToken,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    metadata: Option<MetaVersion>,
}

/// Starts a watch of `rt` for `sel`: the stream of response body chunks.
pub(crate) fn watch(
    store: &Store,
    rt: Arc<ResourceType>,
    sel: Selection,
    params: &WatchParams,
    token: CancellationToken,
) -> Result<impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static, ApiError> {
    let rx = store.subscribe(&rt.collection());
    let now = Instant::now();
    let rv = params.resource_version.as_deref().unwrap_or("");
    let initial = params
        .send_initial_events
        .unwrap_or(rv.is_empty() || rv == "0");
    let (cursor, phase) = if initial {
        let (objects, at) = store.snapshot(&rt);
        let phase = Phase::Initial {
            objects,
            after: None,
            end_bookmark: params.send_initial_events == Some(true),
        };
        (at, phase)
    } else if rv.is_empty() || rv == "0" {
        (store.resource_version(), Phase::Live)
    } else {
        let n: u64 = rv
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))?;
        (n, Phase::Live)
    };
    let state = WatchState {
        store: store.clone(),
        rt,
        sel,
        cursor,
        phase,
        rx,
        token,
        // A huge timeoutSeconds must not overflow the clock: cap it at a year.
        deadline: now + params.timeout.unwrap_or(DEFAULT_TIMEOUT).min(MAX_TIMEOUT),
        bookmarks: params.allow_bookmarks,
        next_bookmark: now + BOOKMARK_INTERVAL,
        metadata: params.metadata,
    };
    Ok(futures::stream::unfold(state, |mut s| async move {
        let chunk = s.next_chunk().await?;
        Some((Ok(chunk), s))
    }))
}

fn line(kind: &str, object: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(object);
    out.extend_from_slice(b"}\n");
    out
}

impl WatchState {
    /// An event's object as this watch sends it: the object at `api_version`,
    /// or its `PartialObjectMetadata`.
    fn object(&self, e: &Entry, api_version: &str) -> Bytes {
        match self.metadata {
            None => e.json_at(api_version),
            Some(version) => transform::partial_object(&e.json, version),
        }
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let annotations = if initial_end {
            ",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}"
        } else {
            ""
        };
        let metadata = format!("{{\"resourceVersion\":\"{}\"{annotations}}}", self.cursor);
        let obj = match self.metadata {
            None => Bytes::from(format!(
                "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{metadata}}}",
                self.rt.kind,
                self.rt.api_version(),
            )),
            Some(version) => transform::partial_of_metadata(&metadata, version),
        };
        Bytes::from(line("BOOKMARK", &obj))
    }

    fn too_old(&self, floor: u64) -> Bytes {
        let status = ApiError::expired(format!(
            "too old resource version: {} ({floor})",
            self.cursor
        ))
        .to_bytes();
        Bytes::from(line("ERROR", &status))
    }

    /// The next body chunk, or `None` when the watch is over.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.token.is_cancelled() || Instant::now() >= self.deadline {
                return None;
            }
            match std::mem::replace(&mut self.phase, Phase::Live) {
                Phase::Done => {
                    self.phase = Phase::Done;
                    return None;
                }
                Phase::Initial {
                    objects,
                    after,
                    end_bookmark,
                } => {
                    let mut out = Vec::new();
                    let mut last = None;
                    let lower = match &after {
                        Some(k) => std::ops::Bound::Excluded(k.clone()),
                        None => std::ops::Bound::Unbounded,
                    };
                    let mut n = 0;
                    let at = self.rt.api_version();
                    for (k, e) in objects.range((lower, std::ops::Bound::Unbounded)) {
                        last = Some(k.clone());
                        if self.sel.matches(e) {
                            out.extend_from_slice(&line("ADDED", &self.object(e, &at)));
                            n += 1;
                            if n == BATCH {
                                break;
                            }
                        }
                    }
                    if n == BATCH {
                        self.phase = Phase::Initial {
                            objects,
                            after: last,
                            end_bookmark,
                        };
                    } else if end_bookmark {
                        out.extend_from_slice(&self.bookmark(true));
                    }
                    if !out.is_empty() {
                        return Some(Bytes::from(out));
                    }
                }
                Phase::Live => {
                    // Mark the wake-up seen before reading: a later write wakes us.
                    self.rx.borrow_and_update();
                    // Checked before reading: a CRD's removal and its objects' DELETED events
                    // are one critical section, so if it is gone now, the read sees them all.
                    let gone = (self.store.registry())
                        .by_path(&self.rt.group, &self.rt.version, &self.rt.plural)
                        .is_none();
                    let coll = self.rt.collection();
                    let sel = &self.sel;
                    match self.store.events_after(self.cursor, BATCH, &coll, |e| {
                        e.coll == coll && sel.matches(&e.entry)
                    }) {
                        Err(too_old) => {
                            let chunk = self.too_old(too_old.floor);
                            self.phase = Phase::Done;
                            return Some(chunk);
                        }
                        Ok((events, cursor)) => {
                            self.cursor = cursor;
                            if !events.is_empty() {
                                let mut out = Vec::new();
                                let at = self.rt.api_version();
                                for e in events {
                                    out.extend_from_slice(&line(
                                        e.kind.as_str(),
                                        &self.object(&e.entry, &at),
                                    ));
                                }
                                return Some(Bytes::from(out));
                            }
                        }
                    }
                    if gone {
                        // The kind's CRD was deleted and every event before that is sent.
                        return None;
                    }
                    let wake_at = if self.bookmarks {
                        self.deadline.min(self.next_bookmark)
                    } else {
                        self.deadline
                    };
                    tokio::select! {
                        _ = self.token.cancelled() => return None,
                        changed = self.rx.changed() => {
                            if changed.is_err() {
                                return None;
                            }
                        }
                        _ = tokio::time::sleep_until(wake_at) => {
                            if self.bookmarks && Instant::now() >= self.next_bookmark {
                                self.next_bookmark = Instant::now() + BOOKMARK_INTERVAL;
                                return Some(self.bookmark(false));
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The watches open right now, by resource (`configmaps`,
/// `deployments.apps`): tests wait on it to see a client start or stop
/// watching a kind.
#[derive(Debug, Default)]
pub(crate) struct OpenWatches {
    open: std::sync::Mutex<std::collections::BTreeMap<String, usize>>,
}

impl OpenWatches {
    /// Counts a watch of `rt` as open until the returned guard is dropped
    /// (with the response body: the watch ended or its client went away).
    pub(crate) fn open(self: &Arc<Self>, rt: &ResourceType) -> OpenWatch {
        let resource = if rt.group.is_empty() {
            rt.plural.clone()
        } else {
            format!("{}.{}", rt.plural, rt.group)
        };
        *self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(resource.clone())
            .or_default() += 1;
        OpenWatch {
            watches: self.clone(),
            resource,
        }
    }

    pub(crate) fn snapshot(&self) -> std::collections::BTreeMap<String, usize> {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// One open watch, counted in [`OpenWatches`] while it lives.
#[derive(Debug)]
pub(crate) struct OpenWatch {
    watches: Arc<OpenWatches>,
    resource: String,
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        let mut open = self.watches.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.resource) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.resource);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::{Value, json};

    fn lines(chunk: &Bytes) -> Vec<Value> {
        chunk
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    /// A watch of every object of the core/v1 resource `plural`.
    fn watch_all(
        store: &Store,
        plural: &str,
        params: &WatchParams,
        token: CancellationToken,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> {
        let rt = store.registry().by_path("", "v1", plural).unwrap();
        watch(store, rt, Selection::default(), params, token).unwrap()
    }

    fn create_configmap(store: &Store, name: &str) {
        store
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}}))
            .unwrap();
    }

    #[tokio::test]
    async fn initial_events_then_live_then_timeout() {
        let store = Store::new(0);
        let params = WatchParams {
            send_initial_events: Some(true),
            allow_bookmarks: true,
            timeout: Some(Duration::from_millis(300)),
            ..Default::default()
        };
        let s = watch_all(&store, "namespaces", &params, CancellationToken::new());
        futures::pin_mut!(s);
        let first = lines(&s.next().await.unwrap().unwrap());
        assert_eq!(first.len(), 5);
        assert!(first[..4].iter().all(|e| e["type"] == "ADDED"));
        assert_eq!(first[4]["type"], "BOOKMARK");
        assert_eq!(
            first[4]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
        store
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}))
            .unwrap();
        let live = lines(&s.next().await.unwrap().unwrap());
        assert_eq!(live[0]["type"], "ADDED");
        assert_eq!(live[0]["object"]["metadata"]["name"], "x");
        assert!(s.next().await.is_none(), "ends at timeoutSeconds");
    }

    #[tokio::test]
    async fn too_old_is_an_error_event() {
        let store = Store::new(0);
        for i in 0..crate::store::HISTORY_CAPACITY + 5 {
            create_configmap(&store, &format!("c{i}"));
        }
        let params = WatchParams {
            resource_version: Some("2".into()),
            ..Default::default()
        };
        let s = watch_all(&store, "configmaps", &params, CancellationToken::new());
        futures::pin_mut!(s);
        let e = lines(&s.next().await.unwrap().unwrap());
        assert_eq!(e[0]["type"], "ERROR");
        assert_eq!(e[0]["object"]["code"], 410);
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_watcher_that_falls_behind_the_history_gets_410_and_ends() {
        let store = Store::new(0);
        let params = WatchParams {
            resource_version: Some(store.resource_version().to_string()),
            ..Default::default()
        };
        let s = watch_all(&store, "configmaps", &params, CancellationToken::new());
        futures::pin_mut!(s);
        create_configmap(&store, "first");
        let first = lines(&s.next().await.unwrap().unwrap());
        assert_eq!(first[0]["object"]["metadata"]["name"], "first");
        // The reader stalls while more writes than the history holds happen.
        for i in 0..crate::store::HISTORY_CAPACITY + 1 {
            create_configmap(&store, &format!("c{i}"));
        }
        let e = lines(&s.next().await.unwrap().unwrap());
        assert_eq!(e.len(), 1);
        assert_eq!(
            (e[0]["type"].as_str(), e[0]["object"]["code"].as_u64()),
            (Some("ERROR"), Some(410))
        );
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn cancellation_ends_the_stream() {
        let store = Store::new(0);
        let token = CancellationToken::new();
        // A timeout too large for the clock is capped, not a panic.
        let params = WatchParams {
            resource_version: Some("4".into()),
            timeout: Some(Duration::MAX),
            ..Default::default()
        };
        let s = watch_all(&store, "pods", &params, token.clone());
        futures::pin_mut!(s);
        token.cancel();
        assert!(s.next().await.is_none());
    }
}
