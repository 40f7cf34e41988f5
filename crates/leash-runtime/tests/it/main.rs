//! Integration tests of leash-runtime: one binary, one module per concept.
//!
//! Tests that count live tasks run on a `multi_thread` runtime with 2 workers
//! and compare `num_alive_tasks()` to a baseline with [`support`]'s
//! deadline-polling helper. Timing tests use paused time.

mod leaks;
mod periodic;
mod pool;
mod scope;
mod support;
mod ttl_cache;
