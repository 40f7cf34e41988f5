//! Connection flags (as `leash load`) and building a checked kube client.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli_error::usage;

/// How to reach the Kubernetes API server.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ConnectionArgs {
    /// Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, value_name = "PATH")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub(crate) context: Option<String>,
    /// API server URL, without a kubeconfig (for example a `leash sandbox`).
    #[arg(long, value_name = "URL", conflicts_with_all = ["kubeconfig", "context"])]
    pub(crate) server: Option<String>,
    /// Bearer token; overrides the kubeconfig's credentials.
    #[arg(long, value_name = "T")]
    pub(crate) token: Option<String>,
    /// Do not verify the API server's TLS certificate.
    #[arg(long)]
    pub(crate) insecure_skip_tls_verify: bool,
}

/// Bound on the first request that proves the server is reachable.
const CONNECT_CHECK: Duration = Duration::from_secs(15);

impl ConnectionArgs {
    /// Build the client configuration (exit 2 on any error).
    async fn config(&self) -> anyhow::Result<kube::Config> {
        let mut config = if let Some(server) = &self.server {
            kube::Config::new(
                server
                    .parse()
                    .map_err(|e| usage(format!("--server {server:?} is not a URL: {e}")))?,
            )
        } else {
            let options = kube::config::KubeConfigOptions {
                context: self.context.clone(),
                ..Default::default()
            };
            match &self.kubeconfig {
                Some(path) => {
                    let file = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                        usage(format!("cannot read kubeconfig {}: {e}", path.display()))
                    })?;
                    kube::Config::from_custom_kubeconfig(file, &options)
                        .await
                        .map_err(|e| usage(format!("kubeconfig {}: {e}", path.display())))?
                }
                None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                    .await
                    .map_err(|e| usage(format!("kubeconfig: {e}")))?,
                None => kube::Config::infer().await.map_err(|e| {
                    usage(format!(
                        "no Kubernetes configuration (use --server or --kubeconfig): {e}"
                    ))
                })?,
            }
        };
        if let Some(token) = &self.token {
            config.auth_info.token = Some(token.clone().into());
        }
        if self.insecure_skip_tls_verify {
            config.accept_invalid_certs = true;
        }
        Ok(config)
    }

    /// A client whose server answered `/version` (exit 2 if it does not).
    pub(crate) async fn client(&self) -> anyhow::Result<kube::Client> {
        let config = self.config().await?;
        let url = config.cluster_url.to_string();
        let client = kube::Client::try_from(config)
            .map_err(|e| usage(format!("cannot build a client for {url}: {e}")))?;
        match tokio::time::timeout(CONNECT_CHECK, client.apiserver_version()).await {
            Ok(Ok(_)) => Ok(client),
            Ok(Err(kube::Error::Api(status))) if status.code == 401 || status.code == 403 => {
                Err(usage(format!(
                    "the API server at {url} refused the credentials: {}",
                    status.message
                )))
            }
            Ok(Err(e)) => Err(usage(format!("cannot reach the API server at {url}: {e}"))),
            Err(_) => Err(usage(format!(
                "the API server at {url} did not answer within {CONNECT_CHECK:?}"
            ))),
        }
    }
}
