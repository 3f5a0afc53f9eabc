//! Values between JSON and the servers' types that more than one backend
//! needs: calendar arithmetic (for dates outside what `time` holds),
//! ISO 8601 text for dates and times, bytes as `{"$bytes": …}`.

use base64::Engine as _;
use serde_json::{Value, json};

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) → days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// `2024-03-01`; years before 1 or after 9999 as PostgreSQL writes them
/// (`0044-03-15 BC` becomes `-0043-03-15`, ISO 8601's astronomical years).
pub fn fmt_date(y: i64, m: u32, d: u32) -> String {
    if (0..=9999).contains(&y) {
        format!("{y:04}-{m:02}-{d:02}")
    } else {
        format!(
            "{}{:04}-{m:02}-{d:02}",
            if y < 0 { "-" } else { "+" },
            y.abs()
        )
    }
}

/// `13:45:07`, with `.5` or `.123456` when there are fractions of a second
/// (trailing zeros dropped).
pub fn fmt_time(h: u32, mi: u32, s: u32, micros: u32) -> String {
    let mut out = format!("{h:02}:{mi:02}:{s:02}");
    if micros > 0 {
        let frac = format!("{micros:06}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out
}

/// Microseconds since 1970-01-01 00:00 → `2024-03-01T13:45:07.25`.
pub fn fmt_unix_micros(us: i64) -> String {
    let days = us.div_euclid(86_400_000_000);
    let rem = us.rem_euclid(86_400_000_000);
    let (y, m, d) = civil_from_days(days);
    let secs = rem / 1_000_000;
    format!(
        "{}T{}",
        fmt_date(y, m, d),
        fmt_time(
            (secs / 3600) as u32,
            (secs / 60 % 60) as u32,
            (secs % 60) as u32,
            (rem % 1_000_000) as u32
        )
    )
}

/// A date and time read from text: `2024-03-01`, `2024-03-01T13:45`,
/// `2024-03-01 13:45:07.123456`, with an optional `Z` or `±hh[:mm]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// Days since 1970-01-01.
    pub days: i64,
    /// Microseconds since midnight (local to the offset).
    pub micros: i64,
    /// Seconds east of UTC, when the text gave an offset.
    pub offset: Option<i32>,
    /// Whether the text had a time of day.
    pub has_time: bool,
}

impl DateTime {
    /// Microseconds since 1970-01-01 00:00 UTC (the text's offset applied;
    /// none given means UTC).
    pub fn unix_micros(&self) -> i64 {
        self.days * 86_400_000_000 + self.micros - i64::from(self.offset.unwrap_or(0)) * 1_000_000
    }

    /// Microseconds since 1970-01-01 00:00 as written (the offset dropped).
    pub fn local_micros(&self) -> i64 {
        self.days * 86_400_000_000 + self.micros
    }
}

fn digits(s: &[u8], n: usize) -> Option<i64> {
    if s.len() < n || !s[..n].iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        s[..n]
            .iter()
            .fold(0i64, |a, &c| a * 10 + i64::from(c - b'0')),
    )
}

/// Reads `HH:MM[:SS[.ffffff]]` at the start of `s`; returns microseconds
/// since midnight and the bytes used.
pub fn parse_time_prefix(s: &[u8]) -> Option<(i64, usize)> {
    let h = digits(s, 2)?;
    if s.get(2) != Some(&b':') {
        return None;
    }
    let mi = digits(&s[3..], 2)?;
    let mut used = 5;
    let mut sec = 0;
    let mut micros = 0;
    if s.get(5) == Some(&b':') {
        sec = digits(&s[6..], 2)?;
        used = 8;
        if s.get(8) == Some(&b'.') {
            let mut n = 9;
            let mut scale = 100_000;
            while n < s.len() && s[n].is_ascii_digit() {
                micros += i64::from(s[n] - b'0') * scale;
                scale /= 10;
                n += 1;
            }
            if n == 9 {
                return None;
            }
            used = n;
        }
    }
    if h > 24 || mi > 59 || sec > 60 || (h == 24 && (mi, sec, micros) != (0, 0, 0)) {
        return None;
    }
    Some((((h * 60 + mi) * 60 + sec) * 1_000_000 + micros, used))
}

/// Reads an ISO 8601 / RFC 3339 date, or date and time (`T` or a space
/// between), with an optional offset; `None` if the text is not one.
pub fn parse_datetime(text: &str) -> Option<DateTime> {
    let t = text.trim().as_bytes();
    let (neg, t) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let ylen = t.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(4..=6).contains(&ylen) {
        return None;
    }
    let y = digits(t, ylen)? * if neg { -1 } else { 1 };
    let rest = &t[ylen..];
    if rest.first() != Some(&b'-') || rest.get(3) != Some(&b'-') {
        return None;
    }
    let m = digits(&rest[1..], 2)? as u32;
    let d = digits(&rest[4..], 2)? as u32;
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    let days = days_from_civil(y, m, d);
    let mut rest = &rest[6..];
    let mut micros = 0;
    let mut has_time = false;
    if let Some(&sep) = rest.first()
        && (sep == b'T' || sep == b't' || sep == b' ')
    {
        let (us, used) = parse_time_prefix(&rest[1..])?;
        micros = us;
        has_time = true;
        rest = &rest[1 + used..];
    }
    let offset = parse_offset(rest)?;
    Some(DateTime {
        days,
        micros,
        offset,
        has_time,
    })
}

/// `Z`, `+02`, `+0200`, `-05:30` (or nothing: `Some(None)`); `None` if
/// something else follows.
pub fn parse_offset(rest: &[u8]) -> Option<Option<i32>> {
    match rest {
        [] => Some(None),
        [b'Z' | b'z'] => Some(Some(0)),
        [sign @ (b'+' | b'-'), tail @ ..] => {
            let h = digits(tail, 2)?;
            let mi = match &tail[2..] {
                [] => 0,
                [b':', m @ ..] if m.len() == 2 => digits(m, 2)?,
                m if m.len() == 2 => digits(m, 2)?,
                _ => return None,
            };
            if h > 15 || mi > 59 {
                return None;
            }
            let secs = ((h * 60 + mi) * 60) as i32;
            Some(Some(if *sign == b'-' { -secs } else { secs }))
        }
        _ => None,
    }
}

/// Bytes in a message: `{"$bytes": "<base64>", "size": n}` (see the nodes
/// crate's `binary` module, which also reads them back).
pub fn bytes(b: &[u8]) -> Value {
    json!({"$bytes": base64::engine::general_purpose::STANDARD.encode(b), "size": b.len()})
}

/// A float as JSON: a number, or the server's word for what JSON cannot
/// hold (`NaN`, `Infinity`, `-Infinity`) as a string.
pub fn float(f: f64) -> Value {
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => json!("NaN"),
        None if f > 0.0 => json!("Infinity"),
        None => json!("-Infinity"),
    }
}

/// A parameter value as text, for servers that take text: strings as they
/// are, other JSON as JSON.
pub fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a JSON value is, for errors.
pub fn describe(v: &Value) -> String {
    let shown = v.to_string();
    let shown = if shown.chars().count() > 40 {
        format!("{}…", shown.chars().take(40).collect::<String>())
    } else {
        shown
    };
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    format!("{kind} ({shown})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_round_trips() {
        for days in [-800_000, -719_468, -1, 0, 1, 10_957, 19_782, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(10_957), (2000, 1, 1));
        assert_eq!(
            fmt_unix_micros(951_827_696_500_000),
            "2000-02-29T12:34:56.5"
        );
        assert_eq!(fmt_date(-43, 3, 15), "-0043-03-15");
    }

    #[test]
    fn datetimes_read() {
        let dt = parse_datetime("2024-02-29T13:45:07.25+02:00").unwrap();
        assert_eq!(dt.offset, Some(7200));
        assert_eq!(fmt_unix_micros(dt.unix_micros()), "2024-02-29T11:45:07.25");
        assert_eq!(fmt_unix_micros(dt.local_micros()), "2024-02-29T13:45:07.25");
        let d = parse_datetime("2024-03-01").unwrap();
        assert!(!d.has_time);
        assert_eq!(
            parse_datetime("2024-03-01 00:00:00Z").unwrap().offset,
            Some(0)
        );
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-01-01T25:00",
            "24-01-01",
            "2024-01-01x",
            "now",
            "",
        ] {
            assert_eq!(parse_datetime(bad), None, "{bad}");
        }
    }
}
