//! `semver_compare(version, range)` with the range language of
//! `github.com/blang/semver/v4`: `>=1.0.0 <2.0.0 || 3.x`, operators `>`,
//! `>=`, `<`, `<=`, `=`, `==`, `!`, `!=` (none means equal) and `x` wildcards.
//! An unparsable version counts as `0.0.0`, as in Kyverno.

use std::cmp::Ordering;

use jmespath::{Rcvar, Runtime};
use semver::Version;

use super::ty::s;
use super::{arg_str, boolean, register};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "semver_compare", vec![s(), s()], semver_compare);
}

fn semver_compare(x: &[Rcvar]) -> Result<Rcvar, String> {
    let version = Version::parse(arg_str(x, 0)).unwrap_or_else(|_| Version::new(0, 0, 0));
    let range = parse_range(arg_str(x, 1))?;
    Ok(boolean(
        range
            .iter()
            .any(|all| all.iter().all(|c| c.matches(&version))),
    ))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cmp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

#[derive(Debug, Clone)]
struct Comparator {
    cmp: Cmp,
    version: Version,
}

impl Comparator {
    fn matches(&self, v: &Version) -> bool {
        let o = v.cmp_precedence(&self.version);
        match self.cmp {
            Cmp::Eq => o == Ordering::Equal,
            Cmp::Ne => o != Ordering::Equal,
            Cmp::Gt => o == Ordering::Greater,
            Cmp::Ge => o != Ordering::Less,
            Cmp::Lt => o == Ordering::Less,
            Cmp::Le => o != Ordering::Greater,
        }
    }
}

/// OR of ANDs.
fn parse_range(text: &str) -> Result<Vec<Vec<Comparator>>, String> {
    let bad =
        |p: &str| format!("Could not parse Range \"{text}\": Could not parse comparator \"{p}\"");
    let mut ors = Vec::new();
    for part in text.split("||") {
        // Join a bare operator with the version after it (`>= 1.0.0`).
        let mut words: Vec<String> = Vec::new();
        for w in part.split_whitespace() {
            match words.last_mut() {
                Some(last) if last.chars().all(|c| "<>=!".contains(c)) => last.push_str(w),
                _ => words.push(w.to_string()),
            }
        }
        if words.is_empty() {
            return Err(bad(part));
        }
        let mut ands = Vec::new();
        for w in &words {
            let op_len = w.chars().take_while(|c| "<>=!".contains(*c)).count();
            let (op, ver) = w.split_at(op_len);
            let cmp = match op {
                "" | "=" | "==" => Cmp::Eq,
                "!" | "!=" => Cmp::Ne,
                ">" => Cmp::Gt,
                ">=" => Cmp::Ge,
                "<" => Cmp::Lt,
                "<=" => Cmp::Le,
                _ => return Err(bad(w)),
            };
            expand(cmp, ver, &mut ands, &mut ors).ok_or_else(|| bad(w))?;
        }
        ors.push(ands);
    }
    Ok(ors)
}

/// Adds the comparators for `cmp ver`, expanding `x` wildcards. A `!=` on
/// a wildcard splits into an extra OR branch, as in blang.
fn expand(
    cmp: Cmp,
    ver: &str,
    ands: &mut Vec<Comparator>,
    ors: &mut Vec<Vec<Comparator>>,
) -> Option<()> {
    let parts: Vec<&str> = ver.split('.').collect();
    let wild = |p: &str| p == "x" || p == "X" || p == "*";
    let Some(w) = parts.iter().position(|p| wild(p)) else {
        ands.push(Comparator {
            cmp,
            version: Version::parse(ver).ok()?,
        });
        return Some(());
    };
    if parts.len() > 3 || parts[w..].iter().any(|p| !wild(p)) || w == 0 {
        return None;
    }
    let nums: Vec<u64> = parts[..w]
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let lower = Version::new(nums[0], nums.get(1).copied().unwrap_or(0), 0);
    let upper = if w == 1 {
        Version::new(nums[0] + 1, 0, 0)
    } else {
        Version::new(nums[0], nums[1] + 1, 0)
    };
    let c = |cmp, version: &Version| Comparator {
        cmp,
        version: version.clone(),
    };
    match cmp {
        Cmp::Eq => {
            ands.push(c(Cmp::Ge, &lower));
            ands.push(c(Cmp::Lt, &upper));
        }
        Cmp::Ne => {
            ands.push(c(Cmp::Lt, &lower));
            ors.push(vec![c(Cmp::Ge, &upper)]);
        }
        Cmp::Gt => ands.push(c(Cmp::Ge, &upper)),
        Cmp::Ge => ands.push(c(Cmp::Ge, &lower)),
        Cmp::Lt => ands.push(c(Cmp::Lt, &lower)),
        Cmp::Le => ands.push(c(Cmp::Lt, &upper)),
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};

    #[test]
    fn semver() {
        let cases: &[Case] = &[
            ("semver_compare('1.2.3', '1.2.3')", "{}", Json("true")),
            ("semver_compare('1.2.3', '>1.0.0')", "{}", Json("true")),
            (
                "semver_compare('1.2.3', '>=1.0.0 <1.2.0')",
                "{}",
                Json("false"),
            ),
            (
                "semver_compare('1.2.3', '<1.0.0 || >=1.2.0')",
                "{}",
                Json("true"),
            ),
            ("semver_compare('1.2.3', '!1.2.3')", "{}", Json("false")),
            ("semver_compare('1.2.3', '1.2.x')", "{}", Json("true")),
            ("semver_compare('1.3.0', '1.2.x')", "{}", Json("false")),
            ("semver_compare('2.0.0', '>1.x')", "{}", Json("true")),
            ("semver_compare('1.9.0', '<=1.x')", "{}", Json("true")),
            (
                "semver_compare('1.2.0-alpha', '<1.2.0')",
                "{}",
                Json("true"),
            ),
            ("semver_compare('1.2.3+build', '1.2.3')", "{}", Json("true")),
            ("semver_compare('>= 1.0.0', '1.2.3')", "{}", Json("false")),
            ("semver_compare('1.2.3', '>= 1.0.0')", "{}", Json("true")),
            ("semver_compare('v1.2.3', '0.0.0')", "{}", Json("true")),
            (
                "semver_compare('1.2.3', 'abc')",
                "{}",
                Err("Could not parse Range"),
            ),
            ("semver_compare('1.2.3', `1`)", "{}", Err("string")),
        ];
        run(cases);
    }
}
