//! `leash context` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `leash context`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    Err(anyhow::anyhow!("leash context is not built yet"))
}
