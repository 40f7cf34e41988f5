//! Errors of parsing and compiling policies. Evaluation never returns an
//! error: a rule that cannot be evaluated yields a [`crate::Status::Error`]
//! result.

/// A policy (or policy-like document) that cannot be parsed or compiled.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field has the wrong shape or an invalid value.
    #[error("{kind} {name}: {field}: {message}")]
    InvalidPolicy {
        /// The document's kind (`ClusterPolicy`, `ValidatingPolicy`, ...).
        kind: String,
        /// The policy's name.
        name: String,
        /// The field's path (`spec.rules[0].validate.pattern`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The document does not follow its kind's schema (see
    /// [`crate::schema`]): every problem found, each naming its field.
    #[error("{kind} {name}: {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Schema {
        /// The document's kind.
        kind: String,
        /// The policy's name.
        name: String,
        /// What is wrong, field by field.
        problems: Vec<crate::schema::Problem>,
    },
    /// The document is not a policy this engine knows.
    #[error("unsupported document: {0}")]
    Unsupported(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `Err(Error::Schema)` when `doc` does not follow its kind's schema.
    pub fn check_schema(doc: &serde_json::Value) -> Result<()> {
        let problems = crate::schema::check(doc);
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::Schema {
            kind: doc["kind"].as_str().unwrap_or("").to_string(),
            name: doc["metadata"]["name"].as_str().unwrap_or("").to_string(),
            problems,
        })
    }

    /// An [`Error::InvalidPolicy`].
    pub fn invalid(
        kind: impl Into<String>,
        name: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Error {
        Error::InvalidPolicy {
            kind: kind.into(),
            name: name.into(),
            field: field.into(),
            message: message.into(),
        }
    }
}
