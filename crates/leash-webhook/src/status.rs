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
//!   reporting.", lastTransitionTime}]}` (leash's ServiceAccount is
//!   expected to read what the policies match, as deploy/leash.yaml says;
//!   it is not checked).
//!
//! # Invariants
//! 1. The writer reads the [`Recorder`]'s state by cloning it out of the
//!    `watch` channel (no guard lives across an await); the recorder never
//!    waits for this writer, so a slow or failing API server cannot block
//!    `record` (seed: recorder held a mutex across a channel send).
//! 2. Every API call is raced against the token; `run` returns as soon as it
//!    is cancelled.
//! 3. A policy is written again only when its served generation (or, for an
//!    invalid policy, its error) changes; a
//!    failed write is retried after `retry_interval` (a policy deleted in
//!    the meantime, 404, is not retried).

use std::collections::HashMap;
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use leash_runtime::CancellationToken;
use serde_json::json;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::recorder::{PolicyRef, Readiness, Recorder};

/// Patches the status of served policies. Built without starting anything.
#[derive(Clone)]
pub struct StatusWriter {
    client: kube::Client,
    readiness: watch::Receiver<Readiness>,
    retry_interval: Duration,
}

impl std::fmt::Debug for StatusWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusWriter")
            .field("retry_interval", &self.retry_interval)
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
        }
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
        let mut written: HashMap<PolicyRef, u64> = HashMap::new();
        let mut written_failed: HashMap<PolicyRef, String> = HashMap::new();
        let mut vpol_version: Option<String> = None;
        loop {
            let state = self.readiness.borrow_and_update().clone();
            written.retain(|p, _| state.served.contains_key(p));
            written_failed.retain(|p, _| state.failed.contains_key(p));
            let mut failed = false;
            let served = state.served.iter().map(|(p, g)| (p, None, Some(*g)));
            let invalid = state
                .failed
                .iter()
                .map(|(p, why)| (p, Some(why.as_str()), None));
            for (policy, why, generation) in served.chain(invalid) {
                let done = match (why, generation) {
                    (None, g) => written.get(policy) == g.as_ref(),
                    (Some(why), _) => written_failed.get(policy).map(String::as_str) == Some(why),
                };
                if done {
                    continue;
                }
                let outcome = token
                    .run_until_cancelled(self.write_status(policy, why, &mut vpol_version))
                    .await;
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
                            written.insert(policy.clone(), g);
                        }
                        (None, None) => {}
                    }
                }
            }
            let wait = async {
                if failed {
                    let _ =
                        tokio::time::timeout(self.retry_interval, self.readiness.changed()).await;
                } else if self.readiness.changed().await.is_err() {
                    // The recorder is gone: nothing will change any more.
                    std::future::pending::<()>().await;
                }
            };
            if token.run_until_cancelled(wait).await.is_none() {
                return Ok(());
            }
        }
    }

    /// Writes `policy`'s status: Ready, or not ready with `failure` as
    /// the reason. `Ok` without a write for kinds without a status.
    async fn write_status(
        &self,
        policy: &PolicyRef,
        failure: Option<&str>,
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
                // tests assert both).
                None => json!({"ready": true, "conditions": [{
                    "type": "WebhookConfigured", "status": "True", "reason": "Succeeded",
                    "message": "Webhook configured.", "lastTransitionTime": now,
                }, {
                    "type": "RBACPermissionsGranted", "status": "True", "reason": "Succeeded",
                    "message": "Policy is ready for reporting.", "lastTransitionTime": now,
                }]}),
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
