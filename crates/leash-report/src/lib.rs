//! leash-report: policy results as the report objects Kyverno 1.12+ writes.
//!
//! Pure: objects in, objects out, no I/O. The background scan and the
//! admission webhook turn [`RuleResult`]s into one `reports.kyverno.io/v1`
//! `EphemeralReport` (`ClusterEphemeralReport` for cluster-scoped
//! resources) per resource and source ([`ephemeral_report`]); the aggregate
//! controller folds them into the resource's one `wgpolicyk8s.io/v1alpha2`
//! `PolicyReport` / `ClusterPolicyReport` ([`merge`]), named by the
//! resource's uid, in its namespace, owned by it, with `scope` and
//! `summary`; [`prune`] drops results whose policy or rule no longer exists.
//!
//! Merge rule: results are keyed by (policy, rule). An ephemeral report
//! lists the policies it evaluated (annotation [`ANN_POLICIES`]); a
//! background-scan report is the whole truth for those policies (their old
//! results go, its results come), an admission report updates only the
//! (policy, rule) pairs it carries. The newer timestamp wins between
//! admission results.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

pub use leash_policy::{RuleResult, Status};

/// The API version of ephemeral reports.
pub const EPHEMERAL_API_VERSION: &str = "reports.kyverno.io/v1";
/// The API version of policy reports.
pub const REPORT_API_VERSION: &str = "wgpolicyk8s.io/v1alpha2";
/// `app.kubernetes.io/managed-by`, as Kyverno sets it on every report.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Kyverno's label: the uid of the resource an ephemeral report is about.
pub const LABEL_RESOURCE_UID: &str = "audit.kyverno.io/resource.uid";
/// Kyverno's label: the resource's API group.
pub const LABEL_RESOURCE_GROUP: &str = "audit.kyverno.io/resource.group";
/// Kyverno's label: the resource's API version.
pub const LABEL_RESOURCE_VERSION: &str = "audit.kyverno.io/resource.version";
/// Kyverno's label: the resource's kind.
pub const LABEL_RESOURCE_KIND: &str = "audit.kyverno.io/resource.kind";
/// Kyverno's label: what produced the report (`background-scan`, `admission`).
pub const LABEL_SOURCE: &str = "audit.kyverno.io/source";
/// Kyverno's annotation: the resource's name.
pub const ANN_RESOURCE_NAME: &str = "audit.kyverno.io/resource.name";
/// Kyverno's annotation: the resource's namespace.
pub const ANN_RESOURCE_NAMESPACE: &str = "audit.kyverno.io/resource.namespace";
/// leash's annotation: the JSON list of the policy keys an ephemeral report
/// evaluated (label keys cannot hold every policy name, annotations can).
pub const ANN_POLICIES: &str = "audit.leash.dev/policies";

/// Who wrote an ephemeral report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportSource {
    /// The background scan: the whole truth for the policies it evaluated.
    BackgroundScan,
    /// The admission webhook: updates the rules it carries.
    Admission,
}

impl ReportSource {
    /// The value of [`LABEL_SOURCE`].
    pub fn as_str(self) -> &'static str {
        match self {
            ReportSource::BackgroundScan => "background-scan",
            ReportSource::Admission => "admission",
        }
    }
}

/// The resource a report is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    /// `apiVersion` (`v1`, `apps/v1`).
    pub api_version: String,
    /// `kind`
    pub kind: String,
    /// `metadata.namespace`, empty for cluster-scoped resources.
    pub namespace: String,
    /// `metadata.name`
    pub name: String,
    /// `metadata.uid`
    pub uid: String,
}

impl Owner {
    /// The owner of an object; `None` without kind, name or uid (a report
    /// is named by the uid, so an object without one cannot have one).
    pub fn of(object: &Value) -> Option<Owner> {
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let owner = Owner {
            api_version: s(&object["apiVersion"]),
            kind: s(&object["kind"]),
            namespace: s(&object["metadata"]["namespace"]),
            name: s(&object["metadata"]["name"]),
            uid: s(&object["metadata"]["uid"]),
        };
        (!owner.kind.is_empty() && !owner.name.is_empty() && !owner.uid.is_empty()).then_some(owner)
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// The version part of `apiVersion`.
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or(self.api_version.as_str(), |(_, v)| v)
    }

    /// Whether the resource is cluster-scoped.
    pub fn cluster_scoped(&self) -> bool {
        self.namespace.is_empty()
    }

    /// `KIND NAMESPACE/NAME` (or `KIND NAME`), for messages.
    pub fn display(&self) -> String {
        if self.namespace.is_empty() {
            format!("{} {}", self.kind, self.name)
        } else {
            format!("{} {}/{}", self.kind, self.namespace, self.name)
        }
    }

    fn owner_reference(&self) -> Value {
        json!({"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid})
    }

    fn scope(&self) -> Value {
        let mut v = json!({"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid});
        if !self.namespace.is_empty() {
            v["namespace"] = json!(self.namespace);
        }
        v
    }
}

/// What a result needs from its policy: its annotations' category,
/// severity and `scored`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyMeta {
    /// `policies.kyverno.io/category`
    pub category: Option<String>,
    /// `policies.kyverno.io/severity`
    pub severity: Option<String>,
    /// `policies.kyverno.io/scored` is not `"false"`.
    pub scored: bool,
}

impl PolicyMeta {
    /// The metadata of a policy of `engine` by key; the default (scored,
    /// nothing else) for ValidatingPolicies and unknown keys.
    pub fn of(engine: &leash_policy::Engine, policy_key: &str) -> PolicyMeta {
        let Some(p) = engine.policies().iter().find(|p| &**p.key() == policy_key) else {
            return PolicyMeta {
                scored: true,
                ..PolicyMeta::default()
            };
        };
        let ann = |k: &str| {
            p.annotation(k)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        PolicyMeta {
            category: ann("policies.kyverno.io/category"),
            severity: ann("policies.kyverno.io/severity"),
            scored: p.annotation("policies.kyverno.io/scored") != Some("false"),
        }
    }
}

/// One report result (`wgpolicyk8s.io/v1alpha2` `PolicyReportResult`).
/// `timestamp` is seconds since the epoch.
pub fn result_entry(r: &RuleResult, meta: &PolicyMeta, timestamp: u64) -> Value {
    let mut v = json!({
        "source": r.source.as_str(),
        "policy": &*r.policy,
        "rule": r.rule,
        "result": r.status.as_str(),
        "message": r.message,
        "scored": meta.scored,
        "timestamp": {"seconds": timestamp, "nanos": 0},
    });
    if let Some(c) = &meta.category {
        v["category"] = json!(c);
    }
    if let Some(s) = &meta.severity {
        v["severity"] = json!(s);
    }
    v
}

/// Counts of results by outcome, as a report's `summary`.
pub fn summary(results: &[Value]) -> Value {
    let mut counts: BTreeMap<&str, u64> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    for r in results {
        if let Some(c) = r["result"].as_str().and_then(|k| counts.get_mut(k)) {
            *c += 1;
        }
    }
    json!(counts)
}

/// The label Kyverno puts on a report for each policy it holds results of:
/// `cpol.kyverno.io/NAME` for cluster policies, `pol.kyverno.io/NAME` for
/// namespaced ones; `None` when the name cannot be a label key (over 63
/// characters; [`ANN_POLICIES`] still lists it).
pub fn policy_label(policy_key: &str) -> Option<String> {
    let label = match policy_key.split_once('/') {
        Some((_, name)) => format!("pol.kyverno.io/{name}"),
        None => format!("cpol.kyverno.io/{policy_key}"),
    };
    (label.split_once('/').map_or(0, |(_, n)| n.len()) <= 63).then_some(label)
}

/// An ephemeral report of `owner`'s results from one source.
///
/// `evaluated` holds the keys of every policy that was evaluated with its
/// resourceVersion (the label value), whether or not it produced results;
/// `results` come from [`result_entry`].
pub fn ephemeral_report(
    owner: &Owner,
    name: &str,
    source: ReportSource,
    evaluated: &[(String, String)],
    mut results: Vec<Value>,
) -> Value {
    sort_results(&mut results);
    let mut labels = Map::new();
    labels.insert(LABEL_MANAGED_BY.into(), json!("kyverno"));
    labels.insert(LABEL_RESOURCE_UID.into(), json!(owner.uid));
    labels.insert(LABEL_RESOURCE_GROUP.into(), json!(owner.group()));
    labels.insert(LABEL_RESOURCE_VERSION.into(), json!(owner.version()));
    labels.insert(LABEL_RESOURCE_KIND.into(), json!(owner.kind));
    labels.insert(LABEL_SOURCE.into(), json!(source.as_str()));
    for (key, rv) in evaluated {
        if let Some(label) = policy_label(key) {
            labels.insert(label, json!(label_value(rv)));
        }
    }
    let keys: Vec<&str> = evaluated.iter().map(|(k, _)| k.as_str()).collect();
    let mut metadata = json!({
        "name": name,
        "labels": labels,
        "annotations": {
            ANN_RESOURCE_NAME: owner.name,
            ANN_POLICIES: serde_json::to_string(&keys).unwrap_or_default(),
        },
        "ownerReferences": [owner.owner_reference()],
    });
    let kind = if owner.cluster_scoped() {
        "ClusterEphemeralReport"
    } else {
        metadata["namespace"] = json!(owner.namespace);
        metadata["annotations"][ANN_RESOURCE_NAMESPACE] = json!(owner.namespace);
        "EphemeralReport"
    };
    json!({
        "apiVersion": EPHEMERAL_API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "spec": {
            "owner": owner.owner_reference(),
            "summary": summary(&results),
            "results": results,
        },
    })
}

/// A label value is at most 63 characters of `[A-Za-z0-9_.-]`.
fn label_value(v: &str) -> String {
    v.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(63)
        .collect()
}

/// The source an ephemeral report declares.
pub fn ephemeral_source(report: &Value) -> ReportSource {
    match report["metadata"]["labels"][LABEL_SOURCE].as_str() {
        Some("admission") => ReportSource::Admission,
        _ => ReportSource::BackgroundScan,
    }
}

/// The policy keys an ephemeral report evaluated.
pub fn ephemeral_policies(report: &Value) -> BTreeSet<String> {
    report["metadata"]["annotations"][ANN_POLICIES]
        .as_str()
        .and_then(|s| serde_json::from_str::<Vec<String>>(s).ok())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

fn key_of(r: &Value) -> (String, String) {
    (
        r["policy"].as_str().unwrap_or("").to_string(),
        r["rule"].as_str().unwrap_or("").to_string(),
    )
}

fn seconds(r: &Value) -> u64 {
    r["timestamp"]["seconds"].as_u64().unwrap_or(0)
}

fn sort_results(results: &mut [Value]) {
    // Compared in place: a key built per comparison is two allocations.
    fn key(r: &Value) -> (&str, &str) {
        (
            r["policy"].as_str().unwrap_or(""),
            r["rule"].as_str().unwrap_or(""),
        )
    }
    results.sort_by(|a, b| key(a).cmp(&key(b)));
}

/// The results of a policy report (empty when it has none).
pub fn report_results(report: &Value) -> &[Value] {
    report["results"].as_array().map_or(&[], Vec::as_slice)
}

/// Folds ephemeral reports (oldest first) into `owner`'s policy report.
/// `existing` is the report as stored (its results are the starting
/// point); the answer is the whole report to store, possibly with no
/// results (the caller deletes it then: a resource nothing matches has no
/// report).
pub fn merge(owner: &Owner, existing: Option<&Value>, ephemerals: &[&Value]) -> Value {
    merge_owned(
        owner,
        existing.cloned(),
        ephemerals.iter().map(|v| (*v).clone()).collect(),
    )
}

/// [`merge`] of reports the caller gives up: their results are moved into
/// the policy report, not copied.
pub fn merge_owned(owner: &Owner, existing: Option<Value>, ephemerals: Vec<Value>) -> Value {
    let take_results = |mut report: Value, at: &[&str]| -> Vec<Value> {
        let mut v = &mut report;
        for k in at {
            v = &mut v[*k];
        }
        match v.take() {
            Value::Array(a) => a,
            _ => Vec::new(),
        }
    };
    let mut results: BTreeMap<(String, String), Value> = existing
        .map(|e| take_results(e, &["results"]))
        .unwrap_or_default()
        .into_iter()
        .map(|r| (key_of(&r), r))
        .collect();
    for eph in ephemerals {
        let source = ephemeral_source(&eph);
        let evaluated = ephemeral_policies(&eph);
        let incoming = take_results(eph, &["spec", "results"]);
        match source {
            ReportSource::BackgroundScan => {
                results.retain(|(policy, _), _| !evaluated.contains(policy));
                for r in incoming {
                    results.insert(key_of(&r), r);
                }
            }
            ReportSource::Admission => {
                for r in incoming {
                    let key = key_of(&r);
                    let newer = results
                        .get(&key)
                        .is_none_or(|old| seconds(old) <= seconds(&r));
                    if newer {
                        results.insert(key, r);
                    }
                }
            }
        }
    }
    policy_report(owner, results.into_values().collect())
}

/// `owner`'s policy report holding `results`.
pub fn policy_report(owner: &Owner, mut results: Vec<Value>) -> Value {
    sort_results(&mut results);
    let policies: BTreeSet<String> = results.iter().map(|r| key_of(r).0).collect();
    let mut labels = Map::new();
    labels.insert(LABEL_MANAGED_BY.into(), json!("kyverno"));
    for p in &policies {
        if let Some(label) = policy_label(p) {
            labels.insert(label, json!(""));
        }
    }
    let mut metadata = json!({
        "name": owner.uid,
        "labels": labels,
        "ownerReferences": [owner.owner_reference()],
    });
    let kind = if owner.cluster_scoped() {
        "ClusterPolicyReport"
    } else {
        metadata["namespace"] = json!(owner.namespace);
        "PolicyReport"
    };
    json!({
        "apiVersion": REPORT_API_VERSION,
        "kind": kind,
        "metadata": metadata,
        "scope": owner.scope(),
        "summary": summary(&results),
        "results": results,
    })
}

/// The owner a policy report names in its `scope`.
pub fn report_owner(report: &Value) -> Option<Owner> {
    let scope = &report["scope"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let owner = Owner {
        api_version: s(&scope["apiVersion"]),
        kind: s(&scope["kind"]),
        namespace: s(&scope["namespace"]),
        name: s(&scope["name"]),
        uid: s(&scope["uid"]),
    };
    (!owner.uid.is_empty()).then_some(owner)
}

/// Drops the results whose (policy, rule) `live` rejects. `None` when
/// nothing changed; otherwise the report to store (with no results: to
/// delete).
pub fn prune(report: &Value, live: impl Fn(&str, &str) -> bool) -> Option<Value> {
    let results = report_results(report);
    let kept: Vec<Value> = results
        .iter()
        .filter(|r| {
            live(
                r["policy"].as_str().unwrap_or(""),
                r["rule"].as_str().unwrap_or(""),
            )
        })
        .cloned()
        .collect();
    if kept.len() == results.len() {
        return None;
    }
    let owner = report_owner(report)?;
    let mut out = policy_report(&owner, kept);
    if let Some(rv) = report["metadata"].get("resourceVersion") {
        out["metadata"]["resourceVersion"] = rv.clone();
    }
    Some(out)
}

/// Whether two policy reports hold the same results and summary (ignoring
/// timestamps), so that an unchanged report is not written again.
pub fn same_results(a: &Value, b: &Value) -> bool {
    let strip = |r: &Value| {
        let mut r = r.clone();
        if let Some(m) = r.as_object_mut() {
            m.remove("timestamp");
        }
        r
    };
    let ra: Vec<Value> = report_results(a).iter().map(strip).collect();
    let rb: Vec<Value> = report_results(b).iter().map(strip).collect();
    ra == rb && a["metadata"]["labels"] == b["metadata"]["labels"]
}

mod encode;
pub use encode::ephemeral_report_json;

#[cfg(test)]
mod tests;
