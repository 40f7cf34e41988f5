//! Integration tests of leash-loader against an in-process leash-sandbox
//! (one test binary; one module per concern).

mod cancel;
mod expired;
mod faults;
mod kinds;
mod scale;
mod support;
mod timeout;
