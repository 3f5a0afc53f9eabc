//! `db.query`: SQL against a SQLite file inside `[files] allow`, or a
//! PostgreSQL / MySQL / MariaDB server from a `postgres` / `mysql`
//! credential. The SQL is never a template; values travel as bound
//! parameters. Connections come from pools shared across runs
//! ([`crate::Io::db_pools`]).
//!
//! Durability: a step is one statement, or one transaction (`statements`),
//! so a crash before the step's result is journaled leaves either nothing
//! committed or the whole step committed; a retry runs it again. A
//! transaction spanning steps could not keep that promise (a crash between
//! its steps would roll back work the journal says is done), so there is
//! none.

use std::time::Duration;

use serde_json::{Map, Value, json};
use sluice_db::{Mode, Outcome, Param, Params, Request, Server, Target, Tls};
use sluice_model::kinds::{DbMode, DbQueryConfig};

use crate::{Call, Error, Outputs, Result, binary, config, files, out, type_name};

const KIND: &str = "db.query";

/// Binary parameters (from blobs) larger than this are refused.
const MAX_PARAM_BYTES: u64 = 64 << 20;

pub async fn query(call: &Call<'_>) -> Result<Outputs> {
    let cfg = config::<DbQueryConfig>(call)?;
    let target = target(call, &cfg).await?;
    let params = params(call, cfg.params.as_ref())?;
    if !cfg.statements.is_empty() && matches!(params, Params::Positional(ref p) if !p.is_empty()) {
        return Err(Error::terminal(format!(
            "{KIND}: config.params: with `statements`, params is an object: each statement \
             takes the `:name` values it uses"
        )));
    }
    let max_rows = cfg.max_rows.unwrap_or(1_000) as usize;
    let max_bytes = cfg.max_bytes.unwrap_or(16 << 20) as usize;
    let timeout = Duration::from_millis(cfg.timeout_ms.unwrap_or(30_000));
    let mode = |m: DbMode| match m {
        DbMode::Query => Mode::Query,
        DbMode::Execute => Mode::Execute,
    };
    let base = Request {
        sql: "",
        params: &params,
        mode: Mode::Query,
        max_rows,
        max_bytes,
        timeout,
    };
    let pools = call.io.db_pools();
    let fail = |e: sluice_db::Error| {
        let message = format!("{KIND}: {e}");
        if e.is_retryable() {
            Error::retryable(message)
        } else {
            Error::terminal(message)
        }
    };
    match &cfg.sql {
        Some(sql) => {
            let outcome = pools
                .run(
                    &target,
                    &Request {
                        sql,
                        mode: mode(cfg.mode),
                        ..base.clone()
                    },
                )
                .await
                .map_err(fail)?;
            out(std::sync::Arc::new(output(outcome)))
        }
        None => {
            let reqs: Vec<Request<'_>> = cfg
                .statements
                .iter()
                .map(|s| Request {
                    sql: &s.sql,
                    mode: mode(s.mode),
                    ..base.clone()
                })
                .collect();
            let outcomes = pools.run_many(&target, &reqs, true).await.map_err(fail)?;
            out(std::sync::Arc::new(json!({
                "results": outcomes.into_iter().map(output).collect::<Vec<_>>()
            })))
        }
    }
}

fn output(o: Outcome) -> Value {
    match o {
        Outcome::Rows { rows, columns } => json!({
            "row_count": rows.len(),
            "rows": rows.into_iter().map(Value::Object).collect::<Vec<_>>(),
            "columns": columns
                .into_iter()
                .map(|c| json!({"name": c.name, "type": c.type_name}))
                .collect::<Vec<_>>(),
        }),
        Outcome::Executed {
            rows_affected,
            last_insert_id,
        } => {
            let mut v = json!({"rows_affected": rows_affected});
            if let Some(id) = last_insert_id {
                v["last_insert_id"] = json!(id);
            }
            v
        }
    }
}

/// The database: the SQLite file (checked against `[files] allow` each
/// time, so a folder removed from the list stops its use at once) or the
/// server in the credential.
async fn target(call: &Call<'_>, cfg: &DbQueryConfig) -> Result<Target> {
    if let Some(path) = &cfg.sqlite {
        let allow = call.io.settings.files.allow.clone();
        let given = path.clone();
        let create = cfg.create;
        let resolved = tokio::task::spawn_blocking(move || {
            if create {
                files::resolve_write(KIND, &allow, &given, false)
            } else {
                files::resolve_read(KIND, &allow, &given)
            }
        })
        .await
        .map_err(|e| Error::retryable(format!("{KIND}: {e}")))??;
        return Ok(Target::Sqlite {
            path: resolved,
            create,
        });
    }
    let name = cfg.credential.as_deref().unwrap_or_default();
    let cred = call.host.credential(name).await?;
    let v = &cred.value;
    let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let server = Server {
        host: field("host").unwrap_or_default(),
        port: v
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|p| u16::try_from(p).ok()),
        database: field("database").unwrap_or_default(),
        username: field("username").unwrap_or_default(),
        password: field("password"),
        tls: match field("tls").as_deref() {
            None | Some("prefer") => Tls::Prefer,
            Some("disable") => Tls::Disable,
            Some("require") => Tls::Require,
            Some("verify-ca") => Tls::VerifyCa,
            Some("verify-full") => Tls::VerifyFull,
            Some(other) => {
                return Err(Error::terminal(format!(
                    "{KIND}: credential `{name}`: tls `{other}` is not one of disable, prefer, \
                     require, verify-ca, verify-full"
                )));
            }
        },
        ca_pem: field("ca_cert"),
    };
    match cred.kind.as_str() {
        "postgres" => Ok(Target::Postgres(server)),
        "mysql" => Ok(Target::MySql(server)),
        other => Err(Error::terminal(format!(
            "{KIND}: credential `{name}` is a `{other}` credential; db.query needs a `postgres` \
             or `mysql` one (or `sqlite` for a file)"
        ))),
    }
}

/// `params` as evaluated: an object (`:name`), an array (positional) or
/// nothing. `{"$bytes"}` and `{"$blob"}` values become bytes.
fn params(call: &Call<'_>, given: Option<&Value>) -> Result<Params> {
    let one = |v: &Value, label: &str| -> Result<Param> {
        if binary::is_binary(v) {
            let data = binary::data_of(v, call.host, false, &format!("{KIND}: {label}"))?;
            return data
                .into_bytes(MAX_PARAM_BYTES, &format!("{KIND}: {label}"))
                .map(Param::Bytes);
        }
        Ok(Param::Json(v.clone()))
    };
    match given {
        None | Some(Value::Null) => Ok(Params::default()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| one(v, &format!("params[{i}]")))
            .collect::<Result<Vec<_>>>()
            .map(Params::Positional),
        Some(Value::Object(map)) => named(map, |v, label| one(v, label)),
        Some(other) => Err(Error::terminal(format!(
            "{KIND}: config.params must be an object (for `:name` placeholders) or an array \
             (for `$1` / `?`), got {}",
            type_name(other)
        ))),
    }
}

fn named(map: &Map<String, Value>, one: impl Fn(&Value, &str) -> Result<Param>) -> Result<Params> {
    map.iter()
        .map(|(k, v)| Ok((k.clone(), one(v, &format!("params.{k}"))?)))
        .collect::<Result<Vec<_>>>()
        .map(Params::Named)
}
