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
    IMAGE_CONFIG_MEDIA_TYPE, IMAGE_LAYER_GZIP_MEDIA_TYPE, ImageIndexEntry, OciImageIndex,
    OciManifest, Platform,
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
}

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
        }
    }

    /// Starts one, or None (skipping) when the binary is missing outside CI.
    pub fn start() -> Option<LocalRegistry> {
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
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:0\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
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

    fn client() -> Client {
        crate::install_crypto_provider();
        Client::new(ClientConfig {
            protocol: ClientProtocol::Http,
            ..ClientConfig::default()
        })
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
        let pushed = Self::client()
            .push(&reference, &[layer], config, &RegistryAuth::Anonymous, None)
            .await
            .unwrap();
        assert!(pushed.manifest_url.contains(&self.host));
        Self::manifest(&reference, "application/vnd.oci.image.manifest.v1+json").await
    }

    /// The digest and size of the manifest `reference` names.
    async fn manifest(reference: &Reference, media_type: &str) -> (String, i64) {
        let (bytes, digest) = Self::client()
            .pull_manifest_raw(reference, &RegistryAuth::Anonymous, &[media_type])
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
        Self::client()
            .push_manifest(&reference, &OciManifest::ImageIndex(index))
            .await
            .unwrap();
        Self::manifest(&reference, "application/vnd.oci.image.index.v1+json")
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
        self.add_cosign_layer(repo_tag, crate::cosign::signature_tag, |name, digest| {
            let payload = serde_json::to_vec(&serde_json::json!({
                "critical": {
                    "identity": {"docker-reference": name},
                    "image": {"docker-manifest-digest": digest},
                    "type": "cosign container image signature"},
                "optional": null}))
            .unwrap();
            let annotations = BTreeMap::from([(
                crate::cosign::SIGNATURE_ANNOTATION.to_string(),
                der_base64(key, &payload),
            )]);
            ImageLayer::new(
                payload,
                crate::cosign::SIMPLE_SIGNING_MEDIA_TYPE.to_string(),
                Some(annotations),
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
            let annotations = BTreeMap::from([
                (SIGNATURE_ANNOTATION.to_string(), String::new()),
                ("predicateType".to_string(), predicate_type.to_string()),
            ]);
            ImageLayer::new(
                serde_json::to_vec(&envelope).unwrap(),
                DSSE_MEDIA_TYPE.to_string(),
                Some(annotations),
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
        let (digest, _) =
            Self::manifest(&reference, "application/vnd.oci.image.manifest.v1+json").await;
        let artifact = Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            tag(&digest),
        );
        let layer = layer(
            &format!("{}/{}", self.host, reference.repository()),
            &digest,
        );
        let client = Self::client();
        let mut layers = crate::artifact_layers(&client, &artifact, &layer.media_type)
            .await
            .unwrap();
        layers.push(layer);
        let config = Config::new(b"{}".to_vec(), IMAGE_CONFIG_MEDIA_TYPE.to_string(), None);
        client
            .push(&artifact, &layers, config, &RegistryAuth::Anonymous, None)
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
