//! Evaluating a compiled [`Policy`] against one resource.
//!
//! # Invariants
//! 1. Evaluation is synchronous and spawns nothing; it reads cluster data
//!    only through [`ClusterData`] (which never waits on the network).
//! 2. A [`Prepared`] request is shared by every policy evaluated on it,
//!    possibly from several threads: its `OnceLock`s (the variables'
//!    context, the CEL objects, whether there are floats) are each built by
//!    one caller and read-only afterwards; nothing in it is ever written
//!    again.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jmespath::Rcvar;
use serde_json::{Value, json};

use crate::conditions::Conditions;
use crate::images;
use crate::matching::Target;
use crate::pattern::{Compiled, Mismatch};
use crate::policy::{Check, ContextEntry, ContextSource, Foreach, Pattern, Policy, Rule};
use crate::request::{ClusterData, EntryKind, EvalRequest, Operation};
use crate::result::{RuleResult, Source, Status};
use crate::vars::{self, Vars, to_var};

/// Variables bound from outside the cluster (a `kyverno test` values file, or
/// `leash apply --set`), by dotted path (`request.operation`,
/// `imageData.configData.config.Volumes`). A bound name also stands in for
/// the rule `context` entry of that name.
#[derive(Debug, Clone, Default)]
pub struct Bindings {
    /// For every policy, rule and resource.
    pub global: Vec<(String, Value)>,
    /// Per policy name.
    pub policies: HashMap<String, PolicyBindings>,
}

/// Bindings of one policy.
#[derive(Debug, Clone, Default)]
pub struct PolicyBindings {
    /// Per resource name.
    pub resources: HashMap<String, Vec<(String, Value)>>,
    /// Per rule name.
    pub rules: HashMap<String, Vec<(String, Value)>>,
    /// Per rule name: `foreachValues`, a variable's value for each element
    /// of the rule's validate `foreach` lists (the value at the element's
    /// index; none past the end). A bound name stands in for the `foreach`
    /// context entry of that name.
    pub foreach: HashMap<String, Vec<(String, Vec<Value>)>>,
}

impl Bindings {
    pub(crate) fn for_rule<'a>(
        &'a self,
        policy: &str,
        rule: &str,
        resource: &str,
    ) -> Vec<&'a (String, Value)> {
        if self.global.is_empty() && self.policies.is_empty() {
            // The common case, nothing bound: no lookups per rule.
            return Vec::new();
        }
        let mut out: Vec<&(String, Value)> = self.global.iter().collect();
        if let Some(p) = self.policies.get(policy) {
            if let Some(r) = p.resources.get(resource) {
                out.extend(r);
            }
            if let Some(r) = p.rules.get(rule) {
                out.extend(r);
            }
        }
        out
    }

    /// The `foreachValues` bound for a rule of a policy.
    pub(crate) fn foreach_for_rule(&self, policy: &str, rule: &str) -> &[(String, Vec<Value>)] {
        self.policies
            .get(policy)
            .and_then(|p| p.foreach.get(rule))
            .map_or(&[], Vec::as_slice)
    }

    /// The operation bound by `request.operation` for a policy and resource.
    pub fn operation_for(&self, policy: &str, resource: &str) -> Option<Operation> {
        let p = self.policies.get(policy);
        let pairs = self
            .global
            .iter()
            .chain(
                p.and_then(|p| p.resources.get(resource))
                    .into_iter()
                    .flatten(),
            )
            .chain(p.into_iter().flat_map(|p| p.rules.values()).flatten());
        pairs
            .filter(|(k, _)| k == "request.operation")
            .last()
            .and_then(|(_, v)| v.as_str())
            .and_then(Operation::parse)
    }

    /// Whether nothing is bound.
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.policies.is_empty()
    }
}

/// A request prepared once for every policy: its JMESPath context built.
#[derive(Debug, Clone)]
pub struct Prepared {
    req: EvalRequest,
    /// Built on first use: rules without variables never need it.
    base: std::sync::OnceLock<Vars>,
    /// `object` and `oldObject` as CEL values, converted once for every
    /// CEL policy evaluated on the request.
    cel: std::sync::OnceLock<crate::cel::CelObjects>,
    /// Whether `object` or `oldObject` holds a float, looked for once.
    floats: std::sync::OnceLock<bool>,
}

impl Prepared {
    /// Builds the context Kyverno gives variables: `request.*`,
    /// `serviceAccountName`, `serviceAccountNamespace`, `images`.
    pub fn new(req: EvalRequest) -> Prepared {
        Prepared {
            req,
            base: std::sync::OnceLock::new(),
            cel: std::sync::OnceLock::new(),
            floats: std::sync::OnceLock::new(),
        }
    }

    /// The request's objects as CEL values, converted on first use and
    /// shared by every CEL policy evaluated on the request.
    pub(crate) fn cel_objects(&self) -> &crate::cel::CelObjects {
        self.cel
            .get_or_init(|| crate::cel::CelObjects::new(&self.req))
    }

    pub(crate) fn base(&self) -> &Vars {
        self.base
            .get_or_init(|| base_vars(&self.req, self.req.operation))
    }

    /// The request.
    pub fn request(&self) -> &EvalRequest {
        &self.req
    }
}

pub(crate) fn base_vars(req: &EvalRequest, operation: Operation) -> Vars {
    let u = &req.user_info;
    let (api_group, api_version) = crate::kinds::split_api_version(req.api_version());
    // Empty user-info fields are left out, as Kyverno's JSON (omitempty)
    // leaves them: `request.userInfo.groups` is null, not [], without a user.
    let mut user = serde_json::Map::new();
    if !u.username.is_empty() {
        user.insert("username".into(), json!(u.username));
    }
    if !u.uid.is_empty() {
        user.insert("uid".into(), json!(u.uid));
    }
    if !u.groups.is_empty() {
        user.insert("groups".into(), json!(u.groups));
    }
    let mut request = json!({
        "operation": operation.as_str(),
        "namespace": req.request_namespace(),
        "name": req.name(),
        "kind": {"group": api_group, "version": api_version, "kind": req.kind()},
        "userInfo": user,
    });
    if !u.roles.is_empty() {
        request["roles"] = json!(u.roles);
    }
    if !u.cluster_roles.is_empty() {
        request["clusterRoles"] = json!(u.cluster_roles);
    }
    let mut top = BTreeMap::new();
    let mut request_var = to_var(&request);
    if let jmespath::Variable::Object(m) = Arc::make_mut(&mut request_var) {
        m.insert("object".into(), to_var(&req.object));
        // An UPDATE without an old object (the CLI's `request.operation:
        // UPDATE` value) compares the object with itself, as Kyverno's CLI.
        let old = match (&req.old_object, operation) {
            (Some(old), _) => to_var(old),
            (None, Operation::Update) => to_var(&req.object),
            (None, _) => Arc::new(jmespath::Variable::Null),
        };
        m.insert("oldObject".into(), old);
    }
    top.insert("request".to_string(), request_var);
    if let Some(sa) = u.username.strip_prefix("system:serviceaccount:")
        && let Some((ns, name)) = sa.split_once(':')
    {
        top.insert("serviceAccountName".into(), to_var(&json!(name)));
        top.insert("serviceAccountNamespace".into(), to_var(&json!(ns)));
    }
    let imgs = images::of_object(&req.object);
    if !imgs.is_null() {
        top.insert("images".into(), to_var(&imgs));
    }
    Vars::new(top)
}

/// Variables built on first use: most pattern rules never need the JMESPath
/// copy of the resource.
pub(crate) struct Lazy<'a> {
    cell: std::cell::OnceCell<Vars>,
    make: Option<&'a dyn Fn() -> Vars>,
    /// The request's objects, for `request.object.…` / `request.oldObject.…`
    /// field chains read without building the context (`None` when the
    /// context may differ from them, e.g. a values file sets `request.…`).
    raw: Option<RawObjects<'a>>,
    /// The foreach element the context's `element` is (in a foreach level).
    element: Option<&'a Value>,
    /// The element holds no float (it was read from float-free roots).
    element_float_free: bool,
}

/// What `request.object` and `request.oldObject` are in a rule's context.
#[derive(Clone, Copy)]
pub(crate) struct RawObjects<'a> {
    object: &'a Value,
    old_object: Option<&'a Value>,
    /// Whether the request's objects hold a float, once looked for.
    floats: &'a std::sync::OnceLock<bool>,
}

impl<'a> RawObjects<'a> {
    /// As `base_vars` sets them for `operation`; `floats` caches whether
    /// the request's objects hold a float.
    fn of(
        req: &'a EvalRequest,
        operation: Operation,
        floats: &'a std::sync::OnceLock<bool>,
    ) -> RawObjects<'a> {
        RawObjects {
            floats,
            object: &req.object,
            old_object: match (&req.old_object, operation) {
                (Some(old), _) => Some(old),
                (None, Operation::Update) => Some(&req.object),
                (None, _) => None,
            },
        }
    }
}

impl vars::Source for Lazy<'_> {
    fn vars(&self) -> &Vars {
        self.get()
    }

    fn raw(&self, chain: &[String]) -> Option<Value> {
        let raw = self.raw?;
        match chain {
            [request, object, rest @ ..] if request == "request" && !rest.is_empty() => {
                match object.as_str() {
                    "object" => vars::walk(raw.object, rest),
                    "oldObject" => vars::walk(raw.old_object?, rest),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn root(&self, root: vars::Root) -> Option<&Value> {
        match root {
            vars::Root::Object => self.raw.map(|r| r.object),
            vars::Root::OldObject => self.raw?.old_object,
            vars::Root::Element => self.element,
        }
    }
}

impl crate::jmespath::native::Roots for Lazy<'_> {
    fn root(&self, root: vars::Root) -> Option<&Value> {
        vars::Source::root(self, root)
    }

    fn float_free(&self) -> bool {
        use crate::jmespath::native::has_float;
        let objects_free = self.raw.is_some_and(|r| {
            !*r.floats
                .get_or_init(|| has_float(r.object) || r.old_object.is_some_and(has_float))
        });
        objects_free && (self.element.is_none() || self.element_float_free)
    }
}

impl Lazy<'_> {
    pub(crate) fn ready(v: Vars) -> Lazy<'static> {
        let cell = std::cell::OnceCell::new();
        let _ = cell.set(v);
        Lazy {
            cell,
            make: None,
            raw: None,
            element: None,
            element_float_free: false,
        }
    }

    /// `v`, the context of `from` with `entries` loaded: the roots of `from`
    /// still hold unless an entry's name reaches them.
    fn loaded<'b>(v: Vars, entries: &[ContextEntry], from: &Lazy<'b>) -> Lazy<'b> {
        let mut lazy = Lazy::ready(v);
        let shadows = |root: &str| {
            entries
                .iter()
                .any(|e| e.name == root || e.name.starts_with(&format!("{root}.")))
        };
        if !shadows("request") {
            lazy.raw = from.raw;
        }
        if !shadows("element") {
            lazy.element = from.element;
            lazy.element_float_free = from.element_float_free;
        }
        lazy
    }

    pub(crate) fn get(&self) -> &Vars {
        self.cell.get_or_init(|| match self.make {
            Some(make) => make(),
            None => Vars::new(BTreeMap::new()),
        })
    }
}

/// One rule's evaluation outcome before it becomes a [`RuleResult`].
pub(crate) struct Outcome {
    pub(crate) status: Status,
    pub(crate) message: String,
    /// False when the rule gives no result at all (Kyverno's nil rule
    /// response: a foreach whose lists had no element to apply to).
    pub(crate) reported: bool,
}

impl Outcome {
    pub(crate) fn new(status: Status, message: impl Into<String>) -> Outcome {
        Outcome {
            status,
            message: message.into(),
            reported: true,
        }
    }

    /// No result: the rule is left out of the report, as Kyverno leaves a
    /// nil rule response out. Nested in a foreach, it skips the element.
    fn none() -> Outcome {
        Outcome {
            status: Status::Skip,
            message: String::new(),
            reported: false,
        }
    }
}

/// What evaluating one rule needs; shared by validate and mutate rules.
pub(crate) struct RuleCtx<'a> {
    pub(crate) policy: &'a Policy,
    pub(crate) rule: &'a Rule,
    pub(crate) req: &'a EvalRequest,
    pub(crate) data: &'a dyn ClusterData,
    pub(crate) delete: bool,
    pub(crate) mocked: Vec<String>,
    /// The rule's `foreachValues` (see [`PolicyBindings::foreach`]).
    pub(crate) foreach_bound: &'a [(String, Vec<Value>)],
}

impl Policy {
    /// Evaluates every validate rule that matches the resource. Rules that do
    /// not match give no result; an evaluation problem is an `error` result.
    pub fn evaluate(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Vec<RuleResult> {
        self.evaluate_for(prepared, &prepared.req.target(), data, bindings)
    }

    /// [`Policy::evaluate`] with the resource's identity already read
    /// (the engine reads it once for all its policies).
    pub(crate) fn evaluate_for(
        &self,
        prepared: &Prepared,
        target: &Target<'_>,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Vec<RuleResult> {
        let mut out = Vec::new();
        self.each_matching_rule(
            prepared,
            target,
            data,
            bindings,
            |rule| rule.validate.is_some(),
            |ctx, lazy| {
                let outcome = ctx.run(lazy);
                if outcome.reported {
                    out.push(ctx.result(outcome));
                }
            },
        );
        out
    }

    /// `mutateDigest` of its `verifyImages` rules on the request's object:
    /// the object with each checked image's tag replaced by
    /// `IMAGE:TAG@DIGEST` (Kyverno's patch) and the results of the rules
    /// without attestors that changed it; None when nothing changed. An image whose verification
    /// fails is left as it is (the validate side reports the failure).
    pub(crate) fn mutate_digests(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Option<(Value, Vec<RuleResult>)> {
        let target = prepared.req.target();
        let mut replaced: Vec<(String, String)> = Vec::new();
        let mut results = Vec::new();
        self.each_matching_rule(
            prepared,
            &target,
            data,
            bindings,
            |rule| rule.mutates_digests(),
            |ctx, _| {
                let Some(Check::VerifyImages(specs)) = ctx.rule.validate.as_ref().map(|v| &v.check)
                else {
                    return;
                };
                // A result only for a rule without attestors (Kyverno's
                // "mutated image digest"); a verifying rule's result is its
                // verification's, on the validate side.
                let mut changed = false;
                let verifies = specs.iter().any(|s| !s.attestors.is_empty());
                for spec in specs.iter().filter(|s| s.mutate_digest) {
                    let wanted = |refs: &[String], image: &str| {
                        refs.iter().any(|r| crate::wildcard::matches(r, image))
                    };
                    for image in pod_images(&ctx.req.object) {
                        if image.contains('@')
                            || !wanted(&spec.image_references, &image)
                            || wanted(&spec.skip_image_references, &image)
                            || replaced.iter().any(|(i, _)| *i == image)
                        {
                            continue;
                        }
                        let keys = spec
                            .attestors
                            .first()
                            .and_then(|a| a.entries.first())
                            .and_then(|e| e.as_ref().ok());
                        if !spec.use_cache && keys.is_some() {
                            data.fresh_image(&image);
                        }
                        let digest = match keys {
                            Some(keys) => resolve_trust(data, keys)
                                .and_then(|keys| data.verify_image(&image, &keys))
                                .ok(),
                            None if spec.attestors.is_empty() => data
                                .image_data(&image)
                                .ok()
                                .and_then(|d| d["digest"].as_str().map(String::from)),
                            None => None,
                        };
                        if let Some(digest) = digest {
                            replaced.push((image.clone(), with_digest(&image, &digest)));
                            changed = true;
                        }
                    }
                }
                if changed && !verifies {
                    results.push(ctx.result(Outcome::new(Status::Pass, "mutated image digest")));
                }
            },
        );
        if replaced.is_empty() {
            return None;
        }
        let mut object = (*prepared.req.object).clone();
        set_pod_images(&mut object, &replaced);
        Some((object, results))
    }

    /// The values bound for `rule` and the operation it sees (a bound
    /// `request.operation` overrides the request's), when its match and
    /// exclude blocks select the request; None when they do not.
    pub(crate) fn selects<'b>(
        &self,
        rule: &Rule,
        req: &EvalRequest,
        target: &Target<'_>,
        bindings: &'b Bindings,
    ) -> Option<(Vec<&'b (String, Value)>, Operation)> {
        let bound = bindings.for_rule(&self.name, &rule.base_name, target.name);
        let operation = bound
            .iter()
            .rev()
            .find(|(k, _)| k == "request.operation")
            .and_then(|(_, v)| v.as_str())
            .and_then(Operation::parse)
            .unwrap_or(req.operation);
        let target = Target {
            operation,
            ..*target
        };
        (rule.match_.matches(&target) && !rule.exclude.excludes(&target))
            .then_some((bound, operation))
    }

    /// Calls `f` with the evaluation context of every rule that `wanted`
    /// selects and whose match/exclude blocks select the resource.
    pub(crate) fn each_matching_rule(
        &self,
        prepared: &Prepared,
        target: &Target<'_>,
        data: &dyn ClusterData,
        bindings: &Bindings,
        wanted: impl Fn(&Rule) -> bool,
        mut f: impl FnMut(&RuleCtx<'_>, &Lazy<'_>),
    ) {
        let req = &prepared.req;
        if let Some(ns) = &self.namespace
            && req.namespace() != ns
        {
            return;
        }
        for rule in &self.rules {
            if !wanted(rule) {
                continue;
            }
            let Some((bound, operation)) = self.selects(rule, req, target, bindings) else {
                continue;
            };
            let foreach_bound = bindings.foreach_for_rule(&self.name, &rule.base_name);
            let make = || {
                let mut vars = if operation == req.operation {
                    prepared.base().clone()
                } else {
                    base_vars(req, operation)
                };
                for (k, v) in &bound {
                    vars.set_dotted(k, to_var(v));
                }
                vars
            };
            let lazy = Lazy {
                cell: std::cell::OnceCell::new(),
                make: Some(&make),
                raw: (!bound.iter().any(|(k, _)| k.starts_with("request")))
                    .then(|| RawObjects::of(req, operation, &prepared.floats)),
                element: None,
                element_float_free: false,
            };
            let ctx = RuleCtx {
                policy: self,
                rule,
                req,
                data,
                delete: operation == Operation::Delete,
                mocked: bound
                    .iter()
                    .map(|(k, _)| k.clone())
                    .chain(foreach_bound.iter().map(|(k, _)| k.clone()))
                    .collect(),
                foreach_bound,
            };
            f(&ctx, &lazy);
        }
    }
}

impl RuleCtx<'_> {
    fn run(&self, lazy: &Lazy<'_>) -> Outcome {
        let Some(validate) = &self.rule.validate else {
            return Outcome::new(Status::Skip, "not a validate rule");
        };
        let scope: &Value = if self.delete {
            self.req.old_object.as_deref().unwrap_or(&self.req.object)
        } else {
            &self.req.object
        };
        let loaded;
        let vars: &Lazy<'_> = if self.rule.context.is_empty() {
            lazy
        } else {
            match self.load_context(&self.rule.context, lazy.get()) {
                Ok(v) => {
                    loaded = Lazy::loaded(v, &self.rule.context, lazy);
                    &loaded
                }
                Err(e) => {
                    return Outcome::new(Status::Error, format!("failed to load context: {e}"));
                }
            }
        };
        match self.preconditions(self.rule.preconditions.as_ref(), vars) {
            Ok(true) => {}
            Ok(false) => return Outcome::new(Status::Skip, "preconditions not met"),
            Err(e) => {
                return Outcome::new(
                    Status::Error,
                    format!("failed to evaluate preconditions: {e}"),
                );
            }
        }
        if let Some(cel) = &self.rule.cel_preconditions {
            match cel.preconditions(self.req, self.data) {
                Ok(true) => {}
                Ok(false) => return Outcome::new(Status::Skip, "cel preconditions not met"),
                Err(e) => return Outcome::new(Status::Fail, e),
            }
        }
        if let Check::Cel(cel) = &validate.check {
            let (status, message) = cel.evaluate(self.req, self.data);
            return Outcome::new(status, message);
        }
        self.check(&validate.check, vars, scope, 0)
    }

    fn rule_name(&self) -> &str {
        &self.rule.name
    }

    /// The rule's result from its outcome.
    pub(crate) fn result(&self, outcome: Outcome) -> RuleResult {
        RuleResult {
            policy: self.policy.key.clone(),
            rule: self.rule.name.clone(),
            status: outcome.status,
            message: outcome.message,
            source: Source::Kyverno,
        }
    }

    fn message(&self, vars: &dyn vars::Source) -> Option<String> {
        let raw = self.rule.validate.as_ref()?.message.as_ref()?;
        match vars::substitute(
            &Value::String(raw.clone()),
            vars,
            &self.policy.cache,
            self.delete,
        ) {
            Ok(Value::String(s)) => Some(s),
            Ok(other) => Some(vars::go_format(&other)),
            Err(_) => Some(raw.clone()),
        }
    }

    fn check(&self, check: &Check, vars: &Lazy<'_>, scope: &Value, nesting: usize) -> Outcome {
        match check {
            // Kyverno's validateResourceWithRule: "skipping validation on
            // deleted resource" (only deny conditions see a deletion).
            // Found by its chainsaw tests: a pattern on Namespaces denied
            // the deletion of chainsaw's test namespace.
            Check::Pattern(_) | Check::AnyPattern(_) if self.delete => {
                Outcome::new(Status::Skip, "skipping validation on deleted resource")
            }
            Check::Pattern(p) => self.unless_unchanged(self.check_pattern(p, vars, scope), |old| {
                self.check_pattern(p, vars, old)
            }),
            Check::AnyPattern(ps) => self
                .unless_unchanged(self.check_any_pattern(ps, vars, scope), |old| {
                    self.check_any_pattern(ps, vars, old)
                }),
            Check::Deny(conds) => match self.conditions(conds, vars) {
                Err(e) => Outcome::new(
                    Status::Error,
                    format!("failed to check deny conditions: {e}"),
                ),
                Ok(true) => {
                    let msg = self.message(vars).unwrap_or_else(|| {
                        format!("validation error: rule {} failed", self.rule_name())
                    });
                    Outcome::new(Status::Fail, msg)
                }
                Ok(false) => Outcome::new(Status::Pass, self.rule.pass_message.clone()),
            },
            Check::Foreach(decls) => self.foreach(decls, vars, scope, nesting),
            Check::Cel(cel) => {
                let (status, message) = cel.evaluate(self.req, self.data);
                Outcome::new(status, message)
            }
            Check::PodSecurity(ps) => {
                if self.delete {
                    // Kyverno does not evaluate a deleted pod.
                    return Outcome::new(
                        Status::Skip,
                        "skipping PSS validation on deleted resource",
                    );
                }
                let (status, message) = ps.evaluate(self.rule_name(), scope);
                // Kyverno compares the statuses only here (its PSS checks
                // list the fields, which an edit may reorder).
                self.unless_unchanged(Outcome::new(status, message), |old| {
                    let (status, message) = ps.evaluate(self.rule_name(), old);
                    Outcome::new(status, message)
                })
            }
            Check::VerifyImages(specs) => {
                if self.delete {
                    return Outcome::new(Status::Skip, "skipping validation on deleted resource");
                }
                self.verify_images(specs, scope, vars)
            }
            Check::Unsupported(what) => {
                Outcome::new(Status::Error, format!("{what} is not supported by leash"))
            }
        }
    }

    /// `verifyImages`: every image of the object's pod spec that an
    /// entry's `imageReferences` match (and its `skipImageReferences` do
    /// not) must be verified by each attestor set (all of its entries, or
    /// `count`), in Kyverno's words: `verified image signatures for IMAGE`,
    /// `failed to verify image IMAGE: .attestors[i].entries[j].keys: WHY`;
    /// a registry that cannot be read is the rule's error. No matching
    /// image: no result, as Kyverno gives none.
    fn verify_images(
        &self,
        specs: &[crate::policy::ImageVerification],
        scope: &Value,
        vars: &Lazy<'_>,
    ) -> Outcome {
        let images = pod_images(scope);
        let policy = &self.policy.name;
        let rule = self.rule_name();
        let mut passed = Vec::new();
        let mut attested = Vec::new();
        let mut skipped = None;
        // The first failure that is only a lookup not made yet.
        let mut missed: Option<Outcome> = None;
        for spec in specs {
            let wanted = |refs: &[String], image: &str| {
                refs.iter().any(|r| crate::wildcard::matches(r, image))
            };
            // Matched and named as Kyverno's ImageInfo prints them
            // (`registry/path@digest`, `registry/path:tag`); looked up as
            // the pod names them.
            let named: Vec<(&String, String)> = images
                .iter()
                .map(|i| {
                    let shown = crate::images::ImageRef::parse(i)
                        .map(|r| r.kyverno_string())
                        .unwrap_or_else(|| i.clone());
                    (i, shown)
                })
                .collect();
            'images: for (image, shown) in named
                .iter()
                .filter(|(_, shown)| wanted(&spec.image_references, shown))
            {
                let (image, shown) = (*image, shown.as_str());
                if wanted(&spec.skip_image_references, shown) {
                    skipped = Some(format!(
                        "skipping image reference image {shown}, policy {policy} ruleName {rule}"
                    ));
                    continue;
                }
                if spec.verify_digest && !spec.mutate_digest && !image.contains('@') {
                    return Outcome::new(Status::Fail, format!("missing digest for {shown}"));
                }
                if spec.attestors.is_empty() && spec.attestations.is_empty() {
                    continue;
                }
                if !spec.use_cache {
                    self.data.fresh_image(image);
                }
                // The digest a verification resolved (for the message).
                let mut resolved: Option<String> = None;
                for (i, set) in spec.attestors.iter().enumerate() {
                    let needed = set
                        .count
                        .unwrap_or(set.entries.len())
                        .min(set.entries.len());
                    let mut verified = 0;
                    let mut first_error = None;
                    for (j, entry) in set.entries.iter().enumerate() {
                        let path = format!(".attestors[{i}].entries[{j}]");
                        let keys = match entry {
                            Ok(keys) => keys,
                            Err(why) => {
                                first_error.get_or_insert_with(|| {
                                    (Status::Error, format!("{path}: {why}"))
                                });
                                continue;
                            }
                        };
                        match resolve_trust(self.data, keys)
                            .and_then(|trust| self.data.verify_image(image, &trust))
                        {
                            Ok(digest) => {
                                verified += 1;
                                resolved.get_or_insert(digest);
                            }
                            Err(e) => {
                                // A registry that cannot be read is an
                                // error, not a verdict (Kyverno's
                                // handleRegistryErrors); what the
                                // signatures say is the verdict.
                                let status = if is_registry_error(&e) {
                                    Status::Error
                                } else {
                                    Status::Fail
                                };
                                let kind = trust_path(keys);
                                first_error.get_or_insert((status, format!("{path}{kind}: {e}")));
                            }
                        }
                    }
                    if verified < needed.max(1) {
                        let (status, why) = first_error
                            .unwrap_or((Status::Fail, format!(".attestors[{i}]: no entries")));
                        let failed =
                            Outcome::new(status, format!("failed to verify image {shown}: {why}"));
                        if is_miss(&failed.message) {
                            // Looked up after this evaluation: the other
                            // images' lookups are recorded too, so that
                            // all of them are fetched at once.
                            missed.get_or_insert(failed);
                            continue 'images;
                        }
                        return failed;
                    }
                }
                if spec.attestations.is_empty() {
                    passed.push(shown.to_string());
                    continue;
                }
                if let Err(why) = self.verify_attestations(&spec.attestations, image, shown, vars) {
                    let failed = Outcome::new(Status::Fail, why);
                    if is_miss(&failed.message) {
                        missed.get_or_insert(failed);
                        continue;
                    }
                    return failed;
                }
                // Kyverno names the image by the digest it resolved: its
                // signature's, else its manifest's (fetching attestations
                // resolves it).
                let resolved = resolved.or_else(|| {
                    self.data
                        .image_data(image)
                        .ok()
                        .and_then(|d| d["digest"].as_str().map(String::from))
                });
                attested.push(match (&resolved, crate::images::ImageRef::parse(image)) {
                    (Some(d), Some(r)) if r.digest.is_empty() => {
                        format!("{}/{}@{d}", r.registry, r.path)
                    }
                    _ => shown.to_string(),
                });
            }
        }
        if let Some(failed) = missed {
            return failed;
        }
        let mut said = Vec::new();
        if !passed.is_empty() {
            said.push(format!(
                "verified image signatures for {}",
                passed.join(", ")
            ));
        }
        if !attested.is_empty() {
            said.push(format!(
                "verified image attestations for {}",
                attested.join(", ")
            ));
        }
        if !said.is_empty() {
            return Outcome::new(Status::Pass, said.join("; "));
        }
        match skipped {
            Some(m) => Outcome::new(Status::Skip, m),
            None => Outcome::none(),
        }
    }

    /// A `verifyImages` entry's `attestations` on one image, as Kyverno's
    /// verifyAttestations checks them: each attestation's attestor sets
    /// (each entry's keys must have signed an in-toto attestation of the
    /// predicate type, `count` entries or all), and its `conditions` on
    /// every such statement's predicate (its fields at the top of the
    /// context). The error is Kyverno's message.
    fn verify_attestations(
        &self,
        checks: &[crate::policy::AttestationCheck],
        image: &str,
        shown: &str,
        vars: &Lazy<'_>,
    ) -> Result<(), String> {
        for (i, att) in checks.iter().enumerate() {
            let path = format!(".attestations[{i}]");
            let Some(ty) = att.predicate_type.as_deref() else {
                return Err(format!("{path}: missing type"));
            };
            let want = crate::ivpol::predicate_uri(ty);
            if att.attestors.is_empty() {
                return Err(format!(
                    "{path}: attestations without attestors are not verified by leash (name the keys that must have signed them)"
                ));
            }
            for (j, set) in att.attestors.iter().enumerate() {
                let required = set
                    .count
                    .unwrap_or(set.entries.len())
                    .min(set.entries.len())
                    .max(1);
                let mut verified = 0;
                let mut errors = Vec::new();
                for entry in &set.entries {
                    // Kyverno's entry path names the attestation's index.
                    let entry_path = format!("{path}.attestors[{j}].entries[{i}]");
                    let keys = match entry {
                        Ok(keys) => keys,
                        Err(why) => {
                            errors.push(format!("{entry_path}: {why}"));
                            continue;
                        }
                    };
                    // Notary attestations are OCI referrers of the type,
                    // signed; Kyverno's statement is the referrer with its
                    // type and its payload as the predicate.
                    let fetched = match keys {
                        crate::request::ImageTrust::Notary { .. } => self
                            .data
                            .verify_referrers(image, ty, keys)
                            .map(|payload| {
                                vec![serde_json::json!({
                                    "type": ty, "predicateType": want, "predicate": payload
                                })]
                            })
                            .map_err(|e| {
                                // Kyverno's ClusterPolicy words for none.
                                if e.starts_with("attestation verification failed, no attestations found") {
                                    format!("no matching attestations found for image {shown} with type {ty}")
                                } else {
                                    e
                                }
                            }),
                        _ => resolve_trust(self.data, keys)
                            .and_then(|trust| self.data.verify_attestations(image, &trust)),
                    };
                    let statements = match fetched {
                        Ok(s) => s,
                        Err(e) => {
                            errors.push(e);
                            continue;
                        }
                    };
                    let mut matching = statements
                        .iter()
                        .filter(|s| s["predicateType"].as_str() == Some(want))
                        .peekable();
                    if matching.peek().is_none() {
                        errors.push(format!(
                            "{entry_path}{}: attestions not found for predicate type {ty}",
                            trust_path(keys)
                        ));
                        continue;
                    }
                    let mut failed = None;
                    for statement in matching {
                        match self.attestation_conditions(&att.conditions, statement, vars) {
                            Ok(true) => {}
                            Ok(false) => {
                                failed = Some(format!(
                                    "{entry_path}{}: attestation checks failed for {shown} and predicate {ty}: ",
                                    trust_path(keys)
                                ));
                                break;
                            }
                            Err(e) => {
                                failed = Some(format!(
                                    "{entry_path}{}: failed to check attestations: {e}",
                                    trust_path(keys)
                                ));
                                break;
                            }
                        }
                    }
                    match failed {
                        None => {
                            verified += 1;
                            if verified >= required {
                                break;
                            }
                        }
                        Some(e) => errors.push(e),
                    }
                }
                if verified < required {
                    let why = if errors.is_empty() {
                        "attestations verification failed".to_string()
                    } else {
                        errors.join("; ")
                    };
                    return Err(format!(
                        "image attestations verification failed, verifiedCount: {verified}, requiredCount: {required}, error: {why}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether every condition set holds on an in-toto statement's
    /// predicate, its fields added at the top of the rule's context.
    fn attestation_conditions(
        &self,
        conditions: &[Conditions],
        statement: &Value,
        vars: &Lazy<'_>,
    ) -> Result<bool, String> {
        if conditions.is_empty() {
            return Ok(true);
        }
        let Some(predicate) = statement["predicate"].as_object() else {
            return Err(format!(
                "failed to extract predicate from statement: {statement}"
            ));
        };
        let mut scope = vars::Source::vars(vars).clone();
        for (k, v) in predicate {
            scope = scope.with(k, crate::jmespath::from_json(v));
        }
        for c in conditions {
            if !self.conditions(c, &scope)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// An UPDATE of an object that already failed the rule the same way
    /// is not held against the edit: Kyverno validates the old object too
    /// and, when the results are the same, skips ("skipping modified
    /// resource as validation results have not changed"), so an existing
    /// violation can still be labelled, scaled or fixed in steps. Only
    /// with the request's own old object (a CLI UPDATE without one would
    /// compare the object with itself).
    fn unless_unchanged(&self, new: Outcome, old: impl FnOnce(&Value) -> Outcome) -> Outcome {
        if new.status == Status::Pass
            || self.delete
            || self.req.operation != Operation::Update
            || self
                .rule
                .validate
                .as_ref()
                .is_some_and(|v| !v.allow_existing_violations)
        {
            return new;
        }
        let Some(previous) = self.req.old_object.as_deref() else {
            return new;
        };
        let before = old(previous);
        let same = before.status == new.status
            && (matches!(
                self.rule.validate.as_ref().map(|v| &v.check),
                Some(Check::PodSecurity(_))
            ) || before.message == new.message);
        if same {
            Outcome::new(
                Status::Skip,
                "skipping modified resource as validation results have not changed",
            )
        } else {
            new
        }
    }

    /// The document with its variables substituted; borrowed unchanged
    /// when it has none (most patterns), so nothing is copied.
    pub(crate) fn substituted<'d>(
        &self,
        doc: &'d Value,
        vars: &Lazy<'_>,
    ) -> Result<Cow<'d, Value>, String> {
        if !vars::has_vars(doc) {
            return Ok(Cow::Borrowed(doc));
        }
        vars::substitute(doc, vars, &self.policy.cache, self.delete).map(Cow::Owned)
    }

    fn fail_message(&self, vars: &dyn vars::Source, path: &str, detail: &str) -> String {
        let rule = self.rule_name();
        match self.message(vars) {
            None if path.is_empty() => {
                format!("validation error: rule {rule} execution error: {detail}")
            }
            None => format!("validation error: rule {rule} failed at path {path}"),
            Some(mut m) => {
                if !m.ends_with('.') {
                    m.push('.');
                }
                if path.is_empty() {
                    format!("validation error: {m} rule {rule} execution error: {detail}")
                } else {
                    format!("validation error: {m} rule {rule} failed at path {path}")
                }
            }
        }
    }

    /// A pattern compiled: as the policy holds it when it has no
    /// variables, else compiled once they are substituted.
    fn pattern<'d>(&self, p: &'d Pattern, vars: &Lazy<'_>) -> Result<Cow<'d, Compiled>, String> {
        if let Some(compiled) = &p.compiled {
            return Ok(Cow::Borrowed(compiled));
        }
        self.substituted(&p.doc, vars)
            .map(|doc| Cow::Owned(Compiled::new(&doc)))
    }

    fn check_pattern(&self, pattern: &Pattern, vars: &Lazy<'_>, scope: &Value) -> Outcome {
        let pattern = match self.pattern(pattern, vars) {
            Ok(p) => p,
            Err(e) => {
                return Outcome::new(Status::Error, format!("variable substitution failed: {e}"));
            }
        };
        match pattern.matches(scope) {
            Ok(()) => Outcome::new(Status::Pass, self.rule.pass_message.clone()),
            Err(Mismatch::Skip { message }) => Outcome::new(Status::Skip, message),
            Err(Mismatch::Fail { path, message }) => {
                Outcome::new(Status::Fail, self.fail_message(vars, &path, &message))
            }
        }
    }

    fn check_any_pattern(&self, patterns: &[Pattern], vars: &Lazy<'_>, scope: &Value) -> Outcome {
        let name = self.rule_name();
        let mut failed = Vec::new();
        let mut skipped = Vec::new();
        for (i, p) in patterns.iter().enumerate() {
            let p = match self.pattern(p, vars) {
                Ok(p) => p,
                Err(e) => {
                    return Outcome::new(
                        Status::Error,
                        format!("variable substitution failed: {e}"),
                    );
                }
            };
            match p.matches(scope) {
                Ok(()) => {
                    return Outcome::new(
                        Status::Pass,
                        format!("validation rule '{name}' anyPattern[{i}] passed."),
                    );
                }
                Err(Mismatch::Skip { message }) => {
                    skipped.push(format!("rule {name}[{i}] skipped: {message}"))
                }
                Err(Mismatch::Fail { path, message }) => failed.push(if path.is_empty() {
                    format!("rule {name}[{i}] failed: {message}")
                } else {
                    format!("rule {name}[{i}] failed at path {path}")
                }),
            }
        }
        if failed.is_empty() && !skipped.is_empty() {
            return Outcome::new(Status::Skip, skipped.join(" "));
        }
        let errors = failed.join(" ");
        let msg = match self.message(vars) {
            None => format!("validation error: {errors}"),
            Some(m) if m.ends_with('.') => format!("validation error: {m} {errors}"),
            Some(m) => format!("validation error: {m}. {errors}"),
        };
        Outcome::new(Status::Fail, msg)
    }

    fn foreach(
        &self,
        decls: &[Foreach],
        lazy: &Lazy<'_>,
        scope: &Value,
        nesting: usize,
    ) -> Outcome {
        let mut applied = 0;
        // Kyverno's validateForEach: a list along a missing field is
        // passed over; another list error is the rule's error only when no
        // list had an element to apply to.
        let mut list_error = None;
        for decl in decls {
            let (elements, float_free) = match self.policy.cache.eval_items(&decl.list, lazy) {
                Ok(v) => v,
                Err(e) => {
                    if !e.contains("Unknown key") {
                        list_error = Some(e);
                    }
                    continue;
                }
            };
            let (outcome, count) = self.elements(decl, &elements, float_free, lazy, scope, nesting);
            if outcome.status != Status::Pass {
                return outcome;
            }
            applied += count;
        }
        if applied == 0 {
            return match list_error {
                Some(e) => Outcome::new(Status::Error, format!("failed to evaluate list: {e}")),
                None => Outcome::none(),
            };
        }
        Outcome::new(Status::Pass, "rule passed")
    }

    fn elements(
        &self,
        decl: &Foreach,
        elements: &[std::borrow::Cow<'_, Value>],
        float_free: bool,
        lazy: &Lazy<'_>,
        scope: &Value,
        nesting: usize,
    ) -> (Outcome, usize) {
        let mut applied = 0;
        for (index, element) in elements.iter().enumerate() {
            let element: &Value = element;
            if element.is_null() {
                continue;
            }
            // The element's context, built only for an expression that
            // cannot be read from the JSON in place.
            let make = || {
                let el: Rcvar = to_var(element);
                let idx = to_var(&json!(index));
                let mut vars = lazy
                    .get()
                    .with("element", el.clone())
                    .with("elementIndex", idx.clone())
                    .with(&format!("element{nesting}"), el)
                    .with(&format!("elementIndex{nesting}"), idx);
                for (name, values) in self.foreach_bound {
                    if let Some(v) = values.get(index) {
                        vars = vars.with(name, to_var(v));
                    }
                }
                vars
            };
            let v = Lazy {
                cell: std::cell::OnceCell::new(),
                make: Some(&make),
                raw: lazy.raw,
                element: Some(element),
                element_float_free: float_free,
            };
            let scoped = decl.element_scope.unwrap_or(element.is_object());
            let element_scope = if scoped { element } else { scope };
            let r = self.level(decl, &v, element_scope, nesting);
            match r.status {
                Status::Skip => continue,
                Status::Pass | Status::Warn => applied += 1,
                // An element whose preconditions cannot be evaluated is
                // passed over; any other error is the rule's (Kyverno's
                // validateElements).
                Status::Error if r.message.contains("failed to evaluate preconditions") => {
                    continue;
                }
                Status::Error => {
                    return (
                        Outcome::new(Status::Error, format!("validation failure: {}", r.message)),
                        applied,
                    );
                }
                // Kyverno's validateElements prefixes each level's failure
                // (`validation failure: validation failure: low port` for
                // a nested foreach).
                Status::Fail => {
                    let message = format!("validation failure: {}", r.message);
                    return (Outcome::new(Status::Fail, message), applied);
                }
            }
        }
        (Outcome::new(Status::Pass, ""), applied)
    }

    fn level(&self, decl: &Foreach, lazy: &Lazy<'_>, scope: &Value, nesting: usize) -> Outcome {
        let loaded;
        let vars = if decl.context.is_empty() {
            lazy
        } else {
            match self.load_context(&decl.context, lazy.get()) {
                Ok(v) => {
                    loaded = Lazy::loaded(v, &decl.context, lazy);
                    &loaded
                }
                Err(e) => {
                    return Outcome::new(Status::Error, format!("failed to load context: {e}"));
                }
            }
        };
        match self.preconditions(decl.preconditions.as_ref(), vars) {
            Ok(true) => {}
            Ok(false) => return Outcome::new(Status::Skip, "preconditions not met"),
            Err(e) => {
                return Outcome::new(
                    Status::Error,
                    format!("failed to evaluate preconditions: {e}"),
                );
            }
        }
        self.check(&decl.check, vars, scope, nesting + 1)
    }

    pub(crate) fn preconditions(
        &self,
        conds: Option<&Conditions>,
        vars: &Lazy<'_>,
    ) -> Result<bool, String> {
        match conds {
            None => Ok(true),
            Some(c) => self.conditions(c, vars),
        }
    }

    /// Evaluates `any`/`all` (or a legacy list, all of which must hold).
    pub(crate) fn conditions(
        &self,
        conds: &Conditions,
        vars: &dyn vars::Source,
    ) -> Result<bool, String> {
        conds.hold(vars, &self.policy.cache, self.delete)
    }

    fn is_mocked(&self, name: &str) -> bool {
        self.mocked.iter().any(|k| {
            k == name
                || k.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
    }

    pub(crate) fn load_context(
        &self,
        entries: &[ContextEntry],
        vars: &Vars,
    ) -> Result<Vars, String> {
        if entries.is_empty() {
            return Ok(vars.clone());
        }
        let mut vars = vars.clone();
        for entry in entries {
            if self.is_mocked(&entry.name) {
                continue;
            }
            let value = self
                .load_entry(entry, &vars)
                .map_err(|e| format!("context entry {:?}: {e}", entry.name))?;
            if let Some(value) = value {
                vars = vars.with(&entry.name, to_var(&value));
            }
        }
        Ok(vars)
    }

    /// An `apiCall`'s answer through its `jmesPath`; without an answer,
    /// its `default`, or the error `failed` names.
    fn answer_or_default(
        &self,
        answer: Option<Value>,
        jmes_path: &Option<String>,
        default: &Option<Value>,
        vars: &Vars,
        failed: impl FnOnce() -> String,
    ) -> Result<Value, String> {
        match (answer, default) {
            (Some(v), _) => self.apply_jmes(jmes_path.as_deref(), v, vars),
            (None, Some(d)) => Ok(d.clone()),
            (None, None) => Err(failed()),
        }
    }

    pub(crate) fn sub_str(&self, s: &str, vars: &Vars) -> Result<String, String> {
        match vars::substitute(
            &Value::String(s.to_string()),
            vars,
            &self.policy.cache,
            self.delete,
        )? {
            Value::String(s) => Ok(s),
            other => Ok(vars::go_format(&other)),
        }
    }

    fn apply_jmes(&self, path: Option<&str>, data: Value, vars: &Vars) -> Result<Value, String> {
        match path {
            None => Ok(data),
            Some(p) => {
                let p = self.sub_str(p, vars)?;
                let expr = self.policy.cache.get(p.trim())?;
                Vars::eval_on(&expr, &data)
            }
        }
    }

    /// The entry's value; None when the cluster data has no answer for it
    /// and does not require one ([`ClusterData::context_required`]): the
    /// entry is then left out of the context.
    fn load_entry(&self, entry: &ContextEntry, vars: &Vars) -> Result<Option<Value>, String> {
        let unanswered = |kind, e: String| {
            if self.data.context_required(kind) {
                Err(e)
            } else {
                Ok(None)
            }
        };
        let value = match &entry.source {
            ContextSource::Variable {
                value,
                jmes_path,
                default,
            } => {
                let result = match (value, jmes_path) {
                    (Some(v), path) => {
                        let v = vars::substitute(v, vars, &self.policy.cache, self.delete)?;
                        self.apply_jmes(path.as_deref(), v, vars)
                    }
                    (None, Some(p)) => {
                        let p = self.sub_str(p, vars)?;
                        let expr = self.policy.cache.get(p.trim())?;
                        vars.eval(&expr)
                    }
                    (None, None) => Err("a variable needs a value or a jmesPath".to_string()),
                };
                match (result, default) {
                    (Ok(Value::Null), Some(d)) | (Err(_), Some(d)) => {
                        vars::substitute(d, vars, &self.policy.cache, self.delete)
                    }
                    (r, _) => r,
                }
            }
            ContextSource::ConfigMap { name, namespace } => {
                let name = self.sub_str(name, vars)?;
                let namespace = self.sub_str(namespace, vars)?;
                let ns = if namespace.is_empty() {
                    "default".to_string()
                } else {
                    namespace
                };
                match self.data.get("v1", "configmaps", &ns, &name) {
                    Some(cm) => Ok((*cm).clone()),
                    None => {
                        return unanswered(
                            EntryKind::ConfigMap,
                            format!("configmap {ns}/{name} not found"),
                        );
                    }
                }
            }
            ContextSource::ApiCall {
                url_path,
                jmes_path,
                default,
            } => {
                let url = self.sub_str(url_path, vars)?;
                let answer = self.data.api_get(&url);
                if answer.is_none() && !self.data.context_required(EntryKind::ApiCall) {
                    return Ok(None);
                }
                self.answer_or_default(answer, jmes_path, default, vars, || {
                    format!("API call {url} failed: no cluster data for it")
                })
            }
            ContextSource::ApiService {
                url,
                ca_bundle,
                method,
                data,
                jmes_path,
                default,
            } => {
                let url = self.sub_str(url, vars)?;
                let body = if method == "POST" {
                    let mut m = serde_json::Map::new();
                    for (k, v) in data {
                        let v = vars::substitute(v, vars, &self.policy.cache, self.delete)?;
                        m.insert(k.clone(), v);
                    }
                    Some(Value::Object(m).to_string())
                } else {
                    None
                };
                let call = crate::request::ServiceCall {
                    url: url.clone(),
                    ca_bundle: ca_bundle.clone(),
                    method: method.clone(),
                    body,
                };
                let answer = self.data.api_service(&call);
                if answer.is_none() && !self.data.context_required(EntryKind::ApiCall) {
                    return Ok(None);
                }
                self.answer_or_default(answer, jmes_path, default, vars, || {
                    format!("API call to service {url} failed: no answer")
                })
            }
            ContextSource::GlobalReference {
                name,
                projection,
                jmes_path,
            } => {
                let Some(data) = self.data.global(name, projection.as_deref()) else {
                    return unanswered(
                        EntryKind::GlobalReference,
                        format!("global context entry {name:?} has no data"),
                    );
                };
                self.apply_jmes(jmes_path.as_deref(), data, vars)
            }
            ContextSource::ImageRegistry {
                reference,
                jmes_path,
            } => {
                // Without registry access the entry is not loaded at all
                // (Kyverno's CLI disables the loader; its reference is not
                // even substituted).
                if !self.data.context_required(EntryKind::ImageRegistry) {
                    return Ok(None);
                }
                let reference = self.sub_str(reference, vars)?;
                match self.data.image_data(&reference) {
                    Ok(data) => self.apply_jmes(jmes_path.as_deref(), image_context(&data), vars),
                    Err(e) => Err(format!(
                        "failed to fetch image descriptor: {reference}, error: {e}"
                    )),
                }
            }
        };
        value.map(Some)
    }
}

/// The images of an object's pod spec (a Pod's, a pod controller's
/// template's, a CronJob's job template's): containers, init containers and
/// ephemeral containers, as Kyverno's default image extractors find them.
/// Whether an error is only a lookup this evaluation has not made yet
/// (the engine fetches what was missed and evaluates again).
/// What an attestor trusts, with a key kept in a Secret read (through
/// `data`, so a Secret not fetched yet is fetched between evaluations) from
/// its `cosign.pub`, as cosign's `PublicKeyFromKeyRef` reads `k8s://` keys.
pub(crate) fn resolve_trust<'t>(
    data: &dyn ClusterData,
    trust: &'t crate::request::ImageTrust,
) -> Result<std::borrow::Cow<'t, crate::request::ImageTrust>, String> {
    use base64::Engine as _;
    let crate::request::ImageTrust::Secret { namespace, name } = trust else {
        return Ok(std::borrow::Cow::Borrowed(trust));
    };
    let secret = data
        .get("v1", "secrets", namespace, name)
        .ok_or_else(|| format!("checking if secret exists: secrets \"{name}\" not found"))?;
    let pem = secret["data"]["cosign.pub"]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        // A Secret given as a file may carry the key in stringData.
        .or_else(|| {
            secret["stringData"]["cosign.pub"]
                .as_str()
                .map(String::from)
        })
        .filter(|p| p.contains("-----BEGIN PUBLIC KEY-----"))
        .ok_or_else(|| {
            format!("secret {namespace}/{name} holds no PEM public key in cosign.pub")
        })?;
    Ok(std::borrow::Cow::Owned(crate::request::ImageTrust::Keys(
        pem,
    )))
}

fn is_miss(e: &str) -> bool {
    e.contains("was not fetched yet")
}

/// Whether a verification's error is about reaching the image (its
/// registry's answer, a reference that does not parse, no registry read
/// here, data not fetched yet) rather than about its signatures.
fn is_registry_error(e: &str) -> bool {
    e.starts_with("image ")
        || e.starts_with("invalid image reference")
        || e.starts_with("cannot verify")
        || e.contains("was not fetched yet")
        // Keyless without roots, and no (or no loaded) Sigstore trust root.
        || e.starts_with("keyless: no roots")
        || e.contains("Sigstore trust root")
}

/// The field an attestor entry's errors name after its path: `.keys` or
/// `.keyless`, as Kyverno's verifier builder names them.
fn trust_path(trust: &crate::request::ImageTrust) -> &'static str {
    match trust {
        crate::request::ImageTrust::Keys(_) => ".keys",
        crate::request::ImageTrust::Keyless { .. } => ".keyless",
        crate::request::ImageTrust::Certificate { .. } => ".certificates",
        crate::request::ImageTrust::Secret { .. } => ".keys",
        // Kyverno's notary verifier names the entry alone.
        crate::request::ImageTrust::Notary { .. } => "",
    }
}

pub(crate) fn pod_images(object: &Value) -> Vec<String> {
    let spec = if object["kind"] == "CronJob" {
        &object["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    } else if object["spec"]["template"]["spec"].is_object() {
        &object["spec"]["template"]["spec"]
    } else {
        &object["spec"]
    };
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .filter_map(|c| c["image"].as_str().map(String::from))
        .collect()
}

/// `image` with `digest` as Kyverno's `mutateDigest` writes it:
/// `IMAGE:TAG@DIGEST` (`:latest` when the reference names no tag).
pub(crate) fn with_digest(image: &str, digest: &str) -> String {
    let name_part = image.rsplit('/').next().unwrap_or(image);
    if name_part.contains(':') {
        format!("{image}@{digest}")
    } else {
        format!("{image}:latest@{digest}")
    }
}

/// Replaces the images of `object`'s pod spec named in `replaced` (image,
/// new image); the pod spec found as [`pod_images`] finds it.
pub(crate) fn set_pod_images(object: &mut Value, replaced: &[(String, String)]) {
    let spec = if object["kind"] == "CronJob" {
        object.pointer_mut("/spec/jobTemplate/spec/template/spec")
    } else if object["spec"]["template"]["spec"].is_object() {
        object.pointer_mut("/spec/template/spec")
    } else {
        object.pointer_mut("/spec")
    };
    let Some(spec) = spec else {
        return;
    };
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for c in spec[key].as_array_mut().into_iter().flatten() {
            let Some(image) = c["image"].as_str() else {
                continue;
            };
            if let Some((_, new)) = replaced.iter().find(|(old, _)| old == image) {
                c["image"] = Value::String(new.clone());
            }
        }
    }
}

/// An `imageRegistry` context entry's object (Kyverno's engine: `image`,
/// `resolvedImage`, `registry`, `repository`, `identifier`,
/// `manifestList`, `manifest`, `configData`) from the `image.GetMetadata`
/// object [`ClusterData::image_data`] gives. The identifier is Kyverno's:
/// the tag, the digest, or `tag@digest` when the reference has both.
fn image_context(data: &Value) -> Value {
    let image = data["image"].as_str().unwrap_or("");
    let digest = image.split_once('@').map(|(_, d)| d);
    let tag = data["tag"].as_str();
    let identifier = match (tag, digest) {
        (Some(t), Some(d)) => format!("{t}@{d}"),
        (Some(t), None) => t.to_string(),
        (None, Some(d)) => d.to_string(),
        (None, None) => "latest".to_string(),
    };
    // `registry/repository@digest`, the top-level manifest's digest.
    let resolved = format!(
        "{}/{}@{}",
        data["registry"].as_str().unwrap_or(""),
        data["repository"].as_str().unwrap_or(""),
        data["digest"].as_str().unwrap_or("")
    );
    json!({
        "image": image,
        "resolvedImage": resolved,
        "registry": data["registry"],
        "repository": data["repository"],
        "identifier": identifier,
        "manifestList": data["imageIndex"],
        "manifest": data["manifest"],
        "configData": data["config"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    /// `mutateDigest`'s new image, and the pod specs it rewrites.
    #[test]
    fn digests_are_written_as_kyverno_writes_them() {
        let d = "sha256:abc";
        assert_eq!(with_digest("r:5000/a/b:1", d), "r:5000/a/b:1@sha256:abc");
        assert_eq!(with_digest("r:5000/a/b", d), "r:5000/a/b:latest@sha256:abc");
        assert_eq!(with_digest("nginx", d), "nginx:latest@sha256:abc");
        let replaced = [("x:1".to_string(), "x:1@sha256:abc".to_string())];
        let mut deploy = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "initContainers": [{"image": "x:1"}], "containers": [{"image": "y:1"}, {"image": "x:1"}]}}}});
        set_pod_images(&mut deploy, &replaced);
        assert_eq!(
            pod_images(&deploy),
            ["x:1@sha256:abc", "y:1", "x:1@sha256:abc"]
        );
        let mut cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {
            "spec": {"containers": [{"image": "x:1"}]}}}}}});
        set_pod_images(&mut cron, &replaced);
        assert_eq!(pod_images(&cron), ["x:1@sha256:abc"]);
    }

    /// A plain `request.object.…` / `request.oldObject.…` chain is read
    /// from the request's JSON without building the JMESPath context, and
    /// gives what the context gives, errors included.
    /// (Other expressions: `jmespath::native`'s tests.)
    #[test]
    fn field_chains_read_the_request_without_building_the_context() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "ns", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"replicas": 3, "ratio": 2.0, "big": 9007199254740993_i64, "nested": {"a": [1, 2.0]}, "none": null}
        });
        let mut req = EvalRequest::create(Arc::new(pod.clone()));
        req.operation = Operation::Update;
        req.old_object = Some(Arc::new(json!({"metadata": {"name": "old"}})));
        let mut cache = vars::ExprCache::default();
        let docs = [
            "{{ request.object.metadata.name }}",
            "{{request.object.spec.replicas}}",
            "{{ request.object.spec.ratio }}",
            "{{ request.object.spec.big }}",
            "{{ request.object.spec.nested }}",
            "{{ request.object.spec.none }}",
            "{{ request.object.metadata.labels.\"app.kubernetes.io/name\" }}",
            "name={{ request.oldObject.metadata.name }}",
            "{{ request.object.metadata.missing }}",
            "{{ request.object.metadata.name.deeper }}",
        ];
        for d in docs {
            cache.collect(&json!(d)).unwrap();
        }
        let built = Cell::new(0);
        let make = || {
            built.set(built.get() + 1);
            base_vars(&req, req.operation)
        };
        let floats = std::sync::OnceLock::new();
        let fast = Lazy {
            cell: std::cell::OnceCell::new(),
            make: Some(&make),
            raw: Some(RawObjects::of(&req, req.operation, &floats)),
            element: None,
            element_float_free: false,
        };
        let slow = base_vars(&req, req.operation);
        for (i, d) in docs.iter().enumerate() {
            let doc = json!(d);
            let want = vars::substitute(&doc, &slow, &cache, false);
            let got = vars::substitute(&doc, &fast, &cache, false);
            assert_eq!(got, want, "{d}");
            // All answered from the JSON: the first eight by the field
            // chain fast path, the last two (errors) evaluated in place.
            assert_eq!(built.get(), 0, "{d} ({i})");
        }
        assert_eq!(
            vars::substitute(&json!(docs[2]), &fast, &cache, false),
            Ok(json!(2))
        );
    }

    /// `foreachValues` give a foreach context variable its value per
    /// element (by index), standing in for the context entry of that name
    /// (an image registry lookup leash cannot make).
    #[test]
    fn foreach_values_bind_a_variable_per_element() {
        let policy = Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "images"},
            "spec": {"rules": [{"name": "block", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"message": "blocked", "foreach": [{
                    "list": "request.object.spec.containers",
                    "context": [{"name": "imageData", "imageRegistry": {"reference": "{{ element.image }}"}}],
                    "deny": {"conditions": [{"key": "{{ imageData }}", "operator": "Equals",
                                             "value": "{{ element.name }}"}]}}]}}]}
        }))
        .unwrap();
        let mut bindings = Bindings::default();
        bindings
            .policies
            .entry("images".into())
            .or_default()
            .foreach
            .insert(
                "block".into(),
                vec![("imageData".into(), vec![json!("a"), json!("b")])],
            );
        let status = |names: [&str; 2]| {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                "spec": {"containers": [{"name": names[0], "image": "x"}, {"name": names[1], "image": "y"}]}});
            let prepared = Prepared::new(EvalRequest::create(Arc::new(pod)));
            let results = policy.evaluate(&prepared, &crate::request::NoClusterData, &bindings);
            results[0].status
        };
        // The second element sees the second value.
        assert_eq!(status(["x", "b"]), Status::Fail);
        assert_eq!(status(["a", "y"]), Status::Fail);
        assert_eq!(status(["b", "a"]), Status::Pass);
    }

    /// Foreach lists and conditions over `element` and projections of the
    /// request are read from the JSON in place: the JMESPath context is
    /// never built, and the results are Kyverno's.
    #[test]
    fn foreach_and_projections_run_without_the_jmespath_context() {
        let policy = Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "caps"},
            "spec": {"rules": [
                {"name": "drop-all", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                 "validate": {"message": "drop ALL", "foreach": [{
                    "list": "request.object.spec.[ephemeralContainers, initContainers, containers][]",
                    "deny": {"conditions": {"all": [{"key": "ALL", "operator": "AnyNotIn",
                        "value": "{{ element.securityContext.capabilities.drop[] || `[]` }}"}]}}}]}},
                {"name": "no-latest", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                 "validate": {"message": "no latest", "deny": {"conditions": {"any": [{
                    "key": "{{ request.object.spec.[initContainers, containers][].image }}",
                    "operator": "AnyIn", "value": ["*:latest"]}]}}}},
            ]}
        }))
        .unwrap();
        let pod = |drop: Value, image: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"},
                   "spec": {"initContainers": [{"name": "i", "image": "init:1",
                                                "securityContext": {"capabilities": {"drop": ["ALL"]}}}],
                            "containers": [{"name": "c", "image": image,
                                            "securityContext": {"capabilities": {"drop": drop}}}]}})
        };
        for (p, want) in [
            (pod(json!(["ALL"]), "app:1"), ["pass", "pass"]),
            (pod(json!(["NET_RAW"]), "app:latest"), ["fail", "fail"]),
        ] {
            let prepared = Prepared::new(EvalRequest::create(Arc::new(p)));
            let results = policy.evaluate(
                &prepared,
                &crate::request::NoClusterData,
                &Bindings::default(),
            );
            let got: Vec<String> = results.iter().map(|r| r.status.to_string()).collect();
            assert_eq!(got, want, "{results:?}");
            assert!(
                prepared.base.get().is_none(),
                "the JMESPath context was built"
            );
        }
    }

    /// `request.namespace` of a Namespace is its own name, as in the
    /// admission requests kube-apiserver sends (Kyverno's kasten generate
    /// policy names its downstream with it); of other objects their
    /// namespace.
    #[test]
    fn request_namespace_of_a_namespace_is_its_name() {
        use crate::policy::Policy;
        use crate::request::{EvalRequest, NoClusterData};
        let policy = Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Namespace", "ConfigMap"]}}]},
                "validate": {"message": "ns={{ request.namespace }}", "deny": {}}}]}
        }))
        .unwrap();
        for (object, want) in [
            (
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
                "ns=team-a",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "b"}}),
                "ns=b",
            ),
        ] {
            let results = policy.evaluate(
                &Prepared::new(EvalRequest::create(Arc::new(object))),
                &NoClusterData,
                &Bindings::default(),
            );
            assert_eq!(results[0].message, want);
        }
    }

    /// Issue 38 (4): an UPDATE that leaves an existing violation as it was
    /// (labelling a legacy pod) is skipped, as Kyverno skips it; one that
    /// introduces the violation fails; `allowExistingViolations: false`
    /// and an UPDATE without an old object keep failing.
    #[test]
    fn an_existing_violation_does_not_block_an_update() {
        use crate::policy::Policy;
        use crate::request::{EvalRequest, NoClusterData, Operation};
        let policy = |allow: Option<bool>| {
            let mut validate =
                json!({"pattern": {"spec": {"containers": [{"image": "!*:latest"}]}}});
            if let Some(a) = allow {
                validate["allowExistingViolations"] = json!(a);
            }
            Policy::compile(&json!({
                "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "p"},
                "spec": {"rules": [
                    {"name": "tag", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                     "validate": validate},
                    {"name": "pss", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                     "validate": {"podSecurity": {"level": "baseline", "version": "latest"}}},
                ]}
            }))
            .unwrap()
        };
        let pod = |image: &str, label: &str, privileged: bool| {
            Arc::new(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "legacy", "namespace": "default", "labels": {"a": label}},
                "spec": {"containers": [{"name": "c", "image": image,
                    "securityContext": {"privileged": privileged}}]}}))
        };
        // An UPDATE of the pod's image and privileged from `old` (labelled
        // x) to `new` (labelled b).
        let run = |p: &Policy, old: Option<(&str, bool)>, (image, privileged): (&str, bool)| {
            let mut req = EvalRequest::create(pod(image, "b", privileged));
            req.operation = Operation::Update;
            req.old_object = old.map(|(image, privileged)| pod(image, "x", privileged));
            p.evaluate(&Prepared::new(req), &NoClusterData, &Bindings::default())
                .into_iter()
                .map(|r| r.status)
                .collect::<Vec<_>>()
        };
        let default = policy(None);
        let violating = ("nginx:latest", true);
        let compliant = ("nginx:1.27", false);
        // `kubectl label pod legacy a=b` on a pod that already violated both.
        assert_eq!(
            run(&default, Some(violating), violating),
            [Status::Skip, Status::Skip]
        );
        // The edit introduces the violations.
        assert_eq!(
            run(&default, Some(compliant), violating),
            [Status::Fail, Status::Fail]
        );
        // Fixed by the edit.
        assert_eq!(
            run(&default, Some(violating), compliant),
            [Status::Pass, Status::Pass]
        );
        assert_eq!(
            run(&policy(Some(false)), Some(violating), violating),
            [Status::Fail, Status::Skip],
            "only the rule that says false (the pss rule keeps the default)"
        );
        assert_eq!(run(&default, None, violating), [Status::Fail, Status::Fail]);
    }

    /// Kyverno skips pattern rules on a DELETE (only deny conditions see
    /// deletions): a Namespace pattern does not refuse the namespace's
    /// deletion.
    #[test]
    fn patterns_do_not_judge_deletions_deny_conditions_do() {
        use crate::policy::Policy;
        use crate::request::{EvalRequest, NoClusterData, Operation};
        let policy = Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "ns"},
            "spec": {"rules": [
                {"name": "pattern", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                 "validate": {"pattern": {"metadata": {"labels": {"team": "?*"}}}}},
                {"name": "any", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                 "validate": {"anyPattern": [{"metadata": {"labels": {"team": "?*"}}}]}},
                {"name": "deny", "match": {"any": [{"resources": {"kinds": ["Namespace"]}}]},
                 "validate": {"deny": {"conditions": {"any": [
                     {"key": "{{ request.operation }}", "operator": "Equals", "value": "DELETE"}]}}}},
            ]}
        }))
        .unwrap();
        let ns =
            Arc::new(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}));
        let run = |op| {
            let mut req = EvalRequest::create(ns.clone());
            req.operation = op;
            if op == Operation::Delete {
                req.old_object = Some(req.object.clone());
            }
            policy
                .evaluate(&Prepared::new(req), &NoClusterData, &Bindings::default())
                .into_iter()
                .map(|r| (r.rule, r.status))
                .collect::<Vec<_>>()
        };
        let st = |v: &[(&str, Status)]| {
            v.iter()
                .map(|(r, s)| (r.to_string(), *s))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            run(Operation::Create),
            st(&[
                ("pattern", Status::Fail),
                ("any", Status::Fail),
                ("deny", Status::Pass)
            ])
        );
        assert_eq!(
            run(Operation::Delete),
            st(&[
                ("pattern", Status::Skip),
                ("any", Status::Skip),
                ("deny", Status::Fail)
            ])
        );
    }
}
