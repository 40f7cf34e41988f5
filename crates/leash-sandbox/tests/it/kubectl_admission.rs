//! kubectl against a sandbox with admission webhooks: applying webhook
//! configurations and RBAC objects, listing them, and what kubectl prints for a
//! denial and for warnings (the text a real cluster makes it print).

use serde_json::{Value, json};

use crate::common::start;
use crate::kubectl::{Kubectl, block};
use crate::webhook_server::{Answer, WebhookServer};

/// Denies pods labelled `deny=yes`; warns about pods labelled `warn=yes`.
fn decide(request: &Value) -> Answer {
    let labels = &request["object"]["metadata"]["labels"];
    if labels["deny"] == "yes" {
        return Answer::deny(403, "pods labelled deny=yes are not allowed");
    }
    let warnings = if labels["warn"] == "yes" {
        json!(["pods labelled warn=yes are frowned upon"])
    } else {
        json!([])
    };
    Answer::Review {
        response: json!({"allowed": true, "warnings": warnings}),
        delay: std::time::Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_prints_webhook_denials_and_warnings_as_for_a_real_cluster() {
    let server = WebhookServer::start(decide).await;
    let sandbox = start(vec![]).await;
    let Some(kubectl) = Kubectl::find(&sandbox.url()) else {
        return;
    };
    let manifest = kubectl.home.path().join("admission.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: pod-policy
webhooks:
- name: deny.leash.dev
  clientConfig:
    url: {url}
    caBundle: {ca}
  rules:
  - operations: [CREATE]
    apiGroups: ['']
    apiVersions: [v1]
    resources: [pods]
  sideEffects: None
  admissionReviewVersions: [v1]
  timeoutSeconds: 5
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: pod-reader
rules:
- apiGroups: ['']
  resources: [pods]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: read-pods
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: pod-reader
subjects:
- kind: User
  name: jane
  apiGroup: rbac.authorization.k8s.io
",
            url = server.url("/validate"),
            ca = server.ca_bundle
        ),
    )
    .unwrap();
    let applied = block(|| kubectl.ok(&["apply", "-f", manifest.to_str().unwrap()]));
    assert!(
        applied.contains(
            "validatingwebhookconfiguration.admissionregistration.k8s.io/pod-policy created"
        ) && applied.contains("clusterrole.rbac.authorization.k8s.io/pod-reader created"),
        "{applied}"
    );
    assert!(
        server.requests().is_empty(),
        "configurations are not admitted by webhooks"
    );

    let roles = block(|| kubectl.ok(&["get", "clusterroles"]));
    let header = roles.lines().next().unwrap_or("");
    assert!(
        header.starts_with("NAME") && header.contains("CREATED AT"),
        "{roles}"
    );
    assert!(
        roles.lines().any(|l| l.starts_with("pod-reader ")),
        "{roles}"
    );
    let bindings = block(|| kubectl.ok(&["get", "clusterrolebindings", "-o", "wide"]));
    assert!(
        bindings.lines().any(|l| l.starts_with("read-pods ")
            && l.contains("ClusterRole/pod-reader")
            && l.contains("jane")),
        "{bindings}"
    );
    let configs = block(|| kubectl.ok(&["get", "validatingwebhookconfigurations"]));
    let mut lines = configs.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(header, ["NAME", "WEBHOOKS", "AGE"], "{configs}");
    let row: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(&row[..2], ["pod-policy", "1"], "{configs}");

    // A denial: exit 1 and exactly the line a real cluster makes kubectl print.
    let denied = block(|| kubectl.run(&["run", "bad", "--image=nginx", "--labels=deny=yes"]));
    assert!(!denied.status.success());
    assert_eq!(
        String::from_utf8_lossy(&denied.stderr),
        "Error from server: admission webhook \"deny.leash.dev\" denied the request: pods labelled deny=yes are not allowed\n"
    );
    assert!(
        sandbox
            .store()
            .get("v1", "Pod", Some("default"), "bad")
            .is_err()
    );

    // Warnings are printed, the pod is created.
    let warned = block(|| kubectl.run(&["run", "warned", "--image=nginx", "--labels=warn=yes"]));
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(warned.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: pods labelled warn=yes are frowned upon"),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&warned.stdout).contains("pod/warned created"));
    assert_eq!(server.requests().len(), 2);
    sandbox.shutdown().await.unwrap();
}
