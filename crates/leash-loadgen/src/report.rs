//! Per-client statistics and their merge.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

/// One client's own state: never shared while the client runs.
#[derive(Debug, Default)]
pub(crate) struct ClientStats {
    latencies: Vec<Duration>,
    allowed: u64,
    /// Allowed reviews that carried a JSON Patch (the mutating webhook's).
    patched: u64,
    denied: u64,
    other_status: u64,
    errors: BTreeMap<String, u64>,
}

impl ClientStats {
    /// A completed request: 200 reviews count as allowed/denied, 201 (pod
    /// created) as allowed, 403/422 (rejected by admission) as denied.
    pub(crate) fn record(&mut self, status: u16, body: &Bytes, took: Duration) {
        self.latencies.push(took);
        match status {
            200 => {
                let answer = serde_json::from_slice::<Value>(body).ok();
                let response = answer.as_ref().map(|v| &v["response"]);
                match response.and_then(|r| r["allowed"].as_bool()) {
                    Some(true) => {
                        self.allowed += 1;
                        if response.is_some_and(|r| r["patch"].is_string()) {
                            self.patched += 1;
                        }
                    }
                    Some(false) => self.denied += 1,
                    None => self.other_status += 1,
                }
            }
            201 => self.allowed += 1,
            400 | 403 | 422 => self.denied += 1,
            s => {
                self.other_status += 1;
                *self.errors.entry(format!("HTTP {s}")).or_default() += 1;
            }
        }
    }

    pub(crate) fn error(&mut self, e: String, took: Duration) {
        self.latencies.push(took);
        *self.errors.entry(e).or_default() += 1;
    }
}

/// The merged figures.
#[derive(Debug)]
pub(crate) struct Summary {
    mode: String,
    clients: usize,
    elapsed: Duration,
    requests: u64,
    allowed: u64,
    patched: u64,
    denied: u64,
    other_status: u64,
    errors: BTreeMap<String, u64>,
    p50: Duration,
    p95: Duration,
    p99: Duration,
    max: Duration,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[idx]
}

impl Summary {
    pub(crate) fn merge(
        mode: &str,
        clients: usize,
        elapsed: Duration,
        all: Vec<ClientStats>,
    ) -> Summary {
        let mut lat = Vec::new();
        let mut s = Summary {
            mode: mode.to_string(),
            clients,
            elapsed,
            requests: 0,
            allowed: 0,
            patched: 0,
            denied: 0,
            other_status: 0,
            errors: BTreeMap::new(),
            p50: Duration::ZERO,
            p95: Duration::ZERO,
            p99: Duration::ZERO,
            max: Duration::ZERO,
        };
        for c in all {
            lat.extend(c.latencies);
            s.allowed += c.allowed;
            s.patched += c.patched;
            s.denied += c.denied;
            s.other_status += c.other_status;
            for (k, v) in c.errors {
                *s.errors.entry(k).or_default() += v;
            }
        }
        lat.sort();
        s.requests = lat.len() as u64;
        s.p50 = pct(&lat, 0.50);
        s.p95 = pct(&lat, 0.95);
        s.p99 = pct(&lat, 0.99);
        s.max = lat.last().copied().unwrap_or_default();
        s
    }

    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    pub(crate) fn to_text(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let mut out = format!(
            "mode {} clients {} requests {} in {:.2}s: {:.0} req/s\nallowed {} (patched {}) denied {} other {} errors {}\nlatency ms: p50 {:.3} p95 {:.3} p99 {:.3} max {:.3}\n",
            self.mode,
            self.clients,
            self.requests,
            self.elapsed.as_secs_f64(),
            self.rps(),
            self.allowed,
            self.patched,
            self.denied,
            self.other_status,
            self.error_count(),
            ms(self.p50),
            ms(self.p95),
            ms(self.p99),
            ms(self.max)
        );
        for (e, n) in &self.errors {
            out.push_str(&format!("  error x{n}: {e}\n"));
        }
        out
    }

    pub(crate) fn to_json(&self) -> Value {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        json!({
            "mode": self.mode, "clients": self.clients, "requests": self.requests,
            "seconds": self.elapsed.as_secs_f64(), "requests_per_second": self.rps(),
            "allowed": self.allowed, "patched": self.patched, "denied": self.denied, "other_status": self.other_status,
            "errors": self.errors, "error_count": self.error_count(),
            "latency_ms": {"p50": ms(self.p50), "p95": ms(self.p95), "p99": ms(self.p99), "max": ms(self.max)},
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_each_clients_counts() {
        let mut a = ClientStats::default();
        a.record(
            200,
            &Bytes::from_static(br#"{"response":{"allowed":true}}"#),
            Duration::from_millis(1),
        );
        a.error("boom".into(), Duration::from_millis(9));
        let mut b = ClientStats::default();
        b.record(
            200,
            &Bytes::from_static(br#"{"response":{"allowed":false}}"#),
            Duration::from_millis(2),
        );
        b.error("boom".into(), Duration::from_millis(3));
        b.record(
            200,
            &Bytes::from_static(
                br#"{"response":{"allowed":true,"patchType":"JSONPatch","patch":"W10="}}"#,
            ),
            Duration::from_millis(1),
        );
        let s = Summary::merge("review", 2, Duration::from_secs(1), vec![a, b]);
        assert_eq!(
            (s.requests, s.allowed, s.patched, s.denied, s.error_count()),
            (5, 2, 1, 1, 2)
        );
        assert_eq!(s.max, Duration::from_millis(9));
        assert_eq!(s.p50, Duration::from_millis(2));
    }
}
