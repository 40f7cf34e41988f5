//! Bad input gets the right metav1 Status and never hurts the server: a table of
//! known cases, then a property test over random queries, paths and bodies.

use std::net::SocketAddr;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::common::{Raw, configmap, get, raw, start};

/// method, target, headers, body, expected code, expected reason.
type Case = (
    &'static str,
    String,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    u16,
    &'static str,
);

/// A request with no headers and no body.
fn bare(method: &'static str, target: impl Into<String>, code: u16, reason: &'static str) -> Case {
    (method, target.into(), vec![], vec![], code, reason)
}

/// A request with an `application/json` body.
fn json_body(
    method: &'static str,
    target: impl Into<String>,
    body: impl AsRef<[u8]>,
    code: u16,
    reason: &'static str,
) -> Case {
    with_body(method, target, "application/json", body, code, reason)
}

/// A request with a body of type `content_type`.
fn with_body(
    method: &'static str,
    target: impl Into<String>,
    content_type: &'static str,
    body: impl AsRef<[u8]>,
    code: u16,
    reason: &'static str,
) -> Case {
    (
        method,
        target.into(),
        vec![("Content-Type", content_type)],
        body.as_ref().to_vec(),
        code,
        reason,
    )
}

/// The server still answers a list.
async fn alive(addr: SocketAddr) -> usize {
    let r = get(addr, "/api/v1/namespaces").await;
    assert_eq!(r.status, 200, "server still serves");
    r.json()["items"].as_array().unwrap().len()
}

#[tokio::test]
async fn bad_requests_get_the_right_status_and_the_server_keeps_serving() {
    let sb = start(vec![configmap("default", "exists", json!({}))]).await;
    let a = sb.addr();
    let cms = "/api/v1/namespaces/default/configmaps";
    let json_ct = [("Content-Type", "application/json")];
    // method, target, [content type,] body, expected code and reason
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        json_body("POST", cms, b"{not json", 400, "BadRequest"),
        json_body("POST", cms, b"[1,2]", 400, "BadRequest"),
        json_body("POST", cms, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}).to_string(), 400, "BadRequest"),
        json_body("POST", cms, json!({"metadata": {"name": "Bad_Name"}}).to_string(), 422, "Invalid"),
        json_body("POST", cms, json!({"metadata": {}}).to_string(), 422, "Invalid"),
        json_body("POST", cms, json!({"metadata": {"name": "x", "labels": {"a": 1}}}).to_string(), 400, "BadRequest"),
        json_body("POST", cms, json!({"metadata": {"name": "exists"}}).to_string(), 409, "AlreadyExists"),
        with_body("POST", cms, "application/vnd.kubernetes.protobuf", b"k8s\0", 415, "UnsupportedMediaType"),
        bare("GET", format!("{cms}?labelSelector=a%20in%20(b"), 400, "BadRequest"),
        bare("GET", format!("{cms}?labelSelector=%3D%3D"), 400, "BadRequest"),
        bare("GET", format!("{cms}?fieldSelector=spec.nope%3Dx"), 400, "BadRequest"),
        bare("GET", format!("{cms}?limit=abc"), 400, "BadRequest"),
        bare("GET", format!("{cms}?continue=%21%21notbase64"), 400, "BadRequest"),
        bare("GET", format!("{cms}?watch=1&timeoutSeconds=-1"), 400, "BadRequest"),
        bare("GET", format!("{cms}?resourceVersion=abc"), 400, "BadRequest"),
        json_body("POST", format!("{cms}?dryRun=Some"), b"{}", 400, "BadRequest"),
        bare("GET", format!("{cms}/missing"), 404, "NotFound"),
        bare("GET", "/api/v1/widgets", 404, "NotFound"),
        bare("GET", "/apis/nope.example/v1/things", 404, "NotFound"),
        bare("GET", "/apis/nope.example/v1", 404, "NotFound"),
        bare("GET", "/nonsense", 404, "NotFound"),
        bare("GET", "/api/v1/namespaces/default/nodes", 404, "NotFound"),
        bare("GET", "/api/v1/pods/cluster-path-with-name", 404, "NotFound"),
        bare("GET", format!("{cms}/exists/scale"), 404, "NotFound"),
        json_body("PUT", cms, b"{}", 405, "MethodNotAllowed"),
        json_body("POST", format!("{cms}/exists"), b"{}", 405, "MethodNotAllowed"),
        json_body("POST", "/api/v1/configmaps", b"{}", 405, "MethodNotAllowed"),
        bare("DELETE", "/version", 405, "MethodNotAllowed"),
        bare("OPTIONS", cms, 405, "MethodNotAllowed"),
        json_body("PUT", format!("{cms}/exists"), json!({"metadata": {"name": "other"}}).to_string(), 400, "BadRequest"),
        json_body("PUT", format!("{cms}/missing"), json!({"metadata": {"name": "missing"}}).to_string(), 404, "NotFound"),
        with_body("PATCH", format!("{cms}/exists"), "text/plain", b"x", 415, "UnsupportedMediaType"),
        with_body("PATCH", format!("{cms}/exists"), "application/merge-patch+json", b"[]", 400, "BadRequest"),
        with_body("PATCH", format!("{cms}/exists"), "application/json-patch+json", br#"[{"op":"replace","path":"/nope","value":1}]"#, 422, "Invalid"),
        json_body("DELETE", format!("{cms}/exists"), json!({"preconditions": {"uid": "other"}}).to_string(), 409, "Conflict"),
    ];
    for (method, path, headers, body, code, reason) in cases {
        let r = raw(a, method, &path, &headers, &body).await;
        assert_eq!(
            r.status,
            code,
            "{method} {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        r.assert_status(code, reason);
    }
    // Oversized bodies: with a declared length, and chunked without one.
    let big = vec![b' '; 3 * 1024 * 1024 + 1];
    let r = raw(a, "POST", cms, &json_ct, &big).await;
    r.assert_status(413, "RequestEntityTooLarge");
    let mut chunked = Vec::new();
    for chunk in big.chunks(256 * 1024) {
        chunked.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        chunked.extend_from_slice(chunk);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let r = raw(
        a,
        "POST",
        cms,
        &[
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
        &chunked,
    )
    .await;
    r.assert_status(413, "RequestEntityTooLarge");
    // A body just under the limit is read and parsed (here: rejected as malformed, not too large).
    let r = raw(a, "POST", cms, &json_ct, &big[..3 * 1024 * 1024 - 1]).await;
    r.assert_status(400, "BadRequest");
    // Garbage that is not HTTP at all does not hurt.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
        s.write_all(b"\x00\x01garbage\r\n\r\n").await.unwrap();
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(crate::common::BOUND, s.read_to_end(&mut buf))
            .await
            .expect("closed, not hung");
    }
    assert_eq!(alive(a).await, 4);
    assert_eq!(
        sb.store().object_count(),
        5,
        "nothing was written by bad requests"
    );
    sb.shutdown().await.unwrap();
}

/// A response is a success with a JSON object body, or a Status whose code is the HTTP status.
fn well_formed(r: &Raw) -> Result<(), String> {
    let v: Value =
        serde_json::from_slice(&r.body).map_err(|e| format!("{} body not JSON: {e}", r.status))?;
    if (200..300).contains(&r.status) {
        return if v.is_object() {
            Ok(())
        } else {
            Err(format!("success body not an object: {v}"))
        };
    }
    if v["kind"] == "Status"
        && v["code"] == r.status
        && v["status"] == "Failure"
        && v["reason"].is_string()
    {
        Ok(())
    } else {
        Err(format!("{}: not a Status: {v}", r.status))
    }
}

fn query_strategy() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        Just("labelSelector".to_string()),
        Just("fieldSelector".to_string()),
        Just("limit".to_string()),
        Just("continue".to_string()),
        Just("resourceVersion".to_string()),
        Just("resourceVersionMatch".to_string()),
        Just("dryRun".to_string()),
        Just("fieldManager".to_string()),
        Just("pretty".to_string()),
        Just("sendInitialEvents".to_string()),
        "[a-zA-Z%]{0,6}",
    ];
    let value = "[-a-zA-Z0-9._~%!$'()*+,;=:@/ ]{0,24}".prop_map(|v| v.replace(' ', "%20"));
    proptest::collection::vec((key, value), 0..5).prop_map(|pairs| {
        pairs
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&")
    })
}

fn body_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        Just(b"{}".to_vec()),
        "[a-z]{1,8}".prop_map(|name| json!({"metadata": {"name": name}, "data": {"k": "v"}}).to_string().into_bytes()),
        "[a-z]{1,8}".prop_map(|name| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"x": name}}}).to_string().into_bytes()),
        Just(br#"[{"op":"add","path":"/data/x","value":"y"}]"#.to_vec()),
        Just(b"null".to_vec()),
    ]
}

#[test]
fn random_queries_paths_and_bodies_get_well_formed_answers() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let sb = rt.block_on(start(vec![configmap("default", "exists", json!({}))]));
    let addr = sb.addr();
    let paths = prop_oneof![
        Just("/api/v1/namespaces/default/configmaps"),
        Just("/api/v1/namespaces/default/configmaps/exists"),
        Just("/api/v1/configmaps"),
        Just("/api/v1/namespaces"),
        Just("/api/v1/namespaces/default"),
        Just("/apis/apps/v1/namespaces/default/deployments"),
        Just("/api/v1/namespaces/default/pods/exists/status"),
        Just("/api/v1/nothing"),
    ];
    let methods = prop_oneof![
        Just("GET"),
        Just("POST"),
        Just("PUT"),
        Just("PATCH"),
        Just("DELETE")
    ];
    let content_types = prop_oneof![
        Just("application/json"),
        Just("application/merge-patch+json"),
        Just("application/json-patch+json"),
        Just("application/strategic-merge-patch+json"),
        Just("application/apply-patch+yaml"),
        Just("application/yaml"),
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    });
    runner
        .run(
            &(
                methods,
                paths,
                query_strategy(),
                content_types,
                body_strategy(),
            ),
            |(m, p, q, ct, body)| {
                // Never leave a watch open: a trailing timeout wins over anything in `q`.
                let target = format!("{p}?{q}&timeoutSeconds=1");
                let r = rt.block_on(raw(addr, m, &target, &[("Content-Type", ct)], &body));
                if target.contains("watch") {
                    return Ok(());
                }
                well_formed(&r).map_err(|e| TestCaseError::fail(format!("{m} {target}: {e}")))?;
                Ok(())
            },
        )
        .unwrap();
    rt.block_on(async {
        alive(addr).await;
        sb.shutdown().await.unwrap();
    });
}
