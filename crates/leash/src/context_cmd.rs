//! `leash context`: run the global context store (Kyverno
//! `GlobalContextEntry`) from YAML files and/or the cluster, then print it
//! once (`--once`), or print a JSON line per update until Ctrl-C (optionally
//! serving `/entries/...` over HTTP).
//!
//! Stages: parse flags ([`Args`]), validate them and the entries into
//! [`Settings`], run the store, print.
//!
//! # Invariants
//! 1. Every task (HTTP server, CRD feeder) is spawned into one [`Scope`],
//!    which is shut down (cancelled and joined) before the store; the store
//!    is always shut down before `run` returns.
//! 2. Stdout is written by this task only, one whole JSON value per line.

mod output;
mod serve;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use leash_context::{ContextEntry, CrdFeeder, Store, StoreConfig};
use leash_runtime::Scope;

use crate::cli_error::{EXIT_FAILURE, EXIT_INTERRUPTED, usage};
use crate::connection::{Check, ConnectionArgs, ctrl_c};

/// Flags of `leash context`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// GlobalContextEntry files (YAML, multi-document); repeatable.
    #[arg(short = 'f', long = "filename", value_name = "ENTRIES.yaml", num_args = 1..)]
    files: Vec<PathBuf>,
    /// Also take entries from GlobalContextEntry objects in the cluster
    /// (kyverno.io/v2beta1), following additions, changes and deletions.
    #[arg(long)]
    watch_crds: bool,
    /// Wait until every entry is ready, print one JSON object
    /// {"<entry>": {"<projection>": value}} and exit.
    #[arg(long, conflicts_with = "serve")]
    once: bool,
    /// Serve GET /entries/{name} and /entries/{name}/{projection} on this address.
    #[arg(long, value_name = "127.0.0.1:PORT")]
    serve: Option<SocketAddr>,
    /// How long an entry may take to get its first data before it is failed.
    #[arg(long, value_name = "D", default_value = "30s", value_parser = humantime::parse_duration)]
    ready_timeout: Duration,
    /// Most entries at once (0 = unbounded).
    #[arg(long, value_name = "N", default_value_t = 0)]
    max_entries: usize,
    #[command(flatten)]
    connection: ConnectionArgs,
}

/// Validated settings.
struct Settings {
    entries: Vec<ContextEntry>,
    client: Option<kube::Client>,
    store: StoreConfig,
    watch_crds: bool,
    once: bool,
    serve: Option<SocketAddr>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("entries", &self.entries.len())
            .field("has_client", &self.client.is_some())
            .field("store", &self.store)
            .field("watch_crds", &self.watch_crds)
            .field("once", &self.once)
            .field("serve", &self.serve)
            .finish()
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = validate(args).await?;
    let store = Store::new(settings.store.clone(), settings.client.clone());
    let result = if settings.once {
        run_once(&settings, &store).await
    } else {
        run_until_interrupted(&settings, &store).await
    };
    let stopped = store.shutdown().await;
    let code = result?;
    stopped.context("stopping the store")?;
    Ok(code)
}

async fn validate(args: Args) -> anyhow::Result<Settings> {
    if args.files.is_empty() && !args.watch_crds {
        return Err(usage("give entries with -f FILE and/or --watch-crds"));
    }
    if args.ready_timeout.is_zero() {
        return Err(usage("--ready-timeout must be greater than zero"));
    }
    let entries = leash_context::load_entry_files(&args.files).map_err(|e| usage(e.to_string()))?;
    if args.max_entries != 0 && entries.len() > args.max_entries {
        return Err(usage(format!(
            "{} entries given but --max-entries is {}",
            entries.len(),
            args.max_entries
        )));
    }
    let needs_client = args.watch_crds || entries.iter().any(ContextEntry::needs_kube_client);
    // Validated whether or not it is used: a bad --server is always named.
    let target = args.connection.target()?;
    let client = if needs_client {
        Some(target.connect(Check::Version, ctrl_c()).await?.client)
    } else {
        None
    };
    Ok(Settings {
        entries,
        client,
        store: StoreConfig {
            max_entries: args.max_entries,
            ready_timeout: args.ready_timeout,
            ..StoreConfig::default()
        },
        watch_crds: args.watch_crds,
        once: args.once,
        serve: args.serve,
    })
}

fn add_all(store: &Store, entries: Vec<ContextEntry>) -> anyhow::Result<()> {
    for entry in entries {
        store.add(entry).map_err(|e| usage(e.to_string()))?;
    }
    Ok(())
}

/// `--once`: every entry ready, one JSON object, exit 0; else exit 1 naming
/// each failed entry.
async fn run_once(settings: &Settings, store: &Store) -> anyhow::Result<ExitCode> {
    add_all(store, settings.entries.clone())?;
    let mut failed: Vec<String> = Vec::new();
    if settings.watch_crds
        && let Some(client) = &settings.client
    {
        let listed = tokio::select! {
            listed = leash_context::list_cluster_entries(client) => listed,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::from(EXIT_INTERRUPTED)),
        };
        let (entries, invalid) = listed.context("listing GlobalContextEntry objects")?;
        for err in invalid {
            failed.push(err.to_string());
        }
        for entry in entries {
            let name = entry.name().to_owned();
            match store.add(entry) {
                Ok(_) => {}
                // As with the continuous feeder: the file's entry wins.
                Err(leash_context::Error::AlreadyExists(_)) => eprintln!(
                    "leash: warning: GlobalContextEntry {name:?} in the cluster has the name of an entry from a file; using the file's"
                ),
                Err(err) => failed.push(format!("entry {name:?} from the cluster: {err}")),
            }
        }
    }
    let waits = tokio::select! {
        results = store.wait_all_ready() => results,
        _ = tokio::signal::ctrl_c() => return Ok(ExitCode::from(EXIT_INTERRUPTED)),
    };
    let mut ready = BTreeMap::new();
    for (name, result) in waits {
        match result {
            Ok(snapshot) => {
                ready.insert(name, snapshot);
            }
            Err(err) => failed.push(format!("entry {name:?} failed: {err}")),
        }
    }
    let object = output::once_object(&ready);
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer(&mut stdout, &object)?;
    writeln!(stdout)?;
    stdout.flush()?;
    drop(stdout);
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for line in &failed {
            eprintln!("leash: {line}");
        }
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}

/// Until Ctrl-C: a JSON line per update, optional server and CRD feeder.
async fn run_until_interrupted(settings: &Settings, store: &Store) -> anyhow::Result<ExitCode> {
    let scope = Scope::new();
    let result = serve_and_print(settings, store, &scope).await;
    let joined = scope.shutdown().await;
    let code = result?;
    joined.context("stopping the server and feeder")?;
    Ok(code)
}

async fn serve_and_print(
    settings: &Settings,
    store: &Store,
    scope: &Scope,
) -> anyhow::Result<ExitCode> {
    let mut changes = store.changes();
    add_all(store, settings.entries.clone())?;
    if let Some(addr) = settings.serve {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| usage(format!("cannot listen on {addr}: {e}")))?;
        let bound = listener.local_addr()?;
        eprintln!("leash: serving on http://{bound}");
        let router = serve::router(store.clone());
        let token = scope.token().clone();
        scope.spawn("context http server", async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(token.cancelled_owned())
                .await
        });
    }
    if settings.watch_crds
        && let Some(client) = &settings.client
    {
        let feeder = CrdFeeder::new(store.clone(), client.clone());
        let token = scope.token().clone();
        scope.spawn("GlobalContextEntry feeder", feeder.run(token));
    }
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let batch = tokio::select! {
            batch = changes.next() => batch,
            _ = &mut interrupted => return Ok(ExitCode::from(EXIT_INTERRUPTED)),
            () = scope.token().cancelled() => return Ok(ExitCode::SUCCESS),
        };
        let Some(batch) = batch else {
            return Ok(ExitCode::SUCCESS);
        };
        let mut stdout = std::io::stdout().lock();
        for change in &batch {
            serde_json::to_writer(&mut stdout, &output::change_line(change))?;
            writeln!(stdout)?;
        }
        stdout.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// README, `leash context`: `--ready-timeout` defaults to 30 s
    /// (Kyverno's cache-sync timeout, the store's own default) and takes
    /// durations.
    #[test]
    fn ready_timeout_defaults_to_kyvernos_30s() {
        let cli = Cli::try_parse_from(["context", "-f", "entries.yaml"]).unwrap();
        assert_eq!(cli.args.ready_timeout, Duration::from_secs(30));
        assert_eq!(cli.args.ready_timeout, leash_context::DEFAULT_READY_TIMEOUT);
        let cli =
            Cli::try_parse_from(["context", "-f", "e.yaml", "--ready-timeout", "2m"]).unwrap();
        assert_eq!(cli.args.ready_timeout, Duration::from_secs(120));
    }
}
