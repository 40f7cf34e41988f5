//! `leash serve`: the reports converge to what `leash apply --cluster`
//! computes on the same data, follow changes, and survive faults and
//! `kill -9`.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leash_sandbox::generate::{GenerateSpec, parse_generate};
use leash_sandbox::{Faults, Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::{BOUND, ChildGuard, http_get, leash, repo, sigterm_and_wait};

/// `(resource uid, policy, rule, result)`.
type Row = (String, String, String, String);

/// The policies of the test: the two examples and four Pod Security ones.
fn policy_files() -> Vec<PathBuf> {
    let mut v = vec![
        repo().join("deploy/examples/policies/disallow-latest-tag.yaml"),
        repo().join("deploy/examples/policies/require-labels.yaml"),
    ];
    for p in [
        "disallow-privileged-containers",
        "disallow-host-namespaces",
        "disallow-host-path",
        "restrict-volume-types",
    ] {
        v.push(repo().join(format!("bench/policies/pss-classic/{p}.yaml")));
    }
    v
}

async fn start_sandbox(generate: &str) -> Sandbox {
    let mut objects =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")]).unwrap();
    objects.extend(leash_sandbox::manifests::load_manifests(&policy_files()).unwrap());
    // Violations of each kind besides the generated (compliant) workloads.
    for i in 0..20 {
        objects.push(pod(&format!("latest-{i}"), "nginx:latest"));
        let mut p = pod(&format!("privileged-{i}"), "nginx:1.27");
        p["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        objects.push(p);
        let mut p = pod(&format!("hostpath-{i}"), "nginx:1.27");
        p["spec"]["volumes"] = json!([{"name": "h", "hostPath": {"path": "/etc"}}]);
        p["spec"]["hostNetwork"] = json!(i % 2 == 0);
        objects.push(p);
    }
    Sandbox::start(SandboxConfig {
        generate: Some(GenerateSpec {
            kinds: parse_generate(generate).unwrap(),
            namespaces: 4,
            crds: Some((0, 0)),
            seed: 7,
        }),
        objects,
        ..SandboxConfig::default()
    })
    .await
    .unwrap()
}

fn serve(url: &str, extra: &[&str]) -> ChildGuard {
    let child = leash()
        .args(["serve", "--server", url, "--components", "reports"])
        .args(["--report-cleanup-interval", "1s"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run leash serve");
    ChildGuard(child)
}

/// What `leash apply --cluster --policy-report` computes.
fn expected(url: &str) -> BTreeSet<Row> {
    expected_with(url, &policy_files())
}

fn expected_with(url: &str, files: &[PathBuf]) -> BTreeSet<Row> {
    let mut cmd = leash();
    cmd.arg("apply");
    for p in files {
        cmd.arg(p);
    }
    let out = cmd
        .args([
            "--cluster",
            "--server",
            url,
            "-A",
            "--policy-report",
            // The layout `serve` writes its reports in.
            "--report-format",
            "wgpolicyk8s",
            "-o",
            "json",
        ])
        .output()
        .expect("run leash apply");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "leash apply -o json: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let mut rows = BTreeSet::new();
    for report in doc["items"].as_array().unwrap() {
        for r in report["results"].as_array().unwrap() {
            let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
            let uid = r["resources"][0]["uid"].as_str().unwrap_or("").to_string();
            rows.insert((uid, s("policy"), s("rule"), s("result")));
        }
    }
    rows
}

/// Every result of every PolicyReport / ClusterPolicyReport in the sandbox.
fn reported(sb: &Sandbox) -> BTreeSet<Row> {
    let mut rows = BTreeSet::new();
    for kind in ["PolicyReport", "ClusterPolicyReport"] {
        for rep in sb
            .store()
            .list("wgpolicyk8s.io/v1alpha2", kind, None)
            .unwrap()
        {
            let uid = rep["scope"]["uid"].as_str().unwrap_or("").to_string();
            assert_eq!(
                rep["metadata"]["name"].as_str(),
                Some(uid.as_str()),
                "a report is named by its resource's uid"
            );
            for r in rep["results"].as_array().into_iter().flatten() {
                let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
                rows.insert((uid.clone(), s("policy"), s("rule"), s("result")));
            }
        }
    }
    rows
}

fn ephemeral_count(sb: &Sandbox) -> usize {
    ["EphemeralReport", "ClusterEphemeralReport"]
        .iter()
        .map(|k| {
            sb.store()
                .list("reports.kyverno.io/v1", k, None)
                .unwrap()
                .len()
        })
        .sum()
}

/// Waits until the reports hold exactly `want`; panics with the difference.
async fn converge(sb: &Sandbox, want: &BTreeSet<Row>, bound: Duration, what: &str) {
    let start = Instant::now();
    loop {
        let got = reported(sb);
        if &got == want {
            return;
        }
        if start.elapsed() > bound {
            let missing: Vec<_> = want.difference(&got).take(5).collect();
            let extra: Vec<_> = got.difference(want).take(5).collect();
            panic!(
                "{what}: reports did not converge within {bound:?}: {} rows wanted, {} reported; missing (first 5) {missing:?}; extra (first 5) {extra:?}",
                want.len(),
                got.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod(name: &str, image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": image}]}})
}

/// Issue 12's convergence test: 2,000 pods and 200 deployments; the
/// reports equal `leash apply --cluster`; then resources and policies
/// change and the reports follow (a new violating pod's report within 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reports_converge_to_apply_and_follow_changes() {
    let sb = start_sandbox("pods=2000,deployments.apps=200").await;
    sb.store()
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "unmatched", "namespace": "default"}}))
        .unwrap();
    let url = sb.url();
    let mut server = serve(&url, &[]);
    let want = tokio::task::block_in_place(|| expected(&url));
    assert!(want.len() > 2200, "apply computed {} results", want.len());
    assert!(want.iter().any(|r| r.3 == "fail") && want.iter().any(|r| r.3 == "pass"));
    let t0 = Instant::now();
    converge(&sb, &want, Duration::from_secs(120), "first scan").await;
    eprintln!(
        "first scan converged {:?} after apply finished",
        t0.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ephemeral_count(&sb),
        0,
        "every ephemeral report was aggregated and deleted"
    );
    // README: a resource nothing matches has no report. The namespaces and
    // a ConfigMap (kinds no policy matches) have none; every report is of
    // a resource apply has results for, and holds results.
    let matched: BTreeSet<&str> = want.iter().map(|r| r.0.as_str()).collect();
    for kind in ["PolicyReport", "ClusterPolicyReport"] {
        for rep in sb
            .store()
            .list("wgpolicyk8s.io/v1alpha2", kind, None)
            .unwrap()
        {
            let scope = &rep["scope"];
            assert!(
                matched.contains(scope["uid"].as_str().unwrap_or("")),
                "a report of a resource nothing matches: {scope}"
            );
            assert!(
                rep["results"].as_array().is_some_and(|r| !r.is_empty()),
                "an empty report: {scope}"
            );
        }
    }

    // A new violating pod: its report follows the watch event, not the
    // hourly rescan (a hang guard of 15 s: a loaded CI machine once took
    // more than 2 s).
    let created = sb.store().create(pod("bad", "nginx:latest")).unwrap();
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    let start = Instant::now();
    loop {
        let fails = reported(&sb)
            .iter()
            .any(|r| r.0 == uid && r.1 == "disallow-latest-tag" && r.3 == "fail");
        if fails {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no report of the new violating pod within 15 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Fixed: the fail turns into a pass.
    let mut fixed = sb.store().get("v1", "Pod", Some("default"), "bad").unwrap();
    fixed["spec"]["containers"][0]["image"] = json!("nginx:1.27");
    sb.store().update(fixed).unwrap();
    // Deleted: its report goes (no garbage collector in the sandbox: leash deletes it).
    let gone = sb.store().list("v1", "Pod", Some("ns-0001")).unwrap()[0].clone();
    let gone_uid = gone["metadata"]["uid"].as_str().unwrap().to_string();
    sb.store()
        .delete(
            "v1",
            "Pod",
            gone["metadata"]["namespace"].as_str(),
            gone["metadata"]["name"].as_str().unwrap(),
        )
        .unwrap();
    // A policy deleted: its results go from every report.
    sb.store()
        .delete("kyverno.io/v1", "ClusterPolicy", None, "require-labels")
        .unwrap();
    // What apply computes now, without the deleted policy.
    let files: Vec<PathBuf> = policy_files()
        .into_iter()
        .filter(|f| !f.ends_with("require-labels.yaml"))
        .collect();
    let want2 = tokio::task::block_in_place(|| expected_with(&url, &files));
    assert!(want2.iter().any(|r| r.0 == uid), "apply sees the new pod");
    assert!(
        !want2
            .iter()
            .any(|r| r.0 == gone_uid || r.1 == "require-labels")
    );
    // A hang bound: the rescan of 2,200 resources shares 2 cores with the
    // rest of the suite.
    converge(&sb, &want2, Duration::from_secs(120), "after the changes").await;

    let status = sigterm_and_wait(&mut server);
    assert!(status.success(), "leash serve exited with {status}");
    sb.shutdown().await.unwrap();
}

/// Under 10% 500s, 5% 429s, connection resets and watches cut short, and after `kill -9`
/// mid-scan and a restart: the same reports, one per resource, no
/// ephemeral report left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reports_converge_under_faults_and_after_kill_9() {
    let sb = start_sandbox("pods=300,deployments.apps=30").await;
    let url = sb.url();
    let want = tokio::task::block_in_place(|| expected(&url));
    sb.set_faults(Faults {
        fail_rate: 0.10,
        throttle_rate: 0.05,
        retry_after_secs: 0,
        reset_rate: 0.02,
        // Watches cut short too: each ends within 2 s, and after any event at 1%.
        watch_cut_after: Some(Duration::from_secs(2)),
        watch_cut_rate: 0.01,
        ..Faults::default()
    });
    let mut first = serve(&url, &[]);
    // Mid-scan: some reports written, not all.
    let start = Instant::now();
    while reported(&sb).is_empty() {
        assert!(start.elapsed() < BOUND, "no report at all under faults");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    // A small breaker: 330 resources through room for 50 ephemeral reports
    // only converge if every aggregated report gives its room back.
    let mut second = serve(&url, &["--max-ephemeral-reports", "50"]);
    converge(
        &sb,
        &want,
        Duration::from_secs(120),
        "under faults after kill -9",
    )
    .await;
    assert!(sb.watches_cut() > 0, "the faults cut no watch");
    sb.set_faults(Faults::default());
    let start = Instant::now();
    while ephemeral_count(&sb) > 0 {
        assert!(
            start.elapsed() < BOUND,
            "{} ephemeral reports left behind",
            ephemeral_count(&sb)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reports = sb
        .store()
        .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", None)
        .unwrap();
    let uids: BTreeSet<&str> = reports
        .iter()
        .filter_map(|r| r["scope"]["uid"].as_str())
        .collect();
    assert_eq!(uids.len(), reports.len(), "one report per resource");
    let status = sigterm_and_wait(&mut second);
    assert!(status.success(), "leash serve exited with {status}");
    sb.shutdown().await.unwrap();
}

/// `leash serve --sandbox`: the demo starts with its CRDs and example
/// policies, reports appear, /healthz, /readyz and /metrics answer, and
/// SIGTERM exits 0.
#[test]
fn serve_sandbox_demo_health_metrics_and_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kc");
    let child = leash()
        .args([
            "serve",
            "--sandbox=pods=20",
            "--admission-listen",
            "127.0.0.1:0",
            "--health",
            "127.0.0.1:0",
            "--metrics",
            "127.0.0.1:0",
            "--sandbox-kubeconfig",
        ])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run leash serve");
    with_stderr_lines(child, |guard, rx| {
        let (mut health, mut metrics) = (None, None);
        let start = Instant::now();
        while health.is_none() || metrics.is_none() {
            let line = rx
                .recv_timeout(BOUND)
                .expect("serve announces its endpoints");
            let addr = |l: &str| {
                l.split("http://")
                    .nth(1)
                    .and_then(|r| r.split('/').next())
                    .map(str::to_string)
            };
            if line.contains("health on") {
                health = addr(&line);
            } else if line.contains("metrics on") {
                metrics = addr(&line);
            }
            assert!(start.elapsed() < BOUND);
        }
        let (health, metrics) = (health.unwrap(), metrics.unwrap());
        assert_eq!(http_get(&health, "/healthz").0, 200);
        let start = Instant::now();
        while http_get(&health, "/readyz").0 != 200 {
            assert!(
                start.elapsed() < BOUND,
                "/readyz never ready: {:?}",
                http_get(&health, "/readyz")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let start = Instant::now();
        loop {
            let (code, body) = http_get(&metrics, "/metrics");
            assert_eq!(code, 200);
            let written = body
                .lines()
                .find(|l| l.starts_with("leash_policy_reports_written_total "))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                .unwrap_or(0.0);
            if written >= 20.0 && body.lines().any(|l| l == "leash_ephemeral_reports 0") {
                assert!(body.contains("leash_leader 1"), "{body}");
                assert!(body.contains("leash_policies 3"), "{body}");
                // README, `--metrics`: the families it lists (counters
                // carry `_total` in the text format).
                for family in [
                    "leash_resources_scanned_total",
                    "leash_evaluation_seconds_bucket",
                    "leash_scan_queue_depth",
                    "leash_aggregate_queue_depth",
                    "leash_audit_queue_depth",
                    "leash_policy_reports_written_total",
                    "leash_api_errors_total",
                    "leash_breaker_waits_total",
                    "leash_admission_review_duration_seconds_bucket",
                    "leash_audit_results_lost_total",
                ] {
                    assert!(
                        body.lines().any(|l| l.starts_with(family)),
                        "no {family} in:\n{body}"
                    );
                }
                break;
            }
            assert!(start.elapsed() < BOUND, "no reports written: {body}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let kc = std::fs::read_to_string(&kubeconfig).unwrap();
        assert!(kc.contains("server: http://127.0.0.1:"), "{kc}");
        // README, the demo: the webhook registered itself in the sandbox
        // (ready implies it), pointing at the admission listener.
        let sandbox = kc
            .split("server: http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap()
            .trim_end_matches('/')
            .to_string();
        let (code, body) = http_get(
            &sandbox,
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/leash-validating-webhook-cfg",
        );
        assert_eq!(code, 200, "{body}");
        let vwc: serde_json::Value = serde_json::from_str(&body).unwrap();
        let hooks = vwc["webhooks"].as_array().cloned().unwrap_or_default();
        assert!(!hooks.is_empty(), "{vwc}");
        for hook in &hooks {
            let url = hook["clientConfig"]["url"].as_str().unwrap_or_default();
            assert!(url.starts_with("https://127.0.0.1:"), "{hook}");
            assert!(hook["clientConfig"]["caBundle"].is_string(), "{hook}");
        }
        let status = sigterm_and_wait(guard);
        assert!(status.success(), "{status}");
    });
}

/// Bad flags exit 2 naming the problem.
#[test]
fn serve_rejects_bad_flags() {
    for (args, want) in [
        (&["--components", "nope"][..], "unknown component \"nope\""),
        (
            &["--background-scan-interval", "0s"][..],
            "--background-scan-interval must be positive",
        ),
        (
            &["--max-ephemeral-reports", "0"][..],
            "--max-ephemeral-reports must be at least 1",
        ),
        (&["--server", "not a url"][..], "invalid --server URL"),
    ] {
        let out = leash().arg("serve").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// Issue 38: an address or a TLS file `serve` cannot use is a usage error
/// (exit 2) naming the flag to fix and the OS's reason: a missing
/// `--tls-cert` was reported as `--admission-listen: ...`, and a taken port
/// without "Address already in use".
#[test]
fn serve_names_the_flag_of_an_unusable_address_or_file() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such.pem");
    let missing = missing.to_str().unwrap();
    let key = dir.path().join("key.pem");
    std::fs::write(&key, "not a key").unwrap();
    let key = key.to_str().unwrap();
    let free = "127.0.0.1:0";
    for (args, want) in [
        (
            &["--admission-listen", &taken][..],
            vec![
                format!("--admission-listen {taken}: cannot listen"),
                "Address already in use".into(),
            ],
        ),
        (
            &["--admission-listen", free, "--health", &taken],
            vec![
                format!("--health {taken}: cannot listen"),
                "Address already in use".into(),
            ],
        ),
        (
            &["--admission-listen", free, "--metrics", &taken],
            vec![
                format!("--metrics {taken}: cannot listen"),
                "Address already in use".into(),
            ],
        ),
        (
            &[
                "--admission-listen",
                free,
                "--tls-cert",
                missing,
                "--tls-key",
                key,
            ],
            vec![
                format!("--tls-cert: reading TLS certificate from {missing}"),
                "No such file or directory".into(),
            ],
        ),
    ] {
        let mut serve = leash();
        serve.args(["serve", "--sandbox"]).args(args);
        let out = crate::support::output_within(serve);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for want in want {
            assert!(err.contains(&want), "{args:?}: {want:?} in {err}");
        }
        assert!(
            !err.contains("--admission-listen: reading"),
            "{args:?}: {err}"
        );
    }
}

/// README, `leash serve` reports: the background scan evaluates every
/// `--background-scan-interval` as well as on change. With a 1 s interval
/// and nothing changing, the count of scanned resources grows by at least
/// one more full scan.
#[test]
fn the_background_scan_runs_again_every_interval() {
    let metrics = format!("127.0.0.1:{}", crate::support::free_port());
    let child = leash()
        .args(["serve", "--sandbox=pods=5", "--components", "reports"])
        .args(["--background-scan-interval", "1s", "--metrics", &metrics])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run leash serve");
    let mut guard = ChildGuard(child);
    let scanned = || -> Option<f64> {
        // Not listening yet: no figure.
        std::net::TcpStream::connect(&metrics).ok()?;
        let (code, body) = http_get(&metrics, "/metrics");
        (code == 200).then_some(())?;
        body.lines()
            .find(|l| l.starts_with("leash_resources_scanned_total "))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let wait_for = |what: &str, ok: &dyn Fn(f64) -> bool| -> f64 {
        let start = Instant::now();
        loop {
            if let Some(n) = scanned().filter(|n| ok(*n)) {
                return n;
            }
            assert!(start.elapsed() < BOUND, "{what}: {:?}", scanned());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let first = wait_for("no first scan", &|n| n > 0.0);
    wait_for("no rescan without changes", &|n| n >= 2.0 * first);
    let status = sigterm_and_wait(&mut guard);
    assert!(status.success(), "{status:?}");
}

/// The cleanup pass reads the policy reports page by page (500 a page)
/// and judges every page: 1,100 reports of pods that do not exist, left
/// by an earlier run, are all removed, and the live pod keeps its report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_reports_are_cleaned_up_across_pages() {
    let mut objects =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")]).unwrap();
    objects.extend(leash_sandbox::manifests::load_manifests(&policy_files()).unwrap());
    objects.push(pod("alive", "nginx:1.27"));
    for i in 0..1100 {
        let uid = format!("00000000-0000-0000-0000-{i:012}");
        objects.push(json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
            "metadata": {"name": uid, "namespace": "default"},
            "scope": {"apiVersion": "v1", "kind": "Pod", "namespace": "default",
                      "name": format!("ghost-{i}"), "uid": uid},
            "summary": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0},
            "results": [{"policy": "disallow-latest-tag", "rule": "require-image-tag",
                         "result": "pass", "source": "kyverno", "scored": true}]
        }));
    }
    let sb = Sandbox::start(SandboxConfig {
        objects,
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let mut guard = serve(&sb.url(), &[]);
    let reports = || {
        sb.store()
            .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", Some("default"))
            .unwrap()
    };
    let start = Instant::now();
    loop {
        let left = reports();
        let ghosts = left
            .iter()
            .filter(|r| {
                r["scope"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("ghost-"))
            })
            .count();
        let alive = left.iter().any(|r| r["scope"]["name"] == "alive");
        if ghosts == 0 && alive {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "{ghosts} stale reports left, the live pod's report {}",
            if alive { "written" } else { "missing" }
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = sigterm_and_wait(&mut guard);
    assert!(status.success(), "{status:?}");
    sb.shutdown().await.unwrap();
}

/// README, `leash serve`: what it cannot use is logged, naming it. A
/// policy that does not compile, a `background: true` policy that reads the
/// request's user (left out of the scan with the reason) and a Kyverno
/// ConfigMap that does not parse each get their log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_logs_what_it_cannot_use() {
    let mut objects =
        leash_sandbox::manifests::load_manifests(&[repo().join("deploy/crds")]).unwrap();
    objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}));
    objects.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kyverno", "namespace": "kyverno"},
        // A filter without its closing bracket (a non-string value, the
        // other way to break it, kube-apiserver refuses to store).
        "data": {"resourceFilters": "[Pod,kube-system,*"}}));
    objects.push(
        json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "broken"},
        "spec": {"rules": [{"name": "r",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"deny": {"conditions": {"any": [
                {"key": "a", "operator": "Resembles", "value": "b"}]}}}}]}}),
    );
    objects.push(json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
        "metadata": {"name": "who"},
        "spec": {"background": true, "rules": [{"name": "r",
            "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
            "validate": {"message": "m", "deny": {"conditions": {"any": [
                {"key": "{{ request.userInfo.username }}", "operator": "Equals", "value": "x"}]}}}}]}}));
    let sb = Sandbox::start(SandboxConfig {
        objects,
        ..SandboxConfig::default()
    })
    .await
    .unwrap();
    let child = leash()
        .args(["serve", "--server", &sb.url(), "--components", "reports"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run leash serve");
    let mut want = vec![
        "policy ClusterPolicy broken is not used:",
        "policy who is not evaluated in background, only at admission:",
        "ConfigMap kyverno/kyverno: the update is not used",
    ];
    tokio::task::block_in_place(|| {
        with_stderr_lines(child, |guard, rx| {
            let start = Instant::now();
            let mut seen = Vec::new();
            while !want.is_empty() {
                assert!(
                    start.elapsed() < BOUND,
                    "not logged: {want:?}; log:\n{}",
                    seen.join("\n")
                );
                let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) else {
                    continue;
                };
                want.retain(|w| !line.contains(w));
                seen.push(line);
            }
            // Logged once, though the first list hands the object over twice.
            let rejected = seen
                .iter()
                .filter(|l| l.contains("ConfigMap kyverno/kyverno: the update is not used"))
                .count();
            assert_eq!(rejected, 1, "{}", seen.join("\n"));
            assert!(sigterm_and_wait(guard).success());
        });
    });
    sb.shutdown().await.unwrap();
}

/// Runs `body` with `child` (its stderr piped) guarded and its stderr's
/// lines arriving on a channel. The guard is dropped (the child killed)
/// before the reader is joined, also when `body` panics, so a failed
/// assertion cannot leave the test waiting on a pipe that never closes.
fn with_stderr_lines<T>(
    mut child: std::process::Child,
    body: impl FnOnce(&mut ChildGuard, &std::sync::mpsc::Receiver<String>) -> T,
) -> T {
    use std::io::BufRead as _;
    let stderr = child.stderr.take().expect("piped stderr");
    let guard = ChildGuard(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        let mut guard = guard;
        body(&mut guard, &rx)
    })
}
