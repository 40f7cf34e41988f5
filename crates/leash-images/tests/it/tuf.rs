//! Sigstore's trust root through TUF (`leash_images::tuf`): a real, signed
//! TUF repository on disk (`testing::TufRepo`, tough's editor) serving a
//! test Fulcio's `trusted_root.json`, loaded once for any number of
//! concurrent callers, a failure retried, tampering refused, every load
//! bounded; and keyless trusts without roots verifying with it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_images::cosign::{Attestations, Identity, Keyless, Signatures, Trust};
use leash_images::testing::{Fulcio, LocalRegistry, TufRepo};
use leash_images::tuf::{TrustRoot, TrustRootSource};
use leash_images::{ImageLookup, NO_TRUST_ROOT, Registry, RegistrySettings};

const ISSUER: &str = "https://accounts.example.com";
const ALICE: &str = "alice@example.com";
const HOUR: Duration = Duration::from_secs(3600);

fn trust_root(root: Vec<u8>, mirror: String, timeout: Duration) -> Arc<TrustRoot> {
    Arc::new(TrustRoot::new(TrustRootSource {
        root,
        mirror,
        timeout,
    }))
}

fn of_repo(repo: &TufRepo) -> Arc<TrustRoot> {
    trust_root(repo.root_json(), repo.mirror(), Duration::from_secs(10))
}

fn registry(trust_root: Option<Arc<TrustRoot>>) -> Arc<Registry> {
    Arc::new(Registry::new(RegistrySettings {
        timeout: Duration::from_secs(5),
        trust_root,
        ..RegistrySettings::default()
    }))
}

/// Keyless with Sigstore's trust root (no roots of the policy's own).
fn sigstore(identities: Vec<Identity>) -> Trust {
    Trust::Keyless(Keyless {
        roots: String::new(),
        identities,
    })
}

fn alice() -> Vec<Identity> {
    vec![Identity {
        subject: ALICE.into(),
        issuer: ISSUER.into(),
        ..Identity::default()
    }]
}

/// The seed's defect: verify goroutines racing on `tuf.Initialize()`.
/// 1,000 tasks on a multi-thread runtime, released together on a cold
/// trust root, each load it and verify a keyless signature with it: one
/// initialisation, every verification holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_tuf_init_race() {
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
    let dir = tempfile::tempdir().unwrap();
    let repo = TufRepo::create(dir.path(), &fulcio);
    let trust_root = of_repo(&repo);
    let registry = registry(Some(trust_root.clone()));
    let image = format!("{}/app:1.0", reg.host);
    assert!(trust_root.cached().is_none());
    assert_eq!(trust_root.initialisations(), 0);

    const TASKS: usize = 1000;
    let start = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let (start, trust_root, registry, image) = (
            start.clone(),
            trust_root.clone(),
            registry.clone(),
            image.clone(),
        );
        tasks.spawn(async move {
            start.wait().await;
            let roots = trust_root.get().await?;
            let sigs = registry
                .signatures(&image)
                .await
                .map_err(|e| e.to_string())?;
            let digest = registry.verify(&image, &sigs_trust(), &sigs)?;
            Ok::<_, String>((roots, digest))
        });
    }
    let mut answers = 0;
    while let Some(answer) = tasks.join_next().await {
        let (roots, signed) = answer.unwrap().unwrap();
        assert_eq!(roots.fulcio_pem, fulcio.chain_pem());
        assert_eq!(signed, digest);
        answers += 1;
    }
    assert_eq!(answers, TASKS);
    assert_eq!(trust_root.initialisations(), 1, "initialised once");
    assert!(trust_root.cached().is_some());
}

fn sigs_trust() -> Trust {
    sigstore(alice())
}

/// A failed initialisation is not kept: the next caller initialises
/// again, and once one held no caller initialises any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_initialisation_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let fulcio = Fulcio::new();
    let staged = TufRepo::create(&dir.path().join("staged"), &fulcio);
    let served = dir.path().join("mirror");
    let mirror = leash_images::tuf::file_mirror(&served).unwrap();
    let trust_root = trust_root(staged.root_json(), mirror.clone(), Duration::from_secs(10));

    let err = trust_root.get().await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "Sigstore trust root from {mirror}: loading TUF metadata: "
        )),
        "{err}"
    );
    assert_eq!(trust_root.initialisations(), 1);
    assert!(trust_root.cached().is_none());

    // The mirror appears: the next caller loads it.
    std::fs::rename(staged.dir(), &served).unwrap();
    let roots = trust_root.get().await.unwrap();
    assert_eq!(roots.fulcio_pem, fulcio.chain_pem());
    assert_eq!(trust_root.initialisations(), 2);
    for _ in 0..3 {
        assert_eq!(trust_root.get().await.unwrap(), roots);
    }
    assert_eq!(trust_root.cached(), Some(roots));
    assert_eq!(trust_root.initialisations(), 2, "loaded once held");
}

/// Callers that waited for a failing initialisation get its error; they
/// do not each initialise again in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_a_failure() {
    let (mirror, _server) = silent_server().await;
    let dir = tempfile::tempdir().unwrap();
    let repo = TufRepo::create(dir.path(), &Fulcio::new());
    let trust_root = trust_root(repo.root_json(), mirror.clone(), Duration::from_millis(500));
    let started = Instant::now();
    let answers = futures::future::join_all((0..20).map(|_| trust_root.get())).await;
    for answer in answers {
        let err = answer.unwrap_err();
        assert!(err.contains(&mirror), "{err}");
    }
    assert_eq!(trust_root.initialisations(), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
    // The next caller tries again.
    assert!(trust_root.get().await.is_err());
    assert_eq!(trust_root.initialisations(), 2);
}

/// An evaluation's lookup of a keyless trust without roots misses the
/// trust root (with the signatures), `fetch_missed` loads it once, and the
/// retry verifies; another lookup finds it loaded. A load that failed is
/// the evaluation's answer, not missed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lookup_misses_the_trust_root_then_verifies() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let fulcio = Fulcio::new();
    let alice_id = fulcio.issue(ALICE, ISSUER, HOUR);
    reg.push("app:1.0", &[]).await;
    let digest = reg
        .sign_keyless("app:1.0", &alice_id, &fulcio.chain_pem())
        .await;
    let slsa = "https://slsa.dev/provenance/v0.2";
    reg.attest_keyless(
        "app:1.0",
        &alice_id,
        &fulcio.chain_pem(),
        slsa,
        serde_json::json!({"builder": {"id": "ci"}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let repo = TufRepo::create(dir.path(), &fulcio);
    let trust_root = of_repo(&repo);
    let registry = registry(Some(trust_root.clone()));
    let image = format!("{}/app:1.0", reg.host);

    let lookup = ImageLookup::new(registry.clone());
    let err = lookup.verify(&image, &sigstore(alice())).unwrap_err();
    assert!(err.contains("not fetched yet"), "{err}");
    let err = lookup.attestations(&image, &sigstore(alice())).unwrap_err();
    assert!(err.contains("not fetched yet"), "{err}");
    assert!(lookup.fetch_missed().await);
    assert_eq!(trust_root.initialisations(), 1);
    assert_eq!(lookup.verify(&image, &sigstore(alice())), Ok(digest));
    let statements = lookup.attestations(&image, &sigstore(alice())).unwrap();
    assert_eq!(statements[0]["predicateType"], slsa);
    assert!(!lookup.fetch_missed().await, "nothing missed");

    // Another evaluation: the signatures and the root are kept.
    let lookup = ImageLookup::new(registry.clone());
    assert!(lookup.verify(&image, &sigstore(alice())).is_ok());
    assert!(!lookup.fetch_missed().await);
    assert_eq!(trust_root.initialisations(), 1);

    // Another identity: the root verified the chain, the identity fails.
    let bob = vec![Identity {
        subject: "bob@example.com".into(),
        ..Identity::default()
    }];
    let err = lookup.verify(&image, &sigstore(bob)).unwrap_err();
    assert!(err.contains("none of the expected identities"), "{err}");

    // A trust root that fails to load: the lookup's answer is its error.
    let missing = dir.path().join("missing");
    let broken = trust_root_at(&repo, &missing);
    let registry = self::registry(Some(broken.clone()));
    let lookup = ImageLookup::new(registry);
    assert!(
        lookup
            .verify(&image, &sigstore(alice()))
            .unwrap_err()
            .contains("not fetched yet")
    );
    assert!(lookup.fetch_missed().await);
    let err = lookup.verify(&image, &sigstore(alice())).unwrap_err();
    assert!(
        err.starts_with(&format!("Sigstore trust root from {}: ", broken.mirror())),
        "{err}"
    );
    assert!(!lookup.fetch_missed().await, "the error is the answer");
    assert_eq!(broken.initialisations(), 1);
}

fn trust_root_at(repo: &TufRepo, dir: &std::path::Path) -> Arc<TrustRoot> {
    trust_root(
        repo.root_json(),
        leash_images::tuf::file_mirror(dir).unwrap(),
        Duration::from_secs(10),
    )
}

/// A verification kept for a policy's own roots does not answer for
/// Sigstore's, nor the other way round: the image is signed under one CA,
/// the trust root is another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_roots_and_sigstore_roots_are_separate_trusts() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let signer = Fulcio::new();
    reg.push("app:1.0", &[]).await;
    reg.sign_keyless(
        "app:1.0",
        &signer.issue(ALICE, ISSUER, HOUR),
        &signer.chain_pem(),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let repo = TufRepo::create(dir.path(), &Fulcio::new());
    let registry = registry(Some(of_repo(&repo)));
    registry.load_trust_root().await.unwrap();
    let image = format!("{}/app:1.0", reg.host);
    let sigs = registry.signatures(&image).await.unwrap();
    let own = Trust::Keyless(Keyless {
        roots: signer.root_pem(),
        identities: alice(),
    });
    assert!(registry.verify(&image, &own, &sigs).is_ok());
    let err = registry
        .verify(&image, &sigstore(alice()), &sigs)
        .unwrap_err();
    assert!(
        err.starts_with("no matching signatures: certificate is not trusted: "),
        "{err}"
    );
    // Whitespace only is no roots either.
    let blank = Trust::Keyless(Keyless {
        roots: " \n".into(),
        identities: alice(),
    });
    assert!(registry.verify(&image, &blank, &sigs).is_err());
}

/// Tampered metadata or targets, or a root.json that is not the
/// repository's, are refused, naming the mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampering_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fulcio = Fulcio::new();

    // The target's bytes changed after signing.
    let repo = TufRepo::create(&dir.path().join("target"), &fulcio);
    let target = std::fs::read_dir(repo.dir().join("targets"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with("trusted_root.json"))
        .unwrap();
    let forged = Fulcio::new().trusted_root_json();
    std::fs::write(&target, &forged).unwrap();
    let err = of_repo(&repo).get().await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "Sigstore trust root from {}: reading target trusted_root.json: ",
            repo.mirror()
        )),
        "{err}"
    );

    // Signed metadata changed after signing.
    let repo = TufRepo::create(&dir.path().join("metadata"), &fulcio);
    let timestamp = repo.dir().join("timestamp.json");
    let text = std::fs::read_to_string(&timestamp).unwrap();
    std::fs::write(&timestamp, text.replace("2100-01-01", "2101-01-01")).unwrap();
    let err = of_repo(&repo).get().await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "Sigstore trust root from {}: loading TUF metadata: ",
            repo.mirror()
        )),
        "{err}"
    );

    // Another repository's root.json.
    let repo = TufRepo::create(&dir.path().join("ours"), &fulcio);
    let theirs = TufRepo::create(&dir.path().join("theirs"), &fulcio);
    let trust_root = trust_root(theirs.root_json(), repo.mirror(), Duration::from_secs(10));
    let err = trust_root.get().await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "Sigstore trust root from {}: loading TUF metadata: ",
            repo.mirror()
        )),
        "{err}"
    );

    // Not a URL tough can read.
    let trust_root = trust_root_of("ftp://mirror.example/", &repo);
    let err = trust_root.get().await.unwrap_err();
    assert_eq!(
        err,
        "Sigstore trust root from ftp://mirror.example/: unsupported mirror URL scheme \"ftp\" (file, http or https)"
    );
}

fn trust_root_of(mirror: &str, repo: &TufRepo) -> Arc<TrustRoot> {
    trust_root(repo.root_json(), mirror.into(), Duration::from_secs(10))
}

/// Without a trust root configured, a keyless trust without roots fails
/// saying how to configure one; configured but not loaded, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyless_without_roots_needs_a_trust_root() {
    let sigs = Signatures {
        digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000".into(),
        signatures: vec![],
    };
    let image = "127.0.0.1:1/app:1.0";
    let unconfigured = registry(None);
    assert_eq!(
        unconfigured.verify(image, &sigstore(alice()), &sigs),
        Err(NO_TRUST_ROOT.to_string())
    );
    assert_eq!(
        NO_TRUST_ROOT,
        "keyless: no roots in the policy and no Sigstore trust root configured (leash serve --tuf-root FILE --tuf-mirror URL)"
    );
    assert_eq!(
        unconfigured.verify_attestations(
            image,
            &sigstore(vec![]),
            &Attestations {
                digest: sigs.digest.clone(),
                envelopes: vec![],
            }
        ),
        Err(NO_TRUST_ROOT.to_string())
    );
    assert_eq!(unconfigured.load_trust_root().await, Ok(()));
    // A lookup does not miss what nothing can fetch.
    let lookup = ImageLookup::new(unconfigured.clone());
    assert!(lookup.verify(image, &sigstore(alice())).is_err());
    assert!(lookup.fetch_missed().await, "the signatures were missed");
    // The registry's error (nothing listens there), then nothing missed.
    let err = lookup.verify(image, &sigstore(alice())).unwrap_err();
    assert!(err.contains("127.0.0.1:1"), "{err}");
    assert!(!lookup.fetch_missed().await);

    let dir = tempfile::tempdir().unwrap();
    let repo = TufRepo::create(dir.path(), &Fulcio::new());
    let trust_root = of_repo(&repo);
    let configured = registry(Some(trust_root.clone()));
    let err = configured
        .verify(image, &sigstore(alice()), &sigs)
        .unwrap_err();
    assert_eq!(
        err,
        format!(
            "keyless: no roots in the policy and Sigstore's trust root (from {}) is not loaded yet",
            repo.mirror()
        )
    );
    assert_eq!(configured.checks(), 0, "no check ran");
    // Keys and keyless trusts with roots do not need it.
    let keys = Trust::Keys("not a key".into());
    assert!(
        !configured
            .verify(image, &keys, &sigs)
            .unwrap_err()
            .contains("trust root")
    );
    assert_eq!(trust_root.initialisations(), 0);
    configured.load_trust_root().await.unwrap();
    assert_eq!(trust_root.initialisations(), 1);
    assert_eq!(
        configured.verify(image, &sigstore(alice()), &sigs),
        Err("no signatures found".to_string())
    );
}

/// A listener that accepts connections and never answers: its URL, and
/// the scope of the task holding them (cancelled when dropped).
async fn silent_server() -> (String, leash_runtime::Scope) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let scope = leash_runtime::Scope::new();
    let token = scope.token().clone();
    drop(scope.spawn_with_output(async move {
        leash_runtime::cancellable(&token, async {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
            }
        })
        .await
    }));
    (url, scope)
}

/// A mirror that accepts and never answers: the load fails within its
/// timeout, naming the mirror.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_mirror_is_bounded() {
    let (mirror, _server) = silent_server().await;
    let dir = tempfile::tempdir().unwrap();
    let repo = TufRepo::create(dir.path(), &Fulcio::new());
    let trust_root = trust_root(repo.root_json(), mirror.clone(), Duration::from_secs(2));
    let started = Instant::now();
    let err = trust_root.get().await.unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(
        err.starts_with(&format!("Sigstore trust root from {mirror}: ")),
        "{err}"
    );
    assert_eq!(trust_root.initialisations(), 1);
}

/// The repository served over HTTP (tuf.rs's reqwest transport): loaded
/// and verified as from disk; a missing `2.root.json` (404) is TUF's "no
/// newer root", not a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_mirror_serves_the_trust_root() {
    let dir = tempfile::tempdir().unwrap();
    let fulcio = Fulcio::new();
    let repo = TufRepo::create(dir.path(), &fulcio);
    let (url, _server) = repo.serve().await;
    for mirror in [url.clone(), format!("{url}/")] {
        let trust_root = trust_root(repo.root_json(), mirror, Duration::from_secs(10));
        let roots = trust_root.get().await.unwrap();
        assert_eq!(roots.fulcio_pem, fulcio.chain_pem());
    }
    // A path under which nothing is served.
    let trust_root = trust_root(
        repo.root_json(),
        format!("{url}/nothing"),
        Duration::from_secs(10),
    );
    let err = trust_root.get().await.unwrap_err();
    assert!(
        err.starts_with(&format!(
            "Sigstore trust root from {url}/nothing: loading TUF metadata: "
        )),
        "{err}"
    );
}
