//! `leash jp`: Kyverno's `kyverno jp` (query, parse, function), as scripts
//! use it: the output format, standard input, and exit codes.

use std::io::Write;
use std::process::Stdio;

use crate::support::{assert_stderr_has, leash, stderr, stdout};

#[test]
fn query_prints_each_expression_and_its_result_as_kyverno_jp_does() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("pod.yaml");
    std::fs::write(
        &doc,
        "metadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: 'nginx:latest'}\n",
    )
    .unwrap();
    let out = leash()
        .args(["jp", "query", "-i"])
        .arg(&doc)
        .args([
            "-c",
            "spec.containers[].image",
            "truncate(metadata.name, `2`)",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "# spec.containers[].image\n[\"nginx:latest\"]\n# truncate(metadata.name, `2`)\n\"we\"\n"
    );
    // The document on standard input.
    let mut child = leash()
        .args(["jp", "query", "-u", "metadata.name"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"metadata\": {\"name\": \"web\"}}")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "# metadata.name\nweb\n");
    // A bad expression names itself; exit 2.
    let out = leash()
        .args(["jp", "query", "-i"])
        .arg(&doc)
        .arg("spec.[")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_stderr_has(&out, "\"spec.[\" does not parse");
}

#[test]
fn parse_and_function() {
    let out = leash().args(["jp", "parse", "a.b"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("# a.b\n"), "{}", stdout(&out));
    let out = leash()
        .args(["jp", "function", "truncate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout(&out).starts_with("Name: truncate\n  Signature: truncate(string, number) string\n"),
        "{}",
        stdout(&out)
    );
    let out = leash().args(["jp", "function"]).output().unwrap();
    for name in ["time_add", "label_match", "semver_compare", "starts_with"] {
        assert!(stdout(&out).contains(name), "{name}");
    }
    let out = leash().args(["jp", "function", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no such function: nosuch"));
}
