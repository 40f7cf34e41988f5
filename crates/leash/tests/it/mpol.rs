//! `leash test` and `leash apply` with a MutatingPolicy: results and the
//! mutated resource compared with `patchedResources`.

use std::fs;
use std::path::Path;

use crate::support::{apply_given, assert_test_fails, assert_test_passes, stderr, stdout};

const POLICY: &str = r#"
apiVersion: policies.kyverno.io/v1alpha1
kind: MutatingPolicy
metadata:
  name: defaults
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  matchConditions:
  - name: not-opted-out
    expression: "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{containers: object.spec.containers.map(c,
          Object.spec.containers{name: c.name, imagePullPolicy: "Always"})}}
  - patchType: JSONPatch
    jsonPatch:
      expression: >
        [JSONPatch{op: "add", path: "/metadata/annotations",
          value: {"mutated.io/by": "defaults"}}]
"#;

const RESOURCES: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: a, image: nginx}, {name: b, image: redis}]
---
apiVersion: v1
kind: Pod
metadata: {name: opted-out, labels: {skip: "yes"}}
spec:
  containers: [{name: a, image: nginx}]
"#;

const PATCHED: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  annotations: {mutated.io/by: defaults}
spec:
  containers:
  - {name: a, image: nginx, imagePullPolicy: Always}
  - {name: b, image: redis, imagePullPolicy: Always}
"#;

const TEST: &str = r#"
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: mpol}
policies: [../policy.yaml]
resources: [resources.yaml]
results:
- {policy: defaults, resources: [web], kind: Pod, patchedResources: patched.yaml, result: pass, isMutatingPolicy: true}
- {policy: defaults, resources: [opted-out], kind: Pod, result: skip, isMutatingPolicy: true}
"#;

fn folder(dir: &Path, patched: &str) {
    let tests = dir.join(".kyverno-test");
    fs::create_dir_all(&tests).unwrap();
    fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    fs::write(tests.join("resources.yaml"), RESOURCES).unwrap();
    fs::write(tests.join("patched.yaml"), patched).unwrap();
    fs::write(tests.join("kyverno-test.yaml"), TEST).unwrap();
}

#[test]
fn test_compares_the_mutated_resource() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), PATCHED);
    assert_test_passes(
        dir.path(),
        &[],
        "1 of 1 test files passed; 2 passed, 0 failed",
    );
}

#[test]
fn test_fails_when_the_mutated_resource_differs() {
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        &PATCHED.replace("image: redis, imagePullPolicy: Always", "image: redis"),
    );
    assert_test_fails(dir.path(), "patched resource differs");
}

#[test]
fn apply_reports_mutating_policy_results() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), PATCHED);
    let out = apply_given(
        &dir.path().join("policy.yaml"),
        "--resource",
        &dir.path().join(".kyverno-test/resources.yaml"),
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("pass: 1, fail: 0, warn: 0, error: 0, skip: 1"),
        "{text}"
    );
}
