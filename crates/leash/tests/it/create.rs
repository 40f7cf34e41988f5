//! `leash create`: a test file written by `leash create test` runs with
//! `leash test` as written.

use crate::support::{assert_stderr_has, assert_test_passes, leash, stderr};

#[test]
fn a_created_test_file_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("policy.yaml"),
        "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team}
spec:
  rules:
  - name: team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: a team label is required
      pattern: {metadata: {labels: {team: '?*'}}}
",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("resource.yaml"),
        "apiVersion: v1
kind: Pod
metadata: {name: web, namespace: apps}
spec: {containers: [{name: c, image: 'nginx:1.27'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: api, namespace: apps, labels: {team: a}}
spec: {containers: [{name: c, image: 'nginx:1.27'}]}
",
    )
    .unwrap();
    let out = leash()
        .current_dir(dir.path())
        .args(["create", "test", "-p", "policy.yaml", "-r", "resource.yaml"])
        .args(["--fail", "require-team,team,web,apps,Pod"])
        .args(["--pass", "require-team,team,api,apps,Pod"])
        .args(["-o", "kyverno-test.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_test_passes(dir.path(), &[], "2 passed");
    // A result without its five fields is a usage error naming the flag.
    let out = leash()
        .args(["create", "test", "--pass", "p,r,x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_stderr_has(&out, "--pass \"p,r,x\"");
}
