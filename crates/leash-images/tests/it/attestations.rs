//! cosign attestations (`cosign attest --key`) against a real registry.

use std::sync::Arc;
use std::time::Duration;

use leash_images::cosign::Trust;
use leash_images::testing::{LocalRegistry, public_key_pem, signing_key};
use leash_images::{ImageLookup, Registry, RegistrySettings};

const SLSA: &str = "https://slsa.dev/provenance/v0.2";
const VULNS: &str = "https://cosign.sigstore.dev/attestation/vuln/v1";

fn registry() -> Arc<Registry> {
    Arc::new(Registry::new(RegistrySettings {
        timeout: Duration::from_secs(5),
        ..RegistrySettings::default()
    }))
}

/// An image attested twice (two predicate types) with one key: that key
/// verifies both statements, another key none; an image without
/// attestations has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attestations_verify_with_their_key_only() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:attested", &[]).await;
    reg.push("app:plain", &[]).await;
    let key = signing_key(1);
    let digest = reg
        .attest(
            "app:attested",
            &key,
            SLSA,
            serde_json::json!({"builder": {"id": "ci"}}),
        )
        .await;
    let again = reg
        .attest(
            "app:attested",
            &key,
            VULNS,
            serde_json::json!({"scanner": {"result": []}}),
        )
        .await;
    assert_eq!(digest, again);
    let registry = registry();
    let attested = format!("{}/app:attested", reg.host);
    let plain = format!("{}/app:plain", reg.host);
    let atts = registry.attestations(&attested).await.unwrap();
    assert_eq!(atts.digest, digest);
    assert_eq!(atts.envelopes.len(), 2, "cosign keeps every attestation");

    let statements = registry
        .verify_attestations(&attested, &Trust::Keys(public_key_pem(&key)), &atts)
        .unwrap();
    let types: Vec<_> = statements
        .iter()
        .map(|s| s["predicateType"].as_str().unwrap())
        .collect();
    assert_eq!(types, [SLSA, VULNS]);
    assert_eq!(statements[0]["predicate"]["builder"]["id"], "ci");
    assert_eq!(
        statements[0]["subject"][0]["name"],
        format!("{}/app", reg.host)
    );
    assert_eq!(
        format!(
            "sha256:{}",
            statements[1]["subject"][0]["digest"]["sha256"]
                .as_str()
                .unwrap()
        ),
        digest
    );
    let err = registry
        .verify_attestations(
            &attested,
            &Trust::Keys(public_key_pem(&signing_key(2))),
            &atts,
        )
        .unwrap_err();
    assert!(err.starts_with("no matching attestations"), "{err}");

    let none = registry.attestations(&plain).await.unwrap();
    assert!(none.envelopes.is_empty());
    assert_eq!(
        registry.verify_attestations(&plain, &Trust::Keys(public_key_pem(&key)), &none),
        Err(leash_images::cosign::NO_ATTESTATIONS.to_string())
    );
    // Signatures and attestations are separate artifacts.
    assert!(
        registry
            .signatures(&attested)
            .await
            .unwrap()
            .signatures
            .is_empty()
    );
}

/// Concurrent lookups of one image's attestations share one fetch (after
/// the image's own), and later ones are served from the cache; a
/// verification that held is kept (a second asks no check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_attestation_lookups_make_one_fetch() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:1.0", &[]).await;
    let key = signing_key(3);
    reg.attest("app:1.0", &key, SLSA, serde_json::json!({}))
        .await;
    let registry = registry();
    let image = format!("{}/app:1.0", reg.host);
    let scope = leash_runtime::Scope::new();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let registry = registry.clone();
            let image = image.clone();
            scope.spawn_with_output(async move { registry.attestations(&image).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().envelopes.len(), 1);
    }
    scope.shutdown().await.unwrap();
    assert_eq!(registry.fetches(), 2, "the image's data, its attestations");
    let atts = registry.attestations(&image).await.unwrap();
    assert_eq!(registry.fetches(), 2, "cached");
    assert!(registry.cached_attestations(&image).is_some());
    let pem = Trust::Keys(public_key_pem(&key));
    for _ in 0..2 {
        assert_eq!(
            registry
                .verify_attestations(&image, &pem, &atts)
                .unwrap()
                .len(),
            1
        );
    }
    assert_eq!(registry.checks(), 1, "a verification that held is kept");
}

/// `ImageLookup::attestations`, as admission uses it: the first
/// evaluation misses, one `fetch_missed` fetches (once per image, with
/// signatures and data of the same evaluation), the next evaluation
/// answers; a warm lookup fetches and checks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluations_lookup_fetches_missed_attestations_once() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:attested", &[("vendor", "acme")]).await;
    reg.push("app:plain", &[]).await;
    let key = signing_key(5);
    let digest = reg
        .attest("app:attested", &key, SLSA, serde_json::json!({"n": 1}))
        .await;
    let sig_digest = reg.sign("app:attested", &key).await;
    assert_eq!(digest, sig_digest);
    let registry = registry();
    let attested = format!("{}/app:attested", reg.host);
    let plain = format!("{}/app:plain", reg.host);
    let pem = Trust::Keys(public_key_pem(&key));
    let lookup = ImageLookup::new(registry.clone());
    for image in [&attested, &attested, &plain] {
        let err = lookup.attestations(image, &pem).unwrap_err();
        assert!(err.contains("not fetched yet"), "{err}");
    }
    assert!(lookup.get(&attested).is_err());
    assert!(lookup.verify(&attested, &pem).is_err());
    assert!(lookup.fetch_missed().await);
    // Two images' data, two images' attestations, one image's signatures.
    assert_eq!(registry.fetches(), 5);
    let statements = lookup.attestations(&attested, &pem).unwrap();
    assert_eq!(statements.len(), 1);
    assert_eq!(statements[0]["predicate"]["n"], 1);
    assert_eq!(
        lookup.attestations(&plain, &pem),
        Err(leash_images::cosign::NO_ATTESTATIONS.to_string())
    );
    let err = lookup
        .attestations(&attested, &Trust::Keys(public_key_pem(&signing_key(6))))
        .unwrap_err();
    assert!(err.starts_with("no matching attestations"), "{err}");
    assert_eq!(lookup.verify(&attested, &pem), Ok(digest));
    assert_eq!(
        lookup.get(&attested).unwrap()["config"]["config"]["Labels"]["vendor"],
        "acme"
    );
    assert!(!lookup.fetch_missed().await, "nothing missed");

    // A warm review (a new evaluation's lookup): no fetch, no check.
    let (fetches, checks) = (registry.fetches(), registry.checks());
    let warm = ImageLookup::new(registry.clone());
    assert_eq!(warm.attestations(&attested, &pem).unwrap(), statements);
    assert!(!warm.fetch_missed().await);
    assert_eq!((registry.fetches(), registry.checks()), (fetches, checks));
}

/// `useCache: false` (`ImageLookup::fresh`): an evaluation that asks for
/// it fetches the image's signatures and attestations again and checks
/// them again, once for the whole evaluation, while one that does not is
/// answered from what was kept; a signature added in the registry is seen
/// by the fresh evaluation at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_evaluations_fetch_and_check_again() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:signed", &[]).await;
    let key = signing_key(7);
    let digest = reg.sign("app:signed", &key).await;
    let registry = registry();
    let image = format!("{}/app:signed", reg.host);
    let pem = Trust::Keys(public_key_pem(&key));
    let first = ImageLookup::new(registry.clone());
    assert!(first.verify(&image, &pem).is_err());
    assert!(first.fetch_missed().await);
    assert_eq!(first.verify(&image, &pem), Ok(digest.clone()));

    // Kept: a new evaluation fetches and checks nothing.
    let (fetches, checks) = (registry.fetches(), registry.checks());
    let warm = ImageLookup::new(registry.clone());
    assert_eq!(warm.verify(&image, &pem), Ok(digest.clone()));
    assert_eq!((registry.fetches(), registry.checks()), (fetches, checks));

    // Fresh: fetched and checked again, once for the evaluation however
    // often it asks.
    let fresh = ImageLookup::new(registry.clone());
    fresh.fresh(&image);
    let err = fresh.verify(&image, &pem).unwrap_err();
    assert!(err.contains("not fetched yet"), "{err}");
    assert!(fresh.fetch_missed().await);
    fresh.fresh(&image);
    assert_eq!(fresh.verify(&image, &pem), Ok(digest.clone()));
    assert_eq!(
        registry.fetches(),
        fetches + 1,
        "the signatures, fetched again"
    );
    assert_eq!(registry.checks(), checks + 1, "checked again");

    // A signature added in the registry since (by another key): the kept
    // signatures do not hold it (for the TTL); a fresh evaluation sees it.
    let later = signing_key(8);
    let by_later = Trust::Keys(public_key_pem(&later));
    reg.sign("app:signed", &later).await;
    let warm = ImageLookup::new(registry.clone());
    let err = warm.verify(&image, &by_later).unwrap_err();
    assert!(err.starts_with("no matching signatures"), "{err}");
    let fresh = ImageLookup::new(registry.clone());
    fresh.fresh(&image);
    assert!(fresh.verify(&image, &by_later).is_err());
    assert!(fresh.fetch_missed().await);
    assert_eq!(fresh.verify(&image, &by_later), Ok(digest));
}
