//! Notary Project signatures (what `notation sign` stores), verified as
//! Kyverno verifies them: with notation-go's verifier, a trust policy for
//! every registry at the `strict` level, the policy's certificates as the
//! one CA trust store, any identity, and no timestamp authority.
//!
//! A signature is an OCI artifact of type
//! `application/vnd.cncf.notary.signature` whose subject is the image's
//! manifest, found through the registry's referrers API or, where the
//! registry has none (the distribution registry 2.x), the referrers tag
//! schema (`sha256-HEX`), as oci-client lists referrers. Its one layer is
//! a JWS envelope (`application/jose+json`): a JSON serialization whose
//! protected header names the algorithm, the signing scheme and time, whose
//! unprotected header carries the certificate chain (`x5c`, leaf first),
//! and whose payload names the signed manifest (`targetArtifact`).
//!
//! [`verify`] checks the signatures in notation's order and stops at the
//! first that holds (at most 10 are tried, as Kyverno asks):
//!
//! 1. integrity: the envelope parses, its content type is notation's
//!    payload, the JWS signature verifies with the leaf certificate's key,
//!    the algorithm is the one the key's type and size call for, and the
//!    chain is a code signing chain (each certificate issued by the next,
//!    the last self-signed);
//! 2. authenticity: a certificate of the chain is one of the policy's;
//! 3. expiry: the signature's `io.cncf.notary.expiry`, if any, has not
//!    passed;
//! 4. the chain is valid now (without a timestamp authority, notation
//!    checks the chain at verification time);
//! 5. the payload names the image's manifest (media type, digest, size).
//!
//! The errors are notation-go's words: `no signature is associated with
//! "REF", make sure the artifact was signed successfully`, or `signature
//! verification failed` and one line per signature tried.
//!
//! Both of notation's envelope formats are read: JWS (its default) and
//! COSE_Sign1 (`--signature-format cose`, `application/cose`). Timestamp
//! countersignatures are not verified (no policy here trusts a timestamp
//! authority; see the ImageValidatingPolicy's `tsaCerts`).
//!
//! No crate verifies Notary Project signatures. The JWS part is a base64
//! split and one ring verification (ring is rustls's provider, built
//! already); a JWS crate (RustCrypto's jose-jws) would add the RustCrypto
//! RSA stack for it. COSE is parsed by coset (Google's COSE crate), which
//! also builds the `Sig_structure` ring verifies. The chain is webpki's to
//! check, as cosign.rs's.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use ring::signature::{self as sig, UnparsedPublicKey, VerificationAlgorithm};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, UnixTime};
use serde_json::Value;
use x509_cert::Certificate;
use x509_cert::der::asn1::{ObjectIdentifier, UintRef};
use x509_cert::der::{Decode as _, Reader as _, SliceReader};

/// The artifact type of a Notary Project signature.
pub const SIGNATURE_ARTIFACT_TYPE: &str = "application/vnd.cncf.notary.signature";
/// The media type of a JWS signature envelope.
pub const JWS_MEDIA_TYPE: &str = "application/jose+json";
/// The media type of a COSE signature envelope.
pub const COSE_MEDIA_TYPE: &str = "application/cose";
/// The content type of a signature's payload.
const PAYLOAD_CONTENT_TYPE: &str = "application/vnd.cncf.notary.payload.v1+json";
/// How many signatures are tried before giving up (Kyverno's
/// `MaxSignatureAttempts`).
pub const MAX_SIGNATURE_ATTEMPTS: usize = 10;

/// A manifest as a signature's payload names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The manifest's media type.
    pub media_type: String,
    /// Its digest (`sha256:HEX`).
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
}

/// One signature artifact: its manifest's digest and its envelope.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// The digest of the signature's manifest (for the messages).
    pub manifest_digest: String,
    /// The envelope's media type (its layer's).
    pub media_type: String,
    /// The envelope as stored.
    pub blob: Vec<u8>,
}

/// An image's Notary Project signatures.
#[derive(Debug, Clone)]
pub struct Signatures {
    /// `registry/repository@digest`, as notation names the artifact.
    pub reference: String,
    /// The signed manifest.
    pub target: Target,
    /// The signatures found, in the registry's order (empty: none).
    pub envelopes: Vec<Envelope>,
}

/// An image's OCI referrers of one artifact type (an SBOM, a scan report
/// attached with `oras attach`), each with its payload and its own Notary
/// Project signatures.
#[derive(Debug, Clone)]
pub struct Referrers {
    /// The artifact type asked for.
    pub artifact_type: String,
    /// The referrers found, in the registry's order (empty: none).
    pub entries: Vec<Referrer>,
}

/// One referrer: its manifest's digest, its one layer (the payload), and
/// the signatures of its manifest.
#[derive(Debug, Clone)]
pub struct Referrer {
    /// The referrer manifest's digest.
    pub digest: String,
    /// Its layer's bytes, or why it has none to read (Kyverno's "invalid
    /// referrer descriptor, must have only one layer").
    pub payload: Result<Vec<u8>, String>,
    /// Its Notary Project signatures.
    pub signatures: Signatures,
}

/// The most referrers of one type read for an image (Kyverno's
/// `maxReferrersCount`, against a compromised image flooding them).
pub const MAX_REFERRERS: usize = 50;

/// The payload (JSON) of the first referrer of `refs` whose signature
/// verifies with `certs`, as Kyverno's notary attestation verifier takes
/// it; else its words: `attestation verification failed, no attestations
/// found for type: T`, or why each referrer failed.
pub fn verify_referrers(refs: &Referrers, certs: &str) -> Result<Value, String> {
    let mut errors = Vec::new();
    for r in &refs.entries {
        let verified = verify(&r.signatures, certs).and_then(|()| {
            let bytes = r.payload.as_ref().map_err(Clone::clone)?;
            serde_json::from_slice::<Value>(bytes)
                .map_err(|e| format!("failed to get payload: the referrer is not JSON: {e}"))
        });
        match verified {
            Ok(payload) => return Ok(payload),
            Err(e) => errors.push(format!(
                "failed to verify attestation {}, digest {}: {e}",
                refs.artifact_type, r.digest
            )),
        }
    }
    if errors.is_empty() {
        return Err(format!(
            "attestation verification failed, no attestations found for type: {}",
            refs.artifact_type
        ));
    }
    Err(errors.join("; "))
}

/// Whether a signature of `sigs` verifies with `certs` (PEM certificates,
/// the trust store) now: notation-go's verdict and words (module docs).
pub fn verify(sigs: &Signatures, certs: &str) -> Result<(), String> {
    verify_at(sigs, certs, SystemTime::now())
}

/// [`verify`] as at `now` (the signature's expiry and the certificates'
/// validity are checked against it).
pub fn verify_at(sigs: &Signatures, certs: &str, now: SystemTime) -> Result<(), String> {
    let trusted = CertificateDer::pem_slice_iter(certs.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("failed to parse certificates: {e}"))?;
    if trusted.is_empty() {
        return Err("failed to parse certificates: no certificate found in PEM".to_string());
    }
    if sigs.envelopes.is_empty() {
        return Err(format!(
            "no signature is associated with {:?}, make sure the artifact was signed successfully",
            sigs.reference
        ));
    }
    let mut errors = vec!["signature verification failed".to_string()];
    for envelope in sigs.envelopes.iter().take(MAX_SIGNATURE_ATTEMPTS) {
        match verify_one(envelope, &trusted, &sigs.target, now) {
            Ok(()) => return Ok(()),
            Err(e) => errors.push(format!(
                "failed to verify signature with digest {}, {e}",
                envelope.manifest_digest
            )),
        }
    }
    if sigs.envelopes.len() > MAX_SIGNATURE_ATTEMPTS {
        return Err(format!(
            "signature evaluation stopped. The configured limit of {MAX_SIGNATURE_ATTEMPTS} signatures to verify per artifact exceeded"
        ));
    }
    Err(errors.join("\n"))
}

/// The parts of a signature envelope (JWS or COSE) notation signs and
/// reads, in one shape.
struct Parsed {
    /// The JWS name of the algorithm (`PS256`, `ES256`, ...).
    alg: String,
    critical: Vec<String>,
    content_type: Option<String>,
    scheme: String,
    signing_time: Option<Duration>,
    expiry: Option<Duration>,
    payload: Value,
    /// DER certificates, the leaf first.
    chain: Vec<Vec<u8>>,
    /// What the signature signs: JWS's `protected.payload`, COSE's
    /// `Sig_structure`.
    signing_input: Vec<u8>,
    /// The signature (ECDSA as `r || s`, in both formats).
    signature: Vec<u8>,
}

fn invalid(why: &str) -> String {
    format!("unable to parse the digital signature, error : {why}")
}

fn b64url(field: &str, text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|e| format!("signature envelope format is invalid: {field} is not base64url: {e}"))
}

/// A JWS envelope (JSON serialization, flattened): notation's default.
fn parse_jws(blob: &[u8]) -> Result<Parsed, String> {
    let env: Value = serde_json::from_slice(blob).map_err(|e| invalid(&e.to_string()))?;
    let text = |k: &str| {
        env[k]
            .as_str()
            .ok_or_else(|| invalid(&format!("{k} is missing")))
    };
    let (protected_b64, payload_b64) = (text("protected")?, text("payload")?);
    let protected: Value = serde_json::from_slice(&b64url("protected", protected_b64)?)
        .map_err(|e| invalid(&format!("protected header: {e}")))?;
    let payload: Value = serde_json::from_slice(&b64url("payload", payload_b64)?)
        .map_err(|e| invalid(&format!("payload: {e}")))?;
    let chain = env["header"]["x5c"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            c.as_str()
                .and_then(|c| base64::engine::general_purpose::STANDARD.decode(c).ok())
                .ok_or_else(|| invalid("x5c holds a certificate that is not base64"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let str_of = |k: &str| protected[k].as_str().map(str::to_string);
    Ok(Parsed {
        alg: str_of("alg").unwrap_or_default(),
        critical: protected["crit"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        content_type: str_of("cty"),
        scheme: str_of("io.cncf.notary.signingScheme").unwrap_or_default(),
        signing_time: str_of("io.cncf.notary.signingTime")
            .map(|t| rfc3339(&t))
            .transpose()?,
        expiry: str_of("io.cncf.notary.expiry")
            .map(|t| rfc3339(&t))
            .transpose()?,
        signing_input: format!("{protected_b64}.{payload_b64}").into_bytes(),
        signature: b64url("signature", text("signature")?)?,
        payload,
        chain,
    })
}

/// A COSE_Sign1 envelope (`notation sign --signature-format cose`).
fn parse_cose(blob: &[u8]) -> Result<Parsed, String> {
    use coset::{
        Algorithm, CborSerializable as _, Label, RegisteredLabelWithPrivate,
        TaggedCborSerializable as _, iana,
    };
    let sign1 = coset::CoseSign1::from_tagged_slice(blob)
        .or_else(|_| coset::CoseSign1::from_slice(blob))
        .map_err(|e| invalid(&format!("not a COSE_Sign1 message: {e}")))?;
    let header = &sign1.protected.header;
    let alg = match &header.alg {
        Some(Algorithm::Assigned(a)) => match a {
            iana::Algorithm::PS256 => "PS256",
            iana::Algorithm::PS384 => "PS384",
            iana::Algorithm::PS512 => "PS512",
            iana::Algorithm::ES256 => "ES256",
            iana::Algorithm::ES384 => "ES384",
            iana::Algorithm::ES512 => "ES512",
            other => return Err(format!("signature algorithm {other:?} is not supported")),
        },
        _ => return Err(invalid("the protected header names no algorithm")),
    }
    .to_string();
    let critical = header
        .crit
        .iter()
        .map(|c| match c {
            RegisteredLabelWithPrivate::Text(t) => t.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    let content_type = match &header.content_type {
        Some(coset::ContentType::Text(t)) => Some(t.clone()),
        Some(other) => Some(format!("{other:?}")),
        None => None,
    };
    let text_label = |name: &str| {
        header
            .rest
            .iter()
            .find(|(l, _)| matches!(l, Label::Text(t) if t == name))
            .map(|(_, v)| v)
    };
    // Times are CBOR tag 1 (epoch seconds), as notation writes them.
    let time = |name: &str| -> Result<Option<Duration>, String> {
        let Some(v) = text_label(name) else {
            return Ok(None);
        };
        let secs = match v {
            coset::cbor::value::Value::Tag(1, inner) => inner.as_integer(),
            other => other.as_integer(),
        }
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| invalid(&format!("{name} is not a time")))?;
        Ok(Some(Duration::from_secs(secs)))
    };
    let x5chain = sign1
        .unprotected
        .rest
        .iter()
        .find(|(l, _)| *l == Label::Int(iana::HeaderParameter::X5Chain as i64))
        .map(|(_, v)| v);
    let chain = match x5chain {
        Some(coset::cbor::value::Value::Bytes(one)) => vec![one.clone()],
        Some(coset::cbor::value::Value::Array(all)) => all
            .iter()
            .map(|c| {
                c.as_bytes()
                    .cloned()
                    .ok_or_else(|| invalid("x5chain holds a certificate that is not bytes"))
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    let payload_bytes = sign1
        .payload
        .as_deref()
        .ok_or_else(|| invalid("the payload is detached"))?;
    let payload: Value =
        serde_json::from_slice(payload_bytes).map_err(|e| invalid(&format!("payload: {e}")))?;
    Ok(Parsed {
        alg,
        critical,
        content_type,
        scheme: text_label("io.cncf.notary.signingScheme")
            .and_then(|v| v.as_text())
            .unwrap_or_default()
            .to_string(),
        signing_time: time("io.cncf.notary.signingTime")?,
        expiry: time("io.cncf.notary.expiry")?,
        payload,
        chain,
        signing_input: sign1.tbs_data(b""),
        signature: sign1.signature.clone(),
    })
}

/// The critical header parameters notation knows; one it does not is
/// refused, as the JWS specification asks.
const KNOWN_CRITICAL: [&str; 3] = [
    "io.cncf.notary.signingScheme",
    "io.cncf.notary.expiry",
    "io.cncf.notary.authenticSigningTime",
];

fn verify_one(
    envelope: &Envelope,
    trusted: &[CertificateDer<'_>],
    target: &Target,
    now: SystemTime,
) -> Result<(), String> {
    let parsed = match envelope.media_type.as_str() {
        JWS_MEDIA_TYPE => parse_jws(&envelope.blob)?,
        COSE_MEDIA_TYPE => parse_cose(&envelope.blob)?,
        other => {
            return Err(format!(
                "signature envelope format with media type {other:?} is not supported"
            ));
        }
    };
    if !matches!(
        parsed.scheme.as_str(),
        "notary.x509" | "notary.x509.signingAuthority"
    ) {
        return Err(format!(
            "signing scheme {:?} is not supported",
            parsed.scheme
        ));
    }
    let critical = &parsed.critical;
    if !critical.iter().any(|c| c == "io.cncf.notary.signingScheme") {
        return Err("signature envelope format is invalid: io.cncf.notary.signingScheme is not marked critical".to_string());
    }
    if let Some(unknown) = critical
        .iter()
        .find(|c| !KNOWN_CRITICAL.contains(&c.as_str()))
    {
        return Err(format!(
            "signature envelope format is invalid: unsupported critical header {unknown:?} (a verification plugin's, which leash does not run)"
        ));
    }
    let signing_time = parsed.signing_time.ok_or("signing-time not present")?;
    let expiry = parsed.expiry;
    if expiry.is_some_and(|e| e <= signing_time) {
        return Err("expiry cannot be equal or before the signing time".to_string());
    }

    // 1. Integrity.
    let leaf_der = parsed
        .chain
        .first()
        .ok_or("certificate chain is not present")?;
    let chain: Vec<Certificate> = parsed
        .chain
        .iter()
        .map(|c| Certificate::from_der(c).map_err(|_| "malformed leaf certificate".to_string()))
        .collect::<Result<_, _>>()?;
    let alg = parsed.alg.as_str();
    let (algorithm, expected) = jws_algorithm(&chain[0])?;
    if alg != expected {
        return Err(format!(
            "mismatch between signature algorithm derived from signing certificate ({expected}) and signing algorithm specified ({alg})"
        ));
    }
    let key = chain[0]
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    UnparsedPublicKey::new(algorithm, key)
        .verify(&parsed.signing_input, &parsed.signature)
        .map_err(|_| {
            "signature is invalid. Error: token signature is invalid: verification error"
                .to_string()
        })?;
    if parsed.content_type.as_deref() != Some(PAYLOAD_CONTENT_TYPE) {
        return Err(format!(
            "payload content type {:?} not supported",
            parsed.content_type.as_deref().unwrap_or_default()
        ));
    }
    code_signing_chain(&chain)?;

    // 2. Authenticity: the chain holds a trusted certificate.
    if !parsed
        .chain
        .iter()
        .any(|c| trusted.iter().any(|t| t.as_ref() == c.as_slice()))
    {
        return Err(
            "the signature's certificate chain does not contain any trusted certificate"
                .to_string(),
        );
    }

    // 3. Expiry.
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    if let Some(expiry) = expiry.filter(|e| now >= *e) {
        return Err(format!(
            "digital signature has expired on {:?}",
            rfc1123z(expiry)
        ));
    }

    // 4. The chain is valid now (no timestamp authority).
    for cert in &chain {
        let validity = &cert.tbs_certificate.validity;
        let subject = &cert.tbs_certificate.subject;
        if now < validity.not_before.to_unix_duration() {
            return Err(format!(
                "verification time is before certificate \"{subject}\" validity period, it will be valid from {:?}",
                rfc1123z(validity.not_before.to_unix_duration())
            ));
        }
        if now > validity.not_after.to_unix_duration() {
            return Err(format!(
                "verification time is after certificate \"{subject}\" validity period, it was expired at {:?}",
                rfc1123z(validity.not_after.to_unix_duration())
            ));
        }
    }
    // And webpki's check of the same chain, its own root the anchor: the
    // signatures, the CA and code signing constraints, the validity now.
    let anchor_der = CertificateDer::from(parsed.chain.last().unwrap_or(leaf_der).as_slice());
    let anchor = webpki::anchor_from_trusted_cert(&anchor_der)
        .map_err(|e| format!("certificate-chain is invalid, root certificate: {e:?}"))?;
    let intermediates: Vec<CertificateDer<'_>> = parsed
        .chain
        .get(1..parsed.chain.len().saturating_sub(1))
        .unwrap_or_default()
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let leaf_cert = CertificateDer::from(leaf_der.as_slice());
    webpki::EndEntityCert::try_from(&leaf_cert)
        .and_then(|ee| {
            ee.verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &[anchor],
                &intermediates,
                UnixTime::since_unix_epoch(now),
                webpki::KeyUsage::required_if_present(CODE_SIGNING),
                None,
                None,
            )
            .map(drop)
        })
        .map_err(|e| format!("certificate-chain is invalid, {e:?}"))?;

    // 5. The payload names the image.
    let signed = &parsed.payload["targetArtifact"];
    if signed["mediaType"].as_str() != Some(target.media_type.as_str())
        || signed["digest"].as_str() != Some(target.digest.as_str())
        || signed["size"].as_u64() != Some(target.size)
    {
        return Err("content descriptor mismatch".to_string());
    }
    Ok(())
}

/// The DER of the code signing extended key usage, 1.3.6.1.5.5.7.3.3.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
const RSA_ENCRYPTION: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
const P256: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
const P384: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.34");
const P521: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.132.0.35");

/// The JWS algorithm notation signs with for `leaf`'s key (RSA 2048,
/// 3072, 4096: PS256, PS384, PS512; EC P-256, P-384: ES256, ES384), and
/// ring's verifier of it. P-521 (ES512), which ring does not verify, is
/// refused saying so.
fn jws_algorithm(
    leaf: &Certificate,
) -> Result<(&'static dyn VerificationAlgorithm, &'static str), String> {
    let spki = &leaf.tbs_certificate.subject_public_key_info;
    let unsupported = |what: &str| format!("signing certificate key {what} is not supported");
    if spki.algorithm.oid == RSA_ENCRYPTION {
        // RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }
        let bits = SliceReader::new(spki.subject_public_key.raw_bytes())
            .and_then(|mut r| {
                r.sequence(|r| {
                    let modulus = UintRef::decode(r)?;
                    UintRef::decode(r)?;
                    Ok(modulus)
                })
            })
            .map(|m| m.as_bytes().len() * 8)
            .map_err(|e| format!("malformed leaf certificate: RSA key: {e}"))?;
        return match bits {
            2048 => Ok((&sig::RSA_PSS_2048_8192_SHA256, "PS256")),
            3072 => Ok((&sig::RSA_PSS_2048_8192_SHA384, "PS384")),
            4096 => Ok((&sig::RSA_PSS_2048_8192_SHA512, "PS512")),
            n => Err(unsupported(&format!("RSA {n}"))),
        };
    }
    if spki.algorithm.oid == EC_PUBLIC_KEY {
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
        return match curve {
            Some(c) if c == P256 => Ok((&sig::ECDSA_P256_SHA256_FIXED, "ES256")),
            Some(c) if c == P384 => Ok((&sig::ECDSA_P384_SHA384_FIXED, "ES384")),
            Some(c) if c == P521 => Err(unsupported("EC P-521 (ES512)")),
            _ => Err(unsupported("EC on an unknown curve")),
        };
    }
    Err(unsupported(&format!("type {}", spki.algorithm.oid)))
}

/// notation's code signing chain shape: one self-signed certificate, or
/// certificates each issued by the next and the last self-signed (and no
/// other). The signatures are webpki's to check.
fn code_signing_chain(chain: &[Certificate]) -> Result<(), String> {
    let invalid = |why: String| format!("certificate-chain is invalid, {why}");
    let self_issued = |c: &Certificate| c.tbs_certificate.subject == c.tbs_certificate.issuer;
    let last = chain.len() - 1;
    for (i, cert) in chain.iter().enumerate() {
        let subject = &cert.tbs_certificate.subject;
        if i == last && !self_issued(cert) {
            return Err(invalid(format!(
                "root certificate with subject \"{subject}\" is not self-signed. Certificate chain must end with a valid self-signed root certificate"
            )));
        }
        if i < last {
            if self_issued(cert) {
                return Err(invalid(format!(
                    "intermediate certificate with subject \"{subject}\" is self-signed. Certificate chain must not contain self-signed intermediate certificate"
                )));
            }
            if cert.tbs_certificate.issuer != chain[i + 1].tbs_certificate.subject {
                return Err(invalid(format!(
                    "invalid certificates or certificate with subject \"{subject}\" is not issued by \"{}\". Error: x509: issuer name does not match subject from issuing certificate",
                    chain[i + 1].tbs_certificate.subject
                )));
            }
        }
    }
    Ok(())
}

/// An RFC 3339 time (notation's signing time and expiry) since the epoch.
fn rfc3339(text: &str) -> Result<Duration, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .and_then(|t| u64::try_from(t.timestamp()).ok())
        .map(Duration::from_secs)
        .ok_or_else(|| {
            format!("signature envelope format is invalid: time {text:?} is not RFC 3339")
        })
}

/// Go's `time.RFC1123Z` layout, in UTC, as notation's messages print times.
fn rfc1123z(t: Duration) -> String {
    chrono::DateTime::from_timestamp(t.as_secs() as i64, 0)
        .map(|t| t.format("%a, %d %b %Y %H:%M:%S +0000").to_string())
        .unwrap_or_default()
}
