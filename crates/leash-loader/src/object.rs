//! Objects as the loader hands them out, and the parsing of list pages.
//!
//! Items are never deserialized into typed structs: a page is parsed into
//! borrowed raw items, each item's `metadata.{name,namespace,uid}` is read,
//! and the item's text is kept as the server sent it, with the `kind` and
//! `apiVersion` that lists omit per item put in front (as kubectl adds them).

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use crate::kind::ResolvedKind;

/// One object of a loaded kind, as the server sent it (plus `kind` and
/// `apiVersion` if the list omitted them).
#[derive(Clone)]
pub struct LoadedObject {
    kind: Arc<ResolvedKind>,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
    /// Valid UTF-8, one JSON object: a slice of the page's body when the
    /// item already had `kind` and `apiVersion` (no copy), else a new buffer.
    json: Bytes,
}

impl fmt::Debug for LoadedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedObject")
            .field("kind", &self.kind.qualified_name())
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("uid", &self.uid)
            .field("bytes", &self.json.len())
            .finish()
    }
}

impl LoadedObject {
    /// The kind the object was loaded as.
    pub fn kind(&self) -> &Arc<ResolvedKind> {
        &self.kind
    }

    /// `metadata.namespace` (absent for cluster-scoped objects).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.uid`, if the server set one.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    /// The object's JSON text: one JSON object, exactly as the server sent
    /// it, with `kind` and `apiVersion` first if the list item lacked them.
    pub fn json(&self) -> &str {
        // Validated as UTF-8 when the object was built; cannot fail.
        std::str::from_utf8(&self.json).unwrap_or_default()
    }

    /// The object's JSON text as bytes (valid UTF-8), without re-checking.
    pub fn json_bytes(&self) -> &[u8] {
        &self.json
    }

    /// The object's JSON text as shared bytes (valid UTF-8; cheap to clone).
    pub fn to_bytes(&self) -> Bytes {
        self.json.clone()
    }

    /// The object as a `serde_json::Value`.
    pub fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_slice(&self.json)
    }

    /// Deserialize the object into `T`.
    pub fn deserialize<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.json)
    }
}

/// One page of a list, indexed but not yet turned into objects: the body
/// and where each item is in it. Indexing validates the whole body as JSON
/// (a body cut short fails here and the request is retried); building the
/// objects reads each item's metadata, which can then overlap with the
/// request for the next page.
#[derive(Debug)]
pub(crate) struct PageIndex {
    body: Bytes,
    items: Vec<Range<usize>>,
    /// `metadata.continue` (empty or absent: last page).
    pub(crate) next: Option<String>,
}

#[derive(Deserialize)]
struct ListHead<'a> {
    #[serde(default, borrow)]
    metadata: ListMeta<'a>,
    #[serde(default, borrow)]
    items: Option<Vec<&'a RawValue>>,
}

#[derive(Default, Deserialize)]
struct ListMeta<'a> {
    #[serde(default, borrow, rename = "continue")]
    continue_token: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemHead<'a> {
    #[serde(default)]
    kind: Option<IgnoredAny>,
    #[serde(default)]
    api_version: Option<IgnoredAny>,
    #[serde(borrow)]
    metadata: ItemMeta<'a>,
}

#[derive(Deserialize)]
struct ItemMeta<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    uid: Option<Cow<'a, str>>,
}

/// Index a list page's body. An error means the body is not a list (the
/// caller retries the request).
pub(crate) fn index_page(body: &Bytes) -> serde_json::Result<PageIndex> {
    let head: ListHead<'_> = serde_json::from_slice(body)?;
    let base = body.as_ptr() as usize;
    let items = head
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|raw| {
            // `raw` borrows from `body`: its offset is a pointer difference.
            let text = raw.get();
            let start = text.as_ptr() as usize - base;
            start..start + text.len()
        })
        .collect();
    let next = head
        .metadata
        .continue_token
        .map(Cow::into_owned)
        .filter(|t| !t.is_empty());
    Ok(PageIndex {
        body: body.clone(),
        items,
        next,
    })
}

impl PageIndex {
    /// Build the page's objects. Fails if an item is not an object with
    /// `metadata.name` (a server bug: the kind fails loudly).
    pub(crate) fn into_objects(
        self,
        kind: &Arc<ResolvedKind>,
    ) -> serde_json::Result<Vec<LoadedObject>> {
        let prefix = KindPrefix::new(kind);
        let mut objects = Vec::with_capacity(self.items.len());
        for range in self.items {
            let bytes = &self.body[range.clone()];
            let text = std::str::from_utf8(bytes).map_err(serde::de::Error::custom)?;
            let item: ItemHead<'_> = serde_json::from_str(text)?;
            let json = if item.kind.is_some() && item.api_version.is_some() {
                self.body.slice(range)
            } else {
                Bytes::from(prefix.inject(
                    text.trim(),
                    item.kind.is_some(),
                    item.api_version.is_some(),
                ))
            };
            objects.push(LoadedObject {
                kind: kind.clone(),
                namespace: item.metadata.namespace.map(Cow::into_owned),
                name: item.metadata.name.into_owned(),
                uid: item.metadata.uid.map(Cow::into_owned),
                json,
            });
        }
        Ok(objects)
    }
}

/// The `"kind":"..."` and `"apiVersion":"..."` members to put in front of
/// list items that lack them.
struct KindPrefix {
    kind_member: String,
    api_version_member: String,
}

impl KindPrefix {
    fn new(kind: &ResolvedKind) -> Self {
        let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned());
        KindPrefix {
            kind_member: format!("\"kind\":{}", quote(&kind.kind)),
            api_version_member: format!("\"apiVersion\":{}", quote(&kind.api_version())),
        }
    }

    /// `text` is one JSON object (trimmed).
    fn inject(&self, text: &str, has_kind: bool, has_api_version: bool) -> String {
        if has_kind && has_api_version {
            return text.to_owned();
        }
        let body = text.strip_prefix('{').unwrap_or(text).trim_start();
        let mut out = String::with_capacity(
            text.len() + self.kind_member.len() + self.api_version_member.len() + 3,
        );
        out.push('{');
        let mut first = true;
        for (missing, member) in [
            (!has_kind, &self.kind_member),
            (!has_api_version, &self.api_version_member),
        ] {
            if missing {
                if !first {
                    out.push(',');
                }
                out.push_str(member);
                first = false;
            }
        }
        if !body.starts_with('}') {
            out.push(',');
        }
        out.push_str(body);
        out
    }
}

/// The identities already written for one kind: every object is written
/// exactly once even when a list is restarted or resumed across snapshots.
///
/// UUIDs (what API servers assign) are kept as 16 bytes, so memory stays
/// small for large kinds; other uids, and objects without one (keyed by
/// namespace/name), are kept as text.
#[derive(Debug, Default)]
pub(crate) struct SeenSet {
    uuids: HashSet<u128>,
    others: HashSet<String>,
}

impl SeenSet {
    /// Record `object`; false if it was already recorded.
    pub(crate) fn insert(&mut self, object: &LoadedObject) -> bool {
        match object.uid.as_deref() {
            Some(uid) => match parse_uuid(uid) {
                Some(n) => self.uuids.insert(n),
                None => self.others.insert(format!("uid:{uid}")),
            },
            None => self.others.insert(format!(
                "name:{}/{}",
                object.namespace.as_deref().unwrap_or(""),
                object.name
            )),
        }
    }

    /// How many identities are recorded.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.uuids.len() + self.others.len()
    }
}

/// `8-4-4-4-12` hex digits as a u128 (case-insensitive); anything else: None.
fn parse_uuid(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    let mut n: u128 = 0;
    for (i, &c) in b.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            if c != b'-' {
                return None;
            }
            continue;
        }
        let d = (c as char).to_digit(16)?;
        n = (n << 4) | u128::from(d);
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::tests::kind;

    fn pods() -> Arc<ResolvedKind> {
        Arc::new(kind("", "v1", "Pod", "pods", true))
    }

    struct Parsed {
        objects: Vec<LoadedObject>,
        next: Option<String>,
    }

    fn parse_page(kind: &Arc<ResolvedKind>, body: &[u8]) -> serde_json::Result<Parsed> {
        let index = index_page(&Bytes::copy_from_slice(body))?;
        let next = index.next.clone();
        Ok(Parsed {
            objects: index.into_objects(kind)?,
            next,
        })
    }

    #[test]
    fn items_get_kind_and_api_version() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"tok"},
            "items":[{"metadata":{"name":"a","namespace":"default","uid":"0b5c2e1a-1111-4222-8333-444455556666"},"spec":{"x":"}{\""}},
                     {"metadata":{"name":"b\u0041"}},
                     { }]}"#;
        // The third item has no metadata: parsing must fail (not a list of objects).
        assert!(parse_page(&pods(), body).is_err());

        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"tok"},
            "items":[{"metadata":{"name":"a","namespace":"default","uid":"0b5c2e1a-1111-4222-8333-444455556666"},"spec":{"x":"}{\""}},
                     {"metadata":{"name":"b\u0041"}}]}"#;
        let page = parse_page(&pods(), body).unwrap();
        assert_eq!(page.next.as_deref(), Some("tok"));
        assert_eq!(page.objects.len(), 2);
        let a = &page.objects[0];
        assert_eq!((a.namespace(), a.name()), (Some("default"), "a"));
        let v = a.to_value().unwrap();
        assert_eq!(v["kind"], "Pod");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["spec"]["x"], "}{\"");
        assert!(
            a.json()
                .starts_with(r#"{"kind":"Pod","apiVersion":"v1","metadata""#),
            "{}",
            a.json()
        );
        assert_eq!(page.objects[1].name(), "bA");
    }

    #[test]
    fn items_that_carry_kind_are_kept_verbatim() {
        let body = br#"{"metadata":{},"items":[{"apiVersion":"example.leash.dev/v1","kind":"Widget","metadata":{"name":"w"}}]}"#;
        let page = parse_page(&pods(), body).unwrap();
        assert_eq!(
            page.objects[0].json(),
            r#"{"apiVersion":"example.leash.dev/v1","kind":"Widget","metadata":{"name":"w"}}"#
        );
        assert_eq!(page.next, None);
    }

    #[test]
    fn only_the_missing_member_is_added() {
        let prefix = KindPrefix::new(&pods());
        assert_eq!(
            prefix.inject(r#"{"kind":"Pod"}"#, true, false),
            r#"{"apiVersion":"v1","kind":"Pod"}"#
        );
        assert_eq!(
            prefix.inject("{}", false, false),
            r#"{"kind":"Pod","apiVersion":"v1"}"#
        );
        assert_eq!(
            prefix.inject("{ \"a\":1 }", false, true),
            r#"{"kind":"Pod","a":1 }"#
        );
    }

    #[test]
    fn empty_and_null_item_lists_and_last_pages() {
        for body in [
            &br#"{"metadata":{"continue":""},"items":[]}"#[..],
            br#"{"metadata":{},"items":null}"#,
            br#"{}"#,
        ] {
            let page = parse_page(&pods(), body).unwrap();
            assert!(page.objects.is_empty());
            assert_eq!(page.next, None);
        }
        assert!(parse_page(&pods(), b"Too many requests").is_err());
        assert!(parse_page(&pods(), br#"{"items":[{"metadata":{"name":"a"}}"#).is_err());
    }

    #[test]
    fn seen_set_dedups_by_uid_then_by_name() {
        let body = br#"{"items":[
            {"metadata":{"name":"a","uid":"0B5C2E1A-1111-4222-8333-444455556666"}},
            {"metadata":{"name":"a2","uid":"0b5c2e1a-1111-4222-8333-444455556666"}},
            {"metadata":{"name":"b","uid":"not-a-uuid"}},
            {"metadata":{"name":"b","uid":"not-a-uuid"}},
            {"metadata":{"name":"c","namespace":"x"}},
            {"metadata":{"name":"c","namespace":"y"}},
            {"metadata":{"name":"c","namespace":"x"}}]}"#;
        let page = parse_page(&pods(), body).unwrap();
        let mut seen = SeenSet::default();
        let fresh: Vec<bool> = page.objects.iter().map(|o| seen.insert(o)).collect();
        assert_eq!(fresh, [true, false, true, false, true, true, false]);
        assert_eq!(seen.len(), 4);
    }

    #[test]
    fn uuids_parse_strictly() {
        assert_eq!(parse_uuid("00000000-0000-0000-0000-00000000000f"), Some(15));
        assert_eq!(parse_uuid("00000000-0000-0000-0000-00000000000g"), None);
        assert_eq!(parse_uuid("00000000000000000000000000000000000f"), None);
        assert_eq!(parse_uuid("short"), None);
    }
}
