//! Reviews over HTTPS: decisions, messages, warnings, bad input, and the
//! shared-policy seed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leash_policy::{EvalRequest, NoClusterData, Operation, RuleResult, UserInfo};
use serde_json::{Value, json};

use crate::common::*;

fn set() -> leash_policy::Engine {
    engine(&[
        REQUIRE_TEAM,
        NO_LATEST,
        BACKGROUND_ONLY,
        &vpol("vpol-warn", "Warn", "warnme"),
        &vpol("vpol-deny", "Deny", "denyme"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforce_failure_denies_with_kyverno_message() {
    let s = TestServer::start(set()).await;
    let a = s
        .review(
            "/validate",
            &review("u1", "CREATE", &pod("web", "prod", None, "nginx:1")),
        )
        .await;
    let r = response(&a);
    assert_eq!(r["uid"], "u1");
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["status"], "Failure");
    let msg = r["status"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("\n\nresource Pod/prod/web was blocked due to the following policies \n\nrequire-team:\n  check-team: "),
        "{msg:?}"
    );
    assert!(
        !msg.contains("background-only"),
        "admission: false policies are not evaluated: {msg}"
    );
    // Nothing is reported for a denied request.
    let summary = s.stop().await;
    assert_eq!(summary.written, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_failures_allow_and_are_handed_off() {
    let s = TestServer::start(set()).await;
    let a = s
        .review(
            "/validate",
            &review(
                "u2",
                "CREATE",
                &pod("web", "prod", Some("a"), "nginx:latest"),
            ),
        )
        .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    assert!(response(&a).get("warnings").is_none(), "{a}");
    let sink = s.sink.clone();
    let summary = s.stop().await;
    assert_eq!(summary.written, 1);
    assert!(summary.lost.is_empty());
    let written = sink.written.lock().unwrap().clone();
    assert_eq!(written.len(), 1);
    let rec = &written[0];
    assert_eq!(rec.uid, "u2");
    assert_eq!(rec.operation, Operation::Create);
    assert_eq!(rec.user.username, "alice");
    let mut got: Vec<(String, String, String)> = rec
        .results
        .iter()
        .map(|r| (r.policy.to_string(), r.rule.clone(), r.status.to_string()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("no-latest".into(), "no-latest-tag".into(), "fail".into()),
            ("require-team".into(), "check-team".into(), "pass".into()),
            ("vpol-deny".into(), "vpol-deny".into(), "pass".into()),
            ("vpol-warn".into(), "vpol-warn".into(), "pass".into()),
        ],
        "audit fail and pass results of admission-enabled policies only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validating_policy_deny_and_warn() {
    let s = TestServer::start(set()).await;
    let a = s
        .review(
            "/validate",
            &review("u3", "CREATE", &pod("denyme", "prod", Some("a"), "nginx:1")),
        )
        .await;
    assert_eq!(response(&a)["allowed"], false, "{a}");
    let msg = response(&a)["status"]["message"].as_str().unwrap();
    assert!(
        msg.contains("vpol-deny:\n  vpol-deny: name denyme is reserved\n"),
        "{msg:?}"
    );
    let a = s
        .review(
            "/validate",
            &review("u4", "CREATE", &pod("warnme", "prod", Some("a"), "nginx:1")),
        )
        .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    assert_eq!(
        response(&a)["warnings"],
        json!(["policy vpol-warn.vpol-warn: name warnme is reserved"])
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_evaluates_old_object_and_filters_and_exclusions_allow() {
    let config = leash_policy::KyvernoConfig::parse(
        &[
            (
                "resourceFilters".to_string(),
                "[Pod,kube-system,*]".to_string(),
            ),
            ("excludeUsernames".to_string(), "ci-bot".to_string()),
        ]
        .into_iter()
        .collect(),
    )
    .unwrap();
    let s = TestServer::start_with(
        set(),
        Options {
            config,
            ..Options::default()
        },
    )
    .await;
    // DELETE of a non-compliant pod: pattern rules do not judge deletions
    // (Kyverno's "skipping validation on deleted resource"), so it is
    // allowed; a deletion is never stopped by what the object looks like.
    let a = s
        .review(
            "/validate",
            &review("d1", "DELETE", &pod("web", "prod", None, "nginx:1")),
        )
        .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    // Filtered namespace: allowed without evaluation.
    let a = s
        .review(
            "/validate",
            &review("f1", "CREATE", &pod("web", "kube-system", None, "nginx:1")),
        )
        .await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    // Excluded user.
    let mut r = review("e1", "CREATE", &pod("web", "prod", None, "nginx:1"));
    r["request"]["userInfo"]["username"] = json!("ci-bot");
    let a = s.review("/validate", &r).await;
    assert_eq!(response(&a)["allowed"], true, "{a}");
    let sink = s.sink.clone();
    let summary = s.stop().await;
    assert_eq!(
        summary.written,
        0,
        "no reports for filtered, excluded or deleted: {:?}",
        sink.written_uids()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_and_the_server_keeps_serving() {
    let s = TestServer::start(set()).await;
    let c = &s.client;
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        ("POST", "/validate", b"{not json".to_vec(), 400, "not JSON"),
        (
            "POST",
            "/validate",
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .to_vec(),
            400,
            "unsupported apiVersion \"admission.k8s.io/v1beta1\"",
        ),
        (
            "POST",
            "/validate",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            400,
            "no request",
        ),
        (
            "POST",
            "/validate",
            vec![b' '; 3 * 1024 * 1024 + 1],
            413,
            "larger than 3145728 bytes",
        ),
        (
            "GET",
            "/validate",
            Vec::new(),
            405,
            "method GET not allowed on /validate: use POST",
        ),
        (
            "POST",
            "/mutating",
            Vec::new(),
            404,
            "no such path \"/mutating\"",
        ),
    ];
    for (method, path, body, want, text) in cases {
        let (status, body) = c.request(method, path, body).await.expect("answered");
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, want, "{method} {path}: {body}");
        assert!(
            body.contains(text),
            "{method} {path}: {body:?} should name {text:?}"
        );
    }
    // A kind no policy matches: allowed, quickly.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "prod"}});
    let start = Instant::now();
    let a = s.review("/validate", &review("cm1", "CREATE", &cm)).await;
    assert_eq!(response(&a)["allowed"], true);
    assert!(start.elapsed() < Duration::from_secs(1));
    // Still serving.
    let (status, body) = c.request("GET", "/healthz", Vec::new()).await.unwrap();
    assert_eq!((status, body.as_slice()), (200, b"ok".as_slice()));
    let a = s
        .review(
            "/validate",
            &review("u5", "CREATE", &pod("web", "prod", None, "nginx:1")),
        )
        .await;
    assert_eq!(response(&a)["allowed"], false);
    s.stop().await;
}

/// Seed 000 (tests mutated shared policy objects; goroutines wrote one
/// shared map): 1,000 concurrent reviews against one compiled policy set
/// give the results of sequential evaluation, and the policy set is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_shared_policy_mutation() {
    let engine = set();
    let before = format!("{engine:?}");
    let s = TestServer::start(engine).await;
    let shared = s.policies.borrow().clone();
    let pods: Vec<Value> = (0..1000)
        .map(|i| {
            let team = (i % 3 != 0).then_some("a");
            let image = if i % 2 == 0 {
                "nginx:latest"
            } else {
                "nginx:1"
            };
            let name = match i % 7 {
                0 => "denyme".to_string(),
                1 => "warnme".to_string(),
                _ => format!("pod-{i}"),
            };
            pod(&name, "prod", team, image)
        })
        .collect();
    // Sequential evaluation, straight on the engine.
    let expected: Vec<(bool, Vec<RuleResult>)> = pods
        .iter()
        .map(|p| {
            let mut results = shared
                .evaluation(&NoClusterData)
                .validate(&leash_policy::Prepared::new(EvalRequest {
                    user_info: UserInfo {
                        username: "alice".into(),
                        groups: vec!["devs".into(), "system:authenticated".into()],
                        ..UserInfo::default()
                    },
                    ..EvalRequest::create(Arc::new(p.clone()))
                }))
                .into_vec();
            results.retain(|r| r.policy.as_ref() != "background-only");
            let denied = results.iter().any(|r| {
                r.status == leash_policy::Status::Fail
                    && (r.policy.as_ref() == "require-team" || r.policy.as_ref() == "vpol-deny")
            });
            (!denied, results)
        })
        .collect();
    // 1,000 reviews in flight at once from the client's side, over 100
    // keep-alive connections (so the test measures evaluation, not 1,000 TLS
    // handshakes on a shared 2-core machine).
    let pool = Pool::new(&s.client, 100).await;
    let answers = futures::future::join_all(pods.iter().enumerate().map(|(i, p)| {
        let pool = pool.clone();
        let body = serde_json::to_vec(&review(&format!("uid-{i:04}"), "CREATE", p)).unwrap();
        async move {
            let (status, body) = pool.post("/validate", body).await;
            assert_eq!(status, 200);
            serde_json::from_slice::<Value>(&body).unwrap()
        }
    }))
    .await;
    let sink = s.sink.clone();
    let summary = s.stop().await;
    for (i, (a, (allowed, _))) in answers.iter().zip(&expected).enumerate() {
        assert_eq!(response(a)["uid"], format!("uid-{i:04}"));
        assert_eq!(response(a)["allowed"], *allowed, "review {i}: {a}");
    }
    // The reports hold exactly the sequential results of the allowed reviews.
    let written = sink.written.lock().unwrap().clone();
    assert_eq!(summary.written as usize, written.len());
    assert_eq!(written.len(), expected.iter().filter(|(a, _)| *a).count());
    for rec in written {
        let i: usize = rec.uid.trim_start_matches("uid-").parse().unwrap();
        assert_eq!(rec.results, expected[i].1, "review {i}");
    }
    assert_eq!(
        format!("{:?}", *shared),
        before,
        "the compiled policies are unchanged"
    );
}

/// Each webhook answers for the policies of its failure policy:
/// `/validate/fail` for `failurePolicy: Fail` (the default), and
/// `/validate/ignore` for `Ignore`; `/validate` for all of them. A request
/// matched by both webhooks is so evaluated once per policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_webhook_answers_for_the_policies_of_its_failure_policy() {
    let ignore_team = REQUIRE_TEAM
        .replace("name: require-team", "name: ignore-team")
        .replace(
            "validationFailureAction: Enforce",
            "validationFailureAction: Enforce\n  failurePolicy: Ignore",
        );
    let s = TestServer::start(engine(&[REQUIRE_TEAM, &ignore_team])).await;
    let bad = review("u1", "CREATE", &pod("web", "prod", None, "nginx:1"));
    let denied_by = |a: &Value| -> Vec<String> {
        let r = response(a);
        assert_eq!(r["allowed"], false, "{r}");
        let msg = r["status"]["message"].as_str().unwrap().to_string();
        ["require-team", "ignore-team"]
            .iter()
            .filter(|p| msg.contains(&format!("{p}:")))
            .map(|p| p.to_string())
            .collect()
    };
    assert_eq!(
        denied_by(&s.review("/validate/fail", &bad).await),
        ["require-team"]
    );
    assert_eq!(
        denied_by(&s.review("/validate/ignore", &bad).await),
        ["ignore-team"]
    );
    assert_eq!(
        denied_by(&s.review("/validate", &bad).await),
        ["require-team", "ignore-team"]
    );
    s.stop().await;
}

/// An UpdateRequest sink that fails every creation, or never finishes one.
#[derive(Debug)]
struct BrokenTriggers {
    hang: bool,
}

impl leash_webhook::TriggerSink for BrokenTriggers {
    fn create(
        &self,
        _kind: leash_webhook::RequestKind,
        _policy: &str,
        _rules: Vec<String>,
        _trigger: &leash_webhook::Trigger,
    ) -> futures::future::BoxFuture<'static, Result<(), String>> {
        let hang = self.hang;
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Err("the API server refused it".to_owned())
        })
    }
}

/// README, `leash serve` background: when a trigger's UpdateRequest cannot
/// be created in time (the API server refuses it, or does not answer
/// within the answer deadline), the webhook's failure policy decides: a
/// `Fail` policy's trigger is denied naming the cause, an `Ignore`
/// policy's is allowed with a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_requests_not_created_in_time_follow_the_failure_policy() {
    let policy = |name: &str, failure: &str| {
        format!(
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {{name: {name}}}\n\
             spec:\n  failurePolicy: {failure}\n  rules:\n  - name: copy\n    match:\n      any:\n      - resources: {{kinds: [Pod]}}\n\
             \x20   generate:\n      apiVersion: v1\n      kind: ConfigMap\n      name: \"{{{{ request.object.metadata.name }}}}-copy\"\n\
             \x20     namespace: \"{{{{ request.object.metadata.namespace }}}}\"\n      data:\n        data: {{from: pod}}\n"
        )
    };
    for hang in [false, true] {
        let mut opts = Options {
            triggers: Some(Arc::new(BrokenTriggers { hang })),
            ..Options::default()
        };
        // One second to answer: a sink that never answers costs 0.9 s.
        opts.settings.timeout_seconds = 1;
        let engine = engine(&[&policy("gen-fail", "Fail"), &policy("gen-ignore", "Ignore")]);
        let server = TestServer::start_with(engine, opts).await;
        let object = pod("web", "apps", None, "nginx:1.27");
        let cause = if hang {
            "not created within"
        } else {
            "the API server refused it"
        };

        let denied = server
            .review("/validate/fail", &review("u1", "CREATE", &object))
            .await;
        let r = response(&denied);
        assert_eq!(r["allowed"], false, "{denied}");
        let message = r["status"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("gen-fail") && message.contains(cause),
            "{denied}"
        );

        let allowed = server
            .review("/validate/ignore", &review("u2", "CREATE", &object))
            .await;
        let r = response(&allowed);
        assert_eq!(r["allowed"], true, "{allowed}");
        let warnings = r["warnings"].to_string();
        assert!(
            warnings.contains("gen-ignore") && warnings.contains(cause),
            "{allowed}"
        );
        server.stop().await;
    }
}
