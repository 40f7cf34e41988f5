//! A minimal OpenAPI v3 surface: the root index and one document per group version,
//! each schema carrying only `x-kubernetes-group-version-kind`. That is what kubectl's
//! query-parameter verifier reads to learn that the server validates fields itself
//! (`fieldValidation=Strict`), so `kubectl create -f` does not need client-side schemas.

use serde_json::{Map, Value, json};

use crate::discovery::gv;
use crate::resources::Registry;

fn path_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`.
pub(crate) fn root(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for t in registry.all() {
        let p = path_of(&t.group, &t.version);
        let url = format!(
            "/openapi/v3/{p}?hash={:016X}",
            hash(&gv(&t.group, &t.version))
        );
        paths.insert(p, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`.
pub(crate) fn group_version(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut schemas = Map::new();
    let mut paths = Map::new();
    for t in registry
        .all()
        .filter(|t| t.group == group && t.version == version)
    {
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        let ns = if t.namespaced {
            "namespaces/{namespace}/"
        } else {
            ""
        };
        let params: Vec<Value> = ["dryRun", "fieldManager", "fieldValidation", "force"]
            .iter()
            .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
            .collect();
        paths.insert(
            format!(
                "/{}/{ns}{}/{{name}}",
                path_of(&t.group, &t.version),
                t.plural
            ),
            json!({"patch": {
                "operationId": format!("patch{}", t.kind),
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }}),
        );
        let prefix = if t.group.is_empty() {
            "io.k8s.api.core".to_string()
        } else {
            t.group.clone()
        };
        schemas.insert(
            format!("{prefix}.{}.{}", t.version, t.kind),
            json!({
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true,
                "x-kubernetes-group-version-kind": [{"group": t.group, "version": t.version, "kind": t.kind}],
            }),
        );
    }
    if schemas.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
