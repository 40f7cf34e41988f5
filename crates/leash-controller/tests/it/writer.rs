//! Report writes through the API: create-or-replace answers with the
//! stored report's identity (not its body), conditional deletes.

use leash_controller::writer;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{client, sandbox};

fn ephemeral(name: &str, results: usize) -> Value {
    let results: Vec<Value> = (0..results)
        .map(|i| json!({"policy": "p", "rule": format!("r{i}"), "result": "pass"}))
        .collect();
    json!({"apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
        "metadata": {"name": name, "namespace": "default",
            "labels": {"audit.kyverno.io/resource.uid": name}},
        "spec": {"owner": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": name},
            "results": results}})
}

fn stored(sb: &leash_sandbox::Sandbox, name: &str) -> Option<Value> {
    sb.store()
        .get(
            "reports.kyverno.io/v1",
            "EphemeralReport",
            Some("default"),
            name,
        )
        .ok()
}

#[tokio::test]
async fn put_answers_the_identity_and_delete_is_conditional() {
    let sb = sandbox(vec![]).await;
    let client = client(&sb);
    let token = CancellationToken::new();
    let created = writer::put(&client, ephemeral("a", 3), &token)
        .await
        .unwrap();
    let first = stored(&sb, "a").unwrap();
    assert_eq!(
        created.identity(),
        json!({
        "apiVersion": "reports.kyverno.io/v1", "kind": "EphemeralReport",
        "metadata": first["metadata"]})
    );
    // It exists: the create's conflict turns into a replace.
    let replaced = writer::put(&client, ephemeral("a", 1), &token)
        .await
        .unwrap();
    let second = stored(&sb, "a").unwrap();
    assert_eq!(second["spec"]["results"].as_array().unwrap().len(), 1);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    assert_eq!(
        replaced.metadata.resource_version.as_deref(),
        second["metadata"]["resourceVersion"].as_str()
    );
    assert_ne!(
        replaced.metadata.resource_version,
        created.metadata.resource_version
    );
    // A delete at an older version does not delete; at the current one it does; a report gone is fine.
    let delete =
        |rv: Option<String>| writer::delete(&client, "EphemeralReport", "default", "a", rv, &token);
    assert!(
        !delete(created.metadata.resource_version.clone())
            .await
            .unwrap()
    );
    assert!(stored(&sb, "a").is_some());
    assert!(
        delete(replaced.metadata.resource_version.clone())
            .await
            .unwrap()
    );
    assert!(stored(&sb, "a").is_none());
    assert!(delete(None).await.unwrap());
    assert!(matches!(
        writer::put(&client, json!({"kind": "Pod"}), &token).await,
        Err(writer::WriteError::NotAReport(_))
    ));
    sb.shutdown().await.unwrap();
}
