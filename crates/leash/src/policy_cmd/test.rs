//! `leash test`: Kyverno's `kyverno test`. Finds test files, evaluates each
//! test's policies against its resources on every core, and compares the
//! results with the expected rows.
//!
//! # Invariants
//! 1. Test files run in parallel, one at a time per thread: the threads of
//!    `run_all` share only the list of test paths and the selector
//!    (read-only) and `next`, an atomic index (`fetch_add`, so each file runs
//!    on exactly one thread). Each file's policies, resources and results
//!    belong to the thread that runs it; no lock is taken.
//! 2. Every thread is scoped (`std::thread::scope`) and joined before
//!    `run_all` returns; a test whose thread panicked is reported as such
//!    (`TestError::Panicked`), not lost.
//! 3. The runs keep the files' order: each carries its index and goes to
//!    its slot after the join; printing starts after every run is done.
//! 4. Nothing here awaits (`run` is synchronous, on the runtime's
//!    `block_on` thread), so no guard is held across an `.await`.
//! 5. No Ctrl-C handler is installed: SIGINT ends the process with the
//!    signal's default action. `leash test` writes only to stdout and
//!    stderr, so an interrupted run leaves no file half written.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};
use clap::ValueEnum;
use leash_policy::vap::AdmissionPolicyBinding;
use leash_policy::vpol::EvaluationMode;
use leash_policy::{
    EvalRequest, Mutation, Operation, Prepared, RuleResult, Status, UserInfo, base_rule, wildcard,
};
use serde_json::{Value, json};

use super::cluster::MemoryCluster;
use super::load;
use super::patched::{self, PatchCheck};
use super::spec::{self, ExpectedRow, TestFile, Values};
use crate::cli_error::{EXIT_FAILURE, usage};

/// Output formats of `leash test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// One table per test and a summary.
    Table,
    /// One JSON document with every test and row.
    Json,
}

/// Flags of `leash test`: leash's own and every flag of `kyverno test`
/// (v1.19): the ones leash cannot honour fail naming the flag.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Test files, or directories searched recursively (dot-directories included).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// The test file name to look for in directories.
    #[arg(
        long,
        short = 'f',
        default_value = "kyverno-test.yaml",
        value_name = "NAME"
    )]
    file_name: String,
    /// Run only the rows that match, e.g. `policy=require-*,rule=*,resource=bad*`.
    #[arg(long, short = 't', value_name = "SELECTOR")]
    test_case_selector: Option<String>,
    /// Print only the rows that did not match.
    #[arg(long)]
    fail_only: bool,
    /// Print each result's message.
    #[arg(long)]
    detailed_results: bool,
    /// Output format (Kyverno's --output-format; its yaml, markdown and
    /// junit are not supported and fail).
    #[arg(long, short = 'o', visible_alias = "output-format", value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Fail when no test file is found (without it, as `kyverno test`,
    /// finding none is not an error).
    #[arg(long)]
    require_tests: bool,
    /// Accepted for Kyverno's scripts: leash prints no colour.
    #[arg(long)]
    remove_color: bool,
    /// Not supported (fails): leash reads no git repositories.
    #[arg(long, short = 'b', value_name = "BRANCH", help_heading = REFUSED)]
    git_branch: Option<String>,
    /// Read image registries for `imageRegistry` context entries and CEL's
    /// `image.GetMetadata` of images a test's Context file does not give
    /// (anonymously; plain HTTP for localhost and loopback registries), as
    /// `kyverno test --registry`. Without it, `imageRegistry` entries are
    /// left out of the context, as Kyverno's.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_name = "BOOL", action = clap::ArgAction::Set)]
    registry: Option<bool>,
    /// With --registry: the bound on one image's registry round trips.
    #[arg(long, value_name = "DURATION", default_value = "20s", value_parser = humantime::parse_duration)]
    registry_timeout: std::time::Duration,
    #[command(flatten)]
    trust_root: crate::trust_root::TrustRootArgs,
    /// Not supported (fails): leash gives no deprecation warnings to turn
    /// into errors.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "BOOL", help_heading = REFUSED)]
    warnings_as_errors: Option<String>,
}

const REFUSED: &str = "Kyverno flags leash refuses (each fails naming the flag)";

impl Args {
    /// The first refused flag given, with why.
    fn check(&self) -> Result<()> {
        let given = [
            ("--git-branch", self.git_branch.is_some()),
            ("--warnings-as-errors", self.warnings_as_errors.is_some()),
        ];
        match given.iter().find(|(_, g)| *g) {
            Some((flag, _)) => Err(usage(format!(
                "{flag} (a kyverno test flag) is not supported by leash test: see `leash test --help`"
            ))),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Selector {
    policy: Option<String>,
    rule: Option<String>,
    resource: Option<String>,
}

impl Selector {
    fn parse(s: &str) -> Result<Selector> {
        let mut sel = Selector::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = part.split_once('=') else {
                return Err(usage(format!(
                    "--test-case-selector: {part:?} is not key=value"
                )));
            };
            let slot = match k.trim() {
                "policy" => &mut sel.policy,
                "rule" => &mut sel.rule,
                "resource" => &mut sel.resource,
                other => {
                    return Err(usage(format!(
                        "--test-case-selector: unknown key {other:?} (policy, rule, resource)"
                    )));
                }
            };
            *slot = Some(v.trim().to_string());
        }
        Ok(sel)
    }

    fn keeps(&self, policy: &str, rule: &str, resource: &str) -> bool {
        let ok =
            |pat: &Option<String>, v: &str| pat.as_ref().is_none_or(|p| wildcard::matches(p, v));
        ok(&self.policy, policy) && ok(&self.rule, rule) && ok(&self.resource, resource)
    }
}

/// One compared row (per resource).
#[derive(Debug, Clone)]
struct Outcome {
    policy: String,
    rule: String,
    resource: String,
    expected: Status,
    got: Result<Status, String>,
    message: String,
    /// The `patchedResources` comparison, when the row names a file.
    patched: Option<Result<PatchCheck, String>>,
    /// Whether the result compared came from a mutate rule.
    mutate_rule: bool,
    /// The policy gave no result the row names for a resource Kyverno's CLI
    /// has a response of the policy for: it passes such a row
    /// ("Excluded").
    excluded: bool,
}

impl Outcome {
    /// A row `kyverno test` leaves out: its patched-resource file does not
    /// hold the resource.
    fn left_out(&self) -> Option<&str> {
        match &self.patched {
            Some(Ok(PatchCheck::NotInFile(why))) => Some(why),
            _ => None,
        }
    }

    fn patch_ok(&self) -> bool {
        matches!(
            self.patched,
            None | Some(Ok(PatchCheck::Equal)) | Some(Ok(PatchCheck::NotInFile(_)))
        )
    }

    /// A `fail` row of a mutate rule (or with a patched resource): a
    /// mutate rule never fails, and `kyverno test` counts a `fail` row whose
    /// check did not hold as passed, so such a row always passes there; so
    /// it does here (the table says why).
    fn mutate_fail_row(&self) -> bool {
        self.expected == Status::Fail
            && self.got.is_ok()
            && (self.mutate_rule || self.patched.is_some())
    }

    fn expected_mismatch(&self) -> bool {
        self.mutate_fail_row() && matches!(self.patched, Some(Ok(PatchCheck::Differs(_))))
    }

    fn ok(&self) -> bool {
        self.excluded
            || self.left_out().is_some()
            || self.mutate_fail_row()
            || (self.patch_ok() && self.got.as_ref().is_ok_and(|g| *g == self.expected))
    }

    /// Why the patched resource check failed, one line each.
    fn patch_problems(&self) -> Vec<String> {
        match &self.patched {
            Some(Ok(PatchCheck::Differs(d))) => d.clone(),
            Some(Err(e)) => vec![e.clone()],
            _ => Vec::new(),
        }
    }
}

/// What running one test file gave.
#[derive(Debug)]
struct TestRun {
    path: PathBuf,
    name: String,
    outcome: Result<Vec<Outcome>, TestError>,
}

/// Why a test file gave no rows to compare.
#[derive(Debug)]
enum TestError {
    /// The file is not a valid test: the reason names the file, the entry
    /// and the field (`` kyverno-test.yaml: results[2]: missing field `result` ``).
    Invalid(String),
    /// The test could not run: a policy or resource it names does not load.
    NotRun(String),
    /// Evaluating it panicked.
    Panicked,
}

impl std::fmt::Display for TestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestError::Invalid(why) => write!(f, "invalid test file: {why}"),
            TestError::NotRun(why) => write!(f, "the test could not run: {why}"),
            TestError::Panicked => f.write_str("the test panicked"),
        }
    }
}

impl TestRun {
    fn passed(&self) -> bool {
        self.outcome
            .as_ref()
            .is_ok_and(|rows| !rows.is_empty() && rows.iter().all(Outcome::ok))
    }
}

/// Finds the test files under `paths`.
fn find_tests(paths: &[PathBuf], file_name: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| usage(format!("{}: {e}", p.display())))?;
        if meta.is_file() {
            out.push(p.clone());
            continue;
        }
        let mut stack = vec![p.clone()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir)
                .with_context(|| format!("cannot read directory {}", dir.display()))?;
            for entry in entries {
                let entry = entry?;
                let path = entry.path();
                if entry.file_type()?.is_dir() {
                    stack.push(path);
                } else if path.file_name().is_some_and(|n| n == file_name) {
                    out.push(path);
                }
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Runs `leash test`.
pub(crate) fn run(args: Args) -> Result<ExitCode> {
    args.check()?;
    let selector = match &args.test_case_selector {
        Some(s) => Selector::parse(s)?,
        None => Selector::default(),
    };
    let tests = find_tests(&args.paths, &args.file_name)?;
    if tests.is_empty() {
        let (level, code) = if args.require_tests {
            ("error", ExitCode::from(EXIT_FAILURE))
        } else {
            ("note", ExitCode::SUCCESS)
        };
        eprintln!(
            "leash: {level}: no test file named {} under {}{}",
            args.file_name,
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if args.require_tests {
                " (--require-tests)"
            } else {
                ""
            }
        );
        return Ok(code);
    }
    // Registry lookups wait on the runtime from the test threads (plain
    // threads, not the runtime's).
    let trust_root = args
        .trust_root
        .trust_root(args.registry_timeout.max(crate::trust_root::TIMEOUT))?;
    let credentials = if args.registry == Some(true) {
        crate::trust_root::docker_credentials()?
    } else {
        Default::default()
    };
    let registry = (args.registry == Some(true)).then(|| {
        let registry = leash_images::Registry::new(leash_images::RegistrySettings {
            timeout: args.registry_timeout,
            trust_root,
            credentials: credentials.clone(),
            ..Default::default()
        });
        (Arc::new(registry), tokio::runtime::Handle::current())
    });
    let runs = run_all(&tests, &selector, registry.as_ref());
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.output {
        Format::Table => print_table(&mut out, &runs, args.fail_only, args.detailed_results)?,
        Format::Json => print_json(&mut out, &runs, args.fail_only)?,
    }
    out.flush()?;
    Ok(if runs.iter().all(TestRun::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILURE)
    })
}

/// Runs every test file, several at once (one per core); results keep the
/// files' order (and, within a file holding several tests, theirs).
/// An image registry and the runtime its lookups wait on.
type Registered = (Arc<leash_images::Registry>, tokio::runtime::Handle);

fn run_all(tests: &[PathBuf], selector: &Selector, registry: Option<&Registered>) -> Vec<TestRun> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(tests.len())
        .max(1);
    let next = AtomicUsize::new(0);
    let mut runs: Vec<Option<Vec<TestRun>>> = (0..tests.len()).map(|_| None).collect();
    let done: Vec<(usize, Vec<TestRun>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        // Relaxed: the counter only hands out indices; results
                        // are joined through the scope.
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = tests.get(i) else { break };
                        mine.push((i, run_one(path, selector, registry)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    for (i, r) in done {
        runs[i] = Some(r);
    }
    runs.into_iter()
        .enumerate()
        .flat_map(|(i, r)| {
            r.unwrap_or_else(|| {
                vec![TestRun {
                    path: tests[i].clone(),
                    name: String::new(),
                    outcome: Err(TestError::Panicked),
                }]
            })
        })
        .collect()
}

fn run_one(path: &Path, selector: &Selector, registry: Option<&Registered>) -> Vec<TestRun> {
    match TestFile::read_all(path) {
        Err(e) => vec![TestRun {
            path: path.to_path_buf(),
            name: String::new(),
            outcome: Err(TestError::Invalid(format!("{e:#}"))),
        }],
        Ok(tests) => tests
            .iter()
            .map(|test| TestRun {
                path: path.to_path_buf(),
                name: test.name.clone(),
                outcome: evaluate_test(test, selector, registry)
                    .map_err(|e| TestError::NotRun(format!("{e:#}"))),
            })
            .collect(),
    }
}

struct Evaluated {
    /// The resource as the test gives it.
    object: Arc<Value>,
    /// What the mutate rules did to it.
    mutation: Mutation,
    /// The validate results, on the mutated resource (and the generate
    /// rules' results).
    results: Vec<RuleResult>,
    /// What each generate rule would create: (policy, rule, downstreams).
    generated: Vec<(Arc<str>, String, Vec<Value>)>,
}

fn evaluate_test(
    test: &TestFile,
    selector: &Selector,
    registry: Option<&Registered>,
) -> Result<Vec<Outcome>> {
    let mut policy_paths = test.policies.clone();
    policy_paths.extend(test.exceptions.iter().cloned());
    let loaded = load::load_policies(&policy_paths)?;
    let values = match &test.values {
        Some(p) => Values::read(p)?,
        None => Values::default(),
    };
    let user = match &test.userinfo {
        Some(p) => spec::read_userinfo(p)?,
        None => UserInfo::default(),
    };
    let context = match &test.context {
        Some(p) => spec::read_context(p)?,
        None => spec::ContextData::default(),
    };
    let mut objects = context.objects;
    // The objects that exist in the cluster: configMap context entries,
    // `apiCall`s and CEL `resource.Get/List` read them.
    // (An object without a namespace is found in `default`.)
    for file in &test.cluster_resources {
        objects.extend(spec::read_cluster_resources(file, &test.dir)?);
    }
    // Admission policies' parameter resources are read from the cluster.
    objects.extend(load::load_resources(&test.param_resources)?);
    // The existing resources `mutate.targets` rules look up.
    let mut targets = load::load_resources(&test.target_resources)?;
    for t in &mut targets {
        load::default_namespace(t);
    }
    objects.extend(targets);
    // The sources that clone rules copy are cluster data too.
    let mut clone_sources: Vec<PathBuf> = test
        .results
        .iter()
        .filter_map(|r| r.clone_source.clone())
        .collect();
    clone_sources.sort();
    clone_sources.dedup();
    for mut object in load::load_resources(&clone_sources)? {
        load::default_namespace(&mut object);
        objects.push(object);
    }
    let cluster = MemoryCluster::new(objects)
        .with_images(context.images)
        .with_http_answers(test.http_answers.clone())
        .with_globals(test.global_entries.clone());
    let cluster = match registry {
        Some((registry, _)) => cluster.with_registry(registry.clone()),
        None => cluster.without_registry(),
    };
    let mut resources = load::load_resources(&test.resources)?;
    for r in &mut resources {
        load::default_namespace(r);
    }
    // Each resource narrowed to what the policies read, as `apply
    // --cluster` builds the objects it loads: the results must not change,
    // and the conformance corpus checks that they do not.
    // (DeletingPolicies and ValidatingAdmissionPolicies may read anything
    // of it.)
    let reads = if loaded.deleting.is_empty() && loaded.admission.is_empty() {
        loaded.engine.reads()
    } else {
        leash_policy::ReadSet::all()
    };
    let resources: Vec<Arc<Value>> = resources
        .into_iter()
        .map(|object| {
            Arc::new(if reads.is_all() {
                object
            } else {
                reads.prune(&object)
            })
        })
        .collect();
    // The JSON payloads, and HTTP and Envoy authorization requests: each
    // named by its path as the test writes it; a JSON payload evaluated by
    // the JSON-mode ValidatingPolicies and the DeletingPolicies, a request
    // by the ValidatingPolicies of its mode.
    let mut payloads = Vec::new();
    for ((name, file), authz) in (test.json_payloads.iter().map(|p| (p, None)))
        .chain(
            test.http_payloads
                .iter()
                .map(|p| (p, Some(EvaluationMode::Http))),
        )
        .chain(
            test.envoy_payloads
                .iter()
                .map(|p| (p, Some(EvaluationMode::Envoy))),
        )
    {
        payloads.push((name, Arc::new(spec::read_json_payload(name, file)?), authz));
    }
    let evaluate = |cluster: &MemoryCluster| -> Vec<Evaluated> {
        let mut evaluated: Vec<Evaluated> = resources
            .iter()
            .map(|object| {
                let object = object.clone();
                let ns = object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let req = EvalRequest {
                    object: object.clone(),
                    old_object: None,
                    operation: Operation::Create,
                    user_info: user.clone(),
                    namespace_labels: values.namespace_labels.get(&ns).cloned(),
                    namespace_object: values.namespaces.get(&ns).cloned().map(Arc::new),
                    request_resource: values.request_resource(&object),
                };
                let trigger = Prepared::new(req.clone());
                let (mutation, results) = (loaded.engine.evaluation(cluster))
                    .bindings(&values.bindings)
                    .apply(req.clone());
                let mut results = results.into_vec();
                // The ValidatingAdmissionPolicies, on the mutated resource, each
                // through the bindings that name it.
                let mutated = EvalRequest {
                    object: mutation.object.clone(),
                    ..req
                };
                for policy in &loaded.admission {
                    let bindings: Vec<&AdmissionPolicyBinding> = loaded
                        .admission_bindings
                        .iter()
                        .filter(|b| b.policy_name() == policy.name())
                        .map(|b| &**b)
                        .collect();
                    results.extend(policy.evaluate(&mutated, &bindings, cluster));
                }
                let mut generated = Vec::new();
                for (policy, g) in loaded.engine.generate(&trigger, cluster, &values.bindings) {
                    generated.push((policy.key().clone(), g.result.rule.clone(), g.downstreams));
                    results.push(g.result);
                }
                for (policy, g) in loaded.engine.generate_cel(&trigger, cluster) {
                    generated.push((Arc::from(policy.name()), String::new(), g.downstreams));
                    results.push(g.result);
                }
                // Whether each DeletingPolicy would delete the resource (one
                // result per policy, matched or not, as Kyverno's CLI gives).
                for dpol in &loaded.deleting {
                    results.push(dpol.evaluate(&trigger, cluster, loaded.engine.exceptions()));
                }
                Evaluated {
                    object,
                    mutation,
                    results,
                    generated,
                }
            })
            .collect();
        for (name, payload, authz) in &payloads {
            let payload = payload.clone();
            let prepared = Prepared::new(EvalRequest::create(payload.clone()));
            let results = match authz {
                Some(mode) => loaded.engine.evaluate_authz(*mode, &prepared, cluster),
                None => {
                    let mut results = loaded.engine.evaluate_json(&prepared, cluster);
                    for dpol in &loaded.deleting {
                        results.push(dpol.evaluate(&prepared, cluster, loaded.engine.exceptions()));
                    }
                    results
                }
            };
            evaluated.push(Evaluated {
                object: Arc::new(json!({"metadata": {"name": name}})),
                mutation: Mutation {
                    object: payload,
                    steps: Vec::new(),
                },
                results,
                generated: Vec::new(),
            });
        }
        evaluated
    };
    let mut evaluated = evaluate(&cluster);
    // With --registry: the images the evaluation missed are fetched (all
    // at once, on the runtime, from this test thread) and the test is
    // evaluated again; the engine never waits on a registry.
    if let Some((_, handle)) = registry {
        for _ in 1..leash_controller::lookups::ROUNDS {
            if !handle.block_on(cluster.fetch_missed_images()) {
                break;
            }
            evaluated = evaluate(&cluster);
        }
    }
    if test.results.is_empty() {
        anyhow::bail!("the test has no results to check");
    }
    // The policies `kyverno test` has a response for on every resource,
    // whether a rule matched it or not: a row naming one of them that no
    // rule result answers is passed as "Excluded".
    let mut responding: HashSet<&str> = loaded
        .engine
        .policies()
        .iter()
        .filter(|p| p.has_mutate_rules() || p.rule_names().next().is_some())
        .map(|p| p.name())
        .collect();
    responding.extend(loaded.admission.iter().map(|p| p.name()));
    // And the ValidatingPolicies and MutatingPolicies whose constraints
    // are more than one plain resource rule (Kyverno's `hasSelector`).
    responding.extend(
        (loaded.engine.validating_policies().iter())
            .filter(|p| p.responds_to_every_resource())
            .map(|p| p.name()),
    );
    responding.extend(
        (loaded.engine.mutating_policies().iter())
            .filter(|p| p.responds_to_every_resource())
            .map(|p| p.name()),
    );
    let mut rows = Vec::new();
    for row in &test.results {
        for wanted in row_resources(row, &evaluated) {
            if !selector.keeps(&row.policy, &row.rule, &wanted.display) {
                continue;
            }
            let policy_name = row.policy.rsplit('/').next().unwrap_or(&row.policy);
            rows.push(compare(
                row,
                &wanted,
                &evaluated,
                responding.contains(policy_name),
            ));
        }
    }
    Ok(rows)
}

/// A resource a row checks.
#[derive(Debug, Clone, PartialEq)]
struct Wanted {
    /// The namespace, when the row names it (`NS/NAME`) or the resource was
    /// picked whole.
    ns: Option<String>,
    name: String,
    /// The kind, when the resource was picked whole (the row's `kind`
    /// otherwise).
    kind: Option<String>,
    /// As the row names it.
    display: String,
}

impl Wanted {
    fn named(resource: &str) -> Wanted {
        let (ns, name) = match resource.split_once('/') {
            Some((ns, name)) => (Some(ns.to_string()), name.to_string()),
            None => (None, resource.to_string()),
        };
        Wanted {
            ns,
            name,
            kind: None,
            display: resource.to_string(),
        }
    }

    fn of(object: &Value) -> Wanted {
        let meta = &object["metadata"];
        let ns = meta["namespace"].as_str().unwrap_or("");
        let name = meta["name"].as_str().unwrap_or("");
        Wanted {
            ns: Some(ns.to_string()),
            name: name.to_string(),
            kind: object["kind"].as_str().map(String::from),
            display: if ns.is_empty() {
                name.to_string()
            } else {
                format!("{ns}/{name}")
            },
        }
    }

    fn is(&self, row: &ExpectedRow, object: &Value) -> bool {
        let meta = &object["metadata"];
        let kind = self.kind.as_deref().unwrap_or(row.kind.as_str());
        meta["name"].as_str() == Some(self.name.as_str())
            && in_namespace(row, self.ns.as_deref(), meta)
            && (kind.is_empty() || object["kind"].as_str() == Some(kind))
    }
}

/// The resources a row checks, as `kyverno test` picks them: those its
/// `resources` name that exist (a resource of the test, or an existing
/// resource a `mutate.targets` rule patched); when it names none that
/// exist, or none at all, every one of them.
fn row_resources(row: &ExpectedRow, evaluated: &[Evaluated]) -> Vec<Wanted> {
    let targets = || {
        evaluated
            .iter()
            .flat_map(|e| &e.mutation.steps)
            .flat_map(|s| &s.targets)
            .map(|t| &*t.object)
    };
    let all = || evaluated.iter().map(|e| &*e.object).chain(targets());
    let exists = |w: &Wanted| {
        let meta_only = Wanted {
            kind: Some(String::new()),
            ..w.clone()
        };
        all().any(|o| meta_only.is(row, o))
    };
    let named: Vec<Wanted> = row
        .resources
        .iter()
        .map(|r| Wanted::named(r))
        .filter(exists)
        .collect();
    if !named.is_empty() {
        return named;
    }
    let mut out: Vec<Wanted> = Vec::new();
    for o in all() {
        let w = Wanted::of(o);
        if !out.contains(&w) {
            out.push(w);
        }
    }
    out
}

/// Whether an object's `metadata` is in the namespace a row names: in the
/// resource's `NS/NAME` form, and in the row's `namespace` field.
fn in_namespace(row: &ExpectedRow, ns: Option<&str>, meta: &Value) -> bool {
    let actual = meta["namespace"].as_str().unwrap_or("");
    ns.is_none_or(|ns| actual == ns) && (row.namespace.is_empty() || actual == row.namespace)
}

fn compare(
    row: &ExpectedRow,
    wanted: &Wanted,
    evaluated: &[Evaluated],
    responding: bool,
) -> Outcome {
    let named = |e: &&Evaluated| {
        let loose = Wanted {
            kind: wanted.kind.clone().or(Some(String::new())),
            ..wanted.clone()
        };
        loose.is(row, &e.object)
    };
    let by_kind: Vec<&Evaluated> = evaluated
        .iter()
        .filter(|e| wanted.is(row, &e.object))
        .collect();
    let candidates = if by_kind.is_empty() {
        evaluated.iter().filter(named).collect()
    } else {
        by_kind
    };
    let mut outcome = Outcome {
        policy: row.policy.clone(),
        rule: row.rule.clone(),
        resource: wanted.display.clone(),
        expected: row.result,
        got: Err(format!(
            "resource {} not found in the test's resources",
            wanted.display
        )),
        message: String::new(),
        patched: None,
        mutate_rule: false,
        excluded: false,
    };
    if candidates.is_empty() {
        // Not an admitted resource: maybe an existing one a
        // `mutate.targets` rule patched.
        if let Some((status, message, object)) = target_result(row, wanted, evaluated) {
            outcome.got = Ok(status);
            outcome.message = message;
            outcome.mutate_rule = true;
            if let Some(file) = &row.patched_resource {
                outcome.patched = Some(patched::check(object, file).map_err(|e| format!("{e:#}")));
            }
        }
        return outcome;
    }
    // The matching results, each with the resource it saw: a mutate rule
    // the resource after its policy, a validate rule the mutated resource.
    let mut got: Option<(Status, String, &Arc<Value>)> = None;
    let mut from_mutate = false;
    let mut last_object = &candidates[0].mutation.object;
    for e in &candidates {
        last_object = &e.mutation.object;
        let mutated = e
            .mutation
            .steps
            .iter()
            .flat_map(|s| s.results.iter().map(move |r| (r, &s.object, true)));
        let validated = e.results.iter().map(|r| (r, &e.mutation.object, false));
        for (r, object, is_mutate) in mutated.chain(validated) {
            let policy_ok =
                *r.policy == row.policy || r.policy.rsplit('/').next() == Some(row.policy.as_str());
            // A row without a rule names every result of the policy, and
            // so does any row of a policy kind without rules (Kyverno's
            // CLI ignores the `rule` of such a row).
            let rule_ok = row.rule.is_empty()
                || r.source != leash_policy::Source::Kyverno
                || r.rule == row.rule
                || base_rule(&r.rule) == row.rule;
            if policy_ok && rule_ok {
                // Every matching result must agree: keep the first one that
                // differs from the expectation.
                let keep = match &got {
                    None => true,
                    Some((s, _, _)) => *s == row.result && r.status != row.result,
                };
                if keep {
                    got = Some((r.status, r.message.clone(), object));
                    from_mutate = is_mutate;
                }
            }
        }
    }
    if got.is_none() {
        got = target_result(row, wanted, evaluated);
        from_mutate = got.is_some();
    }
    if got.is_none() && responding {
        // Kyverno's CLI has a response of this policy for the resource
        // with no rule result the row names: it passes the row, whatever
        // it expects ("Excluded").
        outcome.got = Ok(Status::Skip);
        outcome.message = "no rule of the policy applies to the resource (excluded)".into();
        outcome.excluded = true;
        return outcome;
    }
    outcome.mutate_rule = from_mutate;
    let (status, message, object) = got.unwrap_or((
        Status::Skip,
        "no result: the policy does not apply to the resource".into(),
        last_object,
    ));
    outcome.got = Ok(status);
    outcome.message = message;
    if let Some(file) = &row.patched_resource {
        outcome.patched = Some(patched::check(object, file).map_err(|e| format!("{e:#}")));
    }
    if let Some(file) = &row.generated_resource
        && status == Status::Pass
        && row.result == Status::Pass
    {
        let downstreams: Vec<&Value> = candidates
            .iter()
            .flat_map(|e| &e.generated)
            .filter(|(policy, rule, _)| {
                let policy_ok = **policy == row.policy
                    || policy.rsplit('/').next() == Some(row.policy.as_str());
                policy_ok && (row.rule.is_empty() || rule.is_empty() || *rule == row.rule)
            })
            .flat_map(|(_, _, objects)| objects)
            .collect();
        if let Err(why) = generated_matches(&downstreams, file) {
            outcome.got = Err(why);
        }
    }
    outcome
}

/// Whether one of a rule's downstreams is the expected generated resource
/// (compared as a patched resource is).
fn generated_matches(downstreams: &[&Value], file: &Path) -> Result<(), String> {
    if downstreams.is_empty() {
        return Err(format!(
            "the rule generated nothing; {} expects a resource",
            file.display()
        ));
    }
    let mut why = Vec::new();
    for d in downstreams {
        let id = format!(
            "{} {}/{}",
            d["kind"].as_str().unwrap_or(""),
            d["metadata"]["namespace"].as_str().unwrap_or(""),
            d["metadata"]["name"].as_str().unwrap_or("")
        );
        match patched::check(d, file) {
            Ok(PatchCheck::Equal) => return Ok(()),
            Ok(PatchCheck::Differs(d)) => why.push(format!(
                "generated {id} differs from {}: {}",
                file.display(),
                d.join("; ")
            )),
            Ok(PatchCheck::NotInFile(w)) => why.push(w),
            Err(e) => return Err(format!("{e:#}")),
        }
    }
    Err(why.join("; "))
}

/// The result of a `mutate.targets` rule on an existing resource the row
/// names (`kyverno test` looks rows up among the targets too), with the
/// patched target.
fn target_result<'e>(
    row: &ExpectedRow,
    wanted: &Wanted,
    evaluated: &'e [Evaluated],
) -> Option<(Status, String, &'e Arc<Value>)> {
    let mut got: Option<(Status, String, &Arc<Value>)> = None;
    for e in evaluated {
        for step in &e.mutation.steps {
            let policy_ok = *step.policy == row.policy
                || step.policy.rsplit('/').next() == Some(row.policy.as_str());
            if !policy_ok {
                continue;
            }
            for t in &step.targets {
                let named = wanted.is(row, &t.object);
                let rule_ok =
                    row.rule.is_empty() || t.rule == row.rule || base_rule(&t.rule) == row.rule;
                if !named || !rule_ok {
                    continue;
                }
                let keep = match &got {
                    None => true,
                    Some((s, _, _)) => *s == row.result && t.status != row.result,
                };
                if keep {
                    got = Some((t.status, t.message.clone(), &t.object));
                }
            }
        }
    }
    got
}

fn print_table(
    out: &mut impl Write,
    runs: &[TestRun],
    fail_only: bool,
    detailed: bool,
) -> Result<()> {
    let (mut passed, mut failed) = (0usize, 0usize);
    for run in runs {
        if run.name.is_empty() {
            // A file that does not parse has no name to show.
            writeln!(out, "Test {}", run.path.display())?;
        } else {
            writeln!(out, "Test {} ({})", run.name, run.path.display())?;
        }
        match &run.outcome {
            Err(e) => {
                failed += 1;
                writeln!(out, "  error: {e}")?;
            }
            Ok(rows) => {
                if rows.is_empty() {
                    writeln!(out, "  error: no result rows matched the selector")?;
                    failed += 1;
                }
                let mut table = vec![vec![
                    "ID".to_string(),
                    "POLICY".into(),
                    "RULE".into(),
                    "RESOURCE".into(),
                    "EXPECTED".into(),
                    "GOT".into(),
                    "RESULT".into(),
                ]];
                if detailed {
                    table[0].push("MESSAGE".into());
                }
                for (i, r) in rows.iter().enumerate() {
                    if r.ok() {
                        passed += 1;
                    } else {
                        failed += 1;
                    }
                    if fail_only && r.ok() {
                        continue;
                    }
                    let got = match (&r.got, r.patch_ok()) {
                        _ if r.excluded => "excluded".to_string(),
                        (Ok(s), true) => s.to_string(),
                        (Ok(s), false) => format!("{s} (patched resource differs)"),
                        (Err(e), _) => format!("- ({e})"),
                    };
                    let mut line = vec![
                        (i + 1).to_string(),
                        r.policy.clone(),
                        if r.rule.is_empty() {
                            "-".into()
                        } else {
                            r.rule.clone()
                        },
                        r.resource.clone(),
                        r.expected.to_string(),
                        got,
                        if r.left_out().is_some() {
                            "SKIPPED".into()
                        } else if r.ok() {
                            "PASS".into()
                        } else {
                            "FAIL".into()
                        },
                    ];
                    if detailed {
                        line.push(r.message.replace('\n', " "));
                    }
                    table.push(line);
                }
                if table.len() > 1 {
                    write_columns(out, &table)?;
                }
                for (i, r) in rows.iter().enumerate() {
                    if r.excluded {
                        writeln!(
                            out,
                            "  row {}: passed as kyverno test passes it: the policy has a response for the resource but no rule result the row names (excluded)",
                            i + 1
                        )?;
                    }
                    if r.mutate_fail_row() && r.patch_problems().is_empty() {
                        writeln!(
                            out,
                            "  row {}: passed as kyverno test passes it: a mutate rule never fails, and a fail row counts as passed",
                            i + 1
                        )?;
                    }
                    if let Some(why) = r.left_out() {
                        writeln!(
                            out,
                            "  row {}: left out, as kyverno test leaves it out: {why}",
                            i + 1
                        )?;
                    }
                    let problems = r.patch_problems();
                    if problems.is_empty() {
                        continue;
                    }
                    let how = if r.expected_mismatch() {
                        "differs from the patched resource, as a fail row expects"
                    } else {
                        "differs from the patched resource"
                    };
                    writeln!(out, "  row {}: the mutated resource {how}:", i + 1)?;
                    for p in problems.iter().take(20) {
                        writeln!(out, "    {p}")?;
                    }
                    if problems.len() > 20 {
                        writeln!(out, "    ... and {} more", problems.len() - 20)?;
                    }
                }
            }
        }
        writeln!(out)?;
    }
    let tests_ok = runs.iter().filter(|r| r.passed()).count();
    writeln!(
        out,
        "Test summary: {tests_ok} of {} test files passed; {passed} passed, {failed} failed",
        runs.len()
    )?;
    Ok(())
}

fn write_columns(out: &mut impl Write, rows: &[Vec<String>]) -> Result<()> {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::from("  ");
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

fn print_json(out: &mut impl Write, runs: &[TestRun], fail_only: bool) -> Result<()> {
    let tests: Vec<Value> = runs
        .iter()
        .map(|run| {
            let mut t = json!({"path": run.path.display().to_string(), "name": run.name, "passed": run.passed()});
            match &run.outcome {
                Err(e) => t["error"] = json!(e.to_string()),
                Ok(rows) => {
                    t["results"] = rows
                        .iter()
                        .filter(|r| !fail_only || !r.ok())
                        .map(|r| {
                            json!({
                                "policy": r.policy, "rule": r.rule, "resource": r.resource,
                                "expected": r.expected.as_str(),
                                "got": r.got.as_ref().map(|s| s.as_str()).ok(),
                                "error": r.got.as_ref().err(),
                                "message": r.message, "passed": r.ok(),
                                "excluded": r.excluded,
                                "patchedResource": r.patched.as_ref().map(|p| match p {
                                    Ok(PatchCheck::Equal) => json!({"equal": true}),
                                    Ok(PatchCheck::Differs(d)) => json!({"equal": false, "differences": d}),
                                    Ok(PatchCheck::NotInFile(why)) => json!({"leftOut": why}),
                                    Err(e) => json!({"error": e}),
                                }),
                            })
                        })
                        .collect();
                }
            }
            t
        })
        .collect();
    let passed = runs.iter().filter(|r| r.passed()).count();
    let doc = json!({"tests": tests, "summary": {"tests": runs.len(), "passed": passed, "failed": runs.len() - passed}});
    serde_json::to_writer_pretty(&mut *out, &doc)?;
    writeln!(out)?;
    Ok(())
}
