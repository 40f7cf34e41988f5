//! Kyverno's time functions. Times are RFC 3339 text unless a Go layout is
//! given (`time_parse`, `time_since`); results print as Go's `time.RFC3339`
//! (no fractional seconds, `Z` for a zero offset). Durations are Go
//! durations.

use chrono::{
    DateTime, Datelike, Duration, FixedOffset, Local, NaiveDate, TimeZone, Timelike, Utc,
};
use jmespath::{Rcvar, Runtime};

use super::ty::s;
use super::{arg_str, boolean, duration, register, string};

pub(super) fn register_all(rt: &mut Runtime) {
    register(rt, "time_since", vec![s(), s(), s()], time_since);
    register(rt, "time_now", vec![], |_| {
        Ok(string(rfc3339(&Local::now().fixed_offset())))
    });
    register(rt, "time_now_utc", vec![], |_| {
        Ok(string(rfc3339(&Utc::now().fixed_offset())))
    });
    register(rt, "time_to_cron", vec![s()], time_to_cron);
    register(rt, "time_add", vec![s(), s()], time_add);
    register(rt, "time_parse", vec![s(), s()], time_parse);
    register(rt, "time_utc", vec![s()], |x| {
        Ok(string(rfc3339(
            &rfc(arg_str(x, 0))?.with_timezone(&Utc).fixed_offset(),
        )))
    });
    register(rt, "time_diff", vec![s(), s()], |x| {
        Ok(string(sub(&rfc(arg_str(x, 1))?, &rfc(arg_str(x, 0))?)))
    });
    register(rt, "time_before", vec![s(), s()], |x| {
        Ok(boolean(rfc(arg_str(x, 0))? < rfc(arg_str(x, 1))?))
    });
    register(rt, "time_after", vec![s(), s()], |x| {
        Ok(boolean(rfc(arg_str(x, 0))? > rfc(arg_str(x, 1))?))
    });
    register(rt, "time_between", vec![s(), s(), s()], |x| {
        let t = rfc(arg_str(x, 0))?;
        Ok(boolean(t > rfc(arg_str(x, 1))? && t < rfc(arg_str(x, 2))?))
    });
    register(rt, "time_truncate", vec![s(), s()], time_truncate);
}

const RFC3339: &str = "2006-01-02T15:04:05Z07:00";

/// Go's `time.Parse(time.RFC3339, text)`.
fn rfc(text: &str) -> Result<DateTime<FixedOffset>, String> {
    parse_layout(RFC3339, text)
}

/// Go's `t.Format(time.RFC3339)`.
pub(crate) fn rfc3339(t: &DateTime<FixedOffset>) -> String {
    let off = t.offset().local_minus_utc();
    let zone = if off == 0 {
        "Z".to_string()
    } else {
        let a = off.abs();
        format!(
            "{}{:02}:{:02}",
            if off < 0 { '-' } else { '+' },
            a / 3600,
            (a % 3600) / 60
        )
    };
    format!("{}{zone}", t.format("%Y-%m-%dT%H:%M:%S"))
}

/// `t2.Sub(t1).String()`, saturating as Go does.
fn sub(t2: &DateTime<FixedOffset>, t1: &DateTime<FixedOffset>) -> String {
    let d = t2.signed_duration_since(*t1);
    let ns = d.num_nanoseconds().unwrap_or(if d > Duration::zero() {
        i64::MAX
    } else {
        i64::MIN
    });
    duration::format(ns)
}

fn time_since(x: &[Rcvar]) -> Result<Rcvar, String> {
    let layout = match arg_str(x, 0) {
        "" => RFC3339,
        l => l,
    };
    let t1 = parse_layout(layout, arg_str(x, 1))?;
    let t2 = match arg_str(x, 2) {
        "" => Local::now().fixed_offset(),
        ts => parse_layout(layout, ts)?,
    };
    Ok(string(sub(&t2, &t1)))
}

fn time_to_cron(x: &[Rcvar]) -> Result<Rcvar, String> {
    let t = rfc(arg_str(x, 0))?;
    Ok(string(format!(
        "{} {} {} {} {}",
        t.minute(),
        t.hour(),
        t.day(),
        t.month(),
        t.weekday().num_days_from_sunday()
    )))
}

fn time_add(x: &[Rcvar]) -> Result<Rcvar, String> {
    let t = rfc(arg_str(x, 0))?;
    let d = duration::parse(arg_str(x, 1))?;
    let out = t
        .checked_add_signed(Duration::nanoseconds(d))
        .ok_or("time out of range")?;
    Ok(string(rfc3339(&out)))
}

fn time_parse(x: &[Rcvar]) -> Result<Rcvar, String> {
    let (layout, ts) = (arg_str(x, 0), arg_str(x, 1));
    if layout.parse::<i64>().is_ok() {
        let secs: i64 = ts
            .parse()
            .map_err(|_| format!("strconv.ParseInt: parsing \"{ts}\": invalid syntax"))?;
        let t = Utc
            .timestamp_opt(secs, 0)
            .single()
            .ok_or("time out of range")?;
        return Ok(string(rfc3339(&t.fixed_offset())));
    }
    Ok(string(rfc3339(&parse_layout(layout, ts)?)))
}

fn time_truncate(x: &[Rcvar]) -> Result<Rcvar, String> {
    let t = rfc(arg_str(x, 0))?;
    let d = duration::parse(arg_str(x, 1))?;
    if d <= 0 {
        return Ok(string(rfc3339(&t)));
    }
    // Go truncates absolute time counted from January 1, year 1 UTC.
    const UNIX_TO_YEAR1: i128 = 62_135_596_800;
    let abs = (i128::from(t.timestamp()) + UNIX_TO_YEAR1) * 1_000_000_000
        + i128::from(t.timestamp_subsec_nanos());
    let rem = abs.rem_euclid(i128::from(d));
    let out = t
        .checked_sub_signed(Duration::nanoseconds(i64::try_from(rem).unwrap_or(0)))
        .ok_or("time out of range")?;
    Ok(string(rfc3339(&out)))
}

/// Layout elements of Go's reference time `Mon Jan 2 15:04:05 MST 2006`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Std {
    Lit(char),
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    Pm,
    LowerPm,
    Tz,
    /// Numeric offset: allows `Z`, has colon, has seconds, hours only.
    Offset {
        z: bool,
        colon: bool,
        secs: bool,
        short: bool,
    },
    /// Fractional seconds: digits fixed (`0`) or optional (`9`), count.
    Frac {
        fixed: bool,
        n: usize,
    },
}

fn tokenize(layout: &str) -> Vec<Std> {
    let b: Vec<char> = layout.chars().collect();
    let at = |i: usize, s: &str| -> bool {
        let s: Vec<char> = s.chars().collect();
        b.len() >= i + s.len() && b[i..i + s.len()] == s[..]
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (tok, len) = match b[i] {
            'J' if at(i, "January") => (Std::LongMonth, 7),
            'J' if at(i, "Jan") => (Std::Month, 3),
            'M' if at(i, "Monday") => (Std::LongWeekDay, 6),
            'M' if at(i, "Mon") => (Std::WeekDay, 3),
            'M' if at(i, "MST") => (Std::Tz, 3),
            '0' if at(i, "002") => (Std::ZeroYearDay, 3),
            '0' if at(i, "01") => (Std::ZeroMonth, 2),
            '0' if at(i, "02") => (Std::ZeroDay, 2),
            '0' if at(i, "03") => (Std::ZeroHour12, 2),
            '0' if at(i, "04") => (Std::ZeroMinute, 2),
            '0' if at(i, "05") => (Std::ZeroSecond, 2),
            '0' if at(i, "06") => (Std::Year, 2),
            '1' if at(i, "15") => (Std::Hour, 2),
            '1' => (Std::NumMonth, 1),
            '2' if at(i, "2006") => (Std::LongYear, 4),
            '2' => (Std::Day, 1),
            '_' if at(i, "__2") => (Std::UnderYearDay, 3),
            '_' if at(i, "_2") && !at(i, "_2006") => (Std::UnderDay, 2),
            '3' => (Std::Hour12, 1),
            '4' => (Std::Minute, 1),
            '5' => (Std::Second, 1),
            'P' if at(i, "PM") => (Std::Pm, 2),
            'p' if at(i, "pm") => (Std::LowerPm, 2),
            c @ ('-' | 'Z') => {
                let z = c == 'Z';
                let forms = [
                    ("070000", false, true, false),
                    ("07:00:00", true, true, false),
                    ("0700", false, false, false),
                    ("07:00", true, false, false),
                    ("07", false, false, true),
                ];
                match forms.iter().find(|(f, ..)| at(i + 1, f)) {
                    Some((f, colon, secs, short)) => (
                        Std::Offset {
                            z,
                            colon: *colon,
                            secs: *secs,
                            short: *short,
                        },
                        1 + f.len(),
                    ),
                    None => (Std::Lit(c), 1),
                }
            }
            c @ ('.' | ',') if i + 1 < b.len() && (b[i + 1] == '0' || b[i + 1] == '9') => {
                let d = b[i + 1];
                let mut j = i + 1;
                while j < b.len() && b[j] == d {
                    j += 1;
                }
                if j < b.len() && b[j].is_ascii_digit() {
                    (Std::Lit(c), 1)
                } else {
                    (
                        Std::Frac {
                            fixed: d == '0',
                            n: j - i - 1,
                        },
                        j - i,
                    )
                }
            }
            c => (Std::Lit(c), 1),
        };
        out.push(tok);
        i += len;
    }
    out
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Go's `time.Parse(layout, value)`: missing fields default to year 0,
/// January 1, midnight, UTC.
pub(crate) fn parse_layout(layout: &str, value: &str) -> Result<DateTime<FixedOffset>, String> {
    let fail =
        |rest: &str| format!("parsing time \"{value}\" as \"{layout}\": cannot parse \"{rest}\"");
    let toks = tokenize(layout);
    let mut v = value;
    let (mut year, mut month, mut day) = (0i32, 1u32, 1u32);
    let (mut hour, mut min, mut sec, mut nsec) = (0u32, 0u32, 0u32, 0u32);
    let (mut pm, mut am) = (false, false);
    let mut offset: i32 = 0;
    let num = |v: &mut &str, fixed: bool| -> Option<u32> {
        let b = v.as_bytes();
        if b.is_empty() || !b[0].is_ascii_digit() {
            return None;
        }
        if b.len() < 2 || !b[1].is_ascii_digit() {
            if fixed {
                return None;
            }
            let n = u32::from(b[0] - b'0');
            *v = &v[1..];
            return Some(n);
        }
        let n = u32::from(b[0] - b'0') * 10 + u32::from(b[1] - b'0');
        *v = &v[2..];
        Some(n)
    };
    let name = |v: &mut &str, names: &[&str], short: bool| -> Option<usize> {
        for (i, n) in names.iter().enumerate() {
            let n = if short { &n[..3] } else { n };
            if v.len() >= n.len()
                && v.is_char_boundary(n.len())
                && v[..n.len()].eq_ignore_ascii_case(n)
            {
                *v = &v[n.len()..];
                return Some(i);
            }
        }
        None
    };
    let mut k = 0;
    while k < toks.len() {
        let tok = toks[k];
        let before = v;
        let ok = match tok {
            Std::Lit(' ') => {
                if !v.is_empty() && !v.starts_with(' ') {
                    false
                } else {
                    v = v.trim_start_matches(' ');
                    while k + 1 < toks.len() && toks[k + 1] == Std::Lit(' ') {
                        k += 1;
                    }
                    true
                }
            }
            Std::Lit(c) => match v.strip_prefix(c) {
                Some(rest) => {
                    v = rest;
                    true
                }
                None => false,
            },
            Std::LongYear => {
                if v.len() >= 4 && v.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
                    year = v[..4].parse().unwrap_or(0);
                    v = &v[4..];
                    true
                } else {
                    false
                }
            }
            Std::Year => match num(&mut v, true) {
                Some(y) => {
                    year = if y >= 69 {
                        1900 + y as i32
                    } else {
                        2000 + y as i32
                    };
                    true
                }
                None => false,
            },
            Std::LongMonth | Std::Month => match name(&mut v, &MONTHS, tok == Std::Month) {
                Some(i) => {
                    month = i as u32 + 1;
                    true
                }
                None => false,
            },
            Std::NumMonth | Std::ZeroMonth => match num(&mut v, tok == Std::ZeroMonth) {
                Some(m) if (1..=12).contains(&m) => {
                    month = m;
                    true
                }
                _ => false,
            },
            Std::LongWeekDay | Std::WeekDay => name(&mut v, &DAYS, tok == Std::WeekDay).is_some(),
            Std::Day | Std::UnderDay | Std::ZeroDay => {
                if tok == Std::UnderDay && v.starts_with(' ') {
                    v = &v[1..];
                }
                match num(&mut v, tok == Std::ZeroDay) {
                    Some(d) => {
                        day = d;
                        true
                    }
                    None => false,
                }
            }
            Std::UnderYearDay | Std::ZeroYearDay => {
                // Day of year: read and ignored (rarely used in policies).
                let n = v.bytes().take(3).take_while(u8::is_ascii_digit).count();
                v = v[n..].trim_start();
                n > 0
            }
            Std::Hour => match num(&mut v, false) {
                Some(h) if h < 24 => {
                    hour = h;
                    true
                }
                _ => false,
            },
            Std::Hour12 | Std::ZeroHour12 => match num(&mut v, tok == Std::ZeroHour12) {
                Some(h) if h <= 12 => {
                    hour = h;
                    true
                }
                _ => false,
            },
            Std::Minute | Std::ZeroMinute => match num(&mut v, tok == Std::ZeroMinute) {
                Some(m) if m < 60 => {
                    min = m;
                    true
                }
                _ => false,
            },
            Std::Second | Std::ZeroSecond => match num(&mut v, tok == Std::ZeroSecond) {
                Some(s) if s < 60 => {
                    sec = s;
                    // A fraction the layout does not mention is still read.
                    let next_is_frac = matches!(toks.get(k + 1), Some(Std::Frac { .. }));
                    let b = v.as_bytes();
                    if !next_is_frac
                        && b.len() >= 2
                        && (b[0] == b'.' || b[0] == b',')
                        && b[1].is_ascii_digit()
                    {
                        let n = 1 + b[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                        nsec = frac_nanos(&v[1..n]);
                        v = &v[n..];
                    }
                    true
                }
                _ => false,
            },
            Std::Pm | Std::LowerPm => {
                let (p, a) = if tok == Std::Pm {
                    ("PM", "AM")
                } else {
                    ("pm", "am")
                };
                if let Some(rest) = v.strip_prefix(p) {
                    pm = true;
                    v = rest;
                    true
                } else if let Some(rest) = v.strip_prefix(a) {
                    am = true;
                    v = rest;
                    true
                } else {
                    false
                }
            }
            Std::Tz => {
                // Zone abbreviations: offset 0 unless UTC-like; Go does the same
                // for abbreviations it does not know.
                let n = v.bytes().take_while(u8::is_ascii_uppercase).count();
                if n >= 3 {
                    v = &v[n..];
                    offset = 0;
                    true
                } else {
                    false
                }
            }
            Std::Offset {
                z,
                colon,
                secs,
                short,
            } => {
                if z && v.starts_with('Z') {
                    v = &v[1..];
                    offset = 0;
                    true
                } else {
                    match parse_offset(&mut v, colon, secs, short) {
                        Some(o) => {
                            offset = o;
                            true
                        }
                        None => false,
                    }
                }
            }
            Std::Frac { fixed, n } => {
                let b = v.as_bytes();
                let has = b.len() >= 2 && (b[0] == b'.' || b[0] == b',') && b[1].is_ascii_digit();
                if !has {
                    !fixed
                } else {
                    let digits = b[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                    let take = if fixed { n } else { digits };
                    if digits < take || (fixed && digits != n) {
                        false
                    } else {
                        nsec = frac_nanos(&v[1..1 + take]);
                        v = &v[1 + take..];
                        true
                    }
                }
            }
        };
        if !ok {
            return Err(fail(before));
        }
        k += 1;
    }
    if !v.is_empty() {
        return Err(format!("parsing time \"{value}\": extra text: \"{v}\""));
    }
    if pm && hour < 12 {
        hour += 12;
    } else if am && hour == 12 {
        hour = 0;
    }
    let date = NaiveDate::from_ymd_opt(year, month, day)
        .ok_or_else(|| format!("parsing time \"{value}\": day out of range"))?;
    let naive = date
        .and_hms_nano_opt(hour, min, sec, nsec)
        .ok_or_else(|| fail(value))?;
    let tz = FixedOffset::east_opt(offset)
        .ok_or_else(|| format!("parsing time \"{value}\": time zone offset out of range"))?;
    tz.from_local_datetime(&naive)
        .single()
        .ok_or_else(|| fail(value))
}

fn frac_nanos(digits: &str) -> u32 {
    let mut s: String = digits.chars().take(9).collect();
    while s.len() < 9 {
        s.push('0');
    }
    s.parse().unwrap_or(0)
}

fn parse_offset(v: &mut &str, colon: bool, secs: bool, short: bool) -> Option<i32> {
    let b = v.as_bytes();
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let mut i = 1;
    let two = |i: usize| -> Option<i32> {
        let d = b.get(i..i + 2)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| i32::from(d[0] - b'0') * 10 + i32::from(d[1] - b'0'))
    };
    let h = two(i)?;
    i += 2;
    let mut m = 0;
    let mut s = 0;
    if !short {
        if colon {
            (b.get(i) == Some(&b':')).then_some(())?;
            i += 1;
        }
        m = two(i)?;
        i += 2;
        if secs {
            if colon {
                (b.get(i) == Some(&b':')).then_some(())?;
                i += 1;
            }
            s = two(i)?;
            i += 2;
        }
    }
    *v = &v[i..];
    Some(sign * (h * 3600 + m * 60 + s))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{Case, Want::*, run};

    #[test]
    fn time_functions() {
        let cases: &[Case] = &[
            (
                "time_add('2021-01-02T15:04:05Z', '1h30m')",
                "{}",
                Json(r#""2021-01-02T16:34:05Z""#),
            ),
            (
                "time_add('2021-01-02T15:04:05+05:30', '-24h')",
                "{}",
                Json(r#""2021-01-01T15:04:05+05:30""#),
            ),
            ("time_add('2021-01-02', '1h')", "{}", Err("cannot parse")),
            (
                "time_add('2021-01-02T15:04:05Z', 'x')",
                "{}",
                Err("invalid duration"),
            ),
            (
                "time_utc('2021-01-02T18:04:05+02:00')",
                "{}",
                Json(r#""2021-01-02T16:04:05Z""#),
            ),
            (
                "time_diff('2021-01-01T00:00:00Z', '2021-01-02T01:30:00Z')",
                "{}",
                Json(r#""25h30m0s""#),
            ),
            (
                "time_diff('2021-01-02T00:00:00Z', '2021-01-01T00:00:00Z')",
                "{}",
                Json(r#""-24h0m0s""#),
            ),
            (
                "time_diff('2021-01-01T00:00:00Z', '2021-01-01T00:00:00.5Z')",
                "{}",
                Json(r#""500ms""#),
            ),
            (
                "time_before('2021-01-01T00:00:00Z', '2021-01-02T00:00:00Z')",
                "{}",
                Json("true"),
            ),
            (
                "time_before('2021-01-02T00:00:00Z', '2021-01-02T00:00:00Z')",
                "{}",
                Json("false"),
            ),
            (
                "time_after('2021-01-02T00:00:00Z', '2021-01-01T23:00:00+02:00')",
                "{}",
                Json("true"),
            ),
            (
                "time_between('2021-01-02T00:00:00Z', '2021-01-01T00:00:00Z', '2021-01-03T00:00:00Z')",
                "{}",
                Json("true"),
            ),
            (
                "time_between('2021-01-01T00:00:00Z', '2021-01-01T00:00:00Z', '2021-01-03T00:00:00Z')",
                "{}",
                Json("false"),
            ),
            (
                "time_to_cron('2021-02-02T15:04:05Z')",
                "{}",
                Json(r#""4 15 2 2 2""#),
            ),
            (
                "time_truncate('2021-01-02T15:04:05Z', '1h')",
                "{}",
                Json(r#""2021-01-02T15:00:00Z""#),
            ),
            (
                "time_truncate('2021-01-02T15:04:05Z', '24h')",
                "{}",
                Json(r#""2021-01-02T00:00:00Z""#),
            ),
            (
                "time_truncate('2021-01-02T15:04:05+01:00', '1h')",
                "{}",
                Json(r#""2021-01-02T15:00:00+01:00""#),
            ),
            (
                "time_truncate('2021-01-02T15:04:05Z', '0s')",
                "{}",
                Json(r#""2021-01-02T15:04:05Z""#),
            ),
            (
                "time_parse('2006-01-02', '2021-03-04')",
                "{}",
                Json(r#""2021-03-04T00:00:00Z""#),
            ),
            (
                "time_parse('Mon Jan _2 15:04:05 2006', 'Thu Mar  4 05:06:07 2021')",
                "{}",
                Json(r#""2021-03-04T05:06:07Z""#),
            ),
            (
                "time_parse('02 Jan 06 15:04 -0700', '04 Mar 21 05:06 +0100')",
                "{}",
                Json(r#""2021-03-04T05:06:00+01:00""#),
            ),
            (
                "time_parse('3:04PM', '5:06PM')",
                "{}",
                Json(r#""0000-01-01T17:06:00Z""#),
            ),
            (
                "time_parse('2006-01-02T15:04:05.000Z07:00', '2021-03-04T05:06:07.123Z')",
                "{}",
                Json(r#""2021-03-04T05:06:07Z""#),
            ),
            (
                "time_parse('1136239445', '1616807555')",
                "{}",
                Json(r#""2021-03-27T01:12:35Z""#),
            ),
            ("time_parse('1136239445', 'x')", "{}", Err("invalid syntax")),
            (
                "time_parse('2006-01-02', '2021-02-30')",
                "{}",
                Err("day out of range"),
            ),
            (
                "time_parse('2006-01-02', '2021-03-04x')",
                "{}",
                Err("extra text"),
            ),
            (
                "time_since('', '2021-01-01T00:00:00Z', '2021-01-01T01:00:00Z')",
                "{}",
                Json(r#""1h0m0s""#),
            ),
            (
                "time_since('2006-01-02', '2021-01-01', '2021-01-03')",
                "{}",
                Json(r#""48h0m0s""#),
            ),
            ("time_since('', 'bad', '')", "{}", Err("cannot parse")),
            (
                "time_before(time_now_utc(), '9999-01-01T00:00:00Z')",
                "{}",
                Json("true"),
            ),
            (
                "time_after(time_now(), '2000-01-01T00:00:00Z')",
                "{}",
                Json("true"),
            ),
            ("time_now(`1`)", "{}", Err("Too many arguments")),
            ("time_utc(`1`)", "{}", Err("string")),
        ];
        run(cases);
    }
}
