//! cosign signatures: where cosign keeps an image's signatures and how a
//! public key verifies them.
//!
//! cosign stores the signatures of `repo@sha256:HEX` as an OCI artifact
//! tagged `repo:sha256-HEX.sig`: each layer's blob is a "simple signing"
//! payload (JSON naming the image's manifest digest under
//! `critical.image.docker-manifest-digest`) and its annotation
//! `dev.cosignproject.cosign/signature` the base64 signature of those
//! bytes. A key (PEM, ECDSA P-256, cosign's default) verifies a signature
//! when the signature is valid for the payload and the payload names the
//! image's digest.

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{DerSignature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde_json::Value;

/// The media type of a simple signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";

/// One signature cosign stored for an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The signed payload's bytes.
    pub payload: Vec<u8>,
    /// The base64 signature of `payload`.
    pub signature: String,
}

/// An image's digest and the signatures stored for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signatures {
    /// The image's manifest digest (`sha256:HEX`).
    pub digest: String,
    /// What cosign stored (empty: unsigned).
    pub signatures: Vec<Signature>,
}

/// The tag cosign stores `digest`'s signatures under.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// Whether one of `keys` (PEM public keys, one or more) verifies one of the
/// signatures for the image's digest. The error is cosign's, as Kyverno
/// reports it: `no signatures found`, or `no matching signatures` with why.
pub fn verify_with_keys(sigs: &Signatures, keys: &str) -> Result<(), String> {
    let keys = parse_keys(keys)?;
    if sigs.signatures.is_empty() {
        return Err("no signatures found".to_string());
    }
    let mut why = Vec::new();
    for s in &sigs.signatures {
        match verify_one(s, &sigs.digest, &keys) {
            Ok(()) => return Ok(()),
            Err(e) => why.push(e),
        }
    }
    why.dedup();
    Err(format!("no matching signatures: {}", why.join("; ")))
}

fn parse_keys(text: &str) -> Result<Vec<VerifyingKey>, String> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("-----BEGIN PUBLIC KEY-----") {
        let end_marker = "-----END PUBLIC KEY-----";
        let Some(end) = rest[start..].find(end_marker) else {
            return Err("a public key's PEM has no END line".to_string());
        };
        let pem = &rest[start..start + end + end_marker.len()];
        keys.push(
            VerifyingKey::from_public_key_pem(pem)
                .map_err(|e| format!("invalid public key (ECDSA P-256 PEM expected): {e}"))?,
        );
        rest = &rest[start + end + end_marker.len()..];
    }
    if keys.is_empty() {
        return Err("no public key (a PEM `PUBLIC KEY` block) in publicKeys".to_string());
    }
    Ok(keys)
}

fn verify_one(s: &Signature, digest: &str, keys: &[VerifyingKey]) -> Result<(), String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(s.signature.trim())
        .map_err(|e| format!("signature is not base64: {e}"))?;
    let sig = DerSignature::try_from(raw.as_slice())
        .map_err(|_| "signature is not an ASN.1 ECDSA signature".to_string())?;
    if !keys.iter().any(|k| k.verify(&s.payload, &sig).is_ok()) {
        return Err("invalid signature when validating ASN.1 encoded signature".to_string());
    }
    let payload: Value = serde_json::from_slice(&s.payload)
        .map_err(|e| format!("signed payload is not JSON: {e}"))?;
    match payload["critical"]["image"]["docker-manifest-digest"].as_str() {
        Some(d) if d == digest => Ok(()),
        Some(d) => Err(format!("signed payload names digest {d}, not {digest}")),
        None => Err("signed payload names no image digest".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;
    use p256::ecdsa::{Signature as EcSignature, SigningKey};
    use p256::pkcs8::{EncodePublicKey as _, LineEnding};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32].into()).unwrap()
    }

    fn signed(k: &SigningKey, digest: &str) -> Signature {
        let payload = serde_json::to_vec(&serde_json::json!({"critical": {
            "identity": {"docker-reference": "r/app"},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature"}, "optional": null}))
        .unwrap();
        let sig: EcSignature = k.sign(&payload);
        Signature {
            payload,
            signature: base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes()),
        }
    }

    fn pem(k: &SigningKey) -> String {
        k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap()
    }

    #[test]
    fn a_key_verifies_its_signature_of_the_digest_only() {
        let d = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        let sigs = Signatures {
            digest: d.clone(),
            signatures: vec![signed(&key(1), &d)],
        };
        assert_eq!(verify_with_keys(&sigs, &pem(&key(1))), Ok(()));
        // Either of two keys in one publicKeys text.
        let both = format!("{}\n{}", pem(&key(2)), pem(&key(1)));
        assert_eq!(verify_with_keys(&sigs, &both), Ok(()));
        let err = verify_with_keys(&sigs, &pem(&key(2))).unwrap_err();
        assert!(err.starts_with("no matching signatures"), "{err}");
        let moved = Signatures {
            digest: other.clone(),
            signatures: vec![signed(&key(1), &d)],
        };
        let err = verify_with_keys(&moved, &pem(&key(1))).unwrap_err();
        assert!(
            err.contains(&format!("names digest {d}, not {other}")),
            "{err}"
        );
        let unsigned = Signatures {
            digest: d,
            signatures: vec![],
        };
        assert_eq!(
            verify_with_keys(&unsigned, &pem(&key(1))),
            Err("no signatures found".to_string())
        );
        assert!(verify_with_keys(&sigs, "not a key").is_err());
        assert_eq!(
            signature_tag(&other),
            format!("sha256-{}.sig", "b".repeat(64))
        );
    }
}
