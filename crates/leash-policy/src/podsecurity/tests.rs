use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::error::Error;
use crate::eval::{Bindings, Prepared};
use crate::policy::Policy;
use crate::request::{EvalRequest, NoClusterData, Operation};

/// The field of the `Error::InvalidPolicy` that `result` must be.
#[track_caller]
fn invalid_field<T: std::fmt::Debug>(result: Result<T>, context: &str) -> String {
    match result {
        Err(Error::InvalidPolicy { field, .. }) => field,
        other => panic!("{context}: {other:?}"),
    }
}

fn compile(spec: Value) -> Result<PodSecurity> {
    let err = |field: String, message: String| Error::invalid("ClusterPolicy", "t", field, message);
    let doc = crate::model::parse(&spec, "validate.podSecurity", &err)?;
    PodSecurity::compile(&doc, "validate.podSecurity", &err)
}

fn profile(level: &str, version: &str) -> PodSecurity {
    compile(json!({"level": level, "version": version})).unwrap()
}

/// The IDs of the checks `ps` fails on a Pod with this spec and metadata.
fn failing_with(ps: &PodSecurity, meta: &Value, spec: &Value) -> Vec<&'static str> {
    ps.failures(&Pod { meta, spec })
        .iter()
        .map(|f| f.id)
        .collect()
}

fn failing(ps: &PodSecurity, spec: Value) -> Vec<&'static str> {
    failing_with(ps, &json!({"name": "p"}), &spec)
}

/// A container that passes the restricted profile, with `extra` merged
/// into its securityContext (a null removes the field).
fn good(extra: Value) -> Value {
    let mut c = json!({
        "name": "c",
        "image": "nginx:1.27",
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"},
            "capabilities": {"drop": ["ALL"]}
        }
    });
    for (k, v) in extra.as_object().unwrap() {
        let sc = c["securityContext"].as_object_mut().unwrap();
        if v.is_null() {
            sc.remove(k);
        } else {
            sc.insert(k.clone(), v.clone());
        }
    }
    c
}

#[test]
fn baseline_controls_pass_and_fail() {
    // (case, spec, failing check IDs under baseline:latest)
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("empty pod", json!({"containers": [{"name": "c"}]}), vec![]),
        (
            "hostProcess container",
            json!({"containers": [{"name": "c", "securityContext": {"windowsOptions": {"hostProcess": true}}}]}),
            vec!["windowsHostProcess"],
        ),
        (
            "hostProcess pod",
            json!({"securityContext": {"windowsOptions": {"hostProcess": true}}, "containers": [{"name": "c"}]}),
            vec!["windowsHostProcess"],
        ),
        (
            "hostProcess false",
            json!({"containers": [{"name": "c", "securityContext": {"windowsOptions": {"hostProcess": false}}}]}),
            vec![],
        ),
        (
            "hostNetwork",
            json!({"hostNetwork": true, "containers": [{"name": "c"}]}),
            vec!["hostNamespaces"],
        ),
        (
            "hostPID",
            json!({"hostPID": true, "containers": [{"name": "c"}]}),
            vec!["hostNamespaces"],
        ),
        (
            "hostIPC",
            json!({"hostIPC": true, "containers": [{"name": "c"}]}),
            vec!["hostNamespaces"],
        ),
        (
            "host namespaces false",
            json!({"hostNetwork": false, "hostPID": false, "hostIPC": false, "containers": [{"name": "c"}]}),
            vec![],
        ),
        (
            "privileged",
            json!({"containers": [{"name": "c", "securityContext": {"privileged": true}}]}),
            vec!["privileged"],
        ),
        (
            "privileged init container",
            json!({"initContainers": [{"name": "i", "securityContext": {"privileged": true}}], "containers": [{"name": "c"}]}),
            vec!["privileged"],
        ),
        (
            "privileged false",
            json!({"containers": [{"name": "c", "securityContext": {"privileged": false}}]}),
            vec![],
        ),
        (
            "non-default capability",
            json!({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}),
            vec!["capabilities_baseline"],
        ),
        (
            "ephemeral container capability",
            json!({"containers": [{"name": "c"}], "ephemeralContainers": [{"name": "e", "securityContext": {"capabilities": {"add": ["NET_RAW"]}}}]}),
            vec!["capabilities_baseline"],
        ),
        (
            "default capability",
            json!({"containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["KILL", "CHOWN"]}}}]}),
            vec![],
        ),
        (
            "hostPath volume",
            json!({"containers": [{"name": "c"}], "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}),
            vec!["hostPathVolumes"],
        ),
        (
            "emptyDir volume",
            json!({"containers": [{"name": "c"}], "volumes": [{"name": "v", "emptyDir": {}}]}),
            vec![],
        ),
        (
            "host port",
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}]}]}),
            vec!["hostPorts"],
        ),
        (
            "host port 0",
            json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 0}]}]}),
            vec![],
        ),
        (
            "appArmor profile type",
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": [{"name": "c"}]}),
            vec!["appArmorProfile"],
        ),
        (
            "appArmor container RuntimeDefault",
            json!({"containers": [{"name": "c", "securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}]}),
            vec![],
        ),
        (
            "SELinux type",
            json!({"containers": [{"name": "c", "securityContext": {"seLinuxOptions": {"type": "spc_t"}}}]}),
            vec!["seLinuxOptions"],
        ),
        (
            "SELinux user",
            json!({"securityContext": {"seLinuxOptions": {"user": "sysadm_u"}}, "containers": [{"name": "c"}]}),
            vec!["seLinuxOptions"],
        ),
        (
            "SELinux allowed type and level",
            json!({"containers": [{"name": "c", "securityContext": {"seLinuxOptions": {"type": "container_t", "level": "s0:c1"}}}]}),
            vec![],
        ),
        (
            "procMount Unmasked",
            json!({"containers": [{"name": "c", "securityContext": {"procMount": "Unmasked"}}]}),
            vec!["procMount"],
        ),
        (
            "procMount Default",
            json!({"containers": [{"name": "c", "securityContext": {"procMount": "Default"}}]}),
            vec![],
        ),
        (
            "seccomp Unconfined",
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "c"}]}),
            vec!["seccompProfile_baseline"],
        ),
        (
            "seccomp Localhost",
            json!({"containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "Localhost"}}}]}),
            vec![],
        ),
        (
            "unsafe sysctl",
            json!({"securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "kernel.shm_next_id", "value": "4"}]}, "containers": [{"name": "c"}]}),
            vec!["sysctls"],
        ),
        (
            "safe sysctl",
            json!({"securityContext": {"sysctls": [{"name": "net.ipv4.ping_group_range", "value": "1 0"}]}, "containers": [{"name": "c"}]}),
            vec![],
        ),
        (
            "probe host",
            json!({"containers": [{"name": "c", "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}]}),
            vec!["hostProbesAndHostLifecycle"],
        ),
        (
            "lifecycle host",
            json!({"containers": [{"name": "c", "lifecycle": {"preStop": {"tcpSocket": {"host": "db", "port": 5432}}}}]}),
            vec!["hostProbesAndHostLifecycle"],
        ),
        (
            "probe without host",
            json!({"containers": [{"name": "c", "readinessProbe": {"httpGet": {"port": 80}}}]}),
            vec![],
        ),
        (
            "restricted fields are not baseline",
            json!({"containers": [{"name": "c", "securityContext": {"runAsUser": 0}}], "volumes": [{"name": "v", "nfs": {}}]}),
            vec![],
        ),
    ];
    let ps = profile("baseline", "latest");
    for (name, spec, want) in cases {
        assert_eq!(failing(&ps, spec), want, "{name}");
    }
}

#[test]
fn app_armor_annotations() {
    let ps = profile("baseline", "latest");
    let spec = json!({"containers": [{"name": "c"}]});
    let bad = json!({"name": "p", "annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}});
    assert_eq!(failing_with(&ps, &bad, &spec), vec!["appArmorProfile"]);
    for ok in ["runtime/default", "localhost/my-profile", ""] {
        let meta = json!({"name": "p", "annotations": {"container.apparmor.security.beta.kubernetes.io/c": ok}});
        assert!(failing_with(&ps, &meta, &spec).is_empty(), "{ok}");
    }
}

#[test]
fn restricted_controls_pass_and_fail() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "compliant",
            json!({"containers": [good(json!({}))]}),
            vec![],
        ),
        (
            "restricted volume type",
            json!({"containers": [good(json!({}))], "volumes": [{"name": "v", "nfs": {"server": "s", "path": "/"}}]}),
            vec!["restrictedVolumes"],
        ),
        (
            "hostPath fails both volume checks",
            json!({"containers": [good(json!({}))], "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}),
            vec!["hostPathVolumes", "restrictedVolumes"],
        ),
        (
            "allowed volume types",
            json!({"containers": [good(json!({}))], "volumes": [
                {"name": "a", "configMap": {"name": "x"}}, {"name": "b", "secret": {"secretName": "x"}},
                {"name": "c", "emptyDir": {}}, {"name": "d", "persistentVolumeClaim": {"claimName": "x"}},
                {"name": "e", "projected": {"sources": []}}, {"name": "f", "downwardAPI": {}},
                {"name": "g", "csi": {"driver": "x"}}, {"name": "h", "ephemeral": {}}]}),
            vec![],
        ),
        (
            "privilege escalation unset",
            json!({"containers": [good(json!({"allowPrivilegeEscalation": null}))]}),
            vec!["allowPrivilegeEscalation"],
        ),
        (
            "privilege escalation true",
            json!({"containers": [good(json!({"allowPrivilegeEscalation": true}))]}),
            vec!["allowPrivilegeEscalation"],
        ),
        (
            "runAsNonRoot false",
            json!({"containers": [good(json!({"runAsNonRoot": false}))]}),
            vec!["runAsNonRoot"],
        ),
        (
            "runAsNonRoot unset",
            json!({"containers": [good(json!({"runAsNonRoot": null}))]}),
            vec!["runAsNonRoot"],
        ),
        (
            "runAsNonRoot from the pod",
            json!({"securityContext": {"runAsNonRoot": true}, "containers": [good(json!({"runAsNonRoot": null}))]}),
            vec![],
        ),
        (
            "runAsNonRoot false on the pod",
            json!({"securityContext": {"runAsNonRoot": false}, "containers": [good(json!({}))]}),
            vec!["runAsNonRoot"],
        ),
        (
            "runAsUser 0",
            json!({"containers": [good(json!({"runAsUser": 0}))]}),
            vec!["runAsUser"],
        ),
        (
            "runAsUser 0 on the pod",
            json!({"securityContext": {"runAsUser": 0}, "containers": [good(json!({}))]}),
            vec!["runAsUser"],
        ),
        (
            "runAsUser 1000",
            json!({"containers": [good(json!({"runAsUser": 1000}))]}),
            vec![],
        ),
        (
            "seccomp unset",
            json!({"containers": [good(json!({"seccompProfile": null}))]}),
            vec!["seccompProfile_restricted"],
        ),
        (
            "seccomp from the pod",
            json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}, "containers": [good(json!({"seccompProfile": null}))]}),
            vec![],
        ),
        (
            "seccomp Unconfined fails both levels",
            json!({"containers": [good(json!({"seccompProfile": {"type": "Unconfined"}}))]}),
            vec!["seccompProfile_baseline", "seccompProfile_restricted"],
        ),
        (
            "capabilities not dropped",
            json!({"containers": [good(json!({"capabilities": null}))]}),
            vec!["capabilities_restricted"],
        ),
        (
            "capabilities drop other than ALL",
            json!({"containers": [good(json!({"capabilities": {"drop": ["NET_RAW"]}}))]}),
            vec!["capabilities_restricted"],
        ),
        (
            "NET_BIND_SERVICE added",
            json!({"containers": [good(json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}))]}),
            vec![],
        ),
        (
            "default capability added",
            json!({"containers": [good(json!({"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}))]}),
            vec!["capabilities_restricted"],
        ),
        (
            "SYS_ADMIN added fails both levels",
            json!({"containers": [good(json!({"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}))]}),
            vec!["capabilities_baseline", "capabilities_restricted"],
        ),
        (
            "init container checked too",
            json!({"initContainers": [{"name": "i", "image": "busybox"}], "containers": [good(json!({}))]}),
            vec![
                "allowPrivilegeEscalation",
                "capabilities_restricted",
                "runAsNonRoot",
                "seccompProfile_restricted",
            ],
        ),
        (
            "baseline controls apply",
            json!({"hostIPC": true, "containers": [good(json!({}))]}),
            vec!["hostNamespaces"],
        ),
    ];
    let ps = profile("restricted", "latest");
    for (name, spec, want) in cases {
        assert_eq!(failing(&ps, spec), want, "{name}");
    }
}

#[test]
fn privileged_level_allows_everything() {
    let ps = profile("privileged", "latest");
    let spec = json!({"hostPID": true, "containers": [{"name": "c", "securityContext": {"privileged": true}}]});
    assert!(failing(&ps, spec).is_empty());
}

#[test]
fn versions_gate_the_checks() {
    // (level, version, spec, failing IDs)
    let runs_as_root = json!({"containers": [good(json!({"runAsUser": 0}))]});
    let engine_t = json!({"containers": [{"name": "c", "securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}}]});
    let rmem = json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096"}]}, "containers": [{"name": "c"}]});
    let probe_host = json!({"containers": [{"name": "c", "startupProbe": {"tcpSocket": {"host": "h", "port": 1}}}]});
    let escalating = json!({"containers": [good(json!({"allowPrivilegeEscalation": true}))]});
    let windows = json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true}, "containers": [{"name": "c"}]});
    let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
        ("restricted", "v1.22", runs_as_root.clone(), vec![]),
        ("restricted", "v1.23", runs_as_root, vec!["runAsUser"]),
        (
            "baseline",
            "v1.30",
            engine_t.clone(),
            vec!["seLinuxOptions"],
        ),
        // A pinned v1.31 still runs the v1.0 version, which forbids it.
        (
            "baseline",
            "v1.31",
            engine_t.clone(),
            vec!["seLinuxOptions"],
        ),
        ("baseline", "latest", engine_t, vec![]),
        (
            "baseline",
            "v1.31",
            rmem.clone(),
            vec!["sysctls", "sysctls", "sysctls"],
        ),
        ("baseline", "latest", rmem, vec![]),
        ("baseline", "v1.33", probe_host.clone(), vec![]),
        (
            "baseline",
            "v1.34",
            probe_host.clone(),
            vec!["hostProbesAndHostLifecycle"],
        ),
        (
            "baseline",
            "",
            probe_host,
            vec!["hostProbesAndHostLifecycle"],
        ),
        // Every version at or before the one named is run: both versions
        // of the check fail.
        (
            "restricted",
            "v1.26",
            escalating.clone(),
            vec!["allowPrivilegeEscalation", "allowPrivilegeEscalation"],
        ),
        (
            "restricted",
            "latest",
            escalating,
            vec!["allowPrivilegeEscalation"],
        ),
        // Windows pods are exempt from some restricted checks from v1.25;
        // a pinned version still runs their older versions.
        ("restricted", "latest", windows.clone(), vec![]),
        (
            "restricted",
            "v1.26",
            windows.clone(),
            vec![
                "allowPrivilegeEscalation",
                "capabilities_restricted",
                "seccompProfile_restricted",
            ],
        ),
        (
            "restricted",
            "v1.21",
            windows,
            vec!["allowPrivilegeEscalation", "seccompProfile_restricted"],
        ),
    ];
    for (level, version, spec, want) in cases {
        assert_eq!(
            failing(&profile(level, version), spec),
            want,
            "{level}:{version}"
        );
    }
    // Before v1.19 seccomp is read from the alpha annotations.
    let meta = json!({"name": "p", "annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}});
    let spec = json!({"containers": [{"name": "c"}]});
    assert_eq!(
        failing_with(&profile("baseline", "v1.18"), &meta, &spec),
        vec!["seccompProfile_baseline"]
    );
    assert!(failing_with(&profile("baseline", "latest"), &meta, &spec).is_empty());
}

fn with_exclude(level: &str, exclude: Value) -> PodSecurity {
    compile(json!({"level": level, "version": "latest", "exclude": exclude})).unwrap()
}

#[test]
fn pod_level_exclusion() {
    let ps = with_exclude("baseline", json!([{"controlName": "Host Namespaces"}]));
    assert!(
        failing(
            &ps,
            json!({"hostIPC": true, "hostPID": true, "containers": [{"name": "c"}]})
        )
        .is_empty()
    );
    // Other controls still apply.
    let spec = json!({"hostIPC": true, "containers": [{"name": "c", "securityContext": {"privileged": true}}]});
    assert_eq!(failing(&ps, spec), vec!["privileged"]);
}

#[test]
fn container_level_exclusion_by_image() {
    let ps = with_exclude(
        "restricted",
        json!([{"controlName": "Capabilities", "images": ["ghcr.io/kyverno/test-nginx*", "redis*"]}]),
    );
    let adding = |image: &str, name: &str| {
        let mut c = good(json!({"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}));
        c["image"] = json!(image);
        c["name"] = json!(name);
        c
    };
    assert!(
        failing(
            &ps,
            json!({"containers": [adding("ghcr.io/kyverno/test-nginx:latest", "a")]})
        )
        .is_empty()
    );
    assert!(failing(&ps, json!({"containers": [adding("redis:7", "a")]})).is_empty());
    assert_eq!(
        failing(&ps, json!({"containers": [adding("busybox:1.28", "a")]})),
        vec!["capabilities_baseline", "capabilities_restricted"]
    );
    // Only the matching container is exempt: the other's errors remain
    // (matched by name, whatever the container's index in either pod).
    let spec = json!({"containers": [adding("busybox", "b"), adding("redis:7", "a")]});
    let failures = ps.failures(&Pod {
        meta: &json!({"name": "p"}),
        spec: &spec,
    });
    assert_eq!(failures.len(), 2);
    for f in &failures {
        let fields: Vec<&str> = f.verdict.errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["spec.containers[0].securityContext.capabilities.add"],
            "{}",
            f.id
        );
    }
    // The exemption is for the control named only.
    let spec = json!({"containers": [{"image": "redis:7", "name": "a", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]});
    assert_eq!(
        failing(&ps, spec),
        vec![
            "allowPrivilegeEscalation",
            "runAsNonRoot",
            "seccompProfile_restricted"
        ]
    );
}

#[test]
fn exclusion_narrowed_by_restricted_field_and_values() {
    let ps = with_exclude(
        "restricted",
        json!([{
            "controlName": "Capabilities",
            "images": ["*"],
            "restrictedField": "spec.containers[*].securityContext.capabilities.add",
            "values": ["SYS_ADMIN", "NET_*"]
        }]),
    );
    let adding = |caps: Value| json!({"containers": [good(json!({"capabilities": {"drop": ["ALL"], "add": caps}}))]});
    assert!(failing(&ps, adding(json!(["SYS_ADMIN"]))).is_empty());
    assert!(failing(&ps, adding(json!(["NET_RAW", "SYS_ADMIN"]))).is_empty());
    // Every bad value must be one of the values.
    assert_eq!(
        failing(&ps, adding(json!(["SYS_ADMIN", "SYS_TIME"]))),
        vec!["capabilities_baseline", "capabilities_restricted"]
    );
    // Another field of the control is not exempt.
    let spec = json!({"containers": [good(json!({"capabilities": {"add": ["SYS_ADMIN"]}}))]});
    assert_eq!(failing(&ps, spec), vec!["capabilities_restricted"]);
    // Nor the same field of init containers.
    let mut init = good(json!({"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}));
    init["name"] = json!("i");
    let spec = json!({"initContainers": [init], "containers": [good(json!({}))]});
    assert_eq!(
        failing(&ps, spec),
        vec!["capabilities_baseline", "capabilities_restricted"]
    );
}

#[test]
fn exclusion_of_a_pod_and_container_control_needs_both_forms() {
    // Seccomp set at both levels: the pod-level exclusion exempts the pod
    // field, the one with images the container fields.
    let spec = json!({
        "securityContext": {"seccompProfile": {"type": "Unconfined"}, "runAsNonRoot": true},
        "containers": [good(json!({"seccompProfile": {"type": "Unconfined"}}))]
    });
    let pod_only = with_exclude("restricted", json!([{"controlName": "Seccomp"}]));
    assert_eq!(
        failing(&pod_only, spec.clone()),
        vec!["seccompProfile_baseline", "seccompProfile_restricted"]
    );
    let both = with_exclude(
        "restricted",
        json!([{"controlName": "Seccomp"}, {"controlName": "Seccomp", "images": ["*"]}]),
    );
    assert!(failing(&both, spec).is_empty());
}

#[test]
fn exclusion_values_match_bool_and_number_values() {
    let ps = with_exclude(
        "baseline",
        json!([{
            "controlName": "Host Ports",
            "images": ["nginx*"],
            "restrictedField": "spec.containers[*].ports[*].hostPort",
            "values": ["80", "443"]
        }]),
    );
    let spec = |port: i64| json!({"containers": [{"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80, "hostPort": port}]}]});
    assert!(failing(&ps, spec(443)).is_empty());
    assert_eq!(failing(&ps, spec(8080)), vec!["hostPorts"]);
    let ps = with_exclude(
        "baseline",
        json!([{"controlName": "Host Namespaces", "restrictedField": "spec.hostNetwork", "values": ["true"]}]),
    );
    assert!(
        failing(
            &ps,
            json!({"hostNetwork": true, "containers": [{"name": "c"}]})
        )
        .is_empty()
    );
    assert_eq!(
        failing(
            &ps,
            json!({"hostNetwork": true, "hostPID": true, "containers": [{"name": "c"}]})
        ),
        vec!["hostNamespaces"]
    );
}

#[test]
fn invalid_specs_name_the_field() {
    let cases = [
        (json!({"level": "superuser"}), "validate.podSecurity.level"),
        (json!({"version": "latest"}), "validate.podSecurity.level"),
        (
            json!({"level": "baseline", "version": "1.24"}),
            "validate.podSecurity.version",
        ),
        (
            json!({"level": "baseline", "version": "v2.0"}),
            "validate.podSecurity.version",
        ),
        (
            json!({"level": "baseline", "version": "v1.024"}),
            "validate.podSecurity.version",
        ),
        (
            json!({"level": "baseline", "exclude": [{"controlName": "Root Access"}]}),
            "validate.podSecurity.exclude[0].controlName",
        ),
        (
            json!({"level": "baseline", "exclude": [{"controlName": "Capabilities"}]}),
            "validate.podSecurity.exclude[0].controlName",
        ),
        (
            json!({"level": "baseline", "exclude": [{"controlName": "Sysctls", "images": ["*"]}]}),
            "validate.podSecurity.exclude[0].controlName",
        ),
        (
            json!({"level": "baseline", "exclude": [{"controlName": "Sysctls", "restrictedField": "spec.securityContext.sysctls[*].name"}]}),
            "validate.podSecurity.exclude[0].values",
        ),
        (
            json!({"level": "baseline", "exclude": [{"controlName": "Sysctls", "values": ["a"]}]}),
            "validate.podSecurity.exclude[0].restrictedField",
        ),
    ];
    for (spec, want) in cases {
        let context = spec.to_string();
        assert_eq!(invalid_field(compile(spec), &context), want, "{context}");
    }
    for ok in ["latest", "", "v1.0", "v1.19", "v1.34", "v1.40"] {
        assert!(
            compile(json!({"level": "restricted", "version": ok})).is_ok(),
            "{ok}"
        );
    }
}

#[test]
fn messages_follow_kyverno() {
    let ps = profile("restricted", "latest");
    let pod = json!({"kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"hostIPC": true, "containers": [{"name": "c", "securityContext": {"runAsNonRoot": true}}]}});
    let (status, msg) = ps.evaluate("r", &pod);
    assert_eq!(status, Status::Fail);
    assert_eq!(
        msg,
        "Validation rule 'r' failed. It violates PodSecurity \"restricted:latest\": \
         (Forbidden reason: allowPrivilegeEscalation != false, field error list: [spec.containers[0].securityContext.allowPrivilegeEscalation is forbidden, forbidden values found: nil])\
         (Forbidden reason: unrestricted capabilities, field error list: [spec.containers[0].securityContext.capabilities.drop: Required value])\
         (Forbidden reason: host namespaces, field error list: [spec.hostIPC is forbidden, forbidden values found: true])\
         (Forbidden reason: seccompProfile, field error list: [spec.containers[0].securityContext.seccompProfile.type: Required value])"
    );
    let ok = json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [good(json!({}))]}});
    assert_eq!(
        ps.evaluate("r", &ok),
        (Status::Pass, "Validation rule 'r' passed.".to_string())
    );
    // Controllers: the pod template is checked, its fields shown under it.
    let baseline = profile("baseline", "latest");
    let deploy = json!({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "securityContext": {"privileged": true}}],
        "volumes": [{"name": "v", "hostPath": {"path": "/"}}]}}}});
    assert_eq!(
        baseline.evaluate("b", &deploy).1,
        "Validation rule 'b' failed. It violates PodSecurity \"baseline:latest\": \
         (Forbidden reason: hostPath volumes, field error list: [spec.template.spec.volumes[0].hostPath: Forbidden])\
         (Forbidden reason: privileged, field error list: [spec.template.spec.containers[0].securityContext.privileged is forbidden, forbidden values found: true])"
    );
    let cron = json!({"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}}]}}}}}});
    assert_eq!(
        baseline.evaluate("b", &cron).1,
        "Validation rule 'b' failed. It violates PodSecurity \"baseline:latest\": \
         (Forbidden reason: non-default capabilities, field error list: [spec.jobTemplate.spec.template.spec.containers[0].securityContext.capabilities.add is forbidden, forbidden values found: [NET_ADMIN SYS_ADMIN]])"
    );
    let (status, msg) = baseline.evaluate("b", &json!({"kind": "Service", "spec": {}}));
    assert_eq!(status, Status::Error);
    assert!(
        msg.contains("could not find correct resource type"),
        "{msg}"
    );
}

/// ClusterPolicy `pss` with the one rule `rule`.
fn policy_doc(rule: Value) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "pss"},
        "spec": {"rules": [rule]}
    })
}

/// A rule `name` on Pods with the podSecurity `pod_security`.
fn pod_rule(name: &str, pod_security: Value) -> Value {
    json!({
        "name": name,
        "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
        "validate": {"podSecurity": pod_security}
    })
}

fn policy(rule: Value) -> Policy {
    Policy::compile(&policy_doc(rule)).unwrap()
}

fn pod(spec: &Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec})
}

fn results(p: &Policy, object: Value, op: Operation) -> Vec<(String, Status)> {
    let mut req = EvalRequest::create(Arc::new(object));
    req.operation = op;
    if op == Operation::Delete {
        req.old_object = Some(req.object.clone());
    }
    p.evaluate(&Prepared::new(req), &NoClusterData, &Bindings::default())
        .into_iter()
        .map(|r| (r.rule, r.status))
        .collect()
}

#[test]
fn autogen_rules_check_the_pod_template() {
    let p = policy(pod_rule(
        "baseline",
        json!({"level": "baseline", "version": "latest",
               "exclude": [{"controlName": "Host Ports", "images": ["nginx*"]}]}),
    ));
    let names: Vec<&str> = p.rule_names().collect();
    assert_eq!(
        names,
        vec!["baseline", "autogen-baseline", "autogen-cronjob-baseline"]
    );
    let privileged = json!({"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]});
    let host_port = json!({"containers": [{"name": "c", "image": "nginx", "ports": [{"containerPort": 80, "hostPort": 80}]}]});
    let deployment = |spec: &Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                                           "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": spec}}})
    };
    let cronjob = |spec: &Value| {
        json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c", "namespace": "default"},
                                        "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": spec}}}}})
    };
    let cases = [
        (pod(&privileged), "baseline", Status::Fail),
        (pod(&host_port), "baseline", Status::Pass),
        (deployment(&privileged), "autogen-baseline", Status::Fail),
        (deployment(&host_port), "autogen-baseline", Status::Pass),
        (
            cronjob(&privileged),
            "autogen-cronjob-baseline",
            Status::Fail,
        ),
        (
            cronjob(&host_port),
            "autogen-cronjob-baseline",
            Status::Pass,
        ),
    ];
    for (object, rule, status) in cases {
        assert_eq!(
            results(&p, object.clone(), Operation::Create),
            vec![(rule.to_string(), status)],
            "{object}"
        );
    }
    // A deleted pod is not evaluated.
    assert_eq!(
        results(&p, pod(&privileged), Operation::Delete),
        vec![("baseline".to_string(), Status::Skip)]
    );
}

#[test]
fn policy_compile_reports_the_rule_field() {
    let rule = pod_rule("r", json!({"level": "baseline", "version": "next"}));
    assert_eq!(
        invalid_field(Policy::compile(&policy_doc(rule)), "the policy"),
        "spec.rules[0].validate.podSecurity.version"
    );
}

#[test]
fn helpers() {
    assert_eq!(
        normalize("spec.containers[12].ports[3].hostPort"),
        "spec.containers[*].ports[*].hostPort"
    );
    assert_eq!(
        container_of("spec.initContainers[2].securityContext"),
        Some(("initContainers", 2))
    );
    assert_eq!(container_of("spec.volumes[0].hostPath"), None);
    assert_eq!(container_of("spec.hostIPC"), None);
    assert_eq!(
        shown_field("metadata.annotations[x]", "Pod"),
        "spec.template.metadata.annotations[x]"
    );
    assert_eq!(parse_version("v1.34"), Some(Version::Latest));
    assert_eq!(parse_version("v1.7"), Some(Version::Minor(7)));
    assert_eq!(parse_version("v1."), None);
}

fn exception(name: &str, pod_security: Option<Value>) -> Value {
    let mut doc = json!({
        "apiVersion": "kyverno.io/v2",
        "kind": "PolicyException",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "exceptions": [{"policyName": "pss", "ruleNames": ["baseline"]}],
            "match": {"any": [{"resources": {"kinds": ["Pod", "Deployment"]}}]}
        }
    });
    if let Some(p) = pod_security {
        doc["spec"]["podSecurity"] = p;
    }
    doc
}

fn engine_results(exceptions: &[Value], object: Value) -> Vec<(String, Status, String)> {
    let mut engine = crate::Engine::new();
    let rule = pod_rule(
        "baseline",
        json!({"level": "baseline", "version": "latest"}),
    );
    engine.add_json(&policy_doc(rule)).unwrap();
    for e in exceptions {
        engine.add_json(e).unwrap();
    }
    engine
        .evaluation(&NoClusterData)
        .validate(&crate::Prepared::new(EvalRequest::create(Arc::new(object))))
        .into_vec()
        .into_iter()
        .map(|r| (r.rule, r.status, r.message))
        .collect()
}

#[test]
fn policy_exceptions_exempt_the_controls_they_name() {
    let host_ipc = json!({"hostIPC": true, "containers": [{"name": "c", "image": "nginx"}]});
    let both = json!({"hostIPC": true, "containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]});
    let namespaces = exception("ns", Some(json!([{"controlName": "Host Namespaces"}])));
    let privileged = exception(
        "priv",
        Some(json!([{"controlName": "Privileged Containers", "images": ["nginx"]}])),
    );
    let whole = exception("all", None);

    let r = engine_results(std::slice::from_ref(&namespaces), pod(&host_ipc));
    assert_eq!(r[0].1, Status::Skip, "{r:?}");
    assert!(r[0].2.contains("default/ns"), "{r:?}");
    // A control the exception does not name still fails, and is the only
    // one reported.
    let r = engine_results(std::slice::from_ref(&namespaces), pod(&both));
    assert_eq!(r[0].1, Status::Fail, "{r:?}");
    assert!(
        r[0].2.contains("Forbidden reason: privileged") && !r[0].2.contains("host namespaces"),
        "{r:?}"
    );
    // Several exceptions combine their exclusions.
    let r = engine_results(&[namespaces.clone(), privileged], pod(&both));
    assert_eq!(r[0].1, Status::Skip, "{r:?}");
    assert!(r[0].2.contains("default/ns, default/priv"), "{r:?}");
    // An exception without podSecurity skips the rule whatever fails.
    let r = engine_results(&[namespaces.clone(), whole], pod(&both));
    assert_eq!(
        (r[0].1, r[0].2.as_str()),
        (
            Status::Skip,
            "rule skipped due to policy exception default/all"
        )
    );
    // A passing pod passes.
    let r = engine_results(
        std::slice::from_ref(&namespaces),
        pod(&json!({"containers": [{"name": "c"}]})),
    );
    assert_eq!(r[0].1, Status::Pass, "{r:?}");
    // The autogen rule of a controller is exempted too.
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
                        "spec": {"template": {"spec": host_ipc}}});
    let r = engine_results(std::slice::from_ref(&namespaces), deploy);
    assert_eq!(
        (r[0].0.as_str(), r[0].1),
        ("autogen-baseline", Status::Skip),
        "{r:?}"
    );
    // podSecurity exclusions are validated as a rule's are.
    let bad = exception("bad", Some(json!([{"controlName": "Capabilities"}])));
    assert_eq!(
        invalid_field(crate::Document::compile(&bad), "the exception"),
        "spec.podSecurity[0].controlName"
    );
}
