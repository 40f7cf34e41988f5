//! Conversions between JSON (Kubernetes objects) and CEL values.

use std::sync::Arc;

use cel::Value;
use cel::objects::{Key, Map};

/// A JSON value as CEL sees it: integers are `int` (or `uint` past
/// `i64::MAX`), other numbers `double`.
pub(crate) fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(from_json).collect())),
        serde_json::Value::Object(m) => Value::Map(Map {
            map: Arc::new(
                m.iter()
                    .map(|(k, v)| (Key::String(Arc::new(k.clone())), from_json(v)))
                    .collect(),
            ),
        }),
    }
}
