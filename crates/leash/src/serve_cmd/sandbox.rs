//! `leash serve --sandbox`: an in-process sandbox with demo data, leash's
//! CRDs, Kyverno's namespace and ConfigMap, and the example policies.

use std::path::Path;

use leash_sandbox::{Sandbox, SandboxConfig, generate::GenerateSpec};
use serde_json::{Value, json};

use crate::cli_error::usage;

/// The CRDs of deploy/crds, compiled in so the demo needs no checkout.
const CRDS: &[&str] = &[
    include_str!("../../../../deploy/crds/kyverno.io_clusterpolicies.yaml"),
    include_str!("../../../../deploy/crds/kyverno.io_policies.yaml"),
    include_str!("../../../../deploy/crds/kyverno.io_policyexceptions.yaml"),
    include_str!("../../../../deploy/crds/kyverno.io_updaterequests.yaml"),
    include_str!("../../../../deploy/crds/kyverno.io_globalcontextentries.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_validatingpolicies.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_namespacedvalidatingpolicies.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_imagevalidatingpolicies.yaml"),
    include_str!(
        "../../../../deploy/crds/policies.kyverno.io_namespacedimagevalidatingpolicies.yaml"
    ),
    include_str!("../../../../deploy/crds/policies.kyverno.io_policyexceptions.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_mutatingpolicies.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_namespacedmutatingpolicies.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_generatingpolicies.yaml"),
    include_str!("../../../../deploy/crds/policies.kyverno.io_namespacedgeneratingpolicies.yaml"),
    include_str!("../../../../deploy/crds/reports.kyverno.io_ephemeralreports.yaml"),
    include_str!("../../../../deploy/crds/reports.kyverno.io_clusterephemeralreports.yaml"),
    include_str!("../../../../deploy/crds/wgpolicyk8s.io_policyreports.yaml"),
    include_str!("../../../../deploy/crds/wgpolicyk8s.io_clusterpolicyreports.yaml"),
];

/// The example policies of deploy/examples/policies.
const POLICIES: &[&str] = &[
    include_str!("../../../../deploy/examples/policies/disallow-latest-tag.yaml"),
    include_str!("../../../../deploy/examples/policies/require-labels.yaml"),
    include_str!("../../../../deploy/examples/policies/add-namespace-defaults.yaml"),
];

fn parse(text: &str) -> anyhow::Result<Value> {
    serde_saphyr::from_str(text)
        .map_err(|e| anyhow::anyhow!("a built-in manifest does not parse: {e}"))
}

/// Every object `--sandbox` starts with, after the generated ones.
pub(crate) fn objects() -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for text in CRDS.iter().chain(POLICIES) {
        out.push(parse(text)?);
    }
    out.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyverno"}}));
    out.push(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kyverno", "namespace": "kyverno"},
        "data": {"resourceFilters": "[Event,*,*][*/*,kube-system,*][*/*,kube-public,*][*/*,kube-node-lease,*][*/*,kyverno,*]"},
    }));
    Ok(out)
}

pub(crate) async fn start(spec: &str, kubeconfig: Option<&Path>) -> anyhow::Result<Sandbox> {
    let kinds = leash_sandbox::generate::parse_generate(spec)
        .map_err(|e| usage(format!("invalid --sandbox value {spec:?}: {e}")))?;
    let config = SandboxConfig {
        generate: Some(GenerateSpec {
            kinds,
            namespaces: 4,
            crds: Some((0, 0)),
            seed: 0,
        }),
        objects: objects()?,
        ..SandboxConfig::default()
    };
    let sandbox = Sandbox::start(config)
        .await
        .map_err(|e| anyhow::Error::new(e).context("cannot start the in-process sandbox"))?;
    eprintln!("leash serve: sandbox API server at {}", sandbox.url());
    if let Some(path) = kubeconfig {
        crate::sandbox_cmd::write_kubeconfig(path, &sandbox.kubeconfig_yaml())?;
        eprintln!(
            "leash serve: kubeconfig written to {p}; try: KUBECONFIG={p} kubectl get polr -A",
            p = path.display()
        );
    }
    Ok(sandbox)
}
