//! The serving certificate: loaded from PEM files, or a self-signed CA and a
//! serving certificate generated at start (rcgen, ring). The CA's PEM is what
//! goes into the webhook configuration's `caBundle`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};
use crate::settings::Settings;

/// A TLS configuration for the server and the CA bundle clients trust.
#[derive(Clone)]
pub struct TlsMaterial {
    /// The rustls server configuration (ring provider, HTTP/1.1 ALPN).
    pub server_config: Arc<ServerConfig>,
    /// PEM of the CA that signed the serving certificate (for `caBundle`).
    /// With `--tls-cert`, the certificate file itself (its chain's CA must be
    /// in it, or the caller replaces this).
    pub ca_pem: String,
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Loads `settings.tls_cert`/`tls_key`, or generates a CA and a serving
    /// certificate whose SANs are the listen address (plus `127.0.0.1` and
    /// `localhost` for a wildcard address) and the webhook URL's host.
    pub fn from_settings(settings: &Settings, bound: SocketAddr) -> Result<TlsMaterial> {
        match (&settings.tls_cert, &settings.tls_key) {
            (Some(cert), Some(key)) => {
                let cert_pem = std::fs::read(cert).map_err(|e| Error::TlsFileInvalid {
                    what: "certificate",
                    path: cert.display().to_string(),
                    message: e.to_string(),
                })?;
                let key_pem = std::fs::read(key).map_err(|e| Error::TlsFileInvalid {
                    what: "key",
                    path: key.display().to_string(),
                    message: e.to_string(),
                })?;
                let certs = CertificateDer::pem_slice_iter(&cert_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| Error::TlsFileInvalid {
                        what: "certificate",
                        path: cert.display().to_string(),
                        message: e.to_string(),
                    })?;
                if certs.is_empty() {
                    return Err(Error::TlsFileInvalid {
                        what: "certificate",
                        path: cert.display().to_string(),
                        message: "no CERTIFICATE block".into(),
                    });
                }
                let key_der =
                    PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| Error::TlsFileInvalid {
                        what: "key",
                        path: key.display().to_string(),
                        message: e.to_string(),
                    })?;
                Ok(TlsMaterial {
                    server_config: server_config(certs, key_der)?,
                    ca_pem: String::from_utf8_lossy(&cert_pem).into_owned(),
                })
            }
            (Some(_), None) => Err(Error::TlsIncomplete("--tls-key")),
            (None, Some(_)) => Err(Error::TlsIncomplete("--tls-cert")),
            (None, None) => {
                let mut sans = subject_names(bound.ip());
                if let Some(host) = settings.webhook_url.as_deref().and_then(url_host)
                    && !sans.contains(&host)
                {
                    sans.push(host);
                }
                generate(sans)
            }
        }
    }
}

/// The SANs for a listen IP.
fn subject_names(ip: IpAddr) -> Vec<String> {
    let mut sans = Vec::new();
    if ip.is_unspecified() {
        sans.push("127.0.0.1".to_string());
        sans.push("localhost".to_string());
    } else {
        sans.push(ip.to_string());
        if ip.is_loopback() {
            sans.push("localhost".to_string());
        }
    }
    sans
}

/// The host of an `https://host[:port]/path` URL (IPv6 brackets removed).
pub(crate) fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// A CA and a serving certificate for `sans`.
pub fn generate(sans: Vec<String>) -> Result<TlsMaterial> {
    let ca_key = KeyPair::generate().map_err(Error::CertificateFailed)?;
    let mut ca_params =
        CertificateParams::new(Vec::<String>::new()).map_err(Error::CertificateFailed)?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "leash admission CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(Error::CertificateFailed)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate().map_err(Error::CertificateFailed)?;
    let mut params = CertificateParams::new(sans).map_err(Error::CertificateFailed)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "leash admission webhook");
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(Error::CertificateFailed)?;
    let key_der =
        PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| Error::TlsFileInvalid {
            what: "key",
            path: "(generated)".into(),
            message: e.to_string(),
        })?;
    Ok(TlsMaterial {
        server_config: server_config(vec![cert.der().clone(), ca_cert.der().clone()], key_der)?,
        ca_pem: ca_cert.pem(),
    })
}

fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>> {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(Error::TlsConfigFailed)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(Error::TlsConfigFailed)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_hosts() {
        assert_eq!(
            url_host("https://a.b:9443/validate").as_deref(),
            Some("a.b")
        );
        assert_eq!(url_host("https://[::1]:9443/x").as_deref(), Some("::1"));
        assert_eq!(url_host("https://10.0.0.1/").as_deref(), Some("10.0.0.1"));
        assert_eq!(url_host("https:///x"), None);
    }

    #[test]
    fn generated_material_and_file_errors() {
        let m = generate(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
        assert!(m.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let s = Settings {
            tls_cert: Some("/nonexistent/cert.pem".into()),
            ..Settings::default()
        };
        let e = TlsMaterial::from_settings(&s, s.listen).unwrap_err();
        assert!(e.to_string().contains("--tls-key"), "{e}");
        let s = Settings {
            tls_cert: Some("/nonexistent/cert.pem".into()),
            tls_key: Some("/nonexistent/key.pem".into()),
            ..Settings::default()
        };
        let e = TlsMaterial::from_settings(&s, s.listen).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
    }
}
