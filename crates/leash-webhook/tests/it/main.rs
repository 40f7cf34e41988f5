//! Integration tests of leash-webhook: one binary, one module per concern.

mod admission;
mod audit;
#[allow(
    dead_code,
    reason = "helpers shared by the test modules; not every module uses each"
)]
mod common;
mod mutation;
mod readiness;
mod registrar;
