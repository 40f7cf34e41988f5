//! MutatingAdmissionPolicy: matching with and without bindings, params,
//! match conditions and failures, and the engine's order.

use std::sync::Arc;

use serde_json::{Value as Json, json};

use super::*;
use crate::request::NoClusterData;
use crate::vpol::tests::Data;

fn policy(spec: Json) -> MutatingAdmissionPolicy {
    MutatingAdmissionPolicy::compile(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "label"},
        "spec": spec
    }))
    .unwrap()
}

fn binding(spec: Json) -> MutatingAdmissionPolicyBinding {
    let mut spec = spec;
    spec["policyName"] = json!("label");
    MutatingAdmissionPolicyBinding::compile(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1alpha1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
        "spec": spec
    }))
    .unwrap()
}

fn configmaps() -> Json {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                              "operations": ["CREATE"], "resources": ["configmaps"]}]})
}

/// Adds label `team` (from `params.data.team` when there are params).
fn labelling(expr: &str) -> Json {
    json!({
        "matchConstraints": configmaps(),
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": format!("Object{{metadata: Object.metadata{{labels: {{\"team\": {expr}}}}}}}")
        }}]
    })
}

fn cm(name: &str, ns: &str, labels: Json) -> EvalRequest {
    let mut req = EvalRequest::create(Arc::new(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"k": "v"}
    })));
    req.namespace_labels = Some([("env".to_string(), ns.to_string())].into());
    req
}

fn team(out: &Option<(RuleResult, Json)>) -> Option<&str> {
    out.as_ref()
        .and_then(|(_, o)| o["metadata"]["labels"]["team"].as_str())
}

#[test]
fn without_bindings_the_match_constraints_decide() {
    let p = policy(labelling("'a'"));
    let out = p.mutate(&cm("x", "default", json!({})), &[], &NoClusterData);
    assert_eq!(team(&out), Some("a"));
    let (r, object) = out.unwrap();
    assert_eq!((r.status, r.message.as_str()), (Status::Pass, APPLIED));
    assert_eq!(r.source, Source::MutatingAdmissionPolicy);
    assert_eq!(&*r.policy, "label");
    // The rest of the object is kept.
    assert_eq!(object["data"]["k"], "v");
    let pod = EvalRequest::create(Arc::new(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}),
    ));
    assert!(p.mutate(&pod, &[], &NoClusterData).is_none());
}

/// With bindings only their `matchResources` select (a binding without
/// resource rules selects every resource, even one the policy's own
/// constraints would not).
#[test]
fn with_bindings_their_match_resources_decide() {
    let p = policy(labelling("'a'"));
    let by_ns = binding(json!({"matchResources": {"namespaceSelector": {
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["staging"]}]}}}));
    let by_name = binding(json!({"matchResources": {"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
        "resources": ["configmaps"], "resourceNames": ["wanted"]}]}}));
    let by_label =
        binding(json!({"matchResources": {"objectSelector": {"matchLabels": {"color": "red"}}}}));
    let nothing = NoClusterData;
    assert_eq!(
        team(&p.mutate(&cm("x", "staging", json!({})), &[&by_ns], &nothing)),
        Some("a")
    );
    assert!(
        p.mutate(&cm("x", "testing", json!({})), &[&by_ns], &nothing)
            .is_none()
    );
    assert!(
        p.mutate(&cm("other", "x", json!({})), &[&by_name], &nothing)
            .is_none()
    );
    assert_eq!(
        team(&p.mutate(&cm("wanted", "x", json!({})), &[&by_name], &nothing)),
        Some("a")
    );
    assert!(
        p.mutate(
            &cm("x", "x", json!({"color": "blue"})),
            &[&by_label],
            &nothing
        )
        .is_none()
    );
    let secret = EvalRequest::create(Arc::new(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x"}}),
    ));
    let everything = binding(json!({}));
    assert!(
        p.mutate(&secret, &[&everything], &nothing)
            .is_some_and(|(r, _)| r.status == Status::Pass)
    );
}

#[test]
fn params_by_name_and_by_selector() {
    let data = Data(vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "first", "namespace": "p", "labels": {"type": "param"}},
               "data": {"team": "one"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "second", "namespace": "p", "labels": {"type": "param"}},
               "data": {"team": "two"}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "first", "namespace": "x"}, "data": {"team": "local"}}),
    ]);
    let p = policy(labelling("params.data.team"));
    let named = binding(json!({"paramRef": {"name": "second", "namespace": "p"}}));
    assert_eq!(
        team(&p.mutate(&cm("c", "x", json!({})), &[&named], &data)),
        Some("two")
    );
    // Without a namespace, the request's.
    let local = binding(json!({"paramRef": {"name": "first"}}));
    assert_eq!(
        team(&p.mutate(&cm("c", "x", json!({})), &[&local], &data)),
        Some("local")
    );
    // A selector gives the list of the selected parameters, in order.
    let listed = policy(labelling(
        "params.items[1].data.team + '-' + string(size(params.items))",
    ));
    let selecting = binding(json!({"paramRef": {"namespace": "p",
        "selector": {"matchLabels": {"type": "param"}}}}));
    assert_eq!(
        team(&listed.mutate(&cm("c", "x", json!({})), &[&selecting], &data)),
        Some("two-2")
    );
    // No parameter found: `params` is null, reading it fails, and the
    // failed binding gives no result.
    let missing = binding(json!({"paramRef": {"name": "none", "namespace": "p"}}));
    assert!(
        p.mutate(&cm("c", "x", json!({})), &[&missing], &data)
            .is_none()
    );
}

/// Each binding that applies mutates the object the one before produced.
#[test]
fn bindings_chain() {
    let p = policy(json!({
        "matchConstraints": configmaps(),
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'add', path: '/data/n', value: string(int(object.data.?n.orValue('0')) + 1)}]"}}]
    }));
    let (a, b) = (binding(json!({})), binding(json!({})));
    let out = p.mutate(&cm("c", "x", json!({})), &[&a, &b], &NoClusterData);
    assert_eq!(out.unwrap().1["data"]["n"], "2");
}

#[test]
fn match_conditions_and_failures() {
    let mut spec = labelling("'a'");
    spec["matchConditions"] =
        json!([{"name": "red", "expression": "object.metadata.labels.color == 'red'"}]);
    let p = policy(spec.clone());
    let blue = p
        .mutate(&cm("c", "x", json!({"color": "blue"})), &[], &NoClusterData)
        .unwrap();
    assert_eq!(
        (blue.0.status, blue.0.message.as_str()),
        (Status::Skip, NOT_MET)
    );
    assert!(blue.1["metadata"]["labels"].get("team").is_none());
    // A condition that cannot be evaluated: no result under Fail, Skip
    // under Ignore.
    let unlabelled = cm("c", "x", json!(null));
    assert!(p.mutate(&unlabelled, &[], &NoClusterData).is_none());
    spec["failurePolicy"] = json!("Ignore");
    let ignoring = policy(spec);
    assert_eq!(
        ignoring
            .mutate(&unlabelled, &[], &NoClusterData)
            .map(|(r, _)| r.status),
        Some(Status::Skip)
    );
    // A mutation that fails gives no result, whatever the failure policy.
    let mut failing = labelling("object.missing");
    failing["failurePolicy"] = json!("Ignore");
    assert!(
        policy(failing)
            .mutate(&cm("c", "x", json!({})), &[], &NoClusterData)
            .is_none()
    );
}

#[test]
fn compile_errors_name_the_field() {
    let compile = |spec: Json| {
        MutatingAdmissionPolicy::compile(&json!({
            "apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "p"}, "spec": spec
        }))
        .unwrap_err()
        .to_string()
    };
    let err = compile(json!({"mutations": [{"patchType": "ApplyConfiguration",
        "applyConfiguration": {"expression": "Object{"}}]}));
    assert!(
        err.contains("spec.mutations[0].applyConfiguration.expression"),
        "{err}"
    );
    let err = compile(json!({"failurePolicy": "Sometimes"}));
    assert!(err.contains("spec.failurePolicy"), "{err}");
    let err = MutatingAdmissionPolicyBinding::compile(&json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": "b"}, "spec": {}
    }))
    .unwrap_err()
    .to_string();
    assert!(err.contains("spec.policyName"), "{err}");
}

/// The engine runs the MutatingAdmissionPolicies after the classic mutate
/// rules and before the MutatingPolicies, each through its own bindings.
#[test]
fn engine_runs_them_between_classic_rules_and_mutating_policies() {
    let mut engine = crate::Engine::new();
    engine.add_mutating_admission_policy(Arc::new(policy(labelling("'map'"))));
    engine.add_mutating_admission_binding(Arc::new(binding(json!({"matchResources":
        {"objectSelector": {"matchLabels": {"color": "red"}}}}))));
    engine
        .add_json(&json!({
            "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy",
            "metadata": {"name": "after"},
            "spec": {"matchConstraints": configmaps(), "mutations": [{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {\"seen\": object.metadata.labels.team}}}"}}]}
        }))
        .unwrap();
    let m = engine.mutate(
        &cm("c", "x", json!({"color": "red"})),
        &NoClusterData,
        &crate::Bindings::default(),
    );
    assert_eq!(m.object["metadata"]["labels"]["seen"], "map");
    let sources: Vec<Source> = m.steps.iter().map(|s| s.source).collect();
    assert_eq!(
        sources,
        [Source::MutatingAdmissionPolicy, Source::MutatingPolicy]
    );
    // Not selected by its binding: no step.
    let m = engine.mutate(
        &cm("c", "x", json!({"color": "blue"})),
        &NoClusterData,
        &crate::Bindings::default(),
    );
    assert_eq!(m.steps.len(), 1);
}
