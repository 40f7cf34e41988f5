//! Issue 38: failures `leash serve` used to hide or wait out.
//! - A missing `--config-namespace` / `--lease-namespace` is named, in the
//!   log and in `/readyz`, until it is created; a Lease that cannot be taken
//!   is logged at warn with the API server's reason.
//! - A clean SIGTERM releases the Lease: another replica takes over at once,
//!   not after the lease duration.
//! - Clients that send slowly, stop halfway or idle do not hold connections
//!   of the webhook, the health and metrics endpoints, or the sandbox.

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{
    BOUND, ChildGuard, crd_sandbox, free_port, http_get, http_post_json, leash, repo, send_signal,
    sigterm_and_wait, wait_exit, wait_ready,
};

/// How long the servers may take to let a stalled client go (their bounds
/// are 10 s; generous for a shared CPU).
const LET_GO: Duration = Duration::from_secs(30);

fn lease(sb: &leash_sandbox::Sandbox, namespace: &str) -> Option<Value> {
    sb.store()
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            Some(namespace),
            "leash-reports",
        )
        .ok()
}

fn holder(sb: &leash_sandbox::Sandbox, namespace: &str) -> Option<String> {
    lease(sb, namespace).and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

/// Waits until `what` holds (a hang guard: [`BOUND`]), saying `why` and
/// `log()` if it never does.
async fn eventually(why: &str, log: impl Fn() -> String, mut what: impl FnMut() -> bool) {
    let start = Instant::now();
    while !what() {
        assert!(
            start.elapsed() < BOUND,
            "{why}: not within {BOUND:?}; leash serve said:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Item 5: with `--config-namespace` and `--lease-namespace` missing, serve
/// keeps running, says which namespace and which flag at warn, `/readyz`
/// answers 503 naming them, and each failure to take the Lease is logged at
/// warn with the API server's reason (not at debug, not a whole body).
/// Once they are created, `/readyz` is 200 and the Lease is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_namespaces_are_named_until_they_exist() {
    let sb = crd_sandbox(|_| true, Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.stderr");
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let health = format!("127.0.0.1:{}", free_port());
    let mut serve = ChildGuard(
        leash()
            .args(["serve", "--server", &sb.url(), "--components", "reports"])
            .args(["--config-namespace", "leash-config", "--leader-elect"])
            .args([
                "--lease-namespace",
                "leash-leases",
                "--lease-identity",
                "one",
            ])
            .args(["--health", &health])
            .stdout(Stdio::null())
            .stderr(File::create(&log_path).unwrap())
            .spawn()
            .expect("run leash serve"),
    );
    let config_reason = "namespace \"leash-config\" (--config-namespace) does not exist: create it (kubectl create namespace leash-config) or point --config-namespace at leash's namespace";
    let lease_reason = "namespace \"leash-leases\" (--lease-namespace) does not exist: create it (kubectl create namespace leash-leases) or point --lease-namespace at leash's namespace";
    let readyz = || {
        if TcpStream::connect(&health).is_err() {
            return (0, String::new());
        }
        tokio::task::block_in_place(|| http_get(&health, "/readyz"))
    };
    eventually("/readyz naming both namespaces", &log, || {
        let (code, body) = readyz();
        code == 503 && body.contains(config_reason) && body.contains(lease_reason)
    })
    .await;
    let warned = |needle: &str| {
        log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains(needle))
    };
    eventually("the missing namespaces logged at warn", &log, || {
        warned(config_reason) && warned(lease_reason)
    })
    .await;
    // The Lease: its name and the Status message, on one short line.
    eventually("the Lease failure logged at warn", &log, || {
        log().lines().any(|l| {
            l.contains("WARN")
                && l.contains("cannot take the Lease leash-leases/leash-reports")
                && l.contains("namespaces \"leash-leases\" not found")
                && l.len() < 400
        })
    })
    .await;
    assert!(serve.0.try_wait().unwrap().is_none(), "serve keeps running");

    for ns in ["leash-config", "leash-leases"] {
        sb.store()
            .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .unwrap();
    }
    eventually("/readyz 200 once the namespaces exist", &log, || {
        readyz().0 == 200
    })
    .await;
    eventually("the Lease taken", &log, || {
        holder(&sb, "leash-leases").as_deref() == Some("one")
    })
    .await;
    let status = tokio::task::block_in_place(|| sigterm_and_wait(&mut serve));
    assert!(status.success(), "leash serve: {status}\n{}", log());
    sb.shutdown().await.unwrap();
}

/// Item 8: SIGTERM to the replica holding the Lease releases it, so the
/// other replica takes it within a few seconds (its retry period, 2 s), not
/// after the lease duration (15 s) as after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_lease_over_at_once() {
    let sb = crd_sandbox(|_| true, Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let start_replica = |id: &str| {
        let health = format!("127.0.0.1:{}", free_port());
        let log_path = dir.path().join(format!("{id}.stderr"));
        let child = leash()
            .args(["serve", "--server", &sb.url(), "--components", "reports"])
            .args(["--leader-elect", "--lease-namespace", "kyverno"])
            .args(["--lease-identity", id, "--health", &health])
            .stdout(Stdio::null())
            .stderr(File::create(&log_path).unwrap())
            .spawn()
            .expect("run leash serve");
        (ChildGuard(child), health, log_path)
    };
    let mut a = start_replica("a");
    let mut b = start_replica("b");
    let logs = |paths: &[&std::path::PathBuf]| {
        paths
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    let (pa, pb) = (a.2.clone(), b.2.clone());
    let log = || logs(&[&pa, &pb]);
    wait_ready(&a.1).await;
    wait_ready(&b.1).await;
    eventually("a holder", &log, || holder(&sb, "kyverno").is_some()).await;
    let first = holder(&sb, "kyverno").unwrap();
    let (leader, other) = if first == "a" {
        (&mut a, "b")
    } else {
        (&mut b, "a")
    };
    // Both replicas are up; the follower has been trying for a while.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(holder(&sb, "kyverno").as_deref(), Some(first.as_str()));
    let sent = Instant::now();
    send_signal(&leader.0.0, "TERM");
    let handed_over = loop {
        if holder(&sb, "kyverno").as_deref() == Some(other) {
            break sent.elapsed();
        }
        assert!(
            sent.elapsed() < BOUND,
            "{other} never took the Lease; logs:\n{}",
            log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        handed_over < Duration::from_secs(5),
        "{other} took the Lease {handed_over:?} after SIGTERM to {first} (lease duration 15 s): not released; logs:\n{}",
        log()
    );
    let status =
        tokio::task::block_in_place(|| wait_exit(&mut leader.0.0, BOUND, "exit after SIGTERM"));
    assert!(status.success(), "{first}: {status}\n{}", log());
    let released = std::fs::read_to_string(&leader.2).unwrap_or_default();
    assert!(
        released.contains("released the Lease kyverno/leash-reports"),
        "{released}"
    );
    for replica in [&mut a, &mut b] {
        if replica.0.0.try_wait().unwrap().is_none() {
            send_signal(&replica.0.0, "TERM");
            let status = tokio::task::block_in_place(|| {
                wait_exit(&mut replica.0.0, BOUND, "exit after SIGTERM")
            });
            assert!(status.success(), "{status}\n{}", log());
        }
    }
    sb.shutdown().await.unwrap();
}

/// A request head and half its body: `Content-Length` says 2,000 bytes,
/// 1,000 are sent, then nothing.
fn half_body(path: &str) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2000\r\n\r\n"
    )
    .into_bytes();
    r.extend(std::iter::repeat_n(b' ', 1000));
    r
}

/// Reads until the server closes the connection, at most until `deadline`:
/// what it sent, or an error saying it was still open.
fn read_until_closed(
    stream: &mut impl Read,
    socket: &TcpStream,
    deadline: Instant,
) -> Result<String, String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // Past the deadline, one short last look (closed meanwhile?).
        let left = deadline.saturating_duration_since(Instant::now());
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(20))))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return Ok(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "still open; received {:?}",
                        String::from_utf8_lossy(&got)
                    ));
                }
            }
            // Reset, or a TLS session ended without close_notify: closed.
            Err(_) => return Ok(String::from_utf8_lossy(&got).into_owned()),
        }
    }
}

/// Asserts every one of `conns` is closed by the server by `deadline`.
fn assert_all_let_go<S: Read>(what: &str, conns: &mut [(S, TcpStream)], deadline: Instant) {
    let mut open = Vec::new();
    for (i, (stream, socket)) in conns.iter_mut().enumerate() {
        if let Err(e) = read_until_closed(stream, socket, deadline) {
            open.push(format!("{i}: {e}"));
        }
    }
    assert!(
        open.is_empty(),
        "{what}: {} of {} connections still open after {LET_GO:?}: {}",
        open.len(),
        conns.len(),
        open.join("; ")
    );
}

/// A TLS client trusting only `ca_pem`, for the webhook at 127.0.0.1.
fn tls_connect(
    addr: &str,
    config: &Arc<rustls::ClientConfig>,
) -> (
    rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    TcpStream,
) {
    let tcp = TcpStream::connect(addr).unwrap();
    let socket = tcp.try_clone().unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    (rustls::StreamOwned::new(conn, tcp), socket)
}

/// Item 7, the admission webhook: 50 TLS clients that send a review's
/// headers and half its body are answered 408 and let go within the body
/// bound, while a pod created meanwhile is still judged by the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_lets_go_of_clients_that_stop_mid_body() {
    let policies = leash_sandbox::manifests::load_manifests(&[
        repo().join("deploy/examples/policies/disallow-latest-tag.yaml")
    ])
    .unwrap();
    let sb = crd_sandbox(|_| true, policies).await;
    let webhook = format!("127.0.0.1:{}", free_port());
    let health = format!("127.0.0.1:{}", free_port());
    let mut serve = ChildGuard(
        leash()
            .args(["serve", "--server", &sb.url(), "--components", "admission"])
            .args(["--admission-listen", &webhook, "--health", &health])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run leash serve"),
    );
    wait_ready(&health).await;
    let configuration = sb
        .store()
        .list(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            None,
        )
        .unwrap()
        .into_iter()
        .next()
        .expect("the webhook configuration");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(
            configuration["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject as _;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );
    let api = sb.url().trim_start_matches("http://").to_owned();
    tokio::task::block_in_place(|| {
        let mut conns = Vec::new();
        for _ in 0..50 {
            let (mut tls, socket) = tls_connect(&webhook, &config);
            tls.write_all(&half_body("/validate/fail")).unwrap();
            tls.flush().unwrap();
            conns.push((tls, socket));
        }
        let deadline = Instant::now() + LET_GO;
        // Meanwhile the webhook judges: a pod with a `latest` image is denied.
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]}});
        let (code, body) = http_post_json(&api, "/api/v1/namespaces/default/pods", &pod);
        assert!(
            code >= 400 && body.contains("disallow-latest-tag"),
            "{code} {body}"
        );
        // Each stalled client is answered 408, then closed.
        let (first, socket) = &mut conns[0];
        let answer = read_until_closed(first, socket, deadline).unwrap_or_else(|e| {
            panic!("the webhook: a client that stopped mid-body is {e} after {LET_GO:?}")
        });
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert_all_let_go("the webhook", &mut conns[1..], deadline);
    });
    let status = tokio::task::block_in_place(|| sigterm_and_wait(&mut serve));
    assert!(status.success(), "{status}");
    sb.shutdown().await.unwrap();
}

/// Item 7, the health and metrics endpoints: clients that send part of
/// their headers, headers and half a body, or a request and then nothing
/// (an idle keep-alive) are let go within the header bound, while
/// `/healthz` and `/metrics` answer meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_metrics_let_go_of_slow_and_idle_clients() {
    let sb = crd_sandbox(|_| true, Vec::new()).await;
    let health = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut serve = ChildGuard(
        leash()
            .args(["serve", "--server", &sb.url(), "--components", "reports"])
            .args(["--health", &health, "--metrics", &metrics])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run leash serve"),
    );
    wait_ready(&health).await;
    tokio::task::block_in_place(|| {
        let mut conns = Vec::new();
        for (addr, path) in [(&health, "/readyz"), (&metrics, "/metrics")] {
            for i in 0..30 {
                let mut s = TcpStream::connect(addr).unwrap();
                let sent: Vec<u8> = match i % 3 {
                    // Part of the headers.
                    0 => format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n").into_bytes(),
                    1 => half_body(path),
                    // A whole request on a keep-alive connection, then idle.
                    _ => format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes(),
                };
                s.write_all(&sent).unwrap();
                let socket = s.try_clone().unwrap();
                conns.push((s, socket));
            }
        }
        let deadline = Instant::now() + LET_GO;
        assert_eq!(http_get(&health, "/healthz").0, 200);
        let (code, body) = http_get(&metrics, "/metrics");
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("# EOF"), "{body}");
        assert_all_let_go("the health and metrics endpoints", &mut conns, deadline);
    });
    let status = tokio::task::block_in_place(|| sigterm_and_wait(&mut serve));
    assert!(status.success(), "{status}");
    sb.shutdown().await.unwrap();
}

/// Item 7, the sandbox: 50 clients that send a create's headers and half
/// its body are let go within the body bound, a GET is answered meanwhile,
/// and a watch opened before them still streams afterwards (the bound is
/// on reading requests, not on responses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_lets_go_of_clients_that_stop_mid_body_and_watches_go_on() {
    let sb = leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig::default())
        .await
        .unwrap();
    let addr = sb.url().trim_start_matches("http://").to_owned();
    tokio::task::block_in_place(|| {
        let mut watch = TcpStream::connect(&addr).unwrap();
        write!(
            watch,
            "GET /api/v1/namespaces/default/configmaps?watch=true HTTP/1.1\r\nHost: {addr}\r\n\r\n"
        )
        .unwrap();
        let mut conns = Vec::new();
        for _ in 0..50 {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.write_all(&half_body("/api/v1/namespaces/default/configmaps"))
                .unwrap();
            let socket = s.try_clone().unwrap();
            conns.push((s, socket));
        }
        let opened = Instant::now();
        let deadline = opened + LET_GO;
        assert_eq!(http_get(&addr, "/api/v1/namespaces").0, 200);
        let (first, socket) = &mut conns[0];
        let answer = read_until_closed(first, socket, deadline).unwrap_or_else(|e| {
            panic!("the sandbox: a client that stopped mid-body is {e} after {LET_GO:?}")
        });
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert_all_let_go("the sandbox", &mut conns[1..], deadline);
        assert!(
            opened.elapsed() >= Duration::from_secs(5),
            "let go after {:?}: sooner than its bound",
            opened.elapsed()
        );
        // The watch outlived the body bound and still streams.
        sb.store()
            .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "after-the-bound", "namespace": "default"}}))
            .unwrap();
        watch.set_read_timeout(Some(BOUND)).unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("after-the-bound") {
            let n = watch.read(&mut buf).expect("the watch is still open");
            assert!(
                n > 0,
                "the watch was closed: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    });
    sb.shutdown().await.unwrap();
}
