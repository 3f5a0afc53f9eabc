//! Users' databases, for the `db.query` node: a SQLite file, a PostgreSQL or
//! a MySQL/MariaDB server. One pool per database (and credential), shared by
//! every run and closed when unused; parameters bound as values (named
//! `:name` or the server's positional placeholders), never spliced into the
//! SQL; rows read into JSON with every type kept faithfully.
//!
//! The engine's own SQLite (runs, journal) is `sluice-store`'s; nothing here
//! touches it.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod error;
mod mysql;
mod pg;
pub mod sql;
mod sqlite;
mod value;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlSslMode};
use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPool, PgSslMode};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

pub use error::Error;

/// Which SQL the text is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    MySql,
    Sqlite,
}

impl Dialect {
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }
}

/// How to reach a database server (a `postgres` or `mysql` credential).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Server {
    /// A host name or address; a path (starting with `/`) is a Unix socket
    /// (PostgreSQL: its directory; MySQL: the socket file).
    pub host: String,
    pub port: Option<u16>,
    pub database: String,
    pub username: String,
    pub password: Option<String>,
    pub tls: Tls,
    /// PEM certificates to trust for the server (with `verify_ca` or
    /// `verify_full`) besides the system's.
    pub ca_pem: Option<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Server {
    /// `host:port/database` (never the password).
    pub fn describe(&self) -> String {
        match self.port {
            Some(p) if !self.host.starts_with('/') => {
                format!("{}:{p}/{}", self.host, self.database)
            }
            _ => format!("{}/{}", self.host, self.database),
        }
    }
}

/// TLS to a server, as PostgreSQL's `sslmode` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Tls {
    /// Plain TCP.
    Disable,
    /// TLS when the server offers it.
    #[default]
    Prefer,
    /// TLS, without checking the certificate.
    Require,
    /// TLS with a certificate signed by a trusted authority.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host.
    VerifyFull,
}

/// The database a query runs against.
#[derive(Debug, Clone)]
pub enum Target {
    /// A SQLite file (already checked to be inside the allowed folders).
    Sqlite {
        path: PathBuf,
        create: bool,
    },
    Postgres(Server),
    MySql(Server),
}

impl Target {
    pub fn dialect(&self) -> Dialect {
        match self {
            Target::Sqlite { .. } => Dialect::Sqlite,
            Target::Postgres(_) => Dialect::Postgres,
            Target::MySql(_) => Dialect::MySql,
        }
    }

    /// What an error says the database is (never a password).
    pub fn describe(&self) -> String {
        match self {
            Target::Sqlite { path, .. } => format!("sqlite {}", path.display()),
            Target::Postgres(s) => format!("postgres {}", s.describe()),
            Target::MySql(s) => format!("mysql {}", s.describe()),
        }
    }
}

/// One parameter's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Json(Value),
    /// Bytes (from `{"$bytes": …}` or a blob), for `bytea` / `BLOB` columns.
    Bytes(Vec<u8>),
}

/// The parameters of a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Params {
    /// For the server's own placeholders: `$1, $2` (PostgreSQL) or `?`.
    Positional(Vec<Param>),
    /// For `:name` placeholders in the SQL.
    Named(Vec<(String, Param)>),
}

impl Default for Params {
    fn default() -> Self {
        Params::Positional(Vec::new())
    }
}

/// What a statement gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The rows it returns (`SELECT`, `… RETURNING`).
    Query,
    /// How many rows it changed.
    Execute,
}

/// One statement to run.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub sql: &'a str,
    pub params: &'a Params,
    pub mode: Mode,
    /// More rows than this is an error (the query should say `LIMIT`).
    pub max_rows: usize,
    /// Rows adding up to more JSON than this is an error.
    pub max_bytes: usize,
    /// How long the statement may run (the server is told too, so it stops).
    pub timeout: Duration,
}

/// A result column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    /// The server's name for its type (`INT4`, `VARCHAR`, `TEXT`).
    pub type_name: String,
}

/// What a statement gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Rows {
        rows: Vec<Map<String, Value>>,
        columns: Vec<Column>,
    },
    Executed {
        rows_affected: u64,
        /// The id of the row a MySQL or SQLite `INSERT` made.
        last_insert_id: Option<i64>,
    },
}

/// Rows as they arrive, within the request's caps.
pub(crate) struct Rows {
    rows: Vec<Map<String, Value>>,
    bytes: usize,
    max_rows: usize,
    max_bytes: usize,
}

impl Rows {
    pub(crate) fn new(req: &Request<'_>) -> Rows {
        Rows {
            rows: Vec::new(),
            bytes: 0,
            max_rows: req.max_rows,
            max_bytes: req.max_bytes,
        }
    }

    pub(crate) fn push(&mut self, row: Map<String, Value>) -> Result<(), Error> {
        if self.rows.len() >= self.max_rows {
            return Err(Error::cap(format!(
                "the query returned more than {} rows (`max_rows`): add a LIMIT, or raise max_rows",
                self.max_rows
            )));
        }
        self.bytes += row
            .iter()
            .map(|(k, v)| k.len() + 4 + json_size(v))
            .sum::<usize>()
            + 2;
        if self.bytes > self.max_bytes {
            return Err(Error::cap(format!(
                "the rows came to more than {} bytes (`max_bytes`) after {} rows: select fewer \
                 columns or rows, or raise max_bytes",
                self.max_bytes,
                self.rows.len()
            )));
        }
        self.rows.push(row);
        Ok(())
    }

    pub(crate) fn finish(self, columns: Vec<Column>) -> Outcome {
        Outcome::Rows {
            rows: self.rows,
            columns,
        }
    }
}

/// About how many bytes `v` takes as JSON text.
fn json_size(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 12,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|x| json_size(x) + 1).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, x)| k.len() + 4 + json_size(x))
                .sum::<usize>()
        }
    }
}

/// How pools behave.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Connections per database at most.
    pub max_connections: u32,
    /// A connection unused this long is closed; a pool unused this long is
    /// dropped.
    pub idle_close: Duration,
    /// How long to wait to connect (or for a free connection).
    pub connect_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 4,
            idle_close: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Clone)]
enum Pool {
    Pg(PgPool),
    My(MySqlPool),
    Lite(SqlitePool),
}

impl Pool {
    fn size(&self) -> u32 {
        match self {
            Pool::Pg(p) => p.size(),
            Pool::My(p) => p.size(),
            Pool::Lite(p) => p.size(),
        }
    }

    async fn close(self) {
        match self {
            Pool::Pg(p) => p.close().await,
            Pool::My(p) => p.close().await,
            Pool::Lite(p) => p.close().await,
        }
    }
}

struct Entry {
    pool: Pool,
    last_used: Instant,
}

/// Every database's pool, shared by all runs of an engine.
pub struct Pools {
    settings: PoolSettings,
    map: Mutex<HashMap<[u8; 32], Entry>>,
}

impl std::fmt::Debug for Pools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pools")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A statement still running this long after its timeout has its connection
/// closed under it (the server was told the timeout too; this is for a
/// server that does not stop).
const GRACE: Duration = Duration::from_secs(2);

impl Pools {
    pub fn new(settings: PoolSettings) -> Pools {
        Pools {
            settings,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Open connections across every pool (for tests and metrics).
    pub fn connections(&self) -> u32 {
        self.lock().values().map(|e| e.pool.size()).sum()
    }

    /// Pools kept (one per database, credential and timeout).
    pub fn pools(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs one statement against `target`.
    pub async fn run(&self, target: &Target, req: &Request<'_>) -> Result<Outcome, Error> {
        let mut all = self
            .run_many(target, std::slice::from_ref(req), false)
            .await?;
        all.pop().ok_or_else(|| Error::terminal("no statement ran"))
    }

    /// Runs statements one after another on one connection; with
    /// `transaction`, inside one transaction (all take effect or none), and
    /// within the first request's timeout altogether.
    pub async fn run_many(
        &self,
        target: &Target,
        reqs: &[Request<'_>],
        transaction: bool,
    ) -> Result<Vec<Outcome>, Error> {
        let Some(first) = reqs.first() else {
            return Ok(Vec::new());
        };
        let dialect = target.dialect();
        let many = reqs.len() > 1;
        let mut bound = Vec::with_capacity(reqs.len());
        for (i, req) in reqs.iter().enumerate() {
            bound.push(bind_names(req, dialect).map_err(|e| e.within(many.then_some(i)))?);
        }
        let pool = self.pool(target, first.timeout)?;
        let deadline = tokio::time::Instant::now() + first.timeout + GRACE;
        let on = |e: Error| e.on(target);
        let late = || Error::timeout(first.timeout).on(target);
        macro_rules! drive {
            ($pool:expr, $module:ident) => {{
                let mut conn = tokio::time::timeout_at(deadline, $pool.acquire())
                    .await
                    .map_err(|_| late())?
                    .map_err(|e| on(error::connecting(e)))?;
                let work = async {
                    let mut out = Vec::with_capacity(reqs.len());
                    if transaction {
                        let mut tx = sqlx::Connection::begin(&mut *conn)
                            .await
                            .map_err(|e| error::from_sqlx(e, "BEGIN", dialect))?;
                        for (i, (req, (sql, params))) in reqs.iter().zip(&bound).enumerate() {
                            out.push(
                                $module::run(&mut tx, sql, params, req)
                                    .await
                                    .map_err(|e| e.within(many.then_some(i)))?,
                            );
                        }
                        tx.commit()
                            .await
                            .map_err(|e| error::from_sqlx(e, "COMMIT", dialect))?;
                    } else {
                        for (i, (req, (sql, params))) in reqs.iter().zip(&bound).enumerate() {
                            out.push(
                                $module::run(&mut conn, sql, params, req)
                                    .await
                                    .map_err(|e| e.within(many.then_some(i)))?,
                            );
                        }
                    }
                    Ok::<_, Error>(out)
                };
                let result = tokio::time::timeout_at(deadline, work).await;
                match result {
                    Ok(Ok(outcomes)) => Ok(outcomes),
                    Ok(Err(e)) => {
                        if e.closes_connection() {
                            conn.close_on_drop();
                        }
                        Err(on(e))
                    }
                    Err(_) => {
                        conn.close_on_drop();
                        Err(late())
                    }
                }
            }};
        }
        match pool {
            Pool::Pg(p) => drive!(p, pg),
            Pool::My(p) => drive!(p, mysql),
            Pool::Lite(p) => drive!(p, sqlite),
        }
    }

    /// The pool for `target`, made on first use; pools unused for
    /// `idle_close` are closed on the way.
    fn pool(&self, target: &Target, timeout: Duration) -> Result<Pool, Error> {
        let key = pool_key(target, timeout);
        let now = Instant::now();
        let mut map = self.lock();
        let idle = self.settings.idle_close;
        let stale: Vec<[u8; 32]> = map
            .iter()
            .filter(|(k, e)| **k != key && now.duration_since(e.last_used) > idle)
            .map(|(k, _)| *k)
            .collect();
        for k in stale {
            if let Some(e) = map.remove(&k)
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                rt.spawn(e.pool.close());
            }
        }
        if let Some(e) = map.get_mut(&key) {
            e.last_used = now;
            return Ok(e.pool.clone());
        }
        let pool = self.make(target, timeout)?;
        map.insert(
            key,
            Entry {
                pool: pool.clone(),
                last_used: now,
            },
        );
        Ok(pool)
    }

    fn options<DB: sqlx::Database>(&self) -> PoolOptions<DB> {
        PoolOptions::new()
            .max_connections(self.settings.max_connections.max(1))
            .min_connections(0)
            .idle_timeout(Some(self.settings.idle_close))
            .acquire_timeout(self.settings.connect_timeout)
            .test_before_acquire(true)
    }

    fn make(&self, target: &Target, timeout: Duration) -> Result<Pool, Error> {
        Ok(match target {
            Target::Postgres(s) => {
                let mut o = PgConnectOptions::new_without_pgpass();
                o = if s.host.starts_with('/') {
                    o.socket(&s.host)
                } else {
                    o.host(&s.host)
                };
                o = o
                    .port(s.port.unwrap_or(5432))
                    .username(&s.username)
                    .database(&s.database)
                    .application_name("sluice")
                    // The server stops a statement that runs too long.
                    .options([("statement_timeout", timeout.as_millis().to_string())])
                    .ssl_mode(match s.tls {
                        Tls::Disable => PgSslMode::Disable,
                        Tls::Prefer => PgSslMode::Prefer,
                        Tls::Require => PgSslMode::Require,
                        Tls::VerifyCa => PgSslMode::VerifyCa,
                        Tls::VerifyFull => PgSslMode::VerifyFull,
                    });
                if let Some(p) = &s.password {
                    o = o.password(p);
                }
                if let Some(pem) = &s.ca_pem {
                    o = o.ssl_root_cert_from_pem(pem.as_bytes().to_vec());
                }
                Pool::Pg(self.options().connect_lazy_with(o))
            }
            Target::MySql(s) => {
                let mut o = MySqlConnectOptions::new();
                o = if s.host.starts_with('/') {
                    o.socket(&s.host)
                } else {
                    o.host(&s.host)
                };
                o = o
                    .port(s.port.unwrap_or(3306))
                    .username(&s.username)
                    .database(&s.database)
                    .ssl_mode(match s.tls {
                        Tls::Disable => MySqlSslMode::Disabled,
                        Tls::Prefer => MySqlSslMode::Preferred,
                        Tls::Require => MySqlSslMode::Required,
                        Tls::VerifyCa => MySqlSslMode::VerifyCa,
                        Tls::VerifyFull => MySqlSslMode::VerifyIdentity,
                    });
                if let Some(p) = &s.password {
                    o = o.password(p);
                }
                if let Some(pem) = &s.ca_pem {
                    o = o.ssl_ca_from_pem(pem.as_bytes().to_vec());
                }
                let ms = timeout.as_millis();
                Pool::My(
                    self.options()
                        .after_connect(move |conn, _| Box::pin(mysql::limit_time(conn, ms)))
                        .connect_lazy_with(o),
                )
            }
            Target::Sqlite { path, create } => {
                let o = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(*create)
                    .busy_timeout(Duration::from_secs(5));
                Pool::Lite(
                    self.options()
                        .after_connect(|conn, _| Box::pin(sqlite::harden(conn)))
                        .connect_lazy_with(o),
                )
            }
        })
    }
}

/// Which pool serves a target: the database, who connects (the password
/// too, so a changed credential gets new connections) and, for servers, the
/// statement timeout their sessions were given.
fn pool_key(target: &Target, timeout: Duration) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    let mut field = |s: &[u8]| {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s);
    };
    match target {
        Target::Sqlite { path, create } => {
            field(b"sqlite");
            field(path.as_os_str().as_encoded_bytes());
            field(&[u8::from(*create)]);
        }
        Target::Postgres(s) | Target::MySql(s) => {
            field(target.dialect().name().as_bytes());
            field(s.host.as_bytes());
            field(&s.port.unwrap_or(0).to_le_bytes());
            field(s.database.as_bytes());
            field(s.username.as_bytes());
            field(s.password.as_deref().unwrap_or("\0none").as_bytes());
            field(&[s.tls as u8]);
            field(s.ca_pem.as_deref().unwrap_or("").as_bytes());
            field(&(timeout.as_millis() as u64).to_le_bytes());
        }
    }
    *h.finalize().as_bytes()
}

/// Parameters in the order the server takes them, each with its label for
/// errors (`params.id`, `params[0]`).
type Labelled<'p> = Vec<(String, &'p Param)>;

/// The SQL as the server takes it, and its parameters.
fn bind_names<'p>(req: &Request<'p>, dialect: Dialect) -> Result<(String, Labelled<'p>), Error> {
    match req.params {
        Params::Positional(list) => Ok((
            req.sql.to_string(),
            list.iter()
                .enumerate()
                .map(|(i, p)| (format!("params[{i}]"), p))
                .collect(),
        )),
        Params::Named(named) => {
            let rewritten = sql::named_to_positional(req.sql, dialect);
            let mut out = Vec::with_capacity(rewritten.order.len());
            for name in &rewritten.order {
                let Some((_, p)) = named.iter().find(|(n, _)| n == name) else {
                    let known: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(Error::terminal(format!(
                        "the SQL uses `:{name}`, which params does not give (params has: {})",
                        if known.is_empty() {
                            "nothing".to_string()
                        } else {
                            known.join(", ")
                        }
                    )));
                };
                out.push((format!("params.{name}"), p));
            }
            Ok((rewritten.sql, out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_password_or_timeout_is_another_pool() {
        let s = Server {
            host: "db".into(),
            port: None,
            database: "app".into(),
            username: "u".into(),
            password: Some("a".into()),
            tls: Tls::Prefer,
            ca_pem: None,
        };
        let t = Duration::from_secs(30);
        let a = pool_key(&Target::Postgres(s.clone()), t);
        assert_eq!(a, pool_key(&Target::Postgres(s.clone()), t));
        assert_ne!(a, pool_key(&Target::MySql(s.clone()), t));
        assert_ne!(
            a,
            pool_key(&Target::Postgres(s.clone()), Duration::from_secs(5))
        );
        let mut other = s.clone();
        other.password = Some("b".into());
        assert_ne!(a, pool_key(&Target::Postgres(other), t));
        assert_eq!(format!("{s:?}"), "db/app");
    }

    #[test]
    fn a_name_missing_from_params_is_named() {
        let params = Params::Named(vec![("a".into(), Param::Json(Value::from(1)))]);
        let req = Request {
            sql: "select :a, :b",
            params: &params,
            mode: Mode::Query,
            max_rows: 1,
            max_bytes: 1,
            timeout: Duration::from_secs(1),
        };
        let err = bind_names(&req, Dialect::Postgres).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the SQL uses `:b`, which params does not give (params has: a)"
        );
    }
}
