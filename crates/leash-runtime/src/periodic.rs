//! Periodic jobs: the equivalent of `wait.UntilWithContext`.
//!
//! Seed: Kyverno's aggregate report controller started a cleanup goroutine in
//! its constructor that nothing ever stopped. Here the constructor only
//! stores the schedule; work happens inside [`Every::run`], which returns when
//! its token is cancelled.
//!
//! # Invariants
//! 1. [`Every::new`] and the builder methods start nothing; only the future
//!    returned by [`Every::run`] does work, and only while it is polled.
//! 2. Runs never overlap: the next run starts only after the previous one
//!    finished plus one (jittered) interval, measured from its end (Go's
//!    `sliding = true`).
//! 3. `run` returns promptly once the token is cancelled: the wait and the
//!    job itself are raced against the token (a job cut short by
//!    cancellation is dropped at its next `.await`).
//! 4. A jittered delay lies in `[interval, interval * (1 + jitter)]`.
//!
//! No shared state, no tasks: a plain future, built from tokio's timer and a
//! `CancellationToken`.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Runs `job` every `interval` until `token` is cancelled. Shorthand for
/// `Every::new(interval, job).run(token)`.
///
/// # Cancel safety
/// Cancel safe: dropping the future stops the schedule (and drops a run in
/// progress).
pub async fn every<J, Fut>(interval: Duration, token: CancellationToken, job: J)
where
    J: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    Every::new(interval, job).run(token).await;
}

/// A periodic job: a schedule plus the job. Build it with [`Every::new`], then
/// `.await` [`Every::run`] (usually inside a [`crate::Scope`] task).
pub struct Every<J> {
    interval: Duration,
    jitter: f64,
    immediate: bool,
    rng: fastrand::Rng,
    job: J,
}

impl<J> fmt::Debug for Every<J> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Every")
            .field("interval", &self.interval)
            .field("jitter", &self.jitter)
            .field("immediate", &self.immediate)
            .finish_non_exhaustive()
    }
}

impl<J, Fut> Every<J>
where
    J: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    /// Runs `job` every `interval`, first run immediately, no jitter.
    /// Starts nothing.
    pub fn new(interval: Duration, job: J) -> Every<J> {
        Every {
            interval,
            jitter: 0.0,
            immediate: true,
            rng: fastrand::Rng::new(),
            job,
        }
    }

    /// Adds up to `factor * interval` of random delay to each wait (Go's
    /// `wait.Jitter`). `factor` is clamped to `0.0..=1.0`; NaN means 0.
    pub fn jitter(mut self, factor: f64) -> Every<J> {
        self.jitter = if factor.is_nan() {
            0.0
        } else {
            factor.clamp(0.0, 1.0)
        };
        self
    }

    /// Whether the first run happens at once (`true`, the default, as
    /// `wait.UntilWithContext`) or after the first interval.
    pub fn immediate(mut self, immediate: bool) -> Every<J> {
        self.immediate = immediate;
        self
    }

    /// Seeds the jitter's random generator (for reproducible schedules).
    pub fn seed(mut self, seed: u64) -> Every<J> {
        self.rng = fastrand::Rng::with_seed(seed);
        self
    }

    /// The next wait: the interval plus its jitter (invariant 4).
    pub fn next_delay(&mut self) -> Duration {
        jittered(self.interval, self.jitter, &mut self.rng)
    }

    /// Runs the job until `token` is cancelled (invariants 2, 3).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops the schedule.
    pub async fn run(mut self, token: CancellationToken) {
        if !self.immediate {
            let delay = self.next_delay();
            if token
                .run_until_cancelled(tokio::time::sleep(delay))
                .await
                .is_none()
            {
                return;
            }
        }
        loop {
            if token.run_until_cancelled((self.job)()).await.is_none() {
                return;
            }
            let delay = self.next_delay();
            if token
                .run_until_cancelled(tokio::time::sleep(delay))
                .await
                .is_none()
            {
                return;
            }
        }
    }
}

/// `base` plus a uniformly random `[0, factor]` fraction of it.
fn jittered(base: Duration, factor: f64, rng: &mut fastrand::Rng) -> Duration {
    if factor <= 0.0 {
        return base;
    }
    base + base.mul_f64(factor * rng.f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range() {
        let base = Duration::from_millis(100);
        let mut rng = fastrand::Rng::with_seed(7);
        let mut above = 0;
        for _ in 0..10_000 {
            let d = jittered(base, 0.5, &mut rng);
            assert!(d >= base && d <= base.mul_f64(1.5), "{d:?} out of range");
            if d > base.mul_f64(1.25) {
                above += 1;
            }
        }
        // Uniform: about half above the midpoint; proves jitter is applied.
        assert!((4_000..6_000).contains(&above), "{above}");
        assert_eq!(jittered(base, 0.0, &mut rng), base);
    }

    #[test]
    fn jitter_factor_is_clamped() {
        let e = Every::new(Duration::from_secs(1), || async {}).jitter(7.0);
        assert_eq!(e.jitter, 1.0);
        let e = Every::new(Duration::from_secs(1), || async {}).jitter(f64::NAN);
        assert_eq!(e.jitter, 0.0);
        let e = Every::new(Duration::from_secs(1), || async {}).jitter(-1.0);
        assert_eq!(e.jitter, 0.0);
    }
}
