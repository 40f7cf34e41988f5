//! kubectl's imperative commands against the sandbox (issue 11): `create
//! configmap|secret generic|namespace|serviceaccount|deployment|job|cronjob`,
//! `run` and `expose` send protobuf bodies; `scale` reads and writes the
//! `scale` subresource. Each command's object is then read back as JSON and
//! listed as a Table, whose columns are compared with what kube-apiserver
//! prints for the same freshly created object.

use leash_sandbox::generate::GenerateSpec;
use serde_json::Value;

use crate::kubectl::{Kubectl, block, sandbox_with};
use crate::kubectl_table::assert_table;

const NS: &str = "ns-0000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_imperative_commands_create_what_a_cluster_would() {
    let sandbox = sandbox_with(&GenerateSpec {
        namespaces: 1,
        ..GenerateSpec::default()
    })
    .await;
    let Some(kubectl) = Kubectl::find(&sandbox.url()) else {
        sandbox.shutdown().await.unwrap();
        return;
    };
    let ok = |args: &[&str]| block(|| kubectl.ok(args));
    let json = |kind: &str, name: &str| -> Value {
        let out = block(|| kubectl.ok(&["get", kind, name, "-n", NS, "-o", "json"]));
        serde_json::from_str(&out).expect("kubectl -o json prints JSON")
    };

    // Every command answers as it does against a real cluster.
    for (args, said) in [
        (
            &[
                "create",
                "configmap",
                "settings",
                "--from-literal=color=blue",
                "--from-literal=size=3",
            ][..],
            "configmap/settings created",
        ),
        (
            &[
                "create",
                "secret",
                "generic",
                "creds",
                "--from-literal=password=hunter2",
            ],
            "secret/creds created",
        ),
        (
            &["create", "serviceaccount", "bot"],
            "serviceaccount/bot created",
        ),
        (
            &[
                "create",
                "deployment",
                "web",
                "--image=nginx:1.27",
                "--replicas=2",
                "--port=80",
            ],
            "deployment.apps/web created",
        ),
        (
            &[
                "create",
                "job",
                "once",
                "--image=busybox:1.36",
                "--",
                "echo",
                "hi",
            ],
            "job.batch/once created",
        ),
        (
            &[
                "create",
                "cronjob",
                "tick",
                "--image=busybox:1.36",
                "--schedule=*/5 * * * *",
            ],
            "cronjob.batch/tick created",
        ),
        (
            &[
                "run",
                "solo",
                "--image=nginx:1.27",
                "--port=80",
                "--env=MODE=demo",
                "--labels=tier=front",
            ],
            "pod/solo created",
        ),
        (
            &[
                "expose",
                "deployment",
                "web",
                "--port=80",
                "--target-port=8080",
            ],
            "service/web exposed",
        ),
        (
            &["create", "service", "nodeport", "edge", "--tcp=80:8080"],
            "service/edge created",
        ),
    ] {
        // `-n` first: `create job` ends with the command after `--`.
        let mut with_ns = vec!["-n", NS];
        with_ns.extend(args);
        let out = ok(&with_ns);
        assert_eq!(out.trim(), said, "kubectl {args:?}");
    }
    assert_eq!(
        ok(&["create", "namespace", "team-a"]).trim(),
        "namespace/team-a created"
    );

    // What the protobuf bodies held arrives whole.
    let cm = json("configmap", "settings");
    assert_eq!(
        cm["data"],
        serde_json::json!({"color": "blue", "size": "3"})
    );
    let secret = json("secret", "creds");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(
        secret["data"]["password"], "aHVudGVyMg==",
        "bytes as base64"
    );
    let deploy = json("deployment", "web");
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_eq!(deploy["spec"]["selector"]["matchLabels"]["app"], "web");
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.27");
    assert_eq!(container["ports"][0]["containerPort"], 80);
    let job = json("job", "once");
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"], serde_json::json!(["echo", "hi"]));
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    let cron = json("cronjob", "tick");
    assert_eq!(cron["spec"]["schedule"], "*/5 * * * *");
    assert_eq!(
        cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox:1.36"
    );
    let pod = json("pod", "solo");
    assert_eq!(pod["metadata"]["labels"]["tier"], "front");
    assert_eq!(
        pod["spec"]["containers"][0]["env"][0],
        serde_json::json!({"name": "MODE", "value": "demo"})
    );
    let svc = json("service", "web");
    assert_eq!(svc["spec"]["selector"]["app"], "web");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    let cluster_ip = svc["spec"]["clusterIP"]
        .as_str()
        .expect("a cluster IP is allocated");
    assert!(cluster_ip.starts_with("10."), "{cluster_ip}");

    // `kubectl get` prints the columns a cluster prints for these new objects
    // (`*` is an age of seconds).
    let get = |args: &[&str]| {
        let mut with_ns = args.to_vec();
        with_ns.extend(["-n", NS]);
        ok(&with_ns)
    };
    assert_table(
        &get(&["get", "configmap", "settings"]),
        &["NAME | DATA | AGE", "settings | 2 | *"],
    );
    assert_table(
        &get(&["get", "secret", "creds"]),
        &["NAME | TYPE | DATA | AGE", "creds | Opaque | 1 | *"],
    );
    assert_table(
        &get(&["get", "serviceaccount", "bot"]),
        &["NAME | SECRETS | AGE", "bot | 0 | *"],
    );
    assert_table(
        &ok(&["get", "namespace", "team-a"]),
        &["NAME | STATUS | AGE", "team-a | Active | *"],
    );
    assert_table(
        &get(&["get", "deployment", "web", "-o", "wide"]),
        &[
            "NAME | READY | UP-TO-DATE | AVAILABLE | AGE | CONTAINERS | IMAGES | SELECTOR",
            "web | 0/2 | 0 | 0 | * | nginx | nginx:1.27 | app=web",
        ],
    );
    // A new Job has no start time yet: its DURATION cell is empty.
    assert_table(
        &get(&["get", "job", "once"]),
        &[
            "NAME | STATUS | COMPLETIONS | DURATION | AGE",
            "once | Running | 0/1 | *",
        ],
    );
    assert_table(
        &get(&["get", "cronjob", "tick"]),
        &[
            "NAME | SCHEDULE | TIMEZONE | SUSPEND | ACTIVE | LAST SCHEDULE | AGE",
            "tick | */5 * * * * | <none> | False | 0 | <none> | *",
        ],
    );
    assert_table(
        &get(&["get", "pod", "solo", "-o", "wide"]),
        &[
            "NAME | READY | STATUS | RESTARTS | AGE | IP | NODE | NOMINATED NODE | READINESS GATES",
            "solo | 0/1 | Pending | 0 | * | <none> | <none> | <none> | <none>",
        ],
    );
    assert_table(
        &get(&["get", "service", "web"]),
        &[
            "NAME | TYPE | CLUSTER-IP | EXTERNAL-IP | PORT(S) | AGE",
            &format!("web | ClusterIP | {cluster_ip} | <none> | 80/TCP | *"),
        ],
    );

    // A NodePort Service gets a node port from the API server's range.
    let edge = json("service", "edge");
    let node_port = edge["spec"]["ports"][0]["nodePort"]
        .as_u64()
        .expect("a node port");
    assert!((30_000..=32_767).contains(&node_port), "{node_port}");
    assert_table(
        &get(&["get", "service", "edge"]),
        &[
            "NAME | TYPE | CLUSTER-IP | EXTERNAL-IP | PORT(S) | AGE",
            &format!(
                "edge | NodePort | {} | <none> | 80:{node_port}/TCP | *",
                edge["spec"]["clusterIP"].as_str().unwrap()
            ),
        ],
    );

    // `kubectl scale` reads the Scale, checks its preconditions, and writes it back.
    assert_eq!(
        get(&["scale", "deployment", "web", "--replicas=3"]).trim(),
        "deployment.apps/web scaled"
    );
    assert_eq!(json("deployment", "web")["spec"]["replicas"], 3);
    assert_eq!(
        get(&[
            "scale",
            "deployment",
            "web",
            "--current-replicas=3",
            "--replicas=1"
        ])
        .trim(),
        "deployment.apps/web scaled"
    );
    let refused = block(|| {
        kubectl.run(&[
            "scale",
            "deployment",
            "web",
            "--current-replicas=5",
            "--replicas=4",
            "-n",
            NS,
        ])
    });
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("Expected replicas to be 5, was 1"),
        "{stderr}"
    );
    assert_table(
        &get(&["get", "deployment", "web"]),
        &[
            "NAME | READY | UP-TO-DATE | AVAILABLE | AGE",
            "web | 0/1 | 0 | 0 | *",
        ],
    );
    sandbox.shutdown().await.expect("shutdown");
}
