//! Lists through kube-rs: consistent pagination under concurrent writes, selectors,
//! continue-token expiry.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use leash_sandbox::Faults;
use serde_json::json;

use crate::common::{client, configmap, configmaps, get, start};

#[tokio::test]
async fn paginated_list_racing_a_writer_returns_exactly_the_snapshot() {
    let objects: Vec<_> = (0..300)
        .map(|i| {
            configmap(
                if i % 3 == 0 { "kube-system" } else { "default" },
                &format!("cm-{i:04}"),
                json!({}),
            )
        })
        .collect();
    let sb = start(objects).await;
    let api: Api<ConfigMap> = Api::all(client(&sb));
    let store = sb.store().clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (first_page_tx, first_page_rx) = tokio::sync::oneshot::channel::<()>();
    // The writer creates and deletes between the pages (from the first page on).
    let writer = {
        let stop = stop.clone();
        async move {
            first_page_rx.await.expect("first page listed");
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                store
                    .create(configmap("default", &format!("new-{i:05}"), json!({})))
                    .unwrap();
                let victim = format!("cm-{:04}", (i * 7) % 300);
                let _ = store.delete(
                    "v1",
                    "ConfigMap",
                    Some(if (i * 7) % 300 % 3 == 0 {
                        "kube-system"
                    } else {
                        "default"
                    }),
                    &victim,
                );
                i += 1;
                tokio::task::yield_now().await;
            }
            i
        }
    };
    let reader = async {
        // The snapshot the first page will see: everything at its resourceVersion.
        let mut names = Vec::new();
        let mut rvs = BTreeSet::new();
        let mut lp = ListParams::default().limit(17);
        let mut expected = None;
        let mut first_page_tx = Some(first_page_tx);
        loop {
            let page = api.list(&lp).await.unwrap();
            if expected.is_none() {
                // Items of the first page plus remainingItemCount is the snapshot's size.
                expected =
                    Some(page.items.len() + page.metadata.remaining_item_count.unwrap() as usize);
            }
            rvs.insert(page.metadata.resource_version.clone().unwrap());
            names.extend(page.items.iter().map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.as_deref().unwrap(),
                    c.metadata.name.as_deref().unwrap()
                )
            }));
            if let Some(tx) = first_page_tx.take() {
                tx.send(()).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (names, rvs, expected.unwrap())
    };
    let ((names, rvs, expected), writes) = tokio::join!(reader, writer);
    assert!(writes > 10, "the writer raced the list ({writes} rounds)");
    assert_eq!(rvs.len(), 1, "one resourceVersion on every page: {rvs:?}");
    let unique: BTreeSet<_> = names.iter().cloned().collect();
    assert_eq!(unique.len(), names.len(), "no duplicates");
    // Exactly the store at the list's version: the 300 initial objects (none deleted
    // before the first page), and none of the writer's objects.
    assert_eq!(names.len(), expected);
    assert_eq!(names.len(), 300);
    assert!(names.iter().all(|n| n.contains("/cm-")));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, names, "pages come in key order");
    sb.shutdown().await.unwrap();
}

/// Each list's tokens last the TTL from its own first page, even when an
/// earlier list at the same resourceVersion (nothing written since) began
/// longer ago than that.
#[tokio::test]
async fn a_new_list_at_the_same_version_gets_the_whole_ttl() {
    let sb = start(configmaps("default", 10, |i| format!("cm-{i}"))).await;
    let ttl = Duration::from_millis(1000);
    sb.set_faults(Faults {
        continue_ttl: ttl,
        ..Faults::default()
    });
    let path = "/api/v1/namespaces/default/configmaps?limit=4";
    let first = get(sb.addr(), path).await.json();
    tokio::time::sleep(ttl * 2 / 3).await;
    let second = get(sb.addr(), path).await.json();
    assert_eq!(
        first["metadata"]["resourceVersion"], second["metadata"]["resourceVersion"],
        "both lists are at the same version"
    );
    // Past the first list's TTL, within the second's.
    tokio::time::sleep(ttl * 2 / 3).await;
    let token = second["metadata"]["continue"].as_str().unwrap();
    let r = get(sb.addr(), &format!("{path}&continue={token}")).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn expired_continue_gets_410_expired_with_a_working_fresh_token() {
    let sb = start(configmaps("default", 10, |i| format!("cm-{i}"))).await;
    sb.set_faults(Faults {
        continue_ttl: Duration::from_millis(50),
        ..Faults::default()
    });
    let r = get(sb.addr(), "/api/v1/namespaces/default/configmaps?limit=4").await;
    let first = r.json();
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    // A new object after the already-listed ones appears in the fresh (latest-state) list.
    sb.store()
        .create(configmap("default", "cm-99", json!({})))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let r = get(
        sb.addr(),
        &format!("/api/v1/namespaces/default/configmaps?limit=4&continue={token}"),
    )
    .await;
    r.assert_status(410, "Expired");
    let fresh = r.json()["metadata"]["continue"]
        .as_str()
        .expect("fresh token")
        .to_string();
    assert_ne!(fresh, token);
    sb.set_faults(Faults::default());
    let mut names: Vec<String> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let api: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
    let mut lp = ListParams::default().limit(4).continue_token(&fresh);
    loop {
        let page = api.list(&lp).await.expect("fresh token works");
        names.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    let mut expected: Vec<String> = (0..10).map(|i| format!("cm-{i}")).collect();
    expected.push("cm-99".into());
    assert_eq!(
        names, expected,
        "resumes after the last key, nothing skipped or repeated"
    );
    // continue together with a resourceVersion is a 400.
    let r = get(
        sb.addr(),
        &format!("/api/v1/configmaps?continue={fresh}&resourceVersion=5"),
    )
    .await;
    r.assert_status(400, "BadRequest");
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let objects = vec![
        configmap("default", "a", json!({"app": "web", "tier": "front"})),
        configmap("default", "b", json!({"app": "db"})),
        configmap("kube-system", "c", json!({"app": "web"})),
        configmap("kube-system", "d", json!({})),
    ];
    let sb = start(objects).await;
    let api: Api<ConfigMap> = Api::all(client(&sb));
    let names = |lp: ListParams| {
        let api = api.clone();
        async move {
            let list = api.list(&lp).await.unwrap();
            assert!(list.metadata.remaining_item_count.is_none());
            list.items
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        names(ListParams::default().labels("app=web")).await,
        ["a", "c"]
    );
    assert_eq!(
        names(ListParams::default().labels("app!=web")).await,
        ["b", "d"]
    );
    assert_eq!(
        names(ListParams::default().labels("app in (db,web),tier")).await,
        ["a"]
    );
    assert_eq!(
        names(ListParams::default().labels("app notin (web)")).await,
        ["b", "d"]
    );
    assert_eq!(names(ListParams::default().labels("!app")).await, ["d"]);
    assert_eq!(
        names(ListParams::default().labels("app")).await,
        ["a", "b", "c"]
    );
    assert_eq!(
        names(ListParams::default().fields("metadata.namespace=kube-system")).await,
        ["c", "d"]
    );
    assert_eq!(
        names(ListParams::default().fields("metadata.name!=a,metadata.namespace==default")).await,
        ["b"]
    );
    // With a selector and a limit, pages still work (no remainingItemCount).
    let page = api
        .list(&ListParams::default().labels("app").limit(2))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    assert!(page.metadata.continue_.is_some());
    assert!(page.metadata.remaining_item_count.is_none());
    let r = get(sb.addr(), "/api/v1/pods?labelSelector=app%20in%20(").await;
    r.assert_status(400, "BadRequest");
    sb.shutdown().await.unwrap();
}
