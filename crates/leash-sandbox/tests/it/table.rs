//! `meta.k8s.io` Tables over raw HTTP: negotiation by `Accept`, paging with
//! `limit`/`continue` as lists page, `includeObject`, single objects, and
//! protobuf request bodies answered in JSON.

use std::net::SocketAddr;

use serde_json::Value;

use crate::common::{Raw, configmaps, raw, start};

const TABLE_V1: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

async fn get_as(addr: SocketAddr, target: &str, accept: &str) -> Raw {
    raw(addr, "GET", target, &[("Accept", accept)], b"").await
}

#[tokio::test]
async fn tables_page_with_limit_and_continue_like_lists() {
    let sb = start(configmaps("default", 5, |i| format!("cm-{i}"))).await;
    let addr = sb.addr();
    let mut target = "/api/v1/namespaces/default/configmaps?limit=2".to_string();
    let (mut names, mut versions, mut remaining) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let r = get_as(addr, &target, TABLE_V1).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let t = r.json();
        assert_eq!(
            (t["kind"].as_str(), t["apiVersion"].as_str()),
            (Some("Table"), Some("meta.k8s.io/v1"))
        );
        let header: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(header, ["Name", "Data", "Age"]);
        for row in t["rows"].as_array().unwrap() {
            names.push(row["cells"][0].as_str().unwrap().to_string());
            assert_eq!(row["cells"][1], 1, "one data key");
            // The default includeObject=Metadata: the row's object is its metadata.
            assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
            assert_eq!(row["object"]["metadata"]["name"], row["cells"][0]);
            assert!(row["object"].get("data").is_none());
        }
        versions.push(t["metadata"]["resourceVersion"].clone());
        remaining.push(t["metadata"]["remainingItemCount"].as_u64());
        match t["metadata"]["continue"].as_str() {
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
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn accept_and_include_object_choose_what_is_served() {
    let sb = start(configmaps("default", 1, |_| "one".to_string())).await;
    let addr = sb.addr();
    let list = "/api/v1/namespaces/default/configmaps";
    // Plain JSON first, or no Accept: a plain list.
    for accept in [
        "application/json",
        "application/json,application/json;as=Table;v=v1;g=meta.k8s.io",
        "*/*",
    ] {
        assert_eq!(
            get_as(addr, list, accept).await.json()["kind"],
            "ConfigMapList",
            "{accept}"
        );
    }
    // A Table form this server does not serve is passed over for the next.
    let protobuf_first = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io";
    let t = get_as(addr, list, protobuf_first).await.json();
    assert_eq!(
        (t["kind"].as_str(), t["apiVersion"].as_str()),
        (Some("Table"), Some("meta.k8s.io/v1beta1"))
    );
    // includeObject: None, Object, or an error.
    let rows = |t: &Value| t["rows"].as_array().unwrap().clone();
    let none = get_as(addr, &format!("{list}?includeObject=None"), TABLE_V1)
        .await
        .json();
    assert!(rows(&none)[0].get("object").is_none());
    let whole = get_as(addr, &format!("{list}?includeObject=Object"), TABLE_V1)
        .await
        .json();
    assert_eq!(rows(&whole)[0]["object"]["kind"], "ConfigMap");
    assert_eq!(rows(&whole)[0]["object"]["data"]["k"], "v");
    get_as(addr, &format!("{list}?includeObject=Everything"), TABLE_V1)
        .await
        .assert_status(400, "BadRequest");
    // One object: a Table of one row at its version.
    let one = get_as(addr, &format!("{list}/one"), TABLE_V1).await.json();
    assert_eq!(rows(&one).len(), 1);
    assert_eq!(rows(&one)[0]["cells"][0], "one");
    assert!(
        one["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
    );
    sb.shutdown().await.unwrap();
}
