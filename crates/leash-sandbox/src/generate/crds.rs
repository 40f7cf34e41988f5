//! `--crds K:M`: K CustomResourceDefinitions in group `example.leash.dev`
//! and M objects of each.
//!
//! The naming is a team contract (tests and benchmarks rely on it): kind
//! `Widget{i:04}`, plural `widget{i:04}s`, singular `widget{i:04}`, short
//! name `wg{i:04}`, list kind `Widget{i:04}List`, CRD name
//! `widget{i:04}s.example.leash.dev`, version `v1`, namespaced; objects
//! `widget{i:04}-{j:05}` spread round-robin over the namespaces.
//!
//! Every generated CRD is in the category `widgets` (so `kubectl get
//! widgets -A` lists all custom objects), not in `all`.

use serde_json::{Value, json};

use super::Context;
use super::entropy::pick;

/// The API group of every generated custom kind.
pub const GROUP: &str = "example.leash.dev";

/// The kind of custom resource `i`: `Widget0007`.
pub fn kind(i: usize) -> String {
    format!("Widget{i:04}")
}

/// The plural resource name of custom resource `i`: `widget0007s`.
pub fn plural(i: usize) -> String {
    format!("widget{i:04}s")
}

/// The name of object `j` of custom resource `i`: `widget0007-00042`.
pub fn object_name(i: usize, j: usize) -> String {
    format!("widget{i:04}-{j:05}")
}

/// The CustomResourceDefinition of custom resource `i`.
pub(super) fn definition(i: usize) -> Value {
    let name = format!("{}.{GROUP}", plural(i));
    let names = json!({
        "kind": kind(i),
        "listKind": format!("{}List", kind(i)),
        "plural": plural(i),
        "singular": format!("widget{i:04}"),
        "shortNames": [format!("wg{i:04}")],
        "categories": ["widgets"],
    });
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": name,
            "labels": { "app.kubernetes.io/part-of": "leash-sandbox" },
        },
        "spec": {
            "group": GROUP,
            "names": names.clone(),
            "scope": "Namespaced",
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "properties": {
                                "size": { "type": "integer", "minimum": 0 },
                                "color": { "type": "string" },
                                "replicas": { "type": "integer" },
                                "tags": { "type": "array", "items": { "type": "string" } },
                            },
                            "x-kubernetes-preserve-unknown-fields": true,
                        },
                        "status": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                        },
                    },
                } },
                "subresources": { "status": {} },
                "additionalPrinterColumns": [
                    { "name": "Color", "type": "string", "jsonPath": ".spec.color" },
                    { "name": "Size", "type": "integer", "jsonPath": ".spec.size" },
                ],
            }],
            "conversion": { "strategy": "None" },
        },
        "status": {
            "acceptedNames": names,
            "storedVersions": ["v1"],
        },
    })
}

/// Object `j` of custom resource `i`.
pub(super) fn widget(ctx: &Context, i: usize, j: usize) -> Value {
    let mut rng = ctx.rng(&plural(i), j);
    let namespace = ctx.namespace_for(j);
    let name = object_name(i, j);
    let color = pick(&mut rng, &["red", "green", "blue", "amber", "violet"]);
    json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": kind(i),
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "widget.example.leash.dev/color": color, "widget.example.leash.dev/index": j.to_string() },
        },
        "spec": {
            "size": rng.u32(..1000),
            "color": color,
            "replicas": 1 + rng.u32(..5),
            "tags": [pick(&mut rng, &["alpha", "beta", "stable"]), pick(&mut rng, &["eu", "us", "ap"])],
        },
        "status": { "observedGeneration": 1, "ready": rng.bool() },
    })
}
