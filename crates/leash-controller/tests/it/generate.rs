//! The background (generate) component against the sandbox: seed 000's
//! generate rows, and a chaos run.

use std::sync::Arc;
use std::time::Duration;

use leash_controller::generate::{Background, BackgroundSettings};
use leash_runtime::Scope;
use leash_sandbox::{Faults, Sandbox};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": {"team": name}}})
}

/// A policy generating a ConfigMap `defaults` into every namespace labelled
/// `team`, kept in sync.
fn configmap_policy(orphan: bool) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "ns-defaults"},
        "spec": {"rules": [{
            "name": "defaults",
            "match": {"any": [{"resources": {"kinds": ["Namespace"], "selector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]}}}]},
            "generate": {
                "apiVersion": "v1", "kind": "ConfigMap", "name": "defaults",
                "namespace": "{{ request.object.metadata.name }}",
                "synchronize": true, "orphanDownstreamOnPolicyDelete": orphan,
                "data": {"data": {"team": "{{ request.object.metadata.labels.team }}"}}
            }
        }]}
    })
}

/// A CRD of kind `K{i}` in group `gen.leash.dev`.
fn crd(i: usize) -> Value {
    let plural = format!("k{i}s");
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.gen.leash.dev")},
        "spec": {"group": "gen.leash.dev", "scope": "Namespaced",
            "names": {"plural": plural, "singular": format!("k{i}"), "kind": format!("K{i}"), "listKind": format!("K{i}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    })
}

/// A policy with one synchronizing rule per CRD kind.
fn crd_policy(kinds: usize) -> Value {
    let rules: Vec<Value> = (0..kinds)
        .map(|i| {
            json!({
                "name": format!("k{i}"),
                "match": {"any": [{"resources": {"kinds": ["Namespace"], "names": ["team-*"]}}]},
                "generate": {"apiVersion": "gen.leash.dev/v1", "kind": format!("K{i}"), "name": "x",
                    "namespace": "{{ request.object.metadata.name }}", "synchronize": true,
                    "data": {"spec": {"n": i}}}
            })
        })
        .collect();
    json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "crds"},
           "spec": {"rules": rules}})
}

struct Running {
    scope: Scope,
    registry: tokio::sync::watch::Receiver<Arc<leash_controller::generate::Registry>>,
}

fn start(sb: &Sandbox) -> Running {
    let parts = Parts::new(sb);
    let background = Background::new(
        parts.client.clone(),
        parts.policies.subscribe(),
        parts.metrics.clone(),
        parts.hub.clone(),
        BackgroundSettings {
            namespace: "kyverno".into(),
            workers: 4,
        },
    );
    let registry = background.registry();
    let scope = Scope::new();
    let t = scope.token().clone();
    scope.spawn("policies", parts.policies.run(t.clone()));
    scope.spawn("background", background.run(t));
    Running { scope, registry }
}

fn configmaps(sb: &Sandbox) -> Vec<Value> {
    sb.store()
        .list("v1", "ConfigMap", None)
        .unwrap()
        .into_iter()
        .filter(|c| c["metadata"]["name"] == "defaults")
        .collect()
}

/// Seed row: "generating-policy watchers started with
/// `context.Background()`" (PR #16087). 20 downstream kinds and the trigger
/// kind are watched; cancelling the component ends every watcher: `run`
/// returns, and alive tasks are back at the baseline within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_watcher_background_context() {
    let mut objects: Vec<Value> = (0..20).map(crd).collect();
    objects.push(crd_policy(20));
    objects.push(namespace("team-a"));
    let sb = sandbox(objects).await;
    let baseline = stable_baseline().await;
    let running = start(&sb);
    let registry = running.registry.clone();
    // The 20 downstream kinds and the trigger kind (besides the example
    // policies' kinds).
    eventually("21 kinds are watched", HANG_BOUND, || {
        let r = registry.borrow();
        let has = |av: &str, k: &str| r.kinds.contains_key(&(av.to_string(), k.to_string()));
        (0..20).all(|i| has("gen.leash.dev/v1", &format!("K{i}"))) && has("v1", "Namespace")
    })
    .await;
    eventually("every downstream exists", HANG_BOUND, || {
        (0..20).all(|i| {
            sb.store()
                .get("gen.leash.dev/v1", &format!("K{i}"), Some("team-a"), "x")
                .is_ok()
        })
    })
    .await;
    assert!(alive_tasks() > baseline + 21, "the watchers run as tasks");
    running.scope.token().cancel();
    within(
        "the component ends",
        Duration::from_secs(5),
        running.scope.shutdown(),
    )
    .await
    .unwrap();
    let start = std::time::Instant::now();
    while alive_tasks() > baseline {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "alive tasks stay at {} > baseline {baseline} a second after cancel",
            alive_tasks()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sb.shutdown().await.unwrap();
}

/// Seed row: "a watcher that exited left its entry in `dynamicWatchers`,
/// never replaced". The downstream kind's CRD is deleted (its watcher
/// ends) and created again: the watcher is replaced, the downstreams come
/// back, and a downstream deleted afterwards is restored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_stale_watcher_entry() {
    let sb = sandbox(vec![crd(0), crd_policy(1), namespace("team-a")]).await;
    let running = start(&sb);
    let get = || {
        sb.store()
            .get("gen.leash.dev/v1", "K0", Some("team-a"), "x")
    };
    eventually("the downstream is generated", HANG_BOUND, || get().is_ok()).await;
    sb.store()
        .delete(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "k0s.gen.leash.dev",
        )
        .unwrap();
    eventually("the CRD and its objects are gone", HANG_BOUND, || {
        get().is_err()
    })
    .await;
    // Let the watcher see the 404 and end.
    tokio::time::sleep(Duration::from_millis(300)).await;
    sb.store().create(crd(0)).unwrap();
    // Touch the trigger so its rules are reconciled: the downstream comes back.
    let mut ns = sb.store().get("v1", "Namespace", None, "team-a").unwrap();
    ns["metadata"]["labels"]["touched"] = json!("1");
    sb.store().update(ns).unwrap();
    eventually("the downstream is generated again", HANG_BOUND, || {
        get().is_ok()
    })
    .await;
    let uid = get().unwrap()["metadata"]["uid"].clone();
    sb.store()
        .delete("gen.leash.dev/v1", "K0", Some("team-a"), "x")
        .unwrap();
    eventually(
        "a downstream deleted after the replacement is restored",
        HANG_BOUND,
        || get().is_ok_and(|d| d["metadata"]["uid"] != uid),
    )
    .await;
    running.scope.token().cancel();
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// Chaos: a generate-per-namespace policy while 1,000 namespaces are
/// created concurrently, with 10% 500s and 5% 429s on every request of
/// leash: exactly one downstream per namespace; 100 deleted ones are all
/// restored within 5 s; deleting the policy removes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_generate_per_namespace() {
    let sb = sandbox(vec![configmap_policy(false)]).await;
    let running = start(&sb);
    let registry = running.registry.clone();
    eventually("the policy is registered", HANG_BOUND, || {
        !registry.borrow().kinds.is_empty()
    })
    .await;
    sb.set_faults(Faults {
        fail_rate: 0.10,
        throttle_rate: 0.05,
        retry_after_secs: 0,
        ..Faults::default()
    });
    std::thread::scope(|s| {
        for t in 0..4 {
            let sb = &sb;
            s.spawn(move || {
                for i in (t..1000).step_by(4) {
                    sb.store().create(namespace(&format!("ns-{i:04}"))).unwrap();
                }
            });
        }
    });
    eventually("1,000 downstreams", Duration::from_secs(60), || {
        configmaps(&sb).len() == 1000
    })
    .await;
    for cm in configmaps(&sb) {
        let ns = cm["metadata"]["namespace"].as_str().unwrap();
        assert_eq!(
            cm["data"]["team"], ns,
            "the downstream of {ns} has its data"
        );
        assert_eq!(
            cm["metadata"]["labels"]["generate.kyverno.io/trigger-name"], ns,
            "the downstream names its trigger"
        );
    }
    // Each made once: a second look finds the same objects, unchanged.
    let first: Vec<(Value, Value)> = configmaps(&sb)
        .iter()
        .map(|c| {
            (
                c["metadata"]["uid"].clone(),
                c["metadata"]["resourceVersion"].clone(),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let again: Vec<(Value, Value)> = configmaps(&sb)
        .iter()
        .map(|c| {
            (
                c["metadata"]["uid"].clone(),
                c["metadata"]["resourceVersion"].clone(),
            )
        })
        .collect();
    assert_eq!(first, again, "downstreams were re-created or rewritten");
    let deleted: Vec<(String, Value)> = configmaps(&sb)
        .into_iter()
        .take(100)
        .map(|c| {
            let ns = c["metadata"]["namespace"].as_str().unwrap().to_string();
            (ns, c["metadata"]["uid"].clone())
        })
        .collect();
    for (ns, _) in &deleted {
        sb.store()
            .delete("v1", "ConfigMap", Some(ns), "defaults")
            .unwrap();
    }
    // A hang guard: restoring them takes about 5 s in this debug build
    // alone on 2 cores (each is an UpdateRequest written, processed and
    // deleted), longer beside the rest of the suite.
    eventually(
        "the 100 deleted downstreams are restored",
        Duration::from_secs(30),
        || {
            deleted.iter().all(|(ns, uid)| {
                sb.store()
                    .get("v1", "ConfigMap", Some(ns), "defaults")
                    .is_ok_and(|c| c["metadata"]["uid"] != *uid)
            })
        },
    )
    .await;
    assert_eq!(
        configmaps(&sb).len(),
        1000,
        "exactly one downstream per namespace"
    );
    sb.store()
        .delete("kyverno.io/v1", "ClusterPolicy", None, "ns-defaults")
        .unwrap();
    eventually(
        "deleting the policy removes its downstreams",
        Duration::from_secs(60),
        || configmaps(&sb).is_empty(),
    )
    .await;
    sb.set_faults(Faults::default());
    running.scope.token().cancel();
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// `orphanDownstreamOnPolicyDelete` keeps the downstreams when the policy
/// goes; `generateExisting` generates for namespaces that were there first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_downstreams_stay_and_existing_triggers_generate() {
    let mut policy = configmap_policy(true);
    policy["spec"]["generateExisting"] = json!(true);
    let sb = sandbox(vec![namespace("old-a"), namespace("old-b")]).await;
    let running = start(&sb);
    // Only the namespaces that existed before; the policy comes after.
    tokio::time::sleep(Duration::from_millis(200)).await;
    sb.store().create(policy).unwrap();
    eventually(
        "existing namespaces get their downstream",
        HANG_BOUND,
        || configmaps(&sb).len() == 2,
    )
    .await;
    sb.store()
        .delete("kyverno.io/v1", "ClusterPolicy", None, "ns-defaults")
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(configmaps(&sb).len(), 2, "orphaned downstreams stay");
    let token = CancellationToken::new();
    token.cancel();
    running.scope.token().cancel();
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// A GeneratingPolicy (CEL) generating a ConfigMap `<namespace>-defaults`
/// in `default` for every namespace labelled `team` (outside the trigger's
/// namespace, so deleting the trigger does not cascade to it).
fn generating_policy(synchronize: bool, orphan: bool, existing: bool) -> Value {
    json!({
        "apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
        "metadata": {"name": "team-defaults"},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["namespaces"]}]},
            "matchConditions": [{"name": "has-team",
                "expression": "has(object.metadata.labels) && 'team' in object.metadata.labels"}],
            "variables": [{"name": "ns", "expression": "object.metadata.name"}],
            "evaluation": {
                "synchronize": {"enabled": synchronize},
                "orphanDownstreamOnPolicyDelete": {"enabled": orphan},
                "generateExisting": {"enabled": existing}
            },
            "generate": [{"expression": r#"generator.Apply("default", [{
                "apiVersion": dyn("v1"), "kind": dyn("ConfigMap"),
                "metadata": dyn({"name": variables.ns + "-defaults"}),
                "data": dyn({"team": object.metadata.labels["team"]})
            }])"#}]
        }
    })
}

fn team_defaults(sb: &Sandbox) -> Vec<Value> {
    sb.store()
        .list("v1", "ConfigMap", None)
        .unwrap()
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["generate.kyverno.io/policy-name"] == "team-defaults")
        .collect()
}

/// A synchronizing GeneratingPolicy: each trigger gets its downstream; the
/// downstream kind it generates is learned and watched, so a deleted or
/// edited downstream is restored; a deleted trigger takes its downstream
/// with it; deleting the policy deletes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generating_policy_synchronizes_and_cleans_up() {
    let sb = sandbox(vec![generating_policy(true, false, false)]).await;
    let running = start(&sb);
    let registry = running.registry.clone();
    eventually("the policy is registered", HANG_BOUND, || {
        registry.borrow().policies.contains_key("team-defaults")
    })
    .await;
    for ns in ["team-a", "team-b", "team-c"] {
        sb.store().create(namespace(ns)).unwrap();
    }
    sb.store()
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "plain"}}))
        .unwrap();
    eventually("three downstreams", HANG_BOUND, || {
        team_defaults(&sb).len() == 3
    })
    .await;
    let cm = sb
        .store()
        .get("v1", "ConfigMap", Some("default"), "team-a-defaults")
        .unwrap();
    assert_eq!(cm["data"]["team"], "team-a");
    assert_eq!(
        cm["metadata"]["labels"]["generate.kyverno.io/policy-name"],
        "team-defaults"
    );
    eventually("the generated kind is watched", HANG_BOUND, || {
        registry
            .borrow()
            .kinds
            .get(&("v1".to_string(), "ConfigMap".to_string()))
            .is_some_and(|r| !r.downstream_of.is_empty())
    })
    .await;
    assert!(registry.borrow().is_consistent());
    // Deleted: restored.
    let uid = cm["metadata"]["uid"].clone();
    sb.store()
        .delete("v1", "ConfigMap", Some("default"), "team-a-defaults")
        .unwrap();
    eventually("the deleted downstream is restored", HANG_BOUND, || {
        sb.store()
            .get("v1", "ConfigMap", Some("default"), "team-a-defaults")
            .is_ok_and(|c| c["metadata"]["uid"] != uid)
    })
    .await;
    // Edited: put back.
    let mut edited = sb
        .store()
        .get("v1", "ConfigMap", Some("default"), "team-b-defaults")
        .unwrap();
    edited["data"]["team"] = json!("someone-else");
    sb.store().update(edited).unwrap();
    eventually("the edited downstream is put back", HANG_BOUND, || {
        sb.store()
            .get("v1", "ConfigMap", Some("default"), "team-b-defaults")
            .is_ok_and(|c| c["data"]["team"] == "team-b")
    })
    .await;
    // The trigger changes: the downstream follows it.
    let mut ns = sb.store().get("v1", "Namespace", None, "team-c").unwrap();
    ns["metadata"]["labels"]["team"] = json!("platform");
    sb.store().update(ns).unwrap();
    eventually("the downstream follows its trigger", HANG_BOUND, || {
        sb.store()
            .get("v1", "ConfigMap", Some("default"), "team-c-defaults")
            .is_ok_and(|c| c["data"]["team"] == "platform")
    })
    .await;
    // The trigger goes: so does its downstream.
    sb.store()
        .delete("v1", "Namespace", None, "team-b")
        .unwrap();
    eventually("the trigger's downstream is deleted", HANG_BOUND, || {
        team_defaults(&sb)
            .iter()
            .all(|c| c["metadata"]["name"] != "team-b-defaults")
    })
    .await;
    sb.store()
        .delete(
            "policies.kyverno.io/v1",
            "GeneratingPolicy",
            None,
            "team-defaults",
        )
        .unwrap();
    eventually(
        "deleting the policy deletes its downstreams",
        HANG_BOUND,
        || team_defaults(&sb).is_empty(),
    )
    .await;
    running.scope.token().cancel();
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// A GeneratingPolicy with `generateExisting` generates for namespaces
/// that were there before it; with `orphanDownstreamOnPolicyDelete` its
/// downstreams stay when it goes; without `synchronize` a deleted
/// downstream stays deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generating_policy_generates_for_existing_triggers_and_orphans() {
    let sb = sandbox(vec![namespace("old-a"), namespace("old-b")]).await;
    let running = start(&sb);
    tokio::time::sleep(Duration::from_millis(200)).await;
    sb.store()
        .create(generating_policy(false, true, true))
        .unwrap();
    eventually(
        "existing namespaces get their downstream",
        HANG_BOUND,
        || team_defaults(&sb).len() == 2,
    )
    .await;
    sb.store()
        .delete("v1", "ConfigMap", Some("default"), "old-a-defaults")
        .unwrap();
    sb.store().create(namespace("new-c")).unwrap();
    eventually("a new namespace gets its downstream", HANG_BOUND, || {
        sb.store()
            .get("v1", "ConfigMap", Some("default"), "new-c-defaults")
            .is_ok()
    })
    .await;
    assert!(
        sb.store()
            .get("v1", "ConfigMap", Some("default"), "old-a-defaults")
            .is_err(),
        "without synchronize, a deleted downstream is not restored"
    );
    sb.store()
        .delete(
            "policies.kyverno.io/v1",
            "GeneratingPolicy",
            None,
            "team-defaults",
        )
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(team_defaults(&sb).len(), 2, "orphaned downstreams stay");
    running.scope.token().cancel();
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// README, generate rules (classic, `synchronize: true`): an edited
/// downstream is put back, and a deleted trigger deletes its downstreams.
/// Triggers are ConfigMaps and their downstreams live in another namespace
/// (a deleted Namespace would take its objects with it in the sandbox,
/// proving nothing of leash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_synchronize_restores_edits_and_follows_trigger_deletion() {
    let policy = json!({
        "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "copies"},
        "spec": {"rules": [{
            "name": "copy",
            "match": {"any": [{"resources": {"kinds": ["ConfigMap"], "namespaces": ["apps"]}}]},
            "generate": {
                "apiVersion": "v1", "kind": "ConfigMap",
                "name": "{{ request.object.metadata.name }}-copy", "namespace": "copies",
                "synchronize": true,
                "data": {"data": {"from": "{{ request.object.metadata.name }}"}}
            }
        }]}
    });
    let trigger = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "apps"}, "data": {"k": "v"}})
    };
    let sb = sandbox(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "copies"}}),
        policy,
        trigger("a"),
        trigger("b"),
    ])
    .await;
    let running = start(&sb);
    let copy = |name: &str| sb.store().get("v1", "ConfigMap", Some("copies"), name);
    eventually("both downstreams", HANG_BOUND, || {
        copy("a-copy").is_ok() && copy("b-copy").is_ok()
    })
    .await;
    let mut edited = copy("a-copy").unwrap();
    edited["data"]["from"] = json!("someone-else");
    sb.store().update(edited).unwrap();
    eventually("the edit is undone", HANG_BOUND, || {
        copy("a-copy").is_ok_and(|c| c["data"]["from"] == "a")
    })
    .await;
    sb.store()
        .delete("v1", "ConfigMap", Some("apps"), "b")
        .unwrap();
    eventually(
        "the deleted trigger's downstream is deleted",
        HANG_BOUND,
        || copy("b-copy").is_err(),
    )
    .await;
    assert!(
        copy("a-copy").is_ok(),
        "the other trigger's downstream stays"
    );
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}

/// A generate rule whose context reads an `apiCall` `urlPath` (Kyverno's
/// kasten/kasten-generate-policy-by-preset-label): the background
/// component reads the path from the API server and generates with its
/// answer (it used to retry for ever, "no cluster data for it").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generate_reads_api_call_context_entries() {
    let mut policy = configmap_policy(false);
    policy["spec"]["generateExisting"] = json!(true);
    let rule = &mut policy["spec"]["rules"][0];
    rule["context"] = json!([{"name": "preset", "apiCall": {
        "urlPath": "/api/v1/namespaces/default/configmaps/presets",
        "jmesPath": "data.tier"}}]);
    rule["generate"]["data"]["data"]["tier"] = json!("{{ preset }}");
    let presets = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "presets", "namespace": "default"}, "data": {"tier": "gold"}});
    let sb = sandbox(vec![namespace("team-a"), presets, policy]).await;
    let running = start(&sb);
    eventually(
        "the downstream is generated with the API call's answer",
        HANG_BOUND,
        || {
            configmaps(&sb)
                .iter()
                .any(|c| c["metadata"]["namespace"] == "team-a" && c["data"]["tier"] == "gold")
        },
    )
    .await;
    running.scope.token().cancel();
    running.scope.shutdown().await.unwrap();
    sb.shutdown().await.unwrap();
}
