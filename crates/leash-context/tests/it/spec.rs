//! Parsing and validation: all three apiVersions, defaults, and invalid
//! specs rejected before anything starts, naming the entry and the field.

use std::time::Duration;

use leash_context::spec::Method;
use leash_context::{ApiTarget, EntrySource, Error, load_entry_files, parse_entries};

const THREE_VERSIONS: &str = r#"
apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata:
  name: deployments
spec:
  kubernetesResource:
    group: apps
    version: v1
    resource: deployments
    namespace: x
  projections:
  - name: count
    jmesPath: "[?metadata.namespace=='x'] | length(@)"
---
apiVersion: kyverno.io/v2beta1
kind: GlobalContextEntry
metadata:
  name: deployments-api
spec:
  apiCall:
    urlPath: /apis/apps/v1/deployments
    refreshInterval: 1h30m
  projections:
  - name: names
    jmesPath: "items[].metadata.name"
---
apiVersion: kyverno.io/v2
kind: GlobalContextEntry
metadata:
  name: service
spec:
  apiCall:
    service:
      url: https://example.invalid/things?x=1
      headers:
      - key: X-Token
        value: abc
    method: POST
    data:
    - key: a
      value: {"nested": [1, 2]}
    - key: b
      value: text
    retryLimit: 5
---
"#;

#[test]
fn parses_all_three_api_versions_with_defaults() {
    let entries = parse_entries(THREE_VERSIONS, "three.yaml").unwrap();
    let names: Vec<&str> = entries.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["deployments", "deployments-api", "service"]);

    let EntrySource::Kubernetes(k) = entries[0].source() else {
        panic!("not a kubernetes entry")
    };
    assert_eq!(
        (k.group.as_str(), k.version.as_str(), k.resource.as_str()),
        ("apps", "v1", "deployments")
    );
    assert_eq!(k.namespace.as_deref(), Some("x"));
    assert_eq!(entries[0].projections()[0].name, "count");

    let EntrySource::ApiCall(call) = entries[1].source() else {
        panic!("not an api call")
    };
    assert!(matches!(&call.target, ApiTarget::UrlPath(p) if p == "/apis/apps/v1/deployments"));
    assert_eq!(call.method, Method::Get, "GET is the default");
    assert_eq!(call.refresh_interval, Duration::from_secs(5400));
    assert_eq!(call.retry_limit, 3, "Kyverno's default retryLimit");
    assert!(call.body.is_none());

    let EntrySource::ApiCall(call) = entries[2].source() else {
        panic!("not an api call")
    };
    let ApiTarget::Service(service) = &call.target else {
        panic!("not a service")
    };
    assert_eq!(
        service.url.to_string(),
        "https://example.invalid/things?x=1"
    );
    assert_eq!(service.headers["x-token"], "abc");
    assert_eq!(call.method, Method::Post);
    assert_eq!(call.retry_limit, 5);
    assert_eq!(
        call.refresh_interval,
        Duration::from_secs(600),
        "10m default"
    );
    assert_eq!(
        call.body,
        Some(serde_json::json!({"a": {"nested": [1, 2]}, "b": "text"}))
    );
}

/// `(yaml spec fragment, expected field, expected words in the reason)`.
const INVALID: &[(&str, &str, &str)] = &[
    (
        "kubernetesResource: {version: v1, resource: pods}\n  apiCall: {urlPath: /api/v1/pods}",
        "spec",
        "mutually exclusive",
    ),
    ("projections: []", "spec", "exactly one"),
    (
        "apiCall: {urlPath: /x, refreshInterval: 0s}",
        "spec.apiCall.refreshInterval",
        "greater than zero",
    ),
    (
        "apiCall: {urlPath: /x, refreshInterval: soon}",
        "spec.apiCall.refreshInterval",
        "soon",
    ),
    (
        "apiCall: {urlPath: /x, retryLimit: 0}",
        "spec.apiCall.retryLimit",
        "minimum 1",
    ),
    ("apiCall: {urlPath: /x, method: PUT}", "spec.apiCall", "PUT"),
    (
        "apiCall: {urlPath: /x, data: [{key: a, value: 1}]}",
        "spec.apiCall.data",
        "only allowed with method POST",
    ),
    (
        "apiCall: {urlPath: x}",
        "spec.apiCall.urlPath",
        "must start with '/'",
    ),
    ("apiCall: {}", "spec.apiCall", "one of urlPath and service"),
    (
        "apiCall: {urlPath: /x, service: {url: 'http://a'}}",
        "spec.apiCall",
        "mutually exclusive",
    ),
    (
        "apiCall: {service: {url: 'ftp://a/b'}}",
        "spec.apiCall.service.url",
        "http",
    ),
    (
        "apiCall: {service: {url: 'https://a', caBundle: 'not pem'}}",
        "spec.apiCall.service.caBundle",
        "PEM",
    ),
    (
        "apiCall: {service: {urll: 'https://a'}}",
        "spec.apiCall.service",
        "urll",
    ),
    (
        "kubernetesResource: {resource: pods}",
        "spec.kubernetesResource",
        "version",
    ),
    (
        "kubernetesResource: {version: v1, resource: ''}",
        "spec.kubernetesResource.resource",
        "empty",
    ),
    (
        "apiCall: {urlPath: /x}\n  projections: [{name: a, jmesPath: '@'}, {name: a, jmesPath: '@'}]",
        "spec.projections[1].name",
        "duplicate",
    ),
    (
        "apiCall: {urlPath: /x}\n  projections: [{name: myentry, jmesPath: '@'}]",
        "spec.projections[0].name",
        "differ from the entry's name",
    ),
    (
        "apiCall: {urlPath: /x}\n  projections: [{name: p, jmesPath: '[?'}]",
        "spec.projections[0].jmesPath",
        "does not compile",
    ),
    (
        "apiCall: {urlPath: /x}\n  projections: [{name: p}]",
        "spec.projections[0]",
        "jmesPath",
    ),
    ("apiCall: {urlPath: /x}\n  extra: 1", "spec", "extra"),
];

#[test]
fn invalid_specs_are_rejected_naming_entry_and_field() {
    for (fragment, field, words) in INVALID {
        let yaml = format!(
            "apiVersion: kyverno.io/v2beta1\nkind: GlobalContextEntry\nmetadata:\n  name: myentry\nspec:\n  {fragment}\n"
        );
        match parse_entries(&yaml, "bad.yaml") {
            Err(Error::InvalidEntry {
                entry,
                field: got,
                reason,
            }) => {
                assert_eq!(entry, "myentry", "{fragment}");
                assert_eq!(&got, field, "{fragment}: {reason}");
                assert!(
                    reason.contains(words),
                    "{fragment}: reason {reason:?} lacks {words:?}"
                );
                // The rendered error names both too.
                let text = Error::InvalidEntry {
                    entry,
                    field: got,
                    reason,
                }
                .to_string();
                assert!(text.contains("myentry") && text.contains(field), "{text}");
            }
            other => panic!("{fragment}: expected InvalidEntry, got {other:?}"),
        }
    }
}

#[test]
fn wrong_api_version_kind_and_name_are_rejected() {
    let cases = [
        (
            "kyverno.io/v1",
            "GlobalContextEntry",
            "name: a",
            "apiVersion",
        ),
        ("kyverno.io/v2beta1", "ClusterPolicy", "name: a", "kind"),
        (
            "kyverno.io/v2beta1",
            "GlobalContextEntry",
            "labels: {}",
            "metadata.name",
        ),
    ];
    for (api_version, kind, metadata, field) in cases {
        let yaml = format!(
            "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  {metadata}\nspec:\n  apiCall: {{urlPath: /x}}\n"
        );
        match parse_entries(&yaml, "bad.yaml") {
            Err(Error::InvalidEntry { field: got, .. }) => assert_eq!(got, field),
            other => panic!("expected InvalidEntry on {field}, got {other:?}"),
        }
    }
}

#[test]
fn files_load_and_duplicate_names_across_files_are_rejected() {
    let dir = std::env::temp_dir().join(format!("leash-context-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let a = dir.join("a.yaml");
    let b = dir.join("b.yaml");
    std::fs::write(&a, THREE_VERSIONS).unwrap();
    std::fs::write(
        &b,
        "apiVersion: kyverno.io/v2\nkind: GlobalContextEntry\nmetadata: {name: service}\nspec: {apiCall: {urlPath: /x}}\n",
    )
    .unwrap();
    assert_eq!(load_entry_files(&[&a]).unwrap().len(), 3);
    let err = load_entry_files(&[&a, &b]).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidEntry { entry, field, reason } if entry == "service" && field == "metadata.name" && reason.contains("duplicate")),
        "{err}"
    );
    let err = load_entry_files(&[dir.join("missing.yaml")]).unwrap_err();
    assert!(matches!(err, Error::ReadFailed { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shipped_examples_parse() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/examples/globalcontextentries.yaml");
    let entries = load_entry_files(&[path]).unwrap();
    let names: Vec<&str> = entries.iter().map(|e| e.name()).collect();
    assert_eq!(names, ["deployments", "deployments-api"]);
}
