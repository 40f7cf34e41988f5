//! The request log: every request the sandbox served, as the authorization layer of
//! kube-apiserver sees it (its `RequestInfo`: verb, API group, resource, subresource,
//! namespace; or a non-resource path), kept as a set of distinct values, each
//! with the number of times it was served.
//!
//! # Invariants
//! 1. Bounded: at most [`MAX_DISTINCT`] distinct requests are kept; any further new
//!    one is not stored but counted ([`RequestLog::not_recorded`]), never silently lost.
//! 2. The set's mutex is held only to insert, clear or clone, never across an await.
//! 3. The attributes follow kube-apiserver's `RequestInfoFactory`, so a test can check
//!    them against RBAC rules: names are not part of a value (the set stays small).

use std::collections::HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use http::Method;

/// Distinct requests kept at most.
pub const MAX_DISTINCT: usize = 4096;

/// One request, as RBAC sees it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiRequest {
    /// A request for a resource (`/api/v1/...`, `/apis/GROUP/VERSION/...`).
    Resource {
        /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or
        /// `deletecollection`.
        verb: String,
        /// The API group (`""` for the core group).
        group: String,
        /// The resource (plural), for example `pods`.
        resource: String,
        /// The subresource (`status`, `scale`), or `""`.
        subresource: String,
        /// The namespace (`""` for cluster-scoped resources and requests across all
        /// namespaces; a namespace's own name for requests of that namespace object).
        namespace: String,
    },
    /// Any other path (discovery, `/version`, `/openapi/v3`, `/healthz`): a
    /// non-resource URL in RBAC terms.
    NonResource {
        /// The lower-case HTTP method (`get`, `post`, ...).
        verb: String,
        /// The request path.
        path: String,
    },
}

impl ApiRequest {
    /// The request `method path?query` as kube-apiserver's authorizer sees it.
    pub(crate) fn of(method: &Method, path: &str, query: Option<&str>) -> ApiRequest {
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let non_resource = || ApiRequest::NonResource {
            verb: method.as_str().to_ascii_lowercase(),
            path: path.to_string(),
        };
        let (group, rest) = match parts.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
            _ => return non_resource(),
        };
        let mut verb = match *method {
            Method::GET | Method::HEAD => "get",
            Method::POST => "create",
            Method::PUT => "update",
            Method::PATCH => "patch",
            Method::DELETE => "delete",
            _ => return non_resource(),
        };
        let rest = match rest {
            ["watch", rest @ ..] if verb == "get" && !rest.is_empty() => {
                verb = "watch";
                rest
            }
            rest => rest,
        };
        let (namespace, rest) = match rest {
            // namespaces/NAME/RESOURCE...; `status` and `finalize` are the namespace's own.
            ["namespaces", ns, next, ..] if !matches!(*next, "status" | "finalize") => {
                (*ns, &rest[2..])
            }
            ["namespaces", ns, ..] => (*ns, rest),
            rest => ("", rest),
        };
        let resource = rest.first().copied().unwrap_or("");
        let name = rest.get(1).copied().unwrap_or("");
        let subresource = rest.get(2).copied().unwrap_or("");
        if name.is_empty() {
            verb = match verb {
                "get" if watch_param(query) => "watch",
                "get" => "list",
                "delete" => "deletecollection",
                v => v,
            };
        }
        ApiRequest::Resource {
            verb: verb.to_string(),
            group: group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
        }
    }
}

/// Whether the query asks for a watch (`watch=true` or `watch=1`).
fn watch_param(query: Option<&str>) -> bool {
    query.is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True"))
    })
}

/// The distinct requests served so far, each with how many times.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    seen: Mutex<HashMap<ApiRequest, u64>>,
    /// New distinct requests refused because the set was full. Only a counter: Relaxed.
    not_recorded: AtomicU64,
}

impl RequestLog {
    pub(crate) fn record(&self, request: ApiRequest) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = seen.get_mut(&request) {
            *count += 1;
            return;
        }
        if seen.len() >= MAX_DISTINCT {
            drop(seen);
            self.not_recorded.fetch_add(1, Ordering::Relaxed);
            return;
        }
        seen.insert(request, 1);
    }

    pub(crate) fn snapshot(&self) -> BTreeSet<ApiRequest> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.keys().cloned().collect()
    }

    pub(crate) fn counts(&self) -> BTreeMap<ApiRequest, u64> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter().map(|(r, n)| (r.clone(), *n)).collect()
    }

    pub(crate) fn clear(&self) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.not_recorded.store(0, Ordering::Relaxed);
    }

    pub(crate) fn not_recorded(&self) -> u64 {
        self.not_recorded.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(verb: &str, group: &str, resource: &str, sub: &str, ns: &str) -> ApiRequest {
        ApiRequest::Resource {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
        }
    }

    /// One line per rule of kube-apiserver's RequestInfoFactory.
    #[test]
    fn attributes_follow_kube_apiserver() {
        let get = Method::GET;
        for (method, path, query, want) in [
            (&get, "/api/v1/pods", None, res("list", "", "pods", "", "")),
            (
                &get,
                "/api/v1/pods",
                Some("watch=true&resourceVersion=5"),
                res("watch", "", "pods", "", ""),
            ),
            (
                &get,
                "/api/v1/namespaces/a/pods",
                Some("limit=5&watch=1"),
                res("watch", "", "pods", "", "a"),
            ),
            (
                &get,
                "/api/v1/watch/namespaces/a/pods",
                None,
                res("watch", "", "pods", "", "a"),
            ),
            (
                &get,
                "/api/v1/namespaces/a/pods/p",
                None,
                res("get", "", "pods", "", "a"),
            ),
            (
                &get,
                "/api/v1/namespaces/a/pods/p/status",
                None,
                res("get", "", "pods", "status", "a"),
            ),
            (
                &get,
                "/api/v1/namespaces/a",
                None,
                res("get", "", "namespaces", "", "a"),
            ),
            (
                &Method::PUT,
                "/api/v1/namespaces/a/finalize",
                None,
                res("update", "", "namespaces", "finalize", "a"),
            ),
            (
                &get,
                "/api/v1/namespaces",
                None,
                res("list", "", "namespaces", "", ""),
            ),
            (
                &Method::POST,
                "/apis/apps/v1/namespaces/a/deployments",
                None,
                res("create", "apps", "deployments", "", "a"),
            ),
            (
                &Method::PUT,
                "/apis/apps/v1/namespaces/a/deployments/d/scale",
                None,
                res("update", "apps", "deployments", "scale", "a"),
            ),
            (
                &Method::PATCH,
                "/apis/coordination.k8s.io/v1/namespaces/k/leases/l",
                None,
                res("patch", "coordination.k8s.io", "leases", "", "k"),
            ),
            (
                &Method::DELETE,
                "/apis/wgpolicyk8s.io/v1alpha2/clusterpolicyreports/r",
                None,
                res("delete", "wgpolicyk8s.io", "clusterpolicyreports", "", ""),
            ),
            (
                &Method::DELETE,
                "/api/v1/namespaces/a/configmaps",
                None,
                res("deletecollection", "", "configmaps", "", "a"),
            ),
            (
                &Method::HEAD,
                "/apis/kyverno.io/v1/clusterpolicies",
                None,
                res("list", "kyverno.io", "clusterpolicies", "", ""),
            ),
        ] {
            assert_eq!(ApiRequest::of(method, path, query), want, "{method} {path}");
        }
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
            "/openapi/v3",
            "/healthz",
        ] {
            assert_eq!(
                ApiRequest::of(&get, path, None),
                ApiRequest::NonResource {
                    verb: "get".into(),
                    path: path.into()
                },
            );
        }
    }

    #[test]
    fn distinct_and_bounded() {
        let log = RequestLog::default();
        for _ in 0..3 {
            log.record(res("list", "", "pods", "", ""));
        }
        assert_eq!(log.snapshot().len(), 1);
        assert_eq!(log.counts().get(&res("list", "", "pods", "", "")), Some(&3));
        for i in 0..MAX_DISTINCT + 10 {
            log.record(res("get", "", "pods", "", &format!("ns-{i}")));
        }
        assert_eq!(log.snapshot().len(), MAX_DISTINCT);
        assert_eq!(log.not_recorded(), 11);
        log.clear();
        assert!(log.snapshot().is_empty());
        assert_eq!(log.not_recorded(), 0);
    }
}
