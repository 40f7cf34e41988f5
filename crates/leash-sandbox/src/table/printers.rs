//! kube-apiserver's Table cells for the built-in kinds the sandbox serves
//! (pkg/printers/internalversion/printers.go, read at Kubernetes 1.3x),
//! computed from the stored JSON; the columns are in `columns`.
//!
//! kube-apiserver prints defaulted objects; the sandbox defaults only a few
//! fields, so a cell reads an absent field as the API server's default would
//! have set it (a Deployment's `spec.replicas` 1, a Service's `spec.type`
//! ClusterIP, a Secret's `type` Opaque, a CronJob's `spec.suspend` false, a
//! Pod's phase Pending).

use std::collections::BTreeSet;
use std::time::SystemTime;

use serde_json::{Value, json};

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn len_of(v: &Value, pointer: &str) -> usize {
    match v.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s.into()
    }
}

pub(crate) fn name(v: &Value) -> &str {
    s(v, "/metadata/name")
}

fn parse_time(t: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(t.trim_end_matches('Z')).ok()
}

/// kube-apiserver's `translateTimestampSince`: `<unknown>` without a time.
pub(crate) fn age_of(t: Option<&str>, now: SystemTime) -> String {
    match t.filter(|t| !t.is_empty()).and_then(parse_time) {
        None => "<unknown>".into(),
        Some(at) => human_duration(now, at),
    }
}

fn age(v: &Value, now: SystemTime) -> Value {
    json!(age_of(
        v.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str),
        now
    ))
}

/// apimachinery's `duration.HumanDuration` of `now - at`.
fn human_duration(now: SystemTime, at: SystemTime) -> String {
    let secs = match now.duration_since(at) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    human_seconds(secs)
}

fn human_seconds(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        return match secs % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// `labels.FormatLabels`: `k=v,...` sorted, `<none>` when empty.
fn format_labels(v: Option<&Value>) -> String {
    let pairs: Vec<String> = v
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// `metav1.FormatLabelSelector`: matchLabels then expressions, `<none>` when empty.
pub(crate) fn format_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return "<none>".into();
    };
    let mut parts: Vec<String> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    for e in list(sel, "/matchExpressions") {
        let key = s(e, "/key");
        let values: BTreeSet<&str> = list(e, "/values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let values = values.into_iter().collect::<Vec<_>>().join(",");
        parts.push(match s(e, "/operator") {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({values})"),
        });
    }
    if parts.is_empty() {
        "<none>".into()
    } else {
        parts.join(",")
    }
}

/// `layoutContainerCells`: container names and images, comma-separated.
fn containers(spec: Option<&Value>) -> (Value, Value) {
    let containers = spec.map_or(&[][..], |s| list(s, "/containers"));
    let names: Vec<&str> = containers.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = containers.iter().map(|c| s(c, "/image")).collect();
    (json!(names.join(",")), json!(images.join(",")))
}

/// The cells of one row, and the row's conditions (pods that completed).
pub(crate) fn cells(
    group: &str,
    kind: &str,
    v: &Value,
    now: SystemTime,
) -> (Vec<Value>, Option<Value>) {
    let n = json!(name(v));
    let row = match (group, kind) {
        ("", "Pod") => return pod(v, now),
        ("", "Service") => service(v, now),
        ("", "Node") => node(v, now),
        ("", "Event") => event(v, now, false),
        ("events.k8s.io", "Event") => event(v, now, true),
        ("", "Namespace") => vec![n, json!(s(v, "/status/phase")), age(v, now)],
        ("", "Secret") => {
            let t = match s(v, "/type") {
                "" => "Opaque",
                t => t,
            };
            vec![n, json!(t), json!(len_of(v, "/data")), age(v, now)]
        }
        ("", "ConfigMap") => vec![
            n,
            json!(len_of(v, "/data") + len_of(v, "/binaryData")),
            age(v, now),
        ],
        ("", "ServiceAccount") => vec![n, json!(len_of(v, "/secrets")), age(v, now)],
        ("apps", "Deployment") => {
            let desired = v
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let (c, i) = containers(v.pointer("/spec/template/spec"));
            vec![
                n,
                json!(format!("{}/{desired}", int(v, "/status/readyReplicas"))),
                json!(int(v, "/status/updatedReplicas")),
                json!(int(v, "/status/availableReplicas")),
                age(v, now),
                c,
                i,
                json!(
                    match format_selector(v.pointer("/spec/selector")).as_str() {
                        "<none>" => String::new(),
                        s => s.to_string(),
                    }
                ),
            ]
        }
        ("apps", "ReplicaSet") => {
            let desired = v
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let (c, i) = containers(v.pointer("/spec/template/spec"));
            vec![
                n,
                json!(desired),
                json!(int(v, "/status/replicas")),
                json!(int(v, "/status/readyReplicas")),
                age(v, now),
                c,
                i,
                json!(format_selector(v.pointer("/spec/selector"))),
            ]
        }
        ("apps", "StatefulSet") => {
            let desired = v
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let (c, i) = containers(v.pointer("/spec/template/spec"));
            vec![
                n,
                json!(format!("{}/{desired}", int(v, "/status/readyReplicas"))),
                age(v, now),
                c,
                i,
            ]
        }
        ("apps", "DaemonSet") => {
            let (c, i) = containers(v.pointer("/spec/template/spec"));
            vec![
                n,
                json!(int(v, "/status/desiredNumberScheduled")),
                json!(int(v, "/status/currentNumberScheduled")),
                json!(int(v, "/status/numberReady")),
                json!(int(v, "/status/updatedNumberScheduled")),
                json!(int(v, "/status/numberAvailable")),
                json!(format_labels(v.pointer("/spec/template/spec/nodeSelector"))),
                age(v, now),
                c,
                i,
                json!(format_selector(v.pointer("/spec/selector"))),
            ]
        }
        ("batch", "Job") => job(v, now),
        ("batch", "CronJob") => {
            let (c, i) = containers(v.pointer("/spec/jobTemplate/spec/template/spec"));
            let last = match v
                .pointer("/status/lastScheduleTime")
                .and_then(Value::as_str)
            {
                Some(t) => age_of(Some(t), now),
                None => "<none>".into(),
            };
            let suspend = v
                .pointer("/spec/suspend")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            vec![
                n,
                json!(s(v, "/spec/schedule")),
                json!(or_none(s(v, "/spec/timeZone"))),
                json!(if suspend { "True" } else { "False" }),
                json!(len_of(v, "/status/active")),
                json!(last),
                age(v, now),
                c,
                i,
                json!(format_selector(
                    v.pointer("/spec/jobTemplate/spec/selector")
                )),
            ]
        }
        ("coordination.k8s.io", "Lease") => {
            vec![n, json!(s(v, "/spec/holderIdentity")), age(v, now)]
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration")
        | ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            vec![n, json!(len_of(v, "/webhooks")), age(v, now)]
        }
        ("rbac.authorization.k8s.io", "RoleBinding")
        | ("rbac.authorization.k8s.io", "ClusterRoleBinding") => role_binding(v, n, now),
        // The default table convertor: the creation time in RFC 3339.
        _ => vec![n, json!(s(v, "/metadata/creationTimestamp"))],
    };
    (row, None)
}

/// kube-apiserver's RoleBinding and ClusterRoleBinding row: the role as
/// `Kind/name`, then (wide) the subjects' names by kind.
fn role_binding(v: &Value, n: Value, now: SystemTime) -> Vec<Value> {
    let subjects = |kind: &str| {
        list(v, "/subjects")
            .iter()
            .filter(|x| s(x, "/kind") == kind)
            .map(|x| match (kind, s(x, "/namespace")) {
                ("ServiceAccount", ns) => format!("{ns}/{}", s(x, "/name")),
                _ => s(x, "/name").to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    vec![
        n,
        json!(format!(
            "{}/{}",
            s(v, "/roleRef/kind"),
            s(v, "/roleRef/name")
        )),
        age(v, now),
        json!(subjects("User")),
        json!(subjects("Group")),
        json!(subjects("ServiceAccount")),
    ]
}

fn job(v: &Value, now: SystemTime) -> Vec<Value> {
    let succeeded = int(v, "/status/succeeded");
    let completions = match v.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int(v, "/spec/parallelism") {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = v
        .pointer("/status/startTime")
        .and_then(Value::as_str)
        .and_then(parse_time);
    let end = v
        .pointer("/status/completionTime")
        .and_then(Value::as_str)
        .and_then(parse_time);
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(s), None) => human_duration(now, s),
        (Some(s), Some(e)) => human_duration(e, s),
    };
    let condition = |t: &str| {
        list(v, "/status/conditions")
            .iter()
            .find(|c| s(c, "/type") == t)
            .is_some_and(|c| s(c, "/status") == "True")
    };
    let status = if condition("Complete") {
        "Complete"
    } else if condition("Failed") {
        "Failed"
    } else if v.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if condition("Suspended") {
        "Suspended"
    } else if condition("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (c, i) = containers(v.pointer("/spec/template/spec"));
    vec![
        json!(name(v)),
        json!(status),
        json!(completions),
        json!(duration),
        age(v, now),
        c,
        i,
        json!(format_selector(v.pointer("/spec/selector"))),
    ]
}

fn service(v: &Value, now: SystemTime) -> Vec<Value> {
    let kind = match s(v, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    let cluster_ip = list(v, "/spec/clusterIPs")
        .first()
        .and_then(Value::as_str)
        .map_or_else(|| "<none>".to_string(), str::to_string);
    let external: Vec<&str> = list(v, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external_ip = match kind {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_string(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let lb: BTreeSet<&str> = list(v, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| match s(i, "/ip") {
                    "" => s(i, "/hostname"),
                    ip => ip,
                })
                .filter(|s| !s.is_empty())
                .collect();
            let mut all: Vec<&str> = lb.into_iter().collect();
            all.extend(external);
            if all.is_empty() {
                "<pending>".into()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(v, "/spec/externalName").to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = list(v, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = match s(p, "/protocol") {
                "" => "TCP",
                x => x,
            };
            match int(p, "/nodePort") {
                np if np > 0 => format!("{}:{np}/{protocol}", int(p, "/port")),
                _ => format!("{}/{protocol}", int(p, "/port")),
            }
        })
        .collect();
    vec![
        json!(name(v)),
        json!(kind),
        json!(cluster_ip),
        json!(external_ip),
        json!(if ports.is_empty() {
            "<none>".into()
        } else {
            ports.join(",")
        }),
        age(v, now),
        json!(format_labels(v.pointer("/spec/selector"))),
    ]
}

fn node(v: &Value, now: SystemTime) -> Vec<Value> {
    let mut status: Vec<String> = list(v, "/status/conditions")
        .iter()
        .filter(|c| s(c, "/type") == "Ready")
        .take(1)
        .map(|c| {
            if s(c, "/status") == "True" {
                "Ready".into()
            } else {
                "NotReady".into()
            }
        })
        .collect();
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if v.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let roles: BTreeSet<String> = v
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(
                    |(k, val)| match k.strip_prefix("node-role.kubernetes.io/") {
                        Some(role) if !role.is_empty() => Some(role.to_string()),
                        _ if k == "kubernetes.io/role" => {
                            val.as_str().filter(|r| !r.is_empty()).map(str::to_string)
                        }
                        _ => None,
                    },
                )
                .collect()
        })
        .unwrap_or_default();
    let address = |t: &str| {
        list(v, "/status/addresses")
            .iter()
            .find(|a| s(a, "/type") == t)
            .map_or_else(|| "<none>".to_string(), |a| s(a, "/address").to_string())
    };
    let unknown = |p: &str| match s(v, p) {
        "" => "<unknown>".to_string(),
        x => x.to_string(),
    };
    vec![
        json!(name(v)),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".into()
        } else {
            roles.into_iter().collect::<Vec<_>>().join(",")
        }),
        age(v, now),
        json!(s(v, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown("/status/nodeInfo/osImage")),
        json!(unknown("/status/nodeInfo/kernelVersion")),
        json!(unknown("/status/nodeInfo/containerRuntimeVersion")),
    ]
}

/// Both Event APIs, `events.k8s.io` read through its field names for the core ones.
fn event(v: &Value, now: SystemTime, new_api: bool) -> Vec<Value> {
    let f = |core: &str, new: &str| {
        if new_api {
            new.to_string()
        } else {
            core.to_string()
        }
    };
    let time = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
    };
    let first = match time(&f("/firstTimestamp", "/deprecatedFirstTimestamp")) {
        Some(t) => age_of(Some(t), now),
        None => age_of(time("/eventTime"), now),
    };
    let mut last = match time(&f("/lastTimestamp", "/deprecatedLastTimestamp")) {
        Some(t) => age_of(Some(t), now),
        None => first.clone(),
    };
    let mut count = int(v, &f("/count", "/deprecatedCount"));
    if let Some(series) = v.get("series").filter(|s| s.is_object()) {
        last = age_of(series.get("lastObservedTime").and_then(Value::as_str), now);
        count = int(series, "/count");
    } else if count == 0 {
        count = 1;
    }
    let obj = f("/involvedObject", "/regarding");
    let kind = s(v, &format!("{obj}/kind")).to_lowercase();
    let target = match s(v, &format!("{obj}/name")) {
        "" => kind,
        n => format!("{kind}/{n}"),
    };
    let source = f("/source", "/deprecatedSource");
    let component = match s(v, &format!("{source}/component")) {
        "" => s(v, "/reportingController"),
        c => c,
    };
    let host = match s(v, &format!("{source}/host")) {
        "" => s(v, "/reportingInstance"),
        h => h,
    };
    let source = if host.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {host}")
    };
    vec![
        json!(last),
        json!(s(v, "/type")),
        json!(s(v, "/reason")),
        json!(target),
        json!(s(v, &format!("{obj}/fieldPath"))),
        json!(source),
        json!(s(v, &f("/message", "/note")).trim()),
        json!(first),
        json!(count),
        json!(name(v)),
    ]
}

fn pod(v: &Value, now: SystemTime) -> (Vec<Value>, Option<Value>) {
    let restartable = |c: &Value| s(c, "/restartPolicy") == "Always";
    let init_containers = list(v, "/spec/initContainers");
    let total = list(v, "/spec/containers").len()
        + init_containers.iter().filter(|c| restartable(c)).count();
    let mut ready = 0;
    let mut restarts = 0;
    let mut sidecar_restarts = 0;
    let mut last_restart: Option<SystemTime> = None;
    let mut last_sidecar_restart: Option<SystemTime> = None;
    let later = |a: Option<SystemTime>, b: Option<SystemTime>| match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let finished = |c: &Value| {
        c.pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            .and_then(parse_time)
    };
    // A pod is created Pending (the API server sets it).
    let phase = match s(v, "/status/phase") {
        "" => "Pending",
        p => p,
    };
    let mut reason = match s(v, "/status/reason") {
        "" => phase.to_string(),
        r => r.to_string(),
    };
    let conditions = list(v, "/status/conditions");
    if conditions
        .iter()
        .any(|c| s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let mut initializing = false;
    let init_statuses = list(v, "/status/initContainerStatuses");
    for (i, c) in init_statuses.iter().enumerate() {
        let sidecar = init_containers
            .iter()
            .find(|ic| s(ic, "/name") == s(c, "/name"))
            .is_some_and(restartable);
        restarts += int(c, "/restartCount");
        last_restart = later(last_restart, finished(c));
        if sidecar {
            sidecar_restarts += int(c, "/restartCount");
            last_sidecar_restart = later(last_sidecar_restart, finished(c));
        }
        let terminated = c.pointer("/state/terminated");
        let waiting_reason = s(c, "/state/waiting/reason");
        if terminated.is_some() && int(c, "/state/terminated/exitCode") == 0 {
            continue;
        }
        if sidecar && c.get("started").and_then(Value::as_bool) == Some(true) {
            if c.get("ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        reason = if terminated.is_some() {
            match s(c, "/state/terminated/reason") {
                "" => match int(c, "/state/terminated/signal") {
                    0 => format!("Init:ExitCode:{}", int(c, "/state/terminated/exitCode")),
                    sig => format!("Init:Signal:{sig}"),
                },
                r => format!("Init:{r}"),
            }
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            format!("Init:{waiting_reason}")
        } else {
            format!("Init:{i}/{}", init_containers.len())
        };
        initializing = true;
        break;
    }
    let initialized = conditions
        .iter()
        .any(|c| s(c, "/type") == "Initialized" && s(c, "/status") == "True");
    if !initializing || initialized {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for c in list(v, "/status/containerStatuses").iter().rev() {
            restarts += int(c, "/restartCount");
            last_restart = later(last_restart, finished(c));
            let waiting = s(c, "/state/waiting/reason");
            let terminated = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if terminated.is_some() && !s(c, "/state/terminated/reason").is_empty() {
                reason = s(c, "/state/terminated/reason").to_string();
            } else if terminated.is_some() {
                reason = match int(c, "/state/terminated/signal") {
                    0 => format!("ExitCode:{}", int(c, "/state/terminated/exitCode")),
                    sig => format!("Signal:{sig}"),
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| s(c, "/type") == "Ready" && s(c, "/status") == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    let deleting = v.pointer("/metadata/deletionTimestamp").is_some();
    if deleting && s(v, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }
    let restarts = match last_restart {
        Some(at) if restarts != 0 => format!("{restarts} ({} ago)", human_duration(now, at)),
        _ => restarts.to_string(),
    };
    let pod_ip = list(v, "/status/podIPs")
        .first()
        .map_or("", |ip| s(ip, "/ip"));
    let gates = list(v, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_gates = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| s(c, "/type") == s(g, "/conditionType"))
                    .is_some_and(|c| s(c, "/status") == "True")
            })
            .count();
        format!("{true_gates}/{}", gates.len())
    };
    let row_conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };
    (
        vec![
            json!(name(v)),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts),
            age(v, now),
            json!(or_none(pod_ip)),
            json!(or_none(s(v, "/spec/nodeName"))),
            json!(or_none(s(v, "/status/nominatedNodeName"))),
            json!(readiness_gates),
        ],
        row_conditions,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn human_durations_match_apimachinery() {
        for (secs, want) in [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (600, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600, "8h"),
            (48 * 3600, "2d"),
            (50 * 3600, "2d2h"),
            (8 * 86400, "8d"),
            (730 * 86400, "2y"),
            (731 * 86400, "2y1d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_seconds(secs), want, "{secs}");
        }
    }

    #[test]
    fn pod_status_from_container_states() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        let created = humantime::format_rfc3339_seconds(now - Duration::from_secs(300)).to_string();
        let finished = humantime::format_rfc3339_seconds(now - Duration::from_secs(60)).to_string();
        let pod = json!({"metadata": {"name": "web-1", "creationTimestamp": created},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "node-1"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}], "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": finished}}}]}});
        let (cells, conditions) = cells("", "Pod", &pod, now);
        assert_eq!(
            cells,
            vec![
                json!("web-1"),
                json!("1/2"),
                json!("CrashLoopBackOff"),
                json!("3 (60s ago)"),
                json!("5m"),
                json!("10.0.0.7"),
                json!("node-1"),
                json!("<none>"),
                json!("<none>")
            ]
        );
        assert!(conditions.is_none());
        let pending = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
        let (cells, _) = super::cells("", "Pod", &pending, now);
        assert_eq!(
            cells[1..5],
            [
                json!("0/1"),
                json!("Pending"),
                json!("0"),
                json!("<unknown>")
            ]
        );
    }
}
