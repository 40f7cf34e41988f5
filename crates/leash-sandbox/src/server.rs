//! The accept loop and per-connection HTTP/1 serving, every task in the sandbox's scope.
//!
//! # Invariants
//! 1. The accept loop and every connection task are spawned into the sandbox's
//!    [`Scope`](leash_runtime::Scope); shutdown cancels its token and joins them all.
//! 2. Accepting is raced against the token: the loop ends as soon as it is cancelled.
//!    At most [`MAX_CONNECTIONS`] connections are served at once (a semaphore permit
//!    lives as long as its connection task).
//! 3. A connection serves until the client closes it or the token is cancelled; then
//!    it shuts down gracefully (in-flight responses finish; open watches end by
//!    themselves on the same token), bounded by [`DRAIN_TIMEOUT`]. Header reads (and idle
//!    keep-alive) are bounded by [`HEADER_TIMEOUT`], reading a whole request body by
//!    [`BODY_TIMEOUT`] (answered 408; the unread rest closes the connection), so a silent
//!    or stalled client cannot pin a task. Responses are not bounded: a watch streams as
//!    long as it lasts.

use std::convert::Infallible;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use leash_runtime::ScopeHandle;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::api::App;

/// How long a client may take to send request headers. hyper also applies it to idle
/// keep-alive connections, so it is longer than the idle timeouts of client pools
/// (90 s in hyper-util and client-go): the client, not the server, closes an idle
/// connection, and a request never races the server's close.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a client may take to send a whole request body (at most 3 MiB, on the
/// loopback in practice). kube-apiserver bounds a request by its 60 s request timeout;
/// a body alone takes milliseconds, and a client that stops halfway is let go sooner.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// At most this many connections are served at once; further clients wait in the
/// listen backlog until one closes (backpressure instead of unbounded tasks).
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// How long in-flight requests may take to finish after shutdown starts.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Accepts connections until the scope is cancelled.
///
/// # Cancel safety
/// Cancel safe: dropping it stops accepting; connections already spawned stay in the scope.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    app: Arc<App>,
    scope: ScopeHandle,
) -> Result<(), Infallible> {
    let token = scope.token().clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = token.cancelled() => break,
            r = async {
                let slot = slots.clone().acquire_owned().await.expect("never closed");
                listener.accept().await.map(|(stream, _)| (stream, slot))
            } => r,
        };
        match accepted {
            Ok((stream, slot)) => {
                let app = app.clone();
                let token = token.clone();
                scope.spawn("sandbox-connection", async move {
                    serve_connection(stream, app, token).await;
                    drop(slot);
                    Ok::<(), Infallible>(())
                });
            }
            Err(e) => {
                // Out of file descriptors and the like: back off briefly, keep serving.
                tracing::warn!(error = %e, "sandbox: accept failed");
                if token
                    .run_until_cancelled(tokio::time::sleep(Duration::from_millis(50)))
                    .await
                    .is_none()
                {
                    break;
                }
            }
        }
    }
    Ok(())
}

async fn serve_connection(stream: TcpStream, app: Arc<App>, token: CancellationToken) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(app.handle(req.map(Body::new)).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "sandbox: connection ended with an error");
            }
        }
        _ = token.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, conn).await;
        }
    }
}
