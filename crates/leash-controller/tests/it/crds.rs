//! README, `leash serve`: the CRDs of every kind leash watches or writes
//! are in `deploy/crds/`, each serving the version leash uses, with the
//! scope leash assumes.

use std::path::PathBuf;

use leash_controller::sources::POLICY_KINDS;
use serde_json::Value;

/// Every kind `leash serve` reads or writes through a CRD: the policy kinds
/// it watches, the reports, UpdateRequests and GlobalContextEntries.
fn kinds() -> Vec<(String, String, String, String, bool)> {
    let mut out: Vec<(String, String, String, String, bool)> = POLICY_KINDS
        .iter()
        .map(|&(g, v, k, p, ns)| (g.into(), v.into(), k.into(), p.into(), ns))
        .collect();
    for (resource, namespaced) in [
        (leash_controller::writer::ephemeral_resource(), true),
        (
            leash_controller::writer::cluster_ephemeral_resource(),
            false,
        ),
        (leash_controller::writer::report_resource(), true),
        (leash_controller::writer::cluster_report_resource(), false),
        (leash_controller::generate::update_request_resource(), true),
    ] {
        out.push((
            resource.group,
            resource.version,
            resource.kind,
            resource.plural,
            namespaced,
        ));
    }
    out.push((
        "kyverno.io".into(),
        "v2beta1".into(),
        "GlobalContextEntry".into(),
        "globalcontextentries".into(),
        false,
    ));
    out
}

#[test]
fn deploy_crds_define_every_kind_leash_uses() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let crds = leash_sandbox::manifests::load_manifests(&[dir]).unwrap();
    for (group, version, kind, plural, namespaced) in kinds() {
        let crd = crds
            .iter()
            .find(|c| {
                c["spec"]["group"] == group.as_str() && c["spec"]["names"]["kind"] == kind.as_str()
            })
            .unwrap_or_else(|| panic!("no CRD for {kind}.{group} in deploy/crds"));
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        assert_eq!(crd["spec"]["names"]["plural"], plural.as_str(), "{kind}");
        let scope = if namespaced { "Namespaced" } else { "Cluster" };
        assert_eq!(crd["spec"]["scope"], scope, "{kind}.{group}");
        let served = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v: &Value| v["name"] == version.as_str() && v["served"] == true);
        assert!(served, "{kind}.{group} does not serve {version}");
    }
}
