//! Generate rules through `leash test` (`generatedResource`,
//! `cloneSourceResource`), on fixtures written here.

use std::fs;
use std::path::Path;

use crate::support::{leash, stderr, stdout};

const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: ns-defaults}
spec:
  rules:
  - name: quota
    match:
      any:
      - resources: {kinds: [Namespace]}
    generate:
      apiVersion: v1
      kind: ResourceQuota
      name: default-quota
      namespace: "{{ request.object.metadata.name }}"
      synchronize: true
      data:
        spec:
          hard: {pods: "{{ request.object.metadata.labels.pods }}"}
  - name: regcred
    match:
      any:
      - resources: {kinds: [Namespace]}
    generate:
      apiVersion: v1
      kind: Secret
      name: regcred
      namespace: "{{ request.object.metadata.name }}"
      clone: {namespace: default, name: regcred}
"#;

const NAMESPACE: &str =
    "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {pods: '20'}}\n";

const SOURCE: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: regcred, namespace: default, uid: x, resourceVersion: '3'}\ntype: Opaque\ndata: {token: dG9r}\n";

fn folder(dir: &Path, quota: &str, secret: &str) {
    let t = dir.join(".kyverno-test");
    fs::create_dir_all(&t).unwrap();
    fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    fs::write(t.join("ns.yaml"), NAMESPACE).unwrap();
    fs::write(t.join("source.yaml"), SOURCE).unwrap();
    fs::write(t.join("quota.yaml"), quota).unwrap();
    fs::write(t.join("secret.yaml"), secret).unwrap();
    fs::write(
        t.join("kyverno-test.yaml"),
        r#"apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: gen}
policies: [../policy.yaml]
resources: [ns.yaml]
results:
- {policy: ns-defaults, rule: quota, resources: [team-a], kind: Namespace, result: pass, generatedResource: quota.yaml}
- {policy: ns-defaults, rule: regcred, resources: [team-a], kind: Namespace, result: pass, generatedResource: secret.yaml, cloneSourceResource: source.yaml}
"#,
    )
    .unwrap();
}

const QUOTA: &str = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: default-quota, namespace: team-a}\nspec: {hard: {pods: '20'}}\n";
const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: regcred, namespace: team-a}\ntype: Opaque\ndata: {token: dG9r}\n";

#[test]
fn generated_and_cloned_resources_are_compared_with_the_expected_files() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), QUOTA, SECRET);
    let out = leash().arg("test").arg(dir.path()).output().unwrap();
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("2 passed, 0 failed"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_generated_resource_that_differs_fails_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let wrong_quota = QUOTA.replace("'20'", "'30'");
    let wrong_secret = SECRET.replace("team-a", "team-b");
    folder(dir.path(), &wrong_quota, &wrong_secret);
    let out = leash().arg("test").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("0 passed, 2 failed"), "{text}");
    assert!(
        text.contains("/spec/hard/pods: expected \"30\", got \"20\""),
        "{text}"
    );
    assert!(text.contains("has no Secret team-a/regcred"), "{text}");
}

#[test]
fn apply_prints_what_generate_rules_would_create() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), QUOTA, SECRET);
    let out = leash()
        .arg("apply")
        .arg(dir.path().join("policy.yaml"))
        .arg("--resource")
        .arg(dir.path().join(".kyverno-test/ns.yaml"))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("generate policy ns-defaults rule quota for Namespace/team-a would create:"),
        "{text}"
    );
    assert!(text.contains("kind: ResourceQuota"), "{text}");
    // The clone rule has no source here: its error is counted and exits 1.
    assert!(
        text.contains("pass: 1, fail: 0, warn: 0, error: 1"),
        "{text}"
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    let out = leash()
        .arg("apply")
        .arg(dir.path().join("policy.yaml"))
        .arg("--resource")
        .arg(dir.path().join(".kyverno-test/ns.yaml"))
        .args(["-o", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["generatedResources"][0]["kind"], "ResourceQuota");
    assert_eq!(
        doc["generatedResources"][0]["metadata"]["namespace"],
        "team-a"
    );
}
