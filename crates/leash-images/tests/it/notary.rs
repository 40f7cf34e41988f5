//! Notary Project signatures made by the real `notation` CLI
//! (`testenv/build.sh notation`) into a real registry, verified as
//! Kyverno's notation-go verifier verifies them, with its messages.

use std::time::{Duration, SystemTime};

use leash_images::cosign::Trust;
use leash_images::notary;
use leash_images::testing::{LocalRegistry, NotaryChain, Notation};
use leash_images::{Registry, RegistrySettings};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notation_signatures_verify_as_kyverno_verifies_them() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let Some(notation) = Notation::find() else {
        return;
    };
    let host = reg.host.clone();
    let mut digests = std::collections::HashMap::new();
    for repo in ["signed", "unsigned", "chain", "two", "cose", "expiring"] {
        let (digest, _) = reg.push(&format!("notary/{repo}:1"), &[]).await;
        digests.insert(repo, digest);
    }
    let by_digest = |repo: &str| format!("{host}/notary/{repo}@{}", digests[repo]);
    // A self-signed RSA 2048 certificate (PS256), as `notation cert
    // generate-test` makes it; a CA and an ECDSA leaf (ES256).
    let test_cert = notation.generate_test_key("test");
    let other_cert = notation.generate_test_key("other");
    let chain = NotaryChain::new("a");
    let stranger = NotaryChain::new("b");
    notation.add_key("chain", &chain);
    notation.sign(&by_digest("signed"), "test", &[]);
    notation.sign(&by_digest("chain"), "chain", &[]);
    notation.sign(&by_digest("two"), "other", &[]);
    notation.sign(&by_digest("two"), "test", &[]);
    notation.sign(&by_digest("cose"), "test", &["--signature-format", "cose"]);
    notation.sign(&by_digest("cose"), "chain", &["--signature-format", "cose"]);
    notation.sign(
        &by_digest("expiring"),
        "chain",
        &["--signature-format", "cose", "--expiry", "1m"],
    );
    notation.sign(&by_digest("expiring"), "test", &["--expiry", "1m"]);

    let registry = Registry::new(RegistrySettings {
        timeout: Duration::from_secs(10),
        ..RegistrySettings::default()
    });
    let verify = |repo: &str, certs: &str| {
        let image = format!("{host}/notary/{repo}:1");
        let trust = Trust::Notary(certs.to_string());
        let registry = &registry;
        async move { registry.verify_image(&image, &trust).await }
    };

    // Signed, trusted: the digest.
    assert_eq!(
        verify("signed", &test_cert).await.as_deref(),
        Ok(digests["signed"].as_str())
    );
    // Signed by a certificate not trusted: notation's words, after
    // Kyverno's "failed to verify REF@DIGEST: ".
    let err = verify("signed", &other_cert).await.unwrap_err();
    let prefix = format!(
        "failed to verify {}: signature verification failed\nfailed to verify signature with digest sha256:",
        by_digest("signed")
    );
    assert!(err.starts_with(&prefix), "{err}");
    assert!(
        err.ends_with(
            ", the signature's certificate chain does not contain any trusted certificate"
        ),
        "{err}"
    );
    // Not signed: Kyverno's message, word for word.
    assert_eq!(
        verify("unsigned", &test_cert).await,
        Err(format!(
            "failed to verify {0}: no signature is associated with \"{0}\", make sure the artifact was signed successfully",
            by_digest("unsigned")
        ))
    );
    // A chain: trusted through its CA or its leaf, not through another CA.
    assert!(verify("chain", &chain.root_pem).await.is_ok());
    assert!(verify("chain", &chain.leaf_pem).await.is_ok());
    let err = verify("chain", &stranger.root_pem).await.unwrap_err();
    assert!(
        err.contains("does not contain any trusted certificate"),
        "{err}"
    );
    // Two signatures: either signer's certificate verifies one of them.
    assert!(verify("two", &test_cert).await.is_ok());
    assert!(verify("two", &other_cert).await.is_ok());
    // Several certificates in the trust store: any one of them.
    let both = format!("{}{}", stranger.root_pem, chain.root_pem);
    assert!(verify("chain", &both).await.is_ok());
    // COSE envelopes (`--signature-format cose`), RSA and ECDSA: verified
    // as JWS ones are, and refused by another certificate.
    assert!(verify("cose", &test_cert).await.is_ok());
    assert!(verify("cose", &chain.root_pem).await.is_ok());
    let err = verify("cose", &stranger.root_pem).await.unwrap_err();
    assert!(
        err.contains("does not contain any trusted certificate"),
        "{err}"
    );
    // A policy certificate that is not PEM.
    let err = verify("signed", "not a certificate").await.unwrap_err();
    assert!(err.contains("failed to parse certificates"), "{err}");

    // As at later times: the signature's expiry, then the certificate's.
    let expiring = registry
        .notary_signatures(&format!("{host}/notary/expiring:1"))
        .await
        .unwrap();
    let now = SystemTime::now();
    assert_eq!(notary::verify_at(&expiring, &test_cert, now), Ok(()));
    let err = notary::verify_at(&expiring, &test_cert, now + Duration::from_secs(120)).unwrap_err();
    assert!(
        err.contains(", digital signature has expired on \""),
        "{err}"
    );
    let signed = registry
        .notary_signatures(&format!("{host}/notary/signed:1"))
        .await
        .unwrap();
    let later = now + Duration::from_secs(3 * 86_400);
    let err = notary::verify_at(&signed, &test_cert, later).unwrap_err();
    assert!(
        err.contains(", verification time is after certificate \"")
            && err.contains("validity period, it was expired at"),
        "{err}"
    );

    // A signature of another manifest, or one altered, does not verify.
    let mut moved = (*signed).clone();
    moved.target.digest = digests["unsigned"].clone();
    let err = notary::verify(&moved, &test_cert).unwrap_err();
    assert!(err.ends_with(", content descriptor mismatch"), "{err}");
    let mut altered = (*signed).clone();
    let envelope = &mut altered.envelopes[0];
    let mut doc: serde_json::Value = serde_json::from_slice(&envelope.blob).unwrap();
    let sig = doc["signature"].as_str().unwrap().to_string();
    let flipped = if sig.starts_with('A') { "B" } else { "A" };
    doc["signature"] = serde_json::Value::String(format!("{flipped}{}", &sig[1..]));
    envelope.blob = serde_json::to_vec(&doc).unwrap();
    let err = notary::verify(&altered, &test_cert).unwrap_err();
    assert!(err.contains(", signature is invalid."), "{err}");

    // OCI referrers (`oras attach`), each signed or not: the payload of
    // the first one of the type whose signature verifies.
    let sbom = r#"{"bomFormat": "CycloneDX", "specVersion": "1.5", "components": []}"#;
    let attached = notation.attach(&by_digest("signed"), "sbom/cyclone-dx", sbom);
    notation.sign(&format!("{host}/notary/signed@{attached}"), "test", &[]);
    let unsigned_report = notation.attach(&by_digest("signed"), "vuln/report", "{}");
    let referrers = |ty: &str, certs: &str| {
        let image = format!("{host}/notary/signed:1");
        let (ty, trust) = (ty.to_string(), Trust::Notary(certs.to_string()));
        let registry = &registry;
        async move { registry.verify_image_referrers(&image, &ty, &trust).await }
    };
    let payload = referrers("sbom/cyclone-dx", &test_cert).await.unwrap();
    assert_eq!(payload["bomFormat"], "CycloneDX");
    let err = referrers("sbom/cyclone-dx", &other_cert).await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "failed to verify attestation sbom/cyclone-dx, digest {attached}: signature verification failed\n"
        )) && err.contains("does not contain any trusted certificate"),
        "{err}"
    );
    let err = referrers("vuln/report", &test_cert).await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "failed to verify attestation vuln/report, digest {unsigned_report}: no signature is associated with"
        )),
        "{err}"
    );
    assert_eq!(
        referrers("none/such", &test_cert).await,
        Err("attestation verification failed, no attestations found for type: none/such".into())
    );
    let cosign = Trust::Keys(String::new());
    assert_eq!(
        registry
            .verify_image_referrers(
                &format!("{host}/notary/signed:1"),
                "sbom/cyclone-dx",
                &cosign
            )
            .await,
        Err("cosign verifier only supports intoto referrers as attestations".into())
    );

    // Kept: the same verification again makes no registry call and no
    // check.
    let (fetches, checks) = (registry.fetches(), registry.checks());
    assert!(verify("signed", &test_cert).await.is_ok());
    assert_eq!((registry.fetches(), registry.checks()), (fetches, checks));
}
