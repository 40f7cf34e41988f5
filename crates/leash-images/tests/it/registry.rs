//! `Registry::image_data` against a real registry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_images::{ImageError, Registry, RegistrySettings};

use leash_images::testing::LocalRegistry;

fn settings(timeout: Duration) -> RegistrySettings {
    RegistrySettings {
        timeout,
        ..RegistrySettings::default()
    }
}

/// A pushed image's data is the registry's: digest, manifest, config (its
/// labels), in both of Kyverno's shapes; an index resolves to its
/// linux/amd64 image and keeps the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_data_is_what_the_registry_holds() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let amd = reg.push("app:1.0", &[("team", "payments")]).await;
    let arm = reg.push("app:arm", &[("team", "arm")]).await;
    let index = reg
        .push_index(
            "app:multi",
            &[(&arm, "linux", "arm64"), (&amd, "linux", "amd64")],
        )
        .await;
    let registry = Registry::new(settings(Duration::from_secs(10)));
    let image = format!("{}/app:1.0", reg.host);
    let data = registry.image_data(&image).await.unwrap();
    assert_eq!(data.digest, amd.0);
    assert_eq!(data.registry, reg.host);
    assert_eq!(data.repository, "app");
    assert_eq!(data.tag.as_deref(), Some("1.0"));
    assert_eq!(
        data.resolved_image,
        format!("{}/app:1.0@{}", reg.host, amd.0)
    );
    assert_eq!(data.config["config"]["Labels"]["team"], "payments");
    assert_eq!(data.manifest["schemaVersion"], 2);
    assert!(data.index.is_none());
    let cel = data.cel_value();
    assert_eq!(cel["tag"], "1.0");
    assert_eq!(cel["identifier"], "1.0");
    assert_eq!(cel["config"]["config"]["Labels"]["team"], "payments");

    let multi = registry
        .image_data(&format!("{}/app:multi", reg.host))
        .await
        .unwrap();
    assert_eq!(multi.digest, index, "the index's digest");
    assert_eq!(
        multi.config["config"]["Labels"]["team"], "payments",
        "linux/amd64"
    );
    assert_eq!(
        multi.index.as_ref().unwrap()["manifests"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(multi.cel_value()["imageIndex"]["schemaVersion"], 2);

    let by_digest = registry
        .image_data(&format!("{}/app@{}", reg.host, arm.0))
        .await
        .unwrap();
    assert_eq!(by_digest.config["config"]["Labels"]["team"], "arm");
    assert_eq!(by_digest.tag, None);
    assert_eq!(
        by_digest.resolved_image,
        format!("{}/app@{}", reg.host, arm.0)
    );
    assert_eq!(by_digest.cel_value()["identifier"], arm.0);
}

/// The concurrency row: 200 concurrent lookups of one image on a
/// cold client make one fetch; later lookups are served from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_lookups_of_one_image_make_one_fetch() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:1.0", &[]).await;
    let registry = Arc::new(Registry::new(settings(Duration::from_secs(10))));
    let image = format!("{}/app:1.0", reg.host);
    let scope = leash_runtime::Scope::new();
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let registry = registry.clone();
            let image = image.clone();
            scope.spawn_with_output(async move { registry.image_data(&image).await })
        })
        .collect();
    let mut digests = std::collections::BTreeSet::new();
    for t in tasks {
        digests.insert(t.await.unwrap().unwrap().digest.clone());
    }
    scope.shutdown().await.unwrap();
    assert_eq!(digests.len(), 1);
    assert_eq!(registry.fetches(), 1, "one fetch for 200 lookups");
    registry.image_data(&image).await.unwrap();
    assert_eq!(registry.fetches(), 1, "cached");
}

/// An unreachable registry and one that never answers each give an error
/// naming the image and the registry within the timeout; a failure is not
/// kept (the next lookup fetches again); a missing image names the image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_failures_are_bounded_named_and_not_kept() {
    // Nothing listens on a port just released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_host = closed.local_addr().unwrap().to_string();
    drop(closed);
    let registry = Registry::new(settings(Duration::from_secs(2)));
    let image = format!("{closed_host}/app:1.0");
    let err = registry.image_data(&image).await.unwrap_err();
    assert!(
        matches!(&err, ImageError::Registry { registry, .. } if *registry == closed_host),
        "{err}"
    );
    assert!(err.to_string().contains(&image), "{err}");
    registry.image_data(&image).await.unwrap_err();
    assert_eq!(registry.fetches(), 2, "a failure is fetched again");

    // Accepts connections and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_host = silent.local_addr().unwrap().to_string();
    let scope = leash_runtime::Scope::new();
    let token = scope.token().clone();
    scope.spawn_with_output(async move {
        let mut open = Vec::new();
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                Ok((s, _)) = silent.accept() => open.push(s),
            }
        }
    });
    let started = Instant::now();
    let err = registry
        .image_data(&format!("{silent_host}/app:1.0"))
        .await
        .unwrap_err();
    assert!(matches!(err, ImageError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10), "bounded");
    scope.shutdown().await.unwrap();

    if let Some(reg) = LocalRegistry::start() {
        let missing = format!("{}/nothing:here", reg.host);
        let err = registry.image_data(&missing).await.unwrap_err();
        assert!(err.to_string().contains(&missing), "{err}");
    }
}

/// `ImageLookup`, as admission uses it: a first evaluation misses and
/// records the image; one `fetch_missed` fetches it; the next evaluation
/// gets the data, or the registry's error, with no second fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluations_lookup_fetches_what_it_missed_once() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:1.0", &[("vendor", "acme")]).await;
    let registry = Arc::new(Registry::new(settings(Duration::from_secs(5))));
    let good = format!("{}/app:1.0", reg.host);
    let missing = format!("{}/app:none", reg.host);
    let lookup = leash_images::ImageLookup::new(registry.clone());
    for image in [&good, &good, &missing] {
        let err = lookup.get(image).unwrap_err();
        assert!(err.contains("not fetched yet"), "{err}");
    }
    assert!(lookup.fetch_missed().await);
    assert_eq!(registry.fetches(), 2, "each missed image once");
    assert_eq!(
        lookup.get(&good).unwrap()["config"]["config"]["Labels"]["vendor"],
        "acme"
    );
    let err = lookup.get(&missing).unwrap_err();
    assert!(
        err.contains(&missing) && !err.contains("not fetched yet"),
        "{err}"
    );
    assert!(!lookup.fetch_missed().await, "nothing missed");
    assert_eq!(registry.fetches(), 2);
    // A new evaluation's lookup: the good image from the registry's cache.
    let next = leash_images::ImageLookup::new(registry.clone());
    assert!(next.get(&good).is_ok());
    assert!(!next.fetch_missed().await);
}

/// cosign signatures from a real registry: an image signed with a key
/// verifies with that key and not another; an unsigned image has no
/// signatures; the evaluation lookup fetches what `verify` missed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cosign_signatures_verify_with_their_key_only() {
    use leash_images::cosign::Trust;
    use leash_images::testing::{public_key_pem, signing_key};
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("app:signed", &[]).await;
    reg.push("app:unsigned", &[]).await;
    let key = signing_key(7);
    let digest = reg.sign("app:signed", &key).await;
    let registry = Arc::new(Registry::new(settings(Duration::from_secs(5))));
    let signed = format!("{}/app:signed", reg.host);
    let unsigned = format!("{}/app:unsigned", reg.host);
    let sigs = registry.signatures(&signed).await.unwrap();
    assert_eq!(sigs.digest, digest);
    assert_eq!(sigs.signatures.len(), 1);
    assert_eq!(
        leash_images::cosign::verify(&sigs, &Trust::Keys(public_key_pem(&key))),
        Ok(())
    );
    let err = leash_images::cosign::verify(&sigs, &Trust::Keys(public_key_pem(&signing_key(8))))
        .unwrap_err();
    assert!(err.starts_with("no matching signatures"), "{err}");
    let none = registry.signatures(&unsigned).await.unwrap();
    assert!(none.signatures.is_empty());

    let fresh = Arc::new(Registry::new(settings(Duration::from_secs(5))));
    let lookup = leash_images::ImageLookup::new(fresh.clone());
    let pem = Trust::Keys(public_key_pem(&key));
    assert!(
        lookup
            .verify(&signed, &pem)
            .unwrap_err()
            .contains("not fetched yet")
    );
    assert!(
        lookup
            .verify(&unsigned, &pem)
            .unwrap_err()
            .contains("not fetched yet")
    );
    assert!(lookup.fetch_missed().await);
    assert_eq!(lookup.verify(&signed, &pem), Ok(digest.clone()));
    assert_eq!(
        lookup.verify(&unsigned, &pem),
        Err("no signatures found".to_string())
    );
    // A warm review (a new evaluation's lookup): no fetch, no check.
    let (fetches, checks) = (fresh.fetches(), fresh.checks());
    let warm = leash_images::ImageLookup::new(fresh.clone());
    assert_eq!(warm.verify(&signed, &pem), Ok(digest));
    assert!(!warm.fetch_missed().await);
    assert_eq!((fresh.fetches(), fresh.checks()), (fetches, checks));
    assert!(!lookup.fetch_missed().await);
}
