//! Go's `time.Duration`: parsing (`time.ParseDuration`) and printing
//! (`Duration.String`), on signed nanoseconds.

const NS: i64 = 1;
const US: i64 = 1_000;
const MS: i64 = 1_000_000;
const SEC: i64 = 1_000_000_000;
const MIN: i64 = 60 * SEC;
const HOUR: i64 = 60 * MIN;

/// Parses a Go duration such as `1h30m`, `-1.5s`, `300ms`, `0`.
pub(crate) fn parse(text: &str) -> Result<i64, String> {
    let bad = || format!("time: invalid duration \"{text}\"");
    let mut s = text;
    let mut neg = false;
    if let Some(rest) = s.strip_prefix('-') {
        neg = true;
        s = rest;
    } else if let Some(rest) = s.strip_prefix('+') {
        s = rest;
    }
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
        let int_part = &s[..int_len];
        s = &s[int_len..];
        let mut frac_part = "";
        if let Some(rest) = s.strip_prefix('.') {
            let n = rest.bytes().take_while(u8::is_ascii_digit).count();
            frac_part = &rest[..n];
            s = &rest[n..];
            if int_len == 0 && n == 0 {
                return Err(bad());
            }
        } else if int_len == 0 {
            return Err(bad());
        }
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        let unit = match &s[..unit_len] {
            "ns" => NS,
            "us" | "µs" | "μs" => US,
            "ms" => MS,
            "s" => SEC,
            "m" => MIN,
            "h" => HOUR,
            "" => return Err(format!("time: missing unit in duration \"{text}\"")),
            u => return Err(format!("time: unknown unit \"{u}\" in duration \"{text}\"")),
        } as u64;
        s = &s[unit_len..];
        let whole: u64 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().map_err(|_| bad())?
        };
        let mut v = whole.checked_mul(unit).ok_or_else(bad)?;
        if !frac_part.is_empty() {
            // Scale the fraction by the unit without floating point.
            let mut scale = 1f64;
            let mut f: u64 = 0;
            for d in frac_part.bytes().take(18) {
                f = f * 10 + u64::from(d - b'0');
                scale *= 10.0;
            }
            v = v
                .checked_add((f as f64 * (unit as f64 / scale)) as u64)
                .ok_or_else(bad)?;
        }
        total = total.checked_add(v).ok_or_else(bad)?;
        if total > i64::MAX as u64 + u64::from(neg) {
            return Err(bad());
        }
    }
    Ok(if neg {
        (total as i128).wrapping_neg() as i64
    } else {
        total as i64
    })
}

/// Prints like Go's `Duration.String`: `1h30m0s`, `1.5s`, `300ms`, `0s`.
pub(crate) fn format(d: i64) -> String {
    let neg = d < 0;
    let mut u = d.unsigned_abs();
    let mut out = String::new();
    if u < SEC as u64 {
        let (prec, unit) = match u {
            0 => return "0s".to_string(),
            x if x < US as u64 => (0, "ns"),
            x if x < MS as u64 => (3, "µs"),
            _ => (6, "ms"),
        };
        let (int, frac) = frac(u, prec);
        out.push_str(&int.to_string());
        out.push_str(&frac);
        out.push_str(unit);
    } else {
        let (secs, frac_text) = frac(u, 9);
        u = secs;
        let s = u % 60;
        u /= 60;
        if u > 0 {
            let m = u % 60;
            u /= 60;
            if u > 0 {
                out.push_str(&format!("{u}h"));
            }
            out.push_str(&format!("{m}m"));
        }
        out.push_str(&format!("{s}{frac_text}s"));
    }
    if neg { format!("-{out}") } else { out }
}

/// Splits `v` into `v / 10^prec` and the fraction text (`.5`, or empty).
fn frac(v: u64, prec: u32) -> (u64, String) {
    let p = 10u64.pow(prec);
    let (int, rest) = (v / p, v % p);
    if rest == 0 {
        return (int, String::new());
    }
    let digits = format!("{rest:0width$}", width = prec as usize);
    (int, format!(".{}", digits.trim_end_matches('0')))
}

/// Seconds as Go's `Duration.Seconds`.
pub(crate) fn seconds(d: i64) -> f64 {
    (d / SEC) as f64 + (d % SEC) as f64 / 1e9
}

/// Go's `time.Duration(f)` conversion from float nanoseconds.
pub(crate) fn from_nanos_f64(f: f64) -> i64 {
    f as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format() {
        let cases = [
            ("1h30m", "1h30m0s"),
            ("90m", "1h30m0s"),
            ("1.5s", "1.5s"),
            ("300ms", "300ms"),
            ("1.5us", "1.5µs"),
            ("1µs", "1µs"),
            ("42ns", "42ns"),
            ("-12s", "-12s"),
            ("0", "0s"),
            ("0s", "0s"),
            ("100s", "1m40s"),
            ("2h45m30.5s", "2h45m30.5s"),
            (".5h", "30m0s"),
            ("1h1ns", "1h0m0.000000001s"),
        ];
        for (text, want) in cases {
            assert_eq!(format(parse(text).unwrap()), want, "{text}");
        }
        for bad in ["", "1", "1x", "h", ".s", "-", "99999999999h"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
