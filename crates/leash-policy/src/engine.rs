//! The engine: a set of compiled policies and exceptions, evaluated together
//! against one resource at a time, from any number of threads.

use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::eval::{Bindings, Prepared};
use crate::exception::Exception;
use crate::gpol::{GeneratingPolicy, is_generating_policy};
use crate::mpol::admission::{MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding};
use crate::mpol::{MutatingPolicy, is_mutating_policy};
use crate::mutate::{Mutation, MutationStep};
use crate::policy::Policy;
use crate::request::{ClusterData, EvalRequest};
use crate::result::{RuleResult, Source, Status};
use crate::vpol::{ValidatingPolicy, is_validating_policy};

/// A parsed policy-like document.
#[derive(Debug)]
pub enum Document {
    /// A `ClusterPolicy` / `Policy`.
    Policy(Policy),
    /// A `ValidatingPolicy` / `NamespacedValidatingPolicy`.
    ValidatingPolicy(ValidatingPolicy),
    /// A `MutatingPolicy` / `NamespacedMutatingPolicy`.
    MutatingPolicy(MutatingPolicy),
    /// A `GeneratingPolicy`.
    GeneratingPolicy(GeneratingPolicy),
    /// A `PolicyException`.
    Exception(Exception),
}

impl Document {
    /// Compiles one document. `Ok(None)` for documents that are not
    /// policies (other kinds are not an error: directories mix them).
    pub fn compile(doc: &Value) -> Result<Option<Document>> {
        Error::check_schema(doc)?;
        let kind = doc["kind"].as_str().unwrap_or("");
        let group = doc["apiVersion"]
            .as_str()
            .unwrap_or("")
            .split('/')
            .next()
            .unwrap_or("");
        match (group, kind) {
            ("kyverno.io", "ClusterPolicy" | "Policy") => {
                Policy::compile(doc).map(|p| Some(Document::Policy(p)))
            }
            ("kyverno.io" | "policies.kyverno.io", "PolicyException") => {
                Exception::compile(doc).map(|e| Some(Document::Exception(e)))
            }
            _ if is_validating_policy(doc) => {
                ValidatingPolicy::compile(doc).map(|p| Some(Document::ValidatingPolicy(p)))
            }
            _ if is_generating_policy(doc) => {
                GeneratingPolicy::compile(doc).map(|p| Some(Document::GeneratingPolicy(p)))
            }
            _ if is_mutating_policy(doc) => {
                MutatingPolicy::compile(doc).map(|p| Some(Document::MutatingPolicy(p)))
            }
            _ => Ok(None),
        }
    }

    /// Whether a document looks like a policy kind this engine does not evaluate
    /// (MutatingPolicy, GeneratingPolicy, ...): worth a note, not an error.
    pub fn unsupported_kind(doc: &Value) -> Option<String> {
        let kind = doc["kind"].as_str()?;
        let group = doc["apiVersion"].as_str()?.split('/').next()?;
        let policy_group = group == "policies.kyverno.io" || group == "kyverno.io";
        (policy_group && kind.ends_with("Policy")).then(|| kind.to_string())
    }
}

/// A compiled document behind an `Arc`, to put one policy into several
/// engines (the whole set and the background subset) without a copy.
#[derive(Debug, Clone)]
pub enum Shared {
    /// A `ClusterPolicy` / `Policy`.
    Policy(Arc<Policy>),
    /// A `ValidatingPolicy` / `NamespacedValidatingPolicy`.
    ValidatingPolicy(Arc<ValidatingPolicy>),
    /// A `MutatingPolicy` / `NamespacedMutatingPolicy`.
    MutatingPolicy(Arc<MutatingPolicy>),
    /// A `GeneratingPolicy`.
    GeneratingPolicy(Arc<GeneratingPolicy>),
    /// A `PolicyException`.
    Exception(Arc<Exception>),
}

/// Compiled policies, shared read-only by every evaluating thread.
#[derive(Debug, Default, Clone)]
pub struct Engine {
    policies: Vec<Arc<Policy>>,
    validating: Vec<Arc<ValidatingPolicy>>,
    mutating: Vec<Arc<MutatingPolicy>>,
    /// Kubernetes MutatingAdmissionPolicies and their bindings.
    admission_mutating: Vec<Arc<MutatingAdmissionPolicy>>,
    admission_mutating_bindings: Vec<Arc<MutatingAdmissionPolicyBinding>>,
    generating: Vec<Arc<GeneratingPolicy>>,
    exceptions: Vec<Arc<Exception>>,
}

impl Engine {
    /// An engine with no policies.
    pub fn new() -> Engine {
        Engine::default()
    }

    /// What evaluating a resource against these policies reads of it
    /// (see [`crate::ReadSet`]): a resource built with just those parts
    /// ([`crate::ReadSet::parse`]) gets the same results as the whole one.
    pub fn reads(&self) -> crate::ReadSet {
        if !self.mutating.is_empty()
            || !self.admission_mutating.is_empty()
            || !self.generating.is_empty()
            || !self.exceptions.is_empty()
        {
            return crate::ReadSet::all();
        }
        let mut reads = crate::ReadSet::naming();
        for policy in &self.policies {
            reads.merge(&policy.reads);
        }
        for policy in &self.validating {
            reads.merge(&policy.reads());
        }
        reads
    }

    /// Adds a compiled document.
    pub fn add(&mut self, doc: Document) {
        match doc {
            Document::Policy(p) => self.policies.push(Arc::new(p)),
            Document::ValidatingPolicy(p) => self.validating.push(Arc::new(p)),
            Document::MutatingPolicy(p) => self.mutating.push(Arc::new(p)),
            Document::GeneratingPolicy(p) => self.generating.push(Arc::new(p)),
            Document::Exception(e) => self.exceptions.push(Arc::new(e)),
        }
    }

    /// Adds a shared compiled document.
    pub fn add_shared(&mut self, doc: Shared) {
        match doc {
            Shared::Policy(p) => self.policies.push(p),
            Shared::ValidatingPolicy(p) => self.validating.push(p),
            Shared::MutatingPolicy(p) => self.mutating.push(p),
            Shared::GeneratingPolicy(p) => self.generating.push(p),
            Shared::Exception(e) => self.exceptions.push(e),
        }
    }

    /// Compiles and adds a document; `Ok(false)` if it is not a policy.
    pub fn add_json(&mut self, doc: &Value) -> Result<bool, Error> {
        match Document::compile(doc)? {
            Some(d) => {
                self.add(d);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Adds a Kubernetes MutatingAdmissionPolicy (Kubernetes' kinds are
    /// not [`Document`]s: they are compiled by their own modules).
    pub fn add_mutating_admission_policy(&mut self, policy: Arc<MutatingAdmissionPolicy>) {
        self.admission_mutating.push(policy);
    }

    /// Adds a MutatingAdmissionPolicyBinding.
    pub fn add_mutating_admission_binding(&mut self, binding: Arc<MutatingAdmissionPolicyBinding>) {
        self.admission_mutating_bindings.push(binding);
    }

    /// The MutatingAdmissionPolicies.
    pub fn mutating_admission_policies(&self) -> &[Arc<MutatingAdmissionPolicy>] {
        &self.admission_mutating
    }

    /// The Secrets the policies name for registry credentials (a
    /// ClusterPolicy rule's `imageRegistryCredentials.secrets`, an
    /// ImageValidatingPolicy's `credentials.secrets`), each once, sorted.
    pub fn registry_secrets(&self) -> Vec<String> {
        let mut names: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for p in &self.policies {
            names.extend(p.registry_secrets.iter().cloned());
        }
        for v in &self.validating {
            names.extend(v.registry_secrets().iter().cloned());
        }
        names.into_iter().collect()
    }

    /// The Kyverno policies.
    pub fn policies(&self) -> &[Arc<Policy>] {
        &self.policies
    }

    /// The ValidatingPolicies.
    pub fn validating_policies(&self) -> &[Arc<ValidatingPolicy>] {
        &self.validating
    }

    /// The MutatingPolicies.
    pub fn mutating_policies(&self) -> &[Arc<MutatingPolicy>] {
        &self.mutating
    }

    /// The GeneratingPolicies.
    pub fn generating_policies(&self) -> &[Arc<GeneratingPolicy>] {
        &self.generating
    }

    /// What every GeneratingPolicy that matches would create for a trigger.
    pub fn generate_cel(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
    ) -> Vec<(Arc<GeneratingPolicy>, crate::Generated)> {
        self.generating
            .iter()
            .filter_map(|p| {
                let mut g = p.generate(prepared.request(), data)?;
                // A CEL PolicyException naming the policy exempts the
                // trigger, whatever the policy's match conditions say
                // (Kyverno's gpol engine checks exceptions first).
                if let Some(keys) =
                    self.cel_exemption(p.kind(), p.name(), prepared.cel_objects(), data)
                {
                    g.result.status = Status::Skip;
                    g.result.rule = "exception".to_string();
                    g.result.message = format!("rule is skipped due to policy exception: {keys}");
                    g.downstreams.clear();
                }
                Some((p.clone(), g))
            })
            .collect()
    }

    /// The exceptions.
    pub fn exceptions(&self) -> &[Arc<Exception>] {
        &self.exceptions
    }

    /// Whether the engine holds no policy.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
            && self.validating.is_empty()
            && self.mutating.is_empty()
            && self.admission_mutating.is_empty()
            && self.generating.is_empty()
    }

    /// Runs every mutate rule on the request's object, in order: the
    /// policies in the order they were added, the rules of each in their
    /// order, each rule on the output of the previous one (Kyverno's
    /// order). Pure: the request's object is not changed, the mutated one
    /// is a new value.
    ///
    /// The pipeline is a list of mutating steps; classic policies are the
    /// first kind of step, MutatingAdmissionPolicies and then
    /// MutatingPolicies follow (one step each, with one result for the
    /// policy).
    pub fn mutate(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Mutation {
        self.mutate_with(req, data, bindings, false)
    }

    /// [`Engine::mutate`] as the mutating webhook runs it: `mutate.targets`
    /// rules are left out (their targets are patched in the background,
    /// from an UpdateRequest), and a policy with an errored or failed rule
    /// leaves the object as it found it, so that what is answered is the
    /// work of the policies that succeeded. (Kyverno drops such a policy's
    /// patches but hands its partly patched object to the next policy; here
    /// the answer's patch and what later policies see agree.)
    pub fn mutate_admission(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Mutation {
        self.mutate_with(req, data, bindings, true)
    }

    fn mutate_with(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
        bindings: &Bindings,
        admission: bool,
    ) -> Mutation {
        let failed = |results: &[RuleResult]| {
            results
                .iter()
                .any(|r| matches!(r.status, Status::Error | Status::Fail))
        };
        let mut object = req.object.clone();
        let mut steps = Vec::new();
        // The request around the current object, its JMESPath variables
        // and CEL values built once per distinct object and shared by every
        // policy (classic and CEL) that runs on it, not once per policy.
        let around = |object: &Arc<Value>| {
            Prepared::new(EvalRequest {
                object: object.clone(),
                ..req.clone()
            })
        };
        let mut prepared = around(&object);
        for policy in self.policies.iter().filter(|p| p.has_mutate_rules()) {
            let (next, results, targets) =
                policy.mutate_prepared(prepared, req, data, bindings, &self.exceptions, !admission);
            prepared = next;
            if results.is_empty() {
                continue;
            }
            if !(admission && failed(&results)) {
                object = prepared.request().object.clone();
            } else if !Arc::ptr_eq(&prepared.request().object, &object) {
                prepared = around(&object);
            }
            steps.push(MutationStep {
                policy: policy.key().clone(),
                source: Source::Kyverno,
                results,
                object: object.clone(),
                targets,
            });
        }
        // `verifyImages` rules' `mutateDigest`: each tag a rule checks is
        // replaced by its digest (verified first when the rule has
        // attestors), as Kyverno's mutating webhook does.
        for policy in self.policies.iter().filter(|p| p.has_digest_mutation()) {
            let Some((next, results)) = policy.mutate_digests(&prepared, data, bindings) else {
                continue;
            };
            object = Arc::new(next);
            prepared = around(&object);
            steps.push(MutationStep {
                policy: policy.key().clone(),
                source: Source::Kyverno,
                results,
                object: object.clone(),
                targets: Vec::new(),
            });
        }
        // ImageValidatingPolicies' `mutateDigest`, unless a CEL
        // PolicyException exempts the resource.
        // Only at admission: Kyverno's CLI does not pin them.
        for ivpol in self
            .validating
            .iter()
            .filter(|p| admission && p.mutates_digests())
        {
            let current = EvalRequest {
                object: object.clone(),
                ..req.clone()
            };
            let Some((next, result)) = ivpol.mutate_digests(&current, data) else {
                continue;
            };
            if !self.exceptions.is_empty()
                && self
                    .cel_exemption(ivpol.kind(), ivpol.name(), prepared.cel_objects(), data)
                    .is_some()
            {
                continue;
            }
            object = Arc::new(next);
            prepared = around(&object);
            steps.push(MutationStep {
                policy: ivpol.name().into(),
                source: Source::ImageValidatingPolicy,
                results: vec![result],
                object: object.clone(),
                targets: Vec::new(),
            });
        }
        // Then the MutatingAdmissionPolicies, each through the bindings
        // that name it, and then the MutatingPolicies (Kyverno's CLI
        // order), in the order they were added, each on the output of the
        // one before.
        for map in &self.admission_mutating {
            let bindings: Vec<&MutatingAdmissionPolicyBinding> = self
                .admission_mutating_bindings
                .iter()
                .filter(|b| b.policy_name() == map.name())
                .map(|b| &**b)
                .collect();
            let current = EvalRequest {
                object: object.clone(),
                ..req.clone()
            };
            let Some((result, next)) = map.mutate(&current, &bindings, data) else {
                continue;
            };
            if result.status == Status::Pass && next != *object {
                object = Arc::new(next);
            }
            steps.push(MutationStep {
                policy: map.name().into(),
                source: Source::MutatingAdmissionPolicy,
                results: vec![result],
                object: object.clone(),
                targets: Vec::new(),
            });
        }
        // One conversion of the object to CEL values per distinct object,
        // not per policy.
        for mpol in &self.mutating {
            if !Arc::ptr_eq(&prepared.request().object, &object) {
                prepared = around(&object);
            }
            let Some((mut result, mut next)) = mpol.mutate_prepared(&prepared, data) else {
                continue;
            };
            // A CEL PolicyException naming the policy exempts the resource
            // it matches: Skip, the object left as it was (Kyverno's mpol
            // engine checks exceptions before the match conditions).
            if !self.exceptions.is_empty() {
                let objects = prepared.cel_objects();
                if let Some(keys) = self.cel_exemption(mpol.kind(), mpol.name(), objects, data) {
                    result.status = Status::Skip;
                    result.rule = "exception".to_string();
                    result.message = format!("rule is skipped due to policy exception: {keys}");
                    next = None;
                }
            }
            if result.status == Status::Pass
                && let Some(next) = next
                && next != *object
            {
                object = Arc::new(next);
            }
            steps.push(MutationStep {
                policy: mpol.name().into(),
                source: Source::MutatingPolicy,
                results: vec![result],
                object: object.clone(),
                // mutateExisting (targetMatchConstraints) is not done.
                targets: Vec::new(),
            });
        }
        Mutation { object, steps }
    }

    /// What [`Engine::mutate_admission`]'s answer depends on, so that an
    /// admission webhook may remember it ([`crate::MutationKey`]): the least
    /// of its mutating policies' keys; `Unkeyed` with PolicyExceptions or
    /// MutatingAdmissionPolicies (matched by more than this engine sees)
    /// and with digest mutation (registries).
    pub fn mutation_key(&self) -> crate::MutationKey {
        self.mutation_key_where(|_| true)
    }

    /// [`Engine::mutation_key`] for a request for `kind`: of the policies
    /// that may mutate that kind (the kinds their rules name; any kind for
    /// a wildcard or a resource leash does not know).
    pub fn mutation_key_for(&self, kind: &str) -> crate::MutationKey {
        self.mutation_key_where(|kinds| {
            kinds.iter().any(|k| match k {
                None => true,
                Some(k) => k == kind,
            })
        })
    }

    /// The least key of the mutating policies whose kinds (`None`: any)
    /// `selects` accepts.
    fn mutation_key_where(
        &self,
        selects: impl Fn(&[Option<String>]) -> bool,
    ) -> crate::MutationKey {
        use crate::MutationKey;
        if !self.exceptions.is_empty()
            || !self.admission_mutating.is_empty()
            || self.policies.iter().any(|p| p.has_digest_mutation())
            || self.validating.iter().any(|v| v.mutates_digests())
        {
            return MutationKey::Unkeyed;
        }
        let classic = self
            .policies
            .iter()
            .filter(|p| p.has_mutate_rules())
            .filter(|p| {
                let kinds: Vec<Option<String>> = p
                    .mutate_webhook_operations()
                    .into_iter()
                    .map(|(spec, _)| {
                        (!spec.contains(['*', '?']))
                            .then(|| {
                                spec.split('/')
                                    .find(|s| s.starts_with(|c: char| c.is_ascii_uppercase()))
                                    .map(str::to_string)
                            })
                            .flatten()
                    })
                    .collect();
                selects(&kinds)
            });
        let cel = self.mutating.iter().filter(|m| {
            let kinds: Vec<Option<String>> = m
                .matched_resources()
                .into_iter()
                .map(|(group, _, plural)| {
                    crate::kinds::by_resource(&group, &plural).map(|k| k.kind.to_string())
                })
                .collect();
            selects(&kinds)
        });
        classic
            .map(|p| p.mutation_key)
            .chain(cel.map(|m| m.mutation_key()))
            .min()
            .unwrap_or(MutationKey::RequestButName)
    }

    /// The policies with `mutate.targets` rules that the request triggers,
    /// each with the names of those rules ([`Policy::mutate_existing_rules_for`]).
    pub fn mutate_existing_triggers(&self, req: &EvalRequest) -> Vec<(Arc<Policy>, Vec<String>)> {
        self.policies
            .iter()
            .filter(|p| p.has_mutate_existing_rules())
            .filter_map(|p| {
                let rules = p.mutate_existing_rules_for(req, &Bindings::default());
                (!rules.is_empty()).then(|| (p.clone(), rules))
            })
            .collect()
    }

    /// The MutatingPolicies with `evaluation.mutateExisting` that the
    /// admitted `req` triggers ([`MutatingPolicy::triggers`]).
    pub fn mutating_policy_triggers(
        &self,
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Vec<Arc<MutatingPolicy>> {
        self.mutating
            .iter()
            .filter(|m| m.triggers(req, data))
            .cloned()
            .collect()
    }

    /// Mutates the existing targets of the MutatingPolicy `policy_key`
    /// (`namespace/name` or `name`), as Kyverno's background processor
    /// does for an UpdateRequest of type `cel-mutate`: every object of its
    /// target resources (listed from `data`) that its target constraints
    /// select, evaluated with the trigger's operation and user (`trigger`;
    /// without one, as an UPDATE). One result per target it selects;
    /// `None` when the policy is not in the engine.
    pub fn mutate_existing_cel(
        &self,
        policy_key: &str,
        trigger: Option<&EvalRequest>,
        data: &dyn ClusterData,
    ) -> Option<(Vec<RuleResult>, Vec<crate::PatchedTarget>)> {
        let mpol = self.mutating.iter().find(|m| match m.namespace() {
            Some(ns) => policy_key.split_once('/') == Some((ns, m.name())),
            None => policy_key == m.name(),
        })?;
        let mut results = Vec::new();
        let mut targets = Vec::new();
        let error = |message: String| RuleResult {
            policy: mpol.name().into(),
            rule: mpol.name().to_string(),
            status: Status::Error,
            message,
            source: Source::MutatingPolicy,
        };
        let namespaces = data.list("v1", "namespaces", "");
        for (group, version, plural) in mpol.target_resources() {
            let known = crate::kinds::by_resource(&group, &plural);
            let version = match (version.as_str(), known) {
                ("*", Some(k)) => k.version.to_string(),
                ("*", None) => {
                    results.push(error(format!(
                        "failed to list targets: the version of {plural}.{group} is not known"
                    )));
                    continue;
                }
                (v, _) => v.to_string(),
            };
            if plural.contains('*') || group.contains('*') {
                results.push(error(format!(
                    "failed to list targets: wildcard resource {group}/{version}/{plural}"
                )));
                continue;
            }
            let api_version = if group.is_empty() {
                version
            } else {
                format!("{group}/{version}")
            };
            for object in data.list(&api_version, &plural, mpol.namespace().unwrap_or("")) {
                let ns_name = object["metadata"]["namespace"].as_str().unwrap_or("");
                let namespace = namespaces
                    .iter()
                    .find(|n| n["metadata"]["name"].as_str() == Some(ns_name));
                let req = EvalRequest {
                    object: object.clone(),
                    old_object: None,
                    operation: trigger.map_or(crate::Operation::Update, |t| t.operation),
                    user_info: trigger.map(|t| t.user_info.clone()).unwrap_or_default(),
                    namespace_labels: namespace.map(|n| crate::labels_of(n)),
                    namespace_object: namespace.cloned(),
                    request_resource: None,
                };
                let Some((result, patched)) = mpol.mutate_target(&req, data) else {
                    continue;
                };
                if let Some(patched) = patched.filter(|p| *p != *object) {
                    targets.push(crate::PatchedTarget {
                        rule: result.rule.clone(),
                        status: result.status,
                        message: result.message.clone(),
                        object: Arc::new(patched),
                    });
                }
                results.push(result);
            }
        }
        Some((results, targets))
    }

    /// Runs the `mutate.targets` rules `rules` of the policy `policy_key`
    /// (`namespace/name` or `name`) for the trigger in `req`, with the
    /// engine's exceptions ([`Policy::mutate_existing`]); `None` when the
    /// policy is not in the engine.
    pub fn mutate_existing(
        &self,
        policy_key: &str,
        rules: &[String],
        req: &EvalRequest,
        data: &dyn ClusterData,
    ) -> Option<(Vec<RuleResult>, Vec<crate::PatchedTarget>)> {
        let policy = self.policies.iter().find(|p| &**p.key() == policy_key)?;
        Some(policy.mutate_existing(rules, req, data, &self.exceptions))
    }

    /// The results of the JSON-mode ValidatingPolicies on a JSON payload
    /// (`prepared`'s object), one per policy, a CEL PolicyException
    /// naming a policy exempting the payload as it exempts a resource.
    pub fn evaluate_json(&self, prepared: &Prepared, data: &dyn ClusterData) -> Vec<RuleResult> {
        let mut out = Vec::new();
        let json = crate::vpol::EvaluationMode::Json;
        for vpol in self
            .validating
            .iter()
            .filter(|p| p.evaluation_mode() == json)
        {
            let mut result = vpol.evaluate_json(prepared.request(), data);
            if result.status != Status::Skip
                && let Some(keys) =
                    self.cel_exemption(vpol.kind(), vpol.name(), prepared.cel_objects(), data)
            {
                result.status = Status::Skip;
                result.rule = "exception".to_string();
                result.message = format!("rule is skipped due to policy exception: {keys}");
            }
            out.push(result);
        }
        out
    }

    /// The results of the ValidatingPolicies of `mode` (`HTTP` or `Envoy`)
    /// on an authorization request (`prepared`'s object), one per policy.
    pub fn evaluate_authz(
        &self,
        mode: crate::vpol::EvaluationMode,
        prepared: &Prepared,
        data: &dyn ClusterData,
    ) -> Vec<RuleResult> {
        self.validating
            .iter()
            .filter(|p| p.evaluation_mode() == mode)
            .map(|p| p.evaluate_authz(prepared.request(), data))
            .collect()
    }

    /// The keys (`namespace/name`) of the CEL PolicyExceptions that exempt
    /// the request (as `objects`) from the CEL policy `kind`/`name`, joined
    /// by ", "; None when none does.
    fn cel_exemption(
        &self,
        kind: &str,
        name: &str,
        objects: &crate::cel::CelObjects,
        data: &dyn ClusterData,
    ) -> Option<String> {
        let keys: Vec<String> = self
            .exceptions
            .iter()
            .filter(|e| e.exempts(kind, name, objects, data))
            .map(|e| e.key())
            .collect();
        (!keys.is_empty()).then(|| keys.join(", "))
    }

    /// One evaluation reading cluster data from `data`, with no bindings
    /// and no memo until set: the entry point of validation
    /// ([`Evaluation::validate`]) and of mutation then validation
    /// ([`Evaluation::apply`]).
    pub fn evaluation<'a>(&'a self, data: &'a dyn ClusterData) -> Evaluation<'a> {
        Evaluation {
            engine: self,
            data,
            bindings: None,
            memo: None,
        }
    }

    /// A memo for evaluating many resources with these policies and
    /// `bindings` ([`crate::memo`]); `None` when no policy's results can be
    /// remembered (or PolicyExceptions, or bindings for particular
    /// resources, make them depend on more than what the policy reads).
    pub fn memo(&self, bindings: &Bindings) -> Option<crate::Memo> {
        if !self.exceptions.is_empty()
            || bindings.policies.values().any(|p| !p.resources.is_empty())
        {
            return None;
        }
        let keys: Vec<_> = (self.policies.iter().map(|p| p.memo_key.clone()))
            .chain(self.validating.iter().map(|p| p.memo_key()))
            .collect();
        keys.iter()
            .any(Option::is_some)
            .then(|| crate::Memo::new(keys))
    }

    /// The name of policy `i` as a [`crate::Memo`] counts them: the classic
    /// policies (`namespace/name` when namespaced), then the
    /// ValidatingPolicies.
    pub fn memo_policy_name(&self, i: usize) -> Option<String> {
        match self.policies.get(i) {
            Some(p) => Some(p.key().to_string()),
            None => self
                .validating
                .get(i - self.policies.len())
                .map(|p| p.name().to_string()),
        }
    }

    /// Applies the PolicyExceptions that cover a rule's result: the rule is
    /// skipped, unless it is a podSecurity rule and every exception names
    /// the Pod Security Standards controls it exempts (`podSecurity`); then,
    /// as Kyverno, a failing rule is evaluated again with their exclusions
    /// and skipped only when no check fails any more.
    fn except(
        &self,
        policy: &Policy,
        result: &mut RuleResult,
        matched: &[&Arc<Exception>],
        prepared: &Prepared,
    ) {
        let pss = policy.pod_security(&result.rule);
        let whole = matched.iter().find(|e| e.pod_security().is_empty());
        let (Some(pss), None) = (pss, whole) else {
            let e = whole.unwrap_or(&matched[0]);
            result.status = Status::Skip;
            result.message = format!("rule skipped due to policy exception {}", e.key());
            return;
        };
        if result.status != Status::Fail {
            return;
        }
        let excludes: Vec<_> = matched
            .iter()
            .flat_map(|e| e.pod_security().iter().cloned())
            .collect();
        match pss.run(&result.rule, &prepared.request().object, &excludes) {
            crate::podsecurity::Outcome::Exempt => {
                let keys: Vec<String> = matched.iter().map(|e| e.key()).collect();
                result.status = Status::Skip;
                result.message =
                    format!("rule skipped due to policy exceptions {}", keys.join(", "));
            }
            crate::podsecurity::Outcome::Fail(m) => result.message = m,
            crate::podsecurity::Outcome::Pass(m) => {
                result.status = Status::Pass;
                result.message = m;
            }
            crate::podsecurity::Outcome::Error(m) => {
                result.status = Status::Error;
                result.message = m;
            }
        }
    }
}

impl Engine {
    /// Evaluates every generate rule against one trigger: what each matching
    /// rule wants to exist. A rule a policy exception covers is skipped.
    pub fn generate(
        &self,
        prepared: &Prepared,
        data: &dyn ClusterData,
        bindings: &Bindings,
    ) -> Vec<(Arc<Policy>, crate::Generated)> {
        let mut out = Vec::new();
        for policy in self.policies.iter().filter(|p| p.has_generate()) {
            for mut generated in policy.generate(prepared, data, bindings) {
                let rule = &generated.result.rule;
                if let Some(e) = self
                    .exceptions
                    .iter()
                    .find(|e| e.applies(policy.key(), rule, rule, prepared, None))
                {
                    generated.result.status = Status::Skip;
                    generated.result.message =
                        format!("rule skipped due to policy exception {}", e.key());
                    generated.downstreams.clear();
                }
                out.push((policy.clone(), generated));
            }
        }
        out
    }
}

/// One evaluation of a request against an [`Engine`]'s policies
/// ([`Engine::evaluation`]): its cluster data, and what varies, set by the
/// builder methods; then [`Self::validate`] or [`Self::apply`].
pub struct Evaluation<'a> {
    engine: &'a Engine,
    data: &'a dyn ClusterData,
    bindings: Option<&'a Bindings>,
    memo: Option<&'a mut crate::Memo>,
}

impl std::fmt::Debug for Evaluation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluation")
            .field("memo", &self.memo.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> Evaluation<'a> {
    /// The bindings of the run (`leash test`'s values, serve's
    /// ValidatingPolicy bindings); none by default.
    pub fn bindings(mut self, bindings: &'a Bindings) -> Self {
        self.bindings = Some(bindings);
        self
    }

    /// Answers from `memo` (made by [`Engine::memo`] with the same
    /// bindings) where it can, and remembers what it evaluates: the
    /// validate results it answers are shared with it.
    pub fn memo(mut self, memo: Option<&'a mut crate::Memo>) -> Self {
        self.memo = memo;
        self
    }

    /// Evaluates every validating policy against one request: one result
    /// per matching rule (and per matching ValidatingPolicy), in the
    /// order of the engine's policies.
    pub fn validate(self, prepared: &Prepared) -> Results {
        let (engine, data) = (self.engine, self.data);
        let empty = Bindings::default();
        let bindings = self.bindings.unwrap_or(&empty);
        let mut memo = self.memo;
        let mut out = Results::default();
        let req = prepared.request();
        let mut visit = memo.as_deref_mut().map(|m| m.begin(req));
        // What the memo holds for policy `i`.
        let answer = |memo: &mut Option<&mut crate::Memo>, visit: &mut Option<_>, i| {
            memo.as_deref_mut()
                .zip(visit.as_mut())
                .and_then(|(m, v)| m.answer(v, i, req))
        };
        // The resource's identity, read once for every policy and rule.
        let target = req.target();
        for (i, policy) in engine.policies.iter().enumerate() {
            if let Some(results) = answer(&mut memo, &mut visit, i) {
                out.parts.push(Part::Shared(results));
                continue;
            }
            let mut now = Vec::new();
            for mut result in policy.evaluate_for(prepared, &target, data, bindings) {
                let base = base_rule(&result.rule);
                let matched: Vec<&Arc<Exception>> = engine
                    .exceptions
                    .iter()
                    .filter(|e| e.applies(policy.key(), &result.rule, base, prepared, None))
                    .collect();
                if !matched.is_empty() {
                    engine.except(policy, &mut result, &matched, prepared);
                }
                now.push(result);
            }
            out.add(now, i, req, memo.as_deref_mut().zip(visit.as_mut()));
        }
        // Variables the ValidatingPolicies share, evaluated once for all.
        let var_memo = crate::cel::VarMemo::default();
        // What the ImageValidatingPolicies verified, for `required`, and
        // their results, held until every one has verified what it does.
        let verified = crate::ivpol::Verifications::default();
        let mut held = Vec::new();
        for (j, vpol) in engine.validating.iter().enumerate() {
            let i = engine.policies.len() + j;
            if let Some(results) = answer(&mut memo, &mut visit, i) {
                out.parts.push(Part::Shared(results));
                continue;
            }
            if vpol.is_image_policy() {
                let mut evaluated = vpol.evaluate_images(req, data, &verified);
                if let Some((result, pending)) = &mut evaluated
                    && let Some(keys) =
                        engine.cel_exemption(vpol.kind(), vpol.name(), prepared.cel_objects(), data)
                {
                    result.status = Status::Skip;
                    result.rule = "exception".to_string();
                    result.message = format!("rule is skipped due to policy exception: {keys}");
                    pending.clear();
                }
                held.push((i, evaluated));
                continue;
            }
            let result = match bindings.operation_for(vpol.name(), req.name()) {
                Some(op) if op != req.operation => {
                    let mut r = req.clone();
                    r.operation = op;
                    if op == crate::Operation::Update && r.old_object.is_none() {
                        r.old_object = Some(r.object.clone());
                    }
                    vpol.evaluate(&r, data)
                }
                _ => vpol.evaluate_with(req, Some((prepared, &var_memo)), data),
            };
            if let Some(mut result) = result {
                // A policy skipped by its own match conditions stays so;
                // otherwise a CEL PolicyException naming it may exempt it.
                if result.status != Status::Skip
                    && let Some(keys) =
                        engine.cel_exemption(vpol.kind(), vpol.name(), prepared.cel_objects(), data)
                {
                    result.status = Status::Skip;
                    result.rule = "exception".to_string();
                    result.message = format!("rule is skipped due to policy exception: {keys}");
                }
                out.add(
                    vec![result],
                    i,
                    req,
                    memo.as_deref_mut().zip(visit.as_mut()),
                );
            } else {
                out.add(Vec::new(), i, req, memo.as_deref_mut().zip(visit.as_mut()));
            }
        }
        // Kyverno's `required`: a passing ImageValidatingPolicy fails when
        // an image it matched was verified by none of the request's.
        for (i, evaluated) in held {
            let results = match evaluated {
                Some((mut result, pending)) => {
                    if result.status == Status::Pass
                        && let Some(message) = verified.unverified(&pending)
                    {
                        result.status = Status::Fail;
                        result.message = message;
                    }
                    vec![result]
                }
                None => Vec::new(),
            };
            out.add(results, i, req, memo.as_deref_mut().zip(visit.as_mut()));
        }
        if let (Some(m), Some(v)) = (memo, visit) {
            m.end(v, req);
        }
        out
    }

    /// Mutates the request's object ([`Engine::mutate`]), then evaluates
    /// the validate rules on the mutated object, as Kyverno's CLI does.
    pub fn apply(self, req: EvalRequest) -> (Mutation, Results) {
        let (engine, data) = (self.engine, self.data);
        let empty = Bindings::default();
        let mutation = engine.mutate(&req, data, self.bindings.unwrap_or(&empty));
        // Kyverno's CLI validates with the classic policies after the
        // classic mutate rules, then runs the MutatingPolicies, then the
        // ValidatingPolicies: so when a MutatingPolicy changed the object,
        // the classic validate rules see it as the classic rules left it.
        let after_classic = mutation
            .steps
            .iter()
            .rev()
            .find(|s| s.source == Source::Kyverno)
            .map_or_else(|| req.object.clone(), |s| s.object.clone());
        if Arc::ptr_eq(&after_classic, &mutation.object) {
            let validated = EvalRequest {
                object: mutation.object.clone(),
                ..req
            };
            return (mutation, self.validate(&Prepared::new(validated)));
        }
        let classic = EvalRequest {
            object: after_classic,
            ..req.clone()
        };
        let bindings = self.bindings;
        let validate = |req: EvalRequest| {
            let mut e = engine.evaluation(data);
            e.bindings = bindings;
            e.validate(&Prepared::new(req)).into_vec()
        };
        let mut results: Vec<RuleResult> = validate(classic)
            .into_iter()
            .filter(|r| r.source == Source::Kyverno)
            .collect();
        let last = EvalRequest {
            object: mutation.object.clone(),
            ..req
        };
        results.extend(
            validate(last)
                .into_iter()
                .filter(|r| r.source != Source::Kyverno),
        );
        (mutation, Results::from(results))
    }
}

/// One evaluation's validate results, policy by policy, in the order of
/// the engine's policies; those a memo answered, or keeps, are shared with
/// it (not copied).
#[derive(Debug, Default, Clone)]
pub struct Results {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Owned(Vec<RuleResult>),
    Shared(Arc<[RuleResult]>),
}

impl Results {
    /// Every result, in order.
    pub fn iter(&self) -> impl Iterator<Item = &RuleResult> {
        self.parts.iter().flat_map(|p| match p {
            Part::Owned(v) => v.as_slice(),
            Part::Shared(s) => s,
        })
    }

    /// Every result, in order, owned (the shared ones copied).
    pub fn into_vec(self) -> Vec<RuleResult> {
        let mut out = Vec::new();
        for part in self.parts {
            match part {
                Part::Owned(v) if out.is_empty() => out = v,
                Part::Owned(v) => out.extend(v),
                Part::Shared(s) => out.extend(s.iter().cloned()),
            }
        }
        out
    }

    /// Adds policy `i`'s results, evaluated now; the memo visited, if any,
    /// gets to keep them.
    fn add(
        &mut self,
        results: Vec<RuleResult>,
        i: usize,
        req: &EvalRequest,
        memo: Option<(&mut crate::Memo, &mut crate::memo::Visit)>,
    ) {
        match memo {
            Some((m, v)) if m.wants(v, i) => {
                let shared: Arc<[RuleResult]> = results.into();
                m.record(v, i, req, shared.clone());
                self.parts.push(Part::Shared(shared));
            }
            _ if results.is_empty() => {}
            _ => self.parts.push(Part::Owned(results)),
        }
    }
}

impl From<Vec<RuleResult>> for Results {
    fn from(results: Vec<RuleResult>) -> Results {
        Results {
            parts: vec![Part::Owned(results)],
        }
    }
}

/// The rule an autogen rule was generated from.
pub fn base_rule(rule: &str) -> &str {
    rule.strip_prefix("autogen-cronjob-")
        .or_else(|| rule.strip_prefix("autogen-"))
        .unwrap_or(rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoClusterData;
    use serde_json::json;

    fn assert_send_sync<T: Send + Sync>() {}

    /// An engine with the policies `docs`, each of which it must take.
    fn engine_with(docs: &[serde_json::Value]) -> Engine {
        let mut engine = Engine::new();
        for doc in docs {
            assert!(engine.add_json(doc).unwrap());
        }
        engine
    }

    /// What `engine` gives when it validates a CREATE of `object`.
    fn validate(engine: &Engine, data: &dyn ClusterData, object: Arc<Value>) -> Vec<RuleResult> {
        engine
            .evaluation(data)
            .validate(&crate::Prepared::new(EvalRequest::create(object)))
            .into_vec()
    }

    /// Seed 000 (background scan goroutines wrote one shared map; tests
    /// mutated shared policy objects): one compiled engine and one resource
    /// are shared by several threads at once; every thread gets the same
    /// results and neither the resource nor the policy changes.
    #[test]
    fn seed_shared_policy_not_mutated() {
        assert_send_sync::<Engine>();
        assert_send_sync::<EvalRequest>();
        let policy = json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
            "spec": {"rules": [{
                "name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "context": [{"name": "n", "variable": {"jmesPath": "request.object.metadata.name"}}],
                "validate": {"message": "{{ n }}", "foreach": [{
                    "list": "request.object.spec.containers",
                    "pattern": {"image": "!*:latest"}
                }]}
            }]}
        });
        let engine = Arc::new(engine_with(&[policy]));
        let pod = Arc::new(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "a"},
            "spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:latest"}]}
        }));
        let before = (*pod).clone();
        let results: Vec<Vec<RuleResult>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    let engine = engine.clone();
                    let pod = pod.clone();
                    s.spawn(move || {
                        let mut last = Vec::new();
                        for _ in 0..50 {
                            last = validate(&engine, &NoClusterData, pod.clone());
                        }
                        last
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        assert_eq!(*pod, before, "the shared resource is unchanged");
        for r in &results {
            assert_eq!(r, &results[0]);
        }
        assert_eq!(results[0].len(), 1);
        assert_eq!(results[0][0].status, Status::Fail);
    }

    /// Kyverno 1.19's outcomes where a rule cannot be evaluated, as its CLI
    /// gives them (found by `bench/kyverno-diff`): a precondition naming an
    /// unknown variable is the rule's error; a foreach with nothing to
    /// apply to gives no result at all, unless a list failed for another
    /// reason than a missing field; an element whose preconditions fail to
    /// evaluate is passed over; a `celPreconditions` expression that errors
    /// fails the rule in Kubernetes' words, one that is false skips it.
    #[test]
    fn rules_that_cannot_be_evaluated_give_kyvernos_outcomes() {
        let rule = |name: &str, body: serde_json::Value| {
            let mut r =
                json!({"name": name, "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}});
            r.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            r
        };
        let deny = json!({"conditions": {"any": [{"key": "{{ element.name }}", "operator": "Equals", "value": "bad"}]}});
        let policy = json!({
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
            "spec": {"rules": [
                rule("unknown-var", json!({
                    "preconditions": {"all": [{"key": "{{ serviceAccountName }}", "operator": "Equals", "value": "x"}]},
                    "validate": {"pattern": {"metadata": {"name": "?*"}}}})),
                rule("empty-list", json!({"validate": {"foreach": [
                    {"list": "request.object.spec.volumes[?hostPath][]", "deny": deny.clone()}]}})),
                rule("missing-list", json!({"validate": {"foreach": [
                    {"list": "request.object.spec.initContainers", "deny": deny.clone()}]}})),
                rule("bad-list", json!({"validate": {"foreach": [
                    {"list": "length(`1`)", "deny": deny.clone()}]}})),
                rule("element-precondition", json!({"validate": {"foreach": [{
                    "list": "request.object.spec.containers",
                    "preconditions": {"all": [{"key": "{{ element.missing }}", "operator": "Equals", "value": "x"}]},
                    "deny": deny.clone()}]}})),
                rule("cel-error", json!({
                    "celPreconditions": [{"name": "lb", "expression": "object.spec.type == 'LoadBalancer'"}],
                    "validate": {"cel": {"expressions": [{"expression": "true"}]}}})),
                rule("cel-false", json!({
                    "celPreconditions": [{"name": "ns", "expression": "object.metadata.name == 'other'"}],
                    "validate": {"cel": {"expressions": [{"expression": "true"}]}}})),
            ]}
        });
        let engine = engine_with(&[policy]);
        let pod = Arc::new(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "a"},
            "spec": {"containers": [{"name": "c", "image": "x:1"}], "volumes": [{"name": "v", "emptyDir": {}}]}
        }));
        let results = validate(&engine, &NoClusterData, pod);
        // (The JMESPath error's own words are the jmespath crate's.)
        let got: Vec<(&str, Status, &str)> = results
            .iter()
            .map(|r| match r.message.split_once(": Runtime error") {
                Some((head, _)) => (r.rule.as_str(), r.status, head),
                None => (r.rule.as_str(), r.status, r.message.as_str()),
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "unknown-var",
                    Status::Error,
                    "failed to evaluate preconditions: failed to resolve serviceAccountName: Unknown key \"serviceAccountName\" in path"
                ),
                ("bad-list", Status::Error, "failed to evaluate list"),
                (
                    "cel-error",
                    Status::Fail,
                    "expression 'object.spec.type == 'LoadBalancer'' resulted in error: no such key: type"
                ),
                ("cel-false", Status::Skip, "cel preconditions not met"),
            ]
        );
    }

    /// A `verifyImages` entry with a mistake is refused naming the field.
    #[test]
    fn verify_images_mistakes_are_refused_naming_the_field() {
        let policy = |vi: serde_json::Value| {
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                "spec": {"rules": [{"name": "r",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [vi]}]}})
        };
        for (vi, field) in [
            (json!({"attestors": []}), "verifyImages[0].imageReferences"),
            (
                json!({"imageReferences": ["*"], "verifyDigest": "yes"}),
                "verifyImages[0].verifyDigest",
            ),
            (
                json!({"imageReferences": ["*"], "attestors": [{"count": 0, "entries": []}]}),
                "verifyImages[0].attestors[0].count",
            ),
            (
                json!({"imageReferences": ["*"], "type": "Notery"}),
                "verifyImages[0].type",
            ),
        ] {
            let err = Engine::new().add_json(&policy(vi)).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
        let named = policy(json!({"imageReferences": ["*"],
            "imageRegistryCredentials": {"secrets": [7]}}));
        let err = Engine::new().add_json(&named).unwrap_err().to_string();
        assert!(
            err.contains("spec.rules[0].verifyImages[0].imageRegistryCredentials.secrets"),
            "{err}"
        );
        // A key leash cannot read (a KMS one) is valid to Kyverno: the
        // policy compiles and the rule errs when it runs.
        let secret_key = policy(json!({"imageReferences": ["*"],
            "attestors": [{"entries": [{"keys": {"publicKeys": "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k",
                "rekor": {"ignoreTlog": true}}}]}]}));
        let engine = engine_with(&[secret_key]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "n"},
            "spec": {"containers": [{"name": "c", "image": "r.io/app:1"}]}});
        let results = validate(&engine, &NoClusterData, Arc::new(pod));
        assert_eq!(results[0].status, Status::Error, "{results:?}");
        assert!(
            results[0]
                .message
                .contains("KMS keys are not supported yet"),
            "{results:?}"
        );
    }

    /// The Secrets the policies name for registry credentials: a
    /// ClusterPolicy rule's `imageRegistryCredentials.secrets` and an
    /// ImageValidatingPolicy's `credentials.secrets`, each once.
    #[test]
    fn registry_secrets_are_the_policies_credentials() {
        let cpol = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "r",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "context": [{"name": "d", "imageRegistry": {"reference": "r.io/a:1",
                    "imageRegistryCredentials": {"secrets": ["d"]}}}],
                "verifyImages": [{"imageReferences": ["*"],
                    "imageRegistryCredentials": {"secrets": ["b", "a"]}}]}]}});
        let ivpol = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
            "metadata": {"name": "i"},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "credentials": {"secrets": ["a", "c"]},
                "attestors": [{"name": "k", "cosign": {"key": {"data": "x"}}}],
                "validations": [{"expression": "true"}]}});
        assert_eq!(
            engine_with(&[cpol, ivpol]).registry_secrets(),
            ["a", "b", "c", "d"]
        );
    }

    /// `useCache: false` asks the data to verify each image afresh
    /// (`ClusterData::fresh_image`) before it verifies it; the default
    /// (true) does not.
    #[test]
    fn use_cache_false_verifies_afresh() {
        #[derive(Debug, Default)]
        struct Counting(std::sync::Mutex<Vec<String>>);
        impl crate::ClusterData for Counting {
            fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<serde_json::Value>> {
                None
            }
            fn list(&self, _: &str, _: &str, _: &str) -> Vec<Arc<serde_json::Value>> {
                Vec::new()
            }
            fn fresh_image(&self, image: &str) {
                self.0.lock().unwrap().push(image.to_string());
            }
            fn verify_image(
                &self,
                _: &str,
                _: &crate::ImageTrust,
            ) -> std::result::Result<String, String> {
                Ok(format!("sha256:{}", "a".repeat(64)))
            }
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "n"},
            "spec": {"containers": [{"name": "c", "image": "r.io/app:1"}]}});
        for (use_cache, fresh) in [(json!(false), vec!["r.io/app:1"]), (json!(true), vec![])] {
            let policy = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "p"},
                "spec": {"rules": [{"name": "r",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [{"imageReferences": ["r.io/*"], "useCache": use_cache,
                        "mutateDigest": false, "verifyDigest": false,
                        "attestors": [{"entries": [{"keys": {"publicKeys": "-----BEGIN PUBLIC KEY-----\nx\n-----END PUBLIC KEY-----",
                            "rekor": {"ignoreTlog": true}}}]}]}]}]}});
            let data = Counting::default();
            let results = validate(&engine_with(&[policy]), &data, Arc::new(pod.clone()));
            assert_eq!(results[0].status, Status::Pass, "{results:?}");
            assert_eq!(*data.0.lock().unwrap(), fresh, "useCache: {use_cache}");
        }
    }

    /// ValidatingPolicies that define the same variables share their
    /// values on a request (evaluated once), and only those: a variable of
    /// the same name with another expression, or after other variables,
    /// gets its own value; a failed shared variable fails each policy that
    /// reads it with the same error. Every result is the one the policy
    /// gets evaluated alone.
    #[test]
    fn validating_policies_share_only_identical_variables() {
        let vp = |name: &str, vars: serde_json::Value, check: &str| {
            json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
                "metadata": {"name": name},
                "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
                    "variables": vars,
                    "validations": [{"expression": check, "message": name}]}})
        };
        let containers =
            json!([{"name": "c", "expression": "object.spec.containers.map(c, c.name)"}]);
        let policies = [
            vp("a", containers.clone(), "variables.c == ['x', 'y']"),
            vp("b", containers.clone(), "variables.c.size() == 2"),
            // Same name, another expression.
            vp(
                "c",
                json!([{"name": "c", "expression": "object.spec.containers.size()"}]),
                "variables.c == 2",
            ),
            // Same definition after another variable: not the same prefix.
            vp(
                "d",
                json!([{"name": "z", "expression": "1"},
                           {"name": "c", "expression": "object.spec.containers.map(c, c.name)"}]),
                "variables.c == ['x', 'y'] && variables.z == 1",
            ),
            vp(
                "e",
                json!([{"name": "bad", "expression": "object.spec.missing.size()"}]),
                "variables.bad == 1",
            ),
            vp(
                "f",
                json!([{"name": "bad", "expression": "object.spec.missing.size()"}]),
                "variables.bad > 0",
            ),
        ];
        let pod = Arc::new(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {"containers": [{"name": "x"}, {"name": "y"}]}}));
        let evaluate = |policies: &[serde_json::Value]| {
            validate(&engine_with(policies), &NoClusterData, pod.clone())
        };
        let together = evaluate(&policies);
        let alone: Vec<RuleResult> = policies
            .iter()
            .flat_map(|p| evaluate(std::slice::from_ref(p)))
            .collect();
        assert_eq!(together, alone);
        let status: Vec<(&str, Status)> = together.iter().map(|r| (&*r.policy, r.status)).collect();
        assert_eq!(
            status,
            [
                ("a", Status::Pass),
                ("b", Status::Pass),
                ("c", Status::Pass),
                ("d", Status::Pass),
                ("e", Status::Error),
                ("f", Status::Error)
            ]
        );
        assert_eq!(together[4].message, together[5].message);
    }
}
