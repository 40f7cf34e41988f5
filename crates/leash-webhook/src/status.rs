//! The status writer: marks each policy the webhook serves Ready in its
//! `status` subresource, as Kyverno reports readiness, and each policy
//! that is not served because it is invalid not Ready, with the error
//! (naming the field) as the condition's message (`reason: Failed`;
//! `conditionStatus.message` too for the `policies.kyverno.io` kinds).
//!
//! - `kyverno.io` ClusterPolicy / Policy: `status.ready: true` and
//!   `status.conditions: [{type: Ready, status: "True", reason: Succeeded,
//!   message: Ready, lastTransitionTime}]`.
//! - `policies.kyverno.io` ValidatingPolicy / NamespacedValidatingPolicy,
//!   GeneratingPolicy / NamespacedGeneratingPolicy:
//!   `status.conditionStatus: {ready: true, conditions: [{type:
//!   WebhookConfigured, status: "True", reason: Succeeded, message: "Webhook
//!   configured.", lastTransitionTime}, {type: RBACPermissionsGranted,
//!   status: "True", reason: Succeeded, message: "Policy is ready for
//!   reporting.", lastTransitionTime}]}`. `RBACPermissionsGranted` is
//!   checked, as Kyverno checks it for its reports controller: a
//!   `SelfSubjectAccessReview` for each resource of the policy's match
//!   constraints and each verb leash's background scan uses on it (`list`,
//!   `watch`; Kyverno's reports controller also needs `get`). Any missing
//!   makes it `"False"` (`reason: Failed`, the message naming each verb and
//!   resource) and the policy not `ready`, as in Kyverno; the webhook
//!   serves the policy all the same. They are asked when the policy is
//!   served anew or its resources change, and, while one is missing, again
//!   every `recheck_interval` (a minute; Kyverno asks at each change of
//!   the policy).
//!
//! # Invariants
//! 1. The writer reads the [`Recorder`]'s state by cloning it out of the
//!    `watch` channel (no guard lives across an await); the recorder never
//!    waits for this writer, so a slow or failing API server cannot block
//!    `record` (seed: recorder held a mutex across a channel send).
//! 2. Every API call is raced against the token; `run` returns as soon as it
//!    is cancelled.
//! 3. A policy is written again only when its served generation, its
//!    missing permissions (or, for an invalid policy, its error) change; a
//!    failed write is retried after `retry_interval` (a policy deleted in
//!    the meantime, 404, is not retried). So is a permission check that
//!    got no answer (the API server unreachable); one the API server
//!    refused is a missing permission, named in the condition.
//! 4. Each pass over the served set asks each (resource, verb) at most
//!    once; the answers live only for that pass. Passes follow changes of
//!    the served set, retries, and rechecks while a permission is missing;
//!    with nothing missing and nothing failed, the writer only waits.

use std::collections::HashMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use leash_runtime::CancellationToken;
use serde_json::json;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::recorder::{Gvr, PolicyRef, Readiness, Recorder};

/// The verbs of leash's background scan on a matched resource.
const SCAN_VERBS: [&str; 2] = ["list", "watch"];

/// A pass's answers: (resource, verb) → `None` when allowed, else why not.
type Access = HashMap<(Gvr, &'static str), Option<String>>;

/// Patches the status of served policies. Built without starting anything.
#[derive(Clone)]
pub struct StatusWriter {
    client: kube::Client,
    readiness: watch::Receiver<Readiness>,
    retry_interval: Duration,
    recheck_interval: Duration,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("retry_interval", &self.retry_interval)
            .field("recheck_interval", &self.recheck_interval)
            .finish_non_exhaustive()
    }
}

impl StatusWriter {
    /// A writer for `recorder`'s policies (failed writes retried every 5 s).
    pub fn new(client: kube::Client, recorder: &Recorder) -> StatusWriter {
        StatusWriter {
            client,
            readiness: recorder.subscribe(),
            retry_interval: Duration::from_secs(5),
            recheck_interval: Duration::from_secs(60),
        }
    }

    /// Sets how often permissions a policy's status says are missing are
    /// asked again (default a minute).
    pub fn with_recheck_interval(mut self, d: Duration) -> StatusWriter {
        self.recheck_interval = d;
        self
    }

    /// Sets how long to wait before retrying failed writes.
    pub fn with_retry_interval(mut self, d: Duration) -> StatusWriter {
        self.retry_interval = d;
        self
    }

    /// Writes statuses until `token` is cancelled.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped write is redone by the next `run`.
    pub async fn run(mut self, token: CancellationToken) -> Result<()> {
        // Served policies → the generation and missing permissions written.
        let mut written: HashMap<PolicyRef, (u64, Vec<String>)> = HashMap::new();
        let mut written_failed: HashMap<PolicyRef, String> = HashMap::new();
        let mut vpol_version: Option<String> = None;
        loop {
            let state = self.readiness.borrow_and_update().clone();
            let mut access = Access::new();
            written.retain(|p, _| state.served.contains_key(p));
            written_failed.retain(|p, _| state.failed.contains_key(p));
            let mut failed = false;
            let served = state.served.iter().map(|(p, g)| (p, None, Some(*g)));
            let invalid = state
                .failed
                .iter()
                .map(|(p, why)| (p, Some(why.as_str()), None));
            for (policy, why, generation) in served.chain(invalid) {
                let resources = state.resources.get(policy).map_or(&[][..], Vec::as_slice);
                let missing = if why.is_some() || resources.is_empty() {
                    Vec::new()
                } else {
                    let ask = self.missing_permissions(resources, &mut access);
                    match token.run_until_cancelled(ask).await {
                        None => return Ok(()),
                        Some(Ok(missing)) => missing,
                        Some(Err(e)) => {
                            tracing::warn!(policy = %policy, error = %e, "checking leash's permissions failed; will retry");
                            failed = true;
                            continue;
                        }
                    }
                };
                let done = match (why, generation) {
                    (None, Some(g)) => written.get(policy) == Some(&(g, missing.clone())),
                    (None, None) => true,
                    (Some(why), _) => written_failed.get(policy).map(String::as_str) == Some(why),
                };
                if done {
                    continue;
                }
                let write = self.write_status(policy, why, &missing, &mut vpol_version);
                let outcome = token.run_until_cancelled(write).await;
                let written_now = match outcome {
                    None => return Ok(()),
                    Some(Ok(())) => true,
                    Some(Err(Error::ApiFailed {
                        source: kube::Error::Api(s),
                        ..
                    })) if s.code == 404 => {
                        tracing::debug!(policy = %policy, "policy gone before its status was written");
                        true
                    }
                    Some(Err(e)) => {
                        tracing::warn!(policy = %policy, error = %e, "writing policy status failed; will retry");
                        failed = true;
                        false
                    }
                };
                if written_now {
                    match (why, generation) {
                        (Some(why), _) => {
                            written_failed.insert(policy.clone(), why.to_string());
                        }
                        (None, Some(g)) => {
                            written.insert(policy.clone(), (g, missing));
                        }
                        (None, None) => {}
                    }
                }
            }
            // While a permission is missing, it is asked again now and then
            // (someone may grant it); a status changes only if the answer does.
            let recheck = written.values().any(|(_, missing)| !missing.is_empty());
            let wait = async {
                let bound = match (failed, recheck) {
                    (true, _) => Some(self.retry_interval),
                    (false, true) => Some(self.recheck_interval),
                    (false, false) => None,
                };
                match bound {
                    Some(bound) => {
                        let changed = tokio::time::timeout(bound, self.readiness.changed()).await;
                        if let Ok(Err(_)) = changed {
                            // The recorder is gone (`changed` answers at
                            // once from now on): wait the bound out, so a
                            // retry or recheck never spins.
                            tokio::time::sleep(bound).await;
                        }
                    }
                    None => {
                        if self.readiness.changed().await.is_err() {
                            // The recorder is gone: nothing will change any more.
                            std::future::pending::<()>().await;
                        }
                    }
                }
            };
            if token.run_until_cancelled(wait).await.is_none() {
                return Ok(());
            }
        }
    }

    /// Writes `policy`'s status: Ready, or not ready with `failure` as
    /// the reason; a `policies.kyverno.io` kind with `rbac`, the
    /// permissions leash misses to scan what it matches. `Ok` without a
    /// write for kinds without a status.
    async fn write_status(
        &self,
        policy: &PolicyRef,
        failure: Option<&str>,
        rbac: &[String],
        vpol_version: &mut Option<String>,
    ) -> Result<()> {
        let Some(plural) = plural(&policy.kind) else {
            return Ok(());
        };
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (group, version, body) = if matches!(policy.kind.as_str(), "ClusterPolicy" | "Policy") {
            let condition = match failure {
                None => json!({"type": "Ready", "status": "True", "reason": "Succeeded",
                               "message": "Ready", "lastTransitionTime": now}),
                Some(why) => json!({"type": "Ready", "status": "False", "reason": "Failed",
                                    "message": why, "lastTransitionTime": now}),
            };
            (
                "kyverno.io",
                "v1".to_string(),
                json!({"status": {"ready": failure.is_none(), "conditions": [condition]}}),
            )
        } else {
            if vpol_version.is_none() {
                *vpol_version = Some(self.preferred_version("policies.kyverno.io").await);
            }
            let status = match failure {
                // Kyverno's two conditions, in its order (its end-to-end
                // tests assert both); ready when both are true.
                None => {
                    let (granted, reason, message) = if rbac.is_empty() {
                        (
                            "True",
                            "Succeeded",
                            "Policy is ready for reporting.".to_string(),
                        )
                    } else {
                        let missing = rbac.join("; ");
                        let message = format!(
                            "Policy is not ready for reporting, missing permissions: {missing}."
                        );
                        ("False", "Failed", message)
                    };
                    json!({"ready": rbac.is_empty(), "conditions": [{
                        "type": "WebhookConfigured", "status": "True", "reason": "Succeeded",
                        "message": "Webhook configured.", "lastTransitionTime": now,
                    }, {
                        "type": "RBACPermissionsGranted", "status": granted, "reason": reason,
                        "message": message, "lastTransitionTime": now,
                    }]})
                }
                Some(why) => json!({"ready": false, "message": why, "conditions": [{
                    "type": "WebhookConfigured", "status": "False", "reason": "Failed",
                    "message": why, "lastTransitionTime": now,
                }]}),
            };
            (
                "policies.kyverno.io",
                vpol_version.clone().unwrap_or_else(|| "v1".into()),
                json!({"status": {"conditionStatus": status}}),
            )
        };
        let ar = ApiResource {
            group: group.to_string(),
            version: version.clone(),
            api_version: format!("{group}/{version}"),
            kind: policy.kind.clone(),
            plural,
        };
        let api: Api<DynamicObject> = match &policy.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        api.patch_status(&policy.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map(|_| ())
            .map_err(|source| Error::ApiFailed {
                operation: format!("patching the status of {policy}"),
                source,
            })
    }

    /// What leash may not do of its scan on `resources`, one entry a
    /// verb and resource (`list apps/v1, Resource=deployments`, with the
    /// authorizer's reason when it gives one), each asked with a
    /// `SelfSubjectAccessReview` once a pass (`access`). An API server
    /// that refuses the review itself is a missing permission, with its
    /// error; one that cannot be reached is an error (retried).
    async fn missing_permissions(
        &self,
        resources: &[Gvr],
        access: &mut Access,
    ) -> Result<Vec<String>> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let mut missing = Vec::new();
        for gvr in resources {
            for verb in SCAN_VERBS {
                let key = (gvr.clone(), verb);
                let answer = match access.get(&key) {
                    Some(answer) => answer.clone(),
                    None => {
                        let (group, version, resource) = gvr;
                        let review = SelfSubjectAccessReview {
                            spec: SelfSubjectAccessReviewSpec {
                                resource_attributes: Some(ResourceAttributes {
                                    group: Some(group.clone()),
                                    version: Some(version.clone()),
                                    resource: Some(resource.clone()),
                                    verb: Some(verb.to_string()),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            },
                            ..Default::default()
                        };
                        let what = format!("{verb} {group}/{version}, Resource={resource}");
                        let answer = match api.create(&Default::default(), &review).await {
                            Ok(r) => match r.status {
                                Some(s) if s.allowed => None,
                                Some(s) => Some(match s.reason.filter(|r| !r.is_empty()) {
                                    Some(why) => format!("{what}: {why}"),
                                    None => what,
                                }),
                                None => Some(format!("{what}: the review has no status")),
                            },
                            Err(kube::Error::Api(e)) => Some(format!("{what}: {}", e.message)),
                            Err(source) => {
                                return Err(Error::ApiFailed {
                                    operation: format!("asking whether leash may {what}"),
                                    source,
                                });
                            }
                        };
                        access.insert(key, answer.clone());
                        answer
                    }
                };
                missing.extend(answer);
            }
        }
        Ok(missing)
    }

    /// The group's preferred version from discovery; `v1` when discovery fails.
    async fn preferred_version(&self, group: &str) -> String {
        match kube::discovery::group(&self.client, group).await {
            Ok(g) => g.preferred_version_or_latest().to_string(),
            Err(e) => {
                tracing::debug!(group, error = %e, "discovery failed; assuming v1");
                "v1".to_string()
            }
        }
    }
}

/// The resource of a policy kind with a status: `clusterpolicies`,
/// `namespacedvalidatingpolicies`; `None` for a PolicyException.
fn plural(kind: &str) -> Option<String> {
    let stem = kind.strip_suffix("Policy")?;
    Some(format!("{}policies", stem.to_ascii_lowercase()))
}
