//! SQLite files: values bound by their JSON type, read back by their storage
//! class (and `BOOLEAN` columns as booleans). A connection can reach no file
//! but its own: `ATTACH` (and `VACUUM INTO`, which writes another file) is
//! refused by an authorizer, and a statement past its deadline is
//! interrupted by a progress handler.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};
use std::time::Instant;

use futures::TryStreamExt;
use libsqlite3_sys as ffi;
use serde_json::{Map, Value, json};
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::{
    Arguments, Column as _, Either, Executor, Row, SqlSafeStr, Statement, TypeInfo, ValueRef,
};

use crate::value;
use crate::{Column, Error, Mode, Outcome, Param, Request, Rows};

/// The authorizer: attaching another database file (by `ATTACH` or
/// `VACUUM INTO`) is denied; everything else is allowed.
unsafe extern "C" fn authorize(
    _user: *mut c_void,
    action: c_int,
    _a: *const c_char,
    _b: *const c_char,
    _c: *const c_char,
    _d: *const c_char,
) -> c_int {
    if action == ffi::SQLITE_ATTACH || action == ffi::SQLITE_DETACH {
        ffi::SQLITE_DENY
    } else {
        ffi::SQLITE_OK
    }
}

/// Run once per new connection: no attached databases, the authorizer,
/// and defensive mode (no writes to the schema table or shadow tables that
/// could corrupt the file).
pub(crate) async fn harden(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    let mut handle = conn.lock_handle().await?;
    let db = handle.as_raw_handle().as_ptr();
    // SAFETY: `db` is the live connection handle, held locked by `handle`
    // for the duration of these calls; the authorizer is a plain function
    // with no user data, valid for the program's life.
    unsafe {
        ffi::sqlite3_limit(db, ffi::SQLITE_LIMIT_ATTACHED, 0);
        ffi::sqlite3_set_authorizer(db, Some(authorize), std::ptr::null_mut());
        ffi::sqlite3_db_config(
            db,
            ffi::SQLITE_DBCONFIG_DEFENSIVE,
            1 as c_int,
            std::ptr::null_mut::<c_int>(),
        );
    }
    Ok(())
}

fn bind(args: &mut SqliteArguments, param: &Param) -> Result<(), String> {
    let added = match param {
        Param::Bytes(b) => args.add(b.clone()),
        Param::Json(v) => match v {
            Value::Null => args.add(Option::<String>::None),
            Value::Bool(b) => args.add(*b),
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => args.add(i),
                (None, Some(_)) if n.is_u64() => {
                    return Err(format!("{n} is larger than SQLite's integers hold"));
                }
                (None, Some(f)) => args.add(f),
                _ => args.add(n.to_string()),
            },
            Value::String(s) => args.add(s.clone()),
            other => args.add(other.to_string()),
        },
    };
    added.map_err(|e| e.to_string())
}

pub(crate) async fn run(
    conn: &mut SqliteConnection,
    sql: &str,
    params: &[(String, &Param)],
    req: &Request<'_>,
) -> Result<Outcome, Error> {
    let dialect = crate::Dialect::Sqlite;
    let err = |e| crate::error::from_sqlx(e, req.sql, dialect);
    let deadline = Instant::now() + req.timeout;
    conn.lock_handle()
        .await
        .map_err(err)?
        .set_progress_handler(1_000, move || Instant::now() < deadline);
    let stmt = conn
        .prepare(sqlx::AssertSqlSafe(sql.to_string()).into_sql_str())
        .await
        .map_err(err)?;
    let wanted = match stmt.parameters() {
        Some(Either::Right(n)) => n,
        Some(Either::Left(t)) => t.len(),
        None => 0,
    };
    crate::error::check_count(wanted, params.len(), "?", dialect)?;
    let mut args = SqliteArguments::default();
    for (label, p) in params {
        bind(&mut args, p).map_err(|e| Error::terminal(format!("{label}: {e}")))?;
    }
    let query = sqlx::query_with(sqlx::AssertSqlSafe(sql.to_string()), args);
    match req.mode {
        Mode::Execute => {
            let done = query.execute(&mut *conn).await.map_err(err)?;
            Ok(Outcome::Executed {
                rows_affected: done.rows_affected(),
                last_insert_id: Some(done.last_insert_rowid()).filter(|id| *id != 0),
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
            while let Some(row) = stream.try_next().await.map_err(err)? {
                let mut obj = Map::with_capacity(row.len());
                for (i, col) in row.columns().iter().enumerate() {
                    let name = col.name();
                    let bad = |e: sqlx::Error| Error::terminal(format!("column `{name}`: {e}"));
                    let raw = row.try_get_raw(i).map_err(bad)?;
                    let storage = raw.type_info().name().to_string();
                    let declared_bool = col.type_info().name() == "BOOLEAN";
                    let v = match storage.as_str() {
                        _ if raw.is_null() => Value::Null,
                        "INTEGER" => {
                            let n: i64 = row.try_get_unchecked(i).map_err(bad)?;
                            if declared_bool {
                                json!(n != 0)
                            } else {
                                json!(n)
                            }
                        }
                        "REAL" => value::float(row.try_get_unchecked::<f64, _>(i).map_err(bad)?),
                        "BLOB" => {
                            value::bytes(&row.try_get_unchecked::<Vec<u8>, _>(i).map_err(bad)?)
                        }
                        _ => Value::String(row.try_get_unchecked::<String, _>(i).map_err(bad)?),
                    };
                    obj.insert(name.to_string(), v);
                }
                rows.push(obj)?;
            }
            Ok(rows.finish(columns))
        }
    }
}
