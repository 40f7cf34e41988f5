//! Fault injection: latency, 500s, 429s with Retry-After, connection resets, and
//! watches cut short, drawn from seeded random generators so a sequential client
//! sees the same faults on every run.
//!
//! # Invariants
//! 1. The settings are swapped whole (an `Arc<Faults>` replaced under a mutex held
//!    only for the swap or the clone); a request uses one consistent copy.
//! 2. The generator's mutex is held only for the draws of one request, never across
//!    an await; each request draws the same number of values in the same order
//!    (jitter, failure, throttling, reset), so sequences are reproducible per seed.
//! 3. Watch cuts draw from a second generator (one draw per watch, only while a cut
//!    is configured), so they never shift the request generator's sequence; each
//!    watch then draws its per-event cuts from a generator of its own, seeded by
//!    that draw, with no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderValue, Response, StatusCode, header};

use crate::config::Faults;
use crate::status::ApiError;

mod watch_cut;

pub(crate) use watch_cut::{WatchCutter, cut_watch};

/// Mixed into the seed of the watch-cut generator, so it differs from the request one.
const WATCH_SEED_SALT: u64 = 0x5761_7463_6843_7574;

/// What to do with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Serve,
    Fail,
    Throttle(u64),
    Reset,
    Truncate,
}

/// The live fault settings and the generator.
#[derive(Debug)]
pub(crate) struct FaultInjector {
    current: Mutex<Arc<Faults>>,
    rng: Mutex<fastrand::Rng>,
    watch_rng: Mutex<fastrand::Rng>,
    watches_cut: Arc<AtomicU64>,
}

impl FaultInjector {
    pub(crate) fn new(faults: Faults, seed: u64) -> Self {
        Self {
            current: Mutex::new(Arc::new(faults)),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            watch_rng: Mutex::new(fastrand::Rng::with_seed(seed ^ WATCH_SEED_SALT)),
            watches_cut: Arc::default(),
        }
    }

    pub(crate) fn set(&self, faults: Faults) {
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(faults);
    }

    pub(crate) fn get(&self) -> Arc<Faults> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The delay and the action for one request to `path`. `discovery` requests get
    /// failures only with `fail_discovery`.
    pub(crate) fn decide(&self, path: &str, discovery: bool) -> (Duration, Action) {
        let f = self.get();
        let (jitter, fail, throttle, reset) = {
            let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
            (rng.f64(), rng.f64(), rng.f64(), rng.f64())
        };
        let delay = f.latency.saturating_add(f.latency_jitter.mul_f64(jitter));
        let action = if discovery && !f.fail_discovery {
            Action::Serve
        } else if fail < f.fail_rate.clamp(0.0, 1.0)
            || f.fail_paths.iter().any(|p| path.starts_with(p.as_str()))
        {
            Action::Fail
        } else if throttle < f.throttle_rate.clamp(0.0, 1.0) {
            Action::Throttle(f.retry_after_secs)
        } else if reset < f.reset_rate.clamp(0.0, 1.0) {
            Action::Reset
        } else if reset < f.reset_rate.clamp(0.0, 1.0) + f.truncate_rate.clamp(0.0, 1.0) {
            Action::Truncate
        } else {
            Action::Serve
        };
        (delay, action)
    }
}

impl FaultInjector {
    /// How a watch starting now is cut, or `None` when no watch cut is configured.
    pub(crate) fn watch_cutter(&self) -> Option<WatchCutter> {
        let f = self.get();
        let rate = f.watch_cut_rate.clamp(0.0, 1.0);
        if f.watch_cut_after.is_none() && rate <= 0.0 {
            return None;
        }
        let (fraction, seed) = {
            let mut rng = self.watch_rng.lock().unwrap_or_else(|e| e.into_inner());
            (rng.f64(), rng.u64(..))
        };
        Some(WatchCutter {
            deadline: f
                .watch_cut_after
                .map(|bound| tokio::time::Instant::now() + bound.mul_f64(fraction)),
            rate,
            rng: fastrand::Rng::with_seed(seed),
            mode: f.watch_cut,
            cuts: self.watches_cut.clone(),
        })
    }

    /// How many watches were cut so far. A statistic: Relaxed.
    pub(crate) fn watches_cut(&self) -> u64 {
        self.watches_cut.load(Ordering::Relaxed)
    }
}

/// The injected 429, as API Priority and Fairness sends it.
pub(crate) fn throttled(retry_after: u64) -> Response<Body> {
    let mut r = Response::new(Body::from("Too many requests, please try again later.\n"));
    *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    r
}

/// The injected 500.
pub(crate) fn failed() -> ApiError {
    ApiError::internal("Internal error occurred: injected fault (leash sandbox --fail-rate)")
}

/// `response` with a body that stops after part of its first chunk with an error, which
/// makes hyper abort the connection mid-response.
pub(crate) fn reset(response: Response<Body>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let mut data = body.into_data_stream();
    let stream = futures::stream::once(async move {
        match data.next().await {
            Some(Ok(chunk)) => chunk.slice(..chunk.len() / 2),
            _ => Bytes::new(),
        }
    })
    .map(Ok::<_, std::io::Error>)
    .chain(futures::stream::once(async {
        // Let hyper flush the head and the partial chunk first, so the client sees a
        // response that breaks off (not an empty connection).
        tokio::time::sleep(Duration::from_millis(20)).await;
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "injected connection reset (leash sandbox --reset-rate)",
        ))
    }));
    Response::from_parts(parts, Body::from_stream(stream))
}

/// `response` with only the first half of its body, ended cleanly: the status, the
/// headers and a `Content-Length` that matches what is sent.
/// A body of unknown length (a watch's stream) is left whole: it has no length to halve.
pub(crate) async fn truncate(response: Response<Body>) -> Response<Body> {
    use axum::body::HttpBody as _;
    let known = response.headers().contains_key(header::CONTENT_LENGTH)
        || response.body().size_hint().exact().is_some();
    if !known {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // A body of known length is built in memory (a list's pieces, an object): collecting
    // it waits on nothing. One that fails to collect is sent empty (a truncation too).
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let half = bytes.slice(..bytes.len() / 2);
    parts
        .headers
        .insert(header::CONTENT_LENGTH, HeaderValue::from(half.len()));
    Response::from_parts(parts, Body::from(half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_and_reproducible() {
        let faults = Faults {
            fail_rate: 0.3,
            throttle_rate: 0.3,
            reset_rate: 0.3,
            ..Faults::default()
        };
        let a = FaultInjector::new(faults.clone(), 7);
        let b = FaultInjector::new(faults, 7);
        let xs: Vec<_> = (0..200)
            .map(|_| a.decide("/api/v1/pods", false).1)
            .collect();
        let ys: Vec<_> = (0..200)
            .map(|_| b.decide("/api/v1/pods", false).1)
            .collect();
        assert_eq!(xs, ys);
        for action in [
            Action::Serve,
            Action::Fail,
            Action::Throttle(1),
            Action::Reset,
        ] {
            assert!(xs.contains(&action), "{action:?} never drawn");
        }
        assert!((0..100).all(|_| a.decide("/api", true).1 == Action::Serve));
    }

    #[test]
    fn failed_paths_always_fail_and_keep_the_sequence() {
        let faults = Faults {
            fail_rate: 0.3,
            fail_paths: vec!["/apis/kyverno.io/".into()],
            ..Faults::default()
        };
        let a = FaultInjector::new(faults.clone(), 3);
        let b = FaultInjector::new(faults, 3);
        for _ in 0..50 {
            assert_eq!(
                a.decide("/apis/kyverno.io/v1/clusterpolicies", false).1,
                Action::Fail
            );
        }
        let others: Vec<_> = (0..100)
            .map(|_| a.decide("/api/v1/pods", false).1)
            .collect();
        // `b` makes the same number of draws for other paths: the sequence after
        // the failed paths' requests is the one a plain run sees.
        for _ in 0..50 {
            b.decide("/api/v1/pods", false);
        }
        let plain: Vec<_> = (0..100)
            .map(|_| b.decide("/api/v1/pods", false).1)
            .collect();
        assert_eq!(others, plain);
        assert!(others.contains(&Action::Serve));
    }

    #[test]
    fn watch_cuts_only_when_configured_and_within_the_bound() {
        let f = FaultInjector::new(Faults::default(), 1);
        assert!(f.watch_cutter().is_none());
        let bound = Duration::from_secs(10);
        f.set(Faults {
            watch_cut_after: Some(bound),
            ..Faults::default()
        });
        let before = tokio::time::Instant::now();
        let deadlines: Vec<_> = (0..50)
            .map(|_| f.watch_cutter().and_then(|c| c.deadline).unwrap())
            .collect();
        let after = tokio::time::Instant::now();
        assert!(
            deadlines
                .iter()
                .all(|d| *d >= before && *d <= after + bound)
        );
        assert!(
            deadlines.windows(2).any(|w| w[0] != w[1]),
            "drawn per watch"
        );
        f.set(Faults {
            watch_cut_rate: 2.0,
            ..Faults::default()
        });
        let c = f.watch_cutter().unwrap();
        assert_eq!((c.deadline, c.rate), (None, 1.0));
    }

    #[test]
    fn watch_cuts_do_not_shift_the_request_sequence() {
        let faults = Faults {
            fail_rate: 0.5,
            ..Faults::default()
        };
        let a = FaultInjector::new(faults.clone(), 9);
        let b = FaultInjector::new(
            Faults {
                watch_cut_rate: 0.5,
                ..faults
            },
            9,
        );
        let xs: Vec<_> = (0..100)
            .map(|_| a.decide("/api/v1/pods", false).1)
            .collect();
        let ys: Vec<_> = (0..100)
            .map(|_| {
                let _ = b.watch_cutter();
                b.decide("/api/v1/pods", false).1
            })
            .collect();
        assert_eq!(xs, ys);
    }

    #[test]
    fn latency_and_jitter() {
        let f = FaultInjector::new(
            Faults {
                latency: Duration::from_millis(10),
                latency_jitter: Duration::from_millis(5),
                ..Faults::default()
            },
            1,
        );
        for _ in 0..50 {
            let (d, _) = f.decide("/api/v1/pods", false);
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(15));
        }
    }
}
