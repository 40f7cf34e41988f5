//! The crate's error type.

/// Errors of `leash-context`.
///
/// Worth retrying: [`Error::NotReady`] (the entry may still get data) and
/// the refresh errors that end up in an entry's status
/// ([`Error::RequestFailed`], [`Error::HttpFailed`], [`Error::DiscoveryFailed`],
/// [`Error::WatchFailed`]), which the entries retry themselves. The others
/// describe the input or the store and do not change by retrying.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `GlobalContextEntry` is invalid; names the entry and the field.
    #[error("invalid GlobalContextEntry {entry:?}: {field}: {reason}")]
    InvalidEntry {
        /// Entry name (`metadata.name`), or `<unnamed>`.
        entry: String,
        /// Field path such as `spec.apiCall.refreshInterval`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A YAML document could not be read.
    #[error("{origin}: document {document}: {reason}")]
    ParseFailed {
        /// File name or other origin of the text.
        origin: String,
        /// 1-based document index in a multi-document stream.
        document: usize,
        /// What is wrong.
        reason: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}")]
    ReadFailed {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// `add` of a name that is already in the store.
    #[error("entry {0:?} already exists")]
    AlreadyExists(String),
    /// The store holds its maximum number of entries.
    #[error(
        "cannot add entry {entry:?}: the store is full ({max} entries, the configured maximum)"
    )]
    StoreFull {
        /// The entry that was refused.
        entry: String,
        /// The configured maximum.
        max: usize,
    },
    /// No entry of that name.
    #[error("no entry named {0:?}")]
    UnknownEntry(String),
    /// The entry exists but has no such projection.
    #[error("entry {entry:?} has no projection named {projection:?}")]
    UnknownProjection {
        /// The entry.
        entry: String,
        /// The projection asked for.
        projection: String,
    },
    /// The entry has no data yet.
    #[error("entry {entry:?} is not ready: {reason}")]
    NotReady {
        /// The entry.
        entry: String,
        /// Why (last error, or readiness timeout).
        reason: String,
    },
    /// A Kubernetes-backed entry was added to a store that has no client.
    #[error("entry {0:?} needs a Kubernetes client but the store has none")]
    ClientRequired(String),
    /// The store was shut down.
    #[error("the store is shut down")]
    ShutDown,
    /// A call to the Kubernetes API server failed.
    #[error("request {method} {path} failed")]
    RequestFailed {
        /// HTTP method.
        method: String,
        /// URL path.
        path: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A call to an external service failed (connect, TLS, status, body).
    #[error("request {method} {url} failed: {reason}")]
    HttpFailed {
        /// HTTP method.
        method: String,
        /// The URL.
        url: String,
        /// What happened.
        reason: String,
    },
    /// The answer was not JSON.
    #[error("the response of {url} is not JSON: {source}")]
    InvalidResponse {
        /// The URL or path.
        url: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A projection failed at run time (for example a type error).
    #[error("projection {projection:?} failed: {reason}")]
    ProjectionFailed {
        /// The projection's name.
        projection: String,
        /// The JMESPath error.
        reason: String,
    },
    /// Discovery of the watched resource failed.
    #[error("discovery of {resource} failed: {reason}")]
    DiscoveryFailed {
        /// `group/version/resource`.
        resource: String,
        /// What happened.
        reason: String,
    },
    /// The watch of a Kubernetes resource failed (it is retried with backoff).
    #[error("watch of {resource} failed")]
    WatchFailed {
        /// `group/version/resource`.
        resource: String,
        /// The cause.
        #[source]
        source: kube::runtime::watcher::Error,
    },
    /// A refresh attempt took longer than the request timeout.
    #[error("request to {url} timed out after {timeout:?}")]
    TimedOut {
        /// The URL or path.
        url: String,
        /// The bound.
        timeout: std::time::Duration,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Render an error with its whole `source` chain, for statuses and logs.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}
