//! `admission.k8s.io/v1` `AdmissionReview`: parsing a request body (every
//! defect named) and rendering the answer.

use std::sync::Arc;

use leash_policy::{Operation, UserInfo};
use serde_json::{Value, json};

/// Kube-apiserver's limit on an admission request body (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Why a body is not a usable AdmissionReview (answered with HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadReview(pub String);

/// The parts of an admission request the webhook uses.
#[derive(Debug, Clone)]
pub struct ReviewRequest {
    /// `request.uid`
    pub uid: String,
    /// `request.kind.kind`
    pub kind: String,
    /// `request.kind.group` / `version`
    pub group: String,
    /// `request.kind.version`
    pub version: String,
    /// `request.subResource`
    pub sub_resource: String,
    /// `request.resource.resource` (the plural; empty when not sent).
    pub plural: String,
    /// `request.namespace` (or the object's)
    pub namespace: String,
    /// `request.name` (or the object's)
    pub name: String,
    /// `request.operation`
    pub operation: Operation,
    /// `request.userInfo` (roles are resolved later)
    pub user: UserInfo,
    /// The resource evaluated: `object`, or `oldObject` for DELETE.
    pub resource: Arc<Value>,
    /// `oldObject` on UPDATE (and DELETE, where it is also `resource`).
    pub old_object: Option<Arc<Value>>,
    /// `request.dryRun`: nothing is stored, so no report is written.
    pub dry_run: bool,
}

impl ReviewRequest {
    /// `KIND/NAMESPACE/NAME` as Kyverno names a resource (`KIND//NAME` when
    /// cluster-scoped).
    pub fn resource_name(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }

    /// The resource requested as CEL resource rules match it: the plural,
    /// with `/SUBRESOURCE` (`pods/binding`); None when the review names no
    /// resource.
    pub fn request_resource(&self) -> Option<String> {
        match (self.plural.as_str(), self.sub_resource.as_str()) {
            ("", _) => None,
            (plural, "") => Some(plural.to_string()),
            (plural, sub) => Some(format!("{plural}/{sub}")),
        }
    }
}

/// Parses a request body.
pub fn parse(body: &[u8]) -> Result<ReviewRequest, BadReview> {
    let bad = |m: String| BadReview(m);
    let mut doc: Value =
        serde_json::from_slice(body).map_err(|e| bad(format!("request body is not JSON: {e}")))?;
    let Some(top) = doc.as_object() else {
        return Err(bad("request body is not a JSON object".into()));
    };
    let api_version = top.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api_version != "admission.k8s.io/v1" {
        return Err(bad(format!(
            "unsupported apiVersion {api_version:?}: want \"admission.k8s.io/v1\""
        )));
    }
    let kind = top.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "AdmissionReview" {
        return Err(bad(format!(
            "unsupported kind {kind:?}: want \"AdmissionReview\""
        )));
    }
    // The objects are moved out of the parsed review, not copied.
    let Some(req) = doc.get_mut("request").and_then(Value::as_object_mut) else {
        return Err(bad("AdmissionReview has no request object".into()));
    };
    let (object, old_object) = (req.remove("object"), req.remove("oldObject"));
    let Some(req) = doc.get("request").and_then(Value::as_object) else {
        return Err(bad("AdmissionReview has no request object".into()));
    };
    let text = |k: &str| req.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let uid = text("uid");
    if uid.is_empty() {
        return Err(bad("request.uid is missing".into()));
    }
    let op_text = text("operation");
    let operation = Operation::parse(&op_text).ok_or_else(|| {
        bad(format!(
            "request.operation {op_text:?} is not CREATE, UPDATE, DELETE or CONNECT"
        ))
    })?;
    let gvk = req.get("kind").and_then(Value::as_object);
    let gvk_field = |k: &str| {
        gvk.and_then(|g| g.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let object = match object {
        Some(Value::Null) | None => None,
        Some(v @ Value::Object(_)) => Some(Arc::new(v)),
        Some(_) => return Err(bad("request.object is not an object".into())),
    };
    let old_object = match old_object {
        Some(Value::Null) | None => None,
        Some(v @ Value::Object(_)) => Some(Arc::new(v)),
        Some(_) => return Err(bad("request.oldObject is not an object".into())),
    };
    let resource = match operation {
        Operation::Delete => old_object
            .clone()
            .ok_or_else(|| bad("request.oldObject is missing (DELETE)".into()))?,
        Operation::Update => {
            if old_object.is_none() {
                return Err(bad("request.oldObject is missing (UPDATE)".into()));
            }
            object.ok_or_else(|| bad("request.object is missing (UPDATE)".into()))?
        }
        _ => object.ok_or_else(|| bad(format!("request.object is missing ({op_text})")))?,
    };
    let mut kind = gvk_field("kind");
    if kind.is_empty() {
        kind = resource["kind"].as_str().unwrap_or("").to_string();
    }
    if kind.is_empty() {
        return Err(bad("request.kind.kind is missing".into()));
    }
    let meta = |k: &str| resource["metadata"][k].as_str().unwrap_or("").to_string();
    let namespace = Some(text("namespace"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| meta("namespace"));
    let name = Some(text("name"))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| meta("name"));
    let ui = req.get("userInfo");
    let user = UserInfo {
        username: ui
            .and_then(|u| u["username"].as_str())
            .unwrap_or("")
            .to_string(),
        uid: ui.and_then(|u| u["uid"].as_str()).unwrap_or("").to_string(),
        groups: ui
            .and_then(|u| u["groups"].as_array())
            .map(|g| {
                g.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        roles: Vec::new(),
        cluster_roles: Vec::new(),
    };
    Ok(ReviewRequest {
        uid,
        kind,
        group: gvk_field("group"),
        version: gvk_field("version"),
        sub_resource: text("subResource"),
        plural: req
            .get("resource")
            .and_then(|r| r.get("resource"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        namespace,
        name,
        operation,
        user,
        resource,
        old_object: if operation == Operation::Update || operation == Operation::Delete {
            old_object
        } else {
            None
        },
        dry_run: req.get("dryRun").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// An answer to one review.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// `response.allowed`
    pub allowed: bool,
    /// `response.status.message` when denied.
    pub message: Option<String>,
    /// `response.warnings`
    pub warnings: Vec<String>,
    /// `response.patch` (a JSON Patch, RFC 6902, as JSON) of a mutating
    /// webhook's answer.
    pub patch: Option<Vec<u8>>,
}

impl Answer {
    /// Allowed, no warnings.
    pub fn allow() -> Answer {
        Answer {
            allowed: true,
            message: None,
            warnings: Vec::new(),
            patch: None,
        }
    }

    /// Denied with `message`.
    pub fn deny(message: String) -> Answer {
        Answer {
            allowed: false,
            message: Some(message),
            warnings: Vec::new(),
            patch: None,
        }
    }

    /// The AdmissionReview answering `uid`, as Kyverno's
    /// `admissionutils.Response` builds it: a denial carries a
    /// `status: Failure` Status with the message and no code (kube-apiserver
    /// answers the client 403 then).
    pub fn to_review(&self, uid: &str) -> Value {
        let mut response = json!({"uid": uid, "allowed": self.allowed});
        if let Some(m) = &self.message {
            response["status"] = json!({"status": "Failure", "message": m});
        }
        if !self.warnings.is_empty() {
            response["warnings"] = json!(self.warnings);
        }
        if let Some(p) = &self.patch {
            use base64::Engine as _;
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(p));
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(req: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})).unwrap()
    }

    #[test]
    fn every_defect_is_named() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"{not json".to_vec(), "not JSON"),
            (b"[1]".to_vec(), "not a JSON object"),
            (
                br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#.to_vec(),
                "unsupported apiVersion \"admission.k8s.io/v1beta1\"",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}"#.to_vec(),
                "unsupported kind \"Pod\"",
            ),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
                "no request",
            ),
            (review(json!({"operation": "CREATE"})), "uid is missing"),
            (
                review(json!({"uid": "u", "operation": "PATCH"})),
                "\"PATCH\" is not CREATE",
            ),
            (
                review(json!({"uid": "u", "operation": "CREATE"})),
                "object is missing (CREATE)",
            ),
            (
                review(json!({"uid": "u", "operation": "DELETE", "object": {}})),
                "oldObject is missing (DELETE)",
            ),
            (
                review(json!({"uid": "u", "operation": "CREATE", "object": 3})),
                "request.object is not an object",
            ),
        ];
        for (body, want) in cases {
            let e = parse(&body).unwrap_err();
            assert!(e.0.contains(want), "{e} should contain {want}");
        }
    }

    #[test]
    fn delete_evaluates_the_old_object() {
        let r = parse(&review(json!({
            "uid": "u", "operation": "DELETE", "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "namespace": "a", "name": "p",
            "oldObject": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"}},
            "userInfo": {"username": "alice", "groups": ["devs"]},
        })))
        .unwrap();
        assert_eq!(r.operation, Operation::Delete);
        assert_eq!(r.resource["metadata"]["name"], "p");
        assert!(r.old_object.is_some());
        assert_eq!(r.user.groups, vec!["devs".to_string()]);
        assert_eq!(r.resource_name(), "Pod/a/p");
    }

    #[test]
    fn answers_render_as_kyverno_does() {
        let a = Answer::deny("no".into());
        assert_eq!(
            a.to_review("u1"),
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u1", "allowed": false, "status": {"status": "Failure", "message": "no"}}})
        );
        // A mutating answer: the JSON Patch, base64-encoded, and its type.
        let patched = Answer {
            patch: Some(br#"[{"op":"add","path":"/a","value":1}]"#.to_vec()),
            ..Answer::allow()
        };
        assert_eq!(
            patched.to_review("u2")["response"],
            json!({"uid": "u2", "allowed": true, "patchType": "JSONPatch",
                   "patch": "W3sib3AiOiJhZGQiLCJwYXRoIjoiL2EiLCJ2YWx1ZSI6MX1d"})
        );
    }
}
