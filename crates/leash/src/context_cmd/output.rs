//! What `leash context` prints: the `--once` object and the per-update lines.

use std::collections::BTreeMap;
use std::sync::Arc;

use leash_context::{Change, ChangeKind, Snapshot};
use serde_json::{Map, Value, json};

/// `{"<entry>": {"<projection>": value, ...}, ...}` for `--once`.
pub(crate) fn once_object(snapshots: &BTreeMap<String, Arc<Snapshot>>) -> Value {
    let mut out = Map::new();
    for (name, snapshot) in snapshots {
        let projections: Map<String, Value> = snapshot
            .projections
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        out.insert(name.clone(), Value::Object(projections));
    }
    Value::Object(out)
}

/// One JSON line for a change: the entry, its state and, when it has data,
/// its projections; or `"removed": true`.
pub(crate) fn change_line(change: &Change) -> Value {
    match &change.kind {
        ChangeKind::Updated {
            snapshot, status, ..
        } => {
            let mut line = json!({
                "entry": change.name,
                "state": status.state,
            });
            if let Some(snapshot) = snapshot {
                line["computedAt"] = Value::String(
                    humantime::format_rfc3339_millis(snapshot.computed_at).to_string(),
                );
                line["projections"] = Value::Object(
                    snapshot
                        .projections
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                );
            }
            if let Some(reason) = &status.reason {
                line["reason"] = Value::String(reason.clone());
            }
            if let Some(error) = &status.last_error {
                line["lastError"] = Value::String(error.clone());
            }
            line
        }
        ChangeKind::Removed => json!({"entry": change.name, "removed": true}),
        _ => json!({"entry": change.name}),
    }
}
