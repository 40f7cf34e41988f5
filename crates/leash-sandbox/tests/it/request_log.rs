//! The request log: each request served, as RBAC sees it, once per distinct value.

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use leash_sandbox::{ApiRequest, Faults, Sandbox, SandboxConfig};
use serde_json::json;

use crate::common::{client, get, raw, start};

fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str) -> ApiRequest {
    ApiRequest::Resource {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
    }
}

#[tokio::test]
async fn every_verb_a_kube_client_sends_is_logged_once() {
    let sb = start(vec![]).await;
    let c = client(&sb);
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "a"}, "data": {"k": "v"}})).unwrap();
    for _ in 0..3 {
        cms.list(&ListParams::default()).await.unwrap();
    }
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let mut got = cms.get("a").await.unwrap();
    got.data = Some([("k".to_string(), "w".to_string())].into());
    cms.replace("a", &PostParams::default(), &got)
        .await
        .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .unwrap();
    let rv = sb.store().resource_version().to_string();
    let mut w = cms
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    while w.next().await.is_some() {}
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    cms.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::all(c.clone());
    deployments.list(&ListParams::default()).await.unwrap();
    // A 404 is still authorized first, so it is logged too.
    let missing: Api<Deployment> = Api::namespaced(c, "nowhere");
    assert!(missing.get_status("d").await.is_err());
    assert_eq!(get(sb.addr(), "/apis").await.status, 200);

    let want: BTreeSet<ApiRequest> = [
        res("list", "", "configmaps", "", "default"),
        res("create", "", "configmaps", "", "default"),
        res("get", "", "configmaps", "", "default"),
        res("update", "", "configmaps", "", "default"),
        res("patch", "", "configmaps", "", "default"),
        res("watch", "", "configmaps", "", "default"),
        res("delete", "", "configmaps", "", "default"),
        res("deletecollection", "", "configmaps", "", "default"),
        res("list", "apps", "deployments", "", ""),
        res("get", "apps", "deployments", "status", "nowhere"),
        ApiRequest::NonResource {
            verb: "get".into(),
            path: "/apis".into(),
        },
    ]
    .into();
    assert_eq!(sb.requests(), want);
    assert_eq!(sb.requests_not_recorded(), 0);
    sb.clear_requests();
    assert!(sb.requests().is_empty());
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn refused_tokens_are_not_logged_injected_faults_are() {
    let sb = Sandbox::start(SandboxConfig {
        token: Some("secret".into()),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    assert_eq!(get(sb.addr(), "/api/v1/pods").await.status, 401);
    assert!(sb.requests().is_empty(), "{:?}", sb.requests());
    sb.set_faults(Faults {
        fail_rate: 1.0,
        ..Faults::default()
    });
    let auth = [("Authorization", "Bearer secret")];
    let r = raw(
        sb.addr(),
        "GET",
        "/api/v1/namespaces/kube-system/secrets",
        &auth,
        b"",
    )
    .await;
    assert_eq!(r.status, 500);
    assert_eq!(
        sb.requests(),
        [res("list", "", "secrets", "", "kube-system")].into()
    );
    sb.shutdown().await.unwrap();
}
