//! Fault injection: latency, 500s, 429s with Retry-After, connection resets,
//! truncated bodies,
//! discovery exemptions, run-time changes and seeded reproducibility.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use leash_sandbox::{Faults, Sandbox, SandboxConfig};

use crate::common::{client, get, raw, start};

const LIST: &str = "/api/v1/namespaces";

#[tokio::test]
async fn throttling_is_429_with_retry_after_and_plain_text() {
    let sb = start(vec![]).await;
    sb.set_faults(Faults {
        throttle_rate: 1.0,
        retry_after_secs: 3,
        ..Faults::default()
    });
    let r = get(sb.addr(), LIST).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("3"));
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    assert!(
        serde_json::from_slice::<serde_json::Value>(&r.body).is_err(),
        "plain text, as APF sends"
    );
    // Discovery and /version are exempt unless fail_discovery.
    for path in ["/version", "/api", "/apis", "/api/v1", "/apis/apps/v1"] {
        assert_eq!(get(sb.addr(), path).await.status, 200, "{path}");
    }
    sb.set_faults(Faults {
        throttle_rate: 1.0,
        fail_discovery: true,
        ..Faults::default()
    });
    assert_eq!(get(sb.addr(), "/version").await.status, 429);
    sb.set_faults(Faults::default());
    assert_eq!(
        get(sb.addr(), LIST).await.status,
        200,
        "faults change at run time"
    );
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn failures_are_500_statuses() {
    let sb = start(vec![]).await;
    sb.set_faults(Faults {
        fail_rate: 1.0,
        ..Faults::default()
    });
    let r = get(sb.addr(), LIST).await;
    r.assert_status(500, "InternalError");
    assert_eq!(get(sb.addr(), "/api").await.status, 200);
    // Writes fail without effect.
    let before = sb.store().object_count();
    let body = br#"{"metadata":{"name":"x"}}"#;
    let r = raw(
        sb.addr(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        &[("Content-Type", "application/json")],
        body,
    )
    .await;
    r.assert_status(500, "InternalError");
    assert_eq!(sb.store().object_count(), before);
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn resets_drop_the_connection_mid_response() {
    let sb = start(vec![]).await;
    sb.set_faults(Faults {
        reset_rate: 1.0,
        ..Faults::default()
    });
    let r = get(sb.addr(), LIST).await;
    assert!(r.truncated, "the body was cut off: {r:?}");
    assert_eq!(r.status, 200, "the head was sent, then the body broke off");
    assert!(!r.body.is_empty(), "part of the body arrived");
    assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_err());
    let api: Api<ConfigMap> = Api::all(client(&sb));
    assert!(
        api.list(&ListParams::default()).await.is_err(),
        "a client sees a failed request"
    );
    sb.set_faults(Faults::default());
    assert!(api.list(&ListParams::default()).await.is_ok());
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn truncations_end_a_halved_body_cleanly_and_leave_watches_whole() {
    let sb = start(vec![]).await;
    let whole = get(sb.addr(), LIST).await;
    assert_eq!(whole.status, 200);
    sb.set_faults(Faults {
        truncate_rate: 1.0,
        ..Faults::default()
    });
    let r = get(sb.addr(), LIST).await;
    assert_eq!(r.status, 200);
    assert!(!r.truncated, "the response ends where it says: {r:?}");
    assert_eq!(r.body.len(), whole.body.len() / 2);
    assert_eq!(r.header("content-length"), Some(&*r.body.len().to_string()));
    assert!(
        whole.body.starts_with(&r.body),
        "the first half of the body"
    );
    assert!(serde_json::from_slice::<serde_json::Value>(&r.body).is_err());
    // A watch has no length to halve: it streams whole, to its timeout.
    let w = get(sb.addr(), "/api/v1/namespaces?watch=1&timeoutSeconds=1").await;
    assert_eq!(w.status, 200);
    assert!(!w.truncated, "{w:?}");
    let events: Vec<serde_json::Value> = w
        .body
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).expect("each event is whole JSON"))
        .collect();
    assert!(
        !events.is_empty(),
        "the namespaces were sent as ADDED events"
    );
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn latency_applies_to_every_request_including_discovery() {
    let sb = start(vec![]).await;
    sb.set_faults(Faults {
        latency: Duration::from_millis(150),
        latency_jitter: Duration::from_millis(50),
        ..Faults::default()
    });
    for path in ["/version", "/api", LIST] {
        let t = Instant::now();
        assert_eq!(get(sb.addr(), path).await.status, 200);
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{path} took {:?}",
            t.elapsed()
        );
    }
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_same_seed_gives_the_same_faults() {
    let faults = Faults {
        fail_rate: 0.3,
        throttle_rate: 0.3,
        ..Faults::default()
    };
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let sb = Sandbox::start(SandboxConfig {
            faults: faults.clone(),
            seed,
            ..Default::default()
        })
        .await
        .unwrap();
        let mut codes = Vec::new();
        for _ in 0..40 {
            codes.push(get(sb.addr(), LIST).await.status);
        }
        sb.shutdown().await.unwrap();
        runs.push(codes);
    }
    assert_eq!(runs[0], runs[1], "same seed, same sequence");
    assert_ne!(runs[0], runs[2], "another seed, another sequence");
    for code in [200, 429, 500] {
        assert!(runs[0].contains(&code), "{code} drawn in {:?}", runs[0]);
    }
}
