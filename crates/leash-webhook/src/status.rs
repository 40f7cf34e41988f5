//! The status writer: marks each policy the webhook serves Ready in its
//! `status` subresource, as Kyverno reports readiness.
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
//! 3. A policy is written again only when its served generation changes; a
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
        let mut vpol_version: Option<String> = None;
        loop {
            let state = self.readiness.borrow_and_update().clone();
            written.retain(|p, _| state.served.contains_key(p));
            let mut failed = false;
            for (policy, generation) in &state.served {
                if written.get(policy) == Some(generation) {
                    continue;
                }
                let outcome = token
                    .run_until_cancelled(self.mark_ready(policy, &mut vpol_version))
                    .await;
                match outcome {
                    None => return Ok(()),
                    Some(Ok(())) => {
                        written.insert(policy.clone(), *generation);
                    }
                    Some(Err(Error::ApiFailed {
                        source: kube::Error::Api(s),
                        ..
                    })) if s.code == 404 => {
                        tracing::debug!(policy = %policy, "policy gone before its status was written");
                        written.insert(policy.clone(), *generation);
                    }
                    Some(Err(e)) => {
                        tracing::warn!(policy = %policy, error = %e, "writing policy status failed; will retry");
                        failed = true;
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

    async fn mark_ready(
        &self,
        policy: &PolicyRef,
        vpol_version: &mut Option<String>,
    ) -> Result<()> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let (group, version, plural, body) = match policy.kind.as_str() {
            "ClusterPolicy" | "Policy" => (
                "kyverno.io",
                "v1".to_string(),
                if policy.kind == "Policy" {
                    "policies"
                } else {
                    "clusterpolicies"
                },
                json!({"status": {"ready": true, "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Succeeded",
                    "message": "Ready", "lastTransitionTime": now,
                }]}}),
            ),
            _ => {
                if vpol_version.is_none() {
                    *vpol_version = Some(self.preferred_version("policies.kyverno.io").await);
                }
                (
                    "policies.kyverno.io",
                    vpol_version.clone().unwrap_or_else(|| "v1".into()),
                    match policy.kind.as_str() {
                        "NamespacedValidatingPolicy" => "namespacedvalidatingpolicies",
                        "GeneratingPolicy" => "generatingpolicies",
                        "NamespacedGeneratingPolicy" => "namespacedgeneratingpolicies",
                        _ => "validatingpolicies",
                    },
                    // Kyverno's two conditions, in its order (its
                    // end-to-end tests assert both).
                    json!({"status": {"conditionStatus": {"ready": true, "conditions": [{
                        "type": "WebhookConfigured", "status": "True", "reason": "Succeeded",
                        "message": "Webhook configured.", "lastTransitionTime": now,
                    }, {
                        "type": "RBACPermissionsGranted", "status": "True", "reason": "Succeeded",
                        "message": "Policy is ready for reporting.", "lastTransitionTime": now,
                    }]}}}),
                )
            }
        };
        let ar = ApiResource {
            group: group.to_string(),
            version: version.clone(),
            api_version: format!("{group}/{version}"),
            kind: policy.kind.clone(),
            plural: plural.to_string(),
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
