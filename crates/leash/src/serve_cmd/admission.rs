//! What `leash serve` adds around admission (the component itself,
//! [`leash_webhook::AdmissionComponent`], is leash-webhook's): its setup
//! errors named by the flag to fix, the webhook CA shared by replicas, and
//! the removal of a stale configuration nothing answers.
//!
//! # Invariants
//! 1. `remove_if_unanswered` races its reads, its delete and its backoff
//!    sleeps against the token; the probes of each webhook are not: a URL
//!    probe is bounded by 3 s, the EndpointSlice list only by the client's
//!    own timeouts. `shared_ca` retries until it succeeds; its caller races
//!    it against SIGINT/SIGTERM.
//! 2. No lock, atomic or task here.

use tokio_util::sync::CancellationToken;

use crate::cli_error::usage;

/// An error of the admission server's setup, naming the flag to fix and
/// keeping its cause (the OS's reason a bind failed). `tls_files`: the
/// certificate and key came from `--tls-cert`/`--tls-key`.
pub(crate) fn setup_error(e: leash_webhook::Error, tls_files: bool) -> anyhow::Error {
    use leash_webhook::Error;
    match e {
        Error::BindFailed { addr, source } => usage(format!(
            "--admission-listen {addr}: cannot listen: {source}"
        )),
        Error::TlsFileInvalid { what, .. } => {
            let flag = if what == "key" {
                "--tls-key"
            } else {
                "--tls-cert"
            };
            usage(format!("{flag}: {e}"))
        }
        // Its message names both flags.
        Error::TlsIncomplete(_) => usage(e.to_string()),
        Error::TlsConfigFailed(ref source) if tls_files => {
            usage(format!("--tls-cert/--tls-key: {e}: {source}"))
        }
        e => anyhow::Error::new(e).context("starting the admission webhook"),
    }
}

/// The shared webhook CA from the Secret `namespace/name` (created at the
/// first start), retried with backoff while the API server cannot be
/// reached or refuses; each failure is logged at warn, naming the Secret.
pub(crate) async fn shared_ca(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> leash_webhook::CaMaterial {
    let mut delay = std::time::Duration::from_millis(500);
    loop {
        match leash_webhook::shared_ca(client, namespace, name).await {
            Ok(ca) => return ca,
            Err(e) => {
                let why = match std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<kube::Error>())
                {
                    Some(k) => leash_controller::watch::client_error_reason(k),
                    None => e.to_string(),
                };
                tracing::warn!("{e}: {why}; retrying in {delay:?}");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
    }
}

/// Deletes the ValidatingWebhookConfiguration `name` that leash wrote, if
/// none of its webhooks can be answered: a URL where nothing accepts a
/// connection, a Service with no ready endpoint. One that something
/// answers (another replica serving admission) is left alone.
pub(crate) async fn remove_if_unanswered(
    client: &kube::Client,
    name: &str,
    token: &CancellationToken,
) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: kube::Api<ValidatingWebhookConfiguration> = kube::Api::all(client.clone());
    let mut delay = std::time::Duration::from_millis(500);
    let current = loop {
        match token.run_until_cancelled(api.get_opt(name)).await {
            None => return,
            Some(Ok(c)) => break c,
            Some(Err(e)) => tracing::warn!(
                "reading ValidatingWebhookConfiguration {name} (to remove it if stale): {}; retrying in {delay:?}",
                leash_controller::watch::client_error_reason(&e)
            ),
        }
        if token
            .run_until_cancelled(tokio::time::sleep(delay))
            .await
            .is_none()
        {
            return;
        }
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
    };
    let Some(current) = current else { return };
    let ours = current
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("webhook.kyverno.io/managed-by"))
        .is_some_and(|v| v == "leash");
    if !ours {
        return;
    }
    for hook in current.webhooks.iter().flatten() {
        let answered = match (&hook.client_config.url, &hook.client_config.service) {
            (Some(url), _) => url_accepts(url).await,
            (None, Some(svc)) => service_has_endpoints(client, &svc.namespace, &svc.name).await,
            (None, None) => false,
        };
        if answered {
            tracing::info!(
                "ValidatingWebhookConfiguration {name} is served elsewhere (webhook {}); left in place",
                hook.name
            );
            return;
        }
    }
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: current.metadata.resource_version.clone(),
            uid: None,
        }),
        ..Default::default()
    };
    match token.run_until_cancelled(api.delete(name, &params)).await {
        Some(Ok(_)) => tracing::warn!(
            "removed ValidatingWebhookConfiguration {name}: admission is not a component of this run and nothing answers its webhooks, which would fail every request they match"
        ),
        Some(Err(e)) => tracing::warn!(
            "removing the stale ValidatingWebhookConfiguration {name}: {}",
            leash_controller::watch::client_error_reason(&e)
        ),
        None => {}
    }
}

/// Whether the webhook at `url` may be answered. Only a loopback URL
/// (`127.0.0.0/8`, `::1`, `localhost`) is judged, by whether something
/// accepts a TCP connection there within 3 s: from this host that is
/// proof. Any other host counts as answered (never delete on a doubt: a
/// replica this host cannot reach may be serving it, and deleting its
/// configuration would admit what its policies deny), and is not dialled.
async fn url_accepts(url: &str) -> bool {
    let Some((host, port)) = loopback_target(url) else {
        return true;
    };
    matches!(
        tokio::time::timeout(
            std::time::Duration::from_secs(3),
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await,
        Ok(Ok(_))
    )
}

/// The host and port of a loopback `https://` URL; None for any other.
fn loopback_target(url: &str) -> Option<(String, u16)> {
    let uri = url.parse::<http::Uri>().ok()?;
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback.then(|| (host.to_string(), uri.port_u16().unwrap_or(443)))
}

/// Whether the Service has a ready endpoint (EndpointSlices); an error
/// reading them counts as "answered" (never delete on a doubt).
async fn service_has_endpoints(client: &kube::Client, namespace: &str, name: &str) -> bool {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let api: kube::Api<EndpointSlice> = kube::Api::namespaced(client.clone(), namespace);
    let params =
        kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={name}"));
    match api.list(&params).await {
        Ok(list) => list.items.iter().any(|slice| {
            slice
                .endpoints
                .iter()
                .flatten()
                .any(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        }),
        Err(e) => {
            tracing::warn!(
                "reading the endpoints of Service {namespace}/{name}: {}; the webhook configuration is left in place",
                leash_controller::watch::client_error_reason(&e)
            );
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run without admission judges only loopback URLs (from this host a
    /// refused connection there proves nothing serves them); any other
    /// host is left alone, undialled.
    #[test]
    fn only_loopback_webhook_urls_are_judged() {
        assert_eq!(
            loopback_target("https://127.0.0.1:9443/validate/fail"),
            Some(("127.0.0.1".to_string(), 9443))
        );
        assert_eq!(
            loopback_target("https://[::1]/validate"),
            Some(("::1".to_string(), 443))
        );
        assert_eq!(
            loopback_target("https://localhost:8443/v"),
            Some(("localhost".to_string(), 8443))
        );
        assert_eq!(loopback_target("https://10.0.0.7:9443/validate"), None);
        assert_eq!(loopback_target("https://leash.example.com/validate"), None);
        assert_eq!(loopback_target("not a url"), None);
    }

    #[tokio::test]
    async fn a_remote_url_counts_as_answered() {
        assert!(url_accepts("https://10.0.0.7:9443/validate").await);
    }
}
