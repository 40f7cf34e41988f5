//! `leash test` with what a Test mocks or feeds besides resources:
//! `jsonPayloads` (several Test documents in one file), `apiCallResponses`
//! and `globalContextEntries`.

use std::fs;
use std::path::Path;

use crate::support::{leash, stderr, stdout};

fn write(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).unwrap();
}

fn run(dir: &Path) -> (bool, String) {
    let out = leash().args(["test"]).arg(dir).output().unwrap();
    (
        out.status.success(),
        format!("{}\n{}", stdout(&out), stderr(&out)),
    )
}

const JSON_POLICY: &str = r#"
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: min-value}
spec:
  evaluation: {mode: JSON}
  validations:
  - expression: object.data.value > 10
    message: too small
"#;

/// Each JSON payload is evaluated by the JSON-mode policy, named by its
/// path; a second Test document in the file is a test of its own.
#[test]
fn json_payloads_in_two_tests_of_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "policy.yaml", JSON_POLICY);
    write(d, "big.json", r#"{"data": {"value": 11}}"#);
    write(d, "small.json", r#"{"data": {"value": 1}}"#);
    write(
        d,
        "kyverno-test.yaml",
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: both}\npolicies: [policy.yaml]\njsonPayloads: [big.json, small.json]\nresults:\n- {policy: min-value, resources: [big.json], kind: '', result: pass}\n- {policy: min-value, resources: [small.json], kind: '', result: fail}\n---\napiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: wrong}\npolicies: [policy.yaml]\njsonPayloads: [small.json]\nresults:\n- {policy: min-value, kind: '', result: pass}\n",
    );
    let (ok, text) = run(d);
    assert!(!ok, "{text}");
    assert!(text.contains("Test both"), "{text}");
    assert!(text.contains("Test wrong"), "{text}");
    assert!(
        text.contains("1 of 2 test files passed; 2 passed, 1 failed"),
        "{text}"
    );
}

/// An `apiCall` answered by `apiCallResponses`, a `globalReference` by
/// `globalContextEntries`.
#[test]
fn api_call_responses_and_global_context_entries() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "policy.yaml",
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: external}
spec:
  rules:
  - name: check
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: allowed
      apiCall:
        service: {url: "https://authz.example.com/check"}
        jmesPath: allowed
    - name: teams
      globalReference: {name: teams, jmesPath: "length(@)"}
    validate:
      failureAction: Enforce
      deny:
        conditions:
          any:
          - {key: "{{ allowed }}", operator: Equals, value: false}
          - {key: "{{ teams }}", operator: LessThan, value: 2}
"#,
    );
    write(
        d,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nginx}]}\n",
    );
    let test = |allowed: bool| {
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: t}}\npolicies: [policy.yaml]\nresources: [pod.yaml]\napiCallResponses:\n- url: https://authz.example.com/check\n  response: {{body: {{allowed: {allowed}}}}}\nglobalContextEntries:\n- name: teams\n  data: [a, b]\nresults:\n- {{policy: external, rule: check, resources: [p], kind: Pod, result: pass}}\n"
        )
    };
    write(d, "kyverno-test.yaml", &test(true));
    let (ok, text) = run(d);
    assert!(ok, "{text}");
    write(d, "kyverno-test.yaml", &test(false));
    let (ok, text) = run(d);
    assert!(!ok, "{text}");
}
