//! One GET with the loader's retry policy, raced against cancellation.
//!
//! # Invariants
//! 1. Every attempt's request, its body, and every backoff wait are raced
//!    against the caller's token: cancellation drops the in-flight request
//!    (hyper closes its connection) and returns [`Error::Cancelled`] at once.
//! 2. A response counts only once its whole body has arrived: a body cut short
//!    is a transport error of that attempt and is retried like a reset. A
//!    server certificate refused by TLS verification is a transport error
//!    that no retry can fix: it fails at once.
//! 3. At most `1 + max_retries` attempts per call; `retries` is incremented
//!    once per retry actually made, so callers can report it.
//! 4. Every attempt (request and whole body) is bounded by the policy's
//!    `request_timeout`: an attempt that takes longer is dropped (its
//!    connection closed) and retried like a transport error; the bound does
//!    not count the wait for a request slot, nor the backoff.
//! 5. With request slots (a load's semaphore of `concurrency` permits), a
//!    permit is held from sending a request to the end of its body and never
//!    across a backoff or `Retry-After` wait, so at most `concurrency`
//!    requests are in flight and a throttled kind does not idle a slot.

use std::sync::Arc;

use bytes::Bytes;
use http::{StatusCode, header};
use kube::client::Body;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::retry::{RetryPolicy, Verdict};

/// A whole response: status, `Retry-After`, body.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The `Retry-After` header, if any.
    pub(crate) retry_after: Option<String>,
    /// The whole body.
    pub(crate) body: Bytes,
}

/// An attempt that got no response: retried or turned into an [`Error`].
/// Whether `err` (a transport error) is TLS refusing the server's
/// certificate: a configuration to fix (a CA, `--insecure-skip-tls-verify`),
/// not a transient failure. rustls' error sits inside `io::Error`s, whose
/// `source` skips what they wrap: each is looked into.
fn is_certificate_refusal(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(rustls::Error::InvalidCertificate(_)) = e.downcast_ref() {
            return true;
        }
        // An `io::Error` wrapping another error: look at what it wraps (its
        // `source` would skip that error and go to the wrapped one's source).
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

enum AttemptError {
    Transport(Box<dyn std::error::Error + Send + Sync>),
    Auth(kube::Error),
    /// No whole response within this bound (the policy's `request_timeout`).
    TimedOut(std::time::Duration),
}

/// Sends GETs with retries. Cheap to clone (the kube client is a handle).
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: kube::Client,
    policy: RetryPolicy,
    /// Request slots: when set, each attempt holds a permit from the request
    /// to the end of its body, and no permit while waiting to retry.
    slots: Option<Arc<Semaphore>>,
}

/// How a body that parsed badly is handled: the caller's parse closure
/// returns `Err(serde_json::Error)` and the attempt is retried.
pub(crate) type ParseResult<T> = std::result::Result<T, serde_json::Error>;

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    pub(crate) fn new(client: kube::Client, policy: RetryPolicy) -> Self {
        Fetcher {
            client,
            policy,
            slots: None,
        }
    }

    /// Retries per request the policy allows.
    pub(crate) fn max_retries(&self) -> u32 {
        self.policy.max_retries
    }

    /// The same fetcher, limited to `slots.available_permits()` requests in
    /// flight (shared with every clone).
    pub(crate) fn with_slots(&self, slots: Arc<Semaphore>) -> Self {
        Fetcher {
            slots: Some(slots),
            ..self.clone()
        }
    }

    /// GET `path_and_query` with `accept`, retrying per the policy, and parse
    /// the answer with `parse` (a parse failure of a 2xx answer is retried
    /// too: the body may have been corrupted in transit). Statuses in
    /// `accepted` (besides 2xx) are handed to `parse` instead of failing.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops the in-flight request; nothing
    /// is left half-done.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn get<T, F>(
        &self,
        path_and_query: &str,
        accept: &str,
        operation: &str,
        accepted: &[StatusCode],
        token: &CancellationToken,
        retries: &mut u64,
        mut parse: F,
    ) -> Result<T>
    where
        F: FnMut(&Answer) -> ParseResult<T>,
    {
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome = match token
                .run_until_cancelled(self.attempt_in_slot(path_and_query, accept))
                .await
            {
                None => return Err(Error::Cancelled),
                Some(outcome) => outcome,
            };
            let after = match outcome {
                Ok(answer) if answer.status.is_success() || accepted.contains(&answer.status) => {
                    match parse(&answer) {
                        Ok(value) => return Ok(value),
                        Err(source) if attempt > self.policy.max_retries => {
                            return Err(Error::MalformedResponse {
                                operation: operation.to_owned(),
                                attempts: attempt,
                                source,
                            });
                        }
                        Err(source) => {
                            tracing::debug!(path = path_and_query, %source, "malformed answer; retrying");
                            None
                        }
                    }
                }
                Ok(answer) => match self
                    .policy
                    .classify_status(answer.status, answer.retry_after.as_deref())
                {
                    Verdict::Fail => {
                        return Err(status_error(
                            operation.to_owned(),
                            answer.status,
                            &answer.body,
                            attempt,
                        ));
                    }
                    Verdict::Retry { .. } if attempt > self.policy.max_retries => {
                        return Err(status_error(
                            operation.to_owned(),
                            answer.status,
                            &answer.body,
                            attempt,
                        ));
                    }
                    Verdict::Retry { after } => {
                        tracing::debug!(path = path_and_query, status = %answer.status, "retrying");
                        after
                    }
                },
                Err(AttemptError::Auth(err)) => return Err(Error::Client(err)),
                Err(AttemptError::Transport(source)) => {
                    if attempt > self.policy.max_retries || is_certificate_refusal(source.as_ref())
                    {
                        return Err(Error::Transport {
                            operation: operation.to_owned(),
                            attempts: attempt,
                            source,
                        });
                    }
                    tracing::debug!(path = path_and_query, error = %source, "transport error; retrying");
                    None
                }
                Err(AttemptError::TimedOut(timeout)) => {
                    if attempt > self.policy.max_retries {
                        return Err(Error::TimedOut {
                            operation: operation.to_owned(),
                            timeout,
                            attempts: attempt,
                        });
                    }
                    tracing::debug!(
                        path = path_and_query,
                        ?timeout,
                        "request timed out; retrying"
                    );
                    None
                }
            };
            *retries += 1;
            let wait = self.policy.jittered_delay(attempt, after);
            if token
                .run_until_cancelled(tokio::time::sleep(wait))
                .await
                .is_none()
            {
                return Err(Error::Cancelled);
            }
        }
    }

    /// One attempt, holding a request slot (if limited) until its body is
    /// in, within the policy's request timeout (counted once the slot is
    /// held, invariant 4).
    async fn attempt_in_slot(
        &self,
        path_and_query: &str,
        accept: &str,
    ) -> Result<Answer, AttemptError> {
        let _permit = match &self.slots {
            // The semaphore is never closed; `Err` cannot happen.
            Some(slots) => slots.acquire().await.ok(),
            None => None,
        };
        let attempt = self.attempt(path_and_query, accept);
        match self.policy.request_timeout {
            None => attempt.await,
            Some(timeout) => tokio::time::timeout(timeout, attempt)
                .await
                .unwrap_or(Err(AttemptError::TimedOut(timeout))),
        }
    }

    /// One request and its whole body.
    async fn attempt(&self, path_and_query: &str, accept: &str) -> Result<Answer, AttemptError> {
        let request = http::Request::get(path_and_query)
            .header(header::ACCEPT, accept)
            .body(Body::empty())
            .map_err(|e| AttemptError::Transport(Box::new(e)))?;
        let response = match self.client.send(request).await {
            Ok(response) => response,
            Err(err @ kube::Error::Auth(_)) => return Err(AttemptError::Auth(err)),
            Err(err) => return Err(AttemptError::Transport(Box::new(err))),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect_bytes()
            .await
            .map_err(|e| AttemptError::Transport(Box::new(e)))?;
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }
}

/// The fields of a `metav1.Status` that errors report.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct StatusBody {
    #[serde(default)]
    pub(crate) reason: String,
    #[serde(default)]
    pub(crate) message: String,
    #[serde(default)]
    pub(crate) metadata: StatusMeta,
}

/// `Status.metadata`: a 410 Expired carries the fresh continue token here.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct StatusMeta {
    #[serde(default, rename = "continue")]
    pub(crate) continue_token: Option<String>,
}

/// Parse a Status body, or describe a non-Status body (APF's 429 is plain text).
pub(crate) fn parse_status(status: StatusCode, body: &[u8]) -> StatusBody {
    match serde_json::from_slice::<StatusBody>(body) {
        Ok(parsed) if !parsed.reason.is_empty() || !parsed.message.is_empty() => parsed,
        _ => {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            let message: String = text.chars().take(200).collect();
            StatusBody {
                reason: status.canonical_reason().unwrap_or("").to_owned(),
                message,
                metadata: StatusMeta::default(),
            }
        }
    }
}

fn status_error(operation: String, status: StatusCode, body: &[u8], attempts: u32) -> Error {
    let parsed = parse_status(status, body);
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Error::Unauthorized {
            operation,
            code: status.as_u16(),
            reason: parsed.reason,
            message: parsed.message,
        },
        StatusCode::BAD_REQUEST => Error::BadRequest {
            operation,
            reason: parsed.reason,
            message: parsed.message,
        },
        _ => Error::Status {
            operation,
            code: status.as_u16(),
            reason: parsed.reason,
            message: parsed.message,
            attempts,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bodies_parse_or_fall_back_to_text() {
        let s = parse_status(
            StatusCode::GONE,
            br#"{"kind":"Status","apiVersion":"v1","metadata":{"continue":"abc"},"status":"Failure","message":"too old","reason":"Expired","code":410}"#,
        );
        assert_eq!(s.reason, "Expired");
        assert_eq!(s.metadata.continue_token.as_deref(), Some("abc"));

        let s = parse_status(
            StatusCode::TOO_MANY_REQUESTS,
            b"Too many requests, please try again later.\n",
        );
        assert_eq!(s.reason, "Too Many Requests");
        assert_eq!(s.message, "Too many requests, please try again later.");
    }

    #[test]
    fn statuses_map_to_errors() {
        let e = status_error("list pods".into(), StatusCode::UNAUTHORIZED, b"{}", 1);
        assert!(matches!(e, Error::Unauthorized { code: 401, .. }));
        assert!(e.is_configuration());
        let e = status_error(
            "list pods".into(),
            StatusCode::BAD_REQUEST,
            br#"{"kind":"Status","reason":"BadRequest","message":"unable to parse requirement"}"#,
            1,
        );
        assert!(e.is_configuration());
        assert!(e.to_string().contains("unable to parse requirement"), "{e}");
        let e = status_error(
            "list pods".into(),
            StatusCode::INTERNAL_SERVER_ERROR,
            b"boom",
            6,
        );
        assert!(!e.is_configuration());
        assert!(e.to_string().contains("after 6 attempts"), "{e}");
    }

    #[test]
    fn a_refused_certificate_is_found_inside_nested_io_errors() {
        use std::io::{Error as IoError, ErrorKind};
        let refused = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let nested = IoError::other(IoError::new(ErrorKind::InvalidData, refused));
        assert!(is_certificate_refusal(&nested));
        let refused_conn = IoError::new(ErrorKind::ConnectionRefused, "refused");
        assert!(!is_certificate_refusal(&refused_conn));
        let other_tls = IoError::new(ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert!(!is_certificate_refusal(&other_tls));
    }
}
