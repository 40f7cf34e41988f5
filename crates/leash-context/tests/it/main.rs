//! Integration tests of leash-context (one binary).
//!
//! Kubernetes data comes from the in-process sandbox; service calls go to a
//! local axum server on 127.0.0.1:0 spawned in a scope.

mod api_call;
mod common;
mod feed;
mod kubernetes;
mod sandbox;
mod spec;
mod tls;
