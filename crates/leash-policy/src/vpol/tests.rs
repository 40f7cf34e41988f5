//! ValidatingPolicy tests: semantics table and a corpus harness.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value as Json, json};

use super::*;
use crate::cel::CelRule;
use crate::request::NoClusterData;

/// The strings of the list `v` (none when it is not one).
fn strings(v: &Json) -> Vec<String> {
    Vec::<String>::deserialize(v).unwrap_or_default()
}

fn policy(spec: Json) -> ValidatingPolicy {
    let doc = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1",
        "kind": "ValidatingPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    });
    match ValidatingPolicy::compile(&doc) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

fn pod(name: &str, labels: Json, spec: Json) -> Json {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels}, "spec": spec})
}

fn evaluate(p: &ValidatingPolicy, obj: Json) -> Option<RuleResult> {
    p.evaluate(&EvalRequest::create(Arc::new(obj)), &NoClusterData)
}

fn status(p: &ValidatingPolicy, obj: Json) -> Option<Status> {
    evaluate(p, obj).map(|r| r.status)
}

fn pods_rule() -> Json {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]})
}

#[test]
fn semantics() {
    let has_label =
        json!([{"expression": "has(object.metadata.labels.app)", "message": "app label required"}]);
    let cases: Vec<(&str, Json, Json, Option<Status>)> = vec![
        (
            "pass",
            json!({"matchConstraints": pods_rule(), "validations": has_label}),
            pod("a", json!({"app": "x"}), json!({})),
            Some(Status::Pass),
        ),
        (
            "fail",
            json!({"matchConstraints": pods_rule(), "validations": has_label}),
            pod("a", json!({}), json!({})),
            Some(Status::Fail),
        ),
        (
            "other kind not matched",
            json!({"matchConstraints": pods_rule(), "validations": has_label}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            None,
        ),
        (
            "wildcard resources",
            json!({"matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]}, "validations": has_label}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": {}}}),
            Some(Status::Fail),
        ),
        (
            "operation not matched",
            json!({"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"], "resources": ["pods"]}]}, "validations": has_label}),
            pod("a", json!({}), json!({})),
            None,
        ),
        (
            "excluded",
            json!({"matchConstraints": {"resourceRules": pods_rule()["resourceRules"], "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"], "resourceNames": ["a"]}]}, "validations": has_label}),
            pod("a", json!({}), json!({})),
            None,
        ),
        (
            "object selector",
            json!({"matchConstraints": {"resourceRules": pods_rule()["resourceRules"], "objectSelector": {"matchLabels": {"team": "x"}}}, "validations": has_label}),
            pod("a", json!({"team": "y"}), json!({})),
            None,
        ),
        (
            "object selector expression",
            json!({"matchConstraints": {"resourceRules": pods_rule()["resourceRules"], "objectSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["y"]}]}}, "validations": has_label}),
            pod("a", json!({"team": "y"}), json!({})),
            Some(Status::Fail),
        ),
        (
            "namespace selector without labels",
            json!({"matchConstraints": {"resourceRules": pods_rule()["resourceRules"], "namespaceSelector": {"matchLabels": {"env": "prod"}}}, "validations": has_label}),
            pod("a", json!({}), json!({})),
            None,
        ),
        (
            "match condition false is skip",
            json!({"matchConstraints": pods_rule(), "matchConditions": [{"name": "c", "expression": "has(object.spec.hostNetwork)"}], "validations": has_label}),
            pod("a", json!({}), json!({})),
            Some(Status::Skip),
        ),
        (
            "match condition error",
            json!({"matchConstraints": pods_rule(), "matchConditions": [{"name": "c", "expression": "object.nope == 1"}], "validations": has_label}),
            pod("a", json!({}), json!({})),
            Some(Status::Error),
        ),
        (
            "match condition error ignored",
            json!({"failurePolicy": "Ignore", "matchConstraints": pods_rule(), "matchConditions": [{"name": "c", "expression": "object.nope == 1"}], "validations": has_label}),
            pod("a", json!({}), json!({})),
            Some(Status::Skip),
        ),
        (
            "expression error",
            json!({"matchConstraints": pods_rule(), "validations": [{"expression": "object.nope == 1"}]}),
            pod("a", json!({}), json!({})),
            Some(Status::Error),
        ),
        (
            "non-bool is error",
            json!({"matchConstraints": pods_rule(), "validations": [{"expression": "'x'"}]}),
            pod("a", json!({}), json!({})),
            Some(Status::Error),
        ),
        (
            "variables in order",
            json!({"matchConstraints": pods_rule(),
            "variables": [{"name": "a", "expression": "1"}, {"name": "b", "expression": "variables.a + 1"}],
            "validations": [{"expression": "variables.b == 2"}]}),
            pod("a", json!({}), json!({})),
            Some(Status::Pass),
        ),
        (
            "unused failing variable is harmless",
            json!({"matchConstraints": pods_rule(),
            "variables": [{"name": "bad", "expression": "object.nope"}],
            "validations": [{"expression": "true || variables.bad"}]}),
            pod("a", json!({}), json!({})),
            Some(Status::Pass),
        ),
        (
            "used failing variable is an error",
            json!({"matchConstraints": pods_rule(),
            "variables": [{"name": "bad", "expression": "object.nope"}],
            "validations": [{"expression": "variables.bad == 1"}]}),
            pod("a", json!({}), json!({})),
            Some(Status::Error),
        ),
        (
            "autogen deployment",
            json!({"matchConstraints": pods_rule(), "validations": [{"expression": "object.spec.containers.all(c, c.image != 'bad')"}]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
                "spec": {"template": {"spec": {"containers": [{"image": "bad"}]}}}}),
            Some(Status::Fail),
        ),
        (
            "autogen cronjob",
            json!({"matchConstraints": pods_rule(), "validations": [{"expression": "object.spec.containers.all(c, c.image != 'bad')"}]}),
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "d", "namespace": "ns"},
                "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"image": "good"}]}}}}}}),
            Some(Status::Pass),
        ),
        (
            "autogen keeps metadata.name",
            json!({"matchConstraints": pods_rule(), "validations": [{"expression": "object.metadata.name == 'd'"}]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
                "spec": {"template": {"spec": {}}}}),
            Some(Status::Pass),
        ),
        (
            "autogen limited by controllers",
            json!({"matchConstraints": pods_rule(), "autogen": {"podControllers": {"controllers": ["jobs"]}},
            "validations": [{"expression": "false"}]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns"},
                "spec": {"template": {"spec": {}}}}),
            None,
        ),
        (
            "no autogen with object selector",
            json!({"matchConstraints": {"resourceRules": pods_rule()["resourceRules"], "objectSelector": {"matchLabels": {"a": "b"}}},
            "validations": [{"expression": "false"}]}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "ns", "labels": {"a": "b"}},
                "spec": {"template": {"spec": {}}}}),
            None,
        ),
    ];
    let mut failures = Vec::new();
    for (name, spec, obj, want) in cases {
        let got = status(&policy(spec), obj);
        if got != want {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Resource rules with subresources, as Kubernetes matches them: `pods`
/// is the resource alone, `pods/binding` one subresource, `pods/*` every
/// subresource, `*/*` everything; the request's resource (an admission
/// review's `resource` and `subResource`) decides, not the object's kind.
#[test]
fn resource_rules_match_subresources_as_kubernetes_does() {
    let rule = |resources: &[&str]| {
        policy(json!({"validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
                "operations": ["CREATE"], "resources": resources}]},
            "validations": [{"expression": "true"}]}))
    };
    let binding = json!({"apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "p", "namespace": "ns"}, "target": {"kind": "Node", "name": "n"}});
    let as_resource = |object: &Json, resource: Option<&str>| EvalRequest {
        request_resource: resource.map(str::to_string),
        ..EvalRequest::create(Arc::new(object.clone()))
    };
    let pod = pod("p", json!({}), json!({}));
    let cases: [(&[&str], &Json, Option<&str>, bool); 9] = [
        (&["pods"], &pod, None, true),
        (&["pods"], &pod, Some("pods"), true),
        (&["pods"], &binding, Some("pods/binding"), false),
        (&["pods/binding"], &binding, Some("pods/binding"), true),
        (&["pods/binding"], &pod, Some("pods"), false),
        (&["pods/*"], &binding, Some("pods/binding"), true),
        (&["pods/*"], &pod, Some("pods"), false),
        (&["*/*"], &pod, Some("pods"), true),
        (&["*"], &binding, Some("pods/binding"), false),
    ];
    for (resources, object, requested, want) in cases {
        let matched = rule(resources)
            .evaluate(&as_resource(object, requested), &NoClusterData)
            .is_some();
        assert_eq!(matched, want, "{resources:?} for {requested:?}");
    }
}

#[test]
fn messages() {
    let p = policy(json!({"matchConstraints": pods_rule(), "validations": [
        {"expression": "true"},
        {"expression": "false", "message": "static", "messageExpression": "'name ' + object.metadata.name"},
    ]}));
    let r = evaluate(&p, pod("a", json!({}), json!({})));
    assert_eq!(r.as_ref().map(|r| r.message.as_str()), Some("name a"));
    assert_eq!(r.as_ref().map(|r| r.rule.as_str()), Some("p"));
    let p =
        policy(json!({"matchConstraints": pods_rule(), "validations": [{"expression": "false"}]}));
    let r = evaluate(&p, pod("a", json!({}), json!({})));
    assert_eq!(
        r.map(|r| r.message),
        Some("CEL expression validation failed at index 0".into())
    );
}

#[test]
fn accessors_and_compile_errors() {
    let p = policy(
        json!({"validationActions": ["Audit", "Warn"], "evaluation": {"background": {"enabled": false}},
        "matchConstraints": pods_rule(), "validations": [{"expression": "true"}]}),
    );
    assert!(!p.background());
    assert!(p.admission());
    assert_eq!(
        p.validation_actions(),
        &[ValidationAction::Audit, ValidationAction::Warn]
    );
    let res = p.matched_resources();
    for r in [
        "pods",
        "deployments",
        "cronjobs",
        "jobs",
        "statefulsets",
        "daemonsets",
        "replicasets",
    ] {
        assert!(res.iter().any(|(_, _, p)| p == r), "{r}: {res:?}");
    }
    let doc = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy", "metadata": {"name": "p"},
        "spec": {"matchConstraints": pods_rule(), "validations": [{"expression": "true"}, {"expression": "1 +"}]}});
    match ValidatingPolicy::compile(&doc) {
        Err(e) => assert!(
            e.to_string().contains("spec.validations[1].expression"),
            "{e}"
        ),
        Ok(_) => panic!("expected a compile error"),
    }
    // Namespaced variant: only its namespace.
    let doc = json!({"apiVersion": "policies.kyverno.io/v1beta1", "kind": "NamespacedValidatingPolicy",
        "metadata": {"name": "p", "namespace": "other"},
        "spec": {"matchConstraints": pods_rule(), "validations": [{"expression": "false"}]}});
    let p = ValidatingPolicy::compile(&doc).ok();
    assert_eq!(p.as_ref().and_then(|p| p.namespace()), Some("other"));
    assert_eq!(
        p.and_then(|p| status(&p, pod("a", json!({}), json!({})))),
        None
    );
}

#[test]
fn classic_cel_rule() {
    let spec = json!({"variables": [{"name": "n", "expression": "object.metadata.name"}],
    "expressions": [
        {"expression": "variables.n != 'bad'", "message": "bad name"},
        {"expression": "variables.n != 'worse'", "messageExpression": "'got ' + variables.n"},
        {"expression": "variables.n != 'worst'"},
        {"expression": "variables.n != 'err' || object.nope"},
    ]});
    let rule = match CelRule::compile(&spec, "ClusterPolicy", "p", "spec.rules[0].validate.cel") {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    for (name, want, msg) in [
        ("good", Status::Pass, ""),
        ("bad", Status::Fail, "bad name"),
        ("worse", Status::Fail, "got worse"),
        (
            "worst",
            Status::Fail,
            "failed expression: variables.n != 'worst'",
        ),
        ("err", Status::Fail, "resulted in error"),
    ] {
        let req = EvalRequest::create(Arc::new(pod(name, json!({}), json!({}))));
        let (s, m) = rule.evaluate(&req, &NoClusterData);
        assert_eq!(
            (s, &m),
            (
                rule.evaluate_interpreted(&req, &NoClusterData).0,
                &rule.evaluate_interpreted(&req, &NoClusterData).1
            ),
            "{name}: fast path and interpreter"
        );
        assert_eq!(s, want, "{name}: {m}");
        assert!(m.contains(msg), "{name}: {m}");
    }
    let bad = json!({"expressions": [{"expression": "true"}, {"expression": "object."}]});
    match CelRule::compile(&bad, "ClusterPolicy", "p", "spec.rules[0].validate.cel") {
        Err(e) => assert!(
            e.to_string()
                .contains("spec.rules[0].validate.cel.expressions[1].expression"),
            "{e}"
        ),
        Ok(_) => panic!("expected an error"),
    }
}

// ------------------------------------------------------------ corpus harness

const CORPUS: &str = "/work/shared/kyverno-policies";

/// Objects listed by apiVersion, kind or plural, and namespace.
#[derive(Debug, Default)]
pub(crate) struct Data(pub(crate) Vec<Json>);

impl ClusterData for Data {
    fn get(&self, api: &str, res: &str, ns: &str, name: &str) -> Option<Arc<Json>> {
        self.list(api, res, ns)
            .into_iter()
            .find(|o| o["metadata"]["name"].as_str() == Some(name))
    }
    fn list(&self, api: &str, res: &str, ns: &str) -> Vec<Arc<Json>> {
        self.0
            .iter()
            .filter(|o| {
                let kind = o["kind"].as_str().unwrap_or("");
                o["apiVersion"].as_str() == Some(api)
                    && (kind == res || crate::kinds::plural_of(kind) == res)
                    && (ns.is_empty() || o["metadata"]["namespace"].as_str().unwrap_or("") == ns)
            })
            .map(|o| Arc::new(o.clone()))
            .collect()
    }
}

fn docs(path: &Path) -> Vec<Json> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    serde_saphyr::from_multiple::<Json>(&text)
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d.is_object())
        .collect()
}

/// Runs one corpus folder; returns the mismatches.
fn run_folder(folder: &str) -> Vec<String> {
    let dir = PathBuf::from(CORPUS).join(folder).join(".kyverno-test");
    let test = docs(&dir.join("kyverno-test.yaml"))
        .into_iter()
        .next()
        .unwrap_or_default();
    let files =
        |k: &str| -> Vec<PathBuf> { strings(&test[k]).iter().map(|p| dir.join(p)).collect() };
    let policies: Vec<Json> = files("policies").iter().flat_map(|p| docs(p)).collect();
    let resources: Vec<Json> = files("resources").iter().flat_map(|p| docs(p)).collect();
    let values = test["variables"]
        .as_str()
        .map(|v| docs(&dir.join(v)))
        .unwrap_or_default();
    let values = values.into_iter().next().unwrap_or_default();
    let context = test["context"]
        .as_str()
        .map(|c| docs(&dir.join(c)))
        .unwrap_or_default();
    let data = Data(
        context
            .iter()
            .flat_map(|c| {
                c["spec"]["resources"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect(),
    );
    let namespaces: Vec<Json> = values["namespaces"].as_array().cloned().unwrap_or_default();
    let mut out = Vec::new();
    for row in test["results"].as_array().cloned().unwrap_or_default() {
        let want = row["result"].as_str().unwrap_or("");
        let pol_name = row["policy"].as_str().unwrap_or("");
        let kind = row["kind"].as_str().unwrap_or("");
        for res_id in strings(&row["resources"]) {
            let (rns, rname) = res_id.split_once('/').unwrap_or(("", &res_id));
            let Some(obj) = resources.iter().find(|r| {
                r["metadata"]["name"].as_str() == Some(rname)
                    && (kind.is_empty() || r["kind"].as_str() == Some(kind))
                    && (rns.is_empty()
                        || r["metadata"]["namespace"].as_str().unwrap_or("default") == rns)
            }) else {
                out.push(format!("{folder}: resource {res_id} not found"));
                continue;
            };
            let mut obj = obj.clone();
            let namespaced = crate::kinds::by_kind(obj["kind"].as_str().unwrap_or(""))
                .is_none_or(|k| k.namespaced);
            if namespaced
                && obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .is_empty()
            {
                obj["metadata"]["namespace"] = json!("default");
            }
            let mut req = EvalRequest::create(Arc::new(obj.clone()));
            let ns = req.namespace().to_string();
            if let Some(nsobj) = namespaces
                .iter()
                .find(|n| n["metadata"]["name"].as_str() == Some(&ns))
            {
                req.namespace_object = Some(Arc::new(nsobj.clone()));
                req.namespace_labels = Some(labels_of(nsobj));
            }
            for p in values["policies"].as_array().cloned().unwrap_or_default() {
                if p["name"].as_str() != Some(pol_name) {
                    continue;
                }
                for r in p["resources"].as_array().cloned().unwrap_or_default() {
                    if r["name"].as_str() == Some(rname)
                        && let Some(op) = r["values"]["request.operation"]
                            .as_str()
                            .and_then(Operation::parse)
                    {
                        req.operation = op;
                    }
                }
            }
            let got = if row["isValidatingPolicy"].as_bool() == Some(true) {
                let Some(doc) = policies
                    .iter()
                    .find(|p| p["metadata"]["name"].as_str() == Some(pol_name))
                else {
                    out.push(format!("{folder}: policy {pol_name} not found"));
                    continue;
                };
                match ValidatingPolicy::compile(doc) {
                    Ok(p) => p.evaluate(&req, &data).map(|r| {
                        if r.status.as_str() != want {
                            println!("{folder} {res_id}: {}", r.message);
                        }
                        r.status.as_str().to_string()
                    }),
                    Err(e) => Some(format!("compile error {e}")),
                }
            } else {
                let rule_name = row["rule"].as_str().unwrap_or("");
                if rule_name.starts_with("autogen-") {
                    continue;
                }
                let Some(doc) = policies
                    .iter()
                    .find(|p| p["metadata"]["name"].as_str() == Some(pol_name))
                else {
                    out.push(format!("{folder}: policy {pol_name} not found"));
                    continue;
                };
                let rules = doc["spec"]["rules"].as_array().cloned().unwrap_or_default();
                let Some(rule) = rules.iter().find(|r| r["name"].as_str() == Some(rule_name))
                else {
                    continue;
                };
                if rule.get("preconditions").is_some() || rule["validate"].get("cel").is_none() {
                    continue;
                }
                match CelRule::compile(&rule["validate"]["cel"], "ClusterPolicy", pol_name, "cel") {
                    Ok(r) => Some(r.evaluate(&req, &data).0.as_str().to_string()),
                    Err(e) => Some(format!("compile error {e}")),
                }
            };
            if got.as_deref() != Some(want) {
                out.push(format!(
                    "{folder}: {pol_name} {res_id}: got {got:?}, want {want}"
                ));
            }
        }
    }
    out
}

fn corpus_folders(class: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(CORPUS).join("CLASSES.tsv")).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, c)| *c == class)
        .map(|(f, _)| f.to_string())
        .collect()
}

#[test]
fn corpus_selected_folders() {
    if !Path::new(CORPUS).exists() {
        return;
    }
    let mut failures = Vec::new();
    for folder in [
        "other-vpol/advanced-restrict-image-registries",
        "other-vpol/topologyspreadconstraints-policy",
        "other-vpol/limit-hostpath-vols",
        "best-practices-vpol/disallow-latest-tag",
        "pod-security-vpol/baseline/disallow-capabilities",
    ] {
        failures.extend(run_folder(folder));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The whole local corpus; prints mismatches (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn corpus_all() {
    let mut total = 0;
    let mut failures = Vec::new();
    for class in ["ValidatingPolicy", "classic-validate-cel"] {
        for folder in corpus_folders(class) {
            total += 1;
            let f = run_folder(&folder);
            if !f.is_empty() {
                failures.push(f.join("\n"));
            }
        }
    }
    println!(
        "{} of {total} folders with mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A CEL PolicyException (`policies.kyverno.io`, `policyRefs` and
/// `matchConditions`) exempts the resources all its conditions hold for
/// from the ValidatingPolicies it names, as Kyverno reports it; a policy
/// it does not name, a condition that does not hold, and a policy skipped
/// by its own match conditions are left as they are.
#[test]
fn cel_policy_exceptions_exempt_the_policies_they_name() {
    let vpol = |name: &str| {
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name},
            "spec": {"matchConstraints": pods_rule(),
                "matchConditions": [{"name": "not-skipped",
                    "expression": "object.metadata.name != 'skipped'"}],
                "validations": [{"expression": "false", "message": "always fails"}]}})
    };
    let exception = json!({"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "allow-web", "namespace": "kyverno"},
        "spec": {"policyRefs": [{"name": "named", "kind": "ValidatingPolicy"}],
            "matchConditions": [{"name": "web", "expression": "object.metadata.name.startsWith('web')"},
                {"name": "labelled", "expression": "object.metadata.?labels.exempt.orValue('') == 'yes'"}]}});
    let mut engine = crate::Engine::new();
    for doc in [vpol("named"), vpol("other"), exception] {
        engine.add(
            crate::Document::compile(&doc)
                .expect("compiles")
                .expect("a document"),
        );
    }
    let results = |obj: Json| {
        let mut r: Vec<(String, String, Status, String)> = engine
            .evaluation(&NoClusterData)
            .validate(&crate::Prepared::new(EvalRequest::create(Arc::new(obj))))
            .into_vec()
            .into_iter()
            .map(|r| (r.policy.to_string(), r.rule, r.status, r.message))
            .collect();
        r.sort_by(|a, b| a.0.cmp(&b.0));
        r
    };
    let exempt = json!({"exempt": "yes"});
    let got = results(pod("web-1", exempt.clone(), json!({})));
    assert_eq!(
        got[0],
        (
            "named".to_string(),
            "exception".to_string(),
            Status::Skip,
            "rule is skipped due to policy exception: kyverno/allow-web".to_string()
        )
    );
    assert_eq!((got[1].0.as_str(), got[1].2), ("other", Status::Fail));
    // One condition does not hold: no exemption.
    let got = results(pod("web-2", json!({}), json!({})));
    assert_eq!((got[0].0.as_str(), got[0].2), ("named", Status::Fail));
    let got = results(pod("api", exempt.clone(), json!({})));
    assert_eq!((got[0].0.as_str(), got[0].2), ("named", Status::Fail));
    // Skipped by the policy's own match conditions: not an exception.
    let got = results(pod("skipped", exempt, json!({})));
    assert_eq!((got[0].1.as_str(), got[0].2), ("named", Status::Skip));
    // A CEL exception without a policy to name is a compile error.
    let bad = json!({"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "bad"}, "spec": {"policyRefs": [{"kind": "ValidatingPolicy"}]}});
    let err = crate::Document::compile(&bad)
        .expect_err("no name")
        .to_string();
    assert!(err.contains("spec.policyRefs[0].name"), "{err}");
}

/// The files under `dir`, at any depth, that `keep` accepts.
pub(crate) fn files_under(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut walk = vec![dir.to_path_buf()];
    while let Some(dir) = walk.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk.push(path);
            } else if keep(&path) {
                out.push(path);
            }
        }
    }
    out
}

pub(crate) fn is_yaml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// Every YAML document of the files under `dir`.
pub(crate) fn yaml_docs(dir: &Path) -> Vec<Json> {
    files_under(dir, is_yaml)
        .iter()
        .flat_map(|p| docs(p))
        .collect()
}

/// A document of a corpus folder that is a resource, not a Kyverno one.
fn is_resource(doc: &Json) -> bool {
    doc["metadata"].is_object()
        && !doc["apiVersion"]
            .as_str()
            .unwrap_or("")
            .contains("kyverno.io")
}

fn assert_none_differ(differ: &[String], compared: usize) {
    assert!(
        differ.is_empty(),
        "{} of {compared} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
}

/// A CREATE request for `object`, and an UPDATE of it from itself.
fn create_and_update(object: &Json) -> [EvalRequest; 2] {
    let create = EvalRequest::create(Arc::new(object.clone()));
    let mut update = create.clone();
    update.operation = Operation::Update;
    update.old_object = Some(create.object.clone());
    [create, update]
}

/// The CEL fast path gives what the interpreter gives: on pods written
/// here (and Deployments of them, for the autogen variants), and on every
/// resource of the corpus's ValidatingPolicy and Pod Security folders, the
/// ValidatingPolicies of bench/policies/pss-cel and of the resource's own
/// folder have the same result (status and message) with and without it,
/// as CREATE and as UPDATE; and on the pods written here the fast path
/// answers every bench policy by itself.
#[test]
fn fast_path_agrees_with_the_interpreter() {
    fn split(docs: Vec<Json>) -> (Vec<ValidatingPolicy>, Vec<Json>) {
        let mut policies = Vec::new();
        let mut resources = Vec::new();
        for doc in docs {
            if is_validating_policy(&doc) {
                if let Ok(p) = ValidatingPolicy::compile(&doc) {
                    policies.push(p);
                }
            } else if is_resource(&doc) {
                resources.push(doc);
            }
        }
        (policies, resources)
    }
    let bench = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/policies/pss-cel");
    let (bench, _) = split(yaml_docs(&bench));
    assert!(bench.len() >= 17, "bench policies found: {}", bench.len());
    let spec = |extra: Json| {
        let mut spec = json!({"containers": [
            {"name": "a", "image": "nginx", "securityContext": {
                "allowPrivilegeEscalation": false, "runAsNonRoot": true,
                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}]});
        for (k, v) in extra.as_object().into_iter().flatten() {
            spec[k] = v.clone();
        }
        spec
    };
    let written = [
        pod("good", json!({}), spec(json!({}))),
        pod(
            "host",
            json!({"app": "x"}),
            spec(json!({"hostNetwork": true, "hostPID": false,
            "volumes": [{"name": "v", "hostPath": {"path": "/"}}]})),
        ),
        pod(
            "privileged",
            json!({}),
            spec(json!({"initContainers": [{"name": "i", "image": "x",
            "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]},
            "procMount": "Unmasked", "seLinuxOptions": {"type": "spc_t"}}}],
            "securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}],
            "seccompProfile": {"type": "Unconfined"}, "runAsUser": 0}})),
        ),
        pod(
            "ports",
            json!({}),
            spec(json!({"ephemeralContainers": [{"name": "e", "image": "x",
            "ports": [{"containerPort": 80, "hostPort": 8080}]}]})),
        ),
    ];
    let mut mine: Vec<Json> = written.to_vec();
    for p in &written {
        mine.push(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": p["metadata"]["name"], "namespace": "ns"},
            "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": p["spec"]}}}));
    }
    // (policies, resources) to compare on.
    let mut sets = vec![(Vec::new(), mine)];
    let mut folders = corpus_folders("ValidatingPolicy");
    folders.extend(corpus_folders("classic-podSecurity"));
    for folder in folders {
        let (policies, resources) = split(yaml_docs(&Path::new(CORPUS).join(folder)));
        sets.push((policies, resources));
    }
    let (mut compared, mut answered) = (0, 0);
    let mut differ = Vec::new();
    for (policies, resources) in &sets {
        for object in resources {
            for req in &create_and_update(object) {
                for p in bench.iter().chain(policies) {
                    let key = |r: Option<RuleResult>| r.map(|r| (r.status, r.message));
                    let fast = key(p.evaluate(req, &NoClusterData));
                    let slow = key(p.evaluate_interpreted(req, &NoClusterData));
                    compared += 1;
                    answered += usize::from(p.fast_answers(req));
                    if fast != slow {
                        differ.push(format!(
                            "{} on {} {}: fast {fast:?}, interpreter {slow:?}",
                            p.name(),
                            object["kind"],
                            object["metadata"]["name"],
                        ));
                    }
                }
            }
        }
    }
    assert_none_differ(&differ, compared);
    println!("{compared} results compared, {answered} given by the fast path");
    for object in &written {
        let req = EvalRequest::create(Arc::new(object.clone()));
        for p in &bench {
            assert!(
                p.fast_answers(&req),
                "the fast path did not answer {} on {}",
                p.name(),
                object["metadata"]["name"]
            );
        }
    }
}

/// The classic `validate.cel` rules of the corpus's classic-validate-cel
/// folders give, on every resource of their folder, as CREATE and as
/// UPDATE, the same result with the CEL fast path as with the interpreter.
#[test]
fn classic_cel_fast_path_agrees_with_the_interpreter() {
    let mut compared = 0;
    let mut differ = Vec::new();
    for folder in corpus_folders("classic-validate-cel") {
        let all = yaml_docs(&Path::new(CORPUS).join(&folder));
        let mut rules = Vec::new();
        let mut resources = Vec::new();
        for doc in &all {
            if doc["apiVersion"]
                .as_str()
                .unwrap_or("")
                .starts_with("kyverno.io/")
            {
                for rule in doc["spec"]["rules"].as_array().into_iter().flatten() {
                    let validate = &rule["validate"];
                    if let Ok(r) = CelRule::compile(&validate["cel"], "ClusterPolicy", "p", "cel") {
                        rules.push(
                            r.with_default_message(validate["message"].as_str().unwrap_or("")),
                        );
                    }
                }
            } else if is_resource(doc) {
                resources.push(doc.clone());
            }
        }
        for object in &resources {
            for req in &create_and_update(object) {
                for rule in &rules {
                    compared += 1;
                    let fast = rule.evaluate(req, &NoClusterData);
                    let slow = rule.evaluate_interpreted(req, &NoClusterData);
                    if fast != slow {
                        differ.push(format!(
                            "{folder} on {} {}: fast {fast:?}, interpreter {slow:?}",
                            object["kind"], object["metadata"]["name"]
                        ));
                    }
                }
            }
        }
    }
    assert_none_differ(&differ, compared);
    println!("{compared} results compared");
}

/// A JSON-mode policy (`evaluation.mode: JSON`) evaluates JSON payloads
/// with no match constraints (match conditions, variables, validations,
/// CEL exceptions) and gives no result on a Kubernetes resource.
#[test]
fn json_mode_policies_evaluate_payloads() {
    let mut engine = crate::Engine::new();
    for doc in [
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": "big"},
            "spec": {"evaluation": {"mode": "JSON"},
                "matchConditions": [{"name": "has-data", "expression": "has(object.data)"}],
                "variables": [{"name": "v", "expression": "object.data.value"}],
                "validations": [{"expression": "variables.v > 10", "message": "too small"}]}}),
        json!({"apiVersion": "policies.kyverno.io/v1alpha1", "kind": "PolicyException",
            "metadata": {"name": "skip-named"},
            "spec": {"policyRefs": [{"name": "big", "kind": "ValidatingPolicy"}],
                "matchConditions": [{"name": "n", "expression": "object.?name.orValue('') == 'skip'"}]}}),
    ] {
        engine.add(
            crate::Document::compile(&doc)
                .expect("compiles")
                .expect("a document"),
        );
    }
    let on = |payload: Json| {
        let prepared = crate::Prepared::new(EvalRequest::create(Arc::new(payload)));
        engine
            .evaluate_json(&prepared, &NoClusterData)
            .into_iter()
            .map(|r| (r.status, r.message))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        on(json!({"data": {"value": 11}})),
        [(Status::Pass, String::new())]
    );
    assert_eq!(
        on(json!({"data": {"value": 1}})),
        [(Status::Fail, "too small".to_string())]
    );
    assert_eq!(on(json!({"other": 1})), [(Status::Skip, String::new())]);
    assert_eq!(
        on(json!({"name": "skip", "data": {"value": 1}})),
        [(
            Status::Skip,
            "rule is skipped due to policy exception: skip-named".to_string()
        )]
    );
    // Not on a Kubernetes resource.
    let pod = EvalRequest::create(Arc::new(pod("p", json!({}), json!({}))));
    assert!(
        engine
            .evaluation(&NoClusterData)
            .validate(&crate::Prepared::new(pod))
            .into_vec()
            .is_empty()
    );
}

/// HTTP and Envoy authorization policies (`evaluation.mode: HTTP`,
/// `Envoy`): the first validation that builds a response decides (allowed:
/// Pass, denied: Fail), null ones are passed over, a false match condition
/// or no response is Skip; they give no result on a Kubernetes resource.
#[test]
fn authz_policies_answer_with_the_first_response() {
    let authz = |mode: &str, validations: Json| {
        policy(json!({"evaluation": {"mode": mode},
            "matchConditions": [{"name": "get", "expression": "object.attributes.method == 'GET'"}],
            "variables": [{"name": "path", "expression": "object.attributes.path"}],
            "validations": validations}))
    };
    let request = |method: &str, path: &str| {
        EvalRequest::create(Arc::new(
            json!({"attributes": {"method": method, "path": path}}),
        ))
    };
    let on = |p: &ValidatingPolicy, r: &EvalRequest| {
        let r = p.evaluate_authz(r, &NoClusterData);
        (r.status, r.message)
    };
    let http = authz(
        "HTTP",
        json!([
            {"expression": "variables.path.startsWith('/public') ? http.Allowed().Response() : null"},
            {"expression": "variables.path == '/admin' ? http.Denied('admins only').Response() : null"}
        ]),
    );
    assert_eq!(http.evaluation_mode(), EvaluationMode::Http);
    assert_eq!(
        on(&http, &request("GET", "/public/a")),
        (Status::Pass, "request allowed".to_string())
    );
    assert_eq!(
        on(&http, &request("GET", "/admin")),
        (
            Status::Fail,
            "request denied, reason: admins only".to_string()
        )
    );
    assert_eq!(on(&http, &request("GET", "/other")).0, Status::Skip);
    assert_eq!(
        on(&http, &request("POST", "/public/a")),
        (Status::Skip, "request does not match".to_string())
    );
    let envoy = authz(
        "Envoy",
        json!([{"expression":
            "envoy.Denied(403).WithBody('no').WithHeader('x-why', 'policy').Response()"}]),
    );
    assert_eq!(
        on(&envoy, &request("GET", "/")),
        (
            Status::Fail,
            "request denied with status code 403".to_string()
        )
    );
    let broken = authz("Envoy", json!([{"expression": "'not a response'"}]));
    assert_eq!(on(&broken, &request("GET", "/")).0, Status::Error);
    // Not on a Kubernetes resource.
    assert_eq!(status(&http, pod("p", json!({}), json!({}))), None);
}

/// Kyverno's CLI has a response of a ValidatingPolicy for every resource
/// unless its match constraints are one plain resource rule (no resource
/// names, selectors or exclusions).
#[test]
fn which_policies_respond_to_every_resource() {
    let with = |constraints: Json| {
        policy(json!({"matchConstraints": constraints,
            "validations": [{"expression": "true"}]}))
        .responds_to_every_resource()
    };
    let rule = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]});
    assert!(!with(json!({"resourceRules": [rule]})));
    assert!(!with(
        json!({"resourceRules": [rule], "objectSelector": {}, "namespaceSelector": {"matchLabels": {}}})
    ));
    assert!(with(
        json!({"resourceRules": [rule], "objectSelector": {"matchLabels": {"a": "b"}}})
    ));
    assert!(with(
        json!({"resourceRules": [rule], "namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}})
    ));
    assert!(with(
        json!({"resourceRules": [rule], "excludeResourceRules": [rule]})
    ));
    assert!(with(json!({"resourceRules": [rule, rule]})));
    let mut named = rule.clone();
    named["resourceNames"] = json!(["p"]);
    assert!(with(json!({"resourceRules": [named]})));
}
