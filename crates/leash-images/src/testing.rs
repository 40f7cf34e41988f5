//! A real registry for tests (the `testing` feature): Debian's
//! `docker-registry` (the distribution registry) on 127.0.0.1, and images
//! pushed to it with oci-client. Used by this crate's tests and leash's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{
    IMAGE_CONFIG_MEDIA_TYPE, IMAGE_LAYER_GZIP_MEDIA_TYPE, ImageIndexEntry, OCI_IMAGE_MEDIA_TYPE,
    OciImageIndex, OciImageManifest, OciManifest, Platform,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// The registry binary: `LEASH_REGISTRY`, else Debian's.
fn registry_binary() -> Option<PathBuf> {
    let p = std::env::var_os("LEASH_REGISTRY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/docker-registry"));
    p.exists().then_some(p)
}

/// A registry on 127.0.0.1 for one test; killed when dropped (one made
/// by [`LocalRegistry::at`] is someone else's and is left running).
#[derive(Debug)]
pub struct LocalRegistry {
    child: Option<Child>,
    /// `127.0.0.1:PORT`.
    pub host: String,
    _dir: Option<tempfile::TempDir>,
    /// How pushes authenticate ([`LocalRegistry::start_with_auth`]'s
    /// registry wants [`TEST_USER`] and [`TEST_PASSWORD`]).
    auth: RegistryAuth,
}

/// The user of a registry started by [`LocalRegistry::start_with_auth`].
pub const TEST_USER: &str = "leash";
/// Its password.
pub const TEST_PASSWORD: &str = "leash-test-password";
/// [`TEST_PASSWORD`]'s bcrypt hash (cost 4), the registry's htpasswd line:
/// computed once (`crypt(3)`'s `$2b$`), as the registry accepts bcrypt only.
const TEST_PASSWORD_BCRYPT: &str = "$2b$04$Oin6c1f.e3RUmdWHWSXumO1uQHejBh04hX9EcULsziK9UBLSDzdya";

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl LocalRegistry {
    /// A registry already running at `host` (`127.0.0.1:PORT`), to push to.
    pub fn at(host: &str) -> LocalRegistry {
        LocalRegistry {
            child: None,
            host: host.to_string(),
            _dir: None,
            auth: RegistryAuth::Anonymous,
        }
    }

    /// Starts one, or None (skipping) when the binary is missing outside CI.
    pub fn start() -> Option<LocalRegistry> {
        Self::start_with(false)
    }

    /// As [`LocalRegistry::start`], a registry that answers only
    /// [`TEST_USER`] with [`TEST_PASSWORD`] (htpasswd, HTTP basic
    /// authentication); this value pushes with them.
    pub fn start_with_auth() -> Option<LocalRegistry> {
        Self::start_with(true)
    }

    fn start_with(auth: bool) -> Option<LocalRegistry> {
        let Some(bin) = registry_binary() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: docker-registry is missing (.ci/run installs Debian's docker-registry)"
            );
            eprintln!(
                "skipped: /usr/bin/docker-registry missing (apt-get install docker-registry)"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yml");
        let log = dir.path().join("log");
        let mut text = format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:0\n",
            dir.path().join("data").display()
        );
        if auth {
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(&htpasswd, format!("{TEST_USER}:{TEST_PASSWORD_BCRYPT}\n")).unwrap();
            text.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: leash-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut registry = LocalRegistry {
            child: Some(child),
            host: String::new(),
            _dir: Some(dir),
            auth: if auth {
                RegistryAuth::Basic(TEST_USER.into(), TEST_PASSWORD.into())
            } else {
                RegistryAuth::Anonymous
            },
        };
        // Port 0: the registry logs where it listens.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(at) = text.find("listening on ") {
                let rest = &text[at + "listening on ".len()..];
                registry.host = rest
                    .split(|c: char| c.is_whitespace() || c == '"')
                    .next()
                    .unwrap()
                    .to_string();
                return Some(registry);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "docker-registry did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// A client holding this registry's credentials.
    async fn client(&self) -> Client {
        crate::install_crypto_provider();
        let client = Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        });
        client.store_auth_if_needed(&self.host, &self.auth).await;
        client
    }

    /// Pushes a one-layer image whose config carries `labels`; returns the
    /// manifest's digest and size.
    pub async fn push(&self, repo_tag: &str, labels: &[(&str, &str)]) -> (String, i64) {
        let reference: Reference = format!("{}/{repo_tag}", self.host).parse().unwrap();
        let labels: serde_json::Map<String, serde_json::Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .collect();
        let layer = ImageLayer::new(
            format!("layer of {repo_tag}").into_bytes(),
            IMAGE_LAYER_GZIP_MEDIA_TYPE.to_string(),
            None,
        );
        let config = serde_json::json!({
            "architecture": "amd64", "os": "linux",
            "config": {"Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let config = Config::new(
            serde_json::to_vec(&config).unwrap(),
            IMAGE_CONFIG_MEDIA_TYPE.to_string(),
            None,
        );
        let pushed = self
            .client()
            .await
            .push(&reference, &[layer], config, &self.auth, None)
            .await
            .unwrap();
        assert!(pushed.manifest_url.contains(&self.host));
        self.manifest(&reference, "application/vnd.oci.image.manifest.v1+json")
            .await
    }

    /// The digest and size of the manifest `reference` names.
    async fn manifest(&self, reference: &Reference, media_type: &str) -> (String, i64) {
        let (bytes, digest) = self
            .client()
            .await
            .pull_manifest_raw(reference, &self.auth, &[media_type])
            .await
            .unwrap();
        (digest, bytes.len() as i64)
    }

    /// Pushes an image index of `entries` ((digest, size), os, arch)
    /// under `repo_tag`; returns its digest.
    pub async fn push_index(
        &self,
        repo_tag: &str,
        entries: &[(&(String, i64), &str, &str)],
    ) -> String {
        let reference: Reference = format!("{}/{repo_tag}", self.host).parse().unwrap();
        let manifests = entries
            .iter()
            .map(|((digest, size), os, arch)| ImageIndexEntry {
                media_type: "application/vnd.oci.image.manifest.v1+json".into(),
                digest: digest.clone(),
                size: *size,
                platform: Some(Platform {
                    architecture: (*arch).into(),
                    os: (*os).into(),
                    os_version: None,
                    os_features: None,
                    variant: None,
                    features: None,
                }),
                annotations: None,
                artifact_type: None,
            })
            .collect();
        let index = OciImageIndex {
            schema_version: 2,
            media_type: Some("application/vnd.oci.image.index.v1+json".into()),
            manifests,
            artifact_type: None,
            annotations: None,
        };
        self.client()
            .await
            .push_manifest(&reference, &OciManifest::ImageIndex(index))
            .await
            .unwrap();
        self.manifest(&reference, "application/vnd.oci.image.index.v1+json")
            .await
            .0
    }
}

/// A test signing key (ECDSA P-256, cosign's default), from `seed`.
pub fn signing_key(seed: u8) -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_bytes(&[seed.max(1); 32].into()).expect("a valid scalar")
}

/// `key`'s public key as cosign's `cosign.pub` holds it (PEM).
pub fn public_key_pem(key: &p256::ecdsa::SigningKey) -> String {
    use p256::pkcs8::EncodePublicKey as _;
    key.verifying_key()
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .expect("PEM")
}

impl LocalRegistry {
    /// Signs `repo_tag`'s manifest digest with `key` as `cosign sign --key`
    /// does: a simple signing payload layer with the signature annotation,
    /// added to those under `sha256-HEX.sig`. Returns the signed digest.
    pub async fn sign(&self, repo_tag: &str, key: &p256::ecdsa::SigningKey) -> String {
        self.sign_with(repo_tag, key, None).await
    }

    /// Signs `repo_tag`'s manifest digest as `cosign sign` does keyless:
    /// as [`Self::sign`] with `id`'s key, the layer also carrying `id`'s
    /// certificate and `chain_pem` (what [`Fulcio::chain_pem`] gives) in
    /// cosign's certificate annotations. Returns the signed digest.
    pub async fn sign_keyless(
        &self,
        repo_tag: &str,
        id: &SigningIdentity,
        chain_pem: &str,
    ) -> String {
        self.sign_with(repo_tag, &id.key, Some((&id.cert_pem, chain_pem)))
            .await
    }

    /// [`Self::sign`], the layer also annotated with `certificate` (the
    /// signing certificate and its chain) when given.
    async fn sign_with(
        &self,
        repo_tag: &str,
        key: &p256::ecdsa::SigningKey,
        certificate: Option<(&str, &str)>,
    ) -> String {
        self.add_cosign_layer(repo_tag, crate::cosign::signature_tag, |name, digest| {
            let payload = serde_json::to_vec(&serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": name},
                    "image": {"docker-manifest-digest": digest},
                    "type": "cosign container image signature"},
                "optional": null}))
            .unwrap();
            let signature = der_base64(key, &payload);
            ImageLayer::new(
                payload,
                crate::cosign::SIMPLE_SIGNING_MEDIA_TYPE.to_string(),
                Some(annotations(
                    [(crate::cosign::SIGNATURE_ANNOTATION, signature)],
                    certificate,
                )),
            )
        })
        .await
    }

    /// Attests `predicate` (of type `predicate_type`) about `repo_tag`'s
    /// manifest digest with `key` as `cosign attest --key` does: an in-toto
    /// statement naming the image and its digest, in a DSSE envelope signed
    /// over its pre-authentication encoding, added as a layer to those
    /// under `sha256-HEX.att` (cosign keeps every attestation). Returns the
    /// attested digest.
    pub async fn attest(
        &self,
        repo_tag: &str,
        key: &p256::ecdsa::SigningKey,
        predicate_type: &str,
        predicate: serde_json::Value,
    ) -> String {
        self.attest_with(repo_tag, key, None, predicate_type, predicate)
            .await
    }

    /// Attests as `cosign attest` does keyless: as [`Self::attest`] with
    /// `id`'s key, the DSSE layer also carrying `id`'s certificate and
    /// `chain_pem` in cosign's certificate annotations. Returns the
    /// attested digest.
    pub async fn attest_keyless(
        &self,
        repo_tag: &str,
        id: &SigningIdentity,
        chain_pem: &str,
        predicate_type: &str,
        predicate: serde_json::Value,
    ) -> String {
        let certificate = Some((id.cert_pem.as_str(), chain_pem));
        self.attest_with(repo_tag, &id.key, certificate, predicate_type, predicate)
            .await
    }

    /// [`Self::attest`], the layer also annotated with `certificate` (the
    /// signing certificate and its chain) when given.
    async fn attest_with(
        &self,
        repo_tag: &str,
        key: &p256::ecdsa::SigningKey,
        certificate: Option<(&str, &str)>,
        predicate_type: &str,
        predicate: serde_json::Value,
    ) -> String {
        use crate::cosign::{DSSE_MEDIA_TYPE, IN_TOTO_PAYLOAD_TYPE, SIGNATURE_ANNOTATION};
        self.add_cosign_layer(repo_tag, crate::cosign::attestation_tag, |name, digest| {
            let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
            let statement = serde_json::to_vec(&serde_json::json!({
                "_type": "https://in-toto.io/Statement/v0.1",
                "predicateType": predicate_type,
                "subject": [{"name": name, "digest": {"sha256": hex}}],
                "predicate": predicate}))
            .unwrap();
            let signed = crate::cosign::pae(IN_TOTO_PAYLOAD_TYPE, &statement);
            let envelope = serde_json::json!({
                "payloadType": IN_TOTO_PAYLOAD_TYPE,
                "payload": base64::engine::general_purpose::STANDARD.encode(&statement),
                "signatures": [{"keyid": "", "sig": der_base64(key, &signed)}]});
            ImageLayer::new(
                serde_json::to_vec(&envelope).unwrap(),
                DSSE_MEDIA_TYPE.to_string(),
                Some(annotations(
                    [
                        (SIGNATURE_ANNOTATION, String::new()),
                        ("predicateType", predicate_type.to_string()),
                    ],
                    certificate,
                )),
            )
        })
        .await
    }

    /// Pushes the cosign artifact `tag(digest)` of `repo_tag`'s manifest
    /// digest: the layers of its kind it holds already, then the one
    /// `layer(HOST/REPO, digest)` makes. Returns the digest.
    async fn add_cosign_layer(
        &self,
        repo_tag: &str,
        tag: fn(&str) -> String,
        layer: impl FnOnce(&str, &str) -> ImageLayer,
    ) -> String {
        let reference: Reference = format!("{}/{repo_tag}", self.host).parse().unwrap();
        let (digest, _) = self
            .manifest(&reference, "application/vnd.oci.image.manifest.v1+json")
            .await;
        let artifact = Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            tag(&digest),
        );
        let layer = layer(
            &format!("{}/{}", self.host, reference.repository()),
            &digest,
        );
        let client = self.client().await;
        let mut layers = crate::artifact_layers(&client, &artifact, &layer.media_type, &self.auth)
            .await
            .unwrap();
        layers.push(layer);
        let config = Config::new(b"{}".to_vec(), IMAGE_CONFIG_MEDIA_TYPE.to_string(), None);
        let manifest = OciImageManifest::build(&layers, &config, None);
        client
            .store_auth_if_needed(artifact.resolve_registry(), &self.auth)
            .await;
        for (layer, descriptor) in layers.iter().zip(&manifest.layers) {
            client
                .push_blob(&artifact, layer.data.clone(), &descriptor.digest)
                .await
                .unwrap();
        }
        client
            .push_blob(&artifact, config.data, &manifest.config.digest)
            .await
            .unwrap();
        // Not `Client::push`: its manifest is written as canonical JSON,
        // which leaves the newlines of a PEM annotation (a keyless
        // certificate) unescaped, and the registry rejects that JSON.
        client
            .push_manifest_raw(
                &artifact,
                serde_json::to_vec(&manifest).unwrap(),
                OCI_IMAGE_MEDIA_TYPE.parse().unwrap(),
            )
            .await
            .unwrap();
        digest
    }
}

/// `key`'s signature of `message`, as cosign writes it: base64 of the
/// ASN.1 DER encoding.
fn der_base64(key: &p256::ecdsa::SigningKey, message: &[u8]) -> String {
    use p256::ecdsa::signature::Signer as _;
    let signature: p256::ecdsa::Signature = key.sign(message);
    base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
}

/// A cosign layer's annotations: `base`, and cosign's certificate and
/// chain annotations when `certificate` (certificate PEM, chain PEM) is
/// given.
fn annotations<const N: usize>(
    base: [(&str, String); N],
    certificate: Option<(&str, &str)>,
) -> BTreeMap<String, String> {
    let mut annotations: BTreeMap<String, String> =
        base.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    if let Some((cert, chain)) = certificate {
        annotations.insert(
            crate::cosign::CERTIFICATE_ANNOTATION.to_string(),
            cert.to_string(),
        );
        annotations.insert(
            crate::cosign::CHAIN_ANNOTATION.to_string(),
            chain.to_string(),
        );
    }
    annotations
}

/// A local Fulcio-like CA for keyless tests: a root CA and an intermediate
/// CA (ECDSA P-256) issuing short-lived code signing certificates that
/// name an email and an OIDC issuer as Fulcio's do.
pub struct Fulcio {
    root: rcgen::Certificate,
    intermediate: rcgen::Certificate,
    intermediate_issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl std::fmt::Debug for Fulcio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fulcio").finish_non_exhaustive()
    }
}

/// A key and the certificate a [`Fulcio`] issued for it.
#[derive(Debug, Clone)]
pub struct SigningIdentity {
    /// The signing key (ECDSA P-256).
    pub key: p256::ecdsa::SigningKey,
    /// The certificate of the key's public key (PEM).
    pub cert_pem: String,
}

/// Fulcio's OIDC issuer extension (deprecated): the issuer's raw bytes.
const FULCIO_ISSUER_V1: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 1];
/// Fulcio's OIDC issuer extension: a DER UTF8String.
const FULCIO_ISSUER_V2: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];

impl Default for Fulcio {
    fn default() -> Fulcio {
        Fulcio::new()
    }
}

impl Fulcio {
    /// A CA with fresh random keys.
    pub fn new() -> Fulcio {
        let key = || rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key");
        Fulcio::with_keys(key(), key())
    }

    /// A CA whose keys (and names) depend only on `seed`: the root of one
    /// run is a trust anchor for the certificates another run issues
    /// (their bytes differ, ECDSA signatures being randomized).
    pub fn from_seed(seed: u8) -> Fulcio {
        let key = |role: u8| {
            use p256::pkcs8::EncodePrivateKey as _;
            // A scalar below the curve's order and not zero.
            let mut bytes = [seed; 32];
            bytes[0] = 0;
            bytes[31] = role;
            let key = p256::ecdsa::SigningKey::from_bytes(&bytes.into()).expect("a valid scalar");
            let der = key.to_pkcs8_der().expect("PKCS#8");
            rcgen::KeyPair::try_from(der.as_bytes()).expect("an rcgen key")
        };
        Fulcio::with_keys(key(1), key(2))
    }

    fn with_keys(root_key: rcgen::KeyPair, intermediate_key: rcgen::KeyPair) -> Fulcio {
        use rcgen::{BasicConstraints, IsCa, KeyUsagePurpose};
        let ca = |name: &str, constraints| {
            let mut params = test_params(name);
            params.is_ca = IsCa::Ca(constraints);
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2100, 1, 1);
            params
        };
        let root_params = ca("leash test fulcio root", BasicConstraints::Unconstrained);
        let root = root_params.self_signed(&root_key).expect("the root");
        let root_issuer = rcgen::Issuer::new(root_params, root_key);
        let mut intermediate_params = ca(
            "leash test fulcio intermediate",
            BasicConstraints::Constrained(0),
        );
        // As Sigstore's intermediate: code signing only.
        intermediate_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        intermediate_params.use_authority_key_identifier_extension = true;
        let intermediate = intermediate_params
            .signed_by(&intermediate_key, &root_issuer)
            .expect("the intermediate");
        Fulcio {
            root,
            intermediate,
            intermediate_issuer: rcgen::Issuer::new(intermediate_params, intermediate_key),
        }
    }

    /// The root CA's certificate (PEM): a keyless trust's `roots`.
    pub fn root_pem(&self) -> String {
        self.root.pem()
    }

    /// The chain a signing certificate's chain annotation holds, as
    /// cosign writes it: the intermediate's certificate, then the root's
    /// (PEM).
    pub fn chain_pem(&self) -> String {
        format!("{}{}", self.intermediate.pem(), self.root.pem())
    }

    /// A fresh key and its certificate, issued by the intermediate as
    /// Fulcio issues one: no subject, `subject_email` as its subject
    /// alternative name (critical, as with an empty subject), code signing
    /// usage, and `issuer` in Fulcio's two OIDC issuer extensions. Valid
    /// from a minute ago for `valid`: under a minute gives a certificate
    /// already expired.
    pub fn issue(
        &self,
        subject_email: &str,
        issuer: &str,
        valid: std::time::Duration,
    ) -> SigningIdentity {
        use p256::pkcs8::DecodePrivateKey as _;
        use x509_cert::der::Encode as _;
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key");
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(
            subject_email.try_into().expect("an ASCII email"),
        )];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        params.use_authority_key_identifier_extension = true;
        let from = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        params.not_before = from.into();
        params.not_after = (from + valid).into();
        let utf8 = x509_cert::der::asn1::Utf8StringRef::new(issuer)
            .and_then(|s| s.to_der())
            .expect("a DER UTF8String");
        params.custom_extensions = vec![
            rcgen::CustomExtension::from_oid_content(FULCIO_ISSUER_V1, issuer.as_bytes().to_vec()),
            rcgen::CustomExtension::from_oid_content(FULCIO_ISSUER_V2, utf8),
        ];
        let cert = params
            .signed_by(&leaf_key, &self.intermediate_issuer)
            .expect("the leaf");
        SigningIdentity {
            key: p256::ecdsa::SigningKey::from_pkcs8_der(leaf_key.serialized_der())
                .expect("a P-256 key"),
            cert_pem: cert.pem(),
        }
    }
}

/// Certificate parameters named `O=leash test, CN=cn`, rcgen's defaults
/// otherwise.
fn test_params(cn: &str) -> rcgen::CertificateParams {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "leash test");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params
}

/// A signed TUF repository on disk holding a [`Fulcio`]'s trust root, as
/// Sigstore's TUF repository holds Sigstore's: one ECDSA P-256 key for
/// the four top-level roles, consistent snapshots (as Sigstore's), every
/// role expiring in 2100, and one target, `trusted_root.json`, in
/// Sigstore's `TrustedRoot` shape with the CA's intermediate and root
/// certificates. Metadata in the directory, targets in its `targets/`.
#[derive(Debug, Clone)]
pub struct TufRepo {
    dir: std::path::PathBuf,
    root: Vec<u8>,
}

impl TufRepo {
    /// Writes the repository into `dir` (created if missing) with a fresh
    /// key. Runs tough's editor on a runtime of its own (on another
    /// thread): callable from within a runtime as from outside one.
    pub fn create(dir: &std::path::Path, fulcio: &Fulcio) -> TufRepo {
        let trusted_root = fulcio.trusted_root_json();
        let dir = dir.to_path_buf();
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime")
                    .block_on(Self::write(&dir, &trusted_root))
            })
            .join()
            .expect("the TUF repository")
        })
    }

    /// The signed `root.json` (version 1): a [`crate::tuf::TrustRootSource`]'s
    /// initial trusted root.
    pub fn root_json(&self) -> Vec<u8> {
        self.root.clone()
    }

    /// The repository's `file://` URL: a [`crate::tuf::TrustRootSource`]'s
    /// mirror.
    pub fn mirror(&self) -> String {
        crate::tuf::file_mirror(&self.dir).expect("an absolute directory")
    }

    /// The repository's directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    async fn write(dir: &std::path::Path, trusted_root: &[u8]) -> TufRepo {
        use tough::editor::RepositoryEditor;
        use tough::editor::signed::{PathExists, SignedRole};
        use tough::key_source::{KeySource, LocalKeySource};
        use tough::schema::{KeyHolder, Root};
        use tough::sign::Sign as _;

        std::fs::create_dir_all(dir).expect("the repository's directory");
        let work = tempfile::tempdir().expect("a temporary directory");
        // The key, PKCS#8 DER (ring's, through rcgen), as tough reads one.
        let key_path = work.path().join("key.pk8");
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key");
        std::fs::write(&key_path, key.serialize_der()).expect("the key file");
        let tuf_key = tough::sign::parse_keypair(&key.serialize_der())
            .expect("a key tough reads")
            .tuf_key();
        let key_id = serde_json::to_value(tuf_key.key_id().expect("a key ID")).expect("hex");
        let key_id = key_id.as_str().expect("a hex string");
        let role = serde_json::json!({"keyids": [key_id], "threshold": 1});
        let root: Root = serde_json::from_value(serde_json::json!({
            "_type": "root",
            "spec_version": "1.0.0",
            "consistent_snapshot": true,
            "version": 1,
            "expires": "2100-01-01T00:00:00Z",
            "keys": {key_id: tuf_key},
            "roles": {"root": role, "snapshot": role, "targets": role, "timestamp": role},
        }))
        .expect("a root");
        let expires = root.expires;
        let keys: Vec<Box<dyn KeySource>> = vec![Box::new(LocalKeySource { path: key_path })];
        let signed_root = SignedRole::new(
            root.clone(),
            &KeyHolder::Root(root),
            &keys,
            &ring::rand::SystemRandom::new(),
        )
        .await
        .expect("the signed root");
        signed_root.write(dir, true).await.expect("1.root.json");

        let staged = work.path().join("targets");
        std::fs::create_dir_all(&staged).expect("a directory");
        std::fs::write(staged.join("trusted_root.json"), trusted_root).expect("the target");
        let one = std::num::NonZeroU64::MIN;
        let mut editor = RepositoryEditor::new(dir.join("1.root.json"))
            .await
            .expect("an editor");
        editor
            .snapshot_version(one)
            .snapshot_expires(expires)
            .timestamp_version(one)
            .timestamp_expires(expires)
            .targets_version(one)
            .expect("targets")
            .targets_expires(expires)
            .expect("targets")
            .add_target_path(staged.join("trusted_root.json"))
            .await
            .expect("the target");
        let signed = editor.sign(&keys).await.expect("signed metadata");
        signed.write(dir).await.expect("the metadata");
        signed
            .copy_targets(&staged, dir.join("targets"), PathExists::Replace)
            .await
            .expect("the targets");
        TufRepo {
            dir: std::path::absolute(dir).expect("an absolute directory"),
            root: signed_root.buffer().clone(),
        }
    }

    /// Serves the repository over HTTP on 127.0.0.1 (a minimal HTTP/1.1
    /// file server: `GET` only, one request per connection, 404 for a
    /// missing file): its `http://127.0.0.1:PORT` URL, and the server,
    /// stopped when dropped.
    pub async fn serve(&self) -> (String, TufServer) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let dir = self.dir.clone();
        let scope = leash_runtime::Scope::new();
        let handle = scope.handle();
        // The accept loop and each connection's task end when the scope is
        // dropped (its token cancelled).
        drop(scope.spawn_with_output(async move {
            let token = handle.token().clone();
            leash_runtime::cancellable(&token, async {
                while let Ok((stream, _)) = listener.accept().await {
                    let (token, dir) = (token.clone(), dir.clone());
                    drop(handle.spawn_with_output(async move {
                        leash_runtime::cancellable(&token, serve_file(stream, dir)).await
                    }));
                }
            })
            .await
        }));
        (url, TufServer { _scope: scope })
    }
}

/// [`TufRepo::serve`]'s server: stops serving when dropped.
#[derive(Debug)]
pub struct TufServer {
    /// Owns the server's tasks: dropping it cancels them.
    _scope: leash_runtime::Scope,
}

/// Answers one HTTP request on `stream` with the file under `dir` its
/// path names.
async fn serve_file(mut stream: tokio::net::TcpStream, dir: PathBuf) {
    use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
    let mut reader = BufReader::new(&mut stream);
    let mut request = String::new();
    if reader.read_line(&mut request).await.is_err() {
        return;
    }
    // The headers, up to the empty line.
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line).await {
            Ok(n) if n > 2 => continue,
            _ => break,
        }
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let file = path
        .trim_start_matches('/')
        .split('/')
        .all(|c| !c.is_empty() && c != "." && c != "..")
        .then(|| dir.join(path.trim_start_matches('/')))
        .and_then(|p| std::fs::read(p).ok());
    let (status, body) = match file {
        Some(body) => ("200 OK", body),
        None => ("404 Not Found", b"not found".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(&body).await;
    let _ = stream.shutdown().await;
}

impl Fulcio {
    /// The CA as Sigstore's `trusted_root.json` (TUF target) describes
    /// Fulcio: one certificate authority whose chain is the intermediate's
    /// certificate then the root's (base64 DER), no transparency logs nor
    /// timestamp authorities.
    pub fn trusted_root_json(&self) -> Vec<u8> {
        let b64 = |der: &[u8]| base64::engine::general_purpose::STANDARD.encode(der);
        serde_json::to_vec_pretty(&serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "certificateAuthorities": [{
                "subject": {"organization": "leash test", "commonName": "leash test fulcio"},
                "uri": "https://fulcio.example",
                "certChain": {"certificates": [
                    {"rawBytes": b64(self.intermediate.der())},
                    {"rawBytes": b64(self.root.der())},
                ]},
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            }],
            "tlogs": [],
            "ctlogs": [],
            "timestampAuthorities": [],
        }))
        .expect("JSON")
    }
}

/// The Notary Project's `notation` CLI (`testenv/build.sh notation`) with
/// a configuration directory of its own, signing images of a
/// [`LocalRegistry`] as a Kyverno user signs them.
#[derive(Debug)]
pub struct Notation {
    bin: std::path::PathBuf,
    home: tempfile::TempDir,
}

/// A code signing chain for Notary signatures: a CA (ECDSA P-384) and a
/// leaf (ECDSA P-256, code signing) it issued, valid from a minute ago for
/// a day.
#[derive(Debug, Clone)]
pub struct NotaryChain {
    /// The leaf's private key (PKCS#8 PEM).
    pub key_pem: String,
    /// The leaf's certificate, then the CA's (PEM), as notation's
    /// `certPath` holds a chain.
    pub chain_pem: String,
    /// The leaf's certificate alone (PEM).
    pub leaf_pem: String,
    /// The CA's certificate (PEM).
    pub root_pem: String,
}

impl NotaryChain {
    /// A fresh chain whose names end with `name`.
    pub fn new(name: &str) -> NotaryChain {
        use rcgen::{BasicConstraints, IsCa, KeyUsagePurpose};
        let named = |cn: String| {
            let mut params = test_params(&cn);
            let from = std::time::SystemTime::now() - Duration::from_secs(60);
            params.not_before = from.into();
            params.not_after = (from + Duration::from_secs(86_400)).into();
            params
        };
        let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).expect("a key");
        let mut ca_params = named(format!("notary ca {name}"));
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = ca_params.self_signed(&ca_key).expect("the CA");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("a key");
        let mut leaf_params = named(format!("notary signer {name}"));
        leaf_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).expect("the leaf");
        NotaryChain {
            key_pem: leaf_key.serialize_pem(),
            chain_pem: format!("{}{}", leaf.pem(), ca.pem()),
            leaf_pem: leaf.pem(),
            root_pem: ca.pem(),
        }
    }
}

impl Notation {
    /// `$LEASH_NOTATION`, else the workspace's `testenv/bin/notation`,
    /// else `notation` on PATH; None (skipping, saying why) when there is
    /// none, except under CI (`CI` set), where that is a failure.
    pub fn find() -> Option<Notation> {
        let testenv =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testenv/bin/notation");
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join("notation"))
                .find(|p| p.is_file())
        });
        let bin = std::env::var_os("LEASH_NOTATION")
            .map(std::path::PathBuf::from)
            .or_else(|| testenv.is_file().then_some(testenv))
            .or(on_path);
        let Some(bin) = bin else {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: notation is missing (.ci/run builds it: testenv/build.sh notation)"
            );
            eprintln!("skipped: notation missing (testenv/build.sh notation)");
            return None;
        };
        Some(Notation {
            bin,
            home: tempfile::tempdir().expect("a temporary directory"),
        })
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .args(args)
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("HOME", self.home.path())
            .output()
            .expect("notation runs");
        assert!(
            out.status.success(),
            "notation {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `notation cert generate-test NAME`: a self-signed RSA 2048 code
    /// signing certificate and its key, added as key NAME; the
    /// certificate's PEM.
    pub fn generate_test_key(&self, name: &str) -> String {
        self.run(&["cert", "generate-test", name]);
        let cert = self
            .home
            .path()
            .join(format!("notation/localkeys/{name}.crt"));
        std::fs::read_to_string(cert).expect("the generated certificate")
    }

    /// Adds `chain`'s key and certificates as notation's local key NAME
    /// (its `signingkeys.json`, as `notation key add` would for a key
    /// file).
    pub fn add_key(&self, name: &str, chain: &NotaryChain) {
        let dir = self.home.path().join("notation");
        let keys = dir.join("localkeys");
        std::fs::create_dir_all(&keys).unwrap();
        let key_path = keys.join(format!("{name}.key"));
        let cert_path = keys.join(format!("{name}.crt"));
        std::fs::write(&key_path, &chain.key_pem).unwrap();
        std::fs::write(&cert_path, &chain.chain_pem).unwrap();
        let file = dir.join("signingkeys.json");
        let mut doc: serde_json::Value = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_else(|| serde_json::json!({"keys": []}));
        doc["keys"].as_array_mut().unwrap().push(serde_json::json!({
            "name": name,
            "keyPath": key_path,
            "certPath": cert_path,
        }));
        std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
    }

    /// `notation sign --insecure-registry --key KEY REFERENCE ARGS...`
    /// (`REFERENCE` names a digest).
    pub fn sign(&self, reference: &str, key: &str, args: &[&str]) {
        let mut all = vec!["sign", "--insecure-registry", "--key", key];
        all.extend_from_slice(args);
        all.push(reference);
        self.run(&all);
    }

    /// `oras attach --plain-http --artifact-type TYPE REFERENCE FILE`:
    /// `json` attached to the manifest `reference` names as an OCI referrer
    /// of `artifact_type` (one layer), the registry's referrers tag index
    /// updated where it has no referrers API; the referrer's digest. ORAS
    /// is `$LEASH_ORAS`, else the `oras` beside this `notation`.
    pub fn attach(&self, reference: &str, artifact_type: &str, json: &str) -> String {
        let oras = std::env::var_os("LEASH_ORAS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| self.bin.with_file_name("oras"));
        let file = self.home.path().join("payload.json");
        std::fs::write(&file, json).unwrap();
        let out = Command::new(&oras)
            .current_dir(self.home.path())
            .args([
                "attach",
                "--plain-http",
                "--no-tty",
                "--artifact-type",
                artifact_type,
                reference,
                "payload.json:application/json",
            ])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (testenv/build.sh notation builds it)",
                    oras.display()
                )
            });
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "oras attach: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find_map(|l| l.strip_prefix("Digest: "))
            .expect("oras prints the referrer's digest")
            .trim()
            .to_string()
    }
}
