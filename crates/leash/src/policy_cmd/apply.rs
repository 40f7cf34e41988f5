//! `leash apply`: Kyverno's `kyverno apply`. Evaluates policies against
//! resource files on every core and prints the failures and a summary, or
//! policy reports. (`--cluster` is `cluster_apply`'s, with its own
//! invariants.)
//!
//! # Invariants
//! 1. What the evaluation threads share is read-only: the compiled
//!    [`Engine`], the resources (`Arc<Value>`), the `MemoryCluster` of
//!    `--target-resource`, the values and the user info, all borrowed by
//!    `std::thread::scope` threads. The only shared mutable state is two
//!    atomics: `next`, the index of the next resource (`fetch_add`, so each
//!    resource goes to exactly one thread), and `interrupted`, the Ctrl-C
//!    flag; no lock is taken.
//! 2. Every thread `evaluate_all` starts is scoped and joined before it
//!    returns: the workers (their results are joined through the scope, a
//!    panicked worker's resources are left without results), then the
//!    Ctrl-C waiter, which `finished` (a `Notify` permit, so it wakes even
//!    if it starts waiting after the notification) releases.
//! 3. Results keep the resources' order whatever thread evaluated them:
//!    each carries its index and goes to its slot after the join.
//! 4. Ctrl-C raises `interrupted`, which the workers check between
//!    resources: they stop within one resource's evaluation, nothing is
//!    printed and the command exits 130.
//! 5. No lock or guard is held across an `.await`: the only awaits are
//!    `cluster_apply::run`'s and the Ctrl-C waiter's, which holds nothing;
//!    the stdout lock is taken after the evaluation, for printing only.
//! 6. Output is written only after every thread is joined, so the
//!    documents printed (results, mutated resources, reports) are
//!    complete; the exit code comes from the same results.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use anyhow::Result;
use clap::ValueEnum;
use leash_policy::{
    Engine, EvalRequest, FailureAction, Operation, Prepared, RuleResult, Source, Status, UserInfo,
};

use super::mutated::{self, Mutated};
use serde_json::{Value, json};

use super::cluster::MemoryCluster;
use super::cluster_apply::{self, ClusterSettings};
use super::load;
use super::spec::{self, Values};
use crate::cli_error::{EXIT_FAILURE, EXIT_INTERRUPTED, usage};
use crate::load_cmd::args::Connection;
use leash_loader::NamespaceSelection;

/// Output formats of `leash apply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Failures and a summary (or the reports as YAML with --policy-report).
    Table,
    /// YAML documents.
    Yaml,
    /// One JSON document.
    Json,
}

/// Flags of `leash apply`: leash's own, and every flag of `kyverno apply`
/// (v1.19), so its scripts run unchanged: the ones leash honours do what
/// they do there; the ones it cannot honour fail naming the flag
/// ([`Args::refused`]).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Policy files or directories (recursively): ClusterPolicy, Policy,
    /// ValidatingPolicy, MutatingPolicy, GeneratingPolicy (and their
    /// Namespaced forms), PolicyException.
    #[arg(required = true, value_name = "POLICY_PATH")]
    policies: Vec<PathBuf>,
    /// Resource files or directories to evaluate (repeatable, or
    /// comma-separated as in `kyverno apply`).
    #[arg(long = "resource", short = 'r', visible_alias = "resources", value_name = "PATH", value_delimiter = ',', required_unless_present_any = ["cluster", "sandbox"], conflicts_with = "cluster")]
    resources: Vec<PathBuf>,
    /// Evaluate the cluster's resources of the kinds the policies match
    /// (loaded concurrently, evaluated as pages arrive).
    #[arg(long, short = 'c')]
    cluster: bool,
    /// Read image registries for `imageRegistry` context entries, CEL's
    /// `image.GetMetadata` and image verification (with the Docker
    /// config's credentials, else anonymously; HTTPS, plain HTTP for
    /// localhost and loopback registries), as `kyverno apply --registry`.
    /// Without it, `imageRegistry` entries are left out of the context
    /// (with --cluster: they are errors), as Kyverno's.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", action = clap::ArgAction::Set)]
    registry: Option<bool>,
    /// With --registry: the bound on one image's registry round trips.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = humantime::parse_duration)]
    registry_timeout: std::time::Duration,
    #[command(flatten)]
    trust_root: crate::trust_root::TrustRootArgs,
    /// With --cluster: read every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
    /// With --cluster: namespaces to read (default: the kubeconfig's).
    #[arg(short = 'n', long, value_name = "NAMESPACE", value_delimiter = ',')]
    namespace: Vec<String>,
    #[command(flatten)]
    connection: crate::connection::ConnectionArgs,
    /// Implies --cluster: an in-process sandbox with generated objects,
    /// KIND=COUNT[,...] (default pods=2000,deployments.apps=100,configmaps=500).
    #[arg(long, value_name = "KIND=COUNT,...", num_args = 0..=1, require_equals = true,
          default_missing_value = crate::load_cmd::args::DEFAULT_SANDBOX_SPEC,
          conflicts_with_all = ["server", "kubeconfig", "context", "token", "resources"])]
    sandbox: Option<String>,
    /// With --cluster: list requests in flight at once (1..=32); Kyverno's
    /// --concurrent (resource loading workers) sets the same.
    #[arg(
        long,
        visible_alias = "concurrent",
        value_name = "N",
        default_value_t = 4
    )]
    list_concurrency: usize,
    /// With --cluster: objects per page (per list call); Kyverno's
    /// --batch-size sets the same.
    #[arg(
        long,
        visible_alias = "batch-size",
        value_name = "N",
        default_value_t = 500
    )]
    page_size: u32,
    /// A Kyverno CLI `Values` file (variables, namespace labels).
    #[arg(long, short = 'f', value_name = "FILE")]
    values_file: Option<PathBuf>,
    /// Variables, `key=value,...` (e.g. `request.operation=UPDATE`).
    #[arg(long, short = 's', value_name = "K=V,...")]
    set: Vec<String>,
    /// A Kyverno CLI `UserInfo` file (request.userInfo, roles, clusterRoles).
    #[arg(long, short = 'u', value_name = "FILE")]
    userinfo: Option<PathBuf>,
    /// PolicyException files or directories (repeatable or comma-separated).
    #[arg(
        long,
        short = 'e',
        visible_alias = "exceptions",
        value_name = "PATH",
        value_delimiter = ','
    )]
    exception: Vec<PathBuf>,
    /// Print policy reports instead of the results: Kyverno 1.15+'s
    /// openreports.io/v1alpha1 layout unless --report-format says otherwise.
    #[arg(long, short = 'p')]
    policy_report: bool,
    /// The layout of --policy-report: `openreports` (a ClusterReport
    /// `merged` for the cluster-wide policies and a PolicyReport per
    /// namespaced Policy and resource, as `kyverno apply`), or
    /// `wgpolicyk8s` (wgpolicyk8s.io/v1alpha2: a PolicyReport `merged` per
    /// resource namespace, a ClusterPolicyReport for cluster-scoped ones).
    #[arg(long, value_enum, value_name = "LAYOUT", default_value_t = ReportFormat::Openreports)]
    report_format: ReportFormat,
    /// Output format (`table`, `yaml`, `json`); any other value is a path,
    /// as `kyverno apply -o PATH`: the same as --mutated-output PATH.
    #[arg(long, short = 'o', value_name = "FORMAT|PATH", default_value = "table", value_parser = parse_output)]
    output: Output,
    /// Kyverno's output format of --policy-report (`yaml`, `json`): the
    /// same as -o yaml / -o json.
    #[arg(long, value_enum, value_name = "FORMAT")]
    output_format: Option<ReportOutput>,
    /// Kyverno's table output: leash's `table` output (failures and a
    /// summary), its default.
    #[arg(long, short = 't', conflicts_with = "output_format")]
    table: bool,
    /// Existing resources for `mutate.targets` rules (files or
    /// directories, repeatable), as `kyverno apply --target-resource` (and
    /// --target-resources).
    #[arg(long = "target-resource", visible_alias = "target-resources", value_name = "PATH", value_delimiter = ',', conflicts_with_all = ["cluster", "sandbox"])]
    target_resources: Vec<PathBuf>,
    /// Write the resources mutate rules changed to PATH instead of stdout:
    /// a directory (one NAME-mutated.yaml each) or a file (a YAML stream).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["cluster", "sandbox"])]
    mutated_output: Option<PathBuf>,
    /// Report failures of Audit rules as warnings (exit 0 if nothing else fails).
    #[arg(long)]
    audit_warn: bool,
    /// Print every result, not only failures and errors.
    #[arg(long)]
    detailed_results: bool,
    /// The exit code when results warn and none fails or errs (0: exit 0).
    #[arg(long, value_name = "CODE", default_value_t = 0)]
    warn_exit_code: u8,
    /// Exit with --warn-exit-code also when no result passed (and none
    /// fails or errs).
    #[arg(long)]
    warn_no_pass: bool,
    /// Accepted for Kyverno's scripts: leash prints no colour.
    #[arg(long)]
    remove_color: bool,
    /// Accepted for Kyverno's scripts: leash always goes on with the next
    /// resource after a failure.
    #[arg(long)]
    continue_on_fail: bool,
    /// Accepted for Kyverno's scripts: leash always evaluates the
    /// PolicyExceptions found in the policy paths.
    #[arg(long)]
    exceptions_within_policies: bool,
    /// Evaluation threads (default: one per core).
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    #[command(flatten)]
    refused: Box<Refused>,
}

/// The flags of `kyverno apply` leash cannot honour: each parses (so the
/// error is leash's, naming the flag) and fails the command.
#[derive(Debug, Default, clap::Args)]
#[command(next_help_heading = "Kyverno flags leash refuses (each fails naming the flag)")]
pub(crate) struct Refused {
    /// Not supported: leash reads no git repositories.
    #[arg(long, short = 'b', value_name = "BRANCH")]
    git_branch: Option<String>,
    /// Not supported: leash reads no git repositories.
    #[arg(long, value_name = "USER")]
    username: Option<String>,
    /// Not supported: leash reads no git repositories.
    #[arg(long, value_name = "PASSWORD")]
    password: Option<String>,
    /// Not supported: leash applies policies to the cluster's
    /// cluster-scoped kinds the policies match without it.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    cluster_wide_resources: Option<String>,
    /// Not supported: leash evaluates no CEL context file.
    #[arg(long, value_name = "FILE")]
    context_file: Option<String>,
    /// Not supported: resource load errors fail `leash apply` on files
    /// and are listed after the results with --cluster.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    continue_on_error: Option<String>,
    /// Not supported: leash reads no CRD files.
    #[arg(long, value_name = "PATH")]
    crd_paths: Vec<String>,
    /// Not supported: leash apply evaluates no Envoy policies.
    #[arg(long, value_name = "PATH")]
    envoy_payload: Vec<String>,
    /// Not supported: leash apply evaluates no HTTP policies.
    #[arg(long, value_name = "PATH")]
    http_payload: Vec<String>,
    /// Not supported: leash apply evaluates no JSON payloads.
    #[arg(long, value_name = "PATH")]
    json: Vec<String>,
    /// Not supported: leash apply evaluates no ValidatingAdmissionPolicies.
    #[arg(long, value_name = "PATH")]
    parameter_resource: Vec<String>,
    /// Not supported: leash does not read PolicyExceptions from the
    /// resource paths (give them with -e).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    exceptions_with_resources: Option<String>,
    /// Not supported: leash does not read PolicyExceptions from the
    /// resource paths (give them with -e).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    exceptions_within_resources: Option<String>,
    /// Not supported: leash generates no PolicyExceptions.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    generate_exceptions: Option<String>,
    /// Not supported: leash generates no PolicyExceptions.
    #[arg(long, value_name = "DURATION")]
    generated_exception_ttl: Option<String>,
    /// Not supported: leash prints no loading metrics.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    show_performance: Option<String>,
    /// Not supported: leash reads no policy or resource from stdin.
    #[arg(long, short = 'i', num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    stdin: Option<String>,
    /// Not supported: leash gives no deprecation warnings to turn into
    /// errors.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL")]
    warnings_as_errors: Option<String>,
}

impl Refused {
    /// The first refused flag given, with why.
    fn check(&self) -> Result<()> {
        let given: [(&str, bool); 18] = [
            ("--git-branch", self.git_branch.is_some()),
            ("--username", self.username.is_some()),
            ("--password", self.password.is_some()),
            (
                "--cluster-wide-resources",
                self.cluster_wide_resources.is_some(),
            ),
            ("--context-file", self.context_file.is_some()),
            ("--continue-on-error", self.continue_on_error.is_some()),
            ("--crd-paths", !self.crd_paths.is_empty()),
            ("--envoy-payload", !self.envoy_payload.is_empty()),
            ("--http-payload", !self.http_payload.is_empty()),
            ("--json", !self.json.is_empty()),
            ("--parameter-resource", !self.parameter_resource.is_empty()),
            (
                "--exceptions-with-resources",
                self.exceptions_with_resources.is_some(),
            ),
            (
                "--exceptions-within-resources",
                self.exceptions_within_resources.is_some(),
            ),
            ("--generate-exceptions", self.generate_exceptions.is_some()),
            (
                "--generated-exception-ttl",
                self.generated_exception_ttl.is_some(),
            ),
            ("--show-performance", self.show_performance.is_some()),
            ("--stdin", self.stdin.is_some()),
            ("--warnings-as-errors", self.warnings_as_errors.is_some()),
        ];
        match given.iter().find(|(_, g)| *g) {
            Some((flag, _)) => Err(usage(format!(
                "{flag} (a kyverno apply flag) is not supported by leash apply: see `leash apply --help`"
            ))),
            None => Ok(()),
        }
    }
}

/// The layouts of `--policy-report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReportFormat {
    /// openreports.io/v1alpha1, as `kyverno apply` 1.15+.
    Openreports,
    /// wgpolicyk8s.io/v1alpha2.
    Wgpolicyk8s,
}

/// Kyverno's `--output-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReportOutput {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// `-o`: a format, or (as `kyverno apply -o`) the mutated resources' path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    Format(Format),
    Path(PathBuf),
}

fn parse_output(s: &str) -> Result<Output, String> {
    match Format::from_str(s, false) {
        Ok(f) => Ok(Output::Format(f)),
        Err(_) if s.is_empty() => Err("empty value".to_string()),
        Err(_) => Ok(Output::Path(PathBuf::from(s))),
    }
}

impl Args {
    /// The output format: -o FORMAT, else --output-format, else the table.
    fn format(&self) -> Format {
        match (&self.output, self.output_format) {
            (Output::Format(f), None) => *f,
            (_, Some(ReportOutput::Json)) => Format::Json,
            (_, Some(ReportOutput::Yaml)) => Format::Yaml,
            (Output::Path(_), None) => Format::Table,
        }
    }

    /// Where mutated resources go: --mutated-output, else `-o PATH`.
    fn mutated_path(&self) -> Result<Option<PathBuf>> {
        match (&self.mutated_output, &self.output) {
            (Some(_), Output::Path(_)) => Err(usage(
                "-o PATH and --mutated-output both name where mutated resources go: give one",
            )),
            (Some(p), _) | (None, Output::Path(p)) => Ok(Some(p.clone())),
            (None, Output::Format(_)) => Ok(None),
        }
    }

    /// Rejects what the flags cannot mean together.
    fn check(&self) -> Result<()> {
        self.refused.check()?;
        if let (Output::Format(f), Some(of)) = (&self.output, self.output_format) {
            let same = matches!(
                (f, of),
                (Format::Json, ReportOutput::Json) | (Format::Yaml, ReportOutput::Yaml)
            );
            if *f != Format::Table && !same {
                return Err(usage("-o FORMAT and --output-format disagree: give one"));
            }
        }
        if self.table && self.format() != Format::Table {
            return Err(usage("--table and -o yaml|json disagree: give one"));
        }
        if matches!(self.output, Output::Path(_)) && (self.cluster || self.sandbox.is_some()) {
            return Err(usage(
                "-o PATH (mutated resources) cannot be used with --cluster",
            ));
        }
        Ok(())
    }
}

/// The exit code of a run without failures or errors: --warn-exit-code
/// when results warn, or (with --warn-no-pass) when none passed, as
/// `kyverno apply`.
fn warn_exit(args: &Args, warned: bool, passed: bool) -> ExitCode {
    if args.warn_exit_code != 0 && warned {
        eprintln!("leash: exit as --warn-exit-code is {}", args.warn_exit_code);
        return ExitCode::from(args.warn_exit_code);
    }
    if args.warn_no_pass && !passed {
        eprintln!("leash: exit as no objects satisfied policy (--warn-no-pass)");
        return ExitCode::from(args.warn_exit_code);
    }
    ExitCode::SUCCESS
}

/// Runs `leash apply`.
pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    args.check()?;
    let format = args.format();
    let mutated_path = args.mutated_path()?;
    let mut paths = args.policies.clone();
    paths.extend(args.exception.iter().cloned());
    let loaded = load::load_policies(&paths).map_err(|e| usage(format!("{e:#}")))?;
    for p in &loaded.deleting {
        eprintln!(
            "leash: note: {} {}: not evaluated (leash apply does not evaluate DeletingPolicies; leash test does)",
            p.kind(),
            p.name()
        );
    }
    for p in &loaded.admission {
        eprintln!(
            "leash: note: ValidatingAdmissionPolicy {}: not evaluated (leash apply does not evaluate ValidatingAdmissionPolicies; leash test does)",
            p.name()
        );
    }
    for note in &loaded.unsupported {
        eprintln!(
            "leash: note: {note}: not evaluated (leash evaluates ClusterPolicy, Policy, ValidatingPolicy, MutatingPolicy and GeneratingPolicy)"
        );
    }
    if loaded.engine.is_empty() {
        return Err(usage(
            "no ClusterPolicy, Policy, ValidatingPolicy, MutatingPolicy or GeneratingPolicy found in the policy paths",
        ));
    }
    let mut values = match &args.values_file {
        Some(p) => Values::read(p).map_err(|e| usage(format!("{e:#}")))?,
        None => Values::default(),
    };
    for item in args
        .set
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.trim().is_empty())
    {
        let Some((k, v)) = item.split_once('=') else {
            return Err(usage(format!("--set: {item:?} is not key=value")));
        };
        values
            .bindings
            .global
            .push((k.trim().to_string(), Value::String(v.trim().to_string())));
    }
    let user = match &args.userinfo {
        Some(p) => spec::read_userinfo(p).map_err(|e| usage(format!("{e:#}")))?,
        None => UserInfo::default(),
    };
    if args.cluster || args.sandbox.is_some() {
        return run_cluster(args, &loaded.engine, values, user).await;
    }
    let mut resources =
        load::load_resources(&args.resources).map_err(|e| usage(format!("{e:#}")))?;
    for r in &mut resources {
        load::default_namespace(r);
    }
    let threads = evaluation_threads(args.concurrency)?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let mut targets =
        load::load_resources(&args.target_resources).map_err(|e| usage(format!("{e:#}")))?;
    for t in &mut targets {
        load::default_namespace(t);
    }
    let resources: Vec<Arc<Value>> = resources.into_iter().map(Arc::new).collect();
    let mut cluster = MemoryCluster::new(targets)
        .with_shared(resources.iter().cloned())
        .offline_apply();
    if let Some(registry) = registry(&args)? {
        cluster = cluster.with_registry(registry);
    }
    // Pass results are only printed with --detailed-results or in a
    // report; else they are counted and dropped as they are made: on
    // 10,000 resources they are most of the memory.
    let keep_passes = args.policy_report || args.detailed_results;
    let evaluate = || {
        evaluate_all(
            &loaded.engine,
            &resources,
            &cluster,
            &values,
            &user,
            threads,
            &interrupted,
            keep_passes,
        )
    };
    let mut evaluated = evaluate();
    // With --registry: the images the evaluation missed are fetched
    // (concurrently, each bounded by --registry-timeout) and everything is
    // evaluated again; the engine never waits on a registry.
    for _ in 1..leash_controller::lookups::ROUNDS {
        let fetched = tokio::select! {
            fetched = cluster.fetch_missed_images() => fetched,
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::from(EXIT_INTERRUPTED)),
        };
        if !fetched || interrupted.load(Ordering::Relaxed) {
            break;
        }
        evaluated = evaluate();
    }
    let (results, mutations, dropped_passes) = evaluated;
    if interrupted.load(Ordering::Relaxed) {
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    let results = adjust_audit(&loaded.engine, results, args.audit_warn);
    if let Some(path) = &mutated_path {
        let written = mutated::write(path, &mutations)?;
        eprintln!(
            "leash: wrote {written} mutated resources to {}",
            path.display()
        );
    }
    let print_mutated = mutated_path.is_none() && !args.policy_report;
    // Mutate results count, print and report as results too, as in
    // Kyverno's CLI (its reports hold every rule type).
    // Moved, not copied: on 10,000 resources the results are most of the
    // peak memory (issue 41's memory target against Kyverno's CLI).
    let mut mutations = mutations;
    let combined: Vec<Evaluated> = results
        .into_iter()
        .zip(mutations.iter_mut())
        .map(|((o, rs), m)| {
            let mut all = std::mem::take(&mut m.results);
            all.extend(rs);
            (o, all)
        })
        .collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.policy_report {
        print_reports(
            &mut out,
            &loaded.engine,
            &combined,
            format,
            args.report_format,
        )?;
    } else {
        if print_mutated && format == Format::Table {
            mutated::print(&mut out, &mutations)?;
        }
        print_results(
            &mut out,
            loaded.engine.policies().len()
                + loaded.engine.validating_policies().len()
                + loaded.engine.mutating_policies().len()
                + loaded.engine.mutating_admission_policies().len()
                + loaded.engine.generating_policies().len(),
            &combined,
            format,
            args.detailed_results,
            if print_mutated && format != Format::Table {
                Some(&mutations)
            } else {
                None
            },
            dropped_passes,
        )?;
    }
    out.flush()?;
    let all = || combined.iter().flat_map(|(_, rs)| rs);
    let failed = all().any(|r| matches!(r.status, Status::Fail | Status::Error));
    Ok(if failed {
        ExitCode::from(EXIT_FAILURE)
    } else {
        warn_exit(
            &args,
            all().any(|r| r.status == Status::Warn),
            dropped_passes > 0 || all().any(|r| r.status == Status::Pass),
        )
    })
}

fn connection(args: &Args) -> Result<Connection> {
    if let Some(spec) = &args.sandbox {
        let kinds = leash_sandbox::generate::parse_generate(spec)
            .map_err(|e| usage(format!("invalid --sandbox value {spec:?}: {e}")))?;
        return Ok(Connection::Sandbox {
            kinds,
            crds: (0, 0),
        });
    }
    Ok(Connection::Remote(args.connection.target()?))
}

/// The image registries `--registry` reads.
fn registry(args: &Args) -> Result<Option<Arc<leash_images::Registry>>> {
    if args.registry != Some(true) {
        return Ok(None);
    }
    Ok(Some(Arc::new(leash_images::Registry::new(
        leash_images::RegistrySettings {
            timeout: args.registry_timeout,
            trust_root: args
                .trust_root
                .trust_root(args.registry_timeout.max(crate::trust_root::TIMEOUT))?,
            credentials: crate::trust_root::docker_credentials()?,
            ..Default::default()
        },
    ))))
}

async fn run_cluster(
    args: Args,
    engine: &Engine,
    values: Values,
    user: UserInfo,
) -> Result<ExitCode> {
    if !(1..=leash_loader::MAX_CONCURRENCY).contains(&args.list_concurrency) {
        return Err(usage(format!(
            "--list-concurrency must be within 1..={}",
            leash_loader::MAX_CONCURRENCY
        )));
    }
    let namespaces = if args.all_namespaces || args.sandbox.is_some() {
        NamespaceSelection::All
    } else if args.namespace.is_empty() {
        NamespaceSelection::Default
    } else {
        NamespaceSelection::Only(args.namespace.clone())
    };
    let settings = ClusterSettings {
        connection: connection(&args)?,
        namespaces,
        list_concurrency: args.list_concurrency,
        page_size: args.page_size,
    };
    let threads = evaluation_threads(args.concurrency)?;
    let format = args.format();
    let keep = if args.policy_report || format != Format::Table {
        cluster_apply::Keep::All
    } else if args.audit_warn {
        // Audit failures become warnings after the run: keep, then print.
        cluster_apply::Keep::NonPass
    } else {
        // The table's lines are printed as objects are evaluated; nothing
        // is kept, so memory stays bounded by the load's window.
        cluster_apply::Keep::Stream {
            detailed: args.detailed_results,
        }
    };
    let registry = registry(&args)?;
    let outcome = cluster_apply::run(
        engine,
        settings,
        &values.bindings,
        &user,
        threads,
        keep,
        registry,
    )
    .await?;
    if outcome.interrupted {
        eprintln!("leash: interrupted after {} objects", outcome.objects);
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    let results = adjust_audit(engine, outcome.kept, args.audit_warn);
    let mut counts = outcome.counts.clone();
    if args.audit_warn {
        // Failures that became warnings move between the counts (with
        // --audit-warn every non-pass result is kept, so the kept ones tell).
        let warned = results
            .iter()
            .flat_map(|(_, r)| r)
            .filter(|r| r.status == Status::Warn && r.source == Source::Kyverno)
            .count();
        let fail = counts.entry("fail").or_default();
        *fail = fail.saturating_sub(warned);
        *counts.entry("warn").or_default() += warned;
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.policy_report {
        print_reports(&mut out, engine, &results, format, args.report_format)?;
    } else {
        print_summary(
            &mut out,
            engine.policies().len() + engine.validating_policies().len(),
            &results,
            &counts,
            outcome.objects,
            format,
            args.detailed_results,
        )?;
    }
    out.flush()?;
    for e in &outcome.load_errors {
        eprintln!("leash: error: {e}");
    }
    // From the counts: in the streaming table mode no result is kept.
    let failed =
        counts.get("fail").copied().unwrap_or(0) + counts.get("error").copied().unwrap_or(0) > 0;
    let n = |k: &str| counts.get(k).copied().unwrap_or(0);
    Ok(if failed || !outcome.load_errors.is_empty() {
        ExitCode::from(EXIT_FAILURE)
    } else {
        warn_exit(&args, n("warn") > 0, n("pass") > 0)
    })
}

/// A resource and its results.
type Evaluated = (Arc<Value>, Vec<RuleResult>);

/// Evaluates every resource on `threads` threads sharing the compiled
/// policies read-only: its mutate rules, then its validate rules on the
/// mutated resource (as Kyverno's CLI). The validate results and the
/// mutations keep the resources' order. Without `keep_passes`, pass
/// results are counted (the third value) and dropped.
#[allow(clippy::too_many_arguments)]
fn evaluate_all(
    engine: &Engine,
    resources: &[Arc<Value>],
    cluster: &MemoryCluster,
    values: &Values,
    user: &UserInfo,
    threads: usize,
    interrupted: &AtomicBool,
    keep_passes: bool,
) -> (Vec<Evaluated>, Vec<Mutated>, usize) {
    let next = AtomicUsize::new(0);
    let threads = threads.clamp(1, resources.len().max(1));
    let mut slots: Vec<Option<(Vec<RuleResult>, Mutated)>> =
        (0..resources.len()).map(|_| None).collect();
    let handle = tokio::runtime::Handle::try_current().ok();
    let finished = tokio::sync::Notify::new();
    let mut dropped = 0;
    let done: Vec<(usize, (Vec<RuleResult>, Mutated))> = std::thread::scope(|s| {
        // Ctrl-C: a scoped thread waits for the signal (or the end) on the
        // runtime and raises the flag every worker checks between resources,
        // so an interrupt stops the evaluation within one resource's time.
        if let Some(handle) = &handle {
            let finished = &finished;
            s.spawn(move || {
                handle.block_on(async {
                    tokio::select! {
                        r = tokio::signal::ctrl_c() => {
                            if r.is_ok() {
                                interrupted.store(true, Ordering::Relaxed);
                            }
                        }
                        () = finished.notified() => {}
                    }
                });
            });
        }
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    let mut passes = 0;
                    while !interrupted.load(Ordering::Relaxed) {
                        // Relaxed: the counter only hands out indices.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(object) = resources.get(i) else {
                            break;
                        };
                        let ns = object["metadata"]["namespace"].as_str().unwrap_or("");
                        let req = EvalRequest {
                            object: object.clone(),
                            old_object: None,
                            operation: Operation::Create,
                            user_info: user.clone(),
                            namespace_labels: values.namespace_labels.get(ns).cloned(),
                            namespace_object: values.namespaces.get(ns).cloned().map(Arc::new),
                            request_resource: values.request_resource(object),
                        };
                        let trigger = Prepared::new(req.clone());
                        let (mutation, results) = engine
                            .evaluation(cluster)
                            .bindings(&values.bindings)
                            .apply(req);
                        let mut m = Mutated::of(object, &mutation);
                        let mut results = results.into_vec();
                        // What generate rules would create (printed, not created).
                        for (policy, g) in engine.generate(&trigger, cluster, &values.bindings) {
                            for d in g.downstreams {
                                m.generated
                                    .push((policy.key().clone(), g.result.rule.clone(), d));
                            }
                            results.push(g.result);
                        }
                        for (policy, g) in engine.generate_cel(&trigger, cluster) {
                            let name: Arc<str> = Arc::from(policy.name());
                            for d in g.downstreams {
                                m.generated
                                    .push((name.clone(), policy.name().to_string(), d));
                            }
                            results.push(g.result);
                        }
                        if !keep_passes {
                            let before = results.len() + m.results.len();
                            results.retain(|r| r.status != Status::Pass);
                            m.results.retain(|r| r.status != Status::Pass);
                            passes += before - results.len() - m.results.len();
                        }
                        mine.push((i, (results, m)));
                    }
                    (mine, passes)
                })
            })
            .collect();
        let mut all = Vec::new();
        for w in workers {
            let (mine, passes) = w.join().unwrap_or_default();
            all.extend(mine);
            dropped += passes;
        }
        // notify_one stores a permit, so the waiter wakes even if it starts later.
        finished.notify_one();
        all
    });
    for (i, r) in done {
        slots[i] = Some(r);
    }
    let (results, mutations) = resources
        .iter()
        .cloned()
        .zip(slots)
        .map(|(o, r)| {
            let (results, m) = r.unwrap_or_else(|| (Vec::new(), Mutated::none(&o)));
            ((o, results), m)
        })
        .unzip();
    (results, mutations, dropped)
}

/// `--audit-warn`: failures of Audit rules become warnings.
fn adjust_audit(engine: &Engine, results: Vec<Evaluated>, audit_warn: bool) -> Vec<Evaluated> {
    if !audit_warn {
        return results;
    }
    results
        .into_iter()
        .map(|(o, rs)| {
            let rs = rs
                .into_iter()
                .map(|mut r| {
                    if r.status == Status::Fail && r.source == Source::Kyverno {
                        let audit = engine
                            .policies()
                            .iter()
                            .find(|p| *p.key() == r.policy)
                            .is_some_and(|p| {
                                p.rule_failure_action(&r.rule) == FailureAction::Audit
                            });
                        if audit {
                            r.status = Status::Warn;
                        }
                    }
                    r
                })
                .collect();
            (o, rs)
        })
        .collect()
}

pub(crate) fn resource_id(o: &Value) -> String {
    let kind = o["kind"].as_str().unwrap_or("");
    let name = o["metadata"]["name"].as_str().unwrap_or("");
    match o["metadata"]["namespace"].as_str() {
        Some(ns) if !ns.is_empty() => format!("{kind}/{ns}/{name}"),
        _ => format!("{kind}/{name}"),
    }
}

/// The table line of one result: failures, errors and warnings (every
/// result with `detailed`).
pub(crate) fn result_line(o: &Value, r: &RuleResult, detailed: bool) -> Option<String> {
    let mut line = String::new();
    push_result_line(&mut line, o, r, detailed).then(|| {
        line.pop();
        line
    })
}

/// Appends [`result_line`] and a newline to `out`; whether the result has
/// a line.
pub(crate) fn push_result_line(
    out: &mut String,
    o: &Value,
    r: &RuleResult,
    detailed: bool,
) -> bool {
    use std::fmt::Write as _;
    let status = match r.status {
        Status::Fail => "FAIL",
        Status::Error => "ERROR",
        Status::Warn => "WARN",
        _ if !detailed => return false,
        Status::Pass => "PASS",
        Status::Skip => "SKIP",
    };
    let meta = &o["metadata"];
    // The resource as resource_id names it, written in place.
    let _ = write!(
        out,
        "{status}: policy {} -> resource {}/",
        r.policy,
        o["kind"].as_str().unwrap_or("")
    );
    if let Some(ns) = meta["namespace"].as_str().filter(|ns| !ns.is_empty()) {
        out.push_str(ns);
        out.push('/');
    }
    let _ = write!(
        out,
        "{} rule {}: {}",
        meta["name"].as_str().unwrap_or(""),
        r.rule,
        r.message
    );
    out.push('\n');
    true
}

fn counts<'a>(results: impl Iterator<Item = &'a RuleResult>) -> BTreeMap<&'static str, usize> {
    let mut c: BTreeMap<&'static str, usize> = ["pass", "fail", "warn", "error", "skip"]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
    for r in results {
        *c.entry(r.status.as_str()).or_default() += 1;
    }
    c
}

fn print_results(
    out: &mut impl Write,
    policy_count: usize,
    results: &[Evaluated],
    format: Format,
    detailed: bool,
    mutated: Option<&[Mutated]>,
    dropped_passes: usize,
) -> Result<()> {
    let mut c = counts(results.iter().flat_map(|(_, rs)| rs));
    *c.entry("pass").or_default() += dropped_passes;
    if let (Some(m), Format::Json | Format::Yaml) = (mutated, format) {
        let mut doc = summary_doc(results, &c, detailed);
        let objects = mutated::objects(m);
        if !objects.is_empty() {
            doc["mutatedResources"] = Value::Array(objects);
        }
        let generated: Vec<Value> = m
            .iter()
            .flat_map(|m| m.generated.iter().map(|(_, _, d)| d.clone()))
            .collect();
        if !generated.is_empty() {
            doc["generatedResources"] = Value::Array(generated);
        }
        return write_doc(out, &doc, format);
    }
    print_summary(
        out,
        policy_count,
        results,
        &c,
        results.len(),
        format,
        detailed,
    )
}

fn print_summary(
    out: &mut impl Write,
    policy_count: usize,
    results: &[Evaluated],
    c: &BTreeMap<&'static str, usize>,
    resources: usize,
    format: Format,
    detailed: bool,
) -> Result<()> {
    let n = |k: &str| c.get(k).copied().unwrap_or(0);
    match format {
        Format::Table => {
            let policies = policy_count;
            writeln!(out, "Applied {policies} policies to {resources} resources")?;
            for (o, rs) in results {
                for r in rs {
                    if let Some(line) = result_line(o, r, detailed) {
                        writeln!(out, "{line}")?;
                    }
                }
            }
            writeln!(
                out,
                "pass: {}, fail: {}, warn: {}, error: {}, skip: {}",
                n("pass"),
                n("fail"),
                n("warn"),
                n("error"),
                n("skip")
            )?;
        }
        Format::Json | Format::Yaml => {
            let doc = summary_doc(results, c, detailed);
            write_doc(out, &doc, format)?;
        }
    }
    Ok(())
}

/// The JSON/YAML document of the results and their counts.
fn summary_doc(results: &[Evaluated], c: &BTreeMap<&'static str, usize>, detailed: bool) -> Value {
    let n = |k: &str| c.get(k).copied().unwrap_or(0);
    let rows: Vec<Value> = results
        .iter()
        .flat_map(|(o, rs)| {
            rs.iter()
                .filter(move |r| detailed || r.status != Status::Pass)
                .map(move |r| {
                    json!({
                        "policy": &*r.policy, "rule": r.rule, "resource": resource_id(o),
                        "result": r.status.as_str(), "message": r.message,
                    })
                })
        })
        .collect();
    json!({"results": rows, "summary": {
        "pass": n("pass"), "fail": n("fail"), "warn": n("warn"), "error": n("error"), "skip": n("skip"),
    }})
}

fn write_doc(out: &mut impl Write, doc: &Value, format: Format) -> Result<()> {
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, doc)?;
            writeln!(out)?;
        }
        Format::Yaml | Format::Table => {
            let text = serde_saphyr::to_string(doc).map_err(|e| anyhow::anyhow!("{e}"))?;
            out.write_all(text.as_bytes())?;
        }
    }
    Ok(())
}

/// A report's reference to a resource (absent fields left out).
fn object_ref(o: &Value) -> Value {
    let mut r = serde_json::Map::new();
    for (key, v) in [
        ("apiVersion", &o["apiVersion"]),
        ("kind", &o["kind"]),
        ("name", &o["metadata"]["name"]),
        ("namespace", &o["metadata"]["namespace"]),
        ("uid", &o["metadata"]["uid"]),
    ] {
        if !v.is_null() {
            r.insert(key.to_string(), v.clone());
        }
    }
    Value::Object(r)
}

/// The reports of `--policy-report`, in `layout`.
fn print_reports(
    out: &mut impl Write,
    engine: &Engine,
    results: &[Evaluated],
    format: Format,
    layout: ReportFormat,
) -> Result<()> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match layout {
        ReportFormat::Openreports => print_openreports(out, engine, results, format, now),
        ReportFormat::Wgpolicyk8s => print_wgpolicy_reports(out, engine, results, format, now),
    }
}

/// `kyverno apply --policy-report` (1.15+): the results of every
/// cluster-wide policy in one openreports.io/v1alpha1 `ClusterReport`
/// named `merged`, printed first (when there are any), then for each
/// resource and namespaced `Policy` with results a `PolicyReport` named
/// after the policy in its namespace, after a `---` line. YAML documents
/// are followed by an empty line; JSON ones are compact, one per line.
fn print_openreports(
    out: &mut impl Write,
    engine: &Engine,
    results: &[Evaluated],
    format: Format,
    now: u64,
) -> Result<()> {
    let entry = |o: &Value, r: &RuleResult| {
        let meta = leash_report::PolicyMeta::of(engine, &r.policy);
        let mut result = leash_report::result_entry(r, &meta, now);
        let mut subject = object_ref(o);
        if let Some(rv) = o["metadata"]["resourceVersion"].as_str() {
            subject["resourceVersion"] = json!(rv);
        }
        result["resources"] = json!([subject]);
        result["properties"] = json!({"process": "background scan"});
        result
    };
    let mut clustered = Vec::new();
    let mut namespaced: Vec<Value> = Vec::new();
    for (o, rs) in results {
        // One report per (namespaced policy, resource), in result order.
        let mut per_policy: Vec<(&str, Vec<Value>)> = Vec::new();
        for r in rs {
            match r.policy.split_once('/') {
                None => clustered.push(entry(o, r)),
                Some(_) => match per_policy.iter_mut().find(|(k, _)| *k == &*r.policy) {
                    Some((_, v)) => v.push(entry(o, r)),
                    None => per_policy.push((&r.policy, vec![entry(o, r)])),
                },
            }
        }
        for (key, results) in per_policy {
            let (ns, name) = key.split_once('/').unwrap_or(("", key));
            let summary = leash_report::summary(&results);
            namespaced.push(json!({
                "apiVersion": "openreports.io/v1alpha1", "kind": "PolicyReport",
                "metadata": {"name": name, "namespace": ns},
                "results": results, "source": "", "summary": summary,
            }));
        }
    }
    let print = |out: &mut dyn Write, doc: &Value| -> Result<()> {
        match format {
            Format::Json => {
                serde_json::to_writer(&mut *out, doc)?;
                writeln!(out)?;
            }
            Format::Yaml | Format::Table => {
                let text = serde_saphyr::to_string(doc).map_err(|e| anyhow::anyhow!("{e}"))?;
                out.write_all(text.as_bytes())?;
                writeln!(out)?;
            }
        }
        Ok(())
    };
    if !clustered.is_empty() {
        let summary = leash_report::summary(&clustered);
        print(
            out,
            &json!({
                "apiVersion": "openreports.io/v1alpha1", "kind": "ClusterReport",
                "metadata": {"name": "merged"},
                "results": clustered, "source": "", "summary": summary,
            }),
        )?;
    }
    for doc in &namespaced {
        writeln!(out, "---")?;
        print(out, doc)?;
    }
    Ok(())
}

/// `--report-format wgpolicyk8s`: one wgpolicyk8s.io/v1alpha2
/// `PolicyReport` per resource namespace and a `ClusterPolicyReport` for
/// cluster-scoped resources, all named `merged`, with Kyverno's result
/// fields; with JSON a `v1` `List` of them.
fn print_wgpolicy_reports(
    out: &mut impl Write,
    engine: &Engine,
    results: &[Evaluated],
    format: Format,
    now: u64,
) -> Result<()> {
    let mut by_ns: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (o, rs) in results {
        let ns = o["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for r in rs {
            let meta = leash_report::PolicyMeta::of(engine, &r.policy);
            let mut result = leash_report::result_entry(r, &meta, now);
            result["resources"] = json!([object_ref(o)]);
            by_ns.entry(ns.clone()).or_default().push(result);
        }
    }
    let mut docs = Vec::new();
    for (ns, results) in by_ns {
        let summary = leash_report::summary(&results);
        let doc = if ns.is_empty() {
            json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "ClusterPolicyReport",
                   "metadata": {"name": "merged"}, "results": results, "summary": summary})
        } else {
            json!({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport",
                   "metadata": {"name": "merged", "namespace": ns}, "results": results, "summary": summary})
        };
        docs.push(doc);
    }
    match format {
        Format::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": docs});
            write_doc(out, &list, Format::Json)?;
        }
        _ => {
            for d in &docs {
                writeln!(out, "---")?;
                write_doc(out, d, Format::Yaml)?;
            }
        }
    }
    Ok(())
}

/// The evaluation threads of `--concurrency`: one per core unless given
/// (the cores this process may run on: a `taskset` shrinks it).
fn evaluation_threads(concurrency: Option<usize>) -> anyhow::Result<usize> {
    match concurrency {
        Some(0) => Err(usage("--concurrency must be at least 1")),
        Some(n) => Ok(n),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

#[cfg(test)]
mod threads_tests {
    use super::*;

    /// README: policies are evaluated on every core: one thread per core
    /// by default, `--concurrency N` otherwise, never zero.
    #[test]
    fn one_evaluation_thread_per_core_unless_told() {
        let cores = std::thread::available_parallelism().unwrap().get();
        assert_eq!(evaluation_threads(None).unwrap(), cores);
        assert_eq!(evaluation_threads(Some(3)).unwrap(), 3);
        let err = evaluation_threads(Some(0)).unwrap_err().to_string();
        assert!(err.contains("--concurrency"), "{err}");
    }
}
