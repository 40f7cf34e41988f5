//! `leash`: the command-line program.
//!
//! The binary is split by stage (as ripgrep splits raw flags from validated
//! settings): each subcommand module parses its flags with clap, validates
//! them into settings, runs, and prints. `main` only dispatches, installs
//! logging and maps errors to exit codes.

mod cli_error;
mod connection;
mod context_cmd;
mod credential;
#[cfg(test)]
mod flag_tests;
mod load_cmd;
mod policy_cmd;
mod sandbox_cmd;
mod serve_cmd;

use std::process::ExitCode;

/// See the workspace Cargo.toml for why not the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// leash: a Kubernetes policy-engine core that cannot leak, drop or hang.
#[derive(Debug, Parser)]
#[command(name = "leash", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an embedded, in-memory Kubernetes API server (with fault injection).
    Sandbox(sandbox_cmd::Args),
    /// Read every resource of the requested kinds, concurrently and completely.
    Load(load_cmd::Args),
    /// Run the global context store (Kyverno GlobalContextEntry) and print or serve it.
    Context(context_cmd::Args),
    /// Apply Kyverno policies to resources and report the results (Kyverno's `kyverno apply`).
    Apply(policy_cmd::apply::Args),
    /// Run Kyverno CLI tests (kyverno-test.yaml) against their policies and resources.
    Test(policy_cmd::test::Args),
    /// Run the in-cluster engine: background scan and policy reports (Kyverno's reports controller).
    Serve(Box<serve_cmd::Args>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(if matches!(cli.command, Command::Serve(_)) {
        SERVE_LOG_FILTER
    } else {
        DEFAULT_LOG_FILTER
    });
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("leash: error: cannot start the async runtime: {err}");
            return ExitCode::from(cli_error::EXIT_FAILURE);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Sandbox(args) => sandbox_cmd::run(args).await,
            Command::Load(args) => load_cmd::run(args).await,
            Command::Context(args) => context_cmd::run(args).await,
            Command::Test(args) => policy_cmd::test::run(args),
            Command::Apply(args) => policy_cmd::apply::run(args).await,
            Command::Serve(args) => serve_cmd::run(*args).await,
        }
    });
    // Everything the subcommands spawned is owned by scopes they joined; the
    // timeout only bounds what libraries (hyper's connection pool) leave.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(code) => code,
        Err(err) => cli_error::report(&err),
    }
}

/// Default log filter. kube's HTTP trace layer logs every 5xx and transport
/// error at ERROR level, even those leash retries and reports itself (`leash
/// load`'s summary counts them), so its events are off unless `LEASH_LOG` says.
const DEFAULT_LOG_FILTER: &str = "warn,kube_client::client::builder=off";

/// `leash serve` is long-running: its own components say what they do.
const SERVE_LOG_FILTER: &str =
    "warn,kube_client::client::builder=off,leash_controller=info,leash_webhook=info";

fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEASH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
