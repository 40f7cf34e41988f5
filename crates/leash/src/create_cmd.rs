//! `leash create`: the scaffolding of Kyverno's `kyverno create`, with the
//! same flags and the same commented YAML: a test file, a values file, a
//! user-info file and a PolicyException.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args as ClapArgs, Subcommand};

use crate::cli_error::usage;

/// `leash create`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "Examples:
  leash create test -p policy.yaml -r resource.yaml -f values.yaml --pass policy-name,rule-name,resource-name,resource-namespace,resource-kind
  leash create values -g request.mode=dev -n prod,env=prod --rule policy,rule,env=demo --resource policy,resource,env=demo
  leash create user-info -u molybdenum@somecorp.com -g basic-user -c admin
  leash create exception allow-web --namespace apps --policy-rules disallow-latest,require-tag --any kind=Pod,name=web")]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Create,
}

#[derive(Debug, Subcommand)]
enum Create {
    /// Create a Kyverno test file (kyverno-test.yaml).
    Test {
        /// Test name.
        #[arg(short = 'n', long, default_value = "test-name")]
        name: String,
        /// Policy files (repeatable, or comma-separated).
        #[arg(short = 'p', long = "policy", value_delimiter = ',')]
        policies: Vec<String>,
        /// Resource files (repeatable, or comma-separated).
        #[arg(short = 'r', long = "resource", value_delimiter = ',')]
        resources: Vec<String>,
        /// Values file.
        #[arg(short = 'f', long = "values")]
        values: Option<String>,
        /// An expected pass: POLICY,RULE,RESOURCE,NAMESPACE,KIND (repeatable).
        #[arg(long)]
        pass: Vec<String>,
        /// An expected fail: POLICY,RULE,RESOURCE,NAMESPACE,KIND (repeatable).
        #[arg(long)]
        fail: Vec<String>,
        /// An expected skip: POLICY,RULE,RESOURCE,NAMESPACE,KIND (repeatable).
        #[arg(long)]
        skip: Vec<String>,
        /// Output file (standard output when not given).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Create a Kyverno values file.
    Values {
        /// A global value, NAME=VALUE (repeatable, or comma-separated).
        #[arg(short = 'g', long = "global", value_delimiter = ',')]
        globals: Vec<String>,
        /// A namespace's labels: NAMESPACE,LABEL=VALUE[,LABEL=VALUE...] (repeatable).
        #[arg(short = 'n', long = "ns-selector")]
        namespaces: Vec<String>,
        /// A rule's values: POLICY,RULE,NAME=VALUE[,...] (repeatable).
        #[arg(long = "rule")]
        rules: Vec<String>,
        /// A resource's values: POLICY,RESOURCE,NAME=VALUE[,...] (repeatable).
        #[arg(long = "resource")]
        resources: Vec<String>,
        /// Output file (standard output when not given).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Create a Kyverno user-info file.
    UserInfo {
        /// User name.
        #[arg(short = 'u', long)]
        username: Option<String>,
        /// Groups (repeatable, or comma-separated).
        #[arg(short = 'g', long = "group", value_delimiter = ',')]
        groups: Vec<String>,
        /// Cluster roles (repeatable, or comma-separated).
        #[arg(short = 'c', long = "cluster-role", value_delimiter = ',')]
        cluster_roles: Vec<String>,
        /// Roles, NAMESPACE:ROLE (repeatable, or comma-separated).
        #[arg(short = 'r', long = "role", value_delimiter = ',')]
        roles: Vec<String>,
        /// Output file (standard output when not given).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Create a Kyverno policy exception (kyverno.io/v2 PolicyException).
    Exception {
        /// The exception's name.
        name: String,
        /// Its namespace.
        #[arg(long)]
        namespace: Option<String>,
        /// Whether background scans consider it.
        #[arg(short = 'b', long, default_value_t = true, action = clap::ArgAction::Set)]
        background: bool,
        /// A policy and the rules excepted: POLICY,RULE[,RULE...] (repeatable).
        #[arg(long = "policy-rules", required = true)]
        policy_rules: Vec<String>,
        /// A resource filter under match.any: kind=K,name=N,namespace=NS (repeatable).
        #[arg(long)]
        any: Vec<String>,
        /// A resource filter under match.all: kind=K,name=N,namespace=NS (repeatable).
        #[arg(long)]
        all: Vec<String>,
        /// Output file (standard output when not given).
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
}

/// Runs `leash create`.
pub(crate) fn run(args: Args) -> Result<()> {
    let (text, output) = match args.command {
        Create::Test {
            name,
            policies,
            resources,
            values,
            pass,
            fail,
            skip,
            output,
        } => (
            test_file(
                &name,
                &policies,
                &resources,
                values.as_deref(),
                &pass,
                &fail,
                &skip,
            )?,
            output,
        ),
        Create::Values {
            globals,
            namespaces,
            rules,
            resources,
            output,
        } => (
            values_file(&globals, &namespaces, &rules, &resources)?,
            output,
        ),
        Create::UserInfo {
            username,
            groups,
            cluster_roles,
            roles,
            output,
        } => (
            user_info_file(username.as_deref(), &groups, &cluster_roles, &roles),
            output,
        ),
        Create::Exception {
            name,
            namespace,
            background,
            policy_rules,
            any,
            all,
            output,
        } => (
            exception(
                &name,
                namespace.as_deref(),
                background,
                &policy_rules,
                &any,
                &all,
            )?,
            output,
        ),
    };
    match output {
        Some(path) => std::fs::write(&path, text)
            .with_context(|| format!("writing --output {}", path.display())),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

/// A YAML scalar, quoted when plain YAML would read it otherwise.
fn scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@".contains(c))
        && !s.starts_with(['-', '.', ':', '@'])
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~"
        )
        && s.parse::<f64>().is_err();
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

fn list(out: &mut String, indent: &str, items: &[String]) {
    for item in items {
        let _ = writeln!(out, "{indent}- {}", scalar(item));
    }
}

#[allow(clippy::too_many_arguments)]
fn test_file(
    name: &str,
    policies: &[String],
    resources: &[String],
    values: Option<&str>,
    pass: &[String],
    fail: &[String],
    skip: &[String],
) -> Result<String> {
    let mut out = format!("# test name\nname: {}\n\n", scalar(name));
    out.push_str("# list of policy files\npolicies:\n");
    list(&mut out, "  ", policies);
    out.push_str("\n# list of resource files\nresources:\n");
    list(&mut out, "  ", resources);
    if let Some(v) = values {
        let _ = writeln!(
            out,
            "\n# variables file (optional)\nvariables: {}",
            scalar(v)
        );
    }
    out.push_str("\n# list of expected results\nresults:\n");
    for (result, rows) in [("pass", pass), ("fail", fail), ("skip", skip)] {
        for row in rows {
            let parts: Vec<&str> = row.split(',').collect();
            let [policy, rule, resource, namespace, kind] = parts[..] else {
                return Err(usage(format!(
                    "--{result} {row:?}: expected POLICY,RULE,RESOURCE,NAMESPACE,KIND (the namespace may be empty)"
                )));
            };
            let _ = writeln!(out, "  - policy: {}", scalar(policy));
            let _ = writeln!(out, "    rule: {}", scalar(rule));
            let _ = writeln!(out, "    resource: {}", scalar(resource));
            if !namespace.is_empty() {
                let _ = writeln!(out, "    namespace: {}", scalar(namespace));
            }
            let _ = writeln!(out, "    kind: {}", scalar(kind));
            let _ = writeln!(out, "    result: {result}");
        }
    }
    Ok(out)
}

/// `NAME=VALUE` split at the first `=`.
fn pair<'a>(flag: &str, text: &'a str) -> Result<(&'a str, &'a str)> {
    text.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| usage(format!("{flag} {text:?}: expected NAME=VALUE")))
}

fn values_file(
    globals: &[String],
    namespaces: &[String],
    rules: &[String],
    resources: &[String],
) -> Result<String> {
    let mut out = String::from("# list of policy values\npolicies:\n");
    for (flag, key, entries) in [
        ("--rule", "rules", rules),
        ("--resource", "resources", resources),
    ] {
        for entry in entries {
            let parts: Vec<&str> = entry.split(',').collect();
            let [policy, name, values @ ..] = &parts[..] else {
                return Err(usage(format!(
                    "{flag} {entry:?}: expected POLICY,NAME,VAR=VALUE[,VAR=VALUE...]"
                )));
            };
            let _ = writeln!(out, "  - name: {}", scalar(policy));
            let _ = writeln!(out, "    {key}:");
            let _ = writeln!(out, "      - name: {}", scalar(name));
            let _ = writeln!(out, "        values:");
            for v in values {
                let (k, v) = pair(flag, v)?;
                let _ = writeln!(out, "          {}: {}", scalar(k), scalar(v));
            }
        }
    }
    out.push_str("\n# list of global values\nglobalValues:\n");
    for g in globals {
        let (k, v) = pair("--global", g)?;
        let _ = writeln!(out, "  {}: {}", scalar(k), scalar(v));
    }
    out.push_str("\n# list of namespace selectors\nnamespaceSelector:\n");
    for ns in namespaces {
        let mut parts = ns.split(',');
        let name = parts.next().unwrap_or("");
        let _ = writeln!(out, "  - name: {}", scalar(name));
        let _ = writeln!(out, "    labels:");
        for label in parts {
            let (k, v) = pair("--ns-selector", label)?;
            let _ = writeln!(out, "      {}: {}", scalar(k), scalar(v));
        }
    }
    Ok(out)
}

fn user_info_file(
    username: Option<&str>,
    groups: &[String],
    cluster_roles: &[String],
    roles: &[String],
) -> String {
    let mut out = String::from("# list of roles\nroles:\n");
    list(&mut out, "  ", roles);
    out.push_str("\n# list of cluster roles\nclusterRoles:\n");
    list(&mut out, "  ", cluster_roles);
    out.push_str("\nuserInfo:\n  # user name\n");
    let _ = writeln!(out, "  username: {}", scalar(username.unwrap_or("")));
    out.push_str("\n  # list of groups\n  groups:\n");
    list(&mut out, "    ", groups);
    out
}

/// A `kyverno.io/v2` PolicyException. Kyverno's `create exception` puts
/// `kinds`, `names` and `namespaces` straight under `any[]`/`all[]`, which
/// its own CRD refuses; leash puts them under `resources`, where the CRD
/// has them.
fn exception(
    name: &str,
    namespace: Option<&str>,
    background: bool,
    policy_rules: &[String],
    any: &[String],
    all: &[String],
) -> Result<String> {
    let mut out = String::from("apiVersion: kyverno.io/v2\nkind: PolicyException\nmetadata:\n");
    let _ = writeln!(out, "  name: {}", scalar(name));
    if let Some(ns) = namespace {
        let _ = writeln!(out, "  namespace: {}", scalar(ns));
    }
    let _ = writeln!(out, "spec:\n  background: {background}\n  match:");
    for (key, filters) in [("any", any), ("all", all)] {
        if filters.is_empty() {
            continue;
        }
        let _ = writeln!(out, "    {key}:");
        for filter in filters {
            let mut fields: Vec<(&str, Vec<&str>)> = Vec::new();
            for part in filter.split(',') {
                let (k, v) = pair(&format!("--{key}"), part)?;
                let field = match k {
                    "kind" => "kinds",
                    "name" => "names",
                    "namespace" => "namespaces",
                    "operation" => "operations",
                    other => {
                        return Err(usage(format!(
                            "--{key} {filter:?}: unknown filter {other:?} (kind, name, namespace, operation)"
                        )));
                    }
                };
                match fields.iter_mut().find(|(f, _)| *f == field) {
                    Some((_, values)) => values.push(v),
                    None => fields.push((field, vec![v])),
                }
            }
            let _ = writeln!(out, "      - resources:");
            for (field, values) in fields {
                let _ = writeln!(out, "          {field}:");
                for v in values {
                    let _ = writeln!(out, "            - {}", scalar(v));
                }
            }
        }
    }
    out.push_str("  exceptions:\n");
    for pr in policy_rules {
        let mut parts = pr.split(',');
        let policy = parts.next().unwrap_or("");
        let rules: Vec<&str> = parts.collect();
        if policy.is_empty() || rules.is_empty() {
            return Err(usage(format!(
                "--policy-rules {pr:?}: expected POLICY,RULE[,RULE...]"
            )));
        }
        let _ = writeln!(
            out,
            "    - policyName: {}\n      ruleNames:",
            scalar(policy)
        );
        for r in rules {
            let _ = writeln!(out, "        - {}", scalar(r));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> serde_json::Value {
        serde_saphyr::from_str(text).unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    /// What `kyverno create test` writes, read back as a Test.
    #[test]
    fn a_test_file_lists_policies_resources_and_results() {
        let text = test_file(
            "t",
            &strings(&["policy.yaml"]),
            &strings(&["resource.yaml"]),
            Some("values.yaml"),
            &strings(&["pol,rule,res,ns,Pod"]),
            &strings(&["pol,rule2,res2,,Pod"]),
            &[],
        )
        .unwrap();
        assert!(text.starts_with("# test name\nname: t\n"), "{text}");
        let doc = yaml(&text);
        assert_eq!(doc["policies"], serde_json::json!(["policy.yaml"]));
        assert_eq!(doc["variables"], "values.yaml");
        assert_eq!(
            doc["results"],
            serde_json::json!([
                {"policy": "pol", "rule": "rule", "resource": "res", "namespace": "ns", "kind": "Pod", "result": "pass"},
                {"policy": "pol", "rule": "rule2", "resource": "res2", "kind": "Pod", "result": "fail"}
            ])
        );
        let err = test_file("t", &[], &[], None, &strings(&["p,r,x"]), &[], &[]).unwrap_err();
        assert!(err.to_string().contains("--pass \"p,r,x\""), "{err}");
    }

    #[test]
    fn values_user_info_and_exception_read_back() {
        let doc = yaml(
            &values_file(
                &strings(&["request.mode=dev"]),
                &strings(&["prod,env=prod"]),
                &strings(&["policy,rule,env=demo"]),
                &strings(&["policy,resource,env=demo"]),
            )
            .unwrap(),
        );
        assert_eq!(doc["globalValues"]["request.mode"], "dev");
        assert_eq!(doc["namespaceSelector"][0]["labels"]["env"], "prod");
        assert_eq!(doc["policies"][0]["rules"][0]["values"]["env"], "demo");
        assert_eq!(doc["policies"][1]["resources"][0]["name"], "resource");
        let doc = yaml(&user_info_file(
            Some("alice"),
            &strings(&["basic-user"]),
            &strings(&["admin"]),
            &strings(&["ns:role"]),
        ));
        assert_eq!(doc["userInfo"]["username"], "alice");
        assert_eq!(doc["roles"], serde_json::json!(["ns:role"]));
        let text = exception(
            "e",
            Some("apps"),
            true,
            &strings(&["pol,r1,r2"]),
            &strings(&["kind=Pod,name=web"]),
            &[],
        )
        .unwrap();
        let doc = yaml(&text);
        // A valid PolicyException: it compiles, schema included.
        leash_policy::Document::compile(&doc).unwrap().unwrap();
        assert_eq!(
            doc["spec"]["match"]["any"][0]["resources"]["kinds"],
            serde_json::json!(["Pod"])
        );
        assert_eq!(
            doc["spec"]["exceptions"][0]["ruleNames"],
            serde_json::json!(["r1", "r2"])
        );
        assert!(exception("e", None, true, &strings(&["pol"]), &[], &[]).is_err());
        // Values that plain YAML would read as something else are quoted.
        assert_eq!(scalar("true"), "\"true\"");
        assert_eq!(scalar("1"), "\"1\"");
        assert_eq!(scalar("a b"), "\"a b\"");
        assert_eq!(scalar("nginx:1.27"), "nginx:1.27");
    }
}
