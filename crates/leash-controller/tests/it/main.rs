//! Integration tests of leash-controller against the in-process sandbox.

mod generate;
mod seeds;
mod support;
mod watch;
mod writer;
