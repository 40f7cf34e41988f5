//! cosign signatures and attestations: where cosign keeps an image's
//! signatures and in-toto attestations, and how a public key or a signing
//! certificate (cosign keyless) verifies them.
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
//!
//! Signed keyless (`cosign sign` / `cosign attest` with Fulcio), a layer
//! also carries the signing certificate (annotation
//! `dev.sigstore.cosign/certificate`, PEM) and the certificates it chains
//! through (`dev.sigstore.cosign/chain`). [`Trust::Keyless`] verifies such
//! a signature as cosign does without a transparency log: the certificate
//! chains to one of the given roots (checked at the time it was issued,
//! for code signing), names an expected identity (its subject alternative
//! names and its OIDC issuer extension), its public key verifies the
//! signature, the payload names the image's digest, and last the
//! certificates are valid now (cosign's "expected a signed timestamp to
//! verify an expired certificate" otherwise, as there is no signed
//! timestamp to check an older signing time against).

use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use p256::ecdsa::signature::Verifier as _;
use p256::ecdsa::{DerSignature, VerifyingKey};
use p256::pkcs8::DecodePublicKey as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, TrustAnchor, UnixTime};
use serde_json::Value;
// X.509 fields (subject alternative names, Fulcio's issuer extensions,
// validity, the public key) are read with RustCrypto's x509-cert, not
// x509-parser: x509-cert is built on the `der`, `spki` and `const-oid`
// crates p256 already brings (its key decodes straight into p256's
// `VerifyingKey`), so it adds three small crates, where x509-parser would
// add nom, asn1-rs, der-parser, oid-registry and their macros. The chain
// itself is checked by webpki, rustls's verifier, which is built already.
use x509_cert::Certificate;
use x509_cert::der::asn1::{ObjectIdentifier, Utf8StringRef};
use x509_cert::der::{Decode as _, Encode as _};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::time::Validity;

/// The media type of a simple signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The annotation holding a layer's signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The annotation holding a keyless layer's signing certificate (PEM).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// The annotation holding the certificates a keyless layer's signing
/// certificate chains through (PEM, the intermediates then the root).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
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
    /// The signing certificate (PEM) when signed keyless: the layer's
    /// `dev.sigstore.cosign/certificate` annotation.
    pub certificate: Option<String>,
    /// The certificates `certificate` chains through (PEM): the layer's
    /// `dev.sigstore.cosign/chain` annotation.
    pub chain: Option<String>,
}

/// An image's digest and the signatures stored for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signatures {
    /// The image's manifest digest (`sha256:HEX`).
    pub digest: String,
    /// What cosign stored (empty: unsigned).
    pub signatures: Vec<Signature>,
}

/// One attestation cosign stored: a DSSE envelope and, when it was signed
/// keyless, the signing certificate and its chain (the layer's
/// annotations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The DSSE envelope's bytes (JSON): the layer's blob.
    pub json: Vec<u8>,
    /// The signing certificate (PEM) when signed keyless: the layer's
    /// `dev.sigstore.cosign/certificate` annotation.
    pub certificate: Option<String>,
    /// The certificates `certificate` chains through (PEM): the layer's
    /// `dev.sigstore.cosign/chain` annotation.
    pub chain: Option<String>,
}

/// An image's digest and the attestations stored for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestations {
    /// The image's manifest digest (`sha256:HEX`).
    pub digest: String,
    /// The DSSE envelopes cosign stored, one per attestation (empty: none).
    pub envelopes: Vec<Envelope>,
}

/// Who must have signed: public keys, or certificates (cosign keyless).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Trust {
    /// PEM public keys (one or more), any one of which verifies.
    Keys(String),
    /// Signing certificates chaining to `roots` and naming one of
    /// `identities`.
    Keyless(Keyless),
    /// The key of a certificate the policy gives (cosign's
    /// `--certificate`), the certificate first checked against `chain`
    /// (cosign's `--certificate-chain`, its root a trust anchor) when one
    /// is given.
    Certificate {
        /// The certificate (PEM).
        cert: String,
        /// Its chain (PEM: intermediates and root), or empty.
        chain: String,
    },
    /// Notary Project signatures ([`crate::notary`], not cosign's) whose
    /// certificate chain holds one of these PEM certificates.
    Notary(String),
}

/// What a keyless signature's certificate must be: issued under one of
/// `roots` to one of `identities`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Keyless {
    /// PEM CA certificates the signing certificate must chain to (each one
    /// a trust anchor).
    pub roots: String,
    /// Any one must match; empty: any identity.
    pub identities: Vec<Identity>,
}

/// One identity a signing certificate may name: its subject (a subject
/// alternative name: an email, a URI, ...) and its OIDC issuer (Fulcio's
/// extension). An empty field constrains nothing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Identity {
    /// The OIDC issuer (empty: any).
    pub issuer: String,
    /// The subject (empty: any).
    pub subject: String,
    /// A regular expression the issuer must match (empty: none).
    pub issuer_regexp: String,
    /// A regular expression one subject must match (empty: none).
    pub subject_regexp: String,
    /// `issuer`/`subject` are Kyverno wildcards (`*`, `?`; a ClusterPolicy
    /// keyless attestor, matched as Kyverno matches it) instead of exact
    /// strings (an ImageValidatingPolicy's identities, as cosign matches
    /// them).
    pub wildcards: bool,
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

/// Whether `trust` verifies one of the signatures for the image's digest.
/// The error is cosign's, as Kyverno reports it: `no signatures found`, or
/// `no matching signatures: ` with why, each signature's reason joined by
/// `; `.
pub fn verify(sigs: &Signatures, trust: &Trust) -> Result<(), String> {
    let verifier = Verifier::new(trust)?;
    if sigs.signatures.is_empty() {
        return Err("no signatures found".to_string());
    }
    let mut why = Vec::new();
    for s in &sigs.signatures {
        match verify_one(s, &sigs.digest, &verifier) {
            Ok(()) => return Ok(()),
            Err(e) => why.push(e),
        }
    }
    Err(failed("no matching signatures: ", trust, why))
}

/// The error for an image without any attestation: cosign's "no matching
/// attestations" with no reason after it, Kyverno's exact text.
pub const NO_ATTESTATIONS: &str = "no matching attestations: ";

/// The in-toto statements of the attestations among `atts` that `trust`
/// verifies for the image's digest, each the decoded statement (`_type`,
/// `predicateType`, `subject`, `predicate`). The error is cosign's, as
/// Kyverno reports it: `no matching attestations: ` followed by why
/// (nothing when the image has no attestation at all, as Kyverno's message
/// ends then).
pub fn verify_attestations(atts: &Attestations, trust: &Trust) -> Result<Vec<Value>, String> {
    let verifier = Verifier::new(trust)?;
    if atts.envelopes.is_empty() {
        return Err(NO_ATTESTATIONS.to_string());
    }
    let mut statements = Vec::new();
    let mut why = Vec::new();
    for envelope in &atts.envelopes {
        match verify_envelope(envelope, &atts.digest, &verifier) {
            Ok(statement) => statements.push(statement),
            Err(e) => why.push(e),
        }
    }
    if statements.is_empty() {
        return Err(failed("no matching attestations: ", trust, why));
    }
    Ok(statements)
}

/// A [`Trust`] made ready for one verification: the keys parsed, or the
/// roots made trust anchors.
enum Verifier<'t> {
    Keys(Vec<VerifyingKey>),
    Keyless {
        anchors: Vec<TrustAnchor<'static>>,
        /// When each anchor's certificate is valid (same order).
        valid: Vec<Window>,
        identities: &'t [Identity],
    },
}

/// Who signed one signature or envelope: the keys that must verify it,
/// and, keyless, when its certificates are all valid (checked last, as
/// cosign checks expiry after the signature and the payload).
struct Signer<'v> {
    keys: Cow<'v, [VerifyingKey]>,
    valid: Option<Window>,
    /// Keyless: the signing certificate and the identities it must name,
    /// checked last (after the signature), as Kyverno checks them.
    identity: Option<(Box<Certificate>, &'v [Identity])>,
}

/// Why one signature or attestation did not verify: its cryptography (or
/// its payload), or only its certificate's identity.
enum Failure {
    Crypto(String),
    Identity(String),
}

impl From<String> for Failure {
    fn from(e: String) -> Failure {
        Failure::Crypto(e)
    }
}

impl From<&str> for Failure {
    fn from(e: &str) -> Failure {
        Failure::Crypto(e.to_string())
    }
}

/// The error for signatures or attestations none of which verified:
/// `prefix` (cosign's `no matching signatures: `) and every reason; but
/// when only identities failed for a ClusterPolicy's keyless attestor
/// (Kyverno matches them itself, after cosign verified the signatures),
/// Kyverno's bare identity message.
fn failed(prefix: &str, trust: &Trust, failures: Vec<Failure>) -> String {
    let kyverno_matched =
        matches!(trust, Trust::Keyless(k) if k.identities.iter().any(|i| i.wildcards));
    let only_identity =
        !failures.is_empty() && failures.iter().all(|f| matches!(f, Failure::Identity(_)));
    let mut why: Vec<String> = Vec::new();
    for f in failures {
        let (Failure::Crypto(e) | Failure::Identity(e)) = f;
        if !why.contains(&e) {
            why.push(e);
        }
    }
    if kyverno_matched && only_identity {
        why.join("; ")
    } else {
        format!("{prefix}{}", why.join("; "))
    }
}

/// When certificates are valid: since the UNIX epoch, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    not_before: Duration,
    not_after: Duration,
}

impl Window {
    fn of(validity: &Validity) -> Window {
        Window {
            not_before: validity.not_before.to_unix_duration(),
            not_after: validity.not_after.to_unix_duration(),
        }
    }

    /// When both this and `other` are valid.
    fn and(self, other: Window) -> Window {
        Window {
            not_before: self.not_before.max(other.not_before),
            not_after: self.not_after.min(other.not_after),
        }
    }

    fn contains(self, t: Duration) -> bool {
        self.not_before <= t && t <= self.not_after
    }
}

/// The DER of the code signing extended key usage, 1.3.6.1.5.5.7.3.3.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
/// Fulcio's OIDC issuer extension (deprecated): the issuer's raw bytes.
const FULCIO_ISSUER_V1: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.1");
/// Fulcio's OIDC issuer extension: a DER UTF8String.
const FULCIO_ISSUER_V2: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.8");
/// Fulcio's username subject alternative name (an `otherName`).
const FULCIO_USERNAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.3.6.1.4.1.57264.1.7");

impl<'t> Verifier<'t> {
    fn new(trust: &'t Trust) -> Result<Verifier<'t>, String> {
        match trust {
            Trust::Keys(keys) => parse_keys(keys).map(Verifier::Keys),
            Trust::Keyless(keyless) => {
                let mut anchors = Vec::new();
                let mut valid = Vec::new();
                for der in CertificateDer::pem_slice_iter(keyless.roots.as_bytes()) {
                    let der = der.map_err(|e| format!("invalid root certificate PEM: {e}"))?;
                    let cert = Certificate::from_der(&der)
                        .map_err(|e| format!("invalid root certificate: {e}"))?;
                    valid.push(Window::of(&cert.tbs_certificate.validity));
                    anchors.push(
                        webpki::anchor_from_trusted_cert(&der)
                            .map_err(|e| format!("invalid root certificate: {e:?}"))?
                            .to_owned(),
                    );
                }
                if anchors.is_empty() {
                    return Err(
                        "no root certificate (a PEM `CERTIFICATE` block) in the keyless roots"
                            .to_string(),
                    );
                }
                Ok(Verifier::Keyless {
                    anchors,
                    valid,
                    identities: &keyless.identities,
                })
            }
            Trust::Notary(_) => Err(
                "notary certificates verify Notary Project signatures, not cosign's".to_string(),
            ),
            Trust::Certificate { cert, chain } => {
                let key = if chain.trim().is_empty() {
                    let der = CertificateDer::from_pem_slice(cert.as_bytes())
                        .map_err(|e| format!("the certificate is not PEM: {e}"))?;
                    let leaf = Certificate::from_der(&der)
                        .map_err(|e| format!("invalid certificate: {e}"))?;
                    certificate_key(&leaf)?
                } else {
                    // The chain's certificates as roots, any identity: the
                    // keyless check of the chain, without a signature's
                    // certificate.
                    let trust = Trust::Keyless(Keyless {
                        roots: chain.clone(),
                        identities: Vec::new(),
                    });
                    let chained = Verifier::new(&trust)?;
                    let signer = chained.signer(Some(cert), Some(chain))?;
                    signer.keys[0]
                };
                Ok(Verifier::Keys(vec![key]))
            }
        }
    }

    /// Who signed what carries `certificate` and `chain` (a layer's
    /// annotations): the keys, or the certificate's key once the
    /// certificate is trusted and names an expected identity.
    fn signer(&self, certificate: Option<&str>, chain: Option<&str>) -> Result<Signer<'_>, String> {
        let (anchors, anchors_valid, identities) = match self {
            Verifier::Keys(keys) => {
                return Ok(Signer {
                    keys: Cow::Borrowed(keys),
                    valid: None,
                    identity: None,
                });
            }
            Verifier::Keyless {
                anchors,
                valid,
                identities,
            } => (anchors, valid, identities),
        };
        let pem = certificate
            .filter(|c| !c.trim().is_empty())
            .ok_or("no certificate in the signature (keyless expected)")?;
        let leaf_der = CertificateDer::from_pem_slice(pem.as_bytes())
            .map_err(|e| format!("the signing certificate is not PEM: {e}"))?;
        let leaf = Certificate::from_der(&leaf_der)
            .map_err(|e| format!("invalid signing certificate: {e}"))?;
        let intermediates = CertificateDer::pem_slice_iter(chain.unwrap_or_default().as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the certificate chain is not PEM: {e}"))?;
        let untrusted = |e: webpki::Error| format!("certificate is not trusted: {e:?}");
        let end_entity = webpki::EndEntityCert::try_from(&leaf_der).map_err(untrusted)?;
        // As cosign: the chain is checked when the certificate was issued
        // (a Fulcio certificate lives minutes), its expiry at the end.
        // Code signing is required of each certificate that names usages
        // (Go's rule, which cosign's check follows).
        let issued = leaf.tbs_certificate.validity.not_before.to_unix_duration();
        let path = end_entity
            .verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                anchors,
                &intermediates,
                UnixTime::since_unix_epoch(issued),
                webpki::KeyUsage::required_if_present(CODE_SIGNING),
                None,
                None,
            )
            .map_err(untrusted)?;
        let mut valid = Window::of(&leaf.tbs_certificate.validity);
        for cert in path.intermediate_certificates() {
            let cert = Certificate::from_der(&cert.der())
                .map_err(|e| format!("invalid certificate in the chain: {e}"))?;
            valid = valid.and(Window::of(&cert.tbs_certificate.validity));
        }
        if let Some(i) = anchors.iter().position(|a| std::ptr::eq(a, path.anchor())) {
            valid = valid.and(anchors_valid[i]);
        }
        let key = certificate_key(&leaf)?;
        Ok(Signer {
            keys: Cow::Owned(vec![key]),
            valid: Some(valid),
            identity: Some((Box::new(leaf), *identities)),
        })
    }
}

impl Signer<'_> {
    /// Whether the signing certificate (keyless) names one of the
    /// identities.
    fn identity(&self) -> Result<(), Failure> {
        match &self.identity {
            Some((leaf, identities)) => check_identity(leaf, identities).map_err(|e| {
                // An identity that cannot be read or compiled is not a
                // mismatch.
                if e.starts_with("invalid regexp") || e.starts_with("malformed") {
                    Failure::Crypto(e)
                } else {
                    Failure::Identity(e)
                }
            }),
            None => Ok(()),
        }
    }

    /// Whether the certificates (keyless) are valid now.
    fn still_valid(&self) -> Result<(), String> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        match self.valid {
            Some(w) if !w.contains(now) => {
                Err("expected a signed timestamp to verify an expired certificate".to_string())
            }
            _ => Ok(()),
        }
    }
}

/// A certificate's public key (ECDSA P-256).
fn certificate_key(cert: &Certificate) -> Result<VerifyingKey, String> {
    let spki = cert
        .tbs_certificate
        .subject_public_key_info
        .to_der()
        .map_err(|e| format!("invalid signing certificate: {e}"))?;
    VerifyingKey::from_public_key_der(&spki)
        .map_err(|e| format!("the signing certificate's key is not ECDSA P-256: {e}"))
}

/// Whether `leaf` names one of `identities` (any when there are none).
fn check_identity(leaf: &Certificate, identities: &[Identity]) -> Result<(), String> {
    if identities.is_empty() {
        return Ok(());
    }
    let sans = subject_alternative_names(leaf)?;
    let issuer = oidc_issuer(leaf);
    let mut why: Vec<String> = Vec::new();
    for id in identities {
        let matched = if id.wildcards {
            kyverno_identity(id, &sans, &issuer)?
        } else {
            cosign_identity(id, &sans, &issuer)?
        };
        match matched {
            Ok(()) => return Ok(()),
            Err(e) if !why.contains(&e) => why.push(e),
            Err(_) => {}
        }
    }
    Err(why.join("; "))
}

/// One identity's verdict on a certificate: `Ok(Ok(()))` it matches,
/// `Ok(Err(why))` it does not, `Err` the identity is invalid.
type Verdict = Result<Result<(), String>, String>;

/// `pattern` compiled, or `what`'s error naming it.
fn compile(pattern: &str, what: impl FnOnce(String) -> String) -> Result<regex::Regex, String> {
    regex::Regex::new(pattern).map_err(|e| {
        // The regex crate's error draws the pattern over several lines;
        // its last line says what is wrong.
        let text = e.to_string();
        let reason = text
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .unwrap_or(&text);
        what(format!("{pattern} : error parsing regexp: {reason}"))
    })
}

/// A ClusterPolicy keyless attestor's match, Kyverno's: the subject (a
/// wildcard, or a regexp) must match one subject alternative name when
/// the certificate has any; the issuer must match the wildcard and the
/// regexp that are given.
fn kyverno_identity(id: &Identity, sans: &[String], issuer: &str) -> Verdict {
    if (!id.subject.is_empty() || !id.subject_regexp.is_empty()) && !sans.is_empty() {
        let mut matched =
            !id.subject.is_empty() && sans.iter().any(|s| wildcard_match(&id.subject, s));
        if !id.subject_regexp.is_empty() {
            let re = compile(&id.subject_regexp, |e| {
                format!("invalid regexp for subject: {e}")
            })?;
            matched |= sans.iter().any(|s| re.is_match(s));
        }
        if !matched {
            let expected = if id.subject.is_empty() {
                &id.subject_regexp
            } else {
                &id.subject
            };
            return Ok(Err(format!(
                "subject mismatch: expected {expected}, received {}",
                sans.join(", ")
            )));
        }
    }
    if !id.issuer.is_empty() && !wildcard_match(&id.issuer, issuer) {
        return Ok(Err(format!(
            "issuer mismatch: expected {}, received {issuer}",
            id.issuer
        )));
    }
    if !id.issuer_regexp.is_empty() {
        let re = compile(&id.issuer_regexp, |e| {
            format!("invalid regexp for issuer: {e}")
        })?;
        if !re.is_match(issuer) {
            return Ok(Err(format!(
                "issuer mismatch: expected {}, received {issuer}",
                id.issuer_regexp
            )));
        }
    }
    Ok(Ok(()))
}

/// An ImageValidatingPolicy identity's match, cosign's: the issuer equals
/// `issuer` or matches `issuer_regexp` (which wins when both are given),
/// and one subject alternative name equals `subject` or matches
/// `subject_regexp` (likewise).
fn cosign_identity(id: &Identity, sans: &[String], issuer: &str) -> Verdict {
    let issuer_matches = if !id.issuer_regexp.is_empty() {
        compile(&id.issuer_regexp, |e| {
            format!("malformed issuer in identity: {e}")
        })?
        .is_match(issuer)
    } else {
        id.issuer.is_empty() || id.issuer == issuer
    };
    let subject_matches = if !id.subject_regexp.is_empty() {
        let re = compile(&id.subject_regexp, |e| {
            format!("malformed subject in identity: {e}")
        })?;
        sans.iter().any(|s| re.is_match(s))
    } else {
        id.subject.is_empty() || sans.contains(&id.subject)
    };
    if issuer_matches && subject_matches {
        return Ok(Ok(()));
    }
    Ok(Err(format!(
        "none of the expected identities matched what was in the certificate, got subjects [{}] with issuer {issuer}",
        sans.join(", ")
    )))
}

/// Kyverno's wildcard match: `*` matches any run of characters (none
/// included), `?` exactly one, any other character itself; an empty
/// pattern matches only the empty text.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    // After the last `*` seen: where the pattern resumes, and the text
    // position its run ends at so far.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi + 1, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                // Let the last `*` take one more character and retry.
                Some((resume, end)) => {
                    star = Some((resume, end + 1));
                    pi = resume;
                    ti = end + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The certificate's subject alternative names as Go lists them for
/// cosign: DNS names, emails, IP addresses, URIs, then Fulcio's username.
fn subject_alternative_names(cert: &Certificate) -> Result<Vec<String>, String> {
    let Some((_, SubjectAltName(names))) = cert
        .tbs_certificate
        .get::<SubjectAltName>()
        .map_err(|e| format!("invalid subject alternative names: {e}"))?
    else {
        return Ok(Vec::new());
    };
    let mut by_kind: [Vec<String>; 5] = Default::default();
    for name in names {
        let (kind, text) = match name {
            GeneralName::DnsName(n) => (0, n.to_string()),
            GeneralName::Rfc822Name(n) => (1, n.to_string()),
            GeneralName::IpAddress(ip) => {
                let ip = match ip.as_bytes().len() {
                    4 => <[u8; 4]>::try_from(ip.as_bytes()).map(std::net::IpAddr::from),
                    _ => <[u8; 16]>::try_from(ip.as_bytes()).map(std::net::IpAddr::from),
                };
                match ip {
                    Ok(ip) => (2, ip.to_string()),
                    Err(_) => continue,
                }
            }
            GeneralName::UniformResourceIdentifier(n) => (3, n.to_string()),
            GeneralName::OtherName(o) if o.type_id == FULCIO_USERNAME => {
                match Utf8StringRef::try_from(&o.value) {
                    Ok(s) => (4, s.to_string()),
                    Err(_) => continue,
                }
            }
            _ => continue,
        };
        by_kind[kind].push(text);
    }
    Ok(by_kind.concat())
}

/// The certificate's OIDC issuer: Fulcio's extension 1.3.6.1.4.1.57264.1.8
/// (a UTF8String), else 1.3.6.1.4.1.57264.1.1 (the raw bytes); empty
/// without either.
fn oidc_issuer(cert: &Certificate) -> String {
    let extensions = cert
        .tbs_certificate
        .extensions
        .as_deref()
        .unwrap_or_default();
    let value = |oid| {
        extensions
            .iter()
            .find(|e| e.extn_id == oid)
            .map(|e| e.extn_value.as_bytes())
    };
    if let Some(s) = value(FULCIO_ISSUER_V2).and_then(|v| Utf8StringRef::from_der(v).ok()) {
        return s.to_string();
    }
    value(FULCIO_ISSUER_V1)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .unwrap_or_default()
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

fn verify_one(s: &Signature, digest: &str, verifier: &Verifier<'_>) -> Result<(), Failure> {
    let signer = verifier.signer(s.certificate.as_deref(), s.chain.as_deref())?;
    verify_signature(&s.payload, &s.signature, &signer.keys)?;
    let payload: Value = serde_json::from_slice(&s.payload)
        .map_err(|e| format!("signed payload is not JSON: {e}"))?;
    match payload["critical"]["image"]["docker-manifest-digest"].as_str() {
        Some(d) if d == digest => {}
        Some(d) => return Err(format!("signed payload names digest {d}, not {digest}").into()),
        None => return Err("signed payload names no image digest".into()),
    }
    signer.still_valid()?;
    signer.identity()
}

/// The statement of one DSSE envelope when one of its signatures verifies
/// with `verifier`'s signer and the statement names `digest`.
fn verify_envelope(
    envelope: &Envelope,
    digest: &str,
    verifier: &Verifier<'_>,
) -> Result<Value, Failure> {
    let signer = verifier.signer(envelope.certificate.as_deref(), envelope.chain.as_deref())?;
    let json: Value = serde_json::from_slice(&envelope.json)
        .map_err(|e| format!("attestation is not a DSSE envelope (JSON): {e}"))?;
    let payload_type = json["payloadType"].as_str().unwrap_or_default();
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(format!(
            "invalid payloadType {payload_type:?} on envelope, expected {IN_TOTO_PAYLOAD_TYPE}"
        )
        .into());
    }
    let body = base64::engine::general_purpose::STANDARD
        .decode(json["payload"].as_str().unwrap_or_default())
        .map_err(|e| format!("attestation payload is not base64: {e}"))?;
    let message = pae(payload_type, &body);
    let mut verified = Err("attestation envelope has no signatures".to_string());
    for s in json["signatures"].as_array().into_iter().flatten() {
        verified = verify_signature(
            &message,
            s["sig"].as_str().unwrap_or_default(),
            &signer.keys,
        );
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
        return Err(format!("attestation subject does not name digest {digest}").into());
    }
    signer.still_valid()?;
    signer.identity()?;
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
            certificate: None,
            chain: None,
        }
    }

    fn pem(k: &SigningKey) -> String {
        k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap()
    }

    fn keys(pem: &str) -> Trust {
        Trust::Keys(pem.to_string())
    }

    /// An envelope as a layer without certificate annotations holds it.
    fn envelope(json: Vec<u8>) -> Envelope {
        Envelope {
            json,
            certificate: None,
            chain: None,
        }
    }

    #[test]
    fn a_key_verifies_its_signature_of_the_digest_only() {
        let d = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        let sigs = Signatures {
            digest: d.clone(),
            signatures: vec![signed(&key(1), &d)],
        };
        assert_eq!(verify(&sigs, &keys(&pem(&key(1)))), Ok(()));
        // Either of two keys in one publicKeys text.
        let both = format!("{}\n{}", pem(&key(2)), pem(&key(1)));
        assert_eq!(verify(&sigs, &keys(&both)), Ok(()));
        let err = verify(&sigs, &keys(&pem(&key(2)))).unwrap_err();
        assert!(err.starts_with("no matching signatures"), "{err}");
        let moved = Signatures {
            digest: other.clone(),
            signatures: vec![signed(&key(1), &d)],
        };
        let err = verify(&moved, &keys(&pem(&key(1)))).unwrap_err();
        assert!(
            err.contains(&format!("names digest {d}, not {other}")),
            "{err}"
        );
        let unsigned = Signatures {
            digest: d,
            signatures: vec![],
        };
        assert_eq!(
            verify(&unsigned, &keys(&pem(&key(1)))),
            Err("no signatures found".to_string())
        );
        assert!(verify(&sigs, &keys("not a key")).is_err());
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
                envelope(attested(&key(1), &a, "https://slsa.dev/provenance/v0.2")),
                envelope(attested(&key(2), &a, "https://cyclonedx.org/bom")),
                envelope(attested(&key(1), &b, "https://example.com/other-image")),
            ],
        };
        // Key 1: its envelope of this digest, not key 2's nor the one
        // naming another image.
        let statements = verify_attestations(&atts, &keys(&pem(&key(1)))).unwrap();
        assert_eq!(statements.len(), 1);
        assert_eq!(
            statements[0]["predicateType"],
            "https://slsa.dev/provenance/v0.2"
        );
        assert_eq!(statements[0]["subject"][0]["digest"]["sha256"], a.as_str());
        assert_eq!(statements[0]["predicate"]["ok"], true);
        assert_eq!(
            verify_attestations(&atts, &keys(&pem(&key(2)))).unwrap()[0]["predicateType"],
            "https://cyclonedx.org/bom"
        );
        let both = format!("{}\n{}", pem(&key(2)), pem(&key(1)));
        assert_eq!(verify_attestations(&atts, &keys(&both)).unwrap().len(), 2);

        let err = verify_attestations(&atts, &keys(&pem(&key(3)))).unwrap_err();
        assert_eq!(
            err,
            "no matching attestations: invalid signature when validating ASN.1 encoded signature"
        );
        let moved = Attestations {
            digest: format!("sha256:{b}"),
            envelopes: atts.envelopes[..1].to_vec(),
        };
        assert_eq!(
            verify_attestations(&moved, &keys(&pem(&key(1)))),
            Err(format!(
                "no matching attestations: attestation subject does not name digest sha256:{b}"
            ))
        );
        let none = Attestations {
            digest: format!("sha256:{a}"),
            envelopes: vec![],
        };
        assert_eq!(
            verify_attestations(&none, &keys(&pem(&key(1)))),
            Err(NO_ATTESTATIONS.to_string())
        );
        assert!(verify_attestations(&atts, &keys("not a key")).is_err());
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
                envelope(b"{".to_vec()),
                envelope(serde_json::to_vec(&bad_type).unwrap()),
                envelope(serde_json::to_vec(&unsigned).unwrap()),
                envelope(serde_json::to_vec(&not_json).unwrap()),
            ],
        };
        let err = verify_attestations(&atts, &keys(&pem(&key(1)))).unwrap_err();
        for why in [
            "no matching attestations: attestation is not a DSSE envelope (JSON)",
            "invalid payloadType \"text/plain\" on envelope",
            "attestation envelope has no signatures",
            "attestation payload is not JSON",
        ] {
            assert!(err.contains(why), "{why}: {err}");
        }
    }

    #[test]
    fn kyverno_wildcards() {
        for (pattern, text) in [
            ("*", ""),
            ("*", "anything"),
            ("", ""),
            ("a", "a"),
            ("*@example.com", "alice@example.com"),
            ("*@example.com", "@example.com"),
            ("a?c", "abc"),
            ("a*b*c", "aXXbYYc"),
            ("a*b*c", "abbbc"),
            ("*.*", "x.y.z"),
            ("**", "x"),
            ("é?", "éè"),
            (
                "https://token.actions.*.com",
                "https://token.actions.githubusercontent.com",
            ),
        ] {
            assert!(wildcard_match(pattern, text), "{pattern} ~ {text}");
        }
        for (pattern, text) in [
            ("", "a"),
            ("a", ""),
            ("a?c", "ac"),
            ("?", ""),
            ("*@example.com", "alice@example.org"),
            ("a*b*c", "aXXbYY"),
            ("abc", "abcd"),
            ("abc*", "ab"),
        ] {
            assert!(!wildcard_match(pattern, text), "{pattern} !~ {text}");
        }
    }

    /// An identity of `[subject, subject_regexp, issuer, issuer_regexp]`.
    fn ident(fields: [&str; 4], wildcards: bool) -> Identity {
        let [subject, subject_regexp, issuer, issuer_regexp] = fields.map(String::from);
        Identity {
            subject,
            subject_regexp,
            issuer,
            issuer_regexp,
            wildcards,
        }
    }

    fn sans(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_cluster_policy_attestor_matches_as_kyverno() {
        let sans = sans(&["alice@example.com", "https://ci.example.com/wf"]);
        let issuer = "https://accounts.example.com";
        let id = |subject, subject_regexp, issuer, issuer_regexp| {
            ident([subject, subject_regexp, issuer, issuer_regexp], true)
        };
        let check = |id: Identity| kyverno_identity(&id, &sans, issuer);
        assert_eq!(check(id("", "", "", "")), Ok(Ok(())));
        assert_eq!(check(id("*@example.com", "", "", "")), Ok(Ok(())));
        assert_eq!(
            check(id("https://ci.*", "", "https://*.example.com", "")),
            Ok(Ok(()))
        );
        // Either the wildcard or the regexp names the subject.
        assert_eq!(check(id("bob@*", "^alice@", "", "")), Ok(Ok(())));
        assert_eq!(check(id("", "", "", "example\\.com$")), Ok(Ok(())));
        assert_eq!(
            check(id("bob@*", "", "", "")),
            Ok(Err(
                "subject mismatch: expected bob@*, received alice@example.com, https://ci.example.com/wf"
                    .to_string()
            ))
        );
        assert_eq!(
            check(id("", "^bob", "", "")),
            Ok(Err(
                "subject mismatch: expected ^bob, received alice@example.com, https://ci.example.com/wf"
                    .to_string()
            ))
        );
        assert_eq!(
            check(id("", "", "https://other", "")),
            Ok(Err(
                "issuer mismatch: expected https://other, received https://accounts.example.com"
                    .to_string()
            ))
        );
        // Both issuer constraints must hold.
        assert_eq!(
            check(id("", "", "https://*", "other")),
            Ok(Err(
                "issuer mismatch: expected other, received https://accounts.example.com"
                    .to_string()
            ))
        );
        let err = check(id("", "(", "", "")).unwrap_err();
        assert!(
            err.starts_with("invalid regexp for subject: ( : error parsing regexp: "),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        let err = check(id("", "", "", "[")).unwrap_err();
        assert!(err.starts_with("invalid regexp for issuer: [ : "), "{err}");
        // Kyverno checks no subject of a certificate without any.
        assert_eq!(
            kyverno_identity(&id("bob@*", "", "", ""), &[], issuer),
            Ok(Ok(()))
        );
    }

    #[test]
    fn an_image_validating_policy_identity_matches_as_cosign() {
        let sans = sans(&["alice@example.com"]);
        let issuer = "https://accounts.example.com";
        let id = |subject, subject_regexp, issuer, issuer_regexp| {
            ident([subject, subject_regexp, issuer, issuer_regexp], false)
        };
        let check = |id: Identity| cosign_identity(&id, &sans, issuer);
        assert_eq!(check(id("", "", "", "")), Ok(Ok(())));
        assert_eq!(check(id("alice@example.com", "", issuer, "")), Ok(Ok(())));
        assert_eq!(check(id("", "@example\\.com$", "", "accounts")), Ok(Ok(())));
        // A regexp wins over the exact string.
        assert_eq!(check(id("bob", "alice", "", "")), Ok(Ok(())));
        let none = Ok(Err("none of the expected identities matched what was in the certificate, got subjects [alice@example.com] with issuer https://accounts.example.com".to_string()));
        // Not wildcards: `*` is itself.
        assert_eq!(check(id("*@example.com", "", "", "")), none);
        assert_eq!(
            check(id("alice@example.com", "", "https://other", "")),
            none
        );
        let err = check(id("", "(", "", "")).unwrap_err();
        assert!(
            err.starts_with("malformed subject in identity: ( : error parsing regexp: "),
            "{err}"
        );
        let err = check(id("", "", "", "(")).unwrap_err();
        assert!(
            err.starts_with("malformed issuer in identity: ( : "),
            "{err}"
        );
    }

    #[test]
    fn keyless_roots_must_hold_certificates() {
        let trust = Trust::Keyless(Keyless {
            roots: "no PEM here".into(),
            identities: vec![],
        });
        let sigs = Signatures {
            digest: "sha256:aa".into(),
            signatures: vec![],
        };
        assert_eq!(
            verify(&sigs, &trust),
            Err("no root certificate (a PEM `CERTIFICATE` block) in the keyless roots".into())
        );
    }

    /// Keyless verification without a registry: the local CA's
    /// certificates, each failure in its words.
    #[cfg(feature = "testing")]
    #[test]
    fn keyless_signatures_say_why_they_do_not_verify() {
        use crate::testing::Fulcio;
        use std::time::Duration;
        let d = format!("sha256:{}", "a".repeat(64));
        let fulcio = Fulcio::new();
        let hour = Duration::from_secs(3600);
        let issuer = "https://accounts.example.com";
        let id = fulcio.issue("alice@example.com", issuer, hour);
        let keyless = |roots: String, identities: Vec<Identity>| {
            Trust::Keyless(Keyless { roots, identities })
        };
        let alice = Identity {
            subject: "alice@example.com".into(),
            issuer: issuer.into(),
            ..Identity::default()
        };
        let sig = |id: &crate::testing::SigningIdentity, chain: Option<String>| Signature {
            certificate: Some(id.cert_pem.clone()),
            chain,
            ..signed(&id.key, &d)
        };
        let sigs = |s: Signature| Signatures {
            digest: d.clone(),
            signatures: vec![s],
        };
        let trust = keyless(fulcio.root_pem(), vec![alice.clone()]);
        assert_eq!(
            verify(&sigs(sig(&id, Some(fulcio.chain_pem()))), &trust),
            Ok(())
        );
        // Any identity; the intermediate as a root of its own.
        assert_eq!(
            verify(&sigs(sig(&id, None)), &keyless(fulcio.chain_pem(), vec![])),
            Ok(())
        );
        let err = verify(&sigs(sig(&id, None)), &trust).unwrap_err();
        assert!(
            err.starts_with("no matching signatures: certificate is not trusted: UnknownIssuer"),
            "{err}"
        );
        let other = Fulcio::new();
        let err = verify(
            &sigs(sig(&id, Some(fulcio.chain_pem()))),
            &keyless(other.root_pem(), vec![]),
        )
        .unwrap_err();
        assert!(
            err.starts_with("no matching signatures: certificate is not trusted: "),
            "{err}"
        );
        // A key's signature, no certificate.
        let err = verify(&sigs(signed(&key(1), &d)), &trust).unwrap_err();
        assert_eq!(
            err,
            "no matching signatures: no certificate in the signature (keyless expected)"
        );
        // The certificate of another key than the signature's.
        let bob = fulcio.issue("bob@example.com", issuer, hour);
        let swapped = Signature {
            certificate: Some(bob.cert_pem.clone()),
            ..sig(&id, Some(fulcio.chain_pem()))
        };
        let err = verify(&sigs(swapped), &keyless(fulcio.root_pem(), vec![])).unwrap_err();
        assert_eq!(
            err,
            "no matching signatures: invalid signature when validating ASN.1 encoded signature"
        );
        let err = verify(&sigs(sig(&bob, Some(fulcio.chain_pem()))), &trust).unwrap_err();
        assert_eq!(
            err,
            "no matching signatures: none of the expected identities matched what was in the certificate, got subjects [bob@example.com] with issuer https://accounts.example.com"
        );
        let expired = fulcio.issue("alice@example.com", issuer, Duration::from_secs(30));
        let err = verify(&sigs(sig(&expired, Some(fulcio.chain_pem()))), &trust).unwrap_err();
        assert_eq!(
            err,
            "no matching signatures: expected a signed timestamp to verify an expired certificate"
        );
        // The leaf names its issuer in both of Fulcio's extensions.
        let der = CertificateDer::from_pem_slice(id.cert_pem.as_bytes()).unwrap();
        let leaf = Certificate::from_der(&der).unwrap();
        assert_eq!(oidc_issuer(&leaf), issuer);
        assert_eq!(
            subject_alternative_names(&leaf).unwrap(),
            ["alice@example.com"]
        );
    }
}
