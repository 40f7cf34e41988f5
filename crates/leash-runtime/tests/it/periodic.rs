//! Every: never overlaps, stops on cancel, jitter in range, starts nothing.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leash_runtime::{Every, Scope, every};
use tokio::time::Instant;

type Starts = Arc<Mutex<Vec<Instant>>>;

fn gaps(starts: &Starts) -> Vec<Duration> {
    let s = starts.lock().unwrap();
    s.windows(2).map(|w| w[1] - w[0]).collect()
}

/// A slow job (30 ms) with a short interval (10 ms): runs never overlap and
/// each starts at least interval + job time after the previous one.
#[tokio::test(start_paused = true)]
async fn periodic_never_overlaps_a_slow_job() {
    let scope = Scope::new();
    let running = Arc::new(AtomicUsize::new(0));
    let max_running = Arc::new(AtomicUsize::new(0));
    let starts: Starts = Arc::default();
    let (r, m, s) = (running.clone(), max_running.clone(), starts.clone());
    let job = move || {
        let (r, m, s) = (r.clone(), m.clone(), s.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            s.lock().unwrap().push(Instant::now());
            tokio::time::sleep(Duration::from_millis(30)).await;
            r.fetch_sub(1, Ordering::SeqCst);
        }
    };
    let token = scope.token().clone();
    scope.spawn("periodic", async move {
        Every::new(Duration::from_millis(10), job).run(token).await;
        Ok::<(), Infallible>(())
    });
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    scope.shutdown().await.unwrap();

    assert_eq!(max_running.load(Ordering::SeqCst), 1, "runs overlapped");
    let gaps = gaps(&starts);
    assert!(
        (24..=26).contains(&(gaps.len() + 1)),
        "{} runs",
        gaps.len() + 1
    );
    for g in gaps {
        assert!(g >= Duration::from_millis(40), "gap {g:?} < job + interval");
    }
}

/// Cancelling stops the schedule at once, even in the middle of a run, and
/// nothing runs afterwards.
#[tokio::test(start_paused = true)]
async fn periodic_stops_on_cancel() {
    let scope = Scope::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let token = scope.token().clone();
    let done = scope.spawn_with_output(every(Duration::from_millis(10), token, move || {
        let r = r.clone();
        async move {
            let n = r.fetch_add(1, Ordering::SeqCst);
            if n == 3 {
                // A run that would take an hour.
                tokio::time::sleep(Duration::from_secs(3_600)).await;
            }
        }
    }));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4, "run 4 is in progress");
    let cancelled_at = Instant::now();
    scope.cancel();
    done.await.unwrap();
    assert!(
        cancelled_at.elapsed() < Duration::from_millis(1),
        "run() waited {:?} after cancel",
        cancelled_at.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 4, "ran after cancel");
    scope.join().await.unwrap();
}

/// With jitter 0.5 and an instant job, every gap is in [100, 150] ms (plus
/// the timer's 1 ms resolution) and the gaps actually vary.
#[tokio::test(start_paused = true)]
async fn periodic_jitter_stays_in_range() {
    let scope = Scope::new();
    let starts: Starts = Arc::default();
    let s = starts.clone();
    let token = scope.token().clone();
    scope.spawn("jittered", async move {
        Every::new(Duration::from_millis(100), move || {
            s.lock().unwrap().push(Instant::now());
            async {}
        })
        .jitter(0.5)
        .seed(42)
        .run(token)
        .await;
        Ok::<(), Infallible>(())
    });
    tokio::time::sleep(Duration::from_secs(20)).await;
    scope.shutdown().await.unwrap();
    let gaps = gaps(&starts);
    assert!(gaps.len() > 100, "{} gaps", gaps.len());
    for g in &gaps {
        assert!(
            *g >= Duration::from_millis(100) && *g <= Duration::from_millis(151),
            "gap {g:?} out of range"
        );
    }
    let above = gaps
        .iter()
        .filter(|g| **g > Duration::from_millis(125))
        .count();
    assert!(
        above > gaps.len() / 4 && above < gaps.len() * 3 / 4,
        "jitter not uniform: {above} of {} above midpoint",
        gaps.len()
    );
}

#[tokio::test(start_paused = true)]
async fn periodic_first_run_waits_unless_immediate() {
    for (immediate, first_at) in [(true, 0), (false, 500)] {
        let scope = Scope::new();
        let starts: Starts = Arc::default();
        let s = starts.clone();
        let t0 = Instant::now();
        let token = scope.token().clone();
        scope.spawn("job", async move {
            Every::new(Duration::from_millis(500), move || {
                s.lock().unwrap().push(Instant::now());
                async {}
            })
            .immediate(immediate)
            .run(token)
            .await;
            Ok::<(), Infallible>(())
        });
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        scope.shutdown().await.unwrap();
        let first = starts.lock().unwrap()[0] - t0;
        assert_eq!(
            first,
            Duration::from_millis(first_at),
            "immediate={immediate}"
        );
    }
}

/// The constructor and builder start nothing: the job never runs until
/// `run` is polled.
#[tokio::test(start_paused = true)]
async fn periodic_constructor_starts_nothing() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let job = Every::new(Duration::from_millis(1), move || {
        r.fetch_add(1, Ordering::SeqCst);
        async {}
    })
    .jitter(0.1)
    .immediate(true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(job);
}
