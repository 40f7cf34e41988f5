//! Kubernetes `resource.Quantity`: parsing and canonical printing.
//!
//! A value is `mant * 10^scale`, kept unnormalised as parsed (Go keeps the
//! parsed scale too; division rounds at it).

/// How a quantity prints: the family of its suffix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// `Ki`, `Mi`, ... (powers of 1024).
    BinarySI,
    /// `m`, `k`, `M`, ... or no suffix.
    DecimalSI,
    /// `e3`, `E6`, ...
    DecimalExponent,
}

/// A parsed quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quantity {
    /// Unscaled value.
    pub(crate) mant: i128,
    /// Power of ten applied to `mant`.
    pub(crate) scale: i32,
    /// Printing format.
    pub(crate) format: Format,
}

const MAX_DIGITS: usize = 36;

fn pow10(e: u32) -> Option<i128> {
    10i128.checked_pow(e)
}

impl Quantity {
    /// Parses `500m`, `1Gi`, `1.5`, `2e3`, `-1k`, as `resource.ParseQuantity`.
    pub(crate) fn parse(text: &str) -> Result<Quantity, String> {
        let bad = || {
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".to_string()
        };
        let b = text.as_bytes();
        let mut i = 0;
        let mut neg = false;
        if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
            neg = b[i] == b'-';
            i += 1;
        }
        let int_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &text[int_start..i];
        let mut frac_digits = "";
        if i < b.len() && b[i] == b'.' {
            i += 1;
            let fs = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &text[fs..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(bad());
        }
        let suffix = &text[i..];
        let (format, base2, exp10): (Format, u32, i32) = match suffix {
            "Ki" => (Format::BinarySI, 10, 0),
            "Mi" => (Format::BinarySI, 20, 0),
            "Gi" => (Format::BinarySI, 30, 0),
            "Ti" => (Format::BinarySI, 40, 0),
            "Pi" => (Format::BinarySI, 50, 0),
            "Ei" => (Format::BinarySI, 60, 0),
            "n" => (Format::DecimalSI, 0, -9),
            "u" => (Format::DecimalSI, 0, -6),
            "m" => (Format::DecimalSI, 0, -3),
            "" => (Format::DecimalSI, 0, 0),
            "k" => (Format::DecimalSI, 0, 3),
            "M" => (Format::DecimalSI, 0, 6),
            "G" => (Format::DecimalSI, 0, 9),
            "T" => (Format::DecimalSI, 0, 12),
            "P" => (Format::DecimalSI, 0, 15),
            "E" => (Format::DecimalSI, 0, 18),
            s if s.starts_with(['e', 'E']) => {
                let e = &s[1..];
                let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
                if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                    return Err(bad());
                }
                let v: i32 = e.parse().map_err(|_| bad())?;
                (Format::DecimalExponent, 0, v)
            }
            _ => return Err("unable to parse quantity's suffix".to_string()),
        };
        let digits = format!("{int_digits}{frac_digits}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_DIGITS {
            return Err("quantity too large".to_string());
        }
        let mut mant: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| bad())?
        };
        let mut scale = exp10 - frac_digits.len() as i32;
        if base2 > 0 {
            mant = mant
                .checked_mul(1i128 << base2)
                .ok_or("quantity too large")?;
        }
        // Precision finer than nano rounds up (away from zero), as Go does.
        if scale < -9 {
            let drop = (-9 - scale) as u32;
            let p = pow10(drop).ok_or("quantity too precise")?;
            let (q, r) = (mant / p, mant % p);
            mant = if r != 0 { q + 1 } else { q };
            scale = -9;
        }
        if neg {
            mant = -mant;
        }
        Ok(Quantity {
            mant,
            scale,
            format,
        })
    }

    /// The value as a float (Go's `AsApproximateFloat64`).
    pub(crate) fn to_f64(self) -> f64 {
        self.mant as f64 * 10f64.powi(self.scale)
    }

    /// True when the value is zero.
    pub(crate) fn is_zero(&self) -> bool {
        self.mant == 0
    }

    /// Both values at the common (smaller) scale.
    fn align(a: Quantity, b: Quantity) -> Option<(i128, i128, i32)> {
        let s = a.scale.min(b.scale);
        let am = a.mant.checked_mul(pow10((a.scale - s) as u32)?)?;
        let bm = b.mant.checked_mul(pow10((b.scale - s) as u32)?)?;
        Some((am, bm, s))
    }

    /// `self + other`, keeping `self`'s format (or `other`'s when zero).
    pub(crate) fn add(self, other: Quantity) -> Option<Quantity> {
        let (a, b, s) = Self::align(self, other)?;
        let format = if self.is_zero() {
            other.format
        } else {
            self.format
        };
        Some(Quantity {
            mant: a.checked_add(b)?,
            scale: s,
            format,
        })
    }

    /// `self - other`.
    pub(crate) fn sub(self, other: Quantity) -> Option<Quantity> {
        self.add(Quantity {
            mant: -other.mant,
            ..other
        })
    }

    /// `self * other`, in `self`'s format.
    pub(crate) fn mul(self, other: Quantity) -> Option<Quantity> {
        Some(Quantity {
            mant: self.mant.checked_mul(other.mant)?,
            scale: self.scale + other.scale,
            format: self.format,
        })
    }

    /// `self / other` rounded toward zero at the larger of the two decimal
    /// scales (Go's `QuoRound(..., RoundDown)`), in `self`'s format.
    pub(crate) fn div(self, other: Quantity) -> Option<Quantity> {
        let target = (-self.scale).max(-other.scale).max(0);
        let exp = self.scale - other.scale + target;
        let (mut n, mut d) = (self.mant, other.mant);
        if exp >= 0 {
            n = n.checked_mul(pow10(exp as u32)?)?;
        } else {
            d = d.checked_mul(pow10((-exp) as u32)?)?;
        }
        if d == 0 {
            return None;
        }
        Some(Quantity {
            mant: n / d,
            scale: -target,
            format: self.format,
        })
    }

    /// An integer quantity in the given format (Go's `NewQuantity`).
    pub(crate) fn from_int(v: i64, format: Format) -> Quantity {
        Quantity {
            mant: i128::from(v),
            scale: 0,
            format,
        }
    }

    /// Parses a float's shortest decimal text (Go does `ParseQuantity("%v")`).
    pub(crate) fn from_f64(f: f64) -> Result<Quantity, String> {
        if !f.is_finite() {
            return Err(format!("cannot use {f} as a quantity"));
        }
        Quantity::parse(&format!("{f}"))
    }

    /// Canonical text, as `Quantity.String()`.
    pub(crate) fn canonical(&self) -> String {
        if self.mant == 0 {
            return "0".to_string();
        }
        let mut format = self.format;
        let mut integer: Option<i128> = None;
        if format == Format::BinarySI {
            let v = self.to_f64();
            if v > -1024.0 && v < 1024.0 {
                format = Format::DecimalSI;
            } else {
                integer = self.as_integer();
                if integer.is_none() {
                    format = Format::DecimalSI;
                }
            }
        }
        if let (Format::BinarySI, Some(mut v)) = (format, integer) {
            let mut exp = 0;
            while exp < 6 && v.abs() >= 1024 && v % 1024 == 0 {
                v /= 1024;
                exp += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp];
            return format!("{v}{suffix}");
        }
        let (mut m, mut s) = (self.mant, self.scale);
        while m % 10 == 0 {
            m /= 10;
            s += 1;
        }
        while s % 3 != 0 {
            m *= 10;
            s -= 1;
        }
        let suffix = match (format, s) {
            (_, 0) => String::new(),
            (Format::DecimalExponent, e) => format!("e{e}"),
            (_, -9) => "n".into(),
            (_, -6) => "u".into(),
            (_, -3) => "m".into(),
            (_, 3) => "k".into(),
            (_, 6) => "M".into(),
            (_, 9) => "G".into(),
            (_, 12) => "T".into(),
            (_, 15) => "P".into(),
            (_, 18) => "E".into(),
            (_, e) => format!("e{e}"),
        };
        format!("{m}{suffix}")
    }

    /// The exact integer value, if whole.
    fn as_integer(&self) -> Option<i128> {
        if self.scale >= 0 {
            self.mant.checked_mul(pow10(self.scale as u32)?)
        } else {
            let p = pow10((-self.scale) as u32)?;
            (self.mant % p == 0).then_some(self.mant / p)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text() {
        let cases = [
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("1e3", "1e3"),
            ("1E", "1E"),
            ("12301", "12301"),
            ("-1024", "-1024"),
            ("512", "512"),
            ("0.1n", "1n"),
            ("0", "0"),
            ("+5", "5"),
            (".5k", "500"),
        ];
        for (text, want) in cases {
            assert_eq!(Quantity::parse(text).unwrap().canonical(), want, "{text}");
        }
        for bad in ["", "abc", "1s", "1h", "1Kb", "1e", ".", "1ms"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
