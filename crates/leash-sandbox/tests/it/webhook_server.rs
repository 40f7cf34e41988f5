//! A small admission webhook server for the tests: HTTPS (rustls with ring) with
//! a fresh rcgen certificate for `127.0.0.1` and `localhost`, bound to
//! 127.0.0.1 port 0, answering every AdmissionReview with what its `decide`
//! function says, and recording every request it got. Its tasks live in a
//! `leash_runtime::Scope` that the server owns (dropping it cancels them).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use leash_runtime::Scope;
use rustls::ServerConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What the server answers one request with.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// `response` fields (the uid is filled in), after `delay`.
    Review { response: Value, delay: Duration },
    /// A body that is not an AdmissionReview.
    Garbage,
}

impl Answer {
    pub(crate) fn allow() -> Answer {
        Answer::Review {
            response: json!({"allowed": true}),
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn deny(code: u16, message: &str) -> Answer {
        Answer::Review {
            response: json!({"allowed": false, "status": {"code": code, "message": message}}),
            delay: Duration::ZERO,
        }
    }

    /// Allows with a JSON Patch.
    pub(crate) fn patch(ops: Value) -> Answer {
        let patch = base64::engine::general_purpose::STANDARD.encode(ops.to_string());
        Answer::Review {
            response: json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
            delay: Duration::ZERO,
        }
    }

    pub(crate) fn after(self, d: Duration) -> Answer {
        match self {
            Answer::Review { response, .. } => Answer::Review { response, delay: d },
            garbage => garbage,
        }
    }
}

type Decide = dyn Fn(&Value) -> Answer + Send + Sync;

/// A running webhook server.
pub(crate) struct WebhookServer {
    pub(crate) addr: SocketAddr,
    /// `caBundle` for it: base64 of its certificate's PEM.
    pub(crate) ca_bundle: String,
    requests: Arc<Mutex<Vec<Value>>>,
    /// TLS connections accepted.
    connections: Arc<std::sync::atomic::AtomicUsize>,
    certificate: (String, CertificateDer<'static>, Vec<u8>),
    _scope: Scope,
}

/// A certificate for 127.0.0.1 and localhost: (PEM, DER, PKCS#8 key DER).
pub(crate) fn certificate() -> (String, CertificateDer<'static>, Vec<u8>) {
    certificate_for(&["127.0.0.1", "localhost"])
}

/// A self-signed certificate for `names`: (PEM, DER, PKCS#8 key DER).
pub(crate) fn certificate_for(names: &[&str]) -> (String, CertificateDer<'static>, Vec<u8>) {
    let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let certified = rcgen::generate_simple_self_signed(names).expect("certificate");
    (
        certified.cert.pem(),
        certified.cert.der().clone(),
        certified.signing_key.serialize_der(),
    )
}

pub(crate) fn ca_bundle_of(pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem)
}

impl WebhookServer {
    /// Starts a server answering with `decide(request)` (the AdmissionReview's `request`).
    pub(crate) async fn start(decide: impl Fn(&Value) -> Answer + Send + Sync + 'static) -> Self {
        Self::start_for(&["127.0.0.1", "localhost"], decide).await
    }

    /// [`WebhookServer::start`] with a certificate for `names`.
    pub(crate) async fn start_for(
        names: &[&str],
        decide: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Self::serve(listener, certificate_for(names), decide)
    }

    /// Stops this server and starts another on its address with its
    /// certificate (a webhook restarted in place).
    pub(crate) async fn restart(
        self,
        decide: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let (addr, certificate) = (self.addr, self.certificate.clone());
        // Joined, so the old listener is closed before the port is bound again.
        let _ = self._scope.shutdown().await;
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket.bind(addr).expect("bind the same port");
        let listener = socket.listen(64).expect("listen");
        Self::serve(listener, certificate, decide)
    }

    fn serve(
        listener: TcpListener,
        certificate: (String, CertificateDer<'static>, Vec<u8>),
        decide: impl Fn(&Value) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let (pem, der, key) = certificate.clone();
        let config =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .expect("protocol versions")
                .with_no_client_auth()
                .with_single_cert(
                    vec![der],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
                )
                .expect("server certificate");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let addr = listener.local_addr().expect("address");
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let accepted = connections.clone();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let decide: Arc<Decide> = Arc::new(decide);
        let scope = Scope::new();
        let handle = scope.handle();
        let recorded = requests.clone();
        scope.spawn("webhook-accept", async move {
            let token = handle.token().clone();
            loop {
                let stream = tokio::select! {
                    _ = token.cancelled() => break,
                    r = listener.accept() => match r {
                        Ok((s, _)) => s,
                        Err(_) => continue,
                    },
                };
                accepted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let (acceptor, decide, recorded) =
                    (acceptor.clone(), decide.clone(), recorded.clone());
                let token = token.clone();
                handle.spawn("webhook-connection", async move {
                    // A client that fails the handshake (a test's bad caBundle) is fine.
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return Ok::<(), Infallible>(());
                    };
                    let conn_token = token.clone();
                    let service =
                        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                            let (decide, recorded, token) =
                                (decide.clone(), recorded.clone(), token.clone());
                            async move {
                                let path = req.uri().to_string();
                                let body = req.into_body().collect().await.map(|b| b.to_bytes());
                                let review: Value = body
                                    .ok()
                                    .and_then(|b| serde_json::from_slice(&b).ok())
                                    .unwrap_or(Value::Null);
                                let mut request = review["request"].clone();
                                request["_path"] = json!(path);
                                recorded.lock().unwrap().push(request.clone());
                                let answer = decide(&request);
                                let body = match answer {
                                    Answer::Garbage => {
                                        Bytes::from_static(b"<html>not a review</html>")
                                    }
                                    Answer::Review {
                                        mut response,
                                        delay,
                                    } => {
                                        if !delay.is_zero()
                                            && token
                                                .run_until_cancelled(tokio::time::sleep(delay))
                                                .await
                                                .is_none()
                                        {
                                            return Ok::<_, Infallible>(hyper::Response::new(
                                                Full::new(Bytes::new()),
                                            ));
                                        }
                                        response["uid"] = request["uid"].clone();
                                        Bytes::from(
                                            json!({"apiVersion": "admission.k8s.io/v1",
                                               "kind": "AdmissionReview", "response": response})
                                            .to_string(),
                                        )
                                    }
                                };
                                Ok::<_, Infallible>(hyper::Response::new(Full::new(body)))
                            }
                        });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service);
                    let _ = conn_token.run_until_cancelled(conn).await;
                    Ok(())
                });
            }
            Ok::<(), Infallible>(())
        });
        WebhookServer {
            addr,
            ca_bundle: ca_bundle_of(&pem),
            requests,
            connections,
            certificate,
            _scope: scope,
        }
    }

    /// TCP connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// The `request`s received so far (each with `_path`: the request target).
    pub(crate) fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// A webhook (one entry of `webhooks`) calling `url`, for pods' CREATE and UPDATE.
pub(crate) fn hook(name: &str, url: &str, ca_bundle: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    })
}

/// A configuration of `kind` (`ValidatingWebhookConfiguration` or
/// `MutatingWebhookConfiguration`) named `name` holding `hooks`.
pub(crate) fn configuration(kind: &str, name: &str, hooks: Vec<Value>) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
        "metadata": {"name": name}, "webhooks": hooks,
    })
}

/// A pod named `name` in `default` with `labels`.
pub(crate) fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    })
}
