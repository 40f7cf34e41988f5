//! The retry policy: which failures are retried and how long to wait.
//!
//! Exponential backoff with full jitter (AWS architecture blog, "Exponential
//! Backoff And Jitter"): before retry `n` (1-based) wait a uniformly random
//! duration in `[0, min(max_backoff, base * 2^(n-1))]`. A `Retry-After`
//! header (429s, and 5xx that carry one) makes that wait at least what the
//! server asked, capped by `max_retry_after`, because the server knows its own
//! load better than the client does; `Retry-After: 0` leaves the backoff as
//! it is, so no answer makes the client retry in a tight loop.

use std::time::Duration;

use http::StatusCode;

/// How long one request may take by default (the CLI's `--request-timeout`).
///
/// Far longer than a discovery document or a list page takes from a
/// working API server, short enough that a server that accepts connections
/// and never answers fails the load within minutes (`1 + max_retries`
/// attempts of this), not never.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How a loader retries one request.
///
/// Every request (a discovery document, a list page) gets up to
/// `max_retries` retries after its first attempt. Retried: 429 Too Many
/// Requests, every 5xx, transport errors (refused or reset connections,
/// bodies cut short), attempts that take longer than `request_timeout`, and
/// 200 answers whose body is not the JSON expected. Never retried: other
/// 4xx (400 bad selector, 401/403 credentials, 404, 410 is handled by the
/// list's continue logic instead).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (the CLI's `--retries`, default 5).
    pub max_retries: u32,
    /// How long one attempt may take, from sending the request to the end
    /// of its body (a wait for a request slot or a backoff does not count):
    /// one that takes longer is abandoned, its connection closed, and
    /// retried like a connection error; when the retries run out the
    /// request fails with [`crate::Error::TimedOut`]. `None`: no bound (a
    /// server that never answers is then waited for until cancellation).
    /// Default [`DEFAULT_REQUEST_TIMEOUT`].
    pub request_timeout: Option<Duration>,
    /// The backoff ceiling of the first retry (doubles per retry).
    pub base_backoff: Duration,
    /// The largest backoff ceiling.
    pub max_backoff: Duration,
    /// The longest `Retry-After` honoured; longer requests are capped.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 5,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(10),
        }
    }
}

/// What to do with a failed attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Retry (if retries remain), waiting at least this long if the server said so.
    Retry {
        /// The server's `Retry-After`, already capped.
        after: Option<Duration>,
    },
    /// Give up at once.
    Fail,
}

impl RetryPolicy {
    /// The verdict for an HTTP status (never called for 2xx).
    pub(crate) fn classify_status(&self, status: StatusCode, retry_after: Option<&str>) -> Verdict {
        if status == StatusCode::TOO_MANY_REQUESTS {
            let after = retry_after
                .and_then(parse_retry_after)
                .map(|d| d.min(self.max_retry_after));
            Verdict::Retry { after }
        } else if status.is_server_error() {
            let after = retry_after
                .and_then(parse_retry_after)
                .map(|d| d.min(self.max_retry_after));
            Verdict::Retry { after }
        } else {
            Verdict::Fail
        }
    }

    /// The wait before retry number `retry` (1-based), given the server's
    /// capped `Retry-After` if any and a uniform random sample in `[0, 1)`:
    /// the jittered backoff, or the `Retry-After` if that is longer.
    pub(crate) fn delay(&self, retry: u32, retry_after: Option<Duration>, unit: f64) -> Duration {
        let exp = retry.saturating_sub(1).min(31);
        let ceiling = self
            .base_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        let backoff = ceiling.mul_f64(unit.clamp(0.0, 1.0));
        retry_after.map_or(backoff, |after| after.max(backoff))
    }

    /// The wait before retry number `retry` with fresh jitter.
    pub(crate) fn jittered_delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        self.delay(retry, retry_after, fastrand::f64())
    }
}

/// `Retry-After` as delta-seconds (the form API servers send). HTTP dates
/// are not honoured (the backoff applies instead).
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 5,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            base_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
            max_retry_after: Duration::from_secs(3),
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling() {
        let p = policy();
        assert_eq!(
            p.delay(1, None, 0.999_999),
            Duration::from_millis(100).mul_f64(0.999_999)
        );
        assert_eq!(p.delay(2, None, 0.5), Duration::from_millis(100));
        assert_eq!(p.delay(3, None, 0.5), Duration::from_millis(200));
        assert_eq!(p.delay(5, None, 0.5), Duration::from_millis(500));
        // 100ms * 2^5 = 3.2 s, capped at 1 s.
        assert_eq!(p.delay(6, None, 0.5), Duration::from_millis(500));
        assert_eq!(p.delay(60, None, 1.0), Duration::from_secs(1));
    }

    #[test]
    fn full_jitter_can_be_zero() {
        assert_eq!(policy().delay(4, None, 0.0), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_within_the_ceiling() {
        let p = policy();
        for retry in 1..10 {
            for _ in 0..100 {
                let d = p.jittered_delay(retry, None);
                assert!(d <= Duration::from_secs(1), "{d:?}");
            }
        }
    }

    #[test]
    fn throttling_honours_retry_after_capped() {
        let p = policy();
        assert_eq!(
            p.classify_status(StatusCode::TOO_MANY_REQUESTS, Some("2")),
            Verdict::Retry {
                after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            p.classify_status(StatusCode::TOO_MANY_REQUESTS, Some("32")),
            Verdict::Retry {
                after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(
            p.classify_status(
                StatusCode::TOO_MANY_REQUESTS,
                Some("Wed, 21 Oct 2015 07:28:00 GMT")
            ),
            Verdict::Retry { after: None }
        );
        assert_eq!(
            p.classify_status(StatusCode::TOO_MANY_REQUESTS, None),
            Verdict::Retry { after: None }
        );
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(2)), 0.1),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn retry_after_is_a_floor_not_a_replacement_for_the_backoff() {
        let p = policy();
        // Retry-After: 0 keeps the jittered backoff (no tight retry loop).
        assert_eq!(
            p.delay(3, Some(Duration::ZERO), 0.5),
            Duration::from_millis(200)
        );
        // A Retry-After shorter than the backoff drawn: the backoff wins.
        assert_eq!(
            p.delay(5, Some(Duration::from_millis(300)), 1.0),
            Duration::from_secs(1)
        );
        // Longer: the server's wait wins.
        assert_eq!(
            p.delay(5, Some(Duration::from_secs(2)), 1.0),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn server_errors_retry_client_errors_do_not() {
        let p = policy();
        for code in [500, 502, 503, 504] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(
                matches!(p.classify_status(status, None), Verdict::Retry { .. }),
                "{code}"
            );
        }
        for code in [400, 401, 403, 404, 405, 409, 410, 422] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(p.classify_status(status, None), Verdict::Fail, "{code}");
        }
    }
}
