//! `PartialObjectMetadata` answers: lists (paged), gets and watches asked
//! with kube-apiserver's `Accept` transformations carry only each object's
//! metadata; kube-rs's metadata API and metadata watcher read them.

use std::net::SocketAddr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;
use serde_json::{Value, json};

use crate::common::{BOUND, Raw, client, configmap, raw, start};

const AS_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const AS_ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

async fn get_as(addr: SocketAddr, target: &str, accept: &str) -> Raw {
    raw(addr, "GET", target, &[("Accept", accept)], b"").await
}

/// `n` labelled ConfigMaps with data in `default`, named `cm-<i>`.
fn objects(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| configmap("default", &format!("cm-{i}"), json!({"i": i.to_string()})))
        .collect()
}

fn lines(body: &[u8]) -> Vec<Value> {
    body.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("each line is JSON"))
        .collect()
}

/// Asserts `v` is a v1 `PartialObjectMetadata` whose metadata is exactly the stored object's.
fn assert_partial(v: &Value, full: &Value) {
    assert_eq!(v["kind"], "PartialObjectMetadata", "{v}");
    assert_eq!(v["apiVersion"], "meta.k8s.io/v1", "{v}");
    assert_eq!(v["metadata"], full["metadata"], "{v}");
    assert_eq!(
        v.as_object().unwrap().len(),
        3,
        "nothing but the metadata: {v}"
    );
}

#[tokio::test]
async fn lists_page_as_partial_object_metadata_lists() {
    let sb = start(objects(5)).await;
    let addr = sb.addr();
    let mut target = "/api/v1/namespaces/default/configmaps?limit=2".to_string();
    let (mut names, mut versions, mut remaining) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let r = get_as(addr, &target, AS_LIST).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let l = r.json();
        assert_eq!(
            (l["kind"].as_str(), l["apiVersion"].as_str()),
            (Some("PartialObjectMetadataList"), Some("meta.k8s.io/v1"))
        );
        for item in l["items"].as_array().unwrap() {
            let name = item["metadata"]["name"].as_str().unwrap();
            let full = sb
                .store()
                .get("v1", "ConfigMap", Some("default"), name)
                .unwrap();
            assert_partial(item, &full);
            names.push(name.to_string());
        }
        versions.push(l["metadata"]["resourceVersion"].clone());
        remaining.push(l["metadata"]["remainingItemCount"].as_u64());
        // Writes between pages are not seen: pages come from one snapshot.
        sb.store()
            .create(configmap(
                "default",
                &format!("late-{}", names.len()),
                json!({}),
            ))
            .unwrap();
        match l["metadata"]["continue"].as_str() {
            Some(c) => {
                target = format!("/api/v1/namespaces/default/configmaps?limit=2&continue={c}")
            }
            None => break,
        }
    }
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    versions.dedup();
    assert_eq!(versions.len(), 1, "every page at the first page's version");
    assert_eq!(remaining, [Some(3), Some(1), None]);
    // v1beta1 too, and label selectors as in plain lists.
    let beta = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1";
    let l = get_as(
        addr,
        "/api/v1/namespaces/default/configmaps?labelSelector=i%3D3",
        beta,
    )
    .await
    .json();
    assert_eq!(l["apiVersion"], "meta.k8s.io/v1beta1");
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    assert_eq!(l["items"][0]["metadata"]["name"], "cm-3");
    assert_eq!(l["items"][0]["apiVersion"], "meta.k8s.io/v1beta1");
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn gets_answer_partial_object_metadata_and_misfits_are_not_acceptable() {
    let sb = start(objects(1)).await;
    let addr = sb.addr();
    let one = "/api/v1/namespaces/default/configmaps/cm-0";
    let list = "/api/v1/namespaces/default/configmaps";
    let full = sb
        .store()
        .get("v1", "ConfigMap", Some("default"), "cm-0")
        .unwrap();
    let r = get_as(addr, one, AS_ONE).await;
    assert_eq!(r.status, 200);
    assert_partial(&r.json(), &full);
    // Without the transformation, the object itself.
    assert_eq!(get_as(addr, one, "application/json").await.json(), full);
    // kube-apiserver's misfits: an object as a list, a list or a watch as one object.
    get_as(addr, one, AS_LIST)
        .await
        .assert_status(406, "NotAcceptable");
    get_as(addr, list, AS_ONE)
        .await
        .assert_status(406, "NotAcceptable");
    get_as(addr, &format!("{list}?watch=1&timeoutSeconds=1"), AS_LIST)
        .await
        .assert_status(406, "NotAcceptable");
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn watch_events_and_bookmarks_carry_partial_object_metadata() {
    let sb = start(objects(2)).await;
    let addr = sb.addr();
    let target = "/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1";
    let store = sb.store().clone();
    let writes = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let created = store
            .create(configmap("default", "live", json!({"x": "y"})))
            .unwrap();
        store
            .delete("v1", "ConfigMap", Some("default"), "cm-0")
            .unwrap();
        created
    };
    let (r, created) = tokio::join!(get_as(addr, target, AS_ONE), writes);
    assert_eq!(r.status, 200);
    assert!(!r.truncated, "the watch ended cleanly at its timeout");
    let events = lines(&r.body);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ADDED", "ADDED", "BOOKMARK", "ADDED", "DELETED"]);
    assert_partial(&events[3]["object"], &created);
    assert_eq!(events[4]["object"]["metadata"]["name"], "cm-0");
    assert_eq!(events[4]["object"]["kind"], "PartialObjectMetadata");
    let bookmark = &events[2]["object"];
    assert_eq!(bookmark["kind"], "PartialObjectMetadata");
    assert_eq!(
        bookmark["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    for e in &events {
        assert!(e["object"].get("data").is_none(), "{e}");
    }
    sb.shutdown().await.unwrap();
}

async fn next<S: futures::Stream<Item = Result<E, watcher::Error>> + Unpin, E>(s: &mut S) -> E {
    tokio::time::timeout(BOUND, s.next())
        .await
        .expect("bounded")
        .expect("the stream goes on")
        .expect("no watch error")
}

#[tokio::test]
async fn kube_rs_metadata_api_and_watcher_read_only_metadata() {
    let sb = start(objects(5)).await;
    let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client(&sb), "default");
    let listed = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(listed.items.len(), 2);
    assert!(listed.metadata.continue_.is_some());
    let typed: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
    let meta = typed.get_metadata("cm-1").await.unwrap();
    assert_eq!(meta.metadata.labels.unwrap()["i"], "1");
    assert_eq!(meta.types.unwrap().kind, "PartialObjectMetadata");

    // The metadata watcher pages its list (2 a page), then sees live writes.
    let config = watcher::Config::default().page_size(2);
    let mut events = watcher::watcher(api, config).boxed();
    let mut names = Vec::new();
    loop {
        match next(&mut events).await {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => {
                assert_eq!(o.types.unwrap().kind, "PartialObjectMetadata");
                names.push(o.metadata.name.unwrap());
            }
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?} before InitDone"),
        }
    }
    names.sort();
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    sb.store()
        .create(configmap("default", "live", json!({"x": "y"})))
        .unwrap();
    match next(&mut events).await {
        watcher::Event::Apply(o) => {
            assert_eq!(o.metadata.name.as_deref(), Some("live"));
            assert_eq!(o.types.unwrap().api_version, "meta.k8s.io/v1");
        }
        other => panic!("expected the live object, got {other:?}"),
    }
    sb.store()
        .delete("v1", "ConfigMap", Some("default"), "cm-2")
        .unwrap();
    match next(&mut events).await {
        watcher::Event::Delete(o) => assert_eq!(o.metadata.name.as_deref(), Some("cm-2")),
        other => panic!("expected the deletion, got {other:?}"),
    }
    drop(events);
    sb.shutdown().await.unwrap();
}
