use std::sync::Arc;

use leash_policy::Source;
use serde_json::json;

use super::*;

fn pod(ns: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": ns, "uid": "u-1"}})
}

fn rr(policy: &str, rule: &str, status: Status) -> RuleResult {
    RuleResult {
        policy: Arc::from(policy),
        rule: rule.into(),
        status,
        message: format!("{rule} {status}"),
        source: Source::Kyverno,
    }
}

fn entry(policy: &str, rule: &str, status: Status, ts: u64) -> Value {
    result_entry(
        &rr(policy, rule, status),
        &PolicyMeta {
            scored: true,
            ..PolicyMeta::default()
        },
        ts,
    )
}

fn eval(keys: &[&str]) -> Vec<(String, String)> {
    keys.iter()
        .map(|k| (k.to_string(), "12".to_string()))
        .collect()
}

#[test]
fn ephemeral_report_has_kyvernos_layout() {
    let owner = Owner::of(&pod("prod")).unwrap();
    let r = ephemeral_report(
        &owner,
        "u-1",
        ReportSource::BackgroundScan,
        &eval(&["require-labels", "prod/local"]),
        vec![entry("require-labels", "check", Status::Fail, 5)],
    );
    assert_eq!(r["apiVersion"], "reports.kyverno.io/v1");
    assert_eq!(r["kind"], "EphemeralReport");
    assert_eq!(r["metadata"]["namespace"], "prod");
    let labels = &r["metadata"]["labels"];
    assert_eq!(labels["audit.kyverno.io/resource.uid"], "u-1");
    assert_eq!(labels["audit.kyverno.io/resource.kind"], "Pod");
    assert_eq!(labels["audit.kyverno.io/resource.group"], "");
    assert_eq!(labels["audit.kyverno.io/resource.version"], "v1");
    assert_eq!(labels["audit.kyverno.io/source"], "background-scan");
    assert_eq!(labels["cpol.kyverno.io/require-labels"], "12");
    assert_eq!(labels["pol.kyverno.io/local"], "12");
    assert_eq!(r["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(r["spec"]["owner"]["kind"], "Pod");
    assert_eq!(r["spec"]["summary"]["fail"], 1);
    assert_eq!(r["spec"]["summary"]["pass"], 0);
    assert_eq!(
        ephemeral_policies(&r),
        BTreeSet::from(["require-labels".to_string(), "prod/local".to_string()])
    );
    let ns =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a", "uid": "n"}});
    let c = ephemeral_report(
        &Owner::of(&ns).unwrap(),
        "n",
        ReportSource::Admission,
        &[],
        vec![],
    );
    assert_eq!(c["kind"], "ClusterEphemeralReport");
    assert!(c["metadata"].get("namespace").is_none());
    assert!(Owner::of(&json!({"kind": "Pod", "metadata": {"name": "x"}})).is_none());
}

#[test]
fn policy_report_is_named_by_uid_with_scope_and_summary() {
    let owner = Owner::of(&pod("prod")).unwrap();
    let eph = ephemeral_report(
        &owner,
        "u-1",
        ReportSource::BackgroundScan,
        &eval(&["a", "b"]),
        vec![
            entry("b", "r", Status::Pass, 5),
            entry("a", "r", Status::Fail, 5),
        ],
    );
    let rep = merge(&owner, None, &[&eph]);
    assert_eq!(rep["kind"], "PolicyReport");
    assert_eq!(rep["apiVersion"], "wgpolicyk8s.io/v1alpha2");
    assert_eq!(rep["metadata"]["name"], "u-1");
    assert_eq!(rep["metadata"]["namespace"], "prod");
    assert_eq!(
        rep["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "kyverno"
    );
    assert_eq!(
        rep["scope"],
        json!({"apiVersion": "v1", "kind": "Pod", "name": "web", "namespace": "prod", "uid": "u-1"})
    );
    assert_eq!(
        rep["summary"],
        json!({"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0})
    );
    // Sorted by policy, then rule.
    assert_eq!(rep["results"][0]["policy"], "a");
    assert_eq!(report_owner(&rep), Some(owner));
}

#[test]
fn background_scan_replaces_the_policies_it_evaluated_only() {
    let owner = Owner::of(&pod("prod")).unwrap();
    let first = ephemeral_report(
        &owner,
        "u-1",
        ReportSource::BackgroundScan,
        &eval(&["a", "b"]),
        vec![
            entry("a", "r1", Status::Fail, 1),
            entry("a", "r2", Status::Pass, 1),
            entry("b", "r", Status::Pass, 1),
        ],
    );
    let rep = merge(&owner, None, &[&first]);
    // A rescan of policy a only: its rule r2 no longer applies, b is kept.
    let second = ephemeral_report(
        &owner,
        "u-1",
        ReportSource::BackgroundScan,
        &eval(&["a"]),
        vec![entry("a", "r1", Status::Pass, 2)],
    );
    let rep = merge(&owner, Some(&rep), &[&second]);
    let keys: Vec<_> = report_results(&rep).iter().map(key_of).collect();
    assert_eq!(keys, [("a".into(), "r1".into()), ("b".into(), "r".into())]);
    assert_eq!(rep["results"][0]["result"], "pass");
    // A rescan where nothing matches any more: no results, the caller deletes.
    let third = ephemeral_report(
        &owner,
        "u-1",
        ReportSource::BackgroundScan,
        &eval(&["a", "b"]),
        vec![],
    );
    assert!(report_results(&merge(&owner, Some(&rep), &[&third])).is_empty());
}

#[test]
fn admission_results_update_their_rules_newest_first() {
    let owner = Owner::of(&pod("prod")).unwrap();
    let bg = ephemeral_report(
        &owner,
        "u-1",
        ReportSource::BackgroundScan,
        &eval(&["a"]),
        vec![
            entry("a", "r", Status::Pass, 10),
            entry("a", "s", Status::Pass, 10),
        ],
    );
    let old = ephemeral_report(
        &owner,
        "x",
        ReportSource::Admission,
        &eval(&["a"]),
        vec![entry("a", "r", Status::Fail, 5)],
    );
    let new = ephemeral_report(
        &owner,
        "y",
        ReportSource::Admission,
        &eval(&["a"]),
        vec![entry("a", "s", Status::Fail, 11)],
    );
    let rep = merge(&owner, None, &[&bg, &old, &new]);
    assert_eq!(
        rep["results"][0]["result"], "pass",
        "an older admission result loses"
    );
    assert_eq!(
        rep["results"][1]["result"], "fail",
        "a newer one wins; the other rule stays"
    );
}

#[test]
fn prune_drops_results_of_deleted_policies_and_rules() {
    let owner = Owner::of(&pod("prod")).unwrap();
    let mut rep = policy_report(
        &owner,
        vec![
            entry("a", "r", Status::Fail, 1),
            entry("a", "gone", Status::Pass, 1),
            entry("b", "r", Status::Pass, 1),
        ],
    );
    rep["metadata"]["resourceVersion"] = json!("7");
    assert!(prune(&rep, |_, _| true).is_none());
    let pruned = prune(&rep, |p, r| p == "a" && r == "r").unwrap();
    assert_eq!(report_results(&pruned).len(), 1);
    assert_eq!(pruned["summary"]["fail"], 1);
    assert_eq!(pruned["metadata"]["resourceVersion"], "7");
    assert!(
        pruned["metadata"]["labels"]
            .get("cpol.kyverno.io/b")
            .is_none()
    );
    assert!(report_results(&prune(&rep, |_, _| false).unwrap()).is_empty());
}

#[test]
fn same_results_ignores_timestamps() {
    let owner = Owner::of(&pod("prod")).unwrap();
    let a = policy_report(&owner, vec![entry("a", "r", Status::Fail, 1)]);
    let b = policy_report(&owner, vec![entry("a", "r", Status::Fail, 9)]);
    let c = policy_report(&owner, vec![entry("a", "r", Status::Pass, 9)]);
    assert!(same_results(&a, &b));
    assert!(!same_results(&a, &c));
}

#[test]
fn long_policy_names_are_not_label_keys() {
    assert_eq!(policy_label("p").as_deref(), Some("cpol.kyverno.io/p"));
    assert_eq!(policy_label("ns/p").as_deref(), Some("pol.kyverno.io/p"));
    assert!(policy_label(&"x".repeat(64)).is_none());
    assert_eq!(label_value("12"), "12");
}
