//! The health and metrics endpoints (plain HTTP/1, axum routers served by
//! hyper connection by connection).
//!
//! # Invariants
//! 1. Every connection task belongs to the endpoint's [`Scope`] (a child of
//!    the endpoint's token); the endpoint cancels and joins it before it
//!    returns, waiting at most [`DRAIN_TIMEOUT`].
//! 2. At most [`MAX_CONNECTIONS`] connections are served at once: a
//!    semaphore permit lives as long as its connection task; further
//!    clients wait in the listen backlog.
//! 3. A client has [`HEADER_TIMEOUT`] to send a request's headers, and an
//!    idle keep-alive connection is closed after the same time (hyper
//!    applies it to both). No handler reads a request body: hyper drains a
//!    small one or closes the connection after the answer, so a half-sent
//!    body cannot hold one either.
//! 4. Accepting is raced against the token; on cancellation connections
//!    shut down gracefully (an answer being written is finished).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use leash_runtime::{Scope, ScopeHandle};
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Readiness;
use crate::cli_error::usage;

/// How long a client may take to send request headers, and how long an
/// idle keep-alive connection is kept. Probes and scrapes send a few
/// hundred bytes at once.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once per endpoint (probes, a scraper or two).
const MAX_CONNECTIONS: usize = 256;
/// How long answers being written may take once shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) async fn bind(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| usage(format!("{flag} {addr}: cannot listen: {e}")))
}

/// What `/readyz` looks at: the components' readiness, and (first) a
/// namespace leash needs that does not exist.
#[derive(Debug, Clone)]
struct Ready {
    readiness: Arc<Readiness>,
    missing_namespace: watch::Receiver<Option<String>>,
}

pub(crate) async fn serve_health(
    listener: TcpListener,
    readiness: Arc<Readiness>,
    missing_namespace: watch::Receiver<Option<String>>,
    token: CancellationToken,
) -> Result<(), Infallible> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Ready {
            readiness,
            missing_namespace,
        });
    serve(listener, app, "health", token).await;
    Ok(())
}

async fn readyz(State(r): State<Ready>) -> impl IntoResponse {
    let missing = r.missing_namespace.borrow().clone();
    match missing.map_or_else(|| r.readiness.ready(), Err) {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

pub(crate) async fn serve_metrics(
    listener: TcpListener,
    registry: Arc<Registry>,
    token: CancellationToken,
) -> Result<(), Infallible> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry);
    serve(listener, app, "metrics", token).await;
    Ok(())
}

async fn metrics(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            format!("encoding metrics: {e}\n"),
        ),
    }
}

/// Serves `app` on `listener` until `token` is cancelled, then joins every
/// connection (invariants 1 and 4).
async fn serve(listener: TcpListener, app: Router, what: &'static str, token: CancellationToken) {
    let scope = Scope::with_parent_token(&token);
    accept_loop(listener, app, what, scope.handle()).await;
    scope.cancel();
    if tokio::time::timeout(DRAIN_TIMEOUT, scope.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("{what} endpoint: connections still open at the drain deadline; closed");
    }
}

/// Accepts connections until the scope is cancelled (invariant 2).
async fn accept_loop(listener: TcpListener, app: Router, what: &'static str, scope: ScopeHandle) {
    let token = scope.token().clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = token.cancelled() => return,
            r = async {
                let slot = slots.clone().acquire_owned().await.expect("never closed");
                listener.accept().await.map(|(stream, _)| (stream, slot))
            } => r,
        };
        match accepted {
            Ok((stream, slot)) => {
                let (app, token) = (app.clone(), token.clone());
                scope.spawn(format!("{what} connection"), async move {
                    serve_connection(stream, app, what, token).await;
                    drop(slot);
                    Ok::<(), Infallible>(())
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off briefly.
                tracing::warn!("{what} endpoint: accept failed: {e}");
                if token
                    .run_until_cancelled(tokio::time::sleep(Duration::from_millis(50)))
                    .await
                    .is_none()
                {
                    return;
                }
            }
        }
    }
}

/// One connection, bounded as invariant 3 says.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    what: &'static str,
    token: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!("{what} endpoint: connection ended: {e}");
            }
        }
        _ = token.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, conn).await;
        }
    }
}
