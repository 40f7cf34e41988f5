//! Validated entries: a `GlobalContextEntry` checked once, before anything starts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

use crate::duration::parse_go_duration;
use crate::error::{Error, Result};
use crate::spec::{API_VERSIONS, GlobalContextEntry, KIND, Method};

/// Kyverno's default `refreshInterval`.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(600);
/// Kyverno's default `retryLimit`.
pub const DEFAULT_RETRY_LIMIT: u32 = 3;

/// A valid entry, ready to be added to a [`crate::Store`].
///
/// Cheap to clone (the compiled parts are shared).
#[derive(Clone, Debug)]
pub struct ContextEntry {
    inner: Arc<EntryInner>,
}

#[derive(Debug)]
struct EntryInner {
    name: String,
    resource: GlobalContextEntry,
    source: EntrySource,
    projections: Vec<CompiledProjection>,
}

/// Where an entry's data comes from.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum EntrySource {
    /// A watched list of Kubernetes objects.
    Kubernetes(KubernetesSource),
    /// A polled HTTP call.
    ApiCall(ApiCallSource),
}

/// A validated `spec.kubernetesResource`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubernetesSource {
    /// API group (empty: core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// Namespace filter.
    pub namespace: Option<String>,
}

impl KubernetesSource {
    /// `group/version` (or `version` for the core group).
    pub fn group_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for KubernetesSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.group_version(), self.resource)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in namespace {ns}")?;
        }
        Ok(())
    }
}

/// A validated `spec.apiCall`.
#[derive(Clone, Debug)]
pub struct ApiCallSource {
    /// Where the call goes.
    pub target: ApiTarget,
    /// GET or POST.
    pub method: Method,
    /// The JSON object body (POST with `data` only).
    pub body: Option<serde_json::Value>,
    /// Time between refreshes (> 0).
    pub refresh_interval: Duration,
    /// Attempts per refresh (>= 1).
    pub retry_limit: u32,
}

/// Target of an API call.
#[derive(Clone, Debug)]
pub enum ApiTarget {
    /// A path on the Kubernetes API server.
    UrlPath(String),
    /// An external service.
    Service(ServiceTarget),
}

/// A validated `spec.apiCall.service`.
#[derive(Clone, Debug)]
pub struct ServiceTarget {
    /// The URL (`http` or `https`, with a host).
    pub url: http::Uri,
    /// Extra headers.
    pub headers: http::HeaderMap,
    /// Certificates from `caBundle`; `None` trusts the system roots.
    pub ca_bundle: Option<Arc<Vec<CertificateDer<'static>>>>,
}

/// A named, compiled JMESPath expression.
#[derive(Clone, Debug)]
pub struct CompiledProjection {
    /// The projection's name.
    pub name: String,
    /// The compiled expression.
    pub expression: jmespath::Expression<'static>,
}

impl ContextEntry {
    /// Validate a `GlobalContextEntry`. Errors name the entry and the field.
    pub fn from_resource(resource: GlobalContextEntry) -> Result<ContextEntry> {
        let name = resource.metadata.name.clone().unwrap_or_default();
        let entry_label = if name.is_empty() {
            "<unnamed>".to_owned()
        } else {
            name.clone()
        };
        let invalid = |field: &str, reason: String| Error::InvalidEntry {
            entry: entry_label.clone(),
            field: field.to_owned(),
            reason,
        };
        if !API_VERSIONS.contains(&resource.api_version.as_str()) {
            return Err(invalid(
                "apiVersion",
                format!(
                    "{:?} is not one of {}",
                    resource.api_version,
                    API_VERSIONS.join(", ")
                ),
            ));
        }
        if resource.kind != KIND {
            return Err(invalid(
                "kind",
                format!("{:?} is not {KIND}", resource.kind),
            ));
        }
        if name.is_empty() {
            return Err(invalid("metadata.name", "must not be empty".to_owned()));
        }
        let spec = &resource.spec;
        let source = match (&spec.kubernetes_resource, &spec.api_call) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "spec",
                    "kubernetesResource and apiCall are mutually exclusive".to_owned(),
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "spec",
                    "exactly one of kubernetesResource and apiCall is required".to_owned(),
                ));
            }
            (Some(k), None) => {
                if k.version.trim().is_empty() {
                    return Err(invalid(
                        "spec.kubernetesResource.version",
                        "must not be empty".to_owned(),
                    ));
                }
                if k.resource.trim().is_empty() {
                    return Err(invalid(
                        "spec.kubernetesResource.resource",
                        "must not be empty".to_owned(),
                    ));
                }
                if k.resource.contains('/') || k.group.contains('/') || k.version.contains('/') {
                    return Err(invalid(
                        "spec.kubernetesResource",
                        "group, version and resource must not contain '/'".to_owned(),
                    ));
                }
                EntrySource::Kubernetes(KubernetesSource {
                    group: k.group.trim().to_owned(),
                    version: k.version.trim().to_owned(),
                    resource: k.resource.trim().to_owned(),
                    namespace: k.namespace.clone().filter(|ns| !ns.is_empty()),
                })
            }
            (None, Some(call)) => {
                let target = match (&call.url_path, &call.service) {
                    (Some(_), Some(_)) => {
                        return Err(invalid(
                            "spec.apiCall",
                            "urlPath and service are mutually exclusive".to_owned(),
                        ));
                    }
                    (None, None) => {
                        return Err(invalid(
                            "spec.apiCall",
                            "one of urlPath and service is required".to_owned(),
                        ));
                    }
                    (Some(path), None) => {
                        if !path.starts_with('/') {
                            return Err(invalid(
                                "spec.apiCall.urlPath",
                                format!("{path:?} must start with '/'"),
                            ));
                        }
                        if path.parse::<http::uri::PathAndQuery>().is_err() {
                            return Err(invalid(
                                "spec.apiCall.urlPath",
                                format!("{path:?} is not a valid URL path"),
                            ));
                        }
                        ApiTarget::UrlPath(path.clone())
                    }
                    (None, Some(service)) => {
                        let url: http::Uri = service.url.parse().map_err(|e| {
                            invalid(
                                "spec.apiCall.service.url",
                                format!("{:?}: {e}", service.url),
                            )
                        })?;
                        match url.scheme_str() {
                            Some("http" | "https") => {}
                            _ => {
                                return Err(invalid(
                                    "spec.apiCall.service.url",
                                    format!("{:?} must be an http:// or https:// URL", service.url),
                                ));
                            }
                        }
                        if url.host().is_none_or(str::is_empty) {
                            return Err(invalid(
                                "spec.apiCall.service.url",
                                format!("{:?} has no host", service.url),
                            ));
                        }
                        let mut headers = http::HeaderMap::new();
                        for (i, header) in service.headers.iter().enumerate() {
                            let field = format!("spec.apiCall.service.headers[{i}]");
                            let key = http::HeaderName::from_bytes(header.key.as_bytes())
                                .map_err(|e| invalid(&format!("{field}.key"), e.to_string()))?;
                            let value = http::HeaderValue::from_str(&header.value)
                                .map_err(|e| invalid(&format!("{field}.value"), e.to_string()))?;
                            headers.append(key, value);
                        }
                        let ca_bundle = match service.ca_bundle.as_deref().map(str::trim) {
                            None | Some("") => None,
                            Some(pem) => {
                                Some(Arc::new(parse_ca_bundle(pem).map_err(|reason| {
                                    invalid("spec.apiCall.service.caBundle", reason)
                                })?))
                            }
                        };
                        ApiTarget::Service(ServiceTarget {
                            url,
                            headers,
                            ca_bundle,
                        })
                    }
                };
                let method = call.method.unwrap_or_default();
                let body = if call.data.is_empty() {
                    None
                } else {
                    if method != Method::Post {
                        return Err(invalid(
                            "spec.apiCall.data",
                            "data is only allowed with method POST".to_owned(),
                        ));
                    }
                    let mut object = serde_json::Map::new();
                    for (i, item) in call.data.iter().enumerate() {
                        if item.key.is_empty() {
                            return Err(invalid(
                                &format!("spec.apiCall.data[{i}].key"),
                                "must not be empty".to_owned(),
                            ));
                        }
                        if object
                            .insert(item.key.clone(), item.value.clone())
                            .is_some()
                        {
                            return Err(invalid(
                                &format!("spec.apiCall.data[{i}].key"),
                                format!("duplicate key {:?}", item.key),
                            ));
                        }
                    }
                    Some(serde_json::Value::Object(object))
                };
                let refresh_interval = match call.refresh_interval.as_deref() {
                    None => DEFAULT_REFRESH_INTERVAL,
                    Some(text) => {
                        let interval = parse_go_duration(text)
                            .map_err(|e| invalid("spec.apiCall.refreshInterval", e))?;
                        if interval.is_zero() {
                            return Err(invalid(
                                "spec.apiCall.refreshInterval",
                                format!("{text:?} must be greater than zero"),
                            ));
                        }
                        interval
                    }
                };
                let retry_limit = match call.retry_limit {
                    None => DEFAULT_RETRY_LIMIT,
                    Some(n) if n >= 1 => u32::try_from(n).map_err(|_| {
                        invalid("spec.apiCall.retryLimit", format!("{n} is too large"))
                    })?,
                    Some(n) => {
                        return Err(invalid(
                            "spec.apiCall.retryLimit",
                            format!("{n} is less than the minimum 1"),
                        ));
                    }
                };
                EntrySource::ApiCall(ApiCallSource {
                    target,
                    method,
                    body,
                    refresh_interval,
                    retry_limit,
                })
            }
        };
        let mut projections: Vec<CompiledProjection> = Vec::with_capacity(spec.projections.len());
        for (i, projection) in spec.projections.iter().enumerate() {
            let field = format!("spec.projections[{i}]");
            if projection.name.is_empty() {
                return Err(invalid(
                    &format!("{field}.name"),
                    "must not be empty".to_owned(),
                ));
            }
            if projection.name == name {
                return Err(invalid(
                    &format!("{field}.name"),
                    format!("{:?} must differ from the entry's name", projection.name),
                ));
            }
            if projections.iter().any(|p| p.name == projection.name) {
                return Err(invalid(
                    &format!("{field}.name"),
                    format!("duplicate projection name {:?}", projection.name),
                ));
            }
            let expression =
                leash_policy::jmespath::compile(&projection.jmes_path).map_err(|e| {
                    invalid(
                        &format!("{field}.jmesPath"),
                        format!("{:?} does not compile: {e}", projection.jmes_path),
                    )
                })?;
            projections.push(CompiledProjection {
                name: projection.name.clone(),
                expression,
            });
        }
        Ok(ContextEntry {
            inner: Arc::new(EntryInner {
                name,
                resource,
                source,
                projections,
            }),
        })
    }

    /// The entry's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The resource this entry was validated from.
    pub fn resource(&self) -> &GlobalContextEntry {
        &self.inner.resource
    }

    /// The data source.
    pub fn source(&self) -> &EntrySource {
        &self.inner.source
    }

    /// The compiled projections, in spec order.
    pub fn projections(&self) -> &[CompiledProjection] {
        &self.inner.projections
    }

    /// True when the entry needs a Kubernetes client (a watched resource or a `urlPath` call).
    pub fn needs_kube_client(&self) -> bool {
        match &self.inner.source {
            EntrySource::Kubernetes(_) => true,
            EntrySource::ApiCall(call) => matches!(call.target, ApiTarget::UrlPath(_)),
        }
    }
}

pub(crate) fn parse_ca_bundle(
    pem: &str,
) -> std::result::Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("no PEM certificate found".to_owned());
    }
    Ok(certs)
}
