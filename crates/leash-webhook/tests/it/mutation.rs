//! The mutating webhook over HTTPS: patches, their order, failure policies,
//! admission reports, and the shared-policy seed under mutation.

use std::sync::Arc;

use base64::Engine as _;
use leash_policy::{Bindings, EvalRequest, NoClusterData, UserInfo};
use serde_json::{Value, json};

use crate::common::*;

/// A classic mutate rule that adds `team: platform` when the pod has no
/// team label (`+()` anchor), and sets an annotation from a variable.
const ADD_TEAM: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: add-team}
spec:
  rules:
  - name: default-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            +(team): platform
          annotations:
            leash.io/created-by: "{{ request.userInfo.username }}"
"#;

/// A MutatingPolicy that runs after the classic ones and sees their work:
/// it copies the team label into a `owner` label.
const COPY_TEAM: &str = r#"
apiVersion: policies.kyverno.io/v1
kind: MutatingPolicy
metadata: {name: copy-team}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{metadata: Object.metadata{labels: {"owner": object.metadata.labels["team"]}}}
"#;

/// A mutate rule whose variable never resolves: an error at every pod.
fn broken(name: &str, failure_policy: &str) -> String {
    format!(
        r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: {failure_policy}
  rules:
  - name: from-missing
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            broken: "{{{{ request.object.metadata.labels.nosuchlabel }}}}"
"#
    )
}

/// The decoded JSON Patch of a mutating answer (`None` without one).
fn patch_of(answer: &Value) -> Option<Vec<Value>> {
    let r = response(answer);
    let p = r["patch"].as_str()?;
    assert_eq!(r["patchType"], "JSONPatch", "{r}");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(p)
        .expect("base64");
    Some(serde_json::from_slice(&bytes).expect("a JSON Patch"))
}

/// `object` with `patch` applied, as the API server applies it.
fn patched(object: &Value, patch: &[Value]) -> Value {
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(patch.to_vec())).expect("RFC 6902 operations");
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).expect("the patch applies");
    out
}

fn alice(object: &Value) -> EvalRequest {
    EvalRequest {
        user_info: UserInfo {
            username: "alice".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
            ..UserInfo::default()
        },
        ..EvalRequest::create(Arc::new(object.clone()))
    }
}

/// README, `leash serve` admission: a pod created without a label gets it
/// from a classic mutate rule, then from a MutatingPolicy that sees the
/// first one's work (Kyverno's order); the answer is a JSON Patch that
/// turns the object sent into the mutated one, and the mutation is handed
/// to the admission reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutate_answers_a_json_patch_of_every_mutating_policy_in_order() {
    let s = TestServer::start(engine(&[ADD_TEAM, COPY_TEAM, REQUIRE_TEAM])).await;
    let mut sent = pod("web", "prod", None, "nginx:1");
    let a = s
        .review("/mutate/fail", &review("m1", "CREATE", &sent))
        .await;
    let r = response(&a);
    assert_eq!(r["uid"], "m1");
    assert_eq!(r["allowed"], true, "{r}");
    let patch = patch_of(&a).expect("a patch");
    let after = patched(&sent, &patch);
    assert_eq!(after["metadata"]["labels"]["team"], "platform", "{after}");
    assert_eq!(after["metadata"]["labels"]["owner"], "platform", "{after}");
    assert_eq!(
        after["metadata"]["annotations"]["leash.io/created-by"],
        "alice"
    );
    // Nothing else changed.
    let mut rest = after.clone();
    rest["metadata"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k != "labels" && k != "annotations");
    let mut sent_rest = sent.clone();
    sent_rest["metadata"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k != "labels" && k != "annotations");
    assert_eq!(rest, sent_rest);

    // A pod that has a team keeps it; the MutatingPolicy copies it.
    let teamed = pod("api", "prod", Some("payments"), "nginx:1");
    let a = s.review("/mutate", &review("m2", "CREATE", &teamed)).await;
    let after = patched(&teamed, &patch_of(&a).expect("a patch"));
    assert_eq!(after["metadata"]["labels"]["team"], "payments");
    assert_eq!(after["metadata"]["labels"]["owner"], "payments");

    // The validating webhook, sent the mutated object (as the API server's
    // chain sends it), admits what it would have denied.
    let v = s.review("/validate", &review("m3", "CREATE", &after)).await;
    assert_eq!(response(&v)["allowed"], true, "{v}");
    let v = s.review("/validate", &review("m4", "CREATE", &sent)).await;
    assert_eq!(response(&v)["allowed"], false, "{v}");

    // No patch for a deletion; none for a kind no mutating policy matches.
    let d = s.review("/mutate", &review("m5", "DELETE", &sent)).await;
    assert_eq!(response(&d)["allowed"], true);
    assert!(patch_of(&d).is_none(), "{d}");
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "prod"}});
    let c = s.review("/mutate", &review("m6", "CREATE", &cm)).await;
    assert_eq!(response(&c)["allowed"], true);
    assert!(patch_of(&c).is_none(), "{c}");

    // An update's mutation is reported (a created object has no uid yet
    // when it is mutated: nothing a report could be owned by).
    sent["metadata"]["uid"] = json!("0f8e2b9a-1c4d-4e5f-9a6b-7c8d9e0f1a2b");
    let u = s.review("/mutate", &review("m7", "UPDATE", &sent)).await;
    let patch = patch_of(&u).expect("a patch");
    let sink = s.sink.clone();
    s.stop().await;
    let written = sink.written.lock().unwrap().clone();
    assert!(
        !written.iter().any(|r| r.uid == "m1" && r.mutation),
        "no report for a created object's mutation"
    );
    let m1 = written
        .iter()
        .find(|r| r.uid == "m7" && r.mutation)
        .expect("the mutation of m7 is reported");
    assert_eq!(*m1.object, patched(&sent, &patch));
    let rules: Vec<(&str, &str, leash_policy::Status)> = m1
        .results
        .iter()
        .map(|r| (&*r.policy, r.rule.as_str(), r.status))
        .collect();
    assert_eq!(
        rules,
        [
            ("add-team", "default-team", leash_policy::Status::Pass),
            ("copy-team", "copy-team", leash_policy::Status::Pass)
        ]
    );
    // The denied validation (m4) wrote nothing; a deletion is not reported.
    assert!(!written.iter().any(|r| r.uid == "m4" || r.uid == "m5"));
}

/// A mutation that fails (here a variable that does not resolve) is
/// answered as Kyverno answers it: at the `Fail` webhook the request is
/// denied naming the policy and the rule; at the `Ignore` webhook the
/// policy is left out and the others' patches are answered. A failing
/// request never affects the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_mutations_follow_the_failure_policy() {
    let fail = broken("broken-fail", "Fail");
    let ignore = broken("broken-ignore", "Ignore");
    let ignored_team = ADD_TEAM
        .replace("name: add-team", "name: add-team-ignore")
        .replace(
            "spec:\n  rules:",
            "spec:\n  failurePolicy: Ignore\n  rules:",
        );
    let s = TestServer::start(engine(&[&fail, &ignore, &ignored_team])).await;
    let sent = pod("web", "prod", None, "nginx:1");

    let a = s
        .review("/mutate/fail", &review("f1", "CREATE", &sent))
        .await;
    let r = response(&a);
    assert_eq!(r["allowed"], false, "{r}");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "mutation policy broken-fail error: failed to apply policy broken-fail rules [from-missing: "
        ),
        "{msg}"
    );
    assert!(patch_of(&a).is_none());

    let a = s
        .review("/mutate/ignore", &review("f2", "CREATE", &sent))
        .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    let after = patched(&sent, &patch_of(&a).expect("add-team-ignore's patch"));
    assert_eq!(after["metadata"]["labels"]["team"], "platform");
    assert!(
        after["metadata"]["labels"].get("broken").is_none(),
        "the failed policy's work is left out: {after}"
    );

    // The next request, to a pod the broken rules can resolve, is patched.
    let mut fine = pod("ok", "prod", Some("a"), "nginx:1");
    fine["metadata"]["labels"]["nosuchlabel"] = json!("x");
    let a = s
        .review("/mutate/fail", &review("f3", "CREATE", &fine))
        .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    let after = patched(&fine, &patch_of(&a).expect("a patch"));
    assert_eq!(after["metadata"]["labels"]["broken"], "x");
    s.stop().await;
}

/// Seed 000 for mutation: 1,000 concurrent mutating reviews against one
/// compiled policy set give the same patches as sequential evaluation on
/// the engine, and neither the policies nor any request's object change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_shared_policy_mutation_at_mutate() {
    let engine = engine(&[ADD_TEAM, COPY_TEAM, REQUIRE_TEAM]);
    let before = format!("{engine:?}");
    let s = TestServer::start(engine).await;
    let shared = s.policies.borrow().clone();
    let pods: Vec<Value> = (0..1000)
        .map(|i| {
            let team = match i % 3 {
                0 => None,
                1 => Some("a"),
                _ => Some("b"),
            };
            pod(&format!("pod-{i}"), "prod", team, "nginx:1")
        })
        .collect();
    let expected: Vec<Value> = pods
        .iter()
        .map(|p| {
            let m = shared.mutate_admission(&alice(p), &NoClusterData, &Bindings::default());
            (*m.object).clone()
        })
        .collect();
    let pool = Pool::new(&s.client, 100).await;
    let answers = futures::future::join_all(pods.iter().enumerate().map(|(i, p)| {
        let pool = pool.clone();
        let body = serde_json::to_vec(&review(&format!("uid-{i:04}"), "CREATE", p)).unwrap();
        async move {
            let (status, body) = pool.post("/mutate", body).await;
            assert_eq!(status, 200);
            serde_json::from_slice::<Value>(&body).unwrap()
        }
    }))
    .await;
    s.stop().await;
    for (i, ((a, p), want)) in answers.iter().zip(&pods).zip(&expected).enumerate() {
        assert_eq!(response(a)["uid"], format!("uid-{i:04}"));
        assert_eq!(response(a)["allowed"], true, "review {i}: {a}");
        let got = patched(p, &patch_of(a).expect("a patch"));
        assert_eq!(&got, want, "review {i}");
    }
    assert_eq!(
        format!("{:?}", *shared),
        before,
        "the compiled policies are unchanged"
    );
}

/// The policy library's mutate policies (classes `classic-mutate` and
/// `MutatingPolicy`), each folder's policy files, without those that read
/// the cluster or a registry (as `bench/lib/mutate_set.sh` picks them).
fn library_mutate_policies() -> Vec<String> {
    const CORPUS: &str = "/work/shared/kyverno-policies";
    let classes = std::fs::read_to_string(format!("{CORPUS}/CLASSES.tsv")).expect("CLASSES.tsv");
    let lookups = |text: &str| {
        text.lines().any(|l| {
            let l = l.trim_start();
            [
                "apiCall:",
                "configMap:",
                "imageRegistry:",
                "globalReference:",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
    };
    let mut out = Vec::new();
    for line in classes.lines() {
        let Some((folder, class)) = line.split_once('\t') else {
            continue;
        };
        if !matches!(class.trim(), "classic-mutate" | "MutatingPolicy") {
            continue;
        }
        let mut files: Vec<_> = std::fs::read_dir(format!("{CORPUS}/{folder}"))
            .expect("a folder")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            if !lookups(&text) {
                out.push(text);
            }
        }
    }
    out
}

/// Pods of several shapes, as kube-apiserver sends them to a mutating
/// webhook: by name, or from a template (`generateName`, no name).
fn pod_shapes() -> Vec<Value> {
    let mut shapes = Vec::new();
    for (i, labels) in [
        json!({"app": "web"}),
        json!({"app": "api", "team": "a"}),
        json!({}),
    ]
    .into_iter()
    .enumerate()
    {
        let mut p = pod("x", "prod", None, "nginx:1.25");
        p["metadata"]["labels"] = labels;
        p["spec"]["volumes"] = json!([{"name": "tmp", "emptyDir": {}}]);
        if i == 1 {
            p["spec"]["containers"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "sidecar", "image": "busybox", "securityContext": {"privileged": true}}));
            p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox:1"}]);
        }
        if i == 2 {
            p["spec"]["volumes"] = json!([{"name": "data", "hostPath": {"path": "/data"}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "data", "mountPath": "/data"}]);
            p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
        }
        shapes.push(p);
    }
    shapes
}

/// The webhook's remembered answers are the answers: the policy library's
/// mutate policies, and a policy that reads the pod's name, on pods of
/// several shapes with many names (and from templates, with none), give
/// through `/mutate` exactly the patch a fresh evaluation gives; pods that
/// differ only in a name no policy reads are answered from the memo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_patches_are_the_patches() {
    let docs = library_mutate_policies();
    assert!(docs.len() > 30, "{} policies", docs.len());
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let library = engine(&refs);
    assert_eq!(
        library.mutation_key_for("Pod"),
        leash_policy::MutationKey::RequestButName,
        "no policy of the library's set for pods reads or writes a pod's name"
    );
    // A ServiceAccount policy selects by name.
    assert_eq!(
        library.mutation_key_for("ServiceAccount"),
        leash_policy::MutationKey::Request
    );
    const NAMED: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: label-with-name}
spec:
  rules:
  - name: name-label
    match: {any: [{resources: {kinds: [Pod]}}]}
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            pod-name: "{{ request.object.metadata.name }}"
"#;
    let mut with_name = refs.clone();
    with_name.push(NAMED);
    for (engine, keyed) in [
        (library, leash_policy::MutationKey::RequestButName),
        (engine(&with_name), leash_policy::MutationKey::Request),
    ] {
        assert_eq!(engine.mutation_key_for("Pod"), keyed);
        let s = TestServer::start(engine).await;
        let shared = s.policies.borrow().clone();
        let mut sent = Vec::new();
        for shape in pod_shapes() {
            for n in 0..6 {
                let mut p = shape.clone();
                if n == 5 {
                    // From a template: no name yet.
                    let meta = p["metadata"].as_object_mut().unwrap();
                    meta.remove("name");
                    meta.insert("generateName".into(), json!("web-7d9f-"));
                } else {
                    p["metadata"]["name"] = json!(format!("pod-{n}"));
                }
                sent.push(p);
            }
        }
        // Twice over: the second round is answered from the memo. Each
        // failing review runs again; each passing one runs once per key.
        let mut expected_misses = 0u64;
        let mut keys = std::collections::HashSet::new();
        for (i, p) in sent.iter().chain(&sent).enumerate() {
            let a = s
                .review("/mutate", &review(&format!("r{i}"), "CREATE", p))
                .await;
            let want = shared.mutate_admission(&alice(p), &NoClusterData, &Bindings::default());
            let fails = want.results().any(|r| {
                matches!(
                    r.status,
                    leash_policy::Status::Error | leash_policy::Status::Fail
                )
            });
            assert_eq!(response(&a)["allowed"], !fails, "{a}");
            let mut key = p.clone();
            if keyed == leash_policy::MutationKey::RequestButName {
                key["metadata"].as_object_mut().unwrap().remove("name");
            }
            let name = p["metadata"]["name"].as_str().unwrap_or("");
            if fails {
                // Kyverno's message for the first failing policy.
                let step = want
                    .steps
                    .iter()
                    .find(|s| {
                        s.results.iter().any(|r| {
                            matches!(
                                r.status,
                                leash_policy::Status::Error | leash_policy::Status::Fail
                            )
                        })
                    })
                    .unwrap();
                let policy = step.policy.rsplit('/').next().unwrap();
                let rules: Vec<String> = step
                    .results
                    .iter()
                    .filter(|r| {
                        matches!(
                            r.status,
                            leash_policy::Status::Error | leash_policy::Status::Fail
                        )
                    })
                    .map(|r| format!("{}: {}", r.rule, r.message))
                    .collect();
                let message = format!(
                    "mutation policy {policy} error: failed to apply policy {policy} rules [{}]",
                    rules.join(" ")
                );
                assert_eq!(
                    response(&a)["status"]["message"],
                    message.as_str(),
                    "review {i}"
                );
                // A denial that names the pod is not remembered.
                let names_it = !name.is_empty() && message.contains(name);
                if names_it || keys.insert(key.to_string()) {
                    expected_misses += 1;
                }
                continue;
            }
            if keys.insert(key.to_string()) {
                expected_misses += 1;
            }
            let got = match patch_of(&a) {
                Some(patch) => patched(p, &patch),
                None => p.clone(),
            };
            assert_eq!(got, *want.object, "review {i} ({keyed:?})");
            if keyed == leash_policy::MutationKey::Request {
                assert_eq!(got["metadata"]["labels"]["pod-name"], p["metadata"]["name"]);
            }
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &s.registry).unwrap();
        let count = |result: &str| -> u64 {
            text.lines()
                .find(|l| {
                    l.starts_with(&format!("leash_mutation_memo_total{{result=\"{result}\"}}"))
                })
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
                .unwrap_or(0)
        };
        let (hits, misses) = (count("hit"), count("miss"));
        s.stop().await;
        assert_eq!(hits + misses, 2 * sent.len() as u64, "{text}");
        assert_eq!(misses, expected_misses, "{text}");
        // Without the name in the key, pods that differ only in their
        // names share an answer.
        if keyed == leash_policy::MutationKey::RequestButName {
            assert!(hits >= sent.len() as u64, "{text}");
        }
    }
}
