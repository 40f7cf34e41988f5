//! `--serve`: `GET /entries/{name}` (raw data) and
//! `GET /entries/{name}/{projection}` (one projection), as JSON.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use leash_context::{Error, Store};

/// The router over `store`.
pub(crate) fn router(store: Store) -> Router {
    Router::new()
        .route("/entries/{name}", get(entry_data))
        .route("/entries/{name}/{projection}", get(entry_projection))
        .with_state(store)
}

async fn entry_data(State(store): State<Store>, Path(name): Path<String>) -> Response {
    match store.get(&name) {
        Ok(snapshot) => json(StatusCode::OK, &snapshot.data),
        Err(err) => error(&err),
    }
}

async fn entry_projection(
    State(store): State<Store>,
    Path((name, projection)): Path<(String, String)>,
) -> Response {
    match store.projection(&name, &projection) {
        Ok(value) => json(StatusCode::OK, &value),
        Err(err) => error(&err),
    }
}

fn error(err: &Error) -> Response {
    let status = match err {
        Error::UnknownEntry(_) | Error::UnknownProjection { .. } => StatusCode::NOT_FOUND,
        Error::NotReady { .. } => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    json(status, &serde_json::json!({ "error": err.to_string() }))
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}
