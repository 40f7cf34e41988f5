//! Objects as the loader hands them out, and the parsing of list pages.
//!
//! Items are never deserialized into typed structs, and each is parsed once:
//! a page is walked member by member, each item's
//! `metadata.{name,namespace,uid}` is read where it stands (the rest of the
//! item is skipped, not built), and the item's text is kept as the server
//! sent it, with the `kind` and `apiVersion` that lists omit per item put in
//! front (as kubectl adds them).
//!
//! A load given an [`ItemParser`] builds each item's value in that same
//! walk (the one pass over the item's bytes), for consumers that want a
//! value, not text: the parser decides what of the item is built, and may
//! turn the value into what the consumer wants of it there and then
//! ([`ItemParser::finish`]), on the core that built it.

use std::any::Any;
use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;

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
    /// item already had `kind` and `apiVersion` (no copy), else a new buffer
    /// (for a parsed item: the slice, as the list sent it).
    json: Bytes,
    /// What the load's [`ItemParser`] made of the item.
    parsed: Option<Parsed>,
}

/// What an [`ItemParser`] made of one item.
#[derive(Clone)]
pub enum Parsed {
    /// The value it built, with `kind` and `apiVersion` set.
    Value(Value),
    /// What [`ItemParser::finish`] made of that value.
    Made(Arc<dyn Any + Send + Sync>),
}

impl fmt::Debug for Parsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Parsed::Value(v) => f.debug_tuple("Value").field(v).finish(),
            Parsed::Made(_) => f.write_str("Made(..)"),
        }
    }
}

/// Builds a value of each list item as the page is walked, so that the
/// item's bytes are read once (see [`crate::Loader::load_parsed`]).
///
/// The value must keep `kind`, `apiVersion` and `metadata.name`,
/// `metadata.namespace` and `metadata.uid` where the item has them: the
/// loader reads the object's identity from it (an item whose value has no
/// string `metadata.name` is a malformed page, as without a parser).
pub trait ItemParser: Send + Sync {
    /// Parse one JSON value from `de` (the deserializer is positioned at
    /// it; what follows it is the loader's).
    fn parse(
        &self,
        de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
    ) -> serde_json::Result<Value>;

    /// What the load keeps of an item's value (`kind` and `apiVersion`
    /// set, its identity read), called in the walk right after
    /// [`parse`](Self::parse), while the value is in the cache of the core
    /// that built it: by default the value ([`LoadedObject::take_parsed`]);
    /// a parser that uses the value there and then returns what it made of
    /// it ([`LoadedObject::take_made`]).
    ///
    /// The page may still turn out malformed after this item (it is then
    /// fetched and walked again, and what `finish` made of its items is
    /// dropped), and an object may be one the load already handed out (a
    /// restarted list; dropped too): `finish` must not act beyond what it
    /// returns.
    fn finish(&self, value: Value) -> Parsed {
        Parsed::Value(value)
    }
}

impl fmt::Debug for LoadedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedObject")
            .field("kind", &self.kind.qualified_name())
            .field("namespace", &self.namespace)
            .field("name", &self.name)
            .field("uid", &self.uid)
            .field("bytes", &self.json.len())
            .field("parsed", &self.parsed.is_some())
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
    /// it, with `kind` and `apiVersion` first if the list item lacked them
    /// (an object an [`ItemParser`] built: as the list sent it; its
    /// [`parsed`](Self::parsed) value has them).
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
        // From the text, not the bytes: the text was checked as UTF-8 once
        // (here again in one fast pass), so serde_json need not check every
        // string as it parses (about a fifth of the parse's time on pods).
        serde_json::from_str(self.json())
    }

    /// The value the load's [`ItemParser`] built (`None` without one, or
    /// when its [`finish`](ItemParser::finish) made something else of it).
    pub fn parsed(&self) -> Option<&Value> {
        match &self.parsed {
            Some(Parsed::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// Takes the value the load's [`ItemParser`] built.
    pub fn take_parsed(&mut self) -> Option<Value> {
        match self.parsed.take() {
            Some(Parsed::Value(v)) => Some(v),
            other => {
                self.parsed = other;
                None
            }
        }
    }

    /// Takes what the load's [`ItemParser::finish`] made of the item, if it
    /// is a `T`.
    pub fn take_made<T: Any + Send + Sync>(&mut self) -> Option<Arc<T>> {
        match self.parsed.take() {
            Some(Parsed::Made(m)) => match m.downcast::<T>() {
                Ok(t) => Some(t),
                Err(m) => {
                    self.parsed = Some(Parsed::Made(m));
                    None
                }
            },
            other => {
                self.parsed = other;
                None
            }
        }
    }

    /// Deserialize the object into `T`.
    pub fn deserialize<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.json)
    }
}

/// One page of a list, parsed but not yet turned into objects: the body,
/// and each item's place in it with the metadata read from it. Parsing
/// validates the whole body as JSON (a body cut short fails here and the
/// request is retried); building the objects only slices the body (or puts
/// `kind` and `apiVersion` in front), which can then overlap with the
/// request for the next page.
#[derive(Debug)]
pub(crate) struct PageIndex {
    body: Bytes,
    items: Vec<ItemIndex>,
    /// `metadata.continue` (empty or absent: last page).
    pub(crate) next: Option<String>,
}

/// One item of a page: where it is and what was read from it.
#[derive(Debug)]
struct ItemIndex {
    range: Range<usize>,
    has_kind: bool,
    has_api_version: bool,
    name: String,
    namespace: Option<String>,
    uid: Option<String>,
    parsed: Option<Parsed>,
}

/// A load's parser, with the `kind` and `apiVersion` its items' values get
/// where the list omits them.
#[derive(Clone, Copy)]
pub(crate) struct PageParser<'a> {
    pub(crate) parser: &'a dyn ItemParser,
    pub(crate) kind: &'a ResolvedKind,
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

/// Parse a list page's body, in one pass over its bytes (after one UTF-8
/// check of the whole body): the list's members are walked by [`Cursor`],
/// each item is deserialized once into its [`ItemHead`] (the rest of it is
/// skipped, not built) and its byte range is where that parse started and
/// stopped. An error means the body is not a list of objects with
/// `metadata.name` (the caller retries the request).
pub(crate) fn index_page(
    body: &Bytes,
    parser: Option<PageParser<'_>>,
) -> serde_json::Result<PageIndex> {
    let text = std::str::from_utf8(body).map_err(serde::de::Error::custom)?;
    let mut cursor = Cursor { text, pos: 0 };
    let mut items = Vec::new();
    let mut next = None;
    let (mut seen_metadata, mut seen_items) = (false, false);
    cursor.expect(b'{')?;
    if !cursor.eat(b'}') {
        loop {
            let key: Cow<'_, str> = cursor.value()?;
            cursor.expect(b':')?;
            match &*key {
                "metadata" => {
                    duplicate(&mut seen_metadata, "metadata")?;
                    let meta: Option<ListMeta<'_>> = cursor.value()?;
                    next = meta
                        .and_then(|m| m.continue_token)
                        .map(Cow::into_owned)
                        .filter(|t| !t.is_empty());
                }
                "items" => {
                    duplicate(&mut seen_items, "items")?;
                    cursor.items(&mut items, parser)?;
                }
                _ => {
                    cursor.value::<IgnoredAny>()?;
                }
            }
            if cursor.eat(b',') {
                continue;
            }
            cursor.expect(b'}')?;
            break;
        }
    }
    cursor.end()?;
    Ok(PageIndex {
        body: body.clone(),
        items,
        next,
    })
}

/// A page's body as received, with its continue token: what the next
/// request needs, read before (and much faster than) the items.
#[derive(Debug)]
pub(crate) struct RawPage {
    body: Bytes,
    /// `metadata.continue` (empty or absent: last page).
    pub(crate) next: Option<String>,
}

/// Read a list page's continue token: its members up to `metadata`, which
/// precedes `items` in what API servers send (a list that has its items
/// first is skipped over to its metadata). An error means the body does not
/// start as a list (the caller retries the request); the rest of the body
/// is checked by [`RawPage::parse`].
pub(crate) fn read_page_head(body: &Bytes) -> serde_json::Result<RawPage> {
    let text = std::str::from_utf8(body).map_err(serde::de::Error::custom)?;
    let mut cursor = Cursor { text, pos: 0 };
    let mut next = None;
    cursor.expect(b'{')?;
    if !cursor.eat(b'}') {
        loop {
            let key: Cow<'_, str> = cursor.value()?;
            cursor.expect(b':')?;
            if key == "metadata" {
                let meta: Option<ListMeta<'_>> = cursor.value()?;
                next = meta
                    .and_then(|m| m.continue_token)
                    .map(Cow::into_owned)
                    .filter(|t| !t.is_empty());
                break;
            }
            cursor.value::<IgnoredAny>()?;
            if cursor.eat(b',') {
                continue;
            }
            cursor.expect(b'}')?;
            break;
        }
    }
    Ok(RawPage {
        body: body.clone(),
        next,
    })
}

impl RawPage {
    /// Parse the whole page ([`index_page`]); its continue token must be
    /// the one the head gave.
    pub(crate) fn parse(&self, parser: Option<PageParser<'_>>) -> serde_json::Result<PageIndex> {
        let index = index_page(&self.body, parser)?;
        if index.next != self.next {
            return Err(serde::de::Error::custom(
                "the list's continue token changed between its head and its end",
            ));
        }
        Ok(index)
    }
}

fn duplicate(seen: &mut bool, field: &'static str) -> serde_json::Result<()> {
    if std::mem::replace(seen, true) {
        return Err(serde::de::Error::duplicate_field(field));
    }
    Ok(())
}

/// A position in a page's text, between JSON tokens. Values are parsed by
/// serde_json from the position on, and the cursor moves past them.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn error(&self, expected: &str) -> serde_json::Error {
        serde::de::Error::custom(format_args!(
            "expected {expected} at byte {} of the list",
            self.pos
        ))
    }

    /// The next byte that is not JSON whitespace (the cursor moves to it).
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = bytes.get(self.pos) {
            self.pos += 1;
        }
        bytes.get(self.pos).copied()
    }

    /// Consume `byte` if it comes next.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect(&mut self, byte: u8) -> serde_json::Result<()> {
        if self.eat(byte) {
            Ok(())
        } else {
            Err(self.error(&format!("'{}'", char::from(byte))))
        }
    }

    /// Nothing but whitespace is left.
    fn end(&mut self) -> serde_json::Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("the end of the list")),
        }
    }

    /// Parse one JSON value as `T` and move past it.
    fn value<T: Deserialize<'a>>(&mut self) -> serde_json::Result<T> {
        self.peek();
        // `pos` is always at an ASCII byte (or the end): a char boundary.
        let rest = self.text.get(self.pos..).unwrap_or_default();
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<T>();
        match values.next() {
            Some(Ok(value)) => {
                self.pos += values.byte_offset();
                Ok(value)
            }
            Some(Err(err)) => Err(err),
            None => Err(self.error("a value")),
        }
    }

    /// Parse one JSON value with `parser` and move past it.
    fn parsed(&mut self, parser: &dyn ItemParser) -> serde_json::Result<Value> {
        self.peek();
        let rest = self.text.get(self.pos..).unwrap_or_default();
        let mut de = serde_json::Deserializer::from_str(rest);
        let value = parser.parse(&mut de)?;
        // A stream deserializer starts at the position its deserializer
        // reached: just past the value.
        self.pos += de.into_iter::<IgnoredAny>().byte_offset();
        Ok(value)
    }

    /// One item, built by `parser`: its identity is read from the value,
    /// which then gets the `kind` and `apiVersion` the item lacks and goes
    /// to the parser's [`ItemParser::finish`].
    fn parsed_item(
        &mut self,
        parser: PageParser<'_>,
        kind_values: &(Value, Value),
    ) -> serde_json::Result<ItemIndex> {
        let start = self.pos;
        let mut value = self.parsed(parser.parser)?;
        let text = |v: &Value, key: &str| v["metadata"][key].as_str().map(str::to_owned);
        let Some(name) = text(&value, "name") else {
            return Err(serde::de::Error::custom(
                "a list item without a string metadata.name",
            ));
        };
        let (namespace, uid) = (text(&value, "namespace"), text(&value, "uid"));
        let Value::Object(map) = &mut value else {
            return Err(serde::de::Error::custom(
                "a list item that is not an object",
            ));
        };
        let (has_kind, has_api_version) =
            (map.contains_key("kind"), map.contains_key("apiVersion"));
        // Lists omit them per item; the value gets them as the text would
        // (no copy of the text).
        if !has_kind {
            map.insert("kind".into(), kind_values.0.clone());
        }
        if !has_api_version {
            map.insert("apiVersion".into(), kind_values.1.clone());
        }
        Ok(ItemIndex {
            range: start..self.pos,
            has_kind,
            has_api_version,
            name,
            namespace,
            uid,
            parsed: Some(parser.parser.finish(value)),
        })
    }

    /// The `items` member's value: `null` or an array of objects.
    fn items(
        &mut self,
        items: &mut Vec<ItemIndex>,
        parser: Option<PageParser<'_>>,
    ) -> serde_json::Result<()> {
        if self.peek() == Some(b'n') {
            return self.value::<()>();
        }
        self.expect(b'[')?;
        if self.eat(b']') {
            return Ok(());
        }
        let kind_values = parser.map(|p| {
            (
                Value::String(p.kind.kind.clone()),
                Value::String(p.kind.api_version()),
            )
        });
        loop {
            self.peek();
            if let (Some(parser), Some(kind_values)) = (parser, &kind_values) {
                items.push(self.parsed_item(parser, kind_values)?);
                if self.eat(b',') {
                    continue;
                }
                return self.expect(b']');
            }
            let start = self.pos;
            let head: ItemHead<'_> = self.value()?;
            items.push(ItemIndex {
                range: start..self.pos,
                has_kind: head.kind.is_some(),
                has_api_version: head.api_version.is_some(),
                name: head.metadata.name.into_owned(),
                namespace: head.metadata.namespace.map(Cow::into_owned),
                uid: head.metadata.uid.map(Cow::into_owned),
                parsed: None,
            });
            if self.eat(b',') {
                continue;
            }
            return self.expect(b']');
        }
    }
}

impl PageIndex {
    /// Build the page's objects (no parsing: that was done by
    /// [`index_page`]).
    pub(crate) fn into_objects(self, kind: &Arc<ResolvedKind>) -> Vec<LoadedObject> {
        let prefix = KindPrefix::new(kind);
        self.items
            .into_iter()
            .map(|item| {
                if item.parsed.is_some() {
                    return LoadedObject {
                        kind: kind.clone(),
                        namespace: item.namespace,
                        name: item.name,
                        uid: item.uid,
                        json: self.body.slice(item.range),
                        parsed: item.parsed,
                    };
                }
                let json = if item.has_kind && item.has_api_version {
                    self.body.slice(item.range)
                } else {
                    // The range is of a whole JSON value: valid UTF-8.
                    let text = std::str::from_utf8(&self.body[item.range]).unwrap_or_default();
                    Bytes::from(prefix.inject(text, item.has_kind, item.has_api_version))
                };
                LoadedObject {
                    kind: kind.clone(),
                    namespace: item.namespace,
                    name: item.name,
                    uid: item.uid,
                    json,
                    parsed: None,
                }
            })
            .collect()
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
        let index = index_page(&Bytes::copy_from_slice(body), None)?;
        let next = index.next.clone();
        Ok(Parsed {
            objects: index.into_objects(kind),
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
    fn the_head_gives_the_continue_token_and_the_parse_checks_the_rest() {
        let head = |b: &[u8]| read_page_head(&Bytes::copy_from_slice(b));
        let page = head(br#"{"kind":"PodList","metadata":{"continue":"t"},"items":[{"metadata":{"name":"a"}}]}"#).unwrap();
        assert_eq!(page.next.as_deref(), Some("t"));
        assert_eq!(page.parse(None).unwrap().items.len(), 1);
        // Items before the metadata: skipped over to it.
        let page =
            head(br#"{"items":[{"metadata":{"name":"a"}}],"metadata":{"continue":"u"}}"#).unwrap();
        assert_eq!(page.next.as_deref(), Some("u"));
        assert_eq!(page.next, page.parse(None).unwrap().next);
        // The head reads no further than the metadata; the parse fails on
        // what comes after (the page is then fetched again).
        let page =
            head(br#"{"metadata":{"continue":"t"},"items":[{"metadata":{"name":"a"}}"#).unwrap();
        assert!(page.parse(None).is_err());
        let page = head(br#"{"metadata":{},"items":[{"spec":{}}]}"#).unwrap();
        assert_eq!(page.next, None);
        assert!(page.parse(None).is_err(), "an item without metadata.name");
        assert!(head(b"Too many requests").is_err());
        assert!(head(br#"{"metadata":"#).is_err());
        assert_eq!(head(b"{}").unwrap().next, None);
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

    /// Builds the whole item, then drops its `spec` (so that what the
    /// parser builds is told from what the text holds).
    struct NoSpec;

    impl ItemParser for NoSpec {
        fn parse(
            &self,
            de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
        ) -> serde_json::Result<Value> {
            let mut v = Value::deserialize(de)?;
            if let Value::Object(m) = &mut v {
                m.remove("spec");
            }
            Ok(v)
        }
    }

    fn parse_with(body: &[u8], parser: &dyn ItemParser) -> serde_json::Result<Vec<LoadedObject>> {
        let kind = pods();
        let parser = PageParser {
            parser,
            kind: &kind,
        };
        Ok(index_page(&Bytes::copy_from_slice(body), Some(parser))?.into_objects(&kind))
    }

    #[test]
    fn a_parser_builds_each_item_in_the_walk() {
        let body = br#"{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"tok"},
            "items":[ {"metadata":{"name":"a","namespace":"default","uid":"0b5c2e1a-1111-4222-8333-444455556666"},"spec":{"x":"]}{\""}} ,
                     {"apiVersion":"v2","metadata":{"name":"b\u0041"},"spec":[1,{"y":[]}]},
                     {"kind":"Widget","metadata":{"name":"c"}}]}"#;
        let plain = parse_page(&pods(), body).unwrap().objects;
        let mut parsed = parse_with(body, &NoSpec).unwrap();
        assert_eq!(parsed.len(), 3);
        for (p, o) in parsed.iter_mut().zip(&plain) {
            // The same identity as without a parser.
            assert_eq!(
                (p.kind().qualified_name(), p.namespace(), p.name(), p.uid()),
                (o.kind().qualified_name(), o.namespace(), o.name(), o.uid())
            );
            // The text is the item as the list sent it: one whole object.
            let text: Value = serde_json::from_str(p.json()).unwrap();
            let whole: Value = serde_json::from_str(o.json()).unwrap();
            assert_eq!(text["spec"], whole["spec"], "{}", p.json());
            assert_eq!(text["metadata"], whole["metadata"]);
            // The value is the parser's, with the kind and apiVersion the
            // item lacked (and those it had left as they were).
            let mut expected = o.to_value().unwrap();
            expected.as_object_mut().unwrap().remove("spec");
            assert_eq!(p.parsed(), Some(&expected));
            assert_eq!(p.take_parsed(), Some(expected));
            assert_eq!(p.parsed(), None);
        }
        assert_eq!(parsed[0].name(), "a");
        assert_eq!(
            parsed[0].uid(),
            Some("0b5c2e1a-1111-4222-8333-444455556666")
        );
        assert_eq!(parsed[1].name(), "bA");
        assert_eq!(plain[1].to_value().unwrap()["apiVersion"], "v2");
        assert_eq!(plain[2].to_value().unwrap()["kind"], "Widget");
        // Without a parser, no value.
        assert!(plain.iter().all(|o| o.parsed().is_none()));
    }

    /// Makes of each item its name and whether its value had `kind` and
    /// `apiVersion` by then.
    struct Names;

    impl ItemParser for Names {
        fn parse(
            &self,
            de: &mut serde_json::Deserializer<serde_json::de::StrRead<'_>>,
        ) -> serde_json::Result<Value> {
            Value::deserialize(de)
        }

        fn finish(&self, value: Value) -> super::Parsed {
            let name = value["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let typed = value["kind"].is_string() && value["apiVersion"].is_string();
            super::Parsed::Made(Arc::new((name, typed)))
        }
    }

    #[test]
    fn a_parser_finishes_each_value_into_what_it_makes() {
        let body =
            br#"{"items":[{"metadata":{"name":"a"}},{"kind":"Pod","metadata":{"name":"b"}}]}"#;
        let mut objects = parse_with(body, &Names).unwrap();
        assert_eq!(objects.len(), 2);
        for (o, name) in objects.iter_mut().zip(["a", "b"]) {
            assert_eq!(o.name(), name);
            // What `finish` made, not a value.
            assert!(o.parsed().is_none());
            assert!(o.take_parsed().is_none());
            // Asked for as another type: still there.
            assert!(o.take_made::<String>().is_none());
            let made = o.take_made::<(String, bool)>().unwrap();
            assert_eq!(*made, (name.to_owned(), true));
            assert!(o.take_made::<(String, bool)>().is_none());
            // The text is still the item's.
            assert!(o.json().contains(name));
        }
        // A malformed page is rejected with a finishing parser too.
        assert!(
            parse_with(
                br#"{"items":[{"metadata":{"name":"a"}},{"metadata":{}}]}"#,
                &Names
            )
            .is_err()
        );
    }

    #[test]
    fn a_parsed_page_is_checked_as_a_whole() {
        for bad in [
            // An item without a name, one that is not an object, a value
            // the parser cannot read, a page cut short, junk after it.
            &br#"{"items":[{"metadata":{"name":"a"}},{"metadata":{}}]}"#[..],
            br#"{"items":[{"metadata":{"name":"a"}},"b"]}"#,
            br#"{"items":[{"metadata":{"name":"a"},"spec":{"x":}}]}"#,
            br#"{"items":[{"metadata":{"name":"a"}}"#,
            br#"{"items":[{"metadata":{"name":"a"}}]} x"#,
            br#"{"items":[{"metadata":{"name":"a"}}{"metadata":{"name":"b"}}]}"#,
        ] {
            assert!(
                parse_with(bad, &NoSpec).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert!(parse_page(&pods(), bad).is_err());
        }
        assert!(
            parse_with(br#"{"items":null}"#, &NoSpec)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn uuids_parse_strictly() {
        assert_eq!(parse_uuid("00000000-0000-0000-0000-00000000000f"), Some(15));
        assert_eq!(parse_uuid("00000000-0000-0000-0000-00000000000g"), None);
        assert_eq!(parse_uuid("00000000000000000000000000000000000f"), None);
        assert_eq!(parse_uuid("short"), None);
    }
}
