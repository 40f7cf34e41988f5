//! Go duration strings (`metav1.Duration`), as Kyverno's `refreshInterval`.
//!
//! Kubernetes serializes `metav1.Duration` with Go's `time.ParseDuration`
//! syntax: an optional sign, then one or more decimal numbers each with a
//! unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as `10m`, `1h30m`,
//! `1.5s` or `200ms`. A bare `0` is allowed.

use std::time::Duration;

/// Parse a Go duration string with leash-policy's `time.ParseDuration`
/// (the one Go duration parser). Negative durations are rejected here (a
/// refresh interval cannot be negative); the caller rejects zero.
pub(crate) fn parse_go_duration(input: &str) -> Result<Duration, String> {
    let nanos = leash_policy::k8s::quantity::parse_duration_nanos(input)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("negative duration {input:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_go_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_go_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("3us"), Ok(Duration::from_micros(3)));
    }

    #[test]
    fn rejects_bad_durations() {
        for bad in ["", "10", "m", "1x", "-1s", "1..5s", "s10", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
