//! [`ClusterData`] for the CLI without a cluster: [`MemoryCluster`], the
//! objects of a test's `Context` file (or any set of objects), looked up by
//! apiVersion, resource or kind, namespace and name, and `apiCall` URL
//! paths served from them. (`leash apply --cluster` reads the cluster
//! through leash-controller's `ScanData`, as the scan and admission do.)
//!
//! # Invariants
//! 1. A [`MemoryCluster`] is never changed after it is built: evaluation
//!    threads share it by reference without synchronisation.
//! 2. Nothing here waits on the network. With a registry (`--registry`),
//!    an image lookup answers from what was fetched or records a miss (its
//!    `ImageLookup`'s locks, each held for one map operation); the caller
//!    fetches the misses between evaluations and evaluates again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use leash_controller::lookups::cosign_trust;
use leash_policy::kinds::{plural_of, split_api_version};
use leash_policy::{ClusterData, EntryKind};
use serde_json::Value;

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
    /// Image registries (`--registry`): what an evaluation misses is
    /// recorded, fetched by [`MemoryCluster::fetch_missed_images`] between
    /// evaluations, and kept for the run.
    registry: Option<leash_images::ImageLookup>,
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
    /// and verifications from `registry` for the images it does not hold:
    /// an evaluation never waits on it; what it missed is fetched by
    /// [`Self::fetch_missed_images`], and the evaluation repeated.
    pub(crate) fn with_registry(mut self, registry: Arc<leash_images::Registry>) -> MemoryCluster {
        self.left_out.retain(|k| *k != EntryKind::ImageRegistry);
        self.registry = Some(leash_images::ImageLookup::new(registry));
        self
    }

    /// Fetches, all at once, the images evaluations missed since the last
    /// call (each bounded by the registry's timeout); false when none was
    /// missed (or no registry is read).
    pub(crate) async fn fetch_missed_images(&self) -> bool {
        match &self.registry {
            Some(lookup) => lookup.fetch_missed().await,
            None => false,
        }
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
            Some(lookup) => lookup.get(image),
            None => Err(format!(
                "no image data for {image}: no image registry is read here"
            )),
        }
    }

    fn fresh_image(&self, image: &str) {
        if let Some(lookup) = &self.registry {
            lookup.fresh(image);
        }
    }

    fn verify_image(
        &self,
        image: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<String, String> {
        match &self.registry {
            Some(lookup) => lookup.verify(image, &cosign_trust(trust)),
            None => Err(format!(
                "cannot verify {image}: no image registry is read here (--registry reads one)"
            )),
        }
    }

    fn verify_attestations(
        &self,
        image: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<Vec<Value>, String> {
        match &self.registry {
            Some(lookup) => lookup.attestations(image, &cosign_trust(trust)),
            None => Err(format!(
                "cannot verify the attestations of {image}: no image registry is read here (--registry reads one)"
            )),
        }
    }

    fn verify_referrers(
        &self,
        image: &str,
        artifact_type: &str,
        trust: &leash_policy::ImageTrust,
    ) -> Result<Value, String> {
        match &self.registry {
            Some(lookup) => lookup.referrer_payload(image, artifact_type, &cosign_trust(trust)),
            None => Err(format!(
                "cannot verify the referrers of {image}: no image registry is read here (--registry reads one)"
            )),
        }
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
