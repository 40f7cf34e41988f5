//! Kubernetes quantities (`500m`, `1Gi`, `2e3`) and Go durations (`1h30m`),
//! the two value kinds Kyverno compares besides numbers and strings.

use std::cmp::Ordering;

/// A Kubernetes quantity, held exactly in units of 10^-9 (Kubernetes' own
/// precision limit; finer values round up, as `resource.Quantity` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity(i128);

impl Quantity {
    /// Parses `<sign><digits>[.<digits>][suffix]` where suffix is a binary SI
    /// (`Ki`..`Ei`), decimal SI (`n u m k M G T P E`) or exponent (`e3`, `E-2`),
    /// around which spaces are ignored (Kyverno's patterns and conditions).
    pub fn parse(s: &str) -> Option<Quantity> {
        Quantity::parse_exact(s.trim())
    }

    /// As [`Quantity::parse`], without spaces (`resource.ParseQuantity`,
    /// CEL's `quantity()`). Finer than a nano rounds up, as Kubernetes does.
    pub fn parse_exact(text: &str) -> Option<Quantity> {
        let (neg, rest) = match text.as_bytes().first()? {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, suffix) = rest.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return None;
        }
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        let mut mantissa: i128 = 0;
        for c in int_part.chars().chain(frac_part.chars()) {
            mantissa = mantissa
                .checked_mul(10)?
                .checked_add(i128::from(c.to_digit(10)?))?;
        }
        let (mut exp10, exp2): (i32, u32) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            other => {
                let e = other.strip_prefix(['e', 'E'])?;
                let e = e.strip_prefix('+').unwrap_or(e);
                if e.is_empty() || e.starts_with('+') {
                    return None;
                }
                (e.parse::<i32>().ok()?, 0)
            }
        };
        exp10 = exp10 - frac_part.len() as i32 + 9;
        let mut value = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
        if exp10 >= 0 {
            if mantissa != 0 {
                value = value.checked_mul(10i128.checked_pow(exp10 as u32)?)?;
            }
        } else {
            value = match 10i128.checked_pow((-exp10) as u32) {
                Some(div) => (value + div - 1) / div,
                None => i128::from(value != 0),
            };
        }
        Some(Quantity(if neg { -value } else { value }))
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

/// Parses a Go duration (`300ms`, `-1.5h`, `2h45m`, `0`; spaces around it
/// ignored) into seconds, with Go's `time.ParseDuration` (one parser:
/// JMESPath's durations use it too).
pub fn parse_duration(s: &str) -> Option<f64> {
    parse_duration_nanos(s)
        .ok()
        .map(crate::jmespath::duration::seconds)
}

/// Parses a Go duration into signed nanoseconds, with Go's
/// `time.ParseDuration` and its error message (`time: invalid duration
/// "10"`): the Kubernetes `metav1.Duration` fields' parser.
pub fn parse_duration_nanos(s: &str) -> Result<i64, String> {
    crate::jmespath::duration::parse(s.trim())
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
