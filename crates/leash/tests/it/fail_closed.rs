//! Issue 38, items 1-3: `leash serve` fails closed at start, its replicas
//! share one CA behind a Service, and a webhook configuration left by a
//! stopped leash cannot lock the cluster.

use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leash_sandbox::{Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::{
    BOUND, ChildGuard, free_port, http_get, http_post_json, leash, repo, wait_ready, webhook_cfg,
};

/// A sandbox with leash's CRDs, the example policies (disallow-latest-tag
/// in Enforce) and the `kyverno` namespace; every request takes `latency`.
async fn sandbox(latency: Duration, services: &[(&str, String)]) -> Sandbox {
    let mut objects = leash_sandbox::manifests::load_manifests(&[
        repo().join("deploy/crds"),
        repo().join("deploy/examples/policies"),
    ])
    .unwrap();
    objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}));
    Sandbox::start(SandboxConfig {
        objects,
        faults: leash_sandbox::Faults {
            latency,
            ..leash_sandbox::Faults::default()
        },
        webhook_services: services
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        ..SandboxConfig::default()
    })
    .await
    .unwrap()
}

fn addr(sb: &Sandbox) -> String {
    sb.url().trim_start_matches("http://").to_string()
}

fn pod(name: &str, namespace: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "x"}},
        "spec": {"containers": [{"name": "c", "image": image}]}})
}

/// Creates the pod through the sandbox (which calls the webhooks): the
/// status and the answer.
fn create_pod(addr: &str, p: &Value) -> (u16, String) {
    let ns = p["metadata"]["namespace"].as_str().unwrap();
    http_post_json(addr, &format!("/api/v1/namespaces/{ns}/pods"), p)
}

/// `leash serve` against `url` with its stderr in `log`.
fn serve(url: &str, args: &[&str], log: &Path) -> ChildGuard {
    ChildGuard(
        leash()
            .args(["serve", "--server", url])
            .args(args)
            .env("LEASH_LOG", "info")
            .stdout(Stdio::null())
            .stderr(File::create(log).unwrap())
            .spawn()
            .expect("run leash serve"),
    )
}

/// [`serve`] of the admission component (a free port, its log `log`),
/// once ready.
async fn serve_admission_ready_logged(url: &str, log: &Path) -> ChildGuard {
    let health = format!("127.0.0.1:{}", free_port());
    let args = [
        "--components",
        "admission",
        "--admission-listen",
        "127.0.0.1:0",
        "--health",
        &health,
    ];
    let server = serve(url, &args, log);
    wait_ready(&health).await;
    server
}

fn kill(child: &mut ChildGuard) {
    child.0.kill().unwrap();
    child.0.wait().unwrap();
}

/// Item 1: a leash SIGKILLed and started again (same port, the CA from
/// its Secret, so the configuration it left behind still trusts it) is
/// flooded with pods its Enforce policy denies, from before its restart
/// until after it is ready: none is admitted. The flood meets the three
/// phases: nothing listening (the API server's failure policy), listening
/// before the policies are read (leash answers by the failure policy),
/// and the policies served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_webhook_admits_nothing_before_its_policies_are_read() {
    let sb = sandbox(Duration::from_millis(150), &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let health = format!("127.0.0.1:{}", free_port());
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--components",
        "admission",
        "--admission-listen",
        &listen,
        "--health",
        &health,
    ];
    let mut first = serve(&sb.url(), &args, &dir.path().join("first.log"));
    wait_ready(&health).await;
    let secret = sb
        .store()
        .get("v1", "Secret", Some("kyverno"), "leash-webhook-ca")
        .expect("the shared CA is kept in its Secret");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    let a = addr(&sb);
    let (code, body) =
        tokio::task::block_in_place(|| create_pod(&a, &pod("p0", "default", "nginx:latest")));
    assert!(
        code >= 400 && body.contains("disallow-latest-tag"),
        "{code} {body}"
    );
    kill(&mut first);

    let stop = AtomicBool::new(false);
    // Answers seen so far: leash's "starting" ones and the policy's denials.
    let (starting_seen, policy_seen) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let second_log = dir.path().join("second.log");
    let mut second = None;
    let answers: Vec<(u16, String)> = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            // Eight clients, each creating pods one after another.
            let flood: Vec<_> = (0..8)
                .map(|t| {
                    let (stop, a) = (&stop, &a);
                    let (starting_seen, policy_seen) = (&starting_seen, &policy_seen);
                    scope.spawn(move || {
                        let mut answers: Vec<(u16, String)> = Vec::new();
                        let mut i = 0;
                        while !stop.load(Ordering::Acquire) {
                            i += 1;
                            let name = format!("f{t}-{i}");
                            let answer = create_pod(a, &pod(&name, "default", "nginx:latest"));
                            if answer.1.contains("leash is starting") {
                                starting_seen.fetch_add(1, Ordering::Relaxed);
                            } else if answer.1.contains("disallow-latest-tag") {
                                policy_seen.fetch_add(1, Ordering::Relaxed);
                            }
                            answers.push(answer);
                        }
                        answers
                    })
                })
                .collect();
            // Ends the flood when this closure returns or panics: the scope
            // joins its threads before a panic leaves it.
            struct StopOnDrop<'a>(&'a AtomicBool);
            impl Drop for StopOnDrop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::Release);
                }
            }
            let stopper = StopOnDrop(&stop);
            let wait_for = |what: &str, done: &dyn Fn() -> bool| {
                let start = Instant::now();
                while !done() {
                    assert!(start.elapsed() < BOUND, "{what} within {BOUND:?}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            };
            std::thread::sleep(Duration::from_millis(300));
            // The policy groups answer 500 (the rest of the API server
            // works): leash listens, reads its CA and keeps the webhook
            // registered, but cannot read its policies.
            sb.set_faults(leash_sandbox::Faults {
                latency: Duration::from_millis(150),
                fail_paths: vec![
                    "/apis/kyverno.io/".into(),
                    "/apis/policies.kyverno.io/".into(),
                ],
                ..leash_sandbox::Faults::default()
            });
            second = Some(serve(&sb.url(), &args, &second_log));
            wait_for("a pod answered \"leash is starting\"", &|| {
                starting_seen.load(Ordering::Relaxed) > 0
            });
            assert!(
                std::net::TcpStream::connect(&health).is_err()
                    || http_get(&health, "/readyz").0 == 503,
                "not ready before the policies are read"
            );
            sb.set_faults(leash_sandbox::Faults {
                latency: Duration::from_millis(150),
                ..leash_sandbox::Faults::default()
            });
            wait_for("/readyz 200", &|| {
                std::net::TcpStream::connect(&health).is_ok()
                    && http_get(&health, "/readyz").0 == 200
            });
            wait_for("a pod denied by the policy", &|| {
                policy_seen.load(Ordering::Relaxed) > 0
            });
            std::thread::sleep(Duration::from_millis(300));
            drop(stopper);
            flood.into_iter().flat_map(|t| t.join().unwrap()).collect()
        })
    });
    let mut second = second.expect("started");
    kill(&mut second);

    let admitted: Vec<&(u16, String)> = answers.iter().filter(|(c, _)| *c < 300).collect();
    assert!(
        admitted.is_empty(),
        "{} of {} nginx:latest pods admitted across the restart: {:?}\nleash said:\n{}",
        admitted.len(),
        answers.len(),
        admitted.first(),
        std::fs::read_to_string(&second_log).unwrap_or_default()
    );
    let starting = answers
        .iter()
        .filter(|(_, b)| b.contains("leash is starting"))
        .count();
    let by_policy = answers
        .iter()
        .filter(|(_, b)| b.contains("disallow-latest-tag"))
        .count();
    assert!(
        starting > 0 && by_policy > 0,
        "the flood did not meet both phases ({starting} answered before the policies were read, {by_policy} by the policy, of {})",
        answers.len()
    );
    sb.shutdown().await.unwrap();
}

/// Item 2: two replicas behind one Service (the sandbox calls its two
/// endpoints in turn) share the CA of the Secret, and each presents a
/// certificate for the Service's name: every pod is judged by the
/// policies, whichever replica answers and whichever wrote the caBundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behind_a_service_answer_every_request() {
    let (p1, p2) = (free_port(), free_port());
    let endpoints = format!("https://127.0.0.1:{p1},https://127.0.0.1:{p2}");
    let sb = sandbox(Duration::ZERO, &[("kyverno/leash-svc", endpoints)]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut replicas = Vec::new();
    for (i, port) in [p1, p2].into_iter().enumerate() {
        let health = format!("127.0.0.1:{}", free_port());
        let listen = format!("127.0.0.1:{port}");
        replicas.push((
            serve(
                &sb.url(),
                &[
                    "--components",
                    "admission",
                    "--admission-listen",
                    &listen,
                    "--webhook-service",
                    "kyverno/leash-svc:443",
                    "--health",
                    &health,
                ],
                &dir.path().join(format!("replica-{i}.log")),
            ),
            health,
        ));
    }
    for (_, health) in &replicas {
        wait_ready(health).await;
    }
    let vwc = webhook_cfg(&sb, "Validating").unwrap();
    let secret = sb
        .store()
        .get("v1", "Secret", Some("kyverno"), "leash-webhook-ca")
        .unwrap();
    assert_eq!(
        vwc["webhooks"][0]["clientConfig"]["caBundle"], secret["data"]["tls.crt"],
        "the caBundle is the shared CA"
    );
    let a = addr(&sb);
    let logs = || {
        (0..2)
            .map(|i| {
                std::fs::read_to_string(dir.path().join(format!("replica-{i}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    for i in 0..10 {
        let (code, body) = tokio::task::block_in_place(|| {
            create_pod(&a, &pod(&format!("bad{i}"), "default", "nginx:latest"))
        });
        assert!(
            code >= 400 && body.contains("disallow-latest-tag"),
            "bad{i}: {code} {body}\n{}",
            logs()
        );
        let (code, body) = tokio::task::block_in_place(|| {
            create_pod(&a, &pod(&format!("good{i}"), "default", "nginx:1.27"))
        });
        assert_eq!(code, 201, "good{i}: {body}\n{}", logs());
    }
    for (mut r, _) in replicas {
        kill(&mut r);
    }
    sb.shutdown().await.unwrap();
}

/// Item 3: while leash is down, the configuration it left behind still
/// denies pods elsewhere (Fail), but not in leash's own or the system
/// namespaces, nor the resources needed to recover (a namespace, the
/// policy itself); and a run without the admission component removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_left_behind_cannot_lock_the_cluster() {
    let sb = sandbox(Duration::ZERO, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = serve_admission_ready_logged(&sb.url(), &dir.path().join("first.log")).await;
    kill(&mut first);
    let a = addr(&sb);
    let good = |name: &str, ns: &str| {
        let a = a.clone();
        let p = pod(name, ns, "nginx:1.27");
        tokio::task::block_in_place(move || create_pod(&a, &p))
    };

    let (code, body) = good("blocked", "default");
    assert!(
        code >= 500 && body.contains("failed calling webhook"),
        "leash is down: its Fail webhook refuses pods in default: {code} {body}"
    );
    for ns in ["kyverno", "kube-system"] {
        let (code, body) = good("recovering", ns);
        assert_eq!(code, 201, "a pod in {ns} while leash is down: {body}");
    }
    // add-namespace-defaults matches Namespaces: a namespace can still be
    // created (the recovery webhook fails open).
    let (code, body) = tokio::task::block_in_place(|| {
        http_post_json(
            &a,
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}),
        )
    });
    assert_eq!(code, 201, "a namespace while leash is down: {body}");

    let mut reports_only = serve(
        &sb.url(),
        &["--components", "reports"],
        &dir.path().join("reports.log"),
    );
    let start = Instant::now();
    while webhook_cfg(&sb, "Validating").is_ok() {
        assert!(
            start.elapsed() < BOUND,
            "the stale configuration was not removed; leash said:\n{}",
            std::fs::read_to_string(dir.path().join("reports.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, body) = good("unblocked", "default");
    assert_eq!(code, 201, "{body}");
    kill(&mut reports_only);
    sb.shutdown().await.unwrap();
}

/// The log at `path` once it holds `what` (a hang guard: 20 s).
async fn log_once_it_says(path: &Path, what: &str) -> String {
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what:?} not logged within 20 s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Item 10: an API server that cannot be reached, or answers truncated
/// JSON, is reported at once, one line per failure naming the operation,
/// without the answer's body; and /readyz is not ok meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_failures_are_logged_naming_the_operation() {
    let dir = tempfile::tempdir().unwrap();
    let health = format!("127.0.0.1:{}", free_port());
    // Nothing listens there.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let log = dir.path().join("unreachable.log");
    let mut unreachable = serve(
        &nowhere,
        &["--components", "reports", "--health", &health],
        &log,
    );
    let text = log_once_it_says(&log, "listing kyverno.io/v1 clusterpolicies").await;
    let line = text
        .lines()
        .find(|l| l.contains("listing kyverno.io/v1 clusterpolicies"))
        .unwrap();
    assert!(
        line.contains("WARN") && line.contains("Connection refused") && line.contains("retrying"),
        "{line}"
    );
    let (code, body) = tokio::task::block_in_place(|| http_get(&health, "/readyz"));
    assert_eq!(code, 503, "{body}");
    kill(&mut unreachable);

    // Every answer cut in half: a complete response whose JSON is not.
    let sb = sandbox(Duration::ZERO, &[]).await;
    sb.set_faults(leash_sandbox::Faults {
        truncate_rate: 1.0,
        ..leash_sandbox::Faults::default()
    });
    let log = dir.path().join("truncated.log");
    let mut truncated = serve(&sb.url(), &["--components", "reports"], &log);
    let text = log_once_it_says(&log, "listing kyverno.io/v1 clusterpolicies").await;
    kill(&mut truncated);
    for line in text.lines() {
        assert!(
            line.len() < 600 && !line.contains("\"apiVersion\""),
            "a log line carries an answer's body: {line}"
        );
    }
    sb.shutdown().await.unwrap();
}

/// Item 4: a pod that violates an Enforce pattern rule (it was there
/// before the policy) can still be labelled and deleted through the
/// webhook, as Kyverno allows; a new violation is still denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_violations_can_be_changed_and_deleted() {
    use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
    let sb = sandbox(Duration::ZERO, &[]).await;
    sb.store()
        .create(pod("legacy", "default", "nginx:latest"))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let mut server = serve_admission_ready_logged(&sb.url(), &log).await;
    let client = kube::Client::try_from(kube::Config::new(sb.url().parse().unwrap())).unwrap();
    let ar = kube::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Pod".into(),
        plural: "pods".into(),
    };
    let pods: Api<DynamicObject> = Api::namespaced_with(client, "default", &ar);
    let label = |v: &str| Patch::Merge(json!({"metadata": {"labels": {"a": v}}}));
    pods.patch("legacy", &PatchParams::default(), &label("b"))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "labelling an existing violation: {e}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
    // An UPDATE that brings the violation in is still denied.
    let (code, _) = {
        let a = addr(&sb);
        tokio::task::block_in_place(|| create_pod(&a, &pod("fresh", "default", "nginx:1.27")))
    };
    assert_eq!(code, 201);
    // Only the image changes (a pod's spec allows no more on update).
    let mut bad = pods.get("fresh").await.unwrap();
    bad.data["spec"]["containers"][0]["image"] = json!("nginx:latest");
    let err = pods
        .replace("fresh", &PostParams::default(), &bad)
        .await
        .expect_err("a new violation by an UPDATE is denied");
    assert!(err.to_string().contains("disallow-latest-tag"), "{err}");
    pods.delete("legacy", &DeleteParams::default())
        .await
        .expect("deleting an existing violation");
    kill(&mut server);
    sb.shutdown().await.unwrap();
}
