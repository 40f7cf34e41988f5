//! Loading policies and resources for `leash apply` and `leash test`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Result, bail};
use leash_policy::dpol::{self, DeletingPolicy};
use leash_policy::mpol::admission::{
    self as map, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use leash_policy::vap::{self, AdmissionPolicy, AdmissionPolicyBinding};
use leash_policy::{Document, Engine};
use serde_json::Value;

use super::files::{self, Doc};

/// Compiled policies and what was skipped.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub engine: Engine,
    /// The DeletingPolicies (`leash test` evaluates them on each resource).
    pub deleting: Vec<Arc<DeletingPolicy>>,
    /// The Kubernetes ValidatingAdmissionPolicies and their bindings
    /// (`leash test` evaluates them on each resource).
    pub admission: Vec<Arc<AdmissionPolicy>>,
    pub admission_bindings: Vec<Arc<AdmissionPolicyBinding>>,
    /// Policy documents of kinds leash does not evaluate (`file: kind name`).
    pub unsupported: Vec<String>,
}

/// Compiles every policy and exception document under `paths`. A document
/// that fails to compile is an error naming the file, the document and the
/// field; documents that are not policies are ignored.
pub(crate) fn load_policies(paths: &[PathBuf]) -> Result<Loaded> {
    let mut loaded = Loaded::default();
    for doc in files::read_paths(paths)? {
        add_doc(&mut loaded, &doc)?;
    }
    Ok(loaded)
}

pub(crate) fn add_doc(loaded: &mut Loaded, doc: &Doc) -> Result<()> {
    if dpol::is_deleting_policy(&doc.value) {
        match DeletingPolicy::compile(&doc.value) {
            Ok(p) => loaded.deleting.push(Arc::new(p)),
            Err(e) => bail!("{}: {e}", doc.origin()),
        }
        return Ok(());
    }
    if vap::is_admission_policy(&doc.value) {
        match AdmissionPolicy::compile(&doc.value) {
            Ok(p) => loaded.admission.push(Arc::new(p)),
            Err(e) => bail!("{}: {e}", doc.origin()),
        }
        return Ok(());
    }
    if vap::is_admission_policy_binding(&doc.value) {
        match AdmissionPolicyBinding::compile(&doc.value) {
            Ok(b) => loaded.admission_bindings.push(Arc::new(b)),
            Err(e) => bail!("{}: {e}", doc.origin()),
        }
        return Ok(());
    }
    if map::is_mutating_admission_policy(&doc.value) {
        match MutatingAdmissionPolicy::compile(&doc.value) {
            Ok(p) => loaded.engine.add_mutating_admission_policy(Arc::new(p)),
            Err(e) => bail!("{}: {e}", doc.origin()),
        }
        return Ok(());
    }
    if map::is_mutating_admission_policy_binding(&doc.value) {
        match MutatingAdmissionPolicyBinding::compile(&doc.value) {
            Ok(b) => loaded.engine.add_mutating_admission_binding(Arc::new(b)),
            Err(e) => bail!("{}: {e}", doc.origin()),
        }
        return Ok(());
    }
    match Document::compile(&doc.value) {
        Ok(Some(d)) => loaded.engine.add(d),
        Ok(None) => {
            if let Some(kind) = Document::unsupported_kind(&doc.value) {
                let name = doc.value["metadata"]["name"].as_str().unwrap_or("");
                loaded
                    .unsupported
                    .push(format!("{}: {kind} {name}", doc.origin()));
            }
        }
        Err(e) => bail!("{}: {e}", doc.origin()),
    }
    Ok(())
}

/// Reads resource documents; each must be a Kubernetes object.
pub(crate) fn load_resources(paths: &[PathBuf]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for doc in files::read_paths(paths)? {
        if !files::is_object(&doc.value) {
            bail!(
                "{}: not a Kubernetes object (apiVersion, kind and metadata.name are required)",
                doc.origin()
            );
        }
        out.push(doc.value);
    }
    Ok(out)
}

/// Gives a namespaced object without a namespace the `default` one, as the
/// API server would.
pub(crate) fn default_namespace(object: &mut Value) {
    let kind = object["kind"].as_str().unwrap_or("");
    let namespaced = match leash_policy::kinds::by_kind(kind) {
        Some(k) => k.namespaced,
        None => !kind.starts_with("Cluster"),
    };
    if namespaced
        && object["metadata"]["namespace"]
            .as_str()
            .is_none_or(str::is_empty)
        && let Some(meta) = object["metadata"].as_object_mut()
    {
        meta.insert("namespace".into(), Value::String("default".into()));
    }
}
