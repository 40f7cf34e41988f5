//! What a read answers with, as the `Accept` header asks (kube-apiserver's
//! `transformObject`): the objects themselves, a `meta.k8s.io` `Table`
//! (`as=Table`, [`crate::table`]), or only their metadata
//! (`as=PartialObjectMetadata` for gets and watches,
//! `as=PartialObjectMetadataList` for lists), which metadata-only clients
//! (kube-rs `Api<PartialObjectMeta<K>>`, client-go's metadata informers) ask
//! for so that they never read the objects' bodies.
//!
//! A `PartialObjectMetadata` is `{"kind", "apiVersion": "meta.k8s.io/v1",
//! "metadata"}` with the stored object's `metadata` copied as it is (its
//! bytes, not a re-encoding of it); a `PartialObjectMetadataList` keeps the
//! list page's `metadata` (resourceVersion, continue, remainingItemCount).
//! As in kube-apiserver, the transformation must fit the request: a list
//! asked as `PartialObjectMetadata`, or an object or a watch asked as
//! `PartialObjectMetadataList`, is 406 Not Acceptable.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::list::{ListBody, Page};
use crate::status::ApiError;

/// The `meta.k8s.io` version a Table or a PartialObjectMetadata is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetaVersion {
    V1,
    V1beta1,
}

impl MetaVersion {
    pub(crate) fn api_version(self) -> &'static str {
        match self {
            Self::V1 => "meta.k8s.io/v1",
            Self::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// A representation other than the object itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transform {
    /// `as=Table`.
    Table(MetaVersion),
    /// `as=PartialObjectMetadata`: one object's metadata (a get, a watch's events).
    Metadata(MetaVersion),
    /// `as=PartialObjectMetadataList`: a list page of metadata.
    MetadataList(MetaVersion),
}

impl Transform {
    /// The transformation `accept` asks for: that of its first media range
    /// this server can answer. `None`: the objects themselves (the first
    /// such range is plain JSON or YAML, or no range asks for anything this
    /// server serves; kubectl lists Table v1, then v1beta1, then plain JSON).
    pub(crate) fn negotiate(accept: Option<&str>) -> Option<Transform> {
        for range in accept?.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let params: Vec<(String, String)> = parts
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect();
            let param = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
            let json = matches!(media.as_str(), "application/json" | "application/*" | "*/*");
            let version = match param("v") {
                Some("v1") => Some(MetaVersion::V1),
                Some("v1beta1") => Some(MetaVersion::V1beta1),
                _ => None,
            };
            let meta = json && param("g") == Some("meta.k8s.io");
            match (param("as"), version) {
                (Some("Table"), Some(v)) if meta => return Some(Self::Table(v)),
                (Some("PartialObjectMetadata"), Some(v)) if meta => {
                    return Some(Self::Metadata(v));
                }
                (Some("PartialObjectMetadataList"), Some(v)) if meta => {
                    return Some(Self::MetadataList(v));
                }
                // Another transformation, group or version: not served, try the next.
                (Some(_), _) => {}
                (None, _) if json || media.contains("yaml") => return None,
                (None, _) => {}
            }
        }
        None
    }

    /// The 406 Not Acceptable of a transformation that does not fit the
    /// request (kube-apiserver's words): a list asked as
    /// `PartialObjectMetadata`, an object or a watch as a `…List`.
    pub(crate) fn mismatch(self) -> ApiError {
        let message = match self {
            Self::MetadataList(_) => {
                "you requested PartialObjectMetadataList, but the requested object is not a list"
            }
            Self::Metadata(_) => {
                "you requested PartialObjectMetadata, but the requested object is a list"
            }
            Self::Table(_) => "you requested a Table, but the request cannot be transformed",
        };
        ApiError::new(406, "NotAcceptable", message)
    }
}

/// The part of a stored object a `PartialObjectMetadata` keeps.
#[derive(Deserialize)]
struct MetadataOnly<'a> {
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

/// The `PartialObjectMetadata` of a stored object (its JSON `object`).
pub(crate) fn partial_object(object: &[u8], version: MetaVersion) -> Bytes {
    // Stored objects are JSON the store wrote; the fallback never happens.
    let metadata = serde_json::from_slice::<MetadataOnly<'_>>(object)
        .ok()
        .and_then(|m| m.metadata)
        .map_or("{}", RawValue::get);
    partial_of_metadata(metadata, version)
}

/// A `PartialObjectMetadata` with `metadata` (JSON text).
pub(crate) fn partial_of_metadata(metadata: &str, version: MetaVersion) -> Bytes {
    Bytes::from(format!(
        "{{\"kind\":\"PartialObjectMetadata\",\"apiVersion\":\"{}\",\"metadata\":{metadata}}}",
        version.api_version()
    ))
}

/// A list page as a `PartialObjectMetadataList`.
pub(crate) fn partial_list(page: &Page, version: MetaVersion) -> ListBody {
    let head = format!(
        "{{\"kind\":\"PartialObjectMetadataList\",\"apiVersion\":\"{}\",\"metadata\":{},\"items\":[",
        version.api_version(),
        page.metadata,
    );
    let mut pieces = Vec::with_capacity(page.items.len() * 2 + 2);
    pieces.push(Bytes::from(head));
    for (i, e) in page.items.iter().enumerate() {
        if i > 0 {
            pieces.push(Bytes::from_static(b","));
        }
        pieces.push(partial_object(&e.json, version));
    }
    pieces.push(Bytes::from_static(b"]}"));
    ListBody::new(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const KUBE_RS_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    const KUBE_RS_ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

    #[test]
    fn negotiates_tables_and_metadata() {
        use MetaVersion::*;
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            Transform::negotiate(Some(kubectl)),
            Some(Transform::Table(V1))
        );
        assert_eq!(
            Transform::negotiate(Some(KUBE_RS_LIST)),
            Some(Transform::MetadataList(V1))
        );
        assert_eq!(
            Transform::negotiate(Some(KUBE_RS_ONE)),
            Some(Transform::Metadata(V1))
        );
        // client-go's metadata client, with its fallback to plain JSON.
        let client_go = "application/json;as=PartialObjectMetadataList;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            Transform::negotiate(Some(client_go)),
            Some(Transform::MetadataList(V1beta1))
        );
        for plain in [
            "application/json",
            "application/yaml",
            "application/json;as=Unknown;g=meta.k8s.io;v=v1,application/json",
            // Another group or an unknown version is not a transformation served here.
            "application/json;as=PartialObjectMetadata;g=example.com;v=v1",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v2",
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            "application/json,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        ] {
            assert_eq!(Transform::negotiate(Some(plain)), None, "{plain}");
        }
        assert_eq!(Transform::negotiate(None), None);
    }

    #[test]
    fn keeps_only_the_metadata_as_stored() {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "n", "labels": {"x": "1"}, "resourceVersion": "7"},
            "data": {"big": "value"}});
        let bytes = serde_json::to_vec(&object).unwrap();
        let partial: Value =
            serde_json::from_slice(&partial_object(&bytes, MetaVersion::V1)).unwrap();
        assert_eq!(
            partial,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": object["metadata"]})
        );
        let partial: Value =
            serde_json::from_slice(&partial_object(b"{\"kind\":\"X\"}", MetaVersion::V1beta1))
                .unwrap();
        assert_eq!(partial["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(partial["metadata"], json!({}));
    }
}
