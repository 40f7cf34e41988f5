//! Test support shared by the subcommands' flag tests: parse one
//! subcommand's flags on their own and validate them into settings.

use clap::Parser;

/// A program whose only flags are `A`.
#[derive(Debug, Parser)]
struct Cli<A: clap::Args> {
    #[command(flatten)]
    args: A,
}

/// Parse `argv` (after the program name `command`) as the flags `A`, then
/// validate them with `into_settings`; both kinds of error as text (the
/// validation error with its causes, `{:#}`).
pub(crate) fn parse_settings<A: clap::Args, S>(
    command: &str,
    argv: &[&str],
    into_settings: fn(A) -> anyhow::Result<S>,
) -> Result<S, String> {
    let cli = Cli::<A>::try_parse_from(std::iter::once(command).chain(argv.iter().copied()))
        .map_err(|err| err.to_string())?;
    into_settings(cli.args).map_err(|err| format!("{err:#}"))
}
