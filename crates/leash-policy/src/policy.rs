//! Kyverno `ClusterPolicy` / `Policy` (`kyverno.io/v1`, `v2beta1`): parsed
//! and compiled once into an immutable [`Policy`].

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::autogen;
use crate::cel::CelRule;
use crate::conditions::{Conditions, ConditionsDoc};
use crate::error::{Error, Result};
use crate::matching::MatchBlock;
use crate::model;
use crate::request::{ImageTrust, KeylessIdentity};
use crate::vars::ExprCache;

/// What a failed validate rule does at admission (Kyverno's CRDs also
/// allow the older lower-case spellings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub enum FailureAction {
    /// Report only.
    #[serde(alias = "audit")]
    Audit,
    /// Deny the request.
    #[serde(alias = "enforce")]
    Enforce,
}

/// A compiled Kyverno policy. Immutable; share it as `Arc<Policy>`.
#[derive(Debug)]
pub struct Policy {
    pub(crate) kind: String,
    pub(crate) name: String,
    pub(crate) namespace: Option<String>,
    pub(crate) key: Arc<str>,
    pub(crate) annotations: BTreeMap<String, String>,
    pub(crate) background: bool,
    /// Why Kyverno would refuse this policy in background mode (see
    /// [`crate::background`]), when `background` is true.
    pub(crate) background_refused: Option<String>,
    pub(crate) admission: bool,
    /// `spec.failurePolicy: Ignore` (default `Fail`).
    pub(crate) ignore_webhook_failures: bool,
    pub(crate) failure_action: FailureAction,
    /// `generateExisting` (or the older `generateExistingOnPolicyUpdate`).
    pub(crate) generate_existing: bool,
    /// The `mutate.targets` rules whose existing triggers are run when the
    /// policy is created or changed (`mutate.mutateExistingOnPolicyUpdate`,
    /// or the policy-wide `spec.mutateExistingOnPolicyUpdate`).
    pub(crate) mutate_existing_on_update: Vec<String>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) cache: ExprCache,
    /// What its rules read of a resource.
    pub(crate) reads: crate::ReadSet,
    /// What its results depend on, when that is the resource alone
    /// ([`crate::ReadSet::key_of_rules`]).
    pub(crate) memo_key: Option<crate::ReadSet>,
    /// What its admission mutations depend on
    /// ([`crate::reads::key_of_mutate_rules`]).
    pub(crate) mutation_key: crate::MutationKey,
    /// The Secrets its rules' `imageRegistryCredentials.secrets` name.
    pub(crate) registry_secrets: Vec<String>,
}

/// Every operation a webhook can be sent.
const ALL_OPERATIONS: [crate::Operation; 4] = [
    crate::Operation::Create,
    crate::Operation::Update,
    crate::Operation::Delete,
    crate::Operation::Connect,
];

/// One rule (including autogen-generated ones).
#[derive(Debug)]
pub(crate) struct Rule {
    pub name: String,
    /// The rule it was generated from (itself when not autogen).
    pub base_name: String,
    pub match_: MatchBlock,
    pub exclude: MatchBlock,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
    /// `celPreconditions`: CEL expressions that must all be true.
    pub cel_preconditions: Option<Box<CelRule>>,
    pub validate: Option<Validate>,
    /// The rule's `mutate`.
    pub mutate: Option<crate::mutate::MutateSpec>,
    pub failure_action: Option<FailureAction>,
    /// `generate`: the downstreams a trigger asks for.
    pub generate: Option<crate::generate::GenerateSpec>,
    /// Kyverno's message of a passing validate rule, made once.
    pub pass_message: String,
}

impl Rule {
    /// Whether it is a `verifyImages` rule with `mutateDigest`.
    pub(crate) fn mutates_digests(&self) -> bool {
        matches!(
            self.validate.as_ref().map(|v| &v.check),
            Some(Check::VerifyImages(specs)) if specs.iter().any(|s| s.mutate_digest)
        )
    }
}

/// A rule's `validate`.
#[derive(Debug)]
pub(crate) struct Validate {
    pub message: Option<String>,
    pub check: Check,
    /// `allowExistingViolations` (default true): an UPDATE that leaves a
    /// violation as it was is skipped, not failed.
    pub allow_existing_violations: bool,
}

/// What a validate (or a foreach level) checks.
#[derive(Debug)]
pub(crate) enum Check {
    Pattern(Pattern),
    AnyPattern(Vec<Pattern>),
    Deny(Conditions),
    Foreach(Vec<Foreach>),
    Cel(Box<CelRule>),
    /// `podSecurity`: a Pod Security Standards profile.
    PodSecurity(Box<crate::podsecurity::PodSecurity>),
    /// `verifyImages`: the images' cosign signatures, by public key.
    VerifyImages(Vec<ImageVerification>),
    /// A kind of check this engine does not evaluate (named).
    Unsupported(&'static str),
}

/// One `verifyImages` entry of a rule.
#[derive(Debug)]
pub(crate) struct ImageVerification {
    /// `imageReferences` (wildcards): the images it checks.
    pub image_references: Vec<String>,
    /// `skipImageReferences` (wildcards): images it skips.
    pub skip_image_references: Vec<String>,
    /// `attestors`: each set's entries' `keys.publicKeys` (PEM), all of
    /// which must verify an image (`count` of them when given).
    pub attestors: Vec<AttestorSet>,
    /// `verifyDigest` (default true): an image must name its digest.
    pub verify_digest: bool,
    /// `mutateDigest` (default true): Kyverno adds the digest at the
    /// mutating webhook, so the digest is not required of the request.
    pub mutate_digest: bool,
    /// `useCache` (default true): false verifies each image's signatures
    /// and attestations afresh at every evaluation, nothing kept from
    /// another ([`crate::ClusterData::fresh_image`]).
    pub use_cache: bool,
    /// `attestations`: in-toto attestations the image must carry.
    pub attestations: Vec<AttestationCheck>,
}

/// One `attestations` entry of a `verifyImages` entry.
#[derive(Debug)]
pub(crate) struct AttestationCheck {
    /// `type` (or the older `predicateType`): the predicate type (a URI
    /// or one of cosign's short names); None: Kyverno's "missing type".
    pub predicate_type: Option<String>,
    /// Its attestor sets: keys that must have signed the attestation.
    pub attestors: Vec<AttestorSet>,
    /// `conditions`, evaluated on each statement's predicate (its fields
    /// at the top of the context).
    pub conditions: Vec<Conditions>,
}

/// One attestor set of a `verifyImages` entry.
#[derive(Debug)]
pub(crate) struct AttestorSet {
    /// How many entries must verify (all when not given).
    pub count: Option<usize>,
    /// Each entry's trust (public keys, keyless roots and identity), or
    /// why this engine does not verify it (certificates, an entry whose
    /// signatures must be in the transparency log).
    pub entries: Vec<Result<ImageTrust, String>>,
}

/// A validate `pattern` (or one of `anyPattern`), with whether it holds
/// variables known from compiling it: most hold none, and are matched in
/// place without walking them first.
#[derive(Debug)]
pub(crate) struct Pattern {
    pub doc: Value,
    /// Compiled with the policy when it holds no variables (else compiled
    /// after each substitution).
    pub compiled: Option<crate::pattern::Compiled>,
}

impl Pattern {
    fn new(doc: &Value) -> Pattern {
        Pattern {
            compiled: (!crate::vars::has_vars(doc)).then(|| crate::pattern::Compiled::new(doc)),
            doc: doc.clone(),
        }
    }
}

/// One `foreach` declaration.
#[derive(Debug)]
pub(crate) struct Foreach {
    pub list: String,
    pub element_scope: Option<bool>,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
    pub check: Check,
}

/// A rule `context` entry.
#[derive(Debug, Clone)]
pub(crate) struct ContextEntry {
    pub name: String,
    pub source: ContextSource,
}

#[derive(Debug, Clone)]
pub(crate) enum ContextSource {
    Variable {
        value: Option<Value>,
        jmes_path: Option<String>,
        default: Option<Value>,
    },
    ConfigMap {
        name: String,
        namespace: String,
    },
    ApiCall {
        url_path: String,
        jmes_path: Option<String>,
        default: Option<Value>,
    },
    /// `apiCall.service`: a call of an HTTP(S) service.
    ApiService {
        url: String,
        ca_bundle: Option<String>,
        /// `GET` or `POST`.
        method: String,
        /// `data`: the `key`/`value` pairs of a POST's JSON body.
        data: Vec<(String, Value)>,
        jmes_path: Option<String>,
        default: Option<Value>,
    },
    GlobalReference {
        name: String,
        projection: Option<String>,
        jmes_path: Option<String>,
    },
    /// `imageRegistry`: what a registry says about `reference`.
    ImageRegistry {
        reference: String,
        jmes_path: Option<String>,
    },
}

impl Policy {
    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `namespace/name` for a namespaced `Policy`, `name` otherwise.
    pub fn key(&self) -> &Arc<str> {
        &self.key
    }

    /// `ClusterPolicy` or `Policy`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The namespace of a `Policy`.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// `spec.background` (default true).
    pub fn background(&self) -> bool {
        self.background
    }

    /// Kyverno's reason for refusing this policy in background mode, when
    /// `spec.background` is true but its rules depend on the request's user
    /// (user info in a match or exclude block, or a variable such as
    /// `request.userInfo`): a background scan has no request, so such a
    /// policy belongs to admission only.
    pub fn background_refused(&self) -> Option<&str> {
        self.background_refused.as_deref()
    }

    /// `spec.admission` (default true).
    pub fn admission(&self) -> bool {
        self.admission
    }

    /// `spec.failurePolicy: Ignore`: the webhook that serves this policy
    /// admits when it cannot be called (Kyverno registers such policies
    /// in its `-ignore` webhook).
    pub fn ignores_webhook_failures(&self) -> bool {
        self.ignore_webhook_failures
    }

    /// The policy-wide failure action.
    pub fn failure_action(&self) -> FailureAction {
        self.failure_action
    }

    /// The failure action of one rule (its own `failureAction`, or the policy's).
    pub fn rule_failure_action(&self, rule: &str) -> FailureAction {
        self.rules
            .iter()
            .find(|r| r.name == rule)
            .and_then(|r| r.failure_action)
            .unwrap_or(self.failure_action)
    }

    /// An annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// The names of the rules evaluated (autogen rules included).
    pub fn rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .filter(|r| r.validate.is_some())
            .map(|r| r.name.as_str())
    }

    /// Whether a rule reads ConfigMaps through `context.configMap` (the
    /// caller's [`crate::ClusterData`] must then hold them).
    pub fn reads_config_maps(&self) -> bool {
        fn in_check(c: &Check) -> bool {
            match c {
                Check::Foreach(decls) => decls
                    .iter()
                    .any(|d| has_cm(&d.context) || in_check(&d.check)),
                _ => false,
            }
        }
        fn has_cm(entries: &[ContextEntry]) -> bool {
            entries
                .iter()
                .any(|e| matches!(e.source, ContextSource::ConfigMap { .. }))
        }
        self.rules
            .iter()
            .any(|r| has_cm(&r.context) || r.validate.as_ref().is_some_and(|v| in_check(&v.check)))
    }

    /// The `podSecurity` check of a validate rule, by rule name.
    pub(crate) fn pod_security(&self, rule: &str) -> Option<&crate::podsecurity::PodSecurity> {
        self.rules
            .iter()
            .find(|r| r.name == rule)
            .and_then(|r| match &r.validate.as_ref()?.check {
                Check::PodSecurity(ps) => Some(&**ps),
                _ => None,
            })
    }

    /// Whether any rule mutates (`mutate`).
    pub fn has_mutate_rules(&self) -> bool {
        self.rules.iter().any(|r| r.mutate.is_some())
    }

    /// The names of the mutate rules (autogen rules included), in order.
    pub fn mutate_rule_names(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .filter(|r| r.mutate.is_some())
            .map(|r| r.name.as_str())
    }

    /// Every kind named by a validate rule's match (`Pod`, `apps/v1/Deployment`, `*`).
    pub fn matched_kinds(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in self.rules.iter().filter(|r| r.validate.is_some()) {
            for k in r.match_.kinds() {
                let s = k.display();
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out
    }

    /// The admission operations a webhook must send for each kind a
    /// validate, generate or mutate-existing (`mutate.targets`) rule
    /// matches, as Kyverno's webhook controller
    /// derives them: the operations the rule's match filters name, all four
    /// when they name none. Kyverno also drops the operations an exclude
    /// filter names; leash drops them only when that filter names nothing
    /// but operations (otherwise the exclusion depends on the resource, and
    /// dropping the operation would skip resources the rule applies to).
    pub fn webhook_operations(&self) -> Vec<(String, Vec<&'static str>)> {
        self.operations_of(
            |r| {
                r.validate.is_some()
                    || r.generate.is_some()
                    || matches!(r.mutate, Some(crate::mutate::MutateSpec::Existing { .. }))
            },
            &ALL_OPERATIONS,
        )
    }

    /// As [`Policy::webhook_operations`], for the mutating webhook: the
    /// kinds of the rules that patch the admitted object (not the
    /// `mutate.targets` ones), with CREATE and UPDATE only (what Kyverno's
    /// mutating webhooks are sent).
    pub fn mutate_webhook_operations(&self) -> Vec<(String, Vec<&'static str>)> {
        self.operations_of(
            |r| {
                r.mutate
                    .as_ref()
                    .is_some_and(|m| !matches!(m, crate::mutate::MutateSpec::Existing { .. }))
                    || r.mutates_digests()
            },
            &[crate::Operation::Create, crate::Operation::Update],
        )
    }

    /// Whether a `verifyImages` rule replaces image tags by digests
    /// (`mutateDigest`, the default) at the mutating webhook.
    pub fn has_digest_mutation(&self) -> bool {
        self.rules.iter().any(Rule::mutates_digests)
    }

    /// The `mutate.targets` rules to run for every existing trigger when
    /// the policy is created or changed (`mutateExistingOnPolicyUpdate`).
    pub fn mutate_existing_on_policy_update(&self) -> &[String] {
        &self.mutate_existing_on_update
    }

    /// The kinds the match of rule `rule` names (`Pod`, `apps/v1/Deployment`).
    pub fn rule_kinds(&self, rule: &str) -> Vec<String> {
        self.rules
            .iter()
            .filter(|r| r.name == rule)
            .flat_map(|r| r.match_.kinds())
            .map(|k| k.display())
            .collect()
    }

    /// Whether a rule patches existing resources (`mutate.targets`): its
    /// triggers go through the validating webhook, which hands them on as
    /// UpdateRequests.
    pub fn has_mutate_existing_rules(&self) -> bool {
        self.rules
            .iter()
            .any(|r| matches!(r.mutate, Some(crate::mutate::MutateSpec::Existing { .. })))
    }

    fn operations_of(
        &self,
        wanted: impl Fn(&Rule) -> bool,
        all: &[crate::Operation],
    ) -> Vec<(String, Vec<&'static str>)> {
        let mut out = Vec::new();
        for r in self.rules.iter().filter(|r| wanted(r)) {
            let named: Vec<crate::Operation> = r
                .match_
                .any
                .iter()
                .chain(&r.match_.all)
                .flat_map(|f| f.resources.operations.iter().copied())
                .collect();
            let excluded: Vec<crate::Operation> = r
                .exclude
                .any
                .iter()
                .chain(&r.exclude.all)
                .filter(|f| f.only_operations())
                .flat_map(|f| f.resources.operations.iter().copied())
                .collect();
            let ops: Vec<&'static str> = all
                .iter()
                .filter(|o| (named.is_empty() || named.contains(o)) && !excluded.contains(o))
                .map(|o| o.as_str())
                .collect();
            if ops.is_empty() {
                continue;
            }
            for k in r.match_.kinds() {
                out.push((k.display(), ops.clone()));
            }
        }
        out
    }

    /// Parses and compiles a `ClusterPolicy` or `Policy` document.
    pub fn compile(doc: &Value) -> Result<Policy> {
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let raw_name = doc["metadata"]["name"].as_str().unwrap_or("");
        let err = |field: String, message: String| {
            Error::invalid(kind.clone(), raw_name.to_string(), field, message)
        };
        if !matches!(kind.as_str(), "ClusterPolicy" | "Policy") {
            return Err(Error::Unsupported(format!(
                "kind {kind:?} is not ClusterPolicy or Policy"
            )));
        }
        let model::Document { metadata, spec } = model::parse(doc, "", &err)?;
        let name = metadata.name.unwrap_or_default();
        if name.is_empty() {
            return Err(err("metadata.name".into(), "is required".into()));
        }
        let namespace = (kind == "Policy").then(|| metadata.namespace.unwrap_or("default".into()));
        let Some(spec) = spec else {
            return Err(err(
                "spec".into(),
                "is required and must be an object".into(),
            ));
        };
        let annotations = metadata
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect();
        let background = spec.background.unwrap_or(true);
        let background_refused = if background {
            crate::background::user_info_error(doc)
        } else {
            None
        };
        let Some(raw_rules) = &spec.rules else {
            return Err(err(
                "spec.rules".into(),
                "is required and must be a list".into(),
            ));
        };
        let docs = raw_rules
            .iter()
            .enumerate()
            .map(|(i, r)| model::parse::<model::Rule>(r, &format!("spec.rules[{i}]"), &err))
            .collect::<Result<Vec<_>>>()?;
        check_rule_shapes(raw_rules, &docs, &err)?;
        let policy_wide = spec.mutate_existing_on_policy_update == Some(true);
        let mutate_existing_on_update: Vec<String> = docs
            .iter()
            .filter(|r| {
                r.mutate.as_ref().is_some_and(|m| {
                    m.targets.is_some() && m.mutate_existing_on_policy_update.unwrap_or(policy_wide)
                })
            })
            .filter_map(|r| r.name.clone())
            .collect();
        let controllers = autogen::controllers(&metadata.annotations, raw_rules);
        let mut cache = ExprCache::default();
        let mut rules = Vec::new();
        // Kyverno's two places of Secrets: a verifyImages entry's and an
        // imageRegistry context entry's `imageRegistryCredentials`.
        let mut registry_secrets = Vec::new();
        for (i, (raw, rule)) in raw_rules.iter().zip(docs).enumerate() {
            let field = format!("spec.rules[{i}]");
            let places = rule
                .verify_images
                .iter()
                .enumerate()
                .map(|(j, v)| {
                    (
                        format!("{field}.verifyImages[{j}]"),
                        &v.image_registry_credentials,
                    )
                })
                .chain(rule.context.iter().enumerate().filter_map(|(j, c)| {
                    let r = c.image_registry.as_ref()?;
                    let at = format!("{field}.context[{j}].imageRegistry");
                    Some((at, &r.image_registry_credentials))
                }));
            for (at, credentials) in places {
                if let Some(c) = credentials {
                    let at = format!("{at}.imageRegistryCredentials");
                    registry_secrets.extend(credential_secrets(c, &at, &err)?);
                }
            }
            let base = compile_rule(rule, &field, &err, &mut cache)?;
            let base_name = base.name.clone();
            rules.push(base);
            for generated in autogen::rules_for(raw, &controllers) {
                let doc = model::parse(&generated, &field, &err)?;
                let mut rule = compile_rule(doc, &field, &err, &mut cache)?;
                rule.base_name = base_name.clone();
                rules.push(rule);
            }
        }
        let mut reads = crate::ReadSet::naming();
        for rule in &rules {
            reads.add_rule(rule);
        }
        let memo_key = crate::ReadSet::key_of_rules(&rules);
        let mutation_key = crate::reads::key_of_mutate_rules(&rules);
        let key: Arc<str> = match &namespace {
            Some(ns) => format!("{ns}/{name}").into(),
            None => name.clone().into(),
        };
        Ok(Policy {
            kind,
            name,
            namespace,
            key,
            annotations,
            background,
            background_refused,
            admission: spec.admission.unwrap_or(true),
            ignore_webhook_failures: spec.failure_policy == Some(model::FailurePolicy::Ignore),
            failure_action: spec
                .validation_failure_action
                .unwrap_or(FailureAction::Audit),
            generate_existing: spec
                .generate_existing
                .or(spec.generate_existing_on_policy_update)
                .unwrap_or(false),
            mutate_existing_on_update,
            rules,
            cache,
            reads,
            memo_key,
            mutation_key,
            registry_secrets,
        })
    }
}

/// The Secrets an `imageRegistryCredentials` (a ClusterPolicy's
/// verifyImages or imageRegistry context entry) or `credentials` (an
/// ImageValidatingPolicy) at `field` names in `secrets`:
/// `kubernetes.io/dockerconfigjson` Secrets, `NAME` in Kyverno's namespace
/// or `NAMESPACE/NAME`, whose credentials read the registries.
pub(crate) fn credential_secrets(
    c: &model::Credentials,
    field: &str,
    err: &ErrFn<'_>,
) -> Result<Vec<String>> {
    if let Some(i) = c.secrets.iter().position(String::is_empty) {
        return Err(err(
            format!("{field}.secrets[{i}]"),
            "must be a Secret's name".into(),
        ));
    }
    Ok(c.secrets.clone())
}

pub(crate) type ErrFn<'a> = dyn Fn(String, String) -> Error + 'a;

/// What Kyverno's policy validation refuses in the shape of the rules:
/// two rules of one name, a rule of more than one kind (validate, mutate,
/// generate, verifyImages), and `any`/`all` beside a match or exclude
/// block's own `resources`, `subjects`, `roles` or `clusterRoles`.
fn check_rule_shapes(raw: &[Value], docs: &[model::Rule], err: &ErrFn<'_>) -> Result<()> {
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (i, (raw, rule)) in raw.iter().zip(docs).enumerate() {
        let field = format!("spec.rules[{i}]");
        if let Some(name) = rule.name.as_deref()
            && let Some(first) = names.insert(name, i)
        {
            return Err(err(
                format!("{field}.name"),
                format!("duplicate rule name {name:?} (spec.rules[{first}] has it too)"),
            ));
        }
        let kinds: Vec<&str> = [
            ("validate", rule.validate.is_some()),
            ("mutate", rule.mutate.is_some()),
            ("generate", rule.generate.is_some()),
            ("verifyImages", !rule.verify_images.is_empty()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect();
        if kinds.len() > 1 {
            return Err(err(
                field,
                format!(
                    "sets {}: a rule is one of validate, mutate, generate and verifyImages",
                    kinds.join(" and ")
                ),
            ));
        }
        let set = |v: &Value| match v {
            Value::Null => false,
            Value::Object(m) => !m.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => true,
        };
        for block in ["match", "exclude"] {
            let b = &raw[block];
            let any_all = set(&b["any"]) || set(&b["all"]);
            let own = ["resources", "subjects", "roles", "clusterRoles"]
                .into_iter()
                .find(|k| set(&b[*k]));
            if let (true, Some(own)) = (any_all, own) {
                return Err(err(
                    format!("{field}.{block}.{own}"),
                    format!(
                        "cannot be given beside {block}.any or {block}.all (move it into one of their entries)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn compile_rule(
    raw: model::Rule,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Rule> {
    let name = raw
        .name
        .ok_or_else(|| err(format!("{field}.name"), "is required".into()))?;
    let match_ = raw.match_;
    if match_.is_empty() {
        return Err(err(
            format!("{field}.match"),
            "is required (any, all or resources)".into(),
        ));
    }
    let exclude = raw.exclude;
    let context = compile_context(&raw.context, &format!("{field}.context"), err, cache)?;
    let preconditions = compile_conditions(
        &raw.preconditions,
        &format!("{field}.preconditions"),
        err,
        cache,
    )?;
    let cel_preconditions = match &raw.cel_preconditions {
        None => None,
        Some(list) => {
            let spec = serde_json::json!({ "expressions": list });
            let field = format!("{field}.celPreconditions");
            Some(Box::new(CelRule::compile(
                &spec,
                "ClusterPolicy",
                "",
                &field,
            )?))
        }
    };
    let (validate, failure_action) = match &raw.validate {
        None => (None, None),
        Some(v) => {
            let vf = format!("{field}.validate");
            if let Some(m) = &v.message {
                cache
                    .collect(&Value::String(m.clone()))
                    .map_err(|e| err(format!("{vf}.message"), e))?;
            }
            let check = compile_check(v, &vf, err, cache, true)?;
            (
                Some(Validate {
                    message: v.message.clone(),
                    check,
                    allow_existing_violations: v.allow_existing_violations.unwrap_or(true),
                }),
                v.failure_action,
            )
        }
    };
    let (validate, failure_action) = match (&raw.verify_images[..], validate) {
        ([first, ..], None) => {
            let vf = format!("{field}.verifyImages");
            let mut specs = Vec::new();
            for (i, v) in raw.verify_images.iter().enumerate() {
                specs.push(compile_image_verification(v, &format!("{vf}[{i}]"), err)?);
            }
            (
                Some(Validate {
                    message: None,
                    check: Check::VerifyImages(specs),
                    allow_existing_violations: true,
                }),
                first.failure_action.or(failure_action),
            )
        }
        (_, v) => (v, failure_action),
    };
    let generate = match &raw.generate {
        None => None,
        Some(g) => Some(crate::generate::GenerateSpec::compile(
            g,
            &format!("{field}.generate"),
            err,
            cache,
        )?),
    };
    let mutate = match &raw.mutate {
        None => None,
        Some(m) => Some(crate::mutate::MutateSpec::compile(
            m,
            &format!("{field}.mutate"),
            err,
            cache,
        )?),
    };
    Ok(Rule {
        base_name: name.clone(),
        pass_message: format!("validation rule '{name}' passed."),
        name,
        match_,
        exclude,
        context,
        preconditions,
        cel_preconditions,
        validate,
        mutate,
        failure_action,
        generate,
    })
}

/// One `verifyImages` entry at `field`.
fn compile_image_verification(
    v: &model::ImageVerification,
    field: &str,
    err: &ErrFn<'_>,
) -> Result<ImageVerification> {
    let mut image_references = v.image_references.clone();
    image_references.extend(v.image.clone());
    if image_references.is_empty() {
        return Err(err(
            format!("{field}.imageReferences"),
            "at least one image reference is required".into(),
        ));
    }
    let notary = match v.type_ {
        None | Some(model::VerificationType::Cosign) => false,
        Some(model::VerificationType::Notary) => true,
        Some(model::VerificationType::SigstoreBundle) => {
            return Err(err(
                format!("{field}.type"),
                "SigstoreBundle verification is not supported by leash (Cosign and Notary are)"
                    .into(),
            ));
        }
    };
    let mut attestors = compile_attestor_sets(&v.attestors, field, err, notary)?;
    let mut attestations = Vec::new();
    for (i, a) in v.attestations.iter().enumerate() {
        let af = format!("{field}.attestations[{i}]");
        let predicate_type = a
            .type_
            .as_ref()
            .or(a.predicate_type.as_ref())
            .filter(|t| !t.is_empty())
            .cloned();
        attestations.push(AttestationCheck {
            predicate_type,
            attestors: compile_attestor_sets(&a.attestors, &af, err, notary)?,
            conditions: a.conditions.iter().map(ConditionsDoc::compile).collect(),
        });
    }
    // The older single `key` (a PEM): an attestor of the attestations, or
    // of the image when there are none (Kyverno's Convert).
    if let Some(key) = v.key.as_deref().filter(|k| !k.is_empty()) {
        if !key.contains("-----BEGIN PUBLIC KEY-----") {
            return Err(err(
                format!("{field}.key"),
                "a PEM public key (-----BEGIN PUBLIC KEY-----) is required".into(),
            ));
        }
        // No `rekor` settings there: Kyverno wants the transparency log.
        let set = || AttestorSet {
            count: None,
            entries: vec![Err(TLOG_REQUIRED.to_string())],
        };
        if attestations.is_empty() {
            attestors.push(set());
        } else {
            for a in &mut attestations {
                a.attestors.push(set());
            }
        }
    }
    Ok(ImageVerification {
        image_references,
        skip_image_references: v.skip_image_references.clone(),
        attestors,
        verify_digest: v.verify_digest.unwrap_or(true),
        mutate_digest: v.mutate_digest.unwrap_or(true),
        use_cache: v.use_cache.unwrap_or(true),
        attestations,
    })
}

/// Why a key attestor that wants its signatures in the transparency log
/// (Kyverno's default: `keys.rekor` unset, or `ignoreTlog: false`) is not
/// verified: leash reads no Rekor log, and passing such an image would
/// allow what Kyverno denies.
const TLOG_REQUIRED: &str = "keys: the signatures must be verified against a transparency log (Rekor), which leash does not read; set keys.rekor.ignoreTlog: true to verify them by the public key alone";

/// A `keyless` attestor entry: its roots and identity, when leash can
/// verify it as Kyverno would; else why not (the rule then errs, never
/// passes).
fn keyless_trust(k: &model::Keyless) -> std::result::Result<ImageTrust, String> {
    if !model::Rekor::ignored(&k.rekor) {
        return Err("keyless: the signatures must be verified against a transparency log (Rekor), which leash does not read; set keyless.rekor.ignoreTlog: true to verify the certificate alone".to_string());
    }
    if k.ctlog.as_ref().and_then(|c| c.ignore_sct) != Some(true) {
        return Err("keyless: the certificate's SCT must be verified against a certificate transparency log, which leash does not read; set keyless.ctlog.ignoreSCT: true".to_string());
    }
    if k.additional_extensions
        .as_ref()
        .is_some_and(|m| !m.is_empty())
    {
        return Err(unsupported("keyless additionalExtensions"));
    }
    Ok(ImageTrust::Keyless {
        // No roots: Sigstore's trust root (TUF), if leash was given one.
        roots: k.roots.clone().unwrap_or_default(),
        identities: vec![KeylessIdentity {
            issuer: k.issuer.clone(),
            subject: k.subject.clone(),
            issuer_regexp: k.issuer_regexp.clone(),
            subject_regexp: k.subject_regexp.clone(),
            wildcards: true,
        }],
    })
}

/// A `k8s://NAMESPACE/NAME` key reference (cosign's format and message).
fn secret_key(reference: &str) -> std::result::Result<ImageTrust, String> {
    let parts: Vec<&str> = reference.trim_start_matches("k8s://").split('/').collect();
    match parts.as_slice() {
        [namespace, name] if !namespace.is_empty() && !name.is_empty() => Ok(ImageTrust::Secret {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }),
        _ => Err(
            "keys: kubernetes specification should be in the format k8s://<namespace>/<secret>"
                .to_string(),
        ),
    }
}

/// A `type: Notary` attestor entry: its certificates (`cert`, then
/// `certChain`, as Kyverno combines them) as the trust store; else why not.
fn notary_trust(entry: &model::Attestor) -> std::result::Result<ImageTrust, String> {
    let certs = entry
        .certificates
        .iter()
        .flat_map(|c| [c.cert.trim(), c.cert_chain.trim()])
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    if certs.is_empty() {
        return Err(
            "failed to parse certificates: a Notary verification trusts the entry's certificates (certificates.cert, certificates.certChain)"
                .to_string(),
        );
    }
    Ok(ImageTrust::Notary { certs })
}

fn unsupported(kind: &str) -> String {
    format!("{kind} attestors are not supported by leash")
}

/// The attestor sets `sets` (at `field.attestors`).
/// `notary`: the entries of a `type: Notary` verification, whose
/// certificates (`cert` and `certChain`) are the trust store of Notary
/// Project signatures.
fn compile_attestor_sets(
    sets: &[model::AttestorSet],
    field: &str,
    err: &ErrFn<'_>,
    notary: bool,
) -> Result<Vec<AttestorSet>> {
    let mut attestors = Vec::new();
    for (i, set) in sets.iter().enumerate() {
        let af = format!("{field}.attestors[{i}]");
        let mut entries = Vec::new();
        for (j, e) in set.entries.iter().enumerate() {
            if notary {
                entries.push(notary_trust(e));
                continue;
            }
            let keys = e.keys.as_ref();
            let public_keys = keys
                .and_then(|k| k.public_keys.as_deref())
                .filter(|k| !k.is_empty());
            let secret = keys.and_then(|k| k.secret.as_ref());
            let entry = if public_keys.is_some() || secret.is_some() {
                // Kyverno's order: publicKeys, then secret (then kms).
                let trust = match (public_keys, secret) {
                    (Some(k), _) if k.contains("-----BEGIN PUBLIC KEY-----") => {
                        Ok(ImageTrust::Keys(k.to_string()))
                    }
                    (Some(k), _) if k.starts_with("k8s://") => secret_key(k),
                    // Kyverno takes any text here (a KMS URI); what leash
                    // cannot read errs when the rule runs, it does not
                    // unserve the policy.
                    (Some(k), _) => Err(format!(
                        "keys: leash verifies PEM public keys (-----BEGIN PUBLIC KEY-----) and keys in Secrets (k8s://NAMESPACE/NAME); KMS keys are not supported yet, got {:?}",
                        k.chars().take(40).collect::<String>()
                    )),
                    (None, s) => {
                        let (ns, name) = s.map_or(("", ""), |s| (&s.namespace, &s.name));
                        secret_key(&format!("k8s://{ns}/{name}"))
                    }
                };
                // Kyverno checks a key's signatures against Rekor unless
                // told not to; leash reads no transparency log, so it
                // verifies by key only when the policy says that is enough.
                match trust {
                    Ok(_) if !keys.is_some_and(|k| model::Rekor::ignored(&k.rekor)) => {
                        Err(TLOG_REQUIRED.to_string())
                    }
                    other => other,
                }
            } else if let Some(k) = &e.keyless {
                // Kyverno's KeylessAttestor validation.
                let kf = format!("{af}.entries[{j}].keyless");
                match &k.rekor {
                    None if k.roots.as_deref().unwrap_or_default().is_empty() => {
                        return Err(err(kf, "Either Rekor URL or roots are required".into()));
                    }
                    Some(r) if r.url.as_deref().unwrap_or_default().is_empty() => {
                        return Err(err(kf, "An URL is required".into()));
                    }
                    _ => keyless_trust(k),
                }
            } else if let Some(c) = &e.certificates {
                // Kyverno's CertificateAttestor validation.
                if c.cert.is_empty() && c.cert_chain.is_empty() {
                    return Err(err(
                        format!("{af}.entries[{j}].certificates"),
                        "cert or certChain required".into(),
                    ));
                }
                if !model::Rekor::ignored(&c.rekor) {
                    Err("certificates: the signatures must be verified against a transparency log (Rekor), which leash does not read; set certificates.rekor.ignoreTlog: true to verify them by the certificate's key alone".to_string())
                } else if c.cert.is_empty() {
                    Err("certificates: leash verifies with a certificate (cert); a chain alone is not supported".to_string())
                } else {
                    Ok(ImageTrust::Certificate {
                        cert: c.cert.clone(),
                        chain: c.cert_chain.clone(),
                    })
                }
            } else if e.attestor.is_some() {
                Err(unsupported("nested attestor"))
            } else {
                Err(
                    "keys: KMS keys are not supported by leash (publicKeys or secret are)"
                        .to_string(),
                )
            };
            entries.push(entry);
        }
        let count = match set.count {
            None => None,
            Some(0) => {
                return Err(err(
                    format!("{af}.count"),
                    "must be a positive integer".into(),
                ));
            }
            Some(n) => Some(n as usize),
        };
        attestors.push(AttestorSet { count, entries });
    }
    Ok(attestors)
}

fn compile_check(
    v: &model::Block,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
    top: bool,
) -> Result<Check> {
    let collect = |cache: &mut ExprCache, doc: &Value, f: &str| {
        cache.collect(doc).map_err(|e| err(f.to_string(), e))
    };
    // Kyverno refuses a rule with more than one check (its policy
    // validation: "only one of pattern, anyPattern, deny, foreach, cel can
    // be specified"); taking the first would silently drop the others.
    let kinds: Vec<&str> = [
        ("pattern", v.pattern.is_some()),
        ("anyPattern", v.any_pattern.is_some()),
        ("deny", v.deny.is_some()),
        ("foreach", v.foreach.is_some()),
    ]
    .into_iter()
    .chain(
        top.then_some([
            ("cel", v.cel.is_some()),
            ("podSecurity", v.pod_security.is_some()),
            (
                "manifests",
                v.manifests
                    .as_ref()
                    .is_some_and(|m| !m.attestors.is_empty()),
            ),
        ])
        .into_iter()
        .flatten(),
    )
    .filter_map(|(k, present)| present.then_some(k))
    .collect();
    if kinds.len() > 1 {
        let what = if top {
            "pattern, anyPattern, deny, foreach, cel or podSecurity"
        } else {
            "pattern, anyPattern, deny or a nested foreach"
        };
        return Err(err(
            field.to_string(),
            format!(
                "has {}: only one of {what} can be specified",
                kinds.join(" and ")
            ),
        ));
    }
    if let Some(p) = &v.pattern {
        collect(cache, p, &format!("{field}.pattern"))?;
        return Ok(Check::Pattern(Pattern::new(p)));
    }
    if let Some(list) = &v.any_pattern {
        for p in list {
            collect(cache, p, &format!("{field}.anyPattern"))?;
        }
        return Ok(Check::AnyPattern(list.iter().map(Pattern::new).collect()));
    }
    if let Some(d) = &v.deny {
        let compiled = compile_conditions(
            &d.conditions,
            &format!("{field}.deny.conditions"),
            err,
            cache,
        )?;
        return Ok(Check::Deny(compiled.unwrap_or_default()));
    }
    if let Some(f) = &v.foreach {
        let mut out = Vec::new();
        for d in foreach_decls(f, &format!("{field}.foreach"), err, cache)? {
            out.push(Foreach {
                check: compile_check(d.decl, &d.field, err, cache, false)?,
                list: d.list,
                element_scope: d.decl.element_scope,
                context: d.context,
                preconditions: d.preconditions,
            });
        }
        return Ok(Check::Foreach(out));
    }
    if top {
        if let Some(c) = &v.cel {
            let mut rule = CelRule::compile(c, "ClusterPolicy", "", &format!("{field}.cel"))?;
            if let Some(m) = &v.message {
                rule = rule.with_default_message(m);
            }
            return Ok(Check::Cel(Box::new(rule)));
        }
        if let Some(p) = &v.pod_security {
            let ps =
                crate::podsecurity::PodSecurity::compile(p, &format!("{field}.podSecurity"), err)?;
            return Ok(Check::PodSecurity(Box::new(ps)));
        }
        if v.manifests.is_some() {
            return Ok(Check::Unsupported("validate.manifests"));
        }
        return Err(err(
            field.to_string(),
            "needs one of pattern, anyPattern, deny, foreach, cel or podSecurity".into(),
        ));
    }
    Err(err(
        field.to_string(),
        "needs one of pattern, anyPattern, deny or foreach".into(),
    ))
}

/// What every `foreach` declaration has, validate's and mutate's: its
/// list (a JMESPath expression, `{{ }}` optional, compiled into `cache`),
/// its context and its preconditions; with the declaration itself and its
/// field path, for what the caller reads besides.
pub(crate) struct ForeachDecl<'a> {
    pub field: String,
    pub decl: &'a model::Block,
    pub list: String,
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<Conditions>,
}

/// The declarations of the `foreach` list `f` at `field`.
pub(crate) fn foreach_decls<'a>(
    f: &'a [model::Block],
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Vec<ForeachDecl<'a>>> {
    let mut out = Vec::new();
    for (i, decl) in f.iter().enumerate() {
        let df = format!("{field}[{i}]");
        let Some(l) = &decl.list else {
            return Err(err(
                format!("{df}.list"),
                "is required (a JMESPath expression)".into(),
            ));
        };
        let list_expr = l
            .trim()
            .trim_start_matches("{{")
            .trim_end_matches("}}")
            .trim()
            .to_string();
        cache
            .add(&list_expr)
            .map_err(|e| err(format!("{df}.list"), e))?;
        out.push(ForeachDecl {
            context: compile_context(&decl.context, &format!("{df}.context"), err, cache)?,
            preconditions: compile_conditions(
                &decl.preconditions,
                &format!("{df}.preconditions"),
                err,
                cache,
            )?,
            list: list_expr,
            field: df,
            decl,
        });
    }
    Ok(out)
}

/// Compiles a conditions block at `field`, its expressions into `cache`.
pub(crate) fn compile_conditions(
    doc: &Option<ConditionsDoc>,
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Option<Conditions>> {
    let Some(doc) = doc else {
        return Ok(None);
    };
    for (list, key) in [(&doc.any, "any"), (&doc.all, "all")] {
        let at = if doc.legacy {
            field.to_string()
        } else {
            format!("{field}.{key}")
        };
        for (i, c) in list.iter().flatten().enumerate() {
            for (part, v) in [("key", &c.key), ("value", &c.value)] {
                cache
                    .collect(v)
                    .map_err(|e| err(format!("{at}[{i}].{part}"), e))?;
            }
        }
    }
    Ok(Some(doc.compile()))
}

pub(crate) fn compile_context(
    list: &[model::ContextEntry],
    field: &str,
    err: &ErrFn<'_>,
    cache: &mut ExprCache,
) -> Result<Vec<ContextEntry>> {
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let ef = format!("{field}[{i}]");
        let name = e
            .name
            .clone()
            .ok_or_else(|| err(format!("{ef}.name"), "is required".into()))?;
        let collect = |v: Option<&Value>, cache: &mut ExprCache| -> Result<()> {
            match v {
                Some(v) => cache.collect(v).map_err(|m| err(ef.clone(), m)),
                None => Ok(()),
            }
        };
        let text = |s: &str| Value::String(s.to_string());
        let jp = |p: &Option<String>, cache: &mut ExprCache| -> Result<Option<String>> {
            if let Some(p) = p {
                cache_add_plain(cache, p).map_err(|m| err(format!("{ef}.jmesPath"), m))?;
            }
            Ok(p.clone())
        };
        let source = if let Some(var) = &e.variable {
            collect(var.value.as_ref(), cache)?;
            collect(var.default.as_ref(), cache)?;
            ContextSource::Variable {
                value: var.value.clone(),
                jmes_path: jp(&var.jmes_path, cache)?,
                default: var.default.clone(),
            }
        } else if let Some(cm) = &e.config_map {
            collect(Some(&text(&cm.name)), cache)?;
            collect(Some(&text(&cm.namespace)), cache)?;
            ContextSource::ConfigMap {
                name: cm.name.clone(),
                namespace: cm.namespace.clone(),
            }
        } else if let Some(call) = &e.api_call {
            collect(call.default.as_ref(), cache)?;
            match (&call.url_path, &call.service) {
                (Some(url), _) => {
                    collect(Some(&text(url)), cache)?;
                    ContextSource::ApiCall {
                        url_path: url.clone(),
                        jmes_path: jp(&call.jmes_path, cache)?,
                        default: call.default.clone(),
                    }
                }
                (
                    None,
                    Some(model::Service {
                        url: Some(url),
                        ca_bundle,
                    }),
                ) => {
                    collect(Some(&text(url)), cache)?;
                    let method = match call.method.as_deref().unwrap_or("GET") {
                        m @ ("GET" | "POST") => m.to_string(),
                        other => {
                            return Err(err(
                                format!("{ef}.apiCall.method"),
                                format!("{other:?} is not GET or POST"),
                            ));
                        }
                    };
                    let mut data = Vec::new();
                    for d in &call.data {
                        collect(Some(&d.value), cache)?;
                        if let Some(key) = &d.key {
                            data.push((key.clone(), d.value.clone()));
                        }
                    }
                    ContextSource::ApiService {
                        url: url.clone(),
                        ca_bundle: ca_bundle.clone(),
                        method,
                        data,
                        jmes_path: jp(&call.jmes_path, cache)?,
                        default: call.default.clone(),
                    }
                }
                (None, _) => {
                    return Err(err(
                        format!("{ef}.apiCall"),
                        "needs urlPath or service.url".into(),
                    ));
                }
            }
        } else if let Some(g) = &e.global_reference {
            // `ENTRY.PROJECTION` names a projection of the entry, as Kyverno
            // splits the name on its dots.
            collect(Some(&text(&g.name)), cache)?;
            let mut parts = g.name.split('.');
            ContextSource::GlobalReference {
                name: parts.next().unwrap_or("").to_string(),
                projection: parts.next().map(String::from),
                jmes_path: jp(&g.jmes_path, cache)?,
            }
        } else if let Some(r) = &e.image_registry {
            if r.reference.is_empty() {
                return Err(err(
                    format!("{ef}.imageRegistry.reference"),
                    "an image reference is required".into(),
                ));
            }
            collect(Some(&text(&r.reference)), cache)?;
            ContextSource::ImageRegistry {
                reference: r.reference.clone(),
                jmes_path: jp(&r.jmes_path, cache)?,
            }
        } else {
            return Err(err(
                ef,
                "needs one of variable, configMap, apiCall, globalReference or imageRegistry"
                    .into(),
            ));
        };
        out.push(ContextEntry { name, source });
    }
    Ok(out)
}

fn cache_add_plain(cache: &mut ExprCache, expr: &str) -> std::result::Result<(), String> {
    if expr.contains("{{") {
        // Variables inside a jmesPath are substituted first.
        return cache.collect(&Value::String(expr.to_string()));
    }
    cache.add(expr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn with_failure_policy(v: Value) -> Result<Policy> {
        Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
            "spec": {"failurePolicy": v, "rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": {"pattern": {"metadata": {"name": "?*"}}}}]}
        }))
    }

    fn with_api_call(call: Value) -> Result<Policy> {
        Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "context": [{"name": "c", "apiCall": call}],
                "validate": {"pattern": {"metadata": {"name": "?*"}}}}]}
        }))
    }

    #[test]
    fn api_call_services_compile_and_bad_ones_name_the_field() {
        let p = with_api_call(json!({"method": "POST",
            "service": {"url": "https://svc.ns:443/check", "caBundle": "PEM"},
            "data": [{"key": "name", "value": "{{ request.object.metadata.name }}"}]}))
        .unwrap();
        let ContextSource::ApiService {
            url,
            method,
            data,
            ca_bundle,
            ..
        } = &p.rules[0].context[0].source
        else {
            panic!("not a service call")
        };
        assert_eq!(
            (url.as_str(), method.as_str()),
            ("https://svc.ns:443/check", "POST")
        );
        assert_eq!(ca_bundle.as_deref(), Some("PEM"));
        assert_eq!(data[0].0, "name");
        let err = with_api_call(json!({"method": "PUT", "service": {"url": "http://x"}}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("apiCall.method") && err.contains("PUT"),
            "{err}"
        );
        let err = with_api_call(json!({"service": {}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs urlPath or service.url"), "{err}");
    }

    fn with_validate(validate: Value) -> Result<Policy> {
        Policy::compile(&json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "validate": validate}]}
        }))
    }

    /// As Kyverno's policy validation: a validate rule (or a foreach
    /// element) has exactly one check; two are refused naming both, never
    /// evaluated as the first alone.
    #[test]
    fn a_rule_with_two_checks_is_refused_naming_them() {
        let pattern = json!({"metadata": {"name": "?*"}});
        let deny =
            json!({"conditions": {"any": [{"key": "a", "operator": "Equals", "value": "a"}]}});
        for (validate, named, at) in [
            (
                json!({"pattern": pattern, "deny": deny}),
                "pattern and deny",
                "rules[0].validate",
            ),
            (
                json!({"anyPattern": [pattern], "cel": {"expressions": [{"expression": "true"}]}}),
                "anyPattern and cel",
                "rules[0].validate",
            ),
            (
                json!({"foreach": [{"list": "request.object.spec.containers",
                                    "pattern": pattern, "deny": deny}]}),
                "pattern and deny",
                "foreach[0]",
            ),
        ] {
            let err = with_validate(validate).unwrap_err().to_string();
            assert!(
                err.contains(named) && err.contains("only one of") && err.contains(at),
                "{err}"
            );
        }
        // One check, with a message beside it, compiles.
        with_validate(json!({"message": "m", "pattern": pattern})).unwrap();
        with_validate(json!({"message": "m", "deny": deny})).unwrap();
    }

    /// The typed model refuses a wrong type or a value outside its enum
    /// naming the field's whole path, even where no schema check ran.
    #[test]
    fn the_model_names_the_path_of_a_mistyped_field() {
        let pattern = json!({"metadata": {"name": "?*"}});
        for (validate, at, says) in [
            (
                json!({"failureAction": "Deni", "pattern": pattern}),
                "spec.rules[0].validate.failureAction",
                "unknown variant `Deni`",
            ),
            (
                json!({"allowExistingViolations": "yes", "pattern": pattern}),
                "spec.rules[0].validate.allowExistingViolations",
                "expected a boolean",
            ),
            (
                json!({"foreach": [{"list": "a", "elementScope": 1, "pattern": pattern}]}),
                "spec.rules[0].validate.foreach[0].elementScope",
                "expected a boolean",
            ),
            (
                json!({"anyPattern": {"a": 1}}),
                "spec.rules[0].validate.anyPattern",
                "expected a sequence",
            ),
            (
                json!({"deny": {"conditions": {"any": [{"key": "a", "operator": "Equalz", "value": "a"}]}}}),
                "spec.rules[0].validate.deny.conditions.any[0].operator",
                r#"unknown operator "Equalz""#,
            ),
            (
                json!({"deny": {"conditions": [{"key": "{{ a.( }}", "operator": "Equals", "value": 1}]}}),
                "spec.rules[0].validate.deny.conditions[0].key",
                "invalid JMESPath",
            ),
            (
                json!({"deny": {"conditions": "a == b"}}),
                "spec.rules[0].validate.deny.conditions",
                "expected any/all conditions or a list of conditions",
            ),
        ] {
            let err = with_validate(validate).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{at}: ")) && err.contains(says),
                "{err}"
            );
        }
        let err = with_api_call(json!({"urlPath": "/api/v1/pods", "data": [{"key": 5}]}))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("spec.rules[0].context[0].apiCall.data[0].key: invalid type"),
            "{err}"
        );
        // Kyverno's older lower-case spelling is still an action.
        let p = with_validate(json!({"failureAction": "enforce", "pattern": pattern})).unwrap();
        assert_eq!(p.rule_failure_action("r"), FailureAction::Enforce);
    }

    #[test]
    fn failure_policy_is_fail_ignore_or_an_error_naming_the_field() {
        for (v, ignores) in [
            (Value::Null, false),
            (json!("Fail"), false),
            (json!("Ignore"), true),
        ] {
            let p = with_failure_policy(v.clone()).unwrap();
            assert_eq!(p.ignores_webhook_failures(), ignores, "{v}");
        }
        let err = with_failure_policy(json!("Sometimes"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("spec.failurePolicy"), "{err}");
    }
}
