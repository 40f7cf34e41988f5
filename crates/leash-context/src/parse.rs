//! Reading `GlobalContextEntry` objects from YAML (multi-document) or JSON values.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::entry::ContextEntry;
use crate::error::{Error, Result};
use crate::spec::{
    ExternalApiCall, GlobalContextEntry, GlobalContextEntrySpec, HttpHeader, KubernetesResource,
    Projection, RequestData, ServiceCall,
};

/// Decode one object (already parsed into JSON) into a `GlobalContextEntry`.
/// A shape error names the entry and the deepest field that does not decode.
pub fn decode_entry(value: Value) -> Result<GlobalContextEntry> {
    let entry = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("<unnamed>")
        .to_owned();
    let invalid = |field: String, reason: String| Error::InvalidEntry {
        entry: entry.clone(),
        field,
        reason,
    };
    if !value.is_object() {
        return Err(invalid("<document>".to_owned(), "not a mapping".to_owned()));
    }
    for key in ["apiVersion", "kind"] {
        match value.get(key) {
            Some(Value::String(_)) => {}
            Some(_) => return Err(invalid(key.to_owned(), "must be a string".to_owned())),
            None => return Err(invalid(key.to_owned(), "missing".to_owned())),
        }
    }
    let Some(spec) = value.get("spec") else {
        return Err(invalid("spec".to_owned(), "missing".to_owned()));
    };
    // Deepest parts first, so the error names the most precise field.
    let mut parts: Vec<(String, Result<(), String>)> = Vec::new();
    if let Some(k) = spec.get("kubernetesResource") {
        parts.push((
            "spec.kubernetesResource".into(),
            check::<KubernetesResource>(k),
        ));
    }
    if let Some(call) = spec.get("apiCall") {
        if let Some(service) = call.get("service") {
            if let Some(Value::Array(headers)) = service.get("headers") {
                for (i, h) in headers.iter().enumerate() {
                    parts.push((
                        format!("spec.apiCall.service.headers[{i}]"),
                        check::<HttpHeader>(h),
                    ));
                }
            }
            parts.push(("spec.apiCall.service".into(), check::<ServiceCall>(service)));
        }
        if let Some(Value::Array(data)) = call.get("data") {
            for (i, d) in data.iter().enumerate() {
                parts.push((format!("spec.apiCall.data[{i}]"), check::<RequestData>(d)));
            }
        }
        parts.push(("spec.apiCall".into(), check::<ExternalApiCall>(call)));
    }
    if let Some(Value::Array(projections)) = spec.get("projections") {
        for (i, p) in projections.iter().enumerate() {
            parts.push((format!("spec.projections[{i}]"), check::<Projection>(p)));
        }
    }
    parts.push(("spec".into(), check::<GlobalContextEntrySpec>(spec)));
    if let Some(metadata) = value.get("metadata") {
        parts.push(("metadata".into(), check::<ObjectMeta>(metadata)));
    }
    for (field, outcome) in parts {
        if let Err(reason) = outcome {
            return Err(invalid(field, reason));
        }
    }
    serde_json::from_value(value).map_err(|e| invalid("<document>".to_owned(), e.to_string()))
}

fn check<T: DeserializeOwned>(value: &Value) -> Result<(), String> {
    // `T::deserialize(&Value)` borrows, so nothing is cloned.
    T::deserialize(value).map(drop).map_err(|e| e.to_string())
}

/// Parse a multi-document YAML (or JSON) text into validated entries.
/// Empty documents are skipped. `origin` names the text in errors.
pub fn parse_entries(text: &str, origin: &str) -> Result<Vec<ContextEntry>> {
    let documents: Vec<Value> =
        // `0644` is 420, as Kyverno reads YAML (1.1).
        serde_saphyr::from_multiple_with_options(
            text,
            serde_saphyr::options! { legacy_octal_numbers: true },
        )
        .map_err(|e| Error::ParseFailed {
            origin: origin.to_owned(),
            document: 0,
            reason: e.to_string(),
        })?;
    let mut entries = Vec::with_capacity(documents.len());
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        entries.push(ContextEntry::from_resource(decode_entry(document)?)?);
    }
    Ok(entries)
}

/// Read and validate entries from files (multi-document YAML). Entry names
/// must be unique across all files.
pub fn load_entry_files<P: AsRef<Path>>(paths: &[P]) -> Result<Vec<ContextEntry>> {
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    let mut all = Vec::new();
    for path in paths {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::ReadFailed {
            path: path.to_owned(),
            source,
        })?;
        let origin = path.display().to_string();
        for entry in parse_entries(&text, &origin).map_err(|e| match e {
            Error::InvalidEntry {
                entry,
                field,
                reason,
            } => Error::InvalidEntry {
                entry,
                field,
                reason: format!("{reason} (in {origin})"),
            },
            other => other,
        })? {
            if let Some(first) = seen.insert(entry.name().to_owned(), path.to_owned()) {
                return Err(Error::InvalidEntry {
                    entry: entry.name().to_owned(),
                    field: "metadata.name".to_owned(),
                    reason: format!(
                        "duplicate entry name (in {} and {})",
                        first.display(),
                        path.display()
                    ),
                });
            }
            all.push(entry);
        }
    }
    Ok(all)
}
