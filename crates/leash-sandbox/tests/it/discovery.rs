//! Discovery, aggregated and legacy, through kube-rs; CRDs appear and disappear.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use serde_json::json;

use crate::common::{client, crd, raw, start};

fn find(d: &Discovery, group: &str, plural: &str) -> Option<(ApiResource, ApiCapabilities)> {
    d.get(group)?
        .recommended_resources()
        .into_iter()
        .find(|(ar, _)| ar.plural == plural)
}

/// The built-in kinds with the right scope, kind, version and verbs.
fn check_builtins(d: &Discovery) {
    let cases = [
        ("", "pods", "Pod", "v1", true),
        ("", "namespaces", "Namespace", "v1", false),
        ("", "nodes", "Node", "v1", false),
        ("", "configmaps", "ConfigMap", "v1", true),
        ("", "secrets", "Secret", "v1", true),
        ("", "services", "Service", "v1", true),
        ("", "serviceaccounts", "ServiceAccount", "v1", true),
        ("", "events", "Event", "v1", true),
        ("apps", "deployments", "Deployment", "v1", true),
        ("apps", "statefulsets", "StatefulSet", "v1", true),
        ("apps", "daemonsets", "DaemonSet", "v1", true),
        ("apps", "replicasets", "ReplicaSet", "v1", true),
        ("batch", "jobs", "Job", "v1", true),
        ("batch", "cronjobs", "CronJob", "v1", true),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            "v1",
            false,
        ),
    ];
    for (group, plural, kind, version, namespaced) in cases {
        let (ar, caps) =
            find(d, group, plural).unwrap_or_else(|| panic!("{plural}.{group} not discovered"));
        assert_eq!(ar.kind, kind);
        assert_eq!(ar.version, version);
        let scope = if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        };
        assert_eq!(caps.scope, scope, "{plural}");
        for verb in [
            verbs::LIST,
            verbs::WATCH,
            verbs::GET,
            verbs::CREATE,
            verbs::DELETE,
            verbs::PATCH,
            verbs::UPDATE,
        ] {
            assert!(caps.supports_operation(verb), "{plural} lacks {verb}");
        }
    }
}

#[tokio::test]
async fn discovery_aggregated_lists_builtins_with_scope_verbs_and_short_names() {
    let sb = start(vec![]).await;
    let c = client(&sb);
    let d = Discovery::new(c.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    check_builtins(&d);
    // Short names and singular names are only in the raw documents.
    let core = c
        .list_core_api_versions_aggregated()
        .await
        .expect("/api aggregated");
    let v1 = &core.items[0].versions[0];
    let pods = v1
        .resources
        .iter()
        .find(|r| r.resource.as_deref() == Some("pods"))
        .expect("pods");
    assert_eq!(pods.short_names, ["po"]);
    assert_eq!(pods.singular_resource.as_deref(), Some("pod"));
    let apis = c
        .list_api_groups_aggregated()
        .await
        .expect("/apis aggregated");
    let short = |group: &str, plural: &str| -> Vec<String> {
        apis.items
            .iter()
            .filter(|g| g.metadata.as_ref().and_then(|m| m.name.as_deref()) == Some(group))
            .flat_map(|g| g.versions.iter())
            .flat_map(|v| v.resources.iter())
            .find(|r| r.resource.as_deref() == Some(plural))
            .map(|r| r.short_names.clone())
            .unwrap_or_default()
    };
    assert_eq!(short("apps", "deployments"), ["deploy"]);
    assert_eq!(short("apps", "statefulsets"), ["sts"]);
    assert_eq!(short("batch", "cronjobs"), ["cj"]);
    assert_eq!(
        short("apiextensions.k8s.io", "customresourcedefinitions"),
        ["crd", "crds"]
    );
    // The Content-Type echoes the negotiated format, as kubectl expects.
    let accept = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    let r = raw(sb.addr(), "GET", "/apis", &[("Accept", accept)], b"").await;
    assert_eq!(
        r.header("content-type"),
        Some("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")
    );
    assert_eq!(r.json()["apiVersion"], "apidiscovery.k8s.io/v2beta1");
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn discovery_legacy_lists_builtins_with_scope_verbs_and_short_names() {
    let sb = start(vec![]).await;
    let c = client(&sb);
    let d = Discovery::new(c.clone())
        .run()
        .await
        .expect("legacy discovery");
    check_builtins(&d);
    let core = c.list_core_api_resources("v1").await.expect("/api/v1");
    let short = |name: &str| {
        core.resources
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.short_names.clone())
            .unwrap_or_default()
    };
    assert_eq!(short("pods"), ["po"]);
    assert_eq!(short("configmaps"), ["cm"]);
    assert_eq!(short("services"), ["svc"]);
    assert_eq!(short("serviceaccounts"), ["sa"]);
    assert_eq!(short("events"), ["ev"]);
    assert_eq!(short("nodes"), ["no"]);
    assert_eq!(short("namespaces"), ["ns"]);
    let apps = c
        .list_api_group_resources("apps/v1")
        .await
        .expect("/apis/apps/v1");
    let ds = apps
        .resources
        .iter()
        .find(|r| r.name == "daemonsets")
        .unwrap();
    assert_eq!(ds.short_names.as_deref(), Some(&["ds".to_string()][..]));
    assert_eq!(ds.singular_name, "daemonset");
    assert!(
        apps.resources
            .iter()
            .any(|r| r.name == "deployments/status")
    );
    // Without the aggregated Accept, /api is the legacy APIVersions document.
    let r = raw(
        sb.addr(),
        "GET",
        "/api",
        &[("Accept", "application/json")],
        b"",
    )
    .await;
    assert_eq!(r.json()["kind"], "APIVersions");
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn crd_registers_a_served_and_discovered_kind_and_deletion_removes_it() {
    let sb = start(vec![]).await;
    let c = client(&sb);
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    let def: CustomResourceDefinition =
        serde_json::from_value(crd("widgets", "Widget", "wg")).unwrap();
    crds.create(&PostParams::default(), &def)
        .await
        .expect("create CRD");
    let stored = crds.get("widgets.example.leash.dev").await.unwrap();
    let established = stored
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "CRD reports Established");

    for aggregated in [true, false] {
        let d = Discovery::new(c.clone());
        let d = if aggregated {
            d.run_aggregated().await
        } else {
            d.run().await
        }
        .unwrap();
        let (ar, caps) = find(&d, "example.leash.dev", "widgets").expect("widgets discovered");
        assert_eq!(
            (ar.kind.as_str(), caps.scope.clone()),
            ("Widget", Scope::Namespaced)
        );
    }
    let ar = ApiResource {
        group: "example.leash.dev".into(),
        version: "v1".into(),
        api_version: "example.leash.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::namespaced_with(c.clone(), "default", &ar);
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.leash.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 3}
    }))
    .unwrap();
    widgets
        .create(&PostParams::default(), &w)
        .await
        .expect("create widget");
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    crds.delete("widgets.example.leash.dev", &DeleteParams::default())
        .await
        .unwrap();
    let d = Discovery::new(c.clone()).run_aggregated().await.unwrap();
    assert!(
        find(&d, "example.leash.dev", "widgets").is_none(),
        "gone from discovery"
    );
    let err = widgets
        .list(&ListParams::default())
        .await
        .expect_err("not served any more");
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    assert_eq!(sb.store().object_count(), 4, "the widget went with its CRD");
    sb.shutdown().await.unwrap();
}
