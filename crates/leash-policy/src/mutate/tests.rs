//! Engine-level tests of mutate rules: one row per semantic rule, each with
//! its own policy and resource.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::{Bindings, Engine, EvalRequest, Mutation, NoClusterData, Status};

fn policy(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": name},
           "spec": {"rules": rules}})
}

fn rule(name: &str, kinds: &[&str], mutate: Value) -> Value {
    json!({"name": name, "match": {"any": [{"resources": {"kinds": kinds}}]}, "mutate": mutate})
}

/// Policy "p" with one rule "r" that mutates Pods.
fn pod_policy(mutate: Value) -> Value {
    policy("p", json!([rule("r", &["Pod"], mutate)]))
}

/// `engine.mutate` of a create request, with no cluster data.
fn mutate(engine: &Engine, resource: Arc<Value>) -> Mutation {
    engine.mutate(
        &EvalRequest::create(resource),
        &NoClusterData,
        &Bindings::default(),
    )
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
           "spec": {"containers": [
               {"name": "a", "image": "corp.reg.com/a:1"},
               {"name": "b", "image": "docker.io/b:1", "imagePullPolicy": "Never"}
           ],
           "volumes": [{"name": "v1", "hostPath": {"path": "/x"}}, {"name": "v2", "emptyDir": {}}, {"name": "v3", "hostPath": {"path": "/y"}}]}})
}

struct Case {
    name: &'static str,
    policies: Vec<Value>,
    resource: Value,
    /// (rule, status, message prefix)
    results: Vec<(&'static str, Status, &'static str)>,
    /// (JSON pointer, expected value; `null` for absent)
    object: Vec<(&'static str, Value)>,
}

fn run(case: &Case) {
    let mut engine = Engine::new();
    for p in &case.policies {
        assert!(engine.add_json(p).unwrap(), "{}", case.name);
    }
    let input = Arc::new(case.resource.clone());
    let mutation = mutate(&engine, input.clone());
    assert_eq!(
        *input, case.resource,
        "{}: the input is not changed",
        case.name
    );
    let got: Vec<(String, Status, String)> = mutation
        .results()
        .map(|r| (r.rule.clone(), r.status, r.message.clone()))
        .collect();
    assert_eq!(
        got.len(),
        case.results.len(),
        "{}: results {got:?}",
        case.name
    );
    for ((rule, status, msg), (want_rule, want_status, want_msg)) in got.iter().zip(&case.results) {
        assert_eq!(rule, want_rule, "{}", case.name);
        assert_eq!(status, want_status, "{}: {rule}: {msg}", case.name);
        assert!(
            msg.starts_with(want_msg),
            "{}: {rule}: message {msg:?} does not start with {want_msg:?}",
            case.name
        );
    }
    for (pointer, want) in &case.object {
        let actual = mutation
            .object
            .pointer(pointer)
            .cloned()
            .unwrap_or(Value::Null);
        assert_eq!(&actual, want, "{}: {pointer}", case.name);
    }
}

#[test]
fn mutate_rule_table() {
    let cases = vec![
        Case {
            name: "a patch that changes the resource passes",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"metadata": {"labels": {"team": "x"}}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated Pod/web in namespace default")],
            object: vec![
                ("/metadata/labels/team", json!("x")),
                ("/metadata/labels/app", json!("web")),
            ],
        },
        Case {
            name: "a patch that changes nothing skips",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"metadata": {"labels": {"app": "web"}}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Skip, "no patches applied")],
            object: vec![("/metadata/labels/app", json!("web"))],
        },
        Case {
            name: "a rule that does not match gives no result",
            policies: vec![policy(
                "p",
                json!([rule(
                    "r",
                    &["Service"],
                    json!({"patchStrategicMerge": {"metadata": {"labels": {"x": "y"}}}})
                )]),
            )],
            resource: pod(),
            results: vec![],
            object: vec![("/metadata/labels/x", Value::Null)],
        },
        Case {
            name: "preconditions not met skip",
            policies: vec![policy(
                "p",
                json!([{
                    "name": "r", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "preconditions": {"all": [{"key": "{{request.object.metadata.labels.app}}", "operator": "Equals", "value": "db"}]},
                    "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"x": "y"}}}}
                }]),
            )],
            resource: pod(),
            results: vec![("r", Status::Skip, "preconditions not met")],
            object: vec![("/metadata/labels/x", Value::Null)],
        },
        Case {
            name: "a failed conditional anchor skips",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"metadata": {"labels": {"(app)": "db", "x": "y"}}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Skip, "no patches applied")],
            object: vec![("/metadata/labels/x", Value::Null)],
        },
        Case {
            name: "a conditional anchor in a list patches the matching elements",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"spec": {"containers": [{"(image)": "corp.reg.com/*", "imagePullPolicy": "Always"}]}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![
                ("/spec/containers/0/imagePullPolicy", json!("Always")),
                ("/spec/containers/1/imagePullPolicy", json!("Never")),
            ],
        },
        Case {
            name: "add-if-not-present per element (foreach) adds only where missing",
            policies: vec![pod_policy(json!({"foreach": [{
                "list": "request.object.spec.containers",
                "patchStrategicMerge": {"spec": {"containers": [{"(name)": "{{element.name}}", "securityContext": {"+(runAsNonRoot)": true}}]}}
            }]}))],
            resource: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                             "spec": {"containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsNonRoot": false}}]}}),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![
                (
                    "/spec/containers/0/securityContext/runAsNonRoot",
                    json!(true),
                ),
                (
                    "/spec/containers/1/securityContext/runAsNonRoot",
                    json!(false),
                ),
            ],
        },
        Case {
            // Kyverno resolves the anchor once for the whole list, against
            // the first matching element (kyverno/kyverno#6750): a key the
            // first container has is then added to none.
            name: "add-if-not-present in a list is resolved against the first element",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"spec": {"containers": [{"(name)": "*", "+(imagePullPolicy)": "IfNotPresent"}]}}}),
            )],
            resource: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                             "spec": {"containers": [{"name": "a", "imagePullPolicy": "Never"}, {"name": "b"}]}}),
            results: vec![("r", Status::Skip, "no patches applied")],
            object: vec![("/spec/containers/1/imagePullPolicy", Value::Null)],
        },
        Case {
            name: "a failed global anchor skips the whole patch",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"spec": {"containers": [{"<(image)": "quay.io/*"}], "imagePullSecrets": [{"name": "s"}]}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Skip, "no patches applied")],
            object: vec![("/spec/imagePullSecrets", Value::Null)],
        },
        Case {
            name: "json6902 with variables, - append and ~1 escaping",
            policies: vec![pod_policy(
                json!({"patchesJson6902": "- op: add\n  path: /metadata/annotations\n  value: {}\n- op: add\n  path: /metadata/annotations/example.com~1owner\n  value: \"{{request.object.metadata.labels.app}}\"\n- op: add\n  path: /spec/volumes/-\n  value: {name: v4, emptyDir: {}}\n"}),
            )],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![
                ("/metadata/annotations/example.com~1owner", json!("web")),
                ("/spec/volumes/3/name", json!("v4")),
            ],
        },
        Case {
            name: "json6902 on a missing path is an error",
            policies: vec![pod_policy(
                json!({"patchesJson6902": "[{\"op\": \"replace\", \"path\": \"/spec/nope\", \"value\": 1}]"}),
            )],
            resource: pod(),
            results: vec![(
                "r",
                Status::Error,
                "failed to patch resource: replace operation does not apply",
            )],
            object: vec![("/spec/nope", Value::Null)],
        },
        Case {
            name: "an unresolvable variable is an error",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"metadata": {"labels": {"x": "{{request.object.metadata.nope}}"}}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Error, "variable substitution failed")],
            object: vec![("/metadata/labels/x", Value::Null)],
        },
        Case {
            name: "foreach: element and elementIndex, descending removal",
            policies: vec![pod_policy(json!({"foreach": [{
                "list": "request.object.spec.volumes", "order": "Descending",
                "preconditions": {"all": [{"key": "hostPath", "operator": "AnyIn", "value": "{{ element.keys(@) }}"}]},
                "patchesJson6902": "- op: remove\n  path: /spec/volumes/{{elementIndex}}\n"
            }]}))],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![
                ("/spec/volumes/0/name", json!("v2")),
                ("/spec/volumes/1", Value::Null),
            ],
        },
        Case {
            name: "foreach: strategic merge per element",
            policies: vec![pod_policy(json!({"foreach": [{
                "list": "request.object.spec.containers",
                "patchStrategicMerge": {"metadata": {"annotations": {"img/{{element.name}}": "{{element.image}}"}}}
            }]}))],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![
                ("/metadata/annotations/img~1a", json!("corp.reg.com/a:1")),
                ("/metadata/annotations/img~1b", json!("docker.io/b:1")),
            ],
        },
        Case {
            name: "nested foreach: elementIndex0 and elementIndex1",
            policies: vec![pod_policy(json!({"foreach": [{
                "list": "request.object.spec.containers",
                "foreach": [{"list": "[element.name, element.image]",
                             "patchesJson6902": "- op: add\n  path: /metadata/labels/c{{elementIndex0}}-{{elementIndex1}}\n  value: \"{{ length(element) }}\"\n"}]
            }]}))],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![
                ("/metadata/labels/c0-0", json!("1")),
                ("/metadata/labels/c1-1", json!("13")),
            ],
        },
        Case {
            name: "foreach whose every element is filtered out skips",
            policies: vec![pod_policy(json!({"foreach": [{
                "list": "request.object.spec.containers",
                "preconditions": {"all": [{"key": "{{element.name}}", "operator": "Equals", "value": "zzz"}]},
                "patchStrategicMerge": {"metadata": {"labels": {"x": "y"}}}
            }]}))],
            resource: pod(),
            results: vec![("r", Status::Skip, "0 elements processed")],
            object: vec![("/metadata/labels/x", Value::Null)],
        },
        Case {
            name: "a later foreach declaration sees the earlier one's output",
            policies: vec![pod_policy(json!({"foreach": [
                {"list": "['one']", "patchStrategicMerge": {"metadata": {"labels": {"first": "{{element}}"}}}},
                {"list": "['two']", "patchStrategicMerge": {"metadata": {"labels": {"second": "{{request.object.metadata.labels.first}}"}}}}
            ]}))],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![("/metadata/labels/second", json!("one"))],
        },
        Case {
            name: "rules run in order, each on the previous output, across policies",
            policies: vec![
                policy(
                    "p1",
                    json!([
                        rule(
                            "add",
                            &["Pod"],
                            json!({"patchStrategicMerge": {"metadata": {"labels": {"stage": "one"}}}})
                        ),
                        rule(
                            "needs-add",
                            &["Pod"],
                            json!({"patchStrategicMerge": {"metadata": {"labels": {"(stage)": "one", "stage2": "two"}}}})
                        )
                    ]),
                ),
                policy(
                    "p2",
                    json!([rule(
                        "needs-p1",
                        &["Pod"],
                        json!({"patchStrategicMerge": {"metadata": {"labels": {"(stage2)": "two", "stage3": "three"}}}})
                    )]),
                ),
            ],
            resource: pod(),
            results: vec![
                ("add", Status::Pass, "mutated"),
                ("needs-add", Status::Pass, "mutated"),
                ("needs-p1", Status::Pass, "mutated"),
            ],
            object: vec![("/metadata/labels/stage3", json!("three"))],
        },
        Case {
            name: "autogen: a Pod rule patches a Deployment's pod template",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"spec": {"containers": [{"(name)": "*", "imagePullPolicy": "Always"}]}}}),
            )],
            resource: json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                             "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
            results: vec![(
                "autogen-r",
                Status::Pass,
                "mutated Deployment/d in namespace default",
            )],
            object: vec![
                (
                    "/spec/template/spec/containers/0/imagePullPolicy",
                    json!("Always"),
                ),
                ("/spec/containers", Value::Null),
            ],
        },
        Case {
            name: "{{@}} is the resource's value at the patch's path",
            policies: vec![pod_policy(
                json!({"patchStrategicMerge": {"metadata": {"labels": {"app": "{{ to_upper('{{@}}') }}"}}}}),
            )],
            resource: pod(),
            results: vec![("r", Status::Pass, "mutated")],
            object: vec![("/metadata/labels/app", json!("WEB"))],
        },
    ];
    for case in &cases {
        run(case);
    }
}

/// Kyverno's CLI validates the mutated resource: a validate rule sees what
/// the mutate rules wrote.
#[test]
fn apply_validates_the_mutated_resource() {
    let mut engine = Engine::new();
    let p = policy(
        "p",
        json!([
            rule("set", &["Pod"], json!({"patchStrategicMerge": {"spec": {"containers": [{"(name)": "*", "imagePullPolicy": "Always"}]}}})),
            {"name": "check", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
             "validate": {"pattern": {"spec": {"containers": [{"imagePullPolicy": "Always"}]}}}}
        ]),
    );
    engine.add_json(&p).unwrap();
    let (mutation, results) = engine
        .evaluation(&NoClusterData)
        .apply(EvalRequest::create(Arc::new(pod())));
    let results = results.into_vec();
    assert!(mutation.changed());
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].rule, "check");
    assert_eq!(results[0].status, Status::Pass, "{results:?}");
    // Without the mutation, the same validation fails.
    let results = engine
        .evaluation(&NoClusterData)
        .validate(&crate::Prepared::new(EvalRequest::create(Arc::new(pod()))))
        .into_vec();
    assert_eq!(results[0].status, Status::Fail);
}

#[test]
fn steps_keep_the_object_after_each_policy() {
    let mut engine = Engine::new();
    for (name, label) in [("first", "a"), ("second", "b")] {
        engine
            .add_json(&policy(
                name,
                json!([rule(
                    "r",
                    &["Pod"],
                    json!({"patchStrategicMerge": {"metadata": {"labels": {label: "1"}}}})
                )]),
            ))
            .unwrap();
    }
    let m = mutate(&engine, Arc::new(pod()));
    assert_eq!(m.steps.len(), 2);
    let first = m.object_after("first").unwrap();
    assert_eq!(first["metadata"]["labels"]["a"], "1");
    assert!(first["metadata"]["labels"].get("b").is_none());
    assert_eq!(m.object["metadata"]["labels"]["b"], "1");
}

/// Objects for lookups of existing resources (`mutate.targets`, a
/// MutatingPolicy's mutate-existing targets), listed by kind or by the
/// plural of a built-in kind.
#[derive(Debug)]
pub(crate) struct Objects(pub(crate) Vec<Arc<Value>>);

impl crate::ClusterData for Objects {
    fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<Value>> {
        None
    }
    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        let (group, _) = crate::kinds::split_api_version(api_version);
        let kind = crate::kinds::by_resource(group, resource).map_or(resource, |k| k.kind);
        self.0
            .iter()
            .filter(|o| {
                o["kind"] == kind
                    && (namespace.is_empty() || o["metadata"]["namespace"] == namespace)
            })
            .cloned()
            .collect()
    }
}

/// `mutate.targets`: the patch applies to the existing resources the
/// targets name (with `target` bound), one result each; the admitted
/// resource is left as it is.
#[test]
fn targets_patch_existing_resources() {
    let mut engine = Engine::new();
    engine
        .add_json(&policy("p", json!([{
            "name": "label-secrets",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
            "mutate": {
                "targets": [{"apiVersion": "v1", "kind": "Secret", "namespace": "{{request.object.metadata.namespace}}", "name": "app-*",
                             "preconditions": {"all": [{"key": "{{target.metadata.name}}", "operator": "NotEquals", "value": "app-skip"}]}}],
                "patchStrategicMerge": {"metadata": {"labels": {"config": "{{request.object.metadata.name}}", "self": "{{target.metadata.name}}"}}}
            }
        }])))
        .unwrap();
    let secret = |name: &str, ns: &str| {
        Arc::new(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}}),
        )
    };
    let data = Objects(vec![
        secret("app-a", "n1"),
        secret("app-skip", "n1"),
        secret("other", "n1"),
        secret("app-b", "n2"),
    ]);
    let cm = Arc::new(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "n1"}}),
    );
    let m = engine.mutate(
        &EvalRequest::create(cm.clone()),
        &data,
        &Bindings::default(),
    );
    assert_eq!(m.object, cm, "the trigger is not patched");
    let statuses: Vec<Status> = m.results().map(|r| r.status).collect();
    assert_eq!(statuses, vec![Status::Pass, Status::Skip]);
    let targets = &m.steps[0].targets;
    assert_eq!(targets.len(), 2);
    assert_eq!(
        targets[0].object["metadata"]["labels"],
        json!({"config": "cfg", "self": "app-a"})
    );
    assert_eq!(targets[1].status, Status::Skip);
    assert!(targets[1].object["metadata"].get("labels").is_none());
}

/// Mutate existing at admission and in the background: the webhook asks
/// which `mutate.targets` rules a request triggers (match and exclude
/// only, no lookups); the background runs just those rules for the
/// trigger, with the targets from the cluster data. The mutating webhook
/// (`mutate_admission`) leaves them out.
#[test]
fn mutate_existing_is_triggered_then_run_for_the_named_rules() {
    let mut engine = Engine::new();
    engine
        .add_json(&policy("p", json!([
            {"name": "label-secrets",
             "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
             "exclude": {"any": [{"resources": {"names": ["ignored"]}}]},
             "mutate": {
                "targets": [{"apiVersion": "v1", "kind": "Secret", "namespace": "{{request.object.metadata.namespace}}"}],
                "patchStrategicMerge": {"metadata": {"labels": {"config": "{{request.object.metadata.name}}"}}}}},
            {"name": "label-trigger",
             "match": {"any": [{"resources": {"kinds": ["ConfigMap"]}}]},
             "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"seen": "yes"}}}}}
        ])))
        .unwrap();
    let cm = |name: &str| {
        Arc::new(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "n1"}}),
        )
    };
    let triggered = engine.mutate_existing_triggers(&EvalRequest::create(cm("cfg")));
    assert_eq!(triggered.len(), 1);
    assert_eq!(triggered[0].1, ["label-secrets"]);
    assert!(
        engine
            .mutate_existing_triggers(&EvalRequest::create(cm("ignored")))
            .is_empty(),
        "excluded"
    );
    let data = Objects(vec![Arc::new(
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "n1"}}),
    )]);
    let (results, targets) = engine
        .mutate_existing(
            "p",
            &["label-secrets".to_string()],
            &EvalRequest::create(cm("cfg")),
            &data,
        )
        .expect("the policy is known");
    assert_eq!(results.len(), 1, "only the named targets rule: {results:?}");
    assert_eq!(results[0].status, Status::Pass);
    assert_eq!(
        targets[0].object["metadata"]["labels"],
        json!({"config": "cfg"})
    );
    assert!(
        engine
            .mutate_existing("nope", &[], &EvalRequest::create(cm("cfg")), &data)
            .is_none()
    );
    // At admission only the rule that patches the trigger runs.
    let m = engine.mutate_admission(&EvalRequest::create(cm("cfg")), &data, &Bindings::default());
    let rules: Vec<&str> = m.results().map(|r| r.rule.as_str()).collect();
    assert_eq!(rules, ["label-trigger"]);
    assert!(m.steps[0].targets.is_empty());
}

/// A PolicyException that covers a mutate rule: the rule skips and the
/// resource is not patched.
#[test]
fn an_exception_skips_a_mutate_rule() {
    let mut engine = Engine::new();
    engine
        .add_json(&pod_policy(
            json!({"patchStrategicMerge": {"metadata": {"labels": {"x": "y"}}}}),
        ))
        .unwrap();
    let exception = json!({
        "apiVersion": "kyverno.io/v2", "kind": "PolicyException", "metadata": {"name": "allow-web", "namespace": "default"},
        "spec": {"exceptions": [{"policyName": "p", "ruleNames": ["r"]}],
                 "match": {"any": [{"resources": {"kinds": ["Pod"], "names": ["web"]}}]}}
    });
    assert!(engine.add_json(&exception).unwrap());
    let m = mutate(&engine, Arc::new(pod()));
    let r: Vec<_> = m.results().collect();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].status, Status::Skip);
    assert!(
        r[0].message.contains("policy exception default/allow-web"),
        "{}",
        r[0].message
    );
    assert!(m.object["metadata"]["labels"].get("x").is_none());
}
