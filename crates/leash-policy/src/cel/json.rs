//! Conversions between JSON (Kubernetes objects) and CEL values.

use std::collections::HashMap;
use std::sync::Arc;

use cel::Value;
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::objects::{Key, Map};

use super::shared::Shared;

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

/// A JSON value straight into the interpreter's values, in one pass (the
/// same typing as [`from_json`]). Binding a [`Value`] converts it again,
/// copying every map on the way; a Kubernetes object is converted this way
/// instead, once, its maps and lists [`Shared`] so that the interpreter's
/// copies of them cost nothing.
pub(crate) fn to_val(v: &serde_json::Value) -> Box<dyn Val> {
    match v {
        serde_json::Value::Null => Box::new(CelNull),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        serde_json::Value::String(s) => Box::new(CelString::from(s.clone())),
        serde_json::Value::Array(a) => Shared::boxed(Box::new(CelList::from(
            a.iter().map(to_val).collect::<Vec<Box<dyn Val>>>(),
        ))),
        serde_json::Value::Object(m) => Shared::boxed(Box::new(CelMap::from(
            m.iter()
                .map(|(k, v)| (CelMapKey::from(k.clone()), to_val(v)))
                .collect::<HashMap<CelMapKey<'static>, Box<dyn Val>>>(),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn to_val_types_as_from_json_does() {
        for v in [
            json!(null),
            json!(true),
            json!(-3),
            json!(u64::MAX),
            json!(1.5),
            json!("s"),
            json!([1, "a", {"k": [null]}]),
            json!({"a": {"b": [1, 2.5, "x"]}, "c": false}),
        ] {
            let val = to_val(&v);
            assert_eq!(Value::try_from(val.as_ref()).unwrap(), from_json(&v), "{v}");
        }
    }
}
