//! Kubeconfig `exec` credential plugins (client-go's credential plugin
//! protocol), run by leash instead of kube-rs so that a signal can end them.
//!
//! kube-rs runs the plugin with `std::process::Command::output()` inside
//! `Client::try_from` (twice: once for the TLS identity, once for the auth
//! layer), and again on the blocking pool when a token expires: no
//! `select!` against Ctrl-C can preempt it, so an interrupt waited for the
//! plugin. Here the plugin is a `tokio::process` child with `kill_on_drop`:
//! the future that runs it owns it, so when that future is dropped (an
//! interrupt won the race, the client was dropped at shutdown) the plugin
//! is killed. Only the plugin itself: a process it started and left behind
//! is its own (it stays in leash's process group, so a terminal's Ctrl-C
//! reaches it as it does with kubectl; a group of its own would take an
//! interactive plugin off the terminal).
//!
//! As in client-go: the plugin's stderr is leash's, its stdin too unless
//! `interactiveMode: Never`; `KUBERNETES_EXEC_INFO` carries the
//! `ExecCredential` request (and the cluster with `provideClusterInfo`); a
//! bearer token with an `expirationTimestamp` is fetched again when it has
//! less than a minute left, before the request that needs it. A failed
//! renewal fails that request with the plugin's error and the next request
//! tries again. client-go also runs the plugin again after a 401; leash does
//! not (the request fails with the 401).

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use http::{HeaderValue, Request, header::AUTHORIZATION};
use kube::config::{AuthInfo, ExecConfig, ExecInteractiveMode};

/// How long before its expiry a token is renewed (client-go and kube-rs use
/// the same minute).
const RENEW_BEFORE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// What a plugin answered.
#[derive(Debug)]
pub(crate) enum Credential {
    /// A bearer token (the `Authorization` header), and until when it holds.
    Token {
        header: HeaderValue,
        expires: Option<DateTime<Utc>>,
    },
    /// A client certificate and its key, PEM.
    Certificate { cert: String, key: String },
}

/// The `exec` plugin kube-rs would use for `auth`, taken out of it (kube-rs
/// must not run it): none when an auth provider, a username and password,
/// a token or a token file comes first, as in kube-rs's order.
pub(crate) fn take_plugin(auth: &mut AuthInfo) -> Option<ExecConfig> {
    let other = auth.auth_provider.is_some()
        || (auth.username.is_some() && auth.password.is_some())
        || auth.token.is_some()
        || auth.token_file.is_some();
    if other { None } else { auth.exec.take() }
}

/// Run the plugin once and read its answer. Dropping the future kills the
/// plugin.
pub(crate) async fn run(exec: &ExecConfig) -> anyhow::Result<Credential> {
    let program = exec
        .command
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| anyhow!("the kubeconfig's exec credential plugin has no command"))?;
    let interactive = exec.interactive_mode != Some(ExecInteractiveMode::Never);
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(exec.args.iter().flatten())
        .env(
            "KUBERNETES_EXEC_INFO",
            exec_info(exec, interactive)?.to_string(),
        )
        .stdin(if interactive {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    for env in exec.env.iter().flatten() {
        if let (Some(name), Some(value)) = (env.get("name"), env.get("value")) {
            cmd.env(name, value);
        }
    }
    for name in exec.drop_env.iter().flatten() {
        cmd.env_remove(name);
    }
    // Not `cmd.output()`: tokio's `output` pipes stderr whatever was set,
    // and the plugin's messages (a login prompt, its errors) would be
    // captured and lost instead of reaching the user.
    let child = cmd.spawn().map_err(|e| {
        let hint = match (&exec.install_hint, e.kind()) {
            (Some(hint), std::io::ErrorKind::NotFound) => format!("\n{}", hint.trim_end()),
            _ => String::new(),
        };
        anyhow!("cannot run the credential plugin {program:?}: {e}{hint}")
    })?;
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| anyhow!("the credential plugin {program:?}: {e}"))?;
    if !out.status.success() {
        bail!(
            "the credential plugin {program:?} failed ({}); its messages, if any, are above",
            out.status
        );
    }
    parse(&out.stdout).with_context(|| format!("the credential plugin {program:?}"))
}

/// `KUBERNETES_EXEC_INFO`: the `ExecCredential` request.
fn exec_info(exec: &ExecConfig, interactive: bool) -> anyhow::Result<serde_json::Value> {
    let mut spec = serde_json::json!({ "interactive": interactive });
    if exec.provide_cluster_info {
        let cluster = exec.cluster.as_ref().ok_or_else(|| {
            anyhow!(
                "the exec credential plugin asks for the cluster's information, and none was found"
            )
        })?;
        let mut c = serde_json::Map::new();
        let mut put = |k: &str, v: Option<serde_json::Value>| {
            if let Some(v) = v {
                c.insert(k.into(), v);
            }
        };
        put("server", cluster.server.clone().map(Into::into));
        put(
            "tls-server-name",
            cluster.tls_server_name.clone().map(Into::into),
        );
        put(
            "insecure-skip-tls-verify",
            cluster.insecure_skip_tls_verify.map(Into::into),
        );
        put(
            "certificate-authority-data",
            cluster
                .certificate_authority_data
                .as_ref()
                .map(|d| base64::engine::general_purpose::STANDARD.encode(d).into()),
        );
        put("proxy-url", cluster.proxy_url.clone().map(Into::into));
        put("config", cluster.config.clone());
        spec["cluster"] = c.into();
    }
    Ok(serde_json::json!({
        "apiVersion": exec.api_version.as_deref().unwrap_or("client.authentication.k8s.io/v1"),
        "kind": "ExecCredential",
        "spec": spec,
    }))
}

#[derive(serde::Deserialize)]
struct ExecCredential {
    status: Option<Status>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    token: Option<String>,
    expiration_timestamp: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
}

/// The plugin's stdout: an `ExecCredential` in JSON (or YAML, which
/// client-go's decoder also accepts).
fn parse(stdout: &[u8]) -> anyhow::Result<Credential> {
    let answer: ExecCredential = serde_saphyr::from_slice(stdout)
        .map_err(|e| anyhow!("its output is not an ExecCredential: {e}"))?;
    let status = answer
        .status
        .ok_or_else(|| anyhow!("its ExecCredential has no status"))?;
    let expires = status
        .expiration_timestamp
        .as_deref()
        .map(|t| {
            DateTime::parse_from_rfc3339(t)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    anyhow!("status.expirationTimestamp {t:?} is not an RFC 3339 time: {e}")
                })
        })
        .transpose()?;
    match (
        status.token,
        status.client_certificate_data,
        status.client_key_data,
    ) {
        (_, Some(cert), Some(key)) => Ok(Credential::Certificate { cert, key }),
        (_, Some(_), None) | (_, None, Some(_)) => {
            bail!("its status has only one of clientCertificateData and clientKeyData")
        }
        (Some(token), None, None) => {
            let mut header = HeaderValue::try_from(format!("Bearer {token}"))
                .map_err(|_| anyhow!("status.token is not a valid header value"))?;
            header.set_sensitive(true);
            Ok(Credential::Token { header, expires })
        }
        (None, None, None) => bail!("its status has neither a token nor a client certificate"),
    }
}

/// A layer giving every request the plugin's bearer token, renewed by the
/// plugin when it is about to expire.
#[derive(Clone)]
pub(crate) struct TokenLayer {
    exec: Arc<ExecConfig>,
    header: HeaderValue,
    expires: Option<DateTime<Utc>>,
}

impl TokenLayer {
    /// The plugin `exec`, which already answered `header` valid until `expires`.
    pub(crate) fn new(
        exec: ExecConfig,
        header: HeaderValue,
        expires: Option<DateTime<Utc>>,
    ) -> Self {
        Self {
            exec: Arc::new(exec),
            header,
            expires,
        }
    }
}

impl<S> tower::Layer<S> for TokenLayer {
    type Service = TokenService<S>;

    fn layer(&self, inner: S) -> TokenService<S> {
        TokenService {
            inner,
            exec: self.exec.clone(),
            header: self.header.clone(),
            expires: self.expires,
            renewing: None,
            failed: None,
        }
    }
}

type Renewal = Pin<Box<dyn Future<Output = anyhow::Result<Credential>> + Send>>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// See [`TokenLayer`]. The renewal runs in `poll_ready`, so the service
/// needs neither a lock nor a clone of the inner service: kube's client
/// drives it from one buffer worker, and the requests queue behind a
/// renewal as they would behind kube-rs's lock.
pub(crate) struct TokenService<S> {
    inner: S,
    exec: Arc<ExecConfig>,
    header: HeaderValue,
    expires: Option<DateTime<Utc>>,
    /// The plugin, running (dropped with the service: the plugin is killed).
    renewing: Option<Renewal>,
    /// Why the last renewal failed: the next request gets the error.
    failed: Option<String>,
}

impl<S> TokenService<S> {
    fn expiring(&self) -> bool {
        self.expires.is_some_and(|e| Utc::now() + RENEW_BEFORE >= e)
    }
}

impl<S, B> tower::Service<Request<B>> for TokenService<S>
where
    S: tower::Service<Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.failed.is_none() && self.expiring() {
            let renewal = self.renewing.get_or_insert_with(|| {
                let exec = self.exec.clone();
                Box::pin(async move { run(&exec).await })
            });
            let answer = ready!(renewal.as_mut().poll(cx));
            self.renewing = None;
            match answer {
                Ok(Credential::Token { header, expires }) => {
                    self.header = header;
                    self.expires = expires;
                }
                Ok(Credential::Certificate { .. }) => {
                    self.failed = Some(
                        "the credential plugin answered a client certificate when renewing its token"
                            .into(),
                    );
                }
                Err(e) => self.failed = Some(format!("{e:#}")),
            }
        }
        // An error here would end kube's buffer worker, and with it the
        // client: a failed renewal fails the request in `call` instead.
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if let Some(e) = self.failed.take() {
            return Box::pin(std::future::ready(Err(e.into())));
        }
        req.headers_mut().insert(AUTHORIZATION, self.header.clone());
        let response = self.inner.call(req);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_as_client_go_reads_them() {
        let token = parse(
            br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
                 "status":{"token":"abc","expirationTimestamp":"2030-01-02T03:04:05Z"}}"#,
        )
        .unwrap();
        let Credential::Token { header, expires } = token else {
            panic!("{token:?}")
        };
        assert_eq!(header.to_str().unwrap(), "Bearer abc");
        assert!(header.is_sensitive());
        assert_eq!(expires.unwrap().to_rfc3339(), "2030-01-02T03:04:05+00:00");

        let yaml = parse(
            b"kind: ExecCredential\nstatus:\n  clientCertificateData: C\n  clientKeyData: K\n",
        )
        .unwrap();
        assert!(matches!(yaml, Credential::Certificate { cert, key } if cert == "C" && key == "K"));

        for (out, names) in [
            (&b"not: [json"[..], "not an ExecCredential"),
            (b"{\"kind\":\"ExecCredential\"}", "no status"),
            (
                b"{\"status\":{}}",
                "neither a token nor a client certificate",
            ),
            (b"{\"status\":{\"clientKeyData\":\"K\"}}", "only one of"),
            (
                b"{\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"tomorrow\"}}",
                "expirationTimestamp",
            ),
            (
                b"{\"status\":{\"token\":\"a\\nb\"}}",
                "not a valid header value",
            ),
        ] {
            let err = format!("{:#}", parse(out).unwrap_err());
            assert!(err.contains(names), "{err}");
        }
    }

    #[test]
    fn the_plugin_in_effect_is_the_one_kube_would_use() {
        let exec = ExecConfig {
            command: Some("x".into()),
            ..ExecConfig::default()
        };
        let mut auth = AuthInfo {
            exec: Some(exec.clone()),
            ..AuthInfo::default()
        };
        assert!(take_plugin(&mut auth).is_some());
        assert!(auth.exec.is_none(), "kube-rs must not run it");
        let mut with_token = AuthInfo {
            exec: Some(exec),
            token: Some("t".to_string().into()),
            ..AuthInfo::default()
        };
        assert!(take_plugin(&mut with_token).is_none());
        assert!(with_token.exec.is_some());
    }
}
