//! leash-images: what OCI registries say about an image, as Kyverno's
//! engine reads it (CEL's `image.GetMetadata` object, from which
//! leash-policy builds an `imageRegistry` context entry's).
//!
//! [`Registry::image_data`] resolves a reference (`registry/repo:tag`,
//! `...@sha256:...`) to its [`ImageData`]: the top-level manifest's digest,
//! the image manifest (an image index resolved to its `linux/amd64` entry,
//! as go-containerregistry resolves it for Kyverno), the index itself and
//! the config blob, each kept as the registry sent it.
//! [`Registry::signatures`] and [`Registry::attestations`] fetch what
//! cosign stored for the image ([`cosign`]), kept the same way.
//!
//! # Invariants
//! 1. One fetch per reference (and kind: data, signatures, attestations)
//!    at a time: concurrent callers of one reference share one round trip
//!    (a `OnceCell` per reference in a [`TtlCache`]); an answer is kept for
//!    the TTL, so the 100th pod with the same image costs no registry call.
//! 2. A failed fetch is shared by the callers that waited for it, then
//!    forgotten: the next caller fetches again (a registry that was down is
//!    not remembered as down).
//! 3. Every fetch ends within the configured timeout, with an error naming
//!    the image and the registry; nothing waits on a registry without a
//!    bound.
//! 4. No task, no thread: the cache expires lazily ([`TtlCache`]), and a
//!    caller cancelled mid-fetch drops its fetch (another waiter then
//!    fetches).
//! 5. The credentials and the clients built for them are one `Arc` behind
//!    a `std::sync::RwLock` held only to clone it out or replace it
//!    ([`Registry::set_credentials`]); a fetch uses the credentials and
//!    client it cloned when it started.
//!
//! A keyless trust without roots (empty `roots`) trusts Sigstore's trust
//! root, loaded once through TUF ([`tuf`]) when
//! [`RegistrySettings::trust_root`] is configured: verification itself is
//! synchronous and uses the loaded root ([`tuf::TrustRoot::cached`]);
//! [`Registry::load_trust_root`] and [`ImageLookup::fetch_missed`] load it.

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod cosign;
pub mod credentials;
pub mod notary;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tuf;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use leash_runtime::{OnceCell, TtlCache};
use oci_client::client::{ClientConfig, ClientProtocol, ImageLayer};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE, OciImageManifest,
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
    /// Sigstore's trust root, for keyless trusts without roots of their
    /// own (None: such a trust verifies nothing, saying why).
    pub trust_root: Option<Arc<tuf::TrustRoot>>,
    /// Credentials by registry (none: every registry read anonymously).
    pub credentials: credentials::Credentials,
}

impl Default for RegistrySettings {
    fn default() -> RegistrySettings {
        RegistrySettings {
            insecure: false,
            timeout: Duration::from_secs(20),
            ttl: Duration::from_secs(300),
            trust_root: None,
            credentials: credentials::Credentials::default(),
        }
    }
}

/// An answer fetched once per reference and shared by its callers.
type Shared<T> = Result<Arc<T>, ImageError>;
/// Answers by image reference, each fetched once (its cell) and kept for
/// the TTL.
type Kept<T> = TtlCache<String, Arc<OnceCell<Shared<T>>>>;
/// Verifications that held, by image and a hash of the [`cosign::Trust`].
type Verified<T> = TtlCache<(String, u64), T>;

/// Credentials and the clients built for them. A client keeps the first
/// credentials it is given for a registry (oci-client's auth store), so
/// new credentials need new clients.
struct Access {
    credentials: credentials::Credentials,
    /// For registries reached over HTTPS.
    tls: std::sync::OnceLock<Client>,
    /// For loopback registries, and every registry when `insecure`.
    plain: std::sync::OnceLock<Client>,
}

impl Access {
    fn new(credentials: credentials::Credentials) -> Access {
        Access {
            credentials,
            tls: std::sync::OnceLock::new(),
            plain: std::sync::OnceLock::new(),
        }
    }
}

/// A registry client with a per-reference cache. Share it by `Arc`.
pub struct Registry {
    settings: RegistrySettings,
    cache: Kept<ImageData>,
    /// cosign signatures by image reference, kept as `cache` is.
    signatures: Kept<cosign::Signatures>,
    /// cosign attestations by image reference, kept as `cache` is.
    attestations: Kept<cosign::Attestations>,
    /// Notary Project signatures by image reference, kept as `cache` is.
    notary: Kept<notary::Signatures>,
    /// OCI referrers by image reference and artifact type ([`referrers_key`]),
    /// kept as `cache` is.
    referrers: Kept<notary::Referrers>,
    /// Signature verifications that held, by image and trust: the digest
    /// (a warm review pays no signature check).
    verified: Verified<String>,
    /// Attestation verifications that held, by image and trust: the
    /// statements verified.
    attested: Verified<Vec<Value>>,
    /// Referrer verifications that held, by image and artifact type
    /// ([`referrers_key`]) and trust: the payload verified.
    referred: Verified<Value>,
    /// The credentials in use and the clients that use them:
    /// `settings.credentials` at first, replaced whole by
    /// [`Registry::set_credentials`]. The lock is held only to clone or
    /// swap the `Arc`, never across an await.
    access: std::sync::RwLock<Arc<Access>>,
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

/// The error of a keyless trust without roots when no Sigstore trust root
/// is configured.
pub const NO_TRUST_ROOT: &str = "keyless: no roots in the policy and no Sigstore trust root configured (leash serve --tuf-root FILE --tuf-mirror URL)";

/// Whether `trust` is keyless without roots of its own: Sigstore's trust
/// root is then what it trusts.
fn wants_trust_root(trust: &cosign::Trust) -> bool {
    matches!(trust, cosign::Trust::Keyless(k) if k.roots.trim().is_empty())
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
            cache: TtlCache::new(settings.ttl),
            signatures: TtlCache::new(settings.ttl),
            attestations: TtlCache::new(settings.ttl),
            notary: TtlCache::new(settings.ttl),
            referrers: TtlCache::new(settings.ttl),
            verified: TtlCache::new(settings.ttl),
            attested: TtlCache::new(settings.ttl),
            referred: TtlCache::new(settings.ttl),
            access: std::sync::RwLock::new(Arc::new(Access::new(settings.credentials.clone()))),
            settings,
            fetches: AtomicU64::new(0),
            checks: AtomicU64::new(0),
        }
    }

    /// Replaces the credentials registries are read with (rotated image
    /// pull secrets); fetches that start afterwards use them. What was
    /// fetched before stays kept (failures are never kept).
    pub fn set_credentials(&self, credentials: credentials::Credentials) {
        *self
            .access
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Access::new(credentials));
    }

    /// The credentials in use.
    pub fn credentials(&self) -> credentials::Credentials {
        self.access().credentials.clone()
    }

    fn access(&self) -> Arc<Access> {
        self.access
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// How many fetches went to registries (cache misses, each one round
    /// trip group).
    pub fn fetches(&self) -> u64 {
        // Relaxed: a statistic, ordering nothing.
        self.fetches.load(Ordering::Relaxed)
    }

    /// How many signature and attestation checks ran (verifications not
    /// answered from the kept ones).
    pub fn checks(&self) -> u64 {
        // Relaxed: a statistic, ordering nothing.
        self.checks.load(Ordering::Relaxed)
    }

    /// The data of `image` when an answer for it is kept, without waiting.
    pub fn cached(&self, image: &str) -> Option<Arc<ImageData>> {
        kept(&self.cache, image)
    }

    /// The data of `image`: from the cache when an answer for it is kept,
    /// else fetched (once for every concurrent caller of it).
    pub async fn image_data(&self, image: &str) -> Result<Arc<ImageData>, ImageError> {
        once(&self.cache, image, || self.fetch_bounded(image)).await
    }

    /// Loads Sigstore's trust root (once; see [`tuf::TrustRoot::get`])
    /// when one is configured, for callers that wait for it before
    /// verifying keyless trusts without roots ([`Self::verify`] and
    /// [`Self::verify_attestations`] do not wait). Ok when none is
    /// configured: such trusts then fail saying so.
    pub async fn load_trust_root(&self) -> Result<(), String> {
        match &self.settings.trust_root {
            Some(trust_root) => trust_root.get().await.map(drop),
            None => Ok(()),
        }
    }

    /// `trust` with the roots it verifies with: its own, or, keyless
    /// without roots, Sigstore's (loaded already: this does not wait).
    fn with_roots<'t>(
        &self,
        trust: &'t cosign::Trust,
    ) -> Result<std::borrow::Cow<'t, cosign::Trust>, String> {
        use std::borrow::Cow;
        let keyless = match trust {
            cosign::Trust::Keyless(keyless) if wants_trust_root(trust) => keyless,
            _ => return Ok(Cow::Borrowed(trust)),
        };
        let trust_root = self.settings.trust_root.as_ref().ok_or(NO_TRUST_ROOT)?;
        let roots = trust_root.cached().ok_or_else(|| {
            format!(
                "keyless: no roots in the policy and Sigstore's trust root (from {}) is not loaded yet",
                trust_root.mirror()
            )
        })?;
        Ok(Cow::Owned(cosign::Trust::Keyless(cosign::Keyless {
            roots: roots.fulcio_pem.clone(),
            identities: keyless.identities.clone(),
        })))
    }

    /// Whether `trust` verifies a signature of `image`, fetching what it
    /// needs first (Sigstore's trust root for a keyless trust without
    /// roots; the image's cosign signatures, or its Notary Project ones
    /// for a notary trust): the digest, or why not.
    pub async fn verify_image(&self, image: &str, trust: &cosign::Trust) -> Result<String, String> {
        if let cosign::Trust::Notary(_) = trust {
            let sigs = self
                .notary_signatures(image)
                .await
                .map_err(|e| e.to_string())?;
            return self.verify_notary(image, trust, &sigs);
        }
        self.load_trust_root().await?;
        let sigs = self.signatures(image).await.map_err(|e| e.to_string())?;
        self.verify(image, trust, &sigs)
    }

    /// Whether `trust` (public keys, or keyless roots and identities)
    /// verifies a cosign signature of `image` among `sigs` (its
    /// signatures): the digest, kept for the TTL when it held (a
    /// verification that failed is checked again next time). A keyless
    /// trust without roots verifies with Sigstore's trust root when it is
    /// loaded (else an error saying why: none configured, or not loaded
    /// yet; see [`Self::load_trust_root`]).
    pub fn verify(
        &self,
        image: &str,
        trust: &cosign::Trust,
        sigs: &cosign::Signatures,
    ) -> Result<String, String> {
        self.checked(&self.verified, image, trust, |trust| {
            cosign::verify(sigs, trust).map(|()| sigs.digest.clone())
        })
    }

    /// The in-toto statements of the cosign attestations of `image` among
    /// `atts` (its attestations) that `trust` verifies, kept for the TTL
    /// when the verification held (one that failed is checked again next
    /// time). Keyless without roots as [`Self::verify`].
    pub fn verify_attestations(
        &self,
        image: &str,
        trust: &cosign::Trust,
        atts: &cosign::Attestations,
    ) -> Result<Vec<Value>, String> {
        self.checked(&self.attested, image, trust, |trust| {
            cosign::verify_attestations(atts, trust)
        })
    }

    /// `check`'s answer for `image` and `trust`: the one kept in `cache`,
    /// or `check` run (counted) with `trust`'s roots ([`Self::with_roots`])
    /// and its answer kept when it held. The key is the image and a hash of
    /// `trust` as given: a keyless trust without roots (Sigstore's) is
    /// another trust than one with roots, and never answers for it.
    fn checked<T: Clone>(
        &self,
        cache: &Verified<T>,
        image: &str,
        trust: &cosign::Trust,
        check: impl FnOnce(&cosign::Trust) -> Result<T, String>,
    ) -> Result<T, String> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        trust.hash(&mut h);
        let key = (image.to_string(), h.finish());
        if let Some(answer) = cache.get(&key) {
            return Ok(answer);
        }
        let with_roots = self.with_roots(trust)?;
        // Relaxed: a statistic.
        self.checks.fetch_add(1, Ordering::Relaxed);
        let answer = check(&with_roots)?;
        cache.insert(key, answer.clone());
        Ok(answer)
    }

    /// The cosign signatures of `image` when kept, without waiting.
    pub fn cached_signatures(&self, image: &str) -> Option<Arc<cosign::Signatures>> {
        kept(&self.signatures, image)
    }

    /// The cosign signatures stored for `image` (its digest resolved
    /// first): kept and shared as [`Self::image_data`]'s answers are.
    pub async fn signatures(&self, image: &str) -> Result<Arc<cosign::Signatures>, ImageError> {
        once(&self.signatures, image, || async {
            let (digest, layers) = self
                .fetch_artifact(
                    image,
                    cosign::signature_tag,
                    cosign::SIMPLE_SIGNING_MEDIA_TYPE,
                )
                .await?;
            // A layer without a signature annotation signs nothing.
            let signatures = layers
                .into_iter()
                .filter_map(|layer| {
                    let mut annotations = layer.annotations?;
                    Some(cosign::Signature {
                        signature: annotations.remove(cosign::SIGNATURE_ANNOTATION)?,
                        certificate: annotations.remove(cosign::CERTIFICATE_ANNOTATION),
                        chain: annotations.remove(cosign::CHAIN_ANNOTATION),
                        payload: layer.data.to_vec(),
                    })
                })
                .collect();
            Ok(Arc::new(cosign::Signatures { digest, signatures }))
        })
        .await
    }

    /// Forgets what is kept about `image`'s signatures, attestations,
    /// referrers and their verifications (a `verifyImages` entry with
    /// `useCache: false`): the next verification fetches and checks them
    /// again. Its data (`image_data`) is kept.
    pub fn forget(&self, image: &str) {
        self.signatures.remove(image);
        self.attestations.remove(image);
        self.notary.remove(image);
        let referred = format!("{image} ");
        self.referrers.retain(|k, _| !k.starts_with(&referred));
        let about = |key: &(String, u64)| key.0 == image || key.0.starts_with(&referred);
        self.verified.retain(|k, _| !about(k));
        self.attested.retain(|k, _| !about(k));
        self.referred.retain(|k, _| !about(k));
    }

    /// The Notary Project signatures of `image` when kept, without waiting.
    pub fn cached_notary_signatures(&self, image: &str) -> Option<Arc<notary::Signatures>> {
        kept(&self.notary, image)
    }

    /// The Notary Project signatures of `image` (its manifest resolved
    /// first, then its referrers of the signature type, each signature's
    /// manifest and envelope): kept and shared as [`Self::image_data`]'s
    /// answers are.
    pub async fn notary_signatures(
        &self,
        image: &str,
    ) -> Result<Arc<notary::Signatures>, ImageError> {
        once(&self.notary, image, || {
            self.read(image, async |client, reference, auth| {
                notary_signatures(client, reference, auth).await
            })
        })
        .await
    }

    /// The OCI referrers of `image` of `artifact_type` when kept, without
    /// waiting.
    pub fn cached_referrers(
        &self,
        image: &str,
        artifact_type: &str,
    ) -> Option<Arc<notary::Referrers>> {
        kept(&self.referrers, &referrers_key(image, artifact_type))
    }

    /// The OCI referrers of `image` of `artifact_type` (at most
    /// [`notary::MAX_REFERRERS`]), each one's payload and Notary Project
    /// signatures: kept and shared as [`Self::image_data`]'s answers are.
    pub async fn referrers(
        &self,
        image: &str,
        artifact_type: &str,
    ) -> Result<Arc<notary::Referrers>, ImageError> {
        once(
            &self.referrers,
            &referrers_key(image, artifact_type),
            || {
                self.read(image, async |client, reference, auth| {
                    referrers(client, reference, artifact_type, auth).await
                })
            },
        )
        .await
    }

    /// The payload of the first referrer among `refs` (`image`'s of one
    /// type) whose Notary Project signature `trust` verifies, kept for the
    /// TTL when one did ([`notary::verify_referrers`]).
    pub fn verify_referrers(
        &self,
        image: &str,
        trust: &cosign::Trust,
        refs: &notary::Referrers,
    ) -> Result<Value, String> {
        let key = referrers_key(image, &refs.artifact_type);
        self.checked(&self.referred, &key, trust, |trust| match trust {
            cosign::Trust::Notary(certs) => notary::verify_referrers(refs, certs),
            _ => Err("cosign verifier only supports intoto referrers as attestations".to_string()),
        })
    }

    /// [`Self::verify_referrers`], fetching the referrers first.
    pub async fn verify_image_referrers(
        &self,
        image: &str,
        artifact_type: &str,
        trust: &cosign::Trust,
    ) -> Result<Value, String> {
        let refs = self
            .referrers(image, artifact_type)
            .await
            .map_err(|e| e.to_string())?;
        self.verify_referrers(image, trust, &refs)
    }

    /// Whether a Notary Project signature of `image` among `sigs` (its
    /// signatures) verifies with `certs` (PEM, the trust store): the
    /// digest, kept for the TTL when it held. The error is Kyverno's:
    /// `failed to verify REF@DIGEST: ` and notation's words.
    pub fn verify_notary(
        &self,
        image: &str,
        trust: &cosign::Trust,
        sigs: &notary::Signatures,
    ) -> Result<String, String> {
        self.checked(&self.verified, image, trust, |trust| {
            let cosign::Trust::Notary(certs) = trust else {
                return Err("a notary verification needs notary certificates".to_string());
            };
            notary::verify(sigs, certs)
                .map(|()| sigs.target.digest.clone())
                .map_err(|e| format!("failed to verify {}: {e}", sigs.reference))
        })
    }

    /// The cosign attestations of `image` when kept, without waiting.
    pub fn cached_attestations(&self, image: &str) -> Option<Arc<cosign::Attestations>> {
        kept(&self.attestations, image)
    }

    /// The cosign attestations stored for `image` (its digest resolved
    /// first; none when it has no attestation tag): kept and shared as
    /// [`Self::image_data`]'s answers are.
    pub async fn attestations(&self, image: &str) -> Result<Arc<cosign::Attestations>, ImageError> {
        once(&self.attestations, image, || async {
            let (digest, layers) = self
                .fetch_artifact(image, cosign::attestation_tag, cosign::DSSE_MEDIA_TYPE)
                .await?;
            let envelopes = layers
                .into_iter()
                .map(|layer| {
                    let mut annotations = layer.annotations.unwrap_or_default();
                    cosign::Envelope {
                        certificate: annotations.remove(cosign::CERTIFICATE_ANNOTATION),
                        chain: annotations.remove(cosign::CHAIN_ANNOTATION),
                        json: layer.data.to_vec(),
                    }
                })
                .collect();
            Ok(Arc::new(cosign::Attestations { digest, envelopes }))
        })
        .await
    }

    /// `image`'s digest and the layers of type `media_type` of the cosign
    /// artifact tagged `tag(digest)` in its repository (one fetch, within
    /// the timeout).
    async fn fetch_artifact(
        &self,
        image: &str,
        tag: fn(&str) -> String,
        media_type: &str,
    ) -> Result<(String, Vec<ImageLayer>), ImageError> {
        let data = self.image_data(image).await?;
        let reference = parse(image)?;
        let registry = reference.resolve_registry().to_string();
        let artifact = Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            tag(&data.digest),
        );
        let access = self.access();
        let client = self.client_for(&access, &registry);
        let auth = access.credentials.auth_for(&registry);
        let layers = self
            .bounded(
                image,
                registry,
                artifact_layers(client, &artifact, media_type, &auth),
            )
            .await?;
        Ok((data.digest.clone(), layers))
    }

    /// `read` of `image` with the client and credentials for its registry,
    /// one fetch (counted) within the timeout ([`Self::bounded`]).
    async fn read<T>(
        &self,
        image: &str,
        read: impl AsyncFnOnce(&Client, &Reference, &RegistryAuth) -> Result<T, String>,
    ) -> Shared<T> {
        let reference = parse(image)?;
        let registry = reference.resolve_registry().to_string();
        let access = self.access();
        let client = self.client_for(&access, &registry);
        let auth = access.credentials.auth_for(&registry);
        self.bounded(image, registry, read(client, &reference, &auth))
            .await
            .map(Arc::new)
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

    fn client_for<'a>(&self, access: &'a Access, registry: &str) -> &'a Client {
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
            access.plain.get_or_init(|| build(ClientProtocol::Http))
        } else {
            access.tls.get_or_init(|| build(ClientProtocol::Https))
        }
    }

    async fn fetch_bounded(&self, image: &str) -> Shared<ImageData> {
        let reference = parse(image)?;
        let registry = reference.resolve_registry().to_string();
        self.bounded(image, registry, self.fetch(image, &reference))
            .await
            .map(Arc::new)
    }

    async fn fetch(&self, image: &str, reference: &Reference) -> Result<ImageData, String> {
        let access = self.access();
        let client = self.client_for(&access, reference.resolve_registry());
        let auth = access.credentials.auth_for(reference.resolve_registry());
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

/// `image`'s answer in `cache`, or `fetch`'s: one fetch for every
/// concurrent caller (the cell); a failure is given to the callers that
/// waited for it, then forgotten, so the next caller fetches again.
async fn once<T, F>(cache: &Kept<T>, image: &str, fetch: impl FnOnce() -> F) -> Shared<T>
where
    F: std::future::Future<Output = Shared<T>>,
{
    let cell = cache.get_or_insert_with(image.to_string(), || Arc::new(OnceCell::new()));
    let answer = cell.get_or_init(fetch).await.clone();
    if answer.is_err() {
        cache.remove_if(image, |c| Arc::ptr_eq(c, &cell));
    }
    answer
}

/// `image`'s answer in `cache` when one is kept and held, without waiting.
fn kept<T>(cache: &Kept<T>, image: &str) -> Option<Arc<T>> {
    cache.get(image)?.get()?.as_ref().ok().cloned()
}

/// The layers of type `media_type` (blob and annotations) of the cosign
/// artifact `artifact` names (`repo:sha256-HEX.sig`, `.att`): none when the
/// tag holds no manifest (nothing signed or attested).
pub(crate) async fn artifact_layers(
    client: &Client,
    artifact: &Reference,
    media_type: &str,
    auth: &RegistryAuth,
) -> Result<Vec<ImageLayer>, String> {
    let manifest = match client
        .pull_manifest_raw(
            artifact,
            auth,
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
    {
        Ok((bytes, _)) => bytes,
        Err(e) if is_not_found(&e) => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", artifact.whole())),
    };
    let manifest: OciImageManifest = serde_json::from_slice(&manifest)
        .map_err(|e| format!("{}: not an image manifest: {e}", artifact.whole()))?;
    let mut layers = Vec::new();
    for layer in manifest.layers {
        if layer.media_type != media_type {
            continue;
        }
        let mut blob = Vec::new();
        client
            .pull_blob(artifact, &layer, &mut blob)
            .await
            .map_err(|e| format!("{} layer {}: {e}", artifact.whole(), layer.digest))?;
        layers.push(ImageLayer::new(blob, layer.media_type, layer.annotations));
    }
    Ok(layers)
}

/// `reference`'s Notary Project signatures: its manifest (resolved by
/// digest: the signatures' subject), then the referrers of the signature
/// type (the referrers API, or the tag schema where the registry has no
/// such API, as oci-client lists them), each one's manifest and its
/// envelope layer.
async fn notary_signatures(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
) -> Result<notary::Signatures, String> {
    let (bytes, digest) = client
        .pull_manifest_raw(reference, auth, &MANIFEST_TYPES)
        .await
        .map_err(|e| e.to_string())?;
    let manifest: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("manifest is not JSON: {e}"))?;
    let digest = reference.digest().map(str::to_string).unwrap_or(digest);
    let target = notary::Target {
        media_type: manifest["mediaType"]
            .as_str()
            .unwrap_or(OCI_IMAGE_MEDIA_TYPE)
            .to_string(),
        digest: digest.clone(),
        size: bytes.len() as u64,
    };
    let subject = reference.clone_with_digest(digest.clone());
    let referrers = client
        .pull_referrers(&subject, Some(notary::SIGNATURE_ARTIFACT_TYPE))
        .await
        .map_err(|e| format!("referrers of {digest}: {e}"))?;
    let mut envelopes = Vec::new();
    // One more than notation tries, so that too many is told apart.
    for entry in referrers
        .manifests
        .iter()
        .take(notary::MAX_SIGNATURE_ATTEMPTS + 1)
    {
        let by_digest = reference.clone_with_digest(entry.digest.clone());
        let (bytes, _) = client
            .pull_manifest_raw(&by_digest, auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(|e| format!("signature {}: {e}", entry.digest))?;
        let manifest: OciImageManifest = serde_json::from_slice(&bytes)
            .map_err(|e| format!("signature {}: not an image manifest: {e}", entry.digest))?;
        // notation's signature manifest has one layer, the envelope.
        let Some(layer) = manifest.layers.first() else {
            continue;
        };
        let mut blob = Vec::new();
        client
            .pull_blob(&by_digest, layer, &mut blob)
            .await
            .map_err(|e| format!("signature {} envelope: {e}", entry.digest))?;
        envelopes.push(notary::Envelope {
            manifest_digest: entry.digest.clone(),
            media_type: layer.media_type.clone(),
            blob,
        });
    }
    Ok(notary::Signatures {
        reference: format!(
            "{}/{}@{digest}",
            reference.resolve_registry(),
            reference.repository()
        ),
        target,
        envelopes,
    })
}

/// The key of `image`'s referrers of `artifact_type` in the caches (a
/// space is in neither an image reference nor a media type).
fn referrers_key(image: &str, artifact_type: &str) -> String {
    format!("{image} {artifact_type}")
}

/// `reference`'s OCI referrers of `artifact_type` (its manifest resolved
/// by digest first), each one's manifest, one layer and Notary Project
/// signatures.
async fn referrers(
    client: &Client,
    reference: &Reference,
    artifact_type: &str,
    auth: &RegistryAuth,
) -> Result<notary::Referrers, String> {
    let (_, digest) = client
        .pull_manifest_raw(reference, auth, &MANIFEST_TYPES)
        .await
        .map_err(|e| e.to_string())?;
    let digest = reference.digest().map(str::to_string).unwrap_or(digest);
    let subject = reference.clone_with_digest(digest.clone());
    let index = client
        .pull_referrers(&subject, Some(artifact_type))
        .await
        .map_err(|e| format!("referrers of {digest}: {e}"))?;
    if index.manifests.len() > notary::MAX_REFERRERS {
        return Err(format!(
            "failed to fetch referrers: too many referrers found, max limit is {}",
            notary::MAX_REFERRERS
        ));
    }
    let mut entries = Vec::new();
    for entry in &index.manifests {
        let by_digest = reference.clone_with_digest(entry.digest.clone());
        let (bytes, _) = client
            .pull_manifest_raw(&by_digest, auth, &[OCI_IMAGE_MEDIA_TYPE])
            .await
            .map_err(|e| format!("referrer {}: {e}", entry.digest))?;
        let manifest: OciImageManifest = serde_json::from_slice(&bytes)
            .map_err(|e| format!("referrer {}: not an image manifest: {e}", entry.digest))?;
        let payload = match manifest.layers.as_slice() {
            [layer] => {
                let mut blob = Vec::new();
                client
                    .pull_blob(&by_digest, layer, &mut blob)
                    .await
                    .map_err(|e| format!("referrer {} layer: {e}", entry.digest))?;
                Ok(blob)
            }
            _ => Err("invalid referrer descriptor, must have only one layer".to_string()),
        };
        entries.push(notary::Referrer {
            digest: entry.digest.clone(),
            payload,
            signatures: notary_signatures(client, &by_digest, auth).await?,
        });
    }
    Ok(notary::Referrers {
        artifact_type: artifact_type.to_string(),
        entries,
    })
}

/// One evaluation's image data, signatures and attestations, for engines
/// that read cluster data synchronously (`ClusterData::image_data`) and
/// fetch what they missed between evaluations (admission, the background
/// scan): [`Self::get`], [`Self::verify`] and [`Self::attestations`] answer
/// from this evaluation's fetches and the registry's cache and record what
/// they could not answer; [`Self::fetch_missed`] fetches those,
/// concurrently, and keeps each answer, error included, so the next
/// evaluation gets the error instead of fetching again.
///
/// # Invariants
/// The `std::sync::Mutex`es are held only inside these methods, never
/// across an `.await`: `fetch_missed` takes the missed list, awaits the
/// fetches with no lock held, then locks each map to store the answers.
/// Sigstore's trust root (keyless trusts without roots) is missed and
/// fetched the same way, once for every image.
#[derive(Debug)]
pub struct ImageLookup {
    registry: Arc<Registry>,
    data: Answers<Value>,
    signatures: Answers<Arc<cosign::Signatures>>,
    attestations: Answers<Arc<cosign::Attestations>>,
    notary: Answers<Arc<notary::Signatures>>,
    /// By [`referrers_key`].
    referrers: Answers<Arc<notary::Referrers>>,
    /// Images whose verifications may not use kept answers
    /// ([`Self::fresh`]).
    fresh: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Why this evaluation's load of Sigstore's trust root failed, when
    /// it did.
    trust_root: std::sync::Mutex<Option<String>>,
    missed: std::sync::Mutex<Vec<(Want, String)>>,
}

/// This evaluation's fetched answers, by image reference.
type Answers<T> = std::sync::Mutex<std::collections::HashMap<String, Result<T, String>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Want {
    Data,
    Signatures,
    Attestations,
    NotarySignatures,
    /// OCI referrers (the key is [`referrers_key`]'s).
    Referrers,
    /// Sigstore's trust root (the image is empty).
    TrustRoot,
}

/// `m` locked; a panic while it was held left nothing half-written (each
/// critical section is one map or vector operation).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fetches, concurrently, the images in `missed` wanted as `want`: each
/// image and its answer (an error as text).
async fn fetch_wanted<'a, T, F>(
    missed: &'a [(Want, String)],
    want: Want,
    fetch: impl Fn(&'a str) -> F,
) -> Vec<(String, Result<T, String>)>
where
    F: std::future::Future<Output = Result<T, ImageError>>,
{
    futures::future::join_all(missed.iter().filter(|(w, _)| *w == want).map(|(_, image)| {
        let answer = fetch(image);
        async move { (image.clone(), answer.await.map_err(|e| e.to_string())) }
    }))
    .await
}

impl ImageLookup {
    /// An evaluation's lookup through `registry`.
    pub fn new(registry: Arc<Registry>) -> ImageLookup {
        ImageLookup {
            registry,
            data: Default::default(),
            signatures: Default::default(),
            attestations: Default::default(),
            notary: Default::default(),
            referrers: Default::default(),
            fresh: Default::default(),
            trust_root: Default::default(),
            missed: Default::default(),
        }
    }

    /// `image`'s answer: this evaluation's fetch, else the registry's kept
    /// one (`cached`), else a miss recorded as `want`.
    fn answer<T: Clone>(
        &self,
        fetched: &Answers<T>,
        cached: impl FnOnce() -> Option<T>,
        want: Want,
        image: &str,
    ) -> Result<T, String> {
        if let Some(answer) = lock(fetched).get(image) {
            return answer.clone();
        }
        if let Some(answer) = cached() {
            return Ok(answer);
        }
        lock(&self.missed).push((want, image.to_string()));
        Err(format!("image data for {image} was not fetched yet"))
    }

    /// Whether `trust`'s roots are at hand: its own, Sigstore's when loaded
    /// (or not configured: the registry's verification says so), else this
    /// evaluation's failure to load them, or a miss recorded.
    fn roots(&self, trust: &cosign::Trust) -> Result<(), String> {
        let Some(trust_root) = &self.registry.settings.trust_root else {
            return Ok(());
        };
        if !wants_trust_root(trust) || trust_root.cached().is_some() {
            return Ok(());
        }
        if let Some(error) = &*lock(&self.trust_root) {
            return Err(error.clone());
        }
        lock(&self.missed).push((Want::TrustRoot, String::new()));
        Err(format!(
            "Sigstore trust root from {} was not fetched yet",
            trust_root.mirror()
        ))
    }

    /// This evaluation verifies `image` with nothing kept from before it
    /// (`useCache: false`): the first call forgets what the registry kept
    /// about its signatures, attestations and their verifications, so they
    /// are fetched and checked again; later calls of this evaluation (its
    /// repetitions after [`Self::fetch_missed`]) use what it fetched.
    pub fn fresh(&self, image: &str) {
        if lock(&self.fresh).insert(image.to_string()) {
            self.registry.forget(image);
        }
    }

    /// `image`'s CEL object (`image.GetMetadata`'s), or an error: the
    /// registry's, or, when it was not fetched yet, one saying so (the
    /// evaluation is then repeated after [`Self::fetch_missed`]).
    pub fn get(&self, image: &str) -> Result<Value, String> {
        self.answer(
            &self.data,
            || self.registry.cached(image).map(|d| d.cel_value()),
            Want::Data,
            image,
        )
    }

    /// Whether `trust` (public keys, or keyless roots and identities)
    /// verifies a cosign signature of `image`: its digest, or why not (the
    /// registry's error, cosign's `no signatures found` / `no matching
    /// signatures`, or not fetched yet, as [`Self::get`]: the signatures,
    /// or Sigstore's trust root for a keyless trust without roots).
    pub fn verify(&self, image: &str, trust: &cosign::Trust) -> Result<String, String> {
        if let cosign::Trust::Notary(_) = trust {
            let sigs = self.answer(
                &self.notary,
                || self.registry.cached_notary_signatures(image),
                Want::NotarySignatures,
                image,
            )?;
            return self.registry.verify_notary(image, trust, &sigs);
        }
        let sigs = self.answer(
            &self.signatures,
            || self.registry.cached_signatures(image),
            Want::Signatures,
            image,
        );
        // Both missed at once: one `fetch_missed` fetches both.
        let roots = self.roots(trust);
        let sigs = sigs?;
        roots?;
        self.registry.verify(image, trust, &sigs)
    }

    /// The in-toto statements of the cosign attestations of `image` that
    /// `trust` (public keys, or keyless roots and identities) verifies, or
    /// why none (the registry's error, cosign's `no matching attestations:
    /// ` (none at all) / `no matching attestations: ` with why, or not
    /// fetched yet, as [`Self::verify`]).
    pub fn attestations(&self, image: &str, trust: &cosign::Trust) -> Result<Vec<Value>, String> {
        let atts = self.answer(
            &self.attestations,
            || self.registry.cached_attestations(image),
            Want::Attestations,
            image,
        );
        let roots = self.roots(trust);
        let atts = atts?;
        roots?;
        self.registry.verify_attestations(image, trust, &atts)
    }

    /// The payload of the first OCI referrer of `image` of
    /// `artifact_type` whose Notary Project signature `trust` verifies, or
    /// why none (notation's words, Kyverno's `no attestations found`, or not
    /// fetched yet, as [`Self::get`]).
    pub fn referrer_payload(
        &self,
        image: &str,
        artifact_type: &str,
        trust: &cosign::Trust,
    ) -> Result<Value, String> {
        let key = referrers_key(image, artifact_type);
        let refs = match lock(&self.referrers).get(&key) {
            Some(answer) => answer.clone(),
            None => match self.registry.cached_referrers(image, artifact_type) {
                Some(refs) => Ok(refs),
                None => {
                    lock(&self.missed).push((Want::Referrers, key));
                    return Err(format!("image data for {image} was not fetched yet"));
                }
            },
        }?;
        self.registry.verify_referrers(image, trust, &refs)
    }

    /// Whether an evaluation since the last [`Self::fetch_missed`] missed
    /// anything.
    pub fn missed_any(&self) -> bool {
        !lock(&self.missed).is_empty()
    }

    /// Fetches what [`Self::get`], [`Self::verify`] and
    /// [`Self::attestations`] missed since the last call, all at once
    /// (Sigstore's trust root among them, when missed); false when nothing
    /// was missed.
    pub async fn fetch_missed(&self) -> bool {
        let mut missed = std::mem::take(&mut *lock(&self.missed));
        missed.sort();
        missed.dedup();
        if missed.is_empty() {
            return false;
        }
        let registry = &self.registry;
        let data = fetch_wanted(&missed, Want::Data, |image| async move {
            registry.image_data(image).await.map(|d| d.cel_value())
        });
        let sigs = fetch_wanted(&missed, Want::Signatures, |image| {
            registry.signatures(image)
        });
        let atts = fetch_wanted(&missed, Want::Attestations, |image| {
            registry.attestations(image)
        });
        let notary = fetch_wanted(&missed, Want::NotarySignatures, |image| {
            registry.notary_signatures(image)
        });
        let referred = fetch_wanted(&missed, Want::Referrers, |key| async move {
            let (image, artifact_type) = key.split_once(' ').unwrap_or((key, ""));
            registry.referrers(image, artifact_type).await
        });
        let trust_root = async {
            match &registry.settings.trust_root {
                Some(t) if missed.iter().any(|(w, _)| *w == Want::TrustRoot) => t.get().await.err(),
                _ => None,
            }
        };
        let (data, sigs, atts, notary, referred, trust_root) =
            futures::join!(data, sigs, atts, notary, referred, trust_root);
        lock(&self.data).extend(data);
        lock(&self.notary).extend(notary);
        lock(&self.referrers).extend(referred);
        lock(&self.signatures).extend(sigs);
        lock(&self.attestations).extend(atts);
        if let Some(error) = trust_root {
            *lock(&self.trust_root) = Some(error);
        }
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
