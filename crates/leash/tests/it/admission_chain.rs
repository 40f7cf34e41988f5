//! `leash sandbox --webhook-service`: a webhook configuration's
//! `clientConfig.service` is called at the URL the flag maps it to, and kubectl
//! prints kube-apiserver's text when that call fails; the flag's bad values are
//! refused with exit 2. (The HTTPS paths of the admission chain are tested in
//! leash-sandbox, against a test webhook server.)

use std::process::Command;

use crate::support::kubectl_installed;
use crate::support::{SandboxProcess, leash, stderr, stdout};

/// `caBundle` of a throwaway self-signed certificate for `down.hooks.svc`
/// (base64 of its PEM; no key is kept anywhere): valid, for a webhook that is
/// never reached.
const CA_BUNDLE: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJtekNDQVVLZ0F3SUJBZ0lVYnZqZ2NqMlAxcnFxSFR2M3UzOStQclZBQkxjd0NnWUlLb1pJemowRUF3SXcKRlRFVE1CRUdBMVVFQXd3S2JHVmhjMmd0ZEdWemREQWdGdzB5TmpFeU1ERXhNRE00TURGYUdBOHlNVEkyTVRFdwpOekV3TXpnd01Wb3dGVEVUTUJFR0ExVUVBd3dLYkdWaGMyZ3RkR1Z6ZERCWk1CTUdCeXFHU000OUFnRUdDQ3FHClNNNDlBd0VIQTBJQUJPWWEwWXlNS1R6cWRsVjV5aWNmcUk3LzR4VDR4SWNLQzloYnRzUi9FcFlQbGltTWdyZDEKdTBzWEcremtyeFlUNVhoV3NUam51MWZ2bUZsRTdUbTFKaUNqYmpCc01CMEdBMVVkRGdRV0JCU01XVXBWV3EySQpUOU9kc0NjRHdWNVEvNWtZcmpBZkJnTlZIU01FR0RBV2dCU01XVXBWV3EySVQ5T2RzQ2NEd1Y1US81a1lyakFQCkJnTlZIUk1CQWY4RUJUQURBUUgvTUJrR0ExVWRFUVFTTUJDQ0RtUnZkMjR1YUc5dmEzTXVjM1pqTUFvR0NDcUcKU000OUJBTUNBMGNBTUVRQ0lFcW15TmdUMW1jWEg2RW1PTWVmRDhHMnRUQ3lyWmM4aEJPdEJ1K0l6aGxYQWlBbgo5UVNjTk5zNlg0cU5yZGVaNm1nWnFHK0RWdTFQU21rYWRHdFNFNjZpdkE9PQotLS0tLUVORCBDRVJUSUZJQ0FURS0tLS0tCg==";

#[test]
fn webhook_service_flag_routes_service_references_and_kubectl_prints_the_failure() {
    if !kubectl_installed() {
        return;
    }
    // A port where nothing listens: bound on 127.0.0.1 by a socket that
    // never listens (connecting is refused), held for the test so that no
    // other test's server can take the port meanwhile.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = held.local_addr().unwrap();
    let mapping = format!("hooks/down=https://{closed}");
    let sandbox = SandboxProcess::start(&["--webhook-service", &mapping]);
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("hook.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: down
webhooks:
- name: down.leash.dev
  clientConfig:
    service: {{namespace: hooks, name: down, path: /validate}}
    caBundle: {}
  rules:
  - {{operations: [CREATE], apiGroups: [''], apiVersions: [v1], resources: [pods]}}
  sideEffects: None
  admissionReviewVersions: [v1]
",
            CA_BUNDLE
        ),
    )
    .unwrap();
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .arg("--server")
            .arg(&sandbox.url)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("--request-timeout=30s")
            .args(args)
            .env("HOME", dir.path())
            .env("KUBECONFIG", dir.path().join("none"))
            .output()
            .expect("run kubectl")
    };
    let applied = kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", stderr(&applied));
    let run = kubectl(&["run", "p", "--image=nginx"]);
    assert!(!run.status.success(), "{}", stdout(&run));
    let expected = format!(
        "Error from server (InternalError): Internal error occurred: failed calling webhook \"down.leash.dev\": failed to call webhook: Post \"https://down.hooks.svc:443/validate?timeout=10s\": dial tcp {closed}: connect: "
    );
    assert!(
        stderr(&run).starts_with(&expected),
        "{}\nexpected prefix: {expected}",
        stderr(&run)
    );
    let (status, _) = sandbox.signal_and_wait("INT");
    assert!(status.success());
}

#[test]
fn bad_webhook_service_values_exit_2_naming_the_value() {
    for (value, needle) in [
        ("hooks/down", "NAMESPACE/NAME=https://HOST:PORT"),
        ("down=https://127.0.0.1:1", "\"down\" is not NAMESPACE/NAME"),
        ("hooks/down=http://127.0.0.1:1", "https only"),
    ] {
        let out = leash()
            .args(["sandbox", "--webhook-service", value])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{value}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("--webhook-service") && stderr(&out).contains(needle),
            "{value}: {}",
            stderr(&out)
        );
    }
    let help = leash().args(["sandbox", "--help"]).output().unwrap();
    let help = stdout(&help);
    assert!(help.contains("--webhook-service <NS/NAME=URL>"), "{help}");
    assert!(
        help.contains("verified against clientConfig.caBundle"),
        "{help}"
    );
}
