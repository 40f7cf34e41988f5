//! The resources `leash apply`'s mutate rules changed: printed to stdout
//! as `kyverno apply` prints them, or written to `--mutated-output`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use leash_policy::{Mutation, RuleResult, Status};
use serde_json::Value;

use super::apply::resource_id;

/// What the mutate rules did to one resource.
#[derive(Debug, Clone)]
pub(crate) struct Mutated {
    /// The resource as given.
    pub resource: Arc<Value>,
    /// The mutate rule results.
    pub results: Vec<RuleResult>,
    /// The mutated resource, when a rule changed it.
    pub object: Option<Arc<Value>>,
    /// The policies whose rules changed it.
    pub policies: Vec<Arc<str>>,
    /// Existing resources `mutate.targets` rules patched: policy, target.
    pub targets: Vec<(Arc<str>, Arc<Value>)>,
    /// What generate rules would create for the resource: policy, rule,
    /// downstream.
    pub generated: Vec<(Arc<str>, String, Value)>,
}

impl Mutated {
    pub(crate) fn of(resource: &Arc<Value>, m: &Mutation) -> Mutated {
        let policies: Vec<Arc<str>> = m
            .steps
            .iter()
            .filter(|s| s.results.iter().any(|r| r.status == Status::Pass))
            .map(|s| s.policy.clone())
            .collect();
        let targets = m
            .steps
            .iter()
            .flat_map(|s| {
                s.targets
                    .iter()
                    .filter(|t| t.status == Status::Pass)
                    .map(move |t| (s.policy.clone(), t.object.clone()))
            })
            .collect();
        let changed = m.object != *resource;
        Mutated {
            resource: resource.clone(),
            results: m.results().cloned().collect(),
            object: changed.then(|| m.object.clone()),
            policies: if changed { policies } else { Vec::new() },
            targets,
            generated: Vec::new(),
        }
    }

    pub(crate) fn none(resource: &Arc<Value>) -> Mutated {
        Mutated {
            resource: resource.clone(),
            results: Vec::new(),
            object: None,
            policies: Vec::new(),
            targets: Vec::new(),
            generated: Vec::new(),
        }
    }
}

fn yaml(v: &Value) -> Result<String> {
    serde_saphyr::to_string(v).map_err(|e| anyhow::anyhow!("cannot write YAML: {e}"))
}

/// `mutate policy P applied to Kind/ns/name:` and the resource, as
/// `kyverno apply` prints each mutated resource.
pub(crate) fn print(out: &mut impl Write, mutated: &[Mutated]) -> Result<()> {
    for m in mutated {
        let Some(object) = &m.object else {
            continue;
        };
        let names: Vec<&str> = m.policies.iter().map(|p| &**p).collect();
        writeln!(
            out,
            "mutate policy {} applied to {}:",
            names.join(", "),
            resource_id(&m.resource)
        )?;
        out.write_all(yaml(object)?.as_bytes())?;
        writeln!(out, "---")?;
    }
    for m in mutated {
        for (policy, rule, downstream) in &m.generated {
            writeln!(
                out,
                "generate policy {policy} rule {rule} for {} would create:",
                resource_id(&m.resource)
            )?;
            out.write_all(yaml(downstream)?.as_bytes())?;
            writeln!(out, "---")?;
        }
    }
    for m in mutated {
        for (policy, target) in &m.targets {
            writeln!(
                out,
                "mutate policy {policy} applied to target {}:",
                resource_id(target)
            )?;
            out.write_all(yaml(target)?.as_bytes())?;
            writeln!(out, "---")?;
        }
    }
    Ok(())
}

/// The mutated resources, for the JSON/YAML output.
pub(crate) fn objects(mutated: &[Mutated]) -> Vec<Value> {
    changed(mutated)
        .into_iter()
        .map(|o| (**o).clone())
        .collect()
}

/// The mutated resources, then the patched targets.
fn changed(mutated: &[Mutated]) -> Vec<&Arc<Value>> {
    mutated
        .iter()
        .filter_map(|m| m.object.as_ref())
        .chain(
            mutated
                .iter()
                .flat_map(|m| m.targets.iter().map(|(_, t)| t)),
        )
        .collect()
}

/// Writes the mutated resources to a directory (one `NAME-mutated.yaml`
/// each, `KIND-NAMESPACE-NAME` when names repeat) or to one file (a YAML
/// stream). Returns how many were written.
pub(crate) fn write(path: &Path, mutated: &[Mutated]) -> Result<usize> {
    let changed = changed(mutated);
    let is_dir = path.is_dir() || path.to_string_lossy().ends_with('/');
    if is_dir {
        std::fs::create_dir_all(path)
            .with_context(|| format!("cannot create directory {}", path.display()))?;
        let mut used = std::collections::HashSet::new();
        for o in &changed {
            let name = o["metadata"]["name"].as_str().unwrap_or("resource");
            let mut file = format!("{name}-mutated.yaml");
            if !used.insert(file.clone()) {
                let kind = o["kind"].as_str().unwrap_or("").to_lowercase();
                let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
                file = format!("{kind}-{ns}-{name}-mutated.yaml");
                used.insert(file.clone());
            }
            let target = path.join(&file);
            std::fs::write(&target, yaml(o)?)
                .with_context(|| format!("cannot write {}", target.display()))?;
        }
    } else {
        let mut text = String::new();
        for o in &changed {
            text.push_str("---\n");
            text.push_str(&yaml(o)?);
        }
        std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(changed.len())
}
