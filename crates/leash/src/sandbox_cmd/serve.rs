//! Start the sandbox, announce it, and serve until SIGINT or SIGTERM.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use leash_sandbox::{Sandbox, SandboxConfig, generate, manifests};
use serde_json::Value;

use super::flags::Settings;
use crate::cli_error;

/// Run the sandbox described by `settings` until a signal stops it.
pub(crate) async fn serve(settings: Settings) -> anyhow::Result<ExitCode> {
    // Checked (and counted) here, generated one at a time by the sandbox.
    let generated = settings
        .generate
        .as_ref()
        .map(generate::generate_iter)
        .transpose()
        .map_err(|err| cli_error::usage(format!("{err}")))?;
    // Loaded manifests come after the generated objects: they may use generated namespaces.
    let objects = manifests::load_manifests(&settings.data)
        .map_err(|err| cli_error::usage(format!("--data: {}", error_chain(&err))))?;
    let mut kinds = count_kinds(&objects);
    for (kind, count) in generated.iter().flat_map(generate::Generated::kind_counts) {
        *kinds.entry(kind.clone()).or_default() += count;
    }
    let loaded = objects.len();
    let generated = generated.map_or(0, |g| g.len());
    if !settings.listen.ip().is_loopback() && settings.token.is_none() {
        tracing::warn!(
            "listening on {} without --token: anyone who can reach it can read and change every object",
            settings.listen
        );
    }

    let config = SandboxConfig {
        listen: settings.listen,
        token: settings.token.clone(),
        generate: settings.generate.clone(),
        objects,
        faults: settings.faults.clone(),
        seed: settings.seed,
        webhook_services: settings.webhook_services.clone(),
    };
    let sandbox = Sandbox::start(config).await.map_err(|err| {
        let message = error_chain(&err);
        match err {
            // A taken port or a rejected manifest is the user's to fix.
            leash_sandbox::Error::BindFailed { .. } => cli_error::usage(message),
            leash_sandbox::Error::InitialObjectRejected { index, .. } if index >= generated => {
                cli_error::usage(format!(
                    "{message} (object {} of those loaded by --data)",
                    index - generated + 1
                ))
            }
            leash_sandbox::Error::InitialObjectRejected { .. } => cli_error::usage(message),
            _ => anyhow::anyhow!(message).context("starting the sandbox"),
        }
    })?;

    if let Some(path) = &settings.kubeconfig {
        // Written before the URL is printed, so a script that waits for the
        // URL can use the kubeconfig at once.
        if let Err(err) = write_kubeconfig(path, &sandbox.kubeconfig_yaml()) {
            shutdown(sandbox).await?;
            return Err(err);
        }
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(err) => {
            shutdown(sandbox).await?;
            return Err(anyhow::Error::new(err).context("installing SIGINT/SIGTERM handlers"));
        }
    };
    let url = sandbox.url();
    let announced = {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{url}").and_then(|()| stdout.flush())
    };
    if let Err(err) = announced {
        // Nobody can learn where we listen; a closed pipe is not an error.
        shutdown(sandbox).await?;
        return Err(anyhow::Error::new(err).context("printing the URL on stdout"));
    }
    eprintln!(
        "{}",
        summary(
            &settings,
            &url,
            sandbox.store().object_count(),
            generated,
            loaded,
            &kinds
        )
    );

    let signal = signals.recv().await;
    eprintln!("leash sandbox: {signal}, shutting down");
    tokio::select! {
        result = shutdown(sandbox) => result.map(|()| ExitCode::SUCCESS),
        _ = signals.recv() => {
            eprintln!("leash sandbox: second signal, exiting without waiting for shutdown");
            Ok(ExitCode::from(cli_error::EXIT_INTERRUPTED))
        }
    }
}

async fn shutdown(sandbox: Sandbox) -> anyhow::Result<()> {
    sandbox
        .shutdown()
        .await
        .map_err(|err| anyhow::anyhow!(error_chain(&err)))
        .context("shutting the sandbox down")
}

/// Write `yaml` to `path`, readable by the owner only (it may hold a token).
pub(crate) fn write_kubeconfig(path: &Path, yaml: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options
        .open(path)
        .with_context(|| format!("writing the kubeconfig {}", path.display()))
        .map_err(|err| cli_error::usage(format!("{err:#}")))?;
    file.write_all(yaml.as_bytes())
        .and_then(|()| file.flush())
        .with_context(|| format!("writing the kubeconfig {}", path.display()))
}

/// The number of objects of each kind, by kind name (ordered, for a stable
/// summary).
fn count_kinds(objects: &[Value]) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or("(no kind)");
        *kinds.entry(kind.to_owned()).or_default() += 1;
    }
    kinds
}

/// The stderr summary: where, what was loaded, which faults.
fn summary(
    settings: &Settings,
    url: &str,
    stored: usize,
    generated: usize,
    loaded: usize,
    kinds: &BTreeMap<String, usize>,
) -> String {
    let mut lines = vec![format!(
        "leash sandbox: serving {url} ({stored} objects stored)"
    )];
    if generated + loaded > 0 {
        let by_kind = kinds
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect::<Vec<_>>()
            .join(", ");
        lines.push(format!(
            "  initial objects: {generated} generated, {loaded} from --data: {by_kind}"
        ));
    }
    let faults = &settings.faults;
    let mut fault_list = Vec::new();
    if !faults.latency.is_zero() || !faults.latency_jitter.is_zero() {
        let mut latency = format!("latency {}", humantime::format_duration(faults.latency));
        if !faults.latency_jitter.is_zero() {
            latency.push_str(&format!(
                " + up to {} jitter",
                humantime::format_duration(faults.latency_jitter)
            ));
        }
        fault_list.push(latency);
    }
    for (name, rate) in [
        ("500s", faults.fail_rate),
        ("429s", faults.throttle_rate),
        ("resets", faults.reset_rate),
        ("truncations", faults.truncate_rate),
    ] {
        if rate > 0.0 {
            fault_list.push(format!("{name} {rate}"));
        }
    }
    if !faults.fail_paths.is_empty() {
        fault_list.push(format!("500s under {}", faults.fail_paths.join(", ")));
    }
    if faults.watch_cut_after.is_some() || faults.watch_cut_rate > 0.0 {
        let mut cut = Vec::new();
        if let Some(bound) = faults.watch_cut_after {
            cut.push(format!("within {}", humantime::format_duration(bound)));
        }
        if faults.watch_cut_rate > 0.0 {
            cut.push(format!("{} per event", faults.watch_cut_rate));
        }
        let how = match faults.watch_cut {
            leash_sandbox::WatchCut::Clean => "clean",
            leash_sandbox::WatchCut::Reset => "reset",
        };
        fault_list.push(format!("watch cuts {} ({how})", cut.join(", ")));
    }
    if !fault_list.is_empty() {
        let scope = if faults.fail_discovery {
            "including"
        } else {
            "except"
        };
        lines.push(format!(
            "  faults (seed {}): {} ({scope} discovery)",
            settings.seed,
            fault_list.join(", ")
        ));
    }
    lines.push(format!(
        "  continue tokens expire after {}",
        humantime::format_duration(faults.continue_ttl)
    ));
    lines.push(format!(
        "  auth: {}",
        if settings.token.is_some() {
            "bearer token required"
        } else {
            "none"
        }
    ));
    for (service, url) in &settings.webhook_services {
        lines.push(format!("  webhook service {service}: {url}"));
    }
    if let Some(path) = &settings.kubeconfig {
        lines.push(format!("  kubeconfig: {}", path.display()));
    }
    lines.push(format!("  try: kubectl --server {url} get pods -A"));
    lines.push("  stop with Ctrl-C (SIGINT) or SIGTERM".to_owned());
    lines.join("\n")
}

/// `err` with its sources, `: `-separated.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// SIGINT and SIGTERM, listened to from before the URL is announced, so a
/// signal sent as soon as the URL is read is handled gracefully rather than
/// killing the process.
pub(crate) struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Install the handlers (they stay installed for the process).
    pub(crate) fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    /// Wait for the next SIGINT or SIGTERM; returns its name.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal that arrives while nobody waits is kept and
    /// returned by the next call.
    pub(crate) async fn recv(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => "Ctrl-C",
                Err(_) => std::future::pending().await,
            }
        }
    }
}
