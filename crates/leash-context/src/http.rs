//! HTTP(S) calls to external services (`spec.apiCall.service`).
//!
//! One connection per call, driven inside the calling task: hyper's
//! connection future is polled together with the request future, so no task
//! is spawned (house rule 1) and dropping the call (cancellation) closes the
//! socket at once. TLS is rustls with the `ring` provider passed explicitly,
//! so no process-wide provider is needed (FACTS: a second provider makes
//! rustls panic); `caBundle` replaces the system roots for that service.
//!
//! # Invariants
//! 1. No task is spawned: the connection future lives and dies with the call.
//! 2. The system roots are loaded once (`OnceLock`), outside any lock of ours.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::entry::ServiceTarget;
use crate::error::{Error, Result};
use crate::spec::Method;

/// Largest response body accepted (bytes).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// One call of a policy's `apiCall` `service`: `url` (http or https),
/// `ca_bundle` (PEM; the system roots without it), `method` and the JSON
/// `body` of a POST; the answer's body parsed as JSON. What `leash serve`
/// calls for a rule's context entry (a GlobalContextEntry keeps its own
/// client).
///
/// # Errors
/// A bad URL or `caBundle`, and every failure of the call, naming the URL.
pub async fn call_service(
    url: &str,
    ca_bundle: Option<&str>,
    method: Method,
    body: Option<&Value>,
) -> Result<Value> {
    let fail = |reason: String| Error::HttpFailed {
        method: method.as_http().to_string(),
        url: url.to_string(),
        reason,
    };
    let uri: http::Uri = url.parse().map_err(|e| fail(format!("bad URL: {e}")))?;
    if uri.host().is_none() || !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(fail("needs an http or https URL with a host".to_owned()));
    }
    let ca_bundle = match ca_bundle.map(str::trim).filter(|p| !p.is_empty()) {
        Some(pem) => Some(Arc::new(
            crate::entry::parse_ca_bundle(pem).map_err(|e| fail(format!("caBundle: {e}")))?,
        )),
        None => None,
    };
    let target = ServiceTarget {
        url: uri,
        headers: http::HeaderMap::new(),
        ca_bundle,
    };
    ServiceClient::new(&target)?.call(method, body).await
}

/// A client for one service target: the TLS configuration is built once.
#[derive(Clone, Debug)]
pub(crate) struct ServiceClient {
    target: ServiceTarget,
    tls: Option<Arc<ClientConfig>>,
}

impl ServiceClient {
    pub(crate) fn new(target: &ServiceTarget) -> Result<ServiceClient> {
        let tls = if target.url.scheme_str() == Some("https") {
            let roots = match &target.ca_bundle {
                Some(certs) => certs.as_slice(),
                None => system_roots(),
            };
            Some(tls_config(roots).map_err(|reason| Error::HttpFailed {
                method: "-".to_owned(),
                url: target.url.to_string(),
                reason,
            })?)
        } else {
            None
        };
        Ok(ServiceClient {
            target: target.clone(),
            tls,
        })
    }

    /// One call: connect, send, read the whole body, parse it as JSON.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future drops the connection; nothing is kept.
    pub(crate) async fn call(&self, method: Method, body: Option<&Value>) -> Result<Value> {
        let url = &self.target.url;
        let fail = |reason: String| Error::HttpFailed {
            method: method.as_http().to_string(),
            url: url.to_string(),
            reason,
        };
        let host = url.host().ok_or_else(|| fail("no host".to_owned()))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = url
            .port_u16()
            .unwrap_or(if self.tls.is_some() { 443 } else { 80 });
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| fail(format!("connect: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let request = self.build_request(method, body).map_err(fail)?;
        let (status, bytes) = match &self.tls {
            None => exchange(tcp, request).await,
            Some(config) => {
                let name = ServerName::try_from(host.clone())
                    .map_err(|e| fail(format!("server name {host:?}: {e}")))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| fail(format!("TLS: {e}")))?;
                exchange(tls, request).await
            }
        }
        .map_err(fail)?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
            return Err(fail(format!("status {status}: {text}")));
        }
        serde_json::from_slice(&bytes).map_err(|source| Error::InvalidResponse {
            url: url.to_string(),
            source,
        })
    }

    fn build_request(
        &self,
        method: Method,
        body: Option<&Value>,
    ) -> std::result::Result<http::Request<Full<Bytes>>, String> {
        let url = &self.target.url;
        let path = url.path_and_query().map_or("/", |p| p.as_str());
        let authority = url
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let mut builder = http::Request::builder()
            .method(method.as_http())
            .uri(path)
            .header(http::header::HOST, authority)
            .header(http::header::ACCEPT, "application/json");
        let bytes = match body {
            Some(value) => {
                builder = builder.header(http::header::CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(value).map_err(|e| e.to_string())?)
            }
            None => Bytes::new(),
        };
        let mut request = builder.body(Full::new(bytes)).map_err(|e| e.to_string())?;
        for (key, value) in &self.target.headers {
            request.headers_mut().append(key.clone(), value.clone());
        }
        Ok(request)
    }
}

/// Send `request` on `io` and read the whole response. The connection
/// future is polled in this task alongside the request.
async fn exchange<T>(
    io: T,
    request: http::Request<Full<Bytes>>,
) -> std::result::Result<(http::StatusCode, Bytes), String>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP handshake: {e}"))?;
    let response = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("send: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| format!("read body: {e}"))?
            .to_bytes();
        Ok::<_, String>((status, body))
    };
    tokio::pin!(response);
    tokio::pin!(connection);
    tokio::select! {
        biased;
        result = &mut response => result,
        ended = &mut connection => {
            // The connection ended first (closed after the response, or
            // failed): whatever the response future can still read is in
            // its buffers.
            ended.map_err(|e| format!("connection: {e}"))?;
            response.await
        }
    }
}

fn tls_config(roots: &[CertificateDer<'static>]) -> std::result::Result<Arc<ClientConfig>, String> {
    let mut store = rustls::RootCertStore::empty();
    let (added, _ignored) = store.add_parsable_certificates(roots.iter().cloned());
    if added == 0 {
        return Err("no usable CA certificate".to_owned());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The system's root certificates, loaded once per process.
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}
