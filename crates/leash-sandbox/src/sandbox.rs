//! [`Sandbox`]: the server's lifecycle (start, address, faults, shutdown).
//!
//! # Invariants
//! 1. Nothing is spawned before the listener is bound and every initial object is
//!    stored; then exactly one task (the accept loop) is spawned into the sandbox's
//!    scope, and it spawns each connection into the same scope.
//! 2. [`Sandbox::shutdown`] cancels that scope and joins every task; dropping the
//!    `Sandbox` instead cancels them without waiting (the scope's `Drop`).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use leash_runtime::Scope;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::admission::Admission;
use crate::api::App;
use crate::config::{Faults, SandboxConfig};
use crate::faults::FaultInjector;
use crate::generate;
use crate::list::Snapshots;
use crate::request_log::{ApiRequest, RequestLog};
use crate::store::Store;
use crate::{Error, Result};

/// A running in-memory Kubernetes API server.
///
/// Dropping it without [`Sandbox::shutdown`] cancels its tasks without waiting for them.
#[derive(Debug)]
pub struct Sandbox {
    addr: SocketAddr,
    app: Arc<App>,
    scope: Scope,
}

impl Sandbox {
    /// Binds `config.listen`, creates the objects of `config.generate` and then
    /// `config.objects` in order, and starts serving (the accept loop and connections run in
    /// a scope owned by the returned value).
    ///
    /// # Errors
    /// [`Error::BindFailed`], [`Error::InvalidArgument`] for a bad `config.generate` or
    /// `config.webhook_services` key, or
    /// [`Error::InitialObjectRejected`] naming the first object the store refused, counted
    /// over the generated objects and then `config.objects` (nothing is served then).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is spawned before the last await.
    pub async fn start(config: SandboxConfig) -> Result<Sandbox> {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| Error::BindFailed {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| Error::BindFailed {
            addr: config.listen,
            source,
        })?;
        let mut services = std::collections::HashMap::new();
        for (key, url) in &config.webhook_services {
            match key.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    services.insert(key.clone(), url.clone());
                }
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "webhook service {key:?}: expected NAMESPACE/NAME"
                    )));
                }
            }
        }
        let store = Store::new(config.seed);
        let generated = config
            .generate
            .as_ref()
            .map(generate::generate_iter)
            .transpose()?;
        let objects = generated.into_iter().flatten().chain(config.objects);
        for (index, obj) in objects.enumerate() {
            let what = describe(&obj);
            store.load(obj).map_err(|e| Error::InitialObjectRejected {
                index,
                what,
                source: Box::new(e),
            })?;
        }
        let scope = Scope::new();
        let app = Arc::new(App {
            store,
            snapshots: Snapshots::default(),
            faults: FaultInjector::new(config.faults, config.seed),
            token: config.token,
            cancel: scope.token().clone(),
            server: addr.to_string(),
            admission: Admission::new(services, scope.token().clone()),
            requests: RequestLog::default(),
            open_watches: Arc::default(),
        });
        scope.spawn(
            "sandbox-accept",
            crate::server::accept_loop(listener, app.clone(), scope.handle()),
        );
        Ok(Sandbox { addr, app, scope })
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the fault settings; requests that start afterwards use them.
    pub fn set_faults(&self, faults: Faults) {
        self.app.faults.set(faults);
    }

    /// The current fault settings.
    pub fn faults(&self) -> Faults {
        (*self.app.faults.get()).clone()
    }

    /// How many watches the watch-cut fault ended so far
    /// ([`Faults::watch_cut_after`], [`Faults::watch_cut_rate`]).
    pub fn watches_cut(&self) -> u64 {
        self.app.faults.watches_cut()
    }

    /// A kubeconfig (YAML) whose current context points at this server, with the bearer
    /// token if one is set.
    pub fn kubeconfig_yaml(&self) -> String {
        let user = match &self.app.token {
            // A JSON string is a valid YAML double-quoted scalar.
            Some(t) => format!("\n    token: {}", Value::String(t.clone())),
            None => " {}".to_string(),
        };
        format!(
            "apiVersion: v1
kind: Config
clusters:
- name: leash-sandbox
  cluster:
    server: {url}
users:
- name: leash-sandbox
  user:{user}
contexts:
- name: leash-sandbox
  context:
    cluster: leash-sandbox
    user: leash-sandbox
    namespace: default
current-context: leash-sandbox
preferences: {{}}
",
            url = self.url()
        )
    }

    /// How many list requests so far got 410 Expired for a continue token
    /// older than the continue TTL (tests wait on it instead of on the clock).
    pub fn expired_continues(&self) -> u64 {
        self.app.snapshots.expired()
    }

    /// Every distinct request served over HTTP so far (since the last
    /// [`Sandbox::clear_requests`]), as kube-apiserver's authorizer sees it: verb, API
    /// group, resource, subresource and namespace, or a non-resource path. Requests
    /// refused for a missing token are not in it (they are never authorized);
    /// requests answered with an injected fault are. The sandbox's own calls to
    /// admission webhooks and [`Store`] access are not HTTP requests to it.
    ///
    /// At most [`MAX_DISTINCT_REQUESTS`](crate::MAX_DISTINCT_REQUESTS) are kept;
    /// [`Sandbox::requests_not_recorded`] counts the distinct ones past that.
    pub fn requests(&self) -> BTreeSet<ApiRequest> {
        self.app.requests.snapshot()
    }

    /// [`Sandbox::requests`] with how many times each was served (a
    /// request past the log's bound is not counted).
    pub fn request_counts(&self) -> std::collections::BTreeMap<ApiRequest, u64> {
        self.app.requests.counts()
    }

    /// The watches open right now, by resource as kubectl names it
    /// (`configmaps`, `deployments.apps`); a resource with none is absent.
    /// A watch counts from its first response until its body is dropped
    /// (it ended, or its client went away).
    pub fn open_watches(&self) -> std::collections::BTreeMap<String, usize> {
        self.app.open_watches.snapshot()
    }

    /// How many distinct requests were not recorded because the log was full.
    pub fn requests_not_recorded(&self) -> u64 {
        self.app.requests.not_recorded()
    }

    /// Empties the request log (for a test that looks at one client's requests only).
    pub fn clear_requests(&self) {
        self.app.requests.clear();
    }

    /// The object store, for direct access without HTTP or faults.
    pub fn store(&self) -> &Store {
        &self.app.store
    }

    /// Stops accepting, ends open watches, lets in-flight requests finish (bounded), and
    /// joins every task.
    ///
    /// # Errors
    /// [`Error::ServerFailed`] if a server task failed or panicked.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future cancels the tasks without waiting for them.
    pub async fn shutdown(self) -> Result<()> {
        self.scope
            .shutdown()
            .await
            .map_err(|e| Error::ServerFailed(e.to_string()))
    }
}

fn describe(obj: &Value) -> String {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("?");
    match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{} {ns}/{}", s("/kind"), s("/metadata/name")),
        None => format!("{} {}", s("/kind"), s("/metadata/name")),
    }
}
