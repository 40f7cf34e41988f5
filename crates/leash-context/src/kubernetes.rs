//! `kubernetesResource` entries: a live mirror through kube-runtime's
//! watcher + reflector.
//!
//! # Invariants
//! 1. The runner is one future owned by the entry's scope task. Watch errors
//!    (including the resource disappearing) are only recorded in the status;
//!    the watcher's own backoff retries and relists (410 Gone included).
//!    Nothing on the error path stops or joins anything, so the seed's
//!    self-join cannot happen (house rule 6).
//! 2. A snapshot is published only from a complete view: after the first
//!    `InitDone` (the reflector swaps in a whole relist at `InitDone`), and
//!    after each later `Apply`/`Delete`. Events that are ready at once are
//!    applied together, then published once.
//! 3. Every await (discovery, the watch stream, backoff sleeps) is raced
//!    against the entry's token.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use leash_runtime::{CancellationToken, cancellable};
use serde_json::Value;

use crate::cell::EntryCell;
use crate::entry::KubernetesSource;
use crate::error::{Error, Result};

/// Most watcher events applied before one snapshot is computed.
const MAX_BATCH: usize = 4096;

/// Mirror the resource until `token` is cancelled.
pub(crate) async fn run(
    cell: Arc<EntryCell>,
    source: KubernetesSource,
    client: kube::Client,
    watch_timeout: Duration,
    token: CancellationToken,
) -> Result<()> {
    let mut backoff = Backoff::new();
    let (resource, namespaced) = loop {
        match cancellable(&token, discover(&client, &source)).await {
            None => return Ok(()),
            Some(Ok(found)) => break found,
            Some(Err(err)) => {
                cell.record_error(&err);
                if cancellable(&token, tokio::time::sleep(backoff.next()))
                    .await
                    .is_none()
                {
                    return Ok(());
                }
            }
        }
    };
    let api: Api<DynamicObject> = match (&source.namespace, namespaced) {
        (Some(ns), true) => Api::namespaced_with(client, ns, &resource),
        _ => Api::all_with(client, &resource),
    };
    let writer = Writer::new(resource.clone());
    let reader = writer.as_reader();
    let timeout_secs = u32::try_from(watch_timeout.as_secs())
        .unwrap_or(u32::MAX)
        .max(1);
    let config = watcher::Config::default().timeout(timeout_secs);
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    let mut stream = std::pin::pin!(stream);
    let label = source.to_string();
    let mut synced = false;
    loop {
        let Some(next) = cancellable(&token, stream.next()).await else {
            return Ok(());
        };
        let Some(first) = next else {
            // A watcher stream does not end; if it did, wait for stop.
            token.cancelled().await;
            return Ok(());
        };
        let mut changed = apply(&cell, &label, first, &mut synced);
        let mut batch = 1;
        while batch < MAX_BATCH {
            match stream.next().now_or_never() {
                Some(Some(event)) => changed |= apply(&cell, &label, event, &mut synced),
                _ => break,
            }
            batch += 1;
        }
        if changed && synced {
            cell.publish(list_data(&reader.state(), &resource));
        }
    }
}

/// Record errors; say whether the mirrored list changed.
fn apply(
    cell: &EntryCell,
    label: &str,
    event: Result<watcher::Event<DynamicObject>, watcher::Error>,
    synced: &mut bool,
) -> bool {
    match event {
        Ok(watcher::Event::InitDone) => {
            *synced = true;
            true
        }
        Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => true,
        Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => false,
        Err(source) => {
            cell.record_error(&Error::WatchFailed {
                resource: label.to_owned(),
                source,
            });
            false
        }
    }
}

/// The entry's data: every object, sorted by namespace and name, with
/// `apiVersion` and `kind` filled in (list items may omit them).
fn list_data(objects: &[Arc<DynamicObject>], resource: &ApiResource) -> Value {
    let mut sorted: Vec<&Arc<DynamicObject>> = objects.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let items = sorted
        .into_iter()
        .map(|object| {
            let mut value = serde_json::to_value(&**object).unwrap_or(Value::Null);
            if let Value::Object(map) = &mut value {
                map.entry("apiVersion")
                    .or_insert_with(|| Value::String(resource.api_version.clone()));
                map.entry("kind")
                    .or_insert_with(|| Value::String(resource.kind.clone()));
            }
            value
        })
        .collect();
    Value::Array(items)
}

/// Find the resource in the API server's discovery for its group/version.
async fn discover(client: &kube::Client, source: &KubernetesSource) -> Result<(ApiResource, bool)> {
    let label = format!("{}/{}", source.group_version(), source.resource);
    let fail = |reason: String| Error::DiscoveryFailed {
        resource: label.clone(),
        reason,
    };
    let list = if source.group.is_empty() {
        client.list_core_api_resources(&source.version).await
    } else {
        client
            .list_api_group_resources(&source.group_version())
            .await
    }
    .map_err(|e| fail(crate::error::chain(&e)))?;
    let found = list
        .resources
        .iter()
        .find(|r| r.name == source.resource)
        .ok_or_else(|| fail(format!("the server has no resource {:?}", source.resource)))?;
    Ok((
        ApiResource {
            group: source.group.clone(),
            version: source.version.clone(),
            api_version: source.group_version(),
            kind: found.kind.clone(),
            plural: found.name.clone(),
        },
        found.namespaced,
    ))
}

/// Exponential backoff with jitter for discovery retries: 250 ms doubling to 30 s.
#[derive(Debug)]
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(250),
        }
    }

    fn next(&mut self) -> Duration {
        let current = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(30));
        current + current.mul_f64(0.25 * fastrand::f64())
    }
}
