//! The HTTPS client of admission webhooks: the server verified against the
//! webhook's `caBundle` only, HTTP/1.1 driven inside the caller's future
//! (nothing is spawned), connections kept alive between calls in a
//! [`Pool`] as kube-apiserver's client keeps them (a call on a kept
//! connection costs no TCP or TLS handshake).
//!
//! An idle connection is not driven while it waits in the pool (there is no
//! task to drive it); a call that takes it first polls it, and drops it when
//! the server has closed it meanwhile. A call whose kept connection fails
//! before the answer is read is made again, once, on a new connection: an
//! AdmissionReview may be sent twice, which webhooks must tolerate anyway
//! (kube-apiserver retries too, and the review's uid names it).
//!
//! # Invariants
//! 1. Nothing is spawned: a connection's future is polled only inside the
//!    call that uses it ([`post`], `Pool::take`). Dropping a call drops the
//!    connection in use; it is never put back half-used.
//! 2. [`Pool`]'s idle map is behind a `std::sync::Mutex` held only to pop
//!    or push an idle connection (and prune expired ones); the checks that
//!    poll a taken connection and all I/O run after the guard is dropped.
//!    No guard lives across an await. At most `IDLE_PER_SERVER`
//!    connections are kept per key, each for at most `IDLE_FOR`.
//! 3. `CONFIGS` (TLS configurations by caBundle) is a `OnceLock`'d
//!    `std::sync::Mutex` held only for one lookup or one insert; the
//!    configuration is built between the two with no lock held (two
//!    callers may both build one; the last insert wins). Cleared past 64
//!    bundles.
//! 4. `NEXT_ENDPOINT` is a relaxed `AtomicUsize` counter that only spreads
//!    a Service's calls over its endpoints; nothing else depends on it.
//!
//! # Lock order
//! No two locks are held together: the pool's lock and `CONFIGS`' lock
//! are each taken alone.

use std::collections::HashMap;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt as _;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Uri, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::webhook::Target;

/// Largest webhook response read (kube-apiserver's request limit).
const MAX_RESPONSE: usize = 3 * 1024 * 1024;

/// Where one call goes.
#[derive(Debug)]
pub(crate) struct Endpoint {
    /// The URL as kube-apiserver names it in errors, with `?timeout=Ns`.
    pub(crate) url: String,
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    authority: String,
    path_and_query: String,
}

/// The next endpoint a Service's calls go to.
static NEXT_ENDPOINT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The endpoint of `target`; `services` maps `namespace/name` to the base URL a
/// service reference is reached at. Errors say what is wrong with the configuration.
pub(crate) fn endpoint(
    target: &Target,
    services: &HashMap<String, String>,
    timeout: Duration,
) -> Result<Endpoint, String> {
    let timeout = format!("timeout={}s", timeout.as_secs());
    match target {
        Target::Invalid(why) => Err(why.clone()),
        Target::Url(url) => {
            let (host, port, path) = split_https(url, "clientConfig.url")?;
            let path_and_query = with_query(&path, &timeout);
            let authority = authority(&host, port);
            Ok(Endpoint {
                url: format!("https://{authority}{path_and_query}"),
                server_name: server_name(&host)?,
                host,
                port,
                authority,
                path_and_query,
            })
        }
        Target::Service {
            namespace,
            name,
            port,
            path,
        } => {
            let key = format!("{namespace}/{name}");
            let bases = services.get(&key).ok_or_else(|| {
                format!(
                    "service {key} is not known to the sandbox (map it to a URL with --webhook-service {key}=https://HOST:PORT)"
                )
            })?;
            // Endpoints in turn; one counter for all services is enough
            // to spread calls.
            let endpoints: Vec<&str> = bases.split(',').map(str::trim).collect();
            let turn = NEXT_ENDPOINT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let base = endpoints[turn % endpoints.len()];
            let (host, real_port, base_path) =
                split_https(base, &format!("the URL of service {key}"))?;
            let path = format!("{}{path}", base_path.trim_end_matches('/'));
            let path = if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            };
            let path_and_query = with_query(&path, &timeout);
            let dns = format!("{name}.{namespace}.svc");
            let authority = format!("{dns}:{port}");
            Ok(Endpoint {
                url: format!("https://{authority}{path_and_query}"),
                server_name: server_name(&dns)?,
                host,
                port: real_port,
                authority,
                path_and_query,
            })
        }
    }
}

fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn with_query(path_and_query: &str, param: &str) -> String {
    if path_and_query.contains('?') {
        format!("{path_and_query}&{param}")
    } else {
        format!("{path_and_query}?{param}")
    }
}

/// `https://host[:port][/path][?query]` into host (IPv6 without brackets), port
/// (default 443) and path with query.
fn split_https(url: &str, what: &str) -> Result<(String, u16, String), String> {
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("{what} {url:?} is not a valid URL: {e}"))?;
    match uri.scheme_str() {
        Some("https") => {}
        Some(other) => {
            return Err(format!(
                "{what} {url:?}: 'https' is the only allowed URL scheme (got {other:?})"
            ));
        }
        None => return Err(format!("{what} {url:?} is not an absolute https URL")),
    }
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("{what} {url:?} has no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".to_string());
    Ok((host, uri.port_u16().unwrap_or(443), path))
}

fn server_name(host: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host:?} is not a valid TLS server name: {e}"))
}

/// Configurations already built, by caBundle: one shared configuration
/// per bundle keeps rustls's session cache, so calls after the first resume
/// their TLS session instead of a full handshake (kube-apiserver keeps its
/// connections alive for the same reason). Bounded: cleared past 64 bundles.
static CONFIGS: std::sync::OnceLock<
    std::sync::Mutex<std::collections::HashMap<String, Arc<ClientConfig>>>,
> = std::sync::OnceLock::new();

/// A TLS client configuration trusting only the certificates of `ca_bundle`
/// (base64 of PEM, as `clientConfig.caBundle` holds them), shared per bundle.
pub(crate) fn tls_config(ca_bundle: &str) -> Result<Arc<ClientConfig>, String> {
    let configs = CONFIGS.get_or_init(Default::default);
    if let Some(c) = configs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(ca_bundle)
    {
        return Ok(c.clone());
    }
    let config = build_tls_config(ca_bundle)?;
    let mut map = configs.lock().unwrap_or_else(|e| e.into_inner());
    if map.len() >= 64 {
        map.clear();
    }
    map.insert(ca_bundle.to_string(), config.clone());
    Ok(config)
}

fn build_tls_config(ca_bundle: &str) -> Result<Arc<ClientConfig>, String> {
    if ca_bundle.trim().is_empty() {
        return Err("clientConfig.caBundle is empty: the sandbox verifies webhook servers against caBundle only, never the system roots".into());
    }
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle.trim())
        .map_err(|e| format!("clientConfig.caBundle is not valid base64: {e}"))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert
            .map_err(|e| format!("unable to load root certificates: clientConfig.caBundle: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("unable to load root certificates: clientConfig.caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err(
            "unable to load root certificates: clientConfig.caBundle holds no PEM certificate"
                .into(),
        );
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

type Conn = hyper::client::conn::http1::Connection<
    TokioIo<tokio_rustls::client::TlsStream<TcpStream>>,
    Full<Bytes>,
>;

/// One HTTP/1.1 connection: the request half and the connection future.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    conn: Pin<Box<Conn>>,
}

/// Idle connections kept past their call.
struct Idle {
    connection: Connection,
    since: Instant,
}

/// How many idle connections are kept per server.
const IDLE_PER_SERVER: usize = 16;

/// How long an idle connection is kept (kube-apiserver's transport keeps
/// them 90 s; shorter here, as nothing drives them meanwhile).
const IDLE_FOR: Duration = Duration::from_secs(30);

/// Connections kept alive between calls, by server and TLS configuration
/// (one per `caBundle`). The lock is held only to take or put back a
/// connection, never across I/O.
#[derive(Default)]
pub(crate) struct Pool {
    idle: Mutex<HashMap<(String, usize), Vec<Idle>>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Pool")
            .field("idle", &idle.values().map(Vec::len).sum::<usize>())
            .finish()
    }
}

impl Pool {
    fn key(ep: &Endpoint, tls: &Arc<ClientConfig>) -> (String, usize) {
        (
            format!("{}|{:?}", ep.authority, ep.server_name),
            Arc::as_ptr(tls) as usize,
        )
    }

    /// A kept connection that is still open and ready for a request.
    async fn take(&self, key: &(String, usize)) -> Option<Connection> {
        loop {
            let idle = {
                let mut map = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let list = map.get_mut(key)?;
                let idle = list.pop();
                if list.is_empty() {
                    map.remove(key);
                }
                idle?
            };
            if idle.since.elapsed() > IDLE_FOR {
                continue;
            }
            let mut c = idle.connection;
            // A connection the server closed ends when polled.
            if c.conn.as_mut().now_or_never().is_some() {
                continue;
            }
            let ready = tokio::select! {
                biased;
                r = c.sender.ready() => r.is_ok(),
                _ = c.conn.as_mut() => false,
            };
            if ready {
                return Some(c);
            }
        }
    }

    fn put(&self, key: (String, usize), connection: Connection) {
        let mut map = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = map.entry(key).or_default();
        list.retain(|i| i.since.elapsed() <= IDLE_FOR);
        if list.len() < IDLE_PER_SERVER {
            list.push(Idle {
                connection,
                since: Instant::now(),
            });
        }
    }
}

/// POSTs `body` (an AdmissionReview) to `ep` and returns the response body,
/// on a kept connection of `pool` when there is one. Errors read as
/// client-go's: `Post "URL": why`.
///
/// # Cancel safety
/// Cancel safe: dropping it closes the connection in use.
pub(crate) async fn post(
    pool: &Pool,
    ep: &Endpoint,
    tls: Arc<ClientConfig>,
    body: Bytes,
) -> Result<Bytes, String> {
    let key = Pool::key(ep, &tls);
    if let Some(kept) = pool.take(&key).await {
        match exchange(ep, kept, body.clone()).await {
            Ok((answer, Some(connection))) => {
                pool.put(key, connection);
                return answer;
            }
            Ok((answer, None)) => return answer,
            // The kept connection failed before the answer: once more, anew.
            Err(_) => {}
        }
    }
    let connection = dial(ep, tls).await?;
    match exchange(ep, connection, body).await {
        Ok((answer, Some(connection))) => {
            pool.put(key, connection);
            answer
        }
        Ok((answer, None)) => answer,
        Err(why) => Err(format!("Post \"{}\": {why}", ep.url)),
    }
}

/// A new connection to `ep`.
async fn dial(ep: &Endpoint, tls: Arc<ClientConfig>) -> Result<Connection, String> {
    let fail = |why: String| format!("Post \"{}\": {why}", ep.url);
    let tcp = TcpStream::connect((ep.host.as_str(), ep.port))
        .await
        .map_err(|e| {
            fail(format!(
                "dial tcp {}: connect: {e}",
                authority(&ep.host, ep.port)
            ))
        })?;
    let _ = tcp.set_nodelay(true);
    let stream = TlsConnector::from(tls)
        .connect(ep.server_name.clone(), tcp)
        .await
        .map_err(|e| {
            fail(format!(
                "tls: failed to verify certificate or handshake: {e}"
            ))
        })?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| fail(e.to_string()))?;
    Ok(Connection {
        sender,
        conn: Box::pin(conn),
    })
}

/// One request on `c`. `Err`: the exchange failed before an answer was
/// read (the reason). `Ok`: the answer (a non-2xx status is an error of
/// its own), and the connection when it can be kept.
async fn exchange(
    ep: &Endpoint,
    c: Connection,
    body: Bytes,
) -> Result<(Result<Bytes, String>, Option<Connection>), String> {
    let Connection {
        mut sender,
        mut conn,
    } = c;
    let request = Request::post(ep.path_and_query.as_str())
        .header(header::HOST, ep.authority.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let (result, open) = {
        let exchange = async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| format!("reading the response: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, body))
        };
        let mut exchange = pin!(exchange);
        // The connection is driven here, beside the exchange, until the answer
        // is read; a connection that ended meanwhile is not kept.
        tokio::select! {
            biased;
            r = exchange.as_mut() => (r, true),
            c = conn.as_mut() => match c {
                Err(e) => (Err(e.to_string()), false),
                Ok(()) => (exchange.await, false),
            },
        }
    };
    let (status, body) = result?;
    let kept = open.then_some(Connection { sender, conn });
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let text: String = text.chars().take(512).collect();
        return Ok((
            Err(format!(
                "Post \"{}\": an error on the server ({text:?}) has prevented the request from succeeding (HTTP {status})",
                ep.url
            )),
            kept,
        ));
    }
    Ok((Ok(body), kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn services() -> HashMap<String, String> {
        HashMap::from([(
            "ns/hook".to_string(),
            "https://127.0.0.1:9443/base/".to_string(),
        )])
    }

    #[test]
    fn urls_and_services_become_endpoints() {
        let t = Duration::from_secs(10);
        let ep = endpoint(
            &Target::Url("https://localhost:8443/v?x=1".into()),
            &services(),
            t,
        )
        .unwrap();
        assert_eq!(ep.url, "https://localhost:8443/v?x=1&timeout=10s");
        assert_eq!((ep.host.as_str(), ep.port), ("localhost", 8443));
        let svc = Target::Service {
            namespace: "ns".into(),
            name: "hook".into(),
            port: 443,
            path: "/validate".into(),
        };
        let ep = endpoint(&svc, &services(), t).unwrap();
        assert_eq!(ep.url, "https://hook.ns.svc:443/base/validate?timeout=10s");
        assert_eq!((ep.host.as_str(), ep.port), ("127.0.0.1", 9443));
        assert_eq!(
            ep.server_name,
            ServerName::try_from("hook.ns.svc".to_string()).unwrap()
        );
    }

    #[test]
    fn bad_targets_name_the_problem() {
        let t = Duration::from_secs(1);
        let e = endpoint(&Target::Url("http://127.0.0.1:1/".into()), &services(), t).unwrap_err();
        assert!(e.contains("'https' is the only allowed URL scheme"), "{e}");
        let e = endpoint(&Target::Url("not a url".into()), &services(), t).unwrap_err();
        assert!(e.contains("is not a valid URL"), "{e}");
        let svc = Target::Service {
            namespace: "other".into(),
            name: "x".into(),
            port: 443,
            path: "/".into(),
        };
        let e = endpoint(&svc, &services(), t).unwrap_err();
        assert!(e.contains("service other/x is not known"), "{e}");
    }

    #[test]
    fn bad_ca_bundles_name_the_problem() {
        assert!(tls_config("").unwrap_err().contains("caBundle is empty"));
        assert!(tls_config("%%%").unwrap_err().contains("not valid base64"));
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        assert!(
            tls_config(&not_pem)
                .unwrap_err()
                .contains("holds no PEM certificate")
        );
    }
}
