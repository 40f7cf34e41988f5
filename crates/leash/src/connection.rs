//! Reaching the API server: the connection flags that every subcommand
//! talking to a cluster shares (`load`, `apply --cluster`, `serve`,
//! `context`), validated into a [`Target`], and the one function that turns
//! a target into a client ([`Target::connect`]).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use base64::Engine as _;

use crate::cli_error::{interrupted, usage};
use crate::credential::{self, Credential};

/// Bound on the `/version` request of [`Check::Version`].
pub(crate) const VERSION_CHECK: Duration = Duration::from_secs(15);

/// The connection flags of every subcommand that talks to a cluster.
///
/// # Resolution (one behaviour for every subcommand)
/// 1. `--server URL`: that API server, no kubeconfig (the flag conflicts with
///    `--kubeconfig` and `--context`). The URL must be
///    `http(s)://HOST[:PORT][/PATH]`; anything else is a usage error naming
///    `--server` (exit 2), reported before any request.
/// 2. Else `--kubeconfig PATH`: that file, its current context or
///    `--context NAME`.
/// 3. Else `--context NAME`: that context of the kubeconfig named by
///    `KUBECONFIG` (else `~/.kube/config`).
/// 4. Else the kubeconfig (`KUBECONFIG`, else `~/.kube/config`), and
///    without one the in-cluster service account (token and CA under
///    `/var/run/secrets/kubernetes.io/serviceaccount`), as kubectl does.
///
/// Then `--token` replaces the bearer token of whatever was resolved, and
/// `--insecure-skip-tls-verify` turns off verification of the server's
/// certificate. A configuration that cannot be read or used is a usage error
/// (exit 2).
///
/// The client never retries on its own: kube's retry layer is off, because
/// every subcommand retries itself (the loader's retry policy, the context
/// store's and the controllers' backoff), and two layers would multiply the
/// attempts and hide the count. Connecting (reading the configuration, the
/// optional `/version` check) is raced against Ctrl-C: an interrupt ends it
/// at once (exit 130), a kubeconfig `exec` credential plugin included:
/// leash runs the plugin itself ([`crate::credential`]; kube-rs would run
/// it synchronously inside `Client::try_from`, where no interrupt can reach
/// it) and kills it when the interrupt wins.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ConnectionArgs {
    /// Kubeconfig file [default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account].
    #[arg(long, value_name = "PATH")]
    pub(crate) kubeconfig: Option<PathBuf>,

    /// Kubeconfig context to use [default: current-context].
    #[arg(long, value_name = "NAME")]
    pub(crate) context: Option<String>,

    /// API server URL (http(s)://HOST[:PORT]), without a kubeconfig (for example a `leash sandbox`).
    #[arg(long, value_name = "URL", conflicts_with_all = ["kubeconfig", "context"])]
    pub(crate) server: Option<String>,

    /// Bearer token; overrides the kubeconfig's credentials.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) token: Option<String>,

    /// Don't verify the API server's TLS certificate.
    #[arg(long)]
    pub(crate) insecure_skip_tls_verify: bool,
}

/// Where the cluster is: the flags, validated (nothing read or sent yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// A kubeconfig (a file, or the default resolution) and its context.
    Kubeconfig {
        path: Option<PathBuf>,
        context: Option<String>,
        token: Option<String>,
        insecure: bool,
    },
    /// A server URL.
    Server {
        url: http::Uri,
        token: Option<String>,
        insecure: bool,
    },
}

/// What proves the server is there before the client is handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing: the caller's first request does (the loader's discovery).
    None,
    /// `GET /version` within [`VERSION_CHECK`]: unreachable, refused
    /// credentials and silence are usage errors (exit 2).
    Version,
}

/// A client and where it points.
#[derive(Clone)]
pub(crate) struct Connected {
    pub(crate) client: kube::Client,
    /// The server's URL, for messages.
    pub(crate) server: String,
}

impl std::fmt::Debug for Connected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connected")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl ConnectionArgs {
    /// The target the flags describe; a malformed `--server` is a usage
    /// error naming the flag.
    pub(crate) fn target(&self) -> anyhow::Result<Target> {
        let token = self.token.clone();
        let insecure = self.insecure_skip_tls_verify;
        if let Some(server) = &self.server {
            return Ok(Target::Server {
                url: parse_server(server)?,
                token,
                insecure,
            });
        }
        Ok(Target::Kubeconfig {
            path: self.kubeconfig.clone(),
            context: self.context.clone(),
            token,
            insecure,
        })
    }
}

/// `--server`: an absolute http(s) URL with a host.
fn parse_server(server: &str) -> anyhow::Result<http::Uri> {
    let url: http::Uri = server
        .parse()
        .map_err(|e| usage(format!("invalid --server URL {server:?}: {e}")))?;
    match (url.scheme_str(), url.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => Ok(url),
        _ => Err(usage(format!(
            "invalid --server URL {server:?}: expected http(s)://HOST[:PORT]"
        ))),
    }
}

impl Target {
    /// Build a client for the target (kube's retries off), check it as
    /// `check` says, all raced against `interrupted` (Ctrl-C): if that
    /// resolves first, the result is the [`interrupted`] error (exit 130).
    /// Every other error is a usage error (exit 2).
    ///
    /// # Cancel safety
    /// Cancel-safe: nothing is started that outlives the future.
    pub(crate) async fn connect(
        &self,
        check: Check,
        interrupted_by: impl Future<Output = ()>,
    ) -> anyhow::Result<Connected> {
        tokio::select! {
            connected = self.connect_uninterrupted(check) => connected,
            () = interrupted_by => Err(interrupted()),
        }
    }

    async fn connect_uninterrupted(&self, check: Check) -> anyhow::Result<Connected> {
        let mut config = self.config().await?;
        let server = config.cluster_url.to_string();
        let cannot = |e: anyhow::Error| usage(format!("cannot build a client for {server}: {e:#}"));
        let client = match credential::take_plugin(&mut config.auth_info) {
            None => client_from_config(config).map_err(cannot)?,
            Some(exec) => match credential::run(&exec).await.map_err(cannot)? {
                Credential::Certificate { cert, key } => {
                    let b64 = |pem: String| base64::engine::general_purpose::STANDARD.encode(pem);
                    config.auth_info.client_certificate_data = Some(b64(cert));
                    config.auth_info.client_key_data = Some(b64(key).into());
                    client_from_config(config).map_err(cannot)?
                }
                Credential::Token { header, expires } => {
                    config.default_retry = false;
                    kube::client::ClientBuilder::try_from(config)
                        .map_err(|e| cannot(e.into()))?
                        .with_layer(&credential::TokenLayer::new(exec, header, expires))
                        .build()
                }
            },
        };
        if check == Check::Version {
            check_version(&client, &server).await?;
        }
        Ok(Connected { client, server })
    }

    /// The client configuration (the resolution of [`ConnectionArgs`]).
    async fn config(&self) -> anyhow::Result<kube::Config> {
        let (mut config, token, insecure) = match self {
            Target::Server {
                url,
                token,
                insecure,
            } => (kube::Config::new(url.clone()), token, *insecure),
            Target::Kubeconfig {
                path,
                context,
                token,
                insecure,
            } => (
                kubeconfig(path.as_deref(), context).await?,
                token,
                *insecure,
            ),
        };
        if let Some(token) = token {
            config.auth_info.token = Some(token.clone().into());
        }
        if insecure {
            config.accept_invalid_certs = true;
        }
        Ok(config)
    }
}

/// Steps 2 to 4 of the resolution.
async fn kubeconfig(
    path: Option<&std::path::Path>,
    context: &Option<String>,
) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions {
        context: context.clone(),
        ..KubeConfigOptions::default()
    };
    let hint = "set KUBECONFIG, or use --kubeconfig PATH or --server URL";
    match path {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .map_err(|e| usage(format!("cannot read kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| usage(format!("cannot use kubeconfig {}: {e}", path.display())))
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| usage(format!("cannot load the kubeconfig ({e}); {hint}"))),
        None => kube::Config::infer().await.map_err(|e| {
            usage(format!(
                "no Kubernetes configuration: neither a kubeconfig (KUBECONFIG, ~/.kube/config) \
                 nor the in-cluster service account ({e}); {hint}"
            ))
        }),
    }
}

/// A client without kube's own retry layer (leash retries itself).
pub(crate) fn client_from_config(config: kube::Config) -> anyhow::Result<kube::Client> {
    Ok(leash_loader::client_from_config(config)?)
}

/// `GET /version`, bounded by [`VERSION_CHECK`].
async fn check_version(client: &kube::Client, server: &str) -> anyhow::Result<()> {
    match tokio::time::timeout(VERSION_CHECK, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(status))) if status.code == 401 || status.code == 403 => {
            Err(usage(format!(
                "the API server at {server} refused the credentials ({}): {}",
                status.code, status.message
            )))
        }
        Ok(Err(e)) => Err(usage(format!(
            "cannot reach the API server at {server}: {e}"
        ))),
        Err(_) => Err(usage(format!(
            "the API server at {server} did not answer /version within {VERSION_CHECK:?}"
        ))),
    }
}

/// The next Ctrl-C, for [`Target::connect`] (a failure to listen for it
/// never resolves: the signal's default action then still ends the process).
pub(crate) async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(argv: &[&str]) -> Result<Target, String> {
        crate::flag_tests::parse_settings("connect", argv, |a: ConnectionArgs| a.target())
    }

    #[test]
    fn server_urls_are_validated_naming_the_flag() {
        for bad in [
            "not a url",
            "127.0.0.1:8080",
            "ftp://h",
            "/just/a/path",
            "http://",
        ] {
            let err = target(&["--server", bad]).unwrap_err();
            assert!(err.contains("--server"), "{bad}: {err}");
        }
        let t = target(&["--server", "https://h:6443", "--token", "T"]).unwrap();
        assert_eq!(
            t,
            Target::Server {
                url: "https://h:6443".parse().unwrap(),
                token: Some("T".into()),
                insecure: false,
            }
        );
        assert!(target(&["--server", "http://h", "--kubeconfig", "k"]).is_err());
        assert!(target(&["--server", "http://h", "--context", "c"]).is_err());
    }

    #[test]
    fn kubeconfig_flags_pass_through() {
        let t = target(&[
            "--kubeconfig",
            "/k",
            "--context",
            "c",
            "--insecure-skip-tls-verify",
        ])
        .unwrap();
        assert_eq!(
            t,
            Target::Kubeconfig {
                path: Some("/k".into()),
                context: Some("c".into()),
                token: None,
                insecure: true,
            }
        );
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn kubeconfig_file_context_and_token_override() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
             clusters:\n- name: a\n  cluster: {server: 'http://127.0.0.1:1'}\n- name: b\n  cluster: {server: 'http://127.0.0.1:2'}\n\
             contexts:\n- name: a\n  context: {cluster: a, user: u}\n- name: b\n  context: {cluster: b, user: u}\n\
             users:\n- name: u\n  user: {token: from-file}\n",
        )
        .unwrap();
        let rt = rt();
        let config = |context: Option<&str>, token: Option<&str>| {
            let t = Target::Kubeconfig {
                path: Some(path.clone()),
                context: context.map(str::to_owned),
                token: token.map(str::to_owned),
                insecure: false,
            };
            rt.block_on(t.config()).unwrap()
        };
        let c = config(None, None);
        assert_eq!(c.cluster_url.to_string(), "http://127.0.0.1:1/");
        let c = config(Some("b"), Some("flag"));
        assert_eq!(c.cluster_url.to_string(), "http://127.0.0.1:2/");
        // kube writes kubeconfigs: its serializer shows the secret.
        let token = |c: &kube::Config| {
            serde_json::to_value(&c.auth_info).unwrap()["token"]
                .as_str()
                .map(str::to_owned)
        };
        assert_eq!(
            token(&c).as_deref(),
            Some("flag"),
            "--token replaces the kubeconfig's"
        );
        assert_eq!(token(&config(None, None)).as_deref(), Some("from-file"));

        let missing = Target::Kubeconfig {
            path: Some(dir.path().join("nope")),
            context: None,
            token: None,
            insecure: false,
        };
        let err = format!("{:#}", rt.block_on(missing.config()).unwrap_err());
        assert!(err.contains("nope"), "{err}");
    }

    /// A `--server` target on 127.0.0.1 whose server accepts one connection
    /// and never answers (while the returned future is polled), and a
    /// signal sent once it has accepted.
    async fn silent_server() -> (
        Target,
        tokio::sync::oneshot::Receiver<()>,
        impl std::future::Future<Output = ()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let target = ConnectionArgs {
            server: Some(url),
            ..ConnectionArgs::default()
        }
        .target()
        .unwrap();
        let (accepted_tx, accepted_rx) = tokio::sync::oneshot::channel();
        let silent = async move {
            let (socket, _) = listener.accept().await.unwrap();
            let _ = accepted_tx.send(());
            // Hold the connection open without answering.
            std::future::pending::<()>().await;
            drop(socket);
        };
        (target, accepted_rx, silent)
    }

    /// Ctrl-C while the `/version` check waits on a server that accepts and
    /// never answers: the interrupt wins at once.
    #[test]
    fn an_interrupt_ends_the_version_check() {
        let rt = rt();
        rt.block_on(async {
            let (target, accepted_rx, silent) = silent_server().await;
            let interrupt = async {
                // Interrupt once the check's request has reached the server.
                let _ = accepted_rx.await;
            };
            let connect = tokio::time::timeout(
                Duration::from_secs(10),
                target.connect(Check::Version, interrupt),
            );
            let result = tokio::select! {
                r = connect => r.expect("the interrupt ended the check"),
                () = silent => unreachable!(),
            };
            let err = result.unwrap_err();
            assert!(crate::cli_error::is_interrupted(&err), "{err:#}");
        });
    }

    /// README: `leash context` checks `GET /version` with a 15 s bound: a
    /// server that accepts the connection and never answers is a usage
    /// error saying so once the bound passes (paused time: no waiting).
    #[test]
    fn a_silent_server_fails_the_version_check_after_15_seconds() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let (target, _accepted, silent) = silent_server().await;
            let began = tokio::time::Instant::now();
            let result = tokio::select! {
                r = target.connect(Check::Version, std::future::pending::<()>()) => r,
                () = silent => unreachable!(),
            };
            let Err(err) = result else {
                panic!("the check passed against a silent server")
            };
            assert!(
                format!("{err:#}").contains("did not answer /version within 15s"),
                "{err:#}"
            );
            assert!(
                err.chain().any(|e| e.is::<crate::cli_error::UsageError>()),
                "a usage error (exit 2): {err:#}"
            );
            assert_eq!(VERSION_CHECK, Duration::from_secs(15));
            assert!(began.elapsed() >= VERSION_CHECK, "{:?}", began.elapsed());
        });
    }

    /// A kubeconfig whose user's credentials come from `sh SCRIPT`.
    fn plugin_kubeconfig(dir: &std::path::Path, server: &str, script: &str) -> Target {
        let script_path = dir.join(format!("plugin-{}.sh", script.len()));
        std::fs::write(&script_path, script).unwrap();
        let path = dir.join(format!("config-{}", script.len()));
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
                 clusters:\n- name: a\n  cluster: {{server: '{server}'}}\n\
                 contexts:\n- name: a\n  context: {{cluster: a, user: u}}\n\
                 users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n\
                 \x20     command: sh\n      args: ['{}']\n      interactiveMode: Never\n",
                script_path.display()
            ),
        )
        .unwrap();
        Target::Kubeconfig {
            path: Some(path),
            context: None,
            token: None,
            insecure: false,
        }
    }

    /// A plugin answering `token`, valid for `seconds`, counting its runs in
    /// `count`; it fails unless `KUBERNETES_EXEC_INFO` holds the request.
    fn token_plugin(count: &std::path::Path, token: &str, seconds: u32) -> String {
        format!(
            "case \"$KUBERNETES_EXEC_INFO\" in *'\"kind\":\"ExecCredential\"'*'\"interactive\":false'*) ;; *) echo \"bad exec info: $KUBERNETES_EXEC_INFO\" >&2; exit 9;; esac\n\
             echo run >> '{}'\nprintf '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\
             \"kind\":\"ExecCredential\",\"status\":{{\"token\":\"{token}\",\
             \"expirationTimestamp\":\"%s\"}}}}' \"$(date -u -d '+{seconds} seconds' +%Y-%m-%dT%H:%M:%SZ)\"\n",
            count.display()
        )
    }

    fn runs(count: &std::path::Path) -> usize {
        std::fs::read_to_string(count).map_or(0, |s| s.lines().count())
    }

    /// The plugin's token reaches the API server; the plugin is run once to
    /// connect (kube-rs would run it twice), again before a request once the
    /// token has under a minute left, and not while it holds; a refused token and
    /// a failing plugin are errors naming them.
    #[test]
    fn credential_plugin_tokens_are_sent_and_renewed_before_they_expire() {
        let rt = rt();
        rt.block_on(async {
            let sandbox = leash_sandbox::Sandbox::start(leash_sandbox::SandboxConfig {
                token: Some("t0k3n".into()),
                ..leash_sandbox::SandboxConfig::default()
            })
            .await
            .unwrap();
            let dir = tempfile::tempdir().unwrap();
            let connect = |script: String| {
                let target = plugin_kubeconfig(dir.path(), &sandbox.url(), &script);
                async move { target.connect(Check::Version, std::future::pending()).await }
            };

            let short = dir.path().join("short");
            // Under a minute left: renewed before every request, the
            // connection's /version check included.
            let c = connect(token_plugin(&short, "t0k3n", 30)).await.unwrap();
            assert_eq!(runs(&short), 2);
            c.client.apiserver_version().await.unwrap();
            assert_eq!(runs(&short), 3, "a token with 30 s left is renewed");

            let long = dir.path().join("long");
            let c = connect(token_plugin(&long, "t0k3n", 3600)).await.unwrap();
            c.client.apiserver_version().await.unwrap();
            c.client.apiserver_version().await.unwrap();
            assert_eq!(runs(&long), 1, "a token valid for an hour is kept");

            let wrong = dir.path().join("wrong");
            let err = connect(token_plugin(&wrong, "nope", 3600))
                .await
                .unwrap_err();
            assert!(
                format!("{err:#}").contains("refused the credentials (401)"),
                "{err:#}"
            );

            let err = connect("exit 3\n".into()).await.unwrap_err();
            let err = format!("{err:#}");
            assert!(
                err.contains("credential plugin \"sh\" failed") && err.contains("3"),
                "{err}"
            );
            sandbox.shutdown().await.unwrap();
        });
    }

    /// Ctrl-C while the credential plugin runs (seed: the signal used to
    /// wait for the plugin): connecting ends at once and the plugin is killed.
    #[test]
    fn an_interrupt_ends_a_credential_plugin() {
        let rt = rt();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let pid_file = dir.path().join("pid");
            let script = format!(
                "echo $$ > '{}.tmp'\nmv '{0}.tmp' '{0}'\nexec sleep 30\n",
                pid_file.display()
            );
            let target = plugin_kubeconfig(dir.path(), "http://127.0.0.1:1", &script);
            let started = async {
                // Interrupt once the plugin runs.
                while !pid_file.exists() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            let begun = std::time::Instant::now();
            let result = tokio::time::timeout(
                Duration::from_secs(10),
                target.connect(Check::Version, started),
            )
            .await
            .expect("the interrupt ended the plugin's run");
            let err = result.unwrap_err();
            assert!(crate::cli_error::is_interrupted(&err), "{err:#}");
            assert!(begun.elapsed() < Duration::from_secs(10));
            let pid = std::fs::read_to_string(&pid_file).unwrap();
            let stat = format!("/proc/{}/stat", pid.trim());
            // Killed: gone, or a zombie until tokio reaps it.
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let state = std::fs::read_to_string(&stat).ok().and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .and_then(|r| r.split_whitespace().next())
                        .map(str::to_owned)
                });
                if state.as_deref().is_none_or(|s| s == "Z" || s == "X") {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "plugin {pid} still runs: {state:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
}
