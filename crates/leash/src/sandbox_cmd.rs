//! `leash sandbox` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `leash sandbox`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Err(anyhow::anyhow!("leash sandbox is not built yet"))
}
