//! Lists: selectors, `limit`/`continue` pagination over retained consistent
//! snapshots, and the response body assembled from pre-serialized objects.
//!
//! # Invariants
//! 1. Every page of one list is cut from the same immutable snapshot (a collection
//!    `OrdMap` clone at the first page's resourceVersion), so pages neither repeat nor
//!    miss objects whatever writes happen meanwhile, and all carry that version.
//! 2. A snapshot is retained (keyed by collection and resourceVersion) only when a
//!    page has a continue token; the table holds at most [`SNAPSHOT_CAPACITY`] of them,
//!    evicting the oldest. A token whose snapshot is evicted or older than the
//!    continue TTL (counted from the snapshot's first page) gets 410 Expired with a
//!    fresh token that resumes after the same key in the latest state.
//! 3. The table's mutex guards only lookups and inserts (never held while building a
//!    page, never across an await), and is never taken while the store's lock is held.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::object::Entry;
use crate::resources::{CollectionKey, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Objects, Store};

/// How many list snapshots are retained for continue tokens.
pub(crate) const SNAPSHOT_CAPACITY: usize = 1024;

/// What a list or watch selects.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    /// `Some(ns)` for a namespaced request.
    pub(crate) namespace: Option<String>,
    pub(crate) labels: LabelSelector,
    pub(crate) fields: FieldSelector,
}

impl Selection {
    pub(crate) fn matches(&self, e: &Entry) -> bool {
        self.namespace.as_deref().is_none_or(|ns| e.namespace == ns)
            && self.labels.matches(&e.labels)
            && self.fields.matches(|f| e.field(f))
    }

    fn unfiltered(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// The objects of `objects` this selection can match, from `after` on (exclusive or inclusive).
    pub(crate) fn range<'a>(
        &'a self,
        objects: &'a Objects,
        after: Option<(Bound<()>, (String, String))>,
    ) -> impl Iterator<Item = &'a std::sync::Arc<Entry>> + 'a {
        let lower = match (after, &self.namespace) {
            (Some((Bound::Excluded(()), k)), _) => Bound::Excluded(k),
            (Some((_, k)), _) => Bound::Included(k),
            (None, Some(ns)) => Bound::Included((ns.clone(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let ns = self.namespace.clone();
        objects
            .range((lower, Bound::Unbounded))
            .take_while(move |((n, _), _)| ns.as_deref().is_none_or(|ns| n == ns))
            .map(|(_, e)| e)
    }
}

/// The list-specific query parameters.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListParams {
    pub(crate) limit: usize,
    pub(crate) continue_token: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) resource_version_match: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Token {
    v: String,
    rv: i64,
    start: String,
    /// Items after the page that produced this token (only when unfiltered); saves a count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<usize>,
}

fn encode(rv: i64, start: String, remaining: Option<usize>) -> String {
    let t = Token {
        v: "meta.k8s.io/v1".into(),
        rv,
        start,
        r: remaining,
    };
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&t).unwrap_or_default())
}

fn decode(s: &str) -> Result<Token, ApiError> {
    let bad = |why: String| ApiError::bad_request(format!("continue key is not valid: {why}"));
    let bytes = URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .or_else(|_| URL_SAFE.decode(s))
        .map_err(|e| bad(e.to_string()))?;
    let t: Token = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if t.v != "meta.k8s.io/v1" {
        return Err(bad(format!(
            "incorrect encoded start resourceVersion (version {})",
            t.v
        )));
    }
    if t.rv == 0 || t.rv < -1 {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
        ));
    }
    Ok(t)
}

/// The key of an entry as the continue token writes it, relative to the list's scope.
fn relative_key(sel: &Selection, e: &Entry) -> String {
    if sel.namespace.is_some() || e.namespace.is_empty() {
        e.name.clone()
    } else {
        format!("{}/{}", e.namespace, e.name)
    }
}

/// The bound a token's `start` denotes.
fn start_bound(sel: &Selection, start: &str) -> Result<(Bound<()>, (String, String)), ApiError> {
    let (bound, key) = match start.strip_suffix('\0') {
        Some(k) => (Bound::Excluded(()), k),
        None => (Bound::Included(()), start),
    };
    let key = match &sel.namespace {
        Some(ns) => (ns.clone(), key.to_string()),
        None => match key.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => (String::new(), key.to_string()),
        },
    };
    if key.1.is_empty() && key.0.is_empty() {
        return Err(ApiError::bad_request(
            "continue key is not valid: empty start key",
        ));
    }
    Ok((bound, key))
}

struct Retained {
    coll: CollectionKey,
    rv: u64,
    objects: Objects,
    /// When the latest list at this version served its first page.
    renewed: Instant,
}

/// Snapshots retained for continue tokens.
#[derive(Default)]
pub(crate) struct Snapshots {
    table: Mutex<VecDeque<Retained>>,
    /// Continue tokens answered 410 Expired so far (a statistic).
    expired: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Snapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshots").finish_non_exhaustive()
    }
}

impl Snapshots {
    /// How many continue tokens were answered 410 Expired.
    pub(crate) fn expired(&self) -> u64 {
        // Relaxed: a statistic; it orders nothing.
        self.expired.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn get(&self, coll: &CollectionKey, rv: u64, ttl: Duration) -> Option<Objects> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .find(|r| r.rv == rv && r.coll == *coll)
            .filter(|r| r.renewed.elapsed() <= ttl)
            .map(|r| r.objects.clone())
    }

    /// Keeps `objects` for continue tokens at `rv` for `ttl` from now. The
    /// first page of a list at a version already kept (`renew`) renews it:
    /// every list gets its tokens' whole `ttl` from its own first page, even
    /// when an earlier list at the same version (nothing written between them)
    /// began long ago. Later pages leave the time alone.
    fn retain(&self, coll: &CollectionKey, rv: u64, objects: &Objects, ttl: Duration, renew: bool) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = table.iter().position(|r| r.rv == rv && r.coll == *coll) {
            if renew {
                let mut kept = table.remove(at).expect("position is in range");
                kept.renewed = Instant::now();
                table.push_back(kept);
            }
            return;
        }
        // Expired snapshots can never be used again: free them first.
        table.retain(|r| r.renewed.elapsed() <= ttl);
        if table.len() >= SNAPSHOT_CAPACITY {
            table.pop_front();
        }
        table.push_back(Retained {
            coll: coll.clone(),
            rv,
            objects: objects.clone(),
            renewed: Instant::now(),
        });
    }
}

const EXPIRED_MESSAGE: &str = "The provided continue parameter is too old to display a consistent list result. \
You can start a new list without the continue parameter, or use the continue token in this response to \
retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - \
objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// One page of a list: its objects and its `metadata` (resourceVersion,
/// continue token, remainingItemCount) as JSON text.
#[derive(Debug)]
pub(crate) struct Page {
    pub(crate) items: Vec<std::sync::Arc<Entry>>,
    pub(crate) metadata: String,
}

/// Serves one list page of `rt`: the whole JSON `…List` body.
pub(crate) fn list(
    store: &Store,
    snapshots: &Snapshots,
    rt: &ResourceType,
    sel: &Selection,
    params: &ListParams,
    ttl: Duration,
) -> Result<ListBody, ApiError> {
    let Page { items, metadata } = page(store, snapshots, rt, sel, params, ttl)?;
    let api_version = rt.api_version();
    let head = format!(
        "{{\"kind\":\"{}\",\"apiVersion\":\"{api_version}\",\"metadata\":{metadata},\"items\":[",
        rt.list_kind,
    );
    // The items' stored bytes are shared, not copied: the body is a sequence of
    // `Bytes` pieces (head, item, ",", item, ..., "]}") with its exact length.
    let mut pieces = Vec::with_capacity(items.len() * 2 + 2);
    pieces.push(Bytes::from(head));
    // kube-apiserver leaves `apiVersion` and `kind` out of the items of a
    // list of built-in kinds (the list names them once); custom resources'
    // items keep theirs. Clients that rely on them break only on a real
    // cluster (leash's background scan once skipped every listed object).
    let bare = rt.crd.is_none();
    for (i, e) in items.iter().enumerate() {
        if i > 0 {
            pieces.push(Bytes::from_static(b","));
        }
        let json = e.json_at(&api_version);
        if bare {
            push_without_type_meta(&json, &mut pieces);
        } else {
            pieces.push(json);
        }
    }
    pieces.push(Bytes::from_static(b"]}"));
    Ok(ListBody::new(pieces))
}

/// Pushes `json` (one object) without its top-level `apiVersion` and
/// `kind` members, as slices of it (nothing copied). Anything that does not
/// scan as an object is pushed whole.
fn push_without_type_meta(json: &Bytes, pieces: &mut Vec<Bytes>) {
    let Some(members) = top_level_members(json) else {
        pieces.push(json.clone());
        return;
    };
    pieces.push(Bytes::from_static(b"{"));
    let mut first = true;
    for (key, span) in members {
        if key == b"apiVersion" || key == b"kind" {
            continue;
        }
        if !first {
            pieces.push(Bytes::from_static(b","));
        }
        first = false;
        pieces.push(json.slice(span));
    }
    pieces.push(Bytes::from_static(b"}"));
}

/// The members of a JSON object's text: each key's bytes (unescaped keys
/// only; an escaped one is returned as written) and the byte range of the
/// whole member (`"key":value`). `None` if the text is not an object.
fn top_level_members(json: &[u8]) -> Option<Vec<(&[u8], std::ops::Range<usize>)>> {
    let ws = |i: &mut usize| {
        while json.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    // The end of the string that starts at `i` (its opening quote).
    let string_end = |mut i: usize| -> Option<usize> {
        i += 1;
        loop {
            match *json.get(i)? {
                b'\\' => i += 2,
                b'"' => return Some(i + 1),
                _ => i += 1,
            }
        }
    };
    let mut i = 0;
    ws(&mut i);
    if json.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut members = Vec::new();
    loop {
        ws(&mut i);
        match json.get(i)? {
            b'}' => return Some(members),
            b'"' => {}
            _ => return None,
        }
        let start = i;
        let key_end = string_end(i)?;
        let key = &json[i + 1..key_end - 1];
        i = key_end;
        ws(&mut i);
        if json.get(i) != Some(&b':') {
            return None;
        }
        i += 1;
        ws(&mut i);
        // The value: a string, or anything up to the `,` or `}` that ends
        // the member at this depth.
        let mut depth = 0usize;
        loop {
            match *json.get(i)? {
                b'"' => i = string_end(i)?,
                b'{' | b'[' => {
                    depth += 1;
                    i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                b',' | b'}' if depth == 0 => break,
                _ => i += 1,
            }
        }
        let mut end = i;
        while end > start && json[end - 1].is_ascii_whitespace() {
            end -= 1;
        }
        members.push((key, start..end));
        if json[i] == b',' {
            i += 1;
        }
    }
}

/// Selects one list page of `rt` (what [`list`] serves, and Tables too).
pub(crate) fn page(
    store: &Store,
    snapshots: &Snapshots,
    rt: &ResourceType,
    sel: &Selection,
    params: &ListParams,
    ttl: Duration,
) -> Result<Page, ApiError> {
    let coll = rt.collection();
    // A list's first page: no token, or the fresh token of a 410 (a new list at the latest
    // version); it gives the version's snapshot a whole TTL again.
    let mut first_page = true;
    let (objects, rv, after, known_remaining) = match &params.continue_token {
        Some(token) => {
            if !matches!(
                params.resource_version.as_deref(),
                None | Some("") | Some("0")
            ) {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let t = decode(token)?;
            let after = start_bound(sel, &t.start)?;
            if t.rv == -1 {
                let (objects, rv) = store.snapshot(rt);
                (objects, rv, Some(after), None)
            } else {
                let rv = t.rv as u64;
                first_page = false;
                match snapshots.get(&coll, rv, ttl) {
                    Some(objects) => (objects, rv, Some(after), t.r),
                    None => {
                        // Relaxed: a statistic; it orders nothing.
                        snapshots
                            .expired
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return Err(ApiError::expired(EXPIRED_MESSAGE)
                            .with_continue(encode(-1, t.start, None)));
                    }
                }
            }
        }
        None => {
            let (objects, latest) = store.snapshot(rt);
            match params.resource_version.as_deref() {
                None | Some("") | Some("0") => (objects, latest, None, None),
                Some(v) => {
                    let n: u64 = v.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid resource version {v:?}"))
                    })?;
                    let exact = params.resource_version_match.as_deref() == Some("Exact");
                    if n > latest {
                        return Err(ApiError::new(
                            504,
                            "Timeout",
                            format!("Too large resource version: {n}, current: {latest}"),
                        ));
                    } else if !exact || n == latest {
                        (objects, latest, None, None)
                    } else {
                        match snapshots.get(&coll, n, ttl) {
                            Some(objects) => (objects, n, None, None),
                            None => {
                                return Err(ApiError::expired(format!(
                                    "too old resource version: {n} ({latest})"
                                )));
                            }
                        }
                    }
                }
            }
        }
    };
    if let Some(m) = params.resource_version_match.as_deref()
        && !["", "Exact", "NotOlderThan"].contains(&m)
    {
        return Err(ApiError::bad_request(format!(
            "resourceVersionMatch: Unsupported value: {m:?}"
        )));
    }

    let mut items: Vec<std::sync::Arc<Entry>> = Vec::new();
    let mut more = false;
    let mut iter = sel.range(&objects, after).filter(|e| sel.matches(e));
    for e in iter.by_ref() {
        if params.limit > 0 && items.len() == params.limit {
            more = true;
            break;
        }
        items.push(e.clone());
    }
    drop(iter);
    let mut metadata = format!("{{\"resourceVersion\":\"{rv}\"");
    if more {
        let last = items
            .last()
            .expect("a limit of at least one item was reached");
        let remaining = if sel.unfiltered() {
            Some(match known_remaining {
                Some(r) => r.saturating_sub(items.len()),
                None => {
                    let after = Some((
                        Bound::Excluded(()),
                        (last.namespace.clone(), last.name.clone()),
                    ));
                    sel.range(&objects, after).count()
                }
            })
        } else {
            None
        };
        snapshots.retain(&coll, rv, &objects, ttl, first_page);
        let token = encode(
            rv as i64,
            format!("{}\0", relative_key(sel, last)),
            remaining,
        );
        metadata.push_str(&format!(",\"continue\":\"{token}\""));
        if let Some(r) = remaining {
            metadata.push_str(&format!(",\"remainingItemCount\":{r}"));
        }
    }
    metadata.push('}');
    Ok(Page { items, metadata })
}

/// A list response body: pieces that share the stored objects' bytes.
#[derive(Debug)]
pub(crate) struct ListBody {
    pub(crate) len: usize,
    pub(crate) pieces: Vec<Bytes>,
}

impl ListBody {
    pub(crate) fn new(pieces: Vec<Bytes>) -> Self {
        Self {
            len: pieces.iter().map(Bytes::len).sum(),
            pieces,
        }
    }

    /// The whole body in one buffer (tests).
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.pieces.concat()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn list_items_of_built_in_kinds_carry_no_type_meta() {
        for (text, want) in [
            (
                r#"{"apiVersion":"v1","data":{"kind":"x","a":"}{,\""},"kind":"ConfigMap","metadata":{"name":"a"}}"#,
                json!({"data": {"kind": "x", "a": "}{,\""}, "metadata": {"name": "a"}}),
            ),
            (
                r#" { "kind" : "Pod" , "spec" : [1, {"kind": 2}] , "apiVersion": "v1" } "#,
                json!({"spec": [1, {"kind": 2}]}),
            ),
            (r#"{"apiVersion":"v1","kind":"Pod"}"#, json!({})),
            (r#"{}"#, json!({})),
        ] {
            let mut pieces = Vec::new();
            push_without_type_meta(&Bytes::from(text), &mut pieces);
            let got: Value = serde_json::from_slice(&pieces.concat()).unwrap();
            assert_eq!(got, want, "{text}");
        }
        // Not an object: kept whole.
        let mut pieces = Vec::new();
        push_without_type_meta(&Bytes::from_static(b"[1]"), &mut pieces);
        assert_eq!(pieces.concat(), b"[1]");
    }

    fn setup(n: usize) -> (Store, std::sync::Arc<ResourceType>) {
        let store = Store::new(0);
        for i in 0..n {
            let ns = if i % 2 == 0 { "default" } else { "kube-system" };
            store
                .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:03}"), "namespace": ns, "labels": {"i": (i % 3).to_string()}}}))
                .unwrap();
        }
        let rt = store.registry().by_path("", "v1", "configmaps").unwrap();
        (store, rt)
    }

    fn page(
        store: &Store,
        snaps: &Snapshots,
        rt: &ResourceType,
        sel: &Selection,
        p: &ListParams,
    ) -> Value {
        let body = list(store, snaps, rt, sel, p, Duration::from_secs(60)).unwrap();
        serde_json::from_slice(&body.to_vec()).unwrap()
    }

    /// The parameters of a first page of at most `n` items.
    fn limit(n: usize) -> ListParams {
        ListParams {
            limit: n,
            ..Default::default()
        }
    }

    /// The parameters of the page after the one that returned `token`.
    fn continuing(token: String) -> ListParams {
        ListParams {
            continue_token: Some(token),
            ..Default::default()
        }
    }

    #[test]
    fn pages_cover_snapshot_exactly() {
        let (store, rt) = setup(25);
        let snaps = Snapshots::default();
        let sel = Selection::default();
        let mut p = limit(7);
        let mut names = Vec::new();
        let mut rvs = Vec::new();
        loop {
            let v = page(&store, &snaps, &rt, &sel, &p);
            rvs.push(v["metadata"]["resourceVersion"].clone());
            names.extend(
                v["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| i["metadata"]["name"].clone()),
            );
            // Writes between pages are invisible to this list.
            store
                .create(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "new-", "namespace": "default"}}))
                .unwrap();
            match v["metadata"]["continue"].as_str() {
                Some(c) => {
                    let left = v["metadata"]["remainingItemCount"].as_u64().unwrap() as usize;
                    assert_eq!(left, 25 - names.len());
                    p.continue_token = Some(c.to_string());
                }
                None => {
                    assert!(v["metadata"].get("remainingItemCount").is_none());
                    break;
                }
            }
        }
        assert_eq!(names.len(), 25);
        rvs.dedup();
        assert_eq!(rvs.len(), 1);
    }

    #[test]
    fn namespaced_and_selected() {
        let (store, rt) = setup(12);
        let snaps = Snapshots::default();
        let sel = Selection {
            namespace: Some("kube-system".into()),
            labels: LabelSelector::parse("i=1").unwrap(),
            ..Default::default()
        };
        let v = page(&store, &snaps, &rt, &sel, &limit(1));
        assert_eq!(v["items"].as_array().unwrap().len(), 1);
        assert!(v["metadata"].get("remainingItemCount").is_none());
        let c = v["metadata"]["continue"].as_str().unwrap().to_string();
        let v2 = page(&store, &snaps, &rt, &sel, &continuing(c));
        // i in 0..12, odd i (kube-system) with i%3==1: 1, 7
        assert_eq!(v2["items"].as_array().unwrap().len(), 1);
        assert_eq!(v2["items"][0]["metadata"]["name"], "cm-007");
    }

    #[test]
    fn resource_version_semantics() {
        let (store, rt) = setup(3);
        let snaps = Snapshots::default();
        let sel = Selection::default();
        let latest = store.resource_version();
        let at = |rv: &str, m: Option<&str>| {
            let p = ListParams {
                resource_version: Some(rv.into()),
                resource_version_match: m.map(str::to_string),
                ..Default::default()
            };
            list(&store, &snaps, &rt, &sel, &p, Duration::from_secs(60))
        };
        for rv in ["", "0", "1"] {
            let v: Value = serde_json::from_slice(&at(rv, None).unwrap().to_vec()).unwrap();
            assert_eq!(
                v["metadata"]["resourceVersion"],
                latest.to_string(),
                "rv {rv:?} serves the latest"
            );
        }
        assert_eq!(at(&(latest + 5).to_string(), None).unwrap_err().code(), 504);
        assert_eq!(at(&latest.to_string(), Some("Exact")).map(|_| ()), Ok(()));
        assert_eq!(at("1", Some("Exact")).unwrap_err().code(), 410);
        assert_eq!(at("1", Some("Sometimes")).unwrap_err().code(), 400);
        assert_eq!(at("x", None).unwrap_err().code(), 400);
    }

    #[test]
    fn expired_token_gets_fresh_one() {
        let (store, rt) = setup(5);
        let snaps = Snapshots::default();
        let sel = Selection::default();
        let v = page(&store, &snaps, &rt, &sel, &limit(2));
        let c = v["metadata"]["continue"].as_str().unwrap().to_string();
        let e = list(&store, &snaps, &rt, &sel, &continuing(c), Duration::ZERO).unwrap_err();
        assert_eq!((e.code(), e.reason()), (410, "Expired"));
        let fresh = e.to_status()["metadata"]["continue"]
            .as_str()
            .unwrap()
            .to_string();
        let v2 = page(&store, &snaps, &rt, &sel, &continuing(fresh));
        assert_eq!(v2["items"].as_array().unwrap().len(), 3);
        // A token with a resourceVersion, and a token that is not one.
        let with_version = ListParams {
            resource_version: Some("5".into()),
            ..continuing("x".into())
        };
        for bad in [with_version, continuing("!!".into())] {
            let e = list(&store, &snaps, &rt, &sel, &bad, Duration::ZERO).unwrap_err();
            assert_eq!(e.code(), 400, "{bad:?}");
        }
    }
}
