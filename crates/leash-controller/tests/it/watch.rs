//! `watch_into` with `metadata_only`: the store and the changes hold each
//! object's identity (`apiVersion`, `kind`, `metadata`), never its body, on
//! the initial list and on live events alike.

use std::sync::{Arc, Mutex};

use leash_controller::cache::KindStore;
use leash_controller::watch::{Change, WatchScope, watch_into};
use leash_controller::writer::report_resource;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{HANG_BOUND, client, eventually, sandbox};

fn policy_report(name: &str) -> Value {
    json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"app.kubernetes.io/managed-by": "kyverno"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": name}]},
        "scope": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": name},
        "summary": {"pass": 1},
        "results": [{"policy": "p", "rule": "r", "result": "pass"}]})
}

/// Only `apiVersion`, `kind` and `metadata`, of the watched kind, with the
/// object's metadata as stored.
fn assert_identity(v: &Value, sb: &leash_sandbox::Sandbox) {
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata"], "{v}");
    assert_eq!(v["kind"], "PolicyReport");
    assert_eq!(v["apiVersion"], "wgpolicyk8s.io/v1alpha2");
    let name = v["metadata"]["name"].as_str().unwrap();
    let stored = sb
        .store()
        .get(
            "wgpolicyk8s.io/v1alpha2",
            "PolicyReport",
            Some("default"),
            name,
        )
        .unwrap();
    assert_eq!(v["metadata"], stored["metadata"]);
}

#[tokio::test]
async fn metadata_only_watches_keep_the_identity_and_not_the_body() {
    let sb = sandbox(vec![policy_report("listed")]).await;
    let store = Arc::new(KindStore::new(report_resource(), true));
    let changes: Arc<Mutex<Vec<Value>>> = Arc::default();
    let token = CancellationToken::new();
    let scope = WatchScope {
        metadata_only: true,
        ..WatchScope::default()
    };
    let seen = changes.clone();
    let watch = watch_into(
        client(&sb),
        report_resource(),
        scope,
        store.clone(),
        token.clone(),
        move |change| {
            if let Change::Applied(v) | Change::Deleted(v) = change {
                seen.lock().unwrap().push((*v.value().unwrap()).clone());
            }
        },
        |e| panic!("watch error: {e}"),
    );
    let test = async {
        eventually("the first list", HANG_BOUND, || store.is_synced()).await;
        assert_identity(&store.get("default", "listed").unwrap(), &sb);
        sb.store().create(policy_report("live")).unwrap();
        eventually("the live report", HANG_BOUND, || {
            store.contains("default", "live")
        })
        .await;
        assert_identity(&store.get("default", "live").unwrap(), &sb);
        sb.store()
            .delete(
                "wgpolicyk8s.io/v1alpha2",
                "PolicyReport",
                Some("default"),
                "listed",
            )
            .unwrap();
        eventually("the deletion", HANG_BOUND, || {
            !store.contains("default", "listed")
        })
        .await;
        let changes = changes.lock().unwrap().clone();
        let names: Vec<&str> = changes
            .iter()
            .map(|v| v["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["listed", "live", "listed"]);
        for v in &changes {
            let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
            assert_eq!(keys, ["apiVersion", "kind", "metadata"], "{v}");
            assert_eq!(
                v["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                "kyverno"
            );
            assert_eq!(v["metadata"]["ownerReferences"][0]["kind"], "Pod");
        }
        token.cancel();
    };
    tokio::join!(watch, test);
    sb.shutdown().await.unwrap();
}
