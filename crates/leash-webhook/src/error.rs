//! The crate's errors.

/// What went wrong in the admission component.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The listen address could not be bound (not worth retrying as is).
    #[error("binding the admission listener on {addr}")]
    BindFailed {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A TLS file could not be read or parsed.
    #[error("reading TLS {what} from {path}: {message}")]
    TlsFileInvalid {
        /// `certificate` or `key`.
        what: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Only one of `tls_cert` and `tls_key` was given.
    #[error("--tls-cert and --tls-key go together: {0} is missing")]
    TlsIncomplete(&'static str),
    /// Generating the self-signed certificate failed.
    #[error("generating the self-signed serving certificate")]
    CertificateFailed(#[source] rcgen::Error),
    /// rustls rejected the certificate or key.
    #[error("building the TLS configuration")]
    TlsConfigFailed(#[source] rustls::Error),
    /// A Kubernetes API call failed (worth retrying; the components do).
    #[error("{operation}")]
    ApiFailed {
        /// What was being done.
        operation: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// A task of the component failed or panicked.
    #[error("a task of the admission component failed")]
    TaskFailed(#[source] leash_runtime::ScopeError),
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
