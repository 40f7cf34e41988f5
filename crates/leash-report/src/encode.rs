//! An ephemeral report serialized straight from the results, without the
//! `serde_json::Value` tree [`ephemeral_report`](crate::ephemeral_report)
//! builds: the admission webhook writes one per admitted request, and
//! building the tree (some 150 small maps and strings for the Pod Security
//! set) cost more than sending it. Same document: a test compares the two.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    ANN_POLICIES, ANN_RESOURCE_NAME, ANN_RESOURCE_NAMESPACE, EPHEMERAL_API_VERSION,
    LABEL_MANAGED_BY, LABEL_RESOURCE_GROUP, LABEL_RESOURCE_KIND, LABEL_RESOURCE_UID,
    LABEL_RESOURCE_VERSION, LABEL_SOURCE, Owner, PolicyMeta, ReportSource, RuleResult, label_value,
    policy_label,
};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Doc<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: Meta<'a>,
    spec: Spec<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "<[OwnerRef<'a>]>::is_empty")]
    owner_references: &'a [OwnerRef<'a>],
}

#[derive(Serialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct OwnerRef<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
}

#[derive(Serialize)]
struct Spec<'a> {
    owner: OwnerRef<'a>,
    summary: Summary,
    results: Vec<Entry<'a>>,
}

#[derive(Serialize, Default)]
struct Summary {
    pass: u64,
    fail: u64,
    warn: u64,
    error: u64,
    skip: u64,
}

#[derive(Serialize)]
struct Entry<'a> {
    source: &'a str,
    policy: &'a str,
    rule: &'a str,
    result: &'a str,
    message: &'a str,
    scored: bool,
    timestamp: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    category: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    severity: Option<&'a str>,
}

#[derive(Serialize)]
struct Timestamp {
    seconds: u64,
    nanos: u32,
}

/// The JSON of the ephemeral report [`ephemeral_report`](crate::ephemeral_report)
/// makes of the same results (each with its policy's metadata, as
/// [`result_entry`](crate::result_entry) takes them) at `timestamp`.
///
/// `owned`: whether `metadata.ownerReferences` names the resource. Not for
/// the admission report of a CREATE: the resource is not stored yet when
/// its review is answered, and kube-apiserver's garbage collector, looking
/// the owner up before it exists, deletes the report as an orphan (seen on
/// a real control plane: a few reports in a hundred lost). The aggregate
/// report, written once the resource exists, is owned by it.
pub fn ephemeral_report_json(
    owner: &Owner,
    name: &str,
    source: ReportSource,
    evaluated: &[(String, String)],
    results: &[(&RuleResult, &PolicyMeta)],
    timestamp: u64,
    owned: bool,
) -> Vec<u8> {
    let mut labels = BTreeMap::new();
    let mut label = |k: &str, v: &str| labels.insert(k.to_string(), v.to_string());
    label(LABEL_MANAGED_BY, "kyverno");
    label(LABEL_RESOURCE_UID, &owner.uid);
    label(LABEL_RESOURCE_GROUP, owner.group());
    label(LABEL_RESOURCE_VERSION, owner.version());
    label(LABEL_RESOURCE_KIND, &owner.kind);
    label(LABEL_SOURCE, source.as_str());
    for (key, rv) in evaluated {
        if let Some(l) = policy_label(key) {
            labels.insert(l, label_value(rv));
        }
    }
    let keys: Vec<&str> = evaluated.iter().map(|(k, _)| k.as_str()).collect();
    let mut annotations = BTreeMap::new();
    annotations.insert(ANN_RESOURCE_NAME, owner.name.clone());
    annotations.insert(
        ANN_POLICIES,
        serde_json::to_string(&keys).unwrap_or_default(),
    );
    if !owner.cluster_scoped() {
        annotations.insert(ANN_RESOURCE_NAMESPACE, owner.namespace.clone());
    }
    let reference = OwnerRef {
        api_version: &owner.api_version,
        kind: &owner.kind,
        name: &owner.name,
        uid: &owner.uid,
    };
    let mut summary = Summary::default();
    let mut entries: Vec<Entry<'_>> = results
        .iter()
        .map(|(r, meta)| {
            let result = r.status.as_str();
            match result {
                "pass" => summary.pass += 1,
                "fail" => summary.fail += 1,
                "warn" => summary.warn += 1,
                "error" => summary.error += 1,
                "skip" => summary.skip += 1,
                _ => {}
            }
            Entry {
                source: r.source.as_str(),
                policy: &r.policy,
                rule: &r.rule,
                result,
                message: &r.message,
                scored: meta.scored,
                timestamp: Timestamp {
                    seconds: timestamp,
                    nanos: 0,
                },
                category: meta.category.as_deref(),
                severity: meta.severity.as_deref(),
            }
        })
        .collect();
    // Stable, by (policy, rule): the order `ephemeral_report` gives them.
    entries.sort_by(|a, b| (a.policy, a.rule).cmp(&(b.policy, b.rule)));
    let doc = Doc {
        api_version: EPHEMERAL_API_VERSION,
        kind: if owner.cluster_scoped() {
            "ClusterEphemeralReport"
        } else {
            "EphemeralReport"
        },
        metadata: Meta {
            name,
            namespace: &owner.namespace,
            labels,
            annotations,
            owner_references: if owned {
                std::slice::from_ref(&reference)
            } else {
                &[]
            },
        },
        spec: Spec {
            owner: reference,
            summary,
            results: entries,
        },
    };
    serde_json::to_vec(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use leash_policy::{Source, Status};
    use serde_json::Value;

    use super::*;
    use crate::{ephemeral_report, result_entry};

    fn result(policy: &str, rule: &str, status: Status, message: &str) -> RuleResult {
        RuleResult {
            policy: Arc::from(policy),
            rule: rule.to_string(),
            status,
            message: message.to_string(),
            source: Source::Kyverno,
        }
    }

    /// The serialized report is the document `ephemeral_report` builds, for
    /// a namespaced and a cluster-scoped owner, with and without category
    /// and severity, results given out of order, messages needing escapes.
    #[test]
    fn the_json_is_the_document_ephemeral_report_builds() {
        let results = [
            result("zeta", "b", Status::Fail, "a \"quoted\"\nmessage"),
            result("alpha", "r2", Status::Pass, "validation rule 'r2' passed."),
            result("alpha", "r1", Status::Skip, "skipped"),
            result("ns/local", "r", Status::Warn, "warned"),
            result("zeta", "a", Status::Error, "error"),
        ];
        let full = PolicyMeta {
            category: Some("Pod Security Standards (Baseline)".into()),
            severity: Some("medium".into()),
            scored: true,
        };
        let bare = PolicyMeta {
            scored: false,
            ..PolicyMeta::default()
        };
        let metas = [&full, &bare, &bare, &full, &full];
        let evaluated = vec![
            ("alpha".to_string(), "12".to_string()),
            ("ns/local".to_string(), "7".to_string()),
            ("zeta".to_string(), String::new()),
            ("x".repeat(70), "1".to_string()),
        ];
        for owner in [
            Owner {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: "default".into(),
                name: "web".into(),
                uid: "u-1".into(),
            },
            Owner {
                api_version: "rbac.authorization.k8s.io/v1".into(),
                kind: "ClusterRole".into(),
                namespace: String::new(),
                name: "admin".into(),
                uid: "u-2".into(),
            },
        ] {
            let pairs: Vec<(&RuleResult, &PolicyMeta)> =
                results.iter().zip(metas.iter().copied()).collect();
            let json = ephemeral_report_json(
                &owner,
                "u-1-abcd",
                ReportSource::Admission,
                &evaluated,
                &pairs,
                1_796_357_933,
                true,
            );
            let entries = pairs
                .iter()
                .map(|(r, m)| result_entry(r, m, 1_796_357_933))
                .collect();
            let want = ephemeral_report(
                &owner,
                "u-1-abcd",
                ReportSource::Admission,
                &evaluated,
                entries,
            );
            let got: Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(got, want, "{}", owner.kind);
            // Unowned (a CREATE's admission report): the same document
            // without ownerReferences.
            let unowned = ephemeral_report_json(
                &owner,
                "u-1-abcd",
                ReportSource::Admission,
                &evaluated,
                &pairs,
                1_796_357_933,
                false,
            );
            let mut want = want;
            want["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("ownerReferences");
            let got: Value = serde_json::from_slice(&unowned).unwrap();
            assert_eq!(got, want, "{} unowned", owner.kind);
        }
    }
}
