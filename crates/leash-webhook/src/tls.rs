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
                if let Some(host) = settings.webhook_url.as_deref().and_then(url_host) {
                    sans.push(host);
                }
                // kube-apiserver calls a Service as NAME.NAMESPACE.svc; the
                // other forms are what clients inside the cluster may use.
                if let Some(svc) = &settings.service {
                    let (n, ns) = (&svc.name, &svc.namespace);
                    sans.push(n.clone());
                    sans.push(format!("{n}.{ns}"));
                    sans.push(format!("{n}.{ns}.svc"));
                    sans.push(format!("{n}.{ns}.svc.cluster.local"));
                }
                let mut unique = Vec::with_capacity(sans.len());
                for san in sans {
                    if !unique.contains(&san) {
                        unique.push(san);
                    }
                }
                match &settings.ca {
                    Some(ca) => ca.issue(unique),
                    None => generate(unique),
                }
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

/// A CA that signs serving certificates: its certificate (what goes into
/// `caBundle`) and its key, PEM. Replicas that share one (leash serve keeps
/// it in a Secret) present certificates every webhook configuration they
/// write trusts, whichever replica wrote it last and whichever replica a
/// Service sends a request to.
#[derive(Clone, PartialEq, Eq)]
pub struct CaMaterial {
    /// The CA certificate, PEM.
    pub cert_pem: String,
    /// The CA's private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for CaMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaMaterial")
            .field("cert_pem_bytes", &self.cert_pem.len())
            .finish_non_exhaustive()
    }
}

/// The CA's subject: a serving certificate's issuer must name it exactly.
const CA_COMMON_NAME: &str = "leash admission CA";

fn ca_params() -> Result<CertificateParams> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(Error::CertificateFailed)?;
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

impl CaMaterial {
    /// A new self-signed CA.
    pub fn generate() -> Result<CaMaterial> {
        let key = KeyPair::generate().map_err(Error::CertificateFailed)?;
        let cert = ca_params()?
            .self_signed(&key)
            .map_err(Error::CertificateFailed)?;
        Ok(CaMaterial {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Checks that the certificate and key parse and belong together
    /// (what a Secret holds is read back through this).
    pub fn validate(&self) -> std::result::Result<(), String> {
        let key = KeyPair::from_pem(&self.key_pem).map_err(|e| format!("tls.key: {e}"))?;
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| format!("tls.crt: {e}"))?;
        let [cert] = certs.as_slice() else {
            return Err(format!(
                "tls.crt: expected one CERTIFICATE block, found {}",
                certs.len()
            ));
        };
        // The DER of the certificate holds the public key's bytes as is.
        let public = key.public_key_raw();
        if !cert.as_ref().windows(public.len()).any(|w| w == public) {
            return Err("tls.key is not the key of tls.crt".into());
        }
        Ok(())
    }

    /// A serving certificate for `sans`, signed by this CA; the server
    /// presents it with the CA certificate.
    pub fn issue(&self, sans: Vec<String>) -> Result<TlsMaterial> {
        let invalid = |message: String| Error::TlsFileInvalid {
            what: "CA",
            path: "(shared CA)".into(),
            message,
        };
        self.validate().map_err(invalid)?;
        let ca_key = KeyPair::from_pem(&self.key_pem).map_err(Error::CertificateFailed)?;
        let ca_der = CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .map_err(|e| invalid(e.to_string()))?;
        let issuer = Issuer::new(ca_params()?, ca_key);
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
            server_config: server_config(vec![cert.der().clone(), ca_der], key_der)?,
            ca_pem: self.cert_pem.clone(),
        })
    }
}

/// A new CA and a serving certificate for `sans`.
pub fn generate(sans: Vec<String>) -> Result<TlsMaterial> {
    CaMaterial::generate()?.issue(sans)
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
