//! Kubernetes' semver library.

#[allow(clippy::wildcard_imports)]
use super::*;

/// A semantic version (Kubernetes' `semver` library).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Semver(pub(super) semver::Version);

impl Opaque for Semver {
    fn runtime_type_name(&self) -> &str {
        "kubernetes.Semver"
    }
}

pub(super) fn parse_semver(text: &str, normalize: bool) -> Option<semver::Version> {
    if !normalize {
        return semver::Version::parse(text).ok();
    }
    let t = text.strip_prefix('v').unwrap_or(text);
    let (core, rest) = match t.find(['-', '+']) {
        Some(i) => t.split_at(i),
        None => (t, ""),
    };
    let mut parts: Vec<String> = core
        .split('.')
        .map(|p| {
            let trimmed = p.trim_start_matches('0');
            if trimmed.is_empty() {
                "0".into()
            } else {
                trimmed.into()
            }
        })
        .collect();
    while parts.len() < 3 {
        parts.push("0".into());
    }
    semver::Version::parse(&format!("{}{rest}", parts.join("."))).ok()
}

pub(super) fn normalize_flag(args: &[Value]) -> bool {
    matches!(args.get(1), Some(Value::Bool(true)))
}

overload!(semver_new, |args| {
    let t = str_arg(args, 0, "semver")?;
    parse_semver(t, normalize_flag(args))
        .map(|v| opaque(Semver(v)))
        .ok_or_else(|| ferr("semver", format!("could not parse semver: {t}")))
});
overload!(semver_is, |args| Ok(Value::Bool(
    parse_semver(str_arg(args, 0, "isSemver")?, normalize_flag(args)).is_some()
)));

pub(super) fn this_semver<'a>(
    args: &'a [Value],
    function: &str,
) -> Result<&'a Semver, ExecutionError> {
    let v = arg(args, 0, function)?;
    as_opaque::<Semver>(v).ok_or_else(|| ferr(function, "not a semver"))
}

overload!(sv_major, |args| Ok(Value::Int(
    this_semver(args, "major")?.0.major as i64
)));
overload!(sv_minor, |args| Ok(Value::Int(
    this_semver(args, "minor")?.0.minor as i64
)));
overload!(sv_patch, |args| Ok(Value::Int(
    this_semver(args, "patch")?.0.patch as i64
)));
