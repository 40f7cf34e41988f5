//! `x509_decode`: a PEM certificate decoded into the JSON layout of Go's
//! `x509.Certificate` (as `encoding/json` writes it and Kyverno reads it
//! back: numbers are doubles, byte strings base64), with `PublicKey`
//! replaced by `{N, E}` (the RSA modulus in decimal and the exponent), as
//! Kyverno's function gives it; a `CERTIFICATE REQUEST` into Go's
//! `x509.CertificateRequest` likewise. Only RSA keys are accepted, as
//! Kyverno's.
//!
//! The DER is read by RustCrypto's `x509-cert` (already built for
//! leash-images); this module maps its structures onto Go's fields: the
//! extensions Go interprets fill their fields (key usage, basic
//! constraints, subject alternative names, name constraints, CRL
//! distribution points, authority and subject key ids, extended key
//! usage, certificate policies, policy mappings and constraints,
//! inhibit-any-policy, authority information access); a critical
//! extension none of these is lands in `UnhandledCriticalExtensions`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};
use x509_cert::certificate::{CertificateInner, Raw};
use x509_cert::der::asn1::{Any, ContextSpecific, ObjectIdentifier, UintRef};
use x509_cert::der::{Decode, Encode, Reader as _, SliceReader, Tag, TagNumber, Tagged as _};
use x509_cert::ext::Extension;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, CertificatePolicies, ExtendedKeyUsage,
    InhibitAnyPolicy, KeyUsage, PolicyConstraints, PolicyMappings, SubjectKeyIdentifier,
};
use x509_cert::request::CertReq;
use x509_cert::spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};

type Result<T> = std::result::Result<T, String>;

fn der_err(what: &str) -> impl Fn(x509_cert::der::Error) -> String + '_ {
    move |e| format!("malformed {what}: {e}")
}

/// The DER of a decoded part (Go's `Raw...` fields), base64.
fn raw<T: Encode>(v: &T) -> Result<Value> {
    v.to_der().map(|d| b64(&d)).map_err(der_err("certificate"))
}

fn arcs(oid: &ObjectIdentifier) -> Value {
    json!(oid.arcs().collect::<Vec<u32>>())
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

/// A non-negative DER INTEGER as Go's `big.Int` JSON number, read back as
/// a double.
fn big_number(content: &[u8]) -> Value {
    let text = decimal(content);
    match text.parse::<f64>() {
        // Exactly representable: written as an integer.
        Ok(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => json!(f as i64),
        Ok(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Err(_) => Value::Null,
    }
}

/// A string of one of the ASN.1 string types Go's parser reads.
fn asn1_string(tag: u8, content: &[u8]) -> Result<String> {
    match tag {
        // PrintableString, UTF8String, IA5String, NumericString
        0x13 | 0x0c | 0x16 | 0x12 => {
            String::from_utf8(content.to_vec()).map_err(|_| "invalid string".to_string())
        }
        // T61String, read as Latin-1.
        0x14 => Ok(content.iter().map(|b| char::from(*b)).collect()),
        // BMPString: UTF-16 big-endian.
        0x1e => {
            let units: Vec<u16> = content
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                .collect();
            String::from_utf16(&units).map_err(|_| "invalid BMPString".to_string())
        }
        // UniversalString: UTF-32 big-endian.
        0x1c => content
            .chunks(4)
            .map(|c| {
                let v = u32::from_be_bytes([
                    c[0],
                    *c.get(1).unwrap_or(&0),
                    *c.get(2).unwrap_or(&0),
                    *c.get(3).unwrap_or(&0),
                ]);
                char::from_u32(v).ok_or_else(|| "invalid UniversalString".to_string())
            })
            .collect(),
        _ => Err("unsupported string type".into()),
    }
}

fn any_string(v: &Any) -> Result<String> {
    asn1_string(v.tag().into(), v.value())
}

/// A `pkix.Name`.
fn name(n: &x509_cert::name::Name) -> Result<Value> {
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
    for atv in n.0.iter().flat_map(|rdn| rdn.0.iter()) {
        let value = any_string(&atv.value)?;
        names.push(json!({"Type": arcs(&atv.oid), "Value": value}));
        let oid: Vec<u32> = atv.oid.arcs().collect();
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

/// A validity time in RFC 3339 (Go's time JSON).
fn time(t: &x509_cert::time::Time) -> String {
    let d = t.to_date_time();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        d.year(),
        d.month(),
        d.day(),
        d.hour(),
        d.minutes(),
        d.seconds()
    )
}

/// Go's `SignatureAlgorithm` of an AlgorithmIdentifier.
fn signature_algorithm(ai: &AlgorithmIdentifierOwned) -> i64 {
    match ai.oid.to_string().as_str() {
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
        "1.2.840.113549.1.1.10" => rsa_pss(ai.parameters.as_ref()).unwrap_or(0),
        _ => 0,
    }
}

/// RSASSA-PSS as Go's `crypto/x509` names it: only the three shapes it
/// knows (an MGF1 of the message's hash, a salt as long as the hash, the
/// default trailer) have a name; any other parameters are
/// `UnknownSignatureAlgorithm` (None).
fn rsa_pss(params: Option<&Any>) -> Option<i64> {
    type Explicit<T> = ContextSpecific<T>;
    let mut r = SliceReader::new(params?.value()).ok()?;
    let hash = Explicit::<AlgorithmIdentifierOwned>::decode_explicit(&mut r, TagNumber::N0);
    let mgf = Explicit::<AlgorithmIdentifierOwned>::decode_explicit(&mut r, TagNumber::N1);
    let salt = Explicit::<u32>::decode_explicit(&mut r, TagNumber::N2);
    let trailer = Explicit::<u32>::decode_explicit(&mut r, TagNumber::N3);
    let (hash, mgf, salt) = (hash.ok()??.value, mgf.ok()??.value, salt.ok()??.value);
    let trailer = trailer.ok()?.map_or(1, |t| t.value);
    let mgf_hash: AlgorithmIdentifierOwned = mgf.parameters.as_ref()?.decode_as().ok()?;
    let null = |p: &Option<Any>| p.as_ref().is_none_or(|a| a.tag() == Tag::Null);
    if !null(&hash.parameters)
        || mgf.oid.to_string() != "1.2.840.113549.1.1.8"
        || mgf_hash.oid != hash.oid
        || !null(&mgf_hash.parameters)
        || trailer != 1
    {
        return None;
    }
    match (hash.oid.to_string().as_str(), salt) {
        ("2.16.840.1.101.3.4.2.1", 32) => Some(13),
        ("2.16.840.1.101.3.4.2.2", 48) => Some(14),
        ("2.16.840.1.101.3.4.2.3", 64) => Some(15),
        _ => None,
    }
}

/// The RSA `{N, E}` of a SubjectPublicKeyInfo; an error for any other key.
fn rsa_public_key(spki: &SubjectPublicKeyInfoOwned) -> Result<Value> {
    if spki.algorithm.oid.to_string() != "1.2.840.113549.1.1.1" {
        return Err("certificate should use rsa algorithm".into());
    }
    let key = spki.subject_public_key.raw_bytes();
    let (n, e) = SliceReader::new(key)
        .and_then(|mut r| r.sequence(|r| Ok((UintRef::decode(r)?, UintRef::decode(r)?))))
        .map_err(der_err("RSA public key"))?;
    let e = e
        .as_bytes()
        .iter()
        .try_fold(0i64, |acc, b| {
            acc.checked_mul(256).map(|v| v | i64::from(*b))
        })
        .ok_or("integer too large")?;
    Ok(json!({"N": decimal(n.as_bytes()), "E": e}))
}

/// The parts of GeneralNames Go keeps.
#[derive(Debug, Default)]
struct GeneralNames {
    dns: Vec<String>,
    emails: Vec<String>,
    ips: Vec<Value>,
    uris: Vec<String>,
}

/// A subject alternative name extension, read as Go reads it: the name
/// types it keeps, the others (an `x400Address`, which x509-cert cannot
/// decode, among them) passed over.
fn subject_alt_names(e: &Extension) -> Result<GeneralNames> {
    let names: Vec<Any> = ext(e, "subject alt names")?;
    let mut out = GeneralNames::default();
    for n in &names {
        let ia5 = || match std::str::from_utf8(n.value()) {
            Ok(s) if s.is_ascii() => Ok(s.to_string()),
            _ => Err("malformed subject alt name".to_string()),
        };
        match u8::from(n.tag()) {
            0x81 => out.emails.push(ia5()?),
            0x82 => out.dns.push(ia5()?),
            0x86 => out.uris.push(ia5()?),
            0x87 => out.ips.push(json!(ip_text(n.value())?)),
            _ => {}
        }
    }
    Ok(out)
}

fn ip_text(bytes: &[u8]) -> Result<String> {
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

/// The TLVs one after another in `bytes` (the contents of a SEQUENCE, or
/// of an implicitly tagged one); `err` when they are not well formed.
fn tlvs(bytes: &[u8], err: &str) -> Result<Vec<Any>> {
    let mut r = SliceReader::new(bytes).map_err(|_| err.to_string())?;
    let mut out = Vec::new();
    while !r.is_finished() {
        out.push(Any::decode(&mut r).map_err(|_| err.to_string())?);
    }
    Ok(out)
}

/// An extension's value as the elements of its outer SEQUENCE.
fn ext_elements(e: &Extension, err: &str) -> Result<Vec<Any>> {
    Vec::<Any>::from_der(e.extn_value.as_bytes()).map_err(|_| err.to_string())
}

/// Whether Go's crypto/x509 takes `s` as a domain name (its
/// `domainNameValid`): labels of printable ASCII, none empty, no trailing
/// dot; a constraint may start with one dot, and may be empty.
fn domain_valid(s: &str, constraint: bool) -> bool {
    let s = match s.strip_prefix('.') {
        _ if s.is_empty() => return true,
        _ if s.ends_with('.') => return false,
        Some(rest) if constraint => rest,
        _ => s,
    };
    s.split('.')
        .all(|label| !label.is_empty() && label.bytes().all(|b| (33..=126).contains(&b)))
}

/// Whether `s` is an RFC 2821 mailbox as Go's crypto/x509 reads an email
/// constraint with an `@`: a quoted string or dot-separated atoms (a
/// backslash escaping any character), then `@` and a domain.
fn mailbox_valid(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'"') {
        i = 1;
        loop {
            let Some(&c) = b.get(i) else { return false };
            i += 1;
            match c {
                b'"' => break,
                b'\\' => match b.get(i) {
                    Some(1..=9 | 11 | 12 | 14..=127) => i += 1,
                    _ => return false,
                },
                1..=8 | 11 | 12 | 14..=33 | 35..=91 | 93..=127 => {}
                _ => return false,
            }
        }
    } else {
        let mut local = Vec::new();
        while let Some(&c) = b.get(i) {
            let atext = c.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~.".contains(&c);
            if c == b'\\' {
                let Some(&escaped) = b.get(i + 1) else {
                    return false;
                };
                local.push(escaped);
                i += 2;
            } else if atext {
                local.push(c);
                i += 1;
            } else {
                break;
            }
        }
        if local.is_empty()
            || local.starts_with(b".")
            || local.ends_with(b".")
            || local.windows(2).any(|w| w == b"..")
        {
            return false;
        }
    }
    match s.get(i..).and_then(|rest| rest.strip_prefix('@')) {
        Some(domain) => domain.is_empty() || domain_valid(domain, false),
        None => false,
    }
}

/// A name constraint's text: IA5 (ASCII), as Go requires.
fn constraint_text(value: &[u8]) -> Result<String> {
    let text = String::from_utf8_lossy(value);
    if text.is_ascii() {
        Ok(text.into_owned())
    } else {
        Err(format!(
            "x509: invalid constraint value: x509: {text:?} cannot be encoded as an IA5String"
        ))
    }
}

/// The name constraints extension as Go reads it (RFC 5280 4.2.1.10):
/// its DNS, IP, email and URI constraints checked as Go checks them, into
/// `set`. Returns whether a constraint of another type (a directory name,
/// an x400Address) left the extension unhandled.
fn name_constraints(e: &Extension, set: &mut impl FnMut(&str, Value)) -> Result<bool> {
    const INVALID: &str = "x509: invalid NameConstraints extension";
    let top = ext_elements(e, INVALID)?;
    let mut top = top.iter().peekable();
    // [0] permittedSubtrees, then [1] excludedSubtrees, both optional.
    let trees = [0xA0u8, 0xA1].map(|tag| {
        top.next_if(|t| u8::from(t.tag()) == tag)
            .map(|t| t.value().to_vec())
    });
    if top.next().is_some() {
        return Err(INVALID.into());
    }
    if trees.iter().all(|t| t.as_ref().is_none_or(Vec::is_empty)) {
        return Err("x509: empty name constraints extension".into());
    }
    let mut unhandled = false;
    for (subtrees, prefix) in trees.iter().zip(["Permitted", "Excluded"]) {
        let (mut dns, mut ips, mut emails, mut uris) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for subtree in tlvs(subtrees.as_deref().unwrap_or_default(), INVALID)? {
            // GeneralSubtree ::= SEQUENCE { base GeneralName, ... }
            let base = (u8::from(subtree.tag()) == 0x30)
                .then(|| SliceReader::new(subtree.value()).ok())
                .flatten()
                .and_then(|mut r| Any::decode(&mut r).ok())
                .ok_or(INVALID)?;
            let value = base.value();
            match u8::from(base.tag()) {
                0x82 => {
                    let domain = constraint_text(value)?;
                    if !domain_valid(&domain, true) {
                        return Err(format!(
                            "x509: failed to parse dnsName constraint {domain:?}"
                        ));
                    }
                    dns.push(domain);
                }
                0x87 => {
                    let half = value.len() / 2;
                    if value.len() != 8 && value.len() != 32 {
                        return Err(format!(
                            "x509: IP constraint contained value of length {}",
                            value.len()
                        ));
                    }
                    let mask = &value[half..];
                    // Ones, then zeros.
                    let bits = mask
                        .iter()
                        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1));
                    if bits.skip_while(|&b| b == 1).any(|b| b == 1) {
                        let hex: String = mask.iter().map(|b| format!("{b:02x}")).collect();
                        return Err(format!("x509: IP constraint contained invalid mask {hex}"));
                    }
                    ips.push(json!({
                        "IP": ip_text(&value[..half])?,
                        "Mask": STANDARD.encode(mask),
                    }));
                }
                0x81 => {
                    let email = constraint_text(value)?;
                    let valid = if email.contains('@') {
                        mailbox_valid(&email)
                    } else {
                        domain_valid(&email, true)
                    };
                    if !valid {
                        return Err(format!(
                            "x509: failed to parse rfc822Name constraint {email:?}"
                        ));
                    }
                    emails.push(email);
                }
                0x86 => {
                    let domain = constraint_text(value)?;
                    if domain.parse::<std::net::IpAddr>().is_ok() {
                        return Err(format!(
                            "x509: failed to parse URI constraint {domain:?}: cannot be IP address"
                        ));
                    }
                    if !domain_valid(&domain, true) {
                        return Err(format!("x509: failed to parse URI constraint {domain:?}"));
                    }
                    uris.push(domain);
                }
                _ => unhandled = true,
            }
        }
        set(&format!("{prefix}DNSDomains"), strings_or_null(dns));
        set(&format!("{prefix}IPRanges"), list_or_null(ips));
        set(&format!("{prefix}EmailAddresses"), strings_or_null(emails));
        set(&format!("{prefix}URIDomains"), strings_or_null(uris));
    }
    set("PermittedDNSDomainsCritical", json!(e.critical));
    Ok(unhandled)
}

/// The URIs of CRL distribution points as Go reads them: of each point's
/// full name, the URIs before any name of another type; a point named
/// relative to its CRL issuer is an error, as in Go.
fn crl_distribution_points(e: &Extension) -> Result<Vec<String>> {
    const INVALID: &str = "x509: invalid CRL distribution point";
    let mut urls = Vec::new();
    for point in ext_elements(e, "x509: invalid CRL distribution points")? {
        if u8::from(point.tag()) != 0x30 {
            return Err(INVALID.into());
        }
        // DistributionPoint ::= SEQUENCE { distributionPoint [0] OPTIONAL, ... }
        let Some(name) = tlvs(point.value(), INVALID)?
            .into_iter()
            .next()
            .filter(|n| u8::from(n.tag()) == 0xA0)
        else {
            continue;
        };
        // DistributionPointName ::= CHOICE { fullName [0] GeneralNames, ... }
        let full = tlvs(name.value(), INVALID)?
            .into_iter()
            .next()
            .filter(|n| u8::from(n.tag()) == 0xA0)
            .ok_or(INVALID)?;
        let names = tlvs(full.value(), INVALID)?;
        let leading_uris = names.iter().take_while(|n| u8::from(n.tag()) == 0x86);
        urls.extend(leading_uris.map(|n| String::from_utf8_lossy(n.value()).into_owned()));
    }
    Ok(urls)
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

/// An extension's value decoded as `T`.
fn ext<'a, T: Decode<'a>>(e: &'a Extension, what: &str) -> Result<T> {
    T::from_der(e.extn_value.as_bytes()).map_err(der_err(what))
}

fn extension_json(e: &Extension) -> Value {
    json!({"Id": arcs(&e.extn_id), "Critical": e.critical, "Value": STANDARD.encode(e.extn_value.as_bytes())})
}

/// The certificate's fields that its extensions set, in `out`.
fn extensions(exts: &[Extension], out: &mut Map<String, Value>) -> Result<Vec<Value>> {
    let mut unhandled_critical = Vec::new();
    let mut set = |k: &str, v: Value| {
        out.insert(k.to_string(), v);
    };
    for e in exts {
        // An extension Go does not interpret, or whose content it cannot
        // take in full.
        let mut unhandled = false;
        let id = e.extn_id.to_string();
        let must_not_be_critical = match id.as_str() {
            "2.5.29.35" => Some("authority key identifier"),
            "2.5.29.14" => Some("subject key identifier"),
            "1.3.6.1.5.5.7.1.1" => Some("authority info access"),
            _ => None,
        };
        if let Some(what) = must_not_be_critical.filter(|_| e.critical) {
            return Err(format!("x509: {what} incorrectly marked critical"));
        }
        match id.as_str() {
            "2.5.29.15" => {
                let usage: KeyUsage = ext(e, "key usage")?;
                set("KeyUsage", json!(usage.0.bits()));
            }
            "2.5.29.19" => {
                let bc: BasicConstraints = ext(e, "basic constraints")?;
                let path_len = bc.path_len_constraint;
                set("BasicConstraintsValid", json!(true));
                set("IsCA", json!(bc.ca));
                set("MaxPathLen", json!(path_len.map_or(-1, i64::from)));
                set("MaxPathLenZero", json!(path_len == Some(0)));
            }
            "2.5.29.17" => {
                let names = subject_alt_names(e)?;
                unhandled = names.dns.is_empty()
                    && names.emails.is_empty()
                    && names.ips.is_empty()
                    && names.uris.is_empty();
                set("DNSNames", strings_or_null(names.dns));
                set("EmailAddresses", strings_or_null(names.emails));
                set("IPAddresses", list_or_null(names.ips));
                set(
                    "URIs",
                    list_or_null(names.uris.iter().map(|u| url_json(u)).collect()),
                );
            }
            "2.5.29.30" => unhandled = name_constraints(e, &mut set)?,
            "2.5.29.31" => set(
                "CRLDistributionPoints",
                strings_or_null(crl_distribution_points(e)?),
            ),
            "2.5.29.35" => {
                let akid: AuthorityKeyIdentifier = ext(e, "authority key id")?;
                if let Some(id) = akid.key_identifier {
                    set("AuthorityKeyId", b64(id.as_bytes()));
                }
            }
            "2.5.29.14" => {
                let id: SubjectKeyIdentifier = ext(e, "subject key id")?;
                set("SubjectKeyId", b64(id.0.as_bytes()));
            }
            "2.5.29.37" => {
                let (mut known, mut unknown) = (Vec::new(), Vec::new());
                for oid in ext::<ExtendedKeyUsage>(e, "ext key usage")?.0 {
                    match ext_key_usage(&oid.to_string()) {
                        Some(u) => known.push(json!(u)),
                        None => unknown.push(arcs(&oid)),
                    }
                }
                set("ExtKeyUsage", list_or_null(known));
                set("UnknownExtKeyUsage", list_or_null(unknown));
            }
            "2.5.29.32" => {
                let policies = ext::<CertificatePolicies>(e, "policies")?.0;
                let ids = policies.iter().map(|p| arcs(&p.policy_identifier));
                let texts = policies
                    .iter()
                    .map(|p| json!(p.policy_identifier.to_string()));
                set("PolicyIdentifiers", list_or_null(ids.collect()));
                set("Policies", list_or_null(texts.collect()));
            }
            "2.5.29.33" => {
                let maps = ext::<PolicyMappings>(e, "policy mappings")?
                    .0
                    .into_iter()
                    .map(|m| {
                        json!({
                            "IssuerDomainPolicy": m.issuer_domain_policy.to_string(),
                            "SubjectDomainPolicy": m.subject_domain_policy.to_string(),
                        })
                    });
                set("PolicyMappings", list_or_null(maps.collect()));
            }
            "2.5.29.36" => {
                let pc: PolicyConstraints = ext(e, "policy constraints")?;
                for (v, field) in [
                    (pc.require_explicit_policy, "RequireExplicitPolicy"),
                    (pc.inhibit_policy_mapping, "InhibitPolicyMapping"),
                ] {
                    if let Some(v) = v {
                        set(field, json!(v));
                        set(&format!("{field}Zero"), json!(v == 0));
                    }
                }
            }
            "2.5.29.54" => {
                let v = ext::<InhibitAnyPolicy>(e, "inhibit any policy")?.0;
                set("InhibitAnyPolicy", json!(v));
                set("InhibitAnyPolicyZero", json!(v == 0));
            }
            "1.3.6.1.5.5.7.1.1" => {
                const INVALID: &str = "x509: invalid authority info access";
                let (mut ocsp, mut issuers) = (Vec::new(), Vec::new());
                // AccessDescription ::= SEQUENCE { accessMethod OID,
                // accessLocation GeneralName }: only URI locations kept.
                for ad in ext_elements(e, INVALID)? {
                    let parts = tlvs(ad.value(), INVALID)?;
                    let (Some(method), location) = (parts.first(), parts.get(1)) else {
                        return Err(INVALID.into());
                    };
                    let method = method
                        .decode_as::<ObjectIdentifier>()
                        .map_err(|_| INVALID)?;
                    let Some(url) = location.filter(|l| u8::from(l.tag()) == 0x86) else {
                        continue;
                    };
                    let url = String::from_utf8_lossy(url.value()).into_owned();
                    match method.to_string().as_str() {
                        "1.3.6.1.5.5.7.48.1" => ocsp.push(url),
                        "1.3.6.1.5.5.7.48.2" => issuers.push(url),
                        _ => {}
                    }
                }
                set("OCSPServer", strings_or_null(ocsp));
                set("IssuingCertificateURL", strings_or_null(issuers));
            }
            _ => unhandled = true,
        }
        if unhandled && e.critical {
            unhandled_critical.push(arcs(&e.extn_id));
        }
    }
    set(
        "UnhandledCriticalExtensions",
        list_or_null(unhandled_critical),
    );
    Ok(exts.iter().map(extension_json).collect())
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

fn certificate(der: &[u8]) -> Result<Value> {
    // The `Raw` profile reads serial numbers of any length, as Go does.
    let cert = CertificateInner::<Raw>::from_der(der).map_err(der_err("certificate"))?;
    let tbs = &cert.tbs_certificate;
    // Go (1.23 and later, Kyverno's) refuses a negative serial number.
    if tbs
        .serial_number
        .as_bytes()
        .first()
        .is_some_and(|b| b & 0x80 != 0)
    {
        return Err("x509: negative serial number".into());
    }
    let public_key = rsa_public_key(&tbs.subject_public_key_info)?;
    let mut out = defaults();
    let ext_list = extensions(tbs.extensions.as_deref().unwrap_or_default(), &mut out)?;
    for (k, v) in [
        ("Raw", b64(der)),
        ("RawTBSCertificate", raw(tbs)?),
        (
            "RawSubjectPublicKeyInfo",
            raw(&tbs.subject_public_key_info)?,
        ),
        ("RawSubject", raw(&tbs.subject)?),
        ("RawIssuer", raw(&tbs.issuer)?),
        ("Signature", b64(cert.signature.raw_bytes())),
        (
            "SignatureAlgorithm",
            json!(signature_algorithm(&cert.signature_algorithm)),
        ),
        ("PublicKeyAlgorithm", json!(1)),
        ("PublicKey", public_key),
        ("Version", json!(tbs.version as i64 + 1)),
        ("SerialNumber", big_number(tbs.serial_number.as_bytes())),
        ("Issuer", name(&tbs.issuer)?),
        ("Subject", name(&tbs.subject)?),
        ("NotBefore", json!(time(&tbs.validity.not_before))),
        ("NotAfter", json!(time(&tbs.validity.not_after))),
        ("Extensions", list_or_null(ext_list)),
    ] {
        out.insert(k.to_string(), v);
    }
    Ok(Value::Object(out))
}

/// A value Go's `encoding/asn1` reads into `any` (an attribute's value),
/// as `encoding/json` writes it; None for the types it does not read.
fn asn1_any(v: &Any) -> Option<Value> {
    let content = v.value();
    match u8::from(v.tag()) {
        0x01 => Some(json!(content.first().is_some_and(|v| *v != 0))),
        0x02 if !content.is_empty() && content.len() <= 8 => {
            let start: i64 = if content[0] & 0x80 != 0 { -1 } else { 0 };
            Some(json!(
                content
                    .iter()
                    .fold(start, |acc, b| (acc << 8) | i64::from(*b))
            ))
        }
        0x04 => Some(b64(content)),
        0x06 => ObjectIdentifier::from_bytes(content).ok().map(|o| arcs(&o)),
        tag => asn1_string(tag, content).ok().map(Value::String),
    }
}

/// A SEQUENCE read as Go reads it into a `pkix.AttributeTypeAndValue`:
/// its OID and the element after it (what follows is not read: an
/// extension's value after its critical flag).
fn type_and_value(seq: &Any) -> Option<Value> {
    if u8::from(seq.tag()) != 0x30 {
        return None;
    }
    let mut r = SliceReader::new(seq.value()).ok()?;
    let oid = ObjectIdentifier::decode(&mut r).ok()?;
    let value = asn1_any(&Any::decode(&mut r).ok()?)?;
    Some(json!({"Type": arcs(&oid), "Value": value}))
}

/// A CSR attribute as Go's `pkix.AttributeTypeAndValueSET` (its value a
/// set of sequences of type-and-value pairs); None when it is not one
/// (`challengePassword`, `unstructuredName`: Go leaves those out).
fn csr_attribute(attr: &x509_cert::attr::Attribute) -> Option<Value> {
    let mut values = Vec::new();
    for v in attr.values.iter() {
        let pairs: Vec<Any> = v.decode_as().ok()?;
        let pairs: Option<Vec<Value>> = pairs.iter().map(type_and_value).collect();
        values.push(Value::Array(pairs?));
    }
    Some(json!({"Type": arcs(&attr.oid), "Value": values}))
}

fn certificate_request(der: &[u8]) -> Result<Value> {
    let csr = CertReq::from_der(der).map_err(der_err("certificate request"))?;
    let info = &csr.info;
    let public_key = rsa_public_key(&info.public_key)?;
    let mut extension_list = Vec::new();
    let mut sans = GeneralNames::default();
    // extensionRequest: the requested extensions.
    for attr in info.attributes.iter() {
        if attr.oid.to_string() != "1.2.840.113549.1.9.14" {
            continue;
        }
        let exts: Vec<Extension> = attr
            .values
            .iter()
            .next()
            .ok_or("malformed extension request")?
            .decode_as()
            .map_err(der_err("extension request"))?;
        for e in &exts {
            if e.extn_id.to_string() == "2.5.29.17" {
                sans = subject_alt_names(e)?;
            }
            extension_list.push(extension_json(e));
        }
    }
    let attributes: Vec<Value> = info.attributes.iter().filter_map(csr_attribute).collect();
    let uris: Vec<Value> = sans.uris.iter().map(|u| url_json(u)).collect();
    Ok(json!({
        "Raw": b64(der),
        "RawTBSCertificateRequest": raw(info)?,
        "RawSubjectPublicKeyInfo": raw(&info.public_key)?,
        "RawSubject": raw(&info.subject)?,
        "Version": info.version as i64,
        "Signature": b64(csr.signature.raw_bytes()),
        "SignatureAlgorithm": signature_algorithm(&csr.algorithm),
        "PublicKeyAlgorithm": 1,
        "PublicKey": public_key,
        "Subject": name(&info.subject)?,
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
fn pem_block(text: &str) -> Result<(String, Vec<u8>)> {
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
pub(crate) fn decode(pem: &str) -> Result<Value> {
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
