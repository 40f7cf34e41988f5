//! Table-driven tests of MutatingPolicy: structured merge, JSON Patch,
//! typed literals, match conditions, variables, autogen.

use std::sync::Arc;

use serde_json::{Value as Json, json};

use crate::k8s::json_patch::{Failure, Mode, Op};

fn apply_patch(doc: &Json, ops: &[Op]) -> Result<Json, Failure> {
    crate::k8s::json_patch::apply(doc, ops, Mode::Strict)
}
use super::merge::merge;
use super::schema::{self, Shape};
use super::*;
use crate::request::NoClusterData;

fn pod(spec: Json) -> Json {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec})
}

fn pod_shape() -> &'static Shape {
    schema::for_kind("v1", "Pod")
}

// ------------------------------------------------------------ structured merge

#[test]
fn merge_table() {
    struct Case {
        name: &'static str,
        live: Json,
        patch: Json,
        want: Json,
    }
    let cases = [
        Case {
            name: "maps merge key by key, scalars are replaced",
            live: json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": 1}}),
            patch: json!({"metadata": {"labels": {"b": "3", "c": "4"}}, "spec": {"x": 2}}),
            want: json!({"metadata": {"labels": {"a": "1", "b": "3", "c": "4"}}, "spec": {"x": 2}}),
        },
        Case {
            name: "a new field is added with its subtree",
            live: json!({"spec": {}}),
            patch: json!({"spec": {"runtimeClassName": "prod", "securityContext": {"runAsNonRoot": true}}}),
            want: json!({"spec": {"runtimeClassName": "prod", "securityContext": {"runAsNonRoot": true}}}),
        },
        Case {
            name: "containers merge by name: other fields and containers stay",
            live: json!({"spec": {"containers": [
                {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "b:1"}]}}),
            patch: json!({"spec": {"containers": [{"name": "b", "image": "r/b:1"}]}}),
            want: json!({"spec": {"containers": [
                {"name": "a", "image": "a:1", "ports": [{"containerPort": 80}]},
                {"name": "b", "image": "r/b:1"}]}}),
        },
        Case {
            name: "a container of a new name is appended",
            live: json!({"spec": {"containers": [{"name": "a", "image": "a"}]}}),
            patch: json!({"spec": {"containers": [{"name": "sidecar", "image": "s"}]}}),
            want: json!({"spec": {"containers": [{"name": "a", "image": "a"}, {"name": "sidecar", "image": "s"}]}}),
        },
        Case {
            name: "nested list-maps merge by their own keys (env by name, volumeMounts by mountPath)",
            live: json!({"spec": {"containers": [{"name": "a",
                "env": [{"name": "X", "value": "1"}],
                "volumeMounts": [{"mountPath": "/d", "name": "d"}]}]}}),
            patch: json!({"spec": {"containers": [{"name": "a",
                "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}],
                "volumeMounts": [{"mountPath": "/s", "name": "s"}]}]}}),
            want: json!({"spec": {"containers": [{"name": "a",
                "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}],
                "volumeMounts": [{"mountPath": "/d", "name": "d"}, {"mountPath": "/s", "name": "s"}]}]}}),
        },
        Case {
            name: "container ports are keyed by containerPort and protocol (TCP by default)",
            live: json!({"spec": {"containers": [{"name": "a", "ports": [
                {"containerPort": 80, "name": "http"}, {"containerPort": 53, "protocol": "UDP"}]}]}}),
            patch: json!({"spec": {"containers": [{"name": "a", "ports": [
                {"containerPort": 80, "protocol": "TCP", "hostPort": 8080}]}]}}),
            want: json!({"spec": {"containers": [{"name": "a", "ports": [
                {"containerPort": 80, "name": "http", "protocol": "TCP", "hostPort": 8080},
                {"containerPort": 53, "protocol": "UDP"}]}]}}),
        },
        Case {
            name: "an atomic list (tolerations) is replaced whole",
            live: json!({"spec": {"tolerations": [{"key": "a"}, {"key": "b"}]}}),
            patch: json!({"spec": {"tolerations": [{"key": "c"}]}}),
            want: json!({"spec": {"tolerations": [{"key": "c"}]}}),
        },
        Case {
            name: "a list without schema (args) is replaced whole",
            live: json!({"spec": {"containers": [{"name": "a", "args": ["x", "y"]}]}}),
            patch: json!({"spec": {"containers": [{"name": "a", "args": ["z"]}]}}),
            want: json!({"spec": {"containers": [{"name": "a", "args": ["z"]}]}}),
        },
        Case {
            name: "finalizers merge as a set",
            live: json!({"metadata": {"finalizers": ["a", "b"]}}),
            patch: json!({"metadata": {"finalizers": ["b", "c"]}}),
            want: json!({"metadata": {"finalizers": ["a", "b", "c"]}}),
        },
        Case {
            name: "shared items take the patch's order; object-only items keep their place",
            live: json!({"spec": {"volumes": [{"name": "a"}, {"name": "x"}, {"name": "b"}]}}),
            patch: json!({"spec": {"volumes": [{"name": "b"}, {"name": "a"}]}}),
            want: json!({"spec": {"volumes": [{"name": "x"}, {"name": "b"}, {"name": "a"}]}}),
        },
        Case {
            name: "an empty patch list changes nothing of a list-map",
            live: json!({"spec": {"initContainers": [{"name": "i", "image": "i"}]}}),
            patch: json!({"spec": {"initContainers": []}}),
            want: json!({"spec": {"initContainers": [{"name": "i", "image": "i"}]}}),
        },
        Case {
            name: "null keeps a non-empty map or merged list, and sets a scalar or atomic list",
            live: json!({"spec": {"nodeSelector": {"a": "b"}, "containers": [{"name": "a"}], "x": 1, "tolerations": [{"key": "k"}]}}),
            patch: json!({"spec": {"nodeSelector": null, "containers": null, "x": null, "tolerations": null}}),
            want: json!({"spec": {"nodeSelector": {"a": "b"}, "containers": [{"name": "a"}], "x": null, "tolerations": null}}),
        },
        Case {
            name: "a scalar replaced by a map, and a map by a scalar",
            live: json!({"spec": {"a": "x", "b": {"c": 1}}}),
            patch: json!({"spec": {"a": {"y": 1}, "b": 2}}),
            want: json!({"spec": {"a": {"y": 1}, "b": 2}}),
        },
    ];
    for c in cases {
        let got =
            merge(&c.live, &c.patch, pod_shape()).unwrap_or_else(|e| panic!("{}: {e}", c.name));
        assert_eq!(got, c.want, "{}", c.name);
    }
}

#[test]
fn merge_deduced_kind_treats_lists_atomically() {
    let live = json!({"apiVersion": "x.io/v1", "kind": "Thing", "spec": {"items": [{"name": "a"}], "m": {"a": 1}}});
    let patch = json!({"spec": {"items": [{"name": "b"}], "m": {"b": 2}}});
    let got = merge(&live, &patch, schema::for_kind("x.io/v1", "Thing")).unwrap();
    assert_eq!(
        got["spec"],
        json!({"items": [{"name": "b"}], "m": {"a": 1, "b": 2}})
    );
}

#[test]
fn merge_errors_name_the_problem() {
    let live = pod(json!({"containers": [{"name": "a"}]}));
    for (patch, want) in [
        (
            json!({"spec": {"containers": [{"image": "x"}]}}),
            "has no \"name\"",
        ),
        (
            json!({"spec": {"containers": [{"name": "b"}, {"name": "b"}]}}),
            "two items with the key",
        ),
        (json!({"spec": {"containers": "nope"}}), "expected a list"),
    ] {
        let err = merge(&live, &patch, pod_shape()).unwrap_err();
        assert!(err.contains(want), "{patch}: {err}");
    }
}

#[test]
fn merge_does_not_change_its_input() {
    let live = pod(json!({"containers": [{"name": "a", "image": "a"}]}));
    let before = live.clone();
    let _ = merge(
        &live,
        &json!({"spec": {"containers": [{"name": "a", "image": "b"}]}}),
        pod_shape(),
    )
    .unwrap();
    assert_eq!(live, before);
}

// ------------------------------------------------------------ JSON Patch

fn ops(v: Json) -> Vec<Op> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|o| Op::parse(o).unwrap())
        .collect()
}

#[test]
fn json_patch_table() {
    let doc = json!({"a": {"b": [1, 2]}, "m/k": 1, "t~": 2});
    let cases: Vec<(&str, Json, Json)> = vec![
        (
            "add a member",
            json!([{"op": "add", "path": "/a/c", "value": 3}]),
            json!({"a": {"b": [1, 2], "c": 3}, "m/k": 1, "t~": 2}),
        ),
        (
            "add replaces an existing member",
            json!([{"op": "add", "path": "/a/b", "value": "x"}]),
            json!({"a": {"b": "x"}, "m/k": 1, "t~": 2}),
        ),
        (
            "add inserts into an array",
            json!([{"op": "add", "path": "/a/b/0", "value": 0}]),
            json!({"a": {"b": [0, 1, 2]}, "m/k": 1, "t~": 2}),
        ),
        (
            "add at - appends, and at len too",
            json!([{"op": "add", "path": "/a/b/-", "value": 3}, {"op": "add", "path": "/a/b/3", "value": 4}]),
            json!({"a": {"b": [1, 2, 3, 4]}, "m/k": 1, "t~": 2}),
        ),
        (
            "~1 and ~0 are unescaped",
            json!([{"op": "replace", "path": "/m~1k", "value": 9}, {"op": "remove", "path": "/t~0"}]),
            json!({"a": {"b": [1, 2]}, "m/k": 9}),
        ),
        (
            "remove an array element",
            json!([{"op": "remove", "path": "/a/b/0"}]),
            json!({"a": {"b": [2]}, "m/k": 1, "t~": 2}),
        ),
        (
            "replace an array element",
            json!([{"op": "replace", "path": "/a/b/1", "value": 5}]),
            json!({"a": {"b": [1, 5]}, "m/k": 1, "t~": 2}),
        ),
        (
            "move and copy",
            json!([{"op": "copy", "from": "/a/b", "path": "/c"}, {"op": "move", "from": "/m~1k", "path": "/a/k"}]),
            json!({"a": {"b": [1, 2], "k": 1}, "c": [1, 2], "t~": 2}),
        ),
        (
            "test that holds changes nothing",
            json!([{"op": "test", "path": "/a/b/1", "value": 2}]),
            doc.clone(),
        ),
        (
            "operations apply in order, each seeing the last",
            json!([{"op": "add", "path": "/n", "value": {}}, {"op": "add", "path": "/n/x", "value": 1}]),
            json!({"a": {"b": [1, 2]}, "m/k": 1, "t~": 2, "n": {"x": 1}}),
        ),
        (
            "Kubernetes' JSON Patch library: leading zeros, negative indices",
            json!([
                {"op": "add", "path": "/a/b/01", "value": 9},
                {"op": "remove", "path": "/a/b/-1"},
                {"op": "add", "path": "/a/b/-1", "value": 7},
            ]),
            json!({"a": {"b": [1, 9, 7]}, "m/k": 1, "t~": 2}),
        ),
        (
            "a missing value tests equal to null; move onto itself is a no-op",
            json!([{"op": "test", "path": "/zz", "value": null}, {"op": "move", "from": "/a", "path": "/a"}]),
            doc.clone(),
        ),
        (
            "the empty path is the whole document",
            json!([{"op": "replace", "path": "", "value": {"z": 1}}]),
            json!({"z": 1}),
        ),
    ];
    for (name, patch, want) in cases {
        let got = apply_patch(&doc, &ops(patch)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn json_patch_errors() {
    let doc = json!({"a": {"b": [1, 2]}});
    let cases: Vec<(Json, &str)> = vec![
        (
            json!([{"op": "add", "path": "/x/y", "value": 1}]),
            "parent of the target does not exist",
        ),
        (
            json!([{"op": "add", "path": "/a/b/5", "value": 1}]),
            "outside an array of 2",
        ),
        (
            json!([{"op": "add", "path": "/a/b/x", "value": 1}]),
            "not an array index",
        ),
        (
            json!([{"op": "remove", "path": "/a/b/-3"}]),
            "does not exist",
        ),
        (json!([{"op": "remove", "path": "/a/c"}]), "does not exist"),
        (
            json!([{"op": "remove", "path": "/a/b/-"}]),
            "does not exist",
        ),
        (
            json!([{"op": "replace", "path": "/a/c", "value": 1}]),
            "does not exist",
        ),
        (
            json!([{"op": "move", "from": "/a", "path": "/a/b/x"}]),
            "own child",
        ),
        (
            json!([{"op": "add", "path": "a", "value": 1}]),
            "must be empty or start with '/'",
        ),
        (
            json!([{"op": "add", "path": "/a~2", "value": 1}]),
            "invalid '~' escape",
        ),
    ];
    for (patch, want) in cases {
        match apply_patch(&doc, &ops(patch.clone())) {
            Err(Failure::Invalid(err)) => assert!(err.contains(want), "{patch}: {err}"),
            other => panic!("{patch}: {other:?}"),
        }
    }
    // A failing test is not an error: the patch is just not applied.
    for patch in [
        json!([{"op": "test", "path": "/a/b/0", "value": 7}]),
        json!([{"op": "test", "path": "/a/nope", "value": 1}]),
    ] {
        assert!(
            matches!(
                apply_patch(&doc, &ops(patch.clone())),
                Err(Failure::TestFailed(_))
            ),
            "{patch}"
        );
    }
    for (op, want) in [
        (
            json!({"op": "frob", "path": "/a"}),
            "unsupported JSON Patch op",
        ),
        (json!({"op": "add", "path": "/a"}), "has no \"value\""),
        (json!({"op": "move", "path": "/a"}), "has no \"from\""),
        (json!({"path": "/a"}), "has no \"op\""),
        (
            json!({"op": "add", "path": 1, "value": 1}),
            "must be a string",
        ),
    ] {
        let err = Op::parse(&op).unwrap_err();
        assert!(err.contains(want), "{op}: {err}");
    }
}

// ------------------------------------------------------------ policies

fn compile(spec: Json) -> Result<MutatingPolicy> {
    MutatingPolicy::compile(&json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy",
        "metadata": {"name": "mp"}, "spec": spec,
    }))
}

fn policy(spec: Json) -> MutatingPolicy {
    compile(spec).unwrap()
}

/// A policy on pods with the one mutation `mutation`.
fn pods_policy(mutation: Json) -> MutatingPolicy {
    policy(json!({"matchConstraints": pods_only(), "mutations": [mutation]}))
}

fn json_patch(expression: &str) -> Json {
    json!({"patchType": "JSONPatch", "jsonPatch": {"expression": expression}})
}

fn apply_configuration(expression: &str) -> Json {
    json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}})
}

fn pods_only() -> Json {
    json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}]})
}

fn run_on(p: &MutatingPolicy, object: Json) -> Option<(RuleResult, Json)> {
    p.mutate(&EvalRequest::create(Arc::new(object)), &NoClusterData)
}

/// The object `p` gives for `object`, which it must match and pass.
#[track_caller]
fn passed(p: &MutatingPolicy, object: Json) -> Json {
    let (r, out) = run_on(p, object).unwrap();
    assert_eq!(r.status, Status::Pass, "{}", r.message);
    out
}

#[test]
fn apply_configuration_with_typed_literals() {
    let p = policy(json!({
        "matchConstraints": pods_only(),
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": r#"
            Object{
              metadata: Object.metadata{labels: {"team": "a"}},
              spec: Object.spec{
                containers: object.spec.containers.map(c, Object.spec.containers{
                  name: c.name, image: "registry.io/" + c.image
                })
              }
            }"#}}],
    }));
    let input = pod(
        json!({"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]}]}),
    );
    let (result, out) = run_on(&p, input.clone()).unwrap();
    assert_eq!(result.status, Status::Pass);
    assert_eq!(result.source.as_str(), "KyvernoMutatingPolicy");
    assert_eq!(result.rule, "mp");
    assert_eq!(out["metadata"]["labels"], json!({"team": "a"}));
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "a", "image": "registry.io/nginx", "ports": [{"containerPort": 80}]}])
    );
    // The input is not changed.
    assert_eq!(input["spec"]["containers"][0]["image"], "nginx");
}

#[test]
fn json_patch_mutations_chain_and_escape_keys() {
    let p = policy(json!({
        "matchConstraints": pods_only(),
        "mutations": [
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "!has(object.metadata.annotations) ? [JSONPatch{op: 'add', path: '/metadata/annotations', value: {}}] : []"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('a.io/x~y'), value: string(size(object.metadata.annotations))}]"}},
        ],
    }));
    let out = passed(&p, pod(json!({})));
    // The second mutation saw the annotations the first one added.
    assert_eq!(out["metadata"]["annotations"], json!({"a.io/x~y": "0"}));
}

#[test]
fn match_conditions_and_variables() {
    let p = policy(json!({
        "matchConstraints": pods_only(),
        "variables": [
            {"name": "hostPaths", "expression": "has(object.spec.volumes) ? object.spec.volumes.filter(v, has(v.hostPath)).map(v, v.name) : []"},
            {"name": "count", "expression": "variables.hostPaths.size()"},
        ],
        "matchConditions": [{"name": "has-host-paths", "expression": "variables.count > 0"}],
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression":
            "[JSONPatch{op: 'replace', path: '/spec/volumes', value: object.spec.volumes.filter(v, !(v.name in variables.hostPaths))}]"}}],
    }));
    let with = pod(
        json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "e", "emptyDir": {}}]}),
    );
    let out = passed(&p, with);
    assert_eq!(
        out["spec"]["volumes"],
        json!([{"name": "e", "emptyDir": {}}])
    );

    let without = pod(json!({"volumes": [{"name": "e", "emptyDir": {}}]}));
    let (r, out) = run_on(&p, without.clone()).unwrap();
    assert_eq!(r.status, Status::Skip);
    assert_eq!(out, without, "a skipped policy leaves the object as it was");

    // Not matched by the constraints: no result at all.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    assert!(run_on(&p, cm).is_none());
}

#[test]
fn a_failing_test_operation_leaves_the_object_and_passes() {
    let p = pods_policy(json_patch(
        "[JSONPatch{op: 'test', path: '/metadata/name', value: 'other'}, JSONPatch{op: 'add', path: '/spec/x', value: 1}]",
    ));
    let input = pod(json!({}));
    assert_eq!(passed(&p, input.clone()), input);
}

#[test]
fn a_mutation_without_change_passes() {
    let p = pods_policy(json_patch("[]"));
    let input = pod(json!({}));
    assert_eq!(passed(&p, input.clone()), input);
}

#[test]
fn evaluation_errors_are_results() {
    for (mutation, want) in [
        (
            json!({"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'remove', path: '/spec/missing'}]"}}),
            "does not exist",
        ),
        (
            json!({"patchType": "JSONPatch", "jsonPatch": {"expression": "'not a list'"}}),
            "must build a list",
        ),
        (
            json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "[1]"}}),
            "must build an Object",
        ),
    ] {
        let p = pods_policy(mutation);
        let input = pod(json!({}));
        let (r, out) = run_on(&p, input.clone()).unwrap();
        assert_eq!(r.status, Status::Error, "{want}");
        assert!(r.message.contains(want), "{}", r.message);
        assert_eq!(out, input);
    }
}

#[test]
fn compile_errors_name_the_field() {
    let cases = [
        (
            json!({"patchType": "Merge", "jsonPatch": {"expression": "[]"}}),
            "spec.mutations[0].patchType",
        ),
        (
            json!({"patchType": "JSONPatch", "jsonPatch": {}}),
            "spec.mutations[0].jsonPatch.expression",
        ),
        (
            json!({"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/a', valu: 1}]"}}),
            "JSONPatch has no field",
        ),
        (
            json!({"patchType": "JSONPatch", "jsonPatch": {"expression": "[Pod{}]"}}),
            "cannot be constructed",
        ),
        (
            json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Pod{}"}}),
            "only Object",
        ),
        (
            json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{spec: Object.metadata{}}"}}),
            "type mismatch: Object.metadata is used where Object.spec is expected",
        ),
        (
            json!({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{"}}),
            "spec.mutations[0].applyConfiguration.expression",
        ),
    ];
    for (mutation, want) in cases {
        let err = compile(json!({"matchConstraints": pods_only(), "mutations": [mutation]}))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{err}");
    }
}

#[test]
fn autogen_mutates_pod_templates() {
    let p = policy(json!({
        "matchConstraints": pods_only(),
        "matchConditions": [{"name": "no-class", "expression": "!has(object.spec.runtimeClassName)"}],
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
            "Object{spec: Object.spec{runtimeClassName: 'prod'}}"}}],
    }));
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"},
        "spec": {"template": {"spec": {"containers": [{"name": "a"}]}}}});
    let out = passed(&p, deploy);
    assert_eq!(out["spec"]["template"]["spec"]["runtimeClassName"], "prod");
    assert!(out["spec"].get("runtimeClassName").is_none());

    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "n"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"runtimeClassName": "x"}}}}}});
    let (r, _) = run_on(&p, cron).unwrap();
    assert_eq!(
        r.status,
        Status::Skip,
        "the rewritten match condition reads the template"
    );

    // `controllers: []` turns autogen off.
    let mut spec = json!({"matchConstraints": pods_only(), "mutations": [json_patch("[]")]});
    spec["autogen"] = json!({"podControllers": {"controllers": []}});
    let p = policy(spec);
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}});
    assert!(run_on(&p, deploy).is_none());
}

#[test]
fn a_broken_autogen_variant_errors_only_for_controllers() {
    // Kyverno's text rewrite leaves `Object.metadata` where the pod
    // template's metadata belongs: the variant is an Error, pods still work.
    let p = pods_policy(apply_configuration(
        "Object{metadata: Object.metadata{labels: {'x': 'y'}}}",
    ));
    let out = passed(&p, pod(json!({})));
    assert_eq!(out["metadata"]["labels"]["x"], "y");
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}});
    let (r, _) = run_on(&p, deploy).unwrap();
    assert_eq!(r.status, Status::Error);
    assert!(r.message.contains("type mismatch"), "{}", r.message);
}

#[test]
fn autogen_rewrites_expressions() {
    assert_eq!(
        autogen::to_template("Object{spec: Object.spec{a: object.spec.b}}", false),
        "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{a: object.spec.template.spec.b}}}}"
    );
    assert_eq!(
        autogen::to_template(
            "has(object.metadata.labels) && object.metadata.name == 'x'",
            true
        ),
        "has(object.spec.jobTemplate.spec.template.metadata.labels) && object.metadata.name == 'x'"
    );
}

#[test]
fn namespaced_policy_applies_in_its_namespace_only() {
    let p = MutatingPolicy::compile(&json!({
        "apiVersion": "policies.kyverno.io/v1beta1", "kind": "NamespacedMutatingPolicy",
        "metadata": {"name": "mp", "namespace": "team"},
        "spec": {"matchConstraints": pods_only(), "mutations": [
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/spec/x', value: 1}]"}}]},
    }))
    .unwrap();
    assert_eq!(p.namespace(), Some("team"));
    let mut in_team = pod(json!({}));
    in_team["metadata"]["namespace"] = json!("team");
    assert_eq!(run_on(&p, in_team).unwrap().1["spec"]["x"], 1);
    assert!(run_on(&p, pod(json!({}))).is_none());
}

#[test]
fn seed_shared_mutating_policy_not_mutated() {
    // Seed 000 (shared objects mutated in place): one compiled policy and
    // one input shared by threads; each gets the same output and the input
    // stays as it was.
    let p = Arc::new(pods_policy(apply_configuration(
        "Object{metadata: Object.metadata{labels: {'x': 'y'}}}",
    )));
    let input = Arc::new(pod(json!({})));
    let before = (*input).clone();
    let outs: Vec<Json> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let p = p.clone();
                let input = input.clone();
                s.spawn(move || {
                    p.mutate(&EvalRequest::create(input), &NoClusterData)
                        .unwrap()
                        .1
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(*input, before);
    for o in &outs {
        assert_eq!(o["metadata"]["labels"]["x"], "y");
    }
}

#[test]
fn variables_are_evaluated_when_first_read() {
    let p = policy(json!({
        "matchConstraints": pods_only(),
        "variables": [
            {"name": "before", "expression": "has(object.metadata.labels) ? size(object.metadata.labels) : 0"},
            {"name": "after", "expression": "has(object.metadata.labels) ? size(object.metadata.labels) : 0"},
            {"name": "derived", "expression": "variables.before + 10"},
        ],
        "matchConditions": [{"name": "c", "expression": "variables.before == 0"}],
        "mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'before': string(variables.before), 'after': string(variables.after), 'derived': string(variables.derived)}}]"}},
        ],
    }));
    let out = passed(&p, pod(json!({})));
    // `before` was read by the match condition (the original object),
    // `after` first by the second mutation (after the first one), and
    // `derived` reads the cached `before`.
    assert_eq!(
        out["metadata"]["annotations"],
        json!({"before": "0", "after": "1", "derived": "10"})
    );
}

#[test]
fn lazy_schedule_table() {
    use std::collections::BTreeSet;
    let set = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let reads = |src: &str| lazy::reads(crate::cel::Expr::compile(src).unwrap().ast());
    assert_eq!(
        reads(
            "variables.a + variables['b'] + variables.?c.orValue(0) + (has(variables.d) ? 1 : 0) + object.e"
        ),
        set(&["a", "b", "c", "d"])
    );
    let vars = vec![
        ("a".to_string(), set(&[])),
        ("b".to_string(), set(&["a"])),
        ("c".to_string(), set(&[])),
        ("unused".to_string(), set(&[])),
    ];
    // Stage 0 reads nothing, stage 1 reads b (so a too), stage 2 reads c and a.
    let got = lazy::schedule(&vars, &[set(&[]), set(&["b"]), set(&["c", "a"])]);
    assert_eq!(got, vec![vec![], vec![0, 1], vec![2]]);
}

#[test]
fn optional_fields_of_typed_literals() {
    let p = pods_policy(apply_configuration(
        "Object{spec: Object.spec{?runtimeClassName: optional.none(), ?priorityClassName: optional.of('high')}}",
    ));
    let out = passed(&p, pod(json!({"runtimeClassName": "keep"})));
    assert_eq!(
        out["spec"],
        json!({"runtimeClassName": "keep", "priorityClassName": "high"})
    );
}

#[test]
fn engine_mutate_chains_mutating_policies_after_classic_policies() {
    use crate::{Bindings, Document, Engine};
    let mut engine = Engine::new();
    let classic = json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "classic"},
        "spec": {"rules": [{"name": "label", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "mutate": {"patchStrategicMerge": {"metadata": {"labels": {"step": "classic"}}}}}]},
    });
    let first = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy", "metadata": {"name": "first"},
        "spec": {"matchConstraints": pods_only(), "mutations": [{"patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'seen': object.metadata.labels.step}}}"}}]},
    });
    let skipped = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy", "metadata": {"name": "skipped"},
        "spec": {"matchConstraints": pods_only(), "matchConditions": [{"name": "never", "expression": "false"}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'remove', path: '/metadata'}]"}}]},
    });
    for doc in [classic, first, skipped] {
        match Document::compile(&doc).unwrap().unwrap() {
            d @ (Document::Policy(_) | Document::MutatingPolicy(_)) => engine.add(d),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(engine.mutating_policies().len(), 2);
    let req = EvalRequest::create(Arc::new(pod(json!({"containers": [{"name": "a"}]}))));
    let m = engine.mutate(&req, &NoClusterData, &Bindings::default());
    assert_eq!(
        m.object["metadata"]["labels"],
        json!({"step": "classic", "seen": "classic"})
    );
    let steps: Vec<(&str, Status)> = m
        .steps
        .iter()
        .map(|s| (&*s.policy, s.results[0].status))
        .collect();
    assert_eq!(
        steps,
        [
            ("classic", Status::Pass),
            ("first", Status::Pass),
            ("skipped", Status::Skip)
        ]
    );
    assert_eq!(m.steps[2].source, Source::MutatingPolicy);
    assert_eq!(
        m.steps[2].object, m.object,
        "a skipped policy leaves the object"
    );
}

/// A CEL PolicyException naming a MutatingPolicy exempts the resources
/// its match conditions select: Skip (rule `exception`, the exception's
/// key in the message) and the object unchanged; others are mutated.
#[test]
fn engine_mutate_cel_exception_skips_the_mutating_policy() {
    use crate::{Bindings, Engine};
    let mut engine = Engine::new();
    let mpol = json!({
        "apiVersion": "policies.kyverno.io/v1beta1", "kind": "MutatingPolicy", "metadata": {"name": "label"},
        "spec": {"matchConstraints": pods_only(), "mutations": [{"patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'managed': 'yes'}}}"}}]},
    });
    let exception = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": "not-dev", "namespace": "policies"},
        "spec": {"policyRefs": [{"name": "label", "kind": "MutatingPolicy"}],
            "matchConditions": [{"name": "ns", "expression": "object.metadata.namespace != 'dev'"}]},
    });
    engine.add_json(&mpol).unwrap();
    engine.add_json(&exception).unwrap();
    let in_ns = |ns: &str| {
        let mut p = pod(json!({"containers": [{"name": "a"}]}));
        p["metadata"]["namespace"] = json!(ns);
        EvalRequest::create(Arc::new(p))
    };
    let exempt = engine.mutate(&in_ns("default"), &NoClusterData, &Bindings::default());
    let r = &exempt.steps[0].results[0];
    assert_eq!(
        (r.status, r.rule.as_str(), r.message.as_str()),
        (
            Status::Skip,
            "exception",
            "rule is skipped due to policy exception: policies/not-dev"
        )
    );
    assert!(exempt.object["metadata"].get("labels").is_none());
    let mutated = engine.mutate(&in_ns("dev"), &NoClusterData, &Bindings::default());
    assert_eq!(mutated.steps[0].results[0].status, Status::Pass);
    assert_eq!(mutated.object["metadata"]["labels"]["managed"], "yes");
}

#[test]
fn engine_apply_validates_as_kyverno_cli_orders_it() {
    // Classic validate rules see the object before the MutatingPolicies,
    // ValidatingPolicies see it after them (Kyverno CLI's order).
    use crate::Engine;
    let mut engine = Engine::new();
    let classic = json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "classic"},
        "spec": {"rules": [{"name": "no-team-yet", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"message": "team set", "pattern": {"metadata": {"X(labels)": {"X(team)": "*"}}}}}]},
    });
    let mpol = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "MutatingPolicy", "metadata": {"name": "team"},
        "spec": {"matchConstraints": pods_only(), "mutations": [{"patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"}}]},
    });
    let vpol = json!({
        "apiVersion": "policies.kyverno.io/v1alpha1", "kind": "ValidatingPolicy", "metadata": {"name": "has-team"},
        "spec": {"matchConstraints": pods_only(), "validations": [{"expression": "object.metadata.labels.team == 'a'"}]},
    });
    for doc in [classic, mpol, vpol] {
        assert!(engine.add_json(&doc).unwrap());
    }
    let req = EvalRequest::create(Arc::new(pod(json!({"containers": [{"name": "a"}]}))));
    let (mutation, results) = engine.evaluation(&NoClusterData).apply(req);
    assert_eq!(mutation.object["metadata"]["labels"]["team"], "a");
    let got: Vec<(&str, Status)> = results.iter().map(|r| (&*r.policy, r.status)).collect();
    assert_eq!(got, [("classic", Status::Pass), ("has-team", Status::Pass)]);
    // The classic rule would fail on the object the MutatingPolicy produced.
    let on_mutated = engine
        .evaluation(&NoClusterData)
        .validate(&crate::Prepared::new(EvalRequest::create(
            mutation.object.clone(),
        )))
        .into_vec();
    assert_eq!(on_mutated[0].status, Status::Fail, "{:?}", on_mutated[0]);
}

#[test]
fn variables_may_build_typed_values() {
    let p = policy(json!({
        "matchConstraints": pods_only(),
        "variables": [
            {"name": "sidecar", "expression": "Object.spec.containers{name: 'proxy', image: 'envoy'}"},
            {"name": "patch", "expression": "JSONPatch{op: 'add', path: '/metadata/labels', value: {'p': 'x'}}"},
        ],
        "mutations": [
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{spec: Object.spec{containers: [variables.sidecar]}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "[variables.patch]"}},
        ],
    }));
    let out = passed(
        &p,
        pod(json!({"containers": [{"name": "app", "image": "a"}]})),
    );
    assert_eq!(
        out["spec"]["containers"],
        json!([{"name": "app", "image": "a"}, {"name": "proxy", "image": "envoy"}])
    );
    assert_eq!(out["metadata"]["labels"], json!({"p": "x"}));
    let err = compile(
        json!({"matchConstraints": pods_only(), "variables": [{"name": "v", "expression": "Pod{}"}]}),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("spec.variables[0].expression") && err.contains("cannot be constructed"),
        "{err}"
    );
}

#[test]
fn json_patch_values_may_be_typed_objects() {
    let p = pods_policy(json_patch(
        "[JSONPatch{op: 'add', path: '/spec/initContainers', value: []}, JSONPatch{op: 'add', path: '/spec/initContainers/-', value: Object.spec.initContainers{name: 'mesh-proxy', image: 'mesh/proxy:v1'}}]",
    ));
    let out = passed(&p, pod(json!({"containers": [{"name": "a"}]})));
    assert_eq!(
        out["spec"]["initContainers"],
        json!([{"name": "mesh-proxy", "image": "mesh/proxy:v1"}])
    );
}

/// `evaluation.mutateExisting`: an admitted trigger (matched by the match
/// constraints and conditions) names the policy; processing mutates every
/// existing target the target constraints select, with the target's own
/// conditions, and reports one result per target; a target already in the
/// wanted state yields no write.
mod mutate_existing {
    use std::sync::Arc;

    use serde_json::{Value as Json, json};

    use crate::mutate::tests::Objects;
    use crate::{Engine, EvalRequest, Status};

    fn engine() -> Engine {
        let mut e = Engine::new();
        let policy = json!({
            "apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
            "metadata": {"name": "label-secrets"},
            "spec": {
                "evaluation": {"mutateExisting": {"enabled": true}},
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
                "matchConditions": [{"name": "marked", "expression": "has(object.metadata.labels) && 'sync' in object.metadata.labels"}],
                "targetMatchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["secrets"]}]},
                "targetMatchConditions": [{"name": "not-skipped", "expression": "object.metadata.name != 'skip'"}],
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {\"synced\": \"yes\"}}}"}}]
            }
        });
        assert!(e.add_json(&policy).unwrap());
        e
    }

    fn object(kind: &str, name: &str, labels: Json) -> Arc<Json> {
        Arc::new(json!({"apiVersion": "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "n1", "labels": labels}}))
    }

    #[test]
    fn triggers_then_targets() {
        let e = engine();
        let data = Objects(vec![
            object("Secret", "a", json!({})),
            object("Secret", "done", json!({"synced": "yes"})),
            object("Secret", "skip", json!({})),
            object("ConfigMap", "other", json!({})),
        ]);
        let marked = EvalRequest::create(object("ConfigMap", "cfg", json!({"sync": "1"})));
        let plain = EvalRequest::create(object("ConfigMap", "cfg", json!({})));
        assert_eq!(e.mutating_policy_triggers(&marked, &data).len(), 1);
        assert!(
            e.mutating_policy_triggers(&plain, &data).is_empty(),
            "the match condition is false"
        );
        let secret = EvalRequest::create(object("Secret", "s", json!({"sync": "1"})));
        assert!(
            e.mutating_policy_triggers(&secret, &data).is_empty(),
            "not a trigger's kind"
        );

        let (results, targets) = e
            .mutate_existing_cel("label-secrets", Some(&marked), &data)
            .expect("the policy is known");
        let by_status: Vec<(Status, &str)> = results
            .iter()
            .map(|r| (r.status, r.message.as_str()))
            .collect();
        assert_eq!(
            by_status,
            [
                (Status::Pass, "success"),
                (Status::Pass, "success"),
                (Status::Skip, "skip")
            ],
            "a, done, skip"
        );
        let written: Vec<&str> = targets
            .iter()
            .map(|t| t.object["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(written, ["a"], "done already has the label: no write");
        assert_eq!(
            targets[0].object["metadata"]["labels"],
            json!({"synced": "yes"})
        );
        assert!(
            e.mutate_existing_cel("nope", Some(&marked), &data)
                .is_none()
        );
        // Without a trigger (the policy created or changed): the same targets.
        let (_, targets) = e.mutate_existing_cel("label-secrets", None, &data).unwrap();
        assert_eq!(targets.len(), 1);
    }
}
