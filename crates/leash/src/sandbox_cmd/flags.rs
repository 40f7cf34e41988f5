//! Flags of `leash sandbox` and their validation.
//!
//! Every flag with a syntax is checked by its clap value parser, so a bad
//! value is reported by clap, naming the flag and the value, with exit
//! code 2, before anything starts. Checks that involve several flags run in
//! [`Args::into_settings`] and report [`cli_error::usage`] errors (also
//! exit 2).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use leash_sandbox::generate::{self, GenerateSpec};
use leash_sandbox::{Faults, WatchCut};

use crate::cli_error;

/// Namespaces generated objects are spread over unless `--namespaces` says.
pub(crate) const DEFAULT_NAMESPACES: usize = 4;

/// Flags of `leash sandbox`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Generated kinds (--generate, kubectl names): namespaces, nodes, pods, configmaps, secrets, \
services, serviceaccounts, events, deployments.apps, statefulsets.apps, daemonsets.apps, \
replicasets.apps, jobs.batch, cronjobs.batch (and their singular and short names: po, cm, svc, \
sa, ev, deploy, sts, ds, rs, cj, ...).

Admission: writes of any kind (except the webhook configurations themselves) call the webhooks \
of the stored admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration and \
MutatingWebhookConfiguration objects, as kube-apiserver does: https only, the server verified \
against clientConfig.caBundle (never the system roots), timeoutSeconds and failurePolicy \
honoured. A clientConfig.service is reached at the URL --webhook-service maps it to, its \
certificate verified for NAME.NAMESPACE.svc; several comma-separated URLs are the \
Service's endpoints, called in turn.

When ready, the first line on stdout is the server's base URL. SIGINT or SIGTERM stops it.

Example:
  leash sandbox --generate pods=1000,deployments.apps=50 --crds 10:100 --kubeconfig /tmp/sandbox.kubeconfig")]
pub(crate) struct Args {
    /// Address to listen on (an IP address and port; port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = parse_listen)]
    listen: SocketAddr,

    /// Require `Authorization: Bearer TOKEN` on every request (otherwise 401).
    #[arg(long, value_name = "TOKEN", value_parser = parse_token)]
    token: Option<String>,

    /// Write a kubeconfig pointing at the sandbox (with the token, if any) to PATH.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,

    /// Create synthetic objects of built-in kinds: KIND=COUNT[,KIND=COUNT...],
    /// for example pods=1000,deployments.apps=50.
    #[arg(long, value_name = "KIND=COUNT,...", value_parser = parse_generate)]
    generate: Option<KindCounts>,

    /// Namespaces (ns-0000, ns-0001, ...) to spread generated objects over
    /// [default: 4 with --generate or --crds].
    #[arg(long, value_name = "N")]
    namespaces: Option<usize>,

    /// Register K custom resource kinds (Widget0000... in group
    /// example.leash.dev, version v1, namespaced) with M objects each.
    #[arg(long, value_name = "K:M", value_parser = parse_crds)]
    crds: Option<(usize, usize)>,

    /// Load YAML/JSON manifests from a file or directory (repeatable;
    /// multi-document files and v1 Lists; a directory's *.yaml, *.yml and
    /// *.json files, not recursively).
    #[arg(long, value_name = "PATH")]
    data: Vec<PathBuf>,

    /// Delay every request by D (for example 20ms).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    latency: Option<Duration>,

    /// Add a uniformly random extra delay in 0..=D to every request.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    latency_jitter: Option<Duration>,

    /// Probability (0 to 1) that a request fails with 500 InternalError.
    #[arg(long, value_name = "P", allow_negative_numbers = true, value_parser = parse_probability)]
    fail_rate: Option<f64>,

    /// Every request whose path starts with PREFIX fails with 500 InternalError (an API group that is down, say /apis/kyverno.io/). Repeatable.
    #[arg(long, value_name = "PREFIX", value_parser = parse_path_prefix)]
    fail_path: Vec<String>,

    /// Probability (0 to 1) that a request is throttled: 429 with Retry-After, as API Priority and Fairness does.
    #[arg(long, value_name = "P", allow_negative_numbers = true, value_parser = parse_probability)]
    throttle_rate: Option<f64>,

    /// The Retry-After seconds of throttled responses (0 to 3600; API Priority and Fairness sends 1; 0 leaves the wait to the client's backoff).
    #[arg(long, value_name = "SECS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=3600))]
    retry_after: u64,

    /// Probability (0 to 1) that the connection is dropped in the middle of a response.
    #[arg(long, value_name = "P", allow_negative_numbers = true, value_parser = parse_probability)]
    reset_rate: Option<f64>,

    /// Probability (0 to 1) that a response's body is cut to its first half but ends cleanly (its Content-Length says so): a complete answer whose JSON is not.
    #[arg(long, value_name = "P", allow_negative_numbers = true, value_parser = parse_probability)]
    truncate_rate: Option<f64>,

    /// How long a list's continue tokens stay valid, from its first page (then 410 Expired).
    #[arg(long, value_name = "D", default_value = "5m", value_parser = parse_positive_duration)]
    continue_ttl: Duration,

    /// Apply the failure rates to discovery and /version too (they always get the latency).
    #[arg(long)]
    fail_discovery: bool,

    /// End every watch after a random time from 0 to D, drawn per watch (for example 30s).
    #[arg(long, value_name = "D", value_parser = parse_positive_duration)]
    watch_cut_after: Option<Duration>,

    /// Probability (0 to 1), for each event a watch sends, that the watch ends right after it.
    #[arg(long, value_name = "P", allow_negative_numbers = true, value_parser = parse_probability)]
    watch_cut_rate: Option<f64>,

    /// How a cut watch ends: clean (the response ends, as at kube-apiserver's watch
    /// timeout) or reset (the connection is dropped).
    #[arg(long, value_name = "HOW", default_value = "clean", value_parser = parse_watch_cut)]
    watch_cut: WatchCut,

    /// Seed of every random choice (generated objects and faults), for reproducible runs.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: u64,

    /// Reach the service NAMESPACE/NAME that webhook configurations reference
    /// (clientConfig.service) at URL, an https://HOST:PORT base URL (repeatable).
    #[arg(long, value_name = "NS/NAME=URL", value_parser = parse_webhook_service)]
    webhook_service: Vec<(String, String)>,
}

/// Validated settings of one `leash sandbox` run.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) listen: SocketAddr,
    pub(crate) token: Option<String>,
    pub(crate) kubeconfig: Option<PathBuf>,
    /// What to generate, if anything was asked for.
    pub(crate) generate: Option<GenerateSpec>,
    pub(crate) data: Vec<PathBuf>,
    pub(crate) faults: Faults,
    pub(crate) seed: u64,
    /// `namespace/name` → base URL of webhook services.
    pub(crate) webhook_services: BTreeMap<String, String>,
}

impl Args {
    /// Check what the value parsers could not (combinations of flags).
    pub(crate) fn into_settings(self) -> anyhow::Result<Settings> {
        let generating =
            self.generate.is_some() || self.crds.is_some() || self.namespaces.is_some();
        if self.namespaces == Some(0) && self.crds.is_none() && self.generate.is_none() {
            return Err(cli_error::usage(
                "--namespaces 0 generates nothing: give --generate or --crds, or a positive count",
            ));
        }
        let generate = generating.then(|| GenerateSpec {
            kinds: self.generate.map(|counts| counts.0).unwrap_or_default(),
            namespaces: self.namespaces.unwrap_or(DEFAULT_NAMESPACES),
            crds: self.crds,
            seed: self.seed,
        });
        let faults = Faults {
            latency: self.latency.unwrap_or_default(),
            latency_jitter: self.latency_jitter.unwrap_or_default(),
            fail_rate: self.fail_rate.unwrap_or(0.0),
            fail_paths: self.fail_path,
            throttle_rate: self.throttle_rate.unwrap_or(0.0),
            retry_after_secs: self.retry_after,
            reset_rate: self.reset_rate.unwrap_or(0.0),
            truncate_rate: self.truncate_rate.unwrap_or(0.0),
            continue_ttl: self.continue_ttl,
            fail_discovery: self.fail_discovery,
            watch_cut_after: self.watch_cut_after,
            watch_cut_rate: self.watch_cut_rate.unwrap_or(0.0),
            watch_cut: self.watch_cut,
        };
        Ok(Settings {
            listen: self.listen,
            token: self.token,
            kubeconfig: self.kubeconfig,
            generate,
            data: self.data,
            faults,
            seed: self.seed,
            webhook_services: self.webhook_service.into_iter().collect(),
        })
    }
}

/// `--fail-path`: a URL path, from its leading `/`.
fn parse_path_prefix(s: &str) -> Result<String, String> {
    if s.starts_with('/') {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not a URL path: it starts with / (for example /apis/kyverno.io/)"
        ))
    }
}

/// `--listen`: an IP address with a port (`127.0.0.1:0`, `[::1]:8080`).
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse::<SocketAddr>().map_err(|_| {
        format!("{s:?} is not an IP address with a port (for example 127.0.0.1:0 or [::1]:6443)")
    })
}

/// `--webhook-service`: `NAMESPACE/NAME=https://HOST:PORT[/PATH][,URL...]`.
fn parse_webhook_service(s: &str) -> Result<(String, String), String> {
    let usage = "expected NAMESPACE/NAME=https://HOST:PORT, for example kyverno/kyverno-svc=https://127.0.0.1:9443";
    let (service, url) = s.split_once('=').ok_or_else(|| format!("{s:?}: {usage}"))?;
    let valid_service = service
        .split_once('/')
        .is_some_and(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'));
    if !valid_service {
        return Err(format!("{service:?} is not NAMESPACE/NAME: {usage}"));
    }
    for url in url.split(',') {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL ({e}): {usage}"))?;
        if uri.scheme_str() != Some("https") || uri.host().is_none_or(str::is_empty) {
            return Err(format!(
                "{url:?}: webhooks are called over https only: {usage}"
            ));
        }
    }
    Ok((service.to_owned(), url.to_owned()))
}

/// `--token`: printable ASCII without spaces, as an HTTP header value allows.
fn parse_token(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the token is empty".to_owned());
    }
    if !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token must be printable ASCII without spaces".to_owned());
    }
    Ok(s.to_owned())
}

/// The kinds and counts of `--generate` (a newtype: clap would take a bare
/// `Vec` for a repeated flag).
#[derive(Clone, Debug)]
struct KindCounts(Vec<(String, usize)>);

fn parse_generate(s: &str) -> Result<KindCounts, String> {
    generate::parse_generate(s)
        .map(KindCounts)
        .map_err(|err| strip_invalid_argument(&err.to_string()))
}

fn parse_crds(s: &str) -> Result<(usize, usize), String> {
    generate::parse_crds(s).map_err(|err| strip_invalid_argument(&err.to_string()))
}

/// clap already says "invalid value": drop the library's own prefix.
fn strip_invalid_argument(message: &str) -> String {
    message
        .strip_prefix("invalid argument: ")
        .unwrap_or(message)
        .to_owned()
}

/// A humantime duration: `20ms`, `2s`, `5m`, `1s 500ms`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s)
        .map_err(|err| format!("{s:?} is not a duration ({err}); use for example 20ms, 2s or 5m"))
}

fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let duration = parse_duration(s)?;
    if duration.is_zero() {
        return Err(format!("{s:?} is zero; it must be positive"));
    }
    Ok(duration)
}

/// `--watch-cut`: `clean` or `reset`.
fn parse_watch_cut(s: &str) -> Result<WatchCut, String> {
    match s {
        "clean" => Ok(WatchCut::Clean),
        "reset" => Ok(WatchCut::Reset),
        _ => Err(format!("{s:?} is neither clean nor reset")),
    }
}

/// A probability: a number in `0..=1`.
fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number; expected a probability from 0 to 1"))?;
    if !(0.0..=1.0).contains(&p) {
        return Err(format!(
            "{s:?} is not a probability: it must be from 0 to 1"
        ));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(argv: &[&str]) -> Result<Settings, String> {
        crate::flag_tests::parse_settings("sandbox", argv, Args::into_settings)
    }

    #[test]
    fn defaults_listen_on_loopback_without_faults_or_data() {
        let settings = parse(&[]).unwrap();
        assert_eq!(settings.listen, "127.0.0.1:0".parse().unwrap());
        assert!(settings.generate.is_none());
        assert_eq!(settings.faults.fail_rate, 0.0);
        assert_eq!(settings.faults.retry_after_secs, 1);
        assert_eq!(settings.faults.continue_ttl, Duration::from_secs(300));
    }

    #[test]
    fn generate_defaults_to_four_namespaces() {
        let settings = parse(&[
            "--generate",
            "po=5,deploy=2",
            "--crds",
            "2:3",
            "--seed",
            "9",
        ])
        .unwrap();
        let spec = settings.generate.unwrap();
        assert_eq!(
            spec.kinds,
            [("pods".to_owned(), 5), ("deployments.apps".to_owned(), 2)]
        );
        assert_eq!(spec.namespaces, DEFAULT_NAMESPACES);
        assert_eq!(spec.crds, Some((2, 3)));
        assert_eq!(spec.seed, 9);
        let settings = parse(&["--crds", "1:1", "--namespaces", "7"]).unwrap();
        assert_eq!(settings.generate.unwrap().namespaces, 7);
    }

    #[test]
    fn fault_flags_fill_faults() {
        let settings = parse(&[
            "--latency",
            "20ms",
            "--latency-jitter",
            "5ms",
            "--fail-rate",
            "0.1",
            "--fail-path",
            "/apis/kyverno.io/",
            "--fail-path",
            "/api/v1/secrets",
            "--throttle-rate",
            "0.2",
            "--retry-after",
            "3",
            "--reset-rate",
            "0.05",
            "--truncate-rate",
            "0.03",
            "--continue-ttl",
            "2s",
            "--fail-discovery",
        ])
        .unwrap();
        let f = settings.faults;
        assert_eq!(
            (f.latency, f.latency_jitter),
            (Duration::from_millis(20), Duration::from_millis(5))
        );
        assert_eq!(
            (f.fail_rate, f.throttle_rate, f.reset_rate, f.truncate_rate),
            (0.1, 0.2, 0.05, 0.03)
        );
        assert_eq!(
            f.fail_paths,
            [
                "/apis/kyverno.io/".to_string(),
                "/api/v1/secrets".to_string()
            ]
        );
        assert_eq!(f.retry_after_secs, 3);
        assert_eq!(f.continue_ttl, Duration::from_secs(2));
        assert!(f.fail_discovery);
        assert_eq!(
            (f.watch_cut_after, f.watch_cut_rate, f.watch_cut),
            (None, 0.0, WatchCut::Clean)
        );
    }

    #[test]
    fn watch_cut_flags_fill_faults() {
        let settings = parse(&[
            "--watch-cut-after",
            "30s",
            "--watch-cut-rate",
            "0.01",
            "--watch-cut",
            "reset",
        ])
        .unwrap();
        let f = settings.faults;
        assert_eq!(
            (f.watch_cut_after, f.watch_cut_rate, f.watch_cut),
            (Some(Duration::from_secs(30)), 0.01, WatchCut::Reset)
        );
    }

    #[test]
    fn webhook_services_map_namespace_and_name_to_urls() {
        let settings = parse(&[
            "--webhook-service",
            "kyverno/kyverno-svc=https://127.0.0.1:9443",
            "--webhook-service",
            "a/b=https://localhost:1/base",
        ])
        .unwrap();
        assert_eq!(
            settings.webhook_services,
            BTreeMap::from([
                ("a/b".to_string(), "https://localhost:1/base".to_string()),
                (
                    "kyverno/kyverno-svc".to_string(),
                    "https://127.0.0.1:9443".to_string()
                ),
            ])
        );
    }

    #[test]
    fn bad_values_are_refused_naming_flag_and_value() {
        for (argv, needles) in [
            (
                &["--listen", "localhost"][..],
                &["--listen", "\"localhost\""][..],
            ),
            (
                &["--listen", "127.0.0.1"],
                &["--listen", "not an IP address with a port"],
            ),
            (
                &["--fail-rate", "1.5"],
                &["--fail-rate", "\"1.5\"", "from 0 to 1"],
            ),
            (&["--throttle-rate", "-0.1"], &["--throttle-rate", "-0.1"]),
            (
                &["--fail-path", "apis/kyverno.io"],
                &["--fail-path", "\"apis/kyverno.io\"", "starts with /"],
            ),
            (&["--reset-rate", "often"], &["--reset-rate", "\"often\""]),
            (&["--latency", "20"], &["--latency", "\"20\""]),
            (&["--continue-ttl", "0s"], &["--continue-ttl", "zero"]),
            (
                &["--generate", "gizmos=3"],
                &["--generate", "unknown kind \"gizmos\"", "pods (pod, po)"],
            ),
            (&["--generate", "pods"], &["--generate", "malformed"]),
            (&["--crds", "3"], &["--crds", "\"3\""]),
            (&["--retry-after", "3601"], &["--retry-after", "3601"]),
            (&["--watch-cut-after", "0s"], &["--watch-cut-after", "zero"]),
            (
                &["--watch-cut-rate", "2"],
                &["--watch-cut-rate", "from 0 to 1"],
            ),
            (
                &["--watch-cut", "sometimes"],
                &["--watch-cut", "neither clean nor reset"],
            ),
            (&["--token", ""], &["--token", "empty"]),
            (&["--namespaces", "0"], &["--namespaces 0"]),
            (
                &["--webhook-service", "kyverno/svc"],
                &["--webhook-service", "NAMESPACE/NAME=https://HOST:PORT"],
            ),
            (
                &["--webhook-service", "svc=https://127.0.0.1:9443"],
                &["--webhook-service", "\"svc\" is not NAMESPACE/NAME"],
            ),
            (
                &["--webhook-service", "ns/svc=http://127.0.0.1:9443"],
                &["--webhook-service", "https only"],
            ),
        ] {
            let message = parse(argv).expect_err(&format!("{argv:?} must be refused"));
            for needle in needles {
                assert!(
                    message.contains(needle),
                    "{argv:?}: {message:?} lacks {needle:?}"
                );
            }
        }
    }
}
