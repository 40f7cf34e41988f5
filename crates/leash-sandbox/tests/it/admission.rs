//! The admission chain over HTTP: webhooks of stored configurations called over
//! HTTPS (a test webhook server on 127.0.0.1), answers as kube-apiserver's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::common::{BOUND, Raw, eventually, raw, start};
use crate::webhook_server::{
    Answer, WebhookServer, ca_bundle_of, certificate, configuration, hook, pod,
};

const PODS: &str = "/api/v1/namespaces/default/pods";
const VWC: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MWC: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

async fn send(sb: &Sandbox, method: &str, path: &str, ct: &str, body: &Value) -> Raw {
    raw(
        sb.addr(),
        method,
        path,
        &[("Content-Type", ct), ("Accept", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

async fn post(sb: &Sandbox, path: &str, body: &Value) -> Raw {
    send(sb, "POST", path, "application/json", body).await
}

/// Stores a configuration through the API (it is not sent to any webhook).
async fn configure(sb: &Sandbox, kind: &str, name: &str, hooks: Vec<Value>) {
    let path = if kind.starts_with("Validating") {
        VWC
    } else {
        MWC
    };
    let r = post(sb, path, &configuration(kind, name, hooks)).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

async fn unconfigure(sb: &Sandbox, name: &str) {
    let r = raw(sb.addr(), "DELETE", &format!("{VWC}/{name}"), &[], b"").await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

/// Denies pods labelled `deny=yes` with 403, allows everything else.
fn deny_labelled(request: &Value) -> Answer {
    let obj = if request["operation"] == "DELETE" {
        &request["oldObject"]
    } else {
        &request["object"]
    };
    if obj.pointer("/metadata/labels/deny") == Some(&json!("yes")) {
        Answer::deny(403, "pods labelled deny=yes are not allowed")
    } else {
        Answer::allow()
    }
}

fn stored_pod(sb: &Sandbox, name: &str) -> Option<Value> {
    sb.store().get("v1", "Pod", Some("default"), name).ok()
}

fn assert_failure(r: &Raw, code: u16, message: &str) -> Value {
    assert_eq!(r.status, code, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["kind"], "Status", "{v}");
    assert_eq!(v["status"], "Failure", "{v}");
    assert_eq!(v["code"], code, "{v}");
    assert_eq!(v["message"], message, "{v}");
    v
}

#[tokio::test]
async fn validating_webhook_denies_with_the_status_kube_apiserver_sends() {
    let server = WebhookServer::start(deny_labelled).await;
    let sb = start(vec![]).await;
    let h = hook(
        "deny.leash.dev",
        &server.url("/validate"),
        &server.ca_bundle,
    );
    configure(&sb, "ValidatingWebhookConfiguration", "deny", vec![h]).await;
    // The configuration itself never reaches a webhook.
    assert!(server.requests().is_empty());

    let r = post(&sb, PODS, &pod("bad", json!({"deny": "yes"}))).await;
    let status = assert_failure(
        &r,
        403,
        "admission webhook \"deny.leash.dev\" denied the request: pods labelled deny=yes are not allowed",
    );
    // No reason from the webhook, none in the Status: kubectl prints "Error from server: ...".
    assert!(status.get("reason").is_none(), "{status}");
    assert!(
        stored_pod(&sb, "bad").is_none(),
        "a denied pod is not stored"
    );

    let r = post(&sb, PODS, &pod("good", json!({"app": "x"}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let stored = stored_pod(&sb, "good").expect("an allowed pod is stored");

    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let req = &requests[1];
    assert_eq!(req["_path"], "/validate?timeout=5s");
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(
        req["kind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(req["requestKind"], req["kind"]);
    assert_eq!(
        (req["name"].as_str(), req["namespace"].as_str()),
        (Some("good"), Some("default"))
    );
    assert_eq!(req["userInfo"]["username"], "system:admin");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    assert!(req["oldObject"].is_null());
    // The object as stored: its uid and creation time are the stored ones.
    assert_eq!(req["object"]["metadata"]["uid"], stored["metadata"]["uid"]);
    assert_eq!(
        req["object"]["metadata"]["creationTimestamp"],
        stored["metadata"]["creationTimestamp"]
    );
    assert_ne!(
        requests[0]["uid"], requests[1]["uid"],
        "a fresh uid per request"
    );

    // generateName: the webhook sees the generated name, which is the one stored.
    let mut gen_pod = pod("", json!({}));
    gen_pod["metadata"] = json!({"generateName": "gen-", "namespace": "default"});
    let r = post(&sb, PODS, &gen_pod).await;
    assert_eq!(r.status, 201);
    let name = r.json()["metadata"]["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("gen-") && name.len() > 4);
    assert_eq!(server.requests()[2]["name"], name.as_str());
    assert_eq!(
        server.requests()[2]["object"]["metadata"]["name"],
        name.as_str()
    );
    sb.shutdown().await.unwrap();
}

/// Validating webhooks are called concurrently, as kube-apiserver calls
/// them: each of two webhooks answers only once both have been called (it
/// gives up after 3 s and denies), so called one after the other the first
/// would deny; called together, both allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn validating_webhooks_are_called_concurrently() {
    let arrived = Arc::new((std::sync::Mutex::new(0_usize), std::sync::Condvar::new()));
    let rendezvous = |arrived: Arc<(std::sync::Mutex<usize>, std::sync::Condvar)>| {
        move |_: &Value| {
            let (count, both) = &*arrived;
            let mut n = count.lock().unwrap();
            *n += 1;
            both.notify_all();
            let (n, waited) = both
                .wait_timeout_while(n, Duration::from_secs(3), |n| *n < 2)
                .unwrap();
            if waited.timed_out() {
                Answer::deny(403, &format!("called alone ({} of 2 webhooks called)", *n))
            } else {
                Answer::allow()
            }
        }
    };
    let a = WebhookServer::start(rendezvous(arrived.clone())).await;
    let b = WebhookServer::start(rendezvous(arrived.clone())).await;
    let sb = start(vec![]).await;
    let hooks = vec![
        hook("a.leash.dev", &a.url("/"), &a.ca_bundle),
        hook("b.leash.dev", &b.url("/"), &b.ca_bundle),
    ];
    configure(&sb, "ValidatingWebhookConfiguration", "both", hooks).await;
    let r = post(&sb, PODS, &pod("together", json!({}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!((a.requests().len(), b.requests().len()), (1, 1));
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn warnings_reach_the_client_as_warning_headers() {
    let server = WebhookServer::start(|_| Answer::Review {
        response: json!({"allowed": true, "warnings": ["image nginx has no tag", "say \"hi\""]}),
        delay: Duration::ZERO,
    })
    .await;
    let sb = start(vec![]).await;
    let h = hook("warn.leash.dev", &server.url("/"), &server.ca_bundle);
    configure(&sb, "ValidatingWebhookConfiguration", "warn", vec![h]).await;
    let r = post(&sb, PODS, &pod("p", json!({}))).await;
    assert_eq!(r.status, 201);
    let warnings: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("warning"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        warnings,
        ["299 - \"image nginx has no tag\"", r#"299 - "say \"hi\"""#]
    );
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn mutating_patches_apply_in_order_before_validation_and_storage() {
    let first = WebhookServer::start(|_| {
        Answer::patch(json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "first"}]))
    })
    .await;
    let second = WebhookServer::start(|req| {
        // Sees the first webhook's change.
        let seen = req["object"]["metadata"]["labels"]["mutated"].clone();
        Answer::patch(
            json!([{"op": "add", "path": "/metadata/annotations", "value": {"seen": seen}}]),
        )
    })
    .await;
    let validator = WebhookServer::start(|_| Answer::allow()).await;
    let sb = start(vec![]).await;
    // Configurations run by name: "a-first" before "b-second".
    configure(
        &sb,
        "MutatingWebhookConfiguration",
        "b-second",
        vec![hook(
            "second.leash.dev",
            &second.url("/"),
            &second.ca_bundle,
        )],
    )
    .await;
    configure(
        &sb,
        "MutatingWebhookConfiguration",
        "a-first",
        vec![hook("first.leash.dev", &first.url("/"), &first.ca_bundle)],
    )
    .await;
    configure(
        &sb,
        "ValidatingWebhookConfiguration",
        "check",
        vec![hook(
            "check.leash.dev",
            &validator.url("/"),
            &validator.ca_bundle,
        )],
    )
    .await;
    let r = post(&sb, PODS, &pod("m", json!({"app": "x"}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let answered = r.json();
    assert_eq!(answered["metadata"]["labels"]["mutated"], "first");
    let stored = stored_pod(&sb, "m").unwrap();
    assert_eq!(
        stored["metadata"]["labels"],
        json!({"app": "x", "mutated": "first"})
    );
    assert_eq!(stored["metadata"]["annotations"], json!({"seen": "first"}));
    let validated = &validator.requests()[0]["object"];
    assert_eq!(validated["metadata"]["labels"]["mutated"], "first");
    assert_eq!(validated["metadata"]["annotations"]["seen"], "first");

    // A patch that does not apply is an internal error, whatever the failure policy.
    let sb2 = start(vec![]).await;
    let broken = WebhookServer::start(|_| {
        Answer::patch(json!([{"op": "replace", "path": "/spec/nothing/here", "value": 1}]))
    })
    .await;
    let mut h = hook("broken.leash.dev", &broken.url("/"), &broken.ca_bundle);
    h["failurePolicy"] = json!("Ignore");
    configure(&sb2, "MutatingWebhookConfiguration", "broken", vec![h]).await;
    let r = post(&sb2, PODS, &pod("m", json!({}))).await;
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    assert!(stored_pod(&sb2, "m").is_none());
    sb.shutdown().await.unwrap();
    sb2.shutdown().await.unwrap();
}

/// kube-apiserver's `reinvocationPolicy: IfNeeded`: a webhook is called once
/// more when a later webhook changed the object after its call; not when
/// only its own patch changed it, not a third time, and never a webhook
/// without the policy.
#[tokio::test]
async fn if_needed_webhooks_are_reinvoked_once_when_a_later_one_changes_the_object() {
    // "a" copies label `later` (when set) into annotation `seen-later`.
    let a =
        WebhookServer::start(
            |req| match req["object"]["metadata"]["labels"]["later"].as_str() {
                Some(v) => Answer::patch(json!([{"op": "add", "path": "/metadata/annotations",
                "value": {"seen-later": v}}])),
                None => Answer::allow(),
            },
        )
        .await;
    // "b" sets label `later`.
    let b = WebhookServer::start(|_| {
        Answer::patch(json!([{"op": "add", "path": "/metadata/labels/later", "value": "b"}]))
    })
    .await;
    // "c" (IfNeeded) changes nothing itself; no webhook after it changes
    // anything: it is not called again.
    let c = WebhookServer::start(|_| Answer::allow()).await;
    let sb = start(vec![]).await;
    let with_policy = |name: &str, server: &WebhookServer, policy: &str| {
        let mut h = hook(name, &server.url("/"), &server.ca_bundle);
        h["reinvocationPolicy"] = json!(policy);
        h
    };
    configure(
        &sb,
        "MutatingWebhookConfiguration",
        "chain",
        vec![
            with_policy("a.leash.dev", &a, "IfNeeded"),
            with_policy("b.leash.dev", &b, "IfNeeded"),
            with_policy("c.leash.dev", &c, "IfNeeded"),
        ],
    )
    .await;
    let r = post(&sb, PODS, &pod("r", json!({"app": "x"}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let stored = stored_pod(&sb, "r").unwrap();
    assert_eq!(stored["metadata"]["labels"]["later"], "b");
    assert_eq!(
        stored["metadata"]["annotations"]["seen-later"], "b",
        "a was reinvoked and saw b's change: {stored}"
    );
    assert_eq!(a.requests().len(), 2, "a: once, then reinvoked");
    assert_eq!(b.requests().len(), 1, "b's own change does not reinvoke it");
    assert_eq!(c.requests().len(), 1, "nothing changed after c");

    // Without the policy (Never, the default) there is no second call.
    let sb2 = start(vec![]).await;
    let a2 = WebhookServer::start(|_| Answer::allow()).await;
    configure(
        &sb2,
        "MutatingWebhookConfiguration",
        "chain",
        vec![
            hook("a.leash.dev", &a2.url("/"), &a2.ca_bundle),
            with_policy("b.leash.dev", &b, "IfNeeded"),
        ],
    )
    .await;
    let r = post(&sb2, PODS, &pod("r", json!({}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(a2.requests().len(), 1);
    sb.shutdown().await.unwrap();
    sb2.shutdown().await.unwrap();
}

/// A URL where nothing listens: a port on 127.0.0.1 bound by the returned
/// socket, which never listens (connecting is refused). Held, not released:
/// a released port can be taken by another test's server meanwhile (the
/// call then fails in the TLS handshake instead).
fn closed_url() -> (tokio::net::TcpSocket, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, format!("https://{addr}/"))
}

#[tokio::test]
async fn a_webhook_that_is_down_denies_under_fail_and_admits_under_ignore() {
    let (pem, _, _) = certificate();
    let (_held, url) = closed_url();
    let sb = start(vec![]).await;
    let h = hook("down.leash.dev", &url, &ca_bundle_of(&pem));
    configure(
        &sb,
        "ValidatingWebhookConfiguration",
        "down",
        vec![h.clone()],
    )
    .await;
    let r = post(&sb, PODS, &pod("p", json!({}))).await;
    assert_eq!(r.status, 500, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["reason"], "InternalError");
    let message = v["message"].as_str().unwrap();
    let expected = format!(
        "Internal error occurred: failed calling webhook \"down.leash.dev\": failed to call webhook: Post \"{url}?timeout=5s\": dial tcp {}: connect: ",
        url.trim_start_matches("https://").trim_end_matches('/')
    );
    assert!(
        message.starts_with(&expected),
        "{message}\nexpected prefix: {expected}"
    );
    assert_eq!(
        v["details"]["causes"][0]["message"].as_str().unwrap(),
        message.trim_start_matches("Internal error occurred: ")
    );
    assert!(stored_pod(&sb, "p").is_none());

    unconfigure(&sb, "down").await;
    let mut ignore = h;
    ignore["failurePolicy"] = json!("Ignore");
    configure(&sb, "ValidatingWebhookConfiguration", "down", vec![ignore]).await;
    let r = post(&sb, PODS, &pod("p", json!({}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    sb.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_webhook_times_out_and_never_blocks_other_requests() {
    let server = WebhookServer::start(|_| Answer::allow().after(Duration::from_secs(4))).await;
    let sb = start(vec![]).await;
    let mut h = hook("slow.leash.dev", &server.url("/"), &server.ca_bundle);
    h["timeoutSeconds"] = json!(1);
    configure(&sb, "ValidatingWebhookConfiguration", "slow", vec![h]).await;

    let pod_done = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let slow_create = {
        let pod_done = pod_done.clone();
        let sb = &sb;
        async move {
            let r = post(sb, PODS, &pod("slow", json!({}))).await;
            // SeqCst: read by the other future of this join after its own requests.
            pod_done.store(true, Ordering::SeqCst);
            (r, started.elapsed())
        }
    };
    let others = async {
        eventually("the webhook got the pod", || server.requests().len() == 1).await;
        let t = Instant::now();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}});
        let r = post(&sb, "/api/v1/namespaces/default/configmaps", &cm).await;
        assert_eq!(r.status, 201);
        let r = raw(sb.addr(), "GET", PODS, &[], b"").await;
        assert_eq!(r.status, 200);
        (t.elapsed(), pod_done.load(Ordering::SeqCst))
    };
    let ((r, pod_elapsed), (others_elapsed, pod_done_then)) = tokio::join!(slow_create, others);
    assert!(
        !pod_done_then,
        "the configmap create finished while the pod create waited"
    );
    assert!(
        others_elapsed < Duration::from_millis(900),
        "{others_elapsed:?}"
    );
    let v = r.json();
    assert_eq!(r.status, 500, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.ends_with(&format!(
            "failed calling webhook \"slow.leash.dev\": failed to call webhook: Post \"{}\": context deadline exceeded",
            server.url("/?timeout=1s")
        )),
        "{message}"
    );
    assert!(
        pod_elapsed >= Duration::from_millis(950) && pod_elapsed < Duration::from_secs(3),
        "bounded by timeoutSeconds: {pod_elapsed:?}"
    );
    assert!(tokio::time::timeout(BOUND, sb.shutdown()).await.is_ok());
}

#[tokio::test]
async fn tls_is_verified_against_the_ca_bundle_and_bad_configurations_say_why() {
    let server = WebhookServer::start(|_| Answer::allow()).await;
    let garbage = WebhookServer::start(|_| Answer::Garbage).await;
    let (other_pem, _, _) = certificate();
    let cases = [
        // Another certificate (rcgen's self-signed ones share their issuer name, so
        // rustls reports the signature): the handshake fails, nothing reaches the server.
        (
            hook("tls.leash.dev", &server.url("/"), &ca_bundle_of(&other_pem)),
            "failed calling webhook \"tls.leash.dev\": failed to call webhook: Post",
            "invalid peer certificate: BadSignature",
        ),
        (
            hook("b64.leash.dev", &server.url("/"), "not base64!"),
            "failed calling webhook \"b64.leash.dev\": could not get REST client: clientConfig.caBundle is not valid base64",
            "",
        ),
        (
            hook(
                "http.leash.dev",
                &format!("http://{}/", server.addr),
                &server.ca_bundle,
            ),
            "failed calling webhook \"http.leash.dev\": could not get REST client: clientConfig.url",
            "'https' is the only allowed URL scheme",
        ),
        (
            hook("garbage.leash.dev", &garbage.url("/"), &garbage.ca_bundle),
            "failed calling webhook \"garbage.leash.dev\": failed to call webhook: the response from",
            "is not JSON",
        ),
    ];
    for (h, prefix, also) in cases {
        let sb = start(vec![]).await;
        configure(&sb, "ValidatingWebhookConfiguration", "c", vec![h]).await;
        let r = post(&sb, PODS, &pod("p", json!({}))).await;
        let v = r.json();
        assert_eq!(r.status, 500, "{v}");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("Internal error occurred: {prefix}")),
            "{message}"
        );
        assert!(message.contains(also), "{message} (expected {also:?})");
        sb.shutdown().await.unwrap();
    }
    assert!(
        server.requests().is_empty(),
        "no request passed the TLS check"
    );
    assert_eq!(garbage.requests().len(), 1);
}

#[tokio::test]
async fn selectors_and_rules_that_do_not_match_skip_the_webhook() {
    let server = WebhookServer::start(|_| Answer::deny(403, "no")).await;
    let sb = start(vec![]).await;
    let base = hook("sel.leash.dev", &server.url("/"), &server.ca_bundle);
    let with = |k: &str, v: Value| {
        let mut h = base.clone();
        h[k] = v;
        h
    };
    let rules = |resources: Value, scope: &str| json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": resources, "scope": scope}]);
    // (webhook, pod labels, denied?)
    let cases = [
        (
            with("namespaceSelector", json!({"matchLabels": {"env": "prod"}})),
            json!({}),
            false,
        ),
        (
            with("objectSelector", json!({"matchLabels": {"checked": "yes"}})),
            json!({}),
            false,
        ),
        (
            with("objectSelector", json!({"matchLabels": {"checked": "yes"}})),
            json!({"checked": "yes"}),
            true,
        ),
        (
            with(
                "objectSelector",
                json!({"matchExpressions": [{"key": "checked", "operator": "NotIn", "values": ["no"]}]}),
            ),
            json!({"checked": "no"}),
            false,
        ),
        (
            with("rules", rules(json!(["configmaps"]), "*")),
            json!({}),
            false,
        ),
        (
            with("rules", rules(json!(["pods"]), "Cluster")),
            json!({}),
            false,
        ),
        (
            with("rules", rules(json!(["pods/status"]), "*")),
            json!({}),
            false,
        ),
        (
            with("rules", rules(json!(["*"]), "Namespaced")),
            json!({}),
            true,
        ),
        (with("rules", rules(json!(["*/*"]), "*")), json!({}), true),
        (
            with("rules", rules(json!(["pods/*"]), "*")),
            json!({}),
            true,
        ),
    ];
    for (i, (h, labels, denied)) in cases.into_iter().enumerate() {
        configure(
            &sb,
            "ValidatingWebhookConfiguration",
            "sel",
            vec![h.clone()],
        )
        .await;
        let name = format!("p{i}");
        let r = post(&sb, PODS, &pod(&name, labels)).await;
        let expected = if denied { 403 } else { 201 };
        assert_eq!(
            r.status,
            expected,
            "case {i}: {h}\n{}",
            String::from_utf8_lossy(&r.body)
        );
        unconfigure(&sb, "sel").await;
    }
    // The namespace's labels are what the namespaceSelector sees.
    let r = send(
        &sb,
        "PATCH",
        "/api/v1/namespaces/default",
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"env": "prod"}}}),
    )
    .await;
    assert_eq!(r.status, 200);
    let h = with("namespaceSelector", json!({"matchLabels": {"env": "prod"}}));
    configure(&sb, "ValidatingWebhookConfiguration", "sel", vec![h]).await;
    let r = post(&sb, PODS, &pod("in-prod", json!({}))).await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    sb.shutdown().await.unwrap();
}

/// `matchConditions` (CEL over `object`, `oldObject` and `request`) in
/// kube-apiserver's order: any false skips the webhook, all true calls it, an
/// error (none false) is a failed call under the failure policy. The webhook
/// denies everything, so 201 means it was not called.
#[tokio::test]
async fn match_conditions_decide_whether_the_webhook_is_called() {
    let server = WebhookServer::start(|_| Answer::deny(403, "called")).await;
    let sb = start(vec![]).await;
    let base = hook("mc.leash.dev", &server.url("/"), &server.ca_bundle);
    let with = |conditions: &[(&str, &str)], policy: &str| {
        let mut h = base.clone();
        h["failurePolicy"] = json!(policy);
        h["matchConditions"] = conditions
            .iter()
            .map(|(name, expression)| json!({"name": name, "expression": expression}))
            .collect();
        h
    };
    let not_skipped = ("not-skipped", "!object.metadata.name.startsWith('skip-')");
    let missing = ("missing", "object.metadata.nope == 'x'");
    // (webhook, pod name, status, message part)
    let cases = [
        (with(&[not_skipped], "Fail"), "skip-a", 201, ""),
        (with(&[not_skipped], "Fail"), "check-a", 403, "called"),
        (
            with(
                &[(
                    "create-in-default",
                    "request.operation == 'CREATE' && request.namespace == 'default' && request.resource.resource == 'pods' && oldObject == null",
                )],
                "Fail",
            ),
            "b",
            403,
            "called",
        ),
        (with(&[missing, not_skipped], "Fail"), "skip-c", 201, ""),
        (
            with(&[missing, not_skipped], "Fail"),
            "d",
            500,
            "failed calling webhook \"mc.leash.dev\": failed evaluating matchConditions: matchCondition \"missing\"",
        ),
        (with(&[missing], "Ignore"), "e", 201, ""),
        (
            with(&[("broken", "object.(")], "Fail"),
            "f",
            500,
            "compilation failed",
        ),
        (
            with(&[("not-bool", "'yes'")], "Fail"),
            "g",
            500,
            "must evaluate to bool",
        ),
    ];
    for (i, (h, name, status, message)) in cases.into_iter().enumerate() {
        configure(&sb, "ValidatingWebhookConfiguration", "mc", vec![h.clone()]).await;
        let r = post(&sb, PODS, &pod(name, json!({}))).await;
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, status, "case {i}: {h}\n{body}");
        if status != 201 {
            let said = r.json()["message"].as_str().unwrap_or_default().to_string();
            assert!(said.contains(message), "case {i}: {said}");
        }
        unconfigure(&sb, "mc").await;
    }
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn updates_patches_status_and_deletes_send_the_old_object() {
    let server = WebhookServer::start(deny_labelled).await;
    let sb = start(vec![pod("p", json!({"app": "x"}))]).await;
    let mut h = hook("ops.leash.dev", &server.url("/"), &server.ca_bundle);
    h["rules"][0]["operations"] = json!(["UPDATE", "DELETE"]);
    h["rules"][0]["resources"] = json!(["pods"]);
    configure(
        &sb,
        "ValidatingWebhookConfiguration",
        "ops",
        vec![h.clone()],
    )
    .await;

    // A merge patch is an UPDATE with the old and the new object.
    let r = send(
        &sb,
        "PATCH",
        &format!("{PODS}/p"),
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"deny": "yes"}}}),
    )
    .await;
    assert_failure(
        &r,
        403,
        "admission webhook \"ops.leash.dev\" denied the request: pods labelled deny=yes are not allowed",
    );
    let req = server.requests().last().cloned().unwrap();
    assert_eq!(req["operation"], "UPDATE");
    assert_eq!(req["options"]["kind"], "UpdateOptions");
    assert_eq!(req["oldObject"]["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(
        req["object"]["metadata"]["labels"],
        json!({"app": "x", "deny": "yes"})
    );
    assert_eq!(
        req["object"]["metadata"]["resourceVersion"],
        req["oldObject"]["metadata"]["resourceVersion"]
    );
    assert!(
        stored_pod(&sb, "p").unwrap()["metadata"]["labels"]
            .get("deny")
            .is_none()
    );

    // A JSON patch too; allowed, it is stored.
    let r = send(
        &sb,
        "PATCH",
        &format!("{PODS}/p"),
        "application/json-patch+json",
        &json!([{"op": "add", "path": "/metadata/labels/deny", "value": "yes"}]),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = send(
        &sb,
        "PATCH",
        &format!("{PODS}/p"),
        "application/json-patch+json",
        &json!([{"op": "add", "path": "/metadata/labels/deny", "value": "yes"}]),
    )
    .await;
    assert_eq!(r.status, 403);
    let calls = server.requests().len();

    // The status subresource is not "pods": not called.
    let status = json!({"status": {"phase": "Running"}});
    let r = send(
        &sb,
        "PATCH",
        &format!("{PODS}/p/status"),
        "application/merge-patch+json",
        &status,
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(server.requests().len(), calls);

    // Named as pods/status, it is, with subResource "status".
    unconfigure(&sb, "ops").await;
    let mut h_status = h.clone();
    h_status["rules"][0]["resources"] = json!(["pods/status"]);
    configure(&sb, "ValidatingWebhookConfiguration", "ops", vec![h_status]).await;
    let status = json!({"status": {"phase": "Succeeded"}});
    let r = send(
        &sb,
        "PATCH",
        &format!("{PODS}/p/status"),
        "application/merge-patch+json",
        &status,
    )
    .await;
    assert_eq!(r.status, 200);
    let req = server.requests().last().cloned().unwrap();
    assert_eq!(req["subResource"], "status");
    assert_eq!(req["object"]["status"]["phase"], "Succeeded");
    assert_eq!(req["oldObject"]["status"]["phase"], "Running");

    // DELETE: no object, the old one; a denial keeps the pod.
    unconfigure(&sb, "ops").await;
    configure(&sb, "ValidatingWebhookConfiguration", "ops", vec![h]).await;
    let labelled = json!({"metadata": {"labels": {"deny": "yes"}}});
    sb.store()
        .update({
            let mut p = stored_pod(&sb, "p").unwrap();
            p["metadata"]["labels"] = labelled["metadata"]["labels"].clone();
            p
        })
        .unwrap();
    let r = raw(sb.addr(), "DELETE", &format!("{PODS}/p"), &[], b"").await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        stored_pod(&sb, "p").is_some(),
        "a denied delete deletes nothing"
    );
    let req = server.requests().last().cloned().unwrap();
    assert_eq!(req["operation"], "DELETE");
    assert!(req["object"].is_null());
    assert_eq!(req["oldObject"]["metadata"]["name"], "p");
    assert_eq!(req["options"]["kind"], "DeleteOptions");

    // An allowed delete (dry run first: the webhook hears dryRun, nothing is deleted).
    sb.store()
        .update({
            let mut p = stored_pod(&sb, "p").unwrap();
            p["metadata"]["labels"] = json!({});
            p
        })
        .unwrap();
    let r = raw(
        sb.addr(),
        "DELETE",
        &format!("{PODS}/p?dryRun=All"),
        &[],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(server.requests().last().unwrap()["dryRun"], true);
    assert!(stored_pod(&sb, "p").is_some());
    let r = raw(sb.addr(), "DELETE", &format!("{PODS}/p"), &[], b"").await;
    assert_eq!(r.status, 200);
    assert!(stored_pod(&sb, "p").is_none());
    sb.shutdown().await.unwrap();
}

#[tokio::test]
async fn service_references_resolve_through_the_configured_map() {
    let server = WebhookServer::start(deny_labelled).await;
    // The certificate names 127.0.0.1 and localhost, not NAME.NS.svc: kube-apiserver
    // verifies the service's DNS name, so must the sandbox.
    let sb = Sandbox::start(SandboxConfig {
        webhook_services: [("hooks/deny".to_string(), server.url(""))].into(),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let mut h = hook("svc.leash.dev", "", &server.ca_bundle);
    h["clientConfig"] = json!({
        "service": {"namespace": "hooks", "name": "deny", "path": "/check"},
        "caBundle": server.ca_bundle,
    });
    configure(&sb, "ValidatingWebhookConfiguration", "svc", vec![h]).await;
    let r = post(&sb, PODS, &pod("p", json!({}))).await;
    let v = r.json();
    assert_eq!(r.status, 500, "{v}");
    let message = v["message"].as_str().unwrap();
    assert!(
        message.contains("Post \"https://deny.hooks.svc:443/check?timeout=5s\"")
            && message.contains("certificate not valid for name \"deny.hooks.svc\""),
        "{message}"
    );
    assert!(server.requests().is_empty());

    // With a certificate for the service's name, the call goes through to the mapped
    // address, at the service's path.
    let named = WebhookServer::start_for(&["deny.hooks.svc"], deny_labelled).await;
    let sb3 = Sandbox::start(SandboxConfig {
        webhook_services: [("hooks/deny".to_string(), named.url("/base"))].into(),
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let mut h = hook("svc.leash.dev", "", &named.ca_bundle);
    h["clientConfig"] = json!({
        "service": {"namespace": "hooks", "name": "deny", "path": "/check", "port": 8443},
        "caBundle": named.ca_bundle,
    });
    configure(&sb3, "ValidatingWebhookConfiguration", "svc", vec![h]).await;
    let r = post(&sb3, PODS, &pod("bad", json!({"deny": "yes"}))).await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    let r = post(&sb3, PODS, &pod("good", json!({}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(named.requests()[0]["_path"], "/base/check?timeout=5s");
    sb3.shutdown().await.unwrap();

    // An unmapped service names the flag that maps it.
    let sb2 = start(vec![]).await;
    let mut h = hook("svc.leash.dev", "", &server.ca_bundle);
    h["clientConfig"] =
        json!({"service": {"namespace": "x", "name": "y"}, "caBundle": server.ca_bundle});
    configure(&sb2, "ValidatingWebhookConfiguration", "svc", vec![h]).await;
    let r = post(&sb2, PODS, &pod("p", json!({}))).await;
    let message = r.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("service x/y is not known to the sandbox"),
        "{message}"
    );
    assert!(message.contains("--webhook-service x/y="), "{message}");
    sb.shutdown().await.unwrap();
    sb2.shutdown().await.unwrap();

    let bad = Sandbox::start(SandboxConfig {
        webhook_services: [("no-slash".to_string(), server.url(""))].into(),
        ..SandboxConfig::default()
    })
    .await;
    assert!(
        bad.unwrap_err()
            .to_string()
            .contains("expected NAMESPACE/NAME"),
        "a malformed key is refused at start"
    );
}

/// Webhook connections are kept alive between calls, as kube-apiserver
/// keeps them: twenty creations cost one TCP and TLS handshake. A webhook
/// restarted in place closes the kept connection; the next call notices
/// and dials again, and is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_connections_are_kept_alive_and_redialled_after_a_restart() {
    let server = WebhookServer::start(deny_labelled).await;
    let sb = start(vec![]).await;
    let h = hook(
        "keep.leash.dev",
        &server.url("/validate"),
        &server.ca_bundle,
    );
    configure(&sb, "ValidatingWebhookConfiguration", "keep", vec![h]).await;
    for i in 0..20 {
        let r = post(&sb, PODS, &pod(&format!("p{i}"), json!({}))).await;
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    }
    assert_eq!(server.requests().len(), 20);
    assert_eq!(server.connections(), 1, "one connection for twenty calls");
    let server = server.restart(deny_labelled).await;
    let r = post(&sb, PODS, &pod("after", json!({}))).await;
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = post(&sb, PODS, &pod("denied", json!({"deny": "yes"}))).await;
    assert_eq!(r.status, 403, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        server.requests().len(),
        2,
        "the restarted server answered both"
    );
    assert_eq!(server.connections(), 1);
    sb.shutdown().await.unwrap();
}
