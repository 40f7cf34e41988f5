//! The aggregate controller's reading of ephemeral reports: their watch
//! reads only metadata; a body this process wrote is taken from the index
//! when the version the watch saw is the one written, and read from the API
//! server otherwise (another process wrote it, or it was replaced since).

use std::sync::Arc;

use leash_controller::cache::Cache;
use leash_controller::writer;
use leash_controller::{AggregateSettings, Aggregator, Breaker, Metrics, PolicySet, ReportIndex};
use leash_sandbox::{ApiRequest, Sandbox};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{HANG_BOUND, client, eventually, sandbox, within};

fn ephemeral(ns: &str, uid: &str, rule: &str) -> Value {
    json!({"apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
        "metadata": {"name": uid, "namespace": ns, "labels": {
            "audit.kyverno.io/resource.uid": uid,
            "audit.kyverno.io/source": "background-scan"}},
        "spec": {"owner": {"apiVersion": "v1", "kind": "Pod", "name": format!("pod-{uid}"), "uid": uid},
            "results": [{"policy": "p", "rule": rule, "result": "fail", "source": "kyverno",
                "timestamp": {"seconds": 1, "nanos": 0}}]}})
}

fn report_rules(sb: &Sandbox, ns: &str, uid: &str) -> Option<Vec<String>> {
    let rep = sb
        .store()
        .get("wgpolicyk8s.io/v1alpha2", "PolicyReport", Some(ns), uid)
        .ok()?;
    Some(
        rep["results"]
            .as_array()?
            .iter()
            .map(|r| r["rule"].as_str().unwrap_or("").to_string())
            .collect(),
    )
}

fn ephemeral_left(sb: &Sandbox, ns: &str, uid: &str) -> bool {
    sb.store()
        .get("reports.kyverno.io/v1", "EphemeralReport", Some(ns), uid)
        .is_ok()
}

fn gets_ephemeral_in(sb: &Sandbox, ns: &str) -> bool {
    sb.requests().iter().any(|r| {
        matches!(r, ApiRequest::Resource { verb, resource, namespace, .. }
            if verb == "get" && resource == "ephemeralreports" && namespace == ns)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_bodies_come_from_the_writer_or_the_api_server_never_stale() {
    let sb = sandbox(
        ["own", "stale", "other"]
            .iter()
            .map(|ns| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .collect(),
    )
    .await;
    let client = client(&sb);
    let token = CancellationToken::new();
    let index = Arc::new(ReportIndex::new());
    let metrics = Arc::new(Metrics::unregistered());

    // "own": written by this process, handed to the index.
    let (w, body) = writer::put_keeping_body(&client, ephemeral("own", "u1", "mine"), &token)
        .await
        .unwrap();
    index.wrote(&w, body);
    // "stale": handed to the index, then replaced by someone else.
    let (w, body) = writer::put_keeping_body(&client, ephemeral("stale", "u2", "old"), &token)
        .await
        .unwrap();
    index.wrote(&w, body);
    let mut newer = ephemeral("stale", "u2", "new");
    newer["metadata"]["resourceVersion"] = json!(w.metadata.resource_version);
    writer::put(&client, newer, &token).await.unwrap();
    // "other": written by another process only.
    writer::put(&client, ephemeral("other", "u3", "theirs"), &token)
        .await
        .unwrap();
    sb.clear_requests();

    let (_tx, policies) = tokio::sync::watch::channel(Arc::new(PolicySet::default()));
    let aggregator = Aggregator::new(
        client.clone(),
        policies,
        Arc::new(Cache::new()),
        index.clone(),
        Arc::new(Breaker::new(100, metrics.clone())),
        metrics,
        AggregateSettings::default(),
    );
    let run = aggregator.run(token.clone());
    let check = async {
        eventually("every resource has its report", HANG_BOUND, || {
            report_rules(&sb, "own", "u1").is_some()
                && report_rules(&sb, "stale", "u2").is_some()
                && report_rules(&sb, "other", "u3").is_some()
        })
        .await;
        eventually("every ephemeral report is deleted", HANG_BOUND, || {
            !ephemeral_left(&sb, "own", "u1")
                && !ephemeral_left(&sb, "stale", "u2")
                && !ephemeral_left(&sb, "other", "u3")
        })
        .await;
        // The aggregator forgets a body once its report is gone: after
        // the delete the sandbox has already applied.
        eventually("every written body is forgotten", HANG_BOUND, || {
            index.written_bodies() == 0
        })
        .await;
        token.cancel();
    };
    let (result, ()) = within("aggregate", HANG_BOUND, async { tokio::join!(run, check) }).await;
    result.unwrap();

    assert_eq!(report_rules(&sb, "own", "u1").unwrap(), ["mine"]);
    assert_eq!(
        report_rules(&sb, "stale", "u2").unwrap(),
        ["new"],
        "the replaced report's body was read, not the one written before"
    );
    assert_eq!(report_rules(&sb, "other", "u3").unwrap(), ["theirs"]);
    assert!(
        !gets_ephemeral_in(&sb, "own"),
        "a body this process wrote was read back"
    );
    assert!(gets_ephemeral_in(&sb, "stale"));
    assert!(gets_ephemeral_in(&sb, "other"));
    assert_eq!(
        index.written_bodies(),
        0,
        "a written body outlived its report"
    );
    sb.shutdown().await.unwrap();
}
