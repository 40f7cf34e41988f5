//! `leash serve`: the in-cluster engine. One root scope; the policy and
//! config sources, the reports component (under leader election when
//! asked), the admission webhook, and the health and metrics endpoints are
//! its children. SIGINT/SIGTERM cancel the root and wait for every task
//! within `--shutdown-timeout`.
//!
//! # Invariants
//! 1. One root [`Scope`] owns every task `serve` starts: the namespace
//!    check, the policy and config sources, leader election (or the
//!    controllers), the health and metrics endpoints, admission (or the
//!    stale webhook check) and the policy log. Each runs on the root's
//!    token, or on a child token of it (a leadership term's, a component's
//!    own scope).
//! 2. Every leadership term (without a Lease: the one run) gets fresh
//!    [`Reports`] and [`Background`] components, run on the term's token
//!    and both awaited (`join!`) before the term's future ends;
//!    [`leader::lead`] waits for that before another term starts. The
//!    [`Breaker`], the metrics and the policy and config receivers are
//!    shared by all terms and admission.
//! 3. [`Readiness`] is shared with the health endpoint: `policies` is a
//!    `watch` receiver; `scan` and `webhook` are `std::sync::Mutex`es of
//!    an optional receiver, each held only to swap the receiver or read
//!    its current value (`borrow()`), never across an await. `webhook`
//!    is set when admission starts; `scan` is set when a term's components
//!    are made (with the reports component) and reset to `None` after both
//!    have ended.
//! 4. Shutdown: the first SIGINT/SIGTERM (also while the webhook CA is
//!    read) calls `shut_down`: cancel the root, wait at most
//!    `--shutdown-timeout` for every task to end, exit 1 if one failed or
//!    was still running. After a signal in the final wait the sandbox, if
//!    any, is then shut down. A signal while connecting to a cluster ends
//!    `serve` before any task was started.
//! 5. The policy log waits on its channel raced against the root token,
//!    and ends when either ends.
//!
//! # Lock order
//! `Readiness`'s two mutexes are never held together: `ready` drops the
//! `webhook` guard before it takes `scan`'s. While either is held, only
//! that receiver's own `watch` lock is taken (by `borrow()`), after it.

mod admission;
mod args;
mod http;
mod namespaces;
mod sandbox;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use leash_controller::generate::{Background, BackgroundSettings};
use leash_controller::leader::{self, LeaseSettings};
use leash_controller::{Breaker, ConfigSource, Metrics, PolicySource, Reports};
use leash_runtime::Scope;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub(crate) use args::Args;

use crate::cli_error::EXIT_FAILURE;
use crate::connection::{Check, client_from_config};
use crate::sandbox_cmd::Signals;

/// What `/readyz` looks at.
#[derive(Debug)]
pub(crate) struct Readiness {
    policies: watch::Receiver<bool>,
    /// The scan of the current leadership term (None: not leading, or the
    /// reports component is off).
    scan: Mutex<Option<watch::Receiver<bool>>>,
    reports_here: bool,
    /// The admission component's "webhook configuration written" (None:
    /// admission is off).
    webhook: Mutex<Option<watch::Receiver<bool>>>,
}

impl Readiness {
    /// Policies read, the webhook configuration written (with admission),
    /// and (where the scan runs) its first sync done.
    pub(crate) fn ready(&self) -> Result<(), String> {
        if !*self.policies.borrow() {
            return Err("policies not read yet".into());
        }
        if let Some(w) = self
            .webhook
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            && !*w.borrow()
        {
            return Err("webhook configuration not registered yet".into());
        }
        if self.reports_here {
            let scan = self.scan.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = scan.as_ref()
                && !*s.borrow()
            {
                return Err("first resource sync not done".into());
            }
        }
        Ok(())
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = args.into_settings()?;
    let mut signals = Signals::install()
        .map_err(|e| anyhow::anyhow!("installing SIGINT/SIGTERM handlers: {e}"))?;
    let (client, sandbox) = match &settings.sandbox {
        Some(spec) => {
            let sb = sandbox::start(spec, settings.sandbox_kubeconfig.as_deref()).await?;
            let config = kube::Config::new(sb.url().parse()?);
            (client_from_config(config)?, Some(sb))
        }
        None => {
            // A signal while connecting ends `serve` at once (nothing runs yet).
            let interrupted = async {
                signals.recv().await;
            };
            let connected = settings.connection.connect(Check::None, interrupted);
            (connected.await?.client, None)
        }
    };

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let root = Scope::new();
    // leash's namespaces must exist: a missing one is logged and keeps
    // /readyz at 503 with the reason until it is created (issue 38).
    let missing_namespace = {
        let check = namespaces::NamespaceCheck::new(
            client.clone(),
            &settings.config_namespace,
            settings.lease.as_ref().map(|l| l.namespace.as_str()),
        );
        let missing = check.subscribe();
        root.spawn("namespace check", check.run(root.token().clone()));
        missing
    };
    let policy_source = PolicySource::new(client.clone(), metrics.clone());
    let policies = policy_source.subscribe();
    let readiness = Arc::new(Readiness {
        policies: policy_source.synced(),
        scan: Mutex::new(None),
        reports_here: settings.components.reports,
        // With admission, not ready until its configuration is written
        // (the component replaces this never-true receiver when it starts).
        webhook: Mutex::new(
            settings
                .admission
                .is_some()
                .then(|| watch::channel(false).1),
        ),
    });
    let config_source = ConfigSource::new(
        client.clone(),
        &settings.config_namespace,
        &settings.config_map,
        metrics.clone(),
    );
    let config = config_source.subscribe();
    root.spawn("policy source", policy_source.run(root.token().clone()));
    {
        let token = root.token().clone();
        root.spawn("config source", async move {
            config_source.run(token).await;
            Ok::<(), std::convert::Infallible>(())
        });
    }
    let breaker = Arc::new(Breaker::new(
        settings.max_ephemeral_reports,
        metrics.clone(),
    ));

    // One watch per kind for admission, the scan and generate, into one
    // cache: a kind more than one reads (Namespaces) is listed and watched
    // once. Its watches run in the root scope, across leadership terms.
    let hub = leash_controller::WatchHub::new(client.clone(), metrics.clone(), &root);

    // Kyverno's global context (`globalReference`, CEL `globalContext.Get`):
    // the cluster's GlobalContextEntry objects fed into one store that the
    // scan, admission and generate read through the hub. While the API
    // server does not serve the kind (Kyverno's CRDs installed after
    // leash), rules that read an entry give an error naming it; discovery
    // is asked again every GLOBAL_CONTEXT_RECHECK until it does.
    let global =
        leash_context::Store::new(leash_context::StoreConfig::default(), Some(client.clone()));
    hub.serve_global(global.clone());
    {
        let (client, token) = (client.clone(), root.token().clone());
        root.spawn("global context", async move {
            let mut logged = false;
            let fed = loop {
                let served = tokio::select! {
                    () = token.cancelled() => break Ok(()),
                    served = serves_global_context(&client) => served,
                };
                if served {
                    // The entries' state is written back to their objects'
                    // status while the feeder runs (and no longer).
                    let writing = token.child_token();
                    let writer = leash_context::StatusWriter::new(global.clone(), client.clone())
                        .run(writing.clone());
                    // Boxed: the feeder's future is large.
                    let feeder = Box::pin(
                        leash_context::CrdFeeder::new(global.clone(), client).run(token),
                    );
                    let feeding = async {
                        let fed = feeder.await;
                        writing.cancel();
                        fed
                    };
                    let (fed, ()) = tokio::join!(feeding, writer);
                    break fed.map_err(|e| e.to_string());
                }
                if !std::mem::replace(&mut logged, true) {
                    tracing::info!(
                        "GlobalContextEntry (kyverno.io/v2beta1) is not served: no global context until it is"
                    );
                }
                tokio::select! {
                    () = token.cancelled() => break Ok(()),
                    () = tokio::time::sleep(GLOBAL_CONTEXT_RECHECK) => {}
                }
            };
            let down = global.shutdown().await.map_err(|e| e.to_string());
            fed.and(down)
        });
    }

    // Image registries, one client and cache for the scan and admission:
    // an image read by one is not read again by the other within the TTL.
    let mut registry_settings = settings.registry.clone();
    registry_settings.credentials = pull_secret_credentials(
        &client,
        &settings.config_namespace,
        &settings.image_pull_secrets,
    )
    .await;
    let images = Arc::new(leash_images::Registry::new(registry_settings));
    {
        // The --image-pull-secrets and the Secrets the policies name
        // (`imageRegistryCredentials.secrets`, `credentials.secrets`), read
        // again every --image-pull-secrets-refresh (a rotated Secret is
        // used; Kyverno reads them on each use) and whenever the policies
        // name other Secrets.
        let (client, namespace, flagged, images, token, mut policies) = (
            client.clone(),
            settings.config_namespace.clone(),
            settings.image_pull_secrets.clone(),
            images.clone(),
            root.token().clone(),
            policies.clone(),
        );
        let every = settings.image_pull_secrets_refresh;
        root.spawn("registry credentials", async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The start read the flagged ones already.
            tick.reset();
            let mut read_names = flagged.clone();
            let mut policies_open = true;
            loop {
                let names = tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tick.tick() => credential_secret_names(&flagged, &policies),
                    r = policies.changed(), if policies_open => {
                        if r.is_err() {
                            policies_open = false;
                        }
                        let names = credential_secret_names(&flagged, &policies);
                        if names == read_names {
                            continue;
                        }
                        names
                    }
                };
                if names.is_empty() && images.credentials().is_empty() {
                    read_names = names;
                    continue;
                }
                let read = token
                    .run_until_cancelled(refreshed_pull_secrets(&client, &namespace, &names))
                    .await;
                let Some(Some(read)) = read else { continue };
                read_names = names;
                if images.credentials() != read {
                    tracing::info!(registries = ?read.registries().collect::<Vec<_>>(), "registry credentials changed; they are used from now on");
                    images.set_credentials(read);
                }
            }
            Ok::<(), std::convert::Infallible>(())
        });
    }

    if settings.components.reports || settings.components.background {
        let make = {
            let (client, policies, config, breaker, metrics, readiness, hub) = (
                client.clone(),
                policies.clone(),
                config.clone(),
                breaker.clone(),
                metrics.clone(),
                readiness.clone(),
                hub.clone(),
            );
            let mut reports_settings = settings.reports.clone();
            reports_settings.scan.images = Some(images.clone());
            let components = settings.components;
            let background_settings = BackgroundSettings {
                namespace: settings.config_namespace.clone(),
                // Reconciles wait on the API server, not the CPU: more of
                // them than evaluating workers.
                workers: (settings.reports.scan.workers * 4).clamp(8, 64),
            };
            move |term: tokio_util::sync::CancellationToken| {
                // Fresh components per term: nothing of a previous term survives.
                let reports = components.reports.then(|| {
                    Reports::new(
                        client.clone(),
                        policies.clone(),
                        config.clone(),
                        breaker.clone(),
                        metrics.clone(),
                        hub.clone(),
                        reports_settings.clone(),
                    )
                });
                let background = components.background.then(|| {
                    Background::new(
                        client.clone(),
                        policies.clone(),
                        metrics.clone(),
                        hub.clone(),
                        background_settings.clone(),
                    )
                });
                if let Some(r) = &reports {
                    *readiness.scan.lock().unwrap_or_else(|e| e.into_inner()) = Some(r.synced());
                }
                let readiness = readiness.clone();
                async move {
                    let reports = async {
                        if let Some(r) = reports
                            && let Err(e) = r.run(term.clone()).await
                        {
                            tracing::warn!("reports component: {e}");
                        }
                    };
                    let background = async {
                        if let Some(b) = background
                            && let Err(e) = b.run(term.clone()).await
                        {
                            tracing::warn!("background component: {e}");
                        }
                    };
                    // Both run for the whole term and end with it.
                    tokio::join!(reports, background);
                    *readiness.scan.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
            }
        };
        match &settings.lease {
            Some(lease) => {
                let lease: LeaseSettings = lease.clone();
                let (client, metrics, token) =
                    (client.clone(), metrics.clone(), root.token().clone());
                root.spawn("leader election", async move {
                    leader::lead(client, lease, metrics, token, make).await;
                    Ok::<(), std::convert::Infallible>(())
                });
            }
            None => {
                metrics.leader.set(1);
                let make = make;
                let run = make(root.token().clone());
                root.spawn("controllers", async move {
                    run.await;
                    Ok::<(), std::convert::Infallible>(())
                });
            }
        }
    }

    // Health first: /readyz says why leash is not ready while it waits
    // (the webhook CA, a missing namespace).
    if let Some(addr) = settings.health {
        let listener = http::bind(addr, "--health").await?;
        eprintln!(
            "leash serve: health on http://{}/healthz and /readyz",
            listener.local_addr()?
        );
        root.spawn(
            "health endpoint",
            http::serve_health(
                listener,
                readiness.clone(),
                missing_namespace,
                root.token().clone(),
            ),
        );
    }

    if let Some(mut webhook) = settings.admission.clone() {
        if let Some((namespace, name)) = &settings.ca_secret {
            // Every replica and every restart presents a certificate of
            // this CA: the caBundle any of them wrote stays valid.
            let shared = admission::shared_ca(&client, namespace, name);
            tokio::select! {
                ca = shared => webhook.ca = Some(ca),
                signal = signals.recv() => {
                    eprintln!("leash serve: {signal} while reading the webhook CA, shutting down");
                    return Ok(shut_down(root, settings.shutdown_timeout).await);
                }
            }
        }
        let tls_files = webhook.tls_cert.is_some();
        let component = leash_webhook::AdmissionComponent::builder(
            client.clone(),
            webhook,
            policies.clone(),
            config.clone(),
        )
        .breaker(breaker.clone())
        .metrics(metrics.clone())
        .update_request_namespace(settings.config_namespace.clone())
        .images(images.clone())
        .hub(hub.clone())
        .build(&mut registry)
        .map_err(|e| admission::setup_error(e, tls_files))?;
        *readiness.webhook.lock().unwrap_or_else(|e| e.into_inner()) = Some(component.registered());
        eprintln!("leash serve: admission webhook at {}", component.url());
        root.spawn("admission", component.run(root.token().clone()));
    } else {
        // Not serving admission: a configuration an earlier run left
        // behind, pointing at a webhook nothing answers, would fail every
        // matching request (Kyverno's #16177).
        let (client, name, token) = (
            client.clone(),
            leash_webhook::Settings::default().configuration_name,
            root.token().clone(),
        );
        root.spawn("stale webhook check", async move {
            admission::remove_if_unanswered(&client, &name, &token).await;
            Ok::<(), std::convert::Infallible>(())
        });
    }

    let registry = Arc::new(registry);
    if let Some(addr) = settings.metrics_addr {
        let listener = http::bind(addr, "--metrics").await?;
        eprintln!(
            "leash serve: metrics on http://{}/metrics",
            listener.local_addr()?
        );
        root.spawn(
            "metrics endpoint",
            http::serve_metrics(listener, registry.clone(), root.token().clone()),
        );
    }
    {
        let policies = policies.clone();
        let token = root.token().clone();
        root.spawn("policy log", async move {
            log_policies(policies, token).await;
            Ok::<(), std::convert::Infallible>(())
        });
    }
    eprintln!(
        "leash serve: running {} (stop with Ctrl-C or SIGTERM)",
        settings.components.describe()
    );

    let signal = signals.recv().await;
    eprintln!(
        "leash serve: {signal}, shutting down (at most {:?})",
        settings.shutdown_timeout
    );
    let code = shut_down(root, settings.shutdown_timeout).await;
    if let Some(sb) = sandbox
        && let Err(e) = sb.shutdown().await
    {
        eprintln!("leash serve: error: shutting the sandbox down: {e}");
        return Ok(ExitCode::from(EXIT_FAILURE));
    }
    Ok(code)
}

/// Whether the API server serves Kyverno's GlobalContextEntry kind.
/// How often discovery is asked whether GlobalContextEntry is served, while
/// it is not.
const GLOBAL_CONTEXT_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

async fn serves_global_context(client: &kube::Client) -> bool {
    let version = format!(
        "{}/{}",
        leash_context::spec::GROUP,
        leash_context::spec::STORAGE_VERSION
    );
    client
        .list_api_group_resources(&version)
        .await
        .is_ok_and(|list| {
            list.resources
                .iter()
                .any(|r| r.name == leash_context::spec::PLURAL)
        })
}

/// Cancels `root` and waits at most `timeout` for every task: exit 0, or
/// 1 when a task failed or one was still running at the deadline (a line
/// says which). Tasks left running are aborted when `root` is dropped.
async fn shut_down(root: Scope, timeout: std::time::Duration) -> ExitCode {
    root.cancel();
    match tokio::time::timeout(timeout, root.shutdown()).await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("leash serve: error: {e}");
            ExitCode::from(EXIT_FAILURE)
        }
        Err(_) => {
            eprintln!(
                "leash serve: error: tasks still running after --shutdown-timeout {timeout:?}"
            );
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Logs each new policy set (count, compile errors are logged by the source).
async fn log_policies(
    mut policies: watch::Receiver<Arc<leash_controller::PolicySet>>,
    token: tokio_util::sync::CancellationToken,
) {
    let mut last = String::new();
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            r = policies.changed() => if r.is_err() { return },
        }
        let text = leash_controller::sources::describe(&policies.borrow_and_update());
        if text != last {
            eprintln!("leash serve: {text}");
            last = text;
        }
    }
}

/// One image pull Secret as read: its credentials, or why not (`Err(true)`
/// when the API server did not answer about it, so nothing is known).
type PullSecret = (
    String,
    Result<leash_images::credentials::Credentials, (bool, String)>,
);

/// Reads the `--image-pull-secrets` of `namespace`.
async fn read_pull_secrets(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
) -> Vec<PullSecret> {
    use k8s_openapi::api::core::v1::Secret;
    use leash_images::credentials::Credentials;
    let mut out = Vec::new();
    for name in names {
        // `NAME` in `namespace`, or `NAMESPACE/NAME` (a policy's).
        let (ns, short) = name.split_once('/').unwrap_or((namespace, name));
        let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
        let read = async {
            let secret = match api.get(short).await {
                Ok(s) => s,
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Err((false, "it does not exist".to_string()));
                }
                Err(e) => return Err((true, format!("reading it: {e}"))),
            };
            let data = secret.data.unwrap_or_default();
            if let Some(json) = data.get(".dockerconfigjson") {
                return Credentials::from_docker_config(&json.0).map_err(|e| (false, e));
            }
            if let Some(old) = data.get(".dockercfg") {
                // The older format: the `auths` map alone.
                let auths: serde_json::Value = serde_json::from_slice(&old.0)
                    .map_err(|e| (false, format!(".dockercfg is not JSON: {e}")))?;
                let wrapped = serde_json::json!({ "auths": auths });
                return Credentials::from_docker_config(wrapped.to_string().as_bytes())
                    .map_err(|e| (false, e));
            }
            Err((
                false,
                "it holds neither .dockerconfigjson nor .dockercfg".to_string(),
            ))
        };
        out.push((name.clone(), read.await));
    }
    out
}

/// The credentials of the `--image-pull-secrets` at start: one that cannot
/// be read is logged and left out.
async fn pull_secret_credentials(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
) -> leash_images::credentials::Credentials {
    let mut all = leash_images::credentials::Credentials::default();
    for (name, read) in read_pull_secrets(client, namespace, names).await {
        match read {
            Ok(c) => {
                tracing::info!(secret = %name, registries = ?c.registries().collect::<Vec<_>>(), "image pull secret read");
                all = all.merge(c);
            }
            Err((_, e)) => tracing::warn!(
                "image pull secret {namespace}/{name} left out: {e}; its registries are read anonymously"
            ),
        }
    }
    all
}

/// The Secrets whose credentials read registries: `flagged`
/// (`--image-pull-secrets`) and those the current policies name, each once.
fn credential_secret_names(
    flagged: &[String],
    policies: &tokio::sync::watch::Receiver<Arc<leash_controller::PolicySet>>,
) -> Vec<String> {
    let mut names: std::collections::BTreeSet<String> = flagged.iter().cloned().collect();
    names.extend(policies.borrow().engine.registry_secrets());
    names.into_iter().collect()
}

/// The credentials of the `--image-pull-secrets` read again: `None` when
/// the API server did not answer about one of them (the credentials in
/// use are kept); a Secret deleted or emptied is left out.
async fn refreshed_pull_secrets(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
) -> Option<leash_images::credentials::Credentials> {
    let mut all = leash_images::credentials::Credentials::default();
    for (name, read) in read_pull_secrets(client, namespace, names).await {
        match read {
            Ok(c) => all = all.merge(c),
            Err((true, e)) => {
                tracing::debug!(secret = %name, "image pull secrets not refreshed: {e}");
                return None;
            }
            Err((false, e)) => {
                tracing::debug!(secret = %name, "image pull secret left out: {e}");
            }
        }
    }
    Some(all)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// README, `leash serve`: "exit 0, or 1 if something was still
    /// running". leash's own tasks all end on cancellation, so the deadline
    /// is checked with a task that ignores it (paused time: the deadline
    /// passes at once); a task that ends on cancellation exits 0, and one
    /// that fails exits 1.
    #[tokio::test(start_paused = true)]
    async fn shutdown_exits_1_when_a_task_outlives_the_deadline() {
        let root = Scope::new();
        let token = root.token().clone();
        root.spawn("cancellable", async move {
            token.cancelled().await;
            Ok::<(), std::convert::Infallible>(())
        });
        assert_eq!(
            shut_down(root, Duration::from_secs(10)).await,
            ExitCode::SUCCESS
        );

        let root = Scope::new();
        root.spawn("stubborn", async {
            std::future::pending::<()>().await;
            Ok::<(), std::convert::Infallible>(())
        });
        let start = tokio::time::Instant::now();
        assert_eq!(
            shut_down(root, Duration::from_secs(10)).await,
            ExitCode::from(EXIT_FAILURE)
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(10),
            "waited the deadline out"
        );

        let root = Scope::new();
        root.spawn("failing", async {
            Err::<(), _>(std::io::Error::other("write failed"))
        });
        assert_eq!(
            shut_down(root, Duration::from_secs(10)).await,
            ExitCode::from(EXIT_FAILURE)
        );
    }
}
