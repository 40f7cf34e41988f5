//! The crate's error type.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::status::ApiError;

/// Everything that can go wrong in `leash-sandbox`.
///
/// Worth retrying: none of these, except [`Error::Api`] with a 409 Conflict
/// (re-read and retry) or a 410 Expired (relist).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Binding the listening socket failed.
    #[error("binding {addr}")]
    BindFailed {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An initial object from [`SandboxConfig::objects`](crate::SandboxConfig::objects) was rejected.
    #[error("initial object #{index} ({what}) was rejected")]
    InitialObjectRejected {
        /// Its position in the list.
        index: usize,
        /// `kind namespace/name`, as far as known.
        what: String,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// The store refused an operation, as the API server would (the HTTP status is in it).
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A command-line style argument (a generate spec, a duration, ...) is malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Reading a file or directory failed.
    #[error("reading {path}")]
    ReadFailed {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A manifest could not be parsed or is not a Kubernetes object.
    #[error("parsing {path}: {message}")]
    ManifestInvalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the document index where known.
        message: String,
    },
    /// A server task failed or panicked; reported by [`Sandbox::shutdown`](crate::Sandbox::shutdown).
    #[error("sandbox server task failed: {0}")]
    ServerFailed(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
