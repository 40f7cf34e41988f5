//! `x509_decode` against what Go's `crypto/x509` and `encoding/json` give
//! for the same certificates (`testdata/x509`).

use serde_json::{Value, json};

use super::decode;

/// Decodes `testdata/x509/<name>.pem` and compares it, field by field, with
/// what Go gives for it: `testdata/x509/<name>.json`.
macro_rules! assert_golden {
    ($name:literal) => {
        assert_decodes_as(
            $name,
            include_str!(concat!("testdata/x509/", $name, ".pem")),
            include_str!(concat!("testdata/x509/", $name, ".json")),
        )
    };
}

fn assert_decodes_as(name: &str, pem: &str, want: &str) {
    let got = decode(pem).unwrap_or_else(|e| panic!("{name}: {e}"));
    let want: Value = serde_json::from_str(want).expect("golden JSON");
    let (got, want) = (got.as_object().unwrap(), want.as_object().unwrap());
    for (k, v) in want {
        assert_eq!(got.get(k), Some(v), "{name}: field {k}");
    }
    assert_eq!(got.len(), want.len(), "{name}: the same fields");
}

/// Every field, as Go writes it, for a certificate with each extension Go
/// interprets, a minimal one, and one valid past 2049.
#[test]
fn certificates_decode_as_go_marshals_them() {
    assert_golden!("rich");
    assert_golden!("plain");
    assert_golden!("future");
}

/// Certificate requests, with no attributes and with an extension request
/// (subject alternative names, a critical key usage).
#[test]
fn certificate_requests_decode_as_go_marshals_them() {
    assert_golden!("csr-plain");
    assert_golden!("csr-san");
}

#[test]
fn refusals_name_the_problem() {
    let err = decode(include_str!("testdata/x509/ec.pem")).unwrap_err();
    assert_eq!(err, "certificate should use rsa algorithm");
    assert_eq!(
        decode("not a certificate").unwrap_err(),
        "failed to decode PEM block"
    );
    assert_eq!(
        decode(include_str!("testdata/x509/negative-serial.pem")).unwrap_err(),
        "x509: negative serial number"
    );
    let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    assert_eq!(
        decode(key).unwrap_err(),
        "PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST"
    );
}

/// What Go reads and x509-cert's strict types would refuse: an
/// `x400Address` subject alternative name (passed over, the DNS name after
/// it kept) and a 26-byte serial number (RFC 5280 says 20 at most; Go
/// reads any length).
#[test]
fn names_go_passes_over_and_long_serials_decode() {
    let cert = decode(include_str!("testdata/x509/x400-san.pem")).unwrap();
    assert_eq!(cert["DNSNames"], serde_json::json!(["zzz.com"]));
    let cert = decode(include_str!("testdata/x509/long-serial.pem")).unwrap();
    assert_eq!(
        cert["SerialNumber"],
        serde_json::json!(1.619566192519142e60)
    );
}

/// RSASSA-PSS is named only in the shapes Go names (the salt as long as
/// the hash): SHA-384 with a 48-byte salt is SHA384WithRSAPSS (14), a
/// longer salt `UnknownSignatureAlgorithm` (0), as Kyverno's CLI gives.
#[test]
fn rsa_pss_is_named_as_go_names_it() {
    let cert = decode(include_str!("testdata/x509/pss-sha384.pem")).unwrap();
    assert_eq!(cert["SignatureAlgorithm"], 14);
    let cert = decode(include_str!("testdata/x509/pss-long-salt.pem")).unwrap();
    assert_eq!(cert["SignatureAlgorithm"], 0);
}

/// Extensions as Go reads them where it is lenient: a name constraint of
/// a type Go does not interpret (a directory name, an x400Address) and a
/// critical SAN with no name Go keeps leave the extension in
/// `UnhandledCriticalExtensions`; of a CRL point only the URIs before a
/// name of another type count; AIA locations that are not URIs are passed
/// over. Each as Kyverno v1.19.1's CLI gives it (`bench/x509-vs-kyverno`).
#[test]
fn extensions_go_reads_leniently() {
    let cert = |name: &str| {
        let pem = std::fs::read_to_string(format!(
            "{}/src/jmespath/testdata/x509/{name}.pem",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        decode(&pem).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let nc = cert("nc-dirname");
    assert_eq!(nc["PermittedDNSDomains"], json!([".ok.com"]));
    assert_eq!(nc["UnhandledCriticalExtensions"], json!([[2, 5, 29, 30]]));
    assert_eq!(nc["PermittedDNSDomainsCritical"], json!(true));
    let x400 = cert("nc-x400-critical");
    assert_eq!(x400["UnhandledCriticalExtensions"], json!([[2, 5, 29, 30]]));
    assert_eq!(x400["ExcludedDNSDomains"], Value::Null);
    let san = cert("san-dirname");
    assert_eq!(san["UnhandledCriticalExtensions"], json!([[2, 5, 29, 17]]));
    assert_eq!(san["DNSNames"], Value::Null);
    assert_eq!(
        cert("crl-mixed")["CRLDistributionPoints"],
        json!(["http://b/"])
    );
    let aia = cert("aia-locations");
    assert_eq!(aia["OCSPServer"], json!(["http://o/"]));
    assert_eq!(aia["IssuingCertificateURL"], Value::Null);
    assert_eq!(
        cert("nc-email")["PermittedEmailAddresses"],
        json!(["user@ex.com", "\"q u\"@ex.com", ".ex.com"])
    );
}

/// What Go refuses in extensions, refused with Go's words.
#[test]
fn malformed_extensions_are_refused_as_go_refuses_them() {
    for (name, want) in [
        ("crl-relative", "x509: invalid CRL distribution point"),
        ("nc-empty", "x509: empty name constraints extension"),
        (
            "nc-bad-mask",
            "x509: IP constraint contained invalid mask ff00ff00",
        ),
        (
            "skid-critical",
            "x509: subject key identifier incorrectly marked critical",
        ),
    ] {
        let pem = std::fs::read_to_string(format!(
            "{}/src/jmespath/testdata/x509/{name}.pem",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert_eq!(decode(&pem).unwrap_err(), want, "{name}");
    }
}

/// Domain names and mailboxes in name constraints, checked as Go checks
/// them (its `domainNameValid` and `parseRFC2821Mailbox`).
#[test]
fn constraint_names_are_checked_as_go_checks_them() {
    use super::{domain_valid, mailbox_valid};
    for (domain, constraint, want) in [
        ("", true, true),
        ("ex.com", true, true),
        (".ex.com", true, true),
        (".ex.com", false, false),
        ("ex.com.", true, false),
        ("a..b", true, false),
        ("..", true, false),
        ("a b.com", true, false),
        ("ü.com", true, false),
    ] {
        assert_eq!(
            domain_valid(domain, constraint),
            want,
            "{domain:?} {constraint}"
        );
    }
    for (mailbox, want) in [
        ("user@ex.com", true),
        ("a.b+c@ex.com", true),
        ("\"q u\"@ex.com", true),
        ("\"a\\\"b\"@ex.com", true),
        ("a\\ b@ex.com", true),
        ("user@", true),
        (".a@ex.com", false),
        ("a.@ex.com", false),
        ("a..b@ex.com", false),
        ("@ex.com", false),
        ("a@.ex.com", false),
        ("a@ex.com.", false),
        ("\"open@ex.com", false),
        ("a b@ex.com", false),
        ("a\\", false),
    ] {
        assert_eq!(mailbox_valid(mailbox), want, "{mailbox:?}");
    }
}
