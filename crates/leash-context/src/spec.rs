//! Kyverno's `GlobalContextEntry` resource, field for field (serde).
//!
//! These types mirror the CRD `globalcontextentries.kyverno.io` (versions
//! `v2alpha1`, `v2beta1` and `v2`, which share one schema). They are plain
//! data: [`crate::ContextEntry::from_resource`] validates them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The API group of `GlobalContextEntry`.
pub const GROUP: &str = "kyverno.io";
/// The kind.
pub const KIND: &str = "GlobalContextEntry";
/// The resource (plural) name.
pub const PLURAL: &str = "globalcontextentries";
/// Kyverno's storage version, the one `--watch-crds` watches.
pub const STORAGE_VERSION: &str = "v2beta1";
/// Every accepted `apiVersion`.
pub const API_VERSIONS: [&str; 3] = ["kyverno.io/v2alpha1", "kyverno.io/v2beta1", "kyverno.io/v2"];

/// A `GlobalContextEntry` object as found in YAML files or in the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalContextEntry {
    /// `kyverno.io/v2beta1`, `kyverno.io/v2alpha1` or `kyverno.io/v2`.
    pub api_version: String,
    /// Always `GlobalContextEntry`.
    pub kind: String,
    /// Standard object metadata; the entry's name is `metadata.name`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What to cache and how to project it.
    pub spec: GlobalContextEntrySpec,
}

/// `spec` of a `GlobalContextEntry`: exactly one of `kubernetesResource` and
/// `apiCall`, plus projections.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GlobalContextEntrySpec {
    /// A live mirror of Kubernetes objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_resource: Option<KubernetesResource>,
    /// A polled API call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_call: Option<ExternalApiCall>,
    /// JMESPath expressions evaluated over the entry's data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projections: Vec<Projection>,
}

/// `spec.kubernetesResource`: which objects to mirror.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubernetesResource {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// API version, such as `v1`.
    pub version: String,
    /// Resource (plural) name, such as `deployments`.
    pub resource: String,
    /// Only this namespace; absent or empty for all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// `spec.apiCall`: an HTTP call polled every `refreshInterval`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalApiCall {
    /// A path on the Kubernetes API server, called with the client's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_path: Option<String>,
    /// An external service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceCall>,
    /// `GET` (default) or `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Method>,
    /// The POST body, as a JSON object of these keys (POST only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<RequestData>,
    /// A Go duration (`10m`, `30s`, `1h30m`); default `10m`; must be > 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_interval: Option<String>,
    /// Attempts per refresh; default 3, minimum 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_limit: Option<i64>,
}

/// HTTP method of an API call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Method {
    /// `GET` (the default).
    #[default]
    #[serde(rename = "GET")]
    Get,
    /// `POST`, with `data` as the JSON body.
    #[serde(rename = "POST")]
    Post,
}

impl Method {
    /// The `http` crate's method.
    pub fn as_http(self) -> http::Method {
        match self {
            Method::Get => http::Method::GET,
            Method::Post => http::Method::POST,
        }
    }
}

/// `spec.apiCall.service`: an external HTTP(S) service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceCall {
    /// Absolute `http://` or `https://` URL.
    pub url: String,
    /// Extra request headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HttpHeader>,
    /// PEM certificates trusted for this service's TLS (instead of the system roots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle: Option<String>,
}

/// One request header.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpHeader {
    /// Header name.
    pub key: String,
    /// Header value.
    pub value: String,
}

/// One key of a POST body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestData {
    /// Key in the JSON body.
    pub key: String,
    /// Any JSON value.
    pub value: serde_json::Value,
}

/// A named JMESPath expression over the entry's data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Projection {
    /// Unique within the entry and different from the entry's name.
    pub name: String,
    /// A JMESPath expression.
    pub jmes_path: String,
}
