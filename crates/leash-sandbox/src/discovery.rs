//! `/version` and API discovery, legacy (`/api`, `/api/v1`, `/apis`, `/apis/{g}`,
//! `/apis/{g}/{v}`) and aggregated (`apidiscovery.k8s.io` v2 and v2beta1 on `/api` and `/apis`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceType, VERBS};

/// Which discovery document format the client asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Legacy,
    /// Aggregated, `apidiscovery.k8s.io/{version}`.
    Aggregated(&'static str),
}

impl Format {
    /// Picks the first acceptable media range of an `Accept` header.
    pub(crate) fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return Self::Legacy;
        };
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("");
            let params: BTreeMap<&str, &str> = parts.filter_map(|p| p.split_once('=')).collect();
            let json = matches!(media, "application/json" | "application/*" | "*/*");
            if !json {
                continue;
            }
            match (params.get("g"), params.get("v"), params.get("as")) {
                (Some(&"apidiscovery.k8s.io"), Some(&"v2"), Some(&"APIGroupDiscoveryList")) => {
                    return Self::Aggregated("v2");
                }
                (
                    Some(&"apidiscovery.k8s.io"),
                    Some(&"v2beta1"),
                    Some(&"APIGroupDiscoveryList"),
                ) => {
                    return Self::Aggregated("v2beta1");
                }
                (_, _, None) => return Self::Legacy,
                _ => {}
            }
        }
        Self::Legacy
    }

    /// The response's Content-Type.
    pub(crate) fn content_type(self) -> String {
        match self {
            Self::Legacy => "application/json".into(),
            Self::Aggregated(v) => {
                format!("application/json;g=apidiscovery.k8s.io;v={v};as=APIGroupDiscoveryList")
            }
        }
    }
}

/// The `/version` document.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": "v1.32.0+leash-sandbox",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// Kubernetes version priority: GA before beta before alpha, higher numbers first.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let parse = |s: &str| s.parse::<u32>().ok();
    if let Some(rest) = v.strip_prefix('v') {
        let (major, kind, minor) = if let Some((m, n)) = rest.split_once("beta") {
            (m, 2, n)
        } else if let Some((m, n)) = rest.split_once("alpha") {
            (m, 1, n)
        } else {
            (rest, 3, "0")
        };
        if let (Some(a), Some(b)) = (parse(major), parse(minor)) {
            return (kind, a, b);
        }
    }
    (0, 0, 0)
}

/// A group's versions, most preferred first, each with its resources.
type Versions = Vec<(String, Vec<Arc<ResourceType>>)>;

/// Group name → versions → resources.
fn groups(registry: &Registry) -> BTreeMap<String, Versions> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<Arc<ResourceType>>>> = BTreeMap::new();
    for t in registry.all() {
        out.entry(t.group.clone())
            .or_default()
            .entry(t.version.clone())
            .or_default()
            .push(t.clone());
    }
    out.into_iter()
        .map(|(g, versions)| {
            let mut vs: Vec<_> = versions.into_iter().collect();
            vs.sort_by_key(|(v, _)| std::cmp::Reverse(version_priority(v)));
            (g, vs)
        })
        .collect()
}

pub(crate) fn gv(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Legacy `/api`.
pub(crate) fn api_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

fn group_doc(name: &str, versions: &[(String, Vec<Arc<ResourceType>>)]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|(v, _)| json!({"groupVersion": gv(name, v), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// Legacy `/apis`.
pub(crate) fn api_group_list(registry: &Registry) -> Value {
    let groups: Vec<Value> = groups(registry)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_doc(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// Legacy `/apis/{group}`.
pub(crate) fn api_group(registry: &Registry, group: &str) -> Option<Value> {
    let all = groups(registry);
    let vs = all.get(group).filter(|_| !group.is_empty())?;
    let mut doc = group_doc(group, vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// Legacy `/api/v1` or `/apis/{group}/{version}`.
pub(crate) fn api_resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    if !registry.serves(group, version) {
        return None;
    }
    let mut resources = Vec::new();
    for t in registry
        .all()
        .filter(|t| t.group == group && t.version == version)
    {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": VERBS,
        });
        put_aliases(&mut r, t);
        resources.push(r);
        for sub in &t.subresources {
            let mut r = json!({
                "name": format!("{}/{sub}", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            });
            if sub == "scale" {
                r["group"] = json!("autoscaling");
                r["version"] = json!("v1");
                r["kind"] = json!("Scale");
            }
            resources.push(r);
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv(group, version),
        "resources": resources,
    }))
}

/// Adds `t`'s `shortNames` and `categories` to the discovery entry `r`, when it has any
/// (both discovery formats name them alike).
fn put_aliases(r: &mut Value, t: &ResourceType) {
    if !t.short_names.is_empty() {
        r["shortNames"] = json!(t.short_names);
    }
    if !t.categories.is_empty() {
        r["categories"] = json!(t.categories);
    }
}

fn aggregated_resource(t: &ResourceType) -> Value {
    let kind = json!({"group": t.group, "version": t.version, "kind": t.kind});
    let mut r = json!({
        "resource": t.plural,
        "responseKind": kind,
        "scope": if t.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": t.singular,
        "verbs": VERBS,
    });
    put_aliases(&mut r, t);
    if !t.subresources.is_empty() {
        r["subresources"] = t
            .subresources
            .iter()
            .map(|s| {
                let kind = if s == "scale" {
                    json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
                } else {
                    kind.clone()
                };
                json!({"subresource": s, "responseKind": kind, "verbs": ["get", "patch", "update"]})
            })
            .collect();
    }
    r
}

/// Aggregated discovery: `/api` (`core == true`) or `/apis`.
pub(crate) fn aggregated(registry: &Registry, core: bool, version: &str) -> Value {
    let items: Vec<Value> = groups(registry)
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|(v, ts)| {
                    let resources: Vec<Value> = ts.iter().map(|t| aggregated_resource(t)).collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !core {
                metadata["name"] = json!(g);
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        let kubectl = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(Format::negotiate(Some(kubectl)), Format::Aggregated("v2"));
        let beta = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(Format::negotiate(Some(beta)), Format::Aggregated("v2beta1"));
        assert_eq!(Format::negotiate(Some("application/json")), Format::Legacy);
        assert_eq!(Format::negotiate(None), Format::Legacy);
    }

    #[test]
    fn version_order() {
        let mut vs = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1"];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(vs, ["v2", "v1", "v1beta2", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn documents() {
        let r = Registry::with_builtins();
        let core = api_resource_list(&r, "", "v1").unwrap();
        let pods = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(api_resource_list(&r, "nope", "v1").is_none());
        let agg = aggregated(&r, false, "v2");
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "apps")
        );
        assert_eq!(
            api_group(&r, "batch").unwrap()["preferredVersion"]["version"],
            "v1"
        );
    }
}
