//! `leash serve --components admission,background`: generate triggers
//! admitted through the sandbox's admission chain get their downstreams,
//! with transient API failures and a `kill -9` in the middle.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use kube::core::{ApiResource, DynamicObject};
use leash_sandbox::{ApiRequest, Faults, Sandbox};
use serde_json::{Value, json};

use crate::support::{BOUND, ChildGuard, crd_sandbox, free_port, leash, serve_admission_ready};

fn serve(url: &str, port: u16) -> ChildGuard {
    serve_components(url, port, "admission,background")
}

fn serve_components(url: &str, port: u16, components: &str) -> ChildGuard {
    let listen = format!("127.0.0.1:{port}");
    let child = leash()
        .args(["serve", "--server", url, "--admission-listen", &listen])
        .args(["--components", components])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run leash serve");
    ChildGuard(child)
}

/// A ConfigMap `welcome` in every namespace labelled `gen: "yes"`; not
/// synchronized, so each downstream is made once, from its trigger.
const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: welcome}
spec:
  rules:
  - name: welcome
    match:
      any:
      - resources:
          kinds: [Namespace]
          selector: {matchLabels: {gen: "yes"}}
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: welcome
      namespace: "{{ request.object.metadata.name }}"
      data:
        data: {namespace: "{{ request.object.metadata.name }}"}
"#;

fn welcome(sb: &Sandbox) -> BTreeMap<String, Value> {
    sb.store()
        .list("v1", "ConfigMap", None)
        .unwrap()
        .into_iter()
        .filter(|c| c["metadata"]["name"] == "welcome")
        .map(|c| (c["metadata"]["namespace"].as_str().unwrap().to_string(), c))
        .collect()
}

async fn wait_for(what: &str, bound: Duration, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < bound, "{what}: not true within {bound:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates a namespace through the API (and so through admission) until
/// the API server has it: denials and transient errors are retried.
async fn create_namespace(api: &Api<DynamicObject>, name: &str) {
    create_labelled_namespace(api, name, json!({"gen": "yes"})).await
}

async fn create_labelled_namespace(api: &Api<DynamicObject>, name: &str, labels: Value) {
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}
    }))
    .unwrap();
    let start = Instant::now();
    loop {
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => return,
            Err(_) => {}
        }
        assert!(start.elapsed() < BOUND, "namespace {name} never admitted");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
}

/// Seed row: "the CEL generating-policy handler created UpdateRequests in a
/// fire-and-forget goroutine: a trigger admitted with no UpdateRequest".
/// 200 namespaces are created through admission while 15% of requests fail
/// (UpdateRequest creation included), and `leash serve` is killed with
/// SIGKILL and restarted halfway: every admitted namespace ends with its
/// downstream, exactly one, created once; no UpdateRequest is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_fire_and_forget_update_request() {
    let policy: Value = serde_saphyr::from_str(POLICY).unwrap();
    let sb = crd_sandbox(|_| true, vec![policy]).await;
    let port = free_port();
    let mut leash_serve = serve(&sb.url(), port);
    let client =
        leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
    let ns_api: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    // The webhook is registered and generating before the run starts.
    create_namespace(&ns_api, "probe").await;
    wait_for("the probe's downstream", BOUND, || {
        welcome(&sb).contains_key("probe")
    })
    .await;

    sb.set_faults(Faults {
        fail_rate: 0.15,
        retry_after_secs: 0,
        ..Faults::default()
    });
    let names: Vec<String> = (0..200).map(|i| format!("team-{i:03}")).collect();
    let create_all = |names: Vec<String>| {
        let api = ns_api.clone();
        async move {
            // Eight concurrent creators, each in turn through its chunk.
            let creators = names.chunks(25).map(|chunk| {
                let (api, chunk) = (api.clone(), chunk.to_vec());
                async move {
                    for n in chunk {
                        create_namespace(&api, &n).await;
                    }
                }
            });
            futures::future::join_all(creators).await;
        }
    };
    create_all(names[..100].to_vec()).await;
    // Mid-queue: UpdateRequests may be pending and downstreams missing.
    leash_serve.0.kill().unwrap();
    let _ = leash_serve.0.wait();
    let mut leash_serve = serve(&sb.url(), port);
    create_all(names[100..].to_vec()).await;
    sb.set_faults(Faults::default());

    wait_for("every admitted namespace has its downstream", BOUND, || {
        let w = welcome(&sb);
        names.iter().all(|n| w.contains_key(n))
    })
    .await;
    let first = welcome(&sb);
    assert_eq!(first.len(), 201, "one downstream per namespace, no more");
    for (ns, cm) in &first {
        assert_eq!(cm["data"]["namespace"], ns.as_str());
    }
    wait_for(
        "every UpdateRequest is processed and removed",
        BOUND,
        || {
            sb.store()
                .list("kyverno.io/v2", "UpdateRequest", None)
                .unwrap()
                .is_empty()
        },
    )
    .await;
    // The UpdateRequest path was taken (created by admission, its status
    // written and the request deleted by the background component).
    let seen = sb.requests();
    for (verb, sub) in [("create", ""), ("update", "status"), ("delete", "")] {
        assert!(
            seen.iter().any(
                |r| matches!(r, ApiRequest::Resource { verb: v, resource, subresource, .. }
                if v == verb && resource == "updaterequests" && subresource == sub)
            ),
            "no {verb} {sub} of updaterequests in the request log"
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again = welcome(&sb);
    let uids = |m: &BTreeMap<String, Value>| -> Vec<Value> {
        m.values().map(|c| c["metadata"]["uid"].clone()).collect()
    };
    assert_eq!(uids(&first), uids(&again), "a downstream was made twice");
    leash_serve.0.kill().unwrap();
    let _ = leash_serve.0.wait();
    sb.shutdown().await.unwrap();
}

/// The seed's own shape: a CEL GeneratingPolicy. Admission alone first
/// (no background component): every admitted namespace already has its
/// `cel-generate` UpdateRequest when its creation returns, though 15% of
/// requests fail. Then the background component processes them: one
/// downstream per namespace, and no UpdateRequest left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generating_policy_update_requests_exist_before_the_answer() {
    let gpol = json!({
        "apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
        "metadata": {"name": "cel-welcome"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["namespaces"]}]},
            "matchConditions": [{"name": "labelled",
                "expression": "has(object.metadata.labels) && 'cel' in object.metadata.labels"}],
            "generate": [{"expression": r#"generator.Apply(object.metadata.name, [{
                "apiVersion": dyn("v1"), "kind": dyn("ConfigMap"),
                "metadata": dyn({"name": "cel-welcome"}),
                "data": dyn({"namespace": object.metadata.name})
            }])"#}]
        }
    });
    let sb = crd_sandbox(|_| true, vec![gpol]).await;
    let port = free_port();
    let mut admission = serve_components(&sb.url(), port, "admission");
    let client =
        leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
    let ns_api: Api<DynamicObject> = Api::all_with(
        client,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    );
    let requests = |sb: &Sandbox| -> Vec<Value> {
        sb.store()
            .list("kyverno.io/v2", "UpdateRequest", None)
            .unwrap()
    };
    // The webhook is registered, for namespaces, before the run starts.
    wait_for("the webhook is registered for namespaces", BOUND, || {
        sb.store()
            .list(
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                None,
            )
            .unwrap()
            .iter()
            .any(|c| c.to_string().contains("\"namespaces\""))
    })
    .await;
    create_labelled_namespace(&ns_api, "probe", json!({"cel": "yes"})).await;
    wait_for("the probe's UpdateRequest", BOUND, || {
        !requests(&sb).is_empty()
    })
    .await;
    assert_eq!(
        requests(&sb)[0]["status"]["state"],
        "Pending",
        "admission marks its UpdateRequest Pending"
    );

    sb.set_faults(Faults {
        fail_rate: 0.15,
        retry_after_secs: 0,
        ..Faults::default()
    });
    let names: Vec<String> = (0..40).map(|i| format!("cel-{i:02}")).collect();
    for n in &names {
        create_labelled_namespace(&ns_api, n, json!({"cel": "yes"})).await;
        // The namespace exists, so admission answered: its request exists.
        let urs = requests(&sb);
        let ur = urs
            .iter()
            .find(|u| u["spec"]["resource"]["name"] == n.as_str())
            .unwrap_or_else(|| panic!("namespace {n} was admitted without an UpdateRequest"));
        assert_eq!(ur["spec"]["requestType"], "cel-generate");
        assert_eq!(ur["spec"]["policy"], "cel-welcome");
        assert_eq!(ur["spec"]["ruleContext"][0]["rule"], "cel-welcome");
    }
    // Not labelled: no request.
    create_labelled_namespace(&ns_api, "plain", json!({})).await;
    sb.set_faults(Faults::default());
    assert!(
        requests(&sb)
            .iter()
            .all(|u| u["spec"]["resource"]["name"] != "plain"),
        "an unmatched namespace got an UpdateRequest"
    );
    admission.0.kill().unwrap();
    let _ = admission.0.wait();

    let mut background = serve_components(&sb.url(), port, "background");
    let downstreams = |sb: &Sandbox| -> BTreeMap<String, Value> {
        sb.store()
            .list("v1", "ConfigMap", None)
            .unwrap()
            .into_iter()
            .filter(|c| c["metadata"]["name"] == "cel-welcome")
            .map(|c| (c["metadata"]["namespace"].as_str().unwrap().to_string(), c))
            .collect()
    };
    wait_for(
        "every UpdateRequest is processed and removed",
        BOUND,
        || requests(&sb).is_empty(),
    )
    .await;
    let made = downstreams(&sb);
    for n in names.iter().chain([&"probe".to_string()]) {
        let cm = made
            .get(n)
            .unwrap_or_else(|| panic!("namespace {n} has no downstream"));
        assert_eq!(cm["data"]["namespace"], n.as_str());
        assert_eq!(
            cm["metadata"]["labels"]["generate.kyverno.io/policy-name"],
            "cel-welcome"
        );
    }
    assert_eq!(made.len(), names.len() + 1, "one downstream per namespace");
    background.0.kill().unwrap();
    let _ = background.0.wait();
    sb.shutdown().await.unwrap();
}

/// README, `background`: "if it cannot be created in time, the webhook's
/// failure policy decides: `Fail` denies, `Ignore` allows with a warning",
/// through `leash serve` and the sandbox's admission chain. The sandbox
/// serves every CRD of deploy/crds but UpdateRequest's, so each
/// UpdateRequest that admission creates is refused (404): a Namespace that
/// the `Fail` policy's rule matches is denied naming the policy; one that
/// the `Ignore` policy's rule matches is created, with the policy named in
/// a `Warning` header of the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_requests_the_cluster_refuses_follow_the_failure_policy() {
    let mut policies = Vec::new();
    for (name, failure) in [("gen-fail", "Fail"), ("gen-ignore", "Ignore")] {
        let mut policy: Value = serde_saphyr::from_str(POLICY).unwrap();
        policy["metadata"]["name"] = json!(name);
        policy["spec"]["failurePolicy"] = json!(failure);
        policy["spec"]["rules"][0]["match"]["any"][0]["resources"]["selector"] =
            json!({"matchLabels": {"gen": name}});
        policies.push(policy);
    }
    let sb = crd_sandbox(
        |crd| crd["spec"]["names"]["kind"] != "UpdateRequest",
        policies,
    )
    .await;
    let _serve = serve_admission_ready(&sb.url()).await;
    let addr = sb.url().trim_start_matches("http://").to_string();
    let create = |name: &str, label: &str| {
        let body = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"gen": label}}})
        .to_string();
        let addr = addr.clone();
        // The sandbox runs on this runtime's other worker meanwhile.
        tokio::task::block_in_place(move || {
            use std::io::{Read as _, Write as _};
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(BOUND)).unwrap();
            write!(
                s,
                "POST /api/v1/namespaces HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text
        })
    };
    let denied = create("team-fail", "gen-fail");
    assert!(denied.starts_with("HTTP/1.1 4"), "{denied}");
    let (_, body) = denied.split_once("\r\n\r\n").unwrap();
    let status: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{denied}"));
    let message = status["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("gen-fail")
            && message.contains("failed: the API server answered 404 NotFound: the server could not find the requested resource"),
        "{denied}"
    );
    let allowed = create("team-ignore", "gen-ignore");
    assert!(allowed.starts_with("HTTP/1.1 201"), "{allowed}");
    let (head, _) = allowed.split_once("\r\n\r\n").unwrap();
    assert!(
        head.lines()
            .any(|l| l.to_ascii_lowercase().starts_with("warning:") && l.contains("gen-ignore")),
        "{allowed}"
    );
    assert!(
        sb.store()
            .get("v1", "Namespace", None, "team-fail")
            .is_err(),
        "the denied namespace exists"
    );
    sb.shutdown().await.unwrap();
}

/// Mutate existing (issue 40): a ConfigMap update triggers a
/// `mutate.targets` rule that labels the Secrets of its namespace with the
/// ConfigMap's `data.team`.
const MUTATE_EXISTING: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: label-secrets}
spec:
  rules:
  - name: team-from-config
    match:
      any:
      - resources:
          kinds: [ConfigMap]
          names: [team-config]
          operations: [UPDATE]
    mutate:
      targets:
      - apiVersion: v1
        kind: Secret
        namespace: "{{ request.object.metadata.namespace }}"
      patchStrategicMerge:
        metadata:
          labels:
            team: "{{ request.object.data.team }}"
"#;

/// Issue 40, mutate existing, with `kill -9` between the UpdateRequest and
/// the patch: `leash serve` with admission alone creates the `mutate`
/// UpdateRequest (with the admission request) before the update is
/// answered; it is killed with SIGKILL before anything processes the
/// request; after a restart with the background component the Secret is
/// patched, once (one write, whatever else runs), the UpdateRequest is
/// completed and removed. A second update patches it again within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_existing_patches_targets_once_across_a_kill() {
    let policy: Value = serde_saphyr::from_str(MUTATE_EXISTING).unwrap();
    let sb = crd_sandbox(|_| true, vec![policy]).await;
    let store = sb.store();
    store
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}))
        .unwrap();
    store
        .create(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "team-a"}, "data": {}}))
        .unwrap();
    store
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "team-config", "namespace": "team-a"}, "data": {"team": "none"}}))
        .unwrap();
    let port = free_port();
    let mut admission = serve_components(&sb.url(), port, "admission");
    let client =
        leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
    let cm_api: Api<DynamicObject> = Api::namespaced_with(
        client,
        "team-a",
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    let requests = |sb: &Sandbox| -> Vec<Value> {
        sb.store()
            .list("kyverno.io/v2", "UpdateRequest", None)
            .unwrap()
    };
    // Updates the ConfigMap through admission until an UpdateRequest for
    // `team` exists when the update returns (the webhook may not be
    // registered for ConfigMaps yet).
    let update = |team: &'static str| {
        let api = cm_api.clone();
        let sb = &sb;
        async move {
            let start = Instant::now();
            loop {
                let mut cm = api.get("team-config").await.unwrap();
                cm.data["data"]["team"] = json!(team);
                let _ = api
                    .replace("team-config", &PostParams::default(), &cm)
                    .await;
                let made = requests(sb).iter().any(|u| {
                    u["spec"]["requestType"] == "mutate"
                        && u["spec"]["context"]["admissionRequestInfo"]["admissionRequest"]
                            ["object"]["data"]["team"]
                            == team
                });
                if made {
                    return;
                }
                assert!(
                    start.elapsed() < BOUND,
                    "no mutate UpdateRequest for {team}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    update("payments").await;
    let secret = |sb: &Sandbox| {
        sb.store()
            .get("v1", "Secret", Some("team-a"), "db")
            .unwrap()
    };
    assert!(
        secret(&sb)["metadata"]["labels"]["team"].is_null(),
        "admission alone patches no target"
    );
    admission.0.kill().unwrap();
    let _ = admission.0.wait();

    let mut serve = serve(&sb.url(), port);
    wait_for("the Secret is patched after the restart", BOUND, || {
        secret(&sb)["metadata"]["labels"]["team"] == "payments"
    })
    .await;
    wait_for("the UpdateRequest is completed and removed", BOUND, || {
        requests(&sb).is_empty()
    })
    .await;
    let patched_at = secret(&sb)["metadata"]["resourceVersion"].clone();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        secret(&sb)["metadata"]["resourceVersion"],
        patched_at,
        "the Secret was written once"
    );
    let writes = sb
        .requests()
        .iter()
        .filter(|r| {
            matches!(r, ApiRequest::Resource { verb, resource, namespace, .. }
                if verb == "update" && resource == "secrets" && namespace == "team-a")
        })
        .count();
    assert_eq!(writes, 1, "one write of the target");

    // With the background component running, an update patches within
    // seconds.
    let start = Instant::now();
    update("search").await;
    wait_for("the second update's patch", Duration::from_secs(10), || {
        secret(&sb)["metadata"]["labels"]["team"] == "search"
    })
    .await;
    assert!(start.elapsed() < Duration::from_secs(10));
    serve.0.kill().unwrap();
    let _ = serve.0.wait();
    sb.shutdown().await.unwrap();
}

/// `mutateExistingOnPolicyUpdate`: a policy created after its triggers
/// exist patches their targets (no admission request involved: as in
/// Kyverno, a match that names operations selects no existing trigger, so
/// this rule names none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_existing_on_policy_update_patches_existing_targets() {
    let sb = crd_sandbox(|_| true, vec![]).await;
    let store = sb.store();
    store
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}))
        .unwrap();
    store
        .create(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "team-b"}, "data": {}}))
        .unwrap();
    store
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "team-config", "namespace": "team-b"}, "data": {"team": "ops"}}))
        .unwrap();
    let port = free_port();
    let mut serve = serve(&sb.url(), port);
    let mut policy: Value = serde_saphyr::from_str(MUTATE_EXISTING).unwrap();
    policy["metadata"]["name"] = json!("label-secrets-now");
    policy["spec"]["rules"][0]["mutate"]["mutateExistingOnPolicyUpdate"] = json!(true);
    policy["spec"]["rules"][0]["match"]["any"][0]["resources"]
        .as_object_mut()
        .unwrap()
        .remove("operations");
    store.create(policy).unwrap();
    wait_for("the existing trigger's target is patched", BOUND, || {
        store.get("v1", "Secret", Some("team-b"), "db").unwrap()["metadata"]["labels"]["team"]
            == "ops"
    })
    .await;
    serve.0.kill().unwrap();
    let _ = serve.0.wait();
    sb.shutdown().await.unwrap();
}

/// A MutatingPolicy with `evaluation.mutateExisting` (issue 40): created
/// after its targets exist, it mutates them (Kyverno's policy event); an
/// admitted trigger its match conditions accept creates a `cel-mutate`
/// UpdateRequest before it is answered, and the background component then
/// mutates the targets that exist, within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutating_policy_mutates_existing_targets() {
    const POLICY: &str = r#"
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: mark-secrets}
spec:
  evaluation:
    mutateExisting: {enabled: true}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  matchConditions:
  - name: asks-for-sync
    expression: "has(object.metadata.labels) && 'sync' in object.metadata.labels"
  targetMatchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [secrets]
    namespaceSelector:
      matchLabels: {team: c}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: 'Object{metadata: Object.metadata{labels: {"synced": "yes", "by": request.operation}}}'
"#;
    let sb = crd_sandbox(|_| true, vec![]).await;
    let store = sb.store();
    for ns in ["team-c", "other"] {
        let team = if ns == "team-c" { "c" } else { "x" };
        store
            .create(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"team": team}}}))
            .unwrap();
        store
            .create(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db", "namespace": ns}, "data": {}}))
            .unwrap();
    }
    let port = free_port();
    let mut serve = serve(&sb.url(), port);
    store
        .create(serde_saphyr::from_str::<Value>(POLICY).unwrap())
        .unwrap();
    let labels = |ns: &str, name: &str| {
        store.get("v1", "Secret", Some(ns), name).unwrap()["metadata"]["labels"].clone()
    };
    let label = |ns: &str, name: &str| labels(ns, name)["synced"].clone();
    // The policy's own run evaluates each target as an UPDATE.
    wait_for("the existing target is mutated", BOUND, || {
        labels("team-c", "db") == json!({"synced": "yes", "by": "UPDATE"})
    })
    .await;
    assert!(
        label("other", "db").is_null(),
        "the target's namespaceSelector leaves other namespaces out"
    );

    // A target created later, then a trigger through admission.
    store
        .create(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "later", "namespace": "team-c"}, "data": {}}))
        .unwrap();
    let client =
        leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
    let cm_api: Api<DynamicObject> = Api::namespaced_with(
        client,
        "team-c",
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    // A trigger whose match condition is false creates nothing.
    let plain: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "plain", "namespace": "team-c"}}))
        .unwrap();
    cm_api.create(&PostParams::default(), &plain).await.unwrap();
    // A trigger's run evaluates them with the trigger's operation (the
    // policy's own runs never write CREATE).
    let by_trigger = || labels("team-c", "later")["by"] == "CREATE";
    let start = Instant::now();
    let mut n = 0;
    loop {
        // Until the webhook is registered for ConfigMaps.
        n += 1;
        let cm: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("sync-{n}"), "namespace": "team-c", "labels": {"sync": "1"}}}))
        .unwrap();
        cm_api.create(&PostParams::default(), &cm).await.unwrap();
        if by_trigger() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        if by_trigger() {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "the later target was never mutated for a trigger"
        );
    }
    assert_eq!(label("team-c", "later"), "yes");
    let made = sb.requests().iter().any(|r| {
        matches!(r, ApiRequest::Resource { verb, resource, .. }
            if verb == "create" && resource == "updaterequests")
    });
    assert!(made, "the trigger's UpdateRequest was created");
    assert!(label("other", "db").is_null());
    serve.0.kill().unwrap();
    let _ = serve.0.wait();
    sb.shutdown().await.unwrap();
}
