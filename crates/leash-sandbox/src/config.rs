//! Sandbox settings: where to listen, auth, initial objects, faults.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::generate::GenerateSpec;

/// How a [`Sandbox`](crate::Sandbox) is started.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Address to bind. Default `127.0.0.1:0` (an ephemeral loopback port).
    pub listen: SocketAddr,
    /// Bearer token; when set, every request without `Authorization: Bearer <token>` gets 401
    /// (except `/healthz`, `/livez`, `/readyz`).
    pub token: Option<String>,
    /// Synthetic objects, generated and created one at a time before `objects` (so a
    /// sandbox of 100,000 generated pods never holds them all as parsed JSON).
    pub generate: Option<GenerateSpec>,
    /// Initial objects, created in order (after the generated ones) before the server accepts
    /// connections. CRDs register their kinds; namespaced objects need their namespace (the
    /// four default namespaces exist).
    pub objects: Vec<serde_json::Value>,
    /// Fault injection (none by default).
    pub faults: Faults,
    /// Seed for every random choice (faults, generated names and uids).
    pub seed: u64,
    /// Where the services that webhook configurations reference
    /// (`clientConfig.service`) are reached: `namespace/name` → an `https://HOST:PORT`
    /// base URL (its path, if any, is prepended to the service's `path`). The
    /// certificate is verified for `NAME.NAMESPACE.svc`, as kube-apiserver does;
    /// the service's port is only named in messages. Several base URLs,
    /// comma-separated, are the Service's endpoints: each call goes to the
    /// next (as kube-apiserver spreads calls over a Service's endpoints).
    /// Start fails on a key that is not `namespace/name`; a bad URL fails
    /// the calls that use it.
    pub webhook_services: BTreeMap<String, String>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            token: None,
            generate: None,
            objects: Vec::new(),
            faults: Faults::default(),
            seed: 0,
            webhook_services: BTreeMap::new(),
        }
    }
}

/// Fault injection settings. Changeable at run time with
/// [`Sandbox::set_faults`](crate::Sandbox::set_faults).
///
/// Rates are probabilities in `0.0..=1.0` (values outside are clamped), drawn in this order
/// for each request: failure (500), throttling (429), connection reset. Watch cuts are
/// drawn from a generator of their own, so turning them on does not change which other
/// requests fail.
#[derive(Clone, Debug)]
pub struct Faults {
    /// Added to every request before it is handled.
    pub latency: Duration,
    /// Uniformly random extra latency in `0..=latency_jitter`.
    pub latency_jitter: Duration,
    /// Probability of a 500 `InternalError` Status.
    pub fail_rate: f64,
    /// Requests whose path starts with one of these prefixes always get the 500 of
    /// `fail_rate` (an API group that is down while the rest answers, say
    /// `/apis/kyverno.io/`); the generator's draws are made all the same.
    pub fail_paths: Vec<String>,
    /// Probability of a 429 with `Retry-After` and a plain-text body, as API Priority and Fairness answers.
    pub throttle_rate: f64,
    /// The `Retry-After` value in seconds (default 1).
    pub retry_after_secs: u64,
    /// Probability that the connection is dropped in the middle of the response body.
    pub reset_rate: f64,
    /// Probability that a response's body is cut to its first half but ends cleanly (a
    /// `Content-Length` of the half): a complete answer whose JSON is not, as a broken
    /// proxy may deliver. Drawn with `reset_rate`'s value, after it (no extra draw).
    pub truncate_rate: f64,
    /// How long a list's continue tokens stay valid, counted from its first page (default 5 min).
    pub continue_ttl: Duration,
    /// Discovery (`/api`, `/apis`, their group/version documents) and `/version` always obey
    /// latency; the failure rates apply to them only when this is set.
    pub fail_discovery: bool,
    /// Ends every watch after a uniformly random time in `0..=bound`, drawn when the watch
    /// starts (`None`: watches last their `timeoutSeconds`, 30 minutes by default).
    pub watch_cut_after: Option<Duration>,
    /// Probability, for each event a watch sends (bookmarks included), that the watch
    /// ends right after it.
    pub watch_cut_rate: f64,
    /// How a cut watch ends.
    pub watch_cut: WatchCut,
}

/// How a watch cut by [`Faults::watch_cut_after`] or [`Faults::watch_cut_rate`] ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WatchCut {
    /// The chunked response ends with its terminating chunk, as kube-apiserver ends a
    /// watch at its timeout: clients see the stream end and watch again from the last
    /// resourceVersion they saw.
    #[default]
    Clean,
    /// The connection is reset without the terminating chunk: clients see a body error.
    Reset,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            latency: Duration::ZERO,
            latency_jitter: Duration::ZERO,
            fail_rate: 0.0,
            fail_paths: Vec::new(),
            throttle_rate: 0.0,
            retry_after_secs: 1,
            reset_rate: 0.0,
            truncate_rate: 0.0,
            continue_ttl: Duration::from_secs(300),
            fail_discovery: false,
            watch_cut_after: None,
            watch_cut_rate: 0.0,
            watch_cut: WatchCut::Clean,
        }
    }
}
