//! leash-sandbox integration tests: one binary, one module per concern.

mod admission;
mod bad_input;
mod common;
mod crud;
mod discovery;
mod faults;
mod kubectl;
mod kubectl_admission;
mod kubectl_create;
mod kubectl_table;
mod list;
mod metadata;
mod request_log;
mod table;
mod watch;
mod watch_cut;
mod webhook_server;
