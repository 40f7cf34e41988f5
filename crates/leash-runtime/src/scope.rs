//! Scopes: every task leash spawns is owned by one.
//!
//! A [`Scope`] is a [`TaskTracker`] plus a [`CancellationToken`] plus an error
//! channel. Spawning goes through a scope (or a cheap [`ScopeHandle`] to it);
//! the owner later calls [`Scope::join`] or [`Scope::shutdown`], which wait for
//! every task and hand back every task failure and panic instead of swallowing
//! them (seed: `createRules` returned before `wg.Wait()`).
//!
//! # Invariants
//! 1. Every task spawned through a scope is counted by that scope's tracker
//!    and by the tracker of every ancestor scope (each task holds a
//!    [`TaskTrackerToken`] of each ancestor), so an ancestor's `join` or
//!    `shutdown` also waits for its descendants' tasks.
//! 2. A child scope's token is a child of its parent's token: cancelling a
//!    scope cancels every descendant scope, never an ancestor.
//! 3. Dropping a [`Scope`] cancels its token (and so its descendants); it does
//!    not wait. Dropping a [`ScopeHandle`] does nothing.
//! 4. A task's failure or panic is sent to its scope's error channel before
//!    the task's tracker tokens are released, so once `join` has seen the
//!    tracker empty, every failure of this scope's own tasks is buffered.
//! 5. No failure goes unreported: when a scope is dropped without being
//!    joined, its channel is closed and drained into the nearest live
//!    ancestor; a task whose scope's channel is closed reports to the nearest
//!    live ancestor; with no live ancestor left, the failure is logged with
//!    `tracing::error!`.
//! 7. Memory is bounded: a scope keeps at most [`MAX_KEPT_ERRORS`] failures
//!    (its channel is bounded). Failures beyond that are logged and counted
//!    ([`ScopeError::omitted`]), never buffered, so a long-lived scope with a
//!    task per connection does not grow with every failure until joined.
//! 6. Panics are caught inside the task (`catch_unwind` under
//!    `AssertUnwindSafe`), so a panic is a [`TaskError::Panicked`], never an
//!    abort of the owner.
//!
//! Built only from tokio / tokio-util primitives (`TaskTracker`,
//! `CancellationToken`, a bounded `mpsc::channel`) and one `AtomicU64`
//! counter; no lock of its own.

use std::any::Any;
use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

/// Most task failures one scope keeps for its `join` (invariant 7); later
/// ones are logged and counted in [`ScopeError::omitted`].
pub const MAX_KEPT_ERRORS: usize = 1024;

/// A boxed error that can cross tasks.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// One task's failure, as returned by [`Scope::join`] and [`Scope::shutdown`].
#[derive(Debug)]
pub enum TaskError {
    /// The task returned `Err`.
    Failed {
        /// The name given to [`Scope::spawn`].
        name: String,
        /// The error the task returned.
        source: BoxError,
    },
    /// The task panicked.
    Panicked {
        /// The name given to [`Scope::spawn`].
        name: String,
        /// The panic payload, if it was a string.
        message: String,
    },
}

impl TaskError {
    /// The name of the task that failed.
    pub fn name(&self) -> &str {
        match self {
            TaskError::Failed { name, .. } | TaskError::Panicked { name, .. } => name,
        }
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Failed { name, source } => write!(f, "task `{name}` failed: {source}"),
            TaskError::Panicked { name, message } => {
                write!(f, "task `{name}` panicked: {message}")
            }
        }
    }
}

impl StdError for TaskError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            TaskError::Failed { source, .. } => Some(source.as_ref()),
            TaskError::Panicked { .. } => None,
        }
    }
}

/// Every failure of the tasks of a scope; returned by [`Scope::join`] and
/// [`Scope::shutdown`] when at least one task failed or panicked.
///
/// Not worth retrying as a whole: each [`TaskError`] says what failed.
#[derive(Debug)]
pub struct ScopeError {
    /// The failures, in the order they were reported (at most
    /// [`MAX_KEPT_ERRORS`] of one scope).
    pub errors: Vec<TaskError>,
    /// Failures reported while [`MAX_KEPT_ERRORS`] were already kept: logged
    /// when they happened, counted here, not kept.
    pub omitted: u64,
}

impl ScopeError {
    /// The failures of `errors`, none omitted.
    pub fn new(errors: Vec<TaskError>) -> ScopeError {
        ScopeError { errors, omitted: 0 }
    }

    /// Every failure, kept or not.
    pub fn total(&self) -> u64 {
        self.errors.len() as u64 + self.omitted
    }
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} task(s) failed", self.total())?;
        for (i, e) in self.errors.iter().enumerate() {
            let sep = if i == 0 { ": " } else { "; " };
            write!(f, "{sep}{e}")?;
        }
        if self.omitted > 0 {
            write!(f, "; and {} more (logged, not kept)", self.omitted)?;
        }
        Ok(())
    }
}

impl StdError for ScopeError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.errors.first().map(|e| e as &(dyn StdError + 'static))
    }
}

/// The text of a panic payload (`&str` or `String`), or a placeholder.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Shared state of one scope; handles and tasks hold it by `Arc`.
struct Node {
    tracker: TaskTracker,
    token: CancellationToken,
    errors: mpsc::Sender<TaskError>,
    /// Failures not kept because `errors` was full (invariant 7).
    omitted: AtomicU64,
    parent: Option<Arc<Node>>,
}

impl Node {
    /// Sends `err` to the nearest scope (this one, then ancestors) whose
    /// channel is still open (invariant 5).
    fn report(&self, err: TaskError) {
        let mut err = err;
        let mut node = Some(self);
        while let Some(n) = node {
            match n.errors.try_send(err) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(e)) => {
                    // Relaxed: a count, read by `join` after the tracker's
                    // wait, which happens after this task ended.
                    n.omitted.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(error = %e, "task failed; its scope already keeps {MAX_KEPT_ERRORS} failures");
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(e)) => {
                    err = e;
                    node = n.parent.as_deref();
                }
            }
        }
        tracing::error!(error = %err, "task failed after every owning scope was dropped");
    }

    /// One tracker token per ancestor (invariant 1).
    fn ancestor_tokens(&self) -> Vec<TaskTrackerToken> {
        let mut tokens = Vec::new();
        let mut node = self.parent.as_deref();
        while let Some(n) = node {
            tokens.push(n.tracker.token());
            node = n.parent.as_deref();
        }
        tokens
    }

    // The one place a task is spawned: scopes are built on the tracker.
    #[allow(
        clippy::disallowed_methods,
        reason = "leash-runtime implements scopes on TaskTracker (house rule 1)"
    )]
    fn spawn_tracked<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if self.parent.is_none() {
            return self.tracker.spawn(fut);
        }
        let ancestors = self.ancestor_tokens();
        self.tracker.spawn(async move {
            let _ancestors = ancestors;
            fut.await
        })
    }
}

/// Owns tasks: a `TaskTracker` plus a `CancellationToken`. Not `Clone`; use
/// [`Scope::handle`] to spawn from elsewhere. Dropping it cancels its tasks
/// (it does not wait for them: call [`Scope::shutdown`] for that).
pub struct Scope {
    handle: ScopeHandle,
    errors: mpsc::Receiver<TaskError>,
}

/// A cheap, cloneable handle that spawns into a [`Scope`] from other tasks.
/// It cannot join; dropping it does nothing.
///
/// Tasks spawned through a handle after its scope was dropped start with a
/// cancelled token and are still counted by the scope's live ancestors.
#[derive(Clone)]
pub struct ScopeHandle {
    node: Arc<Node>,
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("tasks", &self.handle.node.tracker.len())
            .field("cancelled", &self.handle.node.token.is_cancelled())
            .field("has_parent", &self.handle.node.parent.is_some())
            .finish()
    }
}

impl fmt::Debug for ScopeHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScopeHandle")
            .field("tasks", &self.node.tracker.len())
            .field("cancelled", &self.node.token.is_cancelled())
            .finish()
    }
}

impl Default for Scope {
    fn default() -> Self {
        Scope::new()
    }
}

impl Scope {
    fn from_parts(token: CancellationToken, parent: Option<Arc<Node>>) -> Scope {
        let (tx, rx) = mpsc::channel(MAX_KEPT_ERRORS);
        Scope {
            handle: ScopeHandle {
                node: Arc::new(Node {
                    tracker: TaskTracker::new(),
                    token,
                    errors: tx,
                    omitted: AtomicU64::new(0),
                    parent,
                }),
            },
            errors: rx,
        }
    }

    /// A root scope with a fresh token.
    pub fn new() -> Scope {
        Scope::from_parts(CancellationToken::new(), None)
    }

    /// A root scope that is cancelled when `parent` is (its token is a child
    /// of `parent`). Cancelling this scope does not cancel `parent`.
    pub fn with_parent_token(parent: &CancellationToken) -> Scope {
        Scope::from_parts(parent.child_token(), None)
    }

    /// A child scope: cancelled when this one is, and this scope's `join` and
    /// `shutdown` also wait for the child's tasks. The child's task failures
    /// go to the child's own `join`/`shutdown`, or to this scope if the child
    /// is dropped without being joined.
    pub fn child(&self) -> Scope {
        self.handle.child()
    }

    /// A cheap handle to spawn into this scope from other tasks.
    pub fn handle(&self) -> ScopeHandle {
        self.handle.clone()
    }

    /// The scope's cancellation token. Cancel it (or call [`Scope::cancel`])
    /// to ask every task of this scope and its children to stop.
    pub fn token(&self) -> &CancellationToken {
        self.handle.token()
    }

    /// Cancels this scope and every child scope; does not wait.
    pub fn cancel(&self) {
        self.handle.cancel();
    }

    /// Whether this scope was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.handle.is_cancelled()
    }

    /// Number of tasks of this scope (not counting child scopes' tasks) that
    /// have not finished yet.
    pub fn task_count(&self) -> usize {
        self.handle.task_count()
    }

    /// Spawns a named fallible task. An `Err` or a panic is reported by
    /// [`Scope::join`] / [`Scope::shutdown`] as a [`TaskError`].
    ///
    /// The task should watch [`Scope::token`] (or use
    /// [`Scope::run_until_cancelled`]) so that `shutdown` can stop it.
    pub fn spawn<F, E>(&self, name: impl Into<String>, fut: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.handle.spawn(name, fut);
    }

    /// Spawns a task whose output (or panic, as a `JoinError`) the caller
    /// reads from the returned handle. The task is still owned by the scope:
    /// `join`/`shutdown` wait for it, but do not report its panic (the
    /// `JoinHandle` does).
    pub fn spawn_with_output<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn_with_output(fut)
    }

    /// Races `fut` against this scope's token: `None` if the scope is (or
    /// gets) cancelled first.
    ///
    /// # Cancel safety
    /// As cancel safe as `fut`: dropping this future drops `fut`.
    pub async fn run_until_cancelled<F: Future>(&self, fut: F) -> Option<F::Output> {
        cancellable(self.token(), fut).await
    }

    /// Waits for every task of this scope and of its child scopes, without
    /// cancelling anything, and returns this scope's task failures.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the returned future drops the scope, which
    /// cancels its tasks without waiting for them; failures already reported
    /// are forwarded to the nearest live ancestor scope (or logged).
    pub async fn join(mut self) -> Result<(), ScopeError> {
        let tracker = self.handle.node.tracker.clone();
        tracker.close();
        tracker.wait().await;
        let mut errors = Vec::new();
        while let Ok(e) = self.errors.try_recv() {
            errors.push(e);
        }
        // Relaxed: every task of this scope has ended (the tracker's wait).
        let omitted = self.handle.node.omitted.swap(0, Ordering::Relaxed);
        if errors.is_empty() && omitted == 0 {
            Ok(())
        } else {
            Err(ScopeError { errors, omitted })
        }
    }

    /// Runs `body` with a handle to a new child scope, then joins that child
    /// on every exit path of `body` (an early `return` or `?` included), and
    /// returns `body`'s output with the join result. The fix for the
    /// `createRules` seed as a shape: spawn in a loop, fail midway, and every
    /// task spawned so far has still finished when this returns.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future drops the child scope, which
    /// cancels its tasks (this scope's `join` still waits for them).
    pub async fn scoped<T, F, Fut>(&self, body: F) -> (T, Result<(), ScopeError>)
    where
        F: FnOnce(ScopeHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let child = self.child();
        let out = body(child.handle()).await;
        (out, child.join().await)
    }

    /// Cancels this scope (and its children), then waits for every task like
    /// [`Scope::join`] and returns the task failures.
    ///
    /// # Cancel safety
    /// Not cancel safe, as [`Scope::join`]; the scope is cancelled either way.
    pub async fn shutdown(self) -> Result<(), ScopeError> {
        self.cancel();
        self.join().await
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        // Invariant 3: dropping cancels. Harmless after join: every task of
        // this scope has finished by then.
        self.handle.node.token.cancel();
        // Invariant 5: nothing reported to this scope is lost.
        self.errors.close();
        let parent = self.handle.node.parent.clone();
        while let Ok(e) = self.errors.try_recv() {
            match &parent {
                Some(p) => p.report(e),
                None => tracing::error!(error = %e, "task failed in a scope dropped without join"),
            }
        }
        // Relaxed: a count; the failures it counts were logged already.
        let omitted = self.handle.node.omitted.swap(0, Ordering::Relaxed);
        if let Some(p) = &parent {
            p.omitted.fetch_add(omitted, Ordering::Relaxed);
        }
    }
}

impl ScopeHandle {
    /// A child scope of the handle's scope (see [`Scope::child`]).
    pub fn child(&self) -> Scope {
        Scope::from_parts(self.node.token.child_token(), Some(self.node.clone()))
    }

    /// The scope's cancellation token.
    pub fn token(&self) -> &CancellationToken {
        &self.node.token
    }

    /// Cancels the scope and its children; does not wait.
    pub fn cancel(&self) {
        self.node.token.cancel();
    }

    /// Whether the scope was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.node.token.is_cancelled()
    }

    /// Number of unfinished tasks of the scope (not counting child scopes).
    pub fn task_count(&self) -> usize {
        self.node.tracker.len()
    }

    /// Spawns a named fallible task into the scope (see [`Scope::spawn`]).
    pub fn spawn<F, E>(&self, name: impl Into<String>, fut: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let name = name.into();
        let node = self.node.clone();
        // The JoinHandle is not needed: the tracker owns the task and the
        // error channel carries its outcome (invariants 1, 4).
        drop(self.node.spawn_tracked(async move {
            let err = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => TaskError::Failed {
                    name,
                    source: e.into(),
                },
                Err(payload) => TaskError::Panicked {
                    name,
                    message: panic_message(payload.as_ref()),
                },
            };
            node.report(err);
        }));
    }

    /// Spawns a task and returns its `JoinHandle` (see
    /// [`Scope::spawn_with_output`]).
    pub fn spawn_with_output<F>(&self, fut: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.node.spawn_tracked(fut)
    }

    /// Races `fut` against the scope's token (see
    /// [`Scope::run_until_cancelled`]).
    ///
    /// # Cancel safety
    /// As cancel safe as `fut`.
    pub async fn run_until_cancelled<F: Future>(&self, fut: F) -> Option<F::Output> {
        cancellable(&self.node.token, fut).await
    }
}

/// Runs `body` with a handle to a new root scope, then joins it on every exit
/// path of `body` (see [`Scope::scoped`]).
///
/// # Cancel safety
/// Not cancel safe: dropping the future drops the scope, which cancels its
/// tasks without waiting for them.
pub async fn scoped<T, F, Fut>(body: F) -> (T, Result<(), ScopeError>)
where
    F: FnOnce(ScopeHandle) -> Fut,
    Fut: Future<Output = T>,
{
    let scope = Scope::new();
    let out = body(scope.handle()).await;
    (out, scope.join().await)
}

/// Races `fut` against `token`: `Some(output)` if `fut` finishes first, `None`
/// if the token is (or gets) cancelled first. If the token is already
/// cancelled, `fut` is never polled; otherwise, when both become ready in the
/// same poll, `fut`'s output wins. Use it around every I/O await (house
/// rule 3).
///
/// # Cancel safety
/// As cancel safe as `fut`: dropping this future drops `fut`.
pub async fn cancellable<F: Future>(token: &CancellationToken, fut: F) -> Option<F::Output> {
    token.run_until_cancelled(fut).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_reads_str_and_string_payloads() {
        let s: Box<dyn Any + Send> = Box::new("static");
        assert_eq!(panic_message(s.as_ref()), "static");
        let s: Box<dyn Any + Send> = Box::new(format!("owned {}", 1));
        assert_eq!(panic_message(s.as_ref()), "owned 1");
        let s: Box<dyn Any + Send> = Box::new(42u8);
        assert_eq!(panic_message(s.as_ref()), "non-string panic payload");
    }

    #[test]
    fn scope_error_lists_every_failure() {
        let err = ScopeError {
            errors: vec![
                TaskError::Failed {
                    name: "a".into(),
                    source: "io".into(),
                },
                TaskError::Panicked {
                    name: "b".into(),
                    message: "boom".into(),
                },
            ],
            omitted: 0,
        };
        assert_eq!(
            err.to_string(),
            "2 task(s) failed: task `a` failed: io; task `b` panicked: boom"
        );
        assert_eq!(err.source().unwrap().to_string(), "task `a` failed: io");
    }
}
