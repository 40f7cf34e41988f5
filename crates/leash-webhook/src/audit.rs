//! The audit hand-off: results of admitted requests go through a bounded
//! queue to a worker that writes them with a [`ReportSink`], retrying with
//! capped exponential backoff and full jitter.
//!
//! # Invariants
//! 1. The admission response never waits on report writing: [`AuditQueue::submit`]
//!    only `try_send`s into a bounded `mpsc` channel.
//! 2. Nothing is lost silently (seed: Kyverno's dummy WaitGroup and
//!    fire-and-forget background work): a record is either written (the sink
//!    returned `Ok`), or its loss is counted (`leash_audit_results_lost`),
//!    logged (one line per record, naming `KIND NAMESPACE/NAME` and each
//!    result's policy, rule and status)
//!    and handed to [`ReportSink::lost`]. Losses happen only when the queue
//!    is full, when it was closed by shutdown, or at the shutdown deadline.
//! 3. At cancellation the worker keeps the queue open and keeps taking and
//!    writing records until every [`AuditQueue`] handle is gone (the server
//!    has answered its last review: a review answered during shutdown still
//!    has its record written) and nothing is in flight, or until
//!    `shutdown_timeout`. At that deadline the queue is closed (later
//!    submits are losses, reported by the submitter) and what is left is
//!    reported lost. During the drain the awaits are raced against that
//!    deadline (the token is already cancelled).
//! 4. At most `concurrency` writes are in flight; each one's retry loop lives
//!    inside the worker's own future (no task per record), so dropping the
//!    worker at the deadline stops them all.
//! 5. No lock is held anywhere here; the queue-depth gauge is a statistic.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use leash_policy::{Operation, RuleResult, UserInfo};
use leash_runtime::{BoxError, CancellationToken};
use prometheus_client::registry::Registry;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::metrics::AuditMetrics;
use crate::settings::AuditSettings;

/// The results of one admitted request, for an ephemeral report.
#[derive(Debug, Clone)]
pub struct AuditRecord {
    /// The resource evaluated (`object`; `oldObject` for DELETE).
    pub object: Arc<Value>,
    /// The request's operation.
    pub operation: Operation,
    /// The requesting user (roles resolved).
    pub user: UserInfo,
    /// Every result of the admission-enabled policies (pass and skip too).
    pub results: Vec<RuleResult>,
    /// The review's `request.uid`.
    pub uid: String,
    /// The results are the mutating webhook's (the object is the patched
    /// one); otherwise the validating webhook's.
    pub mutation: bool,
}

impl AuditRecord {
    /// `KIND NAMESPACE/NAME` (`KIND NAME` for cluster-scoped resources).
    pub fn resource_name(&self) -> String {
        let m = &self.object["metadata"];
        let kind = self.object["kind"].as_str().unwrap_or("");
        let name = m["name"].as_str().unwrap_or("");
        match m["namespace"].as_str().filter(|n| !n.is_empty()) {
            Some(ns) => format!("{kind} {ns}/{name}"),
            None => format!("{kind} {name}"),
        }
    }
}

/// Why a record was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReason {
    /// The queue was full when the request was admitted.
    QueueFull,
    /// The queue was closed (shutdown had started).
    QueueClosed,
    /// Shutdown's deadline passed before it was written.
    ShutdownDeadline,
}

impl LossReason {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            LossReason::QueueFull => "queue full",
            LossReason::QueueClosed => "queue closed by shutdown",
            LossReason::ShutdownDeadline => "shutdown deadline passed",
        }
    }
}

/// Where audit records go (`leash serve` builds Kyverno EphemeralReports).
pub trait ReportSink: Send + Sync + std::fmt::Debug + 'static {
    /// Writes one record. An error is retried with backoff; the write must
    /// be idempotent (the review uid names the report).
    fn write(&self, record: Arc<AuditRecord>) -> BoxFuture<'static, Result<(), BoxError>>;

    /// Told about each record that will not be written (after it was counted
    /// and logged). Must not block.
    fn lost(&self, record: &AuditRecord, reason: LossReason) {
        let _ = (record, reason);
    }
}

/// Counts, logs by name and announces the loss of a record (invariant 2).
fn report_loss(
    sink: &dyn ReportSink,
    metrics: &AuditMetrics,
    record: &AuditRecord,
    reason: LossReason,
) {
    // One line per record, every result named in it: a full queue under
    // load loses whole records at the request rate, and a line per result
    // (17 for the Pod Security set) made logging most of the CPU.
    let mut results = String::new();
    for (i, r) in record.results.iter().enumerate() {
        use std::fmt::Write as _;
        let sep = if i == 0 { "" } else { ", " };
        let _ = write!(results, "{sep}{}/{}={}", r.policy, r.rule, r.status);
    }
    tracing::error!(
        resource = %record.resource_name(),
        uid = %record.uid,
        reason = reason.as_str(),
        lost = record.results.len(),
        results = %results,
        "audit results not written"
    );
    metrics.lost.inc_by(record.results.len() as u64);
    sink.lost(record, reason);
}

/// The submitting side of the hand-off. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AuditQueue {
    tx: mpsc::Sender<Arc<AuditRecord>>,
    sink: Arc<dyn ReportSink>,
    metrics: AuditMetrics,
}

impl AuditQueue {
    /// Queues a record without waiting (invariant 1). `Err` when it was not
    /// queued; its loss has then been counted, logged and announced.
    pub fn submit(&self, record: AuditRecord) -> Result<(), LossReason> {
        match self.tx.try_send(Arc::new(record)) {
            Ok(()) => {
                self.metrics.queue_depth.inc();
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(r)) => {
                report_loss(self.sink.as_ref(), &self.metrics, &r, LossReason::QueueFull);
                Err(LossReason::QueueFull)
            }
            Err(mpsc::error::TrySendError::Closed(r)) => {
                report_loss(
                    self.sink.as_ref(),
                    &self.metrics,
                    &r,
                    LossReason::QueueClosed,
                );
                Err(LossReason::QueueClosed)
            }
        }
    }
}

/// What the worker did by the time it returned.
#[derive(Debug, Default)]
pub struct DrainSummary {
    /// Records written during the worker's life.
    pub written: u64,
    /// Records not written at the shutdown deadline (each reported, invariant 2).
    pub lost: Vec<Arc<AuditRecord>>,
}

/// The worker that writes queued records.
#[derive(Debug)]
pub struct AuditWriter {
    rx: mpsc::Receiver<Arc<AuditRecord>>,
    sink: Arc<dyn ReportSink>,
    metrics: AuditMetrics,
    settings: AuditSettings,
    shutdown_timeout: Duration,
}

/// Builds the hand-off: the queue handle for the server and the worker to
/// `run`. Registers the audit metrics. Starts nothing.
pub fn audit_channel(
    settings: AuditSettings,
    shutdown_timeout: Duration,
    sink: Arc<dyn ReportSink>,
    registry: &mut Registry,
) -> (AuditQueue, AuditWriter) {
    let metrics = AuditMetrics::register(registry);
    let (tx, rx) = mpsc::channel(settings.capacity.max(1));
    (
        AuditQueue {
            tx,
            sink: sink.clone(),
            metrics: metrics.clone(),
        },
        AuditWriter {
            rx,
            sink,
            metrics,
            settings,
            shutdown_timeout,
        },
    )
}

/// Delay before retry `attempt` (0-based): full jitter over
/// `min(max, initial * 2^attempt)`.
pub(crate) fn backoff(settings: &AuditSettings, attempt: u32) -> Duration {
    let cap = settings
        .initial_backoff
        .saturating_mul(1u32 << attempt.min(20))
        .min(settings.max_backoff);
    let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(fastrand::u64(nanos / 2..=nanos.max(1)))
}

impl AuditWriter {
    /// Writes records until `token` is cancelled, then drains within
    /// `shutdown_timeout` (invariant 3) and returns what was written and lost.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future drops queued and in-flight
    /// records without reporting them. Cancel the token instead.
    pub async fn run(self, token: CancellationToken) -> DrainSummary {
        let AuditWriter {
            mut rx,
            sink,
            metrics,
            settings,
            shutdown_timeout,
        } = self;
        let concurrency = settings.concurrency.max(1);
        let mut inflight = FuturesUnordered::new();
        let mut records: HashMap<u64, Arc<AuditRecord>> = HashMap::new();
        let mut next_id = 0u64;
        let mut summary = DrainSummary::default();
        let write = |id: u64, record: Arc<AuditRecord>| {
            let sink = sink.clone();
            let metrics = metrics.clone();
            let settings = settings.clone();
            async move {
                let mut attempt = 0u32;
                loop {
                    match sink.write(record.clone()).await {
                        Ok(()) => return id,
                        Err(e) => {
                            metrics.retries.inc();
                            tracing::debug!(error = %e, resource = %record.resource_name(), attempt, "report write failed; retrying");
                            tokio::time::sleep(backoff(&settings, attempt)).await;
                            attempt = attempt.saturating_add(1);
                        }
                    }
                }
            }
        };
        // Running: take records while fewer than `concurrency` are in flight.
        let mut open = true;
        loop {
            tokio::select! {
                _ = token.cancelled() => break,
                Some(id) = inflight.next(), if !inflight.is_empty() => {
                    records.remove(&id);
                    summary.written += 1;
                    metrics.written.inc();
                    metrics.queue_depth.dec();
                }
                r = rx.recv(), if open && inflight.len() < concurrency => match r {
                    Some(record) => {
                        next_id += 1;
                        records.insert(next_id, record.clone());
                        inflight.push(write(next_id, record));
                    }
                    // Every queue handle is gone: nothing more can come.
                    None => open = false,
                },
            }
        }
        // Draining (invariant 3): the queue stays open while the server
        // finishes the reviews it is answering.
        let deadline = tokio::time::Instant::now() + shutdown_timeout;
        let mut exhausted = false;
        loop {
            if exhausted && inflight.is_empty() {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                Some(id) = inflight.next(), if !inflight.is_empty() => {
                    records.remove(&id);
                    summary.written += 1;
                    metrics.written.inc();
                    metrics.queue_depth.dec();
                }
                r = rx.recv(), if !exhausted && inflight.len() < concurrency => match r {
                    Some(record) => {
                        next_id += 1;
                        records.insert(next_id, record.clone());
                        inflight.push(write(next_id, record));
                    }
                    None => exhausted = true,
                },
            }
        }
        drop(inflight);
        rx.close();
        let mut lost: Vec<(u64, Arc<AuditRecord>)> = records.into_iter().collect();
        lost.sort_by_key(|(id, _)| *id);
        let mut lost: Vec<Arc<AuditRecord>> = lost.into_iter().map(|(_, r)| r).collect();
        while let Ok(r) = rx.try_recv() {
            lost.push(r);
        }
        for r in &lost {
            metrics.queue_depth.dec();
            report_loss(sink.as_ref(), &metrics, r, LossReason::ShutdownDeadline);
        }
        if !lost.is_empty() {
            tracing::error!(
                lost = lost.len(),
                written = summary.written,
                "audit queue not fully drained by the shutdown deadline"
            );
        }
        summary.lost = lost;
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what it wrote.
    #[derive(Debug, Default)]
    struct Collect(std::sync::Mutex<Vec<String>>);

    impl ReportSink for Collect {
        fn write(&self, record: Arc<AuditRecord>) -> BoxFuture<'static, Result<(), BoxError>> {
            self.0.lock().unwrap().push(record.uid.clone());
            Box::pin(async { Ok(()) })
        }
    }

    fn record(uid: &str) -> AuditRecord {
        AuditRecord {
            object: Arc::new(serde_json::json!({"kind": "Pod", "metadata": {"name": uid}})),
            operation: Operation::Create,
            user: UserInfo::default(),
            results: Vec::new(),
            uid: uid.into(),
            mutation: false,
        }
    }

    /// Found against kube-apiserver: a review answered while `leash serve`
    /// shut down lost its record ("queue closed by shutdown") because the
    /// worker closed the queue the moment it was cancelled. Now a record
    /// submitted after the cancellation, while the server still holds its
    /// queue handle, is written; the worker returns once the handle is gone.
    #[tokio::test]
    async fn records_submitted_during_shutdown_are_written() {
        let sink = Arc::new(Collect::default());
        let mut registry = Registry::default();
        let (queue, writer) = audit_channel(
            AuditSettings::default(),
            Duration::from_secs(10),
            sink.clone(),
            &mut registry,
        );
        let token = CancellationToken::new();
        let worker = writer.run(token.clone());
        let server = async move {
            assert!(queue.submit(record("before")).is_ok());
            token.cancel();
            // The worker has seen the cancellation.
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(queue.submit(record("during")), Ok(()));
            drop(queue);
        };
        let (summary, ()) = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(worker, server)
        })
        .await
        .expect("the worker returns once the queue handles are gone");
        assert!(summary.lost.is_empty());
        assert_eq!(summary.written, 2);
        assert_eq!(*sink.0.lock().unwrap(), ["before", "during"]);
    }

    #[test]
    fn backoff_is_capped_and_jittered() {
        let s = AuditSettings {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            ..AuditSettings::default()
        };
        for attempt in 0..40 {
            let d = backoff(&s, attempt);
            let cap = Duration::from_millis(10 * (1u64 << attempt.min(20)))
                .min(Duration::from_millis(100));
            assert!(
                d <= cap && d >= cap / 2,
                "attempt {attempt}: {d:?} vs {cap:?}"
            );
        }
    }
}
