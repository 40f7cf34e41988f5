//! `match` / `exclude`: which resources (and which requests) a rule applies to.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::kinds::split_api_version;
use crate::model::nullable;
use crate::request::{Operation, UserInfo};
use crate::wildcard;

/// What matching looks at: the resource's identity and the request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    pub name: &'a str,
    pub namespace: &'a str,
    pub labels: Option<&'a serde_json::Map<String, Value>>,
    pub annotations: Option<&'a serde_json::Map<String, Value>>,
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    pub operation: Operation,
    pub user: &'a UserInfo,
}

impl<'a> Target<'a> {
    pub(crate) fn of(
        object: &'a Value,
        namespace_labels: Option<&'a BTreeMap<String, String>>,
        operation: Operation,
        user: &'a UserInfo,
    ) -> Target<'a> {
        let (group, version) = split_api_version(object["apiVersion"].as_str().unwrap_or(""));
        let meta = &object["metadata"];
        Target {
            group,
            version,
            kind: object["kind"].as_str().unwrap_or(""),
            name: meta["name"].as_str().unwrap_or(""),
            namespace: meta["namespace"].as_str().unwrap_or(""),
            labels: meta["labels"].as_object(),
            annotations: meta["annotations"].as_object(),
            namespace_labels,
            operation,
            user,
        }
    }
}

/// A kind selector: `Pod`, `v1/Pod`, `apps/v1/Deployment`, `*/Pod`,
/// `Pod/exec` (subresource), wildcards anywhere.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KindSel {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub subresource: String,
    /// A plain `Kind` (any group and version, no wildcard, no
    /// subresource): matched by comparing the kind alone.
    pub plain: bool,
}

impl KindSel {
    /// `Kind`, `version/Kind` or `group/version/Kind`, as a policy names it.
    pub(crate) fn display(&self) -> String {
        if self.group == "*" && self.version == "*" {
            self.kind.clone()
        } else if self.group == "*" {
            format!("{}/{}", self.version, self.kind)
        } else {
            format!("{}/{}/{}", self.group, self.version, self.kind)
        }
    }

    pub(crate) fn parse(s: &str) -> KindSel {
        let parts: Vec<&str> = s.split('/').collect();
        let upper = |p: &str| p.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        let (g, v, k, sub) = match parts.as_slice() {
            [k] => ("*", "*", *k, ""),
            [a, b] if upper(a) || (*a == "*" && !upper(b) && *b != "*") => ("*", "*", *a, *b),
            [v, k] => ("*", *v, *k, ""),
            [v, k, sub] if upper(k) => ("*", *v, *k, *sub),
            [g, v, k] => (*g, *v, *k, ""),
            [g, v, k, sub, ..] => (*g, *v, *k, *sub),
            [] => ("*", "*", "", ""),
        };
        KindSel {
            group: g.to_string(),
            version: v.to_string(),
            kind: k.to_string(),
            subresource: sub.to_string(),
            plain: g == "*" && v == "*" && sub.is_empty() && !wildcard::has_wildcard(k),
        }
    }

    pub(crate) fn matches(&self, t: &Target<'_>) -> bool {
        if self.plain {
            return self.kind == t.kind;
        }
        // The kind first: it is what tells most selectors apart (a rule's
        // autogen twins name six controller kinds a pod never is).
        wildcard::matches(&self.kind, t.kind)
            && wildcard::matches(&self.group, t.group)
            && wildcard::matches(&self.version, t.version)
            && (self.subresource.is_empty() || self.subresource == "*")
    }
}

/// A label selector with Kyverno's wildcard support in `matchLabels`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "SelectorDoc")]
pub(crate) struct LabelSelector {
    match_labels: Vec<(String, String)>,
    expressions: Vec<Requirement>,
}

/// A label selector as written.
#[derive(Default, Deserialize)]
#[serde(
    default,
    rename_all = "camelCase",
    expecting = "a label selector object"
)]
struct SelectorDoc {
    #[serde(deserialize_with = "nullable")]
    match_labels: serde_json::Map<String, Value>,
    #[serde(deserialize_with = "nullable")]
    match_expressions: Vec<Requirement>,
}

impl From<SelectorDoc> for LabelSelector {
    fn from(doc: SelectorDoc) -> LabelSelector {
        let text = |v: Value| match v {
            Value::String(s) => s,
            Value::Null => String::new(),
            other => other.to_string(),
        };
        LabelSelector {
            match_labels: doc
                .match_labels
                .into_iter()
                .map(|(k, v)| (k, text(v)))
                .collect(),
            expressions: doc.match_expressions,
        }
    }
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Requirement {
    #[serde(default, deserialize_with = "nullable")]
    key: String,
    operator: SelectorOp,
    #[serde(default, deserialize_with = "nullable")]
    values: Vec<String>,
}

/// A label selector requirement's operator; any other would never match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
enum SelectorOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl TryFrom<String> for SelectorOp {
    type Error = String;
    fn try_from(op: String) -> std::result::Result<SelectorOp, String> {
        Ok(match op.as_str() {
            "In" => SelectorOp::In,
            "NotIn" => SelectorOp::NotIn,
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            _ => {
                return Err(format!(
                    "unknown operator {op:?} (In, NotIn, Exists, DoesNotExist)"
                ));
            }
        })
    }
}

impl LabelSelector {
    /// The selector at `field`.
    pub(crate) fn parse(
        v: &Value,
        field: &str,
        err: &dyn Fn(String, String) -> Error,
    ) -> Result<LabelSelector> {
        crate::model::parse(v, field, err)
    }

    /// Whether it selects nothing in particular (every object).
    pub(crate) fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.expressions.is_empty()
    }

    /// Whether `labels` are selected.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_map(Some(labels))
    }

    pub(crate) fn matches_json(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        let iter = || {
            labels
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.as_str(), v)))
        };
        self.matches_with(get, iter)
    }

    pub(crate) fn matches_map(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
        let iter = || {
            labels
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str()))
        };
        self.matches_with(get, iter)
    }

    fn matches_with<'a, G, I, It>(&self, get: G, iter: I) -> bool
    where
        G: Fn(&str) -> Option<&'a str>,
        I: Fn() -> It,
        It: Iterator<Item = (&'a str, &'a str)>,
    {
        for (k, v) in &self.match_labels {
            let ok = if wildcard::has_wildcard(k) || wildcard::has_wildcard(v) {
                iter().any(|(rk, rv)| wildcard::matches(k, rk) && wildcard::matches(v, rv))
            } else {
                get(k) == Some(v.as_str())
            };
            if !ok {
                return false;
            }
        }
        for Requirement {
            key,
            operator,
            values,
        } in &self.expressions
        {
            let present = get(key);
            let ok = match operator {
                SelectorOp::In => present.is_some_and(|p| values.iter().any(|v| v == p)),
                SelectorOp::NotIn => present.is_none_or(|p| !values.iter().any(|v| v == p)),
                SelectorOp::Exists => present.is_some(),
                SelectorOp::DoesNotExist => present.is_none(),
            };
            if !ok {
                return false;
            }
        }
        true
    }
}

/// One `resources` description.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "ResourceDoc")]
pub(crate) struct ResourceDesc {
    pub kinds: Vec<KindSel>,
    pub names: Vec<String>,
    pub namespaces: Vec<String>,
    pub annotations: Vec<(String, String)>,
    pub selector: Option<LabelSelector>,
    pub namespace_selector: Option<LabelSelector>,
    pub operations: Vec<Operation>,
}

/// `resources` as written.
#[derive(Default, Deserialize)]
#[serde(
    default,
    rename_all = "camelCase",
    expecting = "a resource description object"
)]
struct ResourceDoc {
    #[serde(deserialize_with = "nullable")]
    kinds: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    names: Vec<String>,
    /// The older single form of `names`.
    name: Option<String>,
    #[serde(deserialize_with = "nullable")]
    namespaces: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    annotations: serde_json::Map<String, Value>,
    selector: Option<LabelSelector>,
    namespace_selector: Option<LabelSelector>,
    #[serde(deserialize_with = "nullable")]
    operations: Vec<Operation>,
}

impl From<ResourceDoc> for ResourceDesc {
    fn from(doc: ResourceDoc) -> ResourceDesc {
        ResourceDesc {
            kinds: doc.kinds.iter().map(|k| KindSel::parse(k)).collect(),
            names: doc.names.into_iter().chain(doc.name).collect(),
            namespaces: doc.namespaces,
            annotations: doc
                .annotations
                .into_iter()
                .map(|(k, v)| (k, v.as_str().unwrap_or("").to_string()))
                .collect(),
            selector: doc.selector,
            namespace_selector: doc.namespace_selector,
            operations: doc.operations,
        }
    }
}

/// A subject of a rule's user-info match.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Subject {
    #[serde(default, deserialize_with = "nullable")]
    kind: String,
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, deserialize_with = "nullable")]
    namespace: String,
}

/// A `ResourceFilter`: resources plus user info.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(
    default,
    rename_all = "camelCase",
    expecting = "a resource filter object"
)]
pub(crate) struct Filter {
    #[serde(deserialize_with = "nullable")]
    pub resources: ResourceDesc,
    #[serde(deserialize_with = "nullable")]
    pub subjects: Vec<Subject>,
    #[serde(deserialize_with = "nullable")]
    pub roles: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub cluster_roles: Vec<String>,
}

impl Filter {
    /// Whether the filter names operations and nothing else.
    pub(crate) fn only_operations(&self) -> bool {
        let r = &self.resources;
        !r.operations.is_empty()
            && r.kinds.is_empty()
            && r.names.is_empty()
            && r.namespaces.is_empty()
            && r.annotations.is_empty()
            && r.selector.is_none()
            && r.namespace_selector.is_none()
            && self.subjects.is_empty()
            && self.roles.is_empty()
            && self.cluster_roles.is_empty()
    }
}

/// A `match` or `exclude` block.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "MatchDoc")]
pub(crate) struct MatchBlock {
    pub any: Vec<Filter>,
    pub all: Vec<Filter>,
}

/// `match`/`exclude` as written: `any`, `all`, and the older filter at
/// the top level (one more of `all`).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase", expecting = "a match block object")]
struct MatchDoc {
    #[serde(deserialize_with = "nullable")]
    any: Vec<Filter>,
    #[serde(deserialize_with = "nullable")]
    all: Vec<Filter>,
    #[serde(deserialize_with = "nullable")]
    resources: ResourceDesc,
    #[serde(deserialize_with = "nullable")]
    subjects: Vec<Subject>,
    #[serde(deserialize_with = "nullable")]
    roles: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    cluster_roles: Vec<String>,
}

impl From<MatchDoc> for MatchBlock {
    fn from(doc: MatchDoc) -> MatchBlock {
        let legacy = Filter {
            resources: doc.resources,
            subjects: doc.subjects,
            roles: doc.roles,
            cluster_roles: doc.cluster_roles,
        };
        let mut all = doc.all;
        if !legacy.is_empty() {
            all.push(legacy);
        }
        MatchBlock { any: doc.any, all }
    }
}

impl ResourceDesc {
    fn is_empty(&self) -> bool {
        *self == ResourceDesc::default()
    }

    fn matches(&self, t: &Target<'_>) -> bool {
        if !self.kinds.is_empty() && !self.kinds.iter().any(|k| k.matches(t)) {
            return false;
        }
        if !self.names.is_empty() && !self.names.iter().any(|n| wildcard::matches(n, t.name)) {
            return false;
        }
        if !self.namespaces.is_empty() {
            let ns = if t.kind == "Namespace" {
                t.name
            } else {
                t.namespace
            };
            if !self.namespaces.iter().any(|n| wildcard::matches(n, ns)) {
                return false;
            }
        }
        if !self.annotations.is_empty() {
            let ok = self.annotations.iter().all(|(k, v)| {
                t.annotations.is_some_and(|a| {
                    a.iter().any(|(ak, av)| {
                        wildcard::matches(k, ak)
                            && av.as_str().is_some_and(|av| wildcard::matches(v, av))
                    })
                })
            });
            if !ok {
                return false;
            }
        }
        if let Some(sel) = &self.selector
            && !sel.matches_json(t.labels)
        {
            return false;
        }
        if let Some(sel) = &self.namespace_selector {
            if t.kind == "Namespace" {
                if !sel.matches_json(t.labels) {
                    return false;
                }
            } else if !sel.matches_map(t.namespace_labels) {
                return false;
            }
        }
        if !self.operations.is_empty() && !self.operations.contains(&t.operation) {
            return false;
        }
        true
    }
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.resources.is_empty()
            && self.subjects.is_empty()
            && self.roles.is_empty()
            && self.cluster_roles.is_empty()
    }

    fn matches(&self, t: &Target<'_>) -> bool {
        if !self.resources.matches(t) {
            return false;
        }
        self.user_matches(t)
    }

    /// As a filter of a `match` block: without user info (the CLI's
    /// default, a background scan) Kyverno drops the filter's `subjects`,
    /// `roles` and `clusterRoles`, and a filter left empty matches nothing.
    fn matches_as_match(&self, t: &Target<'_>) -> bool {
        if *t.user == UserInfo::default() {
            return !self.resources.is_empty() && self.resources.matches(t);
        }
        self.matches(t)
    }

    fn user_matches(&self, t: &Target<'_>) -> bool {
        if !self.roles.is_empty() && !self.roles.iter().any(|r| t.user.roles.contains(r)) {
            return false;
        }
        if !self.cluster_roles.is_empty()
            && !self
                .cluster_roles
                .iter()
                .any(|r| t.user.cluster_roles.contains(r))
        {
            return false;
        }
        if !self.subjects.is_empty() && !self.subjects.iter().any(|s| subject_matches(s, t.user)) {
            return false;
        }
        true
    }
}

fn subject_matches(s: &Subject, user: &UserInfo) -> bool {
    match s.kind.as_str() {
        "User" => wildcard::matches(&s.name, &user.username),
        "Group" => user.groups.iter().any(|g| wildcard::matches(&s.name, g)),
        // The whole username as a pattern, as Kyverno's `CheckSubjects`:
        // `name: ci-*` or `namespace: "*"` match.
        "ServiceAccount" => wildcard::matches(
            &format!("system:serviceaccount:{}:{}", s.namespace, s.name),
            &user.username,
        ),
        _ => false,
    }
}

impl MatchBlock {
    pub(crate) fn is_empty(&self) -> bool {
        self.any.is_empty() && self.all.is_empty()
    }

    /// As a `match` block: empty matches nothing.
    pub(crate) fn matches(&self, t: &Target<'_>) -> bool {
        if self.is_empty() {
            return false;
        }
        let any_ok = self.any.is_empty() || self.any.iter().any(|f| f.matches_as_match(t));
        let all_ok = self.all.iter().all(|f| f.matches_as_match(t));
        any_ok && all_ok
    }

    /// As an `exclude` block: empty excludes nothing.
    pub(crate) fn excludes(&self, t: &Target<'_>) -> bool {
        let any = self
            .any
            .iter()
            .filter(|f| !f.is_empty())
            .any(|f| f.matches(t));
        let all = !self.all.is_empty() && self.all.iter().all(|f| f.matches(t));
        any || all
    }

    /// Every kind selector named (for autogen and loading).
    pub(crate) fn kinds(&self) -> Vec<&KindSel> {
        self.any
            .iter()
            .chain(&self.all)
            .flat_map(|f| f.resources.kinds.iter())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(field: String, message: String) -> Error {
        Error::invalid("ClusterPolicy", "t", field, message)
    }

    fn matches(block: Value, object: Value, ns_labels: Option<BTreeMap<String, String>>) -> bool {
        let b = crate::model::parse::<MatchBlock>(&block, "match", &err).unwrap();
        let user = UserInfo {
            username: "alice".into(),
            groups: vec!["devs".into()],
            roles: vec!["ns:role".into()],
            cluster_roles: vec!["admin".into()],
            ..UserInfo::default()
        };
        b.matches(&Target::of(
            &object,
            ns_labels.as_ref(),
            Operation::Create,
            &user,
        ))
    }

    #[test]
    fn match_table() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1", "namespace": "prod", "labels": {"app": "web", "tier": "front"}, "annotations": {"team": "a"}}});
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "dev"}});
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod", "labels": {"env": "prod"}}});
        let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        let cases = [
            (
                "kind",
                json!({"any": [{"resources": {"kinds": ["Pod"]}}]}),
                &pod,
                true,
            ),
            (
                "other kind",
                json!({"any": [{"resources": {"kinds": ["Pod"]}}]}),
                &deploy,
                false,
            ),
            (
                "gvk",
                json!({"any": [{"resources": {"kinds": ["apps/v1/Deployment"]}}]}),
                &deploy,
                true,
            ),
            (
                "gvk wrong group",
                json!({"any": [{"resources": {"kinds": ["batch/v1/Deployment"]}}]}),
                &deploy,
                false,
            ),
            (
                "version/kind",
                json!({"any": [{"resources": {"kinds": ["v1/Pod"]}}]}),
                &pod,
                true,
            ),
            (
                "*/Pod",
                json!({"any": [{"resources": {"kinds": ["*/Pod"]}}]}),
                &pod,
                true,
            ),
            (
                "wildcard kind",
                json!({"any": [{"resources": {"kinds": ["*"]}}]}),
                &deploy,
                true,
            ),
            (
                "subresource only",
                json!({"any": [{"resources": {"kinds": ["Pod/exec"]}}]}),
                &pod,
                false,
            ),
            (
                "legacy",
                json!({"resources": {"kinds": ["Pod"], "namespaces": ["prod"]}}),
                &pod,
                true,
            ),
            (
                "legacy ns miss",
                json!({"resources": {"kinds": ["Pod"], "namespaces": ["dev"]}}),
                &pod,
                false,
            ),
            (
                "names wildcard",
                json!({"any": [{"resources": {"kinds": ["Pod"], "names": ["web-*"]}}]}),
                &pod,
                true,
            ),
            (
                "names miss",
                json!({"any": [{"resources": {"kinds": ["Pod"], "names": ["db-*"]}}]}),
                &pod,
                false,
            ),
            (
                "selector",
                json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"app": "web"}}}}]}),
                &pod,
                true,
            ),
            (
                "selector wildcard",
                json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchLabels": {"ti*": "fr*"}}}}]}),
                &pod,
                true,
            ),
            (
                "selector expr",
                json!({"any": [{"resources": {"kinds": ["Pod"], "selector": {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}}}]}),
                &pod,
                false,
            ),
            (
                "annotations",
                json!({"any": [{"resources": {"kinds": ["Pod"], "annotations": {"team": "?"}}}]}),
                &pod,
                true,
            ),
            (
                "ns selector",
                json!({"any": [{"resources": {"kinds": ["Pod"], "namespaceSelector": {"matchLabels": {"env": "prod"}}}}]}),
                &pod,
                true,
            ),
            (
                "namespace by name",
                json!({"any": [{"resources": {"kinds": ["Namespace"], "namespaces": ["prod"]}}]}),
                &ns,
                true,
            ),
            (
                "operations",
                json!({"any": [{"resources": {"kinds": ["Pod"], "operations": ["UPDATE"]}}]}),
                &pod,
                false,
            ),
            (
                "all needs both",
                json!({"all": [{"resources": {"kinds": ["Pod"]}}, {"resources": {"namespaces": ["dev"]}}]}),
                &pod,
                false,
            ),
            (
                "any needs one",
                json!({"any": [{"resources": {"kinds": ["Deployment"]}}, {"resources": {"namespaces": ["prod"]}}]}),
                &pod,
                true,
            ),
            (
                "subjects user",
                json!({"any": [{"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "User", "name": "alice"}]}]}),
                &pod,
                true,
            ),
            (
                "subjects group miss",
                json!({"any": [{"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "Group", "name": "ops"}]}]}),
                &pod,
                false,
            ),
            (
                "clusterRoles",
                json!({"any": [{"resources": {"kinds": ["Pod"]}, "clusterRoles": ["admin"]}]}),
                &pod,
                true,
            ),
            (
                "roles miss",
                json!({"any": [{"resources": {"kinds": ["Pod"]}, "roles": ["other"]}]}),
                &pod,
                false,
            ),
            ("empty matches nothing", json!({}), &pod, false),
        ];
        for (name, block, object, want) in cases {
            assert_eq!(
                matches(block, object.clone(), Some(labels.clone())),
                want,
                "{name}"
            );
        }
    }

    /// Without user info (no `userinfo` file in `leash test`, `leash
    /// apply` without `--userinfo`), a match filter's `subjects`, `roles`
    /// and `clusterRoles` are dropped, as Kyverno drops them; a filter
    /// with nothing else then matches nothing. An exclude filter keeps
    /// them.
    #[test]
    fn match_without_user_info_drops_user_filters() {
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}});
        let nobody = UserInfo::default();
        let alice = UserInfo {
            username: "alice".into(),
            ..UserInfo::default()
        };
        let check = |block: Value, user: &UserInfo| {
            let t = Target::of(&pod, None, Operation::Create, user);
            let b = crate::model::parse::<MatchBlock>(&block, "match", &err).unwrap();
            (b.matches(&t), b.excludes(&t))
        };
        let sa = json!({"any": [{"resources": {"kinds": ["Pod"]}, "subjects": [{"kind": "ServiceAccount", "name": "dev", "namespace": "x"}]}]});
        assert_eq!(check(sa.clone(), &nobody), (true, false));
        assert_eq!(check(sa, &alice), (false, false));
        let roles = json!({"all": [{"resources": {"kinds": ["Pod"]}, "roles": ["x:r"], "clusterRoles": ["c"]}]});
        assert_eq!(check(roles.clone(), &nobody), (true, false));
        assert_eq!(check(roles, &alice), (false, false));
        let only_subjects = json!({"any": [{"subjects": [{"kind": "User", "name": "alice"}]}]});
        assert_eq!(check(only_subjects.clone(), &nobody), (false, false));
        assert_eq!(check(only_subjects, &alice), (true, true));
    }

    /// A ServiceAccount subject is a pattern of the whole username, as
    /// in Kyverno's `CheckSubjects`: wildcards in its name and namespace.
    #[test]
    fn service_account_subjects_match_wildcards() {
        let pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}});
        let ci_bot = UserInfo {
            username: "system:serviceaccount:build:ci-bot".into(),
            ..UserInfo::default()
        };
        let t = Target::of(&pod, None, Operation::Create, &ci_bot);
        let matches = |name: &str, namespace: &str| {
            let block = json!({"any": [{"resources": {"kinds": ["Pod"]},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}]});
            crate::model::parse::<MatchBlock>(&block, "match", &err)
                .unwrap()
                .matches(&t)
        };
        assert!(matches("ci-bot", "build"));
        assert!(matches("ci-*", "build"));
        assert!(matches("*", "build"));
        assert!(matches("ci-bot", "bu*"));
        assert!(!matches("ci-*", "prod"));
        assert!(!matches("cd-*", "build"));
    }

    #[test]
    fn exclude_semantics() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "kube-system"}});
        let user = UserInfo::default();
        let t = Target::of(&pod, None, Operation::Create, &user);
        let ex = |v: Value| {
            crate::model::parse::<MatchBlock>(&v, "exclude", &err)
                .unwrap()
                .excludes(&t)
        };
        assert!(ex(
            json!({"any": [{"resources": {"namespaces": ["kube-system"]}}]})
        ));
        assert!(!ex(
            json!({"any": [{"resources": {"namespaces": ["default"]}}]})
        ));
        assert!(ex(json!({"resources": {"namespaces": ["kube-*"]}})));
        assert!(!ex(json!({})));
        assert!(!ex(
            json!({"all": [{"resources": {"namespaces": ["kube-system"]}}, {"resources": {"kinds": ["Deployment"]}}]})
        ));
    }
}
