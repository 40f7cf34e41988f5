//! cosign signatures and attestations: where cosign keeps an image's
//! signatures and in-toto attestations, and how a public key verifies them.
//!
//! cosign stores the signatures of `repo@sha256:HEX` as an OCI artifact
//! tagged `repo:sha256-HEX.sig`: each layer's blob is a "simple signing"
//! payload (JSON naming the image's manifest digest under
//! `critical.image.docker-manifest-digest`) and its annotation
//! `dev.cosignproject.cosign/signature` the base64 signature of those
//! bytes. A key (PEM, ECDSA P-256, cosign's default) verifies a signature
//! when the signature is valid for the payload and the payload names the
//! image's digest.
//!
//! `cosign attest --key` stores attestations the same way under
//! `repo:sha256-HEX.att`: each layer's blob is a DSSE envelope whose payload
//! is an in-toto statement (its `subject` naming the image's digest, its
//! `predicate` what is attested) and whose signatures are over the DSSE
//! pre-authentication encoding of that payload. A key verifies an
//! attestation when one of the envelope's signatures is valid and the
//! statement names the image's digest.

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{DerSignature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use serde_json::Value;

/// The media type of a simple signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of an attestation layer: a DSSE envelope.
pub const DSSE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";
/// The payload type of a DSSE envelope holding an in-toto statement.
pub const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

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

/// An image's digest and the attestations stored for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestations {
    /// The image's manifest digest (`sha256:HEX`).
    pub digest: String,
    /// The DSSE envelopes (JSON) cosign stored, one per attestation
    /// (empty: none).
    pub envelopes: Vec<Vec<u8>>,
}

/// The tag cosign stores `digest`'s signatures under.
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// The tag cosign stores `digest`'s attestations under.
pub fn attestation_tag(digest: &str) -> String {
    format!("{}.att", digest.replace(':', "-"))
}

/// DSSE's pre-authentication encoding of a payload, the bytes an
/// envelope's signatures sign: `DSSEv1 LEN(type) type LEN(body) body`,
/// each length the ASCII decimal of the byte count.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
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

/// The error for an image without any attestation: cosign's "no matching
/// attestations" with no reason after it, Kyverno's exact text.
pub const NO_ATTESTATIONS: &str = "no matching attestations: ";

/// The in-toto statements of the attestations among `atts` that one of
/// `keys` (PEM public keys, one or more) verifies for the image's digest,
/// each the decoded statement (`_type`, `predicateType`, `subject`,
/// `predicate`). The error is cosign's, as Kyverno reports it: `no
/// matching attestations: ` followed by why (nothing when the image has no
/// attestation at all, as Kyverno's message ends then).
pub fn verify_attestations(atts: &Attestations, keys: &str) -> Result<Vec<Value>, String> {
    let keys = parse_keys(keys)?;
    if atts.envelopes.is_empty() {
        return Err(NO_ATTESTATIONS.to_string());
    }
    let mut statements = Vec::new();
    let mut why = Vec::new();
    for envelope in &atts.envelopes {
        match verify_envelope(envelope, &atts.digest, &keys) {
            Ok(statement) => statements.push(statement),
            Err(e) => why.push(e),
        }
    }
    if statements.is_empty() {
        why.dedup();
        return Err(format!("no matching attestations: {}", why.join("; ")));
    }
    Ok(statements)
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

/// Whether one of `keys` verifies `signature` (base64 ASN.1 DER) of
/// `message`.
fn verify_signature(message: &[u8], signature: &str, keys: &[VerifyingKey]) -> Result<(), String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .map_err(|e| format!("signature is not base64: {e}"))?;
    let sig = DerSignature::try_from(raw.as_slice())
        .map_err(|_| "signature is not an ASN.1 ECDSA signature".to_string())?;
    if !keys.iter().any(|k| k.verify(message, &sig).is_ok()) {
        return Err("invalid signature when validating ASN.1 encoded signature".to_string());
    }
    Ok(())
}

fn verify_one(s: &Signature, digest: &str, keys: &[VerifyingKey]) -> Result<(), String> {
    verify_signature(&s.payload, &s.signature, keys)?;
    let payload: Value = serde_json::from_slice(&s.payload)
        .map_err(|e| format!("signed payload is not JSON: {e}"))?;
    match payload["critical"]["image"]["docker-manifest-digest"].as_str() {
        Some(d) if d == digest => Ok(()),
        Some(d) => Err(format!("signed payload names digest {d}, not {digest}")),
        None => Err("signed payload names no image digest".to_string()),
    }
}

/// The statement of one DSSE envelope when one of its signatures verifies
/// with one of `keys` and the statement names `digest`.
fn verify_envelope(envelope: &[u8], digest: &str, keys: &[VerifyingKey]) -> Result<Value, String> {
    let envelope: Value = serde_json::from_slice(envelope)
        .map_err(|e| format!("attestation is not a DSSE envelope (JSON): {e}"))?;
    let payload_type = envelope["payloadType"].as_str().unwrap_or_default();
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(format!(
            "invalid payloadType {payload_type:?} on envelope, expected {IN_TOTO_PAYLOAD_TYPE}"
        ));
    }
    let body = base64::engine::general_purpose::STANDARD
        .decode(envelope["payload"].as_str().unwrap_or_default())
        .map_err(|e| format!("attestation payload is not base64: {e}"))?;
    let message = pae(payload_type, &body);
    let mut verified = Err("attestation envelope has no signatures".to_string());
    for s in envelope["signatures"].as_array().into_iter().flatten() {
        verified = verify_signature(&message, s["sig"].as_str().unwrap_or_default(), keys);
        if verified.is_ok() {
            break;
        }
    }
    verified?;
    let statement: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("attestation payload is not JSON: {e}"))?;
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let names_digest = statement["subject"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["digest"]["sha256"].as_str() == Some(hex));
    if !names_digest {
        return Err(format!("attestation subject does not name digest {digest}"));
    }
    Ok(statement)
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

    /// A DSSE envelope of an in-toto statement about `subject_hex`, signed
    /// by `k` over the pre-authentication encoding written out here (not
    /// with `pae`, so the test checks it).
    fn attested(k: &SigningKey, subject_hex: &str, predicate_type: &str) -> Vec<u8> {
        let statement = serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v0.1",
            "predicateType": predicate_type,
            "subject": [{"name": "r/app", "digest": {"sha256": subject_hex}}],
            "predicate": {"ok": true}}))
        .unwrap();
        let mut message = format!(
            "DSSEv1 28 application/vnd.in-toto+json {} ",
            statement.len()
        )
        .into_bytes();
        message.extend_from_slice(&statement);
        let sig: EcSignature = k.sign(&message);
        let b64 = &base64::engine::general_purpose::STANDARD;
        serde_json::to_vec(&serde_json::json!({
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "payload": b64.encode(&statement),
            "signatures": [{"keyid": "", "sig": b64.encode(sig.to_der().as_bytes())}]}))
        .unwrap()
    }

    #[test]
    fn dsse_pae_is_the_specs() {
        assert_eq!(pae("", b""), b"DSSEv1 0  0 ");
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
        // Lengths count bytes, not characters.
        assert_eq!(pae("t", "ಠ".as_bytes()), "DSSEv1 1 t 3 ಠ".as_bytes());
    }

    #[test]
    fn a_key_verifies_its_attestations_of_the_digest_only() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let atts = Attestations {
            digest: format!("sha256:{a}"),
            envelopes: vec![
                attested(&key(1), &a, "https://slsa.dev/provenance/v0.2"),
                attested(&key(2), &a, "https://cyclonedx.org/bom"),
                attested(&key(1), &b, "https://example.com/other-image"),
            ],
        };
        // Key 1: its envelope of this digest, not key 2's nor the one
        // naming another image.
        let statements = verify_attestations(&atts, &pem(&key(1))).unwrap();
        assert_eq!(statements.len(), 1);
        assert_eq!(
            statements[0]["predicateType"],
            "https://slsa.dev/provenance/v0.2"
        );
        assert_eq!(statements[0]["subject"][0]["digest"]["sha256"], a.as_str());
        assert_eq!(statements[0]["predicate"]["ok"], true);
        assert_eq!(
            verify_attestations(&atts, &pem(&key(2))).unwrap()[0]["predicateType"],
            "https://cyclonedx.org/bom"
        );
        let both = format!("{}\n{}", pem(&key(2)), pem(&key(1)));
        assert_eq!(verify_attestations(&atts, &both).unwrap().len(), 2);

        let err = verify_attestations(&atts, &pem(&key(3))).unwrap_err();
        assert_eq!(
            err,
            "no matching attestations: invalid signature when validating ASN.1 encoded signature"
        );
        let moved = Attestations {
            digest: format!("sha256:{b}"),
            envelopes: atts.envelopes[..1].to_vec(),
        };
        assert_eq!(
            verify_attestations(&moved, &pem(&key(1))),
            Err(format!(
                "no matching attestations: attestation subject does not name digest sha256:{b}"
            ))
        );
        let none = Attestations {
            digest: format!("sha256:{a}"),
            envelopes: vec![],
        };
        assert_eq!(
            verify_attestations(&none, &pem(&key(1))),
            Err(NO_ATTESTATIONS.to_string())
        );
        assert!(verify_attestations(&atts, "not a key").is_err());
        assert_eq!(attestation_tag(&atts.digest), format!("sha256-{a}.att"));
    }

    #[test]
    fn malformed_envelopes_say_why() {
        let a = "a".repeat(64);
        let b64 = &base64::engine::general_purpose::STANDARD;
        let mut bad_type: Value = serde_json::from_slice(&attested(&key(1), &a, "t")).unwrap();
        bad_type["payloadType"] = "text/plain".into();
        let mut unsigned = bad_type.clone();
        unsigned["payloadType"] = IN_TOTO_PAYLOAD_TYPE.into();
        unsigned["signatures"] = serde_json::json!([]);
        // A valid signature of a payload that is not JSON.
        let text = b"not json";
        let sig: EcSignature = key(1).sign(&pae(IN_TOTO_PAYLOAD_TYPE, text));
        let not_json = serde_json::json!({
            "payloadType": IN_TOTO_PAYLOAD_TYPE,
            "payload": b64.encode(text),
            "signatures": [{"keyid": "", "sig": b64.encode(sig.to_der().as_bytes())}]});
        let atts = Attestations {
            digest: format!("sha256:{a}"),
            envelopes: vec![
                b"{".to_vec(),
                serde_json::to_vec(&bad_type).unwrap(),
                serde_json::to_vec(&unsigned).unwrap(),
                serde_json::to_vec(&not_json).unwrap(),
            ],
        };
        let err = verify_attestations(&atts, &pem(&key(1))).unwrap_err();
        for why in [
            "no matching attestations: attestation is not a DSSE envelope (JSON)",
            "invalid payloadType \"text/plain\" on envelope",
            "attestation envelope has no signatures",
            "attestation payload is not JSON",
        ] {
            assert!(err.contains(why), "{why}: {err}");
        }
    }
}
