//! `policies.kyverno.io` ImageValidatingPolicy and
//! NamespacedImageValidatingPolicy: a ValidatingPolicy whose validations
//! see the images of the matched resource and verify them.
//!
//! An ImageValidatingPolicy is compiled as a [`crate::vpol::ValidatingPolicy`]
//! (match constraints, match conditions, variables, validations, actions,
//! autogen, exceptions are the same) with an [`ImageChecks`] part, and
//! evaluated as Kyverno's image verification engine evaluates it:
//!
//! 1. match conditions (false: no result);
//! 2. the images: `containers`, `initContainers` and `ephemeralContainers`
//!    of the pod spec (a Pod's, a pod controller's template's, a CronJob's
//!    job template's) and the policy's own `images` extractors, keeping
//!    those `matchImageReferences` select (globs or CEL on `ref`);
//! 3. `validationConfigurations.verifyDigest` (default true): an image
//!    without a digest fails (`image X does not have a digest`);
//! 4. each image's data fetched first: an image the registry cannot give
//!    is the policy's error;
//! 5. `images`, `attestations` (name to name), `attestors` (name to the
//!    attestor, its `key.expression` evaluated) and the variables bound,
//!    then the validations, with `verifyImageSignatures`,
//!    `verifyAttestationSignatures`, `extractPayload` and `getImageData`;
//! 6. `required` (default true): a policy that passed fails when an image
//!    it matched was verified by no policy of the request
//!    ([`Verifications`], shared by the request's policies).
//!
//! Attestors: cosign public keys (`cosign.key.data` or
//! `cosign.key.expression`, a Secret's), keyless identities, certificates,
//! and notary certificates (`notary.certs.value` or `.expression`: Notary
//! Project signatures). Notary timestamp authorities (`tsaCerts`), other
//! KMS keys and OCI referrer attestations are refused with an error naming
//! them when a function is asked to use them: never counted as verified,
//! never silently passed over.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value as Json};

use crate::cel::{Activation, Expr};
use crate::error::{Error, Result};
use crate::model::nullable;
use crate::request::{ClusterData, EvalRequest, ImageTrust, KeylessIdentity};
use crate::result::Status;

/// The kinds compiled with an [`ImageChecks`] part.
pub const KINDS: &[&str] = &["ImageValidatingPolicy", "NamespacedImageValidatingPolicy"];

/// The image part of an ImageValidatingPolicy. Immutable.
#[derive(Debug, Clone)]
pub(crate) struct ImageChecks {
    /// `spec.images`: named extractors (CEL returning a list of images).
    extractors: Vec<(String, Expr)>,
    /// `spec.matchImageReferences` (none: every image).
    match_refs: Vec<ImageMatch>,
    attestors: Vec<Attestor>,
    /// `spec.attestations` by name.
    attestations: Vec<(String, Json)>,
    /// `validationConfigurations.verifyDigest` (default true).
    pub(crate) verify_digest: bool,
    /// `validationConfigurations.mutateDigest` (default true).
    pub(crate) mutate_digest: bool,
    /// `validationConfigurations.required` (default true).
    pub(crate) required: bool,
    /// `credentials.secrets`: Secrets whose credentials read registries.
    pub(crate) registry_secrets: Vec<String>,
}

/// What [`ImageChecks::compile`] reads of a `spec`. Attestors and
/// attestations stay JSON: the policy's CEL reads them as data.
#[derive(Default, serde::Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ImageSpec {
    #[serde(deserialize_with = "nullable")]
    images: Vec<crate::cel::rule::NamedExpression>,
    #[serde(deserialize_with = "nullable")]
    match_image_references: Vec<ImageReference>,
    #[serde(deserialize_with = "nullable")]
    attestors: Vec<Json>,
    #[serde(deserialize_with = "nullable")]
    attestations: Vec<Json>,
    #[serde(deserialize_with = "nullable")]
    validation_configurations: ValidationConfigurations,
    credentials: Option<crate::model::Credentials>,
}

/// A `matchImageReferences` entry.
#[derive(serde::Deserialize)]
struct ImageReference {
    glob: Option<String>,
    expression: Option<String>,
}

/// `spec.validationConfigurations` (each default true).
#[derive(Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ValidationConfigurations {
    verify_digest: Option<bool>,
    mutate_digest: Option<bool>,
    required: Option<bool>,
}

#[derive(Debug, Clone)]
enum ImageMatch {
    Glob(String),
    Expr(Expr),
}

#[derive(Debug, Clone)]
struct Attestor {
    name: String,
    doc: Json,
    /// `cosign.key.expression`, evaluated into `cosign.key.data`.
    key_expr: Option<Expr>,
    /// `notary.certs.expression`, evaluated into `notary.certs.value`.
    certs_expr: Option<Expr>,
}

/// cosign's short predicate type names (`cosign attest --type`).
pub(crate) fn predicate_uri(ty: &str) -> &str {
    match ty {
        "custom" => "https://cosign.sigstore.dev/attestation/v1",
        "slsaprovenance" | "slsaprovenance02" => "https://slsa.dev/provenance/v0.2",
        "slsaprovenance1" => "https://slsa.dev/provenance/v1",
        "spdx" | "spdxjson" => "https://spdx.dev/Document",
        "cyclonedx" => "https://cyclonedx.org/bom",
        "link" => "https://in-toto.io/Link/v1",
        "vuln" => "https://cosign.sigstore.dev/attestation/vuln/v1",
        "openvex" => "https://openvex.dev/ns",
        other => other,
    }
}

impl ImageChecks {
    /// Compiles the image part of `spec`; errors name the field.
    pub(crate) fn compile(spec: &Json, kind: &str, name: &str) -> Result<ImageChecks> {
        let invalid = |field: String, msg: String| Error::invalid(kind, name, field, msg);
        let spec: ImageSpec = crate::model::parse(spec, "spec", &invalid)?;
        let expr = |source: Option<&str>, field: String| -> Result<Expr> {
            let text =
                source.ok_or_else(|| invalid(field.clone(), "an expression is required".into()))?;
            Expr::compile(text).map_err(|e| invalid(field, e))
        };
        let named = |v: &Json, field: &str| -> Result<String> {
            v["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .ok_or_else(|| invalid(format!("{field}.name"), "name is required".into()))
        };
        let mut extractors = Vec::new();
        for (i, e) in spec.images.iter().enumerate() {
            let f = format!("spec.images[{i}]");
            let Some(name) = e.name.clone().filter(|n| !n.is_empty()) else {
                return Err(invalid(format!("{f}.name"), "name is required".into()));
            };
            let expr = expr(e.expression.as_deref(), format!("{f}.expression"))?;
            extractors.push((name, expr));
        }
        let mut match_refs = Vec::new();
        for (i, m) in spec.match_image_references.iter().enumerate() {
            let f = format!("spec.matchImageReferences[{i}]");
            match (&m.glob, &m.expression) {
                (Some(g), _) if !g.is_empty() => match_refs.push(ImageMatch::Glob(g.to_string())),
                (_, Some(e)) => {
                    match_refs.push(ImageMatch::Expr(expr(Some(e), format!("{f}.expression"))?))
                }
                _ => {
                    return Err(invalid(f, "either glob or expression must be set".into()));
                }
            }
        }
        let mut attestors = Vec::new();
        for (i, a) in spec.attestors.iter().enumerate() {
            let f = format!("spec.attestors[{i}]");
            let name = named(a, &f)?;
            let key_expr = match &a["cosign"]["key"]["expression"] {
                Json::Null => None,
                e => Some(expr(e.as_str(), format!("{f}.cosign.key.expression"))?),
            };
            let certs_expr = match &a["notary"]["certs"]["expression"] {
                Json::Null => None,
                e => Some(expr(e.as_str(), format!("{f}.notary.certs.expression"))?),
            };
            if a["cosign"].is_null() && a["notary"].is_null() {
                return Err(invalid(f, "either cosign or notary must be set".into()));
            }
            attestors.push(Attestor {
                name,
                doc: a.clone(),
                key_expr,
                certs_expr,
            });
        }
        let mut attestations = Vec::new();
        for (i, a) in spec.attestations.iter().enumerate() {
            let f = format!("spec.attestations[{i}]");
            let name = named(a, &f)?;
            if a["intoto"]["type"].as_str().is_none() && a["referrer"]["type"].as_str().is_none() {
                return Err(invalid(
                    f,
                    "either intoto.type or referrer.type must be set".into(),
                ));
            }
            attestations.push((name, a.clone()));
        }
        let c = &spec.validation_configurations;
        Ok(ImageChecks {
            extractors,
            match_refs,
            attestors,
            attestations,
            verify_digest: c.verify_digest.unwrap_or(true),
            mutate_digest: c.mutate_digest.unwrap_or(true),
            required: c.required.unwrap_or(true),
            registry_secrets: match &spec.credentials {
                Some(c) => crate::policy::credential_secrets(c, "spec.credentials", &invalid)?,
                None => Vec::new(),
            },
        })
    }

    /// Whether `matchImageReferences` select `image` (all do when empty).
    pub(crate) fn matches_image(&self, image: &str) -> Result<bool, String> {
        if self.match_refs.is_empty() {
            return Ok(true);
        }
        for m in &self.match_refs {
            let hit = match m {
                ImageMatch::Glob(g) => crate::wildcard::matches(g, image),
                ImageMatch::Expr(e) => e.eval_image_match(image)?,
            };
            if hit {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn attestation(&self, name: &str) -> Result<&Json, String> {
        self.attestations
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
            .ok_or_else(|| format!("attestation not found in policy: {name}"))
    }

    /// The images of the object by kind (`containers`, ...), those
    /// `matchImageReferences` select, and all of them in order.
    fn images(
        &self,
        req: &EvalRequest,
        act: &Activation<'_, '_>,
    ) -> std::result::Result<(Map<String, Json>, Vec<String>), String> {
        let object = if req.object.is_null() {
            req.old_object.as_deref().unwrap_or(&Json::Null)
        } else {
            &req.object
        };
        let mut by_kind: Vec<(String, Vec<String>)> = Vec::new();
        if let Some(spec) = crate::images::pod_spec(object) {
            for field in ["containers", "initContainers", "ephemeralContainers"] {
                let list = spec[field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["image"].as_str().map(str::to_string))
                    .collect();
                by_kind.push((field.to_string(), list));
            }
        }
        for (name, e) in &self.extractors {
            let value = e.eval(act)?;
            let list = value
                .json()
                .ok()
                .and_then(|v| {
                    v.as_array().map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(str::to_string))
                            .collect::<Vec<_>>()
                    })
                })
                .ok_or_else(|| format!("image extractor {name}: expected a list of strings"))?;
            by_kind.retain(|(n, _)| n != name);
            by_kind.push((name.clone(), list));
        }
        let mut out = Map::new();
        let mut all = Vec::new();
        for (name, list) in by_kind {
            let mut kept = Vec::new();
            for image in list {
                if self.matches_image(&image)? {
                    all.push(image.clone());
                    kept.push(Json::String(image));
                }
            }
            out.insert(name, Json::Array(kept));
        }
        Ok((out, all))
    }

    /// The `attestors` variable: each attestor by name, its key expression
    /// evaluated into `cosign.key.data`.
    fn attestors_value(&self, act: &Activation<'_, '_>) -> std::result::Result<Json, String> {
        let mut out = Map::new();
        for a in &self.attestors {
            let mut doc = a.doc.clone();
            if let Some(e) = &a.key_expr {
                let key = e
                    .eval_string(act)
                    .map_err(|e| format!("attestor {}: key expression: {e}", a.name))?;
                doc["cosign"]["key"]["data"] = Json::String(key);
            }
            if let Some(e) = &a.certs_expr {
                let certs = e
                    .eval_string(act)
                    .map_err(|e| format!("attestor {}: certs expression: {e}", a.name))?;
                doc["notary"]["certs"]["value"] = Json::String(certs);
            }
            out.insert(a.name.clone(), doc);
        }
        Ok(Json::Object(out))
    }

    /// The `attestations` variable: name to name, as Kyverno binds it.
    fn attestations_value(&self) -> Json {
        Json::Object(
            self.attestations
                .iter()
                .map(|(n, _)| (n.clone(), Json::String(n.clone())))
                .collect(),
        )
    }
}

/// What the image verification functions of a request's policies verified:
/// by image, whether one verification held. Shared by the request's
/// ImageValidatingPolicies, for `required`.
///
/// # Invariants
/// The mutex is held only to read or update one entry, never across a
/// registry lookup or an expression.
#[derive(Debug, Default)]
pub(crate) struct Verifications {
    seen: Mutex<HashMap<String, bool>>,
}

impl Verifications {
    fn record(&self, image: &str, verified: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        *seen.entry(image.to_string()).or_default() |= verified;
    }

    /// Kyverno's `required` message for the first of `images` no policy
    /// verified; None when every one was.
    pub(crate) fn unverified(&self, images: &[String]) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        images.iter().find_map(|image| match seen.get(image) {
            Some(true) => None,
            Some(false) => Some(format!(
                "image {image} failed signature or attestation verification"
            )),
            None => Some(format!(
                "image {image} is not verified: no policy performed a signature or attestation check on it"
            )),
        })
    }
}

/// One evaluation's image verification functions: the registry data, the
/// policy's attestations, what was verified, and the attestation payloads
/// verified so far (`extractPayload` reads only those).
pub(crate) struct Verifier<'a> {
    data: &'a dyn ClusterData,
    checks: &'a ImageChecks,
    record: &'a Verifications,
    /// Verified in-toto statements by (image, attestation name).
    payloads: Mutex<HashMap<(String, String), Json>>,
}

/// What an attestor trusts (its cosign public key, or its keyless roots
/// and identities), or why leash cannot verify it as Kyverno would (the
/// function then errs: never counted as verified). None for an attestor
/// of neither kind.
fn cosign_trust(attestor: &Json) -> std::result::Result<Option<ImageTrust>, String> {
    let name = attestor["name"].as_str().unwrap_or("");
    let cosign = &attestor["cosign"];
    if !cosign.is_null() {
        // Kyverno checks signatures against Rekor (and a keyless
        // certificate's SCT) unless told not to; leash reads neither log.
        if cosign["ctlog"]["insecureIgnoreTlog"].as_bool() != Some(true) {
            return Err(format!(
                "attestor {name}: the signatures must be verified against a transparency log (Rekor), which leash does not read; set cosign.ctlog.insecureIgnoreTlog: true to verify them without it"
            ));
        }
        if let Some(pem) = cosign["key"]["data"]
            .as_str()
            .filter(|p| !p.trim().is_empty())
        {
            return Ok(Some(ImageTrust::Keys(pem.to_string())));
        }
        let keyless = &cosign["keyless"];
        if !keyless.is_null() {
            if cosign["ctlog"]["insecureIgnoreSCT"].as_bool() != Some(true) {
                return Err(format!(
                    "attestor {name}: the certificate's SCT must be verified against a certificate transparency log, which leash does not read; set cosign.ctlog.insecureIgnoreSCT: true"
                ));
            }
            // No roots: Sigstore's trust root (TUF), if leash was given one.
            let roots = keyless["roots"].as_str().unwrap_or_default();
            let text = |v: &Json, k: &str| v[k].as_str().unwrap_or_default().to_string();
            let identities = keyless["identities"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| KeylessIdentity {
                    issuer: text(i, "issuer"),
                    subject: text(i, "subject"),
                    issuer_regexp: text(i, "issuerRegExp"),
                    subject_regexp: text(i, "subjectRegExp"),
                    wildcards: false,
                })
                .collect();
            return Ok(Some(ImageTrust::Keyless {
                roots: roots.to_string(),
                identities,
            }));
        }
        let certificate = &cosign["certificate"];
        if let Some(cert) = certificate["cert"]["value"]
            .as_str()
            .filter(|c| !c.trim().is_empty())
        {
            return Ok(Some(ImageTrust::Certificate {
                cert: cert.to_string(),
                chain: certificate["certChain"]["value"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            }));
        }
        // cosign's key reference: a Secret's `cosign.pub`.
        if let Some(reference) = cosign["key"]["kms"]
            .as_str()
            .filter(|k| k.starts_with("k8s://"))
        {
            let parts: Vec<&str> = reference["k8s://".len()..].split('/').collect();
            return match parts.as_slice() {
                [namespace, secret] if !namespace.is_empty() && !secret.is_empty() => {
                    Ok(Some(ImageTrust::Secret {
                        namespace: namespace.to_string(),
                        name: secret.to_string(),
                    }))
                }
                _ => Err(format!(
                    "attestor {name}: failed to load public key from {reference}: kubernetes specification should be in the format k8s://<namespace>/<secret>"
                )),
            };
        }
        return Err(format!(
            "attestor {name}: leash verifies cosign public keys (cosign.key.data, cosign.key.expression, or a Secret's as cosign.key.kms: k8s://NAMESPACE/NAME), keyless signatures (cosign.keyless) and certificates (cosign.certificate.cert.value); certificate expressions and other KMS keys are not supported yet"
        ));
    }
    let notary = &attestor["notary"];
    if !notary.is_null() {
        let given = |v: &Json| {
            v["value"].as_str().is_some_and(|t| !t.trim().is_empty()) || !v["expression"].is_null()
        };
        // A timestamp authority would let a signature outlive its
        // certificate; leash checks none, so it does not pretend to.
        if given(&notary["tsaCerts"]) {
            return Err(format!(
                "attestor {name}: notary.tsaCerts (timestamp countersignatures) are not verified by leash yet"
            ));
        }
        let certs = notary["certs"]["value"]
            .as_str()
            .filter(|c| !c.trim().is_empty())
            .ok_or_else(|| {
                format!("attestor {name}: failed to parse certificates: notary.certs is empty")
            })?;
        return Ok(Some(ImageTrust::Notary {
            certs: certs.to_string(),
        }));
    }
    Ok(None)
}

fn attestor_list(attestors: &Json) -> std::result::Result<&[Json], String> {
    attestors
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| "expected a list of attestors".to_string())
}

impl<'a> Verifier<'a> {
    /// `verifyImageSignatures(image, attestors)`: how many of the
    /// attestors verify a signature of the image (0 for an image
    /// `matchImageReferences` do not select).
    pub(crate) fn signatures(
        &self,
        image: &str,
        attestors: &Json,
    ) -> std::result::Result<i64, String> {
        if !self.checks.matches_image(image)? {
            return Ok(0);
        }
        let list = attestor_list(attestors)?;
        let mut count = 0;
        for a in list {
            let Some(trust) = cosign_trust(a)? else {
                continue;
            };
            // A key whose Secret cannot be read is the function's error,
            // as cosign's "failed to load public key".
            let trust = crate::eval::resolve_trust(self.data, &trust)
                .map_err(|e| format!("failed to load public key: {e}"))?;
            if self.data.verify_image(image, &trust).is_ok() {
                count += 1;
            }
        }
        if !list.is_empty() {
            self.record.record(image, count > 0);
        }
        Ok(count)
    }

    /// `verifyAttestationSignatures(image, attestation, attestors)`: how
    /// many of the attestors signed an in-toto attestation of the
    /// attestation's predicate type for the image; the verified statement
    /// is kept for `extractPayload`.
    pub(crate) fn attestations(
        &self,
        image: &str,
        attestation: &str,
        attestors: &Json,
    ) -> std::result::Result<i64, String> {
        if !self.checks.matches_image(image)? {
            return Ok(0);
        }
        let def = self.checks.attestation(attestation)?;
        let list = attestor_list(attestors)?;
        let mut count = 0;
        for a in list {
            let Some(trust) = cosign_trust(a)? else {
                continue;
            };
            if let ImageTrust::Notary { .. } = trust {
                // Notary signs OCI referrers (Kyverno: "notary verifier
                // only supports oci 1.1 referrers as attestations").
                let Some(ty) = def["referrer"]["type"].as_str() else {
                    return Err(
                        "notary verifier only supports oci 1.1 referrers as attestations"
                            .to_string(),
                    );
                };
                if let Ok(payload) = self.data.verify_referrers(image, ty, &trust) {
                    count += 1;
                    self.payloads
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((image.to_string(), attestation.to_string()), payload);
                }
                continue;
            }
            // cosign verifies in-toto attestations only (Kyverno: "cosign
            // verifier only supports intoto referrers as attestations").
            let Some(ty) = def["intoto"]["type"].as_str() else {
                continue;
            };
            let want = predicate_uri(ty);
            let trust = crate::eval::resolve_trust(self.data, &trust)
                .map_err(|e| format!("failed to load public key: {e}"))?;
            let Ok(statements) = self.data.verify_attestations(image, &trust) else {
                continue;
            };
            if let Some(s) = statements
                .iter()
                .rev()
                .find(|s| s["predicateType"].as_str() == Some(want))
            {
                count += 1;
                self.payloads
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((image.to_string(), attestation.to_string()), s.clone());
            }
        }
        if !list.is_empty() {
            self.record.record(image, count > 0);
        }
        Ok(count)
    }

    /// `extractPayload(image, attestation)`: the in-toto statement, or the
    /// OCI referrer's payload, a `verifyAttestationSignatures` call
    /// verified. (Kyverno hands out an OCI referrer's payload that no call
    /// verified, the first of its type; leash reads only verified ones, as
    /// it does in-toto statements.)
    pub(crate) fn payload(
        &self,
        image: &str,
        attestation: &str,
    ) -> std::result::Result<Json, String> {
        let def = self.checks.attestation(attestation)?;
        if def["intoto"].is_null() {
            return self
                .payloads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&(image.to_string(), attestation.to_string()))
                .cloned()
                .ok_or_else(|| {
                    format!(
                        "failed to get payload: attestation {attestation}: leash reads an OCI referrer's payload once verifyAttestationSignatures verified it"
                    )
                });
        }
        self.payloads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(image.to_string(), attestation.to_string()))
            .cloned()
            .ok_or_else(|| {
                "failed to get payload: intoto attestation payload cannot be fetch before verifying intoto attestation".to_string()
            })
    }

    /// `getImageData(image)`: the image's data (`image.GetMetadata`'s).
    pub(crate) fn image_data(&self, image: &str) -> std::result::Result<Json, String> {
        self.data.image_data(image)
    }
}

/// The outcome of an ImageValidatingPolicy on a request: None when a match
/// condition is false (Kyverno gives no result); else the status, the
/// message and, for a pass, the images it matched (for `required`).
pub(crate) type Outcome = Option<(Status, String, Vec<String>)>;

/// Evaluates the image part after the match constraints selected `req`:
/// see the module documentation for the steps.
pub(crate) fn run(
    checks: &ImageChecks,
    body: &crate::vpol::BodyParts<'_>,
    ignore_failures: bool,
    req: &EvalRequest,
    data: &dyn ClusterData,
    record: &Verifications,
) -> Outcome {
    let verifier = Verifier {
        data,
        checks,
        record,
        payloads: Mutex::default(),
    };
    let mut act = Activation::new(req, data);
    let mut errors = Vec::new();
    for (name, cond) in body.conditions {
        match cond.eval_bool(&act) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => errors.push(format!("match condition '{name}': {e}")),
        }
    }
    if !errors.is_empty() {
        if ignore_failures {
            return None;
        }
        return Some((Status::Error, errors.join("; "), Vec::new()));
    }
    let error = |e: String| {
        Some((
            Status::Error,
            format!("failed to evaluate policy: {e}"),
            Vec::new(),
        ))
    };
    let (images, matched) = match checks.images(req, &act) {
        Ok(found) => found,
        Err(e) => return error(e),
    };
    if checks.verify_digest
        && let Some(image) = matched.iter().find(|i| !i.contains('@'))
    {
        return Some((
            Status::Fail,
            format!("image {image} does not have a digest"),
            Vec::new(),
        ));
    }
    // Every image's data first, as Kyverno fetches it: one the registry
    // cannot give is the policy's error.
    // Every lookup is made before the first error is returned: images not
    // fetched yet are then all fetched at once.
    let mut first_error = None;
    for image in &matched {
        if let Err(e) = data.image_data(image) {
            first_error.get_or_insert(format!("failed to fetch image data for {image}: {e}"));
        }
    }
    if let Some(e) = first_error {
        return error(e);
    }
    act.bind_json("images", &Json::Object(images));
    act.bind_json("attestations", &checks.attestations_value());
    match checks.attestors_value(&act) {
        Ok(a) => act.bind_json("attestors", &a),
        Err(e) => return error(e),
    }
    act.bind_image_verifier(&verifier);
    act.bind_variables(body.variables);
    if let Some((status, message)) = crate::vpol::run_validations(body.validations, &act) {
        return Some((status, message, Vec::new()));
    }
    let pending = if checks.required { matched } else { Vec::new() };
    Some((Status::Pass, "success".to_string(), pending))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::engine::Engine;
    use crate::result::RuleResult;

    const KEY: &str = "-----BEGIN PUBLIC KEY-----\nSIGNER\n-----END PUBLIC KEY-----";
    const OTHER: &str = "-----BEGIN PUBLIC KEY-----\nOTHER\n-----END PUBLIC KEY-----";
    const NO_TRUST_ROOT: &str = "keyless: no roots in the policy and no Sigstore trust root configured (leash serve --tuf-root FILE --tuf-mirror URL)";
    const CERT: &str = "-----BEGIN CERTIFICATE-----\nSIGNER\n-----END CERTIFICATE-----";
    const ROOTS: &str = "-----BEGIN CERTIFICATE-----\nROOT\n-----END CERTIFICATE-----";
    const D: &str = "@sha256:0000000000000000000000000000000000000000000000000000000000000001";

    /// A registry where `reg.io/signed` is signed and attested (an SBOM
    /// with `bomFormat: CycloneDX`) with KEY, `reg.io/down` cannot be
    /// read, and every other image exists unsigned.
    #[derive(Debug)]
    struct Registry;

    impl ClusterData for Registry {
        /// The Secret `keys/cosign` holds KEY in `cosign.pub`, as `cosign
        /// generate-key-pair k8s://keys/cosign` writes it; `keys/empty`
        /// holds none.
        fn get(&self, av: &str, resource: &str, ns: &str, name: &str) -> Option<Arc<Json>> {
            use base64::Engine as _;
            let data = match (av, resource, ns, name) {
                ("v1", "secrets", "keys", "cosign") => json!({
                    "cosign.pub": base64::engine::general_purpose::STANDARD.encode(KEY),
                    "cosign.key": "c2VjcmV0"}),
                ("v1", "secrets", "keys", "empty") => json!({}),
                _ => return None,
            };
            Some(Arc::new(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": ns}, "data": data})))
        }
        fn list(&self, _: &str, _: &str, _: &str) -> Vec<Arc<Json>> {
            Vec::new()
        }
        fn image_data(&self, image: &str) -> std::result::Result<Json, String> {
            if image.starts_with("reg.io/down") {
                return Err(format!(
                    "image {image}: registry reg.io: connection refused"
                ));
            }
            Ok(json!({"image": image, "config": {"config": {"Labels": {"team": "a"}}}}))
        }
        fn verify_image(
            &self,
            image: &str,
            trust: &ImageTrust,
        ) -> std::result::Result<String, String> {
            let keyless_ok = matches!(trust, ImageTrust::Keyless { roots, identities }
                if roots == ROOTS && identities.len() == 1 && identities[0].issuer == "https://issuer"
                    && (identities[0].wildcards == identities[0].subject.contains('*')));
            if image.starts_with("reg.io/keyless") && keyless_ok {
                return Ok(D[1..].to_string());
            }
            if matches!(trust, ImageTrust::Keyless { roots, .. } if roots.is_empty()) {
                return Err(NO_TRUST_ROOT.to_string());
            }
            let by_certificate =
                matches!(trust, ImageTrust::Certificate { cert, .. } if cert == CERT);
            if image.starts_with("reg.io/signed")
                && (*trust == ImageTrust::Keys(KEY.into()) || by_certificate)
            {
                Ok(D[1..].to_string())
            } else {
                Err("no matching signatures".into())
            }
        }
        fn verify_attestations(
            &self,
            image: &str,
            trust: &ImageTrust,
        ) -> std::result::Result<Vec<Json>, String> {
            if image.starts_with("reg.io/signed") && *trust == ImageTrust::Keys(KEY.into()) {
                Ok(vec![json!({"_type": "https://in-toto.io/Statement/v0.1",
                    "predicateType": "https://cyclonedx.org/bom",
                    "predicate": {"bomFormat": "CycloneDX"}})])
            } else {
                Err("no matching attestations".into())
            }
        }
    }

    fn doc(name: &str, spec: Json) -> Json {
        json!({"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
            "metadata": {"name": name}, "spec": spec})
    }

    fn spec(validations: Json, extra: Json) -> Json {
        let mut s = json!({
            "validationActions": ["Deny"],
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchImageReferences": [{"glob": "reg.io/*"}],
            "attestors": [{"name": "k", "cosign": {"key": {"data": KEY}, "ctlog": {"insecureIgnoreTlog": true}}},
                          {"name": "other", "cosign": {"key": {"data": OTHER}, "ctlog": {"insecureIgnoreTlog": true}}}],
            "attestations": [{"name": "sbom", "intoto": {"type": "cyclonedx"}}],
            "validations": validations,
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            s[k] = v.clone();
        }
        s
    }

    fn signed_check() -> Json {
        json!([{"expression":
            "images.containers.map(i, verifyImageSignatures(i, [attestors.k])).all(c, c > 0)",
            "message": "unsigned image"}])
    }

    fn pod(images: &[&str]) -> Json {
        let containers: Vec<Json> = images
            .iter()
            .enumerate()
            .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
            .collect();
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": containers}})
    }

    fn run(docs: &[Json], object: Json) -> Vec<RuleResult> {
        let mut engine = Engine::new();
        for d in docs {
            engine.add_json(d).unwrap_or_else(|e| panic!("{e}"));
        }
        let req = EvalRequest::create(Arc::new(object));
        engine
            .evaluation(&Registry)
            .validate(&crate::Prepared::new(req))
            .into_vec()
    }

    fn one(docs: &[Json], object: Json) -> (Status, String) {
        let results = run(docs, object);
        assert_eq!(results.len(), 1, "{results:?}");
        (results[0].status, results[0].message.clone())
    }

    #[test]
    fn signatures_decide_by_key_and_image_reference() {
        let p = doc("sig", spec(signed_check(), json!({})));
        let signed = format!("reg.io/signed:1{D}");
        let unsigned = format!("reg.io/unsigned:1{D}");
        assert_eq!(
            one(std::slice::from_ref(&p), pod(&[&signed])).0,
            Status::Pass
        );
        assert_eq!(
            one(std::slice::from_ref(&p), pod(&[&signed, &unsigned])),
            (Status::Fail, "unsigned image".to_string())
        );
        // An image matchImageReferences leave out is neither checked nor
        // required.
        let elsewhere = format!("other.io/app:1{D}");
        assert_eq!(
            one(std::slice::from_ref(&p), pod(&[&signed, &elsewhere])).0,
            Status::Pass
        );
        let results = run(&[p], pod(&[]));
        assert_eq!(results[0].status, Status::Pass);
        assert_eq!(
            results[0].source,
            crate::result::Source::ImageValidatingPolicy
        );
    }

    #[test]
    fn a_tag_without_digest_fails_unless_verify_digest_is_off() {
        let p = doc("sig", spec(signed_check(), json!({})));
        assert_eq!(
            one(&[p], pod(&["reg.io/signed:1"])),
            (
                Status::Fail,
                "image reg.io/signed:1 does not have a digest".to_string()
            )
        );
        let p = doc(
            "sig",
            spec(
                signed_check(),
                json!({"validationConfigurations": {"verifyDigest": false}}),
            ),
        );
        assert_eq!(one(&[p], pod(&["reg.io/signed:1"])).0, Status::Pass);
    }

    #[test]
    fn attestations_are_verified_then_read() {
        let checks = json!([
            {"expression": "images.containers.map(i, verifyAttestationSignatures(i, attestations.sbom, [attestors.k])).all(c, c > 0)",
             "message": "no signed sbom"},
            {"expression": "images.containers.map(i, extractPayload(i, attestations.sbom).predicate.bomFormat == 'CycloneDX').all(e, e)",
             "message": "not cyclonedx"}]);
        let p = doc("att", spec(checks, json!({})));
        assert_eq!(
            one(
                std::slice::from_ref(&p),
                pod(&[&format!("reg.io/signed:1{D}")])
            )
            .0,
            Status::Pass
        );
        assert_eq!(
            one(&[p], pod(&[&format!("reg.io/unsigned:1{D}")])),
            (Status::Fail, "no signed sbom".to_string())
        );
        // The payload of an attestation not verified first is an error.
        let read_only = json!([{"expression":
            "images.containers.all(i, extractPayload(i, attestations.sbom).predicate.bomFormat == 'CycloneDX')"}]);
        let p = doc("read", spec(read_only, json!({})));
        let (status, message) = one(&[p], pod(&[&format!("reg.io/signed:1{D}")]));
        assert_eq!(status, Status::Error);
        assert!(
            message.contains("cannot be fetch before verifying"),
            "{message}"
        );
    }

    #[test]
    fn required_asks_for_a_verification_by_some_policy_of_the_request() {
        let labels = json!([{"expression":
            "images.containers.all(i, getImageData(i).config.config.Labels.team == 'a')"}]);
        let image = format!("reg.io/signed:1{D}");
        let lone = doc("labels", spec(labels.clone(), json!({})));
        let (status, message) = one(std::slice::from_ref(&lone), pod(&[&image]));
        assert_eq!(status, Status::Fail);
        assert_eq!(
            message,
            format!(
                "image {image} is not verified: no policy performed a signature or attestation check on it"
            )
        );
        // Another policy of the request verified it.
        let results = run(
            &[lone, doc("sig", spec(signed_check(), json!({})))],
            pod(&[&image]),
        );
        assert!(
            results.iter().all(|r| r.status == Status::Pass),
            "{results:?}"
        );
        let off = doc(
            "labels",
            spec(
                labels,
                json!({"validationConfigurations": {"required": false}}),
            ),
        );
        assert_eq!(one(&[off], pod(&[&image])).0, Status::Pass);
    }

    #[test]
    fn unreadable_registries_and_unsupported_attestors_are_errors() {
        let p = doc("sig", spec(signed_check(), json!({})));
        let (status, message) = one(&[p], pod(&[&format!("reg.io/down:1{D}")]));
        assert_eq!(status, Status::Error);
        assert!(message.contains("connection refused"), "{message}");
        let tlog = json!({"attestors": [{"name": "k", "cosign": {"key": {"data": KEY}}}]});
        let p = doc("tlog", spec(signed_check(), tlog));
        let (status, message) = one(&[p], pod(&[&format!("reg.io/signed:1{D}")]));
        assert_eq!(status, Status::Error);
        assert!(message.contains("insecureIgnoreTlog: true"), "{message}");
        let notary = json!({"attestors": [{"name": "k", "notary": {
            "certs": {"value": "x"}, "tsaCerts": {"value": "y"}}}]});
        let p = doc("notary", spec(signed_check(), notary));
        let (status, message) = one(&[p], pod(&[&format!("reg.io/signed:1{D}")]));
        assert_eq!(status, Status::Error);
        assert!(
            message.contains("notary.tsaCerts (timestamp countersignatures) are not verified"),
            "{message}"
        );
    }

    #[test]
    fn exceptions_skip_and_autogen_covers_controllers() {
        let p = doc("sig", spec(signed_check(), json!({})));
        let exception = json!({"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
            "metadata": {"name": "skip-p", "namespace": "ns"},
            "spec": {"policyRefs": [{"name": "sig", "kind": "ImageValidatingPolicy"}],
                "matchConditions": [{"name": "n", "expression": "object.metadata.name == 'p'"}]}});
        let (status, message) = one(
            &[p.clone(), exception],
            pod(&[&format!("reg.io/unsigned:1{D}")]),
        );
        assert_eq!(status, Status::Skip);
        assert!(message.contains("ns/skip-p"), "{message}");
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": format!("reg.io/unsigned:1{D}")}]}}}});
        assert_eq!(one(&[p], deployment).0, Status::Fail);
    }

    /// A ClusterPolicy's `verifyImages` `attestations` (Kyverno's
    /// verifyAttestations), on the same registry.
    #[test]
    fn cluster_policy_attestations_are_verified_and_their_conditions_checked() {
        let policy = |value: &str, ty: Json| {
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "att"},
                "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "sbom",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [{"imageReferences": ["reg.io/*"], "mutateDigest": false,
                        "attestations": [{"type": ty,
                            "attestors": [{"entries": [{"keys": {"publicKeys": KEY,
                                "rekor": {"ignoreTlog": true}}}]}],
                            "conditions": [{"all": [{"key": "{{ bomFormat }}",
                                "operator": "Equals", "value": value}]}]}]}]}]}})
        };
        let signed = format!("reg.io/signed:1{D}");
        assert_eq!(
            one(&[policy("CycloneDX", json!("cyclonedx"))], pod(&[&signed])),
            (
                Status::Pass,
                // Kyverno's ImageInfo: the tag left out beside a digest.
                format!("verified image attestations for reg.io/signed{D}")
            )
        );
        let (status, message) = one(&[policy("SPDX", json!("cyclonedx"))], pod(&[&signed]));
        assert_eq!(status, Status::Fail);
        assert!(
            message.starts_with(
                "image attestations verification failed, verifiedCount: 0, requiredCount: 1, error: .attestations[0].attestors[0].entries[0].keys: attestation checks failed for"
            ),
            "{message}"
        );
        let unsigned = format!("reg.io/unsigned:1{D}");
        let (status, message) = one(
            &[policy("CycloneDX", json!("cyclonedx"))],
            pod(&[&unsigned]),
        );
        assert_eq!(status, Status::Fail);
        assert!(
            message.ends_with("error: no matching attestations"),
            "{message}"
        );
        let (status, message) = one(
            &[policy("CycloneDX", json!("https://spdx.dev/Document"))],
            pod(&[&signed]),
        );
        assert_eq!(status, Status::Fail);
        assert!(
            message.contains("attestions not found for predicate type https://spdx.dev/Document"),
            "{message}"
        );
        let (status, message) = one(&[policy("CycloneDX", Json::Null)], pod(&[&signed]));
        assert_eq!(
            (status, message.as_str()),
            (Status::Fail, ".attestations[0]: missing type")
        );
        // A key whose signatures Kyverno would check in the transparency
        // log (no `rekor.ignoreTlog`) is not verified by key alone: the
        // rule errs, whatever the registry holds.
        let tlog = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "tlog"},
            "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "sig",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "verifyImages": [{"imageReferences": ["reg.io/*"],
                    "attestors": [{"entries": [{"keys": {"publicKeys": KEY}}]}]}]}]}});
        let (status, message) = one(&[tlog], pod(&[&signed]));
        assert_eq!(status, Status::Error);
        assert!(
            message.starts_with(&format!(
                "failed to verify image reg.io/signed@{}: .attestors[0].entries[0]: keys: the signatures must be verified against a transparency log",
                &D[1..]
            )),
            "{message}"
        );
    }

    /// Keys kept in a Secret (cosign's `k8s://NAMESPACE/NAME`, a
    /// ClusterPolicy's `keys.secret`, an ImageValidatingPolicy's
    /// `cosign.key.kms`) verify as the PEM key in its `cosign.pub`; a
    /// Secret that is missing or holds no key, or a malformed reference,
    /// is the rule's error.
    #[test]
    fn keys_in_secrets_verify_as_their_cosign_pub() {
        let signed = format!("reg.io/signed:1{D}");
        let unsigned = format!("reg.io/unsigned:1{D}");
        let classic = |keys: Json| {
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "from-secret"},
                "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "sig",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [{"imageReferences": ["reg.io/*"], "mutateDigest": false,
                        "attestors": [{"entries": [{"keys": keys}]}]}]}]}})
        };
        let ignore = json!({"ignoreTlog": true});
        for keys in [
            json!({"publicKeys": "k8s://keys/cosign", "rekor": ignore}),
            json!({"secret": {"namespace": "keys", "name": "cosign"}, "rekor": ignore}),
        ] {
            let p = classic(keys.clone());
            assert_eq!(
                one(std::slice::from_ref(&p), pod(&[&signed])),
                (
                    Status::Pass,
                    format!("verified image signatures for reg.io/signed{D}")
                ),
                "{keys}"
            );
            assert_eq!(
                one(&[p], pod(&[&unsigned])).0,
                Status::Fail,
                "{keys}: the Secret's key did not sign it"
            );
        }
        // A key that cannot be loaded fails the verification, as cosign's
        // error fails it in Kyverno; a reference leash cannot use errs.
        for (keys, status, why) in [
            (
                json!({"publicKeys": "k8s://keys/missing", "rekor": ignore}),
                Status::Fail,
                ".attestors[0].entries[0].keys: checking if secret exists: secrets \"missing\" not found",
            ),
            (
                json!({"publicKeys": "k8s://keys/empty", "rekor": ignore}),
                Status::Fail,
                "secret keys/empty holds no PEM public key in cosign.pub",
            ),
            (
                json!({"publicKeys": "k8s://just-a-name", "rekor": ignore}),
                Status::Error,
                "kubernetes specification should be in the format k8s://<namespace>/<secret>",
            ),
            (
                json!({"publicKeys": "k8s://keys/cosign"}),
                Status::Error,
                "the signatures must be verified against a transparency log",
            ),
        ] {
            let (got, message) = one(&[classic(keys.clone())], pod(&[&signed]));
            assert_eq!(got, status, "{keys}: {message}");
            assert!(message.contains(why), "{keys}: {message}");
        }
        // An ImageValidatingPolicy's `cosign.key.kms: k8s://...`.
        let kms = |reference: &str| {
            let mut s = spec(signed_check(), json!({}));
            s["attestors"][0]["cosign"]["key"] = json!({"kms": reference});
            doc("kms", s)
        };
        assert_eq!(
            one(&[kms("k8s://keys/cosign")], pod(&[&signed])).0,
            Status::Pass
        );
        assert_eq!(
            one(&[kms("k8s://keys/cosign")], pod(&[&unsigned])),
            (Status::Fail, "unsigned image".to_string())
        );
        let (status, message) = one(&[kms("k8s://keys/missing")], pod(&[&signed]));
        assert_eq!(status, Status::Error, "{message}");
        assert!(
            message.contains("failed to load public key: checking if secret exists"),
            "{message}"
        );
    }

    /// Keyless attestors reach the registry as their roots and identities:
    /// a ClusterPolicy's subject a Kyverno wildcard, an
    /// ImageValidatingPolicy's identities exact; an attestor leaving the
    /// transparency logs on errs.
    #[test]
    fn keyless_attestors_pass_their_roots_and_identities() {
        let image = format!("reg.io/keyless:1{D}");
        let ctlog = json!({"insecureIgnoreTlog": true, "insecureIgnoreSCT": true});
        let attestor = |ctlog: Json| {
            json!({"attestors": [{"name": "k", "cosign": {"keyless": {
                "identities": [{"issuer": "https://issuer", "subject": "dev@example.com"}],
                "roots": ROOTS}, "ctlog": ctlog}}]})
        };
        let p = doc("kl", spec(signed_check(), attestor(ctlog)));
        assert_eq!(one(&[p], pod(&[&image])).0, Status::Pass);
        let p = doc(
            "kl",
            spec(
                signed_check(),
                attestor(json!({"insecureIgnoreTlog": true})),
            ),
        );
        let (status, message) = one(&[p], pod(&[&image]));
        assert_eq!(status, Status::Error);
        assert!(message.contains("insecureIgnoreSCT: true"), "{message}");
        let cpol = |keyless: Json| {
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "kl"},
                "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "sig",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [{"imageReferences": ["reg.io/*"],
                        "attestors": [{"entries": [{"keyless": keyless}]}]}]}]}})
        };
        let rekor = json!({"url": "https://rekor.example.com", "ignoreTlog": true});
        let keyless = json!({"issuer": "https://issuer", "subject": "*@example.com",
            "roots": ROOTS, "rekor": rekor, "ctlog": {"ignoreSCT": true}});
        assert_eq!(one(&[cpol(keyless)], pod(&[&image])).0, Status::Pass);
        // Kyverno's validation: a Rekor entry names its URL.
        let no_url = json!({"issuer": "https://issuer", "roots": ROOTS,
            "rekor": {"ignoreTlog": true}, "ctlog": {"ignoreSCT": true}});
        let err = Engine::new()
            .add_json(&cpol(no_url))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("verifyImages[0].attestors[0].entries[0].keyless")
                && err.contains("An URL is required"),
            "{err}"
        );
        let no_roots = json!({"issuer": "https://issuer", "subject": "*@example.com",
            "rekor": rekor, "ctlog": {"ignoreSCT": true}});
        // Without roots, Sigstore's trust root: none configured is the
        // rule's error, not a verdict.
        let (status, message) = one(&[cpol(no_roots)], pod(&[&image]));
        assert_eq!(status, Status::Error);
        assert!(message.contains(NO_TRUST_ROOT), "{message}");
    }

    /// Cluster data that has fetched nothing yet: every lookup is
    /// recorded and answered "not fetched yet", as an evaluation's
    /// `ImageLookup` answers before its first `fetch_missed`.
    #[derive(Debug, Default)]
    struct Cold {
        asked: std::sync::Mutex<Vec<String>>,
    }

    impl Cold {
        fn miss(&self, what: &str, image: &str) -> String {
            self.asked.lock().unwrap().push(format!("{what} {image}"));
            format!("image data for {image} was not fetched yet")
        }
    }

    impl ClusterData for Cold {
        fn get(&self, _: &str, _: &str, _: &str, _: &str) -> Option<Arc<Json>> {
            None
        }
        fn list(&self, _: &str, _: &str, _: &str) -> Vec<Arc<Json>> {
            Vec::new()
        }
        fn image_data(&self, image: &str) -> std::result::Result<Json, String> {
            Err(self.miss("data", image))
        }
        fn verify_image(&self, image: &str, _: &ImageTrust) -> std::result::Result<String, String> {
            Err(self.miss("signatures", image))
        }
    }

    /// One evaluation asks for every image it needs, not only the first:
    /// the engine then fetches them all at once (one round trip group for
    /// the pod, not one per image).
    #[test]
    fn every_images_lookup_is_made_in_one_evaluation() {
        let images: Vec<String> = (1..=4).map(|i| format!("reg.io/app{i}:1{D}")).collect();
        let refs: Vec<&str> = images.iter().map(String::as_str).collect();
        let cpol = json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
            "metadata": {"name": "sig"},
            "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "sig",
                "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                "verifyImages": [{"imageReferences": ["reg.io/*"],
                    "attestors": [{"entries": [{"keys": {"publicKeys": KEY,
                        "rekor": {"ignoreTlog": true}}}]}]}]}]}});
        for (policy, what) in [
            (cpol, "signatures"),
            (doc("iv", spec(signed_check(), json!({}))), "data"),
        ] {
            let cold = Cold::default();
            let mut engine = Engine::new();
            engine.add_json(&policy).unwrap();
            let req = EvalRequest::create(Arc::new(pod(&refs)));
            let results = engine
                .evaluation(&cold)
                .validate(&crate::Prepared::new(req))
                .into_vec();
            assert_eq!(results[0].status, Status::Error, "{results:?}");
            let asked = cold.asked.lock().unwrap().clone();
            for image in &images {
                assert!(
                    asked.contains(&format!("{what} {image}")),
                    "{image}: {asked:?}"
                );
            }
        }
    }

    /// `certificates` attestors (ClusterPolicy) and `cosign.certificate`
    /// (ImageValidatingPolicy) verify with the certificate given; Kyverno's
    /// validation (`cert or certChain required`) and the transparency log
    /// rule hold.
    #[test]
    fn certificate_attestors_verify_with_the_certificate_given() {
        let image = format!("reg.io/signed:1{D}");
        let cpol = |certificates: Json| {
            json!({"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                "metadata": {"name": "cert"},
                "spec": {"validationFailureAction": "Enforce", "rules": [{"name": "sig",
                    "match": {"any": [{"resources": {"kinds": ["Pod"]}}]},
                    "verifyImages": [{"imageReferences": ["reg.io/*"],
                        "attestors": [{"entries": [{"certificates": certificates}]}]}]}]}})
        };
        let ok =
            json!({"cert": CERT, "rekor": {"url": "https://rekor.example", "ignoreTlog": true}});
        assert_eq!(one(&[cpol(ok)], pod(&[&image])).0, Status::Pass);
        let (status, message) = one(&[cpol(json!({"cert": CERT}))], pod(&[&image]));
        assert_eq!(status, Status::Error);
        assert!(
            message.contains(".attestors[0].entries[0]: certificates: the signatures must be verified against a transparency log"),
            "{message}"
        );
        let err = Engine::new()
            .add_json(&cpol(json!({"rekor": {"ignoreTlog": true}})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cert or certChain required"), "{err}");
        let iv = json!({"attestors": [{"name": "k", "cosign": {
            "certificate": {"cert": {"value": CERT}},
            "ctlog": {"insecureIgnoreTlog": true}}}]});
        assert_eq!(
            one(&[doc("iv", spec(signed_check(), iv))], pod(&[&image])).0,
            Status::Pass
        );
    }

    #[test]
    fn mistakes_are_refused_naming_the_field() {
        for (extra, field) in [
            (
                json!({"matchImageReferences": [{}]}),
                "spec.matchImageReferences[0]",
            ),
            (
                json!({"attestors": [{"cosign": {}}]}),
                "spec.attestors[0].name",
            ),
            (json!({"attestors": [{"name": "x"}]}), "spec.attestors[0]"),
            (
                json!({"attestations": [{"name": "x"}]}),
                "spec.attestations[0]",
            ),
            (
                json!({"validationConfigurations": {"required": "yes"}}),
                "spec.validationConfigurations.required",
            ),
        ] {
            let err =
                crate::vpol::ValidatingPolicy::compile(&doc("bad", spec(signed_check(), extra)))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains(field), "{field}: {err}");
        }
    }
}
