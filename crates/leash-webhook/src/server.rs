//! The HTTPS server: `POST /validate` (and `/validate/fail`,
//! `/validate/ignore`, one per webhook failure policy) and `POST /mutate`
//! (`/mutate/fail`, `/mutate/ignore`: the mutating webhooks, answering a
//! JSON Patch) answering `admission.k8s.io/v1` AdmissionReviews,
//! `POST /validate/policy` (policies themselves), and `GET /healthz`.
//!
//! # Invariants
//! 1. Every task (the snapshot watcher, one per connection, one per
//!    evaluation) belongs to the server's [`Scope`]; `run` cancels and joins
//!    it before returning, bounded by `shutdown_timeout`.
//! 2. Accepting, TLS handshakes and connection serving are raced against the
//!    token; on cancellation connections shut down gracefully (in-flight
//!    reviews are answered). At most `MAX_CONNECTIONS` connections are
//!    served at once; the TLS handshake, the request headers (and an idle
//!    keep-alive) are bounded by `HANDSHAKE_TIMEOUT`, the whole request
//!    body by `BODY_TIMEOUT`: no client holds a connection by sending
//!    slowly or stopping halfway.
//! 3. The policy snapshot is derived once per policy set (`Arc::ptr_eq` on the
//!    engine) and swapped whole through an `ArcSwap`; requests only load it.
//!    Nothing evaluated is ever mutated (seed 000).
//! 4. An evaluation runs in its own task of the scope, and the request
//!    waits for it at most until the answer deadline (90% of
//!    `timeout_seconds`). Evaluation is CPU-bound and short (µs–ms); running
//!    it in a task rather than inline lets the handler answer at the
//!    deadline even when an evaluation overruns (it then finishes in the
//!    background and its result is discarded), and a slow evaluation
//!    occupies one runtime worker, never the accept loop's task. On overrun
//!    (or an evaluation panic) the answer follows the webhook's failure
//!    policy: `/validate`, `/validate/fail`, `/mutate` and `/mutate/fail`
//!    deny, the `/ignore` ones allow (unpatched) with a warning — what
//!    kube-apiserver itself would do on a timeout, answered explicitly and
//!    in time.
//! 5. Audit records are handed off with a non-blocking submit: the response
//!    never waits on report writing.
//! 6. No lock is held across an await: the watch receivers' `borrow()`
//!    guards are dropped at once (values are cloned `Arc`s).
//! 7. A CREATE or UPDATE that triggers generate rules (or any operation
//!    that triggers mutate-existing rules) gets its
//!    UpdateRequest created through the [`TriggerSink`] before the answer,
//!    within the answer deadline (seed 000: Kyverno created them in a
//!    fire-and-forget goroutine). If that fails, the webhook's failure
//!    policy decides: `Fail` denies, `Ignore` allows with a warning.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use leash_policy::{
    Bindings, ClusterData, Engine, EvalRequest, KyvernoConfig, Operation, Prepared, Status,
};
use leash_runtime::{CancellationToken, Scope, ScopeHandle};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::audit::{AuditQueue, AuditRecord};
use crate::error::{Error, Result};
use crate::memo::Remembered;
use crate::metrics::ServerMetrics;
use crate::recorder::Recorder;
use crate::review::{self, Answer, MAX_BODY_BYTES, ReviewRequest};
use crate::settings::Settings;
use crate::snapshot::{Mutator, Snapshot, blocked_message, verdict};
use crate::tls::TlsMaterial;
use crate::userinfo::RoleMemo;

/// At most this many connections are served at once (the rest wait in the
/// listen backlog).
const MAX_CONNECTIONS: usize = 4096;
/// How long a client may take for the TLS handshake and request headers;
/// hyper also closes a keep-alive connection idle this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a whole request body (a review is at
/// most 3 MiB): past it the request is answered 408 and the connection
/// closed, so a client that stops mid-body cannot hold a connection.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// An oversized body up to this size is read and discarded before the 413
/// is sent (larger ones are answered at once and the connection closed).
const DRAIN_LIMIT: usize = 2 * MAX_BODY_BYTES;

/// The webhook's failure policy, from the path the API server called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Deny when the webhook cannot decide in time.
    Fail,
    /// Allow when the webhook cannot decide in time.
    Ignore,
}

impl FailurePolicy {
    /// `Fail` / `Ignore`, as in a webhook configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// The review endpoint a request came to: `/validate/fail` and
/// `/validate/ignore` (what the registered configuration points at) serve
/// the policies of that failure policy; `/validate` serves every policy,
/// as `Fail`; `/mutate`, `/mutate/fail` and `/mutate/ignore` likewise for
/// the mutating webhooks; `/validate/policy` validates the policies
/// themselves (see [`policy_review`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Validate(Subset),
    Mutate(Subset),
    Policy,
}

/// Which policies an endpoint serves, by their `failurePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subset {
    All,
    Fail,
    Ignore,
}

impl Subset {
    fn mode(self) -> FailurePolicy {
        match self {
            Subset::All | Subset::Fail => FailurePolicy::Fail,
            Subset::Ignore => FailurePolicy::Ignore,
        }
    }

    /// Whether a policy (`failurePolicy: Ignore` or not) is answered here.
    fn serves(self, ignores_failures: bool) -> bool {
        match self {
            Subset::All => true,
            Subset::Fail => !ignores_failures,
            Subset::Ignore => ignores_failures,
        }
    }
}

/// What an UpdateRequest asks the background component to do
/// (`spec.requestType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RequestKind {
    /// Classic generate rules (`generate`).
    Generate,
    /// A GeneratingPolicy (`cel-generate`; its one rule is its name).
    CelGenerate,
    /// Classic `mutate.targets` rules (`mutate`): patch existing resources.
    Mutate,
    /// A MutatingPolicy with `evaluation.mutateExisting` (`cel-mutate`;
    /// its one rule is its name).
    CelMutate,
}

/// The admission request that triggered an UpdateRequest.
#[derive(Debug, Clone)]
pub struct Trigger {
    /// The object admitted (`oldObject` for DELETE).
    pub object: Arc<serde_json::Value>,
    /// `oldObject` on UPDATE and DELETE.
    pub old_object: Option<Arc<serde_json::Value>>,
    /// The request's operation.
    pub operation: Operation,
    /// The requesting user (roles resolved).
    pub user: leash_policy::UserInfo,
}

/// Where admission hands the triggers of generate and mutate-existing
/// rules: it creates their UpdateRequest (`policy` key, the rules that
/// matched, the trigger) and answers once the API server has it.
pub trait TriggerSink: Send + Sync + std::fmt::Debug {
    /// Creates the UpdateRequest; the error says why it could not.
    fn create(
        &self,
        kind: RequestKind,
        policy: &str,
        rules: Vec<String>,
        trigger: &Trigger,
    ) -> futures::future::BoxFuture<'static, std::result::Result<(), String>>;
}

/// Cluster data beyond what the webhook's `cluster` holds (a `configMap`
/// context entry, an `apiCall`, a CEL `resource.Get`): the engine never
/// waits on the network, so an evaluation records what it could not find,
/// the request's task fetches it, and evaluates again (at most four rounds,
/// all within the review's deadline).
pub trait LookupSource: Send + Sync + std::fmt::Debug {
    /// The data for one evaluation.
    fn begin(&self) -> Box<dyn Lookup>;
}

/// One evaluation's cluster data. See [`LookupSource`].
pub trait Lookup: Send + Sync {
    /// The data the evaluations read.
    fn data(&self) -> &dyn ClusterData;

    /// Fetches what evaluations asked for and did not find since the last
    /// call; false when nothing was missing.
    fn fetch_missed(&self) -> futures::future::BoxFuture<'_, bool>;
}

/// The admission server component. `new` binds the listener (so the bound
/// address and CA are known before `run`) and starts nothing.
#[derive(Debug)]
pub struct AdmissionServer {
    settings: Settings,
    listener: std::net::TcpListener,
    local_addr: SocketAddr,
    tls: TlsMaterial,
    policies: watch::Receiver<Arc<Engine>>,
    config: watch::Receiver<Arc<KyvernoConfig>>,
    cluster: Arc<dyn ClusterData>,
    audit: AuditQueue,
    recorder: Recorder,
    metrics: ServerMetrics,
    triggers: Option<Arc<dyn TriggerSink>>,
    lookups: Option<Arc<dyn LookupSource>>,
    ready: Option<watch::Receiver<bool>>,
}

impl AdmissionServer {
    /// Binds `settings.listen`, loads or generates the certificate, and
    /// registers the server's metrics.
    ///
    /// # Errors
    /// [`Error::BindFailed`] and the TLS errors; none is worth retrying as is.
    pub fn new(
        settings: Settings,
        policies: watch::Receiver<Arc<Engine>>,
        config: watch::Receiver<Arc<KyvernoConfig>>,
        cluster: Arc<dyn ClusterData>,
        audit: AuditQueue,
        recorder: Recorder,
        registry: &mut Registry,
    ) -> Result<AdmissionServer> {
        let bind_err = |source| Error::BindFailed {
            addr: settings.listen,
            source,
        };
        let listener = std::net::TcpListener::bind(settings.listen).map_err(bind_err)?;
        listener.set_nonblocking(true).map_err(bind_err)?;
        let local_addr = listener.local_addr().map_err(bind_err)?;
        let tls = TlsMaterial::from_settings(&settings, local_addr)?;
        Ok(AdmissionServer {
            metrics: ServerMetrics::register(registry),
            settings,
            listener,
            local_addr,
            tls,
            policies,
            config,
            cluster,
            audit,
            recorder,
            triggers: None,
            lookups: None,
            ready: None,
        })
    }

    /// Reads what evaluations need beyond `cluster` through `source`
    /// (without one, such lookups find nothing).
    pub fn with_lookups(mut self, source: Arc<dyn LookupSource>) -> AdmissionServer {
        self.lookups = Some(source);
        self
    }

    /// Answers no review by the policies until `ready` is true: until then
    /// each is answered as the webhook's failure policy says (`Fail`
    /// denies, `Ignore` allows with a warning), never allowed for want of
    /// a policy not read yet. Without it the engine given to
    /// [`AdmissionServer::new`] is served from the start.
    pub fn until_ready(mut self, ready: watch::Receiver<bool>) -> AdmissionServer {
        self.ready = Some(ready);
        self
    }

    /// Creates UpdateRequests for generate rules through `sink` (without
    /// one, generate rules are not evaluated at admission).
    pub fn with_triggers(mut self, sink: Arc<dyn TriggerSink>) -> AdmissionServer {
        self.triggers = Some(sink);
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// PEM of the CA for the webhook configuration's `caBundle`.
    pub fn ca_pem(&self) -> &str {
        &self.tls.ca_pem
    }

    /// The URL the webhook configuration points at (`--webhook-url` or
    /// `https://<bound address>/validate`).
    pub fn webhook_url(&self) -> String {
        self.settings.effective_webhook_url(self.local_addr)
    }

    /// Serves until `token` is cancelled, then stops accepting, lets
    /// in-flight reviews finish and joins every task (bounded by
    /// `shutdown_timeout`).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future cancels the server's tasks
    /// without waiting for them. Cancel the token instead.
    pub async fn run(self, token: CancellationToken) -> Result<()> {
        let scope = Scope::with_parent_token(&token);
        let listener =
            TcpListener::from_std(self.listener).map_err(|source| Error::BindFailed {
                addr: self.local_addr,
                source,
            })?;
        let engine = self.policies.borrow().clone();
        let snapshot = Snapshot::build(engine);
        self.recorder.serve_exactly(snapshot.refs());
        let app = Arc::new(Admission {
            snapshot: ArcSwap::from_pointee(snapshot),
            policies: self.policies.clone(),
            config: self.config,
            cluster: self.cluster,
            roles: RoleMemo::default(),
            audit: self.settings.reports.then_some(self.audit),
            recorder: self.recorder,
            metrics: self.metrics,
            deadline: self.settings.answer_deadline(),
            scope: scope.handle(),
            triggers: self.triggers,
            lookups: self.lookups,
            ready: self.ready,
        });
        // Policy changes are installed (and recorded as served) as they come,
        // not only when a review arrives.
        let watcher_app = app.clone();
        let mut changes = self.policies;
        let watch_token = scope.token().clone();
        scope.spawn("admission-snapshot-watcher", async move {
            while let Some(Ok(())) = watch_token.run_until_cancelled(changes.changed()).await {
                watcher_app.current();
            }
            Ok::<(), Infallible>(())
        });
        let router = router(app);
        let acceptor = tokio_rustls::TlsAcceptor::from(self.tls.server_config.clone());
        tracing::info!(addr = %self.local_addr, "admission webhook serving");
        accept_loop(listener, acceptor, router, scope.handle()).await;
        match tokio::time::timeout(self.settings.shutdown_timeout, scope.shutdown()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::TaskFailed(e)),
            Err(_) => {
                tracing::warn!(
                    "admission server: tasks still running at the shutdown deadline; cancelled"
                );
                Ok(())
            }
        }
    }
}

fn router(app: Arc<Admission>) -> Router {
    let reviews = |endpoint: Endpoint| {
        post(
            move |State(app): State<Arc<Admission>>, req: Request| async move {
                app.handle(endpoint, req).await
            },
        )
        .fallback(method_not_allowed)
    };
    Router::new()
        .route("/validate", reviews(Endpoint::Validate(Subset::All)))
        .route("/validate/fail", reviews(Endpoint::Validate(Subset::Fail)))
        .route(
            "/validate/ignore",
            reviews(Endpoint::Validate(Subset::Ignore)),
        )
        .route("/validate/policy", reviews(Endpoint::Policy))
        .route("/mutate", reviews(Endpoint::Mutate(Subset::All)))
        .route("/mutate/fail", reviews(Endpoint::Mutate(Subset::Fail)))
        .route("/mutate/ignore", reviews(Endpoint::Mutate(Subset::Ignore)))
        .route(
            "/healthz",
            get(|| async { "ok" }).fallback(method_not_allowed),
        )
        .fallback(not_found)
        .with_state(app)
}

/// Kyverno's policy validation webhook (`validate-policy.kyverno.svc`):
/// a policy, PolicyException or DeletingPolicy created or updated is
/// compiled as the engine compiles it, and refused with the error (naming
/// the field) when it does not compile, so that a typo never replaces a
/// working policy. Needs no policy set: answered from the first request.
fn policy_review(review: &ReviewRequest) -> (Answer, &'static str) {
    if review.operation == Operation::Delete {
        return (Answer::allow(), "allowed");
    }
    let doc = review.resource.as_ref();
    let compiled = if leash_policy::dpol::is_deleting_policy(doc) {
        leash_policy::dpol::DeletingPolicy::compile(doc).map(|_| ())
    } else {
        leash_policy::Document::compile(doc).map(|_| ())
    };
    match compiled {
        Ok(()) => (Answer::allow(), "allowed"),
        Err(e) => (Answer::deny(format!("policy is invalid: {e}")), "denied"),
    }
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

async fn not_found(req: Request) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!(
            "no such path {:?}: the admission webhook serves POST /validate, /validate/fail, /validate/ignore, /validate/policy, /mutate, /mutate/fail, /mutate/ignore and GET /healthz\n",
            req.uri().path()
        ),
    )
}

async fn method_not_allowed(req: Request) -> Response {
    let want = if req.uri().path() == "/healthz" {
        "GET"
    } else {
        "POST"
    };
    text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "method {} not allowed on {}: use {want}\n",
            req.method(),
            req.uri().path()
        ),
    )
}

/// Accepts connections until the scope is cancelled (invariant 2).
async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    scope: ScopeHandle,
) {
    let token = scope.token().clone();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = token.cancelled() => break,
            r = async {
                let slot = slots.clone().acquire_owned().await;
                listener.accept().await.map(|(stream, _)| (stream, slot))
            } => r,
        };
        match accepted {
            Ok((stream, slot)) => {
                let acceptor = acceptor.clone();
                let router = router.clone();
                let token = token.clone();
                scope.spawn("admission-connection", async move {
                    serve_connection(stream, acceptor, router, token).await;
                    drop(slot);
                    Ok::<(), Infallible>(())
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "admission: accept failed");
                if token
                    .run_until_cancelled(tokio::time::sleep(Duration::from_millis(50)))
                    .await
                    .is_none()
                {
                    break;
                }
            }
        }
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    token: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let tls = match token
        .run_until_cancelled(tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            acceptor.accept(stream),
        ))
        .await
    {
        Some(Ok(Ok(tls))) => tls,
        Some(Ok(Err(e))) => {
            tracing::debug!(error = %e, "admission: TLS handshake failed");
            return;
        }
        Some(Err(_)) => {
            tracing::debug!("admission: TLS handshake timed out");
            return;
        }
        None => return,
    };
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(tls), service));
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "admission: connection ended with an error");
            }
        }
        _ = token.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, conn).await;
        }
    }
}

/// The request handler's shared state.
struct Admission {
    snapshot: ArcSwap<Snapshot>,
    policies: watch::Receiver<Arc<Engine>>,
    config: watch::Receiver<Arc<KyvernoConfig>>,
    cluster: Arc<dyn ClusterData>,
    /// The users' roles, kept while the bindings are unchanged.
    roles: RoleMemo,
    /// `None` with `Settings::reports` off: no admission reports.
    audit: Option<AuditQueue>,
    recorder: Recorder,
    metrics: ServerMetrics,
    deadline: Duration,
    triggers: Option<Arc<dyn TriggerSink>>,
    lookups: Option<Arc<dyn LookupSource>>,
    /// False until the policies are read (None: ready from the start).
    ready: Option<watch::Receiver<bool>>,
    scope: ScopeHandle,
}

impl Admission {
    /// The snapshot of the current policy set, derived once per set
    /// (invariant 3). Two racing rebuilds are harmless: a stale store is
    /// replaced by the next call, which sees the engine differ.
    fn current(&self) -> Arc<Snapshot> {
        let engine = self.policies.borrow().clone();
        let snap = self.snapshot.load_full();
        if Arc::ptr_eq(&snap.engine, &engine) {
            return snap;
        }
        let fresh = Arc::new(Snapshot::build(engine));
        self.snapshot.store(fresh.clone());
        self.recorder.serve_exactly(fresh.refs());
        fresh
    }

    async fn handle(self: Arc<Self>, endpoint: Endpoint, req: Request) -> Response {
        let start = Instant::now();
        let response = self.respond(endpoint, req).await;
        self.metrics.latency.observe(start.elapsed().as_secs_f64());
        response
    }

    async fn respond(&self, endpoint: Endpoint, req: Request) -> Response {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let too_large = || {
            text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body is larger than {MAX_BODY_BYTES} bytes (3 MiB, kube-apiserver's limit)\n"
                ),
            )
        };
        // One deadline for reading the whole body, drains included.
        let deadline = tokio::time::Instant::now() + BODY_TIMEOUT;
        let timed_out = || {
            let mut r = text(
                StatusCode::REQUEST_TIMEOUT,
                format!("request body not received within {BODY_TIMEOUT:?}\n"),
            );
            r.headers_mut()
                .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
            r
        };
        if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
            self.metrics.count("bad_request");
            // Read (and discard) a moderately oversized body so the client
            // sees the 413 instead of a reset while it is still sending.
            if declared.is_some_and(|n| n <= DRAIN_LIMIT as u64) {
                let drain = Limited::new(req.into_body(), DRAIN_LIMIT).collect();
                let _ = tokio::time::timeout_at(deadline, drain).await;
            }
            return too_large();
        }
        let mut body = req.into_body();
        let collect = Limited::new(&mut body, MAX_BODY_BYTES).collect();
        let Ok(collected) = tokio::time::timeout_at(deadline, collect).await else {
            self.metrics.count("bad_request");
            return timed_out();
        };
        let body = match collected {
            Ok(b) => b.to_bytes(),
            Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
                self.metrics.count("bad_request");
                let drain = Limited::new(body, DRAIN_LIMIT).collect();
                let _ = tokio::time::timeout_at(deadline, drain).await;
                return too_large();
            }
            Err(e) => {
                self.metrics.count("bad_request");
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("reading request body: {e}\n"),
                );
            }
        };
        let review = match review::parse(&body) {
            Ok(r) => r,
            Err(e) => {
                self.metrics.count("bad_request");
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("bad AdmissionReview: {e}\n"),
                );
            }
        };
        let uid = review.uid.clone();
        let (answer, result) = self.decide(endpoint, review).await;
        self.metrics.count(result);
        let body = answer.to_review(&uid);
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(serde_json::to_vec(&body).unwrap_or_default()),
        )
            .into_response()
    }

    /// The answer to one review and the result label for the metrics.
    async fn decide(&self, endpoint: Endpoint, review: ReviewRequest) -> (Answer, &'static str) {
        match endpoint {
            Endpoint::Policy => policy_review(&review),
            Endpoint::Validate(subset) => self.validate(subset, review).await,
            Endpoint::Mutate(subset) => self.mutate(subset, review).await,
        }
    }

    /// What every review goes through before the policies run: readiness,
    /// the configuration's filters, whether any policy may match, the
    /// user's roles and exclusions. `Err` is the answer when evaluation is
    /// not needed (or not possible yet).
    fn prelude(
        &self,
        mode: FailurePolicy,
        review: &ReviewRequest,
        may_match: impl Fn(&Snapshot, &str) -> bool,
    ) -> std::result::Result<(Arc<Snapshot>, EvalRequest), (Answer, &'static str)> {
        if self.ready.as_ref().is_some_and(|r| !*r.borrow()) {
            let resource_name = kyverno_resource_name(review);
            tracing::debug!(resource = %resource_name, "review before the policies are read");
            return Err((
                unanswerable(
                    mode,
                    format!(
                        "leash is starting: the policies are not read yet, {resource_name} cannot be checked"
                    ),
                ),
                "not_ready",
            ));
        }
        let config = self.config.borrow().clone();
        if config.is_filtered(&review.kind, &review.namespace, &review.name) {
            return Err((Answer::allow(), "filtered"));
        }
        let snapshot = self.current();
        if !may_match(&snapshot, &review.kind) {
            return Err((Answer::allow(), "unmatched"));
        }
        let mut user = review.user.clone();
        self.roles
            .resolve(&mut user, &review.namespace, self.cluster.as_ref());
        if config.is_excluded(&user) {
            return Err((Answer::allow(), "excluded"));
        }
        let (namespace_labels, namespace_object) = if review.namespace.is_empty() {
            (None, None)
        } else {
            match self.cluster.get("v1", "namespaces", "", &review.namespace) {
                Some(ns) => (Some(leash_policy::labels_of(&ns)), Some(ns)),
                None => (None, None),
            }
        };
        let eval = EvalRequest {
            object: review.resource.clone(),
            old_object: review.old_object.clone(),
            operation: review.operation,
            user_info: user,
            namespace_labels,
            namespace_object,
            request_resource: review.request_resource(),
        };
        Ok((snapshot, eval))
    }

    /// Runs `evaluate` in a task of the scope (invariant 4) with the
    /// cluster data of one evaluation: what it asked for and did not find
    /// is fetched and it runs again, at most three more times. `Err` is the
    /// answer when it panicked or overran the deadline.
    async fn evaluate<T: Send + 'static>(
        &self,
        mode: FailurePolicy,
        started: tokio::time::Instant,
        eval: EvalRequest,
        resource_name: &str,
        evaluate: impl Fn(&Prepared, &dyn ClusterData) -> T + Send + 'static,
    ) -> std::result::Result<T, (Answer, &'static str)> {
        let cluster = self.cluster.clone();
        let lookups = self.lookups.clone();
        let task = self.scope.spawn_with_output(async move {
            let prepared = Prepared::new(eval);
            let lookup = lookups.map(|l| l.begin());
            let data: &dyn ClusterData = match &lookup {
                Some(l) => l.data(),
                None => cluster.as_ref(),
            };
            let mut out = evaluate(&prepared, data);
            if let Some(l) = &lookup {
                for _ in 0..3 {
                    if !l.fetch_missed().await {
                        break;
                    }
                    out = evaluate(&prepared, data);
                }
            }
            out
        });
        match tokio::time::timeout_at(started + self.deadline, task).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(join)) => {
                tracing::error!(error = %join, resource = %resource_name, "policy evaluation panicked");
                Err((
                    unanswerable(
                        mode,
                        format!("evaluating policies for {resource_name} failed: {join}"),
                    ),
                    "error",
                ))
            }
            Err(_) => {
                tracing::warn!(resource = %resource_name, deadline = ?self.deadline, "policy evaluation overran the deadline");
                Err((
                    unanswerable(
                        mode,
                        format!(
                            "evaluating policies for {resource_name} did not finish within {:?}",
                            self.deadline
                        ),
                    ),
                    "timeout",
                ))
            }
        }
    }

    /// The mutating webhook: the object patched by the endpoint's mutating
    /// policies, in order, answered as a JSON Patch from the object sent.
    /// A policy that errors blocks the request at a `Fail` endpoint (as
    /// Kyverno's `mutation policy P error: failed to apply policy P rules
    /// [rule: message]`) and is left out at an `Ignore` one.
    async fn mutate(&self, subset: Subset, review: ReviewRequest) -> (Answer, &'static str) {
        let mode = subset.mode();
        let started = tokio::time::Instant::now();
        // The API server takes no patch for a deletion or a connect.
        if !matches!(review.operation, Operation::Create | Operation::Update) {
            return (Answer::allow(), "unmatched");
        }
        let (snapshot, eval) =
            match self.prelude(mode, &review, |s, kind| s.mutation.may_match(kind)) {
                Ok(v) => v,
                Err(answer) => return answer,
            };
        let Mutator { engine, memo } = match subset {
            Subset::All => snapshot.mutation.all.clone(),
            Subset::Fail => snapshot.mutation.fail.clone(),
            Subset::Ignore => snapshot.mutation.ignore.clone(),
        };
        if engine.is_empty() {
            return (Answer::allow(), "unmatched");
        }
        // An answer given to an equal request (the pods of one ReplicaSet)
        // is answered again without running the chain.
        let remembered = memo.and_then(|m| {
            let key = m.key(&eval)?;
            Some((m, key))
        });
        let hit = remembered.as_ref().and_then(|(memo, key)| memo.get(key));
        if remembered.is_some() {
            let result = if hit.is_some() { "hit" } else { "miss" };
            self.metrics
                .memo
                .get_or_create(&crate::metrics::ResultLabel { result })
                .inc();
        }
        if let Some(answer) = hit {
            return match &*answer {
                Remembered::Patch(patch) => (
                    Answer {
                        patch: patch.clone(),
                        ..Answer::allow()
                    },
                    if patch.is_some() {
                        "mutated"
                    } else {
                        "allowed"
                    },
                ),
                Remembered::Denied(message) => (Answer::deny(message.clone()), "denied"),
            };
        }
        // The request, for checking what is remembered of its answer.
        let asked = remembered.as_ref().map(|_| eval.clone());
        let user = eval.user_info.clone();
        let resource_name = kyverno_resource_name(&review);
        let mutation = match self
            .evaluate(
                mode,
                started,
                eval,
                &resource_name,
                move |prepared, data| {
                    engine.mutate_admission(prepared.request(), data, &Bindings::default())
                },
            )
            .await
        {
            Ok(m) => m,
            Err(answer) => return answer,
        };
        if mode == FailurePolicy::Fail
            && let Some(step) = mutation.steps.iter().find(|s| {
                s.results
                    .iter()
                    .any(|r| matches!(r.status, Status::Error | Status::Fail))
            })
        {
            let name = step.policy.rsplit('/').next().unwrap_or(&step.policy);
            let rules: Vec<String> = step
                .results
                .iter()
                .filter(|r| matches!(r.status, Status::Error | Status::Fail))
                .map(|r| format!("{}: {}", r.rule, r.message))
                .collect();
            tracing::info!(resource = %resource_name, policy = %step.policy, "mutation failed; request denied");
            let message = format!(
                "mutation policy {name} error: failed to apply policy {name} rules [{}]",
                rules.join(" ")
            );
            if let (Some((memo, key)), Some(asked)) = (remembered, &asked) {
                memo.remember(key, asked, Remembered::Denied(message.clone()));
            }
            return (Answer::deny(message), "denied");
        }
        let patch = if Arc::ptr_eq(&mutation.object, &review.resource)
            || *mutation.object == *review.resource
        {
            None
        } else {
            let ops = json_patch::diff(&review.resource, &mutation.object);
            Some(serde_json::to_vec(&ops).unwrap_or_default())
        };
        if let (Some((memo, key)), Some(asked)) = (remembered, &asked) {
            memo.remember(key, asked, Remembered::Patch(patch.clone()));
        }
        let results: Vec<leash_policy::RuleResult> = mutation.results().cloned().collect();
        // A created object has no uid yet when it is mutated (kube-apiserver
        // assigns it later): there is nothing a report could be owned by,
        // so only updates' mutations are reported.
        if let Some(audit) = &self.audit
            && !results.is_empty()
            && review.sub_resource.is_empty()
            && !review.dry_run
            && mutation.object["metadata"]["uid"]
                .as_str()
                .is_some_and(|u| !u.is_empty())
        {
            let _ = audit.submit(AuditRecord {
                object: mutation.object.clone(),
                operation: review.operation,
                user,
                results,
                uid: review.uid.clone(),
                mutation: true,
            });
        }
        let result = if patch.is_some() {
            "mutated"
        } else {
            "allowed"
        };
        (
            Answer {
                patch,
                ..Answer::allow()
            },
            result,
        )
    }

    /// The validating webhook.
    async fn validate(&self, subset: Subset, review: ReviewRequest) -> (Answer, &'static str) {
        let mode = subset.mode();
        let started = tokio::time::Instant::now();
        let (snapshot, eval) = match self.prelude(mode, &review, |s, kind| s.may_match(kind)) {
            Ok(v) => v,
            Err(answer) => return answer,
        };
        let user = eval.user_info.clone();
        let engine = snapshot.engine.clone();
        let generates = self.triggers.is_some()
            && matches!(review.operation, Operation::Create | Operation::Update)
            && review.sub_resource.is_empty();
        let resource_name = kyverno_resource_name(&review);
        // Mutate-existing rules are triggered by deletions too (Kyverno's
        // `handleMutateExisting`).
        let mutates_existing = self.triggers.is_some() && review.sub_resource.is_empty();
        // Kyverno creates none for a dry run (`sideEffects: NoneOnDryRun`).
        let mutates_existing_cel = mutates_existing && !review.dry_run;
        let (mut results, generated, generated_cel, (mutate_existing, mutate_existing_cel)) =
            match self
                .evaluate(
                    mode,
                    started,
                    eval,
                    &resource_name,
                    move |prepared, data| {
                        let results = engine.evaluation(data).validate(prepared).into_vec();
                        let (generated, generated_cel) = if generates {
                            (
                                engine.generate(prepared, data, &Bindings::default()),
                                engine.generate_cel(prepared, data),
                            )
                        } else {
                            (Vec::new(), Vec::new())
                        };
                        let mutate_existing = if mutates_existing {
                            engine.mutate_existing_triggers(prepared.request())
                        } else {
                            Vec::new()
                        };
                        let mutate_existing_cel = if mutates_existing_cel {
                            engine.mutating_policy_triggers(prepared.request(), data)
                        } else {
                            Vec::new()
                        };
                        (
                            results,
                            generated,
                            generated_cel,
                            (mutate_existing, mutate_existing_cel),
                        )
                    },
                )
                .await
            {
                Ok(r) => r,
                Err(answer) => return answer,
            };
        // This webhook's policies only: a request matched by both webhooks
        // is evaluated by each, and each policy answers in one of them.
        results.retain(|r| {
            snapshot
                .policy_of(r)
                .is_some_and(|p| subset.serves(p.ignores_webhook_failures()))
        });
        let v = verdict(&snapshot, &results);
        if v.blocked {
            return (
                Answer::deny(blocked_message(&resource_name, &v.failures)),
                "denied",
            );
        }
        let mut warnings = v.warnings;
        if let Some(sink) = &self.triggers {
            // One UpdateRequest per policy, naming the rules that apply.
            let mut by_policy: std::collections::BTreeMap<(RequestKind, String), Vec<String>> =
                std::collections::BTreeMap::new();
            for (policy, g) in &generated {
                if g.result.status == Status::Pass
                    && policy.admission()
                    && subset.serves(policy.ignores_webhook_failures())
                    && snapshot.policy_of(&g.result).is_some()
                {
                    by_policy
                        .entry((RequestKind::Generate, policy.key().to_string()))
                        .or_default()
                        .push(g.result.rule.clone());
                }
            }
            for (policy, g) in &generated_cel {
                if g.result.status == Status::Pass
                    && !g.downstreams.is_empty()
                    && subset.serves(false)
                {
                    by_policy
                        .entry((RequestKind::CelGenerate, policy.key()))
                        .or_default()
                        .push(g.result.rule.clone());
                }
            }
            for (policy, rules) in mutate_existing {
                if policy.admission() && subset.serves(policy.ignores_webhook_failures()) {
                    by_policy
                        .entry((RequestKind::Mutate, policy.key().to_string()))
                        .or_default()
                        .extend(rules);
                }
            }
            for m in mutate_existing_cel {
                if subset.serves(m.ignores_failures()) {
                    let key = match m.namespace() {
                        Some(ns) => format!("{ns}/{}", m.name()),
                        None => m.name().to_string(),
                    };
                    by_policy
                        .entry((RequestKind::CelMutate, key))
                        .or_default()
                        .push(m.name().to_string());
                }
            }
            let trigger = Trigger {
                object: review.resource.clone(),
                old_object: review.old_object.clone(),
                operation: review.operation,
                user: user.clone(),
            };
            for ((kind, policy), rules) in by_policy {
                let create = sink.create(kind, &policy, rules, &trigger);
                let failed = match tokio::time::timeout_at(started + self.deadline, create).await {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(e),
                    Err(_) => Some(format!("not created within {:?}", self.deadline)),
                };
                if let Some(e) = failed {
                    tracing::warn!(resource = %resource_name, policy = %policy, error = %e, "UpdateRequest not created");
                    let what = match kind {
                        RequestKind::Mutate | RequestKind::CelMutate => "mutate",
                        RequestKind::Generate | RequestKind::CelGenerate => "generate",
                    };
                    let message = format!(
                        "{what} policy {policy}: creating the UpdateRequest for {resource_name} failed: {e}"
                    );
                    match mode {
                        FailurePolicy::Fail => {
                            return (unanswerable(mode, message), "error");
                        }
                        FailurePolicy::Ignore => {
                            warnings.push(format!("{message} (failurePolicy Ignore: allowed)"))
                        }
                    }
                }
            }
        }
        // Kyverno writes no admission report for deletions, subresources
        // or dry runs.
        if let Some(audit) = &self.audit
            && !results.is_empty()
            && review.operation != Operation::Delete
            && review.sub_resource.is_empty()
            && !review.dry_run
        {
            tracing::debug!(resource = %resource_name, uid = %review.uid, "allowed; audit record queued");
            let _ = audit.submit(AuditRecord {
                object: review.resource.clone(),
                operation: review.operation,
                user,
                results,
                uid: review.uid.clone(),
                mutation: false,
            });
        }
        (
            Answer {
                warnings,
                ..Answer::allow()
            },
            "allowed",
        )
    }
}

/// `KIND/NAMESPACE/NAME` of the evaluated resource, as Kyverno prints it
/// (from the object; the request's fields when the object lacks them).
fn kyverno_resource_name(review: &ReviewRequest) -> String {
    let m = &review.resource["metadata"];
    let kind = review.resource["kind"].as_str().unwrap_or(&review.kind);
    let ns = m["namespace"].as_str().unwrap_or(&review.namespace);
    let name = m["name"].as_str().unwrap_or(&review.name);
    format!("{kind}/{ns}/{name}")
}

/// The answer when no verdict was reached in time (invariant 4).
fn unanswerable(mode: FailurePolicy, message: String) -> Answer {
    match mode {
        FailurePolicy::Fail => Answer::deny(format!("{message} (failurePolicy Fail)")),
        FailurePolicy::Ignore => Answer {
            warnings: vec![format!("{message} (failurePolicy Ignore: allowed)")],
            ..Answer::allow()
        },
    }
}
