//! Errors that say what failed and where (the database, the parameter, the
//! line of the SQL) and whether trying again can help. They never hold a
//! password: messages are built from the server's words and our own.

use std::time::Duration;

use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;
use sqlx::postgres::{PgDatabaseError, PgErrorPosition};

use crate::{Dialect, Target, sql};

/// A statement that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    message: String,
    retryable: bool,
    /// The connection may be mid-statement: it is closed, not reused.
    close: bool,
}

impl Error {
    pub(crate) fn terminal(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            retryable: false,
            close: false,
        }
    }

    pub(crate) fn retryable(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            retryable: true,
            close: false,
        }
    }

    /// A cap reached while rows were still coming.
    pub(crate) fn cap(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
            retryable: false,
            close: true,
        }
    }

    pub(crate) fn timeout(after: Duration) -> Error {
        Error {
            message: format!(
                "the statement ran longer than {} ms (`timeout_ms`) and was stopped",
                after.as_millis()
            ),
            retryable: true,
            close: true,
        }
    }

    /// Whether running the statement again may succeed (a lost connection,
    /// a deadlock, a timeout), as opposed to an error in the SQL or data.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    pub(crate) fn closes_connection(&self) -> bool {
        self.close
    }

    /// Prefixed with which statement of several it was (`statements[2]`).
    pub(crate) fn within(mut self, statement: Option<usize>) -> Error {
        if let Some(i) = statement {
            self.message = format!("statements[{i}]: {}", self.message);
        }
        self
    }

    /// Prefixed with the database it happened on.
    pub(crate) fn on(mut self, target: &Target) -> Error {
        self.message = format!("{}: {}", target.describe(), self.message);
        self
    }
}

/// The statement's parameter count against what `params` gives.
pub(crate) fn check_count(
    wanted: usize,
    given: usize,
    _first: &str,
    dialect: Dialect,
) -> Result<(), Error> {
    if wanted == given {
        return Ok(());
    }
    let placeholders = match (dialect, wanted) {
        (_, 0) => "no parameters".to_string(),
        (Dialect::Postgres, 1) => "1 parameter ($1)".to_string(),
        (Dialect::Postgres, n) => format!("{n} parameters ($1 … ${n})"),
        (_, 1) => "1 parameter (?)".to_string(),
        (_, n) => format!("{n} parameters (`?`)"),
    };
    Err(Error::terminal(format!(
        "the SQL takes {placeholders}, but params gives {given}"
    )))
}

/// An error while getting a connection.
pub(crate) fn connecting(e: sqlx::Error) -> Error {
    match e {
        sqlx::Error::PoolTimedOut => Error::retryable(
            "no connection within the connect timeout: the server does not answer, or every \
             connection is busy",
        ),
        sqlx::Error::Database(db) => {
            let code = code_of(db.as_ref());
            let msg = format!("cannot connect: {}", db.message());
            // Refused logins and unknown databases stay refused.
            if code.starts_with("28") || code == "3D000" || code == "1045" || code == "1049" {
                Error::terminal(msg)
            } else {
                Error::retryable(msg)
            }
        }
        sqlx::Error::Io(io) => Error::retryable(format!("cannot connect: {io}")),
        sqlx::Error::Tls(t) => Error::terminal(format!("cannot connect (TLS): {t}")),
        sqlx::Error::Configuration(c) => Error::terminal(format!("cannot connect: {c}")),
        other => Error::retryable(format!("cannot connect: {other}")),
    }
}

/// An error while running a statement.
pub(crate) fn from_sqlx(e: sqlx::Error, sql_text: &str, dialect: Dialect) -> Error {
    match e {
        sqlx::Error::Database(db) => from_database(db.as_ref(), sql_text, dialect),
        sqlx::Error::Io(io) => Error {
            message: format!("the connection was lost: {io}"),
            retryable: true,
            close: true,
        },
        sqlx::Error::Protocol(p) => Error {
            message: format!("the server's answer could not be read: {p}"),
            retryable: true,
            close: true,
        },
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => {
            Error::retryable(e.to_string())
        }
        other => Error::terminal(other.to_string()),
    }
}

/// The server's error code: MySQL's error number (`1213`), else the
/// SQLSTATE (`40001`) or SQLite's result code.
fn code_of(db: &dyn DatabaseError) -> String {
    match db.try_downcast_ref::<MySqlDatabaseError>() {
        Some(my) => my.number().to_string(),
        None => db.code().map(|c| c.to_string()).unwrap_or_default(),
    }
}

fn from_database(db: &dyn DatabaseError, sql_text: &str, dialect: Dialect) -> Error {
    let code = code_of(db);
    let timed_out = match dialect {
        Dialect::Postgres => code == "57014",
        // MariaDB's max_statement_time; MySQL's max_execution_time.
        Dialect::MySql => code == "1969" || code == "3024",
        Dialect::Sqlite => code == "9",
    };
    if timed_out {
        return Error {
            message: format!(
                "the statement ran longer than `timeout_ms` and was stopped ({})",
                db.message()
            ),
            retryable: true,
            close: false,
        };
    }
    let retryable = match dialect {
        // Serialization failures, deadlocks, locks not available, the server
        // going down, too many connections, connection exceptions.
        Dialect::Postgres => {
            matches!(
                code.as_str(),
                "40001" | "40P01" | "55P03" | "57P01" | "57P02" | "57P03" | "53300"
            ) || code.starts_with("08")
        }
        // Deadlock, lock wait timeout, too many connections.
        Dialect::MySql => matches!(code.as_str(), "1213" | "1205" | "1040"),
        // Busy, locked.
        Dialect::Sqlite => matches!(code.as_str(), "5" | "6" | "261" | "262" | "517"),
    };
    let mut message = match code.as_str() {
        "" => format!("{} error: {}", dialect.name(), db.message()),
        c => format!("{} error {c}: {}", dialect.name(), db.message()),
    };
    if let Some(pg) = db.try_downcast_ref::<PgDatabaseError>() {
        if let Some(PgErrorPosition::Original(at)) = pg.position() {
            let (line, col) = sql::line_and_column(sql_text, at);
            message += &format!(" (at line {line}, column {col} of the SQL)");
        }
        if let Some(d) = pg.detail() {
            message += &format!(". {d}");
        }
        if let Some(h) = pg.hint() {
            message += &format!(" Hint: {h}");
        }
    }
    Error {
        message,
        retryable,
        close: false,
    }
}
