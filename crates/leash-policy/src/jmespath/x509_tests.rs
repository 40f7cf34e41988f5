//! `x509_decode` against what Go's `crypto/x509` and `encoding/json` give
//! for the same certificates (`testdata/x509`).

use serde_json::Value;

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
