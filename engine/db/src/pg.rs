//! PostgreSQL: parameters are sent in the binary form of the type the server
//! inferred for each placeholder (so `"42"` fills an `int4` and `{"a": 1}` a
//! `jsonb`), and result columns are read from their binary form into JSON.
//! No text is ever spliced into the SQL.

use std::net::{Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use serde_json::{Map, Value, json};
use sqlx::postgres::types::Oid;
use sqlx::postgres::{
    PgArgumentBuffer, PgArguments, PgConnection, PgTypeInfo, PgTypeKind, PgValueFormat, Postgres,
};
use sqlx::{
    Arguments, Column as _, Either, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef,
};

use crate::value::{self, describe};
use crate::{Column, Error, Mode, Outcome, Param, Request, Rows};

/// Days from 1970-01-01 to 2000-01-01, PostgreSQL's epoch.
const PG_EPOCH_DAYS: i64 = 10_957;
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;

mod oid {
    pub const BOOL: u32 = 16;
    pub const BYTEA: u32 = 17;
    pub const CHAR: u32 = 18;
    pub const NAME: u32 = 19;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const TEXT: u32 = 25;
    pub const OID: u32 = 26;
    pub const JSON: u32 = 114;
    pub const XML: u32 = 142;
    pub const CIDR: u32 = 650;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const UNKNOWN: u32 = 705;
    pub const MACADDR: u32 = 829;
    pub const INET: u32 = 869;
    pub const BPCHAR: u32 = 1042;
    pub const VARCHAR: u32 = 1043;
    pub const DATE: u32 = 1082;
    pub const TIME: u32 = 1083;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const INTERVAL: u32 = 1186;
    pub const TIMETZ: u32 = 1266;
    pub const NUMERIC: u32 = 1700;
    pub const RECORD: u32 = 2249;
    pub const VOID: u32 = 2278;
    pub const UUID: u32 = 2950;
    pub const JSONB: u32 = 3802;
}

/// A parameter in the binary form of the type the server expects.
struct Raw {
    ty: PgTypeInfo,
    bytes: Option<Vec<u8>>,
}

impl sqlx::Type<Postgres> for Raw {
    fn type_info() -> PgTypeInfo {
        PgTypeInfo::with_oid(Oid(oid::UNKNOWN))
    }
}

impl sqlx::Encode<'_, Postgres> for Raw {
    fn encode_by_ref(
        &self,
        buf: &mut PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        match &self.bytes {
            Some(b) => {
                buf.extend_from_slice(b);
                Ok(sqlx::encode::IsNull::No)
            }
            None => Ok(sqlx::encode::IsNull::Yes),
        }
    }

    fn produces(&self) -> Option<PgTypeInfo> {
        Some(self.ty.clone())
    }
}

fn oid_of(ty: &PgTypeInfo) -> u32 {
    ty.oid().map(|o| o.0).unwrap_or(0)
}

/// Runs one statement on `conn`.
pub(crate) async fn run(
    conn: &mut PgConnection,
    sql: &str,
    params: &[(String, &Param)],
    req: &Request<'_>,
) -> Result<Outcome, Error> {
    let stmt = conn
        .prepare(sqlx::AssertSqlSafe(sql.to_string()).into_sql_str())
        .await
        .map_err(|e| crate::error::from_sqlx(e, req.sql, crate::Dialect::Postgres))?;
    let types: Vec<PgTypeInfo> = match stmt.parameters() {
        Some(Either::Left(types)) => types.to_vec(),
        _ => Vec::new(),
    };
    crate::error::check_count(types.len(), params.len(), "$1", crate::Dialect::Postgres)?;
    let mut args = PgArguments::default();
    for (ty, (label, param)) in types.iter().zip(params) {
        let bytes = encode(ty, param).map_err(|why| {
            Error::terminal(format!(
                "{label}: {why} (the SQL's parameter has type {})",
                ty.name()
            ))
        })?;
        args.add(Raw {
            ty: ty.clone(),
            bytes,
        })
        .map_err(|e| Error::terminal(format!("{label}: {e}")))?;
    }
    let query = sqlx::query_with(sqlx::AssertSqlSafe(sql.to_string()), args);
    match req.mode {
        Mode::Execute => {
            let done = query
                .execute(&mut *conn)
                .await
                .map_err(|e| crate::error::from_sqlx(e, req.sql, crate::Dialect::Postgres))?;
            Ok(Outcome::Executed {
                rows_affected: done.rows_affected(),
                last_insert_id: None,
            })
        }
        Mode::Query => {
            let columns: Vec<Column> = stmt
                .columns()
                .iter()
                .map(|c| Column {
                    name: c.name().to_string(),
                    type_name: c.type_info().name().to_string(),
                })
                .collect();
            let mut rows = Rows::new(req);
            let mut stream = query.fetch(&mut *conn);
            while let Some(row) = stream
                .try_next()
                .await
                .map_err(|e| crate::error::from_sqlx(e, req.sql, crate::Dialect::Postgres))?
            {
                let mut obj = Map::with_capacity(row.len());
                for (i, col) in row.columns().iter().enumerate() {
                    let raw = row
                        .try_get_raw(i)
                        .map_err(|e| Error::terminal(format!("column `{}`: {e}", col.name())))?;
                    let v = if raw.is_null() {
                        Value::Null
                    } else {
                        let bytes = raw.as_bytes().map_err(|e| {
                            Error::terminal(format!("column `{}`: {e}", col.name()))
                        })?;
                        let ty = col.type_info();
                        match raw.format() {
                            PgValueFormat::Binary => decode(ty, bytes),
                            PgValueFormat::Text => {
                                Ok(Value::String(String::from_utf8_lossy(bytes).into_owned()))
                            }
                        }
                        .map_err(|why| {
                            Error::terminal(format!(
                                "column `{}` ({}): {why}",
                                col.name(),
                                ty.name()
                            ))
                        })?
                    };
                    obj.insert(col.name().to_string(), v);
                }
                rows.push(obj)?;
            }
            Ok(rows.finish(columns))
        }
    }
}

// ---- reading ----------------------------------------------------------------

fn unsupported(ty: &PgTypeInfo) -> String {
    format!(
        "db.query cannot read type {} yet: cast it in the SQL (`column::text`)",
        ty.name()
    )
}

fn be<const N: usize>(b: &[u8]) -> Result<[u8; N], String> {
    b.get(..N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| format!("a value of {} bytes where {N} were expected", b.len()))
}

fn utf8(b: &[u8]) -> Result<Value, String> {
    std::str::from_utf8(b)
        .map(|s| Value::String(s.to_string()))
        .map_err(|_| "text that is not UTF-8".to_string())
}

/// A binary value of type `ty` as JSON.
pub(crate) fn decode(ty: &PgTypeInfo, b: &[u8]) -> Result<Value, String> {
    match ty.kind() {
        PgTypeKind::Domain(base) => return decode(base, b),
        PgTypeKind::Enum(_) => return utf8(b),
        PgTypeKind::Array(elem) => return decode_array(Some(elem), b),
        PgTypeKind::Composite(fields) => return decode_record(Some(fields), b),
        PgTypeKind::Range(_) => return Err(unsupported(ty)),
        PgTypeKind::Simple | PgTypeKind::Pseudo => {}
    }
    let o = oid_of(ty);
    if o == 0 {
        // A type known only by name (an extension's): text-like ones are text.
        return if ty.name().eq_ignore_ascii_case("citext") {
            utf8(b)
        } else {
            Err(unsupported(ty))
        };
    }
    decode_oid(o, b).unwrap_or_else(|| Err(unsupported(ty)))
}

/// A binary value of a built-in type; `None` for types not read here.
fn decode_oid(o: u32, b: &[u8]) -> Option<Result<Value, String>> {
    Some((|| -> Result<Value, String> {
        Ok(match o {
            oid::BOOL => Value::Bool(be::<1>(b)?[0] != 0),
            oid::INT2 => json!(i16::from_be_bytes(be(b)?)),
            oid::INT4 => json!(i32::from_be_bytes(be(b)?)),
            oid::INT8 => json!(i64::from_be_bytes(be(b)?)),
            oid::OID => json!(u32::from_be_bytes(be(b)?)),
            oid::FLOAT4 => value::float(f64::from(f32::from_be_bytes(be(b)?))),
            oid::FLOAT8 => value::float(f64::from_be_bytes(be(b)?)),
            oid::NUMERIC => Value::String(numeric_text(b)?),
            oid::TEXT
            | oid::VARCHAR
            | oid::BPCHAR
            | oid::NAME
            | oid::CHAR
            | oid::UNKNOWN
            | oid::XML => utf8(b)?,
            oid::JSON => serde_json::from_slice(b).map_err(|e| format!("bad json: {e}"))?,
            oid::JSONB => match b.split_first() {
                Some((1, text)) => {
                    serde_json::from_slice(text).map_err(|e| format!("bad jsonb: {e}"))?
                }
                _ => return Err("jsonb in a version this reader does not know".into()),
            },
            oid::BYTEA => value::bytes(b),
            oid::UUID => Value::String(uuid_text(&be::<16>(b)?)),
            oid::DATE => {
                let d = i32::from_be_bytes(be(b)?);
                match d {
                    i32::MAX => json!("infinity"),
                    i32::MIN => json!("-infinity"),
                    d => {
                        let (y, m, dd) = value::civil_from_days(i64::from(d) + PG_EPOCH_DAYS);
                        Value::String(value::fmt_date(y, m, dd))
                    }
                }
            }
            oid::TIME => Value::String(time_text(i64::from_be_bytes(be(b)?))),
            oid::TIMETZ => {
                let us = i64::from_be_bytes(be(b)?);
                // Seconds *west* of UTC.
                let west = i32::from_be_bytes(be(&b[8..])?);
                Value::String(format!("{}{}", time_text(us), offset_text(-west)))
            }
            oid::TIMESTAMP | oid::TIMESTAMPTZ => {
                let us = i64::from_be_bytes(be(b)?);
                match us {
                    i64::MAX => json!("infinity"),
                    i64::MIN => json!("-infinity"),
                    us => {
                        let text = value::fmt_unix_micros(us.saturating_add(PG_EPOCH_MICROS));
                        Value::String(if o == oid::TIMESTAMPTZ {
                            text + "Z"
                        } else {
                            text
                        })
                    }
                }
            }
            oid::INTERVAL => {
                let us = i64::from_be_bytes(be(b)?);
                let days = i32::from_be_bytes(be(&b[8..])?);
                let months = i32::from_be_bytes(be(&b[12..])?);
                Value::String(interval_text(months, days, us))
            }
            oid::INET | oid::CIDR => Value::String(inet_text(b, o == oid::CIDR)?),
            oid::MACADDR => Value::String(
                be::<6>(b)?
                    .iter()
                    .map(|x| format!("{x:02x}"))
                    .collect::<Vec<_>>()
                    .join(":"),
            ),
            oid::RECORD => decode_record(None, b)?,
            // What a function that returns nothing gives.
            oid::VOID => Value::Null,
            _ => return Err(String::new()),
        })
    })())
    .filter(|r| !matches!(r, Err(e) if e.is_empty()))
}

fn time_text(us: i64) -> String {
    let secs = us / 1_000_000;
    value::fmt_time(
        (secs / 3600) as u32,
        (secs / 60 % 60) as u32,
        (secs % 60) as u32,
        (us % 1_000_000) as u32,
    )
}

fn offset_text(east: i32) -> String {
    let sign = if east < 0 { '-' } else { '+' };
    let a = east.unsigned_abs();
    format!("{sign}{:02}:{:02}", a / 3600, a / 60 % 60)
}

fn uuid_text(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// An interval as ISO 8601 (`P1Y2M3DT4H5M6.5S`), as PostgreSQL writes it
/// with `intervalstyle = iso_8601`.
fn interval_text(months: i32, days: i32, us: i64) -> String {
    if months == 0 && days == 0 && us == 0 {
        return "PT0S".into();
    }
    let mut s = String::from("P");
    let (y, m) = (months / 12, months % 12);
    if y != 0 {
        s += &format!("{y}Y");
    }
    if m != 0 {
        s += &format!("{m}M");
    }
    if days != 0 {
        s += &format!("{days}D");
    }
    if us != 0 {
        s.push('T');
        let neg = us < 0;
        let a = us.unsigned_abs();
        let (h, mi, sec, frac) = (
            a / 3_600_000_000,
            a / 60_000_000 % 60,
            a / 1_000_000 % 60,
            a % 1_000_000,
        );
        let sign = if neg { "-" } else { "" };
        if h != 0 {
            s += &format!("{sign}{h}H");
        }
        if mi != 0 {
            s += &format!("{sign}{mi}M");
        }
        if sec != 0 || frac != 0 {
            s += &format!("{sign}{sec}");
            if frac != 0 {
                s += format!(".{frac:06}").trim_end_matches('0');
            }
            s.push('S');
        }
    }
    s
}

fn inet_text(b: &[u8], cidr: bool) -> Result<String, String> {
    let [family, bits, _, len] = be::<4>(b)?;
    let addr = &b[4..];
    let (text, max) = match (family, len) {
        (2, 4) => (Ipv4Addr::from(be::<4>(addr)?).to_string(), 32),
        (3, 16) => (Ipv6Addr::from(be::<16>(addr)?).to_string(), 128),
        _ => return Err("an inet value this reader does not know".into()),
    };
    Ok(if bits == max && !cidr {
        text
    } else {
        format!("{text}/{bits}")
    })
}

/// NUMERIC's binary form (base-10000 digits) as exact decimal text.
pub(crate) fn numeric_text(b: &[u8]) -> Result<String, String> {
    let ndigits = i16::from_be_bytes(be(b)?);
    let weight = i16::from_be_bytes(be(&b[2..])?);
    let sign = u16::from_be_bytes(be(&b[4..])?);
    let dscale = u16::from_be_bytes(be(&b[6..])?);
    match sign {
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return Err("a numeric with an unknown sign".into()),
    }
    let n = usize::try_from(ndigits).map_err(|_| "a negative digit count")?;
    let mut groups = Vec::with_capacity(n);
    for i in 0..n {
        let g = i16::from_be_bytes(be(b.get(8 + 2 * i..).unwrap_or_default())?);
        if !(0..10_000).contains(&g) {
            return Err("a numeric digit out of range".into());
        }
        groups.push(g as u32);
    }
    let group = |i: i32| -> u32 {
        usize::try_from(i)
            .ok()
            .and_then(|i| groups.get(i).copied())
            .unwrap_or(0)
    };
    let mut s = String::new();
    if sign == 0x4000 {
        s.push('-');
    }
    let weight = i32::from(weight);
    if weight < 0 {
        s.push('0');
    } else {
        for i in 0..=weight {
            if i == 0 {
                s += &group(i).to_string();
            } else {
                s += &format!("{:04}", group(i));
            }
        }
    }
    if dscale > 0 {
        let mut frac = String::new();
        let mut i = weight + 1;
        while frac.len() < usize::from(dscale) {
            frac += &format!("{:04}", group(i));
            i += 1;
        }
        frac.truncate(usize::from(dscale));
        s.push('.');
        s += &frac;
    }
    if s == "-0" || (s.starts_with("-0.") && s[3..].bytes().all(|c| c == b'0')) {
        s.remove(0);
    }
    Ok(s)
}

fn decode_array(elem: Option<&PgTypeInfo>, b: &[u8]) -> Result<Value, String> {
    let ndim = i32::from_be_bytes(be(b)?);
    let elem_oid = u32::from_be_bytes(be(&b[8..])?);
    if ndim == 0 {
        return Ok(json!([]));
    }
    let ndim = usize::try_from(ndim).map_err(|_| "an array with negative dimensions")?;
    if ndim > 6 {
        return Err("an array of more than 6 dimensions".into());
    }
    let mut dims = Vec::with_capacity(ndim);
    let mut at = 12;
    for _ in 0..ndim {
        let len = i32::from_be_bytes(be(b.get(at..).unwrap_or_default())?);
        dims.push(usize::try_from(len).map_err(|_| "an array with a negative length")?);
        at += 8;
    }
    let total = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or("an array too large to read")?;
    let mut items = Vec::with_capacity(total.min(1 << 16));
    for _ in 0..total {
        let len = i32::from_be_bytes(be(b.get(at..).unwrap_or_default())?);
        at += 4;
        if len < 0 {
            items.push(Value::Null);
            continue;
        }
        let len = len as usize;
        let item = b
            .get(at..at + len)
            .ok_or("an array element past the end of the value")?;
        at += len;
        items.push(match elem {
            Some(ty) => decode(ty, item)?,
            None => decode_oid(elem_oid, item)
                .unwrap_or_else(|| Err(format!("an array of type oid {elem_oid}")))?,
        });
    }
    // Nest by dimension, innermost first.
    let mut level: Vec<Value> = items;
    for &d in dims.iter().skip(1).rev() {
        let mut outer = Vec::with_capacity(level.len() / d.max(1));
        let mut it = level.into_iter();
        loop {
            let chunk: Vec<Value> = it.by_ref().take(d).collect();
            if chunk.is_empty() {
                break;
            }
            outer.push(Value::Array(chunk));
        }
        level = outer;
    }
    Ok(Value::Array(level))
}

fn decode_record(
    fields: Option<&std::sync::Arc<[(String, PgTypeInfo)]>>,
    b: &[u8],
) -> Result<Value, String> {
    let n = i32::from_be_bytes(be(b)?);
    let mut at = 4;
    let mut named = Map::new();
    let mut list = Vec::new();
    for i in 0..usize::try_from(n).map_err(|_| "a record with a negative field count")? {
        let field_oid = u32::from_be_bytes(be(b.get(at..).unwrap_or_default())?);
        let len = i32::from_be_bytes(be(b.get(at + 4..).unwrap_or_default())?);
        at += 8;
        let v = if len < 0 {
            Value::Null
        } else {
            let len = len as usize;
            let item = b.get(at..at + len).ok_or("a record field past the end")?;
            at += len;
            match fields.and_then(|f| f.get(i)) {
                Some((_, ty)) => decode(ty, item)?,
                None => decode_oid(field_oid, item)
                    .unwrap_or_else(|| Err(format!("a record field of type oid {field_oid}")))?,
            }
        };
        match fields.and_then(|f| f.get(i)) {
            Some((name, _)) => {
                named.insert(name.clone(), v);
            }
            None => list.push(v),
        }
    }
    Ok(if fields.is_some() {
        Value::Object(named)
    } else {
        Value::Array(list)
    })
}

// ---- writing ----------------------------------------------------------------

fn text_of(v: &Value) -> Option<Vec<u8>> {
    Some(value::as_text(v).into_bytes())
}

fn int_of(v: &Value, min: i64, max: i64) -> Result<i64, String> {
    let n = match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse::<i64>().ok(),
        Value::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
    .ok_or_else(|| format!("expected an integer, got {}", describe(v)))?;
    if n < min || n > max {
        return Err(format!("{n} is out of range ({min} to {max})"));
    }
    Ok(n)
}

fn float_of(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.trim() {
            "NaN" => Some(f64::NAN),
            "Infinity" | "inf" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            t => t.parse::<f64>().ok(),
        },
        _ => None,
    }
    .ok_or_else(|| format!("expected a number, got {}", describe(v)))
}

fn str_of<'a>(v: &'a Value, what: &str) -> Result<&'a str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected {what} as a string, got {}", describe(v)))
}

/// The binary form of `param` for a parameter of type `ty` (`None`: NULL).
pub(crate) fn encode(ty: &PgTypeInfo, param: &Param) -> Result<Option<Vec<u8>>, String> {
    let v = match param {
        Param::Bytes(b) => {
            return match oid_of(ty) {
                oid::BYTEA => Ok(Some(b.clone())),
                _ => match ty.kind() {
                    PgTypeKind::Domain(base) => encode(base, param),
                    _ => Err("bytes can only fill a bytea parameter".into()),
                },
            };
        }
        Param::Json(v) => v,
    };
    if v.is_null() {
        return Ok(None);
    }
    match ty.kind() {
        PgTypeKind::Domain(base) => return encode(base, param),
        PgTypeKind::Enum(labels) => {
            let s = str_of(v, "an enum label")?;
            if !labels.iter().any(|l| l == s) {
                return Err(format!(
                    "`{s}` is not one of the enum's labels ({})",
                    labels.join(", ")
                ));
            }
            return Ok(Some(s.as_bytes().to_vec()));
        }
        PgTypeKind::Array(elem) => return encode_array(elem, v).map(Some),
        PgTypeKind::Composite(_) | PgTypeKind::Range(_) => {
            return Err(format!(
                "db.query cannot send type {} yet: pass text and cast it in the SQL (`$1::text::{}`)",
                ty.name(),
                ty.name()
            ));
        }
        PgTypeKind::Simple | PgTypeKind::Pseudo => {}
    }
    let o = oid_of(ty);
    Ok(match o {
        oid::BOOL => Some(vec![u8::from(match v {
            Value::Bool(b) => *b,
            Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "t" | "yes" | "y" | "on" | "1" => true,
                "false" | "f" | "no" | "n" | "off" | "0" => false,
                _ => return Err(format!("expected a boolean, got {}", describe(v))),
            },
            Value::Number(n) if n.as_i64() == Some(0) => false,
            Value::Number(n) if n.as_i64() == Some(1) => true,
            _ => return Err(format!("expected a boolean, got {}", describe(v))),
        })]),
        oid::INT2 => Some(
            (int_of(v, i16::MIN.into(), i16::MAX.into())? as i16)
                .to_be_bytes()
                .to_vec(),
        ),
        oid::INT4 => Some(
            (int_of(v, i32::MIN.into(), i32::MAX.into())? as i32)
                .to_be_bytes()
                .to_vec(),
        ),
        oid::INT8 => Some(int_of(v, i64::MIN, i64::MAX)?.to_be_bytes().to_vec()),
        oid::OID => Some(
            (int_of(v, 0, u32::MAX.into())? as u32)
                .to_be_bytes()
                .to_vec(),
        ),
        oid::FLOAT4 => Some((float_of(v)? as f32).to_be_bytes().to_vec()),
        oid::FLOAT8 => Some(float_of(v)?.to_be_bytes().to_vec()),
        oid::NUMERIC => {
            let text = match v {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s.trim().to_string(),
                _ => return Err(format!("expected a number, got {}", describe(v))),
            };
            Some(
                numeric_binary(&text)
                    .ok_or_else(|| format!("expected a decimal number, got {}", describe(v)))?,
            )
        }
        oid::TEXT
        | oid::VARCHAR
        | oid::BPCHAR
        | oid::NAME
        | oid::UNKNOWN
        | oid::XML
        | oid::CHAR => text_of(v),
        oid::JSON => Some(v.to_string().into_bytes()),
        oid::JSONB => {
            let mut b = vec![1u8];
            b.extend_from_slice(v.to_string().as_bytes());
            Some(b)
        }
        oid::BYTEA => match v {
            Value::String(s) => Some(s.as_bytes().to_vec()),
            _ => {
                return Err(format!(
                    "expected bytes (`{{\"$bytes\": …}}`) or text, got {}",
                    describe(v)
                ));
            }
        },
        oid::UUID => {
            let s = str_of(v, "a UUID")?;
            let hex: String = s
                .chars()
                .filter(|c| *c != '-' && *c != '{' && *c != '}')
                .collect();
            if hex.len() != 32 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("expected a UUID, got {}", describe(v)));
            }
            Some(
                (0..16)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
                    .collect(),
            )
        }
        oid::DATE => {
            let s = str_of(v, "a date (`2024-03-01`)")?;
            let d = match s.trim() {
                "infinity" => i32::MAX,
                "-infinity" => i32::MIN,
                t => {
                    let dt = value::parse_datetime(t)
                        .filter(|d| !d.has_time)
                        .ok_or_else(|| {
                            format!("expected a date (`2024-03-01`), got {}", describe(v))
                        })?;
                    i32::try_from(dt.days - PG_EPOCH_DAYS)
                        .map_err(|_| "the date is out of range")?
                }
            };
            Some(d.to_be_bytes().to_vec())
        }
        oid::TIME => {
            let s = str_of(v, "a time (`13:45:00`)")?;
            let (us, used) = value::parse_time_prefix(s.trim().as_bytes())
                .filter(|(_, used)| *used == s.trim().len())
                .ok_or_else(|| format!("expected a time (`13:45:00`), got {}", describe(v)))?;
            let _ = used;
            Some(us.to_be_bytes().to_vec())
        }
        oid::TIMESTAMP | oid::TIMESTAMPTZ => {
            let s = str_of(v, "a date and time (`2024-03-01T13:45:00Z`)")?;
            let us = match s.trim() {
                "infinity" => i64::MAX,
                "-infinity" => i64::MIN,
                t => {
                    let dt = value::parse_datetime(t).ok_or_else(|| {
                        format!(
                            "expected a date and time (`2024-03-01T13:45:00Z`), got {}",
                            describe(v)
                        )
                    })?;
                    // Without a zone, a timestamptz is UTC (the session's
                    // TimeZone, which sqlx sets to UTC); a timestamp keeps
                    // the wall-clock time as written, as PostgreSQL does.
                    let at = if o == oid::TIMESTAMPTZ {
                        dt.unix_micros()
                    } else {
                        dt.local_micros()
                    };
                    at - PG_EPOCH_MICROS
                }
            };
            Some(us.to_be_bytes().to_vec())
        }
        oid::INET | oid::CIDR => Some(
            inet_binary(str_of(v, "an IP address")?, o == oid::CIDR)
                .ok_or_else(|| format!("expected an IP address or network, got {}", describe(v)))?,
        ),
        _ if ty.name().eq_ignore_ascii_case("citext") => text_of(v),
        _ => {
            return Err(format!(
                "db.query cannot send type {} yet: pass text and cast it in the SQL (`$1::text::{}`)",
                ty.name(),
                ty.name()
            ));
        }
    })
}

fn encode_array(elem: &PgTypeInfo, v: &Value) -> Result<Vec<u8>, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array, got {}", describe(v)));
    };
    let mut out = Vec::new();
    let has_null = items.iter().any(Value::is_null);
    out.extend_from_slice(&1i32.to_be_bytes());
    out.extend_from_slice(&i32::from(has_null).to_be_bytes());
    out.extend_from_slice(&oid_of(elem).to_be_bytes());
    let len = i32::try_from(items.len()).map_err(|_| "the array is too long")?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&1i32.to_be_bytes());
    for (i, item) in items.iter().enumerate() {
        if item.is_array() {
            return Err(format!(
                "[{i}]: arrays of arrays are not sent; pass one array of {}",
                elem.name()
            ));
        }
        match encode(elem, &Param::Json(item.clone())).map_err(|e| format!("[{i}]: {e}"))? {
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(b) => {
                let n = i32::try_from(b.len()).map_err(|_| "an element is too long")?;
                out.extend_from_slice(&n.to_be_bytes());
                out.extend_from_slice(&b);
            }
        }
    }
    Ok(out)
}

fn inet_binary(s: &str, cidr: bool) -> Option<Vec<u8>> {
    let (addr, bits) = match s.trim().split_once('/') {
        Some((a, b)) => (a, Some(b.parse::<u8>().ok()?)),
        None => (s.trim(), None),
    };
    let ip: std::net::IpAddr = addr.parse().ok()?;
    let (family, max, bytes) = match ip {
        std::net::IpAddr::V4(a) => (2u8, 32u8, a.octets().to_vec()),
        std::net::IpAddr::V6(a) => (3u8, 128u8, a.octets().to_vec()),
    };
    let bits = bits.unwrap_or(max);
    if bits > max {
        return None;
    }
    let mut out = vec![family, bits, u8::from(cidr), bytes.len() as u8];
    out.extend_from_slice(&bytes);
    Some(out)
}

/// Decimal text (`-12.5`, `1e-7`, `NaN`) as NUMERIC's binary form.
pub(crate) fn numeric_binary(text: &str) -> Option<Vec<u8>> {
    let special = |sign: u16| {
        let mut b = vec![0u8, 0, 0, 0];
        b.extend_from_slice(&sign.to_be_bytes());
        b.extend_from_slice(&0u16.to_be_bytes());
        Some(b)
    };
    match text {
        "NaN" => return special(0xC000),
        "Infinity" => return special(0xD000),
        "-Infinity" => return special(0xF000),
        _ => {}
    }
    let (neg, t) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(p) => (&t[..p], t[p + 1..].parse::<i32>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
        || exp.abs() > 1000
    {
        return None;
    }
    let mut digits: Vec<u8> = int.bytes().chain(frac.bytes()).map(|c| c - b'0').collect();
    // The decimal point sits after `point` digits.
    let mut point = int.len() as i32 + exp;
    let dscale = (frac.len() as i32 - exp).max(0) as u16;
    // Align the point to a group boundary on both sides.
    if point < 0 {
        let pad = (-point) as usize;
        digits.splice(0..0, std::iter::repeat_n(0, pad));
        point = 0;
    }
    if point as usize > digits.len() {
        digits.resize(point as usize, 0);
    }
    let lead = (4 - point as usize % 4) % 4;
    digits.splice(0..0, std::iter::repeat_n(0, lead));
    let point = point as usize + lead;
    let tail = (4 - (digits.len() - point) % 4) % 4;
    digits.resize(digits.len() + tail, 0);
    let mut groups: Vec<i16> = digits
        .chunks(4)
        .map(|c| c.iter().fold(0i16, |a, &d| a * 10 + i16::from(d)))
        .collect();
    let mut weight = (point / 4) as i32 - 1;
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    let mut out = Vec::with_capacity(8 + 2 * groups.len());
    out.extend_from_slice(&i16::try_from(groups.len()).ok()?.to_be_bytes());
    out.extend_from_slice(&i16::try_from(weight).ok()?.to_be_bytes());
    out.extend_from_slice(
        &(if neg && !groups.is_empty() {
            0x4000u16
        } else {
            0
        })
        .to_be_bytes(),
    );
    out.extend_from_slice(&dscale.to_be_bytes());
    for g in groups {
        out.extend_from_slice(&g.to_be_bytes());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numerics_round_trip_exactly() {
        for (given, shown) in [
            ("0", "0"),
            ("1", "1"),
            ("-1", "-1"),
            (
                "12345678901234567890.123456789",
                "12345678901234567890.123456789",
            ),
            ("0.0001", "0.0001"),
            ("0.00000001", "0.00000001"),
            ("10000", "10000"),
            ("-0.5", "-0.5"),
            ("1.50", "1.50"),
            ("1e3", "1000"),
            ("1.5e-3", "0.0015"),
            ("NaN", "NaN"),
            ("-Infinity", "-Infinity"),
            ("0.000", "0.000"),
        ] {
            let b = numeric_binary(given).unwrap_or_else(|| panic!("{given}"));
            assert_eq!(numeric_text(&b).unwrap(), shown, "{given}");
        }
        for bad in ["", "-", "1.2.3", "abc", "1e", "--1", "1e99999"] {
            assert_eq!(numeric_binary(bad), None, "{bad}");
        }
    }

    #[test]
    fn intervals_read_as_iso_8601() {
        assert_eq!(interval_text(14, 3, 14_706_500_000), "P1Y2M3DT4H5M6.5S");
        assert_eq!(interval_text(0, 0, 0), "PT0S");
        assert_eq!(interval_text(0, -1, -60_000_000), "P-1DT-1M");
    }

    #[test]
    fn malformed_binary_values_are_errors_not_panics() {
        for o in [
            oid::INT4,
            oid::INT8,
            oid::NUMERIC,
            oid::UUID,
            oid::TIMETZ,
            oid::INTERVAL,
            oid::INET,
            oid::RECORD,
            oid::JSONB,
        ] {
            for b in [
                &[][..],
                &[0xff][..],
                &[0, 0, 0, 9, 0xff, 0xff][..],
                &[0x7f; 20][..],
            ] {
                let _ = decode_oid(o, b);
            }
        }
        let _ = decode_array(
            None,
            &[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 23, 0x7f, 0xff, 0xff, 0xff],
        );
    }
}
