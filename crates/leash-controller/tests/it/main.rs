//! Integration tests of leash-controller against the in-process sandbox.

mod aggregate;
mod generate;
mod seeds;
mod support;
mod watch;
mod writer;
