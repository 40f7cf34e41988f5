//! The loader's error type.

use std::time::Duration;

/// Errors of discovery, kind resolution and loading.
///
/// Which errors are worth retrying is decided inside the loader (see
/// [`crate::RetryPolicy`]): the errors that reach a caller have already been
/// retried as far as the policy allows. [`Error::is_configuration`] tells a
/// caller which ones are the user's to fix (exit code 2 in the CLI).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A KIND argument matched no resource served by the cluster.
    #[error("the server doesn't have a resource type \"{name}\"")]
    UnknownKind {
        /// The argument as given.
        name: String,
    },
    /// A KIND argument names a resource that cannot be listed.
    #[error("resource type \"{name}\" does not support list")]
    NotListable {
        /// The argument as given.
        name: String,
    },
    /// Two KIND arguments name one resource at different versions (its
    /// objects are the same; reading them twice would write each twice).
    #[error(
        "\"{first}\" and \"{second}\" name the same resource {resource} at versions {first_version} and {second_version}: name one version"
    )]
    TwoVersions {
        /// The resource (`widgets.example.leash.dev`).
        resource: String,
        /// The first argument.
        first: String,
        /// The version it resolved to.
        first_version: String,
        /// The second argument.
        second: String,
        /// The version it resolved to.
        second_version: String,
    },
    /// The options are invalid (concurrency out of range, page size 0, ...).
    #[error("invalid load options: {0}")]
    InvalidOptions(String),
    /// The server rejected the credentials (401) or the access (403).
    #[error("{operation}: the server answered {code} {reason}: {message}")]
    Unauthorized {
        /// What was being done (`list pods`, `discovery GET /apis`).
        operation: String,
        /// 401 or 403.
        code: u16,
        /// The Status reason (`Unauthorized`, `Forbidden`).
        reason: String,
        /// The server's message.
        message: String,
    },
    /// The server answered 400 Bad Request (a bad label or field selector).
    #[error("{operation}: the server rejected the request (400 {reason}): {message}")]
    BadRequest {
        /// What was being done.
        operation: String,
        /// The Status reason.
        reason: String,
        /// The server's message.
        message: String,
    },
    /// The server answered an error status that is not retried (404, 405, 422, ...)
    /// or a retried one (429, 5xx) once the retries ran out.
    #[error("{operation}: the server answered {code} {reason}: {message}{}", attempts_note(*attempts))]
    Status {
        /// What was being done.
        operation: String,
        /// The HTTP status code.
        code: u16,
        /// The Status reason, or the HTTP reason phrase.
        reason: String,
        /// The server's message (or the start of a non-Status body).
        message: String,
        /// How many requests were made.
        attempts: u32,
    },
    /// The request or its response body failed in transport (connection
    /// refused or reset, body cut short), after the retries ran out.
    #[error("{operation}: connection failed{}", attempts_note(*attempts))]
    Transport {
        /// What was being done.
        operation: String,
        /// How many requests were made.
        attempts: u32,
        /// The last transport error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The request did not complete (its whole response) within the
    /// request timeout ([`crate::RetryPolicy::request_timeout`]), at any
    /// attempt, once the retries ran out.
    #[error("{operation}: no complete response within {timeout:?}{}", attempts_note(*attempts))]
    TimedOut {
        /// What was being done (`list pods`, `discovery GET /api`).
        operation: String,
        /// The bound of each attempt.
        timeout: Duration,
        /// How many requests were made.
        attempts: u32,
    },
    /// A 200 answer that is not the JSON expected (after the retries ran out).
    #[error("{operation}: malformed response{}", attempts_note(*attempts))]
    MalformedResponse {
        /// What was being done.
        operation: String,
        /// How many requests were made.
        attempts: u32,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A list's continue token expired (410) and the restarts ran out (every
    /// 410 restarts the list in consistent mode; otherwise only a 410
    /// without a fresh continue token does).
    #[error(
        "list {kind}: the list expired (410) and was restarted {restarts} times while paging; giving up"
    )]
    ExpiredTooOften {
        /// The kind (`pods`, `deployments.apps`).
        kind: String,
        /// How many restarts were made.
        restarts: u32,
    },
    /// A list page repeated a continue token or served an object already
    /// written with a different identity: the list cannot be completed.
    #[error("list {kind}: {message}")]
    InconsistentList {
        /// The kind.
        kind: String,
        /// What went wrong.
        message: String,
    },
    /// The load was cancelled (Ctrl-C, the caller's token, or the first
    /// failure of another kind) before this kind completed.
    #[error("cancelled before completion")]
    Cancelled,
    /// The load's deadline passed before this kind completed.
    #[error("deadline of {0:?} exceeded before completion")]
    DeadlineExceeded(Duration),
    /// The consumer dropped the object stream before this kind completed.
    #[error("the object stream was dropped before completion")]
    OutputClosed,
    /// The worker pool failed (invalid configuration or a task panic).
    #[error("worker pool: {0}")]
    Pool(String),
    /// Building the kube client failed.
    #[error("cannot build the Kubernetes client")]
    Client(#[source] kube::Error),
}

fn attempts_note(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

impl Error {
    /// True for errors the user has to fix (exit code 2 in the CLI): unknown
    /// kinds, invalid options, rejected credentials, a rejected selector, and
    /// a server that could not be reached at all.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            Error::UnknownKind { .. }
                | Error::NotListable { .. }
                | Error::TwoVersions { .. }
                | Error::InvalidOptions(_)
                | Error::Unauthorized { .. }
                | Error::BadRequest { .. }
                | Error::Client(_)
        )
    }

    /// True when this kind did not complete because the load was stopped
    /// (cancellation, deadline, dropped stream), not because of its own failure.
    pub fn is_interruption(&self) -> bool {
        matches!(
            self,
            Error::Cancelled | Error::DeadlineExceeded(_) | Error::OutputClosed
        )
    }
}

/// `Result` with the loader's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
