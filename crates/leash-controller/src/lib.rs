//! leash-controller: the long-running components of `leash serve`.
//!
//! - [`sources::PolicySource`] / [`sources::ConfigSource`]: the cluster's
//!   policies compiled into one immutable [`sources::PolicySet`], and
//!   Kyverno's ConfigMap into one `KyvernoConfig`, each published whole on a
//!   `watch` channel.
//! - [`Reports`]: the background scan ([`scan::BackgroundScan`]) and the
//!   aggregate report controller ([`aggregate::Aggregator`]): ephemeral
//!   reports per resource, merged into one `PolicyReport` per resource.
//! - [`leader::lead`]: runs a component only while this process holds a
//!   Lease; every term is a fresh run, joined before the next.
//!
//! Every component follows the house rules: `new` starts nothing, `run(token)`
//! does all the work in its own scope and returns when the token is
//! cancelled, after every task it started has ended.
//!
//! # Invariants
//! 1. This module holds no lock or atomic of its own. [`Reports::new`]
//!    starts nothing; it makes a fresh [`ReportIndex`] for the term, shared
//!    by the scan and the aggregate controller, and takes the [`Breaker`]
//!    and the [`WatchHub`] (whose cache both read) from the caller (shared
//!    with admission, across terms).
//! 2. [`Reports::run`] spawns the scan and the aggregate controller in a
//!    child scope of its token, both on that scope's token; once the token
//!    is cancelled it shuts the scope down (cancel, then join both, each of
//!    which has joined its own tasks) and returns their failures.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod aggregate;
pub mod cache;
mod feed;
pub mod generate;
pub mod hub;
pub mod kinds;
pub mod leader;
pub mod lookups;
pub mod metrics;
pub mod object;
pub mod queue;
pub mod scan;
pub mod sources;
pub mod watch;
mod watchers;
pub mod writer;

use std::sync::Arc;

use leash_policy::KyvernoConfig;
use leash_runtime::{Scope, ScopeError};
use tokio::sync::watch as channel;
use tokio_util::sync::CancellationToken;

pub use aggregate::{AggregateSettings, Aggregator, ReportIndex};
pub use cache::{Cache, CacheWatcher};
pub use hub::{Subscription, WatchHub};
pub use metrics::Metrics;
pub use scan::{BackgroundScan, ScanSettings};
pub use sources::{ConfigSource, PolicyError, PolicySet, PolicySource};
pub use writer::Breaker;

/// Settings of the reports component.
#[derive(Debug, Clone)]
pub struct ReportsSettings {
    /// The scan's settings.
    pub scan: ScanSettings,
    /// The aggregate controller's settings.
    pub aggregate: AggregateSettings,
    /// `--max-ephemeral-reports`.
    pub max_ephemeral_reports: usize,
}

impl Default for ReportsSettings {
    fn default() -> Self {
        ReportsSettings {
            scan: ScanSettings::default(),
            aggregate: AggregateSettings::default(),
            max_ephemeral_reports: 10_000,
        }
    }
}

/// The reports component: background scan plus aggregate controller, one
/// term's worth. Build a new one for every leadership term: nothing of a
/// previous term is reused.
#[derive(Debug)]
pub struct Reports {
    scan: BackgroundScan,
    aggregate: Aggregator,
}

impl Reports {
    /// A component; starts nothing. The breaker is shared with whoever
    /// else writes ephemeral reports (the admission component); the kinds
    /// are watched through `hub` (shared with admission), the scan and the
    /// aggregate controller reading its cache.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        policies: channel::Receiver<Arc<PolicySet>>,
        config: channel::Receiver<Arc<KyvernoConfig>>,
        breaker: Arc<Breaker>,
        metrics: Arc<Metrics>,
        hub: Arc<WatchHub>,
        settings: ReportsSettings,
    ) -> Reports {
        let cache = hub.cache();
        let index = Arc::new(ReportIndex::new());
        let scan = BackgroundScan::new(
            client.clone(),
            policies.clone(),
            config,
            hub,
            index.clone(),
            breaker.clone(),
            metrics.clone(),
            settings.scan,
        );
        let aggregate = Aggregator::new(
            client,
            policies,
            cache,
            index,
            breaker,
            metrics,
            settings.aggregate,
        );
        Reports { scan, aggregate }
    }

    /// True once the policies were read and every watched kind listed.
    pub fn synced(&self) -> channel::Receiver<bool> {
        self.scan.synced()
    }

    /// Runs both until `token` is cancelled; returns after both ended.
    pub async fn run(self, token: CancellationToken) -> Result<(), ScopeError> {
        let scope = Scope::with_parent_token(&token);
        let t = scope.token().clone();
        scope.spawn("background scan", self.scan.run(t.clone()));
        scope.spawn("aggregate reports", self.aggregate.run(t));
        token.cancelled().await;
        scope.shutdown().await
    }
}
