//! Sigstore's trust root, fetched and verified through TUF: what keyless
//! verification trusts when a policy gives no roots of its own, as Kyverno
//! (cosign) uses Sigstore's public TUF repository (`--tufMirror` and
//! `--tufRoot` pointing it elsewhere).
//!
//! A [`TrustRoot`] loads the repository's metadata from a mirror
//! (`file:///dir` or `http(s)://host/path`: metadata at `MIRROR/`, targets
//! at `MIRROR/targets/`), starting from an initial trusted `root.json`
//! shipped out of band, verifies it with tough (TUF's root rotation,
//! signatures, thresholds, versions, expiry, target hashes and lengths),
//! then reads the `trusted_root.json` target and keeps its Fulcio
//! certificates ([`SigstoreRoots`]).
//!
//! tough is pinned to 0.18, the last release on ring: 0.19 and later build
//! aws-lc-rs, which this project refuses (ring only). Its `http` feature
//! is off (it would build reqwest 0.11): HTTP mirrors go through this
//! module's transport over the reqwest that oci-client builds already.
//!
//! # Invariants
//! 1. Initialised once: any number of concurrent callers of
//!    [`TrustRoot::get`] wait for one initialisation (tokio's `OnceCell`),
//!    and every caller after it gets the same [`SigstoreRoots`] without a
//!    fetch (the seed's defect was verify goroutines racing on
//!    `tuf.Initialize()`).
//! 2. A failed initialisation is not kept: its error is given to the
//!    callers that waited for it, and the next caller initialises again
//!    (a mirror that was down is not remembered as down). Callers that
//!    waited for a failure do not each retry in turn, which would queue
//!    them behind one timeout after another.
//! 3. Bounded: an initialisation ends within [`TrustRootSource::timeout`],
//!    with an error naming the mirror.
//! 4. No task is spawned and no lock is held across an `.await`: the
//!    initialisation runs in the caller's future (a caller cancelled
//!    mid-initialisation drops it, and a waiting caller initialises; tough
//!    reads files through `tokio::fs`, on tokio's blocking pool), and the
//!    `std::sync::Mutex` keeping the last failure is held only to read or
//!    write it.
//!
//! Every certificate of the trusted root's certificate authorities is a
//! trust anchor (the intermediates too, and the CAs whose `validFor` has
//! ended, which still verify older certificates): the keyless verifier
//! ([`crate::cosign`]) checks a signing certificate's chain, its validity
//! at signing time and its identity against them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures::TryStreamExt as _;
use leash_runtime::OnceCell;
use reqwest::Url;
use tough::{IntoVec as _, TargetName, Transport, TransportError, TransportErrorKind};

/// Where a [`TrustRoot`] comes from.
#[derive(Debug, Clone)]
pub struct TrustRootSource {
    /// The initial trusted `root.json` (its bytes), shipped out of band:
    /// TUF establishes trust from it up to the mirror's newest root.
    pub root: Vec<u8>,
    /// The repository's base URL: `file:///dir` or `http(s)://host/path`;
    /// metadata at `MIRROR/`, targets at `MIRROR/targets/`.
    pub mirror: String,
    /// The bound on one initialisation, every round trip included.
    pub timeout: Duration,
}

/// What keyless verification needs from Sigstore's trust root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigstoreRoots {
    /// Every certificate of every certificate authority of the
    /// `trusted_root.json` target (`certificateAuthorities[].certChain.
    /// certificates[].rawBytes`), PEM: a keyless trust's roots, each one a
    /// trust anchor.
    pub fulcio_pem: String,
}

/// Sigstore's trust root from one [`TrustRootSource`], loaded once on
/// first use and kept. Share it by `Arc`.
#[derive(Debug)]
pub struct TrustRoot {
    source: TrustRootSource,
    roots: OnceCell<Arc<SigstoreRoots>>,
    /// The last failed initialisation: how many failed so far, and the
    /// last one's error.
    failed: Mutex<(u64, String)>,
    initialisations: AtomicU64,
}

/// The name of the target holding Sigstore's trust root.
const TRUSTED_ROOT: &str = "trusted_root.json";

impl TrustRoot {
    /// A trust root from `source`; loads nothing until [`Self::get`].
    pub fn new(source: TrustRootSource) -> TrustRoot {
        TrustRoot {
            source,
            roots: OnceCell::new(),
            failed: Mutex::new((0, String::new())),
            initialisations: AtomicU64::new(0),
        }
    }

    /// The mirror, as given.
    pub fn mirror(&self) -> &str {
        &self.source.mirror
    }

    /// The trust root: the one loaded already, else loaded now (once for
    /// every concurrent caller). The error names the mirror and the step
    /// that failed; a failure is given to the callers that waited for it,
    /// and the next caller loads again.
    pub async fn get(&self) -> Result<Arc<SigstoreRoots>, String> {
        if let Some(roots) = self.roots.get() {
            return Ok(roots.clone());
        }
        // Failures seen before this caller asked: one after is this
        // caller's to share, having waited for it.
        let seen = self.failures().0;
        self.roots
            .get_or_try_init(|| async {
                let (failures, error) = self.failures();
                if failures != seen {
                    return Err(error);
                }
                // Relaxed: a statistic, ordering nothing (the cell orders
                // the initialisations themselves).
                self.initialisations.fetch_add(1, Ordering::Relaxed);
                match load(&self.source).await {
                    Ok(roots) => Ok(Arc::new(roots)),
                    Err(error) => {
                        let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                        *failed = (failed.0 + 1, error.clone());
                        Err(error)
                    }
                }
            })
            .await
            .cloned()
    }

    /// The trust root when loaded, without waiting.
    pub fn cached(&self) -> Option<Arc<SigstoreRoots>> {
        self.roots.get().cloned()
    }

    /// How many initialisations ran (began), failed ones included.
    pub fn initialisations(&self) -> u64 {
        // Relaxed: a statistic, ordering nothing.
        self.initialisations.load(Ordering::Relaxed)
    }

    /// How many initialisations failed, and the last one's error.
    fn failures(&self) -> (u64, String) {
        // A panic while it was held left nothing half-written (one
        // assignment).
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Loads `source`'s trust root within its timeout.
async fn load(source: &TrustRootSource) -> Result<SigstoreRoots, String> {
    let mirror = source.mirror.as_str();
    match tokio::time::timeout(source.timeout, load_unbounded(source)).await {
        Ok(answer) => answer.map_err(|e| format!("Sigstore trust root from {mirror}: {e}")),
        Err(_) => Err(format!(
            "Sigstore trust root from {mirror}: no answer within {:?}",
            source.timeout
        )),
    }
}

/// Loads `source`'s trust root; the error names the step.
async fn load_unbounded(source: &TrustRootSource) -> Result<SigstoreRoots, String> {
    let base = source.mirror.trim_end_matches('/');
    let url = |path: &str| {
        Url::parse(&format!("{base}/{path}")).map_err(|e| format!("invalid mirror URL: {e}"))
    };
    let (metadata, targets) = (url("")?, url("targets/")?);
    let loader = tough::RepositoryLoader::new(&source.root, metadata.clone(), targets);
    let loader = match metadata.scheme() {
        "file" => loader.transport(tough::FilesystemTransport),
        "http" | "https" => loader.transport(HttpTransport::new(source.timeout)?),
        scheme => {
            return Err(format!(
                "unsupported mirror URL scheme {scheme:?} (file, http or https)"
            ));
        }
    };
    // tough's default datastore: a temporary directory, removed with the
    // repository (the trust root is loaded once per process).
    let repository = loader
        .load()
        .await
        .map_err(|e| format!("loading TUF metadata: {e}"))?;
    let name = TargetName::new(TRUSTED_ROOT).map_err(|e| format!("{TRUSTED_ROOT}: {e}"))?;
    let target = repository
        .read_target(&name)
        .await
        .map_err(|e| format!("reading target {TRUSTED_ROOT}: {e}"))?
        .ok_or_else(|| format!("the TUF repository has no target {TRUSTED_ROOT}"))?;
    // The stream checks the target's length and hashes: its bytes are
    // used only once it ended without an error.
    let bytes = target
        .into_vec()
        .await
        .map_err(|e| format!("reading target {TRUSTED_ROOT}: {e}"))?;
    fulcio_pem(&bytes).map(|fulcio_pem| SigstoreRoots { fulcio_pem })
}

/// The certificates of every certificate authority of a
/// `trusted_root.json` (Sigstore's `TrustedRoot`), PEM.
fn fulcio_pem(trusted_root: &[u8]) -> Result<String, String> {
    use x509_cert::der::Decode as _;
    let what = |e: String| format!("target {TRUSTED_ROOT}: {e}");
    let root: serde_json::Value =
        serde_json::from_slice(trusted_root).map_err(|e| what(format!("not JSON: {e}")))?;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut pem = String::new();
    let authorities = root["certificateAuthorities"]
        .as_array()
        .ok_or_else(|| what("no certificateAuthorities".into()))?;
    for (i, ca) in authorities.iter().enumerate() {
        let certificates = ca["certChain"]["certificates"]
            .as_array()
            .ok_or_else(|| what(format!("certificateAuthorities[{i}] has no certChain")))?;
        for (j, cert) in certificates.iter().enumerate() {
            let at = format!("certificateAuthorities[{i}].certChain.certificates[{j}]");
            let der = cert["rawBytes"]
                .as_str()
                .ok_or_else(|| what(format!("{at} has no rawBytes")))
                .and_then(|raw| {
                    b64.decode(raw)
                        .map_err(|e| what(format!("{at}: rawBytes is not base64: {e}")))
                })?;
            x509_cert::Certificate::from_der(&der)
                .map_err(|e| what(format!("{at}: not a certificate: {e}")))?;
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in b64.encode(&der).as_bytes().chunks(64) {
                // Base64 is ASCII.
                pem.push_str(std::str::from_utf8(line).unwrap_or_default());
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
    }
    if pem.is_empty() {
        return Err(what("no certificate authority certificates".into()));
    }
    Ok(pem)
}

/// What a [`Transport`] answers (tough's `TransportStream`, which tough
/// 0.18 does not export).
type ByteStream =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<tough::Bytes, TransportError>> + Send>>;

/// tough's transport over reqwest (rustls, the process's ring provider)
/// for `http://` and `https://` mirrors. 403, 404 and 410 mean "no such
/// file" (TUF's probe for the next `N.root.json`; some stores answer 403
/// for a missing object).
#[derive(Debug, Clone)]
struct HttpTransport {
    client: reqwest::Client,
}

impl HttpTransport {
    /// A transport whose connections and reads give up after `timeout`.
    fn new(timeout: Duration) -> Result<HttpTransport, String> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(timeout)
            .read_timeout(timeout)
            .build()
            .map_err(|e| format!("building the HTTP client: {e}"))?;
        Ok(HttpTransport { client })
    }
}

#[tough::async_trait]
impl Transport for HttpTransport {
    async fn fetch(&self, url: Url) -> Result<ByteStream, TransportError> {
        use reqwest::StatusCode;
        let other = |url: &Url, e: reqwest::Error| {
            TransportError::new_with_cause(TransportErrorKind::Other, url, e)
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TransportError::new(
                TransportErrorKind::UnsupportedUrlScheme,
                url,
            ));
        }
        let response = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| other(&url, e))?;
        let status = response.status();
        if matches!(
            status,
            StatusCode::FORBIDDEN | StatusCode::NOT_FOUND | StatusCode::GONE
        ) {
            return Err(TransportError::new_with_cause(
                TransportErrorKind::FileNotFound,
                &url,
                format!("HTTP {status}"),
            ));
        }
        let response = response.error_for_status().map_err(|e| other(&url, e))?;
        Ok(Box::pin(
            response.bytes_stream().map_err(move |e| other(&url, e)),
        ))
    }
}

/// A directory's `file://` mirror URL (`dir` made absolute, ending in
/// `/`), for a [`TrustRootSource`] over a repository on disk.
pub fn file_mirror(dir: impl Into<PathBuf>) -> Result<String, String> {
    let dir = dir.into();
    let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Url::from_directory_path(&dir)
        .map(String::from)
        .map_err(|()| format!("{}: not a directory path", dir.display()))
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject as _;

    #[test]
    fn fulcio_pem_holds_every_certificate_and_says_why_not() {
        let fulcio = crate::testing::Fulcio::from_seed(3);
        let raw: Vec<String> =
            rustls::pki_types::CertificateDer::pem_slice_iter(fulcio.chain_pem().as_bytes())
                .map(|der| base64::engine::general_purpose::STANDARD.encode(der.unwrap()))
                .collect();
        let trusted = serde_json::json!({"certificateAuthorities": [
            {"certChain": {"certificates": [{"rawBytes": raw[0]}, {"rawBytes": raw[1]}]}}]});
        let pem = fulcio_pem(&serde_json::to_vec(&trusted).unwrap()).unwrap();
        assert_eq!(pem, fulcio.chain_pem());

        for (json, why) in [
            ("[]", "no certificateAuthorities"),
            (
                "{\"certificateAuthorities\": []}",
                "no certificate authority",
            ),
            (
                "{\"certificateAuthorities\": [{}]}",
                "certificateAuthorities[0] has no certChain",
            ),
            (
                "{\"certificateAuthorities\": [{\"certChain\": {\"certificates\": [{\"rawBytes\": \"AAAA\"}]}}]}",
                "certificateAuthorities[0].certChain.certificates[0]: not a certificate",
            ),
            ("nope", "not JSON"),
        ] {
            let err = fulcio_pem(json.as_bytes()).unwrap_err();
            assert!(err.starts_with("target trusted_root.json: "), "{err}");
            assert!(err.contains(why), "{err}");
        }
    }
}
