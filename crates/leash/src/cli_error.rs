//! Exit codes and error reporting shared by every subcommand.
//!
//! `0` success; `1` the job ran but some of it failed; `2` usage or
//! configuration error (bad flag, unknown kind, unreachable server, 401/403);
//! `130` interrupted by Ctrl-C. A closed stdout pipe is not an error.

use std::fmt;
use std::process::ExitCode;

/// Exit code: the job ran and some of it failed.
pub(crate) const EXIT_FAILURE: u8 = 1;
/// Exit code: bad usage or configuration.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code: interrupted (128 + SIGINT).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// An error in what the user asked for (flags, kubeconfig, kind names,
/// credentials, an unreachable server): reported with exit code 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Build an `anyhow::Error` that exits with code 2.
pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}

/// Print `err` with its causes and choose the exit code.
pub(crate) fn report(err: &anyhow::Error) -> ExitCode {
    if is_broken_pipe(err) {
        return ExitCode::SUCCESS;
    }
    if is_interrupted(err) {
        eprintln!("leash: interrupted");
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    eprintln!("leash: error: {err:#}");
    if err.chain().any(|e| e.is::<UsageError>()) {
        ExitCode::from(EXIT_USAGE)
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
}

/// True when the error is a closed stdout pipe (`leash load | head`).
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Ctrl-C ended the command before it had anything to report: exit 130.
#[derive(Debug)]
pub(crate) struct Interrupted;

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Build an `anyhow::Error` that exits with code 130.
pub(crate) fn interrupted() -> anyhow::Error {
    anyhow::Error::new(Interrupted)
}

/// True when `err` is (or wraps) [`Interrupted`].
pub(crate) fn is_interrupted(err: &anyhow::Error) -> bool {
    err.chain().any(|e| e.is::<Interrupted>())
}
