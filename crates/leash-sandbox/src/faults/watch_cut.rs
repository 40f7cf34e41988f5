//! The watch-cut fault: a watch's body stream that ends early, after a drawn time
//! or after a drawn event, cleanly (the chunked response ends) or with a reset.
//!
//! # Invariants
//! 1. Whole events only: a chunk is cut between lines, never inside one, so a clean
//!    cut leaves the client with a valid stream that simply ended.
//! 2. A cut stream ends for good: after the cut nothing more is read from the
//!    watch (its state, and the store subscription, are dropped with it).
//! 3. The time bound is raced against the next chunk only; the watch's own waits
//!    still race the server's token, so shutdown is not held up by a cut pending.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::config::WatchCut;

/// How one watch is cut, drawn when it starts.
#[derive(Debug)]
pub(crate) struct WatchCutter {
    /// The watch ends at this instant, if set.
    pub(crate) deadline: Option<Instant>,
    /// Per-event cut probability, already clamped.
    pub(crate) rate: f64,
    /// The watch's own generator for the per-event draws.
    pub(crate) rng: fastrand::Rng,
    pub(crate) mode: WatchCut,
    /// Counts watches cut (shared by every watch of the sandbox).
    pub(crate) cuts: Arc<AtomicU64>,
}

impl WatchCutter {
    /// Counts this cut. A statistic read by tests after the fact: Relaxed.
    fn count(&self) {
        self.cuts.fetch_add(1, Ordering::Relaxed);
    }

    /// The length of the prefix of `chunk` to send, if the watch is cut inside it
    /// (right after one of its event lines).
    fn cut_in(&mut self, chunk: &Bytes) -> Option<usize> {
        if self.rate <= 0.0 {
            return None;
        }
        let mut end = 0;
        for line in chunk.split_inclusive(|b| *b == b'\n') {
            end += line.len();
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if self.rng.f64() < self.rate {
                return Some(end);
            }
        }
        None
    }
}

type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, Infallible>> + Send>>;

enum State {
    Open(Chunks, WatchCutter),
    /// The prefix before a cut was sent: end the way the cutter says.
    Cut(WatchCut),
    Done,
}

/// `chunks`, cut as `cutter` says. A reset ends with an I/O error after a short pause
/// (so hyper flushes what came before), which makes hyper abort the connection
/// without the terminating chunk.
pub(crate) fn cut_watch(
    chunks: Chunks,
    cutter: WatchCutter,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    futures::stream::unfold(State::Open(chunks, cutter), |state| async move {
        match state {
            State::Done => None,
            State::Cut(WatchCut::Clean) => None,
            State::Cut(WatchCut::Reset) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "injected watch cut (leash sandbox --watch-cut reset)",
                    )),
                    State::Done,
                ))
            }
            State::Open(mut chunks, mut cutter) => {
                let next = match cutter.deadline {
                    Some(deadline) => tokio::select! {
                        next = chunks.next() => Some(next),
                        _ = tokio::time::sleep_until(deadline) => None,
                    },
                    None => Some(chunks.next().await),
                };
                match next {
                    // The time bound passed: end now.
                    None => {
                        cutter.count();
                        match cutter.mode {
                            WatchCut::Clean => None,
                            mode => Some((Ok(Bytes::new()), State::Cut(mode))),
                        }
                    }
                    // The watch ended by itself (timeoutSeconds, shutdown, 410).
                    Some(None) => None,
                    Some(Some(Ok(chunk))) => match cutter.cut_in(&chunk) {
                        None => Some((Ok(chunk), State::Open(chunks, cutter))),
                        Some(len) => {
                            cutter.count();
                            Some((Ok(chunk.slice(..len)), State::Cut(cutter.mode)))
                        }
                    },
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(n: usize) -> Chunks {
        let chunk: String = (0..n)
            .map(|i| format!("{{\"type\":\"ADDED\",\"object\":{{\"n\":{i}}}}}\n"))
            .collect();
        Box::pin(futures::stream::iter([Ok(Bytes::from(chunk))]).chain(futures::stream::pending()))
    }

    fn cutter(deadline: Option<Instant>, rate: f64, mode: WatchCut) -> WatchCutter {
        WatchCutter {
            deadline,
            rate,
            rng: fastrand::Rng::with_seed(3),
            mode,
            cuts: Arc::default(),
        }
    }

    async fn collect(s: impl Stream<Item = Result<Bytes, std::io::Error>>) -> (Vec<u8>, bool) {
        futures::pin_mut!(s);
        let mut out = Vec::new();
        while let Some(item) = s.next().await {
            match item {
                Ok(b) => out.extend_from_slice(&b),
                Err(_) => return (out, true),
            }
        }
        (out, false)
    }

    #[tokio::test]
    async fn a_cut_inside_a_chunk_keeps_whole_events() {
        let (body, reset) =
            collect(cut_watch(events(50), cutter(None, 0.2, WatchCut::Clean))).await;
        assert!(!reset);
        let text = String::from_utf8(body).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert!(
            !lines.is_empty() && lines.len() < 50,
            "{} lines",
            lines.len()
        );
        assert!(text.ends_with('\n'));
        for (i, line) in lines.iter().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["object"]["n"], i, "events in order, none cut in half");
        }
    }

    #[tokio::test]
    async fn a_reset_cut_ends_with_an_error() {
        let (body, reset) = collect(cut_watch(events(1), cutter(None, 1.0, WatchCut::Reset))).await;
        assert!(reset);
        assert_eq!(body.iter().filter(|b| **b == b'\n').count(), 1);
    }

    // Real time (the crate's tokio has no test-util): a short bound, checked both ways.
    #[tokio::test]
    async fn the_time_bound_ends_an_idle_watch() {
        let deadline = Instant::now() + Duration::from_millis(100);
        let (body, reset) = collect(cut_watch(
            events(3),
            cutter(Some(deadline), 0.0, WatchCut::Clean),
        ))
        .await;
        assert!(!reset);
        assert_eq!(String::from_utf8(body).unwrap().lines().count(), 3);
        assert!(Instant::now() >= deadline);
        assert!(
            Instant::now() < deadline + Duration::from_secs(10),
            "no hang"
        );
    }
}
