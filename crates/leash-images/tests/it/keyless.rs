//! cosign keyless signatures and attestations (a Fulcio-like CA's
//! certificates in the layers' annotations) against a real registry.

use std::sync::Arc;
use std::time::Duration;

use leash_images::cosign::{Identity, Keyless, Trust};
use leash_images::testing::{Fulcio, LocalRegistry, public_key_pem, signing_key};
use leash_images::{ImageLookup, Registry, RegistrySettings};

const ISSUER: &str = "https://accounts.example.com";
const ALICE: &str = "alice@example.com";
const HOUR: Duration = Duration::from_secs(3600);

fn registry() -> Arc<Registry> {
    Arc::new(Registry::new(RegistrySettings {
        timeout: Duration::from_secs(5),
        ..RegistrySettings::default()
    }))
}

fn keyless(roots: String, identities: Vec<Identity>) -> Trust {
    Trust::Keyless(Keyless { roots, identities })
}

/// An identity naming `subject` and `issuer`, as cosign (exact) or as
/// Kyverno (wildcards) matches it.
fn identity(subject: &str, issuer: &str, wildcards: bool) -> Identity {
    Identity {
        subject: subject.to_string(),
        issuer: issuer.to_string(),
        wildcards,
        ..Identity::default()
    }
}

/// A keyless-signed image verifies with the CA's root and the signer's
/// identity, and says why not with another identity, another CA, an
/// expired certificate, or a key's signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_signatures_verify_with_their_root_and_identity() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let fulcio = Fulcio::new();
    let alice = fulcio.issue(ALICE, ISSUER, HOUR);
    for tag in ["keyless", "expired", "keyed"] {
        reg.push(&format!("app:{tag}"), &[]).await;
    }
    let digest = reg
        .sign_keyless("app:keyless", &alice, &fulcio.chain_pem())
        .await;
    let expired = fulcio.issue(ALICE, ISSUER, Duration::from_secs(30));
    reg.sign_keyless("app:expired", &expired, &fulcio.chain_pem())
        .await;
    reg.sign("app:keyed", &signing_key(1)).await;

    let registry = registry();
    let image = |tag: &str| format!("{}/app:{tag}", reg.host);
    let sigs = registry.signatures(&image("keyless")).await.unwrap();
    assert_eq!(sigs.signatures.len(), 1);
    assert_eq!(
        sigs.signatures[0].certificate.as_ref(),
        Some(&alice.cert_pem)
    );
    assert_eq!(sigs.signatures[0].chain, Some(fulcio.chain_pem()));
    let verify = |trust: &Trust| cosign_verify(&sigs, trust);

    let exact = keyless(fulcio.root_pem(), vec![identity(ALICE, ISSUER, false)]);
    assert_eq!(
        registry.verify(&image("keyless"), &exact, &sigs),
        Ok(digest.clone())
    );
    // Any identity; one of several.
    assert_eq!(verify(&keyless(fulcio.root_pem(), vec![])), Ok(()));
    let either = vec![
        identity("bob@example.com", ISSUER, false),
        identity(ALICE, ISSUER, false),
    ];
    assert_eq!(verify(&keyless(fulcio.root_pem(), either)), Ok(()));

    let err = verify(&keyless(
        fulcio.root_pem(),
        vec![identity("bob@example.com", ISSUER, false)],
    ))
    .unwrap_err();
    assert_eq!(
        err,
        format!(
            "no matching signatures: none of the expected identities matched what was in the certificate, got subjects [{ALICE}] with issuer {ISSUER}"
        )
    );
    let err = verify(&keyless(
        fulcio.root_pem(),
        vec![identity("bob@*", ISSUER, true)],
    ))
    .unwrap_err();
    assert_eq!(
        err,
        // Kyverno matches a ClusterPolicy's identity itself, after cosign
        // verified the signature: its message alone.
        format!("subject mismatch: expected bob@*, received {ALICE}")
    );
    let err = verify(&keyless(
        fulcio.root_pem(),
        vec![identity(ALICE, "https://other.example.com", true)],
    ))
    .unwrap_err();
    assert_eq!(
        err,
        format!("issuer mismatch: expected https://other.example.com, received {ISSUER}")
    );

    // Kyverno's wildcards for a ClusterPolicy attestor, exact strings for
    // cosign's identities.
    let wildcard = |wildcards| {
        keyless(
            fulcio.root_pem(),
            vec![identity(
                "*@example.com",
                "https://*.example.com",
                wildcards,
            )],
        )
    };
    assert_eq!(verify(&wildcard(true)), Ok(()));
    let err = verify(&wildcard(false)).unwrap_err();
    assert!(
        err.contains("none of the expected identities matched"),
        "{err}"
    );
    let regexp = Identity {
        subject_regexp: "^alice@".into(),
        issuer_regexp: "example\\.com$".into(),
        ..Identity::default()
    };
    assert_eq!(verify(&keyless(fulcio.root_pem(), vec![regexp])), Ok(()));

    let err = verify(&keyless(Fulcio::new().root_pem(), vec![])).unwrap_err();
    assert!(
        err.starts_with("no matching signatures: certificate is not trusted: "),
        "{err}"
    );

    let sigs = registry.signatures(&image("expired")).await.unwrap();
    let err = registry
        .verify(&image("expired"), &exact, &sigs)
        .unwrap_err();
    assert_eq!(
        err,
        "no matching signatures: expected a signed timestamp to verify an expired certificate"
    );

    let sigs = registry.signatures(&image("keyed")).await.unwrap();
    assert_eq!(sigs.signatures[0].certificate, None);
    let err = registry.verify(&image("keyed"), &exact, &sigs).unwrap_err();
    assert_eq!(
        err,
        "no matching signatures: no certificate in the signature (keyless expected)"
    );
    let key = Trust::Keys(public_key_pem(&signing_key(1)));
    assert!(registry.verify(&image("keyed"), &key, &sigs).is_ok());
    // A key does not verify a keyless signature (the leaf's key signed).
    let sigs = registry.signatures(&image("keyless")).await.unwrap();
    assert!(registry.verify(&image("keyless"), &key, &sigs).is_err());
}

fn cosign_verify(sigs: &leash_images::cosign::Signatures, trust: &Trust) -> Result<(), String> {
    leash_images::cosign::verify(sigs, trust)
}

/// A verification that held is kept per image and trust: another trust of
/// the same image is checked on its own (and fails when it should).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_verifications_are_per_trust() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let fulcio = Fulcio::new();
    reg.push("app:1.0", &[]).await;
    let digest = reg
        .sign_keyless(
            "app:1.0",
            &fulcio.issue(ALICE, ISSUER, HOUR),
            &fulcio.chain_pem(),
        )
        .await;
    let registry = registry();
    let image = format!("{}/app:1.0", reg.host);
    let alice = keyless(fulcio.root_pem(), vec![identity(ALICE, ISSUER, false)]);
    let bob = keyless(
        fulcio.root_pem(),
        vec![identity("bob@example.com", ISSUER, false)],
    );
    let lookup = ImageLookup::new(registry.clone());
    assert!(
        lookup
            .verify(&image, &alice)
            .unwrap_err()
            .contains("not fetched yet")
    );
    assert!(lookup.fetch_missed().await);
    for _ in 0..2 {
        assert_eq!(lookup.verify(&image, &alice), Ok(digest.clone()));
    }
    assert_eq!(registry.checks(), 1, "a verification that held is kept");
    let err = lookup.verify(&image, &bob).unwrap_err();
    assert!(err.contains("none of the expected identities"), "{err}");
    assert_eq!(registry.checks(), 2);
}

/// A keyless attestation verifies with the CA's root and the signer's
/// identity and gives its statement; a key or another identity does not
/// verify it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_attestations_verify_with_their_root_and_identity() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let fulcio = Fulcio::from_seed(7);
    let alice = fulcio.issue(ALICE, ISSUER, HOUR);
    reg.push("app:attested", &[]).await;
    let slsa = "https://slsa.dev/provenance/v0.2";
    let digest = reg
        .attest_keyless(
            "app:attested",
            &alice,
            &fulcio.chain_pem(),
            slsa,
            serde_json::json!({"builder": {"id": "ci"}}),
        )
        .await;
    let registry = registry();
    let image = format!("{}/app:attested", reg.host);
    let atts = registry.attestations(&image).await.unwrap();
    assert_eq!(atts.envelopes.len(), 1);
    assert_eq!(
        atts.envelopes[0].certificate.as_ref(),
        Some(&alice.cert_pem)
    );
    assert_eq!(atts.envelopes[0].chain, Some(fulcio.chain_pem()));

    // The root of another CA made from the same seed is as good.
    let trust = keyless(
        Fulcio::from_seed(7).root_pem(),
        vec![identity(ALICE, ISSUER, false)],
    );
    // The registry keeps the attestations fetched above: an evaluation's
    // lookup answers at once.
    let lookup = ImageLookup::new(registry.clone());
    let statements = lookup.attestations(&image, &trust).unwrap();
    assert!(!lookup.fetch_missed().await);
    assert_eq!(statements.len(), 1);
    assert_eq!(statements[0]["predicateType"], slsa);
    assert_eq!(statements[0]["predicate"]["builder"]["id"], "ci");
    assert_eq!(
        statements[0]["subject"][0]["digest"]["sha256"],
        digest.strip_prefix("sha256:").unwrap()
    );

    let err = registry
        .verify_attestations(
            &image,
            &keyless(fulcio.root_pem(), vec![identity("bob@*", "*", true)]),
            &atts,
        )
        .unwrap_err();
    assert_eq!(
        err,
        format!("subject mismatch: expected bob@*, received {ALICE}")
    );
    let err = registry
        .verify_attestations(
            &image,
            &keyless(Fulcio::from_seed(8).root_pem(), vec![]),
            &atts,
        )
        .unwrap_err();
    assert!(
        err.starts_with("no matching attestations: certificate is not trusted: "),
        "{err}"
    );
    let err = registry
        .verify_attestations(&image, &Trust::Keys(public_key_pem(&signing_key(1))), &atts)
        .unwrap_err();
    assert_eq!(
        err,
        "no matching attestations: invalid signature when validating ASN.1 encoded signature"
    );
}

/// A `certificates` attestor (cosign's `--certificate`): the key of the
/// certificate the policy gives verifies the image's signatures, that
/// certificate first checked against the chain given; a certificate of
/// another key, or a chain of another CA, verifies nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_given_certificates_key_verifies_signatures() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let fulcio = Fulcio::new();
    let alice = fulcio.issue(ALICE, ISSUER, HOUR);
    reg.push("app:cert", &[]).await;
    // Signed with the certificate's key, as `cosign sign --key` signs:
    // no certificate in the signature.
    let digest = reg.sign("app:cert", &alice.key).await;
    let registry = registry();
    let image = format!("{}/app:cert", reg.host);
    let sigs = registry.signatures(&image).await.unwrap();
    let trust = |cert: &str, chain: String| Trust::Certificate {
        cert: cert.to_string(),
        chain,
    };
    assert_eq!(
        registry.verify(&image, &trust(&alice.cert_pem, fulcio.chain_pem()), &sigs),
        Ok(digest.clone())
    );
    assert_eq!(
        registry.verify(&image, &trust(&alice.cert_pem, String::new()), &sigs),
        Ok(digest)
    );
    let bob = fulcio.issue("bob@example.com", ISSUER, HOUR);
    let err = registry
        .verify(&image, &trust(&bob.cert_pem, fulcio.chain_pem()), &sigs)
        .unwrap_err();
    assert!(err.starts_with("no matching signatures"), "{err}");
    let other = Fulcio::new();
    let err = registry
        .verify(&image, &trust(&alice.cert_pem, other.chain_pem()), &sigs)
        .unwrap_err();
    assert!(err.contains("certificate is not trusted"), "{err}");
}
