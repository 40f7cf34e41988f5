//! Integration tests of leash-controller against the in-process sandbox.

mod aggregate;
mod crds;
mod generate;
mod scan;
mod seeds;
mod support;
mod watch;
mod writer;
