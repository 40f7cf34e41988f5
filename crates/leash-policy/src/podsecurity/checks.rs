//! The Pod Security Standards checks, as Kubernetes' pod-security-admission
//! (Kyverno's fork of it, which reports field errors) defines them: one
//! [`CheckDef`] per check ID, each with the versions of the standard it was
//! introduced or changed in.
//!
//! The checks read the pod's JSON directly (`metadata`, `spec`); a field that
//! is missing or `null` counts as unset, as it does once Go has decoded the
//! pod into its typed structs.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The pod a check reads: its metadata and its spec.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pod<'a> {
    pub(crate) meta: &'a Value,
    pub(crate) spec: &'a Value,
}

/// A field error's bad value (Go's `field.Error.BadValue`). `Str("")` is
/// the "no value" of `field.Required` / `field.Forbidden`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BadValue {
    Str(String),
    Bool(bool),
    Int(i64),
    List(Vec<String>),
}

impl BadValue {
    /// Whether there is a value to print (an empty string is none).
    fn exists(&self) -> bool {
        !matches!(self, BadValue::Str(s) if s.is_empty())
    }

    /// The value as Go's `%+v` prints it.
    fn go_fmt(&self) -> String {
        match self {
            BadValue::Str(s) => s.clone(),
            BadValue::Bool(b) => b.to_string(),
            BadValue::Int(i) => i.to_string(),
            BadValue::List(l) => format!("[{}]", l.join(" ")),
        }
    }

    /// The values an exclusion's `values` are matched against (Kyverno's
    /// `extractBadValues`): none for an empty string.
    pub(crate) fn values(&self) -> Vec<String> {
        match self {
            BadValue::Str(s) if s.is_empty() => Vec::new(),
            BadValue::Str(s) => vec![s.clone()],
            BadValue::Bool(b) => vec![b.to_string()],
            BadValue::Int(i) => vec![i.to_string()],
            BadValue::List(l) => l.clone(),
        }
    }
}

/// The type of a field error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrKind {
    Required,
    Forbidden,
}

/// One restricted field a pod sets badly (or does not set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldErr {
    pub(crate) kind: ErrKind,
    /// The field's path from the pod (`spec.containers[0].securityContext.privileged`).
    pub(crate) field: String,
    pub(crate) bad: BadValue,
}

impl FieldErr {
    fn required(field: String) -> FieldErr {
        FieldErr {
            kind: ErrKind::Required,
            field,
            bad: BadValue::Str(String::new()),
        }
    }

    fn forbidden(field: String, bad: BadValue) -> FieldErr {
        FieldErr {
            kind: ErrKind::Forbidden,
            field,
            bad,
        }
    }

    /// As Kyverno prints it in a podSecurity message, with `field` the path
    /// shown (rewritten for pod controllers).
    pub(crate) fn display(&self, field: &str) -> String {
        match self.kind {
            ErrKind::Forbidden if self.bad.exists() => format!(
                "{field} is forbidden, forbidden values found: {}",
                self.bad.go_fmt()
            ),
            ErrKind::Forbidden => format!("{field}: Forbidden"),
            ErrKind::Required => format!("{field}: Required value"),
        }
    }
}

/// A check that did not allow the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) reason: String,
    pub(crate) detail: String,
    pub(crate) errs: Vec<FieldErr>,
}

/// One version of a check: it applies from `1.<min>` on.
#[derive(Debug)]
pub(crate) struct VersionedCheck {
    pub(crate) min: u32,
    pub(crate) run: fn(&Pod<'_>) -> Option<Verdict>,
}

/// A check of the standard.
#[derive(Debug)]
pub(crate) struct CheckDef {
    pub(crate) id: &'static str,
    /// Restricted-level (else baseline).
    pub(crate) restricted: bool,
    /// In increasing `min` order.
    pub(crate) versions: &'static [VersionedCheck],
}

const fn v(min: u32, run: fn(&Pod<'_>) -> Option<Verdict>) -> VersionedCheck {
    VersionedCheck { min, run }
}

/// Every check, in the order pod-security-admission registers them (its
/// source files' order), which is the order Kyverno reports them in.
pub(crate) const CHECKS: &[CheckDef] = &[
    CheckDef {
        id: "allowPrivilegeEscalation",
        restricted: true,
        versions: &[
            v(8, allow_privilege_escalation),
            v(25, allow_privilege_escalation_1_25),
        ],
    },
    CheckDef {
        id: "appArmorProfile",
        restricted: false,
        versions: &[v(0, app_armor_profile)],
    },
    CheckDef {
        id: "capabilities_baseline",
        restricted: false,
        versions: &[v(0, capabilities_baseline)],
    },
    CheckDef {
        id: "capabilities_restricted",
        restricted: true,
        versions: &[
            v(22, capabilities_restricted),
            v(25, capabilities_restricted_1_25),
        ],
    },
    CheckDef {
        id: "hostNamespaces",
        restricted: false,
        versions: &[v(0, host_namespaces)],
    },
    CheckDef {
        id: "hostPathVolumes",
        restricted: false,
        versions: &[v(0, host_path_volumes)],
    },
    CheckDef {
        id: "hostPorts",
        restricted: false,
        versions: &[v(0, host_ports)],
    },
    CheckDef {
        id: "hostProbesAndHostLifecycle",
        restricted: false,
        versions: &[v(34, host_probes_and_lifecycle)],
    },
    CheckDef {
        id: "privileged",
        restricted: false,
        versions: &[v(0, privileged)],
    },
    CheckDef {
        id: "procMount",
        restricted: false,
        versions: &[v(0, proc_mount)],
    },
    CheckDef {
        id: "restrictedVolumes",
        restricted: true,
        versions: &[v(0, restricted_volumes)],
    },
    CheckDef {
        id: "runAsNonRoot",
        restricted: true,
        versions: &[v(0, run_as_non_root)],
    },
    CheckDef {
        id: "runAsUser",
        restricted: true,
        versions: &[v(23, run_as_user)],
    },
    CheckDef {
        id: "seLinuxOptions",
        restricted: false,
        versions: &[v(0, se_linux_options_1_0), v(31, se_linux_options_1_31)],
    },
    CheckDef {
        id: "seccompProfile_baseline",
        restricted: false,
        versions: &[v(0, seccomp_annotations), v(19, seccomp_baseline)],
    },
    CheckDef {
        id: "seccompProfile_restricted",
        restricted: true,
        versions: &[v(19, seccomp_restricted), v(25, seccomp_restricted_1_25)],
    },
    CheckDef {
        id: "sysctls",
        restricted: false,
        versions: &[
            v(0, sysctls_1_0),
            v(27, sysctls_1_27),
            v(29, sysctls_1_29),
            v(32, sysctls_1_32),
        ],
    },
    CheckDef {
        id: "windowsHostProcess",
        restricted: false,
        versions: &[v(0, windows_host_process)],
    },
];

// ---- reading the pod ------------------------------------------------------

/// The value at `path`, None when missing or null.
fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    (!cur.is_null()).then_some(cur)
}

fn flag(v: &Value, path: &[&str]) -> Option<bool> {
    at(v, path)?.as_bool()
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path)?.as_str()
}

fn strings<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// One container of any kind, with the path to it.
struct Container<'a> {
    v: &'a Value,
    path: String,
    name: &'a str,
}

impl Container<'_> {
    fn field(&self, rest: &str) -> String {
        format!("{}.{rest}", self.path)
    }
}

/// Init containers, containers, then ephemeral containers (the visiting
/// order of pod-security-admission).
fn containers(spec: &Value) -> Vec<Container<'_>> {
    let mut out = Vec::new();
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(list) = spec.get(key).and_then(Value::as_array) {
            for (i, c) in list.iter().enumerate() {
                out.push(Container {
                    v: c,
                    path: format!("spec.{key}[{i}]"),
                    name: c.get("name").and_then(Value::as_str).unwrap_or(""),
                });
            }
        }
    }
    out
}

fn is_windows(spec: &Value) -> bool {
    text(spec, &["os", "name"]) == Some("windows")
}

fn plural(singular: &str, plural: &str, n: usize) -> String {
    if n == 1 { singular } else { plural }.to_string()
}

fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

/// Go's `%q` for the simple strings annotations hold.
fn go_quote(s: &str) -> String {
    format!("{s:?}")
}

/// Who set a field badly, and the errors for it (pod-security-admission's
/// `Violations`).
#[derive(Default)]
struct Violations {
    data: Vec<String>,
    errs: Vec<FieldErr>,
}

impl Violations {
    fn add(&mut self, data: impl Into<String>, errs: impl IntoIterator<Item = FieldErr>) {
        self.data.push(data.into());
        self.errs.extend(errs);
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn len(&self) -> usize {
        self.data.len()
    }

    fn containers(&self) -> String {
        format!(
            "{} {}",
            plural("container", "containers", self.len()),
            join_quote(&self.data)
        )
    }
}

fn verdict(reason: &str, detail: String, errs: Vec<FieldErr>) -> Option<Verdict> {
    Some(Verdict {
        reason: reason.to_string(),
        detail,
        errs,
    })
}

// ---- the checks -----------------------------------------------------------

fn allow_privilege_escalation(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    for c in containers(pod.spec) {
        let f = c.field("securityContext.allowPrivilegeEscalation");
        match at(c.v, &["securityContext"]) {
            None => bad.add(c.name, [FieldErr::required(f)]),
            Some(sc) => match flag(sc, &["allowPrivilegeEscalation"]) {
                None => bad.add(
                    c.name,
                    [FieldErr::forbidden(f, BadValue::Str("nil".into()))],
                ),
                Some(true) => bad.add(c.name, [FieldErr::forbidden(f, BadValue::Bool(true))]),
                Some(false) => {}
            },
        }
    }
    if bad.is_empty() {
        return None;
    }
    verdict(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            bad.containers()
        ),
        bad.errs,
    )
}

fn allow_privilege_escalation_1_25(pod: &Pod<'_>) -> Option<Verdict> {
    if is_windows(pod.spec) {
        return None;
    }
    allow_privilege_escalation(pod)
}

const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn app_armor_profile(pod: &Pod<'_>) -> Option<Verdict> {
    let allowed_type = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut setters = Violations::default();
    let mut bad_values = BTreeSet::new();
    if let Some(p) = at(pod.spec, &["securityContext", "appArmorProfile"]) {
        let t = p.get("type").and_then(Value::as_str).unwrap_or("");
        if !allowed_type(t) {
            setters.add(
                "pod",
                [FieldErr::forbidden(
                    "spec.securityContext.appArmorProfile.type".into(),
                    BadValue::Str(t.into()),
                )],
            );
            bad_values.insert(t.to_string());
        }
    }
    let mut bad_containers = Violations::default();
    for c in containers(pod.spec) {
        if let Some(p) = at(c.v, &["securityContext", "appArmorProfile"]) {
            let t = p.get("type").and_then(Value::as_str).unwrap_or("");
            if !allowed_type(t) {
                bad_containers.add(
                    c.name,
                    [FieldErr::forbidden(
                        c.field("securityContext.appArmorProfile.type"),
                        BadValue::Str(t.into()),
                    )],
                );
                bad_values.insert(t.to_string());
            }
        }
    }
    if !bad_containers.is_empty() {
        let who = bad_containers.containers();
        setters.add(who, bad_containers.errs);
    }
    let mut annotations = Violations::default();
    if let Some(m) = at(pod.meta, &["annotations"]).and_then(Value::as_object) {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for k in keys {
            let Some(v) = m[k].as_str() else { continue };
            let allowed = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            if k.starts_with(APPARMOR_ANNOTATION_PREFIX) && !allowed {
                annotations.add(
                    format!("{k}={}", go_quote(v)),
                    [FieldErr::forbidden(
                        format!("metadata.annotations[{k}]"),
                        BadValue::Str(v.into()),
                    )],
                );
            }
        }
    }
    let mut bad_list: Vec<String> = bad_values.into_iter().collect();
    if !annotations.is_empty() {
        let mut data = annotations.data.clone();
        data.sort();
        bad_list.extend(data);
        let who = plural("annotation", "annotations", annotations.len());
        setters.add(who, annotations.errs);
    }
    if setters.is_empty() {
        return None;
    }
    verdict(
        &plural(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            bad_list.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.data.join(" and "),
            join_quote(&bad_list)
        ),
        setters.errs,
    )
}

const CAPABILITIES_BASELINE: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_baseline(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    let mut all = BTreeSet::new();
    for c in containers(pod.spec) {
        let Some(caps) = at(c.v, &["securityContext", "capabilities"]) else {
            continue;
        };
        let forbidden: BTreeSet<String> = strings(caps, "add")
            .into_iter()
            .filter(|a| !CAPABILITIES_BASELINE.contains(a))
            .map(String::from)
            .collect();
        if !forbidden.is_empty() {
            all.extend(forbidden.iter().cloned());
            bad.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.capabilities.add"),
                    BadValue::List(forbidden.into_iter().collect()),
                )],
            );
        }
    }
    if bad.is_empty() {
        return None;
    }
    let all: Vec<String> = all.into_iter().collect();
    verdict(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            bad.containers(),
            join_quote(&all)
        ),
        bad.errs,
    )
}

fn capabilities_restricted(pod: &Pod<'_>) -> Option<Verdict> {
    let mut missing_drop = Violations::default();
    let mut adding = Violations::default();
    let mut all = BTreeSet::new();
    for c in containers(pod.spec) {
        let drop_field = c.field("securityContext.capabilities.drop");
        let Some(caps) = at(c.v, &["securityContext", "capabilities"]) else {
            missing_drop.add(c.name, [FieldErr::required(drop_field)]);
            continue;
        };
        let drop = strings(caps, "drop");
        if !drop.contains(&"ALL") {
            if drop.is_empty() {
                missing_drop.add(c.name, [FieldErr::required(drop_field)]);
            } else {
                let values: BTreeSet<String> = drop.iter().map(|s| s.to_string()).collect();
                missing_drop.add(
                    c.name,
                    [FieldErr::forbidden(
                        drop_field,
                        BadValue::List(values.into_iter().collect()),
                    )],
                );
            }
        }
        let forbidden: BTreeSet<String> = strings(caps, "add")
            .into_iter()
            .filter(|a| *a != "NET_BIND_SERVICE")
            .map(String::from)
            .collect();
        if !forbidden.is_empty() {
            all.extend(forbidden.iter().cloned());
            adding.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.capabilities.add"),
                    BadValue::List(forbidden.into_iter().collect()),
                )],
            );
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            missing_drop.containers()
        ));
    }
    if !adding.is_empty() {
        let all: Vec<String> = all.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            adding.containers(),
            join_quote(&all)
        ));
    }
    if details.is_empty() {
        return None;
    }
    let mut errs = missing_drop.errs;
    errs.extend(adding.errs);
    verdict("unrestricted capabilities", details.join("; "), errs)
}

fn capabilities_restricted_1_25(pod: &Pod<'_>) -> Option<Verdict> {
    if is_windows(pod.spec) {
        return None;
    }
    capabilities_restricted(pod)
}

fn host_namespaces(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        if flag(pod.spec, &[key]) == Some(true) {
            bad.add(
                format!("{key}=true"),
                [FieldErr::forbidden(
                    format!("spec.{key}"),
                    BadValue::Bool(true),
                )],
            );
        }
    }
    if bad.is_empty() {
        return None;
    }
    verdict("host namespaces", bad.data.join(", "), bad.errs)
}

fn volumes(spec: &Value) -> impl Iterator<Item = (usize, &Value)> {
    spec.get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

fn host_path_volumes(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    for (i, vol) in volumes(pod.spec) {
        if at(vol, &["hostPath"]).is_some() {
            let name = vol.get("name").and_then(Value::as_str).unwrap_or("");
            bad.add(
                name,
                [FieldErr::forbidden(
                    format!("spec.volumes[{i}].hostPath"),
                    BadValue::Str(String::new()),
                )],
            );
        }
    }
    if bad.is_empty() {
        return None;
    }
    verdict(
        "hostPath volumes",
        format!(
            "{} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad.data)
        ),
        bad.errs,
    )
}

fn host_ports(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    let mut ports = BTreeSet::new();
    for c in containers(pod.spec) {
        let mut errs = Vec::new();
        if let Some(list) = c.v.get("ports").and_then(Value::as_array) {
            for (i, p) in list.iter().enumerate() {
                let hp = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
                if hp != 0 {
                    ports.insert(hp.to_string());
                    errs.push(FieldErr::forbidden(
                        c.field(&format!("ports[{i}].hostPort")),
                        BadValue::Int(hp),
                    ));
                }
            }
        }
        if !errs.is_empty() {
            bad.add(c.name, errs);
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    verdict(
        "hostPort",
        format!(
            "{} {} {} {}",
            bad.containers(),
            plural("uses", "use", bad.len()),
            plural("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
        bad.errs,
    )
}

fn host_probes_and_lifecycle(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad_containers = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    let mut errs = Vec::new();
    for c in containers(pod.spec) {
        let handlers = [
            ("livenessProbe", at(c.v, &["livenessProbe"])),
            ("readinessProbe", at(c.v, &["readinessProbe"])),
            ("startupProbe", at(c.v, &["startupProbe"])),
            ("lifecycle.postStart", at(c.v, &["lifecycle", "postStart"])),
            ("lifecycle.preStop", at(c.v, &["lifecycle", "preStop"])),
        ];
        for (name, handler) in handlers {
            let Some(handler) = handler else { continue };
            for kind in ["httpGet", "tcpSocket"] {
                let host = text(handler, &[kind, "host"]).unwrap_or("");
                if !host.is_empty() {
                    bad_containers.insert(c.name.to_string());
                    hosts.insert(host.to_string());
                    errs.push(FieldErr::forbidden(
                        c.field(&format!("{name}.{kind}.host")),
                        BadValue::Str(host.into()),
                    ));
                }
            }
        }
    }
    if bad_containers.is_empty() {
        return None;
    }
    let names: Vec<String> = bad_containers.into_iter().collect();
    let hosts: Vec<String> = hosts.into_iter().collect();
    verdict(
        "probe or lifecycle host",
        format!(
            "{} {} {} {} {}",
            plural("container", "containers", names.len()),
            join_quote(&names),
            plural("uses", "use", names.len()),
            plural(
                "probe or lifecycle host",
                "probe or lifecycle hosts",
                hosts.len()
            ),
            join_quote(&hosts)
        ),
        errs,
    )
}

fn privileged(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    for c in containers(pod.spec) {
        if flag(c.v, &["securityContext", "privileged"]) == Some(true) {
            bad.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.privileged"),
                    BadValue::Bool(true),
                )],
            );
        }
    }
    if bad.is_empty() {
        return None;
    }
    verdict(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            bad.containers()
        ),
        bad.errs,
    )
}

fn proc_mount(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    let mut types = BTreeSet::new();
    for c in containers(pod.spec) {
        if let Some(pm) = text(c.v, &["securityContext", "procMount"])
            && pm != "Default"
        {
            types.insert(pm.to_string());
            bad.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.procMount"),
                    BadValue::Str(pm.into()),
                )],
            );
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    verdict(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            bad.containers(),
            join_quote(&types)
        ),
        bad.errs,
    )
}

/// The volume sources the restricted profile allows.
const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The other volume sources, in the order pod-security-admission names
/// the first one a volume uses.
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(pod: &Pod<'_>) -> Option<Verdict> {
    let mut bad = Violations::default();
    let mut types = BTreeSet::new();
    for (i, vol) in volumes(pod.spec) {
        if ALLOWED_VOLUME_SOURCES
            .iter()
            .any(|s| at(vol, &[s]).is_some())
        {
            continue;
        }
        let source = RESTRICTED_VOLUME_SOURCES
            .iter()
            .find(|s| at(vol, &[s]).is_some())
            .copied()
            .unwrap_or("unknown");
        types.insert(source);
        let name = vol.get("name").and_then(Value::as_str).unwrap_or("");
        bad.add(
            name,
            [FieldErr::forbidden(
                format!("spec.volumes[{i}].{source}"),
                BadValue::Str(String::new()),
            )],
        );
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<&str> = types.into_iter().collect();
    verdict(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            plural("volume", "volumes", bad.len()),
            join_quote(&bad.data),
            plural("uses", "use", bad.len()),
            plural(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
        bad.errs,
    )
}

fn run_as_non_root(pod: &Pod<'_>) -> Option<Verdict> {
    let mut setters = Violations::default();
    let mut pod_non_root = false;
    match flag(pod.spec, &["securityContext", "runAsNonRoot"]) {
        Some(false) => setters.add(
            "pod",
            [FieldErr::forbidden(
                "spec.securityContext.runAsNonRoot".into(),
                BadValue::Bool(false),
            )],
        ),
        Some(true) => pod_non_root = true,
        None => {}
    }
    let mut explicit = Violations::default();
    let mut implicit = Violations::default();
    for c in containers(pod.spec) {
        let f = c.field("securityContext.runAsNonRoot");
        match flag(c.v, &["securityContext", "runAsNonRoot"]) {
            Some(false) => explicit.add(c.name, [FieldErr::forbidden(f, BadValue::Bool(false))]),
            Some(true) => {}
            None if !pod_non_root => implicit.add(c.name, [FieldErr::required(f)]),
            None => {}
        }
    }
    if !explicit.is_empty() {
        let who = explicit.containers();
        setters.add(who, explicit.errs);
    }
    let mut details = Vec::new();
    let mut errs = Vec::new();
    if !setters.is_empty() {
        details.push(format!(
            "{} must not set securityContext.runAsNonRoot=false",
            setters.data.join(" and ")
        ));
        errs.extend(setters.errs);
    }
    if !implicit.is_empty() {
        details.push(format!(
            "pod or {} must set securityContext.runAsNonRoot=true",
            implicit.containers()
        ));
        errs.extend(implicit.errs);
    }
    if details.is_empty() {
        return None;
    }
    verdict("runAsNonRoot != true", details.join("\n"), errs)
}

fn run_as_user(pod: &Pod<'_>) -> Option<Verdict> {
    let mut setters = Violations::default();
    let zero =
        |v: &Value| at(v, &["securityContext", "runAsUser"]).and_then(Value::as_i64) == Some(0);
    if zero(pod.spec) {
        setters.add(
            "pod",
            [FieldErr::forbidden(
                "spec.securityContext.runAsUser".into(),
                BadValue::Int(0),
            )],
        );
    }
    let mut explicit = Violations::default();
    for c in containers(pod.spec) {
        if zero(c.v) {
            explicit.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.runAsUser"),
                    BadValue::Int(0),
                )],
            );
        }
    }
    if !explicit.is_empty() {
        let who = explicit.containers();
        setters.add(who, explicit.errs);
    }
    if setters.is_empty() {
        return None;
    }
    verdict(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.data.join(" and ")),
        setters.errs,
    )
}

const SELINUX_TYPES_1_0: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t"];
const SELINUX_TYPES_1_31: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn se_linux_options_1_0(pod: &Pod<'_>) -> Option<Verdict> {
    se_linux_options(pod, SELINUX_TYPES_1_0)
}

fn se_linux_options_1_31(pod: &Pod<'_>) -> Option<Verdict> {
    se_linux_options(pod, SELINUX_TYPES_1_31)
}

fn se_linux_options(pod: &Pod<'_>, allowed: &[&str]) -> Option<Verdict> {
    let mut setters = Violations::default();
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    // The errors of one seLinuxOptions block under `prefix`.
    let mut check = |opts: &Value, prefix: &str| -> Vec<FieldErr> {
        let mut errs = Vec::new();
        let t = opts.get("type").and_then(Value::as_str).unwrap_or("");
        if !allowed.contains(&t) {
            bad_types.insert(t.to_string());
            errs.push(FieldErr::forbidden(
                format!("{prefix}.securityContext.seLinuxOptions.type"),
                BadValue::Str(t.into()),
            ));
        }
        for (key, seen) in [("user", &mut set_user), ("role", &mut set_role)] {
            let value = opts.get(key).and_then(Value::as_str).unwrap_or("");
            if !value.is_empty() {
                *seen = true;
                errs.push(FieldErr::forbidden(
                    format!("{prefix}.securityContext.seLinuxOptions.{key}"),
                    BadValue::Str(value.into()),
                ));
            }
        }
        errs
    };
    if let Some(opts) = at(pod.spec, &["securityContext", "seLinuxOptions"]) {
        let errs = check(opts, "spec");
        if !errs.is_empty() {
            setters.add("pod", errs);
        }
    }
    let mut bad_containers = Violations::default();
    for c in containers(pod.spec) {
        if let Some(opts) = at(c.v, &["securityContext", "seLinuxOptions"]) {
            let errs = check(opts, &c.path);
            if !errs.is_empty() {
                bad_containers.add(c.name, errs);
            }
        }
    }
    if !bad_containers.is_empty() {
        let who = bad_containers.containers();
        setters.add(who, bad_containers.errs);
    }
    if setters.is_empty() {
        return None;
    }
    let mut bad_data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        bad_data.push(format!(
            "{} {}",
            plural("type", "types", types.len()),
            join_quote(&types)
        ));
    }
    if set_user {
        bad_data.push("user may not be set".to_string());
    }
    if set_role {
        bad_data.push("role may not be set".to_string());
    }
    verdict(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.data.join(" and "),
            bad_data.join("; ")
        ),
        setters.errs,
    )
}

fn valid_seccomp(t: &str) -> bool {
    t == "Localhost" || t == "RuntimeDefault"
}

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_ANNOTATION_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// Before v1.19: the seccomp alpha annotations.
fn seccomp_annotations(pod: &Pod<'_>) -> Option<Verdict> {
    let valid =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let annotation = |k: &str| text(pod.meta, &["annotations", k]);
    // Forbidden value (`key="value"`) -> its errors, sorted by value.
    let mut found: BTreeMap<String, Vec<FieldErr>> = BTreeMap::new();
    let mut note = |key: &str| {
        if let Some(val) = annotation(key)
            && !valid(val)
        {
            found
                .entry(format!("{key}={}", go_quote(val)))
                .or_default()
                .push(FieldErr::forbidden(
                    format!("metadata.annotations[{key}]"),
                    BadValue::Str(val.into()),
                ));
        }
    };
    note(SECCOMP_POD_ANNOTATION);
    for c in containers(pod.spec) {
        note(&format!("{SECCOMP_CONTAINER_ANNOTATION_PREFIX}{}", c.name));
    }
    if found.is_empty() {
        return None;
    }
    let mut bad = Violations::default();
    for (value, errs) in found {
        bad.add(value, errs);
    }
    verdict(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            plural("annotation", "annotations", bad.len()),
            bad.data.join(", ")
        ),
        bad.errs,
    )
}

fn seccomp_type(v: &Value) -> Option<&str> {
    at(v, &["securityContext", "seccompProfile"])
        .map(|p| p.get("type").and_then(Value::as_str).unwrap_or(""))
}

fn seccomp_baseline(pod: &Pod<'_>) -> Option<Verdict> {
    let mut setters = Violations::default();
    let mut bad_values = BTreeSet::new();
    if let Some(t) = seccomp_type(pod.spec)
        && !valid_seccomp(t)
    {
        setters.add(
            "pod",
            [FieldErr::forbidden(
                "spec.securityContext.seccompProfile.type".into(),
                BadValue::Str(t.into()),
            )],
        );
        bad_values.insert(t.to_string());
    }
    let mut explicit = Violations::default();
    for c in containers(pod.spec) {
        if let Some(t) = seccomp_type(c.v)
            && !valid_seccomp(t)
        {
            explicit.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.seccompProfile.type"),
                    BadValue::Str(t.into()),
                )],
            );
            bad_values.insert(t.to_string());
        }
    }
    if !explicit.is_empty() {
        let who = explicit.containers();
        setters.add(who, explicit.errs);
    }
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = bad_values.into_iter().collect();
    verdict(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.data.join(" and "),
            join_quote(&values)
        ),
        setters.errs,
    )
}

fn seccomp_restricted(pod: &Pod<'_>) -> Option<Verdict> {
    let mut setters = Violations::default();
    let mut bad_values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(t) = seccomp_type(pod.spec) {
        if valid_seccomp(t) {
            pod_set = true;
        } else {
            setters.add(
                "pod",
                [FieldErr::forbidden(
                    "spec.securityContext.seccompProfile.type".into(),
                    BadValue::Str(t.into()),
                )],
            );
            bad_values.insert(t.to_string());
        }
    }
    let mut explicit = Violations::default();
    let mut implicit = Violations::default();
    for c in containers(pod.spec) {
        let f = c.field("securityContext.seccompProfile.type");
        match seccomp_type(c.v) {
            Some(t) if !valid_seccomp(t) => {
                explicit.add(c.name, [FieldErr::forbidden(f, BadValue::Str(t.into()))]);
                bad_values.insert(t.to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.add(c.name, [FieldErr::required(f)]),
            None => {}
        }
    }
    if !explicit.is_empty() {
        let who = explicit.containers();
        setters.add(who, explicit.errs);
    }
    if !setters.is_empty() {
        let values: Vec<String> = bad_values.into_iter().collect();
        return verdict(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.data.join(" and "),
                join_quote(&values)
            ),
            setters.errs,
        );
    }
    if !implicit.is_empty() {
        return verdict(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                implicit.containers()
            ),
            implicit.errs,
        );
    }
    None
}

fn seccomp_restricted_1_25(pod: &Pod<'_>) -> Option<Verdict> {
    if is_windows(pod.spec) {
        return None;
    }
    seccomp_restricted(pod)
}

const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

fn sysctls_1_0(pod: &Pod<'_>) -> Option<Verdict> {
    sysctls(pod, &[SYSCTLS_1_0])
}

fn sysctls_1_27(pod: &Pod<'_>) -> Option<Verdict> {
    sysctls(pod, &[SYSCTLS_1_0, SYSCTLS_1_27])
}

fn sysctls_1_29(pod: &Pod<'_>) -> Option<Verdict> {
    sysctls(pod, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}

fn sysctls_1_32(pod: &Pod<'_>) -> Option<Verdict> {
    sysctls(
        pod,
        &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32],
    )
}

fn sysctls(pod: &Pod<'_>, allowed: &[&[&str]]) -> Option<Verdict> {
    let mut bad = Violations::default();
    let list = at(pod.spec, &["securityContext", "sysctls"]).and_then(Value::as_array);
    for (i, s) in list.into_iter().flatten().enumerate() {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        if !allowed.iter().any(|set| set.contains(&name)) {
            bad.add(
                name,
                [FieldErr::forbidden(
                    format!("spec.securityContext.sysctls[{i}].name"),
                    BadValue::Str(name.into()),
                )],
            );
        }
    }
    if bad.is_empty() {
        return None;
    }
    verdict("forbidden sysctls", bad.data.join(", "), bad.errs)
}

fn windows_host_process(pod: &Pod<'_>) -> Option<Verdict> {
    let host_process =
        |v: &Value| flag(v, &["securityContext", "windowsOptions", "hostProcess"]) == Some(true);
    let mut containers_bad = Violations::default();
    for c in containers(pod.spec) {
        if host_process(c.v) {
            containers_bad.add(
                c.name,
                [FieldErr::forbidden(
                    c.field("securityContext.windowsOptions.hostProcess"),
                    BadValue::Bool(true),
                )],
            );
        }
    }
    let mut setters = Violations::default();
    if host_process(pod.spec) {
        setters.add(
            "pod",
            [FieldErr::forbidden(
                "spec.securityContext.windowsOptions.hostProcess".into(),
                BadValue::Bool(true),
            )],
        );
    }
    if !containers_bad.is_empty() {
        let who = containers_bad.containers();
        setters.add(who, containers_bad.errs);
    }
    if setters.is_empty() {
        return None;
    }
    verdict(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.data.join(" and ")
        ),
        setters.errs,
    )
}
