//! Prometheus metrics of the admission component, registered by the
//! constructors into the caller's registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The label of `leash_admission_reviews`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ResultLabel {
    pub(crate) result: &'static str,
}

/// The server's metrics.
#[derive(Clone, Debug)]
pub(crate) struct ServerMetrics {
    pub(crate) reviews: Family<ResultLabel, Counter>,
    pub(crate) latency: Histogram,
    /// Mutating reviews whose answer may be remembered, by `hit` or `miss`.
    pub(crate) memo: Family<ResultLabel, Counter>,
}

impl ServerMetrics {
    pub(crate) fn register(registry: &mut Registry) -> ServerMetrics {
        let m = ServerMetrics {
            reviews: Family::default(),
            latency: Histogram::new(exponential_buckets(0.000_05, 2.0, 18)),
            memo: Family::default(),
        };
        registry.register(
            "leash_admission_reviews",
            "Admission reviews answered, by result (allowed, denied, filtered, excluded, unmatched, timeout, bad_request)",
            m.reviews.clone(),
        );
        registry.register(
            "leash_admission_review_duration_seconds",
            "Time from a review's arrival to its answer",
            m.latency.clone(),
        );
        registry.register(
            "leash_mutation_memo",
            "Mutating reviews of a chain whose answer depends on the request alone: answered from a remembered patch (hit) or run (miss)",
            m.memo.clone(),
        );
        m
    }

    pub(crate) fn count(&self, result: &'static str) {
        self.reviews.get_or_create(&ResultLabel { result }).inc();
    }
}

/// The audit hand-off's metrics.
#[derive(Clone, Debug, Default)]
pub(crate) struct AuditMetrics {
    pub(crate) queue_depth: Gauge,
    pub(crate) written: Counter,
    pub(crate) retries: Counter,
    pub(crate) lost: Counter,
}

impl AuditMetrics {
    pub(crate) fn register(registry: &mut Registry) -> AuditMetrics {
        let m = AuditMetrics::default();
        registry.register(
            "leash_audit_queue_depth",
            "Audit records queued or being written",
            m.queue_depth.clone(),
        );
        registry.register(
            "leash_audit_reports_written",
            "Audit records written by the report sink",
            m.written.clone(),
        );
        registry.register(
            "leash_audit_write_retries",
            "Failed report writes that were retried",
            m.retries.clone(),
        );
        registry.register(
            "leash_audit_results_lost",
            "Rule results not written (queue full, closed, or shutdown deadline); each is logged by resource name",
            m.lost.clone(),
        );
        m
    }
}
