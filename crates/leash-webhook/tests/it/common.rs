//! Shared test helpers: policies from YAML, a server in a scope, an HTTPS client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use leash_policy::{ClusterData, Engine, KyvernoConfig, NoClusterData};
use leash_runtime::{BoxError, CancellationToken, Scope};
use leash_webhook::{
    AdmissionServer, AuditRecord, AuditSettings, DrainSummary, LossReason, Recorder, ReportSink,
    Settings, TriggerSink, audit_channel,
};
use prometheus_client::registry::Registry;
use rustls_pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::sync::watch;

pub fn engine(docs: &[&str]) -> Engine {
    let mut e = Engine::new();
    for d in docs {
        let v: Value = serde_saphyr::from_str(d).expect("yaml");
        assert!(e.add_json(&v).expect("compiles"), "not a policy: {d}");
    }
    e
}

pub const REQUIRE_TEAM: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: require-team}
spec:
  validationFailureAction: Enforce
  rules:
  - name: check-team
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "label team is required"
      pattern: {metadata: {labels: {team: "?*"}}}
"#;

pub const NO_LATEST: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: no-latest}
spec:
  validationFailureAction: Audit
  rules:
  - name: no-latest-tag
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "latest tag is not allowed"
      pattern: {spec: {containers: [{image: "!*:latest"}]}}
"#;

/// Enforce, but admission disabled: must never be evaluated by the webhook.
pub const BACKGROUND_ONLY: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: background-only}
spec:
  validationFailureAction: Enforce
  admission: false
  rules:
  - name: never
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate:
      message: "label never is required"
      pattern: {metadata: {labels: {never: "?*"}}}
"#;

pub fn vpol(name: &str, action: &str, forbidden_name: &str) -> String {
    format!(
        r#"
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {{name: {name}}}
spec:
  validationActions: [{action}]
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  validations:
  - expression: "object.metadata.name != '{forbidden_name}'"
    message: "name {forbidden_name} is reserved"
"#
    )
}

pub fn pod(name: &str, ns: &str, team: Option<&str>, image: &str) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": image}]}
    });
    if let Some(t) = team {
        p["metadata"]["labels"] = json!({"team": t});
    }
    p
}

pub fn review(uid: &str, op: &str, object: &Value) -> Value {
    let mut req = json!({
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": object["kind"]},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": object["metadata"]["namespace"],
        "name": object["metadata"]["name"],
        "operation": op,
        "userInfo": {"username": "alice", "groups": ["devs", "system:authenticated"]},
    });
    if op == "DELETE" {
        req["oldObject"] = object.clone();
    } else {
        req["object"] = object.clone();
    }
    if op == "UPDATE" {
        req["oldObject"] = object.clone();
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// A sink that keeps what it wrote and what it was told was lost; fails
/// writes at random with `fail_per_mille` and takes `delay_ms` per write.
/// A write counts as written only when its future completes.
#[derive(Debug, Default)]
pub struct SinkState {
    pub written: Mutex<Vec<Arc<AuditRecord>>>,
    pub lost: Mutex<Vec<(Arc<AuditRecord>, LossReason)>>,
    pub fail_per_mille: AtomicU64,
    pub delay_ms: AtomicU64,
    pub attempts: AtomicU64,
}

#[derive(Debug, Default, Clone)]
pub struct TestSink(pub Arc<SinkState>);

impl std::ops::Deref for TestSink {
    type Target = SinkState;
    fn deref(&self) -> &SinkState {
        &self.0
    }
}

impl SinkState {
    pub fn written_uids(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .written
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.uid.clone())
            .collect();
        v.sort();
        v
    }
    pub fn lost_uids(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .lost
            .lock()
            .unwrap()
            .iter()
            .map(|(r, _)| r.uid.clone())
            .collect();
        v.sort();
        v
    }
}

impl ReportSink for TestSink {
    fn write(&self, record: Arc<AuditRecord>) -> BoxFuture<'static, Result<(), BoxError>> {
        // Relaxed: test knobs and a statistic.
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let fail = fastrand::u64(0..1000) < self.fail_per_mille.load(Ordering::Relaxed);
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::Relaxed));
        let state = self.0.clone();
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if fail {
                return Err("injected report write failure".into());
            }
            state.written.lock().unwrap().push(record);
            Ok(())
        })
    }

    fn lost(&self, record: &AuditRecord, reason: LossReason) {
        self.lost
            .lock()
            .unwrap()
            .push((Arc::new(record.clone()), reason));
    }
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub client: Client,
    pub sink: TestSink,
    pub policies: watch::Sender<Arc<Engine>>,
    pub config: watch::Sender<Arc<KyvernoConfig>>,
    pub recorder: Recorder,
    pub registry: Registry,
    token: CancellationToken,
    scope: Scope,
    server: tokio::task::JoinHandle<leash_webhook::Result<()>>,
    writer: tokio::task::JoinHandle<DrainSummary>,
}

pub struct Options {
    pub settings: Settings,
    pub cluster: Arc<dyn ClusterData>,
    pub config: KyvernoConfig,
    /// Where generate rules' UpdateRequests go (none: not created).
    pub triggers: Option<Arc<dyn TriggerSink>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            settings: Settings {
                listen: "127.0.0.1:0".parse().unwrap(),
                shutdown_timeout: Duration::from_secs(5),
                audit: AuditSettings {
                    initial_backoff: Duration::from_millis(2),
                    max_backoff: Duration::from_millis(20),
                    ..AuditSettings::default()
                },
                ..Settings::default()
            },
            cluster: Arc::new(NoClusterData),
            config: KyvernoConfig::default(),
            triggers: None,
        }
    }
}

impl TestServer {
    pub async fn start(engine: Engine) -> TestServer {
        TestServer::start_with(engine, Options::default()).await
    }

    pub async fn start_with(engine: Engine, opts: Options) -> TestServer {
        let mut registry = Registry::default();
        let sink = TestSink::default();
        let (queue, writer) = audit_channel(
            opts.settings.audit.clone(),
            opts.settings.shutdown_timeout,
            Arc::new(sink.clone()),
            &mut registry,
        );
        let (ptx, prx) = watch::channel(Arc::new(engine));
        let (ctx, crx) = watch::channel(Arc::new(opts.config));
        let recorder = Recorder::new(&mut registry);
        let mut server = AdmissionServer::new(
            opts.settings,
            prx,
            crx,
            opts.cluster,
            queue,
            recorder.clone(),
            &mut registry,
        )
        .expect("server builds");
        if let Some(triggers) = opts.triggers {
            server = server.with_triggers(triggers);
        }
        let addr = server.local_addr();
        let client = Client::new(addr, server.ca_pem());
        let scope = Scope::new();
        let token = CancellationToken::new();
        let t = token.clone();
        let server = scope.spawn_with_output(async move { server.run(t).await });
        let t = token.clone();
        let writer = scope.spawn_with_output(async move { writer.run(t).await });
        TestServer {
            addr,
            client,
            sink,
            policies: ptx,
            config: ctx,
            recorder,
            registry,
            token,
            scope,
            server,
            writer,
        }
    }

    /// Cancels, joins, and returns the audit writer's summary.
    pub async fn stop(self) -> DrainSummary {
        self.token.cancel();
        self.server.await.expect("no panic").expect("server ok");
        let summary = self.writer.await.expect("no panic");
        self.scope.shutdown().await.expect("scope ok");
        summary
    }

    pub async fn review(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self
            .client
            .post(path, serde_json::to_vec(review).unwrap())
            .await
            .expect("request");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        serde_json::from_slice(&body).expect("json answer")
    }
}

/// A one-request-per-connection HTTPS client trusting the server's CA.
#[derive(Clone)]
pub struct Client {
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
}

impl Client {
    pub fn new(addr: SocketAddr, ca_pem: &str) -> Client {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        Client {
            addr,
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), BoxError> {
        let tcp = tokio::net::TcpStream::connect(self.addr).await?;
        let name = rustls_pki_types::ServerName::IpAddress(self.addr.ip().into());
        let tls = self.connector.connect(name, tcp).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(body)))?;
        let exchange = async move {
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await?.to_bytes().to_vec();
            Ok::<_, BoxError>((status, body))
        };
        let (r, _) = tokio::join!(exchange, conn);
        r
    }

    pub async fn post(&self, path: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>), BoxError> {
        self.request("POST", path, body).await
    }
}

pub fn response(answer: &Value) -> &Value {
    &answer["response"]
}

type Sender = hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>;

/// `n` keep-alive connections shared by any number of concurrent callers
/// (each request takes a free connection; the drivers run in `scope`).
pub struct Pool {
    client: Client,
    free: Mutex<Vec<Sender>>,
    slots: tokio::sync::Semaphore,
    scope: Scope,
}

impl Pool {
    pub async fn new(client: &Client, n: usize) -> Arc<Pool> {
        let scope = Scope::new();
        let mut free = Vec::new();
        for _ in 0..n {
            free.push(client.connect(&scope).await);
        }
        Arc::new(Pool {
            client: client.clone(),
            free: Mutex::new(free),
            slots: tokio::sync::Semaphore::new(n),
            scope,
        })
    }

    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let _slot = self.slots.acquire().await.unwrap();
        let mut sender = self
            .free
            .lock()
            .unwrap()
            .pop()
            .expect("a free connection per slot");
        if sender.ready().await.is_err() {
            sender = self.client.connect(&self.scope).await;
        }
        let req = http::Request::builder()
            .method("POST")
            .uri(path)
            .header("host", self.client.addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(body)))
            .unwrap();
        let resp = sender.send_request(req).await.expect("answered");
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec();
        self.free.lock().unwrap().push(sender);
        (status, body)
    }
}

impl Client {
    async fn connect(&self, scope: &Scope) -> Sender {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let name = rustls_pki_types::ServerName::IpAddress(self.addr.ip().into());
        let tls = self.connector.connect(name, tcp).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        scope.spawn("test-client-connection", conn);
        sender
    }
}
