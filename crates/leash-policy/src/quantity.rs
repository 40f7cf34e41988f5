//! Kubernetes quantities (`500m`, `1Gi`, `2e3`) and Go durations (`1h30m`),
//! the two value kinds Kyverno compares besides numbers and strings.

use std::cmp::Ordering;

/// A Kubernetes quantity, held exactly in units of 10^-9 (Kubernetes' own
/// precision limit; finer values round up, as `resource.Quantity` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

impl Quantity {
    /// Parses `<sign><digits>[.<digits>][suffix]` where suffix is a binary SI
    /// (`Ki`..`Ei`), decimal SI (`n u m k M G T P E`) or exponent (`e3`, `E-2`).
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        if s.is_empty() {
            return None;
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // mantissa * 10^-frac_len
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return None;
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        let mut exp10: i32 = -(frac_part.len() as i32);
        let mut mul2: i128 = 1;
        match suffix {
            "" => {}
            "Ki" => mul2 = 1 << 10,
            "Mi" => mul2 = 1 << 20,
            "Gi" => mul2 = 1 << 30,
            "Ti" => mul2 = 1 << 40,
            "Pi" => mul2 = 1 << 50,
            "Ei" => mul2 = 1 << 60,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            s if s.starts_with(['e', 'E']) => {
                let e: i32 = s[1..].parse().ok()?;
                if !(-40..=40).contains(&e) {
                    return None;
                }
                exp10 += e;
            }
            _ => return None,
        }
        // to nano units: mantissa * mul2 * 10^(exp10 + 9), rounding up.
        let scale = exp10 + 9;
        let base = mantissa.checked_mul(mul2)?;
        let nanos = if scale >= 0 {
            base.checked_mul(10i128.checked_pow(scale as u32)?)?
        } else {
            let div = 10i128.checked_pow((-scale) as u32)?;
            let q = base / div;
            if base % div != 0 { q + 1 } else { q }
        };
        Some(Quantity(if negative { -nanos } else { nanos }))
    }

    /// The value as a float (approximate).
    pub fn as_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// The value in units of 10^-9.
    pub fn nanos(self) -> i128 {
        self.0
    }

    /// A quantity from units of 10^-9.
    pub fn from_nanos(n: i128) -> Quantity {
        Quantity(n)
    }

    /// Compares two quantities.
    pub fn cmp_to(self, other: Quantity) -> Ordering {
        self.0.cmp(&other.0)
    }
}

/// Parses a Go duration (`300ms`, `-1.5h`, `2h45m`, `0`) into seconds.
pub fn parse_duration(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    let (negative, mut rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0.0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return None;
        }
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        rest = &rest[unit_end..];
        let factor = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += value * factor;
    }
    Some(if negative { -total } else { total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let q = |s: &str| Quantity::parse(s).unwrap_or_else(|| panic!("{s}"));
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1k"), q("1000"));
        assert_eq!(q("0.5"), q("500m"));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("1.5Gi"), q("1536Mi"));
        assert!(q("2Gi") > q("2G"));
        assert!(q("-1") < q("0"));
        assert!(q("100m") < q("1"));
        for bad in ["", "abc", "1.2.3", "1X", "Gi", "1 Gi"] {
            assert_eq!(Quantity::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn durations() {
        for (s, want) in [
            ("0", Some(0.0)),
            ("1h", Some(3600.0)),
            ("1h30m", Some(5400.0)),
            ("300ms", Some(0.3)),
            ("-1.5h", Some(-5400.0)),
            ("2m3s", Some(123.0)),
            ("1", None),
            ("h", None),
            ("1d", None),
            ("", None),
        ] {
            assert_eq!(parse_duration(s), want, "{s:?}");
        }
    }
}
