//! `leash sandbox`: run the embedded Kubernetes API server.
//!
//! Split by stage: [`flags`] parses and validates the command line into
//! [`flags::Settings`] (bad values exit 2 before anything starts),
//! [`serve`] builds the initial objects, starts the server, announces it and
//! waits for SIGINT/SIGTERM.
//!
//! The contract with scripts: once the server accepts connections, the
//! first line on stdout is its base URL (`http://127.0.0.1:41873`),
//! flushed; nothing else goes to stdout. A human summary goes to stderr.
//! SIGINT or SIGTERM shuts the server down gracefully (open watches end,
//! every task is joined) and exits 0; a second signal during shutdown exits
//! 130 at once.

mod flags;
mod serve;

use std::process::ExitCode;

pub(crate) use flags::Args;
pub(crate) use serve::{Signals, write_kubeconfig};

/// Run `leash sandbox` with `args`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = args.into_settings()?;
    serve::serve(settings).await
}
