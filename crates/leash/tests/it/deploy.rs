//! deploy/leash.yaml: kubectl applies every object of it, and the real
//! `leash serve --leader-elect` needs no permission beyond the ClusterRole and
//! Role it defines: each request leash makes, as the sandbox's request log
//! records it (RBAC's view: verb, group, resource, subresource, namespace), is
//! checked against the rules kubectl stored.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leash_sandbox::{ApiRequest, Sandbox, SandboxConfig};
use serde_json::{Value, json};

use crate::support::kubectl_installed;
use crate::support::{BOUND, ChildGuard, leash, send_signal, wait_exit};

const RBAC: &str = "rbac.authorization.k8s.io/v1";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The cluster leash is deployed into: leash's CRDs, the example policies, and
/// a few pods and deployments (some violating the policies).
fn cluster_objects() -> Vec<Value> {
    let dir = deploy_dir();
    let mut objects = leash_sandbox::manifests::load_manifests(&[
        dir.join("crds"),
        dir.join("examples/policies"),
    ])
    .expect("deploy/crds and deploy/examples/policies load");
    let labels = |name: &str| json!({"app.kubernetes.io/name": name});
    for ns in ["shop", "blog"] {
        // Labelled for the example generate policy (its downstream ConfigMap).
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {"leash.dev/defaults": "true"}}}));
        for (name, image, labelled) in [
            ("api", "nginx:1.27", true),
            ("cache", "redis:latest", false),
        ] {
            let meta_labels = if labelled { labels(name) } else { json!({}) };
            objects.push(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": meta_labels},
                "spec": {"containers": [{"name": name, "image": image}]},
            }));
        }
        objects.push(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:latest"}]},
                },
            },
        }));
    }
    objects
}

/// One RBAC rule of a stored Role or ClusterRole.
#[derive(Debug)]
struct Rule {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    /// Rules with resourceNames are never counted as granting (the log has no names).
    has_names: bool,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn rules_of(role: &Value) -> Vec<Rule> {
    let rules: Vec<Rule> = role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| Rule {
            verbs: strings(&r["verbs"]),
            groups: strings(&r["apiGroups"]),
            resources: strings(&r["resources"]),
            has_names: !strings(&r["resourceNames"]).is_empty(),
        })
        .collect();
    for rule in &rules {
        let all = rule.verbs.iter().chain(&rule.groups).chain(&rule.resources);
        let wild: Vec<_> = all.filter(|s| s.contains('*')).collect();
        assert!(
            wild.is_empty(),
            "{}: wildcards {wild:?} in {rule:?}",
            role["metadata"]["name"]
        );
    }
    rules
}

fn grants(rules: &[Rule], verb: &str, group: &str, resource: &str, sub: &str) -> bool {
    let resource = if sub.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}/{sub}")
    };
    rules.iter().any(|r| {
        !r.has_names
            && r.verbs.iter().any(|v| v == verb)
            && r.groups.iter().any(|g| g == group)
            && r.resources.contains(&resource)
    })
}

/// Non-resource paths every authenticated user may GET through the built-in
/// system:discovery and system:public-info-viewer ClusterRoles.
fn discovery_path(path: &str) -> bool {
    let under = |root: &str| path == root || path.starts_with(&format!("{root}/"));
    [
        "/api", "/apis", "/openapi", "/version", "/healthz", "/livez", "/readyz",
    ]
    .into_iter()
    .any(under)
}

/// Asserts `subject` (kind, namespace, name) is bound to the role.
fn assert_bound(binding: &Value, role_kind: &str) {
    assert_eq!(binding["roleRef"]["kind"], role_kind, "{binding}");
    assert_eq!(binding["roleRef"]["name"], "leash", "{binding}");
    let subjects = binding["subjects"].as_array().cloned().unwrap_or_default();
    assert!(
        subjects.iter().any(|s| s["kind"] == "ServiceAccount"
            && s["name"] == "leash"
            && s["namespace"] == "kyverno"),
        "{binding}"
    );
}

#[test]
fn leash_serve_needs_only_what_deploy_leash_yaml_grants() {
    if !kubectl_installed() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sandbox: Sandbox = runtime
        .block_on(Sandbox::start(SandboxConfig {
            objects: cluster_objects(),
            ..SandboxConfig::default()
        }))
        .expect("sandbox starts");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sandbox.kubeconfig_yaml()).unwrap();

    // (b) kubectl accepts every object of the manifest.
    let manifest = deploy_dir().join("leash.yaml");
    let applied = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .arg("--request-timeout=30s")
        .arg("apply")
        .arg("-f")
        .arg(&manifest)
        .env("HOME", dir.path())
        .env_remove("KUBECONFIG")
        .output()
        .expect("run kubectl");
    let out = String::from_utf8_lossy(&applied.stdout);
    assert!(
        applied.status.success(),
        "kubectl apply -f deploy/leash.yaml: {}{out}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let want = leash_sandbox::manifests::load_manifests(std::slice::from_ref(&manifest))
        .expect("deploy/leash.yaml parses");
    let store = sandbox.store();
    for obj in &want {
        let (api_version, kind) = (
            obj["apiVersion"].as_str().unwrap(),
            obj["kind"].as_str().unwrap(),
        );
        let name = obj["metadata"]["name"].as_str().unwrap();
        let ns = obj["metadata"]["namespace"].as_str();
        store
            .get(api_version, kind, ns, name)
            .unwrap_or_else(|e| panic!("{kind} {name} not stored after apply ({e}): {out}"));
    }
    let cluster_role = store.get(RBAC, "ClusterRole", None, "leash").unwrap();
    let role = store.get(RBAC, "Role", Some("kyverno"), "leash").unwrap();
    assert_bound(
        &store
            .get(RBAC, "ClusterRoleBinding", None, "leash")
            .unwrap(),
        "ClusterRole",
    );
    assert_bound(
        &store
            .get(RBAC, "RoleBinding", Some("kyverno"), "leash")
            .unwrap(),
        "Role",
    );
    let (cluster_rules, kyverno_rules) = (rules_of(&cluster_role), rules_of(&role));
    let deployment = store
        .get("apps/v1", "Deployment", Some("kyverno"), "leash")
        .unwrap();
    let args = strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]);
    for flag in [
        "serve",
        "--leader-elect",
        "--components=reports,admission,background",
        "--webhook-service=kyverno/leash-svc:443",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} not in {args:?}");
    }
    // README: two replicas under leader election, with probes, and the
    // webhook Service that `--webhook-service` names.
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let port_of = |name: &str| {
        container["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == name)
            .and_then(|p| p["containerPort"].as_i64())
            .unwrap_or_else(|| panic!("no container port {name}: {container}"))
    };
    let flag_port = |flag: &str| -> i64 {
        args.iter()
            .find_map(|a| a.strip_prefix(flag))
            .and_then(|addr| addr.rsplit(':').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
    };
    assert_eq!(port_of("health"), flag_port("--health="));
    assert_eq!(port_of("webhook"), flag_port("--admission-listen="));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(container[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(container[probe]["httpGet"]["port"], "health", "{probe}");
    }
    let service = store
        .get("v1", "Service", Some("kyverno"), "leash-svc")
        .expect("the webhook Service");
    let https = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["port"] == 443)
        .expect("port 443, as --webhook-service names it");
    assert_eq!(https["targetPort"], "webhook");
    assert_eq!(
        service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"],
        "the Service selects the Deployment's pods"
    );
    // Kyverno's ConfigMap, as a Kyverno installation leaves it.
    store
        .create(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kyverno", "namespace": "kyverno"},
            "data": {"resourceFilters": "[Event,*,*][*/*,kube-system,*][*/*,kube-public,*][*/*,kube-node-lease,*][*/*,kyverno,*]"},
        }))
        .unwrap();

    // (c) the real leash serve, until the reports are written.
    sandbox.clear_requests();
    let log_path = dir.path().join("leash.stderr");
    let mut serve = ChildGuard(
        leash()
            .args(["serve", "--server", &sandbox.url(), "--leader-elect"])
            .args([
                "--lease-namespace",
                "kyverno",
                "--lease-identity",
                "deploy-test",
            ])
            .args([
                "--components",
                "reports,admission,background",
                "--report-cleanup-interval",
                "1s",
            ])
            .args([
                "--admission-listen",
                "127.0.0.1:0",
                "--webhook-service",
                "kyverno/leash-svc:443",
            ])
            .args(["--health", "127.0.0.1:0", "--metrics", "127.0.0.1:0"])
            .env("LEASH_LOG", "info")
            .stdout(Stdio::null())
            .stderr(File::create(&log_path).unwrap())
            .spawn()
            .expect("run leash serve"),
    );
    let leash_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // Every pod and deployment of shop and blog gets its PolicyReport.
    let resources: BTreeSet<(String, String)> = ["shop", "blog"]
        .into_iter()
        .flat_map(|ns| {
            ["Pod/api", "Pod/cache", "Deployment/web"].map(|r| (ns.to_string(), r.to_string()))
        })
        .collect();
    let start = Instant::now();
    loop {
        let reported: BTreeSet<(String, String)> = store
            .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", None)
            .unwrap_or_default()
            .iter()
            .filter_map(|r| {
                let s = &r["scope"];
                Some((
                    s["namespace"].as_str()?.to_string(),
                    format!("{}/{}", s["kind"].as_str()?, s["name"].as_str()?),
                ))
            })
            .collect();
        if resources.is_subset(&reported) {
            break;
        }
        if let Ok(Some(status)) = serve.0.try_wait() {
            panic!("leash serve exited early ({status}):\n{}", leash_log());
        }
        assert!(
            start.elapsed() < BOUND,
            "no PolicyReports for {:?} within {BOUND:?}; leash serve said:\n{}",
            resources.difference(&reported).collect::<Vec<_>>(),
            leash_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Writes that make leash update and delete what it wrote: a pod fixed (its
    // report is updated), a pod deleted (its report removed), a lease renewal.
    let lease = |store: &leash_sandbox::Store| {
        store
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                Some("kyverno"),
                "leash-reports",
            )
            .map(|l| l["spec"]["renewTime"].clone())
            .unwrap_or_default()
    };
    let first_renewal = lease(store);
    let mut pod = store.get("v1", "Pod", Some("shop"), "cache").unwrap();
    pod["metadata"]["labels"] = json!({"app.kubernetes.io/name": "cache"});
    store.update(pod).unwrap();
    store.delete("v1", "Pod", Some("blog"), "cache").unwrap();
    let report_of = |ns: &str, name: &str| {
        store
            .list("wgpolicyk8s.io/v1alpha2", "PolicyReport", Some(ns))
            .unwrap_or_default()
            .into_iter()
            .find(|r| r["scope"]["kind"] == "Pod" && r["scope"]["name"] == name)
    };
    let start = Instant::now();
    loop {
        let fixed = report_of("shop", "cache").is_some_and(|r| {
            r["results"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|x| x["policy"] != "require-labels" || x["result"] == "pass")
        });
        let removed = report_of("blog", "cache").is_none();
        let renewed = lease(store) != first_renewal;
        let generated = ["shop", "blog"].iter().all(|ns| {
            store
                .get("v1", "ConfigMap", Some(ns), "namespace-defaults")
                .is_ok()
        });
        if fixed && removed && renewed && generated {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "within {BOUND:?}: report updated {fixed}, report removed {removed}, lease renewed {renewed}, downstreams generated {generated}; leash serve said:\n{}",
            leash_log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    send_signal(&serve.0, "TERM");
    let status = wait_exit(&mut serve.0, BOUND, "leash serve exit after SIGTERM");
    assert!(status.success(), "leash serve: {status}:\n{}", leash_log());

    let requests = sandbox.requests();
    assert_eq!(sandbox.requests_not_recorded(), 0);
    // Shown when the test fails.
    eprintln!("leash serve's requests:");
    for r in &requests {
        eprintln!("  {r:?}");
    }
    let mut not_granted = Vec::new();
    for request in &requests {
        match request {
            ApiRequest::Resource {
                verb,
                group,
                resource,
                subresource,
                namespace,
            } => {
                let granted = grants(&cluster_rules, verb, group, resource, subresource)
                    || (namespace == "kyverno"
                        && grants(&kyverno_rules, verb, group, resource, subresource));
                if !granted {
                    let what = if subresource.is_empty() {
                        resource.clone()
                    } else {
                        format!("{resource}/{subresource}")
                    };
                    let group = if group.is_empty() { "core" } else { group };
                    let ns = if namespace.is_empty() {
                        "(all namespaces)"
                    } else {
                        namespace
                    };
                    not_granted.push(format!("{verb} {group} {what} in {ns}"));
                }
            }
            ApiRequest::NonResource { verb, path } => {
                if !(verb == "get" && discovery_path(path)) {
                    not_granted.push(format!("{verb} {path} (non-resource)"));
                }
            }
            _ => not_granted.push(format!("{request:?} (unknown kind of request)")),
        }
    }
    assert!(
        not_granted.is_empty(),
        "leash serve made requests deploy/leash.yaml does not grant:\n  {}",
        not_granted.join("\n  ")
    );
    // The check saw leash's real work, not an idle process.
    for (verb, group, resource, ns) in [
        ("create", "coordination.k8s.io", "leases", "kyverno"),
        ("create", "wgpolicyk8s.io", "policyreports", "shop"),
        ("update", "wgpolicyk8s.io", "policyreports", "shop"),
        ("delete", "wgpolicyk8s.io", "policyreports", "blog"),
        ("update", "coordination.k8s.io", "leases", "kyverno"),
        ("watch", "kyverno.io", "clusterpolicies", ""),
        ("watch", "", "pods", ""),
        ("watch", "", "configmaps", "kyverno"),
        // The admission component registered its webhook configuration.
        (
            "create",
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            "",
        ),
        (
            "watch",
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "",
        ),
    ] {
        let want = ApiRequest::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: String::new(),
            namespace: ns.into(),
        };
        assert!(requests.contains(&want), "{want:?} not among {requests:#?}");
    }
    runtime.block_on(sandbox.shutdown()).unwrap();
}
