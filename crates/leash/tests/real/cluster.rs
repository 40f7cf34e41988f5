//! The real control plane these tests share: started once, on first use, by
//! the program `LEASH_CONTROLPLANE` names; taken by one test at a time.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, mpsc};
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;

/// How long the control plane may take to start (a cold etcd and API server
/// on a shared 2-core machine take seconds; this bounds a hang).
const START_BOUND: Duration = Duration::from_secs(180);

pub(crate) struct Cluster {
    /// The API server's URL (`https://127.0.0.1:PORT`).
    pub(crate) server: String,
    /// The admin kubeconfig (group system:masters).
    pub(crate) kubeconfig: PathBuf,
    /// etcd's client URL, for `controlplane compact`.
    etcd: String,
    program: PathBuf,
    /// Held open for the life of this test binary: the control plane stops
    /// (and removes its data) when it closes, that is when the binary exits.
    _stdin: Mutex<ChildStdin>,
}

static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();
static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// The control plane and exclusive use of it, or `None` (the test then
/// returns, having said why) when `LEASH_CONTROLPLANE` is not set.
pub(crate) fn cluster() -> Option<(&'static Cluster, MutexGuard<'static, ()>)> {
    let cluster = CLUSTER.get_or_init(start).as_ref()?;
    // A test that failed holding it leaves the cluster usable.
    let guard = EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner());
    Some((cluster, guard))
}

fn start() -> Option<Cluster> {
    let Some(program) = std::env::var_os("LEASH_CONTROLPLANE") else {
        eprintln!(
            "skipped: LEASH_CONTROLPLANE is not set (testenv/build.sh controlplane, then \
             LEASH_CONTROLPLANE=testenv/bin/controlplane; .ci/run does both)"
        );
        return None;
    };
    let program = PathBuf::from(program);
    let program = if program.is_relative() {
        // Relative to the workspace, where .ci/run and the README run from.
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(program)
    } else {
        program
    };
    let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("controlplane-{}.log", std::process::id()));
    let stderr = File::create(&log).expect("create the control plane's log");
    let mut child = Command::new(&program)
        .args(["--exit-on-stdin-close", "--log"])
        .arg(&log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    #[allow(
        clippy::disallowed_methods,
        reason = "a test thread reads the child's ready line; it ends when the pipe closes"
    )]
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        for _ in lines {}
    });
    let line = match rx.recv_timeout(START_BOUND) {
        Ok(Some(Ok(line))) => line,
        other => panic!(
            "the control plane did not say it was ready ({other:?}); its log: {}\n{}",
            log.display(),
            tail(&log)
        ),
    };
    let ready: Value = serde_json::from_str(&line).expect("the ready line is JSON");
    let text = |k: &str| ready[k].as_str().expect("ready line field").to_owned();
    eprintln!(
        "control plane at {} (log {})",
        text("server"),
        log.display()
    );
    // The process is reaped by nobody: it ends with this binary (stdin).
    std::mem::forget(child);
    Some(Cluster {
        server: text("server"),
        kubeconfig: PathBuf::from(text("kubeconfig")),
        etcd: text("etcd"),
        program,
        _stdin: Mutex::new(stdin),
    })
}

/// The last lines of a log, for a failure message.
pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

impl Cluster {
    /// kubectl with the admin kubeconfig and a discovery cache of its own.
    pub(crate) fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.kubeconfig, args, None)
    }

    /// kubectl with `kubeconfig`, `stdin` written to it when given.
    pub(crate) fn kubectl_as(
        &self,
        kubeconfig: &Path,
        args: &[&str],
        stdin: Option<&str>,
    ) -> Output {
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubectl-cache");
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(&cache)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl (testenv/build.sh kubectl builds it; put testenv/bin on PATH)");
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(text.as_bytes())
                .expect("write kubectl's stdin");
        }
        child.wait_with_output().expect("kubectl output")
    }

    /// kubectl that must succeed; its stdout.
    pub(crate) fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `kubectl apply -f -` of a YAML or JSON stream, which must succeed.
    pub(crate) fn apply(&self, manifests: &str) {
        let out = self.kubectl_as(
            &self.kubeconfig,
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(manifests),
        );
        assert!(
            out.status.success(),
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Create `name` (if missing) and wait for its `default` ServiceAccount:
    /// until the controller manager makes it, the ServiceAccount admission
    /// plugin refuses every Pod of the namespace.
    pub(crate) fn namespace(&self, name: &str) {
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n"
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !self
            .kubectl(&["get", "serviceaccount", "default", "-n", name])
            .status
            .success()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no default ServiceAccount in {name}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// leash's CRDs (`deploy/crds`), applied and established.
    pub(crate) fn install_crds(&self) {
        let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
        self.kubectl_ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &crds.display().to_string(),
        ]);
        self.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd",
            "--all",
        ]);
    }

    /// Compact etcd's history to now, as kube-apiserver's compactor does;
    /// the API server's watch cache drops older snapshots within 15 s.
    pub(crate) fn compact(&self) {
        let out = Command::new(&self.program)
            .args(["compact", "--etcd", &self.etcd])
            .output()
            .expect("run controlplane compact");
        assert!(
            out.status.success(),
            "controlplane compact failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Create every object (`(collection path, body)`), `concurrency` at a
    /// time, as the admin; each must be created.
    pub(crate) fn create_all(&self, objects: Vec<(String, Value)>, concurrency: usize) {
        let results = self.create_each(objects, concurrency);
        let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        assert!(
            failed.is_empty(),
            "{} creations failed, first: {}",
            failed.len(),
            failed[0]
        );
    }

    /// Create every object, `concurrency` at a time, as the admin: each
    /// outcome, in order (the error is the server's message).
    pub(crate) fn create_each(
        &self,
        objects: impl IntoIterator<Item = (String, Value)>,
        concurrency: usize,
    ) -> Vec<Result<(), String>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        runtime.block_on(async {
            let kubeconfig =
                kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .expect("kubeconfig");
            let client = kube::Client::try_from(config).expect("client");
            futures::stream::iter(objects)
                .map(|(path, body)| {
                    let client = client.clone();
                    async move {
                        let request = http::Request::post(&path)
                            .header("content-type", "application/json")
                            .body(serde_json::to_vec(&body).expect("json"))
                            .expect("request");
                        client
                            .request_text(request)
                            .await
                            .map(|_| ())
                            .map_err(|e| format!("POST {path}: {e}"))
                    }
                })
                .buffered(concurrency)
                .collect()
                .await
        })
    }

    /// A kubeconfig for a service account of the cluster: a token from the
    /// TokenRequest API (`kubectl create token`), the cluster's CA.
    pub(crate) fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=2h"]);
        let ca = self.kubectl_ok(&[
            "config",
            "view",
            "--raw",
            "--minify",
            "-o",
            "jsonpath={.clusters[0].cluster.certificate-authority-data}",
        ]);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{namespace}-{name}-{}.kubeconfig",
            std::process::id()
        ));
        let config = serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "real", "cluster": {
                "server": self.server, "certificate-authority-data": ca.trim()}}],
            "users": [{"name": name, "user": {"token": token.trim()}}],
            "contexts": [{"name": "real", "context": {"cluster": "real", "user": name}}],
            "current-context": "real",
        });
        std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json"))
            .expect("write kubeconfig");
        path
    }
}
