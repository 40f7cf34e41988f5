//! `leash context` as a process against an in-process sandbox and a local
//! JSON service: `--once` output and exit codes, `--serve` answering
//! `/entries/...` (404 for unknown names), exit 2 for invalid entries and an
//! unreachable server.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::mpsc;

use leash_runtime::Scope;
use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::{BOUND, ChildGuard, accept_within, leash_piped, send_signal, wait_exit};

/// A multi-thread runtime serving the sandbox and a JSON service while the
/// test thread drives the `leash` process.
struct Cluster {
    runtime: tokio::runtime::Runtime,
    sandbox: Option<Sandbox>,
    scope: Option<Scope>,
    service_url: String,
}

impl Cluster {
    fn start() -> Cluster {
        Cluster::start_with(Vec::new())
    }

    fn start_with(extra: Vec<Value>) -> Cluster {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (sandbox, scope, service_url) = runtime.block_on(async {
            let ns = |name: &str| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            let mut objects = vec![
                ns("x"),
                ns("y"),
                deployment("x", "a"),
                deployment("x", "b"),
                deployment("y", "c"),
            ];
            objects.extend(extra);
            let sandbox = Sandbox::start(SandboxConfig {
                objects,
                ..SandboxConfig::default()
            })
            .await
            .unwrap();
            let scope = Scope::new();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}/config", listener.local_addr().unwrap());
            let router = axum::Router::new().route(
                "/config",
                axum::routing::get(|| async {
                    (
                        [("content-type", "application/json")],
                        r#"{"allowed": ["nginx", "redis"], "limit": 3}"#,
                    )
                }),
            );
            let token = scope.token().clone();
            scope.spawn("json service", async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(token.cancelled_owned())
                    .await
            });
            (sandbox, scope, url)
        });
        Cluster {
            runtime,
            sandbox: Some(sandbox),
            scope: Some(scope),
            service_url,
        }
    }

    fn url(&self) -> String {
        self.sandbox.as_ref().unwrap().url()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let sandbox = self.sandbox.take();
        let scope = self.scope.take();
        self.runtime.block_on(async {
            if let Some(s) = sandbox {
                let _ = s.shutdown().await;
            }
            if let Some(s) = scope {
                let _ = s.shutdown().await;
            }
        });
    }
}

fn deployment(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                         "spec": {"containers": [{"name": "main", "image": "nginx"}]}}
        }
    })
}

fn entries_yaml(service_url: &str) -> String {
    format!(
        r#"apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata:
  name: deployments
spec:
  kubernetesResource:
    group: apps
    version: v1
    resource: deployments
  projections:
  - name: in-x
    jmesPath: "[?metadata.namespace=='x'] | length(@)"
---
apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata:
  name: deployments-api
spec:
  apiCall:
    urlPath: /apis/apps/v1/deployments
    refreshInterval: 1h
  projections:
  - name: names
    jmesPath: "sort(items[].metadata.name)"
---
apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata:
  name: service
spec:
  apiCall:
    service:
      url: {service_url}
  projections:
  - name: first
    jmesPath: "allowed[0]"
  - name: limit
    jmesPath: "limit"
"#
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `DIR/entries.yaml` with [`entries_yaml`] for `cluster`'s service.
fn write_entries(dir: &Path, cluster: &Cluster) -> PathBuf {
    write(dir, "entries.yaml", &entries_yaml(&cluster.service_url))
}

/// Run `leash context ARGS` to completion, bounded.
fn leash_context(args: &[&str]) -> Output {
    let child = leash_piped("context", args)
        .spawn()
        .expect("run leash context");
    let (tx, rx) = mpsc::channel();
    #[allow(
        clippy::disallowed_methods,
        reason = "a test thread reads the child process; it ends when the child exits or its pipe closes"
    )]
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(BOUND)
        .expect("leash context did not exit in time")
        .unwrap()
}

#[test]
fn context_once_prints_every_projection() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write_entries(dir.path(), &cluster);
    let url = cluster.url();
    let out = leash_context(&["-f", file.to_str().unwrap(), "--once", "--server", &url]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one JSON object: {stdout}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        printed,
        json!({
            "deployments": {"in-x": 2},
            "deployments-api": {"names": ["a", "b", "c"]},
            "service": {"first": "nginx", "limit": 3}
        })
    );
}

#[test]
fn context_once_names_failed_entries() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    // A port with nothing listening: bind, note it, close it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/nothing", closed.local_addr().unwrap());
    drop(closed);
    let yaml = format!(
        "{}---
apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata: {{name: unreachable}}
spec:
  apiCall:
    service: {{url: '{dead_url}'}}
    retryLimit: 1
    refreshInterval: 100ms
",
        entries_yaml(&cluster.service_url)
    );
    let file = write(dir.path(), "entries.yaml", &yaml);
    let url = cluster.url();
    let out = leash_context(&[
        "-f",
        file.to_str().unwrap(),
        "--once",
        "--server",
        &url,
        "--ready-timeout",
        "1s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("\"unreachable\""),
        "names the failed entry: {stderr}"
    );
    assert!(stderr.contains("not ready within"), "{stderr}");
    assert!(!stderr.contains("\"service\" failed"), "{stderr}");
    // The entries that are ready are still printed.
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["service"]["limit"], json!(3));
    assert!(printed.get("unreachable").is_none());
}

#[test]
fn context_rejects_invalid_entries_and_unreachable_servers_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.yaml",
        "apiVersion: kyverno.io/v2beta1\nkind: GlobalContextEntry\nmetadata: {name: broken}\nspec:\n  apiCall: {urlPath: /x, refreshInterval: 0s}\n",
    );
    let out = leash_context(&[
        "-f",
        bad.to_str().unwrap(),
        "--once",
        "--server",
        "http://127.0.0.1:9",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("broken") && stderr.contains("spec.apiCall.refreshInterval"),
        "{stderr}"
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let good = write(
        dir.path(),
        "good.yaml",
        "apiVersion: kyverno.io/v2beta1\nkind: GlobalContextEntry\nmetadata: {name: pods}\nspec:\n  kubernetesResource: {version: v1, resource: pods}\n",
    );
    let out = leash_context(&["-f", good.to_str().unwrap(), "--once", "--server", &dead]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach"), "{stderr}");

    let out = leash_context(&["--once"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "no entries at all is a usage error"
    );
}

/// Ctrl-C while the connection layer checks `/version` against a server
/// that accepts the connection and never answers: exit 130 at once, not
/// after the check's 15 s bound. The accepted connection is the readiness
/// signal (no sleep).
#[test]
fn context_interrupted_while_connecting_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let entries = write(
        dir.path(),
        "pods.yaml",
        "apiVersion: kyverno.io/v2beta1\nkind: GlobalContextEntry\nmetadata: {name: pods}\nspec:\n  kubernetesResource: {version: v1, resource: pods}\n",
    );
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let mut child = ChildGuard(
        leash_piped(
            "context",
            &["-f", entries.to_str().unwrap(), "--once", "--server", &url],
        )
        .spawn()
        .expect("run leash context"),
    );
    // Ready once leash's /version request has connected.
    let _held = accept_within(&silent, &mut child, BOUND);
    let sent = std::time::Instant::now();
    send_signal(&child.0, "INT");
    let status = wait_exit(&mut child.0, BOUND, "leash context exit after SIGINT");
    let took = sent.elapsed();
    let mut stderr = String::new();
    let _ = child.0.stderr.take().unwrap().read_to_string(&mut stderr);
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "exit took {took:?} after SIGINT"
    );
}

/// One HTTP/1.0 GET: (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(BOUND)).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A running `leash context` (killed on drop if a test fails first).
struct ContextProcess {
    child: ChildGuard,
    lines: mpsc::Receiver<String>,
    serving: mpsc::Receiver<String>,
}

impl ContextProcess {
    fn spawn(args: &[&str]) -> ContextProcess {
        let mut child = ChildGuard(leash_piped("context", args).spawn().unwrap());
        let stdout = child.0.stdout.take().unwrap();
        let stderr = child.0.stderr.take().unwrap();
        let (addr_tx, serving) = mpsc::channel();
        #[allow(
            clippy::disallowed_methods,
            reason = "a test thread reads the child process; it ends when the child exits or its pipe closes"
        )]
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("leash: serving on http://") {
                    let _ = addr_tx.send(addr.to_owned());
                }
            }
        });
        let (line_tx, lines) = mpsc::channel();
        #[allow(
            clippy::disallowed_methods,
            reason = "a test thread reads the child process; it ends when the child exits or its pipe closes"
        )]
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = line_tx.send(line);
            }
        });
        ContextProcess {
            child,
            lines,
            serving,
        }
    }

    /// The next update line, parsed.
    fn next_update(&self) -> Value {
        let line = self.lines.recv_timeout(BOUND).expect("an update line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// Reads update lines until `pred` holds for one; returns it.
    fn until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let update = self.next_update();
            if pred(&update) {
                return update;
            }
            eprintln!("({what}) skipping {update}");
        }
    }

    /// Ctrl-C, then the exit status (bounded).
    fn interrupt(mut self) -> std::process::ExitStatus {
        send_signal(&self.child.0, "INT");
        wait_exit(&mut self.child.0, BOUND, "leash context stop after SIGINT")
    }
}

#[test]
fn context_serve_answers_entries_and_prints_updates() {
    let cluster = Cluster::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write_entries(dir.path(), &cluster);
    let url = cluster.url();
    let process = ContextProcess::spawn(&[
        "-f",
        file.to_str().unwrap(),
        "--serve",
        "127.0.0.1:0",
        "--server",
        &url,
    ]);
    let addr = process
        .serving
        .recv_timeout(BOUND)
        .expect("a 'serving on' line");
    // Wait for every entry's first data through the update lines.
    let mut ready = std::collections::BTreeSet::new();
    while ready.len() < 3 {
        let update = process.next_update();
        if update.get("projections").is_some() {
            assert_eq!(update["state"], "ready", "{update}");
            ready.insert(update["entry"].as_str().unwrap().to_owned());
        }
    }

    let (status, body) = get(&addr, "/entries/deployments/in-x");
    assert_eq!((status, body.as_str()), (200, "2"));
    let (status, body) = get(&addr, "/entries/service");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"allowed": ["nginx", "redis"], "limit": 3})
    );
    let (status, body) = get(&addr, "/entries/deployments");
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let (status, body) = get(&addr, "/entries/deployments-api/names");
    assert_eq!(
        (status, serde_json::from_str::<Value>(&body).unwrap()),
        (200, json!(["a", "b", "c"]))
    );
    assert_eq!(get(&addr, "/entries/nope").0, 404);
    assert_eq!(get(&addr, "/entries/nope/in-x").0, 404);
    assert_eq!(get(&addr, "/entries/deployments/nope").0, 404);

    // A Kubernetes change is printed as an update line.
    cluster
        .sandbox
        .as_ref()
        .unwrap()
        .store()
        .create(deployment("x", "d"))
        .unwrap();
    process.until("the change", |u| {
        u["entry"] == "deployments" && u["projections"]["in-x"] == json!(3)
    });
    assert_eq!(get(&addr, "/entries/deployments/in-x").1, "3");

    // Ctrl-C: a clean stop with the interrupted exit code.
    assert_eq!(process.interrupt().code(), Some(130));
}

fn gctx(name: &str, service_url: &str, projection: &str) -> Value {
    json!({
        "apiVersion": "kyverno.io/v2beta1",
        "kind": "GlobalContextEntry",
        "metadata": {"name": name},
        "spec": {
            "apiCall": {"service": {"url": service_url}, "refreshInterval": "1h"},
            "projections": [{"name": "p", "jmesPath": projection}]
        }
    })
}

/// `--watch-crds` with the shipped CRD manifest loaded into the sandbox:
/// entries follow GlobalContextEntry objects (added, then removed).
#[test]
fn context_watch_crds_follows_cluster_entries() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/crds/kyverno.io_globalcontextentries.yaml");
    let crd = leash_sandbox::manifests::load_manifests(&[manifest]).unwrap();
    // The service URL is only known once the cluster runs: add entries then.
    let cluster = Cluster::start_with(crd);
    let store = cluster.sandbox.as_ref().unwrap().store();
    store
        .create(gctx("limits", &cluster.service_url, "limit"))
        .unwrap();
    let url = cluster.url();
    let process = ContextProcess::spawn(&["--watch-crds", "--server", &url]);
    process.until("the listed entry", |u| {
        u["entry"] == "limits" && u["projections"]["p"] == json!(3)
    });
    store
        .create(gctx("first", &cluster.service_url, "allowed[0]"))
        .unwrap();
    process.until("the added entry", |u| {
        u["entry"] == "first" && u["projections"]["p"] == json!("nginx")
    });
    store
        .delete("kyverno.io/v2beta1", "GlobalContextEntry", None, "limits")
        .unwrap();
    process.until("the removal", |u| {
        u["entry"] == "limits" && u["removed"] == json!(true)
    });
    assert_eq!(process.interrupt().code(), Some(130));

    // --once --watch-crds reads the cluster's entries once.
    let out = leash_context(&["--watch-crds", "--once", "--server", &url]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, json!({"first": {"p": "nginx"}}));
}
