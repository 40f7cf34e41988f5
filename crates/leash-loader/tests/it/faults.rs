//! Faulty servers: 500s, 429s, connection resets and truncated pages are
//! retried; every object still arrives exactly once; what is not retried
//! fails loudly.

use std::time::Duration;

use leash_loader::{Error, KindSelection, LoadOptions, Loader, NamespaceSelection};
use leash_sandbox::{Faults, Sandbox, SandboxConfig};
use tokio_util::sync::CancellationToken;

use crate::support::{
    assert_exactly_once, client, crd_name, crds, drain, fast_retry, load_all, sandbox,
};

/// Seed 001, "partial pages thrown away on error, no retry": with 20% 500s,
/// 10% 429s and 5% connection resets mid-body, 20 seeded runs each load
/// every object exactly once (retries are counted, so the faults did hit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_partial_pages_discarded() {
    let faults = Faults {
        fail_rate: 0.20,
        throttle_rate: 0.10,
        retry_after_secs: 1, // the loader's cap (5 ms here) keeps the test fast
        reset_rate: 0.05,
        ..Faults::default()
    };
    let mut total_retries = 0;
    for seed in 0..20 {
        // P(a page fails 13 times in a row) < 0.35^13 ~ 1e-6.
        let (sb, objects, report) = load_complete(&faults, seed, 3, 40, 7).await;
        assert_eq!(assert_exactly_once(&objects), 120, "seed {seed}");
        assert_eq!(objects.len(), 120, "seed {seed}");
        assert!(
            report.kinds.iter().all(|k| k.objects == 40 && k.pages == 6),
            "seed {seed}: {:?}",
            report.kinds
        );
        total_retries += report.retries();
        sb.shutdown().await.unwrap();
    }
    // ~18 pages x 20 runs at a 35% fault rate: far more than 20 retries.
    assert!(
        total_retries > 20,
        "faults were not injected? {total_retries} retries"
    );
}

/// `kinds` custom kinds of `per_kind` objects in a sandbox with `faults`
/// (seeded with `seed`), loaded in pages of `page_size` with one request in
/// flight per kind and 12 retries per request; the load must complete.
async fn load_complete(
    faults: &Faults,
    seed: u64,
    kinds: usize,
    per_kind: usize,
    page_size: u32,
) -> (
    Sandbox,
    Vec<leash_loader::LoadedObject>,
    leash_loader::LoadReport,
) {
    let sb = sandbox(crds(kinds, per_kind), faults.clone(), seed).await;
    let options = LoadOptions {
        kinds: KindSelection::Names((0..kinds).map(crd_name).collect()),
        namespaces: NamespaceSelection::All,
        page_size,
        concurrency: kinds,
        retry: fast_retry(12),
        ..LoadOptions::default()
    };
    let (objects, report) = load_all(client(&sb), options).await;
    assert!(
        report.is_complete(),
        "seed {seed}: {:?}",
        report.failed().collect::<Vec<_>>()
    );
    (sb, objects, report)
}

/// A page that arrives whole but whose items do not parse (its body cut in
/// half and ended cleanly, as a broken proxy may send it) is fetched again
/// with the same continue token: every object arrives exactly once and in
/// the server's order, though up to two pages of a kind are parsed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_whose_items_do_not_parse_are_fetched_again_and_kept_in_order() {
    let faults = Faults {
        truncate_rate: 0.3,
        ..Faults::default()
    };
    let mut total_retries = 0;
    for seed in 0..10 {
        // P(a page is cut 13 times in a row) = 0.3^13 ~ 2e-7.
        let (sb, objects, report) = load_complete(&faults, seed, 2, 60, 5).await;
        assert_eq!(assert_exactly_once(&objects), 120, "seed {seed}");
        for kind in 0..2 {
            let plural = crd_name(kind);
            let order: Vec<(String, String)> = objects
                .iter()
                .filter(|o| format!("{}.{}", o.kind().plural, o.kind().group) == plural)
                .map(|o| (o.namespace().unwrap_or("").to_owned(), o.name().to_owned()))
                .collect();
            assert_eq!(order.len(), 60, "seed {seed}, kind {plural}");
            assert!(
                order.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}, kind {plural}: objects out of the server's order: {order:?}"
            );
        }
        total_retries += report.retries();
        sb.shutdown().await.unwrap();
    }
    // 13 pages x 2 kinds x 10 runs at 30%: far more than 10 retries.
    assert!(
        total_retries > 10,
        "no page was cut? {total_retries} retries"
    );
}

/// A server whose pages never parse makes the kind fail as a malformed
/// response after 1 + retries attempts, naming the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_that_never_parse_fail_as_malformed() {
    let sb = sandbox(crds(1, 30), Faults::default(), 5).await;
    let loader = Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names(vec![crd_name(0)]),
            namespaces: NamespaceSelection::All,
            page_size: 10,
            retry: fast_retry(3),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    sb.set_faults(Faults {
        truncate_rate: 1.0,
        ..Faults::default()
    });
    let report = drain(loader.load(kinds, token)).await;
    let kind = &report.kinds[0];
    match &kind.error {
        Some(Error::MalformedResponse {
            operation,
            attempts: 4,
            ..
        }) => assert!(operation.starts_with("list "), "{operation}"),
        other => panic!("expected a malformed response after 4 attempts, got {other:?}"),
    }
    assert!(!report.is_complete());
    sb.shutdown().await.unwrap();
}

/// Retries are bounded: a server that always fails makes the kind fail
/// with the last status after 1 + retries attempts, not hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_run_out_and_fail_loudly() {
    let sb = sandbox(crds(1, 3), Faults::default(), 3).await;
    let loader = Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names(vec![crd_name(0)]),
            namespaces: NamespaceSelection::All,
            retry: fast_retry(3),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    sb.set_faults(Faults {
        fail_rate: 1.0,
        ..Faults::default()
    });
    let report = drain(loader.load(kinds, token)).await;
    let kind = &report.kinds[0];
    assert_eq!(kind.retries, 3);
    match &kind.error {
        Some(Error::Status {
            code: 500,
            attempts: 4,
            ..
        }) => {}
        other => panic!("expected a 500 after 4 attempts, got {other:?}"),
    }
    assert!(!report.is_complete());
    sb.shutdown().await.unwrap();
}

/// 401 (wrong or missing token) is a configuration error, never retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_is_a_configuration_error() {
    let sb = Sandbox::start(SandboxConfig {
        token: Some("right".into()),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let mut config = kube::Config::new(sb.url().parse().unwrap());
    config.auth_info.token = Some("wrong".to_owned().into());
    let client = leash_loader::client_from_config(config).unwrap();
    let loader = Loader::new(
        client,
        LoadOptions {
            kinds: KindSelection::Names(vec!["pods".into()]),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let started = std::time::Instant::now();
    let err = loader.resolve(&CancellationToken::new()).await.unwrap_err();
    assert!(
        matches!(err, Error::Unauthorized { code: 401, .. }),
        "{err}"
    );
    assert!(err.is_configuration());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "401 was retried"
    );
    sb.shutdown().await.unwrap();
}

/// A throttled kind waits what Retry-After says (capped), then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let sb = sandbox(crds(1, 2), Faults::default(), 4).await;
    let mut retry = fast_retry(2);
    retry.max_retry_after = Duration::from_millis(300);
    let loader = Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names(vec![crd_name(0)]),
            namespaces: NamespaceSelection::All,
            retry,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    sb.set_faults(Faults {
        throttle_rate: 1.0,
        retry_after_secs: 1,
        ..Faults::default()
    });
    let started = std::time::Instant::now();
    let report = drain(loader.load(kinds, token)).await;
    // 1 + 2 attempts, two waits of min(1 s, 300 ms) each.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(600),
        "did not wait for Retry-After: {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "Retry-After not capped: {took:?}"
    );
    assert!(
        matches!(report.kinds[0].error, Some(Error::Status { code: 429, .. })),
        "{:?}",
        report.kinds[0].error
    );
    sb.shutdown().await.unwrap();
}

/// The load tolerates faulty discovery too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_is_retried() {
    let faults = Faults {
        fail_rate: 0.3,
        reset_rate: 0.1,
        fail_discovery: true,
        ..Faults::default()
    };
    let sb = sandbox(crds(2, 4), faults, 5).await;
    let (objects, report) = load_all(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names(vec![crd_name(0), crd_name(1)]),
            namespaces: NamespaceSelection::All,
            retry: fast_retry(12),
            ..LoadOptions::default()
        },
    )
    .await;
    assert!(report.is_complete());
    assert_eq!(assert_exactly_once(&objects), 8);
    sb.shutdown().await.unwrap();
}

/// Builds each item whole and marks it, so a value is told from its text.
struct Marked;

impl leash_loader::ItemParser for Marked {
    fn parse(
        &self,
        de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
    ) -> serde_json::Result<serde_json::Value> {
        let mut v: serde_json::Value = serde::Deserialize::deserialize(de)?;
        v["marked"] = true.into();
        Ok(v)
    }
}

/// A load with an item parser, on a server that cuts pages short: the cut
/// pages are fetched again and parsed with the parser too, every object
/// arrives exactly once, and each carries the parser's value, which is its
/// text's value with the kind and apiVersion the list items lack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parsed_load_builds_every_object_once() {
    let faults = Faults {
        truncate_rate: 0.3,
        ..Faults::default()
    };
    let sb = sandbox(crds(2, 40), faults, 3).await;
    let options = LoadOptions {
        kinds: KindSelection::Names((0..2).map(crd_name).collect()),
        namespaces: NamespaceSelection::All,
        page_size: 5,
        concurrency: 2,
        retry: fast_retry(16),
        ..LoadOptions::default()
    };
    let loader = Loader::new(client(&sb), options).expect("valid options");
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.expect("resolves");
    let load = loader.load_parsed(kinds, token, std::sync::Arc::new(Marked));
    let mut stream = load.objects;
    let collect = async {
        let mut all = Vec::new();
        while let Some(object) = futures::StreamExt::next(&mut stream).await {
            all.push(object);
        }
        all
    };
    let (report, objects) = tokio::join!(load.report, collect);
    assert!(
        report.is_complete(),
        "{:?}",
        report.failed().collect::<Vec<_>>()
    );
    assert!(report.retries() > 0, "no page was cut");
    assert_eq!(assert_exactly_once(&objects), 80);
    for o in &objects {
        let mut text = o.to_value().expect("the text is JSON");
        let parsed = o.parsed().expect("every object was parsed");
        assert_eq!(parsed["marked"], true);
        assert_eq!(parsed["kind"], o.kind().kind.as_str());
        assert_eq!(parsed["apiVersion"], o.kind().api_version());
        assert_eq!(parsed["metadata"]["name"], o.name());
        text["marked"] = true.into();
        text["kind"] = parsed["kind"].clone();
        text["apiVersion"] = parsed["apiVersion"].clone();
        assert_eq!(&text, parsed);
    }
    sb.shutdown().await.unwrap();
}
