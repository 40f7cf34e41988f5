//! One client's connection: HTTP/1.1 keep-alive over TCP or TLS (rustls,
//! ring). The connection's driver runs inside the request future (joined
//! with it), so no task outlives a client.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;

/// Where requests go.
pub(crate) struct Target {
    addr: SocketAddr,
    host: String,
    path: String,
    tls: Option<(
        tokio_rustls::TlsConnector,
        rustls_pki_types::ServerName<'static>,
    )>,
    pub(crate) bearer: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("addr", &self.addr)
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Target {
    /// `http(s)://host:port/path`; `https` trusts `ca_pem`.
    pub(crate) fn parse(url: &str, ca_pem: Option<&str>) -> Result<Target> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| anyhow!("URL {url:?} has no scheme"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default_port = match scheme {
            "https" => 443,
            "http" => 80,
            _ => bail!("URL {url:?}: scheme must be http or https"),
        };
        let hostport = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            authority.to_string()
        } else {
            format!("{authority}:{default_port}")
        };
        let addr: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&hostport)
            .with_context(|| format!("resolving {hostport}"))?
            .next()
            .ok_or_else(|| anyhow!("{hostport} resolves to nothing"))?;
        let host_only = hostport
            .rsplit_once(':')
            .map_or(hostport.as_str(), |(h, _)| h);
        let host_only = host_only.trim_start_matches('[').trim_end_matches(']');
        let tls = if scheme == "https" {
            let mut roots = rustls::RootCertStore::empty();
            let pem = ca_pem.ok_or_else(|| anyhow!("an https URL needs --ca"))?;
            for c in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots
                    .add(c.context("parsing the CA PEM")?)
                    .context("adding the CA")?;
            }
            let config = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .context("TLS versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
            let name = rustls_pki_types::ServerName::try_from(host_only.to_string())
                .with_context(|| format!("server name {host_only:?}"))?;
            Some((tokio_rustls::TlsConnector::from(Arc::new(config)), name))
        } else {
            None
        };
        Ok(Target {
            addr,
            host: hostport.clone(),
            path: path.to_string(),
            tls,
            bearer: None,
        })
    }
}

/// A live connection: its sender and its driver, polled together.
pub(crate) struct Connection {
    sender: SendRequest<Full<Bytes>>,
    driver: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

pub(crate) async fn connect(target: &Target) -> Result<Connection> {
    let tcp = tokio::net::TcpStream::connect(target.addr)
        .await
        .with_context(|| format!("connecting to {}", target.addr))?;
    let _ = tcp.set_nodelay(true);
    match &target.tls {
        Some((connector, name)) => {
            let tls = connector
                .connect(name.clone(), tcp)
                .await
                .context("TLS handshake")?;
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
            Ok(Connection {
                sender,
                driver: Box::pin(async move {
                    let _ = conn.await;
                }),
            })
        }
        None => {
            let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
            Ok(Connection {
                sender,
                driver: Box::pin(async move {
                    let _ = conn.await;
                }),
            })
        }
    }
}

/// Sends one POST over `conn` (connecting first when there is none).
pub(crate) async fn send(
    target: &Target,
    conn: &mut Option<Connection>,
    body: Vec<u8>,
) -> Result<(u16, Bytes)> {
    if conn.is_none() {
        *conn = Some(connect(target).await?);
    }
    let Some(c) = conn.as_mut() else {
        bail!("no connection");
    };
    let mut req = http::Request::builder()
        .method("POST")
        .uri(&target.path)
        .header("host", &target.host)
        .header("content-type", "application/json");
    if let Some(t) = &target.bearer {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(Full::new(Bytes::from(body)))?;
    let exchange = async {
        let resp = c.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok::<_, anyhow::Error>((status, body))
    };
    // Drive the connection while the exchange runs; the driver only ends
    // when the connection closes.
    tokio::select! {
        r = exchange => r,
        () = &mut c.driver => Err(anyhow!("connection closed")),
    }
}
