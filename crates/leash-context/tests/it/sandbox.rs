//! Sandbox fixtures: namespaces, deployments, a custom resource and its CRD.

use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

pub(crate) fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

pub(crate) fn deployment(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}
            }
        }
    })
}

pub(crate) const WIDGET_CRD: &str = "widgets.example.leash.dev";

pub(crate) fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": WIDGET_CRD},
        "spec": {
            "group": "example.leash.dev",
            "names": {"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

pub(crate) fn widget(namespace: &str, name: &str, size: i64) -> Value {
    json!({
        "apiVersion": "example.leash.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": size}
    })
}

pub(crate) async fn start(objects: Vec<Value>) -> Sandbox {
    Sandbox::start(SandboxConfig {
        objects,
        ..SandboxConfig::default()
    })
    .await
    .unwrap()
}

pub(crate) fn client(sandbox: &Sandbox) -> kube::Client {
    kube::Client::try_from(kube::Config::new(sandbox.url().parse().unwrap())).unwrap()
}
