//! The store's error type.

use std::path::PathBuf;
use std::sync::Arc;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),

    #[error("database migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("serializing a value: {0}")]
    Serialize(#[source] serde_json::Error),

    #[error("invalid stored JSON: {0}")]
    InvalidJson(#[source] serde_json::Error),

    #[error("invalid blob hash {0:?}: expected 64 lowercase hex characters")]
    InvalidHash(String),

    #[error("blob {0} is missing")]
    BlobMissing(String),

    #[error("blob {hash} is corrupt: {detail}")]
    BlobCorrupt { hash: String, detail: String },

    #[error("corrupt {table} row {key}: {detail}")]
    Corrupt {
        table: &'static str,
        key: String,
        detail: String,
    },

    #[error("vault: {0}")]
    Vault(String),

    #[error("invalid inline value: must be non-empty JSON text not starting with '@' or '^'")]
    InvalidInline,

    /// A reference to a value journaled before in a run, asked for outside
    /// the run's journal (only `Store::run_records` reads them back).
    #[error("a reference to an earlier value of the run is only read back with the run's journal")]
    UnresolvedRef,

    /// A journal reference that does not name a value journaled before it.
    #[error("bad reference `{0}`: no such value earlier in the run")]
    BadRef(String),

    #[error("record seq {0} is out of range (max {max})", max = i64::MAX)]
    SeqOutOfRange(u64),

    #[error("invalid final run status `{0}`: expected succeeded, failed or cancelled")]
    InvalidStatus(sluice_api::RunStatus),

    #[error("run {0} not found")]
    RunNotFound(String),

    /// The batch holding this command could not be committed; every waiter of
    /// the batch gets the same underlying error.
    #[error("journal write failed: {0}")]
    Journal(#[source] Arc<crate::journal::SqliteError>),

    /// Queued writes (appends or log lines) that were accepted earlier could
    /// not be committed. Returned by the next `flush` (any run) or the next
    /// `finish_run` of the affected run.
    #[error("{count} queued journal write(s) could not be committed; first failure: {first}")]
    WritesLost {
        count: u64,
        #[source]
        first: Arc<Error>,
    },

    #[error("the journal writer has stopped")]
    WriterClosed,

    #[error("background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),

    /// `sluice.db` is not a SQLite database at all (damaged, or another
    /// kind of file): never opened for writing.
    #[error(
        "{}: not a database Sluice can read ({detail}): it is damaged or not Sluice's; it was left as it is. Move it away to start with an empty history, or restore a backup (`sluice restore FILE --data-dir DIR`)",
        path.display()
    )]
    NotADatabase { path: PathBuf, detail: String },

    /// `sluice.db` is another program's SQLite database.
    #[error(
        "{}: a SQLite database that is not Sluice's (its tables: {tables}); it was left as it is. Point --data-dir elsewhere, or move the file away",
        path.display()
    )]
    Foreign { path: PathBuf, tables: String },

    /// `sluice.db` was written by a newer Sluice.
    #[error(
        "{}: written by a newer Sluice (database schema {schema}; this Sluice {version} knows up to {known}); it was left as it is. Upgrade Sluice to open it",
        path.display()
    )]
    Newer {
        path: PathBuf,
        schema: i64,
        known: i64,
        version: &'static str,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    /// Whether this is the storage failing under a write (disk or quota
    /// full, a read-only file system, an I/O error): `Some(full)`.
    pub fn storage_failure(&self) -> Option<bool> {
        match self {
            Error::Io { source, .. } => crate::journal::storage_io(source),
            _ => None,
        }
    }
}
