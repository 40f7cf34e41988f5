//! The reports side's metrics, in Prometheus text format
//! (`prometheus-client`, the Prometheus project's own Rust client).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Counters and gauges of the policy sources, the scan and the aggregate
/// controller. Cheap to share (`Arc<Metrics>`); every field is atomic.
#[derive(Debug)]
pub struct Metrics {
    /// Resources evaluated by the background scan.
    pub resources_scanned: Counter,
    /// Seconds per resource evaluation.
    pub evaluation_seconds: Histogram,
    /// Keys waiting in (or being worked on from) the scan's queue.
    pub scan_queue_depth: Gauge,
    /// Keys waiting in the aggregate controller's queue.
    pub aggregate_queue_depth: Gauge,
    /// Ephemeral reports written.
    pub ephemeral_reports_written: Counter,
    /// Policy reports created or updated.
    pub policy_reports_written: Counter,
    /// Policy reports deleted.
    pub policy_reports_deleted: Counter,
    /// API errors (watch errors, failed writes; each is retried).
    pub api_errors: Counter,
    /// Writes that waited for room under `--max-ephemeral-reports`.
    pub breaker_waits: Counter,
    /// Ephemeral reports that exist now (as far as this process knows).
    pub ephemeral_reports: Gauge,
    /// 1 while this process leads (or runs without leader election).
    pub leader: Gauge,
    /// Leadership terms started.
    pub leader_terms: Counter,
    /// Running cleanup loops of the aggregate controller (at most 1).
    pub cleanup_loops: Gauge,
    /// Running scan worker sets (at most 1).
    pub worker_sets: Gauge,
    /// Policies in the current set.
    pub policies: Gauge,
    /// Kyverno ConfigMap updates rejected as invalid.
    pub config_rejected: Counter,
}

impl Metrics {
    /// Metrics registered in `registry` (prefix `leash_`).
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics::unregistered();
        let r = registry.sub_registry_with_prefix("leash");
        r.register(
            "resources_scanned",
            "Resources evaluated by the background scan",
            m.resources_scanned.clone(),
        );
        r.register(
            "evaluation_seconds",
            "Seconds per resource evaluation",
            m.evaluation_seconds.clone(),
        );
        r.register(
            "scan_queue_depth",
            "Keys in the background scan's queue",
            m.scan_queue_depth.clone(),
        );
        r.register(
            "aggregate_queue_depth",
            "Keys in the aggregate controller's queue",
            m.aggregate_queue_depth.clone(),
        );
        r.register(
            "ephemeral_reports_written",
            "Ephemeral reports written",
            m.ephemeral_reports_written.clone(),
        );
        r.register(
            "policy_reports_written",
            "Policy reports created or updated",
            m.policy_reports_written.clone(),
        );
        r.register(
            "policy_reports_deleted",
            "Policy reports deleted",
            m.policy_reports_deleted.clone(),
        );
        r.register(
            "api_errors",
            "API errors (each retried)",
            m.api_errors.clone(),
        );
        r.register(
            "breaker_waits",
            "Report writes that waited for room under --max-ephemeral-reports",
            m.breaker_waits.clone(),
        );
        r.register(
            "ephemeral_reports",
            "Ephemeral reports that exist",
            m.ephemeral_reports.clone(),
        );
        r.register("leader", "1 while this process leads", m.leader.clone());
        r.register(
            "leader_terms",
            "Leadership terms started",
            m.leader_terms.clone(),
        );
        r.register(
            "cleanup_loops",
            "Running report cleanup loops",
            m.cleanup_loops.clone(),
        );
        r.register(
            "worker_sets",
            "Running background scan worker sets",
            m.worker_sets.clone(),
        );
        r.register(
            "policies",
            "Policies in the current set",
            m.policies.clone(),
        );
        r.register(
            "config_rejected",
            "Kyverno ConfigMap updates rejected as invalid",
            m.config_rejected.clone(),
        );
        m
    }

    /// Metrics not registered anywhere (tests).
    pub fn unregistered() -> Metrics {
        Metrics {
            resources_scanned: Counter::default(),
            evaluation_seconds: Histogram::new(exponential_buckets(0.000_01, 4.0, 10)),
            scan_queue_depth: Gauge::default(),
            aggregate_queue_depth: Gauge::default(),
            ephemeral_reports_written: Counter::default(),
            policy_reports_written: Counter::default(),
            policy_reports_deleted: Counter::default(),
            api_errors: Counter::default(),
            breaker_waits: Counter::default(),
            ephemeral_reports: Gauge::default(),
            leader: Gauge::default(),
            leader_terms: Counter::default(),
            cleanup_loops: Gauge::default(),
            worker_sets: Gauge::default(),
            policies: Gauge::default(),
            config_rejected: Counter::default(),
        }
    }
}

/// Increments a gauge for as long as it lives (a running loop's count).
#[derive(Debug)]
pub struct Running(Gauge);

impl Running {
    /// Counts one more.
    pub fn start(g: &Gauge) -> Running {
        g.inc();
        Running(g.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}
