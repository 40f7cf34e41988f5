//! What a policy is evaluated against: the resource and the (real or
//! simulated) admission request around it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

/// An admission operation (`request.operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// CREATE (the CLI's default, as Kyverno's CLI).
    Create,
    /// UPDATE
    Update,
    /// DELETE
    Delete,
    /// CONNECT
    Connect,
    /// A background scan: no admission request (`request.operation` is empty).
    #[serde(skip)]
    Background,
}

impl Operation {
    /// The name Kubernetes uses (`CREATE`, ...); empty for a background scan.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
            Operation::Background => "",
        }
    }

    /// Parses `CREATE`, `UPDATE`, `DELETE`, `CONNECT` (any case).
    pub fn parse(s: &str) -> Option<Operation> {
        Some(match s.to_ascii_uppercase().as_str() {
            "CREATE" => Operation::Create,
            "UPDATE" => Operation::Update,
            "DELETE" => Operation::Delete,
            "CONNECT" => Operation::Connect,
            _ => return None,
        })
    }
}

/// `request.userInfo` plus the roles Kyverno resolves for it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserInfo {
    /// `username`
    pub username: String,
    /// `uid`
    pub uid: String,
    /// `groups`
    pub groups: Vec<String>,
    /// Namespaced roles bound to the user (`namespace:name`).
    pub roles: Vec<String>,
    /// Cluster roles bound to the user.
    pub cluster_roles: Vec<String>,
}

/// An object's `metadata.labels` as strings, one rule for every caller
/// (admission, the background scan, `apply --cluster`, a ValidatingPolicy's
/// selectors): a string is itself; a value that is not one, as a values
/// file may write `tier: 1`, is its JSON text (`1`, `true`).
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One evaluation's input. Cheap to clone: objects are shared.
#[derive(Debug, Clone)]
pub struct EvalRequest {
    /// `request.object` (for DELETE, the object being deleted, as Kyverno's
    /// CLI passes it).
    pub object: Arc<Value>,
    /// `request.oldObject` (UPDATE, DELETE).
    pub old_object: Option<Arc<Value>>,
    /// `request.operation`
    pub operation: Operation,
    /// `request.userInfo`
    pub user_info: UserInfo,
    /// The labels of the object's namespace, when known (namespaceSelector).
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The object's Namespace object, when known (CEL `namespaceObject`).
    pub namespace_object: Option<Arc<Value>>,
    /// The resource the request is for when it is not the plural of the
    /// object's kind: `request.resource.resource` with
    /// `request.subResource` (`pods/binding`, `pods/status`), as CEL
    /// resource rules match it. None: the kind's plural.
    pub request_resource: Option<String>,
}

impl EvalRequest {
    /// A CREATE request for `object` with no user info.
    pub fn create(object: Arc<Value>) -> EvalRequest {
        EvalRequest {
            object,
            old_object: None,
            operation: Operation::Create,
            user_info: UserInfo::default(),
            namespace_labels: None,
            namespace_object: None,
            request_resource: None,
        }
    }

    /// The object's `kind`.
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or("")
    }

    /// The object's `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or("")
    }

    /// The object's `metadata.name`.
    pub fn name(&self) -> &str {
        self.object["metadata"]["name"].as_str().unwrap_or("")
    }

    /// The object's `metadata.namespace` ("" for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        self.object["metadata"]["namespace"].as_str().unwrap_or("")
    }

    /// `request.namespace` as kube-apiserver fills it in an admission
    /// request: the object's namespace, and for a Namespace its own name
    /// (Kyverno's kasten policy names what it generates for a Namespace
    /// with `{{ request.namespace }}`).
    pub fn request_namespace(&self) -> &str {
        if self.kind() == "Namespace" && self.api_version() == "v1" {
            return self.name();
        }
        self.namespace()
    }

    /// What `match` / `exclude` look at, for the request's own operation.
    pub(crate) fn target(&self) -> crate::matching::Target<'_> {
        crate::matching::Target::of(
            &self.object,
            self.namespace_labels.as_ref(),
            self.operation,
            &self.user_info,
        )
    }
}

/// The kinds of context entries that read cluster data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// `configMap`.
    ConfigMap,
    /// `apiCall` (`urlPath` or `service`).
    ApiCall,
    /// `globalReference`.
    GlobalReference,
    /// `imageRegistry`.
    ImageRegistry,
}

/// Read access to cluster data that rules may look up (`context.configMap`,
/// `apiCall`, `globalReference`, CEL `resource.Get/List`, `globalContext.Get`,
/// `image.GetMetadata`).
///
/// The engine never does I/O itself: the caller supplies this (a test's
/// `Context` file, a snapshot loaded from the cluster, the global context
/// store). Implementations must be cheap and non-blocking.
pub trait ClusterData: Send + Sync + std::fmt::Debug {
    /// One object by `apiVersion`, resource plural (`configmaps`) or kind
    /// (`ConfigMap`), namespace ("" for cluster scope) and name.
    fn get(
        &self,
        api_version: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>>;

    /// Every object of a resource (plural or kind) in a namespace ("" for all).
    fn list(&self, api_version: &str, resource: &str, namespace: &str) -> Vec<Arc<Value>>;

    /// A number that differs whenever the objects [`ClusterData::list`]
    /// answers for this resource may have changed (read it before the
    /// list); `None` when unknown: then nothing derived from a list may be
    /// kept.
    fn generation(&self, api_version: &str, resource: &str) -> Option<u64> {
        let _ = (api_version, resource);
        None
    }

    /// An `apiCall` `urlPath` GET against the API server (`/api/v1/...`).
    fn api_get(&self, url_path: &str) -> Option<Value> {
        let _ = url_path;
        None
    }

    /// An `apiCall` `service` call: the answer's JSON body.
    fn api_service(&self, call: &ServiceCall) -> Option<Value> {
        let _ = call;
        None
    }

    /// A call of CEL's `http` library (`GET`, or `POST` with `body`) to
    /// `url`: the answer as Kyverno's library gives it, `{"body": ...,
    /// "statusCode": ...}`. The engine does no I/O: `leash test` answers
    /// from a test's `apiCallResponses`.
    fn http_call(&self, method: &str, url: &str, body: Option<&Value>) -> Option<Value> {
        let _ = (method, url, body);
        None
    }

    /// A global context entry's data (`projection` None) or one projection.
    fn global(&self, entry: &str, projection: Option<&str>) -> Option<Value> {
        let _ = (entry, projection);
        None
    }

    /// Whether a context entry of `kind` this data has no answer for is the
    /// rule's error (true: data standing for a whole cluster) or is left
    /// out of the context (false: `leash apply` without a cluster, as
    /// Kyverno's CLI disables the loaders it has no ConfigMap resolver,
    /// global context store or registry access for; the entry's variables
    /// are then unknown).
    fn context_required(&self, kind: EntryKind) -> bool {
        let _ = kind;
        true
    }

    /// The metadata of an image, looked up by the exact reference a rule
    /// names (CEL `image.GetMetadata`): Kyverno's `ImageData` object
    /// (`image`, `resolvedImage`, `registry`, `repository`, `tag`,
    /// `digest`, `imageIndex`, `manifest`, `config`), or why there is
    /// none. The engine reads no registry itself: `leash test` serves a
    /// `Context` file's `spec.images`, `leash apply --registry` reads
    /// registries (leash-images).
    fn image_data(&self, image: &str) -> Result<Value, String> {
        Err(format!(
            "no image data for {image}: no image registry is read here"
        ))
    }

    /// The verifications of `image` that follow, in this evaluation, use
    /// nothing kept from before it (a `verifyImages` entry's `useCache:
    /// false`): its signatures and attestations are fetched and checked
    /// again. Data without a cache has nothing to forget.
    fn fresh_image(&self, image: &str) {
        let _ = image;
    }

    /// Whether `trust` (public keys, or keyless identities and roots)
    /// verifies a cosign signature of `image`: the image's digest, or why
    /// not (cosign's `no signatures found` / `no matching signatures`, a
    /// registry's error).
    fn verify_image(&self, image: &str, trust: &ImageTrust) -> Result<String, String> {
        let _ = trust;
        Err(format!(
            "cannot verify {image}: no image registry is read here"
        ))
    }

    /// The in-toto statements (`_type`, `predicateType`, `subject`,
    /// `predicate`) of the cosign attestations of `image` that `trust`
    /// verifies and whose subject names the image's
    /// digest, or why there are none (cosign's `no matching attestations: ` (none at all) /
    /// `no matching attestations`, a registry's error).
    fn verify_attestations(&self, image: &str, trust: &ImageTrust) -> Result<Vec<Value>, String> {
        let _ = trust;
        Err(format!(
            "cannot verify the attestations of {image}: no image registry is read here"
        ))
    }

    /// The payload (JSON) of the first OCI referrer of `image` of
    /// `artifact_type` (an SBOM attached with `oras attach`) whose Notary
    /// Project signature `trust` verifies, or why none (Kyverno's `no
    /// attestations found for type`, notation's words, a registry's
    /// error).
    fn verify_referrers(
        &self,
        image: &str,
        artifact_type: &str,
        trust: &ImageTrust,
    ) -> Result<Value, String> {
        let _ = (artifact_type, trust);
        Err(format!(
            "cannot verify the referrers of {image}: no image registry is read here"
        ))
    }
}

/// Who must have signed an image, as a policy says it: a `verifyImages`
/// attestor entry, an ImageValidatingPolicy's cosign attestor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ImageTrust {
    /// PEM public keys (one or more; any one verifies).
    Keys(String),
    /// cosign keyless: a signing certificate chaining to `roots` (PEM CA
    /// certificates) and naming one of `identities` (any, when empty).
    Keyless {
        /// PEM CA certificates, each a trust anchor.
        roots: String,
        /// Any one must match.
        identities: Vec<KeylessIdentity>,
    },
    /// The key of a certificate the policy gives (PEM), checked against
    /// its `chain` (PEM, or empty) first: a `certificates` attestor.
    Certificate {
        /// The certificate.
        cert: String,
        /// Its chain (intermediates and root), or empty.
        chain: String,
    },
    /// Notary Project signatures whose certificate chain holds one of
    /// these PEM certificates (the trust store): a ClusterPolicy's
    /// `type: Notary` certificates, an ImageValidatingPolicy's `notary`
    /// attestor.
    Notary {
        /// PEM certificates.
        certs: String,
    },
    /// PEM public keys kept in a Secret's `cosign.pub` (`k8s://NS/NAME`,
    /// or `keys.secret`), as cosign reads them. The engine reads the Secret
    /// through [`ClusterData::get`] and verifies with [`ImageTrust::Keys`]:
    /// a [`ClusterData`] is never asked to verify with this one.
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

/// One keyless identity: the certificate's OIDC issuer and subject (an
/// email or URI subject alternative name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KeylessIdentity {
    /// The issuer (empty: any).
    pub issuer: String,
    /// The subject (empty: any).
    pub subject: String,
    /// A regular expression the issuer must match (empty: none).
    pub issuer_regexp: String,
    /// A regular expression the subject must match (empty: none).
    pub subject_regexp: String,
    /// `issuer` and `subject` are Kyverno wildcards (a ClusterPolicy's
    /// keyless attestor), not exact strings (an ImageValidatingPolicy's
    /// identities, as cosign matches them).
    pub wildcards: bool,
}

/// One `apiCall` `service` call, its variables substituted.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceCall {
    /// `service.url`.
    pub url: String,
    /// `service.caBundle` (PEM).
    pub ca_bundle: Option<String>,
    /// `GET` or `POST`.
    pub method: String,
    /// A POST's JSON body (`data` as an object), as JSON text.
    pub body: Option<String>,
}

/// No cluster data: every lookup finds nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoClusterData;

impl ClusterData for NoClusterData {
    fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<Value>> {
        None
    }
    fn list(&self, _: &str, _: &str, _: &str) -> Vec<Arc<Value>> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    /// One rule for labels everywhere: strings as they are, other values
    /// as their JSON text, none when there are no labels.
    #[test]
    fn labels_of_reads_every_label_as_text() {
        let ns = json!({"metadata": {"labels": {"team": "a", "tier": 1, "on": true}}});
        let labels = super::labels_of(&ns);
        assert_eq!(
            labels.into_iter().collect::<Vec<_>>(),
            [
                ("on".to_string(), "true".to_string()),
                ("team".to_string(), "a".to_string()),
                ("tier".to_string(), "1".to_string())
            ]
        );
        assert!(super::labels_of(&json!({"metadata": {}})).is_empty());
    }
}
