//! Helpers shared by the integration tests: starting sandboxes, kube clients,
//! a raw HTTP/1.1 client for requests kube cannot send, and object builders.

use std::net::SocketAddr;
use std::time::Duration;

use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous hang bound for one step of a test.
pub(crate) const BOUND: Duration = Duration::from_secs(30);

pub(crate) async fn start(objects: Vec<Value>) -> Sandbox {
    Sandbox::start(SandboxConfig {
        objects,
        ..SandboxConfig::default()
    })
    .await
    .expect("sandbox starts")
}

/// A kube client for `sb` without client-side retries.
pub(crate) fn client(sb: &Sandbox) -> kube::Client {
    let mut config = kube::Config::new(sb.url().parse().expect("url"));
    config.read_timeout = Some(BOUND);
    kube::Client::try_from(config).expect("client")
}

pub(crate) fn configmap(ns: &str, name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": ns, "labels": labels}, "data": {"k": "v"}})
}

/// `n` unlabelled ConfigMaps in `ns`, object `i` named `name(i)`.
pub(crate) fn configmaps(ns: &str, n: usize, name: impl Fn(usize) -> String) -> Vec<Value> {
    (0..n).map(|i| configmap(ns, &name(i), json!({}))).collect()
}

pub(crate) fn crd(plural: &str, kind: &str, short: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.leash.dev")},
        "spec": {"group": "example.leash.dev", "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "shortNames": [short]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

/// A raw HTTP response.
#[derive(Debug)]
pub(crate) struct Raw {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// The body ended before its declared end (connection dropped mid-response).
    pub(crate) truncated: bool,
}

impl Raw {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// Asserts a metav1 Status with `code` and `reason`.
    pub(crate) fn assert_status(&self, code: u16, reason: &str) {
        assert_eq!(self.status, code, "{}", String::from_utf8_lossy(&self.body));
        let v = self.json();
        assert_eq!(v["kind"], "Status", "{v}");
        assert_eq!(v["status"], "Failure", "{v}");
        assert_eq!(v["code"], code, "{v}");
        assert_eq!(v["reason"], reason, "{v}");
    }
}

/// Sends one request over a fresh connection (`Connection: close`) and reads the whole
/// response. `head` is everything before the blank line except Host/Connection/Content-Length.
pub(crate) async fn raw(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Raw {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let mut req =
            format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        let chunked = headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("transfer-encoding"));
        if !chunked && (!body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH")) {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await.expect("write head");
        // A server may answer (413) and close before reading a large body: ignore write errors.
        let _ = stream.write_all(body).await;
        let mut buf = Vec::new();
        let read_ok = stream.read_to_end(&mut buf).await.is_ok();
        parse_response(&buf, read_ok)
    };
    tokio::time::timeout(BOUND, exchange)
        .await
        .expect("raw request bounded")
}

/// A `GET` of `target` through [`raw`].
pub(crate) async fn get(addr: SocketAddr, target: &str) -> Raw {
    raw(addr, "GET", target, &[], b"").await
}

fn parse_response(buf: &[u8], read_ok: bool) -> Raw {
    let Some(split) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        // The connection closed before a whole response head arrived.
        return Raw {
            status: 0,
            headers: Vec::new(),
            body: buf.to_vec(),
            truncated: true,
        };
    };
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let rest = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let (body, truncated) = if chunked {
        dechunk(rest)
    } else {
        let len = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<usize>().ok());
        match len {
            Some(n) => (rest[..n.min(rest.len())].to_vec(), rest.len() < n),
            None => (rest.to_vec(), false),
        }
    };
    Raw {
        status,
        headers,
        body,
        truncated: truncated || !read_ok,
    }
}

fn dechunk(mut rest: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            return (out, true);
        };
        let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16);
        let Ok(size) = size else { return (out, true) };
        rest = &rest[eol + 2..];
        if size == 0 {
            return (out, false);
        }
        if rest.len() < size + 2 {
            out.extend_from_slice(&rest[..size.min(rest.len())]);
            return (out, true);
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Polls `f` until it is true, or panics after [`BOUND`].
pub(crate) async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + BOUND;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the runtime's live task count is back to `baseline` (or below).
pub(crate) async fn settles_to(baseline: usize) {
    let metrics = tokio::runtime::Handle::current().metrics();
    let deadline = tokio::time::Instant::now() + BOUND;
    loop {
        let alive = metrics.num_alive_tasks();
        if alive <= baseline {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{alive} tasks alive, baseline {baseline}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
