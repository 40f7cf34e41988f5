//! `leash serve` run as `deploy/leash.yaml` describes, against the real
//! control plane: the manifest applied as it is, the process on the host
//! with its ServiceAccount's token (a permission the ClusterRole lacks
//! fails the test), the webhook registered by URL with its caBundle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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

/// Poll `check` every 250 ms until it gives `Some`, at most `bound`; the
/// failure shows `context()` (a log).
fn eventually<T>(
    bound: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "not within {bound:?}: {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The CRDs, `deploy/leash.yaml` and the example policies, as an operator
/// applies them (once for this test binary).
fn install(cluster: &Cluster) {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| install_now(cluster));
}

fn install_now(cluster: &Cluster) {
    cluster.install_crds();
    let out = cluster.kubectl(&["apply", "-f", &repo("deploy/leash.yaml")]);
    assert!(
        out.status.success(),
        "kubectl apply -f deploy/leash.yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.kubectl_ok(&["apply", "-f", &repo("deploy/examples/policies")]);
    cluster.namespace(NAMESPACE);
}

/// A `leash serve` process on the host, as the ServiceAccount of
/// `deploy/leash.yaml`, its stderr in a log file.
struct Serve {
    child: ChildGuard,
    admission: String,
    log: PathBuf,
}

impl Serve {
    /// Start it with `args` and wait until `/readyz` answers 200.
    fn start(kubeconfig: &Path, name: &str, args: &[&str]) -> Serve {
        let admission = format!("127.0.0.1:{}", free_port());
        let health = format!("127.0.0.1:{}", free_port());
        let log = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("serve-real-{name}-{}.log", std::process::id()));
        let file = std::fs::File::create(&log).expect("serve log");
        let mut child = ChildGuard(
            leash()
                .arg("serve")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--admission-listen", &admission, "--health", &health])
                .args(args)
                .env(
                    "LEASH_LOG",
                    std::env::var("LEASH_TEST_SERVE_LOG").unwrap_or_else(|_| "info".into()),
                )
                .stdout(Stdio::null())
                .stderr(file)
                .spawn()
                .expect("run leash serve"),
        );
        let text = || std::fs::read_to_string(&log).unwrap_or_default();
        // Connection refused until the health server listens.
        let ready = || {
            std::net::TcpStream::connect(&health).is_ok() && http_get(&health, "/readyz").0 == 200
        };
        let deadline = Instant::now() + BOUND;
        while !ready() {
            if let Some(status) = child.0.try_wait().unwrap() {
                panic!("leash serve exited ({status}):\n{}", text());
            }
            assert!(Instant::now() < deadline, "/readyz never 200:\n{}", text());
            std::thread::sleep(Duration::from_millis(200));
        }
        Serve {
            child,
            admission,
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, a clean exit within the bound: the log.
    fn terminate(mut self) -> String {
        send_signal(&self.child.0, "TERM");
        let status = wait_exit(&mut self.child.0, BOUND, "leash serve exit after SIGTERM");
        let log = self.log_text();
        assert!(status.success(), "leash serve: {status}\n{log}");
        log
    }
}

/// Until kube-apiserver's informer has the webhook configuration that
/// `leash serve` wrote (a moment after /readyz), requests are not sent to
/// it: wait until a violating Pod is denied (a server-side dry run).
fn wait_enforced(cluster: &Cluster, namespace: &str, serve: &Serve) {
    eventually(
        Duration::from_secs(30),
        "kube-apiserver calls the webhook",
        || {
            let out = cluster.kubectl(&[
                "run",
                "probe",
                "--image=nginx:latest",
                "--dry-run=server",
                "-n",
                namespace,
            ]);
            String::from_utf8_lossy(&out.stderr)
                .contains("denied the request")
                .then_some(())
        },
        || serve.log_text(),
    );
}

/// No webhook configuration of an earlier test is left to refuse what this
/// one creates (a failed test's `leash serve` is killed without cleanup).
fn no_stale_webhooks(cluster: &Cluster) {
    cluster.kubectl_ok(&[
        "delete",
        "validatingwebhookconfiguration",
        "leash-validating-webhook-cfg",
        "--ignore-not-found",
    ]);
    cluster.kubectl_ok(&[
        "delete",
        "mutatingwebhookconfiguration",
        "leash-mutating-webhook-cfg",
        "--ignore-not-found",
    ]);
}

/// Nothing in a serve log says the API server refused it: the ClusterRole
/// and Role of deploy/leash.yaml grant all it does.
#[track_caller]
fn assert_granted(log: &str) {
    assert!(
        !log.contains("Forbidden") && !log.contains("forbidden") && !log.contains(" 403"),
        "leash serve was refused something deploy/leash.yaml should grant:\n{log}"
    );
}

#[test]
fn serve_with_the_deployed_service_account_admits_denies_reports_and_generates() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    no_stale_webhooks(cluster);
    install(cluster);
    let kubeconfig = cluster.service_account_kubeconfig("kyverno", "leash");
    let serve = Serve::start(
        &kubeconfig,
        "main",
        &[
            "--components",
            "reports,admission,background",
            "--cleanup-webhooks",
        ],
    );
    let admission = serve.admission.clone();
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
    wait_enforced(cluster, NAMESPACE, &serve);
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
    let report = eventually(
        Duration::from_secs(60),
        "the Pod's PolicyReport",
        || pod_report_in(cluster, NAMESPACE, "web").filter(|r| r["summary"]["fail"] == 1),
        || serve.log_text(),
    );
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

    // RBACPermissionsGranted, asked of kube-apiserver: deploy/leash.yaml
    // lets leash list and watch Pods, not ClusterRoles (the second policy
    // scans nothing, so leash never tries).
    cluster.apply(
        r#"
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: real-rbac-pods}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  validations:
  - expression: "true"
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: real-rbac-roles}
spec:
  evaluation: {background: {enabled: false}}
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
    - apiGroups: [rbac.authorization.k8s.io]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [clusterroles]
  validations:
  - expression: "true"
"#,
    );
    let granted = |name: &str| {
        let policy: Value = serde_json::from_str(&cluster.kubectl_ok(&[
            "get",
            "validatingpolicies.policies.kyverno.io",
            name,
            "-o",
            "json",
        ]))
        .ok()?;
        let status = &policy["status"]["conditionStatus"];
        let condition = status["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "RBACPermissionsGranted")?
            .clone();
        Some((status["ready"].as_bool()?, condition))
    };
    let (ready, pods) = eventually(
        Duration::from_secs(30),
        "real-rbac-pods' status",
        || granted("real-rbac-pods"),
        || serve.log_text(),
    );
    assert!(ready && pods["status"] == "True", "{pods}");
    assert_eq!(pods["message"], "Policy is ready for reporting.");
    let (ready, roles) = eventually(
        Duration::from_secs(30),
        "real-rbac-roles' status",
        || granted("real-rbac-roles"),
        || serve.log_text(),
    );
    assert!(!ready && roles["status"] == "False", "{roles}");
    assert_eq!(roles["reason"], "Failed");
    let message = roles["message"].as_str().unwrap();
    for verb in ["list", "watch"] {
        let what = format!("{verb} rbac.authorization.k8s.io/v1, Resource=clusterroles");
        assert!(message.contains(&what), "{message}");
    }
    assert!(
        message.starts_with("Policy is not ready for reporting, missing permissions: "),
        "{message}"
    );
    // Not ready for reporting, still served at admission.
    let configs = cluster.kubectl_ok(&["get", "validatingwebhookconfigurations", "-o", "json"]);
    let configs: Value = serde_json::from_str(&configs).unwrap();
    let registered = configs["items"].as_array().unwrap().iter().any(|c| {
        c["webhooks"].as_array().into_iter().flatten().any(|w| {
            w["rules"].as_array().into_iter().flatten().any(|r| {
                r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == "clusterroles"))
            })
        })
    });
    assert!(registered, "no webhook rule for clusterroles: {configs}");
    cluster.kubectl_ok(&[
        "delete",
        "validatingpolicies.policies.kyverno.io",
        "real-rbac-pods",
        "real-rbac-roles",
    ]);

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
        || serve.log_text(),
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
        || serve.log_text(),
    );

    // SIGTERM: a clean exit, and (with --cleanup-webhooks) no webhook left
    // to refuse what the cluster admits without leash.
    let log = serve.terminate();
    assert_granted(&log);
    cluster.kubectl_ok(&["run", "after", "--image=nginx:latest", "-n", NAMESPACE]);
}

/// Issue 40 against kube-apiserver: its mutating admission chain calls
/// `leash serve`'s mutating webhook (registered by URL, with the
/// ServiceAccount of deploy/leash.yaml), a pod created with kubectl
/// without a label gets it from a namespaced classic mutate rule and an
/// annotation from a NamespacedMutatingPolicy that sees it, and a validate
/// policy that requires the label admits it. `--cleanup-webhooks` removes
/// both configurations at exit.
#[test]
fn serve_mutates_at_admission_through_the_api_server() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    const NS: &str = "mutate-real";
    no_stale_webhooks(cluster);
    install(cluster);
    cluster.namespace(NS);
    cluster.apply(&format!(
        r#"
apiVersion: kyverno.io/v1
kind: Policy
metadata: {{name: add-team, namespace: {NS}}}
spec:
  rules:
  - name: default-team
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    mutate:
      patchStrategicMerge:
        metadata:
          labels:
            +(team): platform
---
apiVersion: policies.kyverno.io/v1
kind: NamespacedMutatingPolicy
metadata: {{name: note-team, namespace: {NS}}}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [pods]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >-
        Object{{metadata: Object.metadata{{annotations: {{"leash.io/team": object.metadata.labels["team"]}}}}}}
---
apiVersion: kyverno.io/v1
kind: Policy
metadata: {{name: require-team, namespace: {NS}}}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match: {{any: [{{resources: {{kinds: [Pod]}}}}]}}
    validate:
      message: label team is required
      pattern: {{metadata: {{labels: {{team: "?*"}}}}}}
"#
    ));
    let kubeconfig = cluster.service_account_kubeconfig("kyverno", "leash");
    let serve = Serve::start(
        &kubeconfig,
        "mutate",
        &["--components", "admission", "--cleanup-webhooks"],
    );
    let admission = serve.admission.clone();
    let config: Value = serde_json::from_str(&cluster.kubectl_ok(&[
        "get",
        "mutatingwebhookconfiguration",
        "leash-mutating-webhook-cfg",
        "-o",
        "json",
    ]))
    .unwrap();
    let hook = &config["webhooks"][0];
    assert_eq!(hook["name"], "mutate.kyverno.svc-fail", "{config}");
    assert_eq!(
        hook["clientConfig"]["url"],
        format!("https://{admission}/mutate/fail"),
        "{config}"
    );
    assert_eq!(hook["reinvocationPolicy"], "IfNeeded");
    // Until kube-apiserver's informer has both configurations, a pod
    // without the label is denied (validated unmutated) or admitted
    // without it: probe with server-side dry runs.
    let probe = eventually(
        Duration::from_secs(30),
        "kube-apiserver calls the mutating webhook",
        || {
            let out = cluster.kubectl(&[
                "run",
                "probe",
                "--image=nginx:1.27",
                "--dry-run=server",
                "-o",
                "json",
                "-n",
                NS,
            ]);
            let pod: Value = serde_json::from_slice(&out.stdout).ok()?;
            (pod["metadata"]["annotations"]["leash.io/team"] == "platform").then_some(pod)
        },
        || serve.log_text(),
    );
    assert_eq!(probe["metadata"]["labels"]["team"], "platform");
    cluster.kubectl_ok(&["run", "plain", "--image=nginx:1.27", "-n", NS]);
    let pod: Value =
        serde_json::from_str(&cluster.kubectl_ok(&["get", "pod", "plain", "-n", NS, "-o", "json"]))
            .unwrap();
    assert_eq!(pod["metadata"]["labels"]["team"], "platform", "{pod}");
    assert_eq!(pod["metadata"]["labels"]["run"], "plain", "{pod}");
    assert_eq!(
        pod["metadata"]["annotations"]["leash.io/team"], "platform",
        "{pod}"
    );
    cluster.kubectl_ok(&[
        "run",
        "own",
        "--image=nginx:1.27",
        "--labels=team=payments",
        "-n",
        NS,
    ]);
    let pod: Value =
        serde_json::from_str(&cluster.kubectl_ok(&["get", "pod", "own", "-n", NS, "-o", "json"]))
            .unwrap();
    assert_eq!(pod["metadata"]["labels"]["team"], "payments", "{pod}");
    assert_eq!(pod["metadata"]["annotations"]["leash.io/team"], "payments");

    let log = serve.terminate();
    assert_granted(&log);
    let left = cluster.kubectl(&[
        "get",
        "mutatingwebhookconfiguration",
        "leash-mutating-webhook-cfg",
    ]);
    assert!(
        !left.status.success(),
        "--cleanup-webhooks removes the mutating configuration"
    );
    cluster.kubectl_ok(&[
        "delete",
        "policy.kyverno.io,namespacedmutatingpolicy",
        "--all",
        "-n",
        NS,
    ]);
}

/// Pod `i` of admission traffic in `namespace`: every third uses
/// `nginx:latest` (Enforce: denied), the others fail require-labels
/// (Audit: admitted, reported).
fn pod(namespace: &str, prefix: &str, i: usize) -> (String, Value) {
    let image = if i.is_multiple_of(3) {
        "nginx:latest"
    } else {
        "nginx:1.27"
    };
    let body = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{prefix}-{i:04}"), "namespace": namespace},
        "spec": {"containers": [{"name": "app", "image": image}]}});
    (format!("/api/v1/namespaces/{namespace}/pods"), body)
}

/// The names of the resources the admission EphemeralReports of
/// `namespace` are about.
fn admission_reported(cluster: &Cluster, namespace: &str) -> BTreeSet<String> {
    let text = cluster.kubectl_ok(&["get", "ephemeralreports", "-n", namespace, "-o", "json"]);
    let list: Value = serde_json::from_str(&text).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["metadata"]["labels"]["audit.kyverno.io/source"] == "admission")
        .filter_map(|r| {
            r["metadata"]["annotations"]["audit.kyverno.io/resource.name"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// SIGTERM in the middle of pod creations through kube-apiserver: no pod
/// that violates an Enforce policy is admitted (before, during or after
/// the shutdown), every admitted pod's Audit result is in an admission
/// EphemeralReport once leash has exited (none lost at shutdown), and a
/// restarted leash (a new certificate, another port) rewrites the
/// configuration it left, so the cluster is not blocked by a stale one
/// (Kyverno's #16177).
#[test]
fn sigterm_during_traffic_loses_no_admission_result_and_a_restart_takes_over() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    no_stale_webhooks(cluster);
    install(cluster);
    let namespace = "serve-sigterm";
    cluster.namespace(namespace);
    let kubeconfig = cluster.service_account_kubeconfig("kyverno", "leash");
    // Admission only: no aggregation, so what it wrote stays ephemeral.
    let serve = Serve::start(&kubeconfig, "sigterm", &["--components", "admission"]);
    wait_enforced(cluster, namespace, &serve);
    // The traffic runs until leash has exited and AFTER_EXIT more pods
    // were sent (those are refused), whatever the machine's speed; SIGTERM
    // comes once BEFORE_SIGTERM were sent. CAP bounds a hang.
    const BEFORE_SIGTERM: usize = 90;
    const AFTER_EXIT: usize = 24;
    const CAP: usize = 6000;
    let sent = Arc::new(AtomicUsize::new(0));
    let exited = Arc::new(AtomicBool::new(false));
    let traffic = {
        let cluster: &'static Cluster = cluster;
        let (sent, exited) = (Arc::clone(&sent), Arc::clone(&exited));
        let mut after_exit = 0;
        let objects = (0..CAP).map_while(move |i| {
            if exited.load(Ordering::SeqCst) {
                after_exit += 1;
                if after_exit > AFTER_EXIT {
                    return None;
                }
            }
            sent.store(i + 1, Ordering::SeqCst);
            Some(pod(namespace, "t", i))
        });
        #[allow(
            clippy::disallowed_methods,
            reason = "a test thread drives the traffic; joined below"
        )]
        std::thread::spawn(move || cluster.create_each(objects, 8))
    };
    eventually(
        BOUND,
        "the traffic's first pods are sent",
        || (sent.load(Ordering::SeqCst) >= BEFORE_SIGTERM).then_some(()),
        || format!("{} sent", sent.load(Ordering::SeqCst)),
    );
    let log = serve.terminate();
    exited.store(true, Ordering::SeqCst);
    let outcomes = traffic.join().expect("traffic thread");
    assert_granted(&log);

    let mut admitted = BTreeSet::new();
    let (mut denied, mut unreachable) = (0, 0);
    for (i, outcome) in outcomes.iter().enumerate() {
        let name = format!("t-{i:04}");
        match outcome {
            Ok(()) => {
                assert!(i % 3 != 0, "{name} (nginx:latest) was admitted");
                admitted.insert(name);
            }
            Err(e) if e.contains("denied the request") => {
                assert!(i % 3 == 0, "{name} denied: {e}");
                denied += 1;
            }
            // After the exit: failurePolicy Fail refuses what it cannot ask.
            Err(e) if e.contains("failed calling webhook") => unreachable += 1,
            Err(e) => panic!("{name}: {e}"),
        }
    }
    assert!(
        admitted.len() >= 10 && denied >= 5 && unreachable > 0,
        "the SIGTERM came during the traffic: {} admitted, {denied} denied, {unreachable} refused after exit",
        admitted.len()
    );
    let reported = admission_reported(cluster, namespace);
    let lost: Vec<&String> = admitted.difference(&reported).collect();
    if !lost.is_empty() {
        let mut detail = String::new();
        for name in &lost {
            let uid = cluster.kubectl_ok(&[
                "get",
                "pod",
                name,
                "-n",
                namespace,
                "-o",
                "jsonpath={.metadata.uid} {.metadata.creationTimestamp}",
            ]);
            let reports = cluster.kubectl_ok(&[
                "get",
                "ephemeralreports",
                "-n",
                namespace,
                "-l",
                &format!(
                    "audit.kyverno.io/resource.uid={}",
                    uid.split(' ').next().unwrap()
                ),
                "-o",
                "name",
            ]);
            detail.push_str(&format!("{name}: uid {uid}; reports: {reports}\n"));
        }
        panic!(
            "admitted pods without their admission report: {lost:?}\n{detail}\n{} admission reports; serve log:\n{log}",
            reported.len()
        );
    }

    // A restart: a new self-signed CA and another port. The configuration
    // left behind is rewritten, and admission works again.
    let serve = Serve::start(
        &kubeconfig,
        "restart",
        &["--components", "admission", "--cleanup-webhooks"],
    );
    wait_enforced(cluster, namespace, &serve);
    cluster.kubectl_ok(&[
        "run",
        "after-restart",
        "--image=nginx:1.27",
        "-n",
        namespace,
    ]);
    let denied = cluster.kubectl(&[
        "run",
        "latest-after",
        "--image=nginx:latest",
        "-n",
        namespace,
    ]);
    assert!(
        !denied.status.success(),
        "nginx:latest admitted after the restart"
    );
    assert_granted(&serve.terminate());
}

/// Two replicas with `--leader-elect`: the holder of the Lease runs the
/// background scan; SIGKILL it and the other takes the Lease over and
/// reports what is created after the kill.
#[test]
fn the_other_replica_takes_over_when_the_leader_is_killed() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    no_stale_webhooks(cluster);
    install(cluster);
    let namespace = "serve-leader";
    cluster.namespace(namespace);
    let kubeconfig = cluster.service_account_kubeconfig("kyverno", "leash");
    let args = |id: &'static str| {
        [
            "--components",
            "reports",
            "--leader-elect",
            "--lease-identity",
            id,
        ]
    };
    let first = Serve::start(&kubeconfig, "replica-a", &args("replica-a"));
    let holder = || {
        let out = cluster.kubectl(&[
            "get",
            "lease",
            "leash-reports",
            "-n",
            "kyverno",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            .filter(|h| !h.is_empty())
    };
    eventually(
        Duration::from_secs(30),
        "replica-a holds the Lease",
        || holder().filter(|h| h == "replica-a"),
        || first.log_text(),
    );
    let second = Serve::start(&kubeconfig, "replica-b", &args("replica-b"));
    cluster.kubectl_ok(&["run", "before", "--image=nginx:1.27", "-n", namespace]);
    eventually(
        Duration::from_secs(60),
        "the leader reports the first pod",
        || pod_report_in(cluster, namespace, "before"),
        || first.log_text(),
    );

    let mut first = first;
    first.child.0.kill().expect("SIGKILL the leader");
    let _ = first.child.0.wait();
    cluster.kubectl_ok(&["run", "after", "--image=nginx:1.27", "-n", namespace]);
    // The Lease runs out 15 s after its last renewal; then replica-b takes it.
    eventually(
        Duration::from_secs(60),
        "replica-b holds the Lease",
        || holder().filter(|h| h == "replica-b"),
        || second.log_text(),
    );
    eventually(
        Duration::from_secs(60),
        "the new leader reports the pod created after the kill",
        || pod_report_in(cluster, namespace, "after"),
        || second.log_text(),
    );
    assert_granted(&second.terminate());
}

/// The PolicyReport of the Pod `name` in `namespace`, once it exists.
fn pod_report_in(cluster: &Cluster, namespace: &str, name: &str) -> Option<Value> {
    let text = cluster.kubectl_ok(&["get", "policyreports", "-n", namespace, "-o", "json"]);
    let list: Value = serde_json::from_str(&text).ok()?;
    list["items"]
        .as_array()?
        .iter()
        .find(|r| r["scope"]["kind"] == "Pod" && r["scope"]["name"] == name)
        .cloned()
}
