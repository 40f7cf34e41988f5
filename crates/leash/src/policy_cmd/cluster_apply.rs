//! `leash apply --cluster`: load only the kinds the policies match, through
//! leash-loader, and evaluate objects as pages arrive on every core.
//!
//! # Invariants
//! 1. Memory is bounded by the loader's window plus one bounded channel per
//!    evaluation thread (two pages each): pages are evaluated and dropped;
//!    only results are kept (all of them with `--policy-report` or
//!    `--detailed-results`, else only non-pass ones and the counts).
//! 2. Every thread is scoped (`std::thread::scope`) and joined before `run`
//!    returns; the loader's tasks belong to its own scope and end with its
//!    cancellation token.
//! 3. Ctrl-C cancels the load and raises a flag the evaluation threads check
//!    between objects, so it stops within one object's evaluation.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use leash_controller::kinds::select_kinds;
use leash_loader::{KindSelection, LoadOptions, Loader, NamespaceSelection};
use leash_policy::{
    Bindings, Engine, EvalRequest, Memo, MemoStats, Operation, RuleResult, Status, UserInfo,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::cluster::{LiveCluster, MemoryCluster};
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

/// Results gathered by one evaluation thread.
#[derive(Default)]
struct Gathered {
    kept: Vec<(Arc<Value>, Vec<RuleResult>)>,
    counts: BTreeMap<&'static str, usize>,
    objects: usize,
    memo: Option<(MemoStats, Vec<String>)>,
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
    let handle = tokio::runtime::Handle::current();
    let threads = threads.max(1);
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..threads {
        let (tx, rx) = tokio::sync::mpsc::channel::<Vec<leash_loader::LoadedObject>>(2);
        senders.push(tx);
        receivers.push(rx);
    }
    // ConfigMaps that `context.configMap` entries read: loaded up front
    // (the engine does no I/O), only when a policy reads them.
    let mut lookups: Vec<Value> = namespaces.values().map(|v| (**v).clone()).collect();
    let mut preloaded = vec!["namespaces".to_string()];
    if engine.policies().iter().any(|p| p.reads_config_maps())
        && let Some(cm_kind) = catalog
            .kinds()
            .iter()
            .find(|k| k.group.is_empty() && k.plural == "configmaps")
    {
        let load = loader.load(vec![cm_kind.clone()], token.clone());
        let mut objects = load.objects;
        let collect = async {
            while let Some(page) = objects.next_page().await {
                lookups.extend(page.iter().filter_map(|o| o.to_value().ok()));
            }
        };
        let (_report, ()) = tokio::join!(load.report, collect);
        preloaded.push("configmaps".to_string());
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
    // What a rule reads beyond those (apiCall, CEL resource.Get/List) is
    // read from the server on first use.
    let cluster = LiveCluster::new(
        MemoryCluster::new(lookups),
        preloaded,
        client,
        handle.clone(),
        token.clone(),
    )
    .with_global(global.clone());
    let interrupted_ref = &interrupted;
    let namespaces_ref = &namespaces;
    let cluster_ref = &cluster;
    // Each object is built with only what the policies read of it, in the
    // loader's one pass over its bytes.
    let reads = Arc::new(Reads(engine.reads()));
    let reads_ref = &reads.0;
    // block_in_place: this runtime thread blocks in the scope below while
    // the loader's tasks run on the others.
    let (gathered, report) = tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let workers: Vec<_> = receivers
                .into_iter()
                .map(|mut rx| {
                    s.spawn(move || {
                        let mut g = Gathered::default();
                        // Results remembered by what each policy reads: this
                        // thread's own (see leash_policy::memo).
                        let mut memo = engine.memo(bindings);
                        let mut lines = String::new();
                        while let Some(page) = rx.blocking_recv() {
                            for mut object in page {
                                if interrupted_ref.load(Ordering::Relaxed) {
                                    g.memo = memo.map(|m| memo_summary(engine, &m));
                                    return g;
                                }
                                let parsed = match object.take_parsed() {
                                    Some(v) => Ok(v),
                                    None => reads_ref.parse(object.json()),
                                };
                                let value = match parsed {
                                    Ok(v) => v,
                                    Err(e) => {
                                        // Not lost: named, and counted as
                                        // an error (the exit status says so).
                                        eprintln!(
                                            "leash: error: {} {}/{} is not valid JSON: {e}",
                                            object.kind().qualified_name(),
                                            object.namespace().unwrap_or(""),
                                            object.name()
                                        );
                                        *g.counts.entry("error").or_default() += 1;
                                        continue;
                                    }
                                };
                                evaluate_one(
                                    engine,
                                    value,
                                    namespaces_ref,
                                    cluster_ref,
                                    bindings,
                                    user,
                                    keep,
                                    memo.as_mut(),
                                    &mut g,
                                    &mut lines,
                                );
                            }
                            if !lines.is_empty() {
                                // One write per page; a closed stdout only
                                // stops the lines, not the evaluation.
                                use std::io::Write as _;
                                let _ = std::io::stdout().lock().write_all(lines.as_bytes());
                                lines.clear();
                            }
                        }
                        g.memo = memo.map(|m| memo_summary(engine, &m));
                        g
                    })
                })
                .collect();
            // The load runs on the runtime from this scoped thread; pages go
            // round-robin to the workers' bounded channels (backpressure).
            let driver = s.spawn(|| {
                handle.block_on(async {
                    let load = loader.load_parsed(kinds, token.clone(), reads.clone());
                    let mut objects = load.objects;
                    let feed = async {
                        let mut i = 0usize;
                        while let Some(page) = objects.next_page().await {
                            if senders[i % senders.len()].send(page).await.is_err() {
                                break;
                            }
                            i += 1;
                        }
                        drop(senders);
                    };
                    let work = async { tokio::join!(load.report, feed) };
                    tokio::pin!(work);
                    tokio::select! {
                        (report, ()) = &mut work => Some(report),
                        _ = tokio::signal::ctrl_c() => {
                            interrupted_ref.store(true, Ordering::Relaxed);
                            token.cancel();
                            let (report, ()) = work.await;
                            let _ = report;
                            None
                        }
                    }
                })
            });
            let report = driver.join().unwrap_or(None);
            let gathered: Vec<Gathered> = workers
                .into_iter()
                .map(|w| w.join().unwrap_or_default())
                .collect();
            (gathered, report)
        })
    });
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
    for g in gathered {
        if let Some((m, names)) = g.memo {
            retired.extend(names);
            memo.lookups += m.lookups;
            memo.hits += m.hits;
            memo.retired += m.retired;
        }
        outcome.kept.extend(g.kept);
        outcome.objects += g.objects;
        for (k, v) in g.counts {
            *outcome.counts.entry(k).or_default() += v;
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

#[allow(clippy::too_many_arguments)]
fn evaluate_one(
    engine: &Engine,
    value: Value,
    namespaces: &HashMap<String, Arc<Value>>,
    cluster: &LiveCluster,
    bindings: &Bindings,
    user: &UserInfo,
    keep: Keep,
    memo: Option<&mut Memo>,
    g: &mut Gathered,
    lines: &mut String,
) {
    let ns = value["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let ns_object = namespaces.get(&ns).cloned();
    let labels = ns_object.as_ref().map(|n| {
        n["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default()
    });
    let object = Arc::new(value);
    let req = EvalRequest {
        object: object.clone(),
        old_object: None,
        // As Kyverno's CLI: a CREATE of each object.
        operation: Operation::Create,
        user_info: user.clone(),
        namespace_labels: labels,
        namespace_object: ns_object,
    };
    // Mutate rules first, then validate rules on the mutated object, as
    // Kyverno's CLI; the mutated object is not written back.
    let applied = engine.apply_memo(req, cluster, bindings, memo);
    let mut results: Vec<RuleResult> = applied.mutation.results().cloned().collect();
    results.extend(applied.results);
    g.objects += 1;
    for r in &results {
        *g.counts.entry(r.status.as_str()).or_default() += 1;
    }
    let kept: Vec<RuleResult> = match keep {
        Keep::All => results,
        Keep::NonPass => results
            .into_iter()
            .filter(|r| r.status != Status::Pass)
            .collect(),
        Keep::Stream { detailed } => {
            for r in &results {
                if let Some(line) = super::apply::result_line(&object, r, detailed) {
                    lines.push_str(&line);
                    lines.push('\n');
                }
            }
            Vec::new()
        }
    };
    if !kept.is_empty() {
        g.kept.push((Arc::new(reference(&object)), kept));
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
struct Reads(leash_policy::ReadSet);

impl leash_loader::ItemParser for Reads {
    fn parse(
        &self,
        de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
    ) -> serde_json::Result<Value> {
        self.0.parse_from(de)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_keep_identity_only() {
        let r = reference(
            &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "n", "labels": {"x": "y"}}, "spec": {}}),
        );
        assert_eq!(r["metadata"]["name"], "a");
        assert!(r["spec"].is_null() && r["metadata"]["labels"].is_null());
    }
}
