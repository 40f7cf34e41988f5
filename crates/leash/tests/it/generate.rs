//! Generate rules through `leash test` (`generatedResource`,
//! `cloneSourceResource`), on fixtures written here.

use std::fs;
use std::path::Path;

use crate::support::{apply_given, assert_test_fails, assert_test_passes, stderr, stdout};

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
    test_folder(
        dir,
        POLICY,
        &[
            ("source.yaml", SOURCE),
            ("quota.yaml", quota),
            ("secret.yaml", secret),
        ],
        "- {policy: ns-defaults, rule: quota, resources: [team-a], kind: Namespace, result: pass, generatedResource: quota.yaml}\n\
         - {policy: ns-defaults, rule: regcred, resources: [team-a], kind: Namespace, result: pass, generatedResource: secret.yaml, cloneSourceResource: source.yaml}\n",
    );
}

/// A test folder: `policies` in `policy.yaml`, the Namespace `team-a` as
/// the resource, `files` beside the test, and its `results` rows.
fn test_folder(dir: &Path, policies: &str, files: &[(&str, &str)], rows: &str) {
    let t = dir.join(".kyverno-test");
    fs::create_dir_all(&t).unwrap();
    fs::write(dir.join("policy.yaml"), policies).unwrap();
    fs::write(t.join("ns.yaml"), NAMESPACE).unwrap();
    for (name, text) in files {
        fs::write(t.join(name), text).unwrap();
    }
    fs::write(
        t.join("kyverno-test.yaml"),
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: gen}}\n\
             policies: [../policy.yaml]\nresources: [ns.yaml]\nresults:\n{rows}"
        ),
    )
    .unwrap();
}

const QUOTA: &str = "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: default-quota, namespace: team-a}\nspec: {hard: {pods: '20'}}\n";
const SECRET: &str = "apiVersion: v1\nkind: Secret\nmetadata: {name: regcred, namespace: team-a}\ntype: Opaque\ndata: {token: dG9r}\n";

#[test]
fn generated_and_cloned_resources_are_compared_with_the_expected_files() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), QUOTA, SECRET);
    assert_test_passes(dir.path(), &[], "2 passed, 0 failed");
}

#[test]
fn a_generated_resource_that_differs_fails_and_names_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let wrong_quota = QUOTA.replace("'20'", "'30'");
    let wrong_secret = SECRET.replace("team-a", "team-b");
    folder(dir.path(), &wrong_quota, &wrong_secret);
    let text = stdout(&assert_test_fails(dir.path(), "0 passed, 2 failed"));
    assert!(
        text.contains("/spec/hard/pods: expected \"30\", got \"20\""),
        "{text}"
    );
    assert!(text.contains("has no Secret team-a/regcred"), "{text}");
}

/// `leash apply DIR/policy.yaml --resource DIR/.kyverno-test/ns.yaml ARGS`.
fn apply_to_the_namespace(dir: &Path, args: &[&str]) -> std::process::Output {
    apply_given(
        &dir.join("policy.yaml"),
        "--resource",
        &dir.join(".kyverno-test/ns.yaml"),
        args,
    )
}

#[test]
fn apply_prints_what_generate_rules_would_create() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), QUOTA, SECRET);
    let out = apply_to_the_namespace(dir.path(), &[]);
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
    let out = apply_to_the_namespace(dir.path(), &["-o", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["generatedResources"][0]["kind"], "ResourceQuota");
    assert_eq!(
        doc["generatedResources"][0]["metadata"]["namespace"],
        "team-a"
    );
}

/// A classic generate rule whose data reads a rule `context` variable, and
/// a `GeneratingPolicy` (CEL `generator.Apply`), both on a Namespace.
const CONTEXT_AND_GPOL: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: ns-context}
spec:
  rules:
  - name: limits
    match:
      any:
      - resources: {kinds: [Namespace]}
    context:
    - name: pods
      variable: {jmesPath: "request.object.metadata.labels.pods", default: "10"}
    generate:
      apiVersion: v1
      kind: ConfigMap
      name: limits
      namespace: "{{ request.object.metadata.name }}"
      data:
        data: {pods: "{{ pods }}"}
---
apiVersion: policies.kyverno.io/v1alpha1
kind: GeneratingPolicy
metadata: {name: ns-owner}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [namespaces]
  variables:
  - name: ns
    expression: object.metadata.name
  generate:
  - expression: >-
      generator.Apply(variables.ns, [{"kind": dyn("ConfigMap"), "apiVersion": dyn("v1"),
        "metadata": dyn({"name": "owner"}), "data": dyn({"namespace": variables.ns})}])
"#;

/// README, generate rules: a classic rule with `context`, and a
/// `GeneratingPolicy`, through `leash test` (the expected downstream
/// objects match; a wrong one fails naming the field) and `leash apply`
/// (what each would create is printed).
#[test]
fn generate_rules_with_context_and_generating_policies_in_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let limits = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: limits, namespace: team-a}\ndata: {pods: '20'}\n";
    let owner = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: owner, namespace: team-a}\ndata: {namespace: team-a}\n";
    let write_test = |owner: &str| {
        test_folder(
            d,
            CONTEXT_AND_GPOL,
            &[("limits.yaml", limits), ("owner.yaml", owner)],
            "- {policy: ns-context, rule: limits, resources: [team-a], kind: Namespace, result: pass, generatedResource: limits.yaml}\n\
             - {policy: ns-owner, resources: [team-a], kind: Namespace, result: pass, generatedResource: owner.yaml, isGeneratingPolicy: true}\n",
        );
    };
    write_test(owner);
    assert_test_passes(d, &[], "2 passed, 0 failed");
    write_test(&owner.replace("data: {namespace: team-a}", "data: {namespace: team-b}"));
    assert_test_fails(d, "/data/namespace: expected \"team-b\", got \"team-a\"");

    let out = apply_to_the_namespace(d, &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let created: Vec<(&str, &str)> = doc["generatedResources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["metadata"]["name"].as_str().unwrap_or(""),
                r["data"]
                    .as_object()
                    .and_then(|d| d.values().next())
                    .and_then(|v| v.as_str())
                    .unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(created, [("limits", "20"), ("owner", "team-a")], "{doc}");
}
