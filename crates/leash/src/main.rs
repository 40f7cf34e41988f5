//! `leash`: the command-line program.
//!
//! The binary is split by stage (as ripgrep splits raw flags from validated
//! settings): each subcommand module parses its flags with clap, validates
//! them into settings, runs, and prints. `main` only dispatches, installs
//! logging and maps errors to exit codes.

mod cli_error;
mod connection;
mod context_cmd;
mod create_cmd;
mod credential;
#[cfg(test)]
mod flag_tests;
mod jp_cmd;
mod load_cmd;
mod names;
mod policy_cmd;
mod sandbox_cmd;
mod serve_cmd;
mod trust_root;

use std::io::IsTerminal;
use std::process::ExitCode;

/// See the workspace Cargo.toml for why not the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

/// leash: Kyverno policies on a Rust engine. Test and apply them as
/// Kyverno's CLI does, or run them in a cluster as Kyverno does.
#[derive(Debug, Parser)]
#[command(
    name = "leash",
    version,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `leash --help` (what a Kyverno user looks for first: policies).
const LONG_ABOUT: &str = "\
leash: Kyverno policies on a Rust engine. Test and apply them as Kyverno's CLI does \
(leash test, leash apply), or run them in a cluster as Kyverno does (leash serve: admission \
webhook, background scan and policy reports, generate rules).

It reads ClusterPolicy and Policy (validate, mutate, generate, podSecurity rules), \
ValidatingPolicy, MutatingPolicy, GeneratingPolicy (and their namespaced forms) and \
PolicyException. The tools load, sandbox and context read a whole cluster, run an in-memory \
Kubernetes API server, and keep Kyverno's global context.";

/// Examples of `leash --help`, runnable from the repository's root.
const EXAMPLES: &str = "\
Examples (from the repository's root):
  leash test deploy/examples/tests                      # Kyverno CLI tests (kyverno-test.yaml)
  leash apply deploy/examples/policies -r deploy/examples/tests/resources.yaml
  leash apply deploy/examples/policies --sandbox        # on an in-process API server with demo objects
  leash serve --sandbox --sandbox-kubeconfig /tmp/leash.kubeconfig   # the engine, on a sandbox

`leash COMMAND --help` says more about each.";

/// Declared in the order `leash --help` lists them: the policy commands,
/// then the tools.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run Kyverno CLI tests (kyverno-test.yaml) against their policies and resources.
    Test(policy_cmd::test::Args),
    /// Apply Kyverno policies to resource files or a cluster and report the results (Kyverno's `kyverno apply`).
    Apply(policy_cmd::apply::Args),
    /// Run the in-cluster engine: admission webhook, background scan and policy reports, generate rules.
    Serve(Box<serve_cmd::Args>),
    /// Read every resource of the requested kinds, concurrently and completely.
    Load(load_cmd::Args),
    /// Run an embedded, in-memory Kubernetes API server (with fault injection).
    Sandbox(sandbox_cmd::Args),
    /// Run the global context store (Kyverno GlobalContextEntry) and print or serve it.
    Context(context_cmd::Args),
    /// Evaluate and parse JMESPath with Kyverno's functions, and list them (Kyverno's `kyverno jp`).
    Jp(jp_cmd::Args),
    /// Write Kyverno test, values, user-info and PolicyException files (Kyverno's `kyverno create`).
    Create(create_cmd::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(if matches!(cli.command, Command::Serve(_)) {
        SERVE_LOG_FILTER
    } else {
        DEFAULT_LOG_FILTER
    });
    // Policies are compiled and evaluated on the runtime's threads: the CEL
    // parser recurses once per nesting level (up to its limit of ~95), and
    // a debug build needs more than tokio's default 2 MiB for that (found
    // by Kyverno's chainsaw test of other-mpol/add-default-resources,
    // which crashed `leash serve` with a stack overflow). 16 MiB is
    // reserved, not committed: pages are touched only as deep as used.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(16 * 1024 * 1024)
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
            Command::Jp(args) => jp_cmd::run(args).map(|()| ExitCode::SUCCESS),
            Command::Create(args) => create_cmd::run(args).map(|()| ExitCode::SUCCESS),
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

/// Default log filter. kube's client logs every 5xx and transport error at
/// ERROR level (its HTTP trace layer), a malformed answer with its whole
/// body, and "eof in poll" each time a watch connection ends; leash reports
/// each failure itself, once, naming the operation (and retries it, or
/// counts it in `leash load`'s summary), so kube's client events are off
/// unless `LEASH_LOG` says.
const DEFAULT_LOG_FILTER: &str = "warn,kube_client::client=off";

/// `leash serve` is long-running: its own components say what they do.
const SERVE_LOG_FILTER: &str =
    "warn,kube_client::client=off,leash_controller=info,leash_webhook=info";

/// Logs go to stderr, coloured only when stderr is a terminal and
/// `NO_COLOR` (<https://no-color.org>) is unset or empty: a log redirected
/// to a file (`leash serve 2> leash.log`) holds no escape codes.
fn init_tracing(default: &str) {
    // A LEASH_LOG that does not name kube keeps kube's client quiet too
    // (LEASH_LOG=debug should not dump API answers' bodies).
    let filter = match std::env::var("LEASH_LOG") {
        Ok(v) if !v.trim().is_empty() && !v.contains("kube") => {
            tracing_subscriber::EnvFilter::try_new(format!("{v},kube_client::client=off"))
        }
        Ok(v) if !v.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(v),
        _ => tracing_subscriber::EnvFilter::try_new(default),
    }
    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .init();
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    fn long_help(path: &[&str]) -> String {
        let mut cmd = Cli::command();
        cmd.build();
        let mut cmd = &mut cmd;
        for name in path {
            cmd = cmd.find_subcommand_mut(name).expect("a subcommand");
        }
        cmd.render_long_help().to_string()
    }

    #[test]
    fn the_flags_are_consistent() {
        Cli::command().debug_assert();
    }

    /// Issue 38: a Kyverno user looks for policies first. `leash --help`
    /// opens with them and lists the policy commands before the tools.
    #[test]
    fn help_leads_with_policies() {
        let help = long_help(&[]);
        let first = help.lines().next().unwrap_or_default();
        assert!(first.contains("Kyverno policies"), "{help}");
        for kind in ["ValidatingPolicy", "MutatingPolicy", "GeneratingPolicy"] {
            assert!(help.contains(kind), "{kind}: {help}");
        }
        let at = |name: &str| {
            help.find(&format!("\n  {name} "))
                .unwrap_or_else(|| panic!("{name} is not listed: {help}"))
        };
        let policy = ["test", "apply", "serve"].map(at);
        let tools = ["load", "sandbox", "context"].map(at);
        assert!(
            policy.iter().max() < tools.iter().min(),
            "policy commands first: {help}"
        );
        assert!(help.contains("leash test deploy/examples/tests"), "{help}");
    }

    /// Issue 38: the summaries say what each command does today.
    #[test]
    fn help_texts_name_every_component_and_policy_kind() {
        let help = long_help(&[]);
        let serve = help
            .lines()
            .find(|l| l.trim_start().starts_with("serve "))
            .unwrap_or_default();
        for part in [
            "admission webhook",
            "background scan",
            "policy reports",
            "generate",
        ] {
            assert!(serve.contains(part), "{part}: {serve}");
        }
        let apply = long_help(&["apply"]);
        for kind in ["MutatingPolicy", "GeneratingPolicy", "ValidatingPolicy"] {
            assert!(apply.contains(kind), "{kind}: {apply}");
        }
        let serve = long_help(&["serve"]);
        let leader = serve
            .split("--leader-elect")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .unwrap_or_default();
        assert!(
            leader.contains("reports") && leader.contains("background"),
            "{leader}"
        );
    }
}
