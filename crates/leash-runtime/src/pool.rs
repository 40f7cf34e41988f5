//! A worker pool: N workers over a bounded task queue, results as a stream.
//!
//! Replaces the Kyverno CLI loader's `WorkerPool` (seed 001), which dropped
//! tasks when its queue was full, ran workers on `context.Background()`, and
//! could deadlock on `Close` while workers were blocked sending results.
//!
//! # Invariants
//! 1. Nothing is dropped silently. `submit` waits for room; `submit` and
//!    `try_submit` hand the task back in their error. Every accepted task
//!    yields exactly one [`TaskResult`]: its output, [`TaskFailure::Panicked`],
//!    or [`TaskFailure::Cancelled`] (cancelled in flight, or still queued when
//!    the pool was cancelled). The only results that can be lost are those
//!    produced after the pool was cancelled while the result channel was full:
//!    they are counted ([`Results::undelivered`]) and logged.
//! 2. Cancellation reaches in-flight tasks: each task runs with a child token
//!    of the pool's token, and the worker races the task against that token,
//!    so a task that ignores its token is dropped at its next `.await`.
//!    Consecutive tasks of one worker share that child token until a task
//!    cancels it; the worker then takes a fresh child before the next task,
//!    so a task cancelling its own token never affects another task or the
//!    pool (a task must not keep its token after it returned).
//! 3. No deadlock on shutdown: a worker's result send is raced against the
//!    pool's token, and after cancellation results are only `try_send`; a
//!    dropped [`Results`] closes the channel (sends fail) and cancels the pool.
//! 4. Workers live in a child [`Scope`] of the scope given to
//!    [`WorkerPool::start`]; that scope's `join`/`shutdown` waits for them.
//!    A worker exits when the queue is closed and empty (every [`Submitter`]
//!    closed or dropped) or when the pool is cancelled; the result stream
//!    ends when every worker has exited.
//! 5. A panicking task becomes that task's [`TaskFailure::Panicked`] result;
//!    the worker survives.
//! 6. At most one worker waits on the queue at a time (the receiver sits in a
//!    `tokio::sync::Mutex`); the guard is held across that `recv` only, never
//!    across a task or a result send. What the holder waits for (a submit, a
//!    close, a cancellation) never needs the lock, so it cannot deadlock.
//!
//! 7. The two-handle form ([`WorkerPool::start`]) must be driven from two
//!    concurrent halves; [`WorkerPool::run_all`] ([`Batch`]) is the one-call
//!    form that submits and collects in the same poll (`pool/batch.rs`).
//!
//! Built only from tokio / tokio-util primitives (`mpsc`, `tokio::sync::Mutex`,
//! `CancellationToken`) plus one `AtomicU64` id counter and one `AtomicU64`
//! statistic, neither of which orders anything.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures::{FutureExt, Stream};
use tokio::sync::{Mutex, mpsc};
use tokio_util::sync::CancellationToken;

use crate::scope::{Scope, ScopeError, ScopeHandle, panic_message};

mod batch;

pub use batch::Batch;

/// Largest accepted [`PoolConfig::workers`].
pub const MAX_WORKERS: usize = 256;
/// Largest accepted [`PoolConfig::queue_capacity`] (tokio's channel limit is
/// far higher; this is a sanity bound).
pub const MAX_QUEUE_CAPACITY: usize = 1 << 24;

/// Size of a [`WorkerPool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Number of workers, `1..=256`.
    pub workers: usize,
    /// Capacity of the task queue, at least 1. The result channel holds
    /// `workers + queue_capacity` results.
    pub queue_capacity: usize,
}

impl PoolConfig {
    /// A config with `workers` workers and a queue of `queue_capacity`.
    pub fn new(workers: usize, queue_capacity: usize) -> PoolConfig {
        PoolConfig {
            workers,
            queue_capacity,
        }
    }

    /// Checks the ranges documented on the fields.
    pub fn validate(&self) -> Result<(), PoolError> {
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return Err(PoolError::InvalidWorkers {
                got: self.workers,
                max: MAX_WORKERS,
            });
        }
        if !(1..=MAX_QUEUE_CAPACITY).contains(&self.queue_capacity) {
            return Err(PoolError::InvalidQueueCapacity {
                got: self.queue_capacity,
                max: MAX_QUEUE_CAPACITY,
            });
        }
        Ok(())
    }
}

impl Default for PoolConfig {
    /// 4 workers, queue of 8.
    fn default() -> Self {
        PoolConfig::new(4, 8)
    }
}

/// Building a [`WorkerPool`] failed. Not worth retrying: fix the config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// `workers` is outside `1..=max`.
    #[error("worker count {got} is outside 1..={max}")]
    InvalidWorkers {
        /// The requested count.
        got: usize,
        /// The largest accepted count.
        max: usize,
    },
    /// `queue_capacity` is outside `1..=max`.
    #[error("queue capacity {got} is outside 1..={max}")]
    InvalidQueueCapacity {
        /// The requested capacity.
        got: usize,
        /// The largest accepted capacity.
        max: usize,
    },
}

/// Identifies one submitted task; unique within a pool, assigned in
/// submission order starting at 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(u64);

impl TaskId {
    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task#{}", self.0)
    }
}

/// Why a task produced no output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskFailure {
    /// The task panicked; the panic message.
    #[error("task panicked: {0}")]
    Panicked(String),
    /// The pool (or the task's own token) was cancelled before the task
    /// finished, or before it started.
    #[error("task cancelled")]
    Cancelled,
}

/// The outcome of one task.
#[derive(Debug)]
pub struct TaskResult<R> {
    /// The id `submit`/`try_submit` returned for the task.
    pub id: TaskId,
    /// The handler's output, or why there is none.
    pub outcome: Result<R, TaskFailure>,
}

/// `submit` failed; the task is handed back.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError<T> {
    /// The pool was closed (or every worker has exited).
    #[error("worker pool is closed")]
    Closed(T),
    /// The pool was cancelled.
    #[error("worker pool is cancelled")]
    Cancelled(T),
}

impl<T> SubmitError<T> {
    /// The task that was not submitted.
    pub fn into_inner(self) -> T {
        match self {
            SubmitError::Closed(t) | SubmitError::Cancelled(t) => t,
        }
    }
}

/// `try_submit` failed; the task is handed back.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrySubmitError<T> {
    /// The queue is full; retry later (or use `submit`, which waits).
    #[error("worker pool queue is full")]
    Full(T),
    /// The pool was closed or cancelled.
    #[error("worker pool is closed")]
    Closed(T),
}

impl<T> TrySubmitError<T> {
    /// The task that was not submitted.
    pub fn into_inner(self) -> T {
        match self {
            TrySubmitError::Full(t) | TrySubmitError::Closed(t) => t,
        }
    }
}

type Job<T> = (TaskId, T);

/// What `start` hands to the type-erased worker spawner.
struct WorkerStart<T, R> {
    scope: ScopeHandle,
    workers: usize,
    queue: mpsc::Receiver<Job<T>>,
    results: mpsc::Sender<TaskResult<R>>,
    closed: CancellationToken,
    undelivered: Arc<AtomicU64>,
}

type SpawnWorkers<T, R> = Box<dyn FnOnce(WorkerStart<T, R>) + Send>;

/// N workers over a bounded queue; built by [`WorkerPool::new`] (which starts
/// nothing) and started by [`WorkerPool::start`].
pub struct WorkerPool<T, R> {
    config: PoolConfig,
    // The handler's type is erased here, but the worker loop is monomorphized
    // for it: no per-task boxing.
    spawn_workers: SpawnWorkers<T, R>,
}

impl<T, R> fmt::Debug for WorkerPool<T, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerPool")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, R: Send + 'static> WorkerPool<T, R> {
    /// A pool that runs `handler(task, token)` for each task, where `token` is
    /// a child of the pool's token (cancelled when the pool or an enclosing
    /// scope is; see invariant 2 for its reuse across one worker's tasks).
    /// Validates `config`; starts nothing.
    pub fn new<H, Fut>(config: PoolConfig, handler: H) -> Result<Self, PoolError>
    where
        H: Fn(T, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
    {
        config.validate()?;
        let spawn_workers: SpawnWorkers<T, R> = Box::new(move |start: WorkerStart<T, R>| {
            let shared = Arc::new(Workers {
                queue: Mutex::new(start.queue),
                handler,
                closed: start.closed,
                cancel: start.scope.token().clone(),
                undelivered: start.undelivered,
            });
            for i in 0..start.workers {
                let shared = shared.clone();
                let results = start.results.clone();
                start.scope.spawn(format!("pool-worker-{i}"), async move {
                    shared.run(results).await;
                    Ok::<(), Infallible>(())
                });
            }
        });
        Ok(WorkerPool {
            config,
            spawn_workers,
        })
    }

    /// The validated config.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Spawns the workers into a child of `scope` and returns the submitting
    /// and the result-consuming halves. Consume [`Results`] concurrently with
    /// submitting (for example `tokio::join!` of a producer and a consumer):
    /// once the result channel is full, workers wait for the consumer.
    ///
    /// # Deadlock hazard
    /// Submitting every task before reading any result (the seed's shape)
    /// waits forever once more than `2 * (workers + queue_capacity)` tasks are
    /// submitted: the result channel and the queue are full, each worker holds
    /// a finished result it cannot send, and `submit` waits for the workers. When the tasks are
    /// known up front, use [`WorkerPool::run_all`], which cannot.
    pub fn start(self, scope: &Scope) -> (Submitter<T>, Results<R>) {
        let pool_scope = scope.child();
        let (task_tx, task_rx) = mpsc::channel(self.config.queue_capacity);
        let (result_tx, result_rx) =
            mpsc::channel(self.config.workers + self.config.queue_capacity);
        // A child of the pool's token, so one check covers closed and
        // cancelled on the submit fast path.
        let closed = pool_scope.token().child_token();
        let undelivered = Arc::new(AtomicU64::new(0));
        (self.spawn_workers)(WorkerStart {
            scope: pool_scope.handle(),
            workers: self.config.workers,
            queue: task_rx,
            results: result_tx,
            closed: closed.clone(),
            undelivered: undelivered.clone(),
        });
        let submitter = Submitter {
            tx: task_tx,
            closed,
            cancel: pool_scope.token().clone(),
            next_id: Arc::new(AtomicU64::new(0)),
        };
        let results = Results {
            rx: result_rx,
            scope: pool_scope,
            undelivered,
        };
        (submitter, results)
    }
}

/// State shared by the workers of one pool.
struct Workers<T, H> {
    queue: Mutex<mpsc::Receiver<Job<T>>>,
    handler: H,
    closed: CancellationToken,
    cancel: CancellationToken,
    undelivered: Arc<AtomicU64>,
}

impl<T, H> Workers<T, H> {
    async fn run<R, Fut>(&self, results: mpsc::Sender<TaskResult<R>>)
    where
        H: Fn(T, CancellationToken) -> Fut,
        Fut: Future<Output = R>,
    {
        // One child token per worker, shared by its consecutive tasks until
        // one of them cancels it (invariant 2): a child token per task would
        // lock the pool token's node, shared by every worker, twice per task.
        let mut token = self.cancel.child_token();
        while let Some((id, task)) = self.next_job(&token).await {
            let handler_token = token.clone();
            // The handler is called inside the caught future, so a panic in
            // its synchronous part is caught too (invariant 5).
            let run = AssertUnwindSafe(async move { (self.handler)(task, handler_token).await })
                .catch_unwind();
            let outcome = match token.run_until_cancelled(run).await {
                Some(Ok(output)) => Ok(output),
                Some(Err(payload)) => Err(TaskFailure::Panicked(panic_message(payload.as_ref()))),
                None => Err(TaskFailure::Cancelled),
            };
            if token.is_cancelled() {
                // The task cancelled its own token, or the pool was
                // cancelled (then the new child is born cancelled).
                token = self.cancel.child_token();
            }
            self.deliver(&token, &results, TaskResult { id, outcome })
                .await;
        }
        if self.cancel.is_cancelled() {
            self.drain_cancelled(&results).await;
        }
    }

    /// The next task, or `None` when the queue is closed and empty or the
    /// pool is cancelled.
    async fn next_job(&self, token: &CancellationToken) -> Option<Job<T>> {
        // Fast path: the queue is free and holds a task. (Taken even after
        // cancellation: the task's race then reports it `Cancelled` at once.)
        let mut queue = match self.queue.try_lock() {
            Ok(queue) => queue,
            Err(_) => token.run_until_cancelled(self.queue.lock()).await?,
        };
        if let Ok(job) = queue.try_recv() {
            return Some(job);
        }
        loop {
            tokio::select! {
                biased;
                () = token.cancelled() => return None,
                job = queue.recv() => return job,
                // Submitter::close: close the channel for senders, keep
                // draining what is buffered (invariant 4).
                () = self.closed.cancelled(), if !queue.is_closed() => queue.close(),
            }
        }
    }

    /// After cancellation: every queued task becomes a `Cancelled` result.
    async fn drain_cancelled<R>(&self, results: &mpsc::Sender<TaskResult<R>>) {
        let mut queue = self.queue.lock().await;
        queue.close();
        // `recv` (not `try_recv`) so a submit holding a permit is not missed;
        // permits are used synchronously, so this ends promptly.
        while let Some((id, _task)) = queue.recv().await {
            self.deliver_now(
                results,
                TaskResult {
                    id,
                    outcome: Err(TaskFailure::Cancelled),
                },
            );
        }
    }

    /// Sends a result, waiting for room unless the pool is cancelled
    /// (invariant 3).
    async fn deliver<R>(
        &self,
        token: &CancellationToken,
        results: &mpsc::Sender<TaskResult<R>>,
        result: TaskResult<R>,
    ) {
        tokio::select! {
            biased;
            permit = results.reserve() => {
                if let Ok(permit) = permit {
                    permit.send(result);
                }
                // Err: Results was dropped; nobody wants the result.
            }
            () = token.cancelled() => self.deliver_now(results, result),
        }
    }

    fn deliver_now<R>(&self, results: &mpsc::Sender<TaskResult<R>>, result: TaskResult<R>) {
        if let Err(mpsc::error::TrySendError::Full(result)) = results.try_send(result) {
            // Relaxed: a statistic; it orders nothing.
            self.undelivered.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(id = %result.id, "pool cancelled with a full result channel; result not delivered");
        }
    }
}

/// Submits tasks to a started pool. Cheap to clone; the queue closes when
/// every clone is dropped or any clone calls [`Submitter::close`].
pub struct Submitter<T> {
    tx: mpsc::Sender<Job<T>>,
    closed: CancellationToken,
    cancel: CancellationToken,
    next_id: Arc<AtomicU64>,
}

impl<T> Clone for Submitter<T> {
    fn clone(&self) -> Self {
        Submitter {
            tx: self.tx.clone(),
            closed: self.closed.clone(),
            cancel: self.cancel.clone(),
            next_id: self.next_id.clone(),
        }
    }
}

impl<T> fmt::Debug for Submitter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Submitter")
            .field("closed", &self.is_closed())
            .field("cancelled", &self.cancel.is_cancelled())
            .field("queue_free", &self.tx.capacity())
            .finish()
    }
}

impl<T> Submitter<T> {
    fn next_id(&self) -> TaskId {
        // Relaxed: only uniqueness is needed; the id orders nothing.
        TaskId(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    fn refusal(&self, task: T) -> SubmitError<T> {
        if self.cancel.is_cancelled() {
            SubmitError::Cancelled(task)
        } else {
            SubmitError::Closed(task)
        }
    }

    /// Queues `task`, waiting for room (backpressure). On `Err` the task is
    /// handed back: the pool was closed or cancelled (before or while
    /// waiting).
    ///
    /// # Cancel safety
    /// Cancel safe: if the returned future is dropped before it completes,
    /// the task was not queued (and is dropped with the future).
    pub async fn submit(&self, task: T) -> Result<TaskId, SubmitError<T>> {
        // `closed` is a child of `cancel`: this covers both.
        if self.closed.is_cancelled() {
            return Err(self.refusal(task));
        }
        // Fast path: room now. No waiter is registered on either token.
        match self.tx.try_reserve() {
            Ok(permit) => {
                let id = self.next_id();
                permit.send((id, task));
                return Ok(id);
            }
            Err(mpsc::error::TrySendError::Closed(())) => return Err(self.refusal(task)),
            Err(mpsc::error::TrySendError::Full(())) => {}
        }
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(SubmitError::Cancelled(task)),
            () = self.closed.cancelled() => Err(SubmitError::Closed(task)),
            permit = self.tx.reserve() => match permit {
                Ok(permit) => {
                    let id = self.next_id();
                    permit.send((id, task));
                    Ok(id)
                }
                Err(_) => Err(self.refusal(task)),
            },
        }
    }

    /// Queues `task` if there is room now; otherwise hands it back:
    /// [`TrySubmitError::Full`] or (closed or cancelled)
    /// [`TrySubmitError::Closed`].
    pub fn try_submit(&self, task: T) -> Result<TaskId, TrySubmitError<T>> {
        if self.closed.is_cancelled() {
            return Err(TrySubmitError::Closed(task));
        }
        match self.tx.try_reserve() {
            Ok(permit) => {
                let id = self.next_id();
                permit.send((id, task));
                Ok(id)
            }
            Err(mpsc::error::TrySendError::Full(())) => Err(TrySubmitError::Full(task)),
            Err(mpsc::error::TrySendError::Closed(())) => Err(TrySubmitError::Closed(task)),
        }
    }

    /// No new tasks; queued and running ones still run and report. Idempotent.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Whether [`Submitter::close`] was called (or the pool was cancelled).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Cancels the pool: running tasks see their token cancelled and are
    /// dropped at their next `.await`; queued tasks report
    /// [`TaskFailure::Cancelled`]; no new tasks are accepted.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

/// The results of a started pool, as a [`Stream`] of [`TaskResult`]. The
/// stream ends when the pool is closed (every [`Submitter`] closed or
/// dropped) or cancelled, and every worker has exited.
///
/// `Results` owns the pool's workers: dropping it cancels the pool.
pub struct Results<R> {
    rx: mpsc::Receiver<TaskResult<R>>,
    scope: Scope,
    undelivered: Arc<AtomicU64>,
}

impl<R> fmt::Debug for Results<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Results")
            .field("buffered", &self.rx.len())
            .field("workers", &self.scope)
            .field("undelivered", &self.undelivered())
            .finish()
    }
}

impl<R> Stream for Results<R> {
    type Item = TaskResult<R>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl<R> Results<R> {
    /// Receives the next result; `None` once the stream has ended.
    ///
    /// # Cancel safety
    /// Cancel safe: a result is never lost by dropping this future.
    pub async fn recv(&mut self) -> Option<TaskResult<R>> {
        self.rx.recv().await
    }

    /// Cancels the pool (see [`Submitter::cancel`]).
    pub fn cancel(&self) {
        self.scope.cancel();
    }

    /// Results produced after cancellation that did not fit in the full
    /// result channel (invariant 1). Zero unless the pool was cancelled while
    /// the consumer was not reading.
    pub fn undelivered(&self) -> u64 {
        self.undelivered.load(Ordering::Relaxed)
    }

    /// Discards the remaining results and waits for every worker to exit.
    /// Does not close or cancel the pool: it returns once every submitter is
    /// closed or dropped (and the queue drained) or the pool is cancelled.
    /// Returns worker failures (not task failures, which are results).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future drops `Results`, which cancels
    /// the pool (the workers are still joined by the parent scope).
    pub async fn join(self) -> Result<(), ScopeError> {
        let Results { mut rx, scope, .. } = self;
        while rx.recv().await.is_some() {}
        scope.join().await
    }

    /// Cancels the pool, then [`Results::join`]s it.
    ///
    /// # Cancel safety
    /// Not cancel safe, as [`Results::join`].
    pub async fn shutdown(self) -> Result<(), ScopeError> {
        self.cancel();
        self.join().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_hand_the_task_back() {
        assert_eq!(SubmitError::Closed(1).into_inner(), 1);
        assert_eq!(SubmitError::Cancelled(2).into_inner(), 2);
        assert_eq!(TrySubmitError::Full(3).into_inner(), 3);
        assert_eq!(TrySubmitError::Closed(4).into_inner(), 4);
    }

    #[test]
    fn config_bounds() {
        assert!(PoolConfig::default().validate().is_ok());
        assert!(PoolConfig::new(1, MAX_QUEUE_CAPACITY).validate().is_ok());
        assert_eq!(
            PoolConfig::new(1, MAX_QUEUE_CAPACITY + 1).validate(),
            Err(PoolError::InvalidQueueCapacity {
                got: MAX_QUEUE_CAPACITY + 1,
                max: MAX_QUEUE_CAPACITY
            })
        );
        assert_eq!(
            PoolError::InvalidWorkers { got: 0, max: 256 }.to_string(),
            "worker count 0 is outside 1..=256"
        );
    }

    /// Cancelled with the consumer not reading: results that find no room
    /// are counted, never waited for (invariants 1, 3).
    #[tokio::test]
    async fn undelivered_results_are_counted_after_cancel() {
        let scope = Scope::new();
        let pool = WorkerPool::new(PoolConfig::new(1, 8), |n: u32, _| async move { n }).unwrap();
        let (submitter, results) = pool.start(&scope);
        // Result channel holds 1 + 8 = 9. Queue 8 tasks, let them run, then
        // queue 8 more so 7 results cannot fit once cancelled.
        for n in 0..8 {
            submitter.submit(n).await.unwrap();
        }
        while results.rx.len() < 8 {
            tokio::task::yield_now().await;
        }
        for n in 8..16 {
            submitter.try_submit(n).unwrap();
        }
        submitter.cancel();
        scope.shutdown().await.unwrap();
        // 8 buffered before cancel, 1 more fit, 7 queued-then-cancelled
        // results found the channel full.
        assert_eq!(results.rx.len(), 9);
        assert_eq!(results.undelivered(), 7);
    }
}
