//! `leash apply --cluster` on the real control plane and on the sandbox,
//! holding the same objects: the same results, line for line.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster::cluster;
use crate::support::{SandboxProcess, leash_piped};

const NAMESPACE: &str = "apply-parity";

/// Pods of every shape the policies below tell apart (compliant,
/// privileged, host namespaces, latest tag, capabilities), a Deployment
/// (whose ReplicaSet and Pods the controller manager makes), a Job and a
/// CronJob: the API server defaults and validates them as it does anyone's.
fn workload() -> String {
    format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: {NAMESPACE}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: restricted, namespace: {NAMESPACE}, labels: {{app.kubernetes.io/name: restricted}}}}
spec:
  securityContext: {{runAsNonRoot: true, seccompProfile: {{type: RuntimeDefault}}}}
  containers:
  - name: app
    image: nginx:1.27
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {{drop: [ALL]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: privileged, namespace: {NAMESPACE}}}
spec:
  hostNetwork: true
  hostPID: true
  containers:
  - name: app
    image: nginx:latest
    securityContext: {{privileged: true, capabilities: {{add: [NET_ADMIN, SYS_TIME]}}}}
    ports: [{{containerPort: 80, hostPort: 80}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: host-path, namespace: {NAMESPACE}}}
spec:
  volumes: [{{name: data, hostPath: {{path: /var/data}}}}]
  containers:
  - name: app
    image: busybox
    volumeMounts: [{{name: data, mountPath: /data}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {NAMESPACE}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        securityContext: {{capabilities: {{add: [NET_RAW]}}}}
---
apiVersion: batch/v1
kind: Job
metadata: {{name: migrate, namespace: {NAMESPACE}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: migrate, image: "busybox:1.36", securityContext: {{runAsUser: 0}}}}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {{name: nightly, namespace: {NAMESPACE}}}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{{name: backup, image: "restic/restic:latest"}}]
"#
    )
}

fn policies() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    vec![
        root.join("bench/policies/pss-classic"),
        root.join("bench/policies/pss-cel"),
        root.join("deploy/examples/policies/disallow-latest-tag.yaml"),
        root.join("deploy/examples/policies/require-labels.yaml"),
    ]
}

/// `leash apply POLICIES --cluster -n apply-parity --detailed-results CONNECTION`: the
/// result lines sorted, and the counts line.
fn apply(connection: &[&str]) -> (Vec<String>, String) {
    let mut args: Vec<String> = policies().iter().map(|p| p.display().to_string()).collect();
    args.extend(
        ["--cluster", "-n", NAMESPACE, "--detailed-results"]
            .iter()
            .chain(connection)
            .map(|s| s.to_string()),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = leash_piped("apply", &args)
        .output()
        .expect("run leash apply");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "leash apply {connection:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut results: Vec<String> = stdout
        .lines()
        .filter(|l| {
            ["PASS:", "FAIL:", "WARN:", "ERROR:", "SKIP:"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_owned)
        .collect();
    results.sort();
    let counts = stdout
        .lines()
        .find(|l| l.starts_with("pass: "))
        .unwrap_or_else(|| panic!("no counts line:\n{stdout}"))
        .to_owned();
    (results, counts)
}

#[test]
fn apply_cluster_gives_the_same_results_on_the_real_control_plane_and_the_sandbox() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    cluster.namespace(NAMESPACE);
    cluster.apply(&workload());
    // The controller manager makes the Deployment's ReplicaSet and Pods and
    // the Job's Pod.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pods = cluster.kubectl_ok(&["get", "pods", "-n", NAMESPACE, "-o", "name"]);
        if pods.lines().count() >= 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the controllers made no pods: {pods}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // The same objects, as the real API server stored them, into a sandbox.
    let dump = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("apply-parity-{}.yaml", std::process::id()));
    let kubeconfig = cluster.kubeconfig.display().to_string();
    // Namespaces first: the sandbox creates --data in file order.
    let mut text = Vec::new();
    let name = format!("metadata.name={NAMESPACE}");
    for (kinds, scope) in [
        ("namespaces", ["--field-selector", name.as_str()]),
        (
            "pods,deployments.apps,replicasets.apps,jobs.batch,cronjobs.batch",
            ["-n", NAMESPACE],
        ),
    ] {
        let out = leash_piped(
            "load",
            &[
                kinds,
                scope[0],
                scope[1],
                "-o",
                "yaml",
                "--progress",
                "never",
                "--kubeconfig",
                &kubeconfig,
            ],
        )
        .output()
        .expect("run leash load");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.extend_from_slice(&out.stdout);
    }
    std::fs::write(&dump, &text).expect("write the dump");
    let sandbox = SandboxProcess::start(&["--data", &dump.display().to_string()]);

    let (real, real_counts) = apply(&["--kubeconfig", &kubeconfig]);
    let (sandboxed, sandbox_counts) = apply(&["--server", &sandbox.url]);
    let _ = sandbox.signal_and_wait("TERM");

    assert!(
        real.iter().filter(|l| l.starts_with("FAIL:")).count() >= 10,
        "the workload violates the policies: {real:#?}"
    );
    assert!(
        real.iter()
            .any(|l| l.starts_with("PASS:") && l.contains("Pod/apply-parity/restricted")),
        "{real:#?}"
    );
    let only_real: Vec<_> = real.iter().filter(|l| !sandboxed.contains(l)).collect();
    let only_sandbox: Vec<_> = sandboxed.iter().filter(|l| !real.contains(l)).collect();
    assert!(
        only_real.is_empty() && only_sandbox.is_empty(),
        "results differ\nonly on the real control plane: {only_real:#?}\nonly on the sandbox: {only_sandbox:#?}"
    );
    assert_eq!(real_counts, sandbox_counts);
}
