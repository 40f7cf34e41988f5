//! One kind's watch: kube-runtime's watcher (list, then watch, re-list on
//! expiry, backoff on errors) feeding a [`KindStore`] and reporting changes.
//!
//! The loop runs in the caller's task and returns when the token is
//! cancelled (house rule 3: the stream is raced against it); it never
//! spawns. Errors are retried by the watcher's backoff and counted.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::cache::{KindStore, Stored};
use crate::object::{Object, RawObject};

/// What changed in a kind's store.
#[derive(Debug, Clone)]
pub enum Change {
    /// An object was added or modified.
    Applied(Seen),
    /// An object was deleted (its last state).
    Deleted(Seen),
    /// A (re-)list completed: the store holds exactly the listed objects;
    /// `removed` are those the list no longer holds.
    Listed {
        /// Objects gone since the previous list.
        removed: Vec<Seen>,
    },
}

/// An object a watch delivered: its parsed metadata, and its JSON as the
/// store keeps it, parsed only when a consumer asks for the whole object
/// (most only need to know which object changed).
#[derive(Debug, Clone)]
pub struct Seen {
    /// `metadata`, parsed.
    pub meta: ObjectMeta,
    stored: Stored,
}

impl Seen {
    fn new(meta: ObjectMeta, stored: Stored) -> Seen {
        Seen { meta, stored }
    }

    /// A stored object, its metadata parsed from its JSON.
    pub(crate) fn from_stored(stored: Stored) -> Seen {
        #[derive(serde::Deserialize)]
        struct Metadata {
            #[serde(default)]
            metadata: ObjectMeta,
        }
        let meta = serde_json::from_slice::<Metadata>(stored.json())
            .map(|m| m.metadata)
            .unwrap_or_default();
        Seen { meta, stored }
    }

    /// The whole object (as the store keeps it), parsed now.
    pub fn value(&self) -> Option<Arc<Value>> {
        self.stored.decode()
    }

    /// `metadata.namespace`, or "".
    pub fn namespace(&self) -> &str {
        self.meta.namespace.as_deref().unwrap_or("")
    }

    /// `metadata.name`, or "".
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or("")
    }

    /// `metadata.uid`, or "".
    pub fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or("")
    }

    /// A label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.meta.labels.as_ref()?.get(key).map(String::as_str)
    }
}

/// Where to watch.
#[derive(Debug, Clone, Default)]
pub struct WatchScope {
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// A field selector (`metadata.name=kyverno`).
    pub fields: Option<String>,
    /// What of each object the store keeps (default: all of it). The
    /// `Applied` changes a (re-)list reports carry what the store keeps, so
    /// a consumer that reads labels from them needs the labels kept.
    pub keep: Option<fn(&Value) -> Value>,
    /// Read only the objects' metadata (`PartialObjectMetadata` lists and
    /// watches): each object is `{apiVersion, kind, metadata}`, of the
    /// watched kind; what a watcher that needs only the identity of the
    /// objects (namespace, name, uid, labels, owners, resourceVersion) asks
    /// for, so that their bodies are neither sent nor parsed.
    pub metadata_only: bool,
    /// End the watch (return) when the resource is not served any more (a
    /// 404: its CRD was deleted), instead of retrying it forever; the
    /// owner decides whether to start a new one.
    pub end_on_not_found: bool,
}

/// Watches `resource` into `store` until `token` is cancelled, calling
/// `on_change` after each change is stored and `on_error` on each watch
/// error (the watcher retries with backoff).
pub async fn watch_into(
    client: kube::Client,
    resource: ApiResource,
    scope: WatchScope,
    store: Arc<KindStore>,
    token: CancellationToken,
    mut on_change: impl FnMut(Change),
    mut on_error: impl FnMut(&watcher::Error),
) {
    let mut config = watcher::Config::default().page_size(500);
    if let Some(f) = &scope.fields {
        config = config.fields(f);
    }
    let keep = scope.keep;
    let stream = if scope.metadata_only {
        let api: Api<PartialObjectMeta<Object>> = match &scope.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let resource = resource.clone();
        watcher::watcher(api, config)
            .map_ok(move |event| map_event(event, |m| metadata_seen(&resource, m, keep)))
            .default_backoff()
            .boxed()
    } else {
        let api: Api<RawObject> = match &scope.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let resource = resource.clone();
        watcher::watcher(api, config)
            .map_ok(move |event| map_event(event, |o| raw_seen(&resource, o, keep)))
            .default_backoff()
            .boxed()
    };
    futures::pin_mut!(stream);
    let mut listing: Option<HashMap<(String, String), Stored>> = None;
    let mut missing = false;
    loop {
        let next = tokio::select! {
            _ = token.cancelled() => return,
            next = stream.next() => next,
        };
        let Some(event) = next else { return };
        match event {
            Err(e) => {
                // One line per failure, naming the operation; a resource
                // that is not served says so once, not at every retry.
                let not_found = is_not_found(&e);
                if not_found && scope.end_on_not_found {
                    tracing::debug!("{}: no longer served", describe_error(&resource, &e));
                } else if not_found && missing {
                    tracing::debug!("{}; retrying", describe_error(&resource, &e));
                } else if not_found {
                    tracing::warn!(
                        "{}: not served (is its CRD installed?); retrying until it is",
                        describe_error(&resource, &e)
                    );
                } else {
                    tracing::warn!("{}; retrying", describe_error(&resource, &e));
                }
                missing = not_found;
                on_error(&e);
                if scope.end_on_not_found && not_found {
                    return;
                }
            }
            Ok(Event::Init) => {
                missing = false;
                listing = Some(HashMap::new());
            }
            Ok(Event::InitApply(o)) => {
                // Kept as text: a list of 10,000 objects is never held
                // parsed, not even their metadata.
                let key = (o.namespace().to_string(), o.name().to_string());
                listing
                    .get_or_insert_with(HashMap::new)
                    .insert(key, o.stored);
            }
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                let removed: Vec<Seen> = store
                    .keys()
                    .into_iter()
                    .filter(|k| !listed.contains_key(k))
                    .filter_map(|(ns, name)| store.get_stored(&ns, &name))
                    .map(Seen::from_stored)
                    .collect();
                let changed: Vec<Stored> = listed
                    .iter()
                    .filter(|((ns, name), v)| {
                        store.get_stored(ns, name).is_none_or(|old| !old.same(v))
                    })
                    .map(|(_, v)| v.clone())
                    .collect();
                store.replace_all(listed);
                store.mark_synced();
                for stored in changed {
                    on_change(Change::Applied(Seen::from_stored(stored)));
                }
                on_change(Change::Listed { removed });
            }
            Ok(Event::Apply(o)) => {
                store.put_stored_if_newer(o.namespace(), o.name(), o.stored.clone());
                on_change(Change::Applied(o));
            }
            Ok(Event::Delete(o)) => {
                store.remove(o.namespace(), o.name());
                on_change(Change::Deleted(o));
            }
        }
    }
}

/// An event with its objects mapped.
fn map_event<A, B>(event: Event<A>, f: impl Fn(A) -> B) -> Event<B> {
    match event {
        Event::Apply(o) => Event::Apply(f(o)),
        Event::Delete(o) => Event::Delete(f(o)),
        Event::InitApply(o) => Event::InitApply(f(o)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// A full object as the store keeps it: its text as sent (with the watched
/// `apiVersion` and `kind` when a list item left them out), or what `keep`
/// takes of it.
fn raw_seen(resource: &ApiResource, o: RawObject, keep: Option<fn(&Value) -> Value>) -> Seen {
    let json = o.typed_json(resource);
    let stored = match keep {
        Some(keep) => match serde_json::from_str::<Value>(&json) {
            Ok(v) => Stored::encode(&keep(&v)),
            Err(_) => Stored::from_json(o.meta.resource_version.as_deref(), &json),
        },
        None => Stored::from_json(o.meta.resource_version.as_deref(), &json),
    };
    Seen::new(o.meta, stored)
}

/// A metadata-only object as `{apiVersion, kind, metadata}` of the watched
/// kind (or what `keep` takes of that).
fn metadata_seen(
    resource: &ApiResource,
    m: PartialObjectMeta<Object>,
    keep: Option<fn(&Value) -> Value>,
) -> Seen {
    let raw = serde_json::json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": m.metadata,
    });
    let stored = match keep {
        Some(keep) => Stored::encode(&keep(&raw)),
        None => Stored::encode(&raw),
    };
    Seen::new(m.metadata, stored)
}

/// Whether a watch error says the resource does not exist (404).
/// Whether a watch error says the resource is not served (404: its CRD is
/// not installed, or was deleted).
pub fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// One line for a failed watch operation, naming it: "listing
/// kyverno.io/v1 clusterpolicies: <why>". The reason is the API server's
/// Status message, or the transport error and its causes, cut at 300
/// characters (a malformed answer's body is never logged whole).
pub fn describe_error(resource: &ApiResource, e: &watcher::Error) -> String {
    let operation = match e {
        watcher::Error::InitialListFailed(_) => "listing",
        watcher::Error::WatchStartFailed(_) => "starting to watch",
        watcher::Error::WatchError(_) | watcher::Error::WatchFailed(_) => "watching",
        watcher::Error::NoResourceVersion => "watching (no resourceVersion in the answer)",
    };
    let why = match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => client_error_reason(k),
        watcher::Error::WatchError(s) => client_error_reason(&kube::Error::Api(s.clone())),
        watcher::Error::NoResourceVersion => String::new(),
    };
    let what = if resource.group.is_empty() {
        format!("{} {}", resource.version, resource.plural)
    } else {
        format!(
            "{}/{} {}",
            resource.group, resource.version, resource.plural
        )
    };
    if why.is_empty() {
        format!("{operation} {what}")
    } else {
        format!("{operation} {what}: {}", cut(&why, 300))
    }
}

/// A kube client error in one line: an API Status as code, reason and
/// message; anything else as its message and its causes.
pub fn client_error_reason(e: &kube::Error) -> String {
    if let kube::Error::Api(s) = e {
        // kube makes a Status of an error answer it cannot parse, with
        // the whole body as its message: never logged.
        if s.reason.starts_with("Failed to parse") {
            return format!(
                "{} (an answer that is not a Status, {} bytes)",
                s.code,
                s.message.len()
            );
        }
        return cut(&format!("{} {}: {}", s.code, s.reason, s.message), 300);
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// `s` cut to at most `max` characters (on a char boundary), "..." marking
/// the cut.
fn cut(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &flat[..i]),
        None => flat,
    }
}
