//! [`ClusterData`] for the CLI: [`MemoryCluster`], the objects of a test's
//! `Context` file (or any set of objects), looked up by apiVersion,
//! resource or kind, namespace and name, and `apiCall` URL paths served
//! from them; and [`LiveCluster`], `leash apply --cluster`'s, which reads
//! what it does not hold from the API server.
//!
//! # Invariants
//! 1. A [`MemoryCluster`] is never changed after it is built: evaluation
//!    threads share it by reference without synchronisation.
//! 2. [`LiveCluster`]'s only mutable state is its GET cache, a `Mutex`
//!    taken for one `get` or one `insert` at a time: never held across a
//!    request, across `block_on` or across the engine's code. A poisoned
//!    lock is taken over (`into_inner`): the map is valid after any panic.
//!    Two threads asking for the same new path at once may both fetch it;
//!    the second insert replaces the first with an equal answer.
//! 3. Nothing here awaits; [`LiveCluster::view`]'s lookups wait for the API
//!    server with `Handle::block_on`, which only the evaluation threads
//!    (plain threads, not the runtime's) call. A lookup from a task of the
//!    runtime goes through [`LiveCluster::offline`], which never blocks: it
//!    answers from memory and the cache and sets `missed` (an `AtomicBool`
//!    the same task reads after the evaluation, so `Relaxed`).
//! 4. Cancellation (Ctrl-C cancels the `token`) ends a waiting lookup at
//!    once with nothing found; nothing is cached for it, and neither is a
//!    failed request (only answers and 404s are), so a cancelled or failed
//!    lookup never poisons later ones.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use leash_policy::kinds::{plural_of, split_api_version};
use leash_policy::{ClusterData, EntryKind};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Objects held in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryCluster {
    objects: Vec<Arc<Value>>,
    /// Image metadata by reference (`image.GetMetadata`).
    images: HashMap<String, Value>,
    /// Canned HTTP answers (a test's `apiCallResponses`).
    http: Vec<HttpAnswer>,
    /// Global context entries' data by name (a test's
    /// `globalContextEntries`).
    globals: BTreeMap<String, Value>,
    /// The kinds of context entries it leaves out of the context when it
    /// cannot answer them ([`ClusterData::context_required`]).
    left_out: Vec<EntryKind>,
    /// Image registries (`leash apply --registry`), read from the
    /// evaluation threads through the runtime's handle.
    registry: Option<(Arc<leash_images::Registry>, tokio::runtime::Handle)>,
}

/// One canned HTTP answer, Kyverno's `apiCallResponses` entry: the URL (or
/// API server path), the method it answers (any when None), the status
/// code and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpAnswer {
    pub url: String,
    pub method: Option<String>,
    pub status: u16,
    pub body: Value,
}

impl MemoryCluster {
    pub(crate) fn new(objects: Vec<Value>) -> MemoryCluster {
        MemoryCluster {
            objects: objects.into_iter().map(Arc::new).collect(),
            images: HashMap::new(),
            http: Vec::new(),
            globals: BTreeMap::new(),
            left_out: Vec::new(),
            registry: None,
        }
    }

    /// `leash apply` without a cluster: the objects given stand for the
    /// cluster that `apiCall`s read (as Kyverno's CLI builds a fake client
    /// of them), and the ConfigMap, global context and image registry
    /// entries it cannot answer are left out of the context instead of
    /// failing the rule, as Kyverno's CLI `apply` has no ConfigMap
    /// resolver, no global context store without `GlobalContextEntry`
    /// objects, and no registry access without `--registry`.
    pub(crate) fn offline_apply(mut self) -> MemoryCluster {
        self.left_out = vec![
            EntryKind::ConfigMap,
            EntryKind::GlobalReference,
            EntryKind::ImageRegistry,
        ];
        self
    }

    /// Answers image data (`imageRegistry` entries, `image.GetMetadata`)
    /// from `registry` for the images it does not hold. Its lookups wait
    /// on `handle`, so they must come from threads outside the runtime
    /// (`leash apply`'s evaluation threads); each is bounded by the
    /// registry's timeout.
    pub(crate) fn with_registry(
        mut self,
        registry: Arc<leash_images::Registry>,
        handle: tokio::runtime::Handle,
    ) -> MemoryCluster {
        self.left_out.retain(|k| *k != EntryKind::ImageRegistry);
        self.registry = Some((registry, handle));
        self
    }

    /// No registry is read: `imageRegistry` entries are left out of the
    /// context (`leash test` without `--registry`, as `kyverno test`).
    pub(crate) fn without_registry(mut self) -> MemoryCluster {
        if !self.left_out.contains(&EntryKind::ImageRegistry) {
            self.left_out.push(EntryKind::ImageRegistry);
        }
        self
    }

    /// Adds objects already shared (`leash apply`'s resources).
    pub(crate) fn with_shared(
        mut self,
        objects: impl IntoIterator<Item = Arc<Value>>,
    ) -> MemoryCluster {
        self.objects.extend(objects);
        self
    }

    /// Serves `globals` (entry name -> data) to global context lookups.
    pub(crate) fn with_globals(mut self, globals: BTreeMap<String, Value>) -> MemoryCluster {
        self.globals = globals;
        self
    }

    /// Answers `apiCall`s and CEL `http` calls from `answers`.
    pub(crate) fn with_http_answers(mut self, answers: Vec<HttpAnswer>) -> MemoryCluster {
        self.http = answers;
        self
    }

    /// Serves `images` (reference -> Kyverno's `ImageData`) to
    /// `image.GetMetadata`.
    pub(crate) fn with_images(mut self, images: HashMap<String, Value>) -> MemoryCluster {
        self.images = images;
        self
    }

    /// The canned answer to `method` on `url`: the entry naming that
    /// method, else one naming none (as Kyverno's CLI looks them up).
    fn answer(&self, method: &str, url: &str) -> Option<&HttpAnswer> {
        let method = method.to_ascii_uppercase();
        self.http
            .iter()
            .find(|a| a.url == url && a.method.as_deref() == Some(method.as_str()))
            .or_else(|| {
                self.http
                    .iter()
                    .find(|a| a.url == url && a.method.is_none())
            })
    }

    /// An `apiCall`'s answer: the body of a 2xx answer (Kyverno's v1
    /// `apiCall` treats any other status as a failure).
    fn api_answer(&self, method: &str, url: &str) -> Option<Option<Value>> {
        self.answer(method, url)
            .map(|a| (200..300).contains(&a.status).then(|| a.body.clone()))
    }

    fn matching<'a>(
        &'a self,
        api_version: &'a str,
        resource: &'a str,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        self.objects.iter().filter(move |o| {
            let kind = o["kind"].as_str().unwrap_or("");
            let av = o["apiVersion"].as_str().unwrap_or("");
            (api_version.is_empty() || av == api_version || split_api_version(av).0 == api_version)
                && (kind == resource
                    || plural_of(kind) == resource
                    || kind.eq_ignore_ascii_case(resource))
                && (namespace.is_empty()
                    || o["metadata"]["namespace"].as_str().unwrap_or("default") == namespace)
        })
    }
}

impl ClusterData for MemoryCluster {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        self.matching(api_version, resource, namespace)
            .find(|o| o["metadata"]["name"].as_str() == Some(name))
            .cloned()
    }

    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        self.matching(api_version, resource, namespace)
            .cloned()
            .collect()
    }

    fn image_data(&self, image: &str) -> Result<Value, String> {
        if let Some(data) = self.images.get(image) {
            return Ok(data.clone());
        }
        match &self.registry {
            Some((registry, handle)) => handle
                .block_on(registry.image_data(image))
                .map(|data| data.cel_value())
                .map_err(|e| e.to_string()),
            None => Err(format!(
                "no image data for {image}: no image registry is read here"
            )),
        }
    }

    fn fresh_image(&self, image: &str) {
        // Each verification after this fetches and checks again.
        if let Some((registry, _)) = &self.registry {
            registry.forget(image);
        }
    }

    fn verify_image(
        &self,
        image: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<String, String> {
        let Some((registry, handle)) = &self.registry else {
            return Err(format!(
                "cannot verify {image}: no image registry is read here (--registry reads one)"
            ));
        };
        handle
            .block_on(registry.verify_image(image, &leash_controller::lookups::cosign_trust(trust)))
    }

    fn verify_attestations(
        &self,
        image: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<Vec<Value>, String> {
        let Some((registry, handle)) = &self.registry else {
            return Err(format!(
                "cannot verify the attestations of {image}: no image registry is read here (--registry reads one)"
            ));
        };
        handle.block_on(registry.load_trust_root())?;
        let atts = handle
            .block_on(registry.attestations(image))
            .map_err(|e| e.to_string())?;
        registry.verify_attestations(
            image,
            &leash_controller::lookups::cosign_trust(trust),
            &atts,
        )
    }

    fn verify_referrers(
        &self,
        image: &str,
        artifact_type: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<Value, String> {
        let Some((registry, handle)) = &self.registry else {
            return Err(format!(
                "cannot verify the referrers of {image}: no image registry is read here (--registry reads one)"
            ));
        };
        handle.block_on(registry.verify_image_referrers(
            image,
            artifact_type,
            &leash_controller::lookups::cosign_trust(trust),
        ))
    }

    fn api_get(&self, url_path: &str) -> Option<Value> {
        match self.api_answer("GET", url_path) {
            Some(answer) => answer,
            None => leash_controller::lookups::answer_path(self, url_path),
        }
    }

    fn api_service(&self, call: &leash_policy::ServiceCall) -> Option<Value> {
        self.api_answer(&call.method, &call.url).flatten()
    }

    /// An entry's data, or the field of it a projection names (the
    /// entry's data is then an object of projections).
    fn global(&self, entry: &str, projection: Option<&str>) -> Option<Value> {
        let data = self.globals.get(entry)?;
        match projection.filter(|p| !p.is_empty()) {
            None => Some(data.clone()),
            Some(p) => data.get(p).cloned(),
        }
    }

    fn http_call(&self, method: &str, url: &str, _body: Option<&Value>) -> Option<Value> {
        self.answer(method, url)
            .map(|a| serde_json::json!({"body": a.body, "statusCode": a.status}))
    }

    fn context_required(&self, kind: EntryKind) -> bool {
        !self.left_out.contains(&kind)
    }
}

/// `leash apply --cluster`'s cluster data. The objects loaded before the
/// evaluation (namespaces, and ConfigMaps when a policy reads them) are
/// served from memory; anything else a rule asks for (an `apiCall`
/// `urlPath`, CEL `resource.Get/List` of another kind) is read from the API
/// server the first time, one GET per distinct path, and kept for the rest
/// of the run, so a URL every object asks for costs one request.
///
/// The engine calls this synchronously from the evaluation threads (plain
/// threads, not the runtime's), which wait on the runtime for the request.
/// The cache's lock is never held across a request; two threads asking for
/// the same new path at once may both fetch it. A cancelled `token`
/// (Ctrl-C) ends every wait at once, and the lookup finds nothing.
pub(crate) struct LiveCluster {
    memory: MemoryCluster,
    /// Resource plurals whose objects `memory` holds in full.
    preloaded: Vec<String>,
    client: kube::Client,
    handle: tokio::runtime::Handle,
    token: CancellationToken,
    /// Path -> object (None: not found).
    cache: Mutex<HashMap<String, Option<Arc<Value>>>>,
    /// The global context entries, ready before the evaluation.
    global: Option<leash_context::Store>,
}

impl std::fmt::Debug for LiveCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCluster")
            .field("preloaded", &self.preloaded)
            .finish_non_exhaustive()
    }
}

impl LiveCluster {
    pub(crate) fn new(
        memory: MemoryCluster,
        preloaded: Vec<String>,
        client: kube::Client,
        handle: tokio::runtime::Handle,
        token: CancellationToken,
    ) -> LiveCluster {
        LiveCluster {
            memory,
            preloaded,
            client,
            handle,
            token,
            cache: Mutex::new(HashMap::new()),
            global: None,
        }
    }

    /// Serves `globalReference` from `store`.
    pub(crate) fn with_global(mut self, store: Option<leash_context::Store>) -> LiveCluster {
        self.global = store;
        self
    }

    fn is_preloaded(&self, resource: &str) -> bool {
        let plural = resource_plural(resource);
        self.preloaded.contains(&plural)
    }

    /// This cluster for an evaluation that must not wait on the API server
    /// (one in a task of the loader's runtime, which `fetch` would block):
    /// it answers from what is loaded and cached, and notes in `missed`
    /// what it would have had to fetch (the caller then evaluates again
    /// where waiting is allowed).
    pub(crate) fn offline<'a>(&'a self, missed: &'a AtomicBool) -> View<'a> {
        View {
            live: self,
            missed: Some(missed),
        }
    }

    /// This cluster as the evaluation reads it: what is not loaded is
    /// fetched (and cached) on first use.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            live: self,
            missed: None,
        }
    }

    /// A GET of `path` from the cache: `None` when not cached.
    fn cached(&self, path: &str) -> Option<Option<Arc<Value>>> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(path)
            .cloned()
    }

    /// A GET of `path`, from the cache or the API server.
    fn fetch(&self, path: &str) -> Option<Arc<Value>> {
        if let Some(hit) = self.cached(path) {
            return hit;
        }
        let request = http::Request::get(path).body(Vec::new()).ok()?;
        let (client, token) = (self.client.clone(), self.token.clone());
        let answer = self.handle.block_on(async move {
            tokio::select! {
                _ = token.cancelled() => None,
                r = client.request::<Value>(request) => Some(r),
            }
        })?;
        let found = match answer {
            Ok(v) => Some(Arc::new(v)),
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => {
                // Not kept: a later object may find the server answering.
                tracing::debug!("GET {path}: {e}");
                return None;
            }
        };
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(path.to_string(), found.clone());
        found
    }
}

/// The plural of a resource named by plural or kind.
fn resource_plural(resource: &str) -> String {
    if resource.starts_with(|c: char| c.is_ascii_uppercase()) {
        plural_of(resource)
    } else {
        resource.to_string()
    }
}

/// The API path of a resource's collection or object.
fn resource_path(api_version: &str, resource: &str, namespace: &str, name: &str) -> String {
    let (group, version) = split_api_version(api_version);
    let mut path = if group.is_empty() {
        format!("/api/{}", if version.is_empty() { "v1" } else { version })
    } else {
        format!("/apis/{group}/{version}")
    };
    if !namespace.is_empty() {
        path.push_str(&format!("/namespaces/{namespace}"));
    }
    path.push('/');
    path.push_str(&resource_plural(resource));
    if !name.is_empty() {
        path.push('/');
        path.push_str(name);
    }
    path
}

/// A [`LiveCluster`] that may fetch, or (offline) only notes that it
/// would have to.
#[derive(Debug)]
pub(crate) struct View<'a> {
    live: &'a LiveCluster,
    missed: Option<&'a AtomicBool>,
}

impl View<'_> {
    fn fetch(&self, path: &str) -> Option<Arc<Value>> {
        match self.missed {
            None => self.live.fetch(path),
            Some(missed) => self.live.cached(path).unwrap_or_else(|| {
                missed.store(true, Ordering::Relaxed);
                None
            }),
        }
    }
}

impl ClusterData for View<'_> {
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        if self.live.is_preloaded(resource) {
            return self.live.memory.get(api_version, resource, namespace, name);
        }
        self.fetch(&resource_path(api_version, resource, namespace, name))
    }

    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>> {
        if self.live.is_preloaded(resource) {
            return self.live.memory.list(api_version, resource, namespace);
        }
        self.fetch(&resource_path(api_version, resource, namespace, ""))
            .and_then(|l| l["items"].as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .map(Arc::new)
            .collect()
    }

    fn api_get(&self, url_path: &str) -> Option<Value> {
        let path = url_path.split('?').next().unwrap_or("");
        let resource = path.trim_matches('/').split('/').collect::<Vec<_>>();
        // `.../namespaces` and `.../namespaces/<name>` are namespaces;
        // `.../namespaces/<ns>/<resource>[/<name>]` is the resource.
        let named = match resource.as_slice() {
            ["api", _, "namespaces", _, r, ..] | ["apis", _, _, "namespaces", _, r, ..] => *r,
            ["api", _, r, ..] | ["apis", _, _, r, ..] => *r,
            _ => "",
        };
        if !named.is_empty() && self.live.is_preloaded(named) {
            return self.live.memory.api_get(url_path);
        }
        self.fetch(url_path).map(|v| (*v).clone())
    }

    fn global(&self, entry: &str, projection: Option<&str>) -> Option<Value> {
        let store = self.live.global.as_ref()?;
        match projection {
            Some(p) => store.projection(entry, p).ok(),
            None => store.get(entry).ok().map(|s| s.data.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster() -> MemoryCluster {
        MemoryCluster::new(vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "x"}, "data": {"k": "1"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "y"}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "x"}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}),
        ])
    }

    #[test]
    fn lookups_by_resource_or_kind_namespace_and_name() {
        let c = cluster();
        assert_eq!(
            c.get("v1", "configmaps", "x", "a").unwrap()["data"]["k"],
            "1"
        );
        assert_eq!(
            c.get("v1", "ConfigMap", "x", "a").unwrap()["metadata"]["name"],
            "a"
        );
        assert!(c.get("v1", "configmaps", "y", "a").is_none());
        assert_eq!(c.list("v1", "configmaps", "").len(), 2);
        assert_eq!(c.list("apps/v1", "deployments", "x").len(), 1);
        assert_eq!(c.list("v1", "namespaces", "").len(), 1);
    }

    /// A test's `apiCallResponses`: the entry naming the method first,
    /// then one naming none; `apiCall`s get a 2xx answer's body (another
    /// status is no answer), CEL `http` the body with the status; an
    /// `urlPath` answer comes before the objects.
    #[test]
    fn canned_http_answers() {
        let answer = |url: &str, method: Option<&str>, status: u16, body: Value| HttpAnswer {
            url: url.to_string(),
            method: method.map(String::from),
            status,
            body,
        };
        let c = cluster().with_http_answers(vec![
            answer("https://svc/check", None, 200, json!({"allowed": true})),
            answer(
                "https://svc/check",
                Some("POST"),
                201,
                json!({"posted": true}),
            ),
            answer("https://svc/down", None, 503, json!({"error": "down"})),
            answer(
                "/api/v1/namespaces/x/configmaps",
                None,
                200,
                json!({"items": []}),
            ),
        ]);
        let call = |method: &str, url: &str| leash_policy::ServiceCall {
            url: url.to_string(),
            ca_bundle: None,
            method: method.to_string(),
            body: None,
        };
        assert_eq!(
            c.api_service(&call("GET", "https://svc/check")),
            Some(json!({"allowed": true}))
        );
        assert_eq!(
            c.api_service(&call("POST", "https://svc/check")),
            Some(json!({"posted": true}))
        );
        assert_eq!(c.api_service(&call("GET", "https://svc/down")), None);
        assert_eq!(c.api_service(&call("GET", "https://svc/other")), None);
        assert_eq!(
            c.http_call("post", "https://svc/check", Some(&json!({"a": 1}))),
            Some(json!({"body": {"posted": true}, "statusCode": 201}))
        );
        assert_eq!(
            c.http_call("GET", "https://svc/down", None),
            Some(json!({"body": {"error": "down"}, "statusCode": 503}))
        );
        assert_eq!(
            c.api_get("/api/v1/namespaces/x/configmaps"),
            Some(json!({"items": []}))
        );
    }

    #[test]
    fn global_entries_and_their_projections() {
        let c = cluster().with_globals(
            [
                ("whole".to_string(), json!([1, 2])),
                ("projected".to_string(), json!({"size": 2})),
            ]
            .into(),
        );
        assert_eq!(c.global("whole", None), Some(json!([1, 2])));
        assert_eq!(c.global("whole", Some("")), Some(json!([1, 2])));
        assert_eq!(c.global("projected", Some("size")), Some(json!(2)));
        assert_eq!(c.global("projected", Some("other")), None);
        assert_eq!(c.global("missing", None), None);
    }

    #[test]
    fn api_calls_are_served_from_the_objects() {
        let c = cluster();
        let list = c.api_get("/api/v1/namespaces/x/configmaps").unwrap();
        assert_eq!(list["items"].as_array().unwrap().len(), 1);
        let one = c
            .api_get("/apis/apps/v1/namespaces/x/deployments/d")
            .unwrap();
        assert_eq!(one["kind"], "Deployment");
        assert_eq!(
            c.api_get("/api/v1/configmaps").unwrap()["items"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert!(c.api_get("/version").is_none());
        assert!(
            c.api_get("/api/v1/namespaces/x/configmaps/missing")
                .is_none()
        );
    }
}
