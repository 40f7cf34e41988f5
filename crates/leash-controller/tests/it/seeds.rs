//! Seed 000 replays for the reports side (each test names its seed row).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use leash_controller::cache::Cache;
use leash_controller::leader::{self, LeaseSettings};
use leash_controller::object::api_resource;
use leash_controller::scan::evaluate_object;
use leash_controller::{ConfigSource, Metrics, PolicySet, ReportsSettings};
use leash_policy::{KyvernoConfig, UserInfo};
use leash_runtime::Scope;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::*;

/// Seed row: "cleanup goroutine started in `NewController`, never stopped"
/// (Kyverno #17035). Building 1,000 report controllers starts nothing;
/// running then cancelling each returns the alive-task count to its
/// baseline, with one cleanup loop at most while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_aggregate_cleanup_in_new() {
    let sb = sandbox(vec![]).await;
    let parts = Parts::new(&sb);
    let baseline = stable_baseline().await;
    let built: Vec<_> = (0..1000)
        .map(|_| parts.reports(ReportsSettings::default()))
        .collect();
    tokio::task::yield_now().await;
    assert_eq!(
        alive_tasks(),
        baseline,
        "constructing controllers started tasks"
    );
    assert_eq!(parts.metrics.cleanup_loops.get(), 0);
    for (i, reports) in built.into_iter().enumerate() {
        let token = CancellationToken::new();
        let run = reports.run(token.clone());
        let metrics = parts.metrics.clone();
        let check = async {
            eventually("the cleanup loop starts", HANG_BOUND, || {
                metrics.cleanup_loops.get() == 1
            })
            .await;
            token.cancel();
        };
        let (result, ()) = within("run and cancel", HANG_BOUND, async {
            tokio::join!(run, check)
        })
        .await;
        result.unwrap_or_else(|e| panic!("controller {i}: {e}"));
        assert_eq!(
            parts.metrics.cleanup_loops.get(),
            0,
            "controller {i} left its cleanup loop"
        );
        assert_eq!(
            parts.metrics.worker_sets.get(),
            0,
            "controller {i} left its workers"
        );
    }
    // The client's idle pooled connections are hyper's tasks, not ours: they
    // end with the client.
    drop(parts);
    back_to(baseline).await;
    sb.shutdown().await.unwrap();
}

/// Seed row: "`NewController` re-run on every leader-election change, one
/// more leaked loop each time". 50 times the lease is taken away and given
/// back; at every moment at most one cleanup loop and one worker set exist;
/// afterwards alive tasks return to the baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_leader_flip_leak() {
    let sb = sandbox(vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}),
    ])
    .await;
    let parts = Arc::new(Parts::new(&sb));
    let baseline = stable_baseline().await;
    let root = Scope::new();
    let settings = LeaseSettings {
        duration: Duration::from_secs(5),
        retry: Duration::from_millis(30),
        ..LeaseSettings::new("leash-reports", "kyverno", "me")
    };
    {
        let parts = parts.clone();
        let (client, metrics, token) = (
            parts.client.clone(),
            parts.metrics.clone(),
            root.token().clone(),
        );
        root.spawn("lead", async move {
            leader::lead(client, settings, metrics, token, |term| {
                let reports = parts.reports(ReportsSettings::default());
                async move {
                    reports.run(term).await.expect("reports run");
                }
            })
            .await;
            Ok::<(), std::convert::Infallible>(())
        });
    }
    // Watch the gauges all along.
    let most_loops = Arc::new(AtomicI64::new(0));
    let most_workers = Arc::new(AtomicI64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (m, l, w, stop) = (
            parts.metrics.clone(),
            most_loops.clone(),
            most_workers.clone(),
            stop.clone(),
        );
        async move {
            while !stop.load(Ordering::Relaxed) {
                l.fetch_max(m.cleanup_loops.get(), Ordering::Relaxed);
                w.fetch_max(m.worker_sets.get(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    let flips = async {
        let m = parts.metrics.clone();
        for flip in 0..50 {
            eventually(&format!("term {flip} leads"), HANG_BOUND, || {
                m.leader.get() == 1 && m.cleanup_loops.get() == 1
            })
            .await;
            set_holder(&sb, "intruder");
            eventually(&format!("term {flip} steps down"), HANG_BOUND, || {
                m.leader.get() == 0
            })
            .await;
            assert_eq!(
                m.cleanup_loops.get(),
                0,
                "flip {flip}: the old term's cleanup loop survived"
            );
            assert_eq!(
                m.worker_sets.get(),
                0,
                "flip {flip}: the old term's workers survived"
            );
            set_holder(&sb, "");
        }
        eventually("the last term leads", HANG_BOUND, || m.leader.get() == 1).await;
        stop.store(true, Ordering::Relaxed);
    };
    within("50 leadership changes", Duration::from_secs(120), async {
        tokio::join!(sampler, flips)
    })
    .await;
    assert!(
        most_loops.load(Ordering::Relaxed) <= 1,
        "two cleanup loops at once"
    );
    assert!(
        most_workers.load(Ordering::Relaxed) <= 1,
        "two worker sets at once"
    );
    assert_eq!(parts.metrics.leader_terms.get(), 51);
    within("shutdown", HANG_BOUND, root.shutdown())
        .await
        .unwrap();
    assert_eq!(parts.metrics.cleanup_loops.get(), 0);
    drop(parts);
    back_to(baseline).await;
    sb.shutdown().await.unwrap();
}

/// Gives the lease to `holder` ("" frees it), retrying on conflicts with
/// the elector's own renewals.
fn set_holder(sb: &leash_sandbox::Sandbox, holder: &str) {
    for _ in 0..100 {
        let Ok(mut lease) = sb.store().get(
            "coordination.k8s.io/v1",
            "Lease",
            Some("kyverno"),
            "leash-reports",
        ) else {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        };
        lease["spec"]["holderIdentity"] = json!(holder);
        lease["spec"]["renewTime"] = json!(k8s_openapi::jiff::Timestamp::now().to_string());
        if sb.store().update(lease).is_ok() {
            return;
        }
    }
    panic!("could not set the lease holder");
}

fn pss_set() -> PolicySet {
    let docs =
        leash_sandbox::manifests::load_manifests(&[repo().join("bench/policies/pss-classic")])
            .unwrap();
    let docs: Vec<Arc<Value>> = docs.into_iter().map(Arc::new).collect();
    let set = PolicySet::compile(&docs, 1);
    assert!(set.errors.is_empty(), "{:?}", set.errors);
    assert!(set.background.policies().len() >= 10);
    set
}

/// Seed row: "background scan goroutines writing one shared map". One
/// cached object evaluated by 16 threads at once is never changed (same
/// bytes before and after) and every result equals a single-threaded run.
#[test]
fn seed_background_scan_shared_map() {
    let set = pss_set();
    let config = KyvernoConfig::default();
    let cache = Cache::new();
    let pods = cache.store(&api_resource("", "v1", "Pod", "pods"), true);
    let object = Arc::new(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "prod", "uid": "u-1", "labels": {"app": "web"}},
        "spec": {"hostNetwork": true, "containers": [
            {"name": "a", "image": "nginx:1.25", "securityContext": {"privileged": true, "capabilities": {"add": ["NET_ADMIN"]}}},
            {"name": "b", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}]}
        ], "volumes": [{"name": "h", "hostPath": {"path": "/etc"}}]}
    }));
    pods.put("prod", "web", &object);
    let before = serde_json::to_vec(&*object).unwrap();
    let single = evaluate_object(&set, &config, &cache, &object, 7);
    assert!(
        single.iter().any(|r| r["result"] == "fail"),
        "the pod violates PSS"
    );
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                s.spawn(|| {
                    let cached = pods.get("prod", "web").unwrap();
                    (0..50)
                        .map(|_| evaluate_object(&set, &config, &cache, &cached, 7))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for results in h.join().unwrap() {
                assert_eq!(
                    results, single,
                    "a concurrent evaluation differs from the single-threaded one"
                );
            }
        }
    });
    assert_eq!(
        serde_json::to_vec(&*pods.get("prod", "web").unwrap()).unwrap(),
        before,
        "the cached object changed"
    );
}

/// Seed row: "map read without lock while others write (`IsExcluded`)".
/// A million reads while the ConfigMap changes 1,000 times: every read sees
/// one whole snapshot, the old or the new one, never a mix.
#[test]
fn seed_is_excluded_race() {
    // The source is only applied to, never run: the client never connects.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _enter = rt.enter();
    let client =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let source = ConfigSource::new(
        client,
        "kyverno",
        "kyverno",
        Arc::new(Metrics::unregistered()),
    );
    let cm = |who: &str| {
        json!({"data": {
            "resourceFilters": format!("[Pod,{who}-*,*]"),
            "excludeUsernames": who,
            "excludeGroups": format!("{who}-group"),
        }})
    };
    let (a, b) = (cm("alice"), cm("bob"));
    source.apply(Some(&a)).unwrap();
    let user = |name: &str| UserInfo {
        username: name.into(),
        ..UserInfo::default()
    };
    let group = |g: &str| UserInfo {
        username: "x".into(),
        groups: vec![g.into()],
        ..UserInfo::default()
    };
    let (alice, bg) = (user("alice"), group("bob-group"));
    let rx = source.subscribe();
    let seen: BTreeMap<&str, usize> = std::thread::scope(|s| {
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                let (alice, bg) = (&alice, &bg);
                s.spawn(move || {
                    let mut counts = BTreeMap::new();
                    for i in 0..250_000 {
                        let snap = rx.borrow().clone();
                        // Two keys of one snapshot: they must agree on whose it is.
                        let (user, filter) = if i % 2 == 0 {
                            (
                                snap.is_excluded(alice),
                                snap.is_filtered("Pod", "alice-x", "p"),
                            )
                        } else {
                            (
                                !snap.is_excluded(bg),
                                !snap.is_filtered("Pod", "bob-x", "p"),
                            )
                        };
                        let which = match (user, filter) {
                            (true, true) => "alice",
                            (false, false) => "bob",
                            other => panic!("read {i} saw a torn snapshot: {other:?}"),
                        };
                        *counts.entry(which).or_insert(0) += 1;
                    }
                    counts
                })
            })
            .collect();
        for i in 0..1000 {
            source
                .apply(Some(if i % 2 == 0 { &b } else { &a }))
                .unwrap();
            if i % 50 == 0 {
                std::thread::yield_now();
            }
        }
        // An invalid update keeps the last snapshot whole.
        let bad = json!({"data": {"resourceFilters": "[Pod,unclosed"}});
        assert!(source.apply(Some(&bad)).is_err());
        let mut total = BTreeMap::new();
        for r in readers {
            for (k, v) in r.join().unwrap() {
                *total.entry(k).or_insert(0) += v;
            }
        }
        total
    });
    assert_eq!(seen.values().sum::<usize>(), 1_000_000);
    let last = rx.borrow().clone();
    assert!(
        last.is_excluded(&alice),
        "after 1,000 updates ending on alice's, and one invalid update"
    );
}
