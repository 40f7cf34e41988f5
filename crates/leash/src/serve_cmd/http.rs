//! The health and metrics endpoints (plain HTTP, axum).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Readiness;
use crate::cli_error::usage;

pub(crate) async fn bind(addr: SocketAddr, flag: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| usage(format!("{flag} {addr}: cannot listen: {e}")))
}

pub(crate) async fn serve_health(
    listener: TcpListener,
    readiness: Arc<Readiness>,
    token: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(readiness);
    axum::serve(listener, app)
        .with_graceful_shutdown(token.cancelled_owned())
        .await
}

async fn readyz(State(r): State<Arc<Readiness>>) -> impl IntoResponse {
    match r.ready() {
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
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry);
    axum::serve(listener, app)
        .with_graceful_shutdown(token.cancelled_owned())
        .await
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
