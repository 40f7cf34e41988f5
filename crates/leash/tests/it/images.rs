//! `leash apply --registry` against a real registry (Debian's
//! docker-registry on 127.0.0.1, `leash_images::testing`): `imageRegistry`
//! context entries and CEL's `image.GetMetadata` read what the registry
//! holds; without `--registry` the entry is left out, as Kyverno's CLI
//! leaves it; an unreachable registry is the rule's error, naming the
//! image, within the registry timeout.

use std::fs;
use std::time::{Duration, Instant};

use leash_images::testing::LocalRegistry;

use crate::support::{leash, stderr, stdout};

const POLICIES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: vendor-label
spec:
  rules:
  - name: vendor
    match:
      any:
      - resources:
          kinds: [Pod]
    context:
    - name: imageData
      imageRegistry:
        reference: "{{ request.object.spec.containers[0].image }}"
    validate:
      message: "image {{ imageData.resolvedImage }} is not built by acme"
      deny:
        conditions:
          any:
          - key: "{{ imageData.configData.config.Labels.vendor || '' }}"
            operator: NotEquals
            value: acme
---
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata:
  name: amd64-only
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [pods]
  validations:
  - expression: >-
      object.spec.containers.all(c, image.GetMetadata(c.image).config.architecture == 'amd64')
    message: images must be built for amd64
"#;

fn pod(name: &str, image: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers:\n  - {{name: c, image: \"{image}\"}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_registry_reads_image_data_from_the_registry() {
    let Some(reg) = LocalRegistry::start() else {
        return;
    };
    let (acme, _) = reg.push("team/app:1.0", &[("vendor", "acme")]).await;
    reg.push("team/other:2.0", &[("vendor", "other")]).await;
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("policies.yaml"), POLICIES).unwrap();
    let pods = format!(
        "{}{}",
        pod("acme", &format!("{}/team/app:1.0", reg.host)),
        pod("other", &format!("{}/team/other:2.0", reg.host))
    );
    fs::write(dir.path().join("pods.yaml"), pods).unwrap();
    let run = |extra: &[&str]| {
        leash()
            .arg("apply")
            .arg(dir.path().join("policies.yaml"))
            .arg("-r")
            .arg(dir.path().join("pods.yaml"))
            .args(extra)
            .output()
            .unwrap()
    };

    let out = run(&["--registry"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    // acme passes both; other fails vendor-label and passes amd64-only.
    assert!(
        text.contains("pass: 3, fail: 1, warn: 0, error: 0, skip: 0"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "policy vendor-label -> resource Pod/default/other rule vendor: image {}/team/other@sha256:",
            reg.host
        )),
        "{text}"
    );
    assert!(!text.contains(&acme), "the acme pod passes: {text}");

    // Without --registry: the entry is left out (the `||` default
    // applies, both fail vendor-label) and image.GetMetadata has no data.
    let out = run(&[]);
    let text = stdout(&out);
    assert!(
        text.contains("pass: 0, fail: 2, warn: 0, error: 2, skip: 0"),
        "{text}"
    );
    assert!(text.contains("failed to get image data"), "{text}");

    // The registry gone: each rule errors naming the image, bounded.
    let host = reg.host.clone();
    drop(reg);
    let started = Instant::now();
    let out = run(&["--registry", "--registry-timeout", "3s"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("pass: 0, fail: 0, warn: 0, error: 4, skip: 0"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "failed to fetch image descriptor: {host}/team/app:1.0, error: image {host}/team/app:1.0: registry {host}"
        )),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "bounded");
}
