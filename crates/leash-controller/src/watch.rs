//! One kind's watch: kube-runtime's watcher (list, then watch, re-list on
//! expiry, backoff on errors) feeding a [`KindStore`] and reporting changes.
//!
//! The loop runs in the caller's task and returns when the token is
//! cancelled (house rule 3: the stream is raced against it); it never
//! spawns. Errors are retried by the watcher's backoff and counted.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::cache::{KindStore, Stored};
use crate::object::Object;

/// What changed in a kind's store.
#[derive(Debug)]
pub enum Change {
    /// An object was added or modified.
    Applied(Arc<Value>),
    /// An object was deleted (its last state).
    Deleted(Arc<Value>),
    /// A (re-)list completed: the store holds exactly the listed objects;
    /// `removed` are those the list no longer holds.
    Listed {
        /// Objects gone since the previous list.
        removed: Vec<Arc<Value>>,
    },
}

/// Where to watch.
#[derive(Debug, Clone, Default)]
pub struct WatchScope {
    /// One namespace, or all.
    pub namespace: Option<String>,
    /// A field selector (`metadata.name=kyverno`).
    pub fields: Option<String>,
    /// What of each object the store keeps (default: all of it).
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
    let stream = if scope.metadata_only {
        let api: Api<PartialObjectMeta<Object>> = match &scope.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let resource = resource.clone();
        watcher::watcher(api, config)
            .map_ok(move |event| metadata_event(&resource, event))
            .default_backoff()
            .boxed()
    } else {
        let api: Api<Object> = match &scope.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        watcher::watcher(api, config).default_backoff().boxed()
    };
    futures::pin_mut!(stream);
    let mut listing: Option<HashMap<(String, String), Stored>> = None;
    loop {
        let next = tokio::select! {
            _ = token.cancelled() => return,
            next = stream.next() => next,
        };
        let Some(event) = next else { return };
        match event {
            Err(e) => {
                on_error(&e);
                if scope.end_on_not_found && is_not_found(&e) {
                    return;
                }
            }
            Ok(Event::Init) => listing = Some(HashMap::new()),
            Ok(Event::InitApply(o)) => {
                // Encoded at once: a list of 10,000 objects is never held parsed.
                let key = (o.namespace().to_string(), o.name().to_string());
                let stored = match scope.keep {
                    Some(keep) => Stored::encode(&keep(&o.raw)),
                    None => Stored::encode(&o.raw),
                };
                listing.get_or_insert_with(HashMap::new).insert(key, stored);
            }
            Ok(Event::InitDone) => {
                let listed = listing.take().unwrap_or_default();
                let removed: Vec<Arc<Value>> = store
                    .keys()
                    .into_iter()
                    .filter(|k| !listed.contains_key(k))
                    .filter_map(|(ns, name)| store.get(&ns, &name))
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
                for v in changed {
                    if let Some(v) = v.decode() {
                        on_change(Change::Applied(v));
                    }
                }
                on_change(Change::Listed { removed });
            }
            Ok(Event::Apply(o)) => {
                match scope.keep {
                    Some(keep) => store.put_if_newer(o.namespace(), o.name(), &keep(&o.raw)),
                    None => store.put_if_newer(o.namespace(), o.name(), &o.raw),
                }
                on_change(Change::Applied(o.raw));
            }
            Ok(Event::Delete(o)) => {
                store.remove(o.namespace(), o.name());
                on_change(Change::Deleted(o.raw));
            }
        }
    }
}

/// A metadata-only event with its object as an [`Object`] of the watched kind.
fn metadata_event(
    resource: &ApiResource,
    event: Event<PartialObjectMeta<Object>>,
) -> Event<Object> {
    let object = |m: PartialObjectMeta<Object>| {
        let raw = serde_json::json!({
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": m.metadata,
        });
        Object {
            meta: m.metadata,
            raw: Arc::new(raw),
        }
    };
    match event {
        Event::Apply(m) => Event::Apply(object(m)),
        Event::Delete(m) => Event::Delete(object(m)),
        Event::InitApply(m) => Event::InitApply(object(m)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// Whether a watch error says the resource does not exist (404).
fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}
