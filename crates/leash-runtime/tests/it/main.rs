//! Integration tests of leash-runtime: one binary, one module per concept.

mod pool;
