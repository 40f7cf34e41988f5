//! `leash apply --registry` against a real registry (Debian's
//! docker-registry on 127.0.0.1, `leash_images::testing`): `imageRegistry`
//! context entries and CEL's `image.GetMetadata` read what the registry
//! holds; without `--registry` the entry is left out, as Kyverno's CLI
//! leaves it; an unreachable registry is the rule's error, naming the
//! image, within the registry timeout.

use std::fs;
use std::time::{Duration, Instant};

use leash_images::testing::LocalRegistry;

use crate::support::{apply, assert_test_fails, leash, said, stderr, stdout};

const POLICIES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: vendor-label
spec:
  rules:
  - name: vendor
    match:
      any:
      - resources:
          kinds: [Pod]
    context:
    - name: imageData
      imageRegistry:
        reference: "{{ request.object.spec.containers[0].image }}"
    validate:
      message: "image {{ imageData.resolvedImage }} is not built by acme"
      deny:
        conditions:
          any:
          - key: "{{ imageData.configData.config.Labels.vendor || '' }}"
            operator: NotEquals
            value: acme
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: amd64-only
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  validations:
  - expression: >-
      object.spec.containers.all(c, image.GetMetadata(c.image).config.architecture == 'amd64')
    message: images must be built for amd64
"#;

fn pod(name: &str, image: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers:\n  - {{name: c, image: \"{image}\"}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_registry_reads_image_data_from_the_registry() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let (acme, _) = reg.push("team/app:1.0", &[("vendor", "acme")]).await;
    reg.push("team/other:2.0", &[("vendor", "other")]).await;
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("policies.yaml"), POLICIES).unwrap();
    let pods = format!(
        "{}{}",
        pod("acme", &format!("{}/team/app:1.0", reg.host)),
        pod("other", &format!("{}/team/other:2.0", reg.host))
    );
    fs::write(dir.path().join("pods.yaml"), pods).unwrap();
    let run = |extra: &[&str]| {
        apply(
            &dir.path().join("policies.yaml"),
            &dir.path().join("pods.yaml"),
            extra,
        )
    };

    let out = run(&["--registry"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // acme passes both; other fails vendor-label and passes amd64-only.
    assert!(
        text.contains("pass: 3, fail: 1, warn: 0, error: 0, skip: 0"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "policy vendor-label -> resource Pod/default/other rule vendor: image {}/team/other@sha256:",
            reg.host
        )),
        "{text}"
    );
    assert!(!text.contains(&acme), "the acme pod passes: {text}");

    // Without --registry: the entry is left out (the `||` default
    // applies, both fail vendor-label) and image.GetMetadata has no data.
    let out = run(&[]);
    let text = stdout(&out);
    assert!(
        text.contains("pass: 0, fail: 2, warn: 0, error: 2, skip: 0"),
        "{text}"
    );
    assert!(text.contains("failed to get image data"), "{text}");

    // The registry gone: each rule errors naming the image, bounded.
    let host = reg.host.clone();
    drop(reg);
    let started = Instant::now();
    let out = run(&["--registry", "--registry-timeout", "3s"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("pass: 0, fail: 0, warn: 0, error: 4, skip: 0"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "failed to fetch image descriptor: {host}/team/app:1.0, error: image {host}/team/app:1.0: registry {host}"
        )),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "bounded");
}

/// A ClusterPolicy whose rule reads the first container's image from the
/// registry (`imageRegistry`) and denies it unless its config's `vendor`
/// label is `acme`.
fn vendor_policy(action: &str, background: bool, message: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "vendor-label"},
        "spec": {"validationFailureAction": action, "background": background, "rules": [{
            "name": "vendor",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "context": [{"name": "imageData",
                "imageRegistry": {"reference": "{{ request.object.spec.containers[0].image }}"}}],
            "validate": {"message": message,
                "deny": {"conditions": {"any": [{
                    "key": "{{ imageData.configData.config.Labels.vendor || '' }}",
                    "operator": "NotEquals", "value": "acme"}]}}}}]}})
}

fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// End to end with kubectl: `leash serve` reads the registry at admission.
/// A pod whose image the registry says acme built is admitted; one whose
/// image is not is denied with the policy's message (an Enforce
/// ClusterPolicy's `imageRegistry` entry); with the registry gone, a pod
/// with an image not read before is denied with the rule's error naming
/// the image and the registry (failure policy Fail), within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_image_data_at_admission() {
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("team/app:1.0", &[("vendor", "acme")]).await;
    reg.push("team/other:2.0", &[("vendor", "other")]).await;
    reg.push("team/late:3.0", &[("vendor", "acme")]).await;
    let policy = vendor_policy(
        "Enforce",
        false,
        "image {{ imageData.resolvedImage }} is not built by acme",
    );
    let host = reg.host.clone();
    serving(
        vec![policy],
        |_| {},
        &["--registry-timeout", "3s"],
        move |kc| {
            let run = |name: &str, image: &str| {
                kubectl(kc, &["run", name, "--image", &format!("{host}/{image}")])
            };
            let (ok, out) = run("acme", "team/app:1.0");
            assert!(ok, "{out}");
            let (ok, out) = run("other", "team/other:2.0");
            assert!(!ok, "{out}");
            assert!(
                out.contains("denied the request")
                    && out.contains(&format!("vendor: image {host}/team/other@sha256:"))
                    && out.contains("is not built by acme"),
                "{out}"
            );
            drop(reg);
            let started = Instant::now();
            let (ok, out) = run("late", "team/late:3.0");
            assert!(!ok, "{out}");
            assert!(
                out.contains("denied the request")
                    && out.contains(&format!(
                        "failed to fetch image descriptor: {host}/team/late:3.0"
                    ))
                    && out.contains(&format!("registry {host}")),
                "{out}"
            );
            assert!(started.elapsed() < Duration::from_secs(30), "bounded");
            // The image read before is served from the cache, registry gone.
            let (ok, out) = run("acme-again", "team/app:1.0");
            assert!(ok, "{out}");
        },
    )
    .await;
}

/// The background scan reads the registry too: pods already in the
/// cluster get PolicyReports whose results are what the registry says (an
/// Audit policy's `imageRegistry` entry): pass for acme's image, fail for
/// the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_scan_reads_image_data() {
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("team/app:1.0", &[("vendor", "acme")]).await;
    reg.push("team/other:2.0", &[("vendor", "other")]).await;
    let host = reg.host.clone();
    let pod = |name: &str, image: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c", "image": format!("{host}/{image}")}]}})
    };
    let policy = vendor_policy("Audit", true, "not built by acme");
    let objects = vec![
        policy,
        pod("acme", "team/app:1.0"),
        pod("other", "team/other:2.0"),
    ];
    let flags = [
        "--registry-timeout",
        "3s",
        "--report-cleanup-interval",
        "1s",
    ];
    background_scan(objects, &flags, reg, |results| {
        assert_eq!(results["acme"]["result"], "pass", "{results:?}");
        assert_eq!(results["other"]["result"], "fail", "{results:?}");
        assert_eq!(
            results["other"]["message"], "not built by acme",
            "{results:?}"
        );
    })
    .await;
}

/// `leash serve --components reports` (with `flags`) against a sandbox
/// holding `objects`: `check` runs on the PolicyReport results once two
/// resources have one ([`report_results`]), then `reg` is dropped and serve
/// is stopped with SIGTERM.
async fn background_scan(
    objects: Vec<serde_json::Value>,
    flags: &[&str],
    reg: LocalRegistry,
    check: impl FnOnce(&std::collections::BTreeMap<String, serde_json::Value>),
) {
    let sb = crate::support::crd_sandbox(|_| true, objects).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    fs::write(&kc, sb.kubeconfig_yaml()).unwrap();
    let mut server = crate::support::ChildGuard(
        leash()
            .args(["serve", "--server", &sb.url(), "--components", "reports"])
            .args(flags)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run leash serve"),
    );
    tokio::task::block_in_place(move || {
        check(&report_results(&kc, 2));
        drop(reg);
        crate::support::sigterm_and_wait(&mut server);
    });
    sb.shutdown().await.unwrap();
}

/// The PolicyReport results of namespace `default` by the resource they
/// are about (the last result of each), once `want` resources have one
/// (a hang guard: `BOUND`).
fn report_results(
    kc: &std::path::Path,
    want: usize,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let started = Instant::now();
    loop {
        let (ok, out) = kubectl(kc, &["get", "policyreports", "-n", "default", "-o", "json"]);
        assert!(ok, "{out}");
        let list: serde_json::Value = serde_json::from_str(&out).unwrap();
        let mut found = std::collections::BTreeMap::new();
        for report in list["items"].as_array().into_iter().flatten() {
            let name = report["scope"]["name"].as_str().unwrap_or("").to_string();
            for r in report["results"].as_array().into_iter().flatten() {
                found.insert(name.clone(), r.clone());
            }
        }
        if found.len() == want {
            return found;
        }
        assert!(started.elapsed() < crate::support::BOUND, "reports: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `leash test --registry`: a test whose rows depend on what the registry
/// says passes with it; without it the `imageRegistry` entry is left out
/// (as `kyverno test` leaves it) and the row expecting a pass fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_registry_reads_image_data_for_a_tests_rows() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    reg.push("team/app:1.0", &[("vendor", "acme")]).await;
    reg.push("team/other:2.0", &[("vendor", "other")]).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = POLICIES.split("\n---\n").next().unwrap();
    fs::write(dir.path().join("policy.yaml"), policy).unwrap();
    fs::write(
        dir.path().join("resources.yaml"),
        format!(
            "{}{}",
            pod("acme", &format!("{}/team/app:1.0", reg.host)),
            pod("other", &format!("{}/team/other:2.0", reg.host))
        ),
    )
    .unwrap();
    fs::write(
        dir.path().join("kyverno-test.yaml"),
        r#"apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: vendors}
policies: [policy.yaml]
resources: [resources.yaml]
results:
- {policy: vendor-label, rule: vendor, kind: Pod, resources: [acme], result: pass}
- {policy: vendor-label, rule: vendor, kind: Pod, resources: [other], result: fail}
"#,
    )
    .unwrap();
    let out = leash()
        .arg("test")
        .arg(dir.path())
        .arg("--registry")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    assert_test_fails(dir.path(), "1 passed, 1 failed");
}

/// A `verifyImages` ClusterPolicy verifying with a cosign public key.
fn verify_policy(key_pem: &str, host: &str, action: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "signed-images"},
        "spec": {"validationFailureAction": action, "background": false, "rules": [{
            "name": "check-signature",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "verifyImages": [{
                "imageReferences": [format!("{host}/team/*")],
                "skipImageReferences": [format!("{host}/team/skipped*")],
                "attestors": [{"entries": [{"keys": {"publicKeys": key_pem,
                    "rekor": {"ignoreTlog": true}}}]}]}]}]}})
}

/// `reg` (`None` where no registry could start) with `team/signed:1`,
/// signed with `signing_key(seed)`, and `team/unsigned:1` pushed: the
/// registry, the key's public PEM and the signature's digest.
async fn signed_and_unsigned(
    reg: Option<LocalRegistry>,
    seed: u8,
) -> Option<(LocalRegistry, String, String)> {
    use leash_images::testing::{public_key_pem, signing_key};
    let reg = reg?;
    reg.push("team/signed:1", &[]).await;
    reg.push("team/unsigned:1", &[]).await;
    let key = signing_key(seed);
    let digest = reg.sign("team/signed:1", &key).await;
    Some((reg, public_key_pem(&key), digest))
}

/// A `kubernetes.io/dockerconfigjson` Secret `kyverno/regcred` with the
/// credentials of the test user, `password`, for the registry at `host`.
fn regcred(host: &str, password: &str) -> serde_json::Value {
    use base64::Engine as _;
    use leash_images::testing::TEST_USER;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = serde_json::json!({"auths": {host: {
        "auth": b64(&format!("{TEST_USER}:{password}"))}}});
    serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "regcred", "namespace": "kyverno"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": b64(&config.to_string())}})
}

/// `leash serve` (admission, `flags`) against a sandbox holding `policies`
/// (and what `seed` adds to its store); `body` runs with the kubeconfig
/// path (off the runtime's threads), then serve is stopped with SIGTERM
/// and must exit.
async fn serving(
    policies: Vec<serde_json::Value>,
    seed: impl FnOnce(&leash_sandbox::Sandbox),
    flags: &[&str],
    body: impl FnOnce(&std::path::Path),
) {
    let sb = crate::support::crd_sandbox(|_| true, policies).await;
    seed(&sb);
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    fs::write(&kc, sb.kubeconfig_yaml()).unwrap();
    let mut server = crate::support::serve_admission_ready_with(&sb.url(), flags).await;
    tokio::task::block_in_place(|| {
        body(&kc);
        crate::support::sigterm_and_wait(&mut server);
    });
    sb.shutdown().await.unwrap();
}

/// With kubectl: a pod `name` of `image` is admitted, its image pinned to
/// `digest` (`IMAGE@DIGEST`, mutateDigest).
fn admitted_and_pinned(kc: &std::path::Path, name: &str, image: &str, digest: &str) {
    let (ok, out) = kubectl(kc, &["run", name, "--image", image]);
    assert!(ok, "{out}");
    let (ok, pinned) = kubectl(
        kc,
        &[
            "get",
            "pod",
            name,
            "-o",
            "jsonpath={.spec.containers[0].image}",
        ],
    );
    assert!(ok, "{pinned}");
    assert_eq!(pinned, format!("{image}@{digest}"));
}

/// With kubectl: a pod `name` of `image` is denied; what kubectl said.
fn denied(kc: &std::path::Path, name: &str, image: &str) -> String {
    let (ok, out) = kubectl(kc, &["run", name, "--image", image]);
    assert!(!ok, "{out}");
    assert!(out.contains("denied the request"), "{out}");
    out
}

/// `leash apply POLICY -r PODS --registry --detailed-results` in a
/// temporary directory: the exit code and what it printed (stdout, then
/// stderr).
fn apply_with_registry(policy: &serde_json::Value, pods: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("policy.yaml"),
        serde_json::to_string(policy).unwrap(),
    )
    .unwrap();
    fs::write(dir.path().join("pods.yaml"), pods).unwrap();
    let out = apply(
        &dir.path().join("policy.yaml"),
        &dir.path().join("pods.yaml"),
        &["--registry", "--detailed-results"],
    );
    (out.status.code(), stdout(&out), stderr(&out))
}

/// `verifyImages` with a public key, `leash apply --registry`: a signed
/// image passes in Kyverno's words, an unsigned one and one signed with
/// another key fail naming the attestor, an image the references do not
/// match gives no result, a skipped one is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_verifies_cosign_signatures_with_public_keys() {
    use leash_images::testing::{public_key_pem, signing_key};
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    for tag in [
        "team/signed:1",
        "team/unsigned:1",
        "team/other-key:1",
        "team/skipped:1",
        "elsewhere/app:1",
    ] {
        reg.push(tag, &[]).await;
    }
    let key = signing_key(3);
    reg.sign("team/signed:1", &key).await;
    reg.sign("team/other-key:1", &signing_key(4)).await;
    let policy = verify_policy(&public_key_pem(&key), &reg.host, "Enforce");
    let pods: String = ["signed", "unsigned", "other-key", "skipped"]
        .iter()
        .map(|n| pod(n, &format!("{}/team/{n}:1", reg.host)))
        .chain([pod("elsewhere", &format!("{}/elsewhere/app:1", reg.host))])
        .collect();
    let (code, text, err) = apply_with_registry(&policy, &pods);
    assert_eq!(code, Some(1), "{text}{err}");
    let host = &reg.host;
    for want in [
        format!(
            // Verified after mutateDigest pinned it: named as Kyverno's
            // ImageInfo names a digest reference (the tag left out).
            "PASS: policy signed-images -> resource Pod/default/signed rule check-signature: verified image signatures for {host}/team/signed@sha256:"
        ),
        format!(
            "FAIL: policy signed-images -> resource Pod/default/unsigned rule check-signature: failed to verify image {host}/team/unsigned:1: .attestors[0].entries[0].keys: no signatures found"
        ),
        format!(
            "FAIL: policy signed-images -> resource Pod/default/other-key rule check-signature: failed to verify image {host}/team/other-key:1: .attestors[0].entries[0].keys: no matching signatures"
        ),
        format!(
            "SKIP: policy signed-images -> resource Pod/default/skipped rule check-signature: skipping image reference image {host}/team/skipped:1, policy signed-images ruleName check-signature"
        ),
        "pass: 1, fail: 2, warn: 0, error: 0, skip: 1".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
    assert!(!text.contains("Pod/default/elsewhere"), "{text}");
}

/// `leash apply --cluster --registry`: the cluster's pods are verified as
/// the files' are. Each image is read from the registry between
/// evaluations (the engine never waits on it), and the results are
/// Kyverno's: the signed image passes, the unsigned one fails naming the
/// attestor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_cluster_verifies_the_cluster_pods_images() {
    let Some((reg, key, _)) = signed_and_unsigned(LocalRegistry::start(), 6).await else {
        return;
    };
    let policy = verify_policy(&key, &reg.host, "Enforce");
    let host = reg.host.clone();
    let pod = |name: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"containers": [{"name": "c", "image": format!("{host}/team/{name}:1")}]}})
    };
    let sandbox = leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig {
        objects: vec![
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
            pod("signed"),
            pod("unsigned"),
        ],
        ..leash_sandbox::SandboxConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    fs::write(&file, serde_json::to_string(&policy).unwrap()).unwrap();
    let url = sandbox.url();
    let out = tokio::task::block_in_place(|| {
        leash()
            .arg("apply")
            .arg(&file)
            .args(["--cluster", "-A", "--server", &url])
            .args(["--registry", "--detailed-results"])
            .output()
            .unwrap()
    });
    sandbox.shutdown().await.unwrap();
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}{err}");
    for want in [
        format!(
            "PASS: policy signed-images -> resource Pod/team/signed rule check-signature: verified image signatures for {host}/team/signed@sha256:"
        ),
        format!(
            "FAIL: policy signed-images -> resource Pod/team/unsigned rule check-signature: failed to verify image {host}/team/unsigned:1: .attestors[0].entries[0].keys: no signatures found"
        ),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}{err}");
    }
}

/// End to end with kubectl: an Enforce `verifyImages` policy admits a pod
/// whose image is signed with its key, its tag pinned to the verified
/// digest (`mutateDigest`), and denies an unsigned one with Kyverno's
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_admits_signed_images_and_denies_unsigned_ones() {
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some((reg, key, digest)) = signed_and_unsigned(LocalRegistry::start(), 5).await else {
        return;
    };
    let policy = verify_policy(&key, &reg.host, "Enforce");
    let host = reg.host.clone();
    serving(vec![policy], |_| {}, &[], |kc| {
        // mutateDigest (the default): the tag is pinned to the verified
        // digest by the mutating webhook.
        admitted_and_pinned(kc, "signed", &format!("{host}/team/signed:1"), &digest);
        let out = denied(kc, "unsigned", &format!("{host}/team/unsigned:1"));
        assert!(
            out.contains("signed-images:")
                && out.contains(&format!(
                    "check-signature: 'failed to verify image {host}/team/unsigned:1: .attestors[0].entries[0].keys: no signatures found'"
                )),
            "{out}"
        );
    })
    .await;
}

/// A key kept in a Secret (`publicKeys: k8s://NAMESPACE/NAME`, cosign's
/// `cosign.pub`): `leash serve` reads the Secret between evaluations and
/// verifies with its key, so the signed image is admitted (its digest
/// pinned) and the unsigned one denied; a policy naming a Secret that does
/// not exist denies, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_verifies_with_a_key_kept_in_a_secret() {
    use base64::Engine as _;
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some((reg, key, digest)) = signed_and_unsigned(LocalRegistry::start(), 8).await else {
        return;
    };
    let policy = verify_policy("k8s://keys/cosign", &reg.host, "Enforce");
    let mut missing = verify_policy("k8s://keys/nothing", &reg.host, "Enforce");
    missing["metadata"]["name"] = serde_json::json!("missing-key");
    missing["spec"]["rules"][0]["verifyImages"][0]["imageReferences"] =
        serde_json::json!([format!("{}/team/unsigned*", reg.host)]);
    let seed = |sb: &leash_sandbox::Sandbox| {
        let store = sb.store();
        store
            .create(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "keys"}}))
            .unwrap();
        store
            .create(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "cosign", "namespace": "keys"},
                "data": {"cosign.pub": base64::engine::general_purpose::STANDARD.encode(&key)}}))
            .unwrap();
    };
    let host = reg.host.clone();
    serving(vec![policy, missing], seed, &[], |kc| {
        admitted_and_pinned(kc, "signed", &format!("{host}/team/signed:1"), &digest);
        let out = denied(kc, "unsigned", &format!("{host}/team/unsigned:1"));
        assert!(
            out.contains(&format!(
                "check-signature: 'failed to verify image {host}/team/unsigned:1: .attestors[0].entries[0].keys: no signatures found'"
            )),
            "{out}"
        );
        assert!(
            out.contains("checking if secret exists: secrets \"nothing\" not found"),
            "the policy whose Secret is missing denies, naming it: {out}"
        );
    })
    .await;
}

/// A rotated image pull Secret is used without a restart: serve starts
/// with a Secret whose password the registry refuses (the signed image's
/// pod is denied, the registry's refusal named), the Secret is replaced
/// with the right password, and within --image-pull-secrets-refresh the
/// same pod is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_rotated_image_pull_secrets() {
    use leash_images::testing::{TEST_PASSWORD, public_key_pem, signing_key};
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some(reg) = LocalRegistry::start_with_auth() else {
        return;
    };
    reg.push("team/signed:1", &[]).await;
    let key = signing_key(9);
    reg.sign("team/signed:1", &key).await;
    let mut policy = verify_policy(&public_key_pem(&key), &reg.host, "Enforce");
    policy["spec"]["rules"][0]["verifyImages"][0]["mutateDigest"] = serde_json::json!(false);
    policy["spec"]["rules"][0]["verifyImages"][0]["verifyDigest"] = serde_json::json!(false);
    let sb = crate::support::crd_sandbox(
        |_| true,
        vec![policy, regcred(&reg.host, "not-the-password")],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    fs::write(&kc, sb.kubeconfig_yaml()).unwrap();
    let mut server = crate::support::serve_admission_ready_with(
        &sb.url(),
        &[
            "--image-pull-secrets",
            "regcred",
            "--image-pull-secrets-refresh",
            "1s",
        ],
    )
    .await;
    let host = reg.host.clone();
    let store = sb.store();
    tokio::task::block_in_place(move || {
        let image = format!("{host}/team/signed:1");
        let (ok, out) = kubectl(&kc, &["run", "before", "--image", &image]);
        assert!(!ok, "the wrong password is refused: {out}");
        assert!(
            out.contains(&format!("failed to verify image {image}")),
            "{out}"
        );
        let mut rotated = regcred(&host, TEST_PASSWORD);
        let current = store
            .get("v1", "Secret", Some("kyverno"), "regcred")
            .unwrap();
        rotated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        store.update(rotated).unwrap();
        let start = std::time::Instant::now();
        let mut n = 0;
        loop {
            n += 1;
            let (ok, out) = kubectl(&kc, &["run", &format!("after-{n}"), "--image", &image]);
            if ok {
                break;
            }
            assert!(
                start.elapsed() < crate::support::BOUND,
                "the rotated Secret was never used: {out}"
            );
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        drop(reg);
        crate::support::sigterm_and_wait(&mut server);
    });
    sb.shutdown().await.unwrap();
}

/// A registry that refuses anonymous reads is read with a
/// `kubernetes.io/dockerconfigjson` Secret's credentials, named by `leash
/// serve --image-pull-secrets` or by the policy itself (its verifyImages
/// entry's `imageRegistryCredentials.secrets`), so a signed
/// image of it is admitted and an unsigned one denied as on any registry
/// (kubectl).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_private_registries_with_image_pull_secrets() {
    private_registry(true).await;
}

/// See [`serve_reads_private_registries_with_image_pull_secrets`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_private_registries_with_the_policys_credentials() {
    private_registry(false).await;
}

async fn private_registry(by_flag: bool) {
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some((reg, key, _)) = signed_and_unsigned(LocalRegistry::start_with_auth(), 6).await else {
        return;
    };
    let secret = regcred(&reg.host, leash_images::testing::TEST_PASSWORD);
    let mut policy = verify_policy(&key, &reg.host, "Enforce");
    // Pinning digests reads the registry too; this test is about reading.
    policy["spec"]["rules"][0]["verifyImages"][0]["mutateDigest"] = serde_json::json!(false);
    policy["spec"]["rules"][0]["verifyImages"][0]["verifyDigest"] = serde_json::json!(false);
    let flags: &[&str] = if by_flag {
        &["--image-pull-secrets", "regcred"]
    } else {
        policy["spec"]["rules"][0]["verifyImages"][0]["imageRegistryCredentials"] =
            serde_json::json!({"secrets": ["regcred"]});
        &[]
    };
    let host = reg.host.clone();
    serving(
        vec![policy, secret],
        |_| {},
        flags,
        |kc| {
            let image = |name: &str| format!("{host}/team/{name}:1");
            // The policy's Secret is read as the policy is served: allow its
            // read a moment (a pod before it is denied, the registry's
            // refusal named), bounded.
            let start = std::time::Instant::now();
            for attempt in 0.. {
                let (ok, out) = kubectl(
                    kc,
                    &[
                        "run",
                        &format!("signed-{attempt}"),
                        "--image",
                        &image("signed"),
                    ],
                );
                if ok {
                    break;
                }
                assert!(!by_flag && start.elapsed() < crate::support::BOUND, "{out}");
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            let out = denied(kc, "unsigned", &image("unsigned"));
            assert!(out.contains("no signatures found"), "{out}");
        },
    )
    .await;
    drop(reg);
}

/// An ImageValidatingPolicy in the background scan: pods already in the
/// cluster get PolicyReport results with its source, pass for the signed
/// image (by digest), fail with its message for the unsigned one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_scan_runs_image_validating_policies() {
    use leash_images::testing::{public_key_pem, signing_key};
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let signed = reg.push("team/signed:1", &[]).await.0;
    let unsigned = reg.push("team/unsigned:1", &[]).await.0;
    let key = signing_key(8);
    reg.sign("team/signed:1", &key).await;
    let host = reg.host.clone();
    let pod = |name: &str, image: String| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"containers": [{"name": "c", "image": image}]}})
    };
    let ivpol = serde_json::json!({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
        "metadata": {"name": "signed-images"},
        "spec": {
            "validationActions": ["Audit"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]},
            "matchImageReferences": [{"glob": format!("{host}/team/*")}],
            "attestors": [{"name": "team", "cosign": {"key": {"data": public_key_pem(&key)},
                "ctlog": {"insecureIgnoreTlog": true}}}],
            "validations": [{"expression":
                "images.containers.map(i, verifyImageSignatures(i, [attestors.team])).all(n, n > 0)",
                "message": "unsigned image"}]}});
    let objects = vec![
        ivpol,
        pod("signed", format!("{host}/team/signed:1@{signed}")),
        pod("unsigned", format!("{host}/team/unsigned:1@{unsigned}")),
    ];
    background_scan(objects, &["--registry-timeout", "3s"], reg, |results| {
        assert_eq!(results["signed"]["result"], "pass", "{results:?}");
        assert_eq!(results["unsigned"]["result"], "fail", "{results:?}");
        assert_eq!(
            results["unsigned"]["message"], "unsigned image",
            "{results:?}"
        );
        assert_eq!(
            results["unsigned"]["source"], "KyvernoImageValidatingPolicy",
            "{results:?}"
        );
    })
    .await;
}

/// Notary Project signatures made by the real `notation` CLI, end to end
/// with kubectl: a ClusterPolicy's `type: Notary` verification (its
/// `certificates` the trust store) admits a pod whose image is signed,
/// its tag pinned to the verified digest, and denies an unsigned one with
/// Kyverno's message; an ImageValidatingPolicy's `notary` attestor admits
/// the signed image whose signed SBOM (an OCI referrer, `oras attach`) is
/// CycloneDX, and denies one signed with another certificate and one
/// without an SBOM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_verifies_notary_signatures() {
    use leash_images::testing::Notation;
    if !crate::support::kubectl_installed() {
        return;
    }
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let Some(notation) = Notation::find() else {
        return;
    };
    let host = reg.host.clone();
    let cert = notation.generate_test_key("team");
    notation.generate_test_key("other");
    let mut digests = std::collections::HashMap::new();
    for repo in [
        "team/signed",
        "team/unsigned",
        "apps/signed",
        "apps/other",
        "apps/nosbom",
    ] {
        let (digest, _) = reg.push(&format!("{repo}:1"), &[]).await;
        digests.insert(repo, digest);
    }
    for (repo, key) in [
        ("team/signed", "team"),
        ("apps/signed", "team"),
        ("apps/other", "other"),
        ("apps/nosbom", "team"),
    ] {
        notation.sign(&format!("{host}/{repo}@{}", digests[repo]), key, &[]);
    }
    let sbom = notation.attach(
        &format!("{host}/apps/signed@{}", digests["apps/signed"]),
        "sbom/cyclone-dx",
        r#"{"bomFormat": "CycloneDX", "specVersion": "1.5"}"#,
    );
    notation.sign(&format!("{host}/apps/signed@{sbom}"), "team", &[]);
    let cpol = serde_json::json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "notary-images"},
        "spec": {"validationFailureAction": "Enforce", "background": false, "rules": [{
            "name": "check-notary",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "verifyImages": [{
                "type": "Notary",
                "imageReferences": [format!("{host}/team/*")],
                "attestors": [{"count": 1, "entries": [{"certificates": {"cert": cert}}]}]}]}]}});
    let ivpol = serde_json::json!({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
        "metadata": {"name": "notary-apps"},
        "spec": {
            "validationActions": ["Deny"],
            "evaluation": {"background": {"enabled": false}},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchImageReferences": [{"glob": format!("{host}/apps/*")}],
            "attestors": [{"name": "notary", "notary": {"certs": {"value": cert}}}],
            "attestations": [{"name": "sbom", "referrer": {"type": "sbom/cyclone-dx"}}],
            "validations": [{
                "expression": "images.containers.map(i, verifyImageSignatures(i, [attestors.notary])).all(n, n > 0)",
                "message": "not signed by the team"}, {
                "expression": "images.containers.map(i, verifyAttestationSignatures(i, attestations.sbom, [attestors.notary])).all(n, n > 0)",
                "message": "no SBOM signed by the team"}, {
                "expression": "images.containers.all(i, extractPayload(i, attestations.sbom).bomFormat == 'CycloneDX')",
                "message": "the SBOM is not CycloneDX"}]}});
    serving(vec![cpol, ivpol], |_| {}, &[], |kc| {
        let image = |repo: &str| format!("{host}/{repo}:1");
        admitted_and_pinned(kc, "signed", &image("team/signed"), &digests["team/signed"]);
        let out = denied(kc, "unsigned", &image("team/unsigned"));
        let by_digest = format!("{host}/team/unsigned@{}", digests["team/unsigned"]);
        assert!(
            out.contains(&format!(
                "check-notary: 'failed to verify image {host}/team/unsigned:1: .attestors[0].entries[0]: failed to verify {by_digest}: no signature is associated with \"{by_digest}\", make sure the artifact was signed successfully'"
            )),
            "{out}"
        );
        let digested = |repo: &str| format!("{host}/{repo}:1@{}", digests[repo]);
        let (ok, out) = kubectl(kc, &["run", "app", "--image", &digested("apps/signed")]);
        assert!(ok, "{out}");
        let out = denied(kc, "other", &digested("apps/other"));
        assert!(out.contains("not signed by the team"), "{out}");
        let out = denied(kc, "nosbom", &digested("apps/nosbom"));
        assert!(out.contains("no SBOM signed by the team"), "{out}");
    })
    .await;
    drop(reg);
}

/// `leash apply --registry` with a ClusterPolicy's `type: Notary`
/// attestations: an SBOM attached as an OCI referrer (`oras attach`) and
/// signed with `notation` passes when its conditions hold on the payload,
/// fails when they do not, and an image without one fails in Kyverno's
/// words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_verifies_notary_attestations() {
    use leash_images::testing::Notation;
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let Some(notation) = Notation::find() else {
        return;
    };
    let host = reg.host.clone();
    let cert = notation.generate_test_key("team");
    let mut digests = std::collections::HashMap::new();
    for repo in ["cyclonedx", "spdx", "none"] {
        let (digest, _) = reg.push(&format!("team/{repo}:1"), &[]).await;
        digests.insert(repo, digest);
    }
    for (repo, format) in [("cyclonedx", "CycloneDX"), ("spdx", "SPDX")] {
        let referrer = notation.attach(
            &format!("{host}/team/{repo}@{}", digests[repo]),
            "sbom/example",
            &format!(r#"{{"bomFormat": "{format}"}}"#),
        );
        notation.sign(&format!("{host}/team/{repo}@{referrer}"), "team", &[]);
    }
    let policy = serde_json::json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "sboms"},
        "spec": {"validationFailureAction": "Enforce", "background": false, "rules": [{
            "name": "check-sbom",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "verifyImages": [{
                "type": "Notary",
                "imageReferences": [format!("{host}/team/*")],
                "mutateDigest": false, "verifyDigest": false,
                "attestations": [{
                    "type": "sbom/example",
                    "attestors": [{"entries": [{"certificates": {"cert": cert}}]}],
                    "conditions": [{"all": [{"key": "{{ bomFormat }}", "operator": "Equals",
                        "value": "CycloneDX"}]}]}]}]}]}});
    let pods: String = ["cyclonedx", "spdx", "none"]
        .iter()
        .map(|n| pod(n, &format!("{host}/team/{n}:1")))
        .collect();
    let (code, text, err) = apply_with_registry(&policy, &pods);
    assert_eq!(code, Some(1), "{text}{err}");
    for want in [
        format!(
            "PASS: policy sboms -> resource Pod/default/cyclonedx rule check-sbom: verified image attestations for {host}/team/cyclonedx@{}",
            digests["cyclonedx"]
        ),
        format!(
            "FAIL: policy sboms -> resource Pod/default/spdx rule check-sbom: image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: .attestations[0].attestors[0].entries[0]: attestation checks failed for {host}/team/spdx:1 and predicate sbom/example: "
        ),
        format!(
            "FAIL: policy sboms -> resource Pod/default/none rule check-sbom: image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: no matching attestations found for image {host}/team/none:1 with type sbom/example"
        ),
        "pass: 1, fail: 2, warn: 0, error: 0, skip: 0".to_string(),
    ] {
        assert!(text.contains(&want), "missing {want:?} in\n{text}");
    }
}
