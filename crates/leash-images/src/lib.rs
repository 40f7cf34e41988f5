//! leash-images: what OCI registries say about an image, as Kyverno's
//! engine reads it (CEL's `image.GetMetadata` object, from which
//! leash-policy builds an `imageRegistry` context entry's).
//!
//! [`Registry::image_data`] resolves a reference (`registry/repo:tag`,
//! `...@sha256:...`) to its [`ImageData`]: the top-level manifest's digest,
//! the image manifest (an image index resolved to its `linux/amd64` entry,
//! as go-containerregistry resolves it for Kyverno), the index itself and
//! the config blob, each kept as the registry sent it.
//!
//! # Invariants
//! 1. One fetch per reference at a time: concurrent callers of one
//!    reference share one round trip (a `OnceCell` per reference in a
//!    [`TtlCache`]); an answer is kept for the TTL, so the 100th pod with
//!    the same image costs no registry call.
//! 2. A failed fetch is shared by the callers that waited for it, then
//!    forgotten: the next caller fetches again (a registry that was down is
//!    not remembered as down).
//! 3. Every fetch ends within the configured timeout, with an error naming
//!    the image and the registry; nothing waits on a registry without a
//!    bound.
//! 4. No task, no thread: the cache expires lazily ([`TtlCache`]), and a
//!    caller cancelled mid-fetch drops its fetch (another waiter then
//!    fetches).

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod cosign;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leash_runtime::{OnceCell, TtlCache};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::{Map, Value, json};

/// What a registry says about one image reference: Kyverno's `ImageData`.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageData {
    /// The reference as given.
    pub image: String,
    /// `registry/repository:tag@digest` (`registry/repository@digest`
    /// without a tag), the digest the top-level manifest's.
    pub resolved_image: String,
    /// The registry's host (and port).
    pub registry: String,
    /// The repository within the registry.
    pub repository: String,
    /// The reference's tag, if it has one.
    pub tag: Option<String>,
    /// The top-level manifest's digest (the index's, for an index).
    pub digest: String,
    /// The image index, when the reference names one.
    pub index: Option<Value>,
    /// The image manifest (for an index, its `linux/amd64` image's).
    pub manifest: Value,
    /// The image's config blob.
    pub config: Value,
}

impl ImageData {
    /// The object CEL's `image.GetMetadata` returns, as Kyverno's image
    /// data loader marshals it: `image`, `resolvedImage`, `registry`,
    /// `repository`, `identifier` (the tag, or the digest of a reference
    /// without one), `tag` (only when there is one), `digest`,
    /// `imageIndex` (only for an index), `manifest`, `config`.
    pub fn cel_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("image".into(), json!(self.image));
        m.insert("resolvedImage".into(), json!(self.resolved_image));
        m.insert("registry".into(), json!(self.registry));
        m.insert("repository".into(), json!(self.repository));
        m.insert(
            "identifier".into(),
            json!(self.tag.as_deref().unwrap_or(&self.digest)),
        );
        if let Some(t) = &self.tag {
            m.insert("tag".into(), json!(t));
        }
        m.insert("digest".into(), json!(self.digest));
        if let Some(i) = &self.index {
            m.insert("imageIndex".into(), i.clone());
        }
        m.insert("manifest".into(), self.manifest.clone());
        m.insert("config".into(), self.config.clone());
        Value::Object(m)
    }
}

/// Why an image's data could not be had. The text names the image and,
/// once the reference parses, the registry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImageError {
    /// The reference does not parse.
    #[error("invalid image reference {image:?}: {reason}")]
    Reference {
        /// The reference as given.
        image: String,
        /// The parser's words.
        reason: String,
    },
    /// The registry refused or failed the request.
    #[error("image {image}: registry {registry}: {reason}")]
    Registry {
        /// The reference as given.
        image: String,
        /// The registry asked.
        registry: String,
        /// What went wrong.
        reason: String,
    },
    /// The registry did not answer within the timeout.
    #[error("image {image}: registry {registry} did not answer within {timeout:?}")]
    Timeout {
        /// The reference as given.
        image: String,
        /// The registry asked.
        registry: String,
        /// The bound.
        timeout: Duration,
    },
}

/// How [`Registry`] reaches registries.
#[derive(Debug, Clone)]
pub struct RegistrySettings {
    /// Plain HTTP for every registry (Kyverno's `--allow-insecure-registry`).
    /// Without it, HTTP only for `localhost` and loopback addresses (as
    /// go-containerregistry, and so Kyverno, does), HTTPS otherwise.
    pub insecure: bool,
    /// The bound on one reference's fetch, all round trips included.
    pub timeout: Duration,
    /// How long an answer is kept.
    pub ttl: Duration,
}

impl Default for RegistrySettings {
    fn default() -> RegistrySettings {
        RegistrySettings {
            insecure: false,
            timeout: Duration::from_secs(20),
            ttl: Duration::from_secs(300),
        }
    }
}

type Shared = Result<Arc<ImageData>, ImageError>;
type SharedSignatures = Result<Arc<cosign::Signatures>, ImageError>;

/// A registry client with a per-reference cache. Share it by `Arc`.
pub struct Registry {
    /// For registries reached over HTTPS.
    tls: std::sync::OnceLock<Client>,
    /// For loopback registries, and every registry when `insecure`.
    plain: std::sync::OnceLock<Client>,
    settings: RegistrySettings,
    cache: TtlCache<String, Arc<OnceCell<Shared>>>,
    /// cosign signatures by image reference, kept as `cache` is.
    signatures: TtlCache<String, Arc<OnceCell<SharedSignatures>>>,
    /// Verifications that held, by image and keys: the digest (a warm
    /// review pays no signature check).
    verified: TtlCache<(String, u64), String>,
    fetches: AtomicU64,
    checks: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("settings", &self.settings)
            .field("fetches", &self.fetches())
            .finish_non_exhaustive()
    }
}

const MANIFEST_TYPES: [&str; 4] = [
    OCI_IMAGE_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// `image` as a reference, or why it is not one.
fn parse(image: &str) -> Result<Reference, ImageError> {
    image.parse().map_err(|e| ImageError::Reference {
        image: image.to_string(),
        reason: format!("{e}"),
    })
}

/// Whether the registry said the manifest does not exist.
fn is_not_found(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError, OciErrorCode};
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NotFound
            )
        }),
        OciDistributionError::ServerError { code: 404, .. } => true,
        _ => false,
    }
}

/// Whether `registry` (`host[:port]`) is served over plain HTTP by default:
/// `localhost` and loopback addresses, as go-containerregistry decides.
fn is_local(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Makes ring the process's rustls provider when none is (reqwest, built
/// without a provider of its own, asks rustls for the process default; kube
/// uses ring too). Idempotent; [`Registry::new`] calls it.
pub fn install_crypto_provider() {
    // Err: a provider is installed already, which is all that is needed.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Registry {
    /// A client; builds and connects nothing until asked.
    pub fn new(settings: RegistrySettings) -> Registry {
        install_crypto_provider();
        Registry {
            tls: std::sync::OnceLock::new(),
            plain: std::sync::OnceLock::new(),
            cache: TtlCache::new(settings.ttl),
            signatures: TtlCache::new(settings.ttl),
            verified: TtlCache::new(settings.ttl),
            settings,
            fetches: AtomicU64::new(0),
            checks: AtomicU64::new(0),
        }
    }

    /// How many fetches went to registries (cache misses, each one round
    /// trip group).
    pub fn fetches(&self) -> u64 {
        // Relaxed: a statistic, ordering nothing.
        self.fetches.load(Ordering::Relaxed)
    }

    /// How many signature checks ran (verifications not answered from
    /// the kept ones).
    pub fn checks(&self) -> u64 {
        // Relaxed: a statistic, ordering nothing.
        self.checks.load(Ordering::Relaxed)
    }

    /// The data of `image` when an answer for it is kept, without waiting.
    pub fn cached(&self, image: &str) -> Option<Arc<ImageData>> {
        self.cache.get(image)?.get()?.as_ref().ok().cloned()
    }

    /// The data of `image`: from the cache when an answer for it is kept,
    /// else fetched (once for every concurrent caller of it).
    pub async fn image_data(&self, image: &str) -> Result<Arc<ImageData>, ImageError> {
        let cell = self
            .cache
            .get_or_insert_with(image.to_string(), || Arc::new(OnceCell::new()));
        let answer = cell.get_or_init(|| self.fetch_bounded(image)).await.clone();
        if answer.is_err() {
            self.cache.remove_if(image, |c| Arc::ptr_eq(c, &cell));
        }
        answer
    }

    /// Whether one of `keys` verifies a cosign signature of `image` among
    /// `sigs` (its signatures): the digest, kept for the TTL when it held
    /// (a verification that failed is checked again next time).
    pub fn verify(
        &self,
        image: &str,
        keys: &str,
        sigs: &cosign::Signatures,
    ) -> Result<String, String> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        keys.hash(&mut h);
        let key = (image.to_string(), h.finish());
        if let Some(digest) = self.verified.get(&key) {
            return Ok(digest);
        }
        // Relaxed: a statistic.
        self.checks.fetch_add(1, Ordering::Relaxed);
        cosign::verify_with_keys(sigs, keys)?;
        self.verified.insert(key, sigs.digest.clone());
        Ok(sigs.digest.clone())
    }

    /// The cosign signatures of `image` when kept, without waiting.
    pub fn cached_signatures(&self, image: &str) -> Option<Arc<cosign::Signatures>> {
        self.signatures.get(image)?.get()?.as_ref().ok().cloned()
    }

    /// The cosign signatures stored for `image` (its digest resolved
    /// first): kept and shared as [`Self::image_data`]'s answers are.
    pub async fn signatures(&self, image: &str) -> SharedSignatures {
        let cell = self
            .signatures
            .get_or_insert_with(image.to_string(), || Arc::new(OnceCell::new()));
        let answer = cell
            .get_or_init(|| self.fetch_signatures(image))
            .await
            .clone();
        if answer.is_err() {
            self.signatures.remove_if(image, |c| Arc::ptr_eq(c, &cell));
        }
        answer
    }

    async fn fetch_signatures(&self, image: &str) -> SharedSignatures {
        let data = self.image_data(image).await?;
        let reference = parse(image)?;
        let registry = reference.resolve_registry().to_string();
        let sig_ref = Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            cosign::signature_tag(&data.digest),
        );
        let client = self.client_for(&registry);
        let fetch = async {
            let auth = RegistryAuth::Anonymous;
            let manifest = match client
                .pull_manifest_raw(
                    &sig_ref,
                    &auth,
                    &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
                )
                .await
            {
                Ok((bytes, _)) => bytes,
                Err(e) if is_not_found(&e) => return Ok(Vec::new()),
                Err(e) => return Err(format!("signatures {}: {e}", sig_ref.whole())),
            };
            let manifest: Value = serde_json::from_slice(&manifest)
                .map_err(|e| format!("signature manifest is not JSON: {e}"))?;
            let mut out = Vec::new();
            for layer in manifest["layers"].as_array().into_iter().flatten() {
                if layer["mediaType"] != cosign::SIMPLE_SIGNING_MEDIA_TYPE {
                    continue;
                }
                let (Some(digest), Some(signature)) = (
                    layer["digest"].as_str(),
                    layer["annotations"][cosign::SIGNATURE_ANNOTATION].as_str(),
                ) else {
                    continue;
                };
                let mut payload = Vec::new();
                client
                    .pull_blob(&sig_ref, digest, &mut payload)
                    .await
                    .map_err(|e| format!("signature payload {digest}: {e}"))?;
                out.push(cosign::Signature {
                    payload,
                    signature: signature.to_string(),
                });
            }
            Ok(out)
        };
        let signatures = self.bounded(image, registry, fetch).await?;
        Ok(Arc::new(cosign::Signatures {
            digest: data.digest.clone(),
            signatures,
        }))
    }

    /// One fetch (counted) within the timeout, its failure in
    /// [`ImageError`]'s words.
    async fn bounded<T>(
        &self,
        image: &str,
        registry: String,
        fetch: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, ImageError> {
        // Relaxed: a statistic.
        self.fetches.fetch_add(1, Ordering::Relaxed);
        match tokio::time::timeout(self.settings.timeout, fetch).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(reason)) => Err(ImageError::Registry {
                image: image.to_string(),
                registry,
                reason,
            }),
            Err(_) => Err(ImageError::Timeout {
                image: image.to_string(),
                registry,
                timeout: self.settings.timeout,
            }),
        }
    }

    fn client_for(&self, registry: &str) -> &Client {
        // Built on first use: a client loads the system's root
        // certificates, which `leash serve` should not wait for at start
        // when no policy reads a registry.
        let build = |protocol| {
            Client::new(ClientConfig {
                protocol,
                connect_timeout: Some(self.settings.timeout),
                read_timeout: Some(self.settings.timeout),
                // Kyverno resolves an index to its linux/amd64 image.
                platform_resolver: Some(Box::new(oci_client::client::linux_amd64_resolver)),
                ..ClientConfig::default()
            })
        };
        if self.settings.insecure || is_local(registry) {
            self.plain.get_or_init(|| build(ClientProtocol::Http))
        } else {
            self.tls.get_or_init(|| build(ClientProtocol::Https))
        }
    }

    async fn fetch_bounded(&self, image: &str) -> Shared {
        let reference = parse(image)?;
        let registry = reference.resolve_registry().to_string();
        self.bounded(image, registry, self.fetch(image, &reference))
            .await
            .map(Arc::new)
    }

    async fn fetch(&self, image: &str, reference: &Reference) -> Result<ImageData, String> {
        let client = self.client_for(reference.resolve_registry());
        let auth = RegistryAuth::Anonymous;
        let (top, digest) = client
            .pull_manifest_raw(reference, &auth, &MANIFEST_TYPES)
            .await
            .map_err(|e| e.to_string())?;
        let top: Value =
            serde_json::from_slice(&top).map_err(|e| format!("manifest is not JSON: {e}"))?;
        let is_index = top["manifests"].is_array()
            && matches!(
                top["mediaType"].as_str(),
                None | Some(OCI_IMAGE_INDEX_MEDIA_TYPE) | Some(IMAGE_MANIFEST_LIST_MEDIA_TYPE)
            );
        let (index, manifest) = if is_index {
            let entry = top["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| {
                    m["platform"]["os"] == "linux" && m["platform"]["architecture"] == "amd64"
                })
                .and_then(|m| m["digest"].as_str())
                .ok_or("image index has no linux/amd64 image")?
                .to_string();
            let by_digest = reference.clone_with_digest(entry);
            let (bytes, _) = client
                .pull_manifest_raw(&by_digest, &auth, &MANIFEST_TYPES)
                .await
                .map_err(|e| e.to_string())?;
            let manifest: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("image manifest is not JSON: {e}"))?;
            (Some(top), manifest)
        } else {
            (None, top)
        };
        let config_digest = manifest["config"]["digest"]
            .as_str()
            .ok_or("image manifest has no config digest")?;
        let mut blob = Vec::new();
        client
            .pull_blob(reference, config_digest, &mut blob)
            .await
            .map_err(|e| format!("config {config_digest}: {e}"))?;
        let config: Value =
            serde_json::from_slice(&blob).map_err(|e| format!("config is not JSON: {e}"))?;
        let name = format!(
            "{}/{}",
            reference.resolve_registry(),
            reference.repository()
        );
        // A reference's own digest when it names one (the same manifest).
        let digest = reference.digest().map(str::to_string).unwrap_or(digest);
        Ok(ImageData {
            image: image.to_string(),
            resolved_image: match reference.tag() {
                Some(tag) => format!("{name}:{tag}@{digest}"),
                None => format!("{name}@{digest}"),
            },
            registry: reference.resolve_registry().to_string(),
            repository: reference.repository().to_string(),
            tag: reference.tag().map(str::to_string),
            digest,
            index,
            manifest,
            config,
        })
    }
}

/// One evaluation's image data and signatures, for engines that read
/// cluster data synchronously (`ClusterData::image_data`) and fetch what
/// they missed between evaluations (admission, the background scan):
/// [`Self::get`] and [`Self::verify`] answer from this evaluation's fetches
/// and the registry's cache and record what they could not answer;
/// [`Self::fetch_missed`] fetches those, concurrently, and keeps each
/// answer, error included, so the next evaluation gets the error instead of
/// fetching again.
///
/// # Invariants
/// The `std::sync::Mutex`es are held only inside these methods, never
/// across an `.await`.
#[derive(Debug)]
pub struct ImageLookup {
    registry: Arc<Registry>,
    data: std::sync::Mutex<std::collections::HashMap<String, Result<Value, String>>>,
    signatures: std::sync::Mutex<
        std::collections::HashMap<String, Result<Arc<cosign::Signatures>, String>>,
    >,
    missed: std::sync::Mutex<Vec<(Want, String)>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Want {
    Data,
    Signatures,
}

impl ImageLookup {
    /// An evaluation's lookup through `registry`.
    pub fn new(registry: Arc<Registry>) -> ImageLookup {
        ImageLookup {
            registry,
            data: Default::default(),
            signatures: Default::default(),
            missed: Default::default(),
        }
    }

    fn miss(&self, want: Want, image: &str) -> String {
        self.missed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((want, image.to_string()));
        format!("image data for {image} was not fetched yet")
    }

    /// `image`'s CEL object (`image.GetMetadata`'s), or an error: the
    /// registry's, or, when it was not fetched yet, one saying so (the
    /// evaluation is then repeated after [`Self::fetch_missed`]).
    pub fn get(&self, image: &str) -> Result<Value, String> {
        if let Some(answer) = self
            .data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
        {
            return answer.clone();
        }
        if let Some(data) = self.registry.cached(image) {
            return Ok(data.cel_value());
        }
        Err(self.miss(Want::Data, image))
    }

    /// Whether one of `keys` (PEM public keys) verifies a cosign signature
    /// of `image`: its digest, or why not (the registry's error, cosign's
    /// `no signatures found` / `no matching signatures`, or not fetched
    /// yet, as [`Self::get`]).
    pub fn verify(&self, image: &str, keys: &str) -> Result<String, String> {
        let known = self
            .signatures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(image)
            .cloned();
        let sigs = match known {
            Some(answer) => answer?,
            None => match self.registry.cached_signatures(image) {
                Some(sigs) => sigs,
                None => return Err(self.miss(Want::Signatures, image)),
            },
        };
        self.registry.verify(image, keys, &sigs)
    }

    /// Fetches what [`Self::get`] and [`Self::verify`] missed since the
    /// last call, all at once; false when nothing was missed.
    pub async fn fetch_missed(&self) -> bool {
        let mut missed =
            std::mem::take(&mut *self.missed.lock().unwrap_or_else(|e| e.into_inner()));
        missed.sort();
        missed.dedup();
        if missed.is_empty() {
            return false;
        }
        let data = missed
            .iter()
            .filter(|(w, _)| *w == Want::Data)
            .map(|(_, image)| async move {
                let answer = self
                    .registry
                    .image_data(image)
                    .await
                    .map(|d| d.cel_value())
                    .map_err(|e| e.to_string());
                (image.clone(), answer)
            });
        let sigs =
            missed
                .iter()
                .filter(|(w, _)| *w == Want::Signatures)
                .map(|(_, image)| async move {
                    let answer = self
                        .registry
                        .signatures(image)
                        .await
                        .map_err(|e| e.to_string());
                    (image.clone(), answer)
                });
        let (data, sigs) = futures::join!(
            futures::future::join_all(data),
            futures::future::join_all(sigs)
        );
        self.data
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(data);
        self.signatures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(sigs);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_plain_http() {
        for r in [
            "localhost",
            "localhost:5000",
            "127.0.0.1:33813",
            "[::1]:80",
            "a.localhost",
        ] {
            assert!(is_local(r), "{r}");
        }
        for r in [
            "index.docker.io",
            "ghcr.io:443",
            "10.0.0.1:5000",
            "localhostx",
        ] {
            assert!(!is_local(r), "{r}");
        }
    }

    #[test]
    fn the_cel_shape_is_kyvernos() {
        let data = ImageData {
            image: "r.io/a/b:1.0@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
            resolved_image: "r.io/a/b@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
            registry: "r.io".into(),
            repository: "a/b".into(),
            tag: Some("1.0".into()),
            digest: "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".into(),
            index: None,
            manifest: json!({"schemaVersion": 2}),
            config: json!({"config": {"Labels": {"k": "v"}}}),
        };
        let cel = data.cel_value();
        assert_eq!(cel["tag"], "1.0");
        assert_eq!(
            cel["digest"],
            "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        );
        assert!(cel.get("imageIndex").is_none());
    }
}
