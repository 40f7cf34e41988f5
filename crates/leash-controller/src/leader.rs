//! Leader election over a `coordination.k8s.io/v1` Lease.
//!
//! Why not a crate: `kube-lease-manager` (kube 5) decides ownership through
//! server-side apply field conflicts and its automatic mode spawns a task
//! nobody owns; `kube-leader-election` pins kube 3. This elector is
//! optimistic concurrency on the Lease's resourceVersion (a replace with a
//! stale version gets 409), which every API server (the sandbox included)
//! implements, and it runs in its caller's task.
//!
//! [`lead`] runs a component only while this process holds the lease:
//! each term gets a fresh child token; losing the lease (taken by another
//! holder, or not renewed within its duration) cancels that token and
//! waits for the component to return before anything else happens (seed
//! 000: Kyverno re-ran `NewController` on every leadership change and
//! leaked a cleanup loop each time).
//!
//! When the term ends because `lead`'s token was cancelled (a clean
//! shutdown), the lease is released once the component has returned, as
//! client-go's `ReleaseOnCancel`: another replica takes it at its next
//! retry instead of waiting out the lease duration. Releasing is bounded by
//! [`RELEASE_TIMEOUT`], so an API server that does not answer cannot hold
//! shutdown.
//!
//! Every failure to take or renew the lease is logged at warn, naming the
//! Lease and the API server's reason (a missing namespace, missing RBAC).
//!
//! # Invariants
//! 1. [`lead`] runs in its caller's task and spawns nothing: a term's
//!    component is a future it polls itself, on a child token of its own
//!    token; the term ends by cancelling that child token and awaiting the
//!    future, and only then is the lease released or taken again, so two
//!    terms never overlap in one process.
//! 2. No lock and no atomic: the lease's state is the loop's locals, and
//!    the leader gauge is set from that loop alone.
//! 3. Every API call is raced against the token, except the release after
//!    cancellation, which is bounded by [`RELEASE_TIMEOUT`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::watch::client_error_reason;

/// How long releasing the lease at shutdown may take.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This process's identity (holderIdentity).
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub duration: Duration,
    /// How often the holder renews, and others retry.
    pub retry: Duration,
}

impl LeaseSettings {
    /// Kyverno's defaults: 15 s lease, renew every 2 s.
    pub fn new(name: &str, namespace: &str, identity: &str) -> LeaseSettings {
        LeaseSettings {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
            retry: Duration::from_secs(2),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn expired(spec: &LeaseSpec, default: Duration) -> bool {
    let duration = spec
        .lease_duration_seconds
        .map_or(default, |s| Duration::from_secs(s.max(0) as u64));
    match &spec.renew_time {
        None => true,
        Some(MicroTime(t)) => {
            let age = Timestamp::now().duration_since(*t);
            age.as_secs_f64() > duration.as_secs_f64()
        }
    }
}

/// One attempt to take or renew the lease: `Ok(true)` if this process
/// holds it afterwards.
pub async fn try_acquire(api: &Api<Lease>, s: &LeaseSettings) -> Result<bool, kube::Error> {
    let me = Some(s.identity.clone());
    let spec = |transitions: i32, acquire: Option<MicroTime>| LeaseSpec {
        holder_identity: me.clone(),
        lease_duration_seconds: Some(s.duration.as_secs() as i32),
        acquire_time: acquire,
        renew_time: Some(now()),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    match api.get_opt(&s.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    namespace: Some(s.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(spec(0, Some(now()))),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let current = lease.spec.clone().unwrap_or_default();
            let mine = current.holder_identity == me;
            let free = current.holder_identity.as_deref().is_none_or(str::is_empty)
                || expired(&current, s.duration);
            if !mine && !free {
                return Ok(false);
            }
            let transitions = current.lease_transitions.unwrap_or(0) + i32::from(!mine);
            let acquire = if mine {
                current.acquire_time.clone()
            } else {
                Some(now())
            };
            lease.spec = Some(spec(transitions, acquire));
            // The resourceVersion read above makes this a compare-and-swap.
            match api.replace(&s.name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// Gives the lease up if this process still holds it: holderIdentity
/// cleared, leaseDurationSeconds 1 and renewTime now (client-go's
/// `ReleaseOnCancel`), written with the resourceVersion just read, so a
/// lease another replica took meanwhile is left alone. `Ok(true)` if this
/// call released it; `Ok(false)` if it was not (or no longer) held here.
///
/// Call it only once the component of the term has returned: another
/// replica may start leading as soon as it is written.
///
/// # Cancel safety
/// Cancel safe: dropped before the replace, nothing is written; after it,
/// the lease is released.
pub async fn release(api: &Api<Lease>, s: &LeaseSettings) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(&s.name).await? else {
        return Ok(false);
    };
    let current = lease.spec.clone().unwrap_or_default();
    if current.holder_identity.as_deref() != Some(s.identity.as_str()) {
        return Ok(false);
    }
    lease.spec = Some(LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(now()),
        ..current
    });
    match api.replace(&s.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Runs `component` while this process holds the lease, until `token` is
/// cancelled. Each term: a fresh child token; on loss, cancel it and await
/// the component before trying to lead again. On cancellation the lease is
/// released (see [`release`]) after the component returned, within
/// [`RELEASE_TIMEOUT`].
pub async fn lead<F, Fut>(
    client: kube::Client,
    settings: LeaseSettings,
    metrics: Arc<Metrics>,
    token: CancellationToken,
    mut component: F,
) where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = ()>,
{
    let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
    loop {
        // Follower: retry until we hold the lease.
        loop {
            let attempt = tokio::select! {
                _ = token.cancelled() => return,
                r = try_acquire(&api, &settings) => r,
            };
            match attempt {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    metrics.api_errors.inc();
                    tracing::warn!(
                        "cannot take the Lease {}/{}: {}",
                        settings.namespace,
                        settings.name,
                        client_error_reason(&e)
                    );
                }
            }
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(settings.retry) => {}
            }
        }
        tracing::info!("leading (lease {}/{})", settings.namespace, settings.name);
        metrics.leader.set(1);
        metrics.leader_terms.inc();
        let term = token.child_token();
        let run = component(term.clone());
        tokio::pin!(run);
        let mut last_renew = tokio::time::Instant::now();
        let mut finished = false;
        loop {
            tokio::select! {
                _ = &mut run => { finished = true; break; }
                _ = tokio::time::sleep(settings.retry) => {}
            }
            let renewed = tokio::select! {
                _ = token.cancelled() => break,
                r = try_acquire(&api, &settings) => r,
            };
            match renewed {
                Ok(true) => last_renew = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(
                        "cannot renew the Lease {}/{}: another replica took it or wrote it first; stepping down",
                        settings.namespace,
                        settings.name
                    );
                    break;
                }
                Err(e) => {
                    metrics.api_errors.inc();
                    // Stop leading before anyone else may take over.
                    let step_down = last_renew.elapsed() + settings.retry >= settings.duration;
                    tracing::warn!(
                        "cannot renew the Lease {}/{}: {}{}",
                        settings.namespace,
                        settings.name,
                        client_error_reason(&e),
                        if step_down { "; stepping down" } else { "" }
                    );
                    if step_down {
                        break;
                    }
                }
            }
        }
        term.cancel();
        if !finished {
            run.await;
        }
        metrics.leader.set(0);
        if token.is_cancelled() {
            // Shutdown work after cancellation: bounded by its own timeout,
            // not raced against the (cancelled) token.
            match tokio::time::timeout(RELEASE_TIMEOUT, release(&api, &settings)).await {
                Ok(Ok(true)) => tracing::info!(
                    "released the Lease {}/{}",
                    settings.namespace,
                    settings.name
                ),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(
                    "cannot release the Lease {}/{}: {}; another replica takes it when it expires",
                    settings.namespace,
                    settings.name,
                    client_error_reason(&e)
                ),
                Err(_) => tracing::warn!(
                    "cannot release the Lease {}/{}: no answer within {RELEASE_TIMEOUT:?}; another replica takes it when it expires",
                    settings.namespace,
                    settings.name
                ),
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use leash_runtime::Scope;
    use leash_sandbox::{Sandbox, SandboxConfig};
    use serde_json::json;

    use super::*;

    async fn sandbox() -> Sandbox {
        Sandbox::start(SandboxConfig {
            objects: vec![
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}),
            ],
            ..SandboxConfig::default()
        })
        .await
        .unwrap()
    }

    fn api(sb: &Sandbox) -> Api<Lease> {
        let client =
            leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
        Api::namespaced(client, "kyverno")
    }

    fn holder(sb: &Sandbox) -> serde_json::Value {
        sb.store()
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                Some("kyverno"),
                "leash-reports",
            )
            .unwrap()["spec"]["holderIdentity"]
            .clone()
    }

    /// Issue 38: only the holder releases, and a released lease is free to
    /// take at once (no wait for its duration).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn release_frees_the_lease_only_for_its_holder() {
        let sb = sandbox().await;
        let api = api(&sb);
        let a = LeaseSettings::new("leash-reports", "kyverno", "a");
        let b = LeaseSettings::new("leash-reports", "kyverno", "b");
        assert!(try_acquire(&api, &a).await.unwrap());
        assert!(!try_acquire(&api, &b).await.unwrap(), "a holds it");
        assert!(!release(&api, &b).await.unwrap(), "b does not hold it");
        assert_eq!(holder(&sb), json!("a"));
        assert!(release(&api, &a).await.unwrap());
        assert_eq!(holder(&sb), serde_json::Value::Null);
        assert!(
            try_acquire(&api, &b).await.unwrap(),
            "a released lease is taken at once"
        );
        assert_eq!(holder(&sb), json!("b"));
        sb.shutdown().await.unwrap();
    }

    /// Issue 38: when `lead` is cancelled, the component returns first and
    /// then the lease is released.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lead_releases_the_lease_after_the_component_returned() {
        let sb = sandbox().await;
        let client =
            leash_loader::client_from_config(kube::Config::new(sb.url().parse().unwrap())).unwrap();
        let metrics = Arc::new(Metrics::new(
            &mut prometheus_client::registry::Registry::default(),
        ));
        let root = Scope::new();
        // The holder the component saw as it returned (None: not returned).
        let held_at_end = Arc::new(std::sync::Mutex::new(None));
        {
            let (metrics, token, held_at_end) =
                (metrics.clone(), root.token().clone(), held_at_end.clone());
            let store = sb.store().clone();
            let settings = LeaseSettings::new("leash-reports", "kyverno", "me");
            root.spawn("lead", async move {
                lead(client, settings, metrics, token, move |term| {
                    let (held_at_end, store) = (held_at_end.clone(), store.clone());
                    async move {
                        term.cancelled().await;
                        let lease = store
                            .get(
                                "coordination.k8s.io/v1",
                                "Lease",
                                Some("kyverno"),
                                "leash-reports",
                            )
                            .unwrap();
                        *held_at_end.lock().unwrap() =
                            Some(lease["spec"]["holderIdentity"].clone());
                    }
                })
                .await;
                Ok::<(), std::convert::Infallible>(())
            });
        }
        let start = std::time::Instant::now();
        while metrics.leader.get() != 1 {
            assert!(start.elapsed() < Duration::from_secs(20), "never led");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(holder(&sb), json!("me"));
        root.cancel();
        tokio::time::timeout(Duration::from_secs(20), root.shutdown())
            .await
            .expect("lead returns")
            .unwrap();
        assert_eq!(
            held_at_end.lock().unwrap().clone(),
            Some(json!("me")),
            "still held while the component ran"
        );
        assert_eq!(holder(&sb), serde_json::Value::Null, "released");
        sb.shutdown().await.unwrap();
    }
}
