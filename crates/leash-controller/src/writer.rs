//! Writing reports: create-or-replace and conditional deletes, and the
//! breaker that bounds how many ephemeral reports exist at once.
//!
//! # Invariants
//! 1. Nothing is spawned here, and the only lock is the breaker's. Every API call
//!    ([`put_json`], [`get`], [`list_page`], [`delete`]) is raced against
//!    the caller's token and returns [`WriteError::Cancelled`] when it is
//!    cancelled first (house rule 3); dropping the future drops the call.
//! 2. [`Breaker`] is a `tokio::sync::Semaphore` of `max` permits, shared
//!    (behind an `Arc`) by the scan, the admission sink and the aggregate
//!    controller, across leadership terms: its own invariants say how the
//!    count, the excess and the waits work. A waiting `acquire` returns
//!    `false` as soon as its token is cancelled; it never drops a write,
//!    it waits (counted in `breaker_waits`, logged once per wait).

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::core::{ApiResource, Request};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::object::{Object, api_resource};

/// `reports.kyverno.io/v1` `EphemeralReport`.
pub fn ephemeral_resource() -> ApiResource {
    api_resource(
        "reports.kyverno.io",
        "v1",
        "EphemeralReport",
        "ephemeralreports",
    )
}

/// `reports.kyverno.io/v1` `ClusterEphemeralReport`.
pub fn cluster_ephemeral_resource() -> ApiResource {
    api_resource(
        "reports.kyverno.io",
        "v1",
        "ClusterEphemeralReport",
        "clusterephemeralreports",
    )
}

/// `wgpolicyk8s.io/v1alpha2` `PolicyReport`.
pub fn report_resource() -> ApiResource {
    api_resource(
        "wgpolicyk8s.io",
        "v1alpha2",
        "PolicyReport",
        "policyreports",
    )
}

/// `wgpolicyk8s.io/v1alpha2` `ClusterPolicyReport`.
pub fn cluster_report_resource() -> ApiResource {
    api_resource(
        "wgpolicyk8s.io",
        "v1alpha2",
        "ClusterPolicyReport",
        "clusterpolicyreports",
    )
}

/// The resource of a report object by its kind.
pub fn resource_of(kind: &str) -> Option<ApiResource> {
    Some(match kind {
        "EphemeralReport" => ephemeral_resource(),
        "ClusterEphemeralReport" => cluster_ephemeral_resource(),
        "PolicyReport" => report_resource(),
        "ClusterPolicyReport" => cluster_report_resource(),
        _ => return None,
    })
}

/// A write that failed (retried by the caller's queue).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The API server answered with an error or could not be reached.
    #[error("{0}")]
    Api(#[from] kube::Error),
    /// The object to write is not a report.
    #[error("not a report kind: {0}")]
    NotAReport(String),
    /// Cancelled before it finished.
    #[error("cancelled")]
    Cancelled,
}

fn api_for(client: &kube::Client, ar: &ApiResource, namespace: &str) -> Api<Object> {
    if namespace.is_empty() {
        Api::all_with(client.clone(), ar)
    } else {
        Api::namespaced_with(client.clone(), namespace, ar)
    }
}

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// What a write keeps of the report the API server answers with: its
/// identity and version. The answer's body (a report's results, tens of
/// kilobytes) is skipped while it is read, never built into a `Value`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Written {
    /// `apiVersion`.
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    /// `kind`.
    #[serde(default)]
    pub kind: String,
    /// `metadata`.
    #[serde(default)]
    pub metadata: ObjectMeta,
}

impl Written {
    /// `{apiVersion, kind, metadata}` as JSON.
    pub fn identity(&self) -> Value {
        serde_json::json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": self.metadata,
        })
    }
}

/// The requests of a report kind in a namespace ("" for cluster-scoped).
fn request_for(ar: &ApiResource, namespace: &str) -> Request {
    let ns = (!namespace.is_empty()).then_some(namespace);
    Request::new(<Object as kube::Resource>::url_path(ar, ns))
}

/// Creates a report, or replaces it if it exists (at the resourceVersion
/// `doc` carries, or else at the current one). Returns the stored report's
/// identity ([`Written`]).
pub async fn put(
    client: &kube::Client,
    doc: Value,
    token: &CancellationToken,
) -> Result<Written, WriteError> {
    put_keeping_body(client, doc, token).await.map(|(w, _)| w)
}

/// [`put`], also returning the JSON body sent (what the server stored,
/// before it set the metadata that [`Written`] holds).
pub async fn put_keeping_body(
    client: &kube::Client,
    doc: Value,
    token: &CancellationToken,
) -> Result<(Written, Arc<[u8]>), WriteError> {
    let kind = doc["kind"].as_str().unwrap_or("").to_string();
    let ns = doc["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
    let has_rv = doc["metadata"].get("resourceVersion").is_some();
    let body = serde_json::to_vec(&doc).map_err(|e| WriteError::NotAReport(e.to_string()))?;
    drop(doc);
    let target = Target {
        kind: &kind,
        namespace: &ns,
        name: &name,
        has_resource_version: has_rv,
    };
    let text = put_json(client, target, body.clone(), token).await?;
    let written = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    Ok((written, body.into()))
}

/// What [`put_json`] writes: the report's kind, namespace (empty for the
/// cluster-scoped kinds) and name, and whether its body names a
/// resourceVersion (then it is replaced, never created).
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// `EphemeralReport`, `ClusterEphemeralReport`, `PolicyReport` or `ClusterPolicyReport`.
    pub kind: &'a str,
    /// `metadata.namespace` (empty for the cluster-scoped kinds).
    pub namespace: &'a str,
    /// `metadata.name`.
    pub name: &'a str,
    /// The body names a resourceVersion.
    pub has_resource_version: bool,
}

/// How many times a replacement reads the current resourceVersion and
/// tries again after a conflict before it gives up (the caller's queue
/// retries later).
const REPLACE_ATTEMPTS: usize = 5;

/// [`put`] of a report already serialized (`body`); the answer is the
/// server's JSON text, not parsed (the admission webhook writes one report
/// per request and needs only to know it was written).
pub async fn put_json(
    client: &kube::Client,
    target: Target<'_>,
    body: Vec<u8>,
    token: &CancellationToken,
) -> Result<String, WriteError> {
    let ar =
        resource_of(target.kind).ok_or_else(|| WriteError::NotAReport(target.kind.to_string()))?;
    let request = request_for(&ar, target.namespace);
    let pp = PostParams::default();
    let write = async {
        if target.has_resource_version {
            let req = request
                .replace(target.name, &pp, body)
                .map_err(kube::Error::BuildRequest)?;
            return client.request_text(req).await;
        }
        // Create, or replace what exists. kube-apiserver refuses an update
        // of a custom resource without a resourceVersion ("must be
        // specified for an update"), so the replacement names the current
        // one, read just before; another writer's update in between is a
        // 409 Conflict, and the read and replace are tried again.
        for _ in 0..REPLACE_ATTEMPTS {
            let req = request
                .create(&pp, body.clone())
                .map_err(kube::Error::BuildRequest)?;
            match client.request_text(req).await {
                Err(e) if code(&e) == Some(409) => {}
                other => return other,
            }
            let req = request
                .get(target.name, &Default::default())
                .map_err(kube::Error::BuildRequest)?;
            let current = match client.request_text(req).await {
                Err(e) if code(&e) == Some(404) => continue, // deleted since: create
                other => other?,
            };
            let rv = serde_json::from_str::<Value>(&current)
                .map_err(kube::Error::SerdeError)?["metadata"]["resourceVersion"]
                .clone();
            let mut doc: Value = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
            doc["metadata"]["resourceVersion"] = rv;
            let req = request
                .replace(
                    target.name,
                    &pp,
                    serde_json::to_vec(&doc).map_err(kube::Error::SerdeError)?,
                )
                .map_err(kube::Error::BuildRequest)?;
            match client.request_text(req).await {
                Err(e) if matches!(code(&e), Some(409 | 404)) => {}
                other => return other,
            }
        }
        Err(kube::Error::Api(
            kube::core::Status::failure(
                &format!(
                    "{} {}/{}: changed by another writer {REPLACE_ATTEMPTS} times while being replaced",
                    target.kind, target.namespace, target.name
                ),
                "Conflict",
            )
            .with_code(409)
            .boxed(),
        ))
    };
    tokio::select! {
        _ = token.cancelled() => Err(WriteError::Cancelled),
        r = write => r.map_err(WriteError::from),
    }
}

/// Reads a report (`None` if it does not exist).
pub async fn get(
    client: &kube::Client,
    kind: &str,
    namespace: &str,
    name: &str,
    token: &CancellationToken,
) -> Result<Option<Value>, WriteError> {
    let ar = resource_of(kind).ok_or_else(|| WriteError::NotAReport(kind.to_string()))?;
    let api = api_for(client, &ar, namespace);
    let r = tokio::select! {
        _ = token.cancelled() => return Err(WriteError::Cancelled),
        r = api.get_opt(name) => r,
    };
    Ok(r?.map(|o| Arc::unwrap_or_clone(o.raw)))
}

/// One page (at most 500) of the reports of a kind, from `continue_token`
/// (None: the first page), and the token of the next page (None: this was
/// the last). Readers work page by page: 10,000 policy reports parsed at
/// once took 250 MB.
pub async fn list_page(
    client: &kube::Client,
    kind: &str,
    continue_token: Option<&str>,
    token: &CancellationToken,
) -> Result<(Vec<Value>, Option<String>), WriteError> {
    let ar = resource_of(kind).ok_or_else(|| WriteError::NotAReport(kind.to_string()))?;
    let api: Api<Object> = Api::all_with(client.clone(), &ar);
    let mut lp = kube::api::ListParams::default().limit(500);
    if let Some(c) = continue_token {
        lp = lp.continue_token(c);
    }
    let page = tokio::select! {
        _ = token.cancelled() => return Err(WriteError::Cancelled),
        r = api.list(&lp) => r?,
    };
    let next = page.metadata.continue_.filter(|c| !c.is_empty());
    Ok((
        page.items
            .into_iter()
            .map(|o| Arc::unwrap_or_clone(o.raw))
            .collect(),
        next,
    ))
}

/// Deletes a report; with `resource_version`, only if it still is that
/// version (`Ok(false)` when it changed). A report already gone is fine.
pub async fn delete(
    client: &kube::Client,
    kind: &str,
    namespace: &str,
    name: &str,
    resource_version: Option<String>,
    token: &CancellationToken,
) -> Result<bool, WriteError> {
    let ar = resource_of(kind).ok_or_else(|| WriteError::NotAReport(kind.to_string()))?;
    let dp = DeleteParams {
        preconditions: resource_version.map(|rv| Preconditions {
            resource_version: Some(rv),
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let req = request_for(&ar, namespace)
        .delete(name, &dp)
        .map_err(kube::Error::BuildRequest)?;
    // The answer (the deleted report, or a Status) is not read: only
    // whether the delete succeeded counts.
    let r = tokio::select! {
        _ = token.cancelled() => return Err(WriteError::Cancelled),
        r = client.request_text(req) => r,
    };
    match r {
        Ok(_) => Ok(true),
        Err(e) if code(&e) == Some(404) => Ok(true),
        Err(e) if code(&e) == Some(409) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// At most `max` ephemeral reports at once, as the permits of a
/// `tokio::sync::Semaphore`: a writer takes one ([`Breaker::acquire`];
/// while there is none it waits its turn, the wait counted and logged,
/// nothing dropped) and keeps it (`forget`) while its report exists; the
/// aggregate controller gives them back when it deletes reports
/// ([`Breaker::release`]) or sets the count to what it listed
/// ([`Breaker::set_used`]).
///
/// # Invariants
/// 1. `used` is `max` less the semaphore's available permits, plus the
///    `excess`: reports the aggregate controller listed beyond `max`
///    ([`Breaker::set_used`] past the room), which releases pay off before
///    any permit is given back, so acquirers wait until the reports that
///    exist are below `max`. Permits are added back only for reports
///    counted as used: the available ones never exceed `max`.
/// 2. [`Breaker::release`] and [`Breaker::set_used`] read `used` and add or
///    forget permits under the `std::sync::Mutex` holding the excess
///    (never held across an await), so two adjustments do not both act on
///    one reading; [`Breaker::acquire`] only takes permits, which can only
///    make a reading smaller than `used` (a release then gives back no
///    more than it read).
/// 3. A waiting `acquire` is cancelled by its token or by dropping it
///    (the semaphore's acquire is cancel-safe: no permit is taken), and
///    waiters are served in turn (the semaphore is fair).
#[derive(Debug)]
pub struct Breaker {
    max: usize,
    permits: tokio::sync::Semaphore,
    /// Reports counted beyond `max` (invariant 1).
    excess: std::sync::Mutex<usize>,
    metrics: Arc<Metrics>,
}

impl Breaker {
    /// A breaker with room for `max` reports (at most the semaphore's
    /// `MAX_PERMITS`).
    pub fn new(max: usize, metrics: Arc<Metrics>) -> Breaker {
        let max = max.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        Breaker {
            max,
            permits: tokio::sync::Semaphore::new(max),
            excess: std::sync::Mutex::new(0),
            metrics,
        }
    }

    /// Takes room for one report, waiting while there is none. `false` if
    /// cancelled while waiting.
    pub async fn acquire(&self, token: &CancellationToken) -> bool {
        let permit = match self.permits.try_acquire() {
            Ok(permit) => permit,
            Err(_) => {
                self.metrics.breaker_waits.inc();
                tracing::info!(
                    "{} ephemeral reports exist (--max-ephemeral-reports): waiting for the aggregate controller",
                    self.max
                );
                tokio::select! {
                    _ = token.cancelled() => return false,
                    // Never closed: the breaker holds the semaphore.
                    p = self.permits.acquire() => match p {
                        Ok(p) => p,
                        Err(_) => return false,
                    },
                }
            }
        };
        permit.forget();
        self.metrics.ephemeral_reports.set(self.used() as i64);
        true
    }

    /// Gives back room for `n` reports (no more than are counted): the
    /// excess first.
    pub fn release(&self, n: usize) {
        let mut excess = self.excess.lock().unwrap_or_else(|e| e.into_inner());
        let paid = n.min(*excess);
        *excess -= paid;
        let held = self.max - self.permits.available_permits();
        self.permits.add_permits((n - paid).min(held));
        self.metrics
            .ephemeral_reports
            .set(self.counted(*excess) as i64);
    }

    /// Sets the count to what exists (the aggregate controller's list),
    /// beyond the room if more exist.
    pub fn set_used(&self, n: usize) {
        let mut excess = self.excess.lock().unwrap_or_else(|e| e.into_inner());
        let used = self.counted(*excess);
        if n > used {
            let taken = self.permits.forget_permits(n - used);
            *excess += n - used - taken;
        } else {
            let paid = (used - n).min(*excess);
            *excess -= paid;
            self.permits.add_permits(used - n - paid);
        }
        self.metrics
            .ephemeral_reports
            .set(self.counted(*excess) as i64);
    }

    /// Reports counted now.
    pub fn used(&self) -> usize {
        let excess = *self.excess.lock().unwrap_or_else(|e| e.into_inner());
        self.counted(excess)
    }

    fn counted(&self, excess: usize) -> usize {
        self.max - self.permits.available_permits() + excess
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn breaker_waits_for_room_and_counts_the_wait() {
        let metrics = Arc::new(Metrics::unregistered());
        let b = Arc::new(Breaker::new(2, metrics.clone()));
        let t = CancellationToken::new();
        assert!(b.acquire(&t).await);
        assert!(b.acquire(&t).await);
        let b2 = b.clone();
        let t2 = t.clone();
        let waiter = async move { b2.acquire(&t2).await };
        let releaser = async {
            tokio::task::yield_now().await;
            b.release(1);
        };
        let (got, ()) = tokio::join!(waiter, releaser);
        assert!(got);
        assert_eq!(b.used(), 2);
        assert_eq!(metrics.breaker_waits.get(), 1);
        t.cancel();
        assert!(!b.acquire(&t).await, "cancelled while full");
    }

    /// The count follows the aggregate controller's list either way, and a
    /// release never gives back more room than is used.
    #[tokio::test]
    async fn breaker_follows_the_listed_count() {
        let metrics = Arc::new(Metrics::unregistered());
        let b = Breaker::new(3, metrics.clone());
        let t = CancellationToken::new();
        b.set_used(2);
        assert_eq!(b.used(), 2);
        assert!(b.acquire(&t).await);
        assert_eq!((b.used(), metrics.ephemeral_reports.get()), (3, 3));
        b.set_used(1);
        assert_eq!(b.used(), 1);
        b.release(5);
        assert_eq!(b.used(), 0);
        for _ in 0..3 {
            assert!(b.acquire(&t).await);
        }
        t.cancel();
        assert!(!b.acquire(&t).await, "full: room for 3, no more");
        // More listed than the room: releases pay the excess off first.
        b.set_used(5);
        assert_eq!(b.used(), 5);
        b.release(1);
        assert_eq!(b.used(), 4);
        let t = CancellationToken::new();
        t.cancel();
        assert!(!b.acquire(&t).await, "4 exist, room for 3");
        b.release(2);
        assert_eq!(b.used(), 2);
        assert!(b.acquire(&CancellationToken::new()).await);
        assert_eq!(b.used(), 3);
    }
}
