//! [`WorkerPool::run_all`]: the pool's one-call form, which submits a batch
//! of tasks and streams their results from the same poll, so it cannot
//! deadlock in the seed's submit-everything-then-collect shape.
//!
//! # The hazard it removes
//! With the two-handle form ([`WorkerPool::start`]), a caller that submits
//! every task before reading any result waits forever once the queue and the
//! result channel are both full: the workers wait for the consumer, the
//! consumer has not started, and `submit` waits for the workers. A
//! [`Batch`] has no separate producer: each `poll_next` first queues as many
//! tasks as the queue has room for, then yields a result; while the queue is
//! full it waits for room and for a result at once.
//!
//! # Invariants
//! 1. Task `i` of the iterator (from 0) gets [`TaskId`] `i`, and every task
//!    queued yields exactly one result (the pool's invariant 1).
//! 2. The queue is closed (the submitter dropped) as soon as the iterator is
//!    exhausted, so the stream ends after the last result.
//! 3. If the pool is cancelled, submitting stops; the tasks never queued are
//!    not lost: [`Batch::into_unsubmitted`] hands them back.
//! 4. At most one queue permit is awaited at a time, and it is an owned
//!    permit future (no borrow of the batch), dropped with the batch.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

use super::{Job, Results, Submitter, TaskId, TaskResult, WorkerPool};
use crate::scope::{Scope, ScopeError};

type Reserve<T> = Pin<
    Box<dyn Future<Output = Result<mpsc::OwnedPermit<Job<T>>, mpsc::error::SendError<()>>> + Send>,
>;

/// The results of [`WorkerPool::run_all`], as a [`Stream`] of [`TaskResult`]
/// that also submits the batch's tasks as it is polled. Dropping it cancels
/// the pool.
pub struct Batch<I: Iterator, R> {
    /// `None` once every task is queued (or submitting stopped).
    tasks: Option<I>,
    /// The task waiting for room in the queue.
    pending: Option<I::Item>,
    submitter: Option<Submitter<I::Item>>,
    reserve: Option<Reserve<I::Item>>,
    results: Results<R>,
    /// Tasks handed back because the pool stopped accepting (invariant 3).
    refused: Vec<I::Item>,
}

// No field is ever pinned (the permit future is boxed), so moving a batch
// is fine whatever its tasks are.
impl<I: Iterator, R> Unpin for Batch<I, R> {}

impl<I: Iterator, R> fmt::Debug for Batch<I, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("submitting", &self.submitter.is_some())
            .field("results", &self.results)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, R: Send + 'static> WorkerPool<T, R> {
    /// Starts the pool in a child of `scope`, runs every task of `tasks`, and
    /// returns their results as a stream that submits as it is consumed:
    /// collecting it after "submitting" everything cannot deadlock (module
    /// docs). Task `i` of `tasks` gets [`TaskId`] `i`. The stream ends after
    /// the last task's result, or, if the pool is cancelled, after the
    /// results of the tasks queued so far (the rest:
    /// [`Batch::into_unsubmitted`]).
    ///
    /// Prefer this to [`WorkerPool::start`] whenever the tasks are known up
    /// front.
    pub fn run_all<I>(self, scope: &Scope, tasks: I) -> Batch<I::IntoIter, R>
    where
        I: IntoIterator<Item = T>,
    {
        let (submitter, results) = self.start(scope);
        Batch {
            tasks: Some(tasks.into_iter()),
            pending: None,
            submitter: Some(submitter),
            reserve: None,
            results,
            refused: Vec::new(),
        }
    }
}

impl<I, R> Batch<I, R>
where
    I: Iterator,
    I::Item: Send + 'static,
{
    /// Queues tasks while the queue has room; `Pending` (with a waker on the
    /// queue's room) when it is full, `Ready` when submitting is over.
    fn poll_submit(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let Some(submitter) = &self.submitter else {
                return Poll::Ready(());
            };
            if submitter.cancel.is_cancelled() {
                self.stop_submitting();
                return Poll::Ready(());
            }
            if self.pending.is_none() {
                self.pending = self.tasks.as_mut().and_then(Iterator::next);
                if self.pending.is_none() {
                    // Exhausted: close the queue (invariant 2).
                    self.tasks = None;
                    self.submitter = None;
                    return Poll::Ready(());
                }
            }
            let permit = match self.reserve.as_mut() {
                Some(reserve) => match reserve.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(permit) => {
                        self.reserve = None;
                        permit.ok()
                    }
                },
                None => match submitter.tx.clone().try_reserve_owned() {
                    Ok(permit) => Some(permit),
                    Err(mpsc::error::TrySendError::Full(tx)) => {
                        self.reserve = Some(Box::pin(tx.reserve_owned()));
                        continue;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => None,
                },
            };
            match permit {
                Some(permit) => {
                    let id = submitter.next_id();
                    let task = self.pending.take().expect("a task waits for this permit");
                    permit.send((id, task));
                }
                None => {
                    // The queue closed under us: the pool was cancelled.
                    self.stop_submitting();
                    return Poll::Ready(());
                }
            }
        }
    }

    fn stop_submitting(&mut self) {
        self.reserve = None;
        self.submitter = None;
        self.refused.extend(self.pending.take());
    }

    /// Cancels the pool (see [`Submitter::cancel`]): no more tasks are queued.
    pub fn cancel(&self) {
        self.results.cancel();
    }

    /// Results that could not be delivered after a cancellation (see
    /// [`Results::undelivered`]).
    pub fn undelivered(&self) -> u64 {
        self.results.undelivered()
    }

    /// The tasks never queued: `tasks` left over after a cancellation. Empty
    /// when the batch ran to its end.
    pub fn into_unsubmitted(self) -> impl Iterator<Item = I::Item> {
        let Batch {
            tasks,
            pending,
            refused,
            ..
        } = self;
        refused
            .into_iter()
            .chain(pending)
            .chain(tasks.into_iter().flatten())
    }

    /// Runs the rest of the batch, discarding results, and waits for every
    /// worker to exit. Returns worker failures (task failures are results).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future drops the batch, which cancels
    /// the pool.
    pub async fn join(mut self) -> Result<(), ScopeError> {
        while futures::StreamExt::next(&mut self).await.is_some() {}
        let Batch { results, .. } = self;
        results.join().await
    }
}

impl<I, R> Stream for Batch<I, R>
where
    I: Iterator,
    I::Item: Send + 'static,
{
    type Item = TaskResult<R>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Submitting first: its waker (room in the queue) and the results'
        // waker are both registered before this returns `Pending`.
        let _ = this.poll_submit(cx);
        Pin::new(&mut this.results).poll_next(cx)
    }
}

/// Task ids of a batch are its tasks' positions (invariant 1).
impl TaskId {
    /// The position in [`WorkerPool::run_all`]'s `tasks` of the task this id
    /// names (the same number as [`TaskId::get`]).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}
