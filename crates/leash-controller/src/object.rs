//! Objects as kube-rs resources over their raw JSON.
//!
//! The engine evaluates `serde_json::Value`s; kube's `DynamicObject` keeps
//! everything but `metadata` in a `Value` too but would be converted back
//! for every evaluation. [`Object`] is parsed once: the whole document
//! stays shared and immutable (`Arc<Value>`, house rule 9), the parsed
//! `ObjectMeta` beside it is what kube's watcher needs.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::{ApiResource, DynamicResourceScope};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// An object of any kind: its document, and its parsed metadata.
#[derive(Debug, Clone)]
pub struct Object {
    /// `metadata`, parsed.
    pub meta: ObjectMeta,
    /// The whole document.
    pub raw: Arc<Value>,
}

impl Object {
    /// Wraps a document (its `metadata` must parse).
    pub fn from_value(raw: Value) -> Result<Object, serde_json::Error> {
        let meta = match raw.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m)?,
            None => ObjectMeta::default(),
        };
        Ok(Object {
            meta,
            raw: Arc::new(raw),
        })
    }

    /// `metadata.uid`, or "".
    pub fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or("")
    }

    /// `metadata.name`, or "".
    pub fn name(&self) -> &str {
        self.meta.name.as_deref().unwrap_or("")
    }

    /// `metadata.namespace`, or "".
    pub fn namespace(&self) -> &str {
        self.meta.namespace.as_deref().unwrap_or("")
    }

    /// `metadata.resourceVersion` as a number, when it is one (the sandbox's
    /// and etcd's are); 0 otherwise.
    pub fn resource_version(&self) -> u64 {
        self.meta
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        Object::from_value(raw).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

/// `kube::Resource` of a type with a `meta: ObjectMeta` field, its kind
/// given at run time by an `ApiResource` (as `DynamicObject`'s is).
macro_rules! dynamic_resource {
    ($t:ty) => {
        impl Resource for $t {
            type DynamicType = ApiResource;
            type Scope = DynamicResourceScope;

            fn kind(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.kind)
            }
            fn group(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.group)
            }
            fn version(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.version)
            }
            fn api_version(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.api_version)
            }
            fn plural(dt: &ApiResource) -> Cow<'_, str> {
                Cow::from(&dt.plural)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.meta
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.meta
            }
        }
    };
}

dynamic_resource!(Object);

/// An object of any kind as a watch or a list sends it: its parsed
/// metadata and its JSON text, never built into a `Value` (the store keeps
/// the text; a reader parses its own copy). What the full-body watches
/// read: parsing 10,000 pods into `Value`s only to encode them again for the
/// store cost more than the evaluation of their policies.
#[derive(Debug, Clone)]
pub struct RawObject {
    /// `metadata`, parsed.
    pub meta: ObjectMeta,
    /// The document's JSON, as sent.
    pub json: Box<serde_json::value::RawValue>,
    /// Whether the document names its `kind`. kube-apiserver leaves
    /// `apiVersion` and `kind` out of the items of a list of built-in kinds
    /// (a watch event's object has them): [`RawObject::typed_json`] puts
    /// them in.
    pub has_kind: bool,
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: ObjectMeta,
            #[serde(default)]
            kind: Option<serde::de::IgnoredAny>,
        }
        let json = Box::<serde_json::value::RawValue>::deserialize(d)?;
        let head = serde_json::from_str::<Head>(json.get()).map_err(serde::de::Error::custom)?;
        Ok(RawObject {
            meta: head.metadata,
            json,
            has_kind: head.kind.is_some(),
        })
    }
}

impl RawObject {
    /// The document's JSON with `apiVersion` and `kind` of `resource` put
    /// first when it does not name its kind (a list item), else as sent.
    pub fn typed_json(&self, resource: &ApiResource) -> Cow<'_, str> {
        let text = self.json.get();
        if self.has_kind {
            return Cow::Borrowed(text);
        }
        // A RawValue holds exactly one JSON value, here an object: its text
        // starts with `{` (RawValue keeps no leading whitespace).
        let Some(rest) = text.strip_prefix('{') else {
            return Cow::Borrowed(text);
        };
        let head = serde_json::json!({"apiVersion": resource.api_version, "kind": resource.kind})
            .to_string();
        let head = &head[..head.len() - 1]; // without its closing brace
        let sep = if rest.trim_start().starts_with('}') {
            ""
        } else {
            ","
        };
        Cow::Owned(format!("{head}{sep}{rest}"))
    }
}

dynamic_resource!(RawObject);

/// An `ApiResource` from its parts.
pub fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_metadata_once_and_keeps_the_document() {
        let v = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "42"},
            "spec": {"x": 1}});
        let o: Object = serde_json::from_value(v.clone()).unwrap();
        assert_eq!((o.name(), o.namespace(), o.uid()), ("a", "n", "u"));
        assert_eq!(o.resource_version(), 42);
        assert_eq!(*o.raw, v);
        assert_eq!(serde_json::to_value(&o).unwrap(), v);
        assert!(
            serde_json::from_value::<Object>(serde_json::json!({"metadata": {"name": 3}})).is_err()
        );
    }

    #[test]
    fn list_items_without_a_kind_get_the_watched_ones() {
        let pods = api_resource("", "v1", "Pod", "pods");
        // As kube-apiserver lists built-in kinds: items without apiVersion and kind.
        let item: RawObject =
            serde_json::from_str(r#"{"metadata":{"name":"a","uid":"u"},"spec":{}}"#).unwrap();
        assert!(!item.has_kind);
        let typed: Value = serde_json::from_str(&item.typed_json(&pods)).unwrap();
        assert_eq!(
            typed,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "a", "uid": "u"}, "spec": {}})
        );
        let empty: RawObject = serde_json::from_str("{}").unwrap();
        let typed: Value = serde_json::from_str(&empty.typed_json(&pods)).unwrap();
        assert_eq!(
            typed,
            serde_json::json!({"apiVersion": "v1", "kind": "Pod"})
        );
        // A document that names its kind is kept as sent.
        let text = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}"#;
        let sent: RawObject = serde_json::from_str(text).unwrap();
        assert!(matches!(sent.typed_json(&pods), Cow::Borrowed(t) if t == text));
    }

    #[test]
    fn raw_objects_keep_the_text_as_sent_and_parse_only_metadata() {
        let text = r#"{"kind":"Pod","metadata":{"name":"a","namespace":"n","uid":"u"},"spec":{"x":[1, 2]}}"#;
        let o: RawObject = serde_json::from_str(text).unwrap();
        assert_eq!(o.json.get(), text);
        assert_eq!(o.meta.name.as_deref(), Some("a"));
        assert_eq!(o.meta.uid.as_deref(), Some("u"));
        let bare: RawObject = serde_json::from_str(r#"{"kind":"X"}"#).unwrap();
        assert_eq!(bare.meta, ObjectMeta::default());
        assert!(serde_json::from_str::<RawObject>(r#"{"metadata":{"name":3}}"#).is_err());
        // As a watch event carries it: the tag comes first, the object is read in place.
        let ev: kube::core::WatchEvent<RawObject> =
            serde_json::from_str(&format!(r#"{{"type":"ADDED","object":{text}}}"#)).unwrap();
        let kube::core::WatchEvent::Added(o) = ev else {
            panic!("not an ADDED event")
        };
        assert_eq!(o.json.get(), text);
    }
}
