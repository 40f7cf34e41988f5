//! The load itself: resolve, load, write, report; Ctrl-C and the deadline.
//!
//! # Invariants
//! 1. Nothing of the load outlives this function: the loader's report future
//!    joins every task before it resolves, and it is always awaited, also
//!    after Ctrl-C (cancellation makes that immediate).
//! 2. Ctrl-C, the deadline and the first failure cancel one token that every
//!    request races against; Ctrl-C exits 130.
//! 3. One writer: objects are written by this future only, page by page, to
//!    a buffered stdout (or one file per kind), so memory stays bounded by
//!    the loader's channel, not by the cluster.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use leash_loader::{Error as LoadError, Load, Loader, Objects, Progress};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::args::{Settings, SummaryFormat};
use super::connect::{Connected, connect};
use super::output::Sink;
use super::summary::{ProgressView, summary, summary_json};
use crate::cli_error::{self, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE};

/// How often the progress bar refreshes while no page arrives.
const PROGRESS_TICK: Duration = Duration::from_millis(100);

/// Run the load described by `settings`.
pub(crate) async fn run(settings: Settings) -> anyhow::Result<ExitCode> {
    // Registered now, so a Ctrl-C at any later point is ours (exit 130).
    let mut interrupt = Interrupt::new()?;
    let started = Instant::now();
    let deadline = settings.timeout.map(|t| started + t);
    let connected = match connect(&settings.connection, interrupt.recv()).await {
        Err(err) if cli_error::is_interrupted(&err) => return Ok(interrupted_exit(None)),
        c => c?,
    };
    let Connected {
        client,
        sandbox,
        server,
    } = connected;
    let result = load(client, &server, settings, deadline, &mut interrupt).await;
    if let Some(sandbox) = sandbox
        && let Err(err) = sandbox.shutdown().await
    {
        tracing::warn!("sandbox shutdown: {err}");
    }
    result
}

async fn load(
    client: kube::Client,
    server: &str,
    settings: Settings,
    deadline: Option<Instant>,
    interrupt: &mut Interrupt,
) -> anyhow::Result<ExitCode> {
    // A bad --output-dir is reported before any request; stdout gets
    // nothing (not even a List header) unless discovery succeeds.
    let dir_sink = match &settings.output_dir {
        Some(dir) => Some(Sink::dir(settings.format, dir).map_err(|e| {
            cli_error::usage(format!("cannot use --output-dir {}: {e}", dir.display()))
        })?),
        None => None,
    };
    let mut options = settings.options.clone();
    let token = CancellationToken::new();

    // Discovery and resolution, raced against Ctrl-C and the deadline.
    let discovery_started = Instant::now();
    let loader = Loader::new(client.clone(), options.clone())
        .map_err(|e| cli_error::usage(e.to_string()))?;
    let resolved = tokio::select! {
        r = loader.resolve(&token) => r,
        () = interrupt.recv() => {
            token.cancel();
            return Ok(interrupted_exit(None));
        }
        () = sleep_until(deadline) => {
            token.cancel();
            eprintln!("leash: error: the --timeout deadline passed during discovery of {server}");
            return Ok(ExitCode::from(EXIT_FAILURE));
        }
    };
    let kinds = resolved.map_err(|err| resolve_error(err, server))?;
    let mut sink = match dir_sink {
        Some(sink) => sink,
        None => Sink::stdout(settings.format).context("writing to stdout")?,
    };
    let discovery = discovery_started.elapsed();
    tracing::info!(kinds = kinds.len(), ?discovery, "resolved; loading");

    options.timeout = deadline.map(|d| {
        d.saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    });
    let loader = Loader::new(client, options).map_err(|e| cli_error::usage(e.to_string()))?;
    let Load {
        objects,
        report,
        progress,
    } = loader.load(kinds.clone(), token.clone());
    let view = ProgressView::new(settings.progress);

    let mut was_interrupted = false;
    let (report, written) = {
        let work =
            async { tokio::join!(report, write_objects(objects, &mut sink, &view, &progress)) };
        tokio::pin!(work);
        tokio::select! {
            out = &mut work => out,
            () = interrupt.recv() => {
                was_interrupted = true;
                token.cancel();
                work.await
            }
        }
    };
    view.finish();
    written.context("writing the output")?;
    sink.finish(&kinds).context("writing the output")?;

    match settings.summary {
        SummaryFormat::Table => eprint!("{}", summary(&report, discovery)),
        SummaryFormat::Json => eprint!("{}", summary_json(&report, discovery)),
    }
    if was_interrupted {
        return Ok(interrupted_exit(Some(&report)));
    }
    if report.is_complete() {
        return Ok(ExitCode::SUCCESS);
    }
    let mut configuration = false;
    let mut stopped = 0;
    for kind in report.failed() {
        let err = kind
            .error
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        match &kind.error {
            Some(e) if e.is_interruption() && !matches!(e, LoadError::DeadlineExceeded(_)) => {
                stopped += 1
            }
            Some(e) => {
                configuration |= e.is_configuration();
                eprintln!("leash: error: {}: {err}", kind.label());
            }
            None => {}
        }
    }
    for err in &report.errors {
        eprintln!("leash: error: {err}");
    }
    if stopped > 0 {
        eprintln!(
            "leash: {stopped} kind(s) not completed: the load was cancelled after the first failure \
             (--continue-on-error loads the rest)"
        );
    }
    Ok(ExitCode::from(if configuration {
        EXIT_USAGE
    } else {
        EXIT_FAILURE
    }))
}

/// Write pages as they arrive; refresh the progress bar.
async fn write_objects(
    mut objects: Objects,
    sink: &mut Sink,
    view: &ProgressView,
    progress: &Arc<Progress>,
) -> std::io::Result<()> {
    let mut tick = tokio::time::interval(PROGRESS_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            page = objects.next_page() => match page {
                Some(page) => {
                    sink.write_page(&page)?;
                    view.update(progress.snapshot());
                }
                None => break,
            },
            _ = tick.tick() => view.update(progress.snapshot()),
        }
    }
    view.update(progress.snapshot());
    Ok(())
}

/// Map a discovery or resolution error to the CLI's error classes.
fn resolve_error(err: LoadError, server: &str) -> anyhow::Error {
    match err {
        LoadError::Transport { .. } => cli_error::usage(format!(
            "cannot reach the API server at {server}: {:#}",
            anyhow::Error::new(err)
        )),
        // A server that accepts connections and never answers is as
        // unusable as one that refuses them.
        LoadError::TimedOut { .. } => cli_error::usage(format!(
            "the API server at {server} did not answer: {err} (--request-timeout)"
        )),
        err if err.is_configuration() => cli_error::usage(err.to_string()),
        err => anyhow::Error::new(err).context(format!("discovery against {server} failed")),
    }
}

fn interrupted_exit(report: Option<&leash_loader::LoadReport>) -> ExitCode {
    match report {
        Some(report) => eprintln!(
            "leash: interrupted; {} objects written, {} of {} kinds complete",
            report.objects(),
            report.kinds.iter().filter(|k| k.is_complete()).count(),
            report.kinds.len()
        ),
        None => eprintln!("leash: interrupted"),
    }
    ExitCode::from(EXIT_INTERRUPTED)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// SIGINT, registered when created (so it is caught from then on).
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("cannot install the SIGINT handler")?;
            Ok(Interrupt { signal })
        }
        #[cfg(not(unix))]
        {
            Ok(Interrupt {})
        }
    }

    /// The next Ctrl-C.
    ///
    /// # Cancel safety
    /// Cancel-safe.
    async fn recv(&mut self) {
        #[cfg(unix)]
        {
            if self.signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}
