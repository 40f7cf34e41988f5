//! `validate.podSecurity`: a Pod Security Standards profile (`level`,
//! `version`) applied to a pod, or to the pod template of a pod controller,
//! with Kyverno's per-control exemptions (`exclude`).
//!
//! As Kyverno (`pkg/pss`): every check of the level is run (a restricted
//! profile runs the baseline checks too, including those a restricted check
//! would override in pod-security-admission); `latest` runs the newest
//! version of each check, `v1.X` every version introduced at or before it.
//! An exclusion is evaluated on a reduced pod, and each field error it
//! reports for one of its control's checks removes the matching field error
//! of the full pod; a check with no field errors left no longer fails:
//!
//! - without `images` (pod-level controls): the pod with one empty
//!   container in place of its containers, so pod-level fields match;
//! - with `images`: a pod holding only the containers whose image matches
//!   one of them (wildcards), no pod-level fields; a container field error
//!   matches the same field of the container of the same name;
//! - `restrictedField` narrows the exclusion to one field (indices written
//!   `[*]`), `values` to bad values that each match one of them.
//!
//! Compiled once ([`PodSecurity::compile`]); evaluation is pure.

mod checks;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value, json};

use crate::error::Result;
use crate::model::nullable;
use crate::policy::ErrFn;
use crate::result::Status;
use crate::wildcard;

use checks::{CHECKS, FieldErr, Pod, Verdict};

/// The newest version of the standard the checks know (`latest`).
const LATEST_MINOR: u32 = 34;

/// Control names (as `exclude[].controlName` spells them) and the check IDs
/// each covers.
const CONTROLS: &[(&str, &[&str])] = &[
    (
        "Capabilities",
        &["capabilities_baseline", "capabilities_restricted"],
    ),
    (
        "Seccomp",
        &["seccompProfile_baseline", "seccompProfile_restricted"],
    ),
    ("Privileged Containers", &["privileged"]),
    ("Host Ports", &["hostPorts"]),
    ("/proc Mount Type", &["procMount"]),
    (
        "Host Probes / Lifecycle Hooks",
        &["hostProbesAndHostLifecycle"],
    ),
    ("HostProcess", &["windowsHostProcess"]),
    ("SELinux", &["seLinuxOptions"]),
    ("Host Namespaces", &["hostNamespaces"]),
    ("HostPath Volumes", &["hostPathVolumes"]),
    ("Sysctls", &["sysctls"]),
    ("AppArmor", &["appArmorProfile"]),
    ("Privilege Escalation", &["allowPrivilegeEscalation"]),
    ("Running as Non-root", &["runAsNonRoot"]),
    ("Running as Non-root user", &["runAsUser"]),
    ("Volume Types", &["restrictedVolumes"]),
];

/// Controls whose restricted fields are all container fields: an exclusion
/// of one must name `images`.
const CONTAINER_LEVEL_CONTROLS: &[&str] = &[
    "Capabilities",
    "Privileged Containers",
    "Host Ports",
    "/proc Mount Type",
    "Privilege Escalation",
    "Host Probes / Lifecycle Hooks",
];

/// Controls whose restricted fields are all pod fields: an exclusion of one
/// must not name `images`.
const POD_LEVEL_CONTROLS: &[&str] = &[
    "Host Namespaces",
    "HostPath Volumes",
    "Sysctls",
    "Volume Types",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Privileged,
    Baseline,
    Restricted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    Latest,
    /// `v1.<minor>`
    Minor(u32),
}

/// One `exclude` entry (of a rule, or of a PolicyException's `podSecurity`).
#[derive(Debug, Clone)]
pub(crate) struct Exclude {
    control: String,
    images: Vec<String>,
    restricted_field: String,
    values: Vec<String>,
}

/// A compiled `validate.podSecurity`.
#[derive(Debug)]
pub(crate) struct PodSecurity {
    /// `level` and `version` as written (the message quotes them).
    level_text: String,
    version_text: String,
    level: Level,
    version: Version,
    excludes: Vec<Exclude>,
}

/// What a podSecurity rule gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Pass(String),
    Fail(String),
    Error(String),
    /// It failed, and PolicyExceptions exempt every check that failed.
    Exempt,
}

/// A check that failed, by ID.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    id: &'static str,
    verdict: Verdict,
}

fn parse_version(s: &str) -> Option<Version> {
    if s.is_empty() || s == "latest" {
        return Some(Version::Latest);
    }
    let minor = s.strip_prefix("v1.")?;
    if minor.is_empty()
        || !minor.bytes().all(|b| b.is_ascii_digit())
        || (minor.len() > 1 && minor.starts_with('0'))
    {
        return None;
    }
    let minor: u32 = minor.parse().ok()?;
    // The newest version compares equal to `latest` (Kyverno runs only the
    // newest version of each check for it).
    Some(if minor == LATEST_MINOR {
        Version::Latest
    } else {
        Version::Minor(minor)
    })
}

/// A `validate.podSecurity` block as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default)]
pub(crate) struct PodSecurityDoc {
    #[serde(deserialize_with = "nullable")]
    level: String,
    #[serde(deserialize_with = "nullable")]
    version: String,
    #[serde(deserialize_with = "nullable")]
    exclude: Vec<ExcludeDoc>,
}

/// One exclusion as written (a rule's `exclude`, a PolicyException's
/// `podSecurity`).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub(crate) struct ExcludeDoc {
    control_name: Option<String>,
    #[serde(deserialize_with = "nullable")]
    images: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    restricted_field: String,
    #[serde(deserialize_with = "nullable")]
    values: Vec<String>,
}

/// Checks a list of Pod Security Standards exclusions (`exclude` of a
/// rule, `podSecurity` of a PolicyException); `field` is its path.
pub(crate) fn parse_excludes(
    list: &[ExcludeDoc],
    field: &str,
    err: &ErrFn<'_>,
) -> Result<Vec<Exclude>> {
    let mut excludes = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let ef = format!("{field}[{i}]");
        let Some(control) = e.control_name.as_deref() else {
            return Err(err(format!("{ef}.controlName"), "is required".into()));
        };
        if !CONTROLS.iter().any(|(name, _)| *name == control) {
            return Err(err(
                format!("{ef}.controlName"),
                format!("{control:?} is not a Pod Security Standards control"),
            ));
        }
        let images = e.images.clone();
        if CONTAINER_LEVEL_CONTROLS.contains(&control) && images.is_empty() {
            return Err(err(
                format!("{ef}.controlName"),
                format!(
                    "{control:?}: exclude.images must be specified for the container level control"
                ),
            ));
        }
        if POD_LEVEL_CONTROLS.contains(&control) && !images.is_empty() {
            return Err(err(
                format!("{ef}.controlName"),
                format!(
                    "{control:?}: exclude.images must not be specified for the pod level control"
                ),
            ));
        }
        let (restricted_field, values) = (e.restricted_field.clone(), e.values.clone());
        if !restricted_field.is_empty() && values.is_empty() {
            return Err(err(format!("{ef}.values"), "values is required".into()));
        }
        if restricted_field.is_empty() && !values.is_empty() {
            return Err(err(
                format!("{ef}.restrictedField"),
                "restrictedField is required".into(),
            ));
        }
        excludes.push(Exclude {
            control: control.to_string(),
            images,
            restricted_field,
            values,
        });
    }
    Ok(excludes)
}

impl PodSecurity {
    /// Compiles a `validate.podSecurity` block; `field` is its path.
    pub(crate) fn compile(v: &PodSecurityDoc, field: &str, err: &ErrFn<'_>) -> Result<PodSecurity> {
        let level = match v.level.as_str() {
            "privileged" => Level::Privileged,
            "baseline" => Level::Baseline,
            "restricted" => Level::Restricted,
            other => {
                return Err(err(
                    format!("{field}.level"),
                    format!("{other:?} is not privileged, baseline or restricted"),
                ));
            }
        };
        let version = parse_version(&v.version).ok_or_else(|| {
            err(
                format!("{field}.version"),
                format!("{:?} is not latest or v1.<minor>", v.version),
            )
        })?;
        let excludes = parse_excludes(&v.exclude, &format!("{field}.exclude"), err)?;
        Ok(PodSecurity {
            level_text: v.level.clone(),
            version_text: v.version.clone(),
            level,
            version,
            excludes,
        })
    }

    /// Evaluates the profile on `object` (a Pod, a pod controller or a
    /// CronJob) for the rule `rule`.
    pub(crate) fn evaluate(&self, rule: &str, object: &Value) -> (Status, String) {
        match self.run(rule, object, &[]) {
            Outcome::Pass(m) => (Status::Pass, m),
            Outcome::Fail(m) => (Status::Fail, m),
            Outcome::Error(m) => (Status::Error, m),
            // Without exception exclusions a failing pod stays failing.
            Outcome::Exempt => (Status::Skip, String::new()),
        }
    }

    /// Evaluates the profile on `object`, then applies `exceptions` (the
    /// `podSecurity` exclusions of the PolicyExceptions that match) to the
    /// checks that still fail, as Kyverno does.
    pub(crate) fn run(&self, rule: &str, object: &Value, exceptions: &[Exclude]) -> Outcome {
        let kind = object["kind"].as_str().unwrap_or("");
        let pod = if kind == "Pod" {
            Pod {
                meta: &object["metadata"],
                spec: &object["spec"],
            }
        } else if crate::autogen::has_pod_template(kind) {
            let template = &object["spec"]["template"];
            Pod {
                meta: &template["metadata"],
                spec: &template["spec"],
            }
        } else if kind == "CronJob" {
            // Kyverno reads the metadata of the job template, not of its
            // pod template.
            let job = &object["spec"]["jobTemplate"];
            Pod {
                meta: &job["metadata"],
                spec: &job["spec"]["template"]["spec"],
            }
        } else {
            return Outcome::Error(
                "Error while getting new resource: could not find correct resource type".into(),
            );
        };
        let mut failures = self.failures(&pod);
        if failures.is_empty() {
            return Outcome::Pass(format!("Validation rule '{rule}' passed."));
        }
        if !exceptions.is_empty() {
            failures = self.apply_excludes(failures, exceptions, &pod);
            if failures.is_empty() {
                return Outcome::Exempt;
            }
        }
        let mut checks = String::new();
        for f in &failures {
            let errs: Vec<String> = f
                .verdict
                .errs
                .iter()
                .map(|e| e.display(&shown_field(&e.field, kind)))
                .collect();
            checks.push_str(&format!(
                "(Forbidden reason: {}, field error list: [{}])",
                f.verdict.reason,
                errs.join(", ")
            ));
        }
        Outcome::Fail(format!(
            "Validation rule '{rule}' failed. It violates PodSecurity \"{}:{}\": {checks}",
            self.level_text, self.version_text
        ))
    }

    /// The checks the pod fails once the rule's exclusions are applied.
    fn failures(&self, pod: &Pod<'_>) -> Vec<Failure> {
        let failures = self.run_checks(pod);
        self.apply_excludes(failures, &self.excludes, pod)
    }

    /// `failures` without what `excludes` exempt, one exclusion after the
    /// other (Kyverno's `ApplyPodSecurityExclusion`).
    fn apply_excludes(
        &self,
        mut failures: Vec<Failure>,
        excludes: &[Exclude],
        pod: &Pod<'_>,
    ) -> Vec<Failure> {
        for ex in excludes {
            if ex.images.is_empty() {
                let (meta, spec) = pod_level_pod(pod);
                let reduced = Pod {
                    meta: &meta,
                    spec: &spec,
                };
                let excluded = self.run_checks(&reduced);
                failures = exempt(failures, &excluded, ex, pod, None);
            } else {
                let (meta, spec) = matching_pod(pod, &ex.images);
                let reduced = Pod {
                    meta: &meta,
                    spec: &spec,
                };
                let excluded = self.run_checks(&reduced);
                failures = exempt(failures, &excluded, ex, pod, Some(&reduced));
            }
        }
        failures
    }

    /// Every check of the level and version the pod fails, in check order
    /// (a check failed by several versions is listed once for each).
    fn run_checks(&self, pod: &Pod<'_>) -> Vec<Failure> {
        let mut out = Vec::new();
        if self.level == Level::Privileged {
            return out;
        }
        for check in CHECKS {
            if self.level == Level::Baseline && check.restricted {
                continue;
            }
            let runs: Vec<_> = match self.version {
                Version::Latest => check.versions.last().into_iter().collect(),
                Version::Minor(m) => check.versions.iter().filter(|v| v.min <= m).collect(),
            };
            for vc in runs {
                if let Some(verdict) = (vc.run)(pod) {
                    out.push(Failure {
                        id: check.id,
                        verdict,
                    });
                }
            }
        }
        out
    }
}

/// The field as Kyverno shows it for the resource's kind: under the pod
/// template for controllers (its `convertChecks`, which also moves
/// `metadata` under `spec.template` for every kind).
fn shown_field(field: &str, kind: &str) -> String {
    let f = if crate::autogen::has_pod_template(kind) {
        field.replace("spec", "spec.template.spec")
    } else if kind == "CronJob" {
        field.replace("spec", "spec.jobTemplate.spec.template.spec")
    } else {
        field.to_string()
    };
    f.replace("metadata", "spec.template.metadata")
}

/// The pod an exclusion without images is evaluated on: its metadata and
/// pod-level spec, with one empty container in place of all containers.
fn pod_level_pod(pod: &Pod<'_>) -> (Value, Value) {
    let mut spec = pod.spec.as_object().cloned().unwrap_or_default();
    spec.insert("containers".into(), json!([{"name": "fake"}]));
    spec.remove("initContainers");
    spec.remove("ephemeralContainers");
    (pod.meta.clone(), Value::Object(spec))
}

/// The pod an exclusion with images is evaluated on: only the containers
/// whose image matches, no pod-level fields.
fn matching_pod(pod: &Pod<'_>, images: &[String]) -> (Value, Value) {
    let mut meta = Map::new();
    for key in ["name", "namespace"] {
        if let Some(v) = pod.meta.get(key) {
            meta.insert(key.into(), v.clone());
        }
    }
    let mut spec = Map::new();
    for key in ["containers", "initContainers", "ephemeralContainers"] {
        let matched: Vec<Value> = pod
            .spec
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| {
                let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                images.iter().any(|p| wildcard::matches(p, image))
            })
            .cloned()
            .collect();
        if !matched.is_empty() {
            spec.insert(key.into(), Value::Array(matched));
        }
    }
    (Value::Object(meta), Value::Object(spec))
}

/// A field path with every index written `*`.
fn normalize(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut in_digits = false;
    for ch in field.chars() {
        if ch.is_ascii_digit() {
            if !in_digits {
                out.push('*');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(ch);
        }
    }
    out
}

/// A field error's container (kind and index), when the field is a
/// container's: the second word of the path names the container kind and
/// its first number the index.
fn container_of(field: &str) -> Option<(&str, usize)> {
    let word = field
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .nth(1)?;
    if !matches!(
        word,
        "containers" | "initContainers" | "ephemeralContainers"
    ) {
        return None;
    }
    let digits: String = field
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    Some((word, digits.parse().ok()?))
}

fn container_name<'a>(spec: &'a Value, kind: &str, index: usize) -> &'a str {
    spec[kind][index]["name"].as_str().unwrap_or("")
}

/// Removes from `failures` the field errors that `excluded` (the checks the
/// exclusion's reduced pod fails) exempts (Kyverno's `exemptExclusions`).
/// `matching` is the reduced pod of a container-level exclusion. Failures
/// are kept by check ID (one per ID, the last), as Kyverno keys them.
fn exempt(
    failures: Vec<Failure>,
    excluded: &[Failure],
    ex: &Exclude,
    pod: &Pod<'_>,
    matching: Option<&Pod<'_>>,
) -> Vec<Failure> {
    let mut by_id: Vec<Failure> = Vec::new();
    for f in failures {
        match by_id.iter_mut().find(|k| k.id == f.id) {
            Some(slot) => *slot = f,
            None => by_id.push(f),
        }
    }
    let ids = CONTROLS
        .iter()
        .find(|(name, _)| *name == ex.control)
        .map(|(_, ids)| *ids)
        .unwrap_or(&[]);
    for excluded_check in excluded.iter().filter(|f| ids.contains(&f.id)) {
        for e in &excluded_check.verdict.errs {
            let field = normalize(&e.field);
            // The exempted container's name ("" for a pod field).
            let container = match (matching, container_of(&e.field)) {
                (Some(m), Some((kind, i))) => container_name(m.spec, kind, i),
                _ => "",
            };
            if !ex.restricted_field.is_empty() && field != ex.restricted_field {
                continue;
            }
            if !ex.values.is_empty()
                && !e
                    .bad
                    .values()
                    .iter()
                    .all(|b| ex.values.iter().any(|p| wildcard::matches(p, b)))
            {
                continue;
            }
            let Some(pos) = by_id.iter().position(|f| f.id == excluded_check.id) else {
                continue;
            };
            let errs = &mut by_id[pos].verdict.errs;
            let hit = errs.iter().position(|d: &FieldErr| {
                if normalize(&d.field) != field {
                    return false;
                }
                match (matching, container_of(&d.field)) {
                    (Some(_), Some((kind, i))) => container_name(pod.spec, kind, i) == container,
                    _ => true,
                }
            });
            if let Some(i) = hit {
                errs.swap_remove(i);
            }
            if errs.is_empty() {
                by_id.remove(pos);
            }
        }
    }
    by_id
}
