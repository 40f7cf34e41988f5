//! The admission chain: the webhooks of the stored `MutatingWebhookConfiguration`
//! and `ValidatingWebhookConfiguration` objects, called as kube-apiserver calls
//! them on create, update and delete.
//!
//! Mutating webhooks run one after another (configurations by name, webhooks in
//! order), each JSON Patch applied before the next is called, and those with
//! `reinvocationPolicy: IfNeeded` once more when a later one changed the object;
//! then the validating webhooks run concurrently. A denial answers the client with the webhook's
//! Status; a call that fails (down, slow, TLS, garbage) denies with 500
//! `InternalError` under `failurePolicy: Fail` and is skipped under `Ignore`.
//!
//! # Invariants
//! 1. No store lock is held while a webhook is called: the configurations and the
//!    namespace's labels are read through synchronous store calls (whole snapshots
//!    of persistent maps) before any await.
//! 2. At most [`MAX_IN_FLIGHT`] webhook calls are in flight across the server (one
//!    semaphore permit per call); the wait for a permit counts toward the call's
//!    `timeoutSeconds`, so a saturated server fails calls instead of queueing forever.
//! 3. Nothing is spawned: concurrent validating calls are futures joined inside the
//!    request's own future, so they end when the request does. Every call is raced
//!    against its timeout and against the server's cancellation token.
//! 4. Admission never intercepts the `admissionregistration.k8s.io` kinds (as
//!    kube-apiserver never sends webhook configurations to webhooks).

mod client;
mod review;
mod webhook;
mod writes;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::object::json_patch;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::Store;
use webhook::{Webhook, labels_of};

pub(crate) use writes::DeleteRequest;

/// Webhook calls in flight at once across the server.
pub(crate) const MAX_IN_FLIGHT: usize = 64;

const GROUP: &str = "admissionregistration.k8s.io";
const MUTATING: &str = "mutatingwebhookconfigurations";
const VALIDATING: &str = "validatingwebhookconfigurations";

/// What a request does, in admission's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    fn options_kind(self) -> &'static str {
        match self {
            Operation::Create => "CreateOptions",
            Operation::Update => "UpdateOptions",
            Operation::Delete => "DeleteOptions",
        }
    }
}

/// One request as the webhooks see it.
#[derive(Debug, Clone)]
pub(crate) struct Attributes {
    pub(crate) resource: Arc<ResourceType>,
    /// `status`, or empty.
    pub(crate) sub_resource: String,
    pub(crate) operation: Operation,
    pub(crate) name: String,
    /// Empty for cluster-scoped objects.
    pub(crate) namespace: String,
    /// The object as it would be stored (CREATE, UPDATE); changed by mutating webhooks.
    pub(crate) object: Option<Value>,
    /// The stored object (UPDATE, DELETE).
    pub(crate) old_object: Option<Value>,
    pub(crate) dry_run: bool,
    /// CreateOptions, UpdateOptions or DeleteOptions.
    pub(crate) options: Value,
}

/// The options object of `op` (with `dryRun: ["All"]` for a dry run), merged over
/// what the client sent (DeleteOptions' body).
fn options(op: Operation, dry_run: bool, sent: Option<&Value>) -> Value {
    let mut o = sent
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    o["kind"] = json!(op.options_kind());
    o["apiVersion"] = json!("meta.k8s.io/v1");
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    o
}

/// The admission chain of one sandbox.
#[derive(Debug)]
pub(crate) struct Admission {
    /// `namespace/name` of a service → the base URL it is reached at.
    services: HashMap<String, String>,
    permits: Semaphore,
    cancel: CancellationToken,
    /// Webhook connections kept alive between calls.
    pool: client::Pool,
    /// The webhooks of each configuration kind, parsed.
    parsed: Mutex<HashMap<&'static str, Parsed>>,
}

/// Parsed webhooks, and the configurations (name, resourceVersion) they come from.
#[derive(Debug)]
struct Parsed {
    from: Vec<(String, u64)>,
    hooks: Arc<[Webhook]>,
}

impl Admission {
    /// A chain resolving service references through `services`; its calls end when
    /// `cancel` is cancelled.
    pub(crate) fn new(services: HashMap<String, String>, cancel: CancellationToken) -> Self {
        Self {
            services,
            permits: Semaphore::new(MAX_IN_FLIGHT),
            cancel,
            pool: client::Pool::default(),
            parsed: Mutex::default(),
        }
    }

    /// Whether writes of `rt` go through the chain now: it is not a webhook
    /// configuration kind and some webhook configuration is stored. (A request that
    /// starts while a configuration is being created may or may not see it, as in
    /// kube-apiserver, whose configurations are read from an informer.)
    pub(crate) fn intercepts(store: &Store, rt: &ResourceType) -> bool {
        if rt.group == GROUP {
            return false;
        }
        let registry = store.registry();
        [MUTATING, VALIDATING].iter().any(|plural| {
            registry
                .by_path(GROUP, "v1", plural)
                .is_some_and(|t| !store.snapshot(&t).0.is_empty())
        })
    }

    /// The webhooks of the stored configurations of `plural`, by configuration
    /// name, then in order: parsed (and their `matchConditions` compiled) once
    /// per version of the configurations.
    fn webhooks(&self, store: &Store, plural: &'static str) -> Arc<[Webhook]> {
        let Some(rt) = store.registry().by_path(GROUP, "v1", plural) else {
            return Arc::new([]);
        };
        let (configs, _) = store.snapshot(&rt);
        let from: Vec<(String, u64)> = configs.values().map(|e| (e.name.clone(), e.rv)).collect();
        let parsed = |p: &HashMap<&str, Parsed>| {
            p.get(plural)
                .filter(|p| p.from == from)
                .map(|p| p.hooks.clone())
        };
        if let Some(hooks) = parsed(&self.parsed.lock().unwrap_or_else(PoisonError::into_inner)) {
            return hooks;
        }
        let hooks: Arc<[Webhook]> = configs
            .values()
            .flat_map(|e| webhook::parse_configuration(&e.value()))
            .collect();
        let mut cache = self.parsed.lock().unwrap_or_else(PoisonError::into_inner);
        cache.insert(
            plural,
            Parsed {
                from,
                hooks: hooks.clone(),
            },
        );
        hooks
    }

    /// The labels the namespaceSelector is matched against: a namespace's own, the
    /// namespace's of a namespaced object, none for other cluster-scoped objects.
    fn namespace_labels(store: &Store, a: &Attributes) -> Option<BTreeMap<String, String>> {
        if a.resource.group.is_empty() && a.resource.plural == "namespaces" {
            return Some(labels_of(a.object.as_ref().or(a.old_object.as_ref())));
        }
        if a.namespace.is_empty() {
            return None;
        }
        let ns = store.get("v1", "Namespace", None, &a.namespace).ok();
        Some(labels_of(ns.as_ref()))
    }

    fn matching(&self, store: &Store, plural: &'static str, a: &Attributes) -> Vec<Webhook> {
        let ns_labels = Self::namespace_labels(store, a);
        self.webhooks(store, plural)
            .iter()
            .filter(|h| h.matches(a, ns_labels.as_ref()))
            .cloned()
            .collect()
    }

    /// Runs the chain on `a`: the mutating webhooks (which may change `a.object`),
    /// then the validating ones. Warnings of every webhook called are appended to
    /// `warnings`, also when the request is denied.
    ///
    /// # Errors
    /// The Status the client gets: the webhook's denial, 500 InternalError for a
    /// failed call under `failurePolicy: Fail`, 400 for a dry run of a webhook
    /// with side effects, 503 when the server shuts down.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it abandons the calls in flight (nothing is stored).
    pub(crate) async fn admit(
        &self,
        store: &Store,
        a: &mut Attributes,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        // kube-apiserver's reinvocation: a webhook with `reinvocationPolicy:
        // IfNeeded` is called once more when a later webhook changed the
        // object after its call (its own change does not count); one extra
        // round at most.
        let mutating = self.matching(store, MUTATING, a);
        let mut invoked = Vec::new();
        let mut reinvoke = vec![false; mutating.len()];
        for (i, hook) in mutating.iter().enumerate() {
            let before = a.object.clone();
            self.mutate(hook, a, warnings).await?;
            if a.object != before {
                for &j in &invoked {
                    reinvoke[j] = true;
                }
            }
            if hook.reinvoke_if_needed {
                invoked.push(i);
            }
        }
        for (hook, _) in mutating.iter().zip(&reinvoke).filter(|(_, r)| **r) {
            self.mutate(hook, a, warnings).await?;
        }
        let validating = self.matching(store, VALIDATING, a);
        if validating.is_empty() {
            return Ok(());
        }
        let a = &*a;
        let results =
            futures::future::join_all(validating.iter().map(|h| self.validate(h, a))).await;
        let mut first_error = None;
        for (w, result) in results {
            warnings.extend(w);
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn mutate(
        &self,
        hook: &Webhook,
        a: &mut Attributes,
        warnings: &mut Vec<String>,
    ) -> Result<(), ApiError> {
        let verdict = match self.call(hook, a, true).await {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(()),
            Err(e) => return Err(e),
        };
        warnings.extend(verdict.warnings);
        if !verdict.allowed {
            return Err(review::denial(&hook.name, verdict.status.as_ref()));
        }
        let Some(patch) = verdict.patch else {
            return Ok(());
        };
        let Some(object) = a.object.as_mut() else {
            return Err(review::internal(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            )));
        };
        let mut patched = object.clone();
        json_patch(&mut patched, &patch).map_err(|e| review::internal(e.message().to_string()))?;
        *object = patched;
        Ok(())
    }

    async fn validate(
        &self,
        hook: &Webhook,
        a: &Attributes,
    ) -> (Vec<String>, Result<(), ApiError>) {
        match self.call(hook, a, false).await {
            Ok(None) => (Vec::new(), Ok(())),
            Ok(Some(v)) if v.allowed => (v.warnings, Ok(())),
            Ok(Some(v)) => (
                v.warnings,
                Err(review::denial(&hook.name, v.status.as_ref())),
            ),
            Err(e) => (Vec::new(), Err(e)),
        }
    }

    /// Calls `hook` for `a`. `Ok(None)`: the webhook is not called (its
    /// `matchConditions` do not hold), or the call failed and the failure policy
    /// is Ignore (the request goes on as if the webhook had allowed it).
    async fn call(
        &self,
        hook: &Webhook,
        a: &Attributes,
        mutating: bool,
    ) -> Result<Option<review::Verdict>, ApiError> {
        let uid = review::fresh_uid();
        let review = review::request(a, &uid);
        match hook.conditions_hold(&review["request"]) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(why) if hook.ignore_failures => {
                tracing::warn!(webhook = %hook.name, %why, "sandbox: matchConditions failed, skipping the webhook");
                return Ok(None);
            }
            Err(why) => {
                let reason = format!("failed evaluating matchConditions: {why}");
                return Err(review::call_failed(&hook.name, &reason));
            }
        }
        if a.dry_run && !hook.dry_run_safe {
            return Err(ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            )));
        }
        match self.exchange(hook, review, &uid, mutating).await {
            Ok(v) => Ok(Some(v)),
            Err(CallError::ShuttingDown) => Err(ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is shutting down",
            )),
            Err(CallError::Failed(reason)) if hook.ignore_failures => {
                tracing::warn!(webhook = %hook.name, %reason, "sandbox: failed calling webhook, failing open");
                Ok(None)
            }
            Err(CallError::Failed(reason)) => Err(review::call_failed(&hook.name, &reason)),
        }
    }

    async fn exchange(
        &self,
        hook: &Webhook,
        review: Value,
        uid: &str,
        mutating: bool,
    ) -> Result<review::Verdict, CallError> {
        let rest_client = |e: String| CallError::Failed(format!("could not get REST client: {e}"));
        let ep =
            client::endpoint(&hook.target, &self.services, hook.timeout).map_err(rest_client)?;
        let tls = client::tls_config(&hook.ca_bundle).map_err(rest_client)?;
        // `to_vec`, not `to_string`: Display goes through the formatter per token.
        let body = Bytes::from(serde_json::to_vec(&review).unwrap_or_default());
        let bounded = tokio::time::timeout(hook.timeout, async {
            // Closed never: the semaphore lives as long as `self`.
            let _permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| "the webhook client is closed".to_string())?;
            client::post(&self.pool, &ep, tls, body).await
        });
        let answer = match self.cancel.run_until_cancelled(bounded).await {
            None => return Err(CallError::ShuttingDown),
            Some(Err(_elapsed)) => {
                return Err(CallError::Failed(format!(
                    "failed to call webhook: Post \"{}\": context deadline exceeded",
                    ep.url
                )));
            }
            Some(Ok(Err(why))) => {
                return Err(CallError::Failed(format!("failed to call webhook: {why}")));
            }
            Some(Ok(Ok(bytes))) => bytes,
        };
        let review: Value = serde_json::from_slice(&answer).map_err(|e| {
            CallError::Failed(format!(
                "failed to call webhook: the response from {:?} is not JSON: {e}",
                ep.url
            ))
        })?;
        review::verify(&review, uid, mutating).map_err(|e| CallError::Failed(e.reason()))
    }
}

#[derive(Debug)]
enum CallError {
    /// kube-apiserver's `ErrCallingWebhook` (subject to the failure policy).
    Failed(String),
    ShuttingDown,
}
