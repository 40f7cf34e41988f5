//! `leash apply --cluster`: load only the kinds the policies match, through
//! leash-loader, and evaluate objects as pages arrive on every core.
//!
//! # Invariants
//! 1. Memory is bounded by the loader's window plus one bounded channel per
//!    evaluation task (two pages each) and the output channel (two chunks
//!    per task): pages are evaluated and dropped; only results are kept
//!    (all of them with `--policy-report` or `--detailed-results`, else only
//!    non-pass ones and the counts), and at most `MAX_ANSWERS` of the
//!    server's answers.
//! 2. No thread of its own and no `block_on`: the evaluation tasks and the
//!    stdout writer (a blocking task) are in `JoinSet`s joined before `run`
//!    returns; the loader's tasks belong to its own scope and end with its
//!    cancellation token.
//! 3. The engine never waits on the network. What a rule reads that is not
//!    loaded (an `apiCall` `urlPath`, CEL `resource.Get`/`List`, an image
//!    with `--registry`) is recorded as missed by leash-controller's
//!    `ScanData`, read between evaluations (`ScanData::settle`, at most one
//!    read in flight per lookup) and kept for the run; a failed read is
//!    not kept.
//! 4. Ctrl-C cancels the token: the load stops, the tasks stop between
//!    objects and their channel sends and lookups are raced against it. A
//!    writer that cannot stop (blocked on a stdout nobody reads) is not
//!    waited for past `INTERRUPT_GRACE`: the process exits 130.
//! 5. With a task per core, each object is evaluated in the loader's walk
//!    of its page, right after it is built, on the core that built it
//!    (`Evaluator::finish`; what the tasks get is its results). An object
//!    whose evaluation missed cluster data goes to the tasks as its value
//!    and is evaluated again there. Evaluating has no effects, so results
//!    of a page the loader then rejects (and fetches again) are dropped
//!    with it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use leash_controller::lookups::ScanData;

use anyhow::Result;
use leash_controller::kinds::select_kinds;
use leash_loader::{KindSelection, LoadOptions, Loader, NamespaceSelection};
use leash_policy::{
    Bindings, ClusterData, Engine, EvalRequest, Memo, MemoStats, Operation, RuleResult, Status,
    UserInfo,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cli_error::usage;
use crate::connection::ctrl_c;
use crate::load_cmd::args::Connection;
use crate::load_cmd::connect::{Connected, connect};

/// What `--cluster` needs besides the policies.
#[derive(Debug)]
pub(crate) struct ClusterSettings {
    pub connection: Connection,
    pub namespaces: NamespaceSelection,
    pub list_concurrency: usize,
    pub page_size: u32,
}

/// A resource reference kept with its results (the object itself is dropped).
fn reference(o: &Value) -> Value {
    let m = &o["metadata"];
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"],
           "metadata": {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"]}})
}

/// What the evaluation threads keep of the results.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keep {
    /// Every result (reports, JSON/YAML output).
    All,
    /// Results other than pass.
    NonPass,
    /// Nothing: table lines go to stdout as objects are evaluated.
    Stream {
        /// Print passes too.
        detailed: bool,
    },
}

/// How long blocked output is waited for after Ctrl-C.
const INTERRUPT_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the server's answers are used: the whole run.
const RUN: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How many of the server's answers are kept at most (past it, they are
/// read again).
const MAX_ANSWERS: usize = 100_000;

/// Statuses in the order of [`Status`]'s discriminants: counts are kept
/// by them.
const STATUSES: [Status; 5] = [
    Status::Pass,
    Status::Fail,
    Status::Warn,
    Status::Error,
    Status::Skip,
];

/// Results gathered by one evaluation thread.
#[derive(Default)]
struct Gathered {
    kept: Vec<(Arc<Value>, Vec<RuleResult>)>,
    counts: [usize; STATUSES.len()],
    objects: usize,
    /// The memo of the objects this thread evaluated.
    memos: Vec<Memo>,
}

impl Gathered {
    fn add(&mut self, e: Evaluated, lines: &mut String) {
        self.objects += 1;
        for (c, n) in self.counts.iter_mut().zip(e.counts) {
            *c += n as usize;
        }
        lines.push_str(&e.lines);
        self.kept.extend(e.kept);
    }
}

/// What one object's evaluation gave, as the evaluation threads gather it.
#[derive(Debug, Clone, Default)]
struct Evaluated {
    counts: [u32; STATUSES.len()],
    /// The object's reference and its results, as [`Keep`] says.
    kept: Option<(Arc<Value>, Vec<RuleResult>)>,
    /// Table lines (`Keep::Stream`), each ending in a newline.
    lines: String,
}

/// What evaluating an object needs, owned: objects are evaluated in the
/// loader's walk ([`leash_loader::ItemParser::finish`]) as well as on the
/// evaluation threads.
struct Evaluator {
    engine: Engine,
    /// What the policies read: each object is built with only that.
    reads: leash_policy::Builder,
    namespaces: HashMap<String, Arc<Value>>,
    /// The kinds loaded before the evaluation (namespaces, ConfigMaps).
    cache: Arc<leash_controller::Cache>,
    /// The server's answers to what rules read beyond those.
    lookups: Arc<leash_controller::lookups::Lookups>,
    /// Image registries (`--registry`).
    registry: Option<Arc<leash_images::Registry>>,
    /// The global context entries, ready before the evaluation.
    global: Option<leash_context::Store>,
    client: kube::Client,
    bindings: Bindings,
    user: UserInfo,
    keep: Keep,
    /// Whether objects are evaluated in the loader's walk.
    inline: bool,
    /// The run's: once cancelled (Ctrl-C), the walk evaluates nothing more.
    token: CancellationToken,
    /// The walk's memos not in use (one per object being evaluated at
    /// most); the lock is held only to take or return one.
    memos: Mutex<Vec<Memo>>,
}

impl Evaluator {
    fn evaluate(
        &self,
        object: Arc<Value>,
        cluster: &dyn ClusterData,
        memo: Option<&mut Memo>,
    ) -> Evaluated {
        let ns = object["metadata"]["namespace"].as_str().unwrap_or("");
        let ns_object = self.namespaces.get(ns).cloned();
        let labels = ns_object.as_deref().map(leash_policy::labels_of);
        let req = EvalRequest {
            object: object.clone(),
            old_object: None,
            // As Kyverno's CLI: a CREATE of each object.
            operation: Operation::Create,
            user_info: self.user.clone(),
            namespace_labels: labels,
            namespace_object: ns_object,
            request_resource: None,
        };
        // Mutate rules first, then validate rules on the mutated object, as
        // Kyverno's CLI; the mutated object is not written back.
        let (mutation, results) = self
            .engine
            .evaluation(cluster)
            .bindings(&self.bindings)
            .memo(memo)
            .apply(req);
        let mut e = Evaluated::default();
        let all = || mutation.results().chain(results.iter());
        for r in all() {
            e.counts[r.status as usize] += 1;
        }
        let kept: Vec<RuleResult> = match self.keep {
            Keep::All => mutation
                .results()
                .cloned()
                .chain(results.into_vec())
                .collect(),
            Keep::NonPass => all()
                .filter(|r| r.status != Status::Pass)
                .cloned()
                .collect(),
            Keep::Stream { detailed } => {
                for r in all() {
                    super::apply::push_result_line(&mut e.lines, &object, r, detailed);
                }
                Vec::new()
            }
        };
        if !kept.is_empty() {
            e.kept = Some((Arc::new(reference(&object)), kept));
        }
        e
    }

    /// The cluster for one object's evaluation.
    fn data(&self) -> ScanData {
        let mut data = ScanData::new(self.cache.clone(), self.lookups.clone())
            // As Kyverno's CLI: no `apiCall` `service` call is made.
            .without_service_calls();
        if let Some(registry) = &self.registry {
            data = data.with_images(registry.clone());
        }
        if let Some(global) = &self.global {
            data = data.with_global(global.clone());
        }
        data
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Vec<Memo>> {
        self.memos
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl leash_loader::ItemParser for Evaluator {
    fn parse(
        &self,
        de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
    ) -> serde_json::Result<Value> {
        self.reads.parse_from(de)
    }

    /// Evaluates the object in the walk, unless it needs data from the
    /// server: the walk does not wait for it, so such an object goes to the
    /// evaluation tasks as its value (evaluated again there, with what it
    /// missed read in between; evaluating has no effects).
    fn finish(&self, value: Value) -> leash_loader::Parsed {
        // Interrupted: the rest of the page goes to the tasks, which stop.
        if !self.inline || self.token.is_cancelled() {
            return leash_loader::Parsed::Value(value);
        }
        let pooled = self.memo().pop();
        let mut memo = pooled.or_else(|| self.engine.memo(&self.bindings));
        let data = self.data();
        let object = Arc::new(value);
        let e = self.evaluate(object.clone(), &data, memo.as_mut());
        if let Some(m) = memo {
            self.memo().push(m);
        }
        if data.missed_any() {
            return leash_loader::Parsed::Value(Arc::unwrap_or_clone(object));
        }
        leash_loader::Parsed::Made(Arc::new(e))
    }
}

/// One evaluation task: takes pages from `pages` until they end or the
/// run is cancelled; an object the loader's walk evaluated is gathered, any
/// other is evaluated here, reading what it misses from the server between
/// evaluations (`ScanData::settle`: the engine never waits on the network).
async fn evaluate_pages(
    ev: Arc<Evaluator>,
    mut pages: tokio::sync::mpsc::Receiver<Vec<leash_loader::LoadedObject>>,
    out: tokio::sync::mpsc::Sender<String>,
) -> Gathered {
    let mut g = Gathered::default();
    // Results remembered by what each policy reads: this task's own (see
    // leash_policy::memo).
    let mut memo = None;
    let mut lines = String::new();
    while let Some(page) = ev.token.run_until_cancelled(pages.recv()).await.flatten() {
        for mut object in page {
            if ev.token.is_cancelled() {
                break;
            }
            if let Some(made) = object.take_made::<Evaluated>() {
                g.add(Arc::unwrap_or_clone(made), &mut lines);
                continue;
            }
            let parsed = match object.take_parsed() {
                Some(v) => Ok(v),
                None => ev.reads.parse(object.json()),
            };
            let value = match parsed {
                Ok(v) => Arc::new(v),
                Err(e) => {
                    // Not lost: named, and counted as an error (the exit
                    // status says so).
                    eprintln!(
                        "leash: error: {} {}/{} is not valid JSON: {e}",
                        object.kind().qualified_name(),
                        object.namespace().unwrap_or(""),
                        object.name()
                    );
                    g.counts[Status::Error as usize] += 1;
                    continue;
                }
            };
            if memo.is_none() {
                memo = ev.engine.memo(&ev.bindings);
            }
            let data = ev.data();
            let settled = data
                .settle(&ev.client, &ev.token, |data| {
                    ev.evaluate(value.clone(), data, memo.as_mut())
                })
                .await;
            match settled {
                Some(e) => g.add(e, &mut lines),
                None => break, // cancelled
            }
        }
        if !lines.is_empty() {
            // One write per page; a closed stdout only stops the lines, not
            // the evaluation.
            let chunk = std::mem::take(&mut lines);
            if ev
                .token
                .run_until_cancelled(out.send(chunk))
                .await
                .is_none()
            {
                break;
            }
        }
        // Evaluating is CPU work on the runtime's threads: the loader's
        // tasks get their turn between pages.
        tokio::task::yield_now().await;
    }
    g.memos.extend(memo);
    g
}

/// Writes the evaluation tasks' table lines to stdout, in the order they
/// come; a write error (a closed stdout) stops the lines, not the run.
fn write_lines(mut lines: tokio::sync::mpsc::Receiver<String>) {
    use std::io::Write as _;
    let mut open = true;
    while let Some(chunk) = lines.blocking_recv() {
        if open {
            open = std::io::stdout().lock().write_all(chunk.as_bytes()).is_ok();
        }
    }
}

/// What a thread's memo did, and the policies it could not answer for.
fn memo_summary(engine: &Engine, memo: &Memo) -> (MemoStats, Vec<String>) {
    let retired = memo
        .retired()
        .into_iter()
        .filter_map(|i| engine.memo_policy_name(i))
        .collect();
    (memo.stats(), retired)
}

/// Runs the cluster load and evaluation; returns the kept results, the
/// counts, the number of objects evaluated and whether Ctrl-C stopped it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    engine: &Engine,
    settings: ClusterSettings,
    bindings: &Bindings,
    user: &UserInfo,
    threads: usize,
    keep: Keep,
    registry: Option<Arc<leash_images::Registry>>,
) -> Result<Outcome> {
    let interrupted = AtomicBool::new(false);
    let token = CancellationToken::new();
    let Connected {
        client,
        sandbox,
        server,
    } = match connect(&settings.connection, ctrl_c()).await {
        Err(err) if crate::cli_error::is_interrupted(&err) => return Ok(Outcome::interrupted()),
        c => c?,
    };
    let options = LoadOptions {
        kinds: KindSelection::All {
            include_events: false,
        },
        namespaces: settings.namespaces.clone(),
        concurrency: settings.list_concurrency,
        page_size: settings.page_size,
        ..LoadOptions::default()
    };
    options.validate().map_err(|e| usage(e.to_string()))?;
    let loader = Loader::new(client.clone(), options).map_err(|e| usage(e.to_string()))?;
    let catalog = tokio::select! {
        c = loader.discover(&token) => c.map_err(|e| usage(format!("discovery of {server} failed: {e}")))?,
        _ = tokio::signal::ctrl_c() => return Ok(Outcome::interrupted()),
    };
    let (kinds, not_served) = select_kinds(engine, &catalog);
    for k in &not_served {
        eprintln!("leash: note: {k} is not served by the cluster");
    }
    // Namespace labels first, for namespaceSelector and namespaceObject.
    let mut namespaces: HashMap<String, Arc<Value>> = HashMap::new();
    if let Some(ns_kind) = catalog
        .kinds()
        .iter()
        .find(|k| k.group.is_empty() && k.plural == "namespaces")
    {
        let load = loader.load(vec![ns_kind.clone()], token.clone());
        let mut objects = load.objects;
        let collect = async {
            while let Some(page) = objects.next_page().await {
                for o in page {
                    if let Ok(v) = o.to_value() {
                        namespaces.insert(o.name().to_string(), Arc::new(v));
                    }
                }
            }
        };
        let (_report, ()) = tokio::join!(load.report, collect);
    }
    let threads = threads.max(1);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..threads {
        let (tx, rx) = tokio::sync::mpsc::channel::<Vec<leash_loader::LoadedObject>>(2);
        senders.push(tx);
        receivers.push(rx);
    }
    // The cluster as the evaluation reads it (leash-controller's view, as
    // the scan and admission read theirs): the namespaces, and the
    // ConfigMaps when `context.configMap` entries read them, loaded up
    // front into the cache; what else a rule reads (an apiCall urlPath,
    // CEL resource.Get/List) recorded as missed, read from the server
    // between evaluations and kept for the run.
    let cache = Arc::new(leash_controller::Cache::new());
    let ns_store = cache.store(
        &leash_controller::object::api_resource("", "v1", "Namespace", "namespaces"),
        false,
    );
    for (name, ns) in &namespaces {
        ns_store.put("", name, ns);
    }
    ns_store.mark_synced();
    if engine.policies().iter().any(|p| p.reads_config_maps())
        && let Some(cm_kind) = catalog
            .kinds()
            .iter()
            .find(|k| k.group.is_empty() && k.plural == "configmaps")
    {
        let store = cache.store(
            &leash_controller::object::api_resource("", "v1", "ConfigMap", "configmaps"),
            true,
        );
        let load = loader.load(vec![cm_kind.clone()], token.clone());
        let mut objects = load.objects;
        let collect = async {
            while let Some(page) = objects.next_page().await {
                for o in page {
                    if let Ok(v) = o.to_value() {
                        store.put(o.namespace().unwrap_or(""), o.name(), &v);
                    }
                }
            }
        };
        let (_report, ()) = tokio::join!(load.report, collect);
        store.mark_synced();
    }
    // Kyverno's global context (`globalReference`, CEL
    // `globalContext.Get`): the cluster's GlobalContextEntry objects, each
    // made ready before the evaluation starts.
    let global = if catalog
        .kinds()
        .iter()
        .any(|k| k.group == "kyverno.io" && k.plural == "globalcontextentries")
    {
        let store =
            leash_context::Store::new(leash_context::StoreConfig::default(), Some(client.clone()));
        let ready = tokio::select! {
            r = global_context(&client, &store) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        };
        if ready.is_none() {
            let _ = store.shutdown().await;
            return Ok(Outcome::interrupted());
        }
        Some(store)
    } else {
        None
    };
    // Each object is built with only what the policies read of it, in the
    // loader's one pass over its bytes, and evaluated right there (on the
    // core that built it) when the evaluation may use every core; else, or
    // when it needs data from the server, by the evaluation tasks.
    let inline = threads >= std::thread::available_parallelism().map_or(1, usize::from);
    let evaluator = Arc::new(Evaluator {
        engine: engine.clone(),
        reads: engine.reads().builder(),
        namespaces,
        cache,
        // Kept for the run: one read per distinct lookup; a failed read
        // is not kept (the next object that asks tries again).
        lookups: Arc::new(
            leash_controller::lookups::Lookups::new(RUN, MAX_ANSWERS).retrying_failures(),
        ),
        registry,
        global: global.clone(),
        client,
        bindings: bindings.clone(),
        user: user.clone(),
        keep,
        inline,
        token: token.clone(),
        memos: Mutex::new(Vec::new()),
    });
    // Table lines go to stdout from one blocking task, so a stdout nobody
    // reads blocks that task only: Ctrl-C still ends the run.
    let (out_tx, out_rx) = tokio::sync::mpsc::channel::<String>(threads * 2);
    let mut writer = tokio::task::JoinSet::new();
    writer.spawn_blocking(move || write_lines(out_rx));
    let mut workers = tokio::task::JoinSet::new();
    for rx in receivers {
        workers.spawn(evaluate_pages(evaluator.clone(), rx, out_tx.clone()));
    }
    drop(out_tx);
    // Pages go round-robin to the workers' bounded channels (backpressure).
    let load = loader.load_parsed(kinds, token.clone(), evaluator.clone());
    let mut objects = load.objects;
    let feed = async {
        let mut i = 0usize;
        while let Some(page) = objects.next_page().await {
            let sent = token
                .run_until_cancelled(senders[i % senders.len()].send(page))
                .await;
            if !matches!(sent, Some(Ok(()))) {
                break;
            }
            i += 1;
        }
        drop(senders);
    };
    let gather = async {
        let mut gathered = Vec::new();
        while let Some(g) = workers.join_next().await {
            gathered.push(g.unwrap_or_default());
        }
        gathered
    };
    let work = async { tokio::join!(load.report, feed, gather) };
    tokio::pin!(work);
    let (report, gathered) = tokio::select! {
        (report, (), gathered) = &mut work => (Some(report), gathered),
        _ = tokio::signal::ctrl_c() => {
            interrupted.store(true, Ordering::Relaxed);
            token.cancel();
            let (_, (), gathered) = work.await;
            (None, gathered)
        }
    };
    if !interrupted.load(Ordering::Relaxed) {
        // Every line written before the summary.
        let _ = writer.join_next().await;
    } else if tokio::time::timeout(INTERRUPT_GRACE, writer.join_next())
        .await
        .is_err()
    {
        // Blocked writing to a stdout nobody reads (a pager, a full pipe).
        eprintln!("leash: interrupted; output is blocked, exiting without waiting for it");
        std::process::exit(130);
    }
    if let Some(store) = global
        && let Err(e) = store.shutdown().await
    {
        tracing::warn!("global context shutdown: {e}");
    }
    if let Some(sandbox) = sandbox
        && let Err(e) = sandbox.shutdown().await
    {
        tracing::warn!("sandbox shutdown: {e}");
    }
    let mut outcome = Outcome::default();
    let mut memo = MemoStats::default();
    let mut retired = std::collections::BTreeSet::new();
    let pooled = std::mem::take(
        &mut *evaluator
            .memos
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut counts = [0usize; STATUSES.len()];
    for g in gathered {
        outcome.kept.extend(g.kept);
        outcome.objects += g.objects;
        for (c, n) in counts.iter_mut().zip(g.counts) {
            *c += n;
        }
        for m in g.memos {
            let (stats, names) = memo_summary(engine, &m);
            retired.extend(names);
            memo.lookups += stats.lookups;
            memo.hits += stats.hits;
        }
    }
    for m in &pooled {
        let (stats, names) = memo_summary(engine, m);
        retired.extend(names);
        memo.lookups += stats.lookups;
        memo.hits += stats.hits;
    }
    for (status, n) in STATUSES.iter().zip(counts) {
        if n > 0 {
            outcome.counts.insert(status.as_str(), n);
        }
    }
    tracing::info!(
        lookups = memo.lookups,
        hits = memo.hits,
        retired = ?retired,
        "results remembered by what each policy reads"
    );
    outcome.interrupted = interrupted.load(Ordering::Relaxed);
    match report {
        Some(report) => {
            for kind in report.failed() {
                let err = kind
                    .error
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                outcome.load_errors.push(format!("{}: {err}", kind.label()));
            }
        }
        None => outcome.interrupted = true,
    }
    Ok(outcome)
}

/// Adds the cluster's GlobalContextEntry objects to `store` and waits
/// until each has its first data (or failed); what is invalid or failed is
/// noted on stderr, and rules that read it give `error`.
async fn global_context(client: &kube::Client, store: &leash_context::Store) {
    let (entries, invalid) = match leash_context::list_cluster_entries(client).await {
        Ok(listed) => listed,
        Err(e) => {
            eprintln!("leash: note: global context entries not read: {e}");
            return;
        }
    };
    for e in invalid {
        eprintln!("leash: note: global context entry not used: {e}");
    }
    for entry in entries {
        let name = entry.name().to_owned();
        if let Err(e) = store.add(entry) {
            eprintln!("leash: note: global context entry {name:?} not used: {e}");
        }
    }
    for (name, result) in store.wait_all_ready().await {
        if let Err(e) = result {
            eprintln!("leash: note: global context entry {name:?} has no data: {e}");
        }
    }
}

/// The result of a cluster run.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub kept: Vec<(Arc<Value>, Vec<RuleResult>)>,
    pub counts: BTreeMap<&'static str, usize>,
    pub objects: usize,
    pub interrupted: bool,
    pub load_errors: Vec<String>,
}

impl Outcome {
    fn interrupted() -> Outcome {
        Outcome {
            interrupted: true,
            ..Outcome::default()
        }
    }
}

/// The engine's [`ReadSet`](leash_policy::ReadSet) as the loader's item
/// parser: each object is built, with only what the policies read, in the
/// same pass that indexes its page.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_kept_in_the_order_of_the_statuses() {
        for (i, status) in STATUSES.iter().enumerate() {
            assert_eq!(*status as usize, i, "{status:?}");
        }
    }

    #[test]
    fn references_keep_identity_only() {
        let r = reference(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"}}, "spec": {}}),
        );
        assert_eq!(r["metadata"]["name"], "a");
        assert!(r["spec"].is_null() && r["metadata"]["labels"].is_null());
    }
}
