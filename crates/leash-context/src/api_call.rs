//! `apiCall` entries: polled with [`leash_runtime::Every`] (runs never
//! overlap), `retryLimit` attempts per refresh.
//!
//! # Invariants
//! 1. The runner is one future owned by the entry's scope task; every
//!    request and every wait is raced against the entry's token, so stopping
//!    the entry never waits for a slow server.
//! 2. The runner holds no lock while it awaits: it publishes through
//!    [`EntryCell`], whose lock is taken only for a few assignments.
//! 3. A refresh that fails all its attempts records the last error and keeps
//!    the previous snapshot.

use std::sync::Arc;
use std::time::Duration;

use leash_runtime::{CancellationToken, Every, cancellable};
use serde_json::Value;

use crate::cell::EntryCell;
use crate::entry::{ApiCallSource, ApiTarget};
use crate::error::{Error, Result};
use crate::http::ServiceClient;

/// Longest pause between attempts of one refresh.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// First pause between attempts.
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);

enum Caller {
    Kube(kube::Client, String),
    Service(ServiceClient),
}

/// Poll until `token` is cancelled.
pub(crate) async fn run(
    cell: Arc<EntryCell>,
    source: ApiCallSource,
    client: Option<kube::Client>,
    request_timeout: Duration,
    token: CancellationToken,
) -> Result<()> {
    let caller = match &source.target {
        ApiTarget::UrlPath(path) => match client {
            Some(c) => Caller::Kube(c, path.clone()),
            None => return Err(Error::ClientRequired(cell.name().to_owned())),
        },
        ApiTarget::Service(target) => match ServiceClient::new(target) {
            Ok(c) => Caller::Service(c),
            Err(err) => {
                // Cannot build TLS: record and wait for stop; nothing to retry.
                cell.record_error(&err);
                token.cancelled().await;
                return Ok(());
            }
        },
    };
    let caller = Arc::new(caller);
    let source = Arc::new(source);
    let job = || {
        let cell = cell.clone();
        let caller = caller.clone();
        let source = source.clone();
        let token = token.clone();
        async move { refresh(&cell, &caller, &source, request_timeout, &token).await }
    };
    Every::new(source.refresh_interval, job)
        .immediate(true)
        .run(token.clone())
        .await;
    Ok(())
}

/// One refresh: up to `retry_limit` attempts.
async fn refresh(
    cell: &EntryCell,
    caller: &Caller,
    source: &ApiCallSource,
    request_timeout: Duration,
    token: &CancellationToken,
) {
    let mut last_error = None;
    let mut delay = FIRST_RETRY_DELAY.min(source.refresh_interval);
    for attempt in 0..source.retry_limit {
        if attempt > 0 {
            if cancellable(token, tokio::time::sleep(delay))
                .await
                .is_none()
            {
                return;
            }
            delay = (delay * 2).min(MAX_RETRY_DELAY);
        }
        // Boxed: kube's request future is large (clippy::large_futures).
        let call = tokio::time::timeout(request_timeout, Box::pin(fetch(caller, source)));
        match cancellable(token, call).await {
            None => return,
            Some(Ok(Ok(data))) => {
                cell.publish(data);
                return;
            }
            Some(Ok(Err(err))) => last_error = Some(err),
            Some(Err(_elapsed)) => {
                last_error = Some(Error::TimedOut {
                    url: target_label(source),
                    timeout: request_timeout,
                });
            }
        }
    }
    if let Some(err) = last_error {
        cell.record_error(&err);
    }
}

fn target_label(source: &ApiCallSource) -> String {
    match &source.target {
        ApiTarget::UrlPath(path) => path.clone(),
        ApiTarget::Service(service) => service.url.to_string(),
    }
}

async fn fetch(caller: &Caller, source: &ApiCallSource) -> Result<Value> {
    match caller {
        Caller::Service(client) => client.call(source.method, source.body.as_ref()).await,
        Caller::Kube(client, path) => {
            let method = source.method.as_http();
            let fail = |source: kube::Error| Error::RequestFailed {
                method: method.to_string(),
                path: path.clone(),
                source,
            };
            let mut builder = http::Request::builder()
                .method(method.clone())
                .uri(path.as_str())
                .header(http::header::ACCEPT, "application/json");
            let body = match &source.body {
                Some(value) => {
                    builder = builder.header(http::header::CONTENT_TYPE, "application/json");
                    serde_json::to_vec(value).map_err(|e| Error::InvalidResponse {
                        url: path.clone(),
                        source: e,
                    })?
                }
                None => Vec::new(),
            };
            let request = builder
                .body(body)
                .map_err(|e| fail(kube::Error::HttpError(e)))?;
            let text = client.request_text(request).await.map_err(fail)?;
            serde_json::from_str(&text).map_err(|source| Error::InvalidResponse {
                url: path.clone(),
                source,
            })
        }
    }
}
