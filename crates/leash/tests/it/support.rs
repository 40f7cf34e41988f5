//! Shared by the subcommand modules: the `leash` command, output text,
//! signals and bounded waits, and a `leash sandbox` process.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Hang bound for anything that should take seconds (generous: debug build,
/// shared CPU).
pub(crate) const BOUND: Duration = Duration::from_secs(60);

/// The `leash` binary with no stdin, and no `KUBECONFIG` or `LEASH_LOG` from
/// the environment the tests run in.
pub(crate) fn leash() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leash"));
    cmd.env_remove("KUBECONFIG")
        .env_remove("LEASH_LOG")
        .stdin(Stdio::null());
    cmd
}

/// `leash SUBCOMMAND ARGS` with stdout and stderr piped.
pub(crate) fn leash_piped(subcommand: &str, args: &[&str]) -> Command {
    let mut cmd = leash();
    cmd.arg(subcommand)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Both of the command's outputs, labelled, for an assertion's message.
pub(crate) fn said(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", stdout(out), stderr(out))
}

/// Asserts that `text` holds `want`, printing it otherwise.
#[track_caller]
pub(crate) fn assert_has(text: &str, want: &str) {
    assert!(text.contains(want), "{text}");
}

/// Asserts that the command's stdout holds `want`, printing it otherwise.
#[track_caller]
pub(crate) fn assert_stdout_has(out: &Output, want: &str) {
    assert_has(&stdout(out), want);
}

/// Asserts that the command's stderr holds `want`, printing it otherwise.
#[track_caller]
pub(crate) fn assert_stderr_has(out: &Output, want: &str) {
    assert_has(&stderr(out), want);
}

/// Asserts that the command exited `code` (printing its stdout and stderr
/// otherwise) and reads its stdout as one JSON document.
#[track_caller]
pub(crate) fn json_of_exit(out: &Output, code: i32) -> serde_json::Value {
    assert_eq!(out.status.code(), Some(code), "{}", said(out));
    serde_json::from_str(&stdout(out)).unwrap()
}

/// `leash test ARGS DIR`, asserted to pass (exit 0, printing stdout and
/// stderr otherwise) with `want` in its stdout.
#[track_caller]
pub(crate) fn assert_test_passes(dir: &Path, args: &[&str], want: &str) -> Output {
    let out = leash().arg("test").args(args).arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", said(&out));
    assert_stdout_has(&out, want);
    out
}

/// `leash test DIR`, asserted to fail (exit 1, printing stdout and stderr
/// otherwise) with `want` in its stdout.
#[track_caller]
pub(crate) fn assert_test_fails(dir: &Path, want: &str) -> Output {
    let out = leash().arg("test").arg(dir).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert_stdout_has(&out, want);
    out
}

/// `leash ARGS PATH` to completion.
pub(crate) fn leash_on(args: &[&str], path: &Path) -> Output {
    leash().args(args).arg(path).output().unwrap()
}

/// `leash apply POLICY -r RESOURCES ARGS` to completion.
pub(crate) fn apply(policy: &Path, resources: &Path, args: &[&str]) -> Output {
    apply_given(policy, "-r", resources, args)
}

/// `leash apply POLICY FLAG RESOURCES ARGS` to completion (FLAG one of the
/// spellings of `--resource`).
pub(crate) fn apply_given(policy: &Path, flag: &str, resources: &Path, args: &[&str]) -> Output {
    leash()
        .arg("apply")
        .arg(policy)
        .arg(flag)
        .arg(resources)
        .args(args)
        .output()
        .unwrap()
}

/// Send `-SIGNAL` (`INT`, `TERM`) to `child` with kill(1).
pub(crate) fn send_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} failed");
}

/// SIGTERM to `child`, then its exit (within [`BOUND`]).
pub(crate) fn sigterm_and_wait(child: &mut ChildGuard) -> ExitStatus {
    send_signal(&child.0, "TERM");
    wait_exit(&mut child.0, BOUND, "exit after SIGTERM")
}

/// Poll every 10 ms until `child` exits; after `bound`, kill it and panic
/// saying `what` did not happen.
pub(crate) fn wait_exit(child: &mut Child, bound: Duration, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            panic!("no {what} within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the child if a test fails before it exits.
pub(crate) struct ChildGuard(pub(crate) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A running `leash sandbox` (killed on drop if a test fails before it
/// exits), its URL, and its whole stderr once it has exited.
pub(crate) struct SandboxProcess {
    pub(crate) child: ChildGuard,
    pub(crate) url: String,
    stderr: mpsc::Receiver<String>,
    /// What stdout held after the URL line, once it closed.
    rest_of_stdout: mpsc::Receiver<String>,
}

impl SandboxProcess {
    /// Start `leash sandbox ARGS` and wait for the URL on stdout.
    pub(crate) fn start(args: &[&str]) -> SandboxProcess {
        let mut child = ChildGuard(
            leash_piped("sandbox", args)
                .spawn()
                .expect("run leash sandbox"),
        );
        let stdout = child.0.stdout.take().expect("piped stdout");
        let stderr = child.0.stderr.take().expect("piped stderr");
        let (line_tx, line_rx) = mpsc::channel();
        let (rest_tx, rest_rx) = mpsc::channel();
        #[allow(
            clippy::disallowed_methods,
            reason = "a test thread drains the child process pipe; it ends when the pipe closes"
        )]
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = line_tx.send(lines.next());
            // Keep draining so the child never blocks on a full pipe.
            let rest: Vec<String> = lines.map_while(Result::ok).collect();
            let _ = rest_tx.send(rest.join("\n"));
        });
        let (err_tx, err_rx) = mpsc::channel();
        #[allow(
            clippy::disallowed_methods,
            reason = "a test thread drains the child process pipe; it ends when the pipe closes"
        )]
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            let _ = err_tx.send(text);
        });
        match line_rx.recv_timeout(BOUND) {
            Ok(Some(Ok(url))) => SandboxProcess {
                child,
                url,
                stderr: err_rx,
                rest_of_stdout: rest_rx,
            },
            other => {
                drop(child);
                let stderr = err_rx.recv_timeout(BOUND).unwrap_or_default();
                panic!("no URL line from leash sandbox ({other:?}); stderr:\n{stderr}");
            }
        }
    }

    /// Send `signal` (`INT`, `TERM`) and wait for the exit: its status and
    /// the whole stderr.
    pub(crate) fn signal_and_wait(self, signal: &str) -> (ExitStatus, String) {
        let (exit, _, stderr) = self.signal_and_wait_for_output(signal);
        (exit, stderr)
    }

    /// As [`SandboxProcess::signal_and_wait`], also with what stdout held
    /// after the URL line.
    pub(crate) fn signal_and_wait_for_output(
        mut self,
        signal: &str,
    ) -> (ExitStatus, String, String) {
        send_signal(&self.child.0, signal);
        let exit = wait_exit(
            &mut self.child.0,
            BOUND,
            &format!("leash sandbox exit after SIG{signal}"),
        );
        let rest = self.rest_of_stdout.recv_timeout(BOUND).unwrap_or_default();
        let stderr = self.stderr.recv_timeout(BOUND).unwrap_or_default();
        (exit, rest, stderr)
    }
}

/// Whether kubectl is installed; under `CI=true` a missing kubectl fails
/// the test instead (.ci/run installs it).
pub(crate) fn kubectl_installed() -> bool {
    if Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return true;
    }
    // CI must run this test (.ci/run installs kubectl): fail there.
    let ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    assert!(
        !ci,
        "CI=true and kubectl is not installed: this test must run in CI"
    );
    eprintln!(
        "skipped: kubectl is not on PATH (build it: testenv/build.sh kubectl, then PATH=$PWD/testenv/bin:$PATH)"
    );
    false
}

/// A free loopback port (bound, then released) so that a restarted
/// webhook listens where the registered configuration points.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A minimal HTTP GET on 127.0.0.1: (status, body).
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
    http_request(addr, "GET", path, None)
}

/// POSTs the JSON `body` to `path` on `addr`: the status and the body.
pub(crate) fn http_post_json(addr: &str, path: &str, body: &serde_json::Value) -> (u16, String) {
    http_request(addr, "POST", path, Some(&body.to_string()))
}

fn http_request(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    match body {
        None => write!(s, "{head}\r\n"),
        Some(b) => write!(
            s,
            "{head}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
            b.len()
        ),
    }
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The first connection to `listener`; panics if `child` exits first or
/// nothing connects within `bound` (a hang guard).
pub(crate) fn accept_within(
    listener: &std::net::TcpListener,
    child: &mut ChildGuard,
    bound: std::time::Duration,
) -> std::net::TcpStream {
    listener.set_nonblocking(true).unwrap();
    let start = std::time::Instant::now();
    loop {
        match listener.accept() {
            Ok((stream, _)) => return stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("accept: {e}"),
        }
        if let Some(status) = child.0.try_wait().unwrap() {
            panic!("leash exited ({status:?}) before connecting");
        }
        assert!(
            start.elapsed() < bound,
            "nothing connected within {bound:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Run `cmd` to completion within [`BOUND`] (killed and a panic after it),
/// with its output.
pub(crate) fn output_within(mut cmd: Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start leash");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    // The pipes are read meanwhile; a child killed after the bound closes
    // them, so the readers end and the scope joins them.
    std::thread::scope(|s| {
        let stdout = s.spawn(move || {
            let mut buf = Vec::new();
            let _ = out.read_to_end(&mut buf);
            buf
        });
        let stderr = s.spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            buf
        });
        let status = wait_exit(&mut child, BOUND, "exit");
        Output {
            status,
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        }
    })
}

/// Legacy discovery of one resource (`pods`), a 503 Status (which kube's
/// own retry layer would retry) for everything else.
pub(crate) fn unavailable(path: &str) -> (u16, String) {
    match path.split('?').next().unwrap_or("") {
        "/api" => (200, r#"{"kind":"APIVersions","versions":["v1"]}"#.into()),
        "/apis" => (
            200,
            r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#.into(),
        ),
        "/api/v1" => (
            200,
            core_resources(&[("pods", "Pod", true)]),
        ),
        _ => (
            503,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"unavailable","reason":"ServiceUnavailable","code":503}"#.into(),
        ),
    }
}

/// The core group's legacy discovery document (`/api/v1`) serving
/// `(plural, kind, namespaced)` resources, each listable and watchable.
pub(crate) fn core_resources(resources: &[(&str, &str, bool)]) -> String {
    let resources: Vec<serde_json::Value> = resources
        .iter()
        .map(|(plural, kind, namespaced)| {
            serde_json::json!({"name": plural, "singularName": kind.to_lowercase(),
                "namespaced": namespaced, "kind": kind, "verbs": ["get", "list", "watch"]})
        })
        .collect();
    serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
        "resources": resources})
    .to_string()
}

/// [`with_server`] answering as [`unavailable`].
pub(crate) fn with_unavailable_server(
    client: impl FnOnce(&str) -> Output,
) -> (Output, Vec<String>) {
    with_server(unavailable, client)
}

/// A fake API server on 127.0.0.1 whose `answer` gives each request path
/// its status and JSON body (a 429 with `Retry-After: 1`), recording each
/// request's path in order. Runs
/// `client` (given the URL) while serving; returns its output and the
/// request paths.
pub(crate) fn with_server(
    answer: impl Fn(&str) -> (u16, String) + Sync,
    client: impl FnOnce(&str) -> Output,
) -> (Output, Vec<String>) {
    use std::io::Write as _;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let paths = Mutex::new(Vec::new());
    let done = AtomicBool::new(false);
    let serve = |stream: std::net::TcpStream| {
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(BOUND)).unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return;
            }
            // Headers up to the blank line (GETs carry no body).
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let path = request_line.split(' ').nth(1).unwrap_or("").to_owned();
            let (status, body) = answer(&path);
            paths.lock().unwrap().push(path);
            // A 429 asks for a one-second wait, as API Priority and
            // Fairness does.
            let retry_after = if status == 429 {
                "retry-after: 1\r\n"
            } else {
                ""
            };
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{retry_after}content-length: {}\r\n\r\n",
                body.len()
            );
            if writer.write_all(head.as_bytes()).is_err()
                || writer.write_all(body.as_bytes()).is_err()
            {
                return;
            }
        }
    };
    // Set on every exit of the client (a panic included), so that the
    // accept loop ends and the scope can join it.
    struct SetOnDrop<'a>(&'a AtomicBool);
    impl Drop for SetOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let out = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        s.spawn(|| serve(stream));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let _done = SetOnDrop(&done);
        client(&url)
    });
    (out, paths.into_inner().unwrap())
}

/// The repository's root.
pub(crate) fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A sandbox serving the CRDs of deploy/crds that `keep` keeps, with the
/// `kyverno` namespace and `objects`.
pub(crate) async fn crd_sandbox(
    keep: impl Fn(&serde_json::Value) -> bool,
    objects: Vec<serde_json::Value>,
) -> leash_sandbox::Sandbox {
    let mut all: Vec<serde_json::Value> =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")])
            .unwrap()
            .into_iter()
            .filter(|crd| keep(crd))
            .collect();
    all.push(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "kyverno"}}));
    all.extend(objects);
    leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig {
        objects: all,
        ..leash_sandbox::SandboxConfig::default()
    })
    .await
    .unwrap()
}

/// leash's `Validating` or `Mutating` webhook configuration, as `sb`'s
/// store holds it.
pub(crate) fn webhook_cfg(
    sb: &leash_sandbox::Sandbox,
    kind: &str,
) -> leash_sandbox::Result<serde_json::Value> {
    sb.store().get(
        "admissionregistration.k8s.io/v1",
        &format!("{kind}WebhookConfiguration"),
        None,
        &format!("leash-{}-webhook-cfg", kind.to_lowercase()),
    )
}

/// Waits until `/readyz` on `health` answers 200 (a hang guard: [`BOUND`]).
pub(crate) async fn wait_ready(health: &str) {
    let start = Instant::now();
    loop {
        let ready = std::net::TcpStream::connect(health).is_ok()
            && tokio::task::block_in_place(|| http_get(health, "/readyz")).0 == 200;
        if ready {
            return;
        }
        assert!(start.elapsed() < BOUND, "/readyz never 200");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `leash serve --components admission` against the API server at `url`,
/// once ready (its webhook configuration written from the policies).
pub(crate) async fn serve_admission_ready(url: &str) -> ChildGuard {
    serve_admission_ready_with(url, &[]).await
}

/// As [`serve_admission_ready`], with more flags.
pub(crate) async fn serve_admission_ready_with(url: &str, flags: &[&str]) -> ChildGuard {
    let health = format!("127.0.0.1:{}", free_port());
    let server = ChildGuard(
        leash()
            .args(["serve", "--server", url, "--components", "admission"])
            .args(["--admission-listen", "127.0.0.1:0", "--health", &health])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run leash serve"),
    );
    wait_ready(&health).await;
    server
}
