//! `service.caBundle`: an HTTPS service whose certificate is signed by a
//! private CA is trusted with the bundle (rustls with the `ring` provider,
//! no process-wide provider installed), and refused without it.
//!
//! Fixtures in `tls/`: a test-only CA and a server certificate for
//! 127.0.0.1 signed by it (made with openssl; they protect nothing).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use leash_context::{EntryState, Error, Store, StoreConfig};
use leash_runtime::Scope;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::common::{HANG_BOUND, entry, eventually, within};

const CA: &str = include_str!("tls/ca.pem");
const SERVER_CERT: &str = include_str!("tls/server.pem");
const SERVER_KEY: &str = include_str!("tls/server.key");

/// A TLS listener for axum: handshakes in `accept`, skipping failed ones.
struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn start_https(scope: &Scope) -> String {
    let certs = CertificateDer::pem_slice_iter(SERVER_CERT.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/secure", tcp.local_addr().unwrap());
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(config)),
    };
    let router = Router::new().route(
        "/secure",
        get(|| async { ([("content-type", "application/json")], r#"{"secret": 42}"#) }),
    );
    let token = scope.token().clone();
    scope.spawn("https service", async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(token.cancelled_owned())
            .await
    });
    url
}

fn https_entry(name: &str, url: &str, ca_bundle: Option<&str>) -> leash_context::ContextEntry {
    let bundle = ca_bundle
        .map(|pem| {
            let indented: String = pem.lines().map(|l| format!("        {l}\n")).collect();
            format!("      caBundle: |\n{indented}")
        })
        .unwrap_or_default();
    entry(&format!(
        "apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata: {{name: {name}}}
spec:
  apiCall:
    service:
      url: {url}
{bundle}    refreshInterval: 1h
    retryLimit: 1
  projections:
  - {{name: secret, jmesPath: secret}}
"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_ca_bundle_is_trusted_for_tls() {
    let scope = Scope::new();
    let url = start_https(&scope).await;
    let store = Store::new(
        StoreConfig {
            ready_timeout: Duration::from_secs(5),
            ..StoreConfig::default()
        },
        None,
    );
    store.add(https_entry("trusted", &url, Some(CA))).unwrap();
    store.add(https_entry("untrusted", &url, None)).unwrap();

    let snapshot = within("TLS data", HANG_BOUND, store.wait_ready("trusted"))
        .await
        .unwrap();
    assert_eq!(snapshot.projections["secret"], json!(42));

    // Without the bundle the system roots do not know the private CA.
    let status = eventually("the TLS error", HANG_BOUND, || {
        store.status("untrusted").filter(|s| s.last_error.is_some())
    })
    .await;
    assert_eq!(status.state, EntryState::Pending);
    let error = status.last_error.unwrap();
    assert!(error.contains("TLS"), "{error}");
    assert!(matches!(
        store.get("untrusted"),
        Err(Error::NotReady { .. })
    ));

    store.shutdown().await.unwrap();
    scope.shutdown().await.unwrap();
}

/// What `leash serve` calls for a rule's `apiCall` `service`
/// (`call_service`) trusts the entry's `caBundle` for https, and without it
/// the system roots, which do not know the private CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_service_calls_trust_their_ca_bundle() {
    let scope = Scope::new();
    let url = start_https(&scope).await;
    let answer =
        leash_context::call_service(&url, Some(CA), leash_context::spec::Method::Get, None)
            .await
            .unwrap();
    assert_eq!(answer, json!({"secret": 42}));
    let err = leash_context::call_service(&url, None, leash_context::spec::Method::Get, None)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("TLS") && err.contains(&url), "{err}");
    scope.shutdown().await.unwrap();
}
