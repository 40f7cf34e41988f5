//! `leash load` against kube-apiserver with etcd: real pagination over
//! 20,000+ objects, and continue tokens expired by etcd compaction.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cluster::{Cluster, cluster};
use crate::support::{BOUND, ChildGuard, leash, wait_exit};

const NAMESPACES: usize = 20;
const PER_NAMESPACE: usize = 1_000;
const SEED_LABEL: &str = "leash.dev/real-load";

/// 20 namespaces `load-00`.. with 1,000 ConfigMaps each (20,000), made once
/// for this test binary.
fn seed(cluster: &Cluster) {
    static SEEDED: OnceLock<()> = OnceLock::new();
    SEEDED.get_or_init(|| {
        let namespaces: Vec<(String, Value)> = (0..NAMESPACES)
            .map(|n| {
                let body = json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": format!("load-{n:02}")}});
                ("/api/v1/namespaces".to_owned(), body)
            })
            .collect();
        cluster.create_all(namespaces, 8);
        let configmaps: Vec<(String, Value)> = (0..NAMESPACES)
            .flat_map(|n| {
                (0..PER_NAMESPACE).map(move |i| {
                    let ns = format!("load-{n:02}");
                    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i:05}"), "namespace": ns,
                            "labels": {SEED_LABEL: "true"}},
                        "data": {"index": i.to_string(), "namespace": ns}});
                    (format!("/api/v1/namespaces/{ns}/configmaps"), body)
                })
            })
            .collect();
        cluster.create_all(configmaps, 16);
    });
}

fn load_command(cluster: &Cluster, args: &[&str]) -> Command {
    let mut cmd = leash();
    cmd.arg("load")
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["--progress", "never", "--summary", "json", "-o", "ndjson"])
        .args(args);
    cmd
}

fn summary(stderr: &str) -> Value {
    let line = stderr
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary in stderr:\n{stderr}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// How many times each (kind, namespace, name) and each uid was written.
struct Seen {
    by_uid: HashMap<String, usize>,
    seeded: BTreeMap<(String, String), usize>,
}

fn seen(ndjson: &str) -> Seen {
    let mut by_uid = HashMap::new();
    let mut seeded = BTreeMap::new();
    for line in ndjson.lines() {
        let object: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let meta = &object["metadata"];
        // ComponentStatuses (computed, not stored) have no uid.
        let id = match meta["uid"].as_str() {
            Some(uid) => uid.to_owned(),
            None => format!(
                "{}/{}/{}/{}",
                object["apiVersion"], object["kind"], meta["namespace"], meta["name"]
            ),
        };
        *by_uid.entry(id).or_default() += 1;
        if object["kind"] == "ConfigMap" && meta["labels"][SEED_LABEL] == "true" {
            let key = (
                meta["namespace"].as_str().unwrap().to_owned(),
                meta["name"].as_str().unwrap().to_owned(),
            );
            *seeded.entry(key).or_default() += 1;
        }
    }
    Seen { by_uid, seeded }
}

#[track_caller]
fn assert_every_seeded_object_once(seen: &Seen) {
    let twice: Vec<_> = seen.by_uid.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "objects written more than once: {twice:?}"
    );
    assert_eq!(
        seen.seeded.len(),
        NAMESPACES * PER_NAMESPACE,
        "seeded ConfigMaps written (each must be, once)"
    );
    assert!(seen.seeded.values().all(|n| *n == 1));
}

/// `leash load --all -A` over the 20,000 ConfigMaps and whatever else the
/// cluster holds, paged by the real API server (500 a page): every object
/// exactly once, and for the kinds that do not change while it runs, the
/// same objects kubectl lists.
#[test]
fn load_all_reads_every_object_exactly_once() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    seed(cluster);
    let out = load_command(cluster, &["--all", "-A"])
        .output()
        .expect("run leash load");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seen = seen(&stdout);
    assert_every_seeded_object_once(&seen);
    let summary = summary(&stderr);
    assert_eq!(summary["total"]["kinds"], summary["total"]["complete"]);
    assert!(summary["total"]["objects"].as_u64().unwrap() >= 20_000);
    let configmaps = summary["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "configmaps")
        .unwrap_or_else(|| panic!("no configmaps in the summary: {summary}"));
    assert!(
        configmaps["pages"].as_u64().unwrap() >= 40,
        "20,000 ConfigMaps at 500 a page: {configmaps}"
    );

    // Kinds nothing changes during the test: the same uids as kubectl's.
    for kind in [
        "configmaps",
        "namespaces",
        "clusterroles.rbac.authorization.k8s.io",
        "serviceaccounts",
    ] {
        let listed = cluster.kubectl_ok(&[
            "get",
            kind,
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.uid}{\"\\n\"}{end}",
        ]);
        let mut expected: Vec<&str> = listed.lines().collect();
        expected.sort_unstable();
        let singular = kind_name(kind);
        let mut got: Vec<String> = stdout
            .lines()
            .filter_map(|l| {
                let o: Value = serde_json::from_str(l).unwrap();
                (o["kind"] == singular).then(|| o["metadata"]["uid"].as_str().unwrap().to_owned())
            })
            .collect();
        got.sort_unstable();
        assert_eq!(got, expected, "{kind}: leash load and kubectl get differ");
    }
}

fn kind_name(resource: &str) -> &'static str {
    match resource {
        "configmaps" => "ConfigMap",
        "namespaces" => "Namespace",
        "clusterroles.rbac.authorization.k8s.io" => "ClusterRole",
        "serviceaccounts" => "ServiceAccount",
        other => panic!("no kind for {other}"),
    }
}

/// Compaction while a load is in flight: the load reads its first page,
/// then its output is held (its bounded window fills and it waits), etcd
/// is compacted and the API server's watch cache drops the load's snapshot,
/// so its next continue token is answered 410 Expired. By default the load
/// continues with the server's fresh token; with `--consistent` it restarts
/// the kind. Either way every object that existed throughout is written
/// exactly once.
#[test]
fn a_load_survives_compaction_of_its_snapshot() {
    let Some((cluster, _guard)) = cluster() else {
        return;
    };
    seed(cluster);
    for (mode, extra) in [("resume", &[][..]), ("consistent", &["--consistent"][..])] {
        let mut args = vec!["configmaps", "-A", "--page-size", "100"];
        args.extend_from_slice(extra);
        let mut child = ChildGuard(
            load_command(cluster, &args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run leash load"),
        );
        let mut stdout = BufReader::new(child.0.stdout.take().expect("stdout"));
        let mut stderr_pipe = child.0.stderr.take().expect("stderr");
        let mut first = String::new();
        stdout.read_line(&mut first).expect("first object");
        // Let the load fill its window and wait on the held pipe.
        std::thread::sleep(Duration::from_secs(1));
        cluster.compact();
        // The watch cache learns of the compaction within its 15 s poll.
        std::thread::sleep(Duration::from_secs(17));
        let mut rest = String::new();
        stdout
            .read_to_string(&mut rest)
            .expect("the rest of the load");
        let mut stderr = String::new();
        stderr_pipe.read_to_string(&mut stderr).expect("stderr");
        let status = wait_exit(&mut child.0, BOUND, "leash load exit");
        assert_eq!(status.code(), Some(0), "{mode}: stderr:\n{stderr}");
        let seen = seen(&(first + &rest));
        assert_every_seeded_object_once(&seen);
        let kind = &summary(&stderr)["kinds"][0];
        match mode {
            "resume" => assert_eq!(
                kind["acrossSnapshots"], true,
                "the expired list went on with the fresh token: {kind}"
            ),
            _ => {
                assert!(
                    kind["restarts"].as_u64().unwrap() >= 1,
                    "the expired list restarted: {kind}"
                );
                assert_eq!(kind["acrossSnapshots"], false, "{kind}");
            }
        }
    }
}
