//! `leash serve` run as `deploy/leash.yaml` describes, against the real
//! control plane: the manifest applied as it is, the process on the host
//! with its ServiceAccount's token (a permission the ClusterRole lacks
//! fails the test), the webhook registered by URL with its caBundle.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cluster::{Cluster, cluster};
use crate::support::{BOUND, ChildGuard, free_port, http_get, leash, send_signal, wait_exit};

const NAMESPACE: &str = "serve-real";

fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
        .display()
        .to_string()
}

/// Poll `check` every 250 ms until it gives `Some`, at most `bound`.
fn eventually<T>(bound: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {bound:?}: {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The CRDs, `deploy/leash.yaml` and the example policies, as an operator
/// applies them.
fn install(cluster: &Cluster) {
    let out = cluster.kubectl(&["apply", "--server-side", "-f", &repo("deploy/crds")]);
    assert!(
        out.status.success(),
        "kubectl apply -f deploy/crds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "--all",
    ]);
    let out = cluster.kubectl(&["apply", "-f", &repo("deploy/leash.yaml")]);
    assert!(
        out.status.success(),
        "kubectl apply -f deploy/leash.yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.kubectl_ok(&["apply", "-f", &repo("deploy/examples/policies")]);
    cluster.namespace(NAMESPACE);
}

/// The PolicyReport of the Pod `name` in [`NAMESPACE`], once it exists.
fn pod_report(cluster: &Cluster, name: &str) -> Option<Value> {
    let text = cluster.kubectl_ok(&["get", "policyreports", "-n", NAMESPACE, "-o", "json"]);
    let list: Value = serde_json::from_str(&text).ok()?;
    list["items"]
        .as_array()?
        .iter()
        .find(|r| r["scope"]["kind"] == "Pod" && r["scope"]["name"] == name)
        .cloned()
}

#[test]
fn serve_with_the_deployed_service_account_admits_denies_reports_and_generates() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    install(cluster);
    let kubeconfig = cluster.service_account_kubeconfig("kyverno", "leash");
    let admission = format!("127.0.0.1:{}", free_port());
    let health = format!("127.0.0.1:{}", free_port());
    let log_path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("serve-real-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("serve log");
    let mut serve = ChildGuard(
        leash()
            .arg("serve")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args([
                "--components",
                "reports,admission,background",
                "--admission-listen",
                &admission,
                "--health",
                &health,
                "--cleanup-webhooks",
            ])
            .env("LEASH_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run leash serve"),
    );
    let log_text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + BOUND;
    // Connection refused until the health server listens.
    let ready =
        || std::net::TcpStream::connect(&health).is_ok() && http_get(&health, "/readyz").0 == 200;
    while !ready() {
        if let Some(status) = serve.0.try_wait().unwrap() {
            panic!("leash serve exited ({status}):\n{}", log_text());
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never 200:\n{}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The webhook is registered by URL with a caBundle, and kube-apiserver
    // calls it: an Enforce failure is denied with Kyverno's message.
    let config: Value = serde_json::from_str(&cluster.kubectl_ok(&[
        "get",
        "validatingwebhookconfigurations",
        "-o",
        "json",
    ]))
    .unwrap();
    let webhooks: Vec<&Value> = config["items"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["webhooks"].as_array().unwrap())
        .collect();
    assert!(!webhooks.is_empty(), "no webhook registered");
    for webhook in &webhooks {
        let url = webhook["clientConfig"]["url"].as_str().unwrap_or_default();
        assert!(
            url.starts_with(&format!("https://{admission}/")),
            "{webhook}"
        );
        assert!(webhook["clientConfig"]["caBundle"].is_string(), "{webhook}");
    }
    let denied = cluster.kubectl(&["run", "latest", "--image=nginx:latest", "-n", NAMESPACE]);
    let stderr = String::from_utf8_lossy(&denied.stderr);
    assert!(!denied.status.success(), "nginx:latest was admitted");
    assert!(
        stderr.contains("denied the request") && stderr.contains("disallow-latest-tag"),
        "{stderr}"
    );
    // An Audit failure is admitted (and reported).
    cluster.kubectl_ok(&["run", "web", "--image=nginx:1.27", "-n", NAMESPACE]);

    // The Pod's report: require-labels failed (Audit), both rules of
    // disallow-latest-tag passed; the same sums `leash apply --cluster`
    // gives for it.
    let report = eventually(Duration::from_secs(60), "the Pod's PolicyReport", || {
        pod_report(cluster, "web").filter(|r| r["summary"]["fail"] == 1)
    });
    let expected = {
        let out = leash()
            .args(["apply", &repo("deploy/examples/policies")])
            .args(["--cluster", "-n", NAMESPACE, "--kubeconfig"])
            .arg(&cluster.kubeconfig)
            .output()
            .expect("run leash apply");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let summary = &report["summary"];
    assert_eq!(
        (summary["pass"].as_u64(), summary["fail"].as_u64()),
        (Some(2), Some(1)),
        "{report}"
    );
    assert!(
        expected.contains("pass: 2, fail: 1, warn: 0, error: 0, skip: 0"),
        "leash apply --cluster on the same Pod: {expected}"
    );

    // Generate: a labelled namespace gets its ConfigMap, recreated when
    // deleted.
    cluster.kubectl_ok(&["create", "namespace", "team-real"]);
    cluster.kubectl_ok(&["label", "namespace", "team-real", "leash.dev/defaults=true"]);
    let generated = || {
        cluster
            .kubectl(&["get", "configmap", "namespace-defaults", "-n", "team-real"])
            .status
            .success()
            .then_some(())
    };
    eventually(
        Duration::from_secs(60),
        "the generated ConfigMap",
        generated,
    );
    cluster.kubectl_ok(&[
        "delete",
        "configmap",
        "namespace-defaults",
        "-n",
        "team-real",
    ]);
    eventually(
        Duration::from_secs(60),
        "the ConfigMap generated again",
        generated,
    );

    // SIGTERM: a clean exit, and (with --cleanup-webhooks) no webhook left
    // to refuse what the cluster admits without leash.
    send_signal(&serve.0, "TERM");
    let status = wait_exit(&mut serve.0, BOUND, "leash serve exit after SIGTERM");
    let log = log_text();
    assert!(status.success(), "leash serve: {status}\n{log}");
    assert!(
        !log.contains("Forbidden") && !log.contains("forbidden") && !log.contains(" 403"),
        "leash serve was refused something deploy/leash.yaml should grant:\n{log}"
    );
    cluster.kubectl_ok(&["run", "after", "--image=nginx:latest", "-n", NAMESPACE]);
}
