//! The sandbox against kube-apiserver: the same requests to both, the same
//! answers (status code and message). Each case is one the real control
//! plane showed the sandbox got wrong; where they disagree, the sandbox is
//! wrong.

use serde_json::{Value, json};

use crate::cluster::cluster;
use crate::support::SandboxProcess;

/// `(code, message)` of a request; 2xx answers give the body.
async fn send(client: &kube::Client, method: &str, path: &str, body: &Value) -> (u16, String) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(body).unwrap())
        .unwrap();
    match client.request_text(request).await {
        Ok(text) => (200, text),
        Err(kube::Error::Api(status)) => (status.code, status.message.clone()),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

async fn get(client: &kube::Client, path: &str) -> Value {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    serde_json::from_str(&client.request_text(request).await.unwrap()).unwrap()
}

/// A field-error message with its errors in a set (the two servers list
/// several in different orders).
fn errors(message: &str) -> (String, Vec<String>) {
    match message.split_once(" is invalid: ") {
        Some((head, rest)) => {
            let rest = rest.trim_start_matches('[').trim_end_matches(']');
            let mut list: Vec<String> = rest.split(", ").map(str::to_owned).collect();
            list.sort();
            (head.to_owned(), list)
        }
        None => (message.to_owned(), Vec::new()),
    }
}

#[test]
fn the_sandbox_answers_as_kube_apiserver_does() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    let crds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    cluster.install_crds();
    cluster.namespace("parity");
    let sandbox = SandboxProcess::start(&["--data", &crds.display().to_string()]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
        let real = kube::Client::try_from(
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap(),
        )
        .unwrap();
        let fake = kube::Client::try_from(kube::Config::new(sandbox.url.parse().unwrap())).unwrap();
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "parity"}});
        send(&fake, "POST", "/api/v1/namespaces", &ns).await;

        let pods = "/api/v1/namespaces/parity/pods";
        let deployments = "/apis/apps/v1/namespaces/parity/deployments";
        let configmaps = "/api/v1/namespaces/parity/configmaps";
        let reports = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/parity/policyreports";
        let cases: Vec<(&str, &str, String, Value)> = vec![
            ("a Pod with no spec", "POST", pods.into(),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nospec"}})),
            ("a container with no image", "POST", pods.into(),
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "noimage"},
                    "spec": {"containers": [{"name": "a"}]}})),
            ("replicas: \"many\"", "POST", deployments.into(),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "many"},
                    "spec": {"replicas": "many"}})),
            ("a Deployment with no selector", "POST", deployments.into(),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "nosel"},
                    "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}})),
            ("a ConfigMap value that is a number", "POST", configmaps.into(),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "num"}, "data": {"a": 1}})),
            ("a PolicyReport whose results is an object", "POST", reports.into(),
                json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                    "metadata": {"name": "r"}, "results": {"policy": "p"}})),
            ("a custom resource created", "POST", reports.into(),
                json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                    "metadata": {"name": "ok"}, "results": [{"policy": "p", "result": "pass"}]})),
            ("a custom resource replaced without a resourceVersion", "PUT", format!("{reports}/ok"),
                json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                    "metadata": {"name": "ok"}, "results": []})),
        ];
        let mut differences = Vec::new();
        for (what, method, path, body) in &cases {
            let (rc, rm) = send(&real, method, path, body).await;
            let (fc, fm) = send(&fake, method, path, body).await;
            let same = rc == fc && (rc == 200 || errors(&rm) == errors(&fm));
            if !same {
                differences.push(format!(
                    "{what}:\n  kube-apiserver {rc} {rm}\n  sandbox        {fc} {fm}"
                ));
            }
        }
        // Lists: built-in kinds' items without apiVersion and kind, custom
        // resources' with them.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "listed"}});
        for client in [&real, &fake] {
            send(client, "POST", configmaps, &cm).await;
        }
        for path in [configmaps, reports] {
            let typed = |list: &Value| {
                list["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|i| (i.get("apiVersion").is_some(), i.get("kind").is_some()))
                    .collect::<std::collections::BTreeSet<_>>()
            };
            let (r, f) = (typed(&get(&real, path).await), typed(&get(&fake, path).await));
            if r != f || r.is_empty() {
                differences.push(format!(
                    "list {path}: items (apiVersion?, kind?) kube-apiserver {r:?}, sandbox {f:?}"
                ));
            }
        }
        assert!(
            differences.is_empty(),
            "the sandbox answers differently:\n{}",
            differences.join("\n")
        );
    });
    let _ = sandbox.signal_and_wait("TERM");
}
