//! `x509_decode`: a PEM certificate decoded into the JSON layout of Go's
//! `x509.Certificate` (as `encoding/json` writes it and Kyverno reads it
//! back: numbers are doubles, byte strings base64), with `PublicKey`
//! replaced by `{N, E}` (the RSA modulus in decimal and the exponent), as
//! Kyverno's function gives it; a `CERTIFICATE REQUEST` into Go's
//! `x509.CertificateRequest` likewise. Only RSA keys are accepted, as
//! Kyverno's.
//!
//! The DER reader, the `Name`, time and extension decoding follow Go's
//! `crypto/x509` parser: the extensions Go interprets fill their fields
//! (key usage, basic constraints, subject alternative names, name
//! constraints, CRL distribution points, authority and subject key ids,
//! extended key usage, certificate policies, policy mappings and
//! constraints, inhibit-any-policy, authority information access); a
//! critical extension none of these is lands in
//! `UnhandledCriticalExtensions`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

/// A DER element: its tag byte, its content and the whole encoding.
#[derive(Debug, Clone, Copy)]
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    raw: &'a [u8],
}

/// Reads DER elements one after another.
#[derive(Debug, Clone, Copy)]
struct Der<'a> {
    rest: &'a [u8],
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const BOOLEAN: u8 = 0x01;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

impl<'a> Der<'a> {
    fn new(data: &'a [u8]) -> Der<'a> {
        Der { rest: data }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn next(&mut self) -> Result<Tlv<'a>, String> {
        let data = self.rest;
        let (&tag, after) = data.split_first().ok_or("truncated DER")?;
        let (&first, after) = after.split_first().ok_or("truncated DER length")?;
        let (len, after) = if first < 0x80 {
            (first as usize, after)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 || after.len() < n {
                return Err("invalid DER length".into());
            }
            let len = after[..n]
                .iter()
                .fold(0usize, |acc, b| (acc << 8) | *b as usize);
            (len, &after[n..])
        };
        if after.len() < len {
            return Err("truncated DER content".into());
        }
        let header = data.len() - after.len();
        let tlv = Tlv {
            tag,
            content: &after[..len],
            raw: &data[..header + len],
        };
        self.rest = &after[len..];
        Ok(tlv)
    }

    /// The next element, which must have `tag`.
    fn expect(&mut self, tag: u8, what: &str) -> Result<Tlv<'a>, String> {
        let t = self.next()?;
        if t.tag != tag {
            return Err(format!("malformed {what}"));
        }
        Ok(t)
    }

    /// The next element if it has `tag`.
    fn optional(&mut self, tag: u8) -> Result<Option<Tlv<'a>>, String> {
        if self.peek() == Some(tag) {
            self.next().map(Some)
        } else {
            Ok(None)
        }
    }
}

fn b64(bytes: &[u8]) -> Value {
    Value::String(STANDARD.encode(bytes))
}

/// A list of strings, or null when empty (Go's nil slice).
fn strings_or_null(items: Vec<String>) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        json!(items)
    }
}

fn list_or_null(items: Vec<Value>) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    }
}

fn oid_arcs(content: &[u8]) -> Result<Vec<u64>, String> {
    let mut arcs = Vec::new();
    let mut value: u64 = 0;
    for (i, b) in content.iter().enumerate() {
        value = (value << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (value / 40).min(2);
                arcs.push(first);
                arcs.push(value - first * 40);
            } else {
                arcs.push(value);
            }
            value = 0;
        } else if i + 1 == content.len() {
            return Err("malformed OID".into());
        }
    }
    if arcs.is_empty() {
        return Err("malformed OID".into());
    }
    Ok(arcs)
}

fn oid_text(arcs: &[u64]) -> String {
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

/// An unsigned big-endian integer in decimal.
fn decimal(bytes: &[u8]) -> String {
    let mut digits: Vec<u8> = bytes.iter().copied().skip_while(|b| *b == 0).collect();
    if digits.is_empty() {
        return "0".into();
    }
    let mut out = Vec::new();
    while !digits.is_empty() {
        let mut rem: u32 = 0;
        let mut next = Vec::with_capacity(digits.len());
        for d in &digits {
            let cur = (rem << 8) | u32::from(*d);
            let q = cur / 10;
            rem = cur % 10;
            if !(next.is_empty() && q == 0) {
                next.push(q as u8);
            }
        }
        out.push(b'0' + rem as u8);
        digits = next;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// A DER INTEGER as Go's `big.Int` JSON number, read back as a double.
fn big_number(content: &[u8]) -> Value {
    let negative = content.first().is_some_and(|b| b & 0x80 != 0);
    let text = if negative {
        // Two's complement: the magnitude is !x + 1.
        let mut mag: Vec<u8> = content.iter().map(|b| !b).collect();
        for b in mag.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
        format!("-{}", decimal(&mag))
    } else {
        decimal(content)
    };
    match text.parse::<f64>() {
        // Exactly representable: written as an integer.
        Ok(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => json!(f as i64),
        Ok(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Err(_) => Value::Null,
    }
}

fn small_int(content: &[u8]) -> Result<i64, String> {
    if content.is_empty() || content.len() > 8 {
        return Err("integer too large".into());
    }
    let mut v: i64 = if content[0] & 0x80 != 0 { -1 } else { 0 };
    for b in content {
        v = (v << 8) | i64::from(*b);
    }
    Ok(v)
}

/// A string of one of the ASN.1 string types Go's parser reads.
fn asn1_string(t: &Tlv<'_>) -> Result<String, String> {
    match t.tag {
        // PrintableString, UTF8String, IA5String, NumericString, T61String
        0x13 | 0x0c | 0x16 | 0x12 => {
            String::from_utf8(t.content.to_vec()).map_err(|_| "invalid string".to_string())
        }
        0x14 => Ok(t.content.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UTF-16 big-endian.
        0x1e => {
            let units: Vec<u16> = t
                .content
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16(&units).map_err(|_| "invalid BMPString".to_string())
        }
        // UniversalString: UTF-32 big-endian.
        0x1c => t
            .content
            .chunks(4)
            .map(|c| {
                let v = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                char::from_u32(v).ok_or_else(|| "invalid UniversalString".to_string())
            })
            .collect(),
        _ => Err("unsupported string type".into()),
    }
}

/// A `pkix.Name` from a DER `Name`.
fn name(raw: &[u8]) -> Result<Value, String> {
    let mut fields: [(&str, Vec<String>); 7] = [
        ("Country", Vec::new()),
        ("Organization", Vec::new()),
        ("OrganizationalUnit", Vec::new()),
        ("Locality", Vec::new()),
        ("Province", Vec::new()),
        ("StreetAddress", Vec::new()),
        ("PostalCode", Vec::new()),
    ];
    let (mut serial, mut common) = (String::new(), String::new());
    let mut names = Vec::new();
    let mut rdns = Der::new(raw);
    while !rdns.is_empty() {
        let rdn = rdns.expect(SET, "RDN")?;
        let mut atvs = Der::new(rdn.content);
        while !atvs.is_empty() {
            let atv = atvs.expect(SEQUENCE, "attribute")?;
            let mut parts = Der::new(atv.content);
            let oid = oid_arcs(parts.expect(OID, "attribute type")?.content)?;
            let value = asn1_string(&parts.next()?)?;
            names.push(json!({"Type": oid, "Value": value}));
            if oid.len() == 4 && oid[..3] == [2, 5, 4] {
                let slot = match oid[3] {
                    3 => {
                        common = value;
                        continue;
                    }
                    5 => {
                        serial = value;
                        continue;
                    }
                    6 => 0,
                    10 => 1,
                    11 => 2,
                    7 => 3,
                    8 => 4,
                    9 => 5,
                    17 => 6,
                    _ => continue,
                };
                fields[slot].1.push(value);
            }
        }
    }
    let mut out = Map::new();
    for (k, v) in fields {
        out.insert(k.into(), strings_or_null(v));
    }
    out.insert("SerialNumber".into(), json!(serial));
    out.insert("CommonName".into(), json!(common));
    out.insert("Names".into(), list_or_null(names));
    out.insert("ExtraNames".into(), Value::Null);
    Ok(Value::Object(out))
}

/// A UTCTime or GeneralizedTime in RFC 3339 (Go's time JSON).
fn time(t: &Tlv<'_>) -> Result<String, String> {
    let s = std::str::from_utf8(t.content).map_err(|_| "invalid time")?;
    let digits = s.strip_suffix('Z').ok_or("time must be in UTC")?;
    let (year, rest) = match t.tag {
        UTC_TIME if digits.len() == 12 => {
            let yy: u32 = digits[..2].parse().map_err(|_| "invalid time")?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        GENERALIZED_TIME if digits.len() >= 14 => (
            digits[..4].parse().map_err(|_| "invalid time")?,
            &digits[4..],
        ),
        _ => return Err("invalid time".into()),
    };
    if !rest[..10].bytes().all(|b| b.is_ascii_digit()) {
        return Err("invalid time".into());
    }
    let (mo, d, h, mi, se) = (
        &rest[0..2],
        &rest[2..4],
        &rest[4..6],
        &rest[6..8],
        &rest[8..10],
    );
    let fraction = rest[10..].trim_end_matches('0');
    let fraction = if fraction == "." { "" } else { fraction };
    Ok(format!("{year:04}-{mo}-{d}T{h}:{mi}:{se}{fraction}Z"))
}

/// Go's `SignatureAlgorithm` of an AlgorithmIdentifier.
fn signature_algorithm(ai: &[u8]) -> Result<i64, String> {
    let mut parts = Der::new(ai);
    let oid = oid_text(&oid_arcs(parts.expect(OID, "algorithm")?.content)?);
    Ok(match oid.as_str() {
        "1.2.840.113549.1.1.2" => 1,
        "1.2.840.113549.1.1.4" => 2,
        "1.2.840.113549.1.1.5" | "1.3.14.3.2.29" => 3,
        "1.2.840.113549.1.1.11" => 4,
        "1.2.840.113549.1.1.12" => 5,
        "1.2.840.113549.1.1.13" => 6,
        "1.2.840.10040.4.3" => 7,
        "2.16.840.1.101.3.4.3.2" => 8,
        "1.2.840.10045.4.1" => 9,
        "1.2.840.10045.4.3.2" => 10,
        "1.2.840.10045.4.3.3" => 11,
        "1.2.840.10045.4.3.4" => 12,
        "1.3.101.112" => 16,
        // RSASSA-PSS: by the hash its parameters name.
        "1.2.840.113549.1.1.10" => {
            let params = parts.next().map(|t| t.raw).unwrap_or_default();
            let hash = |oid: &[u8]| params.windows(oid.len()).any(|w| w == oid);
            if hash(&[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01]) {
                13
            } else if hash(&[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02]) {
                14
            } else if hash(&[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03]) {
                15
            } else {
                0
            }
        }
        _ => 0,
    })
}

/// The RSA `{N, E}` of a SubjectPublicKeyInfo; an error for any other key.
fn rsa_public_key(spki: &[u8]) -> Result<Value, String> {
    let mut parts = Der::new(spki);
    let algo = parts.expect(SEQUENCE, "public key algorithm")?;
    let oid = oid_text(&oid_arcs(
        Der::new(algo.content).expect(OID, "algorithm")?.content,
    )?);
    if oid != "1.2.840.113549.1.1.1" {
        return Err("certificate should use rsa algorithm".into());
    }
    let bits = parts.expect(BIT_STRING, "public key")?;
    let key = bits.content.get(1..).ok_or("malformed public key")?;
    let mut rsa = Der::new(Der::new(key).expect(SEQUENCE, "RSA public key")?.content);
    let n = rsa.expect(INTEGER, "modulus")?;
    let e = small_int(rsa.expect(INTEGER, "exponent")?.content)?;
    Ok(json!({"N": decimal(n.content), "E": e}))
}

/// The parts of a GeneralName Go keeps.
#[derive(Debug, Default)]
struct GeneralNames {
    dns: Vec<String>,
    emails: Vec<String>,
    ips: Vec<Value>,
    uris: Vec<String>,
}

fn general_names(content: &[u8]) -> Result<GeneralNames, String> {
    let mut out = GeneralNames::default();
    let mut names = Der::new(content);
    while !names.is_empty() {
        let n = names.next()?;
        let text = || String::from_utf8(n.content.to_vec()).map_err(|_| "invalid name");
        match n.tag {
            0x81 => out.emails.push(text()?),
            0x82 => out.dns.push(text()?),
            0x86 => out.uris.push(text()?),
            0x87 => out.ips.push(json!(ip_text(n.content)?)),
            _ => {}
        }
    }
    Ok(out)
}

fn ip_text(bytes: &[u8]) -> Result<String, String> {
    match bytes.len() {
        4 => Ok(std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string()),
        16 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(bytes);
            Ok(std::net::Ipv6Addr::from(a).to_string())
        }
        _ => Err("invalid IP address".into()),
    }
}

/// Go's `url.URL` JSON of a URI (as `url.Parse` splits it).
fn url_json(uri: &str) -> Value {
    let (rest, fragment) = match uri.split_once('#') {
        Some((r, f)) => (r, f),
        None => (uri, ""),
    };
    let (rest, query, force_query) = match rest.split_once('?') {
        Some((r, q)) => (r, q, q.is_empty()),
        None => (rest, "", false),
    };
    let (scheme, rest) = match rest.split_once(':') {
        Some((s, r))
            if !s.is_empty()
                && s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (s.to_ascii_lowercase(), r)
        }
        _ => (String::new(), rest),
    };
    let (mut user, mut host, mut path, mut opaque) = (Value::Null, String::new(), "", "");
    if let Some(auth_path) = rest.strip_prefix("//") {
        let (authority, p) = match auth_path.find('/') {
            Some(i) => (&auth_path[..i], &auth_path[i..]),
            None => (auth_path, ""),
        };
        let h = match authority.rsplit_once('@') {
            Some((_, h)) => {
                user = json!({});
                h
            }
            None => authority,
        };
        host = h.to_string();
        path = p;
    } else if !scheme.is_empty() && !rest.starts_with('/') {
        opaque = rest;
    } else {
        path = rest;
    }
    json!({
        "Scheme": scheme, "Opaque": opaque, "User": user, "Host": host, "Path": path,
        "RawPath": "", "OmitHost": false, "ForceQuery": force_query, "RawQuery": query,
        "Fragment": fragment, "RawFragment": "",
    })
}

/// Go's `ExtKeyUsage` of an OID, when it has one.
fn ext_key_usage(oid: &str) -> Option<i64> {
    Some(match oid {
        "2.5.29.37.0" => 0,
        "1.3.6.1.5.5.7.3.1" => 1,
        "1.3.6.1.5.5.7.3.2" => 2,
        "1.3.6.1.5.5.7.3.3" => 3,
        "1.3.6.1.5.5.7.3.4" => 4,
        "1.3.6.1.5.5.7.3.5" => 5,
        "1.3.6.1.5.5.7.3.6" => 6,
        "1.3.6.1.5.5.7.3.7" => 7,
        "1.3.6.1.5.5.7.3.8" => 8,
        "1.3.6.1.5.5.7.3.9" => 9,
        "1.3.6.1.4.1.311.10.3.3" => 10,
        "2.16.840.1.113730.4.1" => 11,
        "1.3.6.1.4.1.311.2.1.22" => 12,
        "1.3.6.1.4.1.311.61.1.1" => 13,
        _ => return None,
    })
}

/// The certificate's fields that its extensions set, in `out`.
fn extensions(content: &[u8], out: &mut Map<String, Value>) -> Result<Vec<Value>, String> {
    let mut list = Vec::new();
    let mut unhandled = Vec::new();
    let set = |out: &mut Map<String, Value>, k: &str, v: Value| {
        out.insert(k.to_string(), v);
    };
    let mut exts = Der::new(content);
    while !exts.is_empty() {
        let ext = exts.expect(SEQUENCE, "extension")?;
        let mut parts = Der::new(ext.content);
        let arcs = oid_arcs(parts.expect(OID, "extension id")?.content)?;
        let critical = match parts.optional(BOOLEAN)? {
            Some(b) => b.content.first().is_some_and(|v| *v != 0),
            None => false,
        };
        let value = parts.expect(OCTET_STRING, "extension value")?.content;
        list.push(json!({"Id": arcs, "Critical": critical, "Value": STANDARD.encode(value)}));
        let mut handled = true;
        match oid_text(&arcs).as_str() {
            "2.5.29.15" => {
                let bits = Der::new(value).expect(BIT_STRING, "key usage")?.content;
                let mut usage = 0i64;
                for i in 0..9 {
                    let byte = bits.get(1 + i / 8).copied().unwrap_or(0);
                    if byte & (0x80 >> (i % 8)) != 0 {
                        usage |= 1 << i;
                    }
                }
                set(out, "KeyUsage", json!(usage));
            }
            "2.5.29.19" => {
                let mut bc = Der::new(
                    Der::new(value)
                        .expect(SEQUENCE, "basic constraints")?
                        .content,
                );
                let is_ca = match bc.optional(BOOLEAN)? {
                    Some(b) => b.content.first().is_some_and(|v| *v != 0),
                    None => false,
                };
                let path_len = match bc.optional(INTEGER)? {
                    Some(i) => Some(small_int(i.content)?),
                    None => None,
                };
                set(out, "BasicConstraintsValid", json!(true));
                set(out, "IsCA", json!(is_ca));
                set(out, "MaxPathLen", json!(path_len.unwrap_or(-1)));
                set(out, "MaxPathLenZero", json!(path_len == Some(0)));
            }
            "2.5.29.17" => {
                let names = general_names(
                    Der::new(value)
                        .expect(SEQUENCE, "subject alt names")?
                        .content,
                )?;
                set(out, "DNSNames", strings_or_null(names.dns));
                set(out, "EmailAddresses", strings_or_null(names.emails));
                set(out, "IPAddresses", list_or_null(names.ips));
                let uris: Vec<Value> = names.uris.iter().map(|u| url_json(u)).collect();
                set(out, "URIs", list_or_null(uris));
            }
            "2.5.29.30" => name_constraints(value, critical, out)?,
            "2.5.29.31" => {
                let mut urls = Vec::new();
                let mut points = Der::new(Der::new(value).expect(SEQUENCE, "CRL points")?.content);
                while !points.is_empty() {
                    let dp = points.expect(SEQUENCE, "distribution point")?;
                    let mut dp = Der::new(dp.content);
                    if let Some(name) = dp.optional(0xa0)?
                        && let Some(full) = Der::new(name.content).optional(0xa0)?
                    {
                        urls.extend(general_names(full.content)?.uris);
                    }
                }
                set(out, "CRLDistributionPoints", strings_or_null(urls));
            }
            "2.5.29.35" => {
                let akid = Der::new(value).expect(SEQUENCE, "authority key id")?;
                if let Some(id) = Der::new(akid.content).optional(0x80)? {
                    set(out, "AuthorityKeyId", b64(id.content));
                }
            }
            "2.5.29.14" => {
                let id = Der::new(value).expect(OCTET_STRING, "subject key id")?;
                set(out, "SubjectKeyId", b64(id.content));
            }
            "2.5.29.37" => {
                let (mut known, mut unknown) = (Vec::new(), Vec::new());
                let mut usages =
                    Der::new(Der::new(value).expect(SEQUENCE, "ext key usage")?.content);
                while !usages.is_empty() {
                    let arcs = oid_arcs(usages.expect(OID, "ext key usage")?.content)?;
                    match ext_key_usage(&oid_text(&arcs)) {
                        Some(u) => known.push(json!(u)),
                        None => unknown.push(json!(arcs)),
                    }
                }
                set(out, "ExtKeyUsage", list_or_null(known));
                set(out, "UnknownExtKeyUsage", list_or_null(unknown));
            }
            "2.5.29.32" => {
                let (mut ids, mut texts) = (Vec::new(), Vec::new());
                let mut infos = Der::new(Der::new(value).expect(SEQUENCE, "policies")?.content);
                while !infos.is_empty() {
                    let info = infos.expect(SEQUENCE, "policy")?;
                    let arcs = oid_arcs(Der::new(info.content).expect(OID, "policy id")?.content)?;
                    texts.push(json!(oid_text(&arcs)));
                    ids.push(json!(arcs));
                }
                set(out, "PolicyIdentifiers", list_or_null(ids));
                set(out, "Policies", list_or_null(texts));
            }
            "2.5.29.33" => {
                let mut maps = Vec::new();
                let mut seq =
                    Der::new(Der::new(value).expect(SEQUENCE, "policy mappings")?.content);
                while !seq.is_empty() {
                    let m = seq.expect(SEQUENCE, "policy mapping")?;
                    let mut m = Der::new(m.content);
                    let issuer = oid_text(&oid_arcs(m.expect(OID, "issuer policy")?.content)?);
                    let subject = oid_text(&oid_arcs(m.expect(OID, "subject policy")?.content)?);
                    maps.push(
                        json!({"IssuerDomainPolicy": issuer, "SubjectDomainPolicy": subject}),
                    );
                }
                set(out, "PolicyMappings", list_or_null(maps));
            }
            "2.5.29.36" => {
                let mut pc = Der::new(
                    Der::new(value)
                        .expect(SEQUENCE, "policy constraints")?
                        .content,
                );
                for (tag, field) in [
                    (0x80, "RequireExplicitPolicy"),
                    (0x81, "InhibitPolicyMapping"),
                ] {
                    if let Some(v) = pc.optional(tag)? {
                        let v = small_int(v.content)?;
                        set(out, field, json!(v));
                        set(out, &format!("{field}Zero"), json!(v == 0));
                    }
                }
            }
            "2.5.29.54" => {
                let v = small_int(
                    Der::new(value)
                        .expect(INTEGER, "inhibit any policy")?
                        .content,
                )?;
                set(out, "InhibitAnyPolicy", json!(v));
                set(out, "InhibitAnyPolicyZero", json!(v == 0));
            }
            "1.3.6.1.5.5.7.1.1" => {
                let (mut ocsp, mut issuers) = (Vec::new(), Vec::new());
                let mut ads = Der::new(Der::new(value).expect(SEQUENCE, "authority info")?.content);
                while !ads.is_empty() {
                    let ad = ads.expect(SEQUENCE, "access description")?;
                    let mut ad = Der::new(ad.content);
                    let method = oid_text(&oid_arcs(ad.expect(OID, "access method")?.content)?);
                    let location = ad.next()?;
                    if location.tag != 0x86 {
                        continue;
                    }
                    let url =
                        String::from_utf8(location.content.to_vec()).map_err(|_| "invalid URL")?;
                    match method.as_str() {
                        "1.3.6.1.5.5.7.48.1" => ocsp.push(url),
                        "1.3.6.1.5.5.7.48.2" => issuers.push(url),
                        _ => {}
                    }
                }
                set(out, "OCSPServer", strings_or_null(ocsp));
                set(out, "IssuingCertificateURL", strings_or_null(issuers));
            }
            _ => handled = false,
        }
        if critical && !handled {
            unhandled.push(json!(arcs));
        }
    }
    out.insert(
        "UnhandledCriticalExtensions".into(),
        list_or_null(unhandled),
    );
    Ok(list)
}

fn name_constraints(
    value: &[u8],
    critical: bool,
    out: &mut Map<String, Value>,
) -> Result<(), String> {
    let nc = Der::new(value).expect(SEQUENCE, "name constraints")?;
    let mut parts = Der::new(nc.content);
    for (tag, prefix) in [(0xa0, "Permitted"), (0xa1, "Excluded")] {
        let Some(subtrees) = parts.optional(tag)? else {
            continue;
        };
        let (mut dns, mut ips, mut emails, mut uris) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut trees = Der::new(subtrees.content);
        while !trees.is_empty() {
            let tree = trees.expect(SEQUENCE, "subtree")?;
            let base = Der::new(tree.content).next()?;
            let text = || String::from_utf8(base.content.to_vec()).map_err(|_| "invalid name");
            match base.tag {
                0x82 => dns.push(text()?),
                0x81 => emails.push(text()?),
                0x86 => uris.push(text()?),
                0x87 => {
                    let half = base.content.len() / 2;
                    if half != 4 && half != 16 {
                        return Err("invalid IP range".into());
                    }
                    ips.push(json!({
                        "IP": ip_text(&base.content[..half])?,
                        "Mask": STANDARD.encode(&base.content[half..]),
                    }));
                }
                _ => {}
            }
        }
        out.insert(format!("{prefix}DNSDomains"), strings_or_null(dns));
        out.insert(format!("{prefix}IPRanges"), list_or_null(ips));
        out.insert(format!("{prefix}EmailAddresses"), strings_or_null(emails));
        out.insert(format!("{prefix}URIDomains"), strings_or_null(uris));
    }
    out.insert("PermittedDNSDomainsCritical".into(), json!(critical));
    Ok(())
}

/// The fields of a certificate with no extension setting them, as Go's
/// zero values.
fn defaults() -> Map<String, Value> {
    let mut out = Map::new();
    for k in [
        "ExtraExtensions",
        "UnhandledCriticalExtensions",
        "ExtKeyUsage",
        "UnknownExtKeyUsage",
        "SubjectKeyId",
        "AuthorityKeyId",
        "OCSPServer",
        "IssuingCertificateURL",
        "DNSNames",
        "EmailAddresses",
        "IPAddresses",
        "URIs",
        "PermittedDNSDomains",
        "ExcludedDNSDomains",
        "PermittedIPRanges",
        "ExcludedIPRanges",
        "PermittedEmailAddresses",
        "ExcludedEmailAddresses",
        "PermittedURIDomains",
        "ExcludedURIDomains",
        "CRLDistributionPoints",
        "PolicyIdentifiers",
        "Policies",
        "PolicyMappings",
    ] {
        out.insert(k.into(), Value::Null);
    }
    for k in [
        "BasicConstraintsValid",
        "IsCA",
        "MaxPathLenZero",
        "PermittedDNSDomainsCritical",
        "InhibitAnyPolicyZero",
        "InhibitPolicyMappingZero",
        "RequireExplicitPolicyZero",
    ] {
        out.insert(k.into(), json!(false));
    }
    for k in [
        "KeyUsage",
        "MaxPathLen",
        "InhibitAnyPolicy",
        "InhibitPolicyMapping",
        "RequireExplicitPolicy",
    ] {
        out.insert(k.into(), json!(0));
    }
    out
}

fn certificate(der: &[u8]) -> Result<Value, String> {
    let mut top = Der::new(der);
    let cert = top.expect(SEQUENCE, "certificate")?;
    let mut parts = Der::new(cert.content);
    let tbs = parts.expect(SEQUENCE, "tbs certificate")?;
    let sig_algo = parts.expect(SEQUENCE, "signature algorithm")?;
    let signature = parts.expect(BIT_STRING, "signature")?;
    let mut t = Der::new(tbs.content);
    let version = match t.optional(0xa0)? {
        Some(v) => small_int(Der::new(v.content).expect(INTEGER, "version")?.content)? + 1,
        None => 1,
    };
    let serial = t.expect(INTEGER, "serial number")?;
    t.expect(SEQUENCE, "signature algorithm")?;
    let issuer = t.expect(SEQUENCE, "issuer")?;
    let validity = t.expect(SEQUENCE, "validity")?;
    let subject = t.expect(SEQUENCE, "subject")?;
    let spki = t.expect(SEQUENCE, "subject public key info")?;
    t.optional(0x81)?;
    t.optional(0x82)?;
    let public_key = rsa_public_key(spki.content)?;
    let mut times = Der::new(validity.content);
    let not_before = time(&times.next()?)?;
    let not_after = time(&times.next()?)?;
    let mut out = defaults();
    let ext_list = match t.optional(0xa3)? {
        Some(e) => {
            let seq = Der::new(e.content).expect(SEQUENCE, "extensions")?;
            extensions(seq.content, &mut out)?
        }
        None => Vec::new(),
    };
    let mut put = |k: &str, v: Value| {
        out.insert(k.to_string(), v);
    };
    put("Raw", b64(cert.raw));
    put("RawTBSCertificate", b64(tbs.raw));
    put("RawSubjectPublicKeyInfo", b64(spki.raw));
    put("RawSubject", b64(subject.raw));
    put("RawIssuer", b64(issuer.raw));
    put(
        "Signature",
        b64(signature.content.get(1..).unwrap_or_default()),
    );
    put(
        "SignatureAlgorithm",
        json!(signature_algorithm(sig_algo.content)?),
    );
    put("PublicKeyAlgorithm", json!(1));
    put("PublicKey", public_key);
    put("Version", json!(version));
    put("SerialNumber", big_number(serial.content));
    put("Issuer", name(issuer.content)?);
    put("Subject", name(subject.content)?);
    put("NotBefore", json!(not_before));
    put("NotAfter", json!(not_after));
    put("Extensions", list_or_null(ext_list));
    Ok(Value::Object(out))
}

/// A value Go's `encoding/asn1` reads into `any` (an attribute's value),
/// as `encoding/json` writes it; None for the types it does not read.
fn asn1_any(t: &Tlv<'_>) -> Option<Value> {
    match t.tag {
        BOOLEAN => Some(json!(t.content.first().is_some_and(|v| *v != 0))),
        INTEGER => small_int(t.content).ok().map(|v| json!(v)),
        OCTET_STRING => Some(b64(t.content)),
        OID => oid_arcs(t.content).ok().map(|a| json!(a)),
        _ => asn1_string(t).ok().map(Value::String),
    }
}

/// A CSR attribute as Go's `pkix.AttributeTypeAndValueSET` (its value a
/// set of sequences of type-and-value pairs); None when it is not one
/// (`challengePassword`, `unstructuredName`: Go leaves those out).
fn csr_attribute(attr: &Tlv<'_>) -> Option<Value> {
    let mut parts = Der::new(attr.content);
    let oid = oid_arcs(parts.expect(OID, "attribute").ok()?.content).ok()?;
    let set = parts.expect(SET, "attribute values").ok()?;
    if !parts.is_empty() {
        return None;
    }
    let mut values = Vec::new();
    let mut seqs = Der::new(set.content);
    while !seqs.is_empty() {
        let seq = seqs.expect(SEQUENCE, "values").ok()?;
        let mut pairs = Vec::new();
        let mut items = Der::new(seq.content);
        while !items.is_empty() {
            let item = items.expect(SEQUENCE, "value").ok()?;
            let mut fields = Der::new(item.content);
            let ty = oid_arcs(fields.expect(OID, "type").ok()?.content).ok()?;
            let value = asn1_any(&fields.next().ok()?)?;
            pairs.push(json!({"Type": ty, "Value": value}));
        }
        values.push(Value::Array(pairs));
    }
    Some(json!({"Type": oid, "Value": values}))
}

fn certificate_request(der: &[u8]) -> Result<Value, String> {
    let mut top = Der::new(der);
    let csr = top.expect(SEQUENCE, "certificate request")?;
    let mut parts = Der::new(csr.content);
    let info = parts.expect(SEQUENCE, "certificate request info")?;
    let sig_algo = parts.expect(SEQUENCE, "signature algorithm")?;
    let signature = parts.expect(BIT_STRING, "signature")?;
    let mut t = Der::new(info.content);
    let version = small_int(t.expect(INTEGER, "version")?.content)?;
    let subject = t.expect(SEQUENCE, "subject")?;
    let spki = t.expect(SEQUENCE, "subject public key info")?;
    let public_key = rsa_public_key(spki.content)?;
    let mut attributes = Vec::new();
    let mut extension_list = Vec::new();
    let mut sans = GeneralNames::default();
    if let Some(attrs) = t.optional(0xa0)? {
        let mut attrs = Der::new(attrs.content);
        while !attrs.is_empty() {
            let attr = attrs.expect(SEQUENCE, "attribute")?;
            attributes.extend(csr_attribute(&attr));
            // extensionRequest: the requested extensions.
            let mut a = Der::new(attr.content);
            let oid = oid_text(&oid_arcs(a.expect(OID, "attribute")?.content)?);
            if oid != "1.2.840.113549.1.9.14" {
                continue;
            }
            let set = a.expect(SET, "extension request")?;
            let seq = Der::new(set.content).expect(SEQUENCE, "extensions")?;
            let mut exts = Der::new(seq.content);
            while !exts.is_empty() {
                let ext = exts.expect(SEQUENCE, "extension")?;
                let mut e = Der::new(ext.content);
                let arcs = oid_arcs(e.expect(OID, "extension id")?.content)?;
                let critical = match e.optional(BOOLEAN)? {
                    Some(b) => b.content.first().is_some_and(|v| *v != 0),
                    None => false,
                };
                let value = e.expect(OCTET_STRING, "extension value")?.content;
                if oid_text(&arcs) == "2.5.29.17" {
                    sans = general_names(
                        Der::new(value)
                            .expect(SEQUENCE, "subject alt names")?
                            .content,
                    )?;
                }
                extension_list.push(
                    json!({"Id": arcs, "Critical": critical, "Value": STANDARD.encode(value)}),
                );
            }
        }
    }
    let uris: Vec<Value> = sans.uris.iter().map(|u| url_json(u)).collect();
    Ok(json!({
        "Raw": b64(csr.raw),
        "RawTBSCertificateRequest": b64(info.raw),
        "RawSubjectPublicKeyInfo": b64(spki.raw),
        "RawSubject": b64(subject.raw),
        "Version": version,
        "Signature": b64(signature.content.get(1..).unwrap_or_default()),
        "SignatureAlgorithm": signature_algorithm(sig_algo.content)?,
        "PublicKeyAlgorithm": 1,
        "PublicKey": public_key,
        "Subject": name(subject.content)?,
        "Attributes": list_or_null(attributes),
        "Extensions": list_or_null(extension_list),
        "ExtraExtensions": null,
        "DNSNames": strings_or_null(sans.dns),
        "EmailAddresses": strings_or_null(sans.emails),
        "IPAddresses": list_or_null(sans.ips),
        "URIs": list_or_null(uris),
    }))
}

/// The first PEM block of `text`: its type and its bytes.
fn pem_block(text: &str) -> Result<(String, Vec<u8>), String> {
    const FAILED: &str = "failed to decode PEM block";
    let start = text.find("-----BEGIN ").ok_or(FAILED)?;
    let after = &text[start + "-----BEGIN ".len()..];
    let (kind, body) = after.split_once("-----").ok_or(FAILED)?;
    let end_marker = format!("-----END {kind}-----");
    let end = body.find(&end_marker).ok_or(FAILED)?;
    let b64: String = body[..end].split_whitespace().collect();
    let bytes = STANDARD.decode(b64).map_err(|_| FAILED.to_string())?;
    Ok((kind.to_string(), bytes))
}

/// `x509_decode(pem)`.
pub(crate) fn decode(pem: &str) -> Result<Value, String> {
    let (kind, der) = pem_block(pem)?;
    match kind.as_str() {
        "CERTIFICATE" => certificate(&der),
        "CERTIFICATE REQUEST" => certificate_request(&der),
        _ => Err("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST".into()),
    }
}

#[cfg(test)]
#[path = "x509_tests.rs"]
mod tests;
