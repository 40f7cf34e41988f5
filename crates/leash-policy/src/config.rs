//! Kyverno's ConfigMap (`kyverno/kyverno` by default): resource filters and
//! the users, groups and roles whose requests are not processed.
//!
//! Parsed into one immutable [`KyvernoConfig`] that the components share
//! through an `ArcSwap` and replace whole on each update (seed 000:
//! `configuration.IsExcluded()` read a map while config updates wrote it).
//! Reads are plain method calls on a snapshot: nothing here locks.
//!
//! Keys read (every other key is ignored, as Kyverno ignores keys it does not
//! know):
//! - `resourceFilters`: `[Kind,Namespace,Name]` triples, concatenated or
//!   separated by spaces, commas or newlines, each part a wildcard pattern.
//!   `Kind` may carry a group/version (`apps/v1/Deployment`, `*/*`) and a
//!   subresource (`Pod/binding`); filters match on the kind, as Kyverno's do.
//! - `excludeGroups`, `excludeUsernames`, `excludeRoles`,
//!   `excludeClusterRoles`: comma-separated wildcard patterns; a pattern
//!   starting with `!` is an inclusion that wins over every exclusion.

use std::collections::BTreeMap;

use crate::request::UserInfo;
use crate::wildcard;

/// One `[Kind,Namespace,Name]` resource filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceFilter {
    /// The kind pattern, without group/version (`Pod`, `*`, `Pod/binding`).
    pub kind: String,
    /// The namespace pattern.
    pub namespace: String,
    /// The name pattern.
    pub name: String,
}

/// Exclusion and inclusion patterns of one `exclude*` key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patterns {
    exclude: Vec<String>,
    include: Vec<String>,
}

impl Patterns {
    fn parse(s: &str) -> Patterns {
        let mut p = Patterns::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.strip_prefix('!') {
                Some(inc) => p.include.push(inc.to_string()),
                None => p.exclude.push(item.to_string()),
            }
        }
        p
    }

    /// `Some(true)`: an inclusion matches; `Some(false)`: an exclusion
    /// matches; `None`: nothing matches.
    fn decide<'a>(&self, values: impl Iterator<Item = &'a str> + Clone) -> Option<bool> {
        let any = |pats: &[String]| {
            pats.iter()
                .any(|p| values.clone().any(|v| wildcard::matches(p, v)))
        };
        if any(&self.include) {
            Some(true)
        } else if any(&self.exclude) {
            Some(false)
        } else {
            None
        }
    }
}

/// A parsed Kyverno ConfigMap. `Default` is the configuration without a
/// ConfigMap: no filter, nobody excluded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KyvernoConfig {
    filters: Vec<ResourceFilter>,
    groups: Patterns,
    usernames: Patterns,
    roles: Patterns,
    cluster_roles: Patterns,
}

/// A ConfigMap value Kyverno's configuration cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ConfigMap key {key}: {message}")]
pub struct ConfigError {
    /// The key (`resourceFilters`, ...).
    pub key: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl KyvernoConfig {
    /// Parses a ConfigMap's `data`. A malformed `resourceFilters` is an
    /// error (the caller keeps its previous snapshot and says why).
    pub fn parse(data: &BTreeMap<String, String>) -> Result<KyvernoConfig, ConfigError> {
        let get = |k: &str| data.get(k).map(String::as_str).unwrap_or("");
        Ok(KyvernoConfig {
            filters: parse_filters(get("resourceFilters"))?,
            groups: Patterns::parse(get("excludeGroups")),
            usernames: Patterns::parse(get("excludeUsernames")),
            roles: Patterns::parse(get("excludeRoles")),
            cluster_roles: Patterns::parse(get("excludeClusterRoles")),
        })
    }

    /// Parses a ConfigMap object (its `data`; a ConfigMap without data is
    /// the default configuration).
    pub fn from_config_map(cm: &serde_json::Value) -> Result<KyvernoConfig, ConfigError> {
        let mut data = BTreeMap::new();
        if let Some(map) = cm["data"].as_object() {
            for (k, v) in map {
                let Some(v) = v.as_str() else {
                    return Err(ConfigError {
                        key: "data",
                        message: format!("value of {k:?} is not a string"),
                    });
                };
                data.insert(k.clone(), v.to_string());
            }
        }
        KyvernoConfig::parse(&data)
    }

    /// The resource filters.
    pub fn filters(&self) -> &[ResourceFilter] {
        &self.filters
    }

    /// Whether a resource is filtered out (`ToFilter`): a filter matches
    /// its kind, namespace and name; a Namespace also matches a filter on
    /// its own name as the namespace (`[*,kube-system,*]` filters the
    /// `kube-system` Namespace).
    pub fn is_filtered(&self, kind: &str, namespace: &str, name: &str) -> bool {
        self.filters.iter().any(|f| {
            let m = |p: &str, v: &str| wildcard::matches(p, v);
            (m(&f.kind, kind) && m(&f.namespace, namespace) && m(&f.name, name))
                || (kind == "Namespace"
                    && (f.kind == "Namespace" || f.kind == "*")
                    && m(&f.namespace, name))
        })
    }

    /// Whether a request's user is excluded (`IsExcluded`): an inclusion
    /// (`!pattern`) of any key keeps the request; otherwise any exclusion
    /// excludes it.
    pub fn is_excluded(&self, user: &UserInfo) -> bool {
        let decisions = [
            self.usernames
                .decide(std::iter::once(user.username.as_str())),
            self.groups.decide(user.groups.iter().map(String::as_str)),
            self.roles.decide(user.roles.iter().map(String::as_str)),
            self.cluster_roles
                .decide(user.cluster_roles.iter().map(String::as_str)),
        ];
        if decisions.contains(&Some(true)) {
            return false;
        }
        decisions.contains(&Some(false))
    }
}

/// `[Kind,Namespace,Name]` triples; text between them must be separators.
fn parse_filters(s: &str) -> Result<Vec<ResourceFilter>, ConfigError> {
    let err = |message: String| ConfigError {
        key: "resourceFilters",
        message,
    };
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if trimmed.is_empty() {
            return Ok(out);
        }
        let Some(body) = trimmed.strip_prefix('[') else {
            return Err(err(format!("expected '[' at {:?}", head(trimmed))));
        };
        let Some(end) = body.find(']') else {
            return Err(err(format!("unclosed '[' at {:?}", head(trimmed))));
        };
        let parts: Vec<&str> = body[..end].split(',').map(str::trim).collect();
        let [kind, namespace, name] = parts[..] else {
            return Err(err(format!(
                "filter [{}] has {} parts; want [Kind,Namespace,Name]",
                &body[..end],
                parts.len()
            )));
        };
        if kind.is_empty() {
            return Err(err(format!("filter [{}] has an empty kind", &body[..end])));
        }
        let kind = strip_group_version(kind);
        out.push(ResourceFilter {
            kind: kind.to_string(),
            namespace: or_star(namespace),
            name: or_star(name),
        });
        rest = &body[end + 1..];
    }
}

fn head(s: &str) -> &str {
    let end = s.char_indices().nth(30).map_or(s.len(), |(i, _)| i);
    &s[..end]
}

fn or_star(s: &str) -> String {
    if s.is_empty() { "*".into() } else { s.into() }
}

/// `apps/v1/Deployment` → `Deployment`; `*/*` stays (kind `*`, any
/// subresource); `Pod/binding` stays.
fn strip_group_version(kind: &str) -> &str {
    let parts: Vec<&str> = kind.split('/').collect();
    match parts.len() {
        3 | 4 => {
            // group/version/Kind[/subresource]
            let start = parts[0].len() + parts[1].len() + 2;
            &kind[start..]
        }
        2 if parts[0] == "*" && parts[1] == "*" => "*",
        _ => kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> KyvernoConfig {
        let data = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        KyvernoConfig::parse(&data).unwrap()
    }

    #[test]
    fn filters_match_kind_namespace_name() {
        let c = cfg(&[(
            "resourceFilters",
            "[Event,*,*][*/*,kube-system,*]\n[apps/v1/ReplicaSet,*,*] [Pod,dev-*,debug-?]",
        )]);
        assert_eq!(c.filters().len(), 4);
        assert!(c.is_filtered("Event", "default", "x"));
        assert!(c.is_filtered("ConfigMap", "kube-system", "x"));
        assert!(c.is_filtered("Namespace", "", "kube-system"));
        assert!(!c.is_filtered("Namespace", "", "default"));
        assert!(c.is_filtered("ReplicaSet", "prod", "x"));
        assert!(c.is_filtered("Pod", "dev-a", "debug-1"));
        assert!(!c.is_filtered("Pod", "dev-a", "debug-12"));
        assert!(!c.is_filtered("Pod", "default", "web"));
    }

    #[test]
    fn malformed_filters_are_errors_naming_the_key() {
        let data = |v: &str| BTreeMap::from([("resourceFilters".to_string(), v.to_string())]);
        for bad in ["[Pod,default", "Pod,default,x", "[Pod,default]", "[,a,b]"] {
            let e = KyvernoConfig::parse(&data(bad)).unwrap_err();
            assert_eq!(e.key, "resourceFilters", "{bad}");
            assert!(
                e.to_string().starts_with("ConfigMap key resourceFilters: "),
                "{e}"
            );
        }
        let cm = serde_json::json!({"data": {"resourceFilters": 3}});
        assert!(KyvernoConfig::from_config_map(&cm).is_err());
        let empty = serde_json::json!({"metadata": {"name": "kyverno"}});
        assert_eq!(
            KyvernoConfig::from_config_map(&empty).unwrap(),
            KyvernoConfig::default()
        );
    }

    #[test]
    fn exclusions_and_inclusions() {
        let c = cfg(&[
            (
                "excludeGroups",
                "system:nodes, system:serviceaccounts:kube-*",
            ),
            ("excludeUsernames", "!system:kube-scheduler,system:*"),
            ("excludeClusterRoles", "cluster-admin"),
        ]);
        let user = |name: &str, groups: &[&str], croles: &[&str]| UserInfo {
            username: name.into(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            cluster_roles: croles.iter().map(|s| s.to_string()).collect(),
            ..UserInfo::default()
        };
        assert!(c.is_excluded(&user("kubelet", &["system:nodes"], &[])));
        assert!(c.is_excluded(&user("system:foo", &[], &[])));
        assert!(!c.is_excluded(&user("system:kube-scheduler", &["system:nodes"], &[])));
        assert!(c.is_excluded(&user("alice", &[], &["cluster-admin"])));
        assert!(!c.is_excluded(&user("alice", &["devs"], &["view"])));
        assert!(!KyvernoConfig::default().is_excluded(&user("system:x", &["system:nodes"], &[])));
    }
}
