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

/// Runs `component` while this process holds the lease, until `token` is
/// cancelled. Each term: a fresh child token; on loss, cancel it and await
/// the component before trying to lead again.
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
                    tracing::debug!("lease {}/{}: {e}", settings.namespace, settings.name);
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
                    tracing::info!("lost the lease {}/{}", settings.namespace, settings.name);
                    break;
                }
                Err(e) => {
                    metrics.api_errors.inc();
                    // Stop leading before anyone else may take over.
                    if last_renew.elapsed() + settings.retry >= settings.duration {
                        tracing::warn!("cannot renew the lease ({e}): stepping down");
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
            return;
        }
    }
}
