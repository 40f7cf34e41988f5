//! Watches: kube-rs watcher and reflector, streaming lists, too-old versions,
//! timeouts, and shutdown with open watches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use leash_sandbox::Sandbox;
use serde_json::{Value, json};

use crate::common::{BOUND, client, configmap, configmaps, eventually, get, settles_to, start};

fn lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("each line is JSON"))
        .collect()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn watcher_and_reflector_see_every_write() {
    let sb = start(configmaps("default", 50, |i| format!("cm-{i:03}"))).await;
    let api: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
    let (reader, writer) = reflector::store();
    let seen: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let seen_in_stream = seen.clone();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .try_for_each(move |event| {
            let seen = seen_in_stream.clone();
            async move {
                let mut seen = seen.lock().unwrap();
                match event {
                    watcher::Event::Apply(o) | watcher::Event::Delete(o) => {
                        seen.insert(o.metadata.resource_version.unwrap().parse().unwrap());
                    }
                    _ => {}
                }
                Ok(())
            }
        });
    let store = sb.store().clone();
    let test = async {
        reader.wait_until_ready().await.expect("initial list");
        assert_eq!(reader.len(), 50);
        let mut writes = Vec::new();
        for i in 0..150 {
            let name = format!("cm-{:03}", i % 60);
            let rv = match i % 3 {
                0 => rv_of(
                    &store
                        .create(configmap("default", &format!("new-{i:03}"), json!({})))
                        .unwrap(),
                ),
                1 => {
                    let mut obj = store
                        .get("v1", "ConfigMap", Some("default"), &name)
                        .unwrap_or_else(|_| {
                            store
                                .create(configmap("default", &name, json!({})))
                                .unwrap()
                        });
                    obj["data"]["k"] = json!(format!("v{i}"));
                    rv_of(&store.update(obj).unwrap())
                }
                _ => match store.delete("v1", "ConfigMap", Some("default"), &name) {
                    Ok(()) => store.resource_version(),
                    Err(_) => continue,
                },
            };
            writes.push(rv);
            if i % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        let expected = writes.clone();
        eventually("every write seen by the watcher", || {
            let seen = seen.lock().unwrap();
            expected.iter().all(|rv| seen.contains(rv))
        })
        .await;
        // The reflector's cache equals the store.
        let want: BTreeMap<String, String> = sb_configmaps(&store);
        eventually("reflector converges", || {
            let got: BTreeMap<String, String> = reader
                .state()
                .iter()
                .map(|c| {
                    (
                        c.metadata.name.clone().unwrap(),
                        c.metadata.resource_version.clone().unwrap(),
                    )
                })
                .collect();
            got == want
        })
        .await;
    };
    tokio::select! {
        r = stream => panic!("watch stream ended: {r:?}"),
        () = test => {}
    }
    sb.shutdown().await.unwrap();
}

/// name → resourceVersion of every ConfigMap in `default`, read through the store.
fn sb_configmaps(store: &leash_sandbox::Store) -> BTreeMap<String, String> {
    store
        .list("v1", "ConfigMap", Some("default"))
        .unwrap()
        .into_iter()
        .map(|v| {
            let name = v["metadata"]["name"].as_str().unwrap().to_string();
            (
                name,
                v["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn streaming_list_sends_initial_events_then_the_end_bookmark() {
    let sb = start(configmaps("kube-system", 30, |i| format!("s-{i:02}"))).await;
    // kube-rs's streaming watcher gets Init, 30 InitApply, InitDone (from the bookmark), then live events.
    let api: Api<ConfigMap> = Api::namespaced(client(&sb), "kube-system");
    let mut events = watcher(api, watcher::Config::default().streaming_lists()).boxed();
    let mut applied = 0;
    loop {
        match tokio::time::timeout(BOUND, events.next())
            .await
            .expect("bounded")
            .unwrap()
            .unwrap()
        {
            watcher::Event::Init => {}
            watcher::Event::InitApply(_) => applied += 1,
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?} before InitDone"),
        }
    }
    assert_eq!(applied, 30);
    sb.store()
        .create(configmap("kube-system", "live", json!({})))
        .unwrap();
    match tokio::time::timeout(BOUND, events.next())
        .await
        .expect("bounded")
        .unwrap()
        .unwrap()
    {
        watcher::Event::Apply(o) => assert_eq!(o.metadata.name.as_deref(), Some("live")),
        other => panic!("expected the live object, got {other:?}"),
    }
    drop(events);

    // On the wire: ADDED for each object, the annotated BOOKMARK, and the stream ends at timeoutSeconds.
    let r = get(sb.addr(), "/api/v1/namespaces/kube-system/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1")
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.truncated, "the watch ended cleanly at its timeout");
    let events = lines(&r.body);
    assert_eq!(events.len(), 32, "31 ADDED + 1 BOOKMARK");
    assert!(events[..31].iter().all(|e| e["type"] == "ADDED"));
    let bookmark = &events[31];
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(bookmark["object"]["kind"], "ConfigMap");
    let bm_meta = bookmark["object"]["metadata"].as_object().unwrap();
    assert_eq!(
        bm_meta.len(),
        2,
        "a bookmark carries only resourceVersion (and the annotation)"
    );
    assert_eq!(rv_of(&bookmark["object"]), sb.store().resource_version());
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn watch_from_a_too_old_version_gets_one_410_error_event() {
    let sb = start(vec![]).await;
    for i in 0..10_010 {
        sb.store()
            .create(configmap("default", &format!("c{i:05}"), json!({})))
            .unwrap();
    }
    let r = get(sb.addr(), "/api/v1/configmaps?watch=true&resourceVersion=3").await;
    assert_eq!(r.status, 200);
    let events = lines(&r.body);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["kind"], "Status");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
    // A recent version still resumes exactly.
    let recent = sb.store().resource_version() - 2;
    let r = get(
        sb.addr(),
        &format!("/api/v1/configmaps?watch=true&resourceVersion={recent}&timeoutSeconds=1"),
    )
    .await;
    let events = lines(&r.body);
    let names: Vec<_> = events
        .iter()
        .map(|e| e["object"]["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c10008", "c10009"]);
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn shutdown_ends_open_watches_and_joins_every_task() {
    let baseline = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    let sb = Sandbox::start(Default::default()).await.unwrap();
    let addr = sb.addr();
    let watching = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watches = (0..3).map(|_| {
        let watching = watching.clone();
        async move {
            watching.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            get(addr, "/api/v1/namespaces?watch=1&timeoutSeconds=600").await
        }
    });
    let watches = futures::future::join_all(watches);
    let stop = async {
        eventually("watches open", || {
            watching.load(std::sync::atomic::Ordering::SeqCst) == 3
        })
        .await;
        // Served, not just sent: each has its subscription.
        eventually("watches served", || sb.store().open_watches() == 3).await;
        let started = std::time::Instant::now();
        tokio::time::timeout(BOUND, sb.shutdown())
            .await
            .expect("shutdown is bounded")
            .unwrap();
        started.elapsed()
    };
    let (results, took) = tokio::join!(watches, stop);
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    for r in results {
        assert_eq!(r.status, 200);
        assert!(!r.truncated, "the watch ended cleanly");
        assert_eq!(
            lines(&r.body).len(),
            4,
            "the initial ADDED events of the 4 namespaces"
        );
    }
    settles_to(baseline).await;
    // The port is closed.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// Watches `path` (`/apis/...` of a list, from the current version) and,
/// once it is served, runs `change` on the store; the watch's events, once it
/// ended (`what` names why it must end within the bound).
async fn watch_until_ended(
    sb: &Sandbox,
    path: &str,
    what: &str,
    change: impl FnOnce(&leash_sandbox::Store),
) -> Vec<Value> {
    let rv = sb.store().resource_version();
    let target = format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=600");
    let watch = get(sb.addr(), &target);
    let act = async {
        eventually("the watch served", || sb.store().open_watches() == 1).await;
        change(sb.store());
    };
    let (r, ()) = tokio::time::timeout(BOUND, async { tokio::join!(watch, act) })
        .await
        .expect(what);
    assert!(!r.truncated);
    lines(&r.body)
}

fn delete_crd(store: &leash_sandbox::Store, name: &str) {
    store
        .delete(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            name,
        )
        .unwrap();
}

#[tokio::test]
async fn deleting_a_crd_sends_deleted_events_and_ends_its_watches() {
    let sb = start(vec![
        crate::common::crd("gadgets", "Gadget", "gd"),
        json!({"apiVersion": "example.leash.dev/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": "default"}}),
    ])
    .await;
    let events = watch_until_ended(
        &sb,
        "/apis/example.leash.dev/v1/gadgets",
        "the watch ends when its kind is gone",
        |store| delete_crd(store, "gadgets.example.leash.dev"),
    )
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "DELETED");
    assert_eq!(events[0]["object"]["metadata"]["name"], "g1");
    sb.shutdown().await.unwrap();
}

/// A watch of a kind with no objects ends too when its CRD is deleted, and
/// one of a version the CRD stops serving ends when the CRD is updated: the
/// deletion or update wakes the watches of its kind, though no object of
/// it changed.
#[tokio::test]
async fn watches_of_an_empty_kind_end_when_its_crd_goes_or_drops_their_version() {
    let sb = start(vec![crate::common::crd("gizmos", "Gizmo", "gz")]).await;
    let crd_name = "gizmos.example.leash.dev";
    // First the update: v1 no longer served, v2 served instead.
    let events = watch_until_ended(
        &sb,
        "/apis/example.leash.dev/v1/gizmos",
        "the watch of v1 ends when v1 is no longer served",
        |store| {
            let mut crd = store
                .get(
                    "apiextensions.k8s.io/v1",
                    "CustomResourceDefinition",
                    None,
                    crd_name,
                )
                .unwrap();
            crd["spec"]["versions"] = json!([{"name": "v2", "served": true, "storage": true}]);
            store.update(crd).unwrap();
        },
    )
    .await;
    assert!(events.is_empty(), "{events:?}");
    // Then the deletion, watched at v2.
    let events = watch_until_ended(
        &sb,
        "/apis/example.leash.dev/v2/gizmos",
        "the watch ends when its kind is gone",
        |store| delete_crd(store, crd_name),
    )
    .await;
    assert!(events.is_empty(), "{events:?}");
    sb.shutdown().await.unwrap();
}

/// `Sandbox::open_watches` counts each watch by resource from its first
/// response until its body is dropped: a kube watcher of ConfigMaps and a
/// raw watch of Deployments count, and stop counting once ended (the raw
/// client gone, seen at the next event written to it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_watches_are_counted_by_resource_while_they_last() {
    use std::io::{Read as _, Write as _};
    let sb = start(vec![]).await;
    assert!(sb.open_watches().is_empty());
    let api: Api<ConfigMap> = Api::all(client(&sb));
    let mut stream = watcher(api, watcher::Config::default()).boxed();
    let scope = leash_runtime::Scope::new();
    let token = scope.token().clone();
    scope.spawn("configmap watcher", async move {
        while token
            .run_until_cancelled(stream.next())
            .await
            .flatten()
            .is_some()
        {}
        Ok::<(), std::convert::Infallible>(())
    });
    eventually("the ConfigMap watch counted", || {
        sb.open_watches().get("configmaps") == Some(&1)
    })
    .await;
    let addr = sb.addr();
    let raw = tokio::task::block_in_place(|| {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET /apis/apps/v1/deployments?watch=1 HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        s
    });
    eventually("the Deployment watch counted", || {
        sb.open_watches().get("deployments.apps") == Some(&1)
    })
    .await;
    drop(raw);
    // The next event written to the closed connection ends that watch.
    sb.store()
        .create(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "default"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "a", "image": "nginx:1.27"}]}}}}))
        .unwrap();
    eventually("the Deployment watch no longer counted", || {
        !sb.open_watches().contains_key("deployments.apps")
    })
    .await;
    scope.shutdown().await.unwrap();
    eventually("the ConfigMap watch no longer counted", || {
        sb.open_watches().is_empty()
    })
    .await;
    sb.shutdown().await.unwrap();
}
