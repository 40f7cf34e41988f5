//! leash's own namespaces must exist (issue 38): `--config-namespace`
//! always (UpdateRequests, the webhook CA Secret and Kyverno's ConfigMap
//! live there), `--lease-namespace` with `--leader-elect`.
//!
//! Without them nothing fails at start, yet every generate trigger is
//! denied and the Lease is never taken. So `serve` reads them when it
//! starts: one that does not exist (404) is logged at warn, naming the
//! namespace and the flag, and `/readyz` answers 503 with the same reason
//! until it exists (checked again every [`MISSING_RECHECK`]). `serve`
//! keeps running: the namespace may be created after it started. Any
//! other answer (403, 5xx, no answer) is logged at warn and retried with a
//! backoff; it does not hold readiness.
//!
//! # Invariants
//! 1. [`NamespaceCheck::run`] is the only task; it ends once every
//!    namespace was found, or when its token is cancelled (every read is
//!    raced against it and bounded by [`READ_TIMEOUT`]).
//! 2. What `/readyz` reports is replaced whole through a `watch` channel.

use std::convert::Infallible;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often a missing namespace is read again.
const MISSING_RECHECK: Duration = Duration::from_secs(2);
/// How often the missing-namespace warning is repeated while it lasts.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Bound of one read of a namespace.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Backoff after an answer that says nothing about the namespace.
const ERROR_BACKOFF: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(30));

/// One namespace leash needs and the flags that name it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Needed {
    name: String,
    flags: Vec<&'static str>,
}

impl Needed {
    fn flags(&self) -> String {
        self.flags.join(", ")
    }

    /// What is logged and what `/readyz` says while it does not exist.
    fn missing(&self) -> String {
        let name = &self.name;
        let point = self.flags.join(" and ");
        format!(
            "namespace {name:?} ({}) does not exist: create it (kubectl create namespace {name}) or point {point} at leash's namespace",
            self.flags()
        )
    }
}

/// Reads leash's namespaces until each exists; see the module docs.
/// `new` starts nothing.
pub(crate) struct NamespaceCheck {
    client: kube::Client,
    needed: Vec<Needed>,
    missing: watch::Sender<Option<String>>,
}

impl std::fmt::Debug for NamespaceCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceCheck")
            .field("needed", &self.needed)
            .finish_non_exhaustive()
    }
}

impl NamespaceCheck {
    /// `config_namespace` is always needed, `lease_namespace` when given
    /// (with `--leader-elect`).
    pub(crate) fn new(
        client: kube::Client,
        config_namespace: &str,
        lease_namespace: Option<&str>,
    ) -> NamespaceCheck {
        let mut needed = vec![Needed {
            name: config_namespace.to_string(),
            flags: vec!["--config-namespace"],
        }];
        if let Some(lease) = lease_namespace {
            match needed.iter_mut().find(|n| n.name == lease) {
                Some(n) => n.flags.push("--lease-namespace"),
                None => needed.push(Needed {
                    name: lease.to_string(),
                    flags: vec!["--lease-namespace"],
                }),
            }
        }
        NamespaceCheck {
            client,
            needed,
            missing: watch::Sender::new(None),
        }
    }

    /// Why leash is not ready for want of a namespace (None: none is known
    /// to be missing).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<String>> {
        self.missing.subscribe()
    }

    /// Reads each namespace until all exist or `token` is cancelled.
    ///
    /// # Cancel safety
    /// Cancel safe; cancel the token to stop it.
    pub(crate) async fn run(self, token: CancellationToken) -> Result<(), Infallible> {
        let api: kube::Api<Namespace> = kube::Api::all(self.client);
        let mut pending = self.needed;
        let mut backoff = ERROR_BACKOFF.0;
        // When each missing namespace was last warned about.
        let mut warned: Vec<(String, Instant)> = Vec::new();
        while !pending.is_empty() {
            let mut missing = Vec::new();
            let mut unknown = false;
            let mut still = Vec::new();
            for n in pending {
                let read = tokio::time::timeout(READ_TIMEOUT, api.get_opt(&n.name));
                let Some(answer) = token.run_until_cancelled(read).await else {
                    return Ok(());
                };
                match answer {
                    Ok(Ok(Some(_))) => {
                        if warned.iter().any(|(w, _)| *w == n.name) {
                            tracing::info!("namespace {:?} ({}) exists now", n.name, n.flags());
                        }
                        continue;
                    }
                    Ok(Ok(None)) => missing.push(n.clone()),
                    Ok(Err(e)) => {
                        unknown = true;
                        tracing::warn!(
                            "cannot read namespace {:?} ({}) to check that it exists: {}; retrying in {backoff:?}",
                            n.name,
                            n.flags(),
                            leash_controller::watch::client_error_reason(&e)
                        );
                    }
                    Err(_) => {
                        unknown = true;
                        tracing::warn!(
                            "cannot read namespace {:?} ({}) to check that it exists: no answer within {READ_TIMEOUT:?}; retrying in {backoff:?}",
                            n.name,
                            n.flags()
                        );
                    }
                }
                still.push(n);
            }
            pending = still;
            for n in &missing {
                let due = match warned.iter_mut().find(|(w, _)| *w == n.name) {
                    Some((_, at)) if at.elapsed() < WARN_EVERY => false,
                    Some((_, at)) => {
                        *at = Instant::now();
                        true
                    }
                    None => {
                        warned.push((n.name.clone(), Instant::now()));
                        true
                    }
                };
                if due {
                    tracing::warn!("{}; /readyz answers 503 until it exists", n.missing());
                }
            }
            let reason = (!missing.is_empty()).then(|| {
                missing
                    .iter()
                    .map(Needed::missing)
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            self.missing.send_replace(reason);
            if pending.is_empty() {
                break;
            }
            let wait = if unknown {
                let wait = backoff;
                backoff = (backoff * 2).min(ERROR_BACKOFF.1);
                wait
            } else {
                backoff = ERROR_BACKOFF.0;
                MISSING_RECHECK
            };
            // A missing namespace is noticed soon after it is created.
            let wait = if missing.is_empty() {
                wait
            } else {
                wait.min(MISSING_RECHECK)
            };
            if token
                .run_until_cancelled(tokio::time::sleep(wait))
                .await
                .is_none()
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn needed(config_namespace: &str, lease_namespace: Option<&str>) -> Vec<Needed> {
        // Nothing is read: any URL builds the client.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        NamespaceCheck::new(client, config_namespace, lease_namespace).needed
    }

    /// One namespace named by both flags is read once, and the reason names
    /// both flags.
    #[tokio::test]
    async fn the_reason_names_the_namespace_and_its_flags() {
        let both = needed("kyverno", Some("kyverno"));
        assert_eq!(both.len(), 1);
        assert_eq!(
            both[0].missing(),
            "namespace \"kyverno\" (--config-namespace, --lease-namespace) does not exist: create it (kubectl create namespace kyverno) or point --config-namespace and --lease-namespace at leash's namespace"
        );
        let two = needed("kyverno", Some("leases"));
        assert_eq!(two.len(), 2);
        assert_eq!(
            two[1].missing(),
            "namespace \"leases\" (--lease-namespace) does not exist: create it (kubectl create namespace leases) or point --lease-namespace at leash's namespace"
        );
        assert_eq!(needed("kyverno", None).len(), 1);
    }
}
