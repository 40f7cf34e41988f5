//! Every request is bounded by the policy's request timeout: a server that
//! never answers fails the load (naming the request and the bound) instead
//! of hanging it, and a request that times out is retried like a
//! connection error.

use std::time::Duration;

use leash_loader::{
    DEFAULT_REQUEST_TIMEOUT, Error, KindSelection, LoadOptions, Loader, NamespaceSelection,
    RetryPolicy,
};
use leash_sandbox::Faults;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{
    assert_exactly_once, client, crd_name, crds, drain, fast_retry, load_all, sandbox,
};

/// How long a test waits for what must end far sooner (a debug build on
/// two shared cores).
const BOUND: Duration = Duration::from_secs(60);

/// `fast_retry(max_retries)` with each attempt bounded by `timeout`.
fn bounded(max_retries: u32, timeout: Duration) -> RetryPolicy {
    RetryPolicy {
        request_timeout: Some(timeout),
        ..fast_retry(max_retries)
    }
}

/// The loader's default bounds every request: the CLI's `--request-timeout`
/// default, and what `apply --cluster` gets.
#[test]
fn requests_are_bounded_by_default() {
    assert_eq!(DEFAULT_REQUEST_TIMEOUT, Duration::from_secs(30));
    assert_eq!(
        LoadOptions::default().retry.request_timeout,
        Some(DEFAULT_REQUEST_TIMEOUT)
    );
}

/// Issue 38 #9, "a silent server hangs the load for ever": against a server
/// that accepts every connection and never answers, discovery fails after
/// `1 + max_retries` attempts of 200 ms each, with an error that names the
/// request and the bound; it does not wait until the test's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_silent_server_times_out_naming_the_request() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let client = leash_loader::client_from_config(kube::Config::new(url.parse().unwrap())).unwrap();
    let timeout = Duration::from_millis(200);
    let loader = Loader::new(
        client,
        LoadOptions {
            retry: bounded(2, timeout),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let silent = async {
        // Accept every connection and hold it open without answering.
        let mut held = Vec::new();
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            held.push(socket);
        }
    };
    let started = Instant::now();
    let discovered = tokio::select! {
        discovered = tokio::time::timeout(BOUND, loader.discover(&token)) => discovered,
        () = silent => unreachable!(),
    };
    let took = started.elapsed();
    let err = match discovered {
        Err(_) => panic!("discovery still waiting on a silent server after {BOUND:?}"),
        Ok(Ok(_)) => panic!("discovery succeeded against a silent server"),
        Ok(Err(err)) => err,
    };
    match &err {
        Error::TimedOut {
            operation,
            timeout: t,
            attempts: 3,
        } if operation.starts_with("discovery GET /api") && *t == timeout => {}
        other => panic!("expected a timed-out discovery after 3 attempts, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("discovery GET /api") && message.contains("200ms"),
        "{message}"
    );
    assert!(!err.is_configuration());
    // Three attempts of 200 ms and two short backoffs.
    assert!(took >= 3 * timeout, "gave up after {took:?}");
}

/// A kind whose every list request is slower than the bound fails once the
/// retries run out, with an error naming the list and the bound; the load's
/// other work is not held up for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_always_times_out_fails_naming_the_kind() {
    let sb = sandbox(crds(1, 20), Faults::default(), 3).await;
    let timeout = Duration::from_millis(100);
    let loader = Loader::new(
        client(&sb),
        LoadOptions {
            kinds: KindSelection::Names(vec![crd_name(0)]),
            namespaces: NamespaceSelection::All,
            page_size: 10,
            retry: bounded(2, timeout),
            ..LoadOptions::default()
        },
    )
    .unwrap();
    let token = CancellationToken::new();
    let kinds = loader.resolve(&token).await.unwrap();
    // Discovery is done: from now on every request takes 10 s.
    sb.set_faults(Faults {
        latency: Duration::from_secs(10),
        ..Faults::default()
    });
    let report = tokio::time::timeout(BOUND, drain(loader.load(kinds, token)))
        .await
        .expect("the load still waits on a silent list");
    let kind = &report.kinds[0];
    match &kind.error {
        Some(Error::TimedOut {
            operation,
            timeout: t,
            attempts: 3,
        }) if *operation == format!("list {}", crd_name(0)) && *t == timeout => {}
        other => panic!("expected the list to time out after 3 attempts, got {other:?}"),
    }
    assert_eq!(kind.retries, 2);
    assert_eq!(kind.objects, 0);
    sb.shutdown().await.unwrap();
}

/// A timed-out request is a retryable failure: with every request delayed
/// by a seeded 0..=200 ms and a bound of 100 ms, about half the attempts
/// time out and are retried, and the load completes, every object exactly
/// once, the retries counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_requests_are_retried() {
    let sb = sandbox(crds(1, 100), Faults::default(), 11).await;
    let options = LoadOptions {
        kinds: KindSelection::Names(vec![crd_name(0)]),
        namespaces: NamespaceSelection::All,
        page_size: 5,
        // P(one page times out 31 times in a row) ~ 0.5^31.
        retry: bounded(30, Duration::from_millis(100)),
        ..LoadOptions::default()
    };
    sb.set_faults(Faults {
        latency_jitter: Duration::from_millis(200),
        ..Faults::default()
    });
    let (objects, report) = tokio::time::timeout(BOUND, load_all(client(&sb), options))
        .await
        .expect("the load ends");
    let kind = &report.kinds[0];
    assert!(kind.is_complete(), "{:?}", kind.error);
    assert_eq!(assert_exactly_once(&objects), 100);
    assert_eq!(objects.len(), 100);
    // 20 pages (and discovery) at ~50% each: P(no timeout at all) ~ 1e-6.
    assert!(
        report.retries() > 0,
        "no request timed out: {:?}",
        report.kinds
    );
    sb.shutdown().await.unwrap();
}
