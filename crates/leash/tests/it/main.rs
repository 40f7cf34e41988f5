//! Integration tests of the `leash` binary (one test binary, one module per
//! subcommand).

mod admission_chain;
mod context;
mod create;
mod deploy;
mod fail_closed;
mod faults_38;
mod generate;
mod images;
mod jp;
mod load;
mod map;
mod mpol;
mod mutate;
mod payloads;
mod policy;
mod sandbox;
mod serve;
mod serve_admission;
mod serve_generate;
mod support;
