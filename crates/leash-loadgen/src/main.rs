//! leash-loadgen: N concurrent clients against the admission webhook.
//!
//! - `review`: posts `admission.k8s.io/v1` AdmissionReviews of pods (a mix
//!   of compliant and violating ones, from a template or built in) straight
//!   to a webhook URL, or to a webhook it starts in-process with
//!   `--policies DIR` (real HTTPS over loopback).
//! - `pods`: creates pods with `generateName` through an API server.
//!
//! Each client is one task with its own connection and its own state
//! (request count, latencies, errors): nothing is shared between clients
//! while they run, and the totals are merged after every client has
//! returned (seed: Kyverno's perf-testing goroutines shared one `err`).
//! Clients run in a `leash_runtime::Scope`; Ctrl-C cancels them. Every
//! client opens its connection before the clock starts, and all start
//! together: what is measured is requests on kept connections, as an API
//! server sends them (a connect that fails counts as an error; a connection
//! lost later is re-dialled within the request that needs it).
//!
//! # Invariants
//! 1. No lock or atomic: each client task (`spawn_with_output`) owns its
//!    connection and `ClientStats`; what clients share is read-only
//!    (`Arc`s of the target and the body maker) plus one
//!    `tokio::sync::Barrier`. `run` merges the stats only after awaiting
//!    every client's handle; a client's panic is an error of `run`.
//! 2. The barrier counts every client plus `run`: each client waits at it
//!    once, connected or not (unless cancelled first), so the clock starts
//!    when all have connected. Every connect, barrier wait and request is
//!    raced against the scope's token (`run_until_cancelled`); a cancelled
//!    client returns the stats it has.
//! 3. The `ctrl-c` task cancels the scope's token on Ctrl-C. After the
//!    clients returned, `run` cancels the in-process webhook's token, then
//!    the scope's, and joins the scope (every task it started).
//! 4. The in-process webhook and its audit writer (`--policies`) run in the
//!    scope on a child of the scope's token, so they keep answering until
//!    the clients are done (`run` cancels the child first), and stop with
//!    the scope when `run` returns early with an error.

mod client;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use leash_runtime::{CancellationToken, Scope};
use serde_json::{Value, json};

use crate::client::{Connection, Target};
use crate::report::{ClientStats, Summary};

#[derive(Parser, Debug)]
#[command(
    name = "leash-loadgen",
    about = "Load generator for the leash admission webhook"
)]
struct Args {
    #[command(subcommand)]
    mode: Mode,
    /// Concurrent clients, each with its own connection and state.
    #[arg(long, short = 'c', default_value_t = 100, global = true)]
    clients: usize,
    /// How long to run, in seconds (ignored with --requests).
    #[arg(long, default_value_t = 10.0, global = true)]
    duration: f64,
    /// Total requests instead of a duration (split evenly over the clients).
    #[arg(long, global = true)]
    requests: Option<u64>,
    /// One pod in this many violates the policies (0: none).
    #[arg(long, default_value_t = 2, global = true)]
    violating_every: u64,
    /// Print the summary as JSON.
    #[arg(long, global = true)]
    json: bool,
    /// The built-in pod's image (default `registry.example/app:1.0`);
    /// repeated, one container per image (`app`, `app-1`, ...).
    #[arg(long, global = true)]
    image: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Post AdmissionReviews to a webhook.
    Review {
        /// The webhook URL (`https://127.0.0.1:9443/validate`).
        #[arg(long)]
        url: Option<String>,
        /// PEM CA bundle to trust for the webhook's certificate.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Start a webhook in-process with the policies of this directory
        /// (YAML files) instead of using --url.
        #[arg(long)]
        policies: Option<PathBuf>,
        /// With --policies: switch every ClusterPolicy/Policy to Enforce.
        #[arg(long)]
        enforce: bool,
        /// With --policies: the webhook endpoint to post to, `validate`
        /// (the validating webhook) or `mutate` (the mutating one, which
        /// answers JSON Patches).
        #[arg(long, default_value = "validate", value_parser = ["validate", "mutate"])]
        endpoint: String,
        /// A pod (JSON or YAML) to use as the compliant template.
        #[arg(long)]
        template: Option<PathBuf>,
        /// Give every pod its own `load-id` label, so no two reviews are
        /// alike (by default pods differ in their names only, as the pods
        /// of one ReplicaSet do).
        #[arg(long)]
        distinct: bool,
    },
    /// Create pods with generateName through an API server.
    Pods {
        /// The API server (`http://127.0.0.1:6443`).
        #[arg(long)]
        server: String,
        /// Namespace of the pods.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Bearer token.
        #[arg(long)]
        token: Option<String>,
        /// PEM CA bundle for an https server.
        #[arg(long)]
        ca: Option<PathBuf>,
        /// Pods that mount no ServiceAccount token
        /// (`automountServiceAccountToken: false`, as hardened workloads
        /// run): kube-apiserver then adds no randomly named token volume,
        /// and the pods reach the webhooks alike.
        #[arg(long)]
        no_token: bool,
        /// Give each pod an `emptyDir` volume of this name.
        #[arg(long, value_name = "NAME")]
        empty_dir: Option<String>,
    },
}

/// The same allocator as the `leash` binary (see the workspace Cargo.toml):
/// `review --policies` hosts leash's webhook in this process, and its
/// figures should be those of the product.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("leash-loadgen: starting the runtime: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = runtime.block_on(run(args)) {
        eprintln!("leash-loadgen: {e:#}");
        std::process::exit(1);
    }
}

fn builtin_pod(images: &[String]) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "load", "namespace": "default", "labels": {"app": "load"}},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "app", "image": "registry.example/app:1.0",
                "securityContext": {
                    "allowPrivilegeEscalation": false, "runAsNonRoot": true,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"}
                }
            }]
        }
    });
    let template = pod["spec"]["containers"][0].clone();
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| {
            let mut c = template.clone();
            c["name"] = json!(if i == 0 {
                "app".to_string()
            } else {
                format!("app-{i}")
            });
            c["image"] = json!(image);
            c
        })
        .collect();
    if !containers.is_empty() {
        pod["spec"]["containers"] = json!(containers);
    }
    pod
}

/// The violating variant: privileged, host network, a hostPath volume.
/// Still a valid pod: kube-apiserver refuses a privileged container that
/// sets `allowPrivilegeEscalation: false`.
fn violating(mut pod: Value) -> Value {
    pod["spec"]["hostNetwork"] = json!(true);
    pod["spec"]["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
    if let Some(c) = pod["spec"]["containers"].get_mut(0) {
        c["securityContext"]["privileged"] = json!(true);
        c["securityContext"]["allowPrivilegeEscalation"] = json!(true);
    }
    pod
}

fn read_doc(path: &PathBuf) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn load_policies(dir: &PathBuf, enforce: bool) -> Result<leash_policy::Engine> {
    let mut engine = leash_policy::Engine::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    entries.sort();
    for p in entries {
        let mut doc = read_doc(&p)?;
        if enforce && doc["spec"].get("validationFailureAction").is_some() {
            doc["spec"]["validationFailureAction"] = json!("Enforce");
        }
        // `get_mut`, not `doc["spec"]["rules"]`: indexing for a mutable
        // reference inserts a null `rules` into a spec without it (which the
        // schema check then refuses, as it would refuse it from a user).
        let rules = doc
            .get_mut("spec")
            .and_then(|s| s.get_mut("rules"))
            .and_then(Value::as_array_mut);
        if enforce && let Some(rules) = rules {
            for r in rules {
                if r["validate"].get("failureAction").is_some() {
                    r["validate"]["failureAction"] = json!("Enforce");
                }
            }
        }
        engine
            .add_json(&doc)
            .with_context(|| format!("compiling {}", p.display()))?;
    }
    if engine.is_empty() {
        bail!("no policy in {}", dir.display());
    }
    Ok(engine)
}

/// Builds request `n` of client `i`: (unused label, body).
type BodyMaker = Box<dyn Fn(usize, u64) -> (String, Vec<u8>) + Send + Sync>;

async fn run(args: Args) -> Result<()> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    let scope = Scope::new();
    let token = scope.token().clone();
    let ctrl_c = token.clone();
    scope.spawn("ctrl-c", async move {
        if ctrl_c
            .run_until_cancelled(tokio::signal::ctrl_c())
            .await
            .is_some()
        {
            ctrl_c.cancel();
        }
        Ok::<(), std::convert::Infallible>(())
    });
    let mut server_token = None;
    let (target, mode_name, make_body): (Target, &str, BodyMaker) = match &args.mode {
        Mode::Review {
            url,
            ca,
            policies,
            enforce,
            endpoint,
            template,
            distinct,
        } => {
            let distinct = *distinct;
            let pod = match template {
                Some(t) => read_doc(t)?,
                None => builtin_pod(&args.image),
            };
            let bad = violating(pod.clone());
            let (url, ca_pem) = match (url, policies) {
                (_, Some(dir)) => {
                    let engine = load_policies(dir, *enforce)?;
                    let (url, ca, t) = start_webhook(&scope, engine)?;
                    server_token = Some(t);
                    // The server's URL ends in /validate; /mutate is its sibling.
                    let base = url.strip_suffix("/validate").unwrap_or(&url);
                    (format!("{base}/{endpoint}"), Some(ca))
                }
                (Some(u), None) => {
                    let ca = match ca {
                        Some(p) => Some(
                            std::fs::read_to_string(p)
                                .with_context(|| format!("reading {}", p.display()))?,
                        ),
                        None => None,
                    };
                    (u.clone(), ca)
                }
                (None, None) => bail!("review needs --url or --policies"),
            };
            let target = Target::parse(&url, ca_pem.as_deref())?;
            let every = args.violating_every;
            let body = move |client: usize, n: u64| {
                let mut p = if every > 0 && n % every == every - 1 {
                    bad.clone()
                } else {
                    pod.clone()
                };
                p["metadata"]["name"] = json!(format!("load-{client}-{n}"));
                if distinct {
                    p["metadata"]["labels"]["load-id"] = json!(format!("{client}-{n}"));
                }
                let ns = p["metadata"]["namespace"].clone();
                let review = json!({
                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": {
                        "uid": format!("{client}-{n}"),
                        "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": ns, "name": p["metadata"]["name"],
                        "operation": "CREATE",
                        "userInfo": {"username": "loadgen", "groups": ["system:authenticated"]},
                        "object": p,
                    }
                });
                (
                    String::new(),
                    serde_json::to_vec(&review).unwrap_or_default(),
                )
            };
            (target, "review", Box::new(body))
        }
        Mode::Pods {
            server,
            namespace,
            token: bearer,
            ca,
            no_token,
            empty_dir,
        } => {
            let ca = match ca {
                Some(p) => Some(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("reading {}", p.display()))?,
                ),
                None => None,
            };
            let mut target = Target::parse(
                &format!(
                    "{}/api/v1/namespaces/{namespace}/pods",
                    server.trim_end_matches('/')
                ),
                ca.as_deref(),
            )?;
            target.bearer = bearer.clone();
            let mut pod = builtin_pod(&args.image);
            if *no_token {
                pod["spec"]["automountServiceAccountToken"] = json!(false);
            }
            if let Some(name) = empty_dir {
                pod["spec"]["volumes"] = json!([{"name": name, "emptyDir": {}}]);
            }
            let bad = violating(pod.clone());
            let every = args.violating_every;
            let ns = namespace.clone();
            let body = move |_client: usize, n: u64| {
                let mut p = if every > 0 && n % every == every - 1 {
                    bad.clone()
                } else {
                    pod.clone()
                };
                p["metadata"] =
                    json!({"generateName": "load-", "namespace": ns, "labels": {"app": "load"}});
                (String::new(), serde_json::to_vec(&p).unwrap_or_default())
            };
            (target, "pods", Box::new(body))
        }
    };
    let target = Arc::new(target);
    let make_body = Arc::new(make_body);
    let duration = Duration::from_secs_f64(args.duration.max(0.0));
    // Every client connects first (TLS included) and they start together,
    // as an API server's webhook client works on kept connections: the
    // latencies are of reviews, not of a storm of handshakes at the start.
    // A connection lost later is re-dialled inside the request it fails.
    let start = Arc::new(tokio::sync::Barrier::new(args.clients + 1));
    let per_client: Vec<Option<u64>> = (0..args.clients)
        .map(|i| {
            args.requests.map(|total| {
                let base = total / args.clients as u64;
                base + u64::from((i as u64) < total % args.clients as u64)
            })
        })
        .collect();
    let handles: Vec<_> = per_client
        .into_iter()
        .enumerate()
        .map(|(i, budget)| {
            let target = target.clone();
            let make_body = make_body.clone();
            let token = token.clone();
            let start = start.clone();
            scope.spawn_with_output(async move {
                // This client's own state (seed: the shared `err`).
                let mut stats = ClientStats::default();
                let t0 = Instant::now();
                let mut conn: Option<Connection> =
                    match token.run_until_cancelled(client::connect(&target)).await {
                        Some(Ok(c)) => Some(c),
                        Some(Err(e)) => {
                            stats.error(format!("{e:#}"), t0.elapsed());
                            None
                        }
                        None => None,
                    };
                if token.run_until_cancelled(start.wait()).await.is_none() {
                    return stats;
                }
                let deadline = Instant::now() + duration;
                let mut n = 0u64;
                loop {
                    let more = match budget {
                        Some(b) => n < b,
                        None => Instant::now() < deadline,
                    };
                    if !more || token.is_cancelled() {
                        break;
                    }
                    let (_, body) = make_body(i, n);
                    n += 1;
                    let t0 = Instant::now();
                    let outcome = token
                        .run_until_cancelled(client::send(&target, &mut conn, body))
                        .await;
                    match outcome {
                        None => break,
                        Some(Ok((status, answer))) => stats.record(status, &answer, t0.elapsed()),
                        Some(Err(e)) => {
                            conn = None;
                            stats.error(format!("{e:#}"), t0.elapsed());
                        }
                    }
                }
                stats
            })
        })
        .collect();
    // Every client reaches the barrier (connected or not), unless cancelled.
    let connecting = Instant::now();
    let _ = token.run_until_cancelled(start.wait()).await;
    eprintln!(
        "leash-loadgen: {} clients connected in {:.1} ms; measuring",
        args.clients,
        connecting.elapsed().as_secs_f64() * 1000.0
    );
    let started = Instant::now();
    let mut all = Vec::with_capacity(handles.len());
    for h in handles {
        all.push(h.await.context("a client panicked")?);
    }
    let elapsed = started.elapsed();
    if let Some(t) = server_token {
        t.cancel();
    }
    scope.cancel();
    if let Err(e) = scope.join().await {
        eprintln!("leash-loadgen: {e}");
    }
    let summary = Summary::merge(mode_name, args.clients, elapsed, all);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary.to_json())?);
    } else {
        print!("{}", summary.to_text());
    }
    Ok(())
}

/// Starts an AdmissionServer (and its audit worker, with a sink that
/// discards) in `scope`; returns its URL, CA and token.
fn start_webhook(
    scope: &Scope,
    engine: leash_policy::Engine,
) -> Result<(String, String, CancellationToken)> {
    use leash_webhook::{AdmissionServer, Recorder, ReportSink, Settings, audit_channel};
    #[derive(Debug)]
    struct Discard;
    impl ReportSink for Discard {
        fn write(
            &self,
            _: Arc<leash_webhook::AuditRecord>,
        ) -> futures_like::BoxFuture<'static, Result<(), leash_runtime::BoxError>> {
            Box::pin(async { Ok(()) })
        }
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let settings = Settings {
        listen: "127.0.0.1:0".parse().context("listen address")?,
        ..Settings::default()
    };
    let (queue, writer) = audit_channel(
        settings.audit.clone(),
        settings.shutdown_timeout,
        Arc::new(Discard),
        &mut registry,
    );
    let (_ptx, prx) = tokio::sync::watch::channel(Arc::new(engine));
    let (_ctx, crx) = tokio::sync::watch::channel(Arc::new(leash_policy::KyvernoConfig::default()));
    let recorder = Recorder::new(&mut registry);
    let server = AdmissionServer::new(
        settings,
        prx,
        crx,
        Arc::new(leash_policy::NoClusterData),
        queue,
        recorder,
        &mut registry,
    )
    .context("starting the in-process webhook")?;
    let url = server.webhook_url();
    let ca = server.ca_pem().to_string();
    // A child of the scope's token: cancelled on its own once the clients
    // are done, and with the scope when `run` returns early.
    let token = scope.token().child_token();
    let t = token.clone();
    scope.spawn("webhook", async move {
        // Keep the policy and config senders alive while serving.
        let _keep = (_ptx, _ctx);
        server.run(t).await
    });
    let t = token.clone();
    scope.spawn("audit-writer", async move {
        writer.run(t).await;
        Ok::<(), std::convert::Infallible>(())
    });
    Ok((url, ca, token))
}

/// The boxed future type of `ReportSink::write`, without a `futures` dependency.
mod futures_like {
    pub(crate) type BoxFuture<'a, T> =
        std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}
