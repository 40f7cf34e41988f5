//! Go duration strings (`metav1.Duration`), as Kyverno's `refreshInterval`.
//!
//! Kubernetes serializes `metav1.Duration` with Go's `time.ParseDuration`
//! syntax: an optional sign, then one or more decimal numbers each with a
//! unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`), such as `10m`, `1h30m`,
//! `1.5s` or `200ms`. A bare `0` is allowed.

use std::time::Duration;

/// Parse a Go duration string. Negative durations are rejected here (a
/// refresh interval cannot be negative); the caller rejects zero.
pub(crate) fn parse_go_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty duration".to_owned());
    }
    let s = match s.strip_prefix('-') {
        Some(rest) if rest != "0" => return Err(format!("negative duration {input:?}")),
        Some(rest) => rest,
        None => s.strip_prefix('+').unwrap_or(s),
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total_nanos: u128 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {input:?}"))?;
        if number_len == 0 {
            return Err(format!("invalid duration {input:?}"));
        }
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            other => return Err(format!("unknown unit {other:?} in duration {input:?}")),
        };
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
            return Err(format!("invalid duration {input:?}"));
        }
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| format!("invalid duration {input:?}"))?
        };
        total_nanos = int
            .checked_mul(unit_nanos)
            .and_then(|n| total_nanos.checked_add(n))
            .ok_or_else(|| format!("duration {input:?} is too large"))?;
        // Fractions: scale digit by digit so `1.5h` is exact.
        let mut scale = unit_nanos;
        for digit in frac_part.bytes() {
            scale /= 10;
            total_nanos += u128::from(digit - b'0') * scale;
        }
        rest = after;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000)
        .map_err(|_| format!("duration {input:?} is too large"))?;
    // The remainder of a division by 1e9 always fits in u32.
    let nanos = (total_nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
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
