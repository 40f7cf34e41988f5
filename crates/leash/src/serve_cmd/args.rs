//! `leash serve`'s flags, validated into settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use leash_controller::leader::LeaseSettings;
use leash_controller::{AggregateSettings, ReportsSettings, ScanSettings};

use crate::cli_error::usage;
use crate::connection::{ConnectionArgs, Target};
use crate::names::{is_dns_label, is_dns_subdomain};

/// Demo data of `--sandbox` without a value.
pub(crate) const DEFAULT_SERVE_SANDBOX: &str = "pods=200,deployments.apps=20";

#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  leash serve --sandbox --sandbox-kubeconfig /tmp/leash.kubeconfig   # demo: sandbox, CRDs, example policies
  leash serve --kubeconfig ~/.kube/config --leader-elect --health 127.0.0.1:8080 --metrics 127.0.0.1:8000")]
pub(crate) struct Args {
    /// Components to run, comma-separated: reports (background scan, policy
    /// reports), admission (the validating webhook), background (generate
    /// rules: UpdateRequests and synchronized downstreams).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "reports,admission,background"
    )]
    components: Vec<String>,
    /// Address of the admission webhook's HTTPS server.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9443")]
    admission_listen: SocketAddr,
    /// PEM certificate (chain) of the webhook server (default: a serving
    /// certificate generated at start, signed by the CA of --ca-secret).
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// Without --tls-cert: the kubernetes.io/tls Secret, in
    /// --config-namespace, holding the webhook CA that every replica and
    /// every restart shares (created at first start). Its certificate is
    /// the webhook configuration's caBundle.
    #[arg(long, value_name = "NAME", default_value = "leash-webhook-ca")]
    ca_secret: String,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// URL the validating webhooks point the API server at, ending in
    /// /validate (default: https://ADMISSION-LISTEN/validate); the
    /// mutating webhooks are at its sibling /mutate.
    #[arg(long, value_name = "URL")]
    webhook_url: Option<String>,
    /// Point the webhook configuration at a Service instead: NAMESPACE/NAME[:PORT].
    #[arg(long, value_name = "NS/NAME[:PORT]", conflicts_with = "webhook_url")]
    webhook_service: Option<String>,
    /// Namespaces whose requests never go to the webhooks, comma-separated
    /// (Kyverno's default: kube-system). leash's own namespaces
    /// (--config-namespace, --lease-namespace, the --webhook-service's)
    /// are always left out, so a webhook that is down cannot keep leash
    /// from starting again.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "kube-system"
    )]
    webhook_exclude_namespaces: Vec<String>,
    /// timeoutSeconds of the webhooks (1 to 30).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    webhook_timeout: u8,
    /// Delete the ValidatingWebhookConfiguration on clean shutdown.
    #[arg(long)]
    cleanup_webhooks: bool,
    /// Write an admission EphemeralReport for every admitted request
    /// (Kyverno's --admissionReports); with false, only the background scan
    /// reports.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    admission_reports: bool,
    /// Namespace of Kyverno's ConfigMap.
    #[arg(long, value_name = "NS", default_value = "kyverno")]
    config_namespace: String,
    /// Name of Kyverno's ConfigMap (resourceFilters, excludeGroups, ...).
    #[arg(long, value_name = "NAME", default_value = "kyverno")]
    config_map: String,
    /// Full rescan period of the background scan.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    background_scan_interval: Duration,
    /// How often results of deleted policies and reports of deleted resources are removed.
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = humantime::parse_duration)]
    report_cleanup_interval: Duration,
    /// Ephemeral reports that may exist at once; past it, new results wait.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    max_ephemeral_reports: usize,
    /// Concurrent evaluating workers of the background scan (default: 2 per core).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Run the reports and background (generate) components only while
    /// holding a coordination.k8s.io Lease (admission runs on every replica).
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "leash-reports",
        requires = "leader_elect"
    )]
    lease_name: String,
    /// The Lease's namespace.
    #[arg(
        long,
        value_name = "NS",
        default_value = "kyverno",
        requires = "leader_elect"
    )]
    lease_namespace: String,
    /// This replica's holder identity (default: the host name and process id).
    #[arg(long, value_name = "ID", requires = "leader_elect")]
    lease_identity: Option<String>,
    /// Serve /healthz and /readyz on ADDR.
    #[arg(long, value_name = "ADDR")]
    health: Option<SocketAddr>,
    /// Serve Prometheus metrics on ADDR (/metrics).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// How long shutdown may take before leash exits with an error (the
    /// audit queue drains for 4/5 of it, then reports what it could not write).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    shutdown_timeout: Duration,
    /// The bound on one image's registry round trips (`imageRegistry`
    /// context entries, CEL `image.GetMetadata`): past it the rule errors,
    /// naming the image and the registry.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    registry_timeout: Duration,
    /// Reach every image registry over plain HTTP (Kyverno's flag; without
    /// it only localhost and loopback registries are).
    #[arg(long)]
    allow_insecure_registry: bool,
    #[command(flatten)]
    trust_root: crate::trust_root::TrustRootArgs,
    /// Secrets of the config namespace (`kubernetes.io/dockerconfigjson`)
    /// whose registry credentials leash reads images with (Kyverno's
    /// --imagePullSecrets). Read at start and again every
    /// --image-pull-secrets-refresh, so a rotated Secret is used; one that
    /// cannot be read is logged and left out (its registries are then read
    /// anonymously, and a registry that refuses is the rule's error).
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    image_pull_secrets: Vec<String>,
    /// How often the --image-pull-secrets are read again.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    image_pull_secrets_refresh: Duration,
    #[command(flatten)]
    connection: ConnectionArgs,
    /// Start an in-process sandbox API server with demo data, leash's CRDs
    /// and the example policies of deploy/examples/policies, and serve it.
    #[arg(long, value_name = "KIND=COUNT,...", num_args = 0..=1, require_equals = true,
          default_missing_value = DEFAULT_SERVE_SANDBOX,
          conflicts_with_all = ["server", "kubeconfig", "context", "token"])]
    sandbox: Option<String>,
    /// With --sandbox: write a kubeconfig for it to PATH (for kubectl).
    #[arg(long, value_name = "PATH", requires = "sandbox")]
    sandbox_kubeconfig: Option<PathBuf>,
}

/// Which components run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Components {
    pub(crate) reports: bool,
    pub(crate) admission: bool,
    pub(crate) background: bool,
}

impl Components {
    pub(crate) fn describe(&self) -> String {
        let mut parts = vec!["policy and config sources"];
        if self.reports {
            parts.push("reports");
        }
        if self.admission {
            parts.push("admission");
        }
        if self.background {
            parts.push("background (generate)");
        }
        parts.join(", ")
    }
}

#[derive(Debug)]
pub(crate) struct Settings {
    /// The cluster (unused with `--sandbox`, which conflicts with the
    /// connection flags: `serve` starts its own).
    pub(crate) connection: Target,
    pub(crate) components: Components,
    pub(crate) config_namespace: String,
    pub(crate) config_map: String,
    pub(crate) reports: ReportsSettings,
    pub(crate) max_ephemeral_reports: usize,
    pub(crate) lease: Option<LeaseSettings>,
    pub(crate) admission: Option<leash_webhook::Settings>,
    /// Where the shared webhook CA is kept (namespace, name); None with
    /// --tls-cert.
    pub(crate) ca_secret: Option<(String, String)>,
    pub(crate) health: Option<SocketAddr>,
    pub(crate) metrics_addr: Option<SocketAddr>,
    pub(crate) shutdown_timeout: Duration,
    /// How image registries are read.
    pub(crate) registry: leash_images::RegistrySettings,
    /// `--image-pull-secrets`.
    pub(crate) image_pull_secrets: Vec<String>,
    /// `--image-pull-secrets-refresh`.
    pub(crate) image_pull_secrets_refresh: Duration,
    pub(crate) sandbox: Option<String>,
    pub(crate) sandbox_kubeconfig: Option<PathBuf>,
}

impl Args {
    pub(crate) fn into_settings(self) -> anyhow::Result<Settings> {
        let mut components = Components::default();
        for c in &self.components {
            match c.trim() {
                "reports" => components.reports = true,
                "admission" => components.admission = true,
                "background" => components.background = true,
                other => {
                    return Err(usage(format!(
                        "--components: unknown component {other:?}; available: reports, admission, background"
                    )));
                }
            }
        }
        if self.background_scan_interval.is_zero() {
            return Err(usage("--background-scan-interval must be positive"));
        }
        if self.report_cleanup_interval.is_zero() {
            return Err(usage("--report-cleanup-interval must be positive"));
        }
        if self.registry_timeout.is_zero() {
            return Err(usage("--registry-timeout must be positive"));
        }
        if self.image_pull_secrets_refresh.is_zero() {
            return Err(usage("--image-pull-secrets-refresh must be positive"));
        }
        if self.max_ephemeral_reports == 0 {
            return Err(usage("--max-ephemeral-reports must be at least 1"));
        }
        let workers = match self.workers {
            Some(0) => return Err(usage("--workers must be at least 1")),
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(2, |n| n.get()) * 2,
        };
        if !(1..=30).contains(&self.webhook_timeout) {
            return Err(usage("--webhook-timeout must be 1 to 30 seconds"));
        }
        if let Some(url) = &self.webhook_url
            && !url.trim_end_matches('/').ends_with("/validate")
        {
            return Err(usage(format!(
                "--webhook-url {url:?} must end in /validate: the validating webhooks are called at /validate/fail and /validate/ignore, the mutating ones at the same prefix's /mutate/fail and /mutate/ignore"
            )));
        }
        let service = self
            .webhook_service
            .as_deref()
            .map(parse_service)
            .transpose()?;
        let mut excluded_namespaces: Vec<String> = Vec::new();
        for ns in self
            .webhook_exclude_namespaces
            .iter()
            .map(|n| n.trim())
            .chain([
                self.config_namespace.as_str(),
                self.lease_namespace.as_str(),
            ])
            .chain(service.as_ref().map(|s| s.namespace.as_str()))
        {
            if ns.is_empty() {
                continue;
            }
            if !is_dns_label(ns) {
                return Err(usage(format!(
                    "--webhook-exclude-namespaces: {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
                )));
            }
            if !excluded_namespaces.iter().any(|n| n == ns) {
                excluded_namespaces.push(ns.to_string());
            }
        }
        if self.tls_cert.is_none() && !is_dns_subdomain(&self.ca_secret) {
            return Err(usage(format!(
                "--ca-secret: {:?} is not a Secret name",
                self.ca_secret
            )));
        }
        let ca_secret = self
            .tls_cert
            .is_none()
            .then(|| (self.config_namespace.clone(), self.ca_secret.clone()));
        let admission = components.admission.then(|| leash_webhook::Settings {
            listen: self.admission_listen,
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            webhook_url: self.webhook_url.clone(),
            excluded_namespaces,
            service,
            timeout_seconds: self.webhook_timeout,
            cleanup_webhooks: self.cleanup_webhooks,
            reports: self.admission_reports,
            shutdown_timeout: self.shutdown_timeout,
            ..leash_webhook::Settings::default()
        });
        let lease = self.leader_elect.then(|| {
            let identity = self.lease_identity.clone().unwrap_or_else(default_identity);
            LeaseSettings::new(&self.lease_name, &self.lease_namespace, &identity)
        });
        let connection = self.connection.target()?;
        Ok(Settings {
            connection,
            components,
            config_namespace: self.config_namespace,
            config_map: self.config_map,
            reports: ReportsSettings {
                scan: ScanSettings {
                    workers,
                    interval: self.background_scan_interval,
                    images: None,
                },
                aggregate: AggregateSettings {
                    workers: (workers * 2).clamp(2, 16),
                    cleanup_interval: self.report_cleanup_interval,
                },
                max_ephemeral_reports: self.max_ephemeral_reports,
            },
            max_ephemeral_reports: self.max_ephemeral_reports,
            lease,
            admission,
            ca_secret,
            health: self.health,
            metrics_addr: self.metrics,
            shutdown_timeout: self.shutdown_timeout,
            registry: leash_images::RegistrySettings {
                insecure: self.allow_insecure_registry,
                timeout: self.registry_timeout,
                // TUF's metadata is several round trips: more than one
                // image's bound.
                trust_root: self
                    .trust_root
                    .trust_root(self.registry_timeout.max(crate::trust_root::TIMEOUT))?,
                ..leash_images::RegistrySettings::default()
            },
            image_pull_secrets: self.image_pull_secrets,
            image_pull_secrets_refresh: self.image_pull_secrets_refresh,
            sandbox: self.sandbox,
            sandbox_kubeconfig: self.sandbox_kubeconfig,
        })
    }
}

fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "leash".into());
    format!("{host}_{}", std::process::id())
}

/// `NS/NAME[:PORT]` of --webhook-service.
fn parse_service(s: &str) -> anyhow::Result<leash_webhook::ServiceRef> {
    let bad = || {
        usage(format!(
            "--webhook-service {s:?}: expected NAMESPACE/NAME[:PORT]"
        ))
    };
    let (ns, rest) = s.split_once('/').ok_or_else(bad)?;
    let (name, port) = match rest.split_once(':') {
        Some((n, p)) => (n, Some(p.parse::<i32>().map_err(|_| bad())?)),
        None => (rest, None),
    };
    if ns.is_empty() || name.is_empty() {
        return Err(bad());
    }
    Ok(leash_webhook::ServiceRef {
        namespace: ns.into(),
        name: name.into(),
        port,
        path: "/validate".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(argv: &[&str]) -> Result<Settings, String> {
        crate::flag_tests::parse_settings("serve", argv, Args::into_settings)
    }

    /// `--tuf-root` and `--tuf-mirror` go together; a root file that
    /// cannot be read, or is not JSON, and a mirror that is neither a URL
    /// nor a directory are refused naming the flag.
    #[test]
    fn trust_root_flags_are_checked() {
        assert!(settings(&[]).unwrap().registry.trust_root.is_none());
        let err = settings(&["--tuf-root", "/nonexistent/root.json"]).unwrap_err();
        assert!(err.contains("--tuf-mirror"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root.json");
        let missing = root.display().to_string();
        let err =
            settings(&["--tuf-root", &missing, "--tuf-mirror", "http://127.0.0.1:1"]).unwrap_err();
        assert!(err.contains(&format!("--tuf-root {missing}")), "{err}");
        std::fs::write(&root, "not json").unwrap();
        let err =
            settings(&["--tuf-root", &missing, "--tuf-mirror", "http://127.0.0.1:1"]).unwrap_err();
        assert!(err.contains("not a TUF root.json"), "{err}");
        std::fs::write(&root, "{}").unwrap();
        let err = settings(&["--tuf-root", &missing, "--tuf-mirror", "no/such/dir"]).unwrap_err();
        assert!(err.contains("--tuf-mirror no/such/dir"), "{err}");
        let dir_text = dir.path().display().to_string();
        let s = settings(&["--tuf-root", &missing, "--tuf-mirror", &dir_text]).unwrap();
        let trust_root = s.registry.trust_root.expect("a trust root");
        assert!(
            trust_root.mirror().starts_with("file://"),
            "{}",
            trust_root.mirror()
        );
        assert_eq!(trust_root.initialisations(), 0, "nothing is read at start");
    }

    /// The defaults the README states for `leash serve`.
    #[test]
    fn defaults_are_the_readmes() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.shutdown_timeout, Duration::from_secs(10));
        assert_eq!(
            (s.config_namespace.as_str(), s.config_map.as_str()),
            ("kyverno", "kyverno")
        );
        assert_eq!(s.reports.scan.interval, Duration::from_secs(3600));
        assert_eq!(s.max_ephemeral_reports, 10_000);
        let admission = s.admission.expect("admission runs by default");
        assert_eq!(
            admission.listen,
            "127.0.0.1:9443".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(admission.timeout_seconds, 10);
        assert!(
            admission.reports,
            "admission reports are written by default"
        );
        assert!(s.lease.is_none(), "no leader election unless asked");
        assert_eq!(
            s.ca_secret,
            Some(("kyverno".to_string(), "leash-webhook-ca".to_string()))
        );
    }

    /// The webhooks leave out Kyverno's default (kube-system) and leash's
    /// own namespaces, whatever the flag says; a bad name is refused
    /// naming the flag; --tls-cert turns the shared CA off.
    #[test]
    fn webhook_exclusions_and_the_ca_secret() {
        let s = settings(&[
            "--leader-elect",
            "--lease-namespace",
            "leases",
            "--webhook-service",
            "web/leash:443",
        ])
        .unwrap();
        assert_eq!(
            s.admission.unwrap().excluded_namespaces,
            ["kube-system", "kyverno", "leases", "web"]
        );
        let s = settings(&["--webhook-exclude-namespaces", "infra,kyverno"]).unwrap();
        assert_eq!(
            s.admission.unwrap().excluded_namespaces,
            ["infra", "kyverno"]
        );
        let e = settings(&["--webhook-exclude-namespaces", "Infra"]).unwrap_err();
        assert!(
            e.contains("--webhook-exclude-namespaces") && e.contains("Infra"),
            "{e}"
        );
        let e = settings(&["--ca-secret", "a/b"]).unwrap_err();
        assert!(e.contains("--ca-secret"), "{e}");
        let s = settings(&["--tls-cert", "c.pem", "--tls-key", "k.pem"]).unwrap();
        assert_eq!(s.ca_secret, None);
    }

    /// `--admission-reports` takes Kyverno's `--admissionReports` values;
    /// anything but a boolean is refused naming the flag.
    #[test]
    fn admission_reports_can_be_turned_off() {
        for (argv, want) in [
            (&["--admission-reports=false"][..], false),
            (&["--admission-reports=true"], true),
            (&["--admission-reports"], true),
        ] {
            let a = settings(argv).unwrap().admission.unwrap();
            assert_eq!(a.reports, want, "{argv:?}");
        }
        let err = settings(&["--admission-reports=no"]).expect_err("not a boolean");
        assert!(err.contains("--admission-reports"), "{err}");
    }

    /// README, `leash serve` admission: `--webhook-url`, `--webhook-service
    /// NS/NAME[:PORT]`, `--webhook-timeout` and `--cleanup-webhooks` reach
    /// the webhook's settings; a malformed service is refused naming it.
    #[test]
    fn webhook_flags_reach_the_admission_settings() {
        let s = settings(&[
            "--webhook-url",
            "https://leash.example:8443/validate",
            "--webhook-timeout",
            "7",
            "--cleanup-webhooks",
        ])
        .unwrap();
        let a = s.admission.unwrap();
        assert_eq!(
            a.webhook_url.as_deref(),
            Some("https://leash.example:8443/validate")
        );
        assert_eq!(a.timeout_seconds, 7);
        assert!(a.cleanup_webhooks);
        assert!(a.service.is_none());
        let defaults = settings(&[]).unwrap().admission.unwrap();
        assert!(!defaults.cleanup_webhooks && defaults.webhook_url.is_none());
        // The mutating webhooks are at the URL's sibling /mutate, so the
        // URL must end in /validate.
        let err = settings(&["--webhook-url", "https://leash.example:8443/hooks"])
            .expect_err("no /validate");
        assert!(
            err.contains("--webhook-url") && err.contains("must end in /validate"),
            "{err}"
        );

        for (flag, port) in [
            ("kyverno/leash-svc:9443", Some(9443)),
            ("kyverno/leash-svc", None),
        ] {
            let a = settings(&["--webhook-service", flag])
                .unwrap()
                .admission
                .unwrap();
            let service = a.service.expect("a service reference");
            assert_eq!(
                (
                    service.namespace.as_str(),
                    service.name.as_str(),
                    service.port
                ),
                ("kyverno", "leash-svc", port)
            );
            assert_eq!(service.path, "/validate");
        }
        for bad in [
            "leash-svc",
            "/leash-svc",
            "kyverno/",
            "kyverno/leash-svc:https",
        ] {
            let err = settings(&["--webhook-service", bad]).expect_err(bad);
            assert!(
                err.contains("--webhook-service") && err.contains(bad),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        for (argv, flag) in [
            (&["--webhook-timeout", "31"][..], "--webhook-timeout"),
            (
                &["--background-scan-interval", "0s"],
                "--background-scan-interval",
            ),
            (&["--max-ephemeral-reports", "0"], "--max-ephemeral-reports"),
            (&["--components", "reports,nope"], "nope"),
        ] {
            let err = settings(argv)
                .err()
                .unwrap_or_else(|| panic!("{argv:?} accepted"));
            assert!(err.contains(flag), "{argv:?}: {err}");
        }
    }
}
