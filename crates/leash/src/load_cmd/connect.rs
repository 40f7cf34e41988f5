//! Connecting `leash load` (and `apply --cluster`): a cluster through the
//! shared connection layer ([`crate::connection`]), or an in-process sandbox.

use std::future::Future;

use anyhow::Context as _;
use leash_sandbox::generate::GenerateSpec;
use leash_sandbox::{Sandbox, SandboxConfig};

use super::args::Connection;
use crate::cli_error::{self, interrupted};
use crate::connection::{Check, client_from_config};

/// Namespaces `--sandbox` spreads its generated objects over.
const SANDBOX_NAMESPACES: usize = 4;

/// A client, and the sandbox it talks to if `--sandbox` started one.
pub(crate) struct Connected {
    pub(crate) client: kube::Client,
    /// Shut down by the caller after the load.
    pub(crate) sandbox: Option<Sandbox>,
    /// Where the client points, for messages.
    pub(crate) server: String,
}

/// Build the client (kube's own retries off: the loader's policy is the one
/// that runs), raced against `interrupted_by` (then the
/// [`cli_error::Interrupted`] error). No `/version` check: the loader's
/// discovery is the first request. Configuration problems are usage errors
/// (exit 2).
///
/// # Cancel safety
/// Cancel-safe for a cluster; for `--sandbox`, as cancel-safe as
/// [`Sandbox::start`].
pub(crate) async fn connect(
    connection: &Connection,
    interrupted_by: impl Future<Output = ()>,
) -> anyhow::Result<Connected> {
    match connection {
        Connection::Remote(target) => {
            let c = target.connect(Check::None, interrupted_by).await?;
            Ok(Connected {
                client: c.client,
                sandbox: None,
                server: c.server,
            })
        }
        Connection::Sandbox { kinds, crds } => {
            let spec = GenerateSpec {
                kinds: kinds.clone(),
                namespaces: SANDBOX_NAMESPACES,
                crds: Some(*crds),
                seed: 0,
            };
            let started = Sandbox::start(SandboxConfig {
                generate: Some(spec),
                ..SandboxConfig::default()
            });
            let sandbox = tokio::select! {
                started = started => started.map_err(|e| match e {
                    leash_sandbox::Error::InvalidArgument(_) => {
                        cli_error::usage(format!("--sandbox: {e}"))
                    }
                    e => anyhow::Error::new(e).context("cannot start the in-process sandbox"),
                })?,
                () = interrupted_by => return Err(interrupted()),
            };
            let config = sandbox
                .url()
                .parse()
                .context("the sandbox's URL")
                .map(kube::Config::new);
            let server = config.as_ref().ok().map(|c| c.cluster_url.to_string());
            match config.and_then(client_from_config) {
                Ok(client) => Ok(Connected {
                    client,
                    server: server.unwrap_or_default(),
                    sandbox: Some(sandbox),
                }),
                Err(err) => {
                    let _ = sandbox.shutdown().await;
                    Err(err)
                }
            }
        }
    }
}
