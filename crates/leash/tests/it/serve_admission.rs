//! Issue 13's end-to-end test: kubectl against a sandbox whose admission
//! chain calls `leash serve`'s webhook.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::{
    BOUND, ChildGuard, crd_sandbox, free_port, http_get, http_post_json, kubectl_installed, leash,
    repo, send_signal, serve_admission_ready, sigterm_and_wait, wait_exit, wait_ready, webhook_cfg,
};

/// A sandbox with leash's CRDs, the example policies and the `kyverno`
/// namespace.
async fn demo_sandbox() -> Sandbox {
    let policies =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/examples/policies")])
            .unwrap();
    crd_sandbox(|_| true, policies).await
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn serve(url: &str, port: u16) -> ChildGuard {
    let listen = format!("127.0.0.1:{port}");
    let child = leash()
        .args(["serve", "--server", url, "--admission-listen", &listen])
        .args(["--report-cleanup-interval", "1s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run leash serve");
    ChildGuard(child)
}

/// Waits until `kubectl run NAME --image IMAGE` gives an output containing
/// `want` (the webhook may not be registered yet); each attempt after an
/// admitted one uses a new name (`NAME-1`, ...), and the text of the one
/// that printed `want` is returned with its name replaced by NAME.
fn run_until(kc: &std::path::Path, name: &str, image: &str, want: &str) -> String {
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        let this = if attempt == 0 {
            name.to_string()
        } else {
            format!("{name}-{attempt}")
        };
        let out = kubectl(kc, &["run", &this, "--image", image]);
        let t = text(&out);
        if t.contains(want) {
            return t.replace(&this, name);
        }
        if out.status.success() {
            attempt += 1;
        }
        assert!(
            start.elapsed() < BOUND,
            "kubectl run {name} --image {image} never printed {want:?}; last: {t}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_admission_end_to_end_with_kubectl() {
    if !kubectl_installed() {
        return;
    }
    let sb = demo_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, sb.kubeconfig_yaml()).unwrap();
    let port = free_port();
    let mut server = serve(&sb.url(), port);

    tokio::task::block_in_place(|| {
        // Enforce: denied with the policy's message, as kubectl prints it.
        let t = run_until(&kc, "bad", "nginx:latest", "denied the request");
        assert!(t.contains("Error from server: admission webhook \"validate.kyverno.svc-fail\" denied the request"), "{t}");
        assert!(
            t.contains("resource Pod/default/bad was blocked due to the following policies"),
            "{t}"
        );
        assert!(
            t.contains("disallow-latest-tag:") && t.contains("validate-image-tag:"),
            "{t}"
        );
        assert!(
            !t.contains("require-labels"),
            "an Audit policy is not named in a denial: {t}"
        );
        // Compliant: created. Audit failure (no label): admitted, and in its report.
        let out = kubectl(&kc, &["run", "good", "--image", "nginx:1.27"]);
        assert!(out.status.success(), "{}", text(&out));
        let start = Instant::now();
        loop {
            let reports = sb
                .store()
                .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", Some("default"))
                .unwrap();
            let audit_failed = reports.iter().any(|r| {
                r["scope"]["name"] == "good"
                    && r["results"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|x| x["policy"] == "require-labels" && x["result"] == "fail")
            });
            if audit_failed {
                break;
            }
            assert!(
                start.elapsed() < BOUND,
                "the Audit failure never reached the pod's PolicyReport: {reports:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // The policies are Ready in their status, as Kyverno reports it.
        let cpol = sb
            .store()
            .get(
                "kyverno.io/v1",
                "ClusterPolicy",
                None,
                "disallow-latest-tag",
            )
            .unwrap();
        assert_eq!(cpol["status"]["ready"], true, "{cpol}");

        // Webhook down, failurePolicy Fail: creation is denied.
        assert!(sigterm_and_wait(&mut server).success());
        let out = kubectl(&kc, &["run", "while-down", "--image", "nginx:1.27"]);
        let t = text(&out);
        assert!(
            !out.status.success() && t.contains("failed calling webhook"),
            "{t}"
        );
        // failurePolicy Ignore: admitted.
        let mut vwc = webhook_cfg(&sb, "Validating").unwrap();
        for w in vwc["webhooks"].as_array_mut().unwrap() {
            w["failurePolicy"] = json!("Ignore");
        }
        sb.store().update(vwc).unwrap();
        let out = kubectl(&kc, &["run", "while-down", "--image", "nginx:1.27"]);
        assert!(out.status.success(), "Ignore admits: {}", text(&out));

        // Up again: the registrar restores its configuration; denials resume.
        server = serve(&sb.url(), port);
        run_until(&kc, "bad-again", "nginx:latest", "denied the request");
        assert!(sigterm_and_wait(&mut server).success());
    });
    sb.shutdown().await.unwrap();
}

/// `/readyz` answers 200 only once the webhook configuration is written, so
/// the first request after it goes through the webhook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_webhook_registration() {
    let sb = demo_sandbox().await;
    let mut server = serve_admission_ready(&sb.url()).await;
    let vwc =
        webhook_cfg(&sb, "Validating").expect("ready only with the webhook configuration written");
    // Written from the policies, not from the empty set served before them.
    let resources: Vec<&Value> = vwc["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|w| w["rules"].as_array().into_iter().flatten())
        .flat_map(|r| r["resources"].as_array().into_iter().flatten())
        .collect();
    assert!(resources.iter().any(|r| *r == "pods"), "{vwc}");
    // The mutating configuration is written before ready too; the
    // example policies mutate nothing, so it has no webhooks.
    let mwc =
        webhook_cfg(&sb, "Mutating").expect("ready only with the mutating configuration written");
    assert!(
        mwc["webhooks"].as_array().is_none_or(Vec::is_empty),
        "{mwc}"
    );
    send_signal(&server.0, "TERM");
    wait_exit(&mut server.0, BOUND, "leash serve exit after SIGTERM");
    sb.shutdown().await.unwrap();
}

/// With nowhere to write them (no aggregate controller, room for one
/// ephemeral report), admitted requests' results wait in the audit queue;
/// at SIGTERM leash serve drains what it can, names each resource whose
/// results it could not write, and still exits 0 within --shutdown-timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_names_the_admission_results_it_could_not_write() {
    let sb = demo_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let health = format!("127.0.0.1:{}", free_port());
    let mut server = ChildGuard(
        leash()
            .args(["serve", "--server", &sb.url(), "--components", "admission"])
            .args(["--admission-listen", "127.0.0.1:0", "--health", &health])
            .args(["--max-ephemeral-reports", "1", "--shutdown-timeout", "3s"])
            .env("NO_COLOR", "1")
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.path().join("serve.err")).unwrap())
            .spawn()
            .expect("run leash serve"),
    );
    wait_ready(&health).await;
    let api = sb.url().trim_start_matches("http://").to_string();
    let names: Vec<String> = (0..4).map(|i| format!("kept-{i}")).collect();
    for name in &names {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
        let (status, body) = tokio::task::block_in_place(|| {
            http_post_json(&api, "/api/v1/namespaces/default/pods", &pod)
        });
        assert_eq!(status, 201, "{name}: {body}");
    }
    send_signal(&server.0, "TERM");
    let start = Instant::now();
    let status = wait_exit(&mut server.0, BOUND, "exit after SIGTERM");
    let waited = start.elapsed();
    let out = std::fs::read_to_string(&log).unwrap()
        + &std::fs::read_to_string(dir.path().join("serve.err")).unwrap();
    assert!(status.success(), "leash serve exited with {status}: {out}");
    assert!(waited < Duration::from_secs(5), "shutdown took {waited:?}");
    let written: Vec<String> = sb
        .store()
        .list("reports.kyverno.io/v1", "EphemeralReport", Some("default"))
        .unwrap()
        .iter()
        .filter_map(|r| r["spec"]["owner"]["name"].as_str().map(String::from))
        .collect();
    assert!(written.len() <= 1, "room for one report, got {written:?}");
    let mut named = 0;
    for name in names.iter().filter(|n| !written.contains(n)) {
        let line = out
            .lines()
            .find(|l| {
                l.contains("audit results not written")
                    && l.contains(&format!("Pod default/{name} "))
            })
            .unwrap_or_else(|| panic!("{name}: no loss reported in {out}"));
        assert!(line.contains("shutdown deadline passed"), "{line}");
        assert!(
            line.contains("disallow-latest-tag/validate-image-tag=pass"),
            "{line}"
        );
        named += 1;
    }
    assert!(named >= 3, "{named} losses named: {out}");
    assert!(out.contains("admission results were not written"), "{out}");
    sb.shutdown().await.unwrap();
}

/// A `configMap` context entry at admission: the webhook reads the
/// ConfigMap (no watch holds ConfigMaps) and denies with a message built
/// from its data; a pod that satisfies it is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_admission_reads_configmap_context_from_the_api_server() {
    if !kubectl_installed() {
        return;
    }
    let mut objects =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")]).unwrap();
    objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}));
    objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "registries", "namespace": "kyverno"}, "data": {"allowed": "ghcr.io"}}));
    objects.push(json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "allowed-registry"},
        "spec": {"validationFailureAction": "Enforce", "background": false, "rules": [{
            "name": "registry-label",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "context": [{"name": "registries", "configMap": {"name": "registries", "namespace": "kyverno"}}],
            "validate": {"message": "the registry label must be {{ registries.data.allowed }}",
                "deny": {"conditions": {"any": [{
                    "key": "{{ request.object.metadata.labels.registry || '' }}",
                    "operator": "NotEquals", "value": "{{ registries.data.allowed }}"}]}}}}]}}));
    let sb = Sandbox::start(SandboxConfig {
        objects,
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, sb.kubeconfig_yaml()).unwrap();
    let port = free_port();
    let mut server = serve(&sb.url(), port);
    tokio::task::block_in_place(|| {
        let run = |name: &str, registry: &str| {
            kubectl(
                &kc,
                &[
                    "run",
                    name,
                    "--image",
                    "nginx:1.27",
                    "--labels",
                    &format!("registry={registry}"),
                ],
            )
        };
        // Until the webhook is registered, pods are admitted: try new names.
        let start = Instant::now();
        let mut attempt = 0;
        let denied = loop {
            let out = run(&format!("from-hub-{attempt}"), "docker.io");
            let t = text(&out);
            if t.contains("denied the request") {
                break t;
            }
            assert!(out.status.success(), "{t}");
            assert!(start.elapsed() < BOUND, "never denied; last: {t}");
            attempt += 1;
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(
            denied.contains("registry-label: the registry label must be ghcr.io"),
            "{denied}"
        );
        let out = run("from-ghcr", "ghcr.io");
        assert!(out.status.success(), "{}", text(&out));
        assert!(sigterm_and_wait(&mut server).success());
    });
    sb.shutdown().await.unwrap();
}

/// README, `leash serve`: a `background: true` policy whose rule reads the
/// request's user is left out of the background scan (Kyverno's reason;
/// unit tests in leash-controller's sources) but still runs at admission:
/// a pod created through the sandbox (as `system:admin`) is denied with
/// the user in the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_reading_the_requests_user_still_runs_at_admission() {
    let admitting = Admitting::start(vec![
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "who"},
        "spec": {"validationFailureAction": "Enforce", "background": true, "rules": [{
            "name": "not-admin",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"message": "created by {{ request.userInfo.username }}",
                "deny": {"conditions": {"any": [{
                    "key": "{{ request.userInfo.username }}",
                    "operator": "Equals", "value": "system:admin"}]}}}}]}}),
    ])
    .await;
    let (status, body) = admitting.create_pod("web");
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("denied the request") && body.contains("created by system:admin"),
        "{body}"
    );
    admitting.stop().await;
}

/// README: a `policies.kyverno.io` `PolicyException` exempts the
/// ValidatingPolicy it names at admission in `leash serve` (watched with
/// the policies, through the same engine): of two pods the policy denies,
/// the one the exception's conditions match is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cel_policy_exception_exempts_at_admission() {
    let admitting = Admitting::start(vec![
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": "no-pods"},
            "spec": {"validationActions": ["Deny"],
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "validations": [{"expression": "false", "message": "no pods here"}]}}),
        json!({"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": "allow-exempt", "namespace": "kyverno"},
            "spec": {"policyRefs": [{"name": "no-pods", "kind": "ValidatingPolicy"}],
                "matchConditions": [{"name": "by-name",
                    "expression": "object.metadata.name == 'exempt'"}]}}),
    ])
    .await;
    let (status, body) = admitting.create_pod("other");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no pods here"), "{body}");
    let (status, body) = admitting.create_pod("exempt");
    assert_eq!(status, 201, "the exception exempts it: {body}");
    admitting.stop().await;
}

/// Issue 39: a policy with a typo is not served, and its status says why,
/// naming the field: not Ready, with the error as the condition's message
/// (a ClusterPolicy's `Ready` condition; a ValidatingPolicy's
/// `conditionStatus`). The valid policy beside them is served and Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_policy_is_not_ready_and_its_status_names_the_field() {
    let pods = json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["pods"]}]});
    let admitting = Admitting::start(vec![
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "typo"},
        "spec": {"validationFailureActon": "Enforce", "rules": [{
            "name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"message": "m", "deny": {}}}]}}),
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": "bad-action"},
            "spec": {"validationActions": ["Deni"], "matchConstraints": pods,
                "validations": [{"expression": "false", "message": "never"}]}}),
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": "no-web"},
            "spec": {"validationActions": ["Deny"], "matchConstraints": pods,
                "validations": [{"expression": "object.metadata.name != 'web'",
                    "message": "no web"}]}}),
    ])
    .await;
    let store = admitting.sb.store();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let cp = store
            .get("kyverno.io/v1", "ClusterPolicy", None, "typo")
            .unwrap();
        let bad = store
            .get(
                "policies.kyverno.io/v1",
                "ValidatingPolicy",
                None,
                "bad-action",
            )
            .unwrap();
        let good = store
            .get("policies.kyverno.io/v1", "ValidatingPolicy", None, "no-web")
            .unwrap();
        let cp_done = cp["status"]["ready"] == false;
        let bad_done = bad["status"]["conditionStatus"]["ready"] == false;
        let good_done = good["status"]["conditionStatus"]["ready"] == true;
        if cp_done && bad_done && good_done {
            let c = &cp["status"]["conditions"][0];
            assert_eq!(
                (
                    c["type"].as_str(),
                    c["status"].as_str(),
                    c["reason"].as_str()
                ),
                (Some("Ready"), Some("False"), Some("Failed")),
                "{cp}"
            );
            assert!(
                c["message"].as_str().unwrap().contains(
                    "spec.validationFailureActon: Invalid value: value provided for unknown field"
                ),
                "{cp}"
            );
            let message = bad["status"]["conditionStatus"]["message"]
                .as_str()
                .unwrap();
            assert!(
                message.contains(r#"spec.validationActions[0]: Unsupported value: "Deni""#),
                "{bad}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "statuses not written: {cp}\n{bad}\n{good}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Neither invalid policy is served: only the valid one denies.
    let (status, body) = admitting.create_pod("other");
    assert_eq!(status, 201, "{body}");
    let (status, body) = admitting.create_pod("web");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no web"), "{body}");
    // Created now, through the API server: the policy validation webhook
    // refuses the typo before it is stored; the fixed policy is created.
    let addr = admitting.sb.url().trim_start_matches("http://").to_owned();
    let policy = |field: &str| {
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "late"},
            "spec": {field: "Enforce", "rules": [{
                "name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "m", "pattern": {"metadata": {"name": "?*"}}}}]}})
    };
    let (status, body) = tokio::task::block_in_place(|| {
        http_post_json(
            &addr,
            "/apis/kyverno.io/v1/clusterpolicies",
            &policy("validationFailureActon"),
        )
    });
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("validate-policy.kyverno.svc")
            && body.contains(
                "spec.validationFailureActon: Invalid value: value provided for unknown field"
            ),
        "{body}"
    );
    let (status, body) = tokio::task::block_in_place(|| {
        http_post_json(
            &addr,
            "/apis/kyverno.io/v1/clusterpolicies",
            &policy("validationFailureAction"),
        )
    });
    assert_eq!(status, 201, "{body}");
    admitting.stop().await;
}

/// Issue 40, end to end with kubectl: a pod created without a label gets
/// it from a classic mutate rule, and an annotation from a MutatingPolicy
/// that sees the label the rule added; a validate policy that requires the
/// label admits it (the validating webhook sees the mutated object, as the
/// API server's chain passes it). A pod with its own label keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutation_end_to_end_with_kubectl() {
    if !kubectl_installed() {
        return;
    }
    let admitting = Admitting::start(vec![
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "add-team"},
            "spec": {"rules": [{"name": "default-team",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"+(team)": "platform"}}}}}]}}),
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
            "metadata": {"name": "note-team"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{annotations: {\"leash.io/team\": object.metadata.labels[\"team\"]}}}"}}]}}),
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "require-team"},
            "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "check-team",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "label team is required",
                    "pattern": {"metadata": {"labels": {"team": "?*"}}}}}]}}),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, admitting.sb.kubeconfig_yaml()).unwrap();
    tokio::task::block_in_place(|| {
        let run = kubectl(&kc, &["run", "plain", "--image", "nginx:1.27"]);
        assert!(run.status.success(), "{}", text(&run));
        let got = kubectl(&kc, &["get", "pod", "plain", "-o", "json"]);
        assert!(got.status.success(), "{}", text(&got));
        let pod: Value = serde_json::from_slice(&got.stdout).unwrap();
        assert_eq!(pod["metadata"]["labels"]["team"], "platform", "{pod}");
        assert_eq!(
            pod["metadata"]["annotations"]["leash.io/team"], "platform",
            "the MutatingPolicy ran on the classic rule's output: {pod}"
        );
        assert_eq!(
            pod["metadata"]["labels"]["run"], "plain",
            "kubectl's label stays"
        );

        let run = kubectl(
            &kc,
            &[
                "run",
                "own",
                "--image",
                "nginx:1.27",
                "--labels",
                "team=payments",
            ],
        );
        assert!(run.status.success(), "{}", text(&run));
        let got = kubectl(&kc, &["get", "pod", "own", "-o", "json"]);
        let pod: Value = serde_json::from_slice(&got.stdout).unwrap();
        assert_eq!(pod["metadata"]["labels"]["team"], "payments", "{pod}");
        assert_eq!(pod["metadata"]["annotations"]["leash.io/team"], "payments");
    });
    admitting.stop().await;
}

/// Found by Kyverno's chainsaw test of other-mpol/add-default-resources: a
/// CEL expression nested as deep as the parser allows (~95 levels) is
/// compiled and evaluated on the runtime's worker threads, and overflowed
/// their stack in a debug build, killing `leash serve`. The workers now
/// have room for it: the policy is served and answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_cel_expression_is_served_without_overflowing_the_stack() {
    let depth = 90;
    let expression = format!("{}false{}", "(".repeat(depth), ")".repeat(depth));
    let admitting = Admitting::start(vec![json!({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
        "metadata": {"name": "deep"},
        "spec": {"validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": expression, "message": "deeply denied"}]}})])
    .await;
    let (status, body) = admitting.create_pod("web");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("deeply denied"), "{body}");
    admitting.stop().await;
}

/// A sandbox with leash's CRDs, the `kyverno` namespace and `objects`, and
/// `leash serve --components admission` against it, ready (its webhook
/// registered from the policies).
struct Admitting {
    sb: Sandbox,
    server: ChildGuard,
}

impl Admitting {
    async fn start(objects: Vec<Value>) -> Admitting {
        let sb = crd_sandbox(|_| true, objects).await;
        let server = serve_admission_ready(&sb.url()).await;
        Admitting { sb, server }
    }

    /// Creates pod NAME in `default` through the sandbox's API (so through
    /// its admission chain): the status and the body.
    fn create_pod(&self, name: &str) -> (u16, String) {
        let addr = self.sb.url().trim_start_matches("http://").to_owned();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}});
        tokio::task::block_in_place(|| {
            http_post_json(&addr, "/api/v1/namespaces/default/pods", &pod)
        })
    }

    /// SIGTERM, the exit waited for, the sandbox shut down.
    async fn stop(mut self) {
        send_signal(&self.server.0, "TERM");
        tokio::task::block_in_place(|| wait_exit(&mut self.server.0, BOUND, "exit after SIGTERM"));
        self.sb.shutdown().await.unwrap();
    }
}

/// Admission, the background scan and generate share one watch per kind
/// (the watch hub): with all three running, Namespaces (the scan's and
/// admission's selectors, a generate rule's trigger) and Pods (the scan's)
/// are each watched once, while the scan still reports what it sees,
/// generate still generates for each namespace, and admission still reads
/// namespace labels (a namespaceSelector rule denies a pod only in the
/// labelled namespace).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_and_the_scan_watch_each_kind_once() {
    let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "no-latest"},
        "spec": {"validationFailureAction": "Enforce", "background": true, "rules": [{
            "name": "no-latest",
            "match": {"any": [{"resources": {"kinds": ["Pod"],
                "namespaceSelector": {"matchLabels": {"strict": "yes"}}}}]},
            "validate": {"message": "no latest", "pattern": {"spec": {"containers": [{"image": "!*:latest"}]}}}}]}});
    let generate = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "team-config"},
        "spec": {"rules": [{"name": "config",
            "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
            "generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "team",
                "namespace": "{{request.object.metadata.name}}",
                "data": {"data": {"owner": "platform"}}}}]}});
    let sb = crd_sandbox(|_| true, vec![policy, generate]).await;
    for (ns, labels) in [("strict", json!({"strict": "yes"})), ("lax", json!({}))] {
        sb.store()
            .create(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": labels}}))
            .unwrap();
    }
    sb.store()
        .create(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "old", "namespace": "strict"},
            "spec": {"containers": [{"name": "c", "image": "nginx:latest"}]}}))
        .unwrap();
    let health = format!("127.0.0.1:{}", free_port());
    let mut server = ChildGuard(
        leash()
            .args(["serve", "--server", &sb.url()])
            .args(["--components", "admission,reports,background"])
            .args(["--admission-listen", "127.0.0.1:0", "--health", &health])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run leash serve"),
    );
    wait_ready(&health).await;
    // The scan's report of the pod that was there before.
    let start = Instant::now();
    while sb
        .store()
        .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", Some("strict"))
        .unwrap()
        .iter()
        .all(|r| r["summary"]["fail"] != 1)
    {
        assert!(start.elapsed() < BOUND, "no report of the pod");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Generate, triggered by the namespaces created after the policy.
    let start = Instant::now();
    while ["strict", "lax"]
        .iter()
        .any(|ns| sb.store().get("v1", "ConfigMap", Some(ns), "team").is_err())
    {
        assert!(start.elapsed() < BOUND, "no generated ConfigMaps");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let watches = sb.open_watches();
    assert_eq!(watches.get("namespaces"), Some(&1), "{watches:?}");
    assert_eq!(watches.get("pods"), Some(&1), "{watches:?}");
    // Admission reads the namespace's labels from the shared cache.
    if kubectl_installed() {
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kubeconfig");
        std::fs::write(&kc, sb.kubeconfig_yaml()).unwrap();
        tokio::task::block_in_place(|| {
            let run = |ns: &str| kubectl(&kc, &["run", "new", "-n", ns, "--image", "nginx:latest"]);
            let denied = run("strict");
            assert!(!denied.status.success(), "{}", text(&denied));
            assert!(text(&denied).contains("no latest"), "{}", text(&denied));
            let admitted = run("lax");
            assert!(admitted.status.success(), "{}", text(&admitted));
        });
    }
    sigterm_and_wait(&mut server);
    sb.shutdown().await.unwrap();
}

/// Kyverno's global context at admission: `leash serve` feeds the
/// cluster's GlobalContextEntry objects into one store that admission (and
/// the scan and generate) read. A ClusterPolicy's `globalReference` (the
/// entry's data and a projection) and a ValidatingPolicy's CEL
/// `globalContext.Get` deny a ConfigMap with messages built from the
/// entry's data (three deployments, two in `x`). The GlobalContextEntry CRD
/// is installed after leash has started (Kyverno's CRDs applied after
/// leash's): it is found on a later discovery, not missed for good. The
/// entry's state is written to its status (a `Ready` condition,
/// `lastRefreshTime`), as Kyverno writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_admission_reads_the_global_context() {
    let entry = json!({
        "apiVersion": "kyverno.io/v2beta1", "kind": "GlobalContextEntry",
        "metadata": {"name": "deployments"},
        "spec": {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"},
                 "projections": [{"name": "in-x", "jmesPath": "[?metadata.namespace=='x'] | length(@)"}]}
    });
    let mut objects = Vec::new();
    for ns in ["x", "y"] {
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    }
    for (i, ns) in ["x", "x", "y"].iter().enumerate() {
        objects.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("d{i}"), "namespace": ns},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}
        }));
    }
    objects.push(json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "global"},
        "spec": {"validationFailureAction": "Enforce", "background": false, "rules": [{
            "name": "counts",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
            "context": [
                {"name": "all", "globalReference": {"name": "deployments", "jmesPath": "length(@)"}},
                {"name": "inx", "globalReference": {"name": "deployments.in-x"}}],
            "validate": {"message": "{{ all }} deployments, {{ inx }} in x",
                "deny": {"conditions": {"all": [{"key": "{{ all }}", "operator": "Equals", "value": 3}]}}}}]}}));
    objects.push(json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
        "metadata": {"name": "global-cel"},
        "spec": {"validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "inx", "expression": "globalContext.Get(\"deployments\", \"in-x\")"}],
            "validations": [{"expression": "int(variables.inx) != 2",
                "messageExpression": "'CEL reads ' + string(int(variables.inx)) + ' in x'"}]}}));
    // Kyverno's CRDs but GlobalContextEntry's, which is installed once
    // leash is serving.
    let is_entry_crd = |crd: &Value| crd["spec"]["names"]["kind"] == "GlobalContextEntry";
    let sb = crd_sandbox(|crd| !is_entry_crd(crd), objects).await;
    let server = serve_admission_ready(&sb.url()).await;
    let api = sb.url().trim_start_matches("http://").to_string();
    let crd = leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")])
        .unwrap()
        .into_iter()
        .find(|crd| is_entry_crd(crd))
        .expect("the GlobalContextEntry CRD in deploy/crds");
    for (path, object) in [
        (
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            crd,
        ),
        ("/apis/kyverno.io/v2beta1/globalcontextentries", entry),
    ] {
        let (status, body) = tokio::task::block_in_place(|| http_post_json(&api, path, &object));
        assert_eq!(status, 201, "POST {path}: {body}");
    }
    let start = Instant::now();
    let mut attempt = 0;
    // Until the entry has its first data, the rules give errors (and the
    // Enforce policy denies with them): try again with new names.
    let body = loop {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("c{attempt}"), "namespace": "x"}});
        let (status, body) = tokio::task::block_in_place(|| {
            http_post_json(&api, "/api/v1/namespaces/x/configmaps", &cm)
        });
        assert_ne!(status, 201, "admitted: {body}");
        if body.contains("3 deployments, 2 in x") && body.contains("CEL reads 2 in x") {
            break body;
        }
        assert!(
            start.elapsed() < BOUND,
            "never denied with the entry's data: {body}"
        );
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(body.contains("global"), "{body}");
    // The entry's state is written back to its status, as Kyverno does.
    let start = Instant::now();
    let status = loop {
        let (_, text) = tokio::task::block_in_place(|| {
            http_get(
                &api,
                "/apis/kyverno.io/v2beta1/globalcontextentries/deployments",
            )
        });
        let object: Value = serde_json::from_str(&text).unwrap();
        if object["status"]["conditions"][0]["status"] == "True" {
            break object["status"].clone();
        }
        assert!(start.elapsed() < BOUND, "status never ready: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let condition = &status["conditions"][0];
    assert_eq!(
        (
            &condition["type"],
            &condition["status"],
            &condition["reason"]
        ),
        (&json!("Ready"), &json!("True"), &json!("Succeeded")),
        "{status}"
    );
    assert!(status["lastRefreshTime"].is_string(), "{status}");
    drop(server);
    sb.shutdown().await.unwrap();
}
