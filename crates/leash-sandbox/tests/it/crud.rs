//! Create, get, update, patch, delete through kube-rs and raw HTTP: assigned
//! metadata, 409s, missing namespaces, dry runs, subresources, bearer tokens.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::json;

use crate::common::{client, configmap, get, raw, start};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(configmap("default", name, json!({"app": "x"}))).unwrap()
}

fn api_code(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn create_assigns_metadata_and_conflicts_are_409() {
    let sb = start(vec![]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.uid.as_ref().map(String::len), Some(36));
    assert!(
        meta.resource_version
            .as_deref()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 4
    );
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.namespace.as_deref(), Some("default"));

    let err = api
        .create(&PostParams::default(), &cm("a"))
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), (409, "AlreadyExists".into()));

    // Optimistic concurrency: an update with the old version loses.
    let mut first = created.clone();
    first.data = Some([("k".to_string(), "1".to_string())].into());
    let updated = api
        .replace("a", &PostParams::default(), &first)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "2".to_string())].into());
    let err = api
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), (409, "Conflict".into()));

    // generateName.
    let mut g = cm("");
    g.metadata.name = None;
    g.metadata.generate_name = Some("gen-".into());
    let made = api.create(&PostParams::default(), &g).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // Delete, then it is gone.
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let err = api.get("a").await.unwrap_err();
    assert_eq!(api_code(&err), (404, "NotFound".into()));
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn missing_namespace_is_404_and_namespace_deletion_cascades() {
    let sb = start(vec![]).await;
    let c = client(&sb);
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "nope");
    let mut obj = cm("a");
    obj.metadata.namespace = Some("nope".into());
    let err = api.create(&PostParams::default(), &obj).await.unwrap_err();
    assert_eq!(api_code(&err), (404, "NotFound".into()));
    let nss: Api<Namespace> = Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "nope"}})).unwrap();
    let ns = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Active"));
    api.create(&PostParams::default(), &obj)
        .await
        .expect("namespace exists now");
    nss.delete("nope", &DeleteParams::default()).await.unwrap();
    assert_eq!(api_code(&api.get("a").await.unwrap_err()).0, 404);
    let err = nss
        .delete("default", &DeleteParams::default())
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), (403, "Forbidden".into()));
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn dry_run_all_never_persists() {
    let sb = start(vec![]).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
    let before = sb.store().resource_version();
    let made = api
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &cm("dry"),
        )
        .await
        .unwrap();
    assert_eq!(made.metadata.name.as_deref(), Some("dry"));
    assert_eq!(api_code(&api.get("dry").await.unwrap_err()).0, 404);
    api.create(&PostParams::default(), &cm("real"))
        .await
        .unwrap();
    let rv = sb.store().resource_version();
    let pp = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    api.patch(
        "real",
        &pp,
        &Patch::Merge(json!({"data": {"k": "changed"}})),
    )
    .await
    .unwrap();
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("real", &dp).await.unwrap();
    let got = api.get("real").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    assert_eq!(sb.store().resource_version(), rv);
    assert_eq!(rv, before + 1);
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn patches_merge_json_and_status_subresource() {
    let sb = start(vec![]).await;
    let c = client(&sb);
    let api: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    api.create(&PostParams::default(), &cm("p")).await.unwrap();
    let pp = PatchParams::default();
    let merged = api
        .patch(
            "p",
            &pp,
            &Patch::Merge(
                json!({"metadata": {"labels": {"app": null, "new": "1"}}, "data": {"x": "y"}}),
            ),
        )
        .await
        .unwrap();
    let labels = merged.metadata.labels.unwrap();
    assert_eq!(labels.get("new").map(String::as_str), Some("1"));
    assert!(!labels.contains_key("app"));
    let ops = json!([{"op": "remove", "path": "/data/x"}, {"op": "add", "path": "/data/j", "value": "1"}]);
    let r = raw(
        sb.addr(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/p",
        &[("Content-Type", "application/json-patch+json")],
        ops.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 200);
    let data = api.get("p").await.unwrap().data.unwrap();
    assert!(!data.contains_key("x"));
    assert_eq!(data["j"], "1");
    // A stale resourceVersion in a patch is a precondition failure.
    let err = api
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"z": "1"}})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_code(&err), (409, "Conflict".into()));
    // Server-side apply creates when missing (treated as a merge patch).
    let applied = api
        .patch(
            "applied",
            &PatchParams::apply("test"),
            &Patch::Apply(configmap("default", "applied", json!({}))),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.name.as_deref(), Some("applied"));

    // Pods have a status subresource: the main resource ignores status, /status only status.
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": "Pending"}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let after = pods
        .patch(
            "p",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Pending"));
    let after = pods
        .patch_status(
            "p",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "n"}})),
        )
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(after.spec.unwrap().node_name, None);
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn bearer_token_is_required_when_set() {
    let sb = Sandbox::start(SandboxConfig {
        token: Some("s3cret".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = get(sb.addr(), "/api/v1/namespaces").await;
    r.assert_status(401, "Unauthorized");
    let r = raw(
        sb.addr(),
        "GET",
        "/api/v1/namespaces",
        &[("Authorization", "Bearer wrong")],
        b"",
    )
    .await;
    r.assert_status(401, "Unauthorized");
    let r = raw(
        sb.addr(),
        "GET",
        "/api/v1/namespaces",
        &[("Authorization", "Bearer s3cret")],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 4);
    // The kubeconfig carries the token, and a kube client built from it works.
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&sb.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let c = kube::Client::try_from(config).unwrap();
    let nss: Api<Namespace> = Api::all(c);
    assert_eq!(nss.list(&Default::default()).await.unwrap().items.len(), 4);
    sb.shutdown().await.unwrap();
}

/// Generated objects are created first, then `objects` (which may use the
/// generated namespaces); a rejected object is counted over both; a bad spec
/// is an invalid argument.
#[tokio::test]
async fn generated_objects_come_first_and_errors_count_over_both() {
    use leash_sandbox::Error;
    use leash_sandbox::generate::GenerateSpec;
    let spec = GenerateSpec {
        kinds: vec![("pods".into(), 5)],
        namespaces: 2,
        crds: None,
        seed: 3,
    };
    let sb = Sandbox::start(SandboxConfig {
        generate: Some(spec.clone()),
        objects: vec![configmap("ns-0001", "mine", json!({}))],
        ..SandboxConfig::default()
    })
    .await
    .expect("starts");
    let pods: Api<Pod> = Api::all(client(&sb));
    assert_eq!(pods.list(&Default::default()).await.unwrap().items.len(), 5);
    let cms: Api<ConfigMap> = Api::namespaced(client(&sb), "ns-0001");
    assert!(cms.get("mine").await.is_ok());
    sb.shutdown().await.unwrap();

    let rejected = Sandbox::start(SandboxConfig {
        generate: Some(spec.clone()),
        objects: vec![configmap("absent", "x", json!({}))],
        ..SandboxConfig::default()
    })
    .await
    .expect_err("the namespace does not exist");
    // 2 namespaces + 5 pods generated, so the configmap is object #7.
    assert!(
        matches!(rejected, Error::InitialObjectRejected { index: 7, .. }),
        "{rejected:?}"
    );

    let bad = Sandbox::start(SandboxConfig {
        generate: Some(GenerateSpec {
            kinds: vec![("gizmos".into(), 1)],
            ..spec
        }),
        ..SandboxConfig::default()
    })
    .await
    .expect_err("unknown kind");
    assert!(
        matches!(&bad, Error::InvalidArgument(m) if m.contains("gizmos")),
        "{bad:?}"
    );
}

/// A CustomResourceDefinition's served versions share its objects: each is
/// read, listed, watched and patched at the version asked for, with that
/// `apiVersion` (the API server's conversion without a webhook).
#[tokio::test]
async fn every_served_version_of_a_crd_shows_its_objects_at_that_version() {
    let mut two = crate::common::crd("gadgets", "Gadget", "gd");
    two["spec"]["versions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "v1beta1", "served": true, "storage": false,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}));
    let gadget = json!({"apiVersion": "example.leash.dev/v1", "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": "default"}, "spec": {"size": 1}});
    let sb = start(vec![two, gadget]).await;
    let base = "/apis/example.leash.dev";
    let path = |v: &str, rest: &str| format!("{base}/{v}/namespaces/default/gadgets{rest}");

    let one = get(sb.addr(), &path("v1beta1", "/g1")).await.json();
    assert_eq!(one["apiVersion"], "example.leash.dev/v1beta1", "{one}");
    assert_eq!(one["spec"]["size"], 1);
    let list = get(sb.addr(), &path("v1beta1", "")).await.json();
    assert_eq!(list["apiVersion"], "example.leash.dev/v1beta1");
    assert_eq!(list["items"][0]["apiVersion"], "example.leash.dev/v1beta1");
    let stored = get(sb.addr(), &path("v1", "/g1")).await.json();
    assert_eq!(stored["apiVersion"], "example.leash.dev/v1", "{stored}");
    let watched = get(sb.addr(), &path("v1beta1", "?watch=true&timeoutSeconds=1")).await;
    let first: serde_json::Value =
        serde_json::from_slice(watched.body.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["apiVersion"], "example.leash.dev/v1beta1");

    // A merge patch at the other version applies to the same object.
    let patched = raw(
        sb.addr(),
        "PATCH",
        &path("v1beta1", "/g1"),
        &[("Content-Type", "application/merge-patch+json")],
        br#"{"spec": {"size": 2}}"#,
    )
    .await;
    assert_eq!(
        patched.status,
        200,
        "{}",
        String::from_utf8_lossy(&patched.body)
    );
    assert_eq!(patched.json()["apiVersion"], "example.leash.dev/v1beta1");
    let after = get(sb.addr(), &path("v1", "/g1")).await.json();
    assert_eq!(after["spec"]["size"], 2);
    assert_eq!(after["apiVersion"], "example.leash.dev/v1");
    sb.shutdown().await.unwrap();
}

/// README, "Not served": protobuf answers (a client that asks for protobuf
/// first gets JSON), garbage collection (an object whose owner is deleted
/// stays), RBAC enforcement (a Role and RoleBinding that grant nothing are
/// stored, and requests go on being served).
#[tokio::test]
async fn what_the_sandbox_does_not_serve() {
    let sb = start(vec![
        configmap("default", "owner", json!({})),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "nothing", "namespace": "default"}, "rules": []}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "nothing", "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nothing"},
            "subjects": [{"kind": "User", "name": "anyone"}]}),
    ])
    .await;
    let addr = sb.addr();
    let answer = raw(
        addr,
        "GET",
        "/api/v1/namespaces/default/configmaps/owner",
        &[(
            "Accept",
            "application/vnd.kubernetes.protobuf, application/json",
        )],
        b"",
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.json()["metadata"]["name"], "owner");

    let api: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
    let owner = api.get("owner").await.unwrap();
    let mut dependent = cm("dependent");
    dependent.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    api.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    // A cluster's garbage collector would delete the dependent soon after;
    // here it stays (checked once the owner's deletion is answered).
    assert!(api.get_opt("owner").await.unwrap().is_none());
    assert!(api.get_opt("dependent").await.unwrap().is_some());

    for plural in ["roles", "rolebindings"] {
        let list = get(
            addr,
            &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/default/{plural}"),
        )
        .await;
        assert_eq!(list.status, 200);
        assert_eq!(list.json()["items"][0]["metadata"]["name"], "nothing");
    }
    api.create(&PostParams::default(), &cm("still-served"))
        .await
        .unwrap();
    sb.shutdown().await.unwrap();
}

/// The built-in kinds Kyverno's policy library creates in its end-to-end
/// tests (chainsaw's S2 finding: "no matches for kind Ingress"): created
/// and read back through kube-rs's typed clients, at their group, version
/// and scope.
#[tokio::test]
async fn the_kinds_of_kyvernos_end_to_end_tests_are_served() {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, ResourceQuota};
    use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
    use k8s_openapi::api::node::v1::RuntimeClass;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use k8s_openapi::api::storage::v1::StorageClass;
    let sb = start(vec![]).await;
    let c = client(&sb);
    let pp = PostParams::default();
    let named = |n: &str| json!({"metadata": {"name": n}});
    macro_rules! roundtrip {
        ($api:expr, $ty:ty, $body:expr) => {{
            let api: Api<$ty> = $api;
            let obj: $ty = serde_json::from_value($body).unwrap();
            api.create(&pp, &obj).await.unwrap();
            assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), 1);
        }};
    }
    roundtrip!(Api::namespaced(c.clone(), "default"), Ingress, named("web"));
    roundtrip!(
        Api::namespaced(c.clone(), "default"),
        NetworkPolicy,
        json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}})
    );
    roundtrip!(
        Api::namespaced(c.clone(), "default"),
        PodDisruptionBudget,
        named("pdb")
    );
    roundtrip!(
        Api::namespaced(c.clone(), "default"),
        ResourceQuota,
        named("quota")
    );
    roundtrip!(
        Api::namespaced(c.clone(), "default"),
        PersistentVolumeClaim,
        named("data")
    );
    roundtrip!(
        Api::all(c.clone()),
        PriorityClass,
        json!({"metadata": {"name": "high"}, "value": 1000})
    );
    roundtrip!(
        Api::all(c.clone()),
        StorageClass,
        json!({"metadata": {"name": "fast"}, "provisioner": "x"})
    );
    roundtrip!(
        Api::all(c.clone()),
        RuntimeClass,
        json!({"metadata": {"name": "gvisor"}, "handler": "runsc"})
    );
    sb.shutdown().await.unwrap();
}

/// `SelfSubjectAccessReview`s answer allowed (the sandbox's one user may do
/// everything), with kube-apiserver's check of the spec; nothing else is
/// served at that path.
#[tokio::test]
async fn self_subject_access_reviews_answer_allowed() {
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let sb = start(vec![]).await;
    let api: Api<SelfSubjectAccessReview> = Api::all(client(&sb));
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some("rbac.authorization.k8s.io".into()),
                resource: Some("clusterrolebindings".into()),
                verb: Some("watch".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await.unwrap();
    let status = answer.status.expect("a status");
    assert!(status.allowed, "{status:?}");
    assert_eq!(
        answer.spec.resource_attributes.unwrap().resource.as_deref(),
        Some("clusterrolebindings")
    );

    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let json = [("Content-Type", "application/json")];
    let empty = raw(sb.addr(), "POST", path, &json, br#"{"spec": {}}"#).await;
    let body = String::from_utf8_lossy(&empty.body);
    assert_eq!(empty.status, 422, "{body}");
    assert!(
        body.contains("exactly one of nonResourceAttributes or resourceAttributes"),
        "{body}"
    );
    assert_eq!(raw(sb.addr(), "GET", path, &[], b"").await.status, 405);
}
