//! Flags of `leash load` (parse stage) and their validation into
//! [`Settings`] (validate stage).
//!
//! Values with a syntax are checked by clap value parsers (clap reports
//! them naming the flag, exit 2). Checks across flags run in
//! [`Args::into_settings`] and are [`cli_error::usage`] errors (exit 2).

use std::path::PathBuf;
use std::time::Duration;

use leash_loader::{KindSelection, LoadOptions, MAX_CONCURRENCY, NamespaceSelection, RetryPolicy};

use crate::cli_error;
use crate::connection::{ConnectionArgs, Target};
use crate::names::is_dns_label;

/// Demo data of `--sandbox` without a value.
pub(crate) const DEFAULT_SANDBOX_SPEC: &str = "pods=2000,deployments.apps=100,configmaps=500";
/// Custom kinds of `--sandbox` unless `--sandbox-crds` says.
pub(crate) const DEFAULT_SANDBOX_CRDS: &str = "20:50";
/// `--request-timeout` unless given: the loader's
/// [`leash_loader::DEFAULT_REQUEST_TIMEOUT`] (a unit test keeps them equal).
const DEFAULT_REQUEST_TIMEOUT_FLAG: &str = "30s";

/// Flags of `leash load`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
KIND is what kubectl accepts: plural (pods), singular (pod), kind (Pod), short name (po, deploy, cm), \
group-qualified (deployments.apps, widgets.example.leash.dev); several may be given, space- or \
comma-separated. Without -A or -n, the kubeconfig context's namespace (or default) is read; \
cluster-scoped kinds ignore -n.

Objects go to stdout as they arrive (or one file per kind with --output-dir); progress and a \
summary go to stderr.

Exit codes: 0 every kind loaded completely; 1 some kinds failed (each named; what loaded is still \
written); 2 usage or configuration error (unknown kind, bad selector, bad flag, unreachable server, \
401/403); 130 interrupted (Ctrl-C).

Examples:
  leash load --sandbox --all -A > /dev/null          # demo: an in-process sandbox with generated data
  leash load pods deploy -n kube-system -o yaml
  leash load --all -A --concurrency 16 --output-dir ./dump
  leash load --server http://127.0.0.1:8080 --token T widgets.example.leash.dev -A -o name")]
pub(crate) struct Args {
    /// Kinds to load (see below). Required unless --all.
    #[arg(
        value_name = "KIND",
        value_delimiter = ',',
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    kinds: Vec<String>,

    /// Load every kind that supports list (events only with --include-events; never subresources).
    #[arg(long)]
    all: bool,

    /// With --all, include events and events.events.k8s.io.
    #[arg(long, requires = "all")]
    include_events: bool,

    /// Read every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,

    /// Namespace to read (repeatable, or comma-separated: one list per kind and namespace).
    #[arg(short = 'n', long, value_name = "NAMESPACE", value_delimiter = ',')]
    namespace: Vec<String>,

    /// Label selector (kubectl syntax), sent to the server.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,

    /// Field selector, sent to the server.
    #[arg(long, value_name = "SELECTOR")]
    field_selector: Option<String>,

    #[command(flatten)]
    connection: ConnectionArgs,

    /// List requests in flight at once (1..=32): kinds load concurrently, the pages of a kind in order.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = parse_concurrency)]
    concurrency: usize,

    /// Objects per page (the list's limit).
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    page_size: u32,

    /// One deadline for the whole load, discovery included (for example 30s, 5m).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<Duration>,

    /// How long each request (discovery or a list page, its whole response) may take; one that
    /// takes longer is retried like a connection error.
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = parse_duration,
        default_value = DEFAULT_REQUEST_TIMEOUT_FLAG,
    )]
    request_timeout: Duration,

    /// Retries per request on 429, 5xx, connection errors and timed-out requests.
    #[arg(long, value_name = "N", default_value_t = 5)]
    retries: u32,

    /// On an expired list (410), restart the kind from a new snapshot instead of continuing with
    /// the server's fresh token.
    #[arg(long)]
    consistent: bool,

    /// Output format.
    #[arg(short = 'o', long, value_name = "FORMAT", value_enum, default_value_t = Format::Ndjson)]
    output: Format,

    /// Write one file per kind into DIR (named after the kind: pods.ndjson,
    /// deployments.apps.ndjson, ...) instead of stdout.
    #[arg(long, value_name = "DIR")]
    output_dir: Option<PathBuf>,

    /// Progress bar on stderr.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,

    /// The summary on stderr after the load: a table, or one line of JSON for scripts.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = SummaryFormat::Table)]
    summary: SummaryFormat,

    /// Keep loading the other kinds when one fails (default: the first failure cancels the load).
    #[arg(long)]
    continue_on_error: bool,

    /// Start an in-process sandbox API server with generated demo data and load from it:
    /// KIND=COUNT[,KIND=COUNT...] of built-in kinds over 4 generated namespaces.
    #[arg(
        long,
        value_name = "KIND=COUNT,...",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = DEFAULT_SANDBOX_SPEC,
        conflicts_with_all = ["server", "kubeconfig", "context", "token"],
    )]
    sandbox: Option<String>,

    /// With --sandbox: K custom kinds (group example.leash.dev) with M objects each.
    #[arg(long, value_name = "K:M", default_value = DEFAULT_SANDBOX_CRDS, requires = "sandbox")]
    sandbox_crds: String,
}

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// One JSON object per line.
    Ndjson,
    /// One v1 List.
    Json,
    /// A multi-document YAML stream.
    Yaml,
    /// kubectl's kind.group/name lines.
    Name,
}

impl Format {
    /// File extension with --output-dir.
    pub(crate) fn extension(self) -> &'static str {
        match self {
            Format::Ndjson => "ndjson",
            Format::Json => "json",
            Format::Yaml => "yaml",
            Format::Name => "txt",
        }
    }
}

/// How the summary is printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SummaryFormat {
    /// One row per kind and a TOTAL row, for people.
    Table,
    /// One JSON object on one line (see `summary_json`), for scripts.
    Json,
}

/// When to show the progress bar.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ProgressMode {
    /// A bar when stderr is a terminal.
    Auto,
    /// A bar on a terminal, else one progress line per second.
    Always,
    /// Never.
    Never,
}

/// Where the cluster is.
#[derive(Debug)]
pub(crate) enum Connection {
    /// A cluster, as the connection flags say.
    Remote(Target),
    /// An in-process sandbox with generated data.
    Sandbox {
        kinds: Vec<(String, usize)>,
        crds: (usize, usize),
    },
}

/// Validated settings of `leash load`.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) connection: Connection,
    pub(crate) options: LoadOptions,
    pub(crate) format: Format,
    pub(crate) output_dir: Option<PathBuf>,
    pub(crate) progress: ProgressMode,
    pub(crate) summary: SummaryFormat,
    pub(crate) timeout: Option<Duration>,
}

impl Args {
    /// Validate into settings.
    pub(crate) fn into_settings(self) -> anyhow::Result<Settings> {
        let kinds = if self.all {
            KindSelection::All {
                include_events: self.include_events,
            }
        } else {
            let names: Vec<String> = self
                .kinds
                .iter()
                .map(|k| k.trim().to_owned())
                .filter(|k| !k.is_empty())
                .collect();
            if names.is_empty() {
                return Err(cli_error::usage("no KIND given (name kinds, or use --all)"));
            }
            KindSelection::Names(names)
        };
        let namespaces = if self.all_namespaces {
            NamespaceSelection::All
        } else if self.namespace.is_empty() {
            NamespaceSelection::Default
        } else {
            let list: Vec<String> = self.namespace.iter().map(|n| n.trim().to_owned()).collect();
            if let Some(bad) = list.iter().find(|n| !is_dns_label(n)) {
                return Err(cli_error::usage(format!(
                    "invalid namespace {bad:?} in -n/--namespace: a namespace is a DNS label (lower-case letters, digits, '-')"
                )));
            }
            NamespaceSelection::Only(list)
        };
        let connection = if let Some(spec) = &self.sandbox {
            let kinds = leash_sandbox::generate::parse_generate(spec)
                .map_err(|e| cli_error::usage(format!("invalid --sandbox value {spec:?}: {e}")))?;
            let crds = leash_sandbox::generate::parse_crds(&self.sandbox_crds)
                .map_err(|e| cli_error::usage(format!("invalid --sandbox-crds value: {e}")))?;
            Connection::Sandbox { kinds, crds }
        } else {
            Connection::Remote(self.connection.target()?)
        };
        if let Some(selector) = &self.selector
            && selector.trim().is_empty()
        {
            return Err(cli_error::usage("empty -l/--selector"));
        }
        let options = LoadOptions {
            kinds,
            namespaces,
            label_selector: self.selector.clone(),
            field_selector: self.field_selector.clone(),
            concurrency: self.concurrency,
            page_size: self.page_size,
            retry: RetryPolicy {
                max_retries: self.retries,
                request_timeout: Some(self.request_timeout),
                ..RetryPolicy::default()
            },
            consistent: self.consistent,
            fail_fast: !self.continue_on_error,
            timeout: None,
            ..LoadOptions::default()
        };
        options
            .validate()
            .map_err(|e| cli_error::usage(e.to_string()))?;
        Ok(Settings {
            connection,
            options,
            format: self.output,
            output_dir: self.output_dir,
            progress: self.progress,
            summary: self.summary,
            timeout: self.timeout,
        })
    }
}

fn parse_concurrency(s: &str) -> Result<usize, String> {
    let n: usize = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number ({e})"))?;
    if (1..=MAX_CONCURRENCY).contains(&n) {
        Ok(n)
    } else {
        Err(format!("{n} is outside 1..={MAX_CONCURRENCY}"))
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|err| format!("{s:?} is not a duration ({err}); use for example 30s or 5m"))?;
    if d.is_zero() {
        return Err(format!("{s:?} is zero; it must be positive"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Settings, String> {
        crate::flag_tests::parse_settings("load", argv, Args::into_settings)
    }

    #[test]
    fn kinds_and_namespaces() {
        let s = parse(&["pods,deploy", "cm", "-n", "a,b", "-n", "c"]).unwrap();
        assert_eq!(
            s.options.kinds,
            KindSelection::Names(vec!["pods".into(), "deploy".into(), "cm".into()])
        );
        assert_eq!(
            s.options.namespaces,
            NamespaceSelection::Only(vec!["a".into(), "b".into(), "c".into()])
        );
        let s = parse(&["--all", "-A", "--include-events"]).unwrap();
        assert_eq!(
            s.options.kinds,
            KindSelection::All {
                include_events: true
            }
        );
        assert_eq!(s.options.namespaces, NamespaceSelection::All);
        let s = parse(&["pods"]).unwrap();
        assert_eq!(s.options.namespaces, NamespaceSelection::Default);
    }

    #[test]
    fn bad_usage_is_rejected() {
        assert!(parse(&[]).is_err());
        assert!(parse(&["pods", "--all"]).is_err());
        assert!(parse(&["pods", "-A", "-n", "x"]).is_err());
        assert!(
            parse(&["pods", "--concurrency", "0"])
                .unwrap_err()
                .contains("concurrency")
        );
        assert!(parse(&["pods", "--concurrency", "33"]).is_err());
        assert!(parse(&["pods", "--page-size", "0"]).is_err());
        assert!(parse(&["pods", "--timeout", "soon"]).is_err());
        assert!(parse(&["pods", "--request-timeout", "soon"]).is_err());
        assert!(parse(&["pods", "--request-timeout", "0s"]).is_err());
        assert!(
            parse(&["pods", "-n", "Bad_Ns"])
                .unwrap_err()
                .contains("Bad_Ns")
        );
        assert!(parse(&["pods", "-o", "xml"]).is_err());
        assert!(parse(&["pods", "--server", "not a url"]).is_err());
        assert!(parse(&["pods", "--sandbox=nosuchkind=3"]).is_err());
    }

    #[test]
    fn defaults_and_sandbox() {
        let s = parse(&["pods", "--sandbox"]).unwrap();
        assert_eq!(
            (
                s.options.concurrency,
                s.options.page_size,
                s.options.retry.max_retries
            ),
            (4, 500, 5)
        );
        assert!(s.options.fail_fast);
        assert_eq!(s.format, Format::Ndjson);
        match s.connection {
            Connection::Sandbox { kinds, crds } => {
                // README, `--sandbox`: the default demo data.
                let kinds: Vec<(&str, usize)> =
                    kinds.iter().map(|(k, n)| (k.as_str(), *n)).collect();
                assert_eq!(
                    kinds,
                    [
                        ("pods", 2000),
                        ("deployments.apps", 100),
                        ("configmaps", 500)
                    ]
                );
                assert_eq!(crds, (20, 50));
            }
            other => panic!("{other:?}"),
        }
        // `--sandbox` never swallows a KIND.
        let s = parse(&["--sandbox", "pods"]).unwrap();
        assert_eq!(s.options.kinds, KindSelection::Names(vec!["pods".into()]));
        let s = parse(&["--sandbox=pods=10", "--sandbox-crds", "2:3", "po"]).unwrap();
        assert!(matches!(
            s.connection,
            Connection::Sandbox { crds: (2, 3), .. }
        ));
    }

    /// Issue 38 #9: every request of a load is bounded by default (a server
    /// that never answers fails the load instead of hanging it), by the
    /// loader's default; `--request-timeout` overrides it.
    #[test]
    fn requests_are_bounded_by_default_and_by_the_flag() {
        let s = parse(&["pods"]).unwrap();
        assert_eq!(
            s.options.retry.request_timeout,
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            s.options.retry.request_timeout,
            Some(leash_loader::DEFAULT_REQUEST_TIMEOUT)
        );
        assert_eq!(s.timeout, None, "the whole-load deadline stays off");
        let s = parse(&["pods", "--request-timeout", "1500ms"]).unwrap();
        assert_eq!(
            s.options.retry.request_timeout,
            Some(Duration::from_millis(1500))
        );
    }
}
