//! Connecting: kubeconfig, a server URL, or an in-process sandbox.

use anyhow::Context as _;
use kube::config::{KubeConfigOptions, Kubeconfig};
use leash_sandbox::generate::GenerateSpec;
use leash_sandbox::{Sandbox, SandboxConfig};

use super::args::Connection;
use crate::cli_error;

/// Namespaces `--sandbox` spreads its generated objects over.
const SANDBOX_NAMESPACES: usize = 4;

/// The connection that `--server`/`--token`/`--insecure-skip-tls-verify`
/// or `--kubeconfig`/`--context` describe (usage errors name the flag).
pub(crate) fn remote_connection(
    server: Option<&str>,
    token: Option<String>,
    insecure: bool,
    kubeconfig: Option<std::path::PathBuf>,
    context: Option<String>,
) -> anyhow::Result<Connection> {
    if let Some(server) = server {
        let url: http::Uri = server
            .parse()
            .map_err(|e| cli_error::usage(format!("invalid --server URL {server:?}: {e}")))?;
        if url.scheme().is_none() || url.host().is_none() {
            return Err(cli_error::usage(format!(
                "invalid --server URL {server:?}: expected http(s)://HOST[:PORT]"
            )));
        }
        return Ok(Connection::Server {
            url,
            token,
            insecure,
        });
    }
    Ok(Connection::Kubeconfig {
        path: kubeconfig,
        context,
        token,
        insecure,
    })
}

/// A client, and the sandbox it talks to if `--sandbox` started one.
pub(crate) struct Connected {
    pub(crate) client: kube::Client,
    /// Shut down by the caller after the load.
    pub(crate) sandbox: Option<Sandbox>,
    /// Where the client points, for messages.
    pub(crate) server: String,
}

/// Build the client (kube's own retries off: the loader's policy is the one
/// that runs). Configuration problems are usage errors (exit 2).
pub(crate) async fn connect(connection: &Connection) -> anyhow::Result<Connected> {
    let (config, sandbox) = match connection {
        Connection::Sandbox { kinds, crds } => {
            let spec = GenerateSpec {
                kinds: kinds.clone(),
                namespaces: SANDBOX_NAMESPACES,
                crds: Some(*crds),
                seed: 0,
            };
            let sandbox = Sandbox::start(SandboxConfig {
                generate: Some(spec),
                ..SandboxConfig::default()
            })
            .await
            .map_err(|e| match e {
                leash_sandbox::Error::InvalidArgument(_) => {
                    cli_error::usage(format!("--sandbox: {e}"))
                }
                e => anyhow::Error::new(e).context("cannot start the in-process sandbox"),
            })?;
            let url = sandbox.url().parse().context("the sandbox's URL")?;
            (kube::Config::new(url), Some(sandbox))
        }
        Connection::Server {
            url,
            token,
            insecure,
        } => {
            let mut config = kube::Config::new(url.clone());
            if let Some(token) = token {
                config.auth_info.token = Some(token.clone().into());
            }
            config.accept_invalid_certs = *insecure;
            (config, None)
        }
        Connection::Kubeconfig {
            path,
            context,
            token,
            insecure,
        } => {
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            let config = match path {
                Some(path) => {
                    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                        cli_error::usage(format!("cannot read kubeconfig {}: {e}", path.display()))
                    })?;
                    kube::Config::from_custom_kubeconfig(kubeconfig, &options).await
                }
                // No --context: kubeconfig (KUBECONFIG, ~/.kube/config), then
                // the in-cluster service account, as kubectl and client-go do.
                None if context.is_none() => kube::Config::infer().await.map_err(|e| {
                    kube::config::KubeconfigError::ReadConfig(
                        std::io::Error::other(e.to_string()),
                        "KUBECONFIG, ~/.kube/config or the in-cluster service account".into(),
                    )
                }),
                None => kube::Config::from_kubeconfig(&options).await,
            };
            let mut config = config.map_err(|e| {
                cli_error::usage(format!(
                    "cannot load the kubeconfig ({e}); set KUBECONFIG, use --kubeconfig PATH, --server URL, or --sandbox"
                ))
            })?;
            if let Some(token) = token {
                config.auth_info.token = Some(token.clone().into());
            }
            if *insecure {
                config.accept_invalid_certs = true;
            }
            (config, None)
        }
    };
    let server = config.cluster_url.to_string();
    let client = leash_loader::client_from_config(config)
        .map_err(|e| cli_error::usage(format!("cannot build a client for {server}: {e:#}")))?;
    Ok(Connected {
        client,
        sandbox,
        server,
    })
}
