//! The loader: discovery, resolution, and the pool-driven load.
//!
//! # Invariants
//! 1. Nothing starts before the report future is polled: [`Loader::load`]
//!    only builds it (house rule 2). The list tasks run on a
//!    `leash_runtime::WorkerPool` inside a `Scope` created and joined by
//!    that future: when it resolves, no task of the load is alive.
//! 2. No task is dropped: every target goes to the pool through
//!    `WorkerPool::run_all` (which queues as the results are read, so it
//!    waits for room and cannot deadlock on the bounded queue and result
//!    channel) and gets exactly one entry in the report; a target that never
//!    ran (cancelled, deadline) is reported with that reason.
//! 3. One deadline for the whole load; the deadline, the caller's token and
//!    the first failure (with `fail_fast`) all cancel one token, which every
//!    request, backoff and channel send of every task races against.
//! 4. At most `concurrency` requests are in flight (a semaphore whose
//!    permit a request holds until its body is in, never while waiting to
//!    retry). The pool runs `2 x concurrency` list tasks, so a kind waiting
//!    out a `Retry-After` or a backoff leaves its request slot to another.
//! 5. Memory is bounded: the object channel holds at most `concurrency`
//!    pages, and each task holds at most three more (two being parsed or
//!    delivered, one arriving: `list::PARSING_AHEAD`), so at most
//!    `7 x concurrency x page_size` objects are in
//!    memory whatever the cluster's size.
//! 6. The object stream ends after the report future has joined every task:
//!    tasks hold the only senders besides the driver's, which is dropped
//!    once the pool is joined.
//! 7. Locks: `tallies` are `std::sync::Mutex`es locked for a few
//!    statements, never across an await; no code holds two at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use leash_runtime::{PoolConfig, Scope, WorkerPool};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::discovery::{Catalog, discover};
use crate::error::{Error, Result};
use crate::fetch::Fetcher;
use crate::kind::ResolvedKind;
use crate::list::{ListContext, Tally};
use crate::object::{ItemParser, LoadedObject};
use crate::options::{LoadOptions, NamespaceSelection};
use crate::report::{KindReport, LoadReport, Progress};
use crate::resolve::resolve;

/// Loads cluster resources: discovery, then every page of every requested
/// kind, concurrently and completely.
///
/// ```no_run
/// # async fn demo(client: kube::Client) -> Result<(), leash_loader::Error> {
/// use futures::StreamExt;
/// use leash_loader::{Loader, LoadOptions, KindSelection, NamespaceSelection};
/// use tokio_util::sync::CancellationToken;
///
/// let options = LoadOptions {
///     kinds: KindSelection::Names(vec!["pods".into(), "deploy".into()]),
///     namespaces: NamespaceSelection::All,
///     ..LoadOptions::default()
/// };
/// let loader = Loader::new(client, options)?;
/// let token = CancellationToken::new();
/// let kinds = loader.resolve(&token).await?;
/// let load = loader.load(kinds, token);
/// let (mut objects, report) = (load.objects, load.report);
/// let consume = async {
///     while let Some(object) = objects.next().await {
///         println!("{}", object.json());
///     }
/// };
/// let (report, ()) = tokio::join!(report, consume);
/// assert!(report.is_complete());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Loader {
    client: kube::Client,
    fetcher: Fetcher,
    options: LoadOptions,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// One list task: a kind, in one namespace or all (`None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadTarget {
    /// The kind.
    pub kind: Arc<ResolvedKind>,
    /// The namespace, or `None` for all namespaces / cluster-scoped kinds.
    pub namespace: Option<String>,
}

impl LoadTarget {
    /// `pods`, or `pods -n a`.
    pub fn label(&self) -> String {
        match &self.namespace {
            Some(ns) if self.kind.namespaced => format!("{} -n {ns}", self.kind.qualified_name()),
            _ => self.kind.qualified_name(),
        }
    }
}

/// A running load: poll `report` and `objects` concurrently.
pub struct Load {
    /// The objects, page by page as they arrive, each exactly once. Ends once
    /// the load has ended and every task is joined.
    pub objects: Objects,
    /// Resolves to the report once every task has finished and been joined.
    /// The load runs only while this future is polled.
    pub report: Pin<Box<dyn Future<Output = LoadReport> + Send>>,
    /// Live counters.
    pub progress: Arc<Progress>,
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Load")
            .field("progress", &self.progress.snapshot())
            .finish_non_exhaustive()
    }
}

/// The stream of loaded objects. Dropping it makes the load's tasks fail
/// with [`Error::OutputClosed`] (and cancels the load).
#[derive(Debug)]
pub struct Objects {
    pages: mpsc::Receiver<Vec<LoadedObject>>,
    current: std::vec::IntoIter<LoadedObject>,
}

impl Objects {
    /// The next page's objects (or what is left of the current page), in the
    /// order the server sent them; `None` when the load has ended.
    ///
    /// # Cancel safety
    /// Cancel-safe: no page is lost by dropping this future.
    pub async fn next_page(&mut self) -> Option<Vec<LoadedObject>> {
        let rest: Vec<LoadedObject> = self.current.by_ref().collect();
        if !rest.is_empty() {
            return Some(rest);
        }
        self.pages.recv().await
    }
}

impl Stream for Objects {
    type Item = LoadedObject;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LoadedObject>> {
        loop {
            if let Some(object) = self.current.next() {
                return Poll::Ready(Some(object));
            }
            match self.pages.poll_recv(cx) {
                Poll::Ready(Some(page)) => self.current = page.into_iter(),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Loader {
    /// A loader over `client` (build it with [`crate::client_from_config`] so
    /// kube's own retries are off). Starts nothing.
    pub fn new(client: kube::Client, options: LoadOptions) -> Result<Self> {
        options.validate()?;
        let fetcher = Fetcher::new(client.clone(), options.retry.clone());
        Ok(Loader {
            client,
            fetcher,
            options,
        })
    }

    /// The options.
    pub fn options(&self) -> &LoadOptions {
        &self.options
    }

    /// Run discovery (aggregated, else legacy), with retries.
    ///
    /// # Cancel safety
    /// Cancel-safe; `Error::Cancelled` when `token` fires.
    pub async fn discover(&self, token: &CancellationToken) -> Result<Catalog> {
        let mut retries = 0;
        discover(&self.fetcher, token, &mut retries).await
    }

    /// Discovery, then resolution of the options' kind selection. Unknown
    /// kinds are an error naming them.
    ///
    /// # Cancel safety
    /// Cancel-safe; `Error::Cancelled` when `token` fires.
    pub async fn resolve(&self, token: &CancellationToken) -> Result<Vec<Arc<ResolvedKind>>> {
        let catalog = self.discover(token).await?;
        resolve(&catalog, &self.options.kinds)
    }

    /// The list tasks for `kinds`: one per kind, or one per (kind,
    /// namespace) for namespaced kinds when several namespaces are selected.
    pub fn targets(&self, kinds: &[Arc<ResolvedKind>]) -> Vec<LoadTarget> {
        let namespaces: Vec<Option<String>> = match &self.options.namespaces {
            NamespaceSelection::All => vec![None],
            NamespaceSelection::Default => vec![Some(self.client.default_namespace().to_owned())],
            NamespaceSelection::Only(list) => {
                let mut unique: Vec<Option<String>> = Vec::with_capacity(list.len());
                for ns in list {
                    if !unique.iter().any(|u| u.as_deref() == Some(ns.as_str())) {
                        unique.push(Some(ns.clone()));
                    }
                }
                unique
            }
        };
        let mut targets = Vec::new();
        for kind in kinds {
            if kind.namespaced {
                for ns in &namespaces {
                    targets.push(LoadTarget {
                        kind: kind.clone(),
                        namespace: ns.clone(),
                    });
                }
            } else {
                targets.push(LoadTarget {
                    kind: kind.clone(),
                    namespace: None,
                });
            }
        }
        targets
    }

    /// Load every object of `kinds`. Nothing runs until `report` is polled;
    /// poll it concurrently with `objects` (e.g. `tokio::join!`), since tasks
    /// wait for room in the object stream.
    ///
    /// Cancelling `token` stops every request at once; the report then says
    /// which kinds are incomplete ([`Error::Cancelled`]).
    pub fn load(&self, kinds: Vec<Arc<ResolvedKind>>, token: CancellationToken) -> Load {
        self.load_with(kinds, token, None)
    }

    /// [`load`](Self::load), with each object's value built by `parser` as
    /// its page is parsed ([`LoadedObject::parsed`]): one pass over each
    /// item's bytes, on the loader's tasks, for consumers that would
    /// otherwise parse every object's text again.
    pub fn load_parsed(
        &self,
        kinds: Vec<Arc<ResolvedKind>>,
        token: CancellationToken,
        parser: Arc<dyn ItemParser>,
    ) -> Load {
        self.load_with(kinds, token, Some(parser))
    }

    fn load_with(
        &self,
        kinds: Vec<Arc<ResolvedKind>>,
        token: CancellationToken,
        parser: Option<Arc<dyn ItemParser>>,
    ) -> Load {
        let targets = self.targets(&kinds);
        let (tx, rx) = mpsc::channel(self.options.concurrency);
        let progress = Arc::new(Progress::default());
        progress.set_total(targets.len() as u64);
        let slots = Arc::new(Semaphore::new(self.options.concurrency));
        let shared = Arc::new(Shared {
            fetcher: self.fetcher.with_slots(slots),
            query: self.options.list_query(),
            consistent: self.options.consistent,
            max_restarts: self.options.max_restarts,
            tallies: targets
                .iter()
                .map(|_| Mutex::new(Tally::default()))
                .collect(),
            targets,
            progress: progress.clone(),
            pages: tx.downgrade(),
            parser,
        });
        let driver = Driver {
            shared,
            sender: tx,
            token,
            concurrency: self.options.concurrency,
            fail_fast: self.options.fail_fast,
            timeout: self.options.timeout,
        };
        Load {
            objects: Objects {
                pages: rx,
                current: Vec::new().into_iter(),
            },
            report: Box::pin(driver.run()),
            progress,
        }
    }
}

/// List tasks per request slot (invariant 4).
const TASKS_PER_SLOT: usize = 2;

/// What the list tasks share.
struct Shared {
    fetcher: Fetcher,
    query: String,
    consistent: bool,
    max_restarts: u32,
    targets: Vec<LoadTarget>,
    tallies: Vec<Mutex<Tally>>,
    progress: Arc<Progress>,
    /// Weak, so that the stream ends when the tasks and the driver are done.
    pages: mpsc::WeakSender<Vec<LoadedObject>>,
    parser: Option<Arc<dyn ItemParser>>,
}

impl Shared {
    async fn run_task(&self, index: usize, token: CancellationToken) -> (usize, Result<()>) {
        let Some(pages) = self.pages.upgrade() else {
            return (index, Err(Error::OutputClosed));
        };
        let context = ListContext {
            fetcher: &self.fetcher,
            target: &self.targets[index],
            query: &self.query,
            consistent: self.consistent,
            max_restarts: self.max_restarts,
            tally: &self.tallies[index],
            progress: &self.progress,
            parser: self.parser.as_ref(),
        };
        (index, context.run(pages, &token).await)
    }

    fn tally(&self, index: usize) -> Tally {
        self.tallies[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Why the load stopped early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopReason {
    Deadline,
    FirstFailure,
    OutputClosed,
}

struct Driver {
    shared: Arc<Shared>,
    sender: mpsc::Sender<Vec<LoadedObject>>,
    token: CancellationToken,
    concurrency: usize,
    fail_fast: bool,
    timeout: Option<Duration>,
}

impl Driver {
    async fn run(self) -> LoadReport {
        let start = Instant::now();
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let run_token = self.token.child_token();
        let n = self.shared.targets.len();
        let mut outcomes: Vec<Option<Result<()>>> = (0..n).map(|_| None).collect();
        let mut report = LoadReport::default();
        let mut stop: Option<StopReason> = None;

        let scope = Scope::with_parent_token(&run_token);
        // Twice the request slots (invariant 4).
        let config = PoolConfig {
            workers: self.concurrency * TASKS_PER_SLOT,
            queue_capacity: self.concurrency,
        };
        let handler = {
            let shared = self.shared.clone();
            move |index: usize, token: CancellationToken| {
                let shared = shared.clone();
                async move { shared.run_task(index, token).await }
            }
        };
        match WorkerPool::new(config, handler) {
            Err(err) => report.errors.push(Error::Pool(err.to_string())),
            Ok(pool) => {
                // One call submits and collects together: the pool's queue and
                // result channel are bounded, and this cannot deadlock on them.
                // Task ids are the targets' indices. A cancelled run queues no
                // more; the targets never queued keep no outcome (Cancelled below).
                let mut results = pool.run_all(&scope, 0..n);
                let sleep = async {
                    match deadline {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(sleep);
                let mut deadline_passed = false;
                loop {
                    let next = tokio::select! {
                        next = results.next() => next,
                        () = &mut sleep, if !deadline_passed => {
                            deadline_passed = true;
                            stop.get_or_insert(StopReason::Deadline);
                            run_token.cancel();
                            continue;
                        }
                    };
                    let Some(result) = next else { break };
                    self.shared.progress.kind_done();
                    let (index, outcome) = match result.outcome {
                        Ok((index, outcome)) => (index, outcome),
                        Err(failure) => {
                            let error = match failure {
                                leash_runtime::TaskFailure::Cancelled => Error::Cancelled,
                                leash_runtime::TaskFailure::Panicked(message) => {
                                    Error::Pool(format!("list task panicked: {message}"))
                                }
                            };
                            (result.id.index(), Err(error))
                        }
                    };
                    if let Err(err) = &outcome {
                        let reason = match err {
                            Error::OutputClosed => Some(StopReason::OutputClosed),
                            e if !e.is_interruption() && self.fail_fast => {
                                Some(StopReason::FirstFailure)
                            }
                            _ => None,
                        };
                        if let Some(reason) = reason {
                            stop.get_or_insert(reason);
                            run_token.cancel();
                        }
                    }
                    match outcomes.get_mut(index) {
                        Some(slot) => *slot = Some(outcome),
                        None => {
                            if let Err(err) = outcome {
                                report.errors.push(err);
                            }
                        }
                    }
                }
                if let Err(err) = results.join().await {
                    report.errors.push(Error::Pool(err.to_string()));
                }
            }
        }
        drop(self.sender);
        if let Err(err) = scope.join().await {
            report.errors.push(Error::Pool(err.to_string()));
        }
        report.timed_out = stop == Some(StopReason::Deadline);

        for (index, outcome) in outcomes.into_iter().enumerate() {
            let target = &self.shared.targets[index];
            let tally = self.shared.tally(index);
            let error = match outcome {
                Some(Ok(())) => None,
                Some(Err(err)) => Some(err),
                None => Some(Error::Cancelled),
            };
            let error = error.map(|err| match (err, stop) {
                (Error::Cancelled, Some(StopReason::Deadline)) => {
                    Error::DeadlineExceeded(self.timeout.unwrap_or_default())
                }
                (err, _) => err,
            });
            let elapsed = match (tally.started, tally.finished) {
                (Some(s), Some(f)) => f.saturating_duration_since(s),
                (Some(s), None) => s.elapsed(),
                _ => Duration::ZERO,
            };
            report.kinds.push(KindReport {
                kind: target.kind.clone(),
                namespace: target.namespace.clone(),
                objects: tally.objects,
                pages: tally.pages,
                retries: tally.retries,
                restarts: tally.restarts,
                elapsed,
                across_snapshots: tally.across_snapshots,
                error,
            });
        }
        report.elapsed = start.elapsed();
        report
    }
}
