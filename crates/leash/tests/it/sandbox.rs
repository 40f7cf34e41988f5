//! `leash sandbox` as a process: the URL on the first stdout line, serving
//! generated objects over HTTP, a kubeconfig, graceful exit 0 on
//! SIGINT/SIGTERM, and exit 2 naming the bad value for bad flags.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;

use serde_json::Value;

use crate::support::{BOUND, SandboxProcess, leash};

/// A plain HTTP/1.1 GET of `path` (with an optional bearer token): status
/// and body (de-chunked if needed).
fn http_get(url: &str, path: &str, token: Option<&str>) -> (u16, Vec<u8>) {
    let authority = url.strip_prefix("http://").expect("http URL");
    let mut stream = TcpStream::connect(authority).expect("connect to the sandbox");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let body = &raw[split + 4..];
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_vec()
    };
    (status, body)
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size_text = String::from_utf8_lossy(&body[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .expect("hex chunk size");
        body = &body[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

fn get_json(url: &str, path: &str, token: Option<&str>) -> Value {
    let (status, body) = http_get(url, path, token);
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).expect("JSON body")
}

#[test]
fn sandbox_prints_its_url_serves_generated_pods_and_exits_0_on_sigint() {
    let sandbox = SandboxProcess::start(&["--generate", "pods=50", "--seed", "3"]);
    assert!(
        sandbox.url.starts_with("http://127.0.0.1:") && !sandbox.url.ends_with(":0"),
        "first stdout line is not the base URL: {:?}",
        sandbox.url
    );
    let list = get_json(&sandbox.url, "/api/v1/pods", None);
    assert_eq!(list["kind"], "PodList");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 50);
    let namespaces: std::collections::BTreeSet<&str> = items
        .iter()
        .map(|p| p["metadata"]["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(
        namespaces.len(),
        4,
        "pods spread over the 4 default generated namespaces"
    );
    // An open watch must not keep the server from shutting down, and must
    // end cleanly (the chunked body's last chunk), not be cut off.
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list rv");
    let mut watch = open_stream(
        &sandbox.url,
        &format!("/api/v1/pods?watch=true&resourceVersion={rv}"),
    );

    let (exit, rest_of_stdout, stderr) = sandbox.signal_and_wait_for_output("INT");
    assert_eq!(
        exit.code(),
        Some(0),
        "exit after SIGINT: {exit:?}; stderr:\n{stderr}"
    );
    // README: nothing but the URL goes to stdout, from start to exit.
    assert_eq!(rest_of_stdout, "", "more than the URL on stdout");
    assert!(
        stderr.contains("Pod 50"),
        "summary lacks the pod count:\n{stderr}"
    );
    assert!(stderr.contains("SIGINT"), "{stderr}");
    let mut rest = Vec::new();
    watch
        .read_to_end(&mut rest)
        .expect("read the end of the watch");
    assert!(
        rest.ends_with(b"0\r\n\r\n"),
        "the watch was cut off instead of ended: {:?}",
        String::from_utf8_lossy(&rest)
    );
}

/// Send a GET for a streaming `path` and return the connection once the
/// response headers (status 200, chunked) have arrived.
fn open_stream(url: &str, path: &str) -> TcpStream {
    let authority = url.strip_prefix("http://").expect("http URL");
    let mut stream = TcpStream::connect(authority).expect("connect to the sandbox");
    stream.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream
            .read_exact(&mut byte)
            .expect("read the watch headers");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    stream
}

#[test]
fn sandbox_writes_a_kubeconfig_requires_its_token_loads_data_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(
        data.join("team.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team-a\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: team-a\ndata:\n  color: blue\n",
    )
    .unwrap();
    let sandbox = SandboxProcess::start(&[
        "--token",
        "s3cret-token",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    let written = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written before the URL");
    assert!(
        written.contains(&sandbox.url),
        "kubeconfig lacks {}:\n{written}",
        sandbox.url
    );
    assert!(
        written.contains("s3cret-token"),
        "kubeconfig lacks the token:\n{written}"
    );
    assert_private(&kubeconfig);

    let (status, _) = http_get(
        &sandbox.url,
        "/api/v1/namespaces/team-a/configmaps/settings",
        None,
    );
    assert_eq!(status, 401, "a request without the token must be refused");
    let cm = get_json(
        &sandbox.url,
        "/api/v1/namespaces/team-a/configmaps/settings",
        Some("s3cret-token"),
    );
    assert_eq!(cm["data"]["color"], "blue");

    let (exit, stderr) = sandbox.signal_and_wait("TERM");
    assert_eq!(
        exit.code(),
        Some(0),
        "exit after SIGTERM: {exit:?}; stderr:\n{stderr}"
    );
}

#[cfg(unix)]
fn assert_private(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "the kubeconfig holds a token: mode {mode:o}"
    );
}

#[cfg(not(unix))]
fn assert_private(_path: &Path) {}

#[test]
fn sandbox_bad_flags_exit_2_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-manifests");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n",
    )
    .unwrap();
    let homeless = dir.path().join("homeless.yaml");
    std::fs::write(
        &homeless,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lost\n  namespace: no-such-namespace\n",
    )
    .unwrap();
    let cases: Vec<(Vec<String>, Vec<String>)> = vec![
        (args(&["--fail-rate", "1.5"]), args(&["--fail-rate", "1.5"])),
        (
            args(&["--throttle-rate", "lots"]),
            args(&["--throttle-rate", "lots"]),
        ),
        (args(&["--latency", "20"]), args(&["--latency", "20"])),
        (
            args(&["--listen", "localhost:80:80"]),
            args(&["--listen", "localhost:80:80"]),
        ),
        (
            args(&["--generate", "gizmos=3"]),
            args(&["gizmos", "deployments.apps"]),
        ),
        (args(&["--crds", "ten"]), args(&["--crds", "ten"])),
        (
            vec!["--data".into(), missing.display().to_string()],
            vec![missing.display().to_string()],
        ),
        (
            vec!["--data".into(), broken.display().to_string()],
            vec![broken.display().to_string(), "document 1".into()],
        ),
        (
            vec!["--data".into(), homeless.display().to_string()],
            args(&["no-such-namespace", "object 1 of those loaded by --data"]),
        ),
    ];
    // An address that cannot be bound: this test holds it.
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().to_string();
    let mut cases = cases;
    // With the OS's reason (issue 38: a bind error dropped it).
    cases.push((
        args(&["--listen", &taken]),
        args(&[&taken, "Address already in use"]),
    ));
    for (argv, needles) in cases {
        let output = leash()
            .arg("sandbox")
            .args(&argv)
            .output()
            .expect("run leash sandbox");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{argv:?}: {:?}\n{stderr}",
            output.status
        );
        assert!(output.stdout.is_empty(), "{argv:?} printed on stdout");
        for needle in needles {
            assert!(
                stderr.contains(&needle),
                "{argv:?}: stderr lacks {needle:?}:\n{stderr}"
            );
        }
    }
}

/// Issue 38: logs written to a file or a pipe carry no ANSI colour codes
/// (they did: `leash serve 2> leash.log` held escape sequences). The
/// warning of a sandbox listening beyond loopback without `--token` is a
/// log line; stderr here is a pipe.
#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    use std::io::BufRead as _;
    let mut child = crate::support::ChildGuard(
        crate::support::leash_piped("sandbox", &["--listen", "0.0.0.0:0"])
            // Colours are not off for want of a terminal only where NO_COLOR says so.
            .env_remove("NO_COLOR")
            .spawn()
            .expect("run leash sandbox"),
    );
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    assert!(url.starts_with("http://"), "the URL line: {url:?}");
    let status = crate::support::sigterm_and_wait(&mut child);
    let mut stderr = String::new();
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("without --token"), "the log line: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "an escape code in the log: {stderr:?}"
    );
}

fn args(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// README, `leash sandbox`: a second signal during shutdown exits 130
/// without waiting for it. A client asks for a list far larger than the
/// sockets' buffers and stops reading after its first bytes, so the
/// graceful shutdown the first signal starts waits on that response (up to
/// its drain bound); once the listener is closed (the shutdown has begun),
/// the second signal ends the process at once.
#[test]
fn a_second_signal_during_shutdown_exits_130() {
    let sandbox = SandboxProcess::start(&["--generate", "pods=6000"]);
    let authority = sandbox.url.strip_prefix("http://").unwrap().to_owned();
    let mut held = TcpStream::connect(&authority).unwrap();
    held.set_read_timeout(Some(BOUND)).unwrap();
    write!(
        held,
        "GET /api/v1/pods HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n\r\n"
    )
    .unwrap();
    let mut status_line = [0u8; 12];
    held.read_exact(&mut status_line).unwrap();
    assert_eq!(&status_line, b"HTTP/1.1 200", "the list is being sent");

    crate::support::send_signal(&sandbox.child.0, "TERM");
    let start = std::time::Instant::now();
    while TcpStream::connect(&authority).is_ok() {
        assert!(start.elapsed() < BOUND, "the listener never closed");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let (status, stderr) = sandbox.signal_and_wait("INT");
    assert_eq!(status.code(), Some(130), "stderr:\n{stderr}");
    assert!(stderr.contains("second signal"), "{stderr}");
    drop(held);
}
