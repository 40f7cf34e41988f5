//! Mutate existing resources: `mutate.targets` rules, run by the
//! background component from UpdateRequests of type `mutate`.
//!
//! Admission creates the UpdateRequest before it answers (the trigger's
//! admission request, object and old object in `spec.context`, as Kyverno
//! keeps them), on the durable path generate uses: a request that a crash
//! interrupted is listed again at start and processed then. Processing
//! evaluates the named rules for the trigger, reads the targets from the
//! API server, and replaces each patched target with the resourceVersion it
//! was read at (a concurrent change makes the replace conflict, and the
//! request is retried from the start with fresh targets). A target the
//! patch leaves as it is gets no write, so running a request twice patches
//! once. The request ends `Completed` (and is deleted) or `Failed`, with
//! the error, and is retried with the queue's backoff.
//!
//! A policy with `mutateExistingOnPolicyUpdate` created or changed runs
//! its rules for every existing trigger the same way, without an
//! UpdateRequest (the policy itself is the durable record: a restart runs
//! it again, and running it again patches nothing twice).
//!
//! # Invariants
//! Those of the component ([`super`]): every API call goes through
//! `cancellable`; no lock is held across an await (this module takes
//! none).

use std::sync::Arc;

use kube::api::{ListParams, PostParams};
use leash_policy::{EvalRequest, Operation, PatchedTarget, RuleResult, Status, UserInfo};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Shared, TriggerRef, Work, cancellable, rule_contexts};
use crate::lookups::ScanData;
use crate::object::Object;

/// `spec.requestType` of an UpdateRequest for `mutate.targets` rules.
pub const REQUEST_MUTATE: &str = "mutate";
/// `spec.requestType` of an UpdateRequest for a MutatingPolicy with
/// `evaluation.mutateExisting` (its one rule is its name).
pub const REQUEST_CEL_MUTATE: &str = "cel-mutate";

/// An UpdateRequest of type `mutate` for one trigger and the rules it
/// triggered, in Kyverno's layout: `spec.context.admissionRequestInfo`
/// holds the admission request (operation, object, old object) and
/// `spec.context.userInfo` the user, which the rules' variables read.
pub fn mutate_update_request(
    namespace: &str,
    policy: &str,
    rules: &[String],
    operation: Operation,
    object: &Value,
    old_object: Option<&Value>,
    user: &UserInfo,
) -> Value {
    let mut ur = super::update_request(namespace, REQUEST_MUTATE, policy, rules, object);
    let mut request = json!({
        "operation": operation.as_str(),
        "object": object,
        "userInfo": {"username": user.username, "uid": user.uid, "groups": user.groups},
    });
    if let Some(old) = old_object {
        request["oldObject"] = old.clone();
    }
    ur["spec"]["context"] = json!({
        "userInfo": {
            "roles": user.roles,
            "clusterRoles": user.cluster_roles,
            "userInfo": {"username": user.username, "uid": user.uid, "groups": user.groups},
        },
        "admissionRequestInfo": {
            "operation": operation.as_str(),
            "admissionRequest": request,
        },
    });
    ur
}

/// The admission request an UpdateRequest carries, as the engine takes it;
/// `None` when it carries none.
fn request_of(ur: &Value) -> Option<EvalRequest> {
    let info = &ur["spec"]["context"]["admissionRequestInfo"];
    let request = &info["admissionRequest"];
    let object = request.get("object").filter(|o| o.is_object())?;
    let operation = info["operation"]
        .as_str()
        .and_then(Operation::parse)
        .unwrap_or(Operation::Create);
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let user = &ur["spec"]["context"]["userInfo"];
    let who = &user["userInfo"];
    Some(EvalRequest {
        object: Arc::new(object.clone()),
        old_object: request
            .get("oldObject")
            .filter(|o| o.is_object())
            .map(|o| Arc::new(o.clone())),
        operation,
        user_info: UserInfo {
            username: who["username"].as_str().unwrap_or("").to_string(),
            uid: who["uid"].as_str().unwrap_or("").to_string(),
            groups: strings(&who["groups"]),
            roles: strings(&user["roles"]),
            cluster_roles: strings(&user["clusterRoles"]),
        },
        namespace_labels: None,
        namespace_object: None,
        request_resource: None,
    })
}

/// What running mutate-existing rules for one trigger did.
struct Outcome {
    /// References of the targets written.
    patched: Vec<Value>,
    /// The errors of rules and of writes.
    errors: Vec<String>,
}

impl Shared {
    /// Processes an UpdateRequest of type `mutate` or `cel-mutate` (read
    /// just now).
    pub(super) async fn process_mutate_request(
        &self,
        name: &str,
        ur: &Value,
        token: &CancellationToken,
    ) -> Result<(), String> {
        let cel = ur["spec"]["requestType"].as_str() == Some(REQUEST_CEL_MUTATE);
        if ur["status"]["state"].as_str() == Some("Completed") {
            return self
                .finish_request(name, ur, Ok(Vec::new()), "generatedResources", token)
                .await;
        }
        let policy = ur["spec"]["policy"].as_str().unwrap_or("").to_string();
        let contexts = rule_contexts(ur);
        let mut rules: Vec<String> = Vec::new();
        for (rule, _) in &contexts {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
        let trigger = contexts
            .first()
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| TriggerRef::from_json(&ur["spec"]["resource"]));
        let req = match request_of(ur) {
            Some(req) => Some(req),
            None => self.live_request(&trigger, token).await?,
        };
        let outcome = match req {
            Some(req) if cel => self.mutate_cel_targets(&policy, Some(req), token).await?,
            Some(req) => self.mutate_targets(&policy, &rules, req, token).await?,
            // No admission request and the trigger is gone: nothing to do.
            None => Outcome {
                patched: Vec::new(),
                errors: Vec::new(),
            },
        };
        let result = if outcome.errors.is_empty() {
            Ok(outcome.patched)
        } else {
            Err((outcome.errors.join("; "), outcome.patched))
        };
        // Kyverno's UpdateRequest status has one list of resources, named
        // for generate; here it holds the targets patched.
        self.finish_request(name, ur, result, "generatedResources", token)
            .await
    }

    /// A policy with `mutateExistingOnPolicyUpdate` was created or changed:
    /// each existing trigger of those rules is queued.
    pub(super) async fn queue_existing_triggers(
        &self,
        policy_key: &str,
        token: &CancellationToken,
    ) -> Result<(), String> {
        let set = self.policies.borrow().clone();
        let Some(policy) = set
            .engine
            .policies()
            .iter()
            .find(|p| &**p.key() == policy_key)
            .cloned()
        else {
            return Ok(());
        };
        let catalog = self.resolve_catalog(token).await;
        for rule in policy.mutate_existing_on_policy_update() {
            for kind in policy.rule_kinds(rule) {
                for (av, k) in self.resolve_match(&catalog, &kind) {
                    let Some((ar, _)) = self.resolve(&av, &k, token).await else {
                        continue;
                    };
                    let api = self.api(&ar, policy.namespace().unwrap_or(""));
                    let lp = ListParams::default();
                    let list = cancellable(token, || api.list(&lp)).await?;
                    for o in list.items {
                        let mut v = Arc::unwrap_or_clone(o.raw);
                        v["apiVersion"] = json!(ar.api_version);
                        v["kind"] = json!(ar.kind);
                        self.queue.add(Work::MutateExisting {
                            policy: policy_key.to_string(),
                            rule: rule.clone(),
                            trigger: TriggerRef::of(&v),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs one rule for one existing trigger (`mutateExistingOnPolicyUpdate`).
    pub(super) async fn mutate_existing_trigger(
        &self,
        policy: &str,
        rule: &str,
        trigger: &TriggerRef,
        token: &CancellationToken,
    ) -> Result<(), String> {
        let Some(req) = self.live_request(trigger, token).await? else {
            return Ok(());
        };
        let outcome = self
            .mutate_targets(policy, &[rule.to_string()], req, token)
            .await?;
        if outcome.errors.is_empty() {
            Ok(())
        } else {
            Err(outcome.errors.join("; "))
        }
    }

    /// The trigger as it is now, with no operation (as Kyverno's policy
    /// controller builds it: a rule whose match names operations selects
    /// no existing trigger); `None` when it is gone.
    async fn live_request(
        &self,
        trigger: &TriggerRef,
        token: &CancellationToken,
    ) -> Result<Option<EvalRequest>, String> {
        let (ar, _) = self
            .resolve(&trigger.api_version, &trigger.kind, token)
            .await
            .ok_or_else(|| format!("trigger kind {} is not served", trigger.kind))?;
        let api = self.api(&ar, &trigger.namespace);
        let live = cancellable(token, || api.get_opt(&trigger.name)).await?;
        Ok(live
            .filter(|o| trigger.uid.is_empty() || o.uid() == trigger.uid)
            .map(|o| EvalRequest {
                operation: Operation::Background,
                ..EvalRequest::create(o.raw.clone())
            }))
    }

    /// A MutatingPolicy with `evaluation.mutateExisting` was created or
    /// changed: its targets are mutated as for a trigger, without one
    /// (Kyverno's bare `cel-mutate` UpdateRequest). The policy itself is
    /// the durable record, as for `mutateExistingOnPolicyUpdate`.
    pub(super) async fn mutate_existing_cel_policy(
        &self,
        policy: &str,
        token: &CancellationToken,
    ) -> Result<(), String> {
        let outcome = self.mutate_cel_targets(policy, None, token).await?;
        if outcome.errors.is_empty() {
            Ok(())
        } else {
            Err(outcome.errors.join("; "))
        }
    }

    /// Mutates the targets of the MutatingPolicy `policy` (listed from the
    /// API server) for the trigger in `req` (none: the policy changed),
    /// then writes each one changed.
    async fn mutate_cel_targets(
        &self,
        policy: &str,
        req: Option<EvalRequest>,
        token: &CancellationToken,
    ) -> Result<Outcome, String> {
        self.run_and_write(
            |engine, data| engine.mutate_existing_cel(policy, req.as_ref(), data),
            token,
        )
        .await
    }

    /// Evaluates `rules` of `policy` for the trigger in `req` (the targets
    /// read from the API server), then writes each patched target.
    async fn mutate_targets(
        &self,
        policy: &str,
        rules: &[String],
        mut req: EvalRequest,
        token: &CancellationToken,
    ) -> Result<Outcome, String> {
        let namespace = req.object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if let Some(ns) = self.namespace_of(&namespace, token).await? {
            req.namespace_labels = ns.meta.labels.clone();
            req.namespace_object = Some(ns.raw.clone());
        }
        self.run_and_write(
            |engine, data| engine.mutate_existing(policy, rules, &req, data),
            token,
        )
        .await
    }

    /// Runs `run` on the current policy set (the targets read from the
    /// API server: what it missed is fetched and it runs again, at most
    /// four times), then writes each patched target. `None` from `run`:
    /// the policy is gone (or no longer has the rules), nothing to do.
    async fn run_and_write(
        &self,
        run: impl Fn(&leash_policy::Engine, &ScanData) -> Option<(Vec<RuleResult>, Vec<PatchedTarget>)>,
        token: &CancellationToken,
    ) -> Result<Outcome, String> {
        let set = self.policies.borrow().clone();
        let data = self.fresh_data();
        let mut ran = None;
        for _ in 0..crate::lookups::ROUNDS {
            ran = run(&set.engine, &data);
            if !self.fetch_missed(&data, token).await? {
                break;
            }
        }
        let Some((results, targets)) = ran else {
            return Ok(Outcome {
                patched: Vec::new(),
                errors: Vec::new(),
            });
        };
        let mut outcome = Outcome {
            patched: Vec::new(),
            errors: errors_of(&results),
        };
        for t in targets.iter().filter(|t| t.status == Status::Pass) {
            match self.write_target(t, token).await {
                Ok(r) => outcome.patched.push(r),
                Err(e) if token.is_cancelled() => return Err(e),
                Err(e) => outcome.errors.push(e),
            }
        }
        Ok(outcome)
    }

    /// Replaces a target with its patched form, at the resourceVersion it
    /// was read at.
    async fn write_target(
        &self,
        t: &PatchedTarget,
        token: &CancellationToken,
    ) -> Result<Value, String> {
        let o = &t.object;
        let av = o["apiVersion"].as_str().unwrap_or("");
        let kind = o["kind"].as_str().unwrap_or("");
        let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
        let name = o["metadata"]["name"].as_str().unwrap_or("");
        let (ar, _) = self
            .resolve(av, kind, token)
            .await
            .ok_or_else(|| format!("target kind {av} {kind} is not served"))?;
        let api = self.api(&ar, ns);
        let body = Object::from_value((**o).clone()).map_err(|e| e.to_string())?;
        let pp = PostParams::default();
        cancellable(token, || api.replace(name, &pp, &body))
            .await
            .map_err(|e| format!("rule {}: patching {kind} {ns}/{name}: {e}", t.rule))?;
        tracing::info!(rule = %t.rule, target = %format!("{kind} {ns}/{name}"), "existing resource mutated");
        Ok(json!({"apiVersion": av, "kind": kind, "namespace": ns, "name": name}))
    }
}

/// `rule: message` of each errored result.
fn errors_of(results: &[RuleResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.status == Status::Error)
        .map(|r| format!("rule {}: {}", r.rule, r.message))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutate_update_requests_carry_the_admission_request() {
        let trigger = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "uid": "u"}});
        let user = UserInfo {
            username: "alice".into(),
            groups: vec!["devs".into()],
            roles: vec!["n:r".into()],
            ..UserInfo::default()
        };
        let ur = mutate_update_request(
            "kyverno",
            "p",
            &["r".into()],
            Operation::Update,
            &trigger,
            Some(&trigger),
            &user,
        );
        assert_eq!(ur["spec"]["requestType"], "mutate");
        assert_eq!(ur["spec"]["resource"]["uid"], "u");
        assert_eq!(ur["spec"]["ruleContext"][0]["rule"], "r");
        let req = request_of(&ur).expect("the admission request");
        assert_eq!(req.operation, Operation::Update);
        assert_eq!(*req.object, trigger);
        assert!(req.old_object.is_some());
        assert_eq!(req.user_info.username, "alice");
        assert_eq!(req.user_info.roles, ["n:r"]);
        // Without one (mutateExistingOnPolicyUpdate's runs), the live
        // trigger is read instead.
        let bare = super::super::update_request("kyverno", REQUEST_MUTATE, "p", &[], &trigger);
        assert!(request_of(&bare).is_none());
    }
}
