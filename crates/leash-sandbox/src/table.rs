//! `meta.k8s.io` `Table` answers (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`,
//! negotiated in [`crate::transform`]), what `kubectl get` asks for to print its columns.
//!
//! Built-in kinds get the columns kube-apiserver's printers define
//! ([`printers`]); a CRD's kinds get `Name` plus the version's
//! `additionalPrinterColumns` (default: `Age` from `.metadata.creationTimestamp`),
//! evaluated with a JSONPath subset ([`JsonPath`]). As in kube-apiserver, every
//! column is sent (wide ones marked `priority: 1`: kubectl shows them with
//! `-o wide`), and each row carries the object as chosen by `includeObject`
//! (`None`, `Metadata`: a `PartialObjectMetadata`, the default, or `Object`).
//! Lists page exactly as plain lists do: the Table's `metadata` is the page's.
//! Watches that ask for Tables (`kubectl get -w`) get each event's object as
//! a one-row Table, the column definitions with the first event only.

mod columns;
mod jsonpath;
mod printers;

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::object::Entry;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::transform::MetaVersion;

pub(crate) use jsonpath::JsonPath;
pub(crate) use printers::format_selector;

/// What each row carries (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(v: Option<&str>) -> Result<Self, ApiError> {
        match v {
            None | Some("") | Some("Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// A column: kube-apiserver's `TableColumnDefinition`.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) kind: &'static str,
    pub(crate) format: &'static str,
    pub(crate) description: String,
    pub(crate) priority: i64,
}

/// The whole Table for `items` of `rt` with the list page's `metadata` (JSON text).
pub(crate) fn table(
    rt: &ResourceType,
    version: MetaVersion,
    items: &[std::sync::Arc<Entry>],
    metadata: &str,
    include: IncludeObject,
) -> Result<Value, ApiError> {
    let now = SystemTime::now();
    let api_version = rt.api_version();
    let mut rows = Vec::with_capacity(items.len());
    for e in items {
        let object: Value = serde_json::from_slice(&e.json_at(&api_version))
            .map_err(|err| ApiError::internal(format!("stored object is not JSON: {err}")))?;
        rows.push(row(rt, version, object, include, now));
    }
    let metadata: Value = serde_json::from_str(metadata)
        .map_err(|err| ApiError::internal(format!("list metadata is not JSON: {err}")))?;
    Ok(assemble(rt, version, metadata, rows, true))
}

/// A watch event's object as a Table of one row, as kube-apiserver sends it
/// to a watch that asked for Tables: the column definitions with the first
/// event only (`headers`), the object's resourceVersion as the Table's.
pub(crate) fn watch_event(
    rt: &ResourceType,
    version: MetaVersion,
    object: Value,
    include: IncludeObject,
    headers: bool,
) -> Value {
    let rv = object
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let row = row(rt, version, object, include, SystemTime::now());
    assemble(
        rt,
        version,
        json!({"resourceVersion": rv}),
        vec![row],
        headers,
    )
}

fn row(
    rt: &ResourceType,
    version: MetaVersion,
    object: Value,
    include: IncludeObject,
    now: SystemTime,
) -> Value {
    let (cells, conditions) = cells(rt, &object, now);
    let mut row = Map::new();
    row.insert("cells".into(), Value::Array(cells));
    if let Some(c) = conditions {
        row.insert("conditions".into(), c);
    }
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row.insert(
                "object".into(),
                json!({"kind": "PartialObjectMetadata", "apiVersion": version.api_version(),
                       "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({}))}),
            );
        }
        IncludeObject::Object => {
            row.insert("object".into(), object);
        }
    }
    Value::Object(row)
}

fn assemble(
    rt: &ResourceType,
    version: MetaVersion,
    metadata: Value,
    rows: Vec<Value>,
    headers: bool,
) -> Value {
    let columns = if headers {
        Value::Array(
            columns(rt)
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name, "type": c.kind, "format": c.format,
                        "description": c.description, "priority": c.priority,
                    })
                })
                .collect(),
        )
    } else {
        Value::Null
    };
    json!({
        "kind": "Table",
        "apiVersion": version.api_version(),
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

fn columns(rt: &ResourceType) -> Vec<Column> {
    match &rt.crd {
        Some(_) => {
            let mut columns = vec![columns::name_column()];
            columns.extend(custom_columns(rt).iter().map(|c| Column {
                name: c.name.clone(),
                kind: match c.kind.as_str() {
                    "integer" => "integer",
                    "number" => "number",
                    "boolean" => "boolean",
                    "date" => "date",
                    _ => "string",
                },
                format: if c.format == "name" { "name" } else { "" },
                description: if c.description.is_empty() {
                    format!(
                        "Custom resource definition column (in JSONPath format): {}",
                        c.json_path
                    )
                } else {
                    c.description.clone()
                },
                priority: c.priority,
            }));
            columns
        }
        None => columns::columns(&rt.group, &rt.kind),
    }
}

/// A CRD version's printer columns, or the default `Age` column.
fn custom_columns(rt: &ResourceType) -> Vec<crate::resources::PrinterColumn> {
    if !rt.printer_columns.is_empty() {
        return rt.printer_columns.clone();
    }
    vec![crate::resources::PrinterColumn {
        name: "Age".into(),
        kind: "date".into(),
        format: String::new(),
        description: columns::CREATION_TIMESTAMP.into(),
        priority: 0,
        json_path: ".metadata.creationTimestamp".into(),
    }]
}

fn cells(rt: &ResourceType, object: &Value, now: SystemTime) -> (Vec<Value>, Option<Value>) {
    if rt.crd.is_none() {
        return printers::cells(&rt.group, &rt.kind, object, now);
    }
    let mut cells = vec![json!(printers::name(object))];
    for c in custom_columns(rt) {
        let value = JsonPath::parse(&c.json_path)
            .ok()
            .and_then(|p| p.find(object).cloned());
        cells.push(match value {
            None | Some(Value::Null) => Value::Null,
            Some(v) => custom_cell(&c.kind, v, now),
        });
    }
    (cells, None)
}

/// A custom column's cell, typed as kube-apiserver's CRD table convertor types it.
fn custom_cell(kind: &str, v: Value, now: SystemTime) -> Value {
    match (kind, v) {
        ("string", Value::String(s)) => Value::String(s),
        ("string", other) => Value::String(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, Value::from),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("boolean", Value::Bool(b)) => Value::Bool(b),
        ("date", Value::String(s)) => Value::String(printers::age_of(Some(&s), now)),
        _ => Value::Null,
    }
}
