//! `leash test` with `patchedResources` and `leash apply` with mutate
//! rules, on fixtures written here.

use std::fs;
use std::path::Path;

use crate::support::{
    apply, assert_test_fails, assert_test_passes, leash, leash_on, stderr, stdout,
};

const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: defaults
spec:
  rules:
  - name: pull-always
    match:
      any:
      - resources:
          kinds: [Pod]
    mutate:
      patchStrategicMerge:
        spec:
          containers:
          - (image): "*:latest"
            imagePullPolicy: Always
  - name: require-pull-always
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "latest images must be pulled always"
      pattern:
        spec:
          containers:
          - (image): "*:latest"
            imagePullPolicy: Always
"#;

const RESOURCES: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: latest, namespace: apps}
spec:
  containers:
  - {name: c, image: "nginx:latest"}
  - {name: d, image: "redis:7"}
---
apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: apps}
spec:
  containers: [{name: c, image: "nginx:1.27"}]
"#;

const PATCHED_LATEST: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: latest, namespace: apps}
spec:
  containers:
  - {name: c, image: "nginx:latest", imagePullPolicy: Always}
  - {name: d, image: "redis:7"}
"#;

/// The same pod, with the sidecar's policy wrongly expected to change too.
fn patched_wrong() -> String {
    PATCHED_LATEST.replace(
        "{name: d, image: \"redis:7\"}",
        "{name: d, image: \"redis:7\", imagePullPolicy: Always}",
    )
}

fn folder(dir: &Path, patched: &str, results: &str) {
    let tests = dir.join(".kyverno-test");
    fs::create_dir_all(&tests).unwrap();
    fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    fs::write(tests.join("resources.yaml"), RESOURCES).unwrap();
    fs::write(tests.join("patched.yaml"), patched).unwrap();
    fs::write(
        tests.join("kyverno-test.yaml"),
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: t}}\npolicies: [../policy.yaml]\nresources: [resources.yaml]\nresults:\n{results}"
        ),
    )
    .unwrap();
}

const ROWS: &str = r#"
- {policy: defaults, rule: pull-always, resources: [latest], kind: Pod, result: pass, patchedResources: patched.yaml}
- {policy: defaults, rule: pull-always, resources: [pinned], kind: Pod, result: skip}
- {policy: defaults, rule: require-pull-always, resources: [latest], kind: Pod, result: pass}
- {policy: defaults, rule: require-pull-always, resources: [pinned], kind: Pod, result: skip}
"#;

#[test]
fn test_passes_when_the_patched_resource_matches_and_validates_the_mutated_resource() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), PATCHED_LATEST, ROWS);
    assert_test_passes(dir.path(), &[], "4 passed, 0 failed");
}

#[test]
fn test_fails_when_the_patched_resource_differs_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), &patched_wrong(), ROWS);
    let text = stdout(&assert_test_fails(
        dir.path(),
        "pass (patched resource differs)",
    ));
    assert!(
        text.contains("/spec/containers/1/imagePullPolicy: only in expected: \"Always\""),
        "{text}"
    );
    // The JSON output carries the differences too.
    let out = leash_on(&["test", "-o", "json"], dir.path());
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let row = &doc["tests"][0]["results"][0];
    assert_eq!(row["passed"], false);
    assert_eq!(row["got"], "pass");
    assert_eq!(row["patchedResource"]["equal"], false);
}

/// A `fail` row of a mutate rule passes, as `kyverno test` passes it (a
/// mutate rule never fails; a fail row whose check does not hold counts as
/// passed): with a differing patched resource, and with a matching one.
#[test]
fn a_fail_row_of_a_mutate_rule_passes_as_in_kyverno_test() {
    for (patched, passes, says) in [
        (
            patched_wrong().as_str(),
            true,
            "the mutated resource differs from the patched resource, as a fail row expects",
        ),
        (
            PATCHED_LATEST,
            true,
            "passed as kyverno test passes it: a mutate rule never fails, and a fail row counts as passed",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        folder(
            dir.path(),
            patched,
            "- {policy: defaults, rule: pull-always, resources: [latest], kind: Pod, result: fail, patchedResources: patched.yaml}\n",
        );
        let out = leash().args(["test"]).arg(dir.path()).output().unwrap();
        let table = stdout(&out);
        assert_eq!(out.status.success(), passes, "{table}");
        // README: the table's columns, and what it says of the row.
        let header: Vec<&str> = table
            .lines()
            .find(|l| l.trim_start().starts_with("ID "))
            .unwrap_or_else(|| panic!("no table header: {table}"))
            .split_whitespace()
            .collect();
        assert_eq!(
            header,
            [
                "ID", "POLICY", "RULE", "RESOURCE", "EXPECTED", "GOT", "RESULT"
            ]
        );
        assert!(table.contains(&format!("row 1: {says}")), "{table}");
    }
    // A validate rule's fail row stays strict: the pod passes, so it fails.
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        PATCHED_LATEST,
        "- {policy: defaults, rule: require-pull-always, resources: [latest], kind: Pod, result: fail}\n",
    );
    let out = leash().args(["test"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
}

#[test]
fn test_leaves_out_a_row_whose_file_lacks_the_resource_as_kyverno_does() {
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        PATCHED_LATEST,
        "- {policy: defaults, rule: pull-always, resources: [pinned], kind: Pod, result: fail, patchedResources: patched.yaml}\n\
         - {policy: defaults, rule: pull-always, resources: [latest], kind: Pod, result: pass, patchedResources: patched.yaml}\n",
    );
    let out = leash().args(["test"]).arg(dir.path()).output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("SKIPPED"), "{text}");
    assert!(text.contains("has no Pod apps/pinned"), "{text}");
}

#[test]
fn apply_prints_and_writes_mutated_resources_and_counts_mutate_results() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), PATCHED_LATEST, ROWS);
    let policy = dir.path().join("policy.yaml");
    let resources = dir.path().join(".kyverno-test/resources.yaml");
    let out = apply(&policy, &resources, &[]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    assert!(
        text.contains("mutate policy defaults applied to Pod/apps/latest:"),
        "{text}"
    );
    assert!(text.contains("imagePullPolicy: Always"), "{text}");
    assert!(!text.contains("applied to Pod/apps/pinned"), "{text}");
    // latest: mutate pass, validate pass (on the mutated pod); pinned:
    // both skip (no latest image).
    assert!(
        text.contains("pass: 2, fail: 0, warn: 0, error: 0, skip: 2"),
        "{text}"
    );
    let target = dir.path().join("out");
    fs::create_dir_all(&target).unwrap();
    let out = apply(
        &policy,
        &resources,
        &["--mutated-output", target.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("mutate policy"), "{}", stdout(&out));
    let written = fs::read_to_string(target.join("latest-mutated.yaml")).unwrap();
    assert!(written.contains("imagePullPolicy: Always"), "{written}");
    assert!(!target.join("pinned-mutated.yaml").exists());
}

/// `mutate.targets` with the test's `targetResources`: the row names the
/// existing resource and its patched form.
#[test]
fn test_checks_patched_targets_of_mutate_existing_rules() {
    let dir = tempfile::tempdir().unwrap();
    let tests = dir.path().join(".kyverno-test");
    fs::create_dir_all(&tests).unwrap();
    fs::write(
        dir.path().join("policy.yaml"),
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: sync-label}
spec:
  rules:
  - name: label-secrets
    match:
      any:
      - resources: {kinds: [ConfigMap]}
    mutate:
      targets:
      - apiVersion: v1
        kind: Secret
        namespace: "{{request.object.metadata.namespace}}"
      patchStrategicMerge:
        metadata:
          labels:
            synced-from: "{{request.object.metadata.name}}"
"#,
    )
    .unwrap();
    fs::write(
        tests.join("trigger.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: apps}\n",
    )
    .unwrap();
    fs::write(
        tests.join("targets.yaml"),
        "apiVersion: v1\nkind: Secret\nmetadata: {name: s1, namespace: apps}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s2, namespace: other}\n",
    )
    .unwrap();
    // leash apply --target-resource prints the patched target.
    let targets = tests.join("targets.yaml");
    let out = apply(
        &dir.path().join("policy.yaml"),
        &tests.join("trigger.yaml"),
        &["--target-resource", targets.to_str().unwrap()],
    );
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("mutate policy sync-label applied to target Secret/apps/s1:"),
        "{text}"
    );
    assert!(text.contains("synced-from: cfg"), "{text}");
    assert!(!text.contains("Secret/other/s2"), "{text}");
    for (label, passes) in [("cfg", true), ("wrong", false)] {
        fs::write(
            tests.join("patched.yaml"),
            format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: s1, namespace: apps, labels: {{synced-from: {label}}}}}\n"),
        )
        .unwrap();
        fs::write(
            tests.join("kyverno-test.yaml"),
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [../policy.yaml]\nresources: [trigger.yaml]\ntargetResources: [targets.yaml]\nresults:\n- {policy: sync-label, rule: label-secrets, resources: [s1], kind: Secret, result: pass, patchedResources: patched.yaml}\n",
        )
        .unwrap();
        let out = leash().args(["test"]).arg(dir.path()).output().unwrap();
        assert_eq!(out.status.success(), passes, "{label}: {}", stdout(&out));
    }
}
