//! Integration tests of leash-controller against the in-process sandbox.

mod seeds;
mod support;
