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
    /// CEL's `quantity()`), with the one parser of Go's syntax (the one
    /// JMESPath's quantity arithmetic prints from). Finer than a nano
    /// rounds up, as Kubernetes does.
    pub fn parse_exact(text: &str) -> Option<Quantity> {
        let q = crate::jmespath::quantity::Quantity::parse(text).ok()?;
        // The parser leaves no scale below 10^-9.
        let up = u32::try_from(q.scale + 9).ok()?;
        Some(Quantity(q.mant.checked_mul(10i128.checked_pow(up)?)?))
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
