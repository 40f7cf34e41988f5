//! Generate rules (`kyverno.io/v1` `generate`): what a trigger resource asks
//! to exist. Evaluation is pure: it returns the downstream objects a rule
//! wants, fully formed (identity, data or cloned source, Kyverno's
//! `generate.kyverno.io/*` labels); creating them is the caller's job (the
//! CLI prints them, `leash serve`'s background component applies them).

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::eval::{Bindings, Lazy, Outcome, Prepared, RuleCtx};
use crate::kinds::split_api_version;
use crate::matching::LabelSelector;
use crate::model;
use crate::policy::ErrFn;
use crate::policy::Policy;
use crate::request::ClusterData;
use crate::result::{RuleResult, Status};
use crate::vars::ExprCache;

/// A compiled `generate` block.
#[derive(Debug)]
pub(crate) struct GenerateSpec {
    api_version: String,
    kind: String,
    name: String,
    namespace: String,
    synchronize: bool,
    orphan_on_policy_delete: bool,
    generate_existing: Option<bool>,
    source: GenSource,
}

#[derive(Debug)]
enum GenSource {
    /// `data`: the downstream's content, variables substituted.
    Data(Value),
    /// `clone`: a copy of one source object.
    Clone { namespace: String, name: String },
    /// `cloneList`: copies of every object of `kinds` in `namespace` that
    /// `selector` selects, each keeping its name.
    CloneList {
        namespace: String,
        kinds: Vec<String>,
        selector: Option<LabelSelector>,
    },
}

impl GenerateSpec {
    pub(crate) fn compile(
        g: &model::Generate,
        field: &str,
        err: &ErrFn<'_>,
        cache: &mut ExprCache,
    ) -> Result<GenerateSpec> {
        let collect = |cache: &mut ExprCache, doc: &Value, f: &str| {
            cache
                .collect(doc)
                .map_err(|e| err(format!("{field}.{f}"), e))
        };
        if g.foreach.is_some() {
            // Refused, not passed over: a rule that generated only its
            // top-level downstream (or failed for lacking one) would
            // silently differ from Kyverno's.
            return Err(err(
                format!("{field}.foreach"),
                "is not supported by leash (Kyverno 1.13's generate foreach); \
                 write one generate rule per downstream"
                    .into(),
            ));
        }
        let sources = [g.data.is_some(), g.clone.is_some(), g.clone_list.is_some()];
        if sources.iter().filter(|s| **s).count() > 1 {
            return Err(err(
                field.to_string(),
                "only one of data, clone and cloneList may be set".into(),
            ));
        }
        let source = if let Some(cl) = &g.clone_list {
            if cl.kinds.is_empty() {
                return Err(err(
                    format!("{field}.cloneList.kinds"),
                    "is required (a non-empty list)".into(),
                ));
            }
            let selector = match &cl.selector {
                None => None,
                Some(s) => Some(LabelSelector::parse(
                    s,
                    &format!("{field}.cloneList.selector"),
                    err,
                )?),
            };
            collect(cache, &json!(cl.namespace), "cloneList.namespace")?;
            GenSource::CloneList {
                namespace: cl.namespace.clone(),
                kinds: cl.kinds.clone(),
                selector,
            }
        } else if let Some(c) = &g.clone {
            if c.name.is_empty() {
                return Err(err(format!("{field}.clone.name"), "is required".into()));
            }
            collect(cache, &json!([c.name, c.namespace]), "clone")?;
            GenSource::Clone {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            }
        } else {
            let data = g.data.clone().map_or(Value::Null, Value::Object);
            collect(cache, &data, "data")?;
            GenSource::Data(data)
        };
        let spec = GenerateSpec {
            api_version: g.api_version.clone(),
            kind: g.kind.clone(),
            name: g.name.clone(),
            namespace: g.namespace.clone(),
            synchronize: g.synchronize.unwrap_or(false),
            orphan_on_policy_delete: g.orphan_downstream_on_policy_delete.unwrap_or(false),
            generate_existing: g.generate_existing,
            source,
        };
        if !matches!(spec.source, GenSource::CloneList { .. }) {
            for (key, v) in [
                ("apiVersion", &spec.api_version),
                ("kind", &spec.kind),
                ("name", &spec.name),
            ] {
                if v.is_empty() {
                    return Err(err(format!("{field}.{key}"), "is required".into()));
                }
            }
        }
        for (key, v) in [("name", &spec.name), ("namespace", &spec.namespace)] {
            collect(cache, &Value::String(v.clone()), key)?;
        }
        Ok(spec)
    }

    /// `synchronize`: downstreams follow the rule and the trigger.
    pub(crate) fn synchronize(&self) -> bool {
        self.synchronize
    }
}

/// Where a generate rule's downstreams live, and how they are kept: what
/// the background controller watches and cleans up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateTarget {
    /// The rule's name.
    pub rule: String,
    /// `apiVersion`s and kinds of the downstreams (one, or a `cloneList`'s).
    pub kinds: Vec<(String, String)>,
    /// `synchronize`.
    pub synchronize: bool,
    /// `orphanDownstreamOnPolicyDelete`.
    pub orphan_on_policy_delete: bool,
    /// `generateExisting` (the rule's, else the policy's).
    pub generate_existing: bool,
    /// The kinds the rule's match names (the triggers).
    pub trigger_kinds: Vec<String>,
}

/// What one generate rule asks for one trigger.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// `pass` with downstreams, `skip` (preconditions), or `error`.
    pub result: RuleResult,
    /// The objects that should exist, complete with identity and labels.
    pub downstreams: Vec<Value>,
    /// `synchronize`: downstreams are kept in step with rule and trigger.
    pub synchronize: bool,
    /// `orphanDownstreamOnPolicyDelete`.
    pub orphan_on_policy_delete: bool,
    /// Whether the rule generates for triggers that already exist.
    pub generate_existing: bool,
}

/// The metadata fields a clone drops from its source: they belong to the
/// source object, and the API server assigns them anew.
const CLONE_DROPPED_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "ownerReferences",
    "selfLink",
    "finalizers",
];

/// The labels Kyverno puts on a downstream (policy, rule and trigger), by
/// which the background controller finds a trigger's downstreams again.
pub fn downstream_labels(policy: &Policy, rule: &str, trigger: &Value) -> Map<String, Value> {
    labels_for(policy.name(), policy.namespace(), rule, trigger)
}

/// [`downstream_labels`] by the policy's name and namespace.
pub(crate) fn labels_for(
    policy: &str,
    policy_namespace: Option<&str>,
    rule: &str,
    trigger: &Value,
) -> Map<String, Value> {
    let meta = &trigger["metadata"];
    let (group, version) = split_api_version(trigger["apiVersion"].as_str().unwrap_or(""));
    let mut labels = Map::new();
    let mut put = |k: &str, v: &str| {
        labels.insert(k.to_string(), Value::String(label_value(v)));
    };
    put("app.kubernetes.io/managed-by", "kyverno");
    put("generate.kyverno.io/policy-name", policy);
    if let Some(ns) = policy_namespace {
        put("generate.kyverno.io/policy-namespace", ns);
    }
    put("generate.kyverno.io/rule-name", rule);
    put("generate.kyverno.io/trigger-group", group);
    put("generate.kyverno.io/trigger-version", version);
    put(
        "generate.kyverno.io/trigger-kind",
        trigger["kind"].as_str().unwrap_or(""),
    );
    put(
        "generate.kyverno.io/trigger-namespace",
        meta["namespace"].as_str().unwrap_or(""),
    );
    put(
        "generate.kyverno.io/trigger-name",
        meta["name"].as_str().unwrap_or(""),
    );
    put(
        "generate.kyverno.io/trigger-uid",
        meta["uid"].as_str().unwrap_or(""),
    );
    labels
}

/// A label value as Kubernetes accepts it: at most 63 characters.
fn label_value(v: &str) -> String {
    v.chars().take(63).collect()
}

impl Policy {
    /// Whether any rule generates.
    pub fn has_generate(&self) -> bool {
        self.rules.iter().any(|r| r.generate.is_some())
    }

    /// The names of the generate rules.
    pub fn generate_rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .filter(|r| r.generate.is_some())
            .map(|r| r.name.as_str())
    }

    /// Whether a generate rule synchronizes its downstreams.
    pub fn rule_synchronizes(&self, rule: &str) -> bool {
        self.rules
            .iter()
            .find(|r| r.name == rule)
            .and_then(|r| r.generate.as_ref())
            .is_some_and(|g| g.synchronize())
    }

    /// The generate rules' targets.
    pub fn generate_targets(&self) -> Vec<GenerateTarget> {
        self.rules
            .iter()
            .filter_map(|r| {
                let g = r.generate.as_ref()?;
                let kinds = match &g.source {
                    GenSource::CloneList { kinds, .. } => kinds
                        .iter()
                        .map(|k| match k.rsplit_once('/') {
                            Some((av, k)) => (av.to_string(), k.to_string()),
                            None => ("v1".to_string(), k.clone()),
                        })
                        .collect(),
                    _ => vec![(g.api_version.clone(), g.kind.clone())],
                };
                Some(GenerateTarget {
                    rule: r.name.clone(),
                    kinds,
                    synchronize: g.synchronize,
                    orphan_on_policy_delete: g.orphan_on_policy_delete,
                    generate_existing: g.generate_existing.unwrap_or(self.generate_existing),
                    trigger_kinds: r.match_.kinds().iter().map(|k| k.display()).collect(),
                })
            })
            .collect()
    }

    /// Every kind named by a generate or mutate-existing rule's match (the
    /// trigger kinds).
    pub fn trigger_kinds(&self) -> Vec<String> {
        let mut out = Vec::new();
        let triggers = |r: &&crate::policy::Rule| {
            r.generate.is_some()
                || matches!(r.mutate, Some(crate::mutate::MutateSpec::Existing { .. }))
        };
        for r in self.rules.iter().filter(triggers) {
            for k in r.match_.kinds() {
                let s = k.display();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }

    /// Evaluates every generate rule that matches the trigger.
    pub fn generate(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Vec<Generated> {
        let mut out = Vec::new();
        self.each_matching_rule(
            prepared,
            &prepared.request().target(),
            data,
            bindings,
            |rule| rule.generate.is_some(),
            |ctx, lazy| out.push(ctx.run_generate(lazy)),
        );
        out
    }
}

impl RuleCtx<'_> {
    fn run_generate(&self, lazy: &Lazy<'_>) -> Generated {
        let spec = self.rule.generate.as_ref().expect("a generate rule");
        let mut generated = Generated {
            result: self.result(Outcome::new(Status::Pass, "")),
            downstreams: Vec::new(),
            synchronize: spec.synchronize,
            orphan_on_policy_delete: spec.orphan_on_policy_delete,
            generate_existing: spec
                .generate_existing
                .unwrap_or(self.policy.generate_existing),
        };
        let outcome = match self.downstreams(spec, lazy) {
            Ok(Some(objects)) => {
                let names: Vec<String> = objects.iter().map(describe).collect();
                generated.downstreams = objects;
                Outcome::new(Status::Pass, format!("generated {}", names.join(", ")))
            }
            Ok(None) => Outcome::new(Status::Skip, "preconditions not met"),
            Err(e) => Outcome::new(Status::Error, e),
        };
        generated.result = self.result(outcome);
        generated
    }

    /// The downstream objects, `None` when the preconditions exclude the
    /// rule.
    fn downstreams(
        &self,
        spec: &GenerateSpec,
        lazy: &Lazy<'_>,
    ) -> Result<Option<Vec<Value>>, String> {
        let loaded;
        let vars: &Lazy<'_> = if self.rule.context.is_empty() {
            lazy
        } else {
            let v = self
                .load_context(&self.rule.context, lazy.get())
                .map_err(|e| format!("failed to load context: {e}"))?;
            loaded = Lazy::ready(v);
            &loaded
        };
        if !self
            .preconditions(self.rule.preconditions.as_ref(), vars)
            .map_err(|e| format!("failed to evaluate preconditions: {e}"))?
        {
            return Ok(None);
        }
        let name = self.sub_str(&spec.name, vars.get())?;
        let namespace = self.sub_str(&spec.namespace, vars.get())?;
        let labels = downstream_labels(self.policy, &self.rule.name, &self.req.object);
        let objects = match &spec.source {
            GenSource::Data(data) => {
                let data = self.substituted(data, vars)?.into_owned();
                let mut obj = match data {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                obj.insert("apiVersion".into(), json!(spec.api_version));
                obj.insert("kind".into(), json!(spec.kind));
                vec![with_labels(Value::Object(obj), &name, &namespace, &labels)]
            }
            GenSource::Clone {
                namespace: src_ns,
                name: src_name,
            } => {
                let src_ns = self.sub_str(src_ns, vars.get())?;
                let src_name = self.sub_str(src_name, vars.get())?;
                let source = self
                    .data
                    .get(&spec.api_version, &spec.kind, &src_ns, &src_name)
                    .ok_or_else(|| {
                        format!(
                            "clone source {} {}/{} not found",
                            spec.kind, src_ns, src_name
                        )
                    })?;
                vec![with_labels(cloned(&source), &name, &namespace, &labels)]
            }
            GenSource::CloneList {
                namespace: src_ns,
                kinds,
                selector,
            } => {
                let src_ns = self.sub_str(src_ns, vars.get())?;
                let mut out = Vec::new();
                for kind in kinds {
                    let (api_version, kind) = match kind.rsplit_once('/') {
                        Some((av, k)) => (av, k),
                        None => ("v1", kind.as_str()),
                    };
                    let mut sources = self.data.list(api_version, kind, &src_ns);
                    sources.sort_by(|a, b| {
                        a["metadata"]["name"]
                            .as_str()
                            .cmp(&b["metadata"]["name"].as_str())
                    });
                    for source in sources {
                        let selected = selector.as_ref().is_none_or(|s| {
                            s.matches_json(source["metadata"]["labels"].as_object())
                        });
                        if !selected {
                            continue;
                        }
                        let src_name = source["metadata"]["name"].as_str().unwrap_or("");
                        out.push(with_labels(cloned(&source), src_name, &namespace, &labels));
                    }
                }
                out
            }
        };
        Ok(Some(objects))
    }
}

/// A source object stripped of what belongs to it alone.
fn cloned(source: &Arc<Value>) -> Value {
    let mut obj = (**source).clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in CLONE_DROPPED_METADATA {
            meta.remove(*k);
        }
        if let Some(ann) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            ann.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    obj
}

/// Sets a downstream's name, namespace (left out when empty: cluster scope)
/// and Kyverno's labels (after the object's own).
pub(crate) fn with_labels(
    mut obj: Value,
    name: &str,
    namespace: &str,
    labels: &Map<String, Value>,
) -> Value {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let meta = obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object");
    meta.insert("name".into(), json!(name));
    if namespace.is_empty() {
        meta.remove("namespace");
    } else {
        meta.insert("namespace".into(), json!(namespace));
    }
    let own = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !own.is_object() {
        *own = Value::Object(Map::new());
    }
    let own = own.as_object_mut().expect("labels is an object");
    for (k, v) in labels {
        own.insert(k.clone(), v.clone());
    }
    obj
}

/// `Kind namespace/name` of a downstream.
fn describe(obj: &Value) -> String {
    let kind = obj["kind"].as_str().unwrap_or("");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, EvalRequest, NoClusterData};

    /// Cluster data of a few fixed objects.
    #[derive(Debug, Default)]
    struct Objects(Vec<Arc<Value>>);

    impl ClusterData for Objects {
        fn get(&self, av: &str, kind: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
            self.list(av, kind, ns)
                .into_iter()
                .find(|o| o["metadata"]["name"] == name)
        }
        fn list(&self, av: &str, kind: &str, ns: &str) -> Vec<Arc<Value>> {
            self.0
                .iter()
                .filter(|o| {
                    o["apiVersion"] == av
                        && o["kind"] == kind
                        && o["metadata"]["namespace"].as_str().unwrap_or("") == ns
                })
                .cloned()
                .collect()
        }
    }

    fn policy(rule: Value) -> Engine {
        let mut engine = Engine::new();
        let doc = json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "gen"},
            "spec": {"rules": [rule]}
        });
        assert!(engine.add_json(&doc).expect("compiles"));
        engine
    }

    fn namespace(name: &str, labels: Value) -> Prepared {
        Prepared::new(EvalRequest::create(Arc::new(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": "u-1", "labels": labels}
        }))))
    }

    fn run(engine: &Engine, trigger: &Prepared, data: &dyn ClusterData) -> Vec<Generated> {
        engine
            .generate(trigger, data, &Bindings::default())
            .into_iter()
            .map(|(_, g)| g)
            .collect()
    }

    #[test]
    fn data_rule_substitutes_variables_and_labels_the_downstream() {
        let engine = policy(json!({
            "name": "cm",
            "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
            "generate": {
                "apiVersion": "v1", "kind": "ConfigMap", "name": "defaults",
                "namespace": "{{ request.object.metadata.name }}", "synchronize": true,
                "data": {"metadata": {"labels": {"team": "x"}},
                         "data": {"owner": "{{ request.object.metadata.labels.owner }}"}}
            }
        }));
        let out = run(
            &engine,
            &namespace("apps", json!({"owner": "ana"})),
            &NoClusterData,
        );
        assert_eq!(out.len(), 1);
        let g = &out[0];
        assert_eq!(g.result.status, Status::Pass, "{}", g.result.message);
        assert!(g.synchronize);
        assert_eq!(g.downstreams.len(), 1);
        let d = &g.downstreams[0];
        assert_eq!(d["apiVersion"], "v1");
        assert_eq!(d["kind"], "ConfigMap");
        assert_eq!(d["metadata"]["name"], "defaults");
        assert_eq!(d["metadata"]["namespace"], "apps");
        assert_eq!(d["data"]["owner"], "ana");
        let labels = &d["metadata"]["labels"];
        assert_eq!(labels["team"], "x", "the data's own labels are kept");
        assert_eq!(labels["generate.kyverno.io/policy-name"], "gen");
        assert_eq!(labels["generate.kyverno.io/rule-name"], "cm");
        assert_eq!(labels["generate.kyverno.io/trigger-kind"], "Namespace");
        assert_eq!(labels["generate.kyverno.io/trigger-name"], "apps");
        assert_eq!(labels["generate.kyverno.io/trigger-uid"], "u-1");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "kyverno");
    }

    #[test]
    fn preconditions_skip_and_non_matching_triggers_give_nothing() {
        let engine = policy(json!({
            "name": "cm",
            "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
            "preconditions": {"all": [{"key": "{{ request.object.metadata.labels.tier || '' }}",
                                       "operator": "Equals", "value": "prod"}]},
            "generate": {"apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                         "namespace": "{{ request.object.metadata.name }}", "data": {}}
        }));
        let out = run(
            &engine,
            &namespace("dev", json!({"tier": "dev"})),
            &NoClusterData,
        );
        assert_eq!(out[0].result.status, Status::Skip);
        assert!(out[0].downstreams.is_empty());
        let out = run(
            &engine,
            &namespace("p", json!({"tier": "prod"})),
            &NoClusterData,
        );
        assert_eq!(out[0].result.status, Status::Pass);
        let pod = Prepared::new(EvalRequest::create(Arc::new(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}
        }))));
        assert!(run(&engine, &pod, &NoClusterData).is_empty());
    }

    #[test]
    fn clone_copies_the_source_without_its_server_fields() {
        let engine = policy(json!({
            "name": "secret",
            "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
            "generate": {"apiVersion": "v1", "kind": "Secret", "name": "regcred",
                         "namespace": "{{ request.object.metadata.name }}",
                         "clone": {"namespace": "default", "name": "regcred"}}
        }));
        let data = Objects(vec![Arc::new(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "regcred", "namespace": "default", "uid": "src",
                         "resourceVersion": "7", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"a": "b"}},
            "type": "kubernetes.io/dockerconfigjson", "data": {"k": "dg=="}
        }))]);
        let out = run(&engine, &namespace("apps", json!({})), &data);
        let g = &out[0];
        assert_eq!(g.result.status, Status::Pass, "{}", g.result.message);
        let d = &g.downstreams[0];
        assert_eq!(d["metadata"]["namespace"], "apps");
        assert_eq!(d["data"]["k"], "dg==");
        assert_eq!(d["type"], "kubernetes.io/dockerconfigjson");
        assert_eq!(d["metadata"]["labels"]["a"], "b");
        for gone in ["uid", "resourceVersion", "creationTimestamp"] {
            assert!(d["metadata"][gone].is_null(), "{gone} is dropped");
        }
        // A missing source is the rule's error, not a silent pass.
        let out = run(&engine, &namespace("apps", json!({})), &NoClusterData);
        assert_eq!(out[0].result.status, Status::Error);
        assert!(
            out[0].result.message.contains("clone source"),
            "{}",
            out[0].result.message
        );
    }

    #[test]
    fn clone_list_copies_every_selected_source() {
        let engine = policy(json!({
            "name": "copy",
            "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
            "generate": {"namespace": "{{ request.object.metadata.name }}",
                         "cloneList": {"namespace": "base", "kinds": ["v1/ConfigMap", "v1/Secret"],
                                       "selector": {"matchLabels": {"copy": "yes"}}}}
        }));
        let obj = |kind: &str, name: &str, copy: &str| {
            Arc::new(json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name, "namespace": "base", "labels": {"copy": copy}}}))
        };
        let data = Objects(vec![
            obj("ConfigMap", "b", "yes"),
            obj("ConfigMap", "a", "yes"),
            obj("ConfigMap", "skip", "no"),
            obj("Secret", "s", "yes"),
        ]);
        let out = run(&engine, &namespace("apps", json!({})), &data);
        let names: Vec<String> = out[0].downstreams.iter().map(describe).collect();
        assert_eq!(
            names,
            ["ConfigMap apps/a", "ConfigMap apps/b", "Secret apps/s"]
        );
    }

    #[test]
    fn bad_generate_blocks_are_compile_errors_naming_the_field() {
        let cases = [
            (
                json!({"kind": "ConfigMap", "name": "x", "data": {}}),
                "generate.apiVersion",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "data": {},
                    "clone": {"name": "y"}}),
                "only one of",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "synchronize": "yes"}),
                "generate.synchronize",
            ),
            (
                json!({"namespace": "n", "cloneList": {"kinds": []}}),
                "cloneList.kinds",
            ),
            // Not supported: refused, not passed over.
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "data": {},
                    "foreach": [{"list": "request.object.metadata.labels | items(@, 'k', 'v')",
                        "apiVersion": "v1", "kind": "ConfigMap", "name": "{{element.k}}",
                        "data": {"data": {"v": "{{element.v}}"}}}]}),
                "generate.foreach: is not supported",
            ),
        ];
        for (generate, want) in cases {
            let doc = json!({
                "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "gen"},
                "spec": {"rules": [{"name": "r",
                    "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                    "generate": generate}]}
            });
            let err = Engine::new()
                .add_json(&doc)
                .expect_err("invalid")
                .to_string();
            assert!(err.contains(want), "{err} should name {want}");
        }
    }
}
