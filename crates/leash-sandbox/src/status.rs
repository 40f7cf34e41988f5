//! API errors and their metav1 `Status` encoding.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde_json::{Value, json};

/// An error as the Kubernetes API server reports it: an HTTP code, a
/// machine-readable reason (`NotFound`, `AlreadyExists`, `Conflict`, ...) and a
/// message. Encoded on the wire as a metav1 `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    code: u16,
    /// Empty when the Status has none (an admission webhook's denial may carry none).
    reason: Cow<'static, str>,
    message: String,
    /// Rarely present: boxed so `Result<_, ApiError>` stays small.
    extra: Option<Box<Extra>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Extra {
    details: Option<Details>,
    continue_token: Option<String>,
    cause: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Details {
    name: String,
    group: String,
    kind: String,
}

impl ApiError {
    /// A new error with `code`, `reason` and `message`.
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: Cow::Borrowed(reason),
            message: message.into(),
            extra: None,
        }
    }

    /// An error with any `reason` (empty for none), as a Status from elsewhere carries it.
    pub(crate) fn with_reason(code: u16, reason: String, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: Cow::Owned(reason),
            message: message.into(),
            extra: None,
        }
    }

    /// Adds `details.causes`: one cause with only a message (kube-apiserver's
    /// `NewInternalError`).
    pub(crate) fn with_cause(mut self, message: impl Into<String>) -> Self {
        self.extra.get_or_insert_with(Box::default).cause = Some(message.into());
        self
    }

    /// Adds `details` (name, group, kind: the resource's plural, as the server does).
    pub(crate) fn with_details(mut self, name: &str, group: &str, plural: &str) -> Self {
        self.extra.get_or_insert_with(Box::default).details = Some(Details {
            name: name.to_string(),
            group: group.to_string(),
            kind: plural.to_string(),
        });
        self
    }

    /// Adds a continue token to `metadata.continue` (410 Expired lists).
    pub(crate) fn with_continue(mut self, token: String) -> Self {
        self.extra.get_or_insert_with(Box::default).continue_token = Some(token);
        self
    }

    /// 404 `NotFound` for a named object: `pods "x" not found`.
    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        )
        .with_details(name, group, plural)
    }

    /// 404 `NotFound` for a path the server does not serve.
    pub(crate) fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409 `AlreadyExists`.
    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        )
        .with_details(name, group, plural)
    }

    /// 409 `Conflict` for a stale resourceVersion or a failed precondition.
    pub(crate) fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        )
        .with_details(name, group, plural)
    }

    /// 400 `BadRequest`.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 `Invalid`.
    pub(crate) fn invalid(kind: &str, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {message}"),
        )
    }

    /// 410 `Expired`.
    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 405 `MethodNotAllowed`.
    pub(crate) fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
    }

    /// 500 `InternalError`.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The HTTP status code (404, 409, ...).
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The Status reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `BadRequest`, ...).
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The metav1 `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut metadata = serde_json::Map::new();
        let extra = self.extra.as_deref().cloned().unwrap_or_default();
        if let Some(token) = &extra.continue_token {
            metadata.insert("continue".into(), Value::String(token.clone()));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("reason");
        }
        if let Some(cause) = &extra.cause {
            status["details"] = json!({"causes": [{"message": cause}]});
        }
        if let Some(d) = &extra.details {
            let mut details = serde_json::Map::new();
            details.insert("name".into(), Value::String(d.name.clone()));
            if !d.group.is_empty() {
                details.insert("group".into(), Value::String(d.group.clone()));
            }
            details.insert("kind".into(), Value::String(d.kind.clone()));
            status["details"] = Value::Object(details);
        }
        status
    }

    /// The `Status` serialized as JSON.
    pub(crate) fn to_bytes(&self) -> Bytes {
        Bytes::from(self.to_status().to_string())
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `plural` or `plural.group`, as the server names a resource in messages.
pub(crate) fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}
