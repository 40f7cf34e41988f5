//! The HTTP API: one handler that parses the path itself and answers discovery,
//! CRUD, list and watch requests, behind fault injection and bearer-token auth.
//!
//! # Invariants
//! 1. Every request gets an answer: a success, or a metav1 `Status` with the right
//!    code (the injected 429 is plain text, as APF's is). Nothing in here panics on input.
//! 2. Waits (fault latency, reading the body) are raced against the server's
//!    cancellation token, and the body read against a deadline, so no request hangs
//!    and shutdown is never held up by a slow client.
//! 3. No lock is held across an await: the store and snapshot table are used
//!    through synchronous calls that lock and unlock inside.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::admission::{Admission, DeleteRequest};
use crate::discovery::{self, Format};
use crate::faults::{self, Action, FaultInjector};
use crate::list::{ListParams, Selection, Snapshots, list, page};
use crate::object::{json_patch, merge_patch};
use crate::request_log::{ApiRequest, RequestLog};
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::BODY_TIMEOUT;
use crate::status::ApiError;
use crate::store::{Part, Store};
use crate::table;
use crate::transform::{self, MetaVersion, Transform};
use crate::watch::{WatchParams, watch};

/// Largest accepted request body (the API server's limit).
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// Shared state of the server.
#[derive(Debug)]
pub(crate) struct App {
    pub(crate) store: Store,
    pub(crate) snapshots: Snapshots,
    pub(crate) faults: FaultInjector,
    pub(crate) token: Option<String>,
    pub(crate) cancel: CancellationToken,
    /// `host:port`, for `/api`'s serverAddressByClientCIDRs.
    pub(crate) server: String,
    /// The admission webhooks' chain, which every write goes through.
    pub(crate) admission: Admission,
    /// The distinct requests served, as RBAC sees them.
    pub(crate) requests: RequestLog,
    /// The watches open now, by resource.
    pub(crate) open_watches: Arc<crate::watch::OpenWatches>,
}

type Reply = Result<Response<Body>, ApiError>;

/// A watch's body chunks, before fault injection.
type WatchChunks =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<Bytes, Infallible>> + Send + 'static>>;

fn json_response(code: StatusCode, body: impl Into<Body>) -> Response<Body> {
    let mut r = Response::new(body.into());
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error_response(e: &ApiError) -> Response<Body> {
    let code = StatusCode::from_u16(e.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, e.to_bytes())
}

fn value_response(code: StatusCode, v: &Value) -> Response<Body> {
    json_response(code, Bytes::from(v.to_string()))
}

/// Discovery and `/version`: paths with no resource in them.
fn is_discovery(segments: &[&str]) -> bool {
    matches!(
        segments,
        ["version"] | ["api"] | ["api", "v1"] | ["apis"] | ["apis", _] | ["apis", _, _]
    ) || segments.first() == Some(&"openapi")
}

impl App {
    /// Answers one request.
    ///
    /// # Cancel safety
    /// Dropping the future abandons the request; nothing half-written is left (store
    /// writes are synchronous and whole).
    pub(crate) async fn handle(self: Arc<Self>, req: Request<Body>) -> Response<Body> {
        let path = req.uri().path().to_string();
        let segments: Vec<&str> = path
            .trim_start_matches('/')
            .trim_end_matches('/')
            .split('/')
            .collect();
        let authenticated = self.authenticated(req.headers());
        if authenticated {
            // kube-apiserver authorizes every authenticated request (before fairness
            // and handlers), so every one of them is logged, whatever it is answered.
            self.requests
                .record(ApiRequest::of(req.method(), &path, req.uri().query()));
        }
        if matches!(segments.as_slice(), ["healthz"] | ["livez"] | ["readyz"]) {
            return Response::new(Body::from("ok"));
        }
        let (delay, action) = self.faults.decide(&path, is_discovery(&segments));
        if !delay.is_zero()
            && self
                .cancel
                .run_until_cancelled(tokio::time::sleep(delay))
                .await
                .is_none()
        {
            return error_response(&ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is shutting down",
            ));
        }
        match action {
            Action::Fail => return error_response(&faults::failed()),
            Action::Throttle(secs) => return faults::throttled(secs),
            Action::Serve | Action::Reset | Action::Truncate => {}
        }
        if !authenticated {
            return error_response(&ApiError::new(401, "Unauthorized", "Unauthorized"));
        }
        let response = match self.route(&segments, req).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
        match action {
            Action::Reset => faults::reset(response),
            Action::Truncate => faults::truncate(response).await,
            _ => response,
        }
    }

    /// Whether the request carries the bearer token (always, when none is set).
    fn authenticated(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.token else {
            return true;
        };
        headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "))
            .is_some_and(|t| t.trim() == expected)
    }

    async fn route(&self, segments: &[&str], req: Request<Body>) -> Reply {
        let get_only = |m: &Method| {
            if m == Method::GET || m == Method::HEAD {
                Ok(())
            } else {
                Err(ApiError::method_not_allowed(m.as_str()))
            }
        };
        let accept = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|h| h.to_str().ok());
        let format = Format::negotiate(accept);
        let discovery_reply = |v: Value, format: Format| {
            let mut r = value_response(StatusCode::OK, &v);
            if let Ok(ct) = HeaderValue::from_str(&format.content_type()) {
                r.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            r
        };
        match segments {
            ["version"] => {
                get_only(req.method())?;
                Ok(value_response(StatusCode::OK, &discovery::version()))
            }
            ["api"] => {
                get_only(req.method())?;
                Ok(match format {
                    Format::Legacy => {
                        discovery_reply(discovery::api_versions(&self.server), format)
                    }
                    Format::Aggregated(v) => discovery_reply(
                        discovery::aggregated(&self.store.registry(), true, v),
                        format,
                    ),
                })
            }
            ["apis"] => {
                get_only(req.method())?;
                Ok(match format {
                    Format::Legacy => {
                        discovery_reply(discovery::api_group_list(&self.store.registry()), format)
                    }
                    Format::Aggregated(v) => discovery_reply(
                        discovery::aggregated(&self.store.registry(), false, v),
                        format,
                    ),
                })
            }
            ["api", "v1"] => {
                get_only(req.method())?;
                let doc = discovery::api_resource_list(&self.store.registry(), "", "v1")
                    .ok_or_else(ApiError::no_route)?;
                Ok(discovery_reply(doc, Format::Legacy))
            }
            ["apis", group] => {
                get_only(req.method())?;
                let doc = discovery::api_group(&self.store.registry(), group)
                    .ok_or_else(ApiError::no_route)?;
                Ok(discovery_reply(doc, Format::Legacy))
            }
            ["apis", group, version] => {
                get_only(req.method())?;
                let doc = discovery::api_resource_list(&self.store.registry(), group, version)
                    .ok_or_else(ApiError::no_route)?;
                Ok(discovery_reply(doc, Format::Legacy))
            }
            ["openapi", "v3"] => {
                get_only(req.method())?;
                Ok(value_response(
                    StatusCode::OK,
                    &crate::openapi::root(&self.store.registry()),
                ))
            }
            ["openapi", "v3", "api", version] | ["openapi", "v3", "apis", "", version] => {
                get_only(req.method())?;
                let doc = crate::openapi::group_version(&self.store.registry(), "", version)
                    .ok_or_else(ApiError::no_route)?;
                Ok(value_response(StatusCode::OK, &doc))
            }
            ["openapi", "v3", "apis", group, version] => {
                get_only(req.method())?;
                let doc = crate::openapi::group_version(&self.store.registry(), group, version)
                    .ok_or_else(ApiError::no_route)?;
                Ok(value_response(StatusCode::OK, &doc))
            }
            [
                "apis",
                "authorization.k8s.io",
                "v1",
                "selfsubjectaccessreviews",
            ] => {
                if req.method() != Method::POST {
                    return Err(ApiError::method_not_allowed(req.method().as_str()));
                }
                let review = self.read_json(req).await?;
                Ok(value_response(
                    StatusCode::CREATED,
                    &self_subject_access_review(review)?,
                ))
            }
            ["api", "v1", rest @ ..] => self.resource_with_warnings("", "v1", rest, req).await,
            ["apis", group, version, rest @ ..] => {
                self.resource_with_warnings(group, version, rest, req).await
            }
            _ => Err(ApiError::no_route()),
        }
    }

    /// [`App::resource`], with the warnings of admission webhooks as `Warning`
    /// headers (also on a denial), as kube-apiserver sends them.
    async fn resource_with_warnings(
        &self,
        group: &str,
        version: &str,
        rest: &[&str],
        req: Request<Body>,
    ) -> Reply {
        let mut warnings = Vec::new();
        let reply = self
            .resource(group, version, rest, req, &mut warnings)
            .await;
        if warnings.is_empty() {
            return reply;
        }
        let mut response = reply.unwrap_or_else(|e| error_response(&e));
        for w in &warnings {
            if let Some(v) = warning_header(w) {
                response.headers_mut().append(header::WARNING, v);
            }
        }
        Ok(response)
    }

    async fn resource(
        &self,
        group: &str,
        version: &str,
        rest: &[&str],
        req: Request<Body>,
        warnings: &mut Vec<String>,
    ) -> Reply {
        let (legacy_watch, rest) = match rest {
            ["watch", rest @ ..] => (true, rest),
            _ => (false, rest),
        };
        // [namespaces, ns, plural, name?, sub?] or [plural, name?, sub?]
        let (ns, plural, name, sub) = match rest {
            ["namespaces", ns, plural, tail @ ..]
                if !(tail.is_empty() && matches!(*plural, "status" | "finalize")) =>
            {
                match tail {
                    [] => (Some(*ns), *plural, None, None),
                    [name] => (Some(*ns), *plural, Some(*name), None),
                    [name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
                    _ => return Err(ApiError::no_route()),
                }
            }
            [plural] => (None, *plural, None, None),
            [plural, name] => (None, *plural, Some(*name), None),
            [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
            _ => return Err(ApiError::no_route()),
        };
        let rt = self
            .store
            .registry()
            .by_path(group, version, plural)
            .ok_or_else(ApiError::no_route)?;
        if ns.is_some() && !rt.namespaced {
            return Err(ApiError::no_route());
        }
        if rt.namespaced && ns.is_none() && name.is_some() {
            return Err(ApiError::no_route());
        }
        if name.is_some_and(str::is_empty) || ns.is_some_and(str::is_empty) {
            return Err(ApiError::no_route());
        }
        let part = match sub {
            None => Part::Main,
            Some("status") if rt.has_status() => Part::Status,
            Some("scale") if rt.has_scale() => Part::Main,
            Some(_) => return Err(ApiError::no_route()),
        };
        let query = Query::<Vec<(String, String)>>::try_from_uri(req.uri())
            .map_err(|e| ApiError::bad_request(format!("invalid query string: {e}")))?
            .0;
        let q: HashMap<String, String> = query.into_iter().collect();
        let dry_run = match q.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "dryRun: Unsupported value: {other:?}: supported values: \"All\""
                )));
            }
        };
        let bool_param = |k: &str| -> Result<Option<bool>, ApiError> {
            match q.get(k).map(String::as_str) {
                None | Some("") => Ok(None),
                Some("true") | Some("1") => Ok(Some(true)),
                Some("false") | Some("0") => Ok(Some(false)),
                Some(v) => Err(ApiError::bad_request(format!(
                    "invalid value {v:?} for {k}"
                ))),
            }
        };
        let is_watch = legacy_watch || bool_param("watch")?.unwrap_or(false);
        let method = req.method().clone();
        let ns_owned = ns.map(str::to_string);
        let obj_ns = if rt.namespaced { ns.unwrap_or("") } else { "" };
        let transform = Transform::negotiate(
            req.headers()
                .get(header::ACCEPT)
                .and_then(|h| h.to_str().ok()),
        );
        let include = table::IncludeObject::parse(q.get("includeObject").map(String::as_str))?;
        if let (Some(name), Some("scale"), false) = (name, sub, is_watch) {
            return self.scale(&rt, obj_ns, name, dry_run, req).await;
        }

        match (&method, name) {
            (&Method::GET, None) | (&Method::HEAD, None) => {
                let sel = selection(&rt, ns_owned, &q)?;
                if is_watch {
                    self.watch(
                        rt,
                        sel,
                        &q,
                        bool_param("allowWatchBookmarks")?,
                        bool_param("sendInitialEvents")?,
                        transform.map(|t| (t, include)),
                    )
                } else {
                    let params = ListParams {
                        limit: match q.get("limit").map(String::as_str) {
                            None | Some("") => 0,
                            Some(l) => l
                                .parse::<i64>()
                                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?
                                .max(0) as usize,
                        },
                        continue_token: q.get("continue").filter(|c| !c.is_empty()).cloned(),
                        resource_version: q.get("resourceVersion").cloned(),
                        resource_version_match: q.get("resourceVersionMatch").cloned(),
                    };
                    let ttl = self.faults.get().continue_ttl;
                    let page = || page(&self.store, &self.snapshots, &rt, &sel, &params, ttl);
                    let body = match transform {
                        None => list(&self.store, &self.snapshots, &rt, &sel, &params, ttl)?,
                        Some(Transform::MetadataList(version)) => {
                            transform::partial_list(&page()?, version)
                        }
                        Some(Transform::Table(version)) => {
                            let page = page()?;
                            let t =
                                table::table(&rt, version, &page.items, &page.metadata, include)?;
                            return Ok(value_response(StatusCode::OK, &t));
                        }
                        Some(t @ Transform::Metadata(_)) => return Err(t.mismatch()),
                    };
                    let len = body.len;
                    let pieces =
                        futures::stream::iter(body.pieces.into_iter().map(Ok::<_, Infallible>));
                    let mut r = json_response(StatusCode::OK, Body::from_stream(pieces));
                    // With the length known, hyper writes the pieces as they are (no chunking).
                    r.headers_mut()
                        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                    Ok(r)
                }
            }
            (&Method::GET, Some(name)) | (&Method::HEAD, Some(name)) => {
                if is_watch {
                    let mut sel = selection(&rt, ns_owned, &q)?;
                    sel.fields = FieldSelector::parse(&format!("metadata.name={name}"), &[])?;
                    return self.watch(
                        rt,
                        sel,
                        &q,
                        bool_param("allowWatchBookmarks")?,
                        bool_param("sendInitialEvents")?,
                        transform.map(|t| (t, include)),
                    );
                }
                let entry = self.store.get_in(&rt, obj_ns, name)?;
                match transform {
                    Some(Transform::Table(version)) => {
                        let metadata = format!("{{\"resourceVersion\":\"{}\"}}", entry.rv);
                        let t = table::table(&rt, version, &[entry], &metadata, include)?;
                        Ok(value_response(StatusCode::OK, &t))
                    }
                    Some(Transform::Metadata(version)) => Ok(json_response(
                        StatusCode::OK,
                        transform::partial_object(&entry.json, version),
                    )),
                    Some(t @ Transform::MetadataList(_)) => Err(t.mismatch()),
                    None => Ok(json_response(
                        StatusCode::OK,
                        entry.json_at(&rt.api_version()),
                    )),
                }
            }
            (&Method::POST, None) if part == Part::Main && !is_watch => {
                if rt.namespaced && ns.is_none() {
                    return Err(ApiError::method_not_allowed("POST"));
                }
                let body = self.read_json(req).await?;
                let entry = self
                    .admission
                    .create(&self.store, &rt, ns, body, dry_run, warnings)
                    .await?;
                Ok(json_response(
                    StatusCode::CREATED,
                    entry.json_at(&rt.api_version()),
                ))
            }
            (&Method::PUT, Some(name)) if !is_watch => {
                let body = self.read_json(req).await?;
                // kube-apiserver updates custom resources only at a
                // resourceVersion (their strategy refuses unconditional
                // updates); built-in kinds may be replaced without one.
                if rt.crd.is_some()
                    && body
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                {
                    return Err(ApiError::invalid(
                        &format!("{}.{}", rt.plural, rt.group),
                        name,
                        "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
                    ));
                }
                let entry = self
                    .admission
                    .modify(
                        &self.store,
                        &rt,
                        obj_ns,
                        name,
                        part,
                        false,
                        dry_run,
                        |_| Ok(body.clone()),
                        warnings,
                    )
                    .await?;
                Ok(json_response(
                    StatusCode::OK,
                    entry.json_at(&rt.api_version()),
                ))
            }
            (&Method::PATCH, Some(name)) if !is_watch => {
                self.patch(&rt, obj_ns, name, part, dry_run, req, warnings)
                    .await
            }
            (&Method::DELETE, Some(name)) if part == Part::Main && !is_watch => {
                let opts = self.read_optional_json(req).await?;
                let pre = opts.as_ref().and_then(|o| o.get("preconditions")).map(|p| {
                    let s = |k| p.get(k).and_then(Value::as_str).map(str::to_string);
                    (s("uid"), s("resourceVersion"))
                });
                let dry_run = dry_run || body_dry_run(opts.as_ref());
                let request = DeleteRequest {
                    namespace: obj_ns,
                    name,
                    preconditions: pre,
                    dry_run,
                    options: opts.as_ref(),
                };
                let entry = self
                    .admission
                    .delete(&self.store, &rt, request, warnings)
                    .await?;
                Ok(json_response(
                    StatusCode::OK,
                    entry.json_at(&rt.api_version()),
                ))
            }
            (&Method::DELETE, None) if !is_watch => {
                let opts = self.read_optional_json(req).await?;
                let dry_run = dry_run || body_dry_run(opts.as_ref());
                let sel = selection(&rt, ns_owned, &q)?;
                let (objects, rv) = self.store.snapshot(&rt);
                let mut items = Vec::new();
                for e in sel.range(&objects, None).filter(|e| sel.matches(e)) {
                    let request = DeleteRequest {
                        namespace: &e.namespace,
                        name: &e.name,
                        preconditions: None,
                        dry_run,
                        options: opts.as_ref(),
                    };
                    match self
                        .admission
                        .delete(&self.store, &rt, request, warnings)
                        .await
                    {
                        Ok(deleted) => items.push(deleted),
                        Err(err) if err.code() == 404 => {}
                        Err(err) => return Err(err),
                    }
                }
                let mut body = format!(
                    "{{\"kind\":\"{}\",\"apiVersion\":\"{}\",\"metadata\":{{\"resourceVersion\":\"{rv}\"}},\"items\":[",
                    rt.list_kind,
                    rt.api_version()
                )
                .into_bytes();
                let at = rt.api_version();
                for (i, e) in items.iter().enumerate() {
                    if i > 0 {
                        body.push(b',');
                    }
                    body.extend_from_slice(&e.json_at(&at));
                }
                body.extend_from_slice(b"]}");
                Ok(json_response(StatusCode::OK, body))
            }
            (m, _) => Err(ApiError::method_not_allowed(m.as_str())),
        }
    }

    fn watch(
        &self,
        rt: Arc<ResourceType>,
        sel: Selection,
        q: &HashMap<String, String>,
        allow_bookmarks: Option<bool>,
        send_initial_events: Option<bool>,
        transform: Option<(Transform, table::IncludeObject)>,
    ) -> Reply {
        if let Some((t @ Transform::MetadataList(_), _)) = transform {
            return Err(t.mismatch());
        }
        let timeout = match q.get("timeoutSeconds").map(String::as_str) {
            None | Some("") => None,
            Some(t) => {
                let secs = t
                    .parse::<u64>()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?;
                // 0 means the server's default, as in the API server.
                (secs > 0).then(|| Duration::from_secs(secs))
            }
        };
        let params = WatchParams {
            resource_version: q.get("resourceVersion").cloned(),
            send_initial_events,
            allow_bookmarks: allow_bookmarks.unwrap_or(false),
            timeout,
            metadata: match transform {
                Some((Transform::Metadata(version), _)) => Some(version),
                _ => None,
            },
        };
        let stream = watch(&self.store, rt.clone(), sel, &params, self.cancel.clone())?;
        // Counted open for as long as the body lives.
        let open = self.open_watches.open(&rt);
        let stream = futures::StreamExt::map(stream, move |chunk| {
            let _open = &open;
            chunk
        });
        let chunks: WatchChunks = match transform {
            None | Some((Transform::Metadata(_) | Transform::MetadataList(_), _)) => {
                Box::pin(stream)
            }
            Some((Transform::Table(version), include)) => {
                let mut first = true;
                Box::pin(futures::StreamExt::map(stream, move |chunk| {
                    chunk.map(|c| table_events(&rt, version, include, &mut first, &c))
                }))
            }
        };
        let body = match self.faults.watch_cutter() {
            None => Body::from_stream(chunks),
            Some(cutter) => Body::from_stream(faults::cut_watch(chunks, cutter)),
        };
        let mut r = json_response(StatusCode::OK, body);
        r.headers_mut().insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache, private"),
        );
        Ok(r)
    }

    #[allow(clippy::too_many_arguments)]
    async fn patch(
        &self,
        rt: &Arc<ResourceType>,
        ns: &str,
        name: &str,
        part: Part,
        dry_run: bool,
        req: Request<Body>,
        warnings: &mut Vec<String>,
    ) -> Reply {
        let kind = patch_kind(&content_type(req.headers()))?;
        let patch = self.read_json(req).await?;
        if kind != PatchKind::Json && !patch.is_object() {
            return Err(ApiError::bad_request("a merge patch must be a JSON object"));
        }
        let create = kind == PatchKind::Apply && part == Part::Main;
        // Set by the change function, read after it returned (same task): Relaxed.
        let created = std::sync::atomic::AtomicBool::new(false);
        let change = |current: Option<Value>| {
            created.store(current.is_none(), std::sync::atomic::Ordering::Relaxed);
            let Some(mut obj) = current else {
                return Ok(patch.clone());
            };
            // The patch's resourceVersion (if any) is a precondition; the object's own is not.
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            match kind {
                PatchKind::Json => json_patch(&mut obj, &patch)?,
                PatchKind::Merge | PatchKind::Apply => merge_patch(&mut obj, &patch),
            }
            Ok(obj)
        };
        let entry = self
            .admission
            .modify(
                &self.store,
                rt,
                ns,
                name,
                part,
                create,
                dry_run,
                change,
                warnings,
            )
            .await?;
        let code = if created.load(std::sync::atomic::Ordering::Relaxed) {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok(json_response(code, entry.json_at(&rt.api_version())))
    }

    /// The `scale` subresource: GET answers an `autoscaling/v1` `Scale`; PUT (a
    /// Scale, its `resourceVersion` a precondition) and PATCH (of the Scale) set
    /// the object's `spec.replicas`.
    async fn scale(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        dry_run: bool,
        req: Request<Body>,
    ) -> Reply {
        let method = req.method().clone();
        let entry = match method {
            Method::GET | Method::HEAD => self.store.get_in(rt, ns, name)?,
            Method::PUT => {
                let body = self.read_json(req).await?;
                let replicas = scale_replicas(&body)?;
                let precondition = body.pointer("/metadata/resourceVersion").cloned();
                self.store
                    .modify(rt, ns, name, Part::Main, false, dry_run, move |current| {
                        let mut obj = current.unwrap_or_default();
                        obj["spec"]["replicas"] = replicas.into();
                        set_precondition(&mut obj, precondition);
                        Ok(obj)
                    })?
            }
            Method::PATCH => {
                let kind = patch_kind(&content_type(req.headers()))?;
                let patch = self.read_json(req).await?;
                self.store
                    .modify(rt, ns, name, Part::Main, false, dry_run, move |current| {
                        let mut obj = current.unwrap_or_default();
                        let mut scale = scale_of(&obj);
                        if let Some(m) = scale.get_mut("metadata").and_then(Value::as_object_mut) {
                            m.remove("resourceVersion");
                        }
                        match kind {
                            PatchKind::Json => json_patch(&mut scale, &patch)?,
                            PatchKind::Merge | PatchKind::Apply => merge_patch(&mut scale, &patch),
                        }
                        obj["spec"]["replicas"] = scale_replicas(&scale)?.into();
                        set_precondition(
                            &mut obj,
                            scale.pointer("/metadata/resourceVersion").cloned(),
                        );
                        Ok(obj)
                    })?
            }
            m => return Err(ApiError::method_not_allowed(m.as_str())),
        };
        Ok(value_response(StatusCode::OK, &scale_of(&entry.value())))
    }

    async fn read_body(&self, req: Request<Body>) -> Result<Bytes, ApiError> {
        let too_large = || {
            ApiError::new(
                413,
                "RequestEntityTooLarge",
                format!("Request entity too large: limit is {MAX_BODY}"),
            )
        };
        if let Some(len) = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            && len > MAX_BODY as u64
        {
            return Err(too_large());
        }
        let limited = Limited::new(req.into_body(), MAX_BODY);
        let read = tokio::time::timeout(BODY_TIMEOUT, limited.collect());
        match self.cancel.run_until_cancelled(read).await {
            None => Err(ApiError::new(
                503,
                "ServiceUnavailable",
                "the server is shutting down",
            )),
            Some(Err(_)) => Err(ApiError::new(
                408,
                "Timeout",
                "timed out reading the request body",
            )),
            Some(Ok(Err(e))) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
            Some(Ok(Err(e))) => Err(ApiError::bad_request(format!(
                "unable to read the request body: {e}"
            ))),
            Some(Ok(Ok(collected))) => Ok(collected.to_bytes()),
        }
    }

    async fn read_json(&self, req: Request<Body>) -> Result<Value, ApiError> {
        let ct = content_type(req.headers());
        if ct == crate::protobuf::MEDIA_TYPE {
            let bytes = self.read_body(req).await?;
            return crate::protobuf::decode(&bytes);
        }
        if ct.contains("protobuf") || ct.contains("cbor") {
            return Err(unsupported_media_type(&ct));
        }
        let yaml = ct.contains("yaml");
        let bytes = self.read_body(req).await?;
        parse_body(&bytes, yaml)
    }

    async fn read_optional_json(&self, req: Request<Body>) -> Result<Option<Value>, ApiError> {
        let ct = content_type(req.headers());
        if ct == crate::protobuf::MEDIA_TYPE {
            let bytes = self.read_body(req).await?;
            if bytes.is_empty() {
                return Ok(None);
            }
            return crate::protobuf::decode_delete_options(&bytes).map(Some);
        }
        if ct.contains("protobuf") || ct.contains("cbor") {
            return Err(unsupported_media_type(&ct));
        }
        let yaml = ct.contains("yaml");
        let bytes = self.read_body(req).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        parse_body(&bytes, yaml).map(Some)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PatchKind {
    Merge,
    Json,
    Apply,
}

/// Rewrites a chunk of watch event lines for a watch that asked for Tables:
/// each ADDED, MODIFIED or DELETED object becomes a one-row Table
/// (`first`: the column definitions are sent once); BOOKMARK and ERROR events
/// pass unchanged.
fn table_events(
    rt: &ResourceType,
    version: MetaVersion,
    include: table::IncludeObject,
    first: &mut bool,
    chunk: &Bytes,
) -> Bytes {
    let mut out = Vec::with_capacity(chunk.len() * 2);
    for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let event: Option<Value> = serde_json::from_slice(line).ok();
        let converted = event.and_then(|mut event| {
            let kind = event.get("type").and_then(Value::as_str)?;
            if !matches!(kind, "ADDED" | "MODIFIED" | "DELETED") {
                return None;
            }
            let object = event.get_mut("object")?.take();
            event["object"] = table::watch_event(rt, version, object, include, *first);
            *first = false;
            Some(event.to_string().into_bytes())
        });
        out.extend_from_slice(converted.as_deref().unwrap_or(line));
        out.push(b'\n');
    }
    Bytes::from(out)
}

fn patch_kind(content_type: &str) -> Result<PatchKind, ApiError> {
    match content_type {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            Ok(PatchKind::Merge)
        }
        "application/json-patch+json" => Ok(PatchKind::Json),
        "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
        other => Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
            ),
        )),
    }
}

/// The `autoscaling/v1` `Scale` of a scalable object.
fn scale_of(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let mut metadata = serde_json::Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(k) {
            metadata.insert(k.into(), v.clone());
        }
    }
    let selector = match table::format_selector(obj.pointer("/spec/selector")).as_str() {
        "<none>" => String::new(),
        s => s.to_string(),
    };
    serde_json::json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": metadata,
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)},
        "status": {
            "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector,
        },
    })
}

/// A Scale's `spec.replicas`, which must be a non-negative integer.
fn scale_replicas(scale: &Value) -> Result<i64, ApiError> {
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_i64()
            .filter(|n| *n >= 0 && *n <= i64::from(i32::MAX))
            .ok_or_else(|| {
                ApiError::invalid(
                    "Scale",
                    "",
                    format!(
                        "spec.replicas: Invalid value: {v}: must be greater than or equal to 0"
                    ),
                )
            }),
    }
}

/// Sets (or clears) the object's `metadata.resourceVersion`, which the store's
/// update treats as the precondition.
fn set_precondition(obj: &mut Value, rv: Option<Value>) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        match rv {
            Some(rv) => {
                m.insert("resourceVersion".into(), rv);
            }
            None => {
                m.remove("resourceVersion");
            }
        }
    }
}

/// A `Warning` header as kube-apiserver writes one: `299 - "text"`, the text quoted
/// (control characters become spaces). `None` if the text cannot be a header value.
fn warning_header(text: &str) -> Option<HeaderValue> {
    let mut quoted = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            c if c.is_control() => quoted.push(' '),
            c => quoted.push(c),
        }
    }
    HeaderValue::from_bytes(format!("299 - \"{quoted}\"").as_bytes()).ok()
}

fn unsupported_media_type(ct: &str) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf (got {ct:?})"
        ),
    )
}

fn content_type(h: &HeaderMap) -> String {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn parse_body(bytes: &[u8], yaml: bool) -> Result<Value, ApiError> {
    let unknown = |e: String| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}"
        ))
    };
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(v),
        Err(e) if !yaml => Err(unknown(e.to_string())),
        Err(_) => {
            let text = std::str::from_utf8(bytes).map_err(|e| unknown(e.to_string()))?;
            // `0644` is 420, as kube-apiserver reads YAML (1.1).
            let options = serde_saphyr::options! { legacy_octal_numbers: true };
            serde_saphyr::from_str_with_options::<Value>(text, options)
                .map_err(|e| unknown(e.to_string()))
        }
    }
}

/// The answer to a `SelfSubjectAccessReview`: the review with
/// `status.allowed: true`, since the sandbox authorizes every request of
/// the one user it has (kube-apiserver's checks of the spec kept: exactly
/// one of `resourceAttributes` and `nonResourceAttributes`).
fn self_subject_access_review(mut review: Value) -> Result<Value, ApiError> {
    let spec = review.get("spec");
    let has = |field: &str| {
        spec.and_then(|s| s.get(field))
            .is_some_and(Value::is_object)
    };
    if has("resourceAttributes") == has("nonResourceAttributes") {
        return Err(ApiError::invalid(
            "SelfSubjectAccessReview.authorization.k8s.io",
            "",
            "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    let Some(object) = review.as_object_mut() else {
        return Err(ApiError::bad_request(
            "a SelfSubjectAccessReview must be an object",
        ));
    };
    object.insert(
        "apiVersion".into(),
        Value::String("authorization.k8s.io/v1".into()),
    );
    object.insert(
        "kind".into(),
        Value::String("SelfSubjectAccessReview".into()),
    );
    object.insert(
        "status".into(),
        serde_json::json!({"allowed": true, "reason": "the sandbox authorizes every request"}),
    );
    Ok(review)
}

fn body_dry_run(opts: Option<&Value>) -> bool {
    opts.and_then(|o| o.get("dryRun"))
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|v| v == "All"))
}

fn selection(
    rt: &ResourceType,
    namespace: Option<String>,
    q: &HashMap<String, String>,
) -> Result<Selection, ApiError> {
    Ok(Selection {
        namespace,
        labels: LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        fields: FieldSelector::parse(
            q.get("fieldSelector").map(String::as_str).unwrap_or(""),
            rt.fields,
        )?,
    })
}
