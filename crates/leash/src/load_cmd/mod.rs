//! `leash load`: read every resource of the requested kinds, concurrently
//! and completely.
//!
//! Split by stage: [`args`] parses the flags and validates them into
//! [`args::Settings`]; [`connect`] builds the client (kubeconfig, `--server`
//! or an in-process `--sandbox`); [`run()`] resolves the kinds and runs the
//! load on `leash_loader`, writing objects through [`output`] as they
//! arrive; [`summary`] prints progress and the final table on stderr.

pub(crate) mod args;
pub(crate) mod connect;
mod output;
mod run;
mod summary;

use std::process::ExitCode;

pub(crate) use args::Args;

/// Run `leash load` with `args`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = args.into_settings()?;
    run::run(settings).await
}
