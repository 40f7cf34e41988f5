//! Discovery: which resources the cluster serves, in kubectl's priority order.
//!
//! Aggregated discovery first (`GET /api` and `GET /apis` asking for
//! `APIGroupDiscoveryList`: two requests for the whole cluster); a server that
//! answers with the legacy `APIVersions` / `APIGroupList` documents is then
//! asked for each group version's `APIResourceList`.
//!
//! Each resource is read at one version, as client-go's
//! `ServerPreferredResources` (behind `kubectl api-resources` and kubectl's
//! name resolution) chooses it: the group's preferred version, or, for a
//! resource its preferred version does not serve, the first other version
//! that does. Its other versions are kept apart, for KIND arguments that name
//! a version (`deployments.v1beta1.apps`). Subresources are dropped. The
//! order is kubectl's priority: the core group first, then the other groups
//! in the order the server lists them.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions};
use kube::client::{APIGroupDiscoveryList, APIResourceDiscovery};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::fetch::Fetcher;
use crate::kind::ResolvedKind;

/// kubectl's Accept for discovery: aggregated v2, v2beta1, else legacy JSON.
const ACCEPT_DISCOVERY: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,\
application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

/// Legacy discovery documents are fetched this many at a time.
const LEGACY_CONCURRENCY: usize = 8;

/// Every resource the cluster serves, in resolution priority order.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    kinds: Vec<Arc<ResolvedKind>>,
    other_versions: Vec<Arc<ResolvedKind>>,
}

impl Catalog {
    /// A catalog from resources already in priority order, one version each
    /// (for tests and callers that cache discovery).
    pub fn from_kinds(kinds: Vec<ResolvedKind>) -> Self {
        Catalog {
            kinds: kinds.into_iter().map(Arc::new).collect(),
            other_versions: Vec::new(),
        }
    }

    /// A catalog from every (group, version, resource) discovery found, each
    /// group's versions in the server's order (preferred first): the first
    /// version of each resource is the one it is read at, the others are
    /// [`Catalog::other_versions`]. The core group goes first.
    pub fn from_discovered(mut found: Vec<ResolvedKind>) -> Self {
        found.sort_by_key(|k| !k.group.is_empty());
        let mut versions = std::collections::HashSet::new();
        let mut resources = std::collections::HashSet::new();
        let mut catalog = Catalog::default();
        for kind in found {
            if versions.insert((
                kind.group.clone(),
                kind.plural.clone(),
                kind.version.clone(),
            )) {
                let list = if resources.insert((kind.group.clone(), kind.plural.clone())) {
                    &mut catalog.kinds
                } else {
                    &mut catalog.other_versions
                };
                list.push(Arc::new(kind));
            }
        }
        catalog
    }

    /// The resources, one version each, highest priority first.
    pub fn kinds(&self) -> &[Arc<ResolvedKind>] {
        &self.kinds
    }

    /// The resources' other served versions, used only when a KIND argument
    /// names the version.
    pub fn other_versions(&self) -> &[Arc<ResolvedKind>] {
        &self.other_versions
    }
}

/// The top-level answer of `/api` or `/apis`: aggregated or legacy.
enum TopLevel {
    Aggregated(APIGroupDiscoveryList),
    LegacyCore(APIVersions),
    LegacyGroups(APIGroupList),
}

fn parse_top_level(body: &[u8]) -> serde_json::Result<TopLevel> {
    #[derive(serde::Deserialize)]
    struct KindOnly {
        #[serde(default)]
        kind: String,
    }
    let head: KindOnly = serde_json::from_slice(body)?;
    Ok(match head.kind.as_str() {
        "APIGroupDiscoveryList" => TopLevel::Aggregated(serde_json::from_slice(body)?),
        "APIVersions" => TopLevel::LegacyCore(serde_json::from_slice(body)?),
        // `APIGroupList`, or a server that omits `kind`.
        _ => TopLevel::LegacyGroups(serde_json::from_slice(body)?),
    })
}

/// Run discovery: 2 concurrent requests against an aggregated-discovery
/// server, then one per group (8 at a time) against a legacy one. Each request is retried per the policy.
///
/// # Cancel safety
/// Cancel-safe; returns `Error::Cancelled` when `token` fires.
pub(crate) async fn discover(
    fetcher: &Fetcher,
    token: &CancellationToken,
    retries: &mut u64,
) -> Result<Catalog> {
    discover_with(fetcher, ACCEPT_DISCOVERY, token, retries).await
}

/// [`discover`] with a chosen top-level Accept (tests force the legacy path
/// with plain `application/json`).
async fn discover_with(
    fetcher: &Fetcher,
    accept: &str,
    token: &CancellationToken,
    retries: &mut u64,
) -> Result<Catalog> {
    // Both top-level documents at once: discovery costs one round trip.
    let (mut core_retries, mut group_retries) = (0, 0);
    let (core, groups) = tokio::join!(
        get_top_level(fetcher, "/api", accept, token, &mut core_retries),
        get_top_level(fetcher, "/apis", accept, token, &mut group_retries),
    );
    *retries += core_retries + group_retries;
    let (core, groups) = (core?, groups?);
    let mut kinds = Vec::new();
    let mut legacy_paths: Vec<(String, String, String)> = Vec::new(); // (path, group, version)
    for top in [core, groups] {
        match top {
            TopLevel::Aggregated(list) => kinds.extend(kinds_from_aggregated(&list)),
            TopLevel::LegacyCore(versions) => {
                for v in &versions.versions {
                    legacy_paths.push((format!("/api/{v}"), String::new(), v.clone()));
                }
            }
            TopLevel::LegacyGroups(list) => {
                for group in &list.groups {
                    // The preferred version first, then the others in the server's order.
                    let preferred = group
                        .preferred_version
                        .as_ref()
                        .or_else(|| group.versions.first());
                    let others = group
                        .versions
                        .iter()
                        .filter(|gv| Some(&gv.version) != preferred.map(|p| &p.version));
                    for gv in preferred.into_iter().chain(others) {
                        legacy_paths.push((
                            format!("/apis/{}", gv.group_version),
                            group.name.clone(),
                            gv.version.clone(),
                        ));
                    }
                }
            }
        }
    }
    if !legacy_paths.is_empty() {
        let docs: Vec<(u64, Vec<ResolvedKind>)> = futures::stream::iter(legacy_paths)
            .map(|(path, group, version)| async move {
                let mut r = 0;
                let list: APIResourceList = fetcher
                    .get(
                        &path,
                        "application/json",
                        &format!("discovery GET {path}"),
                        &[],
                        token,
                        &mut r,
                        |a| serde_json::from_slice(&a.body),
                    )
                    .await?;
                Ok::<_, crate::Error>((r, kinds_from_legacy(&group, &version, &list)))
            })
            .buffered(LEGACY_CONCURRENCY)
            .try_collect()
            .await?;
        for (r, found) in docs {
            *retries += r;
            kinds.extend(found);
        }
    }
    Ok(Catalog::from_discovered(kinds))
}

async fn get_top_level(
    fetcher: &Fetcher,
    path: &str,
    accept: &str,
    token: &CancellationToken,
    retries: &mut u64,
) -> Result<TopLevel> {
    fetcher
        .get(
            path,
            accept,
            &format!("discovery GET {path}"),
            &[StatusCode::NOT_FOUND],
            token,
            retries,
            |a| {
                if a.status == StatusCode::NOT_FOUND {
                    // A server without the core group, or without any group.
                    Ok(TopLevel::LegacyGroups(APIGroupList { groups: vec![] }))
                } else {
                    parse_top_level(&a.body)
                }
            },
        )
        .await
}

/// Resources of every version of every group, each group's versions in the
/// server's order (the preferred one first, as aggregated discovery lists it).
fn kinds_from_aggregated(list: &APIGroupDiscoveryList) -> Vec<ResolvedKind> {
    let mut out = Vec::new();
    for group in &list.items {
        let name = group
            .metadata
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        for version in &group.versions {
            let version_name = version.version.clone().unwrap_or_default();
            for resource in &version.resources {
                if let Some(kind) = kind_from_aggregated(&name, &version_name, resource) {
                    out.push(kind);
                }
            }
        }
    }
    out
}

fn kind_from_aggregated(
    group: &str,
    version: &str,
    r: &APIResourceDiscovery,
) -> Option<ResolvedKind> {
    let plural = r.resource.clone()?;
    let kind = r.response_kind.as_ref().and_then(|k| k.kind.clone())?;
    let singular = r
        .singular_resource
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| kind.to_lowercase());
    Some(ResolvedKind {
        group: group.to_owned(),
        version: version.to_owned(),
        kind,
        plural,
        singular,
        namespaced: r.scope.as_deref() != Some("Cluster"),
        verbs: r.verbs.clone(),
        short_names: r.short_names.clone(),
    })
}

fn kinds_from_legacy(group: &str, version: &str, list: &APIResourceList) -> Vec<ResolvedKind> {
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| ResolvedKind {
            group: r
                .group
                .clone()
                .filter(|g| !g.is_empty())
                .unwrap_or_else(|| group.to_owned()),
            version: r
                .version
                .clone()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| version.to_owned()),
            kind: r.kind.clone(),
            plural: r.name.clone(),
            singular: if r.singular_name.is_empty() {
                r.kind.to_lowercase()
            } else {
                r.singular_name.clone()
            },
            namespaced: r.namespaced,
            verbs: r.verbs.clone(),
            short_names: r.short_names.clone().unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGGREGATED_APIS: &str = r#"{
      "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
      "items": [
        {"metadata": {"name": "apps"}, "versions": [
          {"version": "v1", "resources": [
            {"resource": "deployments", "responseKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
             "scope": "Namespaced", "singularResource": "deployment", "verbs": ["get", "list"], "shortNames": ["deploy"],
             "subresources": [{"subresource": "scale", "verbs": ["get"]}]}
          ]}
        ]},
        {"metadata": {"name": "example.leash.dev"}, "versions": [
          {"version": "v2", "resources": [
            {"resource": "widgets", "responseKind": {"group": "example.leash.dev", "version": "v2", "kind": "Widget"},
             "scope": "Cluster", "singularResource": "widget", "verbs": ["list"]}
          ]},
          {"version": "v1", "resources": [
            {"resource": "widgets", "responseKind": {"group": "example.leash.dev", "version": "v1", "kind": "Widget"},
             "scope": "Cluster", "singularResource": "widget", "verbs": ["list"]},
            {"resource": "oldwidgets", "responseKind": {"kind": "OldWidget"}, "scope": "Cluster", "verbs": ["list"]}
          ]}
        ]}
      ]
    }"#;

    const LEGACY_CORE: &str =
        r#"{"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}"#;
    const LEGACY_GROUPS: &str = r#"{"kind": "APIGroupList", "apiVersion": "v1", "groups": [
      {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
       "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}
    ]}"#;
    const LEGACY_CORE_RESOURCES: &str = r#"{"kind": "APIResourceList", "groupVersion": "v1", "resources": [
      {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod", "verbs": ["get", "list"], "shortNames": ["po"]},
      {"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]},
      {"name": "namespaces", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["list"]}
    ]}"#;

    #[test]
    fn aggregated_prefers_the_first_version_and_skips_subresources() {
        let TopLevel::Aggregated(list) = parse_top_level(AGGREGATED_APIS.as_bytes()).unwrap()
        else {
            panic!("not aggregated")
        };
        let catalog = Catalog::from_discovered(kinds_from_aggregated(&list));
        let read_at: Vec<_> = catalog
            .kinds()
            .iter()
            .map(|k| format!("{} {}", k.qualified_name(), k.version))
            .collect();
        // oldwidgets is served only by v1, which is not preferred: it is
        // still read (as ServerPreferredResources does), at v1.
        assert_eq!(
            read_at,
            [
                "deployments.apps v1",
                "widgets.example.leash.dev v2",
                "oldwidgets.example.leash.dev v1"
            ]
        );
        let kinds = catalog.kinds();
        assert_eq!(kinds[0].short_names, ["deploy"]);
        assert!(kinds[0].namespaced);
        assert!(!kinds[1].namespaced);
        let others: Vec<_> = catalog
            .other_versions()
            .iter()
            .map(|k| format!("{} {}", k.qualified_name(), k.version))
            .collect();
        assert_eq!(others, ["widgets.example.leash.dev v1"]);
    }

    #[test]
    fn legacy_documents_are_recognised() {
        assert!(matches!(
            parse_top_level(LEGACY_CORE.as_bytes()).unwrap(),
            TopLevel::LegacyCore(_)
        ));
        let TopLevel::LegacyGroups(groups) = parse_top_level(LEGACY_GROUPS.as_bytes()).unwrap()
        else {
            panic!("not legacy groups")
        };
        assert_eq!(groups.groups[0].name, "apps");
        let list: APIResourceList = serde_json::from_str(LEGACY_CORE_RESOURCES).unwrap();
        let kinds = kinds_from_legacy("", "v1", &list);
        let names: Vec<_> = kinds.iter().map(|k| k.qualified_name()).collect();
        assert_eq!(names, ["pods", "namespaces"]);
        assert_eq!(kinds[1].singular, "namespace");
        assert!(!kinds[1].namespaced);
    }

    /// Against the sandbox, legacy discovery (one document per group) finds
    /// the same kinds, scopes, verbs and short names as aggregated discovery.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn legacy_and_aggregated_discovery_agree() {
        // One CRD served at two versions, so both paths must find a second version.
        let two_versions = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.leash.dev"},
            "spec": {"group": "example.leash.dev", "scope": "Namespaced",
                "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}]}
        });
        let sb = leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig {
            generate: Some(leash_sandbox::generate::GenerateSpec {
                kinds: vec![],
                namespaces: 1,
                crds: Some((3, 1)),
                seed: 0,
            }),
            objects: vec![two_versions],
            ..leash_sandbox::SandboxConfig::default()
        })
        .await
        .unwrap();
        let client =
            crate::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
        let fetcher = Fetcher::new(client, crate::RetryPolicy::default());
        let token = CancellationToken::new();
        let mut retries = 0;
        let aggregated = discover(&fetcher, &token, &mut retries).await.unwrap();
        let legacy = discover_with(&fetcher, "application/json", &token, &mut retries)
            .await
            .unwrap();
        let key = |c: &Catalog| {
            let mut kinds: Vec<_> = c
                .kinds()
                .iter()
                .chain(c.other_versions())
                .map(|k| {
                    let mut short = k.short_names.clone();
                    short.sort();
                    let mut verbs = k.verbs.clone();
                    verbs.sort();
                    (
                        k.qualified_name(),
                        k.version.clone(),
                        k.kind.clone(),
                        k.singular.clone(),
                        k.namespaced,
                        short,
                        verbs,
                    )
                })
                .collect();
            kinds.sort();
            kinds
        };
        assert!(aggregated.kinds().len() > 10);
        assert!(aggregated.kinds().iter().any(|k| k.plural == "widget0002s"));
        assert_eq!(key(&aggregated), key(&legacy));
        let gadgets = |c: &Catalog| {
            let at = |list: &[Arc<ResolvedKind>]| {
                list.iter()
                    .filter(|k| k.plural == "gadgets")
                    .map(|k| k.version.clone())
                    .collect::<Vec<_>>()
            };
            (at(c.kinds()), at(c.other_versions()))
        };
        assert_eq!(
            gadgets(&aggregated),
            (vec!["v1".into()], vec!["v1beta1".into()])
        );
        assert_eq!(gadgets(&legacy), gadgets(&aggregated));
        assert!(legacy.kinds()[0].group.is_empty(), "core group first");
        sb.shutdown().await.unwrap();
    }

    #[test]
    fn core_group_comes_first_and_duplicates_collapse() {
        use crate::kind::tests::kind;
        let catalog = Catalog::from_discovered(vec![
            kind("apps", "v1", "Deployment", "deployments", true),
            kind("", "v1", "Pod", "pods", true),
            kind("x.dev", "v1", "Pod", "pods", true),
            kind("", "v1", "Pod", "pods", true),
            kind("apps", "v1beta1", "Deployment", "deployments", true),
        ]);
        let names: Vec<_> = catalog.kinds().iter().map(|k| k.qualified_name()).collect();
        assert_eq!(names, ["pods", "deployments.apps", "pods.x.dev"]);
        assert_eq!(catalog.other_versions().len(), 1);
        assert_eq!(catalog.other_versions()[0].version, "v1beta1");
    }
}
