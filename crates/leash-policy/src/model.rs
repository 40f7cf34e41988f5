//! The typed model of a `ClusterPolicy` / `Policy` (`kyverno.io/v1`): the
//! fields compiling reads, deserialized with serde, so a field of the wrong
//! type or a value outside its enum is refused naming its path
//! (`spec.rules[0].validate.failureAction: unknown variant ...`), as the API
//! server's validation refuses it.
//!
//! Unknown fields are refused before this, by the CRD schema check
//! ([`crate::schema`], from Kyverno's CRDs), which knows every field Kyverno
//! allows; the model holds only those leash reads. Free-form parts
//! (patterns, overlays, generate's `data`, conditions) stay JSON; `cel` is
//! compiled by its own module, and the `match`/`exclude` blocks are
//! [`MatchBlock`]s, deserialized in [`crate::matching`].
//!
//! A `null` field is the same as an absent one, as in Kyverno's Go structs.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use crate::conditions::ConditionsDoc;
use crate::error::Result;
use crate::matching::MatchBlock;
use crate::policy::{ErrFn, FailureAction};

/// `v` as a `T`; a mistake is reported at `field` plus its path inside `v`.
pub(crate) fn parse<T: DeserializeOwned>(v: &Value, field: &str, err: &ErrFn<'_>) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let at = match path.as_str() {
            "." => field.to_string(),
            p if field.is_empty() => p.to_string(),
            p if p.starts_with('[') => format!("{field}{p}"),
            p => format!("{field}.{p}"),
        };
        err(at, e.into_inner().to_string())
    })
}

/// A list or map that may be `null` (empty then).
pub(crate) fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> std::result::Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A value whose presence counts, `null` included (`variable.value: null`
/// is a value; an absent one is not).
fn present<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A policy document's `metadata`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Metadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub annotations: Map<String, Value>,
}

/// A `ClusterPolicy` or `Policy`.
#[derive(Debug, Deserialize)]
pub(crate) struct Document {
    #[serde(default, deserialize_with = "nullable")]
    pub metadata: Metadata,
    pub spec: Option<Spec>,
}

/// A policy's `spec`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Spec {
    pub validation_failure_action: Option<FailureAction>,
    pub background: Option<bool>,
    pub admission: Option<bool>,
    pub failure_policy: Option<FailurePolicy>,
    pub generate_existing: Option<bool>,
    pub generate_existing_on_policy_update: Option<bool>,
    pub mutate_existing_on_policy_update: Option<bool>,
    /// Kept as JSON: autogen rewrites each rule into its controllers'
    /// before it is read as a [`Rule`].
    pub rules: Option<Vec<Value>>,
}

/// `spec.failurePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum FailurePolicy {
    Fail,
    Ignore,
}

/// One rule.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rule {
    pub name: Option<String>,
    #[serde(rename = "match", default, deserialize_with = "nullable")]
    pub match_: MatchBlock,
    #[serde(default, deserialize_with = "nullable")]
    pub exclude: MatchBlock,
    #[serde(default, deserialize_with = "nullable")]
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<ConditionsDoc>,
    pub cel_preconditions: Option<Vec<Value>>,
    pub validate: Option<Block>,
    #[serde(default, deserialize_with = "nullable")]
    pub verify_images: Vec<ImageVerification>,
    pub generate: Option<Generate>,
    pub mutate: Option<Mutate>,
}

/// A `validate` block, or one `foreach` declaration of a validate or a
/// mutate rule: Kyverno's Validation, ForEachValidation and
/// ForEachMutation share their checks and patches, and the schema check
/// has refused each one's fields where they do not belong.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Block {
    pub message: Option<String>,
    pub failure_action: Option<FailureAction>,
    pub allow_existing_violations: Option<bool>,
    pub pattern: Option<Value>,
    pub any_pattern: Option<Vec<Value>>,
    pub deny: Option<Deny>,
    pub foreach: Option<Vec<Block>>,
    pub cel: Option<Value>,
    pub pod_security: Option<crate::podsecurity::PodSecurityDoc>,
    pub manifests: Option<Manifests>,
    // A foreach declaration's own fields.
    pub list: Option<String>,
    pub element_scope: Option<bool>,
    pub order: Option<Order>,
    #[serde(default, deserialize_with = "nullable")]
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<ConditionsDoc>,
    // A mutate foreach's patches.
    pub patch_strategic_merge: Option<Value>,
    pub patches_json6902: Option<Value>,
}

/// `validate.deny`.
#[derive(Debug, Deserialize)]
pub(crate) struct Deny {
    pub conditions: Option<ConditionsDoc>,
}

/// `validate.manifests`: only whether it has attestors is read.
#[derive(Debug, Deserialize)]
pub(crate) struct Manifests {
    #[serde(default, deserialize_with = "nullable")]
    pub attestors: Vec<Value>,
}

/// A mutate `foreach`'s element order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum Order {
    Ascending,
    Descending,
}

/// A rule `context` entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContextEntry {
    pub name: Option<String>,
    pub variable: Option<Variable>,
    pub config_map: Option<ConfigMapRef>,
    pub api_call: Option<ApiCall>,
    pub global_reference: Option<GlobalReference>,
    pub image_registry: Option<ImageRegistry>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Variable {
    #[serde(default, deserialize_with = "present")]
    pub value: Option<Value>,
    pub jmes_path: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub default: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ConfigMapRef {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApiCall {
    pub url_path: Option<String>,
    pub method: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub data: Vec<RequestData>,
    pub service: Option<Service>,
    pub jmes_path: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub default: Option<Value>,
}

/// One `key`/`value` of an API call's body.
#[derive(Debug, Deserialize)]
pub(crate) struct RequestData {
    pub key: Option<String>,
    #[serde(default)]
    pub value: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Service {
    pub url: Option<String>,
    pub ca_bundle: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GlobalReference {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    pub jmes_path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageRegistry {
    #[serde(default, deserialize_with = "nullable")]
    pub reference: String,
    pub jmes_path: Option<String>,
    pub image_registry_credentials: Option<Credentials>,
}

/// `imageRegistryCredentials` (or an ImageValidatingPolicy's
/// `credentials`): only the Secrets are read.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Credentials {
    #[serde(default, deserialize_with = "nullable")]
    pub secrets: Vec<String>,
}

/// A rule's `mutate`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Mutate {
    pub targets: Option<Vec<Target>>,
    pub mutate_existing_on_policy_update: Option<bool>,
    pub foreach: Option<Vec<Block>>,
    pub patch_strategic_merge: Option<Value>,
    pub patches_json6902: Option<Value>,
}

/// One `mutate.targets` entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Target {
    #[serde(default, deserialize_with = "nullable")]
    pub api_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    pub selector: Option<Value>,
    #[serde(default, deserialize_with = "nullable")]
    pub context: Vec<ContextEntry>,
    pub preconditions: Option<ConditionsDoc>,
}

/// A rule's `generate`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Generate {
    #[serde(default, deserialize_with = "nullable")]
    pub api_version: String,
    #[serde(default, deserialize_with = "nullable")]
    pub kind: String,
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    pub synchronize: Option<bool>,
    pub orphan_downstream_on_policy_delete: Option<bool>,
    pub generate_existing: Option<bool>,
    pub data: Option<Map<String, Value>>,
    pub clone: Option<CloneFrom>,
    pub clone_list: Option<CloneList>,
    /// Read only to refuse it: leash does not generate per element yet.
    pub foreach: Option<Value>,
}

/// `generate.clone`.
#[derive(Debug, Deserialize)]
pub(crate) struct CloneFrom {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
}

/// `generate.cloneList`.
#[derive(Debug, Deserialize)]
pub(crate) struct CloneList {
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
    #[serde(default, deserialize_with = "nullable")]
    pub kinds: Vec<String>,
    pub selector: Option<Value>,
}

/// One `verifyImages` entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ImageVerification {
    #[serde(rename = "type")]
    pub type_: Option<VerificationType>,
    #[serde(default, deserialize_with = "nullable")]
    pub image_references: Vec<String>,
    /// The older single form of `imageReferences`.
    pub image: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub skip_image_references: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub attestors: Vec<AttestorSet>,
    #[serde(default, deserialize_with = "nullable")]
    pub attestations: Vec<Attestation>,
    /// The older single public key.
    pub key: Option<String>,
    pub verify_digest: Option<bool>,
    pub mutate_digest: Option<bool>,
    pub use_cache: Option<bool>,
    pub failure_action: Option<FailureAction>,
    pub image_registry_credentials: Option<Credentials>,
}

/// Kyverno's ImageVerificationType.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum VerificationType {
    Cosign,
    Notary,
    SigstoreBundle,
}

/// One `attestations` entry.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Attestation {
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The older name of `type`.
    pub predicate_type: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub attestors: Vec<AttestorSet>,
    #[serde(default, deserialize_with = "nullable")]
    pub conditions: Vec<ConditionsDoc>,
}

/// One attestor set.
#[derive(Debug, Deserialize)]
pub(crate) struct AttestorSet {
    pub count: Option<u64>,
    #[serde(default, deserialize_with = "nullable")]
    pub entries: Vec<Attestor>,
}

/// One attestor set entry.
#[derive(Debug, Deserialize)]
pub(crate) struct Attestor {
    pub keys: Option<Keys>,
    pub keyless: Option<Keyless>,
    pub certificates: Option<Certificates>,
    pub attestor: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Keys {
    pub public_keys: Option<String>,
    pub secret: Option<SecretRef>,
    pub rekor: Option<Rekor>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct SecretRef {
    #[serde(default, deserialize_with = "nullable")]
    pub name: String,
    #[serde(default, deserialize_with = "nullable")]
    pub namespace: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rekor {
    pub url: Option<String>,
    pub ignore_tlog: Option<bool>,
}

impl Rekor {
    /// Whether `rekor` (maybe absent) says not to read the log.
    pub(crate) fn ignored(r: &Option<Rekor>) -> bool {
        r.as_ref().and_then(|r| r.ignore_tlog) == Some(true)
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Keyless {
    pub rekor: Option<Rekor>,
    pub ctlog: Option<CtLog>,
    pub roots: Option<String>,
    pub additional_extensions: Option<Map<String, Value>>,
    #[serde(default, deserialize_with = "nullable")]
    pub issuer: String,
    #[serde(default, deserialize_with = "nullable")]
    pub subject: String,
    #[serde(rename = "issuerRegExp", default, deserialize_with = "nullable")]
    pub issuer_regexp: String,
    #[serde(rename = "subjectRegExp", default, deserialize_with = "nullable")]
    pub subject_regexp: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CtLog {
    #[serde(rename = "ignoreSCT")]
    pub ignore_sct: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Certificates {
    #[serde(default, deserialize_with = "nullable")]
    pub cert: String,
    #[serde(default, deserialize_with = "nullable")]
    pub cert_chain: String,
    pub rekor: Option<Rekor>,
}
