//! `leash test` and `leash apply` on fixtures written here: a Kyverno test
//! folder (policy, resources, values, expected results) in a temp dir.

use std::fs;
use std::path::Path;

use crate::support::{
    BOUND, ChildGuard, accept_within, apply, apply_given, assert_has, assert_stderr_has,
    assert_stdout_has, assert_test_fails, assert_test_passes, core_resources, json_of_exit, leash,
    leash_on, leash_piped, output_within, send_signal, stderr, stdout, unavailable, wait_exit,
    with_server,
};

const POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: disallow-latest
  annotations:
    policies.kyverno.io/category: Best Practices
    policies.kyverno.io/severity: medium
spec:
  validationFailureAction: Audit
  rules:
  - name: require-tag
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "An image tag is required ({{ request.object.metadata.name }})."
      pattern:
        spec:
          containers:
          - image: "*:*"
  - name: no-latest
    match:
      any:
      - resources:
          kinds: [Pod]
    preconditions:
      all:
      - key: "{{ request.operation }}"
        operator: AnyIn
        value: [CREATE, UPDATE]
    validate:
      message: "latest is not allowed"
      deny:
        conditions:
          any:
          - key: "{{ request.object.spec.containers[].image }}"
            operator: AnyIn
            value: ["*:latest"]
"#;

const RESOURCES: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: apps}
spec:
  containers: [{name: c, image: "nginx:1.27"}]
---
apiVersion: v1
kind: Pod
metadata: {name: latest, namespace: apps}
spec:
  containers: [{name: c, image: "nginx:latest"}]
---
apiVersion: v1
kind: Pod
metadata: {name: untagged}
spec:
  containers: [{name: c, image: nginx}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: deploy-latest, namespace: apps}
spec:
  template:
    spec:
      containers: [{name: c, image: "nginx:latest"}]
"#;

fn test_file(results: &str) -> String {
    format!(
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: t}}\npolicies: [../policy.yaml]\nresources: [resources.yaml]\nresults:\n{results}"
    )
}

const GOOD_RESULTS: &str = r#"
- {policy: disallow-latest, rule: require-tag, resources: [good, latest], kind: Pod, result: pass}
- {policy: disallow-latest, rule: require-tag, resources: [untagged], kind: Pod, result: fail}
- {policy: disallow-latest, rule: no-latest, resources: [apps/latest], kind: Pod, result: fail}
- {policy: disallow-latest, rule: no-latest, resources: [good, untagged], kind: Pod, result: pass}
- {policy: disallow-latest, rule: no-latest, resources: [deploy-latest], kind: Deployment, result: fail}
"#;

fn folder(dir: &Path, results: &str) {
    let tests = dir.join(".kyverno-test");
    fs::create_dir_all(&tests).unwrap();
    fs::write(dir.join("policy.yaml"), POLICY).unwrap();
    fs::write(tests.join("resources.yaml"), RESOURCES).unwrap();
    fs::write(tests.join("kyverno-test.yaml"), test_file(results)).unwrap();
}

/// `leash test -o json DIR`.
fn test_json(dir: &Path) -> std::process::Output {
    leash()
        .args(["test", "-o", "json"])
        .arg(dir)
        .output()
        .unwrap()
}

/// Writes `DIR/kyverno-test.yaml` (of `policy.yaml` on `resources.yaml`)
/// with the `results` rows, then [`test_json`].
fn test_json_of_rows(dir: &Path, results: &str) -> std::process::Output {
    fs::write(
        dir.join("kyverno-test.yaml"),
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: t}}\n\
             policies: [policy.yaml]\nresources: [resources.yaml]\nresults:\n{results}"
        ),
    )
    .unwrap();
    test_json(dir)
}

#[test]
fn test_passes_when_every_row_matches_including_autogen_rows() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), GOOD_RESULTS);
    assert_test_passes(
        dir.path(),
        &[],
        "1 of 1 test files passed; 7 passed, 0 failed",
    );
}

/// Rows are checked as Kyverno's CLI checks them (v1.19.1, run on this
/// fixture): a row naming only resources that do not exist checks every
/// resource; one naming some that exist checks those; a row whose rule
/// gives no result for a resource the policy has a response for (a
/// validate or mutate policy has one for every resource) passes,
/// "Excluded", whatever it expects.
#[test]
fn test_fails_on_a_wrong_expectation_and_checks_every_resource_for_unknown_names() {
    let dir = tempfile::tempdir().unwrap();
    folder(
        dir.path(),
        "- {policy: disallow-latest, rule: require-tag, resources: [untagged], kind: Pod, result: pass}\n\
         - {policy: disallow-latest, rule: require-tag, resources: [nosuch], kind: Pod, result: pass}\n\
         - {policy: disallow-latest, rule: no-latest, resources: [nosuch, good], kind: Pod, result: pass}\n\
         - {policy: disallow-latest, rule: no-such-rule, resources: [good], kind: Pod, result: fail}\n",
    );
    let out = test_json(dir.path());
    let doc = json_of_exit(&out, 1);
    let rows = doc["tests"][0]["results"].as_array().unwrap();
    let seen: Vec<(&str, &str, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["rule"].as_str().unwrap(),
                r["resource"].as_str().unwrap(),
                r["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("require-tag", "untagged", false),
            ("require-tag", "apps/good", true),
            ("require-tag", "apps/latest", true),
            ("require-tag", "default/untagged", false),
            ("require-tag", "apps/deploy-latest", true),
            ("no-latest", "good", true),
            ("no-such-rule", "good", true),
        ],
        "{}",
        stdout(&out)
    );
    assert_eq!(rows[0]["got"], "fail");
    assert_eq!(rows[6]["excluded"], true, "{}", rows[6]);
    assert_eq!(rows[5]["excluded"], false, "{}", rows[5]);
}

/// A result row without `resources` checks every resource of the test; a
/// row of a policy kind without rules (a ValidatingPolicy) ignores the
/// `rule` it names, as Kyverno's CLI does.
#[test]
fn test_rows_without_resources_and_rows_of_rule_less_policies() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("policy.yaml"),
        r#"
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: need-team}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [configmaps]
  validations:
  - expression: "has(object.metadata.labels) && 'team' in object.metadata.labels"
"#,
    )
    .unwrap();
    fs::write(
        dir.path().join("resources.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x, labels: {team: t}}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: x, labels: {team: u}}\n",
    )
    .unwrap();
    let run = |results: &str| test_json_of_rows(dir.path(), results);
    let out = run(
        "- {policy: need-team, rule: some-rule-name, resources: [a, b], result: pass}\n\
                   - {policy: need-team, result: pass}\n",
    );
    let doc = json_of_exit(&out, 0);
    let rows = doc["tests"][0]["results"].as_array().unwrap();
    let resources: Vec<&str> = rows
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    assert_eq!(resources, ["a", "b", "x/a", "x/b"], "{}", stdout(&out));
    assert!(rows.iter().all(|r| r["got"] == "pass"), "{}", stdout(&out));
    // Every resource is checked: one that fails fails the row.
    fs::write(
        dir.path().join("resources.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x, labels: {team: t}}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: x}\n",
    )
    .unwrap();
    let out = run("- {policy: need-team, result: pass}\n");
    let doc = json_of_exit(&out, 1);
    let rows = doc["tests"][0]["results"].as_array().unwrap();
    let passed: Vec<(&str, bool)> = rows
        .iter()
        .map(|r| (r["resource"].as_str().unwrap(), r["passed"] == true))
        .collect();
    assert_eq!(passed, [("x/a", true), ("x/b", false)], "{}", stdout(&out));
}

/// A PolicyException's `conditions` are evaluated on the request (here
/// the resource's label): the blue pod is excepted (skip), the red one is
/// not (fail), as Kyverno v1.19.1's CLI gives on the same folder.
#[test]
fn test_exception_conditions_see_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("policy.yaml"), POLICY).unwrap();
    fs::write(
        d.join("resources.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: blue, namespace: apps, labels: {color: blue}}\nspec:\n  containers: [{name: c, image: \"nginx:latest\"}]\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: red, namespace: apps, labels: {color: red}}\nspec:\n  containers: [{name: c, image: \"nginx:latest\"}]\n",
    )
    .unwrap();
    fs::write(
        d.join("exception.yaml"),
        "apiVersion: kyverno.io/v2\nkind: PolicyException\nmetadata: {name: blue-may, namespace: apps}\nspec:\n  exceptions:\n  - policyName: disallow-latest\n    ruleNames: [no-latest]\n  match:\n    any:\n    - resources: {kinds: [Pod]}\n  conditions:\n    any:\n    - key: \"{{ request.object.metadata.labels.color || '' }}\"\n      operator: Equals\n      value: blue\n",
    )
    .unwrap();
    fs::write(
        d.join("kyverno-test.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [policy.yaml]\nexceptions: [exception.yaml]\nresources: [resources.yaml]\nresults:\n\
         - {policy: disallow-latest, rule: no-latest, resources: [blue], kind: Pod, result: skip}\n\
         - {policy: disallow-latest, rule: no-latest, resources: [red], kind: Pod, result: fail}\n",
    )
    .unwrap();
    assert_test_passes(d, &[], "1 of 1 test files passed; 2 passed, 0 failed");
}

/// A row's `namespace` picks among resources of the same name, as in
/// Kyverno's CLI: two Pods named `web`, the rule matching only one
/// namespace's; the other's row expects `skip`, and a namespace holding no
/// `web` is a resource not found.
#[test]
fn test_rows_with_a_namespace_see_only_that_namespace() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("policy.yaml"),
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: prod-images}
spec:
  rules:
  - name: pinned
    match:
      any:
      - resources: {kinds: [Pod], namespaces: [production]}
    validate:
      message: pin the image
      pattern:
        spec:
          containers: [{image: "*:*"}]
"#,
    )
    .unwrap();
    fs::write(
        dir.path().join("resources.yaml"),
        r#"
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: staging}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: production}
spec: {containers: [{name: c, image: "nginx:1.27"}]}
"#,
    )
    .unwrap();
    let run = |results: &str| test_json_of_rows(dir.path(), results);
    let out = run(
        "- {policy: prod-images, rule: pinned, kind: Pod, namespace: staging, resources: [web], result: skip}\n\
         - {policy: prod-images, rule: pinned, kind: Pod, namespace: production, resources: [web], result: pass}\n",
    );
    assert!(out.status.success(), "{}", stdout(&out));
    let out = run(
        "- {policy: prod-images, rule: pinned, kind: Pod, namespace: staging, resources: [web], result: pass}\n\
         - {policy: prod-images, rule: pinned, kind: Pod, namespace: other, resources: [web], result: pass}\n",
    );
    let doc = json_of_exit(&out, 1);
    let rows = doc["tests"][0]["results"].as_array().unwrap();
    assert_eq!(rows[0]["got"], "skip", "{}", rows[0]);
    assert!(
        rows[1]["error"].as_str().unwrap().contains("not found"),
        "{}",
        rows[1]
    );
}

/// `--test-case-selector` keeps the rows it names, `--fail-only` the rows
/// that did not match, `--detailed-results` adds each row's message; a bad
/// flag value is a usage error (exit 2).
#[test]
fn test_selector_fail_only_detailed_results_and_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let wrong = GOOD_RESULTS.replace(
        "resources: [untagged], kind: Pod, result: fail",
        "resources: [untagged], kind: Pod, result: pass",
    );
    folder(dir.path(), &wrong);
    let rows = |args: &[&str]| {
        let out = leash()
            .arg("test")
            .arg(dir.path())
            .args(args)
            .args(["-o", "json"])
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let rows: Vec<(String, String, bool)> = doc["tests"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (s("rule"), s("resource"), r["passed"] == true)
            })
            .collect();
        (out.status.code(), rows)
    };
    let (code, all) = rows(&[]);
    assert_eq!((code, all.len()), (Some(1), 7), "{all:?}");
    let (code, selected) = rows(&["--test-case-selector", "rule=no-latest"]);
    assert_eq!(
        code,
        Some(0),
        "the failing row is not selected: {selected:?}"
    );
    assert_eq!(selected.len(), 4);
    assert!(
        selected.iter().all(|(rule, _, _)| rule == "no-latest"),
        "{selected:?}"
    );
    let (code, failed) = rows(&["--fail-only"]);
    assert_eq!(code, Some(1));
    assert_eq!(
        failed,
        [("require-tag".to_string(), "untagged".to_string(), false)]
    );

    let out = leash()
        .arg("test")
        .arg(dir.path())
        .arg("--detailed-results")
        .output()
        .unwrap();
    let table = stdout(&out);
    assert!(
        table
            .lines()
            .any(|l| l.contains("RESULT") && l.contains("MESSAGE")),
        "{table}"
    );
    assert!(
        table.contains("An image tag is required (untagged)"),
        "the failing row's message: {table}"
    );

    let out = leash()
        .arg("test")
        .arg(dir.path())
        .args(["-o", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_stderr_has(&out, "--output");
}

#[test]
fn test_reports_an_invalid_policy_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), GOOD_RESULTS);
    let bad = POLICY.replace(
        "operator: AnyIn\n        value: [CREATE",
        "operator: Sometimes\n        value: [CREATE",
    );
    fs::write(dir.path().join("policy.yaml"), bad).unwrap();
    let out = assert_test_fails(dir.path(), "policy.yaml (document 1)");
    assert_stdout_has(&out, "spec.rules[1].preconditions.all[0].operator");
}

/// Issue 38: a test file whose result row lacks `result` (or `policy`) was
/// reported as `Test (./kyverno-test.yaml)`, an empty name. The error names
/// the file, the row and the missing field, and the run exits 1.
#[test]
fn test_names_the_file_row_and_missing_field_of_an_invalid_test() {
    for (row, field) in [
        (
            "- {policy: disallow-latest, rule: require-tag, resources: [good], kind: Pod}",
            "result",
        ),
        (
            "- {rule: require-tag, resources: [good], kind: Pod, result: pass}",
            "policy",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let results = format!(
            "- {{policy: disallow-latest, rule: require-tag, resources: [good], kind: Pod, result: pass}}\n{row}\n"
        );
        folder(dir.path(), &results);
        let want = format!("kyverno-test.yaml: results[1]: missing field `{field}`");
        let text = stdout(&assert_test_fails(dir.path(), &want));
        assert_has(&text, "error: invalid test file: ");
        assert!(!text.contains("Test ("), "a test without a name: {text}");
        let doc = json_of_exit(&test_json(dir.path()), 1);
        let error = doc["tests"][0]["error"].as_str().unwrap_or_default();
        assert!(error.contains(&want), "{doc}");
    }
}

/// README, "Two commands" and `leash test`: the repository's example test
/// (deploy/examples/tests, the example policies on resources.yaml) passes,
/// every row, and `leash apply` of the same files finds its three failures.
#[test]
fn the_readmes_example_test_passes() {
    let examples = crate::support::repo().join("deploy/examples");
    assert_test_passes(
        &examples.join("tests"),
        &[],
        "1 of 1 test files passed; 12 passed, 0 failed",
    );
    let out = apply(
        &examples.join("policies"),
        &examples.join("tests/resources.yaml"),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_stdout_has(&out, "pass: 10, fail: 3, warn: 0, error: 0, skip: 0");
}

#[test]
fn apply_prints_failures_and_summary_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), GOOD_RESULTS);
    let out = apply_given(
        &dir.path().join("policy.yaml"),
        "--resource",
        &dir.path().join(".kyverno-test/resources.yaml"),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // 3 pods x 2 rules, the deployment x 2 autogen rules.
    assert_has(&text, "pass: 5, fail: 3, warn: 0, error: 0, skip: 0");
    assert_has(
        &text,
        "validation error: An image tag is required (untagged). rule require-tag failed at path /spec/containers/0/image/",
    );
    assert_has(&text, "rule autogen-no-latest: latest is not allowed");
}

#[test]
fn apply_audit_warn_and_policy_report() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), GOOD_RESULTS);
    let out = leash()
        .args(["apply", "--audit-warn", "--policy-report", "-o", "json"])
        .args(["--report-format", "wgpolicyk8s"])
        .arg(dir.path().join("policy.yaml"))
        .arg("-r")
        .arg(dir.path().join(".kyverno-test/resources.yaml"))
        .output()
        .unwrap();
    let doc = json_of_exit(&out, 0);
    let items = doc["items"].as_array().unwrap();
    assert_eq!(
        items.len(),
        2,
        "one PolicyReport per namespace (apps, default)"
    );
    let apps = items
        .iter()
        .find(|r| r["metadata"]["namespace"] == "apps")
        .unwrap();
    assert_eq!(apps["kind"], "PolicyReport");
    assert_eq!(apps["summary"]["warn"], 2);
    assert_eq!(apps["summary"]["pass"], 4);
    let r = &apps["results"][0];
    assert_eq!(r["source"], "kyverno");
    assert_eq!(r["category"], "Best Practices");
    assert_eq!(r["severity"], "medium");
    assert_eq!(r["scored"], true);
}

/// A policy that does not compile is an input error (exit 2) naming its
/// file, document and field.
#[test]
fn apply_names_a_policy_that_does_not_compile_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), GOOD_RESULTS);
    let bad = POLICY.replace(
        "operator: AnyIn\n        value: [CREATE",
        "operator: Sometimes\n        value: [CREATE",
    );
    fs::write(
        dir.path().join("policy.yaml"),
        format!("{POLICY}---\n{bad}"),
    )
    .unwrap();
    let out = apply(
        &dir.path().join("policy.yaml"),
        &dir.path().join(".kyverno-test/resources.yaml"),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(said.contains("policy.yaml (document 2)"), "{said}");
    assert!(
        said.contains("spec.rules[1].preconditions.all[0].operator"),
        "{said}"
    );
}

/// Issue 39: each kind of mistake a new user makes in a policy is refused
/// by `leash apply` (exit 2) and `leash test` (the test fails, exit 1) with
/// the field's path, instead of being ignored: an unknown field (a typo,
/// a field indented under the wrong parent, `kind` for `kinds`), a value
/// outside an enum, a CEL expression naming an undeclared variable or
/// function, a label selector's unknown operator (it would never match), a
/// value of the wrong type, a missing required field; and what Kyverno's
/// policy validation refuses beyond its schema: a condition operator in
/// the wrong case, two rules of one name, a rule of two kinds, a match
/// block's own `resources` beside its `any`.
#[test]
fn typos_in_policies_are_refused_naming_the_field() {
    let vpol = |actions: &str| {
        format!(
            "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {{name: disallow-latest}}\nspec:\n  validationActions: [{actions}]\n  matchConstraints:\n    resourceRules: [{{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}}]\n  validations: [{{expression: 'true'}}]\n"
        )
    };
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "a misspelt field",
            POLICY.replace("validationFailureAction: Audit", "validationFailureActon: Audit"),
            "spec.validationFailureActon: Invalid value: value provided for unknown field",
        ),
        (
            "a field under the wrong parent",
            POLICY.replacen("    validate:\n      message: \"An image", "      validate:\n        message: \"An image", 1)
                .replacen("      pattern:\n        spec:\n          containers:\n          - image: \"*:*\"", "        pattern: {}", 1),
            "spec.rules[0].match.validate: Invalid value: value provided for unknown field",
        ),
        (
            "kind for kinds",
            POLICY.replacen("kinds: [Pod]", "kind: [Pod]", 1),
            "spec.rules[0].match.any[0].resources.kind: Invalid value: value provided for unknown field",
        ),
        (
            "a value outside the enum",
            vpol("Deni"),
            r#"spec.validationActions[0]: Unsupported value: "Deni": supported values: "Deny", "Audit", "Warn""#,
        ),
        (
            "an undeclared CEL variable",
            vpol("Deny").replace("expression: 'true'", "expression: 'objct.metadata.name != \"\"'"),
            "spec.validations[0].expression: undeclared reference to 'objct'",
        ),
        (
            "an undeclared CEL function",
            vpol("Deny").replace("expression: 'true'", "expression: 'object.metadata.name.startWith(\"a\")'"),
            "spec.validations[0].expression: undeclared reference to 'startWith'",
        ),
        (
            "a CEL comparison of an int with a string",
            vpol("Deny").replace("expression: 'true'", "expression: 'size(object.spec.containers) > \"1\"'"),
            "spec.validations[0].expression: found no matching overload for '_>_' applied to '(int, string)'",
        ),
        (
            "a selector operator Kubernetes does not know",
            vpol("Deny").replace(
                "  validations:",
                "    objectSelector: {matchExpressions: [{key: app, operator: in, values: [web]}]}\n  validations:",
            ),
            r#"spec.matchConstraints.objectSelector.matchExpressions[0].operator: unknown operator "in""#,
        ),
        (
            "a value of the wrong type",
            POLICY.replace("validationFailureAction: Audit", "validationFailureAction: Audit\n  background: sometimes"),
            "spec.background: Invalid value: \"string\": must be of type boolean",
        ),
        (
            "a missing required field",
            POLICY.replacen("  - name: require-tag\n    match:", "  - match:", 1),
            "spec.rules[0].name: Required value",
        ),
        // What Kyverno's policy validation refuses beyond the schema.
        (
            "an operator in the wrong case",
            POLICY.replacen("operator: AnyIn", "operator: anyIn", 1),
            r#"spec.rules[1].preconditions.all[0].operator: unknown operator "anyIn" (valid: Equals, Equal"#,
        ),
        (
            "two rules of one name",
            POLICY.replacen("- name: no-latest", "- name: require-tag", 1),
            r#"spec.rules[1].name: duplicate rule name "require-tag" (spec.rules[0] has it too)"#,
        ),
        (
            "a rule of two kinds",
            POLICY.replacen(
                "    validate:\n      message: \"An image",
                "    mutate: {patchStrategicMerge: {metadata: {labels: {a: b}}}}\n    validate:\n      message: \"An image",
                1,
            ),
            "spec.rules[0]: sets validate and mutate: a rule is one of validate, mutate, generate and verifyImages",
        ),
        (
            "resources beside any",
            POLICY.replacen("          kinds: [Pod]\n", "          kinds: [Pod]\n      resources: {kinds: [Pod]}\n", 1),
            "spec.rules[0].match.resources: cannot be given beside match.any or match.all",
        ),
    ];
    for (what, policy, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        folder(dir.path(), GOOD_RESULTS);
        fs::write(dir.path().join("policy.yaml"), &policy).unwrap();
        let out = apply(
            &dir.path().join("policy.yaml"),
            &dir.path().join(".kyverno-test/resources.yaml"),
            &[],
        );
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert_eq!(out.status.code(), Some(2), "apply, {what}: {said}");
        assert!(said.contains(want), "apply, {what}: {said}");
        let out = leash().args(["test"]).arg(dir.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "test, {what}: {}", stdout(&out));
        assert!(
            stdout(&out).contains(want),
            "test, {what}: {}",
            stdout(&out)
        );
    }
}

/// `--policy-report --report-format wgpolicyk8s`: a `ClusterPolicyReport`
/// holds the results of cluster-scoped resources, next to the namespaces'
/// `PolicyReport`s.
#[test]
fn apply_policy_report_puts_cluster_scoped_resources_in_a_cluster_policy_report() {
    let dir = tempfile::tempdir().unwrap();
    let policy = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: team-label}
spec:
  rules:
  - name: team
    match:
      any:
      - resources:
          kinds: [Namespace, ConfigMap]
    validate:
      message: "a team label is required"
      pattern:
        metadata:
          labels:
            team: "?*"
"#;
    let resources = r#"
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {team: a}}
---
apiVersion: v1
kind: Namespace
metadata: {name: unowned}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: apps}
"#;
    fs::write(dir.path().join("p.yaml"), policy).unwrap();
    fs::write(dir.path().join("r.yaml"), resources).unwrap();
    let out = leash()
        .args(["apply", "--policy-report", "-o", "json"])
        .args(["--report-format", "wgpolicyk8s"])
        .arg(dir.path().join("p.yaml"))
        .arg("-r")
        .arg(dir.path().join("r.yaml"))
        .output()
        .unwrap();
    let doc = json_of_exit(&out, 1);
    let items = doc["items"].as_array().unwrap();
    let cluster: Vec<_> = items
        .iter()
        .filter(|r| r["kind"] == "ClusterPolicyReport")
        .collect();
    assert_eq!(cluster.len(), 1, "{doc}");
    assert!(cluster[0]["metadata"]["namespace"].is_null(), "{doc}");
    assert_eq!(cluster[0]["summary"]["pass"], 1);
    assert_eq!(cluster[0]["summary"]["fail"], 1);
    let apps = items
        .iter()
        .find(|r| r["kind"] == "PolicyReport" && r["metadata"]["namespace"] == "apps")
        .unwrap_or_else(|| panic!("no PolicyReport for apps: {doc}"));
    assert_eq!(
        apps["summary"]["fail"], 1,
        "the ConfigMap has no team label"
    );
}

/// Ctrl-C while `apply --cluster` waits on a server that accepts and never
/// answers: exit 130 at once.
#[test]
fn apply_cluster_interrupted_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("policy.yaml"), POLICY).unwrap();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let policy = dir.path().join("policy.yaml");
    let mut child = ChildGuard(
        leash_piped(
            "apply",
            &[policy.to_str().unwrap(), "--cluster", "--server", &url],
        )
        .spawn()
        .expect("run leash apply"),
    );
    // Ready once leash's first request has connected.
    let _held = accept_within(&silent, &mut child, BOUND);
    exits_130_on_sigint(&mut child);
}

/// `leash apply --sandbox=pods=20000` of a policy every pod fails, once it
/// has printed its first failure line (the evaluation is under way): the
/// process and the rest of its stdout.
fn apply_streaming_20000_failures(
    dir: &Path,
) -> (ChildGuard, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead as _;
    let policy = dir.join("policy.yaml");
    fs::write(&policy, CLUSTER_POLICY).unwrap();
    let mut child = ChildGuard(
        leash_piped("apply", &[policy.to_str().unwrap(), "--sandbox=pods=20000"])
            .spawn()
            .expect("run leash apply"),
    );
    let mut out = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert!(first.starts_with("FAIL: policy every-pod"), "{first}");
    (child, out)
}

/// SIGINT to `child`: it exits 130 (within a bound generous for a debug
/// build on shared cores).
fn exits_130_on_sigint(child: &mut ChildGuard) {
    let sent = std::time::Instant::now();
    send_signal(&child.0, "INT");
    let status = wait_exit(&mut child.0, BOUND, "leash apply exit after SIGINT");
    let took = sent.elapsed();
    let mut err = String::new();
    let _ = std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err);
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "exit took {took:?} after SIGINT"
    );
}

/// Ctrl-C in the middle of the evaluation (20,000 pods, a failure line
/// each, streamed as pages are evaluated): leash stops the load and the
/// evaluation where they are, exits 130 (the bound is generous, for a
/// debug build on shared cores: what it catches is an evaluation that runs
/// on to the end), and the lines printed are fewer than the pods.
#[test]
fn apply_cluster_interrupted_mid_evaluation_exits_130() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let (mut child, out) = apply_streaming_20000_failures(dir.path());
    let lines = std::thread::scope(|s| {
        // The rest is read as a terminal would.
        let rest = s.spawn(move || {
            out.lines()
                .map_while(Result::ok)
                .filter(|l| l.starts_with("FAIL"))
                .count()
        });
        exits_130_on_sigint(&mut child);
        1 + rest.join().unwrap()
    });
    assert!(
        lines < 20_000,
        "{lines} failure lines: the evaluation ran to the end"
    );
}

/// Ctrl-C while the output is blocked (a pipe nobody reads, as a pager
/// that is not scrolled): the evaluation threads cannot finish their
/// writes, and leash exits 130 anyway.
#[test]
fn apply_cluster_interrupted_with_its_output_blocked_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, out) = apply_streaming_20000_failures(dir.path());
    // Not read any more: 20,000 lines fill the pipe long before the end.
    std::thread::sleep(std::time::Duration::from_secs(2));
    exits_130_on_sigint(&mut child);
    drop(out);
}

/// `--set` and `--values-file` bind variables (here `request.operation`,
/// which the `no-latest` precondition reads: DELETE skips it),
/// `--userinfo` sets the request's user (which `subjects` match) and
/// `--exception` reads PolicyExceptions.
#[test]
fn apply_values_set_userinfo_and_exceptions_reach_the_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), GOOD_RESULTS);
    let d = dir.path();
    fs::write(
        d.join("values.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Value\nmetadata: {name: v}\nglobalValues:\n  request.operation: DELETE\n",
    )
    .unwrap();
    fs::write(
        d.join("user.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: UserInfo\nmetadata: {name: u}\nuserInfo:\n  username: alice\n",
    )
    .unwrap();
    fs::write(
        d.join("alice.yaml"),
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: not-alice}\nspec:\n  background: false\n  rules:\n  - name: deny-alice\n    match:\n      any:\n      - resources: {kinds: [Pod]}\n        subjects: [{kind: User, name: alice}]\n    validate:\n      message: alice may not\n      deny: {}\n",
    )
    .unwrap();
    let summary = |policy: &str, extra: &[&str]| {
        let out = apply(
            &d.join(policy),
            &d.join(".kyverno-test/resources.yaml"),
            extra,
        );
        stdout(&out).lines().last().unwrap_or_default().to_string()
    };
    assert_eq!(
        summary("policy.yaml", &[]),
        "pass: 5, fail: 3, warn: 0, error: 0, skip: 0"
    );
    // On a DELETE pattern rules are not checked (Kyverno's
    // validateResourceWithRule: "skipping validation on deleted resource";
    // Kyverno gives no result for them, leash a skip), and the no-latest
    // precondition skips: every result is a skip.
    let deleted = "pass: 0, fail: 0, warn: 0, error: 0, skip: 8";
    assert_eq!(
        summary("policy.yaml", &["--set", "request.operation=DELETE"]),
        deleted
    );
    let values = d.join("values.yaml");
    assert_eq!(
        summary("policy.yaml", &["--values-file", values.to_str().unwrap()]),
        deleted
    );
    // Without user info Kyverno drops a match's `subjects` (its CLI
    // gives the same four failures here); bob is not alice.
    assert_eq!(
        summary("alice.yaml", &[]),
        "pass: 0, fail: 4, warn: 0, error: 0, skip: 0"
    );
    fs::write(
        d.join("bob.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: UserInfo\nmetadata: {name: u}\nuserInfo:\n  username: bob\n",
    )
    .unwrap();
    let bob = d.join("bob.yaml");
    assert_eq!(
        summary("alice.yaml", &["--userinfo", bob.to_str().unwrap()]),
        "pass: 0, fail: 0, warn: 0, error: 0, skip: 0"
    );
    let user = d.join("user.yaml");
    assert_eq!(
        summary("alice.yaml", &["--userinfo", user.to_str().unwrap()]),
        "pass: 0, fail: 4, warn: 0, error: 0, skip: 0",
        "alice's three pods and, through the autogen rule, her deployment"
    );
    // --exception: a PolicyException turns the `latest` pod's no-latest
    // failure into a skip.
    fs::write(
        d.join("exception.yaml"),
        "apiVersion: kyverno.io/v2\nkind: PolicyException\nmetadata: {name: let-latest, namespace: apps}\nspec:\n  exceptions:\n  - policyName: disallow-latest\n    ruleNames: [no-latest]\n  match:\n    any:\n    - resources:\n        kinds: [Pod]\n        names: [latest]\n",
    )
    .unwrap();
    let exception = d.join("exception.yaml");
    assert_eq!(
        summary("policy.yaml", &["--exception", exception.to_str().unwrap()]),
        "pass: 5, fail: 2, warn: 0, error: 0, skip: 1"
    );
}

/// Resources a mutate rule changed: printed after the rule's line, in
/// `-o json` as `mutatedResources`, and written by `--mutated-output` to a
/// file (one YAML stream) or a directory (`NAME-mutated.yaml` each).
#[test]
fn apply_mutated_resources_are_printed_listed_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(
        d.join("p.yaml"),
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: add-team}\nspec:\n  rules:\n  - name: team\n    match:\n      any:\n      - resources: {kinds: [ConfigMap]}\n    mutate:\n      patchStrategicMerge:\n        metadata:\n          labels:\n            team: platform\n",
    )
    .unwrap();
    fs::write(
        d.join("r.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: apps}\ndata: {a: b}\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let out = apply(&d.join("p.yaml"), &d.join("r.yaml"), extra);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        stdout(&out)
    };
    let text = run(&[]);
    assert_has(&text, "mutate policy add-team applied to ConfigMap/apps/c:");
    assert_has(&text, "team: platform");

    let doc: serde_json::Value = serde_json::from_str(&run(&["-o", "json"])).unwrap();
    assert_eq!(
        doc["mutatedResources"][0]["metadata"]["labels"]["team"], "platform",
        "{doc}"
    );
    assert_eq!(doc["mutatedResources"][0]["data"]["a"], "b");
    let doc: serde_json::Value = serde_saphyr::from_str(&run(&["-o", "yaml"])).unwrap();
    assert_eq!(
        doc["mutatedResources"][0]["metadata"]["labels"]["team"], "platform",
        "{doc}"
    );
    assert_eq!(doc["mutatedResources"][0]["metadata"]["name"], "c");

    let file = d.join("out.yaml");
    run(&["--mutated-output", file.to_str().unwrap()]);
    let written = fs::read_to_string(&file).unwrap();
    assert!(
        written.contains("team: platform") && written.contains("name: c"),
        "{written}"
    );

    let out_dir = d.join("out");
    fs::create_dir(&out_dir).unwrap();
    run(&["--mutated-output", &format!("{}/", out_dir.display())]);
    let one = fs::read_to_string(out_dir.join("c-mutated.yaml")).unwrap();
    assert!(one.contains("team: platform"), "{one}");
}

#[test]
fn apply_usage_errors_exit_2() {
    let out = leash()
        .args([
            "apply",
            "/nonexistent/policy.yaml",
            "-r",
            "/nonexistent/r.yaml",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_stderr_has(&out, "/nonexistent/policy.yaml");
}

const CLUSTER_POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: every-pod}
spec:
  rules:
  - name: deny-pods
    match:
      any:
      - resources:
          kinds: [Pod, example.io/v1/Widget]
    validate:
      message: "no pods"
      deny:
        conditions:
          all:
          - {key: "{{ request.object.kind }}", operator: Equals, value: Pod}
"#;

#[test]
fn apply_cluster_loads_only_matched_kinds_and_evaluates_every_object() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(&policy, CLUSTER_POLICY).unwrap();
    let out = leash_on(
        &["apply", "--sandbox=pods=60,configmaps=30", "-o", "json"],
        &policy,
    );
    let doc = json_of_exit(&out, 1);
    assert_eq!(doc["summary"]["fail"], 60, "{doc}");
    assert_eq!(
        doc["summary"]["pass"], 0,
        "configmaps are not loaded or evaluated: {doc}"
    );
    assert_eq!(doc["results"].as_array().unwrap().len(), 60);
    assert_stderr_has(
        &out,
        "example.io/v1/Widget (policy every-pod) is not served",
    );
}

/// Reads the cluster as it is evaluated: an `apiCall` counting the
/// cluster's ConfigMaps, and a ValidatingPolicy listing them with CEL
/// `resource.List`; neither kind is one the policies match, so both are
/// read from the API server.
const LIVE_POLICIES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: count-configmaps}
spec:
  rules:
  - name: thirty
    match:
      any:
      - resources:
          kinds: [Pod]
    context:
    - name: configmaps
      apiCall:
        urlPath: /api/v1/configmaps
        jmesPath: "items | length(@)"
    validate:
      message: "the cluster holds {{ configmaps }} configmaps"
      deny:
        conditions:
          all:
          - {key: "{{ configmaps }}", operator: Equals, value: 30}
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: list-configmaps}
spec:
  validationActions: [Deny]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  validations:
  - expression: "size(resource.List('v1', 'configmaps', '').items) != 30"
    message: "thirty configmaps"
"#;

#[test]
fn apply_cluster_reads_api_calls_and_cel_lookups_from_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(&policy, LIVE_POLICIES).unwrap();
    let out = leash_on(
        &["apply", "--sandbox=pods=5,configmaps=30", "-o", "json"],
        &policy,
    );
    let doc = json_of_exit(&out, 1);
    assert_eq!(doc["summary"]["fail"], 10, "{doc}");
    assert_eq!(doc["summary"]["error"], 0, "{doc}");
    let messages: Vec<&str> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["message"].as_str())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("the cluster holds 30 configmaps")),
        "{messages:?}"
    );
}

#[test]
fn apply_cluster_table_streams_failures_and_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(&policy, CLUSTER_POLICY).unwrap();
    let out = leash_on(&["apply", "--sandbox=pods=25"], &policy);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("FAIL: policy every-pod"))
            .count(),
        25,
        "{text}"
    );
    assert_has(&text, "pass: 0, fail: 25, warn: 0, error: 0, skip: 0");
    let warned = leash_on(&["apply", "--sandbox=pods=25", "--audit-warn"], &policy);
    assert_eq!(warned.status.code(), Some(0), "{}", stderr(&warned));
    assert_stdout_has(&warned, "pass: 0, fail: 0, warn: 25, error: 0, skip: 0");
}

/// `globalReference` against a cluster: the cluster's GlobalContextEntry
/// objects are made ready before the evaluation; a rule reads an entry's
/// data and one of its projections, and a ValidatingPolicy the projection
/// through CEL `globalContext.Get`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_cluster_serves_global_context_entries() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut objects = leash_sandbox::manifests::load_manifests(&[
        repo.join("deploy/crds/kyverno.io_globalcontextentries.yaml")
    ])
    .unwrap();
    objects.push(serde_json::json!({
        "apiVersion": "kyverno.io/v2beta1", "kind": "GlobalContextEntry",
        "metadata": {"name": "deployments"},
        "spec": {"kubernetesResource": {"group": "apps", "version": "v1", "resource": "deployments"},
                 "projections": [{"name": "in-x", "jmesPath": "[?metadata.namespace=='x'] | length(@)"}]}
    }));
    for ns in ["x", "y"] {
        objects.push(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    for (i, ns) in ["x", "x", "y"].iter().enumerate() {
        objects.push(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": format!("d{i}"), "namespace": ns},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}}}
        }));
    }
    objects.push(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "x"}
    }));
    let sb = leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig {
        objects,
        ..leash_sandbox::SandboxConfig::default()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(
        &policy,
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: global}
spec:
  rules:
  - name: counts
    match:
      any:
      - resources:
          kinds: [ConfigMap]
    context:
    - name: all
      globalReference: {name: deployments, jmesPath: "length(@)"}
    - name: inx
      globalReference: {name: deployments.in-x}
    validate:
      message: "{{ all }} deployments, {{ inx }} in x"
      deny:
        conditions:
          all:
          - {key: "{{ all }}", operator: Equals, value: 3}
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: global-cel}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [configmaps]
  variables:
  - name: inx
    expression: globalContext.Get("deployments", "in-x")
  validations:
  - expression: "int(variables.inx) != 2"
    messageExpression: "'CEL reads ' + string(int(variables.inx)) + ' in x'"
"#,
    )
    .unwrap();
    let url = sb.url();
    // The sandbox serves from this runtime's other thread meanwhile.
    let out = tokio::task::block_in_place(|| {
        leash_on(
            &["apply", "--cluster", "-A", "-o", "json", "--server", &url],
            &policy,
        )
    });
    let doc = json_of_exit(&out, 1);
    assert_eq!(doc["summary"]["fail"], 2, "{doc}");
    let message = |policy: &str| {
        doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["policy"] == policy)
            .and_then(|r| r["message"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(message("global"), "3 deployments, 2 in x", "{doc}");
    // README: CEL `globalContext.Get` reads the same entries.
    assert_eq!(message("global-cel"), "CEL reads 2 in x", "{doc}");
    sb.shutdown().await.unwrap();
}

/// Policies that read a pod's `status`, a foreach element and a message
/// variable, beside the Pod Security set of bench/ (which reads neither
/// `status` nor most of the spec).
const READS_POLICY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: reads-status}
spec:
  rules:
  - name: not-running
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      message: "{{ request.object.metadata.name }} is {{ request.object.status.phase }}"
      deny:
        conditions:
          any:
          - {key: "{{ request.object.status.phase }}", operator: Equals, value: Running}
  - name: named-ports
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      foreach:
      - list: request.object.spec.containers
        deny:
          conditions:
            any:
            - {key: "{{ element.ports[].name || `[]` }}", operator: AnyIn, value: ["metrics"]}
"#;

/// `apply --cluster` builds each loaded object with only what the policies
/// read of it; the same pods applied whole from a file get the same
/// results, rule for rule and message for message.
#[test]
fn apply_cluster_narrowed_objects_get_the_results_of_whole_ones() {
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies");
    fs::create_dir(&policies).unwrap();
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/policies/pss-classic");
    for entry in fs::read_dir(&bench).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            fs::copy(&path, policies.join(path.file_name().unwrap())).unwrap();
        }
    }
    fs::write(policies.join("reads-status.yaml"), READS_POLICY).unwrap();
    let pods = dir.path().join("pods.yaml");
    let load = leash()
        .args([
            "load",
            "--sandbox=pods=200",
            "pods",
            "-A",
            "-o",
            "yaml",
            "--progress",
            "never",
        ])
        .output()
        .unwrap();
    assert!(load.status.success(), "{}", stderr(&load));
    fs::write(&pods, &load.stdout).unwrap();
    let results = |args: &[&str]| {
        let out = leash()
            .arg("apply")
            .arg(&policies)
            .args(args)
            .args(["-o", "json", "--detailed-results"])
            .output()
            .unwrap();
        let doc = json_of_exit(&out, 1);
        let mut rows: Vec<String> = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.to_string())
            .collect();
        rows.sort();
        (doc["summary"].clone(), rows)
    };
    let (narrowed_summary, narrowed) = results(&["--sandbox=pods=200"]);
    let (whole_summary, whole) = results(&["--resource", pods.to_str().unwrap()]);
    assert_eq!(narrowed_summary, whole_summary);
    assert_eq!(narrowed.len(), whole.len());
    for (n, w) in narrowed.iter().zip(&whole) {
        assert_eq!(n, w);
    }
    // With a thread per core (the default) each object is evaluated in the
    // loader's walk; with fewer, by the evaluation threads (on a machine
    // of one core both runs take the walk's path): the same results.
    let (threads_summary, threads) = results(&["--sandbox=pods=200", "--concurrency", "1"]);
    assert_eq!(threads_summary, narrowed_summary);
    assert_eq!(threads, narrowed);
    // What the status policy reads is there: every generated pod runs.
    let running = narrowed
        .iter()
        .filter(|r| r.contains("is Running") && r.contains("\"fail\""))
        .count();
    assert_eq!(running, 200, "{narrowed_summary}");
    assert!(
        narrowed_summary["fail"].as_u64().unwrap() > 200,
        "the Pod Security set fails some generated pods too: {narrowed_summary}"
    );
}

/// `leash apply` makes no `apiCall` `service` calls: a rule with a
/// `default` gets it, one without gives `error`.
#[test]
fn apply_makes_no_service_calls() {
    let doc = apply_detailed_on_sandbox_pods(
        3,
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: service-call}
spec:
  rules:
  - name: with-default
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: answer
      apiCall:
        method: POST
        data: [{key: pod, value: "{{ request.object.metadata.name }}"}]
        service: {url: "http://127.0.0.1:9/check"}
        default: allowed
    validate:
      message: "the service said {{ answer }}"
      deny:
        conditions:
          all:
          - {key: "{{ answer }}", operator: NotEquals, value: allowed}
  - name: without-default
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: answer
      apiCall:
        service: {url: "http://127.0.0.1:9/check"}
    validate:
      message: "the service said {{ answer }}"
      deny:
        conditions:
          all:
          - {key: "{{ answer }}", operator: NotEquals, value: allowed}
"#,
    );
    assert_eq!(doc["summary"]["pass"], 3, "{doc}");
    assert_eq!(doc["summary"]["error"], 3, "{doc}");
    for r in doc["results"].as_array().unwrap() {
        let want = if r["rule"] == "with-default" {
            "pass"
        } else {
            "error"
        };
        assert_eq!(r["result"], want, "{r}");
    }
}

/// `leash apply POLICY --sandbox=pods=N -o json --detailed-results` with
/// `policy` (YAML) written to a file: exit 1 (some rule did not pass), and
/// the JSON document.
fn apply_detailed_on_sandbox_pods(pods: usize, policy: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    fs::write(&path, policy).unwrap();
    let sandbox = format!("--sandbox=pods={pods}");
    let args = ["apply", &sandbox, "-o", "json", "--detailed-results"];
    json_of_exit(&leash_on(&args, &path), 1)
}

/// `imageRegistry` context entries where no registry is read (`apply
/// --cluster`, `--sandbox`): a rule with one compiles and gives each
/// resource an `error` naming the image and why, so it is never a silent
/// pass; the other rules of the policy still run.
#[test]
fn an_image_registry_context_entry_is_an_error_result_naming_it() {
    let doc = apply_detailed_on_sandbox_pods(
        2,
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: registry}
spec:
  rules:
  - name: image-config
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: config
      imageRegistry: {reference: "{{ request.object.spec.containers[0].image }}"}
    validate:
      message: "runs as root"
      deny:
        conditions:
          all:
          - {key: "{{ config.configData.config.User || '' }}", operator: Equals, value: ""}
  - name: has-containers
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "a container is required"
      pattern: {spec: {containers: [{name: "?*"}]}}
"#,
    );
    assert_eq!(doc["summary"]["error"], 2, "{doc}");
    assert_eq!(doc["summary"]["pass"], 2, "{doc}");
    for r in doc["results"].as_array().unwrap() {
        if r["rule"] == "image-config" {
            assert_eq!(r["result"], "error", "{r}");
            let message = r["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("failed to fetch image descriptor: ")
                    && message.contains("no image registry is read here"),
                "{r}"
            );
        }
    }
}

/// `apply --cluster` reads the Namespaces before the evaluation, so a
/// `namespaceSelector` selects by the labels of each object's namespace.
#[test]
fn apply_cluster_selects_by_the_labels_of_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(
        &policy,
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: one-namespace}
spec:
  rules:
  - name: deny-in-ns-0000
    match:
      any:
      - resources:
          kinds: [Pod]
          namespaceSelector:
            matchLabels: {kubernetes.io/metadata.name: ns-0000}
    validate:
      message: "not in ns-0000"
      deny: {}
"#,
    )
    .unwrap();
    let names = leash()
        .args([
            "load",
            "--sandbox=pods=40",
            "pods",
            "-n",
            "ns-0000",
            "-o",
            "name",
            "--progress",
            "never",
        ])
        .output()
        .unwrap();
    assert!(names.status.success(), "{}", stderr(&names));
    let in_ns = stdout(&names).lines().count();
    assert!(in_ns > 0 && in_ns < 40, "{in_ns} pods in ns-0000");
    let out = leash_on(&["apply", "--sandbox=pods=40", "-o", "json"], &policy);
    let doc = json_of_exit(&out, 1);
    assert_eq!(doc["summary"]["fail"], in_ns as u64, "{doc}");
    for r in doc["results"].as_array().unwrap() {
        assert!(r["resource"].to_string().contains("ns-0000"), "{r}");
    }
}

/// A mutate rule's row checks its patched resource, under the current key
/// (`patchedResources`) and the older one (`patchedResource`) alike; a
/// patched file that differs fails the row and names the field.
#[test]
fn test_checks_patched_resources_under_either_key() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("policy.yaml"),
        "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: add-team}\nspec:\n  rules:\n  - name: team\n    match:\n      any:\n      - resources: {kinds: [ConfigMap]}\n    mutate:\n      patchStrategicMerge:\n        metadata:\n          labels:\n            team: platform\n",
    )
    .unwrap();
    fs::write(
        dir.path().join("resource.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: apps}\ndata: {a: b}\n",
    )
    .unwrap();
    let patched = |team: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: apps, labels: {{team: {team}}}}}\ndata: {{a: b}}\n"
        )
    };
    fs::write(dir.path().join("patched.yaml"), patched("platform")).unwrap();
    fs::write(dir.path().join("wrong.yaml"), patched("other")).unwrap();
    let run = |key: &str, file: &str| {
        fs::write(
            dir.path().join("kyverno-test.yaml"),
            format!(
                "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: t}}\npolicies: [policy.yaml]\nresources: [resource.yaml]\nresults:\n- {{policy: add-team, rule: team, resources: [c], kind: ConfigMap, result: pass, {key}: {file}}}\n"
            ),
        )
        .unwrap();
        leash().args(["test"]).arg(dir.path()).output().unwrap()
    };
    for key in ["patchedResources", "patchedResource"] {
        let out = run(key, "patched.yaml");
        assert!(
            out.status.success(),
            "{key}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let out = run(key, "wrong.yaml");
        assert_eq!(out.status.code(), Some(1), "{key}: {}", stdout(&out));
        assert!(stdout(&out).contains("team"), "{key}: {}", stdout(&out));
    }
}

/// The older untyped Test form (`name`, `status` in its rows) with its
/// `Values`, `UserInfo` and `Context` files: each reaches the evaluation
/// (every row expects `fail`, which only the files' data gives).
#[test]
fn test_reads_the_untyped_form_with_values_userinfo_and_context_files() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    write(
        "policy.yaml",
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: by-user
    match:
      any:
      - resources: {kinds: [Pod]}
        subjects: [{kind: User, name: alice}]
    validate:
      message: "alice may not"
      deny: {}
  - name: by-value
    match:
      any:
      - resources: {kinds: [Pod]}
    validate:
      message: "mode is {{ mode }}"
      deny:
        conditions:
          all:
          - {key: "{{ mode }}", operator: Equals, value: strict}
  - name: by-configmap
    match:
      any:
      - resources: {kinds: [Pod]}
    context:
    - name: settings
      configMap: {name: settings, namespace: default}
    validate:
      message: "locked"
      deny:
        conditions:
          all:
          - {key: "{{ settings.data.locked }}", operator: Equals, value: "yes"}
"#,
    );
    write(
        "resource.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers: [{name: c, image: nginx:1.27}]\n",
    );
    write(
        "values.yaml",
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Value\npolicies:\n- name: p\n  rules:\n  - name: by-value\n    values: {mode: strict}\n",
    );
    write(
        "user.yaml",
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: UserInfo\nclusterRoles: [admin]\nuserInfo: {username: alice}\n",
    );
    write(
        "context.yaml",
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Context\nspec:\n  resources:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: settings, namespace: default}\n    data: {locked: \"yes\"}\n",
    );
    let rows = |status: &str| {
        format!(
            "name: untyped\npolicies: [policy.yaml]\nresources: [resource.yaml]\nvariables: values.yaml\nuserinfo: user.yaml\ncontext: context.yaml\nresults:\n- {{policy: p, rule: by-user, resource: web, kind: Pod, status: {status}}}\n- {{policy: p, rule: by-value, resource: web, kind: Pod, status: {status}}}\n- {{policy: p, rule: by-configmap, resource: web, kind: Pod, status: {status}}}\n"
        )
    };
    write("kyverno-test.yaml", &rows("fail"));
    assert_test_passes(dir.path(), &[], "3 passed, 0 failed");
    write("kyverno-test.yaml", &rows("pass"));
    assert_test_fails(dir.path(), "0 passed, 3 failed");
}

/// `apply --exception` reads the CEL form of PolicyException too.
#[test]
fn apply_reads_cel_policy_exceptions() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        fs::write(&path, text).unwrap();
        path
    };
    let policy = write(
        "vpol.yaml",
        "apiVersion: policies.kyverno.io/v1\nkind: ValidatingPolicy\nmetadata: {name: no-latest}\nspec:\n  validationActions: [Deny]\n  matchConstraints:\n    resourceRules:\n    - {apiGroups: [''], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}\n  validations:\n  - expression: \"object.spec.containers.all(c, !c.image.endsWith(':latest'))\"\n    message: no latest\n",
    );
    let exception = write(
        "exception.yaml",
        "apiVersion: policies.kyverno.io/v1alpha1\nkind: PolicyException\nmetadata: {name: allow-web, namespace: default}\nspec:\n  policyRefs: [{name: no-latest, kind: ValidatingPolicy}]\n  matchConditions:\n  - {name: web, expression: \"object.metadata.name == 'web'\"}\n",
    );
    let pods = write(
        "pods.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec: {containers: [{name: c, image: 'nginx:latest'}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: api, namespace: default}\nspec: {containers: [{name: c, image: 'nginx:latest'}]}\n",
    );
    let exception = exception.to_str().unwrap();
    let args = ["--exception", exception, "--detailed-results"];
    let out = apply_given(&policy, "--resource", &pods, &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert_has(
        &text,
        "resource Pod/default/web rule exception: rule is skipped due to policy exception: default/allow-web",
    );
    assert_has(&text, "pass: 0, fail: 1, warn: 0, error: 0, skip: 1");
}

/// README, `leash apply --cluster`: a `configMap` context reads the
/// cluster's ConfigMap (loaded with the namespaces before the evaluation),
/// and `apiCall` `service` calls are not made even against a cluster: the
/// rule gives `error` and the service never sees a connection (with a
/// `default`: `apply_makes_no_service_calls`).
#[test]
fn apply_cluster_reads_config_maps_and_makes_no_service_calls() {
    let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    service.set_nonblocking(true).unwrap();
    let service_url = format!("http://{}/check", service.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.yaml");
    fs::write(
        &data,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-a}\ndata: {color: blue}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: team-a}\n\
         spec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(
        &policy,
        format!(
            r#"apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: reads}}
spec:
  validationFailureAction: Audit
  rules:
  - name: color
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    context:
    - name: settings
      configMap: {{name: settings, namespace: team-a}}
    validate:
      message: "the color is {{{{ settings.data.color }}}}"
      deny:
        conditions:
          any:
          - {{key: "{{{{ settings.data.color }}}}", operator: Equals, value: blue}}
  - name: remote
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    context:
    - name: answer
      apiCall:
        service: {{url: "{service_url}"}}
    validate:
      message: "remote said no"
      deny:
        conditions:
          any:
          - {{key: "{{{{ answer.allowed }}}}", operator: Equals, value: false}}
"#
        ),
    )
    .unwrap();
    let sandbox = crate::support::SandboxProcess::start(&["--data", data.to_str().unwrap()]);
    let out = leash()
        .args([
            "apply",
            "--cluster",
            "-A",
            "--server",
            &sandbox.url,
            "-o",
            "json",
        ])
        .arg(&policy)
        .output()
        .unwrap();
    let doc = json_of_exit(&out, 1);
    let result = |rule: &str| -> (String, String) {
        let r = doc["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rule"] == rule)
            .unwrap_or_else(|| panic!("no result for {rule}: {doc}"));
        (
            r["result"].as_str().unwrap_or_default().to_owned(),
            r["message"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let (color, message) = result("color");
    assert_eq!(color, "fail", "{doc}");
    assert!(message.contains("the color is blue"), "{message}");
    assert_eq!(result("remote").0, "error", "{doc}");
    assert!(
        matches!(service.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the service was called"
    );
}

/// README, `leash apply --cluster`: objects are evaluated as pages arrive
/// and the table's lines stream out. Against a sandbox that answers each
/// request after 300 ms, four pages of ten pods take over a second; the
/// first failure is printed while later pages are still on their way (the
/// process is still running), and every pod's failure is printed in the end.
#[test]
fn apply_cluster_prints_failures_as_pages_arrive() {
    use std::io::BufRead as _;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(&policy, CLUSTER_POLICY).unwrap();
    let sandbox =
        crate::support::SandboxProcess::start(&["--generate", "pods=40", "--latency", "300ms"]);
    let mut child = ChildGuard(
        leash_piped(
            "apply",
            &[
                "--cluster",
                "-A",
                "--page-size",
                "10",
                "--server",
                &sandbox.url,
            ],
        )
        .arg(&policy)
        .spawn()
        .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("FAIL: policy every-pod"))
        .expect("a failure line");
    let printed = std::time::Instant::now();
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the first failure ({first}) came only after the run ended"
    );
    let rest = lines
        .map(|l| l.unwrap())
        .filter(|l| l.starts_with("FAIL: policy every-pod"))
        .count();
    assert_eq!(1 + rest, 40);
    let status = wait_exit(&mut child.0, BOUND, "apply exit");
    assert_eq!(status.code(), Some(1));
    // At least two more pages (300 ms each) came after the first line; a
    // table printed only at the end would leave no such gap.
    assert!(
        printed.elapsed() >= std::time::Duration::from_millis(300),
        "the first failure came {:?} before the end",
        printed.elapsed()
    );
}

/// Twenty pods in namespace `n` and a ConfigMap list at
/// `/api/v1/namespaces/team/configmaps` (two items, or a 503 when
/// `failing`), for [`with_server`].
fn pods_and_a_lookup(failing: bool) -> impl Fn(&str) -> (u16, String) + Sync {
    move |path: &str| -> (u16, String) {
        match path.split('?').next().unwrap_or("") {
            "/api/v1" => (
                200,
                core_resources(&[("pods", "Pod", true), ("namespaces", "Namespace", false), ("configmaps", "ConfigMap", true)]),
            ),
            "/api/v1/namespaces" => (
                200,
                r#"{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"n","uid":"ns-n"}}]}"#.into(),
            ),
            "/api/v1/pods" => {
                let items: Vec<String> = (0..20)
                    .map(|i| format!(r#"{{"metadata":{{"name":"p{i}","namespace":"n","uid":"u{i}"}},"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}"#))
                    .collect();
                (
                    200,
                    format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{}},"items":[{}]}}"#, items.join(",")),
                )
            }
            "/api/v1/namespaces/team/configmaps" if !failing => (
                200,
                r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#.into(),
            ),
            other => unavailable(other),
        }
    }
}

/// README, `leash apply --cluster`: what a rule reads through an `apiCall`
/// `urlPath` is read from the API server when first asked for and kept for
/// the rest of the run; a failed read is not kept, and the next object
/// that asks tries again. Twenty pods read one path: it is requested once
/// (at most once per evaluation thread, when they miss it at the same
/// moment); when it fails, once per pod, each pod's rule an `error`.
#[test]
fn apply_cluster_keeps_what_it_read_and_retries_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        r#"apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: lookup}
spec:
  rules:
  - name: count
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: cms
      apiCall:
        urlPath: /api/v1/namespaces/team/configmaps
        jmesPath: "items | length(@)"
    validate:
      message: "{{ cms }} configmaps"
      deny:
        conditions:
          any:
          - {key: "{{ cms }}", operator: Equals, value: 2}
"#,
    )
    .unwrap();
    let lookups = |paths: &[String]| {
        paths
            .iter()
            .filter(|p| p.starts_with("/api/v1/namespaces/team/configmaps"))
            .count()
    };
    let run = |url: &str| {
        let mut cmd = leash();
        cmd.args([
            "apply",
            policy.to_str().unwrap(),
            "--cluster",
            "-A",
            "-o",
            "json",
        ])
        .args(["--server", url]);
        output_within(cmd)
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (out, paths) = with_server(pods_and_a_lookup(false), run);
    let doc = json_of_exit(&out, 1);
    assert_eq!(doc["summary"]["fail"], 20, "{doc}");
    let n = lookups(&paths);
    assert!(
        (1..=threads.min(19)).contains(&n),
        "kept: {n} requests for 20 pods ({threads} threads)"
    );

    let (out, paths) = with_server(pods_and_a_lookup(true), run);
    let doc = json_of_exit(&out, 1);
    assert_eq!(doc["summary"]["error"], 20, "{doc}");
    assert_eq!(lookups(&paths), 20, "a failed read is not kept: {paths:?}");
}

/// README, `leash apply --cluster`: "memory stays bounded by the load's
/// window". A rule reads an `apiCall` path that the server answers only
/// after 2 s, so evaluation stalls on the first pods; meanwhile the loader
/// may fetch only what its window and the two evaluation threads'
/// channels hold (three pages a thread, one in the feeder's hand, and the
/// loader's: its object channel's `--list-concurrency` pages and three in
/// the list task, leash-loader's invariant 5), not the 100 the list has (an
/// unbounded pipeline would fetch them all in that time). Once the read is answered every page is
/// fetched and every pod evaluated.
#[test]
fn apply_cluster_fetches_ahead_of_a_stalled_evaluation_only_its_window() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const PAGES: usize = 100;
    const PER_PAGE: usize = 10;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    fs::write(
        &policy,
        r#"apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: slow-lookup}
spec:
  rules:
  - name: no-services
    match: {any: [{resources: {kinds: [Pod]}}]}
    context:
    - name: services
      apiCall:
        urlPath: /api/v1/namespaces/n/services
        jmesPath: "items | length(@)"
    validate:
      message: "{{ services }} services"
      deny:
        conditions:
          any:
          - {key: "{{ services }}", operator: GreaterThan, value: 0}
"#,
    )
    .unwrap();
    let pages_served = AtomicUsize::new(0);
    // Pages served when the first slow read was answered.
    let served_while_stalled = AtomicUsize::new(usize::MAX);
    let answer = |path: &str| -> (u16, String) {
        let (base, query) = path.split_once('?').unwrap_or((path, ""));
        match base {
            "/api/v1" => (
                200,
                core_resources(&[("pods", "Pod", true), ("namespaces", "Namespace", false)]),
            ),
            "/api/v1/namespaces" => (
                200,
                r#"{"kind":"NamespaceList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"n","uid":"ns-n"}}]}"#.into(),
            ),
            "/api/v1/pods" => {
                let page: usize = query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("continue="))
                    .map_or(0, |c| c.parse().unwrap());
                pages_served.fetch_add(1, Ordering::SeqCst);
                let items: Vec<String> = (0..PER_PAGE)
                    .map(|i| format!(r#"{{"metadata":{{"name":"p{page}-{i}","namespace":"n","uid":"u{page}-{i}"}},"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}"#))
                    .collect();
                let next = if page + 1 < PAGES {
                    format!(r#""continue":"{}""#, page + 1)
                } else {
                    String::new()
                };
                (
                    200,
                    format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{{next}}},"items":[{}]}}"#, items.join(",")),
                )
            }
            "/api/v1/namespaces/n/services" => {
                // A slow server, not a synchronisation: the assertion below
                // is an upper bound, which a slower loader only meets more
                // easily.
                std::thread::sleep(std::time::Duration::from_secs(2));
                served_while_stalled
                    .fetch_min(pages_served.load(Ordering::SeqCst), Ordering::SeqCst);
                (
                    200,
                    r#"{"kind":"ServiceList","apiVersion":"v1","metadata":{},"items":[]}"#.into(),
                )
            }
            other => unavailable(other),
        }
    };
    let (out, paths) = with_server(answer, |url| {
        let mut cmd = leash();
        cmd.args(["apply", policy.to_str().unwrap(), "--cluster", "-A"])
            .args(["--page-size", &PER_PAGE.to_string(), "--concurrency", "2"])
            .args(["--list-concurrency", "4"])
            .args(["-o", "json"])
            .args(["--server", url]);
        output_within(cmd)
    });
    let doc = json_of_exit(&out, 0);
    assert_eq!(doc["summary"]["pass"], PAGES * PER_PAGE, "{doc}");
    let lists = paths
        .iter()
        .filter(|p| p.starts_with("/api/v1/pods"))
        .count();
    assert_eq!(lists, PAGES, "every page fetched once");
    let ahead = served_while_stalled.load(Ordering::SeqCst);
    assert!(
        ahead <= 2 * 3 + 1 + (4 + 3),
        "{ahead} of {PAGES} pages fetched while evaluation stalled: not bounded by the window"
    );
}

/// A test's `clusterResources` are the cluster its rules look things up
/// in: a `configMap` context entry, an `apiCall` list path and CEL
/// `resource.get` all answer from the `ClusterResource` file's objects
/// (and its CRDs' custom objects); without the file, each lookup fails.
#[test]
fn test_looks_up_cluster_resources() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    write(
        "policy.yaml",
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: lookups}
spec:
  rules:
  - name: by-configmap
    match:
      any:
      - resources: {kinds: [Pod]}
    context:
    - name: settings
      configMap: {name: settings, namespace: "{{ request.object.metadata.namespace }}"}
    validate:
      message: "locked"
      deny:
        conditions:
          all:
          - {key: "{{ settings.data.locked }}", operator: Equals, value: "yes"}
  - name: by-api-call
    match:
      any:
      - resources: {kinds: [Pod]}
    context:
    - name: widgets
      apiCall:
        urlPath: /apis/example.io/v1/widgets
        jmesPath: "items[].metadata.name"
    validate:
      message: "no widget named after the pod"
      deny:
        conditions:
          all:
          - {key: "{{ request.object.metadata.name }}", operator: AnyNotIn, value: "{{ widgets }}"}
---
apiVersion: policies.kyverno.io/v1beta1
kind: ValidatingPolicy
metadata: {name: cel-lookup}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  variables:
  - name: cm
    expression: "resource.get('v1', 'configmaps', object.metadata.namespace, 'settings')"
  validations:
  - expression: "variables.cm.data.locked != 'yes'"
    message: locked
"#,
    );
    write(
        "resources.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: open}\nspec:\n  containers: [{name: c, image: nginx:1.27}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b, namespace: shut}\nspec:\n  containers: [{name: c, image: nginx:1.27}]\n",
    );
    fs::create_dir(dir.path().join("crds")).unwrap();
    write(
        "crds/widgets.yaml",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: widgets.example.io}\nspec:\n  group: example.io\n  scope: Cluster\n  names: {kind: Widget, plural: widgets}\n",
    );
    write(
        "cluster.yaml",
        r#"
apiVersion: cli.kyverno.io/v1alpha1
kind: ClusterResource
metadata: {name: cluster}
spec:
  crds: [crds/widgets.yaml]
  resources:
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: settings, namespace: open}, data: {locked: "no"}}
  - {apiVersion: v1, kind: ConfigMap, metadata: {name: settings, namespace: shut}, data: {locked: "yes"}}
  - {apiVersion: example.io/v1, kind: Widget, metadata: {name: a}}
"#,
    );
    let test = |cluster: &str| {
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: lookups}}\npolicies: [policy.yaml]\nresources: [resources.yaml]\n{cluster}results:\n\
- {{policy: lookups, rule: by-configmap, resources: [a], kind: Pod, result: pass}}\n\
- {{policy: lookups, rule: by-configmap, resources: [b], kind: Pod, result: fail}}\n\
- {{policy: lookups, rule: by-api-call, resources: [a], kind: Pod, result: pass}}\n\
- {{policy: lookups, rule: by-api-call, resources: [b], kind: Pod, result: fail}}\n\
- {{policy: cel-lookup, isValidatingPolicy: true, resources: [a], kind: Pod, result: pass}}\n\
- {{policy: cel-lookup, isValidatingPolicy: true, resources: [b], kind: Pod, result: fail}}\n"
        )
    };
    write(
        "kyverno-test.yaml",
        &test("clusterResources: [cluster.yaml]\n"),
    );
    assert_test_passes(dir.path(), &["--detailed-results"], "6 passed, 0 failed");
    // Without the cluster, the configMap and CEL lookups are errors (an
    // apiCall that finds nothing leaves the variable empty).
    write("kyverno-test.yaml", &test(""));
    assert_test_fails(dir.path(), "error");
}

/// `leash test` evaluates DeletingPolicies on each resource, as Kyverno's
/// CLI: `pass` when the policy selects it (whatever operations its match
/// constraints name) and its conditions hold, `fail` otherwise, even for a
/// resource the match constraints leave out; rows say `isDeletingPolicy`.
#[test]
fn test_evaluates_deleting_policies() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    write(
        "policy.yaml",
        r#"
apiVersion: policies.kyverno.io/v1beta1
kind: DeletingPolicy
metadata: {name: expired}
spec:
  schedule: "*/5 * * * *"
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  variables:
  - name: ttl
    expression: "resource.get('v1', 'configmaps', 'default', 'ttl').data.expired"
  conditions:
  - name: listed
    expression: "object.metadata.name in variables.ttl.split(',')"
"#,
    );
    write(
        "resources.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: old}\nspec:\n  containers: [{name: c, image: nginx:1.27}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: new}\nspec:\n  containers: [{name: c, image: nginx:1.27}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: old}\nspec: {}\n",
    );
    write(
        "cluster.yaml",
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: ClusterResource\nmetadata: {name: c}\nspec:\n  resources:\n  - {apiVersion: v1, kind: ConfigMap, metadata: {name: ttl, namespace: default}, data: {expired: 'old,older'}}\n",
    );
    let test = |old_pod: &str| {
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: dpol}}\npolicies: [policy.yaml]\nresources: [resources.yaml]\nclusterResources: [cluster.yaml]\nresults:\n\
- {{policy: expired, isDeletingPolicy: true, resources: [old], kind: Pod, result: {old_pod}}}\n\
- {{policy: expired, isDeletingPolicy: true, resources: [new], kind: Pod, result: fail}}\n\
- {{policy: expired, isDeletingPolicy: true, resources: [old], kind: Service, result: fail}}\n"
        )
    };
    write("kyverno-test.yaml", &test("pass"));
    let out = assert_test_passes(dir.path(), &["--detailed-results"], "3 passed, 0 failed");
    assert_stdout_has(&out, "resource matched");
    write("kyverno-test.yaml", &test("fail"));
    assert_test_fails(dir.path(), "2 passed, 1 failed");
}

/// `leash test` evaluates Kubernetes ValidatingAdmissionPolicies through
/// their bindings, as Kyverno's CLI: a binding's `matchResources` select
/// (here by namespace labels from the values file); a resource no binding
/// selects has no result (a `skip` row); `namespaceObject` is the
/// resource's Namespace with its known labels.
#[test]
fn test_evaluates_validating_admission_policies_with_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| fs::write(dir.path().join(name), text).unwrap();
    write(
        "policy.yaml",
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replicas}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [deployments]}
  validations:
  - expression: "object.spec.replicas <= 2 || namespaceObject.metadata.labels.tier == 'big'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: replicas-binding}
spec:
  policyName: replicas
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchExpressions:
      - {key: tier, operator: Exists}
"#,
    );
    let deployment = |name: &str, ns: &str, replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  replicas: {replicas}\n"
        )
    };
    write(
        "resources.yaml",
        &[
            deployment("small", "shop", 1),
            deployment("large", "shop", 5),
            deployment("huge", "batch", 9),
            deployment("unbound", "scratch", 9),
        ]
        .join("---\n"),
    );
    write(
        "values.yaml",
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Value\nnamespaceSelector:\n- {name: shop, labels: {tier: small}}\n- {name: batch, labels: {tier: big}}\n",
    );
    let test = |large: &str| {
        format!(
            "apiVersion: cli.kyverno.io/v1alpha1\nkind: Test\nmetadata: {{name: vap}}\npolicies: [policy.yaml]\nresources: [resources.yaml]\nvariables: values.yaml\nresults:\n\
- {{policy: replicas, isValidatingAdmissionPolicy: true, resources: [small, huge], kind: Deployment, result: pass}}\n\
- {{policy: replicas, isValidatingAdmissionPolicy: true, resources: [large], kind: Deployment, result: {large}}}\n\
- {{policy: replicas, isValidatingAdmissionPolicy: true, resources: [unbound], kind: Deployment, result: skip}}\n"
        )
    };
    write("kyverno-test.yaml", &test("fail"));
    let out = assert_test_passes(dir.path(), &["--detailed-results"], "4 passed, 0 failed");
    assert_stdout_has(&out, "failed expression: object.spec.replicas <= 2");
    write("kyverno-test.yaml", &test("pass"));
    assert_test_fails(dir.path(), "3 passed, 1 failed");
}

const NS_POLICIES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: cp-no-latest}
spec:
  validationFailureAction: Enforce
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: no latest
      pattern: {spec: {containers: [{image: "!*:latest"}]}}
---
apiVersion: kyverno.io/v1
kind: Policy
metadata: {name: ns-no-latest, namespace: default}
spec:
  rules:
  - name: r
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: no latest
      pattern: {spec: {containers: [{image: "!*:latest"}]}}
"#;

const NS_PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: default}
spec: {containers: [{name: c, image: "nginx:1.0"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: p2, namespace: other}
spec: {containers: [{name: c, image: "nginx:latest"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: p3, namespace: default}
spec: {containers: [{name: c, image: "nginx:latest"}]}
"#;

/// `--policy-report` prints what `kyverno apply --policy-report` 1.15+
/// prints: one openreports.io `ClusterReport` `merged` with every
/// cluster-wide policy's results (every namespace), then after a `---`
/// line one `PolicyReport` per (namespaced Policy, resource), named after
/// the policy in its namespace; JSON documents one per line.
#[test]
fn apply_policy_report_prints_kyvernos_openreports_layout() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("p.yaml"), NS_POLICIES).unwrap();
    fs::write(dir.path().join("r.yaml"), NS_PODS).unwrap();
    let out = leash()
        .args(["apply", "-p", "--output-format", "json"])
        .arg(dir.path().join("p.yaml"))
        .arg("-r")
        .arg(dir.path().join("r.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(lines[1], "---");
    assert_eq!(lines[3], "---");
    let docs: Vec<serde_json::Value> = [lines[0], lines[2], lines[4]]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cluster = &docs[0];
    assert_eq!(cluster["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(cluster["kind"], "ClusterReport");
    assert_eq!(cluster["metadata"], serde_json::json!({"name": "merged"}));
    assert_eq!(cluster["source"], "");
    assert_eq!(cluster["summary"]["fail"], 2);
    assert_eq!(cluster["summary"]["pass"], 1);
    let r = &cluster["results"][0];
    assert_eq!(r["policy"], "cp-no-latest");
    assert_eq!(r["properties"]["process"], "background scan");
    assert_eq!(r["resources"][0]["kind"], "Pod");
    for (doc, result) in [(&docs[1], "pass"), (&docs[2], "fail")] {
        assert_eq!(doc["kind"], "PolicyReport");
        assert_eq!(
            doc["metadata"],
            serde_json::json!({"name": "ns-no-latest", "namespace": "default"})
        );
        let results = doc["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "{doc}");
        assert_eq!(results[0]["policy"], "default/ns-no-latest");
        assert_eq!(results[0]["result"], result);
    }
    // YAML (the default): the same documents, the namespaced ones after
    // `---` lines.
    let out = leash()
        .args(["apply", "--policy-report"])
        .arg(dir.path().join("p.yaml"))
        .args(["--resources"])
        .arg(dir.path().join("r.yaml"))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.starts_with("apiVersion: openreports.io/v1alpha1\nkind: ClusterReport\n"),
        "{text}"
    );
    assert_eq!(text.matches("\n---\n").count(), 2, "{text}");
    assert_eq!(text.matches("kind: PolicyReport\n").count(), 2, "{text}");
}

/// Every flag of `kyverno apply` and `kyverno test` (v1.19) parses: the
/// ones leash honours run, the ones it cannot honour fail (exit 2) naming
/// the flag; none is an unknown argument.
#[test]
fn every_kyverno_apply_and_test_flag_parses() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("p.yaml"), NS_POLICIES).unwrap();
    fs::write(dir.path().join("r.yaml"), NS_PODS).unwrap();
    fs::write(
        dir.path().join("values.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: Values\n",
    )
    .unwrap();
    fs::write(
        dir.path().join("user.yaml"),
        "apiVersion: cli.kyverno.io/v1alpha1\nkind: UserInfo\n",
    )
    .unwrap();
    let p = dir.path().join("p.yaml");
    let r = dir.path().join("r.yaml");
    let d = |f: &str| dir.path().join(f).display().to_string();
    // (flags, the exit code: 1 as the pods fail, 2 refused).
    let cases: Vec<(Vec<String>, i32)> = vec![
        (vec!["--audit-warn".into()], 1),
        (vec!["-r".into(), d("r.yaml")], 1),
        (vec!["--resources".into(), d("r.yaml")], 1),
        (
            vec!["-r".into(), format!("{},{}", d("r.yaml"), d("r.yaml"))],
            1,
        ),
        (
            vec!["-e".into(), format!("{},{}", d("p.yaml"), d("p.yaml"))],
            1,
        ),
        (vec!["-p".into()], 1),
        (vec!["--policy-report".into()], 1),
        (
            vec!["-p".into(), "--output-format".into(), "json".into()],
            1,
        ),
        (
            vec!["-p".into(), "--report-format".into(), "wgpolicyk8s".into()],
            1,
        ),
        (vec!["-t".into()], 1),
        (vec!["--table".into()], 1),
        (vec!["--remove-color".into()], 1),
        (vec!["--detailed-results".into()], 1),
        (vec!["--continue-on-fail".into()], 1),
        (vec!["--exceptions-within-policies".into()], 1),
        (vec!["--warn-exit-code".into(), "3".into()], 1),
        (vec!["--warn-no-pass".into()], 1),
        (vec!["-f".into(), d("values.yaml")], 1),
        (vec!["--values-file".into(), d("values.yaml")], 1),
        (vec!["-s".into(), "a=b".into()], 1),
        (vec!["--set".into(), "a=b".into()], 1),
        (vec!["-u".into(), d("user.yaml")], 1),
        (vec!["--userinfo".into(), d("user.yaml")], 1),
        (vec!["-e".into(), d("p.yaml")], 1),
        (vec!["--exceptions".into(), d("p.yaml")], 1),
        (vec!["--target-resource".into(), d("r.yaml")], 1),
        (vec!["--target-resources".into(), d("r.yaml")], 1),
        (vec!["-o".into(), d("mutated")], 1),
        (vec!["--output".into(), d("mutated.yaml")], 1),
        (vec!["--batch-size".into(), "10".into()], 1),
        (vec!["--concurrent".into(), "2".into()], 1),
        (vec!["-n".into(), "default".into()], 1),
        (vec!["-b".into(), "main".into()], 2),
        (vec!["--git-branch".into(), "main".into()], 2),
        (vec!["--username".into(), "u".into()], 2),
        (vec!["--password".into(), "p".into()], 2),
        (vec!["--registry".into()], 1),
        (vec!["--registry=false".into()], 1),
        (vec!["--cluster-wide-resources".into()], 2),
        (vec!["--context-file".into(), "c.yaml".into()], 2),
        (vec!["--continue-on-error".into()], 2),
        (vec!["--crd-paths".into(), "crds".into()], 2),
        (vec!["--envoy-payload".into(), "e.json".into()], 2),
        (vec!["--http-payload".into(), "h.json".into()], 2),
        (vec!["--json".into(), "j.json".into()], 2),
        (vec!["--parameter-resource".into(), "x.yaml".into()], 2),
        (vec!["--exceptions-with-resources".into()], 2),
        (vec!["--exceptions-within-resources".into()], 2),
        (vec!["--generate-exceptions".into()], 2),
        (vec!["--generated-exception-ttl".into(), "1h".into()], 2),
        (vec!["--show-performance".into()], 2),
        (vec!["-i".into()], 2),
        (vec!["--stdin".into()], 2),
        (vec!["--warnings-as-errors".into()], 2),
    ];
    for (flags, code) in cases {
        let out = apply(
            &p,
            &r,
            &flags.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "apply {flags:?}: {err}");
        if code == 2 {
            let flag = flags[0].trim_start_matches('-');
            assert!(
                err.contains("is not supported by leash apply") && err.contains(flag),
                "apply {flags:?}: {err}"
            );
        }
    }
    // kyverno test: a folder without tests runs (exit 0) unless
    // --require-tests, as Kyverno's.
    let empty = tempfile::tempdir().unwrap();
    let test: Vec<(Vec<&str>, i32)> = vec![
        (vec![], 0),
        (vec!["--detailed-results"], 0),
        (vec!["--fail-only"], 0),
        (vec!["-f", "kyverno-test.yaml"], 0),
        (vec!["--file-name", "kyverno-test.yaml"], 0),
        (vec!["-o", "json"], 0),
        (vec!["--output-format", "json"], 0),
        (vec!["--remove-color"], 0),
        (vec!["-t", "policy=*"], 0),
        (vec!["--test-case-selector", "policy=*"], 0),
        (vec!["--require-tests"], 1),
        (vec!["-b", "main"], 2),
        (vec!["--git-branch", "main"], 2),
        (vec!["--registry"], 0),
        (vec!["--warnings-as-errors"], 2),
        (vec!["--output-format", "junit"], 2),
    ];
    for (flags, code) in test {
        let out = leash()
            .arg("test")
            .arg(empty.path())
            .args(&flags)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "test {flags:?}: {}",
            stderr(&out)
        );
    }
}

/// `--warn-exit-code N`: results that warn and none failing exit N;
/// `--warn-no-pass`: so does a run where nothing passed.
#[test]
fn apply_warn_exit_code_and_warn_no_pass() {
    let dir = tempfile::tempdir().unwrap();
    let audit = NS_POLICIES
        .split("---")
        .next()
        .unwrap()
        .replace("Enforce", "Audit");
    fs::write(dir.path().join("p.yaml"), audit).unwrap();
    fs::write(dir.path().join("r.yaml"), NS_PODS).unwrap();
    let run = |flags: &[&str]| {
        apply(
            &dir.path().join("p.yaml"),
            &dir.path().join("r.yaml"),
            flags,
        )
        .status
        .code()
    };
    assert_eq!(run(&["--audit-warn"]), Some(0));
    assert_eq!(run(&["--audit-warn", "--warn-exit-code", "3"]), Some(3));
    assert_eq!(run(&["--warn-exit-code", "3"]), Some(1), "fail wins");
    let good = NS_PODS.split("---").next().unwrap();
    fs::write(
        dir.path().join("r.yaml"),
        good.replace("nginx:1.0", "nginx:latest"),
    )
    .unwrap();
    assert_eq!(
        run(&["--audit-warn", "--warn-no-pass", "--warn-exit-code", "4"]),
        Some(4)
    );
}

/// `leash apply` without a cluster reads context as Kyverno's CLI `apply`
/// does: an `apiCall` is answered from the resources given (Kyverno builds
/// a fake client of them), and a `configMap` entry it has no ConfigMap for
/// is left out of the context instead of failing the rule (Kyverno's CLI
/// `apply` has no ConfigMap resolver), so a `||` default applies.
#[test]
fn apply_reads_api_calls_from_the_resources_and_leaves_out_missing_configmaps() {
    let dir = tempfile::tempdir().unwrap();
    let policy = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: netpol-and-priorities
spec:
  rules:
  - name: require-netpol
    match:
      any:
      - resources:
          kinds: [Deployment]
    context:
    - name: count
      apiCall:
        urlPath: "/apis/networking.k8s.io/v1/namespaces/{{request.namespace}}/networkpolicies"
        jmesPath: "items | length(@)"
    validate:
      message: "needs a NetworkPolicy"
      deny:
        conditions:
          any:
          - key: "{{ count }}"
            operator: LessThan
            value: 1
  - name: priority
    match:
      any:
      - resources:
          kinds: [Deployment]
    context:
    - name: allowed
      configMap:
        name: allowed-priorities
        namespace: default
    validate:
      message: "priority not allowed"
      deny:
        conditions:
          any:
          - key: "{{ request.object.spec.template.spec.priorityClassName || '' }}"
            operator: AnyNotIn
            value: "{{ allowed.data.priorities || '' }}"
"#;
    let resources = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: covered, namespace: a}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec: {containers: [{name: c, image: "x:1"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: uncovered, namespace: b}
spec:
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec: {containers: [{name: c, image: "x:1"}]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: all, namespace: a}
spec: {podSelector: {}}
"#;
    fs::write(dir.path().join("policy.yaml"), policy).unwrap();
    fs::write(dir.path().join("resources.yaml"), resources).unwrap();
    let out = apply_given(
        &dir.path().join("policy.yaml"),
        "--resource",
        &dir.path().join("resources.yaml"),
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // require-netpol: covered passes, uncovered fails; priority: both pass.
    assert_has(&text, "pass: 3, fail: 1, warn: 0, error: 0, skip: 0");
    assert_has(
        &text,
        "policy netpol-and-priorities -> resource Deployment/b/uncovered rule require-netpol: needs a NetworkPolicy",
    );
}
