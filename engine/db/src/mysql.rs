//! MySQL and MariaDB: parameters bound by their JSON type (the server
//! converts as it assigns), result columns read from the binary protocol by
//! their column type into JSON.

use futures::TryStreamExt;
use serde_json::{Map, Value, json};
use sqlx::mysql::{MySqlArguments, MySqlConnection};
use sqlx::{Arguments, Column as _, Either, Executor, Row, SqlSafeStr, Statement, TypeInfo};

use crate::value;
use crate::{Column, Error, Mode, Outcome, Param, Request, Rows};

/// Gives every session of a pool its statement time limit: MariaDB's
/// `max_statement_time` (seconds, every statement) or MySQL's
/// `max_execution_time` (milliseconds, `SELECT`s).
pub(crate) async fn limit_time(conn: &mut MySqlConnection, ms: u128) -> Result<(), sqlx::Error> {
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut *conn)
        .await?;
    let set = if version.contains("MariaDB") {
        format!("SET SESSION max_statement_time = {}", ms as f64 / 1000.0)
    } else {
        format!("SET SESSION max_execution_time = {ms}")
    };
    conn.execute(sqlx::AssertSqlSafe(set)).await?;
    Ok(())
}

fn bind(args: &mut MySqlArguments, param: &Param) -> Result<(), String> {
    let added = match param {
        Param::Bytes(b) => args.add(b.clone()),
        Param::Json(v) => match v {
            Value::Null => args.add(Option::<String>::None),
            Value::Bool(b) => args.add(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => args.add(i),
                (None, Some(u), _) => args.add(u),
                (_, _, Some(f)) => args.add(f),
                _ => args.add(n.to_string()),
            },
            Value::String(s) => args.add(s.clone()),
            other => args.add(other.to_string()),
        },
    };
    added.map_err(|e| e.to_string())
}

pub(crate) async fn run(
    conn: &mut MySqlConnection,
    sql: &str,
    params: &[(String, &Param)],
    req: &Request<'_>,
) -> Result<Outcome, Error> {
    let dialect = crate::Dialect::MySql;
    let stmt = conn
        .prepare(sqlx::AssertSqlSafe(sql.to_string()).into_sql_str())
        .await
        .map_err(|e| crate::error::from_sqlx(e, req.sql, dialect))?;
    let wanted = match stmt.parameters() {
        Some(Either::Right(n)) => n,
        Some(Either::Left(t)) => t.len(),
        None => 0,
    };
    crate::error::check_count(wanted, params.len(), "?", dialect)?;
    let mut args = MySqlArguments::default();
    for (label, p) in params {
        bind(&mut args, p).map_err(|e| Error::terminal(format!("{label}: {e}")))?;
    }
    let query = sqlx::query_with(sqlx::AssertSqlSafe(sql.to_string()), args);
    match req.mode {
        Mode::Execute => {
            let done = query
                .execute(&mut *conn)
                .await
                .map_err(|e| crate::error::from_sqlx(e, req.sql, dialect))?;
            Ok(Outcome::Executed {
                rows_affected: done.rows_affected(),
                last_insert_id: i64::try_from(done.last_insert_id())
                    .ok()
                    .filter(|id| *id != 0),
            })
        }
        Mode::Query => {
            let columns: Vec<Column> = stmt
                .columns()
                .iter()
                .map(|c| Column {
                    name: c.name().to_string(),
                    type_name: type_name(c.type_info()).to_string(),
                })
                .collect();
            let mut rows = Rows::new(req);
            {
                let mut stream = query.fetch(&mut *conn);
                while let Some(row) = stream
                    .try_next()
                    .await
                    .map_err(|e| crate::error::from_sqlx(e, req.sql, dialect))?
                {
                    let mut obj = Map::with_capacity(row.len());
                    for (i, col) in row.columns().iter().enumerate() {
                        let ty = type_name(col.type_info());
                        let raw: Option<&[u8]> = row.try_get_unchecked(i).map_err(|e| {
                            Error::terminal(format!("column `{}`: {e}", col.name()))
                        })?;
                        let v = match raw {
                            None => Value::Null,
                            Some(b) => decode(ty, b).map_err(|why| {
                                Error::terminal(format!("column `{}` ({ty}): {why}", col.name()))
                            })?,
                        };
                        obj.insert(col.name().to_string(), v);
                    }
                    rows.push(obj)?;
                }
            }
            Ok(rows.finish(columns))
        }
    }
}

/// A column's type as sqlx names it, except that text with a `_bin`
/// collation (which carries the binary flag too) is named as text: only the
/// `binary` character set is bytes.
fn type_name(info: &sqlx::mysql::MySqlTypeInfo) -> &str {
    match info.name() {
        n @ ("BINARY" | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB")
            if !binary_collation(info) =>
        {
            text_name(n)
        }
        n => n,
    }
}

/// Whether a column's collation is `binary` (63): bytes, not text. sqlx
/// keeps the collation to itself; its `Debug` form shows it. Unreadable,
/// the column is taken as binary, as sqlx names it.
fn binary_collation(info: &sqlx::mysql::MySqlTypeInfo) -> bool {
    let shown = format!("{info:?}");
    match shown.split("collation: Collation(").nth(1) {
        Some(rest) => rest.split(')').next() == Some("63"),
        None => true,
    }
}

/// The text type a binary-flagged column is when its collation is text.
fn text_name(binary: &str) -> &'static str {
    match binary {
        "BINARY" => "CHAR",
        "VARBINARY" => "VARCHAR",
        "TINYBLOB" => "TINYTEXT",
        "MEDIUMBLOB" => "MEDIUMTEXT",
        "LONGBLOB" => "LONGTEXT",
        _ => "TEXT",
    }
}

fn le_int(b: &[u8], signed: bool) -> Result<Value, String> {
    if b.is_empty() || b.len() > 8 {
        return Err(format!("an integer of {} bytes", b.len()));
    }
    let mut buf = [0u8; 8];
    buf[..b.len()].copy_from_slice(b);
    if signed && b[b.len() - 1] & 0x80 != 0 {
        for x in &mut buf[b.len()..] {
            *x = 0xff;
        }
    }
    Ok(if signed {
        json!(i64::from_le_bytes(buf))
    } else {
        json!(u64::from_le_bytes(buf))
    })
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|_| "text that is not UTF-8".to_string())
}

/// A date, datetime or timestamp in the binary protocol: a length byte,
/// then year (2 bytes), month, day, and maybe hour, minute, second and
/// microseconds. All zeros is MySQL's "zero date".
fn datetime(ty: &str, b: &[u8]) -> Result<Value, String> {
    let (&len, rest) = b.split_first().ok_or("an empty date")?;
    let rest = rest.get(..usize::from(len)).ok_or("a short date")?;
    let get = |i: usize| rest.get(i).copied().unwrap_or(0);
    let year = u16::from_le_bytes([get(0), get(1)]);
    let (m, d, h, mi, s) = (get(2), get(3), get(4), get(5), get(6));
    let micros = if rest.len() >= 11 {
        u32::from_le_bytes([rest[7], rest[8], rest[9], rest[10]])
    } else {
        0
    };
    let date = value::fmt_date(i64::from(year), u32::from(m), u32::from(d));
    Ok(Value::String(match ty {
        "DATE" => date,
        // The session's time zone is UTC (sqlx sets it), so a TIMESTAMP is
        // an instant; a DATETIME is a wall-clock time without a zone.
        "TIMESTAMP" => format!(
            "{date}T{}Z",
            value::fmt_time(u32::from(h), u32::from(mi), u32::from(s), micros)
        ),
        _ => format!(
            "{date}T{}",
            value::fmt_time(u32::from(h), u32::from(mi), u32::from(s), micros)
        ),
    }))
}

/// A TIME (a duration: may be negative or past 24 hours): `-838:59:59`.
fn time_of(b: &[u8]) -> Result<Value, String> {
    let (&len, rest) = b.split_first().ok_or("an empty time")?;
    let rest = rest.get(..usize::from(len)).ok_or("a short time")?;
    let get = |i: usize| rest.get(i).copied().unwrap_or(0);
    let neg = get(0) == 1;
    let days = u32::from_le_bytes([get(1), get(2), get(3), get(4)]);
    let hours = days * 24 + u32::from(get(5));
    let micros = if rest.len() >= 12 {
        u32::from_le_bytes([rest[8], rest[9], rest[10], rest[11]])
    } else {
        0
    };
    let t = value::fmt_time(0, u32::from(get(6)), u32::from(get(7)), micros);
    Ok(Value::String(format!(
        "{}{hours:02}{}",
        if neg { "-" } else { "" },
        &t[2..]
    )))
}

/// A column value by its column type (sqlx's names for them).
fn decode(ty: &str, b: &[u8]) -> Result<Value, String> {
    Ok(match ty {
        "BOOLEAN" => Value::Bool(b.iter().any(|x| *x != 0)),
        "TINYINT" | "SMALLINT" | "INT" | "MEDIUMINT" | "BIGINT" => le_int(b, true)?,
        "TINYINT UNSIGNED" | "SMALLINT UNSIGNED" | "INT UNSIGNED" | "MEDIUMINT UNSIGNED"
        | "BIGINT UNSIGNED" | "YEAR" => le_int(b, false)?,
        "FLOAT" => value::float(f64::from(f32::from_le_bytes(
            b.try_into().map_err(|_| "a FLOAT that is not 4 bytes")?,
        ))),
        "DOUBLE" => value::float(f64::from_le_bytes(
            b.try_into().map_err(|_| "a DOUBLE that is not 8 bytes")?,
        )),
        // Exact: as the server writes it.
        "DECIMAL" => Value::String(text(b)?),
        "DATE" | "DATETIME" | "TIMESTAMP" => datetime(ty, b)?,
        "TIME" => time_of(b)?,
        "BIT" => {
            if b.len() > 8 {
                return Err("a BIT wider than 64".into());
            }
            json!(b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x)))
        }
        "JSON" => serde_json::from_slice(b).map_err(|e| format!("bad JSON: {e}"))?,
        "BINARY" | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB" | "GEOMETRY" => {
            value::bytes(b)
        }
        "NULL" => Value::Null,
        // CHAR, VARCHAR, the TEXTs, ENUM, SET.
        _ => Value::String(text(b)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_values_read() {
        assert_eq!(le_int(&[0xff], true).unwrap(), json!(-1));
        assert_eq!(le_int(&[0xff], false).unwrap(), json!(255));
        assert_eq!(le_int(&[0xff; 8], false).unwrap(), json!(u64::MAX));
        assert_eq!(
            datetime(
                "DATETIME",
                &[11, 0xe8, 0x07, 2, 29, 13, 45, 7, 0x20, 0xa1, 0x07, 0]
            )
            .unwrap(),
            json!("2024-02-29T13:45:07.5")
        );
        assert_eq!(datetime("DATE", &[0]).unwrap(), json!("0000-00-00"));
        assert_eq!(
            time_of(&[8, 1, 1, 0, 0, 0, 2, 3, 4]).unwrap(),
            json!("-26:03:04")
        );
        for ty in [
            "INT", "DATE", "TIME", "FLOAT", "DOUBLE", "BIT", "JSON", "VARCHAR",
        ] {
            for b in [&[][..], &[0xff][..], &[200, 1][..], &[0xff; 12][..]] {
                let _ = decode(ty, b);
            }
        }
    }
}
