//! The watch-cut fault: watches end early, cleanly or with a reset, and kube-rs
//! watchers resume from their last resourceVersion without losing an event.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use leash_sandbox::{Faults, WatchCut};
use serde_json::json;

use crate::common::{client, configmap, eventually, get, start};

#[tokio::test]
async fn a_clean_cut_ends_the_chunked_response_after_whole_events() {
    let sb = start(vec![]).await;
    let rv = sb.store().resource_version();
    for i in 0..20 {
        sb.store()
            .create(configmap("default", &format!("c{i}"), json!({})))
            .unwrap();
    }
    sb.set_faults(Faults {
        watch_cut_rate: 0.25,
        ..Faults::default()
    });
    let r = get(
        sb.addr(),
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(!r.truncated, "a clean cut ends with the terminating chunk");
    let text = String::from_utf8(r.body).unwrap();
    let names: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("whole events only");
            v["object"]["metadata"]["name"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        !names.is_empty() && names.len() < 20,
        "cut after some events: {names:?}"
    );
    let want: Vec<String> = (0..names.len()).map(|i| format!("c{i}")).collect();
    assert_eq!(names, want, "in order, from the start version");
    assert_eq!(sb.watches_cut(), 1);
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_reset_cut_breaks_the_connection_and_a_time_cut_ends_an_idle_watch() {
    let sb = start(vec![]).await;
    let rv = sb.store().resource_version();
    sb.store()
        .create(configmap("default", "one", json!({})))
        .unwrap();
    sb.set_faults(Faults {
        watch_cut_rate: 1.0,
        watch_cut: WatchCut::Reset,
        ..Faults::default()
    });
    let target = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}");
    let r = get(sb.addr(), &target).await;
    assert_eq!(r.status, 200);
    assert!(r.truncated, "no terminating chunk after a reset");
    assert_eq!(String::from_utf8_lossy(&r.body).lines().count(), 1);

    // An idle watch (nothing after its start version) ends at the drawn time.
    sb.set_faults(Faults {
        watch_cut_after: Some(Duration::from_millis(300)),
        ..Faults::default()
    });
    let now = sb.store().resource_version();
    let started = std::time::Instant::now();
    let r = get(
        sb.addr(),
        &format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={now}"),
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((r.status, r.truncated), (200, false));
    assert!(r.body.is_empty());
    assert_eq!(sb.watches_cut(), 2);
    sb.shutdown().await.unwrap();
}

/// Under frequent cuts (time and per event, clean and then abrupt), a kube-rs watcher
/// sees every write, and after its first list it never lists again (clean ends
/// resume from the last resourceVersion).
#[tokio::test]
async fn kube_watcher_resumes_after_cuts_without_losing_events() {
    for mode in [WatchCut::Clean, WatchCut::Reset] {
        let sb = start(vec![]).await;
        sb.set_faults(Faults {
            watch_cut_after: Some(Duration::from_millis(150)),
            watch_cut_rate: 0.1,
            watch_cut: mode,
            ..Faults::default()
        });
        let api: Api<ConfigMap> = Api::namespaced(client(&sb), "default");
        let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let inits = Arc::new(Mutex::new(0usize));
        let (seen_in, inits_in) = (seen.clone(), inits.clone());
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .try_for_each(move |event| {
                let (seen, inits) = (seen_in.clone(), inits_in.clone());
                async move {
                    match event {
                        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                            seen.lock().unwrap().insert(o.metadata.name.unwrap());
                        }
                        watcher::Event::Init => *inits.lock().unwrap() += 1,
                        _ => {}
                    }
                    Ok(())
                }
            });
        let store = sb.store().clone();
        let test = async {
            eventually("the first list", || *inits.lock().unwrap() == 1).await;
            let mut written = BTreeSet::new();
            for i in 0..120 {
                let name = format!("cm-{i:03}");
                store
                    .create(configmap("default", &name, json!({})))
                    .unwrap();
                written.insert(name);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            eventually("every write seen", || *seen.lock().unwrap() == written).await;
        };
        tokio::select! {
            r = stream => panic!("{mode:?}: the watcher stream ended: {r:?}"),
            () = test => {}
        }
        let cuts = sb.watches_cut();
        assert!(
            cuts >= 3,
            "{mode:?}: only {cuts} cuts: the test proves nothing"
        );
        if mode == WatchCut::Clean {
            assert_eq!(
                *inits.lock().unwrap(),
                1,
                "clean cuts resume the watch; they never relist"
            );
        }
        sb.shutdown().await.unwrap();
    }
}
