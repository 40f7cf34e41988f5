//! `admission.k8s.io/v1` `AdmissionReview`: the request the sandbox sends, the
//! checks kube-apiserver applies to the answer, and the Status a denial becomes.

use base64::Engine as _;
use serde_json::{Value, json};

use super::Attributes;
use crate::status::ApiError;

/// The user every request is made as: the sandbox knows one user (any holder of
/// its bearer token, or anyone when it has none), a cluster admin.
pub(crate) fn user_info() -> Value {
    json!({
        "username": "system:admin",
        "groups": ["system:masters", "system:authenticated"],
    })
}

/// A fresh request uid (a random UUID).
pub(crate) fn fresh_uid() -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        fastrand::u32(..),
        fastrand::u16(..),
        fastrand::u16(..0x1000),
        fastrand::u16(0x8000..0xc000),
        fastrand::u64(..1 << 48)
    )
}

/// The AdmissionReview sent for `a`, with request uid `uid`.
pub(crate) fn request(a: &Attributes, uid: &str) -> Value {
    let rt = &a.resource;
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let mut req = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": a.name,
        "operation": a.operation.as_str(),
        "userInfo": user_info(),
        "object": a.object.clone().unwrap_or(Value::Null),
        "oldObject": a.old_object.clone().unwrap_or(Value::Null),
        "dryRun": a.dry_run,
        "options": a.options,
    });
    if !a.sub_resource.is_empty() {
        req["subResource"] = json!(a.sub_resource);
        req["requestSubResource"] = json!(a.sub_resource);
    }
    if !a.namespace.is_empty() {
        req["namespace"] = json!(a.namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// A webhook's answer, checked.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) allowed: bool,
    /// `response.status` (a metav1 Status), for a denial's message.
    pub(crate) status: Option<Value>,
    /// The decoded `response.patch` (JSON Patch), when there is one.
    pub(crate) patch: Option<Value>,
    pub(crate) warnings: Vec<String>,
}

/// Checks the answer as kube-apiserver's `VerifyAdmissionResponse` does. An error
/// is the reason the webhook call failed (the caller adds
/// `received invalid webhook response: ` or the patch's prefix).
pub(crate) fn verify(review: &Value, uid: &str, mutating: bool) -> Result<Verdict, Invalid> {
    let gvk = format!(
        "{}, Kind={}",
        review
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or(""),
        review.get("kind").and_then(Value::as_str).unwrap_or("")
    );
    let response = review
        .get("response")
        .filter(|r| r.is_object())
        .ok_or_else(|| Invalid::Response("webhook response was absent".into()))?;
    let got_uid = response.get("uid").and_then(Value::as_str).unwrap_or("");
    if got_uid != uid {
        return Err(Invalid::Response(format!(
            "expected response.uid={uid:?}, got {got_uid:?}"
        )));
    }
    if gvk != "admission.k8s.io/v1, Kind=AdmissionReview" {
        return Err(Invalid::Response(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {gvk}"
        )));
    }
    let patch_type = response
        .get("patchType")
        .and_then(Value::as_str)
        .unwrap_or("");
    let patch = response
        .get("patch")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let patch = match patch {
        None if !patch_type.is_empty() => {
            return Err(Invalid::Response(
                "webhook returned response.patchType but not response.patch".into(),
            ));
        }
        None => None,
        Some(_) if !mutating => {
            return Err(Invalid::Response(
                "validating webhooks may not return patches".into(),
            ));
        }
        Some(_) if patch_type.is_empty() => {
            return Err(Invalid::Response(
                "webhook returned response.patch but not response.patchType".into(),
            ));
        }
        Some(_) if patch_type != "JSONPatch" => {
            return Err(Invalid::PatchType(patch_type.to_string()));
        }
        Some(p) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| Invalid::Patch(format!("illegal base64 data: {e}")))?;
            let ops: Value =
                serde_json::from_slice(&bytes).map_err(|e| Invalid::Patch(e.to_string()))?;
            if !ops.is_array() {
                return Err(Invalid::Patch(
                    "a JSON patch must be an array of operations".into(),
                ));
            }
            Some(ops).filter(|ops| ops.as_array().is_some_and(|a| !a.is_empty()))
        }
    };
    let warnings = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Ok(Verdict {
        allowed: response.get("allowed").and_then(Value::as_bool) == Some(true),
        status: response.get("status").cloned(),
        patch,
        warnings,
    })
}

/// Why an answer was refused.
#[derive(Debug)]
pub(crate) enum Invalid {
    /// `received invalid webhook response: ...`
    Response(String),
    /// `received undecodable patch in webhook response: ...`
    Patch(String),
    /// `unsupported patch type "..."`
    PatchType(String),
}

impl Invalid {
    /// The reason the call failed, as kube-apiserver words it.
    pub(crate) fn reason(&self) -> String {
        match self {
            Invalid::Response(why) => format!("received invalid webhook response: {why}"),
            Invalid::Patch(why) => format!("received undecodable patch in webhook response: {why}"),
            Invalid::PatchType(t) => format!("unsupported patch type {t:?}"),
        }
    }
}

/// The Status of a denial (kube-apiserver's `ToStatusErr`): the webhook's code
/// (at least 400), its reason, and `admission webhook "NAME" denied the request: M`.
pub(crate) fn denial(webhook: &str, status: Option<&Value>) -> ApiError {
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let field = |k: &str| {
        status
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .filter(|c| (400..=599).contains(c))
        .unwrap_or(400) as u16;
    let message = match (field("message"), field("reason")) {
        ("", "") => format!("{denied_by} without explanation"),
        ("", reason) => format!("{denied_by}: {reason}"),
        (message, _) => format!("{denied_by}: {message}"),
    };
    ApiError::with_reason(code, field("reason").to_string(), message)
}

/// The Status of a failed call under `failurePolicy: Fail` (kube-apiserver's
/// `NewInternalError` of `ErrCallingWebhook`).
pub(crate) fn call_failed(webhook: &str, reason: &str) -> ApiError {
    let err = format!("failed calling webhook {webhook:?}: {reason}");
    ApiError::internal(format!("Internal error occurred: {err}")).with_cause(err)
}

/// Any other internal error of the chain (a patch that does not apply, ...).
pub(crate) fn internal(err: String) -> ApiError {
    ApiError::internal(format!("Internal error occurred: {err}")).with_cause(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(resp: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})
    }

    #[test]
    fn denials_read_as_kube_apiservers() {
        let e = denial(
            "w.example.com",
            Some(&json!({"code": 403, "message": "no"})),
        );
        assert_eq!((e.code(), e.reason()), (403, ""));
        assert_eq!(
            e.message(),
            "admission webhook \"w.example.com\" denied the request: no"
        );
        assert!(e.to_status().get("reason").is_none());
        let e = denial("w", Some(&json!({"code": 200, "reason": "Forbidden"})));
        assert_eq!((e.code(), e.reason()), (400, "Forbidden"));
        assert_eq!(
            e.message(),
            "admission webhook \"w\" denied the request: Forbidden"
        );
        let e = denial("w", None);
        assert_eq!(
            e.message(),
            "admission webhook \"w\" denied the request without explanation"
        );
    }

    #[test]
    fn answers_are_checked() {
        let ok = verify(&answer(json!({"uid": "u", "allowed": true})), "u", false).unwrap();
        assert!(ok.allowed);
        let e = verify(&answer(json!({"uid": "x", "allowed": true})), "u", false).unwrap_err();
        assert_eq!(
            e.reason(),
            "received invalid webhook response: expected response.uid=\"u\", got \"x\""
        );
        let e = verify(
            &json!({"kind": "Foo", "response": {"uid": "u"}}),
            "u",
            false,
        )
        .unwrap_err();
        assert!(e.reason().contains("got , Kind=Foo"), "{}", e.reason());
        let e = verify(&json!({}), "u", false).unwrap_err();
        assert!(e.reason().ends_with("webhook response was absent"));
        let patch = base64::engine::general_purpose::STANDARD
            .encode(r#"[{"op":"add","path":"/a","value":1}]"#);
        let e = verify(
            &answer(json!({"uid": "u", "allowed": true, "patch": patch, "patchType": "JSONPatch"})),
            "u",
            false,
        )
        .unwrap_err();
        assert!(
            e.reason()
                .ends_with("validating webhooks may not return patches")
        );
        let v = verify(
            &answer(json!({"uid": "u", "allowed": true, "patch": patch, "patchType": "JSONPatch"})),
            "u",
            true,
        )
        .unwrap();
        assert_eq!(
            v.patch,
            Some(json!([{"op": "add", "path": "/a", "value": 1}]))
        );
        let e = verify(
            &answer(json!({"uid": "u", "allowed": true, "patch": "!!", "patchType": "JSONPatch"})),
            "u",
            true,
        )
        .unwrap_err();
        assert!(
            e.reason().starts_with("received undecodable patch"),
            "{}",
            e.reason()
        );
    }
}
