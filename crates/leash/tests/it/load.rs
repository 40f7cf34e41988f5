//! `leash load` as a process: exit codes, output formats, namespaces,
//! selectors, Ctrl-C, against `--sandbox` (in-process demo data) or a
//! `leash sandbox` process (latency, token).

use std::collections::{BTreeSet, HashSet};
use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use leash_sandbox::generate::GenerateSpec;
use leash_sandbox::{ApiRequest, Faults, Sandbox, SandboxConfig};
use serde_json::Value;

use crate::support::{
    BOUND, SandboxProcess, assert_stderr_has, assert_stdout_has, core_resources, kubectl_installed,
    leash, output_within, send_signal, stderr, stdout, unavailable, wait_exit, with_server,
    with_unavailable_server,
};

/// `leash load ARGS --progress never`.
fn load_command(args: &[&str]) -> Command {
    let mut cmd = leash();
    cmd.arg("load").args(args).args(["--progress", "never"]);
    cmd
}

/// Run `leash load ARGS --progress never` to completion.
fn load(args: &[&str]) -> Output {
    load_command(args).output().expect("run leash load")
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "stderr:\n{}", stderr(out));
}

/// The in-process demo sandbox: 30 pods, 10 configmaps, 3 deployments, 2
/// custom kinds of 3 objects, over ns-0000..ns-0003.
const SMALL: [&str; 3] = [
    "--sandbox=pods=30,configmaps=10,deployments.apps=3",
    "--sandbox-crds",
    "2:3",
];

fn small(args: &[&str]) -> Output {
    let mut all: Vec<&str> = SMALL.to_vec();
    all.extend_from_slice(args);
    load(&all)
}

fn ndjson(out: &Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The `--summary json` line of a load's stderr.
fn json_summary(out: &Output) -> Value {
    let err = stderr(out);
    let line = err
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON summary in stderr:\n{err}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// The objects of the generated custom kinds (`Widget…`) in ndjson output.
fn custom_objects(out: &Output) -> Vec<Value> {
    ndjson(out)
        .into_iter()
        .filter(|o| o["kind"].as_str().unwrap().starts_with("Widget"))
        .collect()
}

fn uids(objects: &[Value]) -> HashSet<String> {
    objects
        .iter()
        .map(|o| o["metadata"]["uid"].as_str().expect("uid").to_owned())
        .collect()
}

/// Seed 001, "RESTMapping failure yields zero resources and success": an
/// unknown kind is exit 2, naming it, and nothing is written.
#[test]
fn seed_zero_resources_on_mapping_error() {
    for format in ["ndjson", "json"] {
        let out = small(&["pods", "nosuchkind", "-A", "-o", format]);
        assert_exit(&out, 2);
        assert_stderr_has(&out, "\"nosuchkind\"");
        assert!(
            stdout(&out).is_empty(),
            "{format}: output written: {}",
            stdout(&out)
        );
    }
}

/// Seed 001, "pool drops tasks beyond 2x concurrency": 300 kinds x 5
/// objects at --concurrency 2, every object, in seconds.
#[test]
fn seed_pool_drops_tasks() {
    let started = Instant::now();
    let out = load(&[
        "--sandbox=pods=0",
        "--sandbox-crds",
        "300:5",
        "--all",
        "-A",
        "--concurrency",
        "2",
    ]);
    let took = started.elapsed();
    assert_exit(&out, 0);
    let widgets = custom_objects(&out);
    assert_eq!(widgets.len(), 1500);
    assert_eq!(uids(&widgets).len(), 1500);
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(
        stderr(&out).contains("TOTAL ("),
        "no summary: {}",
        stderr(&out)
    );
}

/// Latency of every request in [`seed_workers_ignore_cancel`].
const SLOW: Duration = Duration::from_secs(5);

/// An in-process sandbox whose every request waits [`SLOW`], with its
/// request log (what it has received, logged on arrival) for readiness.
struct SlowSandbox {
    runtime: tokio::runtime::Runtime,
    sandbox: Option<Sandbox>,
}

impl SlowSandbox {
    fn start() -> SlowSandbox {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let sandbox = runtime
            .block_on(Sandbox::start(SandboxConfig {
                generate: Some(GenerateSpec {
                    kinds: Vec::new(),
                    namespaces: 4,
                    crds: Some((4, 2)),
                    seed: 0,
                }),
                faults: Faults {
                    latency: SLOW,
                    ..Faults::default()
                },
                ..SandboxConfig::default()
            }))
            .unwrap();
        SlowSandbox {
            runtime,
            sandbox: Some(sandbox),
        }
    }

    fn sandbox(&self) -> &Sandbox {
        self.sandbox.as_ref().unwrap()
    }

    /// Poll the request log until `ready` holds; panics if `child` exits
    /// first or after [`BOUND`] (a hang guard).
    fn wait_until(
        &self,
        child: &mut Child,
        what: &str,
        ready: impl Fn(&BTreeSet<ApiRequest>) -> bool,
    ) {
        let start = Instant::now();
        while !ready(&self.sandbox().requests()) {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("leash load exited ({status:?}) before {what}");
            }
            assert!(start.elapsed() < BOUND, "no {what} within {BOUND:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for SlowSandbox {
    fn drop(&mut self) {
        if let Some(sandbox) = self.sandbox.take() {
            let _ = self.runtime.block_on(sandbox.shutdown());
        }
    }
}

/// Seed 001, "workers ignore cancellation": SIGINT while requests wait on
/// a 5 s latency exits 130 at once, both during discovery and during the
/// lists. Each SIGINT is sent as soon as the sandbox has received the
/// request of that phase (its request log, no sleep); a leash that waited
/// for the request would exit no sooner than ~5 s later, so the bound of
/// [`SLOW`] / 2 (dozens of times what cancelling takes) fails only that.
#[test]
fn seed_workers_ignore_cancel() {
    let cluster = SlowSandbox::start();
    let url = cluster.sandbox().url();
    // During discovery: leash's first request has arrived.
    cluster.sandbox().clear_requests();
    let mut child = spawn_quiet(&mut load_command(&["--server", &url, "pods", "-A"]));
    cluster.wait_until(&mut child, "a discovery request", |r| !r.is_empty());
    interrupt_and_expect_130(child, "discovery", SLOW / 2);

    // During the lists: a list request has arrived (discovery is done).
    cluster.sandbox().clear_requests();
    let mut child = spawn_quiet(&mut load_command(&["--server", &url, "--all", "-A"]));
    cluster.wait_until(&mut child, "a list request", |r| {
        r.iter()
            .any(|q| matches!(q, ApiRequest::Resource { verb, .. } if verb == "list"))
    });
    interrupt_and_expect_130(child, "lists", SLOW / 2);
}

/// Spawn with stdout discarded and stderr piped.
fn spawn_quiet(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// SIGINT `child`; it must exit 130 within `within`.
fn interrupt_and_expect_130(mut child: Child, phase: &str, within: Duration) {
    assert!(
        child.try_wait().unwrap().is_none(),
        "{phase}: exited before SIGINT"
    );
    let sent = Instant::now();
    send_signal(&child, "INT");
    let status = wait_exit(&mut child, BOUND, &format!("{phase}: exit after SIGINT"));
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(130), "{phase}: {status:?}");
    assert!(took < within, "{phase}: exit took {took:?} after SIGINT");
}

/// A wrong token is the server's 401: exit 2, naming it.
#[test]
fn unauthorized_exits_2() {
    let sandbox = SandboxProcess::start(&["--token", "right"]);
    let out = load(&["--server", &sandbox.url, "--token", "wrong", "pods"]);
    assert_exit(&out, 2);
    assert_stderr_has(&out, "401");
    let out = load(&["--server", &sandbox.url, "--token", "right", "pods"]);
    assert_exit(&out, 0);
}

/// A server nobody listens on is exit 2 naming it.
#[test]
fn unreachable_server_exits_2() {
    let port = crate::support::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let out = load(&["--server", &url, "pods", "--retries", "1"]);
    assert_exit(&out, 2);
    assert_stderr_has(&out, "cannot reach");
}

/// A kubeconfig that cannot be read, or is not a kubeconfig, is exit 2
/// with its path named, before any request.
#[test]
fn unreadable_kubeconfig_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing-config");
    let garbage = dir.path().join("garbage-config");
    std::fs::write(&garbage, "clusters: [this is: not: a kubeconfig").unwrap();
    for path in [&missing, &garbage] {
        let out = load(&["pods", "--kubeconfig", path.to_str().unwrap()]);
        assert_exit(&out, 2);
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_stderr_has(&out, name);
    }
}

/// Without `--server` or `--kubeconfig`, the kubeconfig is `$KUBECONFIG`,
/// else `~/.kube/config`, and `--context NAME` picks one of its contexts
/// (README, "Connection flags", steps 3 and 4), as kubectl resolves them.
/// The file's current context points at a port nothing listens on, the
/// `good` context at a sandbox.
#[test]
fn kubeconfig_comes_from_kubeconfig_then_home_and_context_picks_in_it() {
    let sandbox = SandboxProcess::start(&["--seed", "1"]);
    let dead = crate::support::free_port();
    let config = |current: &str| {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {current}\n\
             clusters:\n\
             - name: good\n  cluster: {{server: \"{}\"}}\n\
             - name: dead\n  cluster: {{server: \"http://127.0.0.1:{dead}\"}}\n\
             contexts:\n\
             - name: good\n  context: {{cluster: good, user: u}}\n\
             - name: dead\n  context: {{cluster: dead, user: u}}\n\
             users:\n- name: u\n  user: {{}}\n",
            sandbox.url
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".kube")).unwrap();
    std::fs::write(home.join(".kube/config"), config("dead")).unwrap();
    let env_config = dir.path().join("env-config");
    std::fs::write(&env_config, config("good")).unwrap();
    let run = |kubeconfig_env: Option<&std::path::Path>, args: &[&str]| {
        let mut cmd = load_command(&["namespaces", "-o", "name", "--retries", "1"]);
        cmd.args(args).env("HOME", &home);
        if let Some(path) = kubeconfig_env {
            cmd.env("KUBECONFIG", path);
        }
        cmd.output().expect("run leash load")
    };
    let reached = |out: &Output| {
        assert_exit(out, 0);
        assert_stdout_has(out, "namespace/");
    };
    let refused = |out: &Output| {
        assert_exit(out, 2);
        assert_stderr_has(out, &format!("127.0.0.1:{dead}"));
    };
    // ~/.kube/config: its current context, or the one --context names.
    refused(&run(None, &[]));
    reached(&run(None, &["--context", "good"]));
    // $KUBECONFIG wins over ~/.kube/config; --context picks in it too.
    reached(&run(Some(&env_config), &[]));
    refused(&run(Some(&env_config), &["--context", "dead"]));
    // A context neither file has is named.
    let out = run(Some(&env_config), &["--context", "nowhere"]);
    assert_exit(&out, 2);
    assert_stderr_has(&out, "nowhere");
}

/// Bad flag values and a bad selector (the server's 400) are exit 2.
#[test]
fn usage_errors_exit_2() {
    for args in [
        &["pods", "--concurrency", "0"][..],
        &["pods", "--concurrency", "33"],
        &["pods", "-o", "xml"],
        &["--all", "pods"],
        &[],
    ] {
        let out = small(args);
        assert_exit(&out, 2);
    }
    let out = small(&["cm", "-A", "-l", "tier in ("]);
    assert_exit(&out, 2);
    assert_stderr_has(&out, "400");
}

/// Every format parses and carries the same objects: ndjson lines, one v1
/// List, YAML documents, kind.group/name lines.
#[test]
fn output_formats_parse() {
    let kinds = ["po,cm", "wg0001", "deploy", "-A"];
    let out = small(&kinds);
    assert_exit(&out, 0);
    let objects = ndjson(&out);
    assert_eq!(objects.len(), 30 + 10 + 3 + 3);
    assert_eq!(uids(&objects).len(), objects.len());
    for o in &objects {
        assert!(o["kind"].is_string() && o["apiVersion"].is_string(), "{o}");
    }

    let out = small(&[&kinds[..], &["-o", "json"]].concat());
    assert_exit(&out, 0);
    let list: Value = serde_json::from_str(&stdout(&out)).expect("-o json is one JSON document");
    assert_eq!(list["kind"], "List");
    assert_eq!(list["apiVersion"], "v1");
    let items = list["items"].as_array().unwrap();
    assert_eq!(uids(items), uids(&objects));

    let out = small(&[&kinds[..], &["-o", "yaml"]].concat());
    assert_exit(&out, 0);
    let text = stdout(&out);
    let docs: Vec<Value> = text
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_saphyr::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect();
    assert_eq!(uids(&docs), uids(&objects));

    let out = small(&[&kinds[..], &["-o", "name"]].concat());
    assert_exit(&out, 0);
    let names: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(names.len(), objects.len());
    for prefix in [
        "pod/",
        "configmap/",
        "widget0001.example.leash.dev/",
        "deployment.apps/",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(prefix)),
            "no {prefix} in {names:?}"
        );
    }
    let pod = objects.iter().find(|o| o["kind"] == "Pod").unwrap();
    assert!(names.contains(&format!(
        "pod/{}",
        pod["metadata"]["name"].as_str().unwrap()
    )));
}

/// -n (repeatable and comma-separated), the default namespace, -A, -l, and
/// cluster-scoped kinds (which ignore -n).
#[test]
fn namespaces_selectors_and_cluster_scope() {
    let namespace_of = |o: &Value| o["metadata"]["namespace"].as_str().unwrap_or("").to_owned();
    let all = ndjson(&small(&["pods", "-A"]));
    assert_eq!(all.len(), 30);
    let some = ndjson(&small(&["pods", "-n", "ns-0000,ns-0001", "-n", "ns-0002"]));
    assert!(
        some.iter()
            .all(|o| ["ns-0000", "ns-0001", "ns-0002"].contains(&namespace_of(o).as_str()))
    );
    let expected = all.iter().filter(|o| namespace_of(o) != "ns-0003").count();
    assert_eq!(some.len(), expected);
    // No -n: the default namespace, where the demo data has no pods.
    assert!(ndjson(&small(&["pods"])).is_empty());

    let app = all[0]["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .unwrap()
        .to_owned();
    let selected = ndjson(&small(&[
        "pods",
        "-A",
        "-l",
        &format!("app.kubernetes.io/name={app}"),
    ]));
    let expected = all
        .iter()
        .filter(|o| o["metadata"]["labels"]["app.kubernetes.io/name"] == app.as_str())
        .count();
    assert!(expected > 0 && expected < 30);
    assert_eq!(selected.len(), expected);

    let namespaces = ndjson(&small(&["ns", "-n", "ns-0000"]));
    let names: HashSet<&str> = namespaces
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    for want in ["default", "kube-system", "ns-0000", "ns-0003"] {
        assert!(names.contains(want), "{want} missing: {names:?}");
    }
}

/// --output-dir: one file per kind, named after plural.group, each valid.
#[test]
fn output_dir_has_one_file_per_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let out = small(&[
        "po,deploy,wg0000,secrets",
        "-A",
        "-o",
        "json",
        "--output-dir",
        path,
    ]);
    assert_exit(&out, 0);
    assert!(stdout(&out).is_empty());
    for (file, count) in [
        ("pods.json", 30),
        ("deployments.apps.json", 3),
        ("widget0000s.example.leash.dev.json", 3),
        ("secrets.json", 0),
    ] {
        let text = std::fs::read_to_string(dir.path().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let list: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(list["items"].as_array().unwrap().len(), count, "{file}");
    }
}

/// A closed stdout pipe (`leash load | head -1`) ends the load quietly.
#[test]
fn closed_pipe_ends_quietly() {
    let mut child = load_command(&["--sandbox=pods=3000", "--sandbox-crds", "0:0", "pods", "-A"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with('{'));
    drop(stdout);
    let started = Instant::now();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(started.elapsed() < BOUND);
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("error"), "{err}");
}

/// The same objects and `-o name` lines as kubectl, through a kubeconfig
/// (skipped, saying why, when kubectl is not installed; under `CI=true` a
/// missing kubectl fails it).
#[test]
fn matches_kubectl() {
    if !kubectl_installed() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let kubeconfig = kubeconfig.to_str().unwrap();
    let _sandbox = SandboxProcess::start(&["--crds", "2:3", "--kubeconfig", kubeconfig]);
    let kinds = "cm,wg0001,ns,crd";
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "kubectl {args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let sorted = |text: String| {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    let out = load(&["--kubeconfig", kubeconfig, kinds, "-A", "-o", "name"]);
    assert_exit(&out, 0);
    let theirs = sorted(kubectl(&["get", kinds, "-A", "-o", "name"]));
    assert!(theirs.len() > 10);
    assert_eq!(sorted(stdout(&out)), theirs);

    let out = load(&["--kubeconfig", kubeconfig, kinds, "-A", "-o", "json"]);
    assert_exit(&out, 0);
    let ours: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let theirs: Value =
        serde_json::from_str(&kubectl(&["get", kinds, "-A", "-o", "json"])).unwrap();
    assert_eq!(
        uids(ours["items"].as_array().unwrap()),
        uids(theirs["items"].as_array().unwrap())
    );
}

/// --timeout is one deadline for the whole load: with every request waiting
/// 5 s, `--timeout 1s` exits 1 about a second in, saying so.
#[test]
fn timeout_is_one_deadline() {
    let sandbox = SandboxProcess::start(&["--crds", "2:2", "--latency", "5s"]);
    let started = Instant::now();
    let out = load(&["--server", &sandbox.url, "pods", "-A", "--timeout", "1s"]);
    let took = started.elapsed();
    assert_exit(&out, 1);
    assert_stderr_has(&out, "deadline");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "took {took:?}"
    );
}

/// Issue 38 #9, "load hangs for ever on a silent server": against a server
/// that accepts every connection and never answers, each request gives up
/// after `--request-timeout` and is retried; then the load exits 2 (the
/// server is unusable, as an unreachable one is) naming the request and the
/// bound, in seconds, not never.
#[test]
fn a_silent_server_times_out_naming_the_request() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    silent.set_nonblocking(true).unwrap();
    let done = AtomicBool::new(false);
    let started = Instant::now();
    let (out, took, accepted) = std::thread::scope(|s| {
        // Accept every connection and hold it open without answering, until
        // the load has ended (or just after the bound, should the test fail).
        let holder = s.spawn(|| {
            let mut held = Vec::new();
            // Relaxed: a stop flag; nothing else is published through it.
            while !done.load(Ordering::Relaxed)
                && started.elapsed() < BOUND + Duration::from_secs(5)
            {
                match silent.accept() {
                    Ok((stream, _)) => held.push(stream),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
            held.len()
        });
        let out = output_within(load_command(&[
            "--server",
            &url,
            "pods",
            "--request-timeout",
            "1s",
            "--retries",
            "1",
        ]));
        let took = started.elapsed();
        // Relaxed: see the holder's load.
        done.store(true, Ordering::Relaxed);
        (out, took, holder.join().unwrap())
    });
    assert!(accepted > 0, "leash never connected");
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.contains("did not answer")
            && err.contains("discovery GET /api")
            && err.contains("within 1s (after 2 attempts)"),
        "{err}"
    );
    // Two attempts of 1 s (and a backoff of at most 100 ms).
    assert!(took >= Duration::from_secs(2), "took {took:?}");
}

/// Issue 38 #9: without the flag every request is bounded all the same,
/// and `leash load --help` says by how much.
#[test]
fn request_timeout_has_a_default_that_help_shows() {
    let out = output_within({
        let mut cmd = leash();
        cmd.args(["load", "--help"]);
        cmd
    });
    assert_exit(&out, 0);
    let help = stdout(&out);
    let (_, flag) = help
        .split_once("--request-timeout <DURATION>")
        .unwrap_or_else(|| panic!("no --request-timeout in:\n{help}"));
    // The flag's help, up to the next flag.
    let flag = flag.split("\n  -").next().unwrap();
    assert!(flag.contains("[default: 30s]"), "{flag}");
}

/// Seed 001, "partial pages thrown away, no retry", end to end: against a
/// server failing 20% of requests (500), throttling 10% and resetting 5%,
/// every object arrives exactly once, exit 0, and the retries are counted in
/// the summary, not logged as errors.
#[test]
fn seed_partial_pages_discarded() {
    let sandbox = SandboxProcess::start(&[
        "--crds",
        "3:40",
        "--fail-rate",
        "0.2",
        "--throttle-rate",
        "0.1",
        "--retry-after",
        "1",
        "--reset-rate",
        "0.05",
        "--seed",
        "7",
    ]);
    // 2 pages per custom kind at most; --retries 12 makes a failed page
    // (0.35^13) practically impossible.
    let out = load(&[
        "--server",
        &sandbox.url,
        "--all",
        "-A",
        "--page-size",
        "25",
        "--retries",
        "12",
        "--concurrency",
        "8",
        "--summary",
        "json",
    ]);
    assert_exit(&out, 0);
    let widgets = custom_objects(&out);
    assert_eq!(widgets.len(), 120);
    assert_eq!(uids(&widgets).len(), 120);
    let err = stderr(&out);
    assert!(
        !err.contains("ERROR"),
        "retried failures were logged as errors:\n{err}"
    );
    let summary = json_summary(&out);
    let total = &summary["total"];
    assert_eq!(total["complete"], total["kinds"], "{summary}");
    let retries = total["retries"].as_u64().expect("total.retries");
    assert!(retries > 0, "no retries: faults not injected? {summary}");
    let per_kind: u64 = summary["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["retries"].as_u64().unwrap())
        .sum();
    assert_eq!(per_kind, retries, "{summary}");
}

/// A policy that every pod with a name passes, for `apply --cluster` runs
/// whose point is the requests they make.
const NAMED_PODS_POLICY: &str = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate: {message: m, pattern: {metadata: {name: \"?*\"}}}\n";

/// `leash apply POLICY --cluster -A --server URL`.
fn apply_cluster(policy: &std::path::Path, url: &str) -> Command {
    let mut cmd = leash();
    cmd.args(["apply", policy.to_str().unwrap(), "--cluster", "-A"])
        .args(["--server", url]);
    cmd
}

/// README, "Connection flags": the client never retries on its own (only
/// leash's retries do: 1 + `--retries 2` requests for the list with
/// `load`, 1 + 5 with `apply --cluster`, where kube's retry layer would add
/// its own retries of each 503), and `load` and `apply --cluster` let
/// discovery be the first request (no `/version` probe before it).
#[test]
fn discovery_comes_first_and_only_leash_retries() {
    // Asserts that discovery came first: the pod list requests.
    let lists_after_discovery = |paths: &[String]| {
        assert!(
            matches!(paths.first().map(String::as_str), Some("/api" | "/apis")),
            "discovery first: {paths:?}"
        );
        paths
            .iter()
            .filter(|p| p.starts_with("/api/v1/pods"))
            .count()
    };
    let (out, paths) = with_unavailable_server(|url| {
        output_within(load_command(&[
            "--server",
            url,
            "pods",
            "-A",
            "--retries",
            "2",
        ]))
    });
    assert_exit(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("503") && err.contains("pods"),
        "the failed kind named: {err}"
    );
    assert_eq!(
        lists_after_discovery(&paths),
        3,
        "one request and two retries of leash's: {paths:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, NAMED_PODS_POLICY).unwrap();
    let (out, paths) = with_unavailable_server(|url| output_within(apply_cluster(&policy, url)));
    assert!(!out.status.success(), "{}", stderr(&out));
    assert_eq!(
        lists_after_discovery(&paths),
        6,
        "one request and leash's 5 retries (apply's default): {paths:?}"
    );
}

/// README, `leash load`: `--summary json` is one JSON line with exactly
/// the listed fields; a kind's `namespace` and `error` are `null` when
/// absent (all namespaces, no failure), and set when not.
#[test]
fn summary_json_has_the_listed_fields_and_nulls_when_absent() {
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object().expect("an object").keys().cloned().collect()
    };
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
    let kind_fields = set(&[
        "kind",
        "version",
        "namespace",
        "objects",
        "pages",
        "retries",
        "restarts",
        "seconds",
        "acrossSnapshots",
        "error",
    ]);
    for (namespaces, namespace) in [
        ("-A", Value::Null),
        ("--namespace=ns-0001", "ns-0001".into()),
    ] {
        let out = load(&[
            "--sandbox=pods=8",
            "pods",
            namespaces,
            "--summary",
            "json",
            "-o",
            "name",
        ]);
        assert_exit(&out, 0);
        let summary = json_summary(&out);
        assert_eq!(
            keys(&summary),
            set(&["kinds", "total", "discoverySeconds", "timedOut", "errors"])
        );
        assert_eq!(
            keys(&summary["total"]),
            set(&[
                "kinds", "complete", "objects", "pages", "retries", "restarts", "seconds"
            ])
        );
        let kind = &summary["kinds"][0];
        assert_eq!(keys(kind), kind_fields);
        assert_eq!(kind["namespace"], namespace, "{namespaces}");
        assert_eq!(kind["error"], Value::Null);
        assert_eq!(kind["kind"], "pods");
        assert_eq!(kind["version"], "v1");
    }
    // A failed kind names its error.
    let (out, _) = with_unavailable_server(|url| {
        output_within(load_command(&[
            "--server",
            url,
            "pods",
            "-A",
            "--retries",
            "0",
            "--summary",
            "json",
        ]))
    });
    assert_exit(&out, 1);
    let summary = json_summary(&out);
    let error = summary["kinds"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("503"), "{summary}");
}

/// README, exit codes and connection flags: a 403 from the server (RBAC
/// refuses the credentials) is exit 2, as a 401 is, for `load` and `apply
/// --cluster`; a `--server` that is not `http(s)://HOST[:PORT]` is refused
/// before any request, naming `--server` (exit 2), by `load`, `apply
/// --cluster` and `context`.
#[test]
fn forbidden_and_bad_server_urls_exit_2() {
    let forbidden = |_: &str| {
        (
            403,
            r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/api\"","reason":"Forbidden","code":403}"#.to_owned(),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, NAMED_PODS_POLICY).unwrap();
    let apply = |url: &str| apply_cluster(&policy, url);
    let (out, _) = with_server(forbidden, |url| {
        output_within(load_command(&["--server", url, "pods", "-A"]))
    });
    assert_exit(&out, 2);
    assert_stderr_has(&out, "403");
    let (out, _) = with_server(forbidden, |url| output_within(apply(url)));
    assert_exit(&out, 2);
    assert_stderr_has(&out, "403");

    let entries = dir.path().join("entries.yaml");
    std::fs::write(&entries, "").unwrap();
    for bad in ["ftp://127.0.0.1:1", "127.0.0.1:6443", "http://"] {
        let mut context = leash();
        context.args([
            "context",
            "-f",
            entries.to_str().unwrap(),
            "--once",
            "--server",
            bad,
        ]);
        for (what, out) in [
            ("load", load(&["--server", bad, "pods"])),
            ("apply", apply(bad).output().unwrap()),
            ("context", context.output().unwrap()),
        ] {
            assert_eq!(out.status.code(), Some(2), "{what} {bad}: {}", stderr(&out));
            assert!(
                stderr(&out).contains("--server"),
                "{what} {bad}: {}",
                stderr(&out)
            );
        }
    }
}

/// README, `leash load` exit codes: 1 when some kinds failed, each named,
/// with what loaded still written. The server lists pods and fails every
/// request for configmaps and secrets; with `--continue-on-error` the pods
/// are on stdout and both failed kinds are named.
#[test]
fn failed_kinds_are_named_and_what_loaded_is_written() {
    let answer = |path: &str| -> (u16, String) {
        match path.split('?').next().unwrap_or("") {
            "/api/v1" => (
                200,
                core_resources(&[
                    ("pods", "Pod", true),
                    ("configmaps", "ConfigMap", true),
                    ("secrets", "Secret", true),
                ]),
            ),
            "/api/v1/pods" => (
                200,
                r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[
                    {"metadata":{"name":"a","namespace":"n","uid":"u-a"}},
                    {"metadata":{"name":"b","namespace":"n","uid":"u-b"}}]}"#
                    .into(),
            ),
            other => unavailable(other),
        }
    };
    let (out, _) = with_server(answer, |url| {
        output_within(load_command(&[
            "--server",
            url,
            "pods,configmaps,secrets",
            "-A",
            "--retries",
            "0",
            "--continue-on-error",
            "-o",
            "name",
        ]))
    });
    assert_exit(&out, 1);
    let names: BTreeSet<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(
        names,
        BTreeSet::from(["pod/a".to_owned(), "pod/b".to_owned()])
    );
    let err = stderr(&out);
    for kind in ["configmaps", "secrets"] {
        assert!(
            err.lines().any(|l| l.contains(kind) && l.contains("503")),
            "{kind} not named as failed:\n{err}"
        );
    }
}

/// README, `leash load`: up to 2N kinds are in progress for N requests in
/// flight, so a kind waiting out a `Retry-After` leaves its request slot to
/// another. With one slot, two kinds each throttled once (429, `Retry-After:
/// 1`): the second kind's first request comes while the first kind waits,
/// before either retries (one list task per slot would retry the first kind
/// before starting the second, and wait twice as long).
#[test]
fn a_kind_waiting_out_retry_after_leaves_its_slot_to_another() {
    use std::sync::Mutex;
    let throttled: Mutex<BTreeSet<String>> = Mutex::default();
    let answer = |path: &str| -> (u16, String) {
        let base = path.split('?').next().unwrap_or("");
        match base {
            "/api/v1" => (
                200,
                core_resources(&[
                    ("configmaps", "ConfigMap", true),
                    ("secrets", "Secret", true),
                ]),
            ),
            "/api/v1/configmaps" | "/api/v1/secrets" => {
                if throttled.lock().unwrap().insert(base.to_owned()) {
                    (429, r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429}"#.into())
                } else {
                    (
                        200,
                        r#"{"kind":"List","apiVersion":"v1","metadata":{},"items":[]}"#.into(),
                    )
                }
            }
            other => unavailable(other),
        }
    };
    let (out, paths) = with_server(answer, |url| {
        output_within(load_command(&[
            "--server",
            url,
            "configmaps,secrets",
            "-A",
            "--concurrency",
            "1",
        ]))
    });
    assert_exit(&out, 0);
    let lists: Vec<&str> = paths
        .iter()
        .filter(|p| p.starts_with("/api/v1/configmaps") || p.starts_with("/api/v1/secrets"))
        .map(|p| p.split('?').next().unwrap_or(""))
        .collect();
    assert_eq!(lists.len(), 4, "{paths:?}");
    assert_ne!(
        lists[0], lists[1],
        "the second kind started while the first waited: {lists:?}"
    );
}

/// README, "Connection flags": a kubeconfig `exec` credential plugin is run
/// by leash with leash's stderr as its own (its prompts and errors reach
/// the user), and its token is sent.
#[test]
fn a_credential_plugins_stderr_is_leashs() {
    let sandbox = SandboxProcess::start(&["--token", "plugin-token", "--generate", "pods=3"]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("plugin.sh");
    std::fs::write(
        &script,
        "echo 'plugin: logging in as u' >&2\n\
         printf '%s' '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"plugin-token\"}}'\n",
    )
    .unwrap();
    let kubeconfig = dir.path().join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
             clusters:\n- name: a\n  cluster: {{server: '{}'}}\n\
             contexts:\n- name: a\n  context: {{cluster: a, user: u}}\n\
             users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n\
             \x20     command: sh\n      args: ['{}']\n      interactiveMode: Never\n",
            sandbox.url,
            script.display()
        ),
    )
    .unwrap();
    let out = output_within(load_command(&[
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "pods",
        "-A",
        "-o",
        "name",
    ]));
    assert_exit(&out, 0);
    assert_eq!(stdout(&out).lines().count(), 3, "{}", stdout(&out));
    assert!(
        stderr(&out).contains("plugin: logging in as u"),
        "the plugin's stderr is not leash's:\n{}",
        stderr(&out)
    );
}

/// README, "Connection flags": `--insecure-skip-tls-verify` turns off
/// certificate verification. The TLS server here is `leash serve`'s
/// admission webhook (a self-signed certificate no client trusts): without
/// the flag the connection is refused for the certificate, at once (a
/// certificate is not retried); with it the TLS session is made and the
/// request reaches the server (which serves no API: the kind is not found).
#[test]
fn insecure_skip_tls_verify_turns_off_certificate_checks() {
    let sandbox = SandboxProcess::start(&[]);
    let port = crate::support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let serve = leash()
        .args([
            "serve",
            "--server",
            &sandbox.url,
            "--components",
            "admission",
        ])
        .args(["--admission-listen", &listen])
        // The sandbox has no `kyverno` namespace for the shared CA's Secret.
        .args(["--config-namespace", "default"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run leash serve");
    let _serve = crate::support::ChildGuard(serve);
    let start = Instant::now();
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(start.elapsed() < BOUND, "the webhook never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let url = format!("https://{listen}");
    let out = output_within(load_command(&["--server", &url, "pods"]));
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(err.contains("certificate"), "{err}");
    assert!(
        !err.contains("attempts"),
        "a certificate is not retried: {err}"
    );
    let out = output_within(load_command(&[
        "--server",
        &url,
        "pods",
        "--insecure-skip-tls-verify",
    ]));
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(!err.contains("certificate"), "{err}");
    assert!(
        err.contains("doesn't have a resource type \"pods\""),
        "the request reached the server: {err}"
    );
}

/// README, "Connection flags" step 4: with no kubeconfig (no `KUBECONFIG`,
/// no `~/.kube/config`), leash uses the in-cluster service account as
/// kubectl does: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`,
/// verified against the account's `ca.crt`, with its token. kube reads the
/// account's files from their fixed path, so leash runs in a private mount
/// namespace (`unshare`, util-linux) where they are put on a tmpfs over
/// `/run`; the API server is a TLS listener here that records the first
/// request and answers 403.
#[test]
fn without_a_kubeconfig_the_in_cluster_service_account_is_used() {
    use std::io::Write as _;
    let probe = Command::new("unshare")
        .args(["--mount", "--map-root-user", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        // The kernel or the container refuses mount namespaces: nothing
        // leash could do about it, and no other way to place the files.
        eprintln!("skipped: `unshare --mount --map-root-user` is not permitted here");
        return;
    }
    let tls = leash_webhook::generate_tls(vec!["127.0.0.1".into()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let account = dir.path().join("serviceaccount");
    std::fs::create_dir_all(&account).unwrap();
    std::fs::write(account.join("token"), "in-cluster-token").unwrap();
    std::fs::write(account.join("ca.crt"), &tls.ca_pem).unwrap();
    std::fs::write(account.join("namespace"), "team").unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let done = std::sync::atomic::AtomicBool::new(false);
    // Each connection's request head, answered 403.
    let serve = |tcp: std::net::TcpStream| -> Vec<String> {
        tcp.set_nonblocking(false).unwrap();
        tcp.set_read_timeout(Some(BOUND)).unwrap();
        let conn = rustls::ServerConnection::new(tls.server_config.clone()).unwrap();
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        let mut head = Vec::new();
        let mut reader = BufReader::new(&mut stream);
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            head.push(line.trim_end().to_string());
        }
        let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden","reason":"Forbidden","code":403}"#;
        let _ = write!(
            stream,
            "HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.flush();
        head
    };
    let (out, heads) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let mut heads = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((tcp, _)) => heads.push(serve(tcp)),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            heads
        });
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--map-root-user", "sh", "-c"])
            .arg(
                "mount -t tmpfs tmpfs /run && \
                 mkdir -p /run/secrets/kubernetes.io && \
                 cp -r \"$0\" /run/secrets/kubernetes.io/serviceaccount && \
                 exec \"$@\"",
            )
            .arg(&account)
            .arg(env!("CARGO_BIN_EXE_leash"))
            .args(["load", "pods", "--progress", "never", "--retries", "1"])
            .env_remove("KUBECONFIG")
            .env_remove("LEASH_LOG")
            .env("HOME", &home)
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", port.to_string())
            .stdin(Stdio::null());
        let out = output_within(cmd);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        (out, server.join().unwrap())
    });
    assert_exit(&out, 2);
    // Discovery's requests, each over TLS verified by ca.crt (a refused
    // certificate sends no request), each with the account's token.
    assert!(!heads.is_empty(), "{}", stderr(&out));
    for head in &heads {
        assert!(
            head.first().is_some_and(|l| l.starts_with("GET /api")),
            "{head:?}"
        );
        assert!(
            head.iter()
                .any(|h| h.eq_ignore_ascii_case("authorization: Bearer in-cluster-token")),
            "the account's token: {head:?}"
        );
    }
    assert_stderr_has(&out, "403");
}
