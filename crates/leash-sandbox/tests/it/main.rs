//! leash-sandbox integration tests: one binary, one module per concern.

mod common;
mod crud;
mod discovery;
mod list;
