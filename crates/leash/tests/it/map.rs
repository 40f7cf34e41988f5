//! `leash test` with a Kubernetes MutatingAdmissionPolicy, a binding and
//! the test's `paramResources`: the mutated resource compared with
//! `patchedResources`.

use std::fs;
use std::path::Path;

use crate::support::{assert_test_fails, assert_test_passes};

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: replicas}
spec:
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{replicas: int(params.data.replicas)}}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {name: replicas}
spec:
  policyName: replicas
  paramRef: {name: sizes, namespace: config}
  matchResources:
    objectSelector: {matchLabels: {scale: "yes"}}
"#;

const PARAMS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: sizes, namespace: config}
data: {replicas: "5"}
"#;

const RESOURCES: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {scale: "yes"}}
spec: {replicas: 1}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: db}
spec: {replicas: 1}
"#;

const TEST: &str = r#"
apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: map}
policies: [policy.yaml]
resources: [resources.yaml]
paramResources: [params.yaml]
results:
- {policy: replicas, resources: [web], kind: Deployment, patchedResources: patched.yaml, result: pass, isMutatingAdmissionPolicy: true}
"#;

fn folder(dir: &Path, replicas: u32) {
    fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    fs::write(dir.join("params.yaml"), PARAMS).unwrap();
    fs::write(dir.join("resources.yaml"), RESOURCES).unwrap();
    fs::write(dir.join("kyverno-test.yaml"), TEST).unwrap();
    fs::write(
        dir.join("patched.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: default, labels: {{scale: \"yes\"}}}}\nspec: {{replicas: {replicas}}}\n"
        ),
    )
    .unwrap();
}

#[test]
fn test_applies_the_policy_with_its_params() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), 5);
    assert_test_passes(
        dir.path(),
        &[],
        "1 of 1 test files passed; 1 passed, 0 failed",
    );
}

#[test]
fn test_fails_when_the_mutated_resource_differs() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), 1);
    assert_test_fails(dir.path(), "patched resource differs");
}
