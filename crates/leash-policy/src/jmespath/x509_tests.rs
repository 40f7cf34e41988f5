//! `x509_decode` against what Go's `crypto/x509` and `encoding/json` give
//! for the same certificates (`testdata/x509`).

use serde_json::Value;

use super::decode;

fn golden(json: &str) -> Value {
    serde_json::from_str(json).expect("golden JSON")
}

/// Every field, as Go writes it, for a certificate with each extension Go
/// interprets, a minimal one, and one valid past 2049.
#[test]
fn certificates_decode_as_go_marshals_them() {
    for (name, pem, want) in [
        (
            "rich",
            include_str!("testdata/x509/rich.pem"),
            include_str!("testdata/x509/rich.json"),
        ),
        (
            "plain",
            include_str!("testdata/x509/plain.pem"),
            include_str!("testdata/x509/plain.json"),
        ),
        (
            "future",
            include_str!("testdata/x509/future.pem"),
            include_str!("testdata/x509/future.json"),
        ),
    ] {
        let got = decode(pem).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = golden(want);
        let (got, want) = (got.as_object().unwrap(), want.as_object().unwrap());
        for (k, v) in want {
            assert_eq!(got.get(k), Some(v), "{name}: field {k}");
        }
        assert_eq!(got.len(), want.len(), "{name}: the same fields");
    }
}

/// Certificate requests, with no attributes and with an extension request
/// (subject alternative names, a critical key usage).
#[test]
fn certificate_requests_decode_as_go_marshals_them() {
    for (name, pem, want) in [
        (
            "csr-plain",
            include_str!("testdata/x509/csr-plain.pem"),
            include_str!("testdata/x509/csr-plain.json"),
        ),
        (
            "csr-san",
            include_str!("testdata/x509/csr-san.pem"),
            include_str!("testdata/x509/csr-san.json"),
        ),
    ] {
        let got = decode(pem).unwrap_or_else(|e| panic!("{name}: {e}"));
        let want = golden(want);
        let (got, want) = (got.as_object().unwrap(), want.as_object().unwrap());
        for (k, v) in want {
            assert_eq!(got.get(k), Some(v), "{name}: field {k}");
        }
        assert_eq!(got.len(), want.len(), "{name}: the same fields");
    }
}

#[test]
fn refusals_name_the_problem() {
    let err = decode(include_str!("testdata/x509/ec.pem")).unwrap_err();
    assert_eq!(err, "certificate should use rsa algorithm");
    assert_eq!(
        decode("not a certificate").unwrap_err(),
        "failed to decode PEM block"
    );
    let key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
    assert_eq!(
        decode(key).unwrap_err(),
        "PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST"
    );
}
