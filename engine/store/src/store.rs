//! [`Store`]: opening the data dir, and the workflow and run tables.
//!
//! Reads and workflow writes go through a small pool; everything that belongs
//! to a run's history (run rows, journal, logs, finishes) goes through the
//! journal writer so it is ordered with the journal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sluice_api::{RunError, RunStatus};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteAutoVacuum, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection, SqliteConnection, SqlitePool};

use crate::blobs::{Blobs, Stored};
use crate::journal::packed::{self, Columns as RecordColumns};
use crate::journal::{
    Journal, LogLine, Record, RecordKind, RunInsert, db_text, parse_ref, refers_to_input,
    resolve_text, spawn_writer,
};
use crate::{Error, Result, ValueRef, Wait};

mod deployments;
mod peers;
mod retention;
pub use deployments::DeploymentRow;
pub use peers::{GrantRow, LinkRow, NewShare, Redeem, Refusal, ShareRow};
pub use retention::{BLOB_GRACE, Collected, Cutoffs, Deleted, Prunable, StorageFacts};

/// The schema's migrations, in the binary: `migrations/NNNN_what.sql`, read
/// as `sqlx::migrate!` reads them (version, description, checksum of the
/// text), so databases migrated before keep validating. Every file in the
/// folder must be listed: `migrations_embedded_are_the_folder` checks.
macro_rules! migrations {
    ($($file:literal),* $(,)?) => {
        [$(($file, include_str!(concat!("../migrations/", $file)))),*]
    };
}
const MIGRATIONS: [(&str, &str); 16] = migrations![
    "0001_init.sql",
    "0002_step_input.sql",
    "0003_definitions.sql",
    "0004_credentials.sql",
    "0005_documents.sql",
    "0006_versions.sql",
    "0007_publish.sql",
    "0008_peers.sql",
    "0009_executor.sql",
    "0010_deployments.sql",
    "0011_retention.sql",
    "0012_waits.sql",
    "0013_status_check.sql",
    "0014_sealed_steps.sql",
    "0015_steps_raw.sql",
    "0016_definition_pins.sql",
];

static MIGRATOR: std::sync::LazyLock<Migrator> = std::sync::LazyLock::new(|| {
    Migrator::with_migrations(
        MIGRATIONS
            .iter()
            .map(|&(file, sql)| migration(file, sql))
            .collect(),
    )
});

/// One migration as sqlx reads it from `file` (`NNNN_what_it_does.sql`).
fn migration(file: &str, sql: &'static str) -> sqlx::migrate::Migration {
    let (version, rest) = file.split_once('_').unwrap_or((file, ""));
    sqlx::migrate::Migration::new(
        // The list above is checked against the folder by a test, which
        // parses every version.
        version.parse().unwrap_or(0),
        rest.trim_end_matches(".sql").replace('_', " ").into(),
        sqlx::migrate::MigrationType::Simple,
        sqlx::SqlSafeStr::into_sql_str(sqlx::AssertSqlSafe(sql)),
        sql.starts_with("-- no-transaction"),
    )
}

/// Refuses, before anything writes to it, a `sluice.db` that is not a
/// SQLite database, is another program's, or was written by a newer Sluice
/// (opened read-only, without the pragmas that would change its header).
async fn check_database(path: &Path) -> Result<()> {
    let exists = match tokio::fs::metadata(path).await {
        Ok(m) => m.len() > 0,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(source) => {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !exists {
        return Ok(());
    }
    let not_db = |e: sqlx::Error| match &e {
        sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("26" | "11")) => {
            Error::NotADatabase {
                path: path.to_path_buf(),
                detail: d.message().to_string(),
            }
        }
        _ => Error::Db(e),
    };
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_secs(5));
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .map_err(not_db)?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(&mut conn)
    .await
    .map_err(not_db)?;
    let checked = if tables.is_empty() {
        Ok(())
    } else if !tables.iter().any(|t| t == "_sqlx_migrations") || !tables.iter().any(|t| t == "runs")
    {
        Err(Error::Foreign {
            path: path.to_path_buf(),
            tables: tables.join(", "),
        })
    } else {
        let newest: Option<i64> =
            sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success = 1")
                .fetch_one(&mut conn)
                .await
                .map_err(not_db)?;
        let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        match newest {
            Some(schema) if schema > known => Err(Error::Newer {
                path: path.to_path_buf(),
                schema,
                known,
                version: env!("CARGO_PKG_VERSION"),
            }),
            _ => Ok(()),
        }
    };
    if let Err(e) = conn.close().await {
        tracing::debug!(error = %e, "closing the check connection");
    }
    checked
}

/// Page size of a new database (ignored for an existing one). 16 KiB pages
/// helped bulk throughput of 1 KiB records in isolation, but every group
/// commit writes whole pages to the WAL: with many small commits (webhooks),
/// 4 KiB pages measured ~35% more requests/s and a lower p99, and the engine
/// bench no worse (docs/benchmarks.md).
const PAGE_SIZE: u32 = 4 * 1024;

/// Reader connections (workflow writes share them).
const READERS: u32 = 4;

/// Which runs [`Store::find_runs`] returns.
#[derive(Clone, Debug, Default)]
pub struct RunFilter {
    pub workflow: Option<String>,
    pub status: Option<RunStatus>,
    /// Only runs older than this run (pagination cursor).
    pub before: Option<String>,
    /// Only runs started at or after this time (microseconds since the epoch).
    pub since_us: Option<i64>,
    /// Only runs started at this trigger node.
    pub trigger: Option<String>,
    /// Only runs of drafts (the editor's Run), or only of published versions.
    pub draft: Option<bool>,
    /// Only runs whose input or output holds this text (any case; values
    /// kept in the blob store, 1 MiB and more, are not searched).
    pub text: Option<String>,
    pub limit: u32,
}

/// A workflow definition as runs pin it: the JSON text and its BLAKE3 hash,
/// computed once. A plan holds one and every run of that plan shares it, so
/// starting a run neither copies nor hashes the text; the journal writer
/// stores each distinct text once (the `definitions` table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Definition {
    text: Arc<str>,
    hash: Arc<str>,
}

impl Definition {
    pub fn new(text: impl Into<Arc<str>>) -> Definition {
        let text = text.into();
        let hash = blake3::hash(text.as_bytes()).to_hex().as_str().into();
        Definition { text, hash }
    }

    /// A definition whose hash the caller computed already (a plan's, see
    /// `sluice_core::Definition`): shared, not hashed again.
    pub fn from_hashed(text: Arc<str>, hash: Arc<str>) -> Definition {
        Definition { text, hash }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The lowercase hex BLAKE3 hash of the text.
    pub fn hash(&self) -> &str {
        &self.hash
    }
}

impl std::ops::Deref for Definition {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl From<String> for Definition {
    fn from(text: String) -> Definition {
        Definition::new(text)
    }
}

impl From<&str> for Definition {
    fn from(text: &str) -> Definition {
        Definition::new(text)
    }
}

/// A run to create.
#[derive(Clone, Debug)]
pub struct NewRun {
    pub id: String,
    pub workflow_id: String,
    /// The workflow JSON pinned for this run.
    pub definition: Definition,
    pub trigger: String,
    pub input: Arc<Value>,
    pub created_at_us: i64,
    pub parent_run: Option<String>,
    /// The workflow document version the definition was written from.
    pub doc_version: Option<String>,
    /// It runs the draft (the editor's Run), not the published version.
    pub draft: bool,
    /// Where it executes (a `worker` run is mirrored from the shared worker).
    pub executor: sluice_api::RunOn,
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub workflow_id: String,
    pub definition: String,
    pub trigger: String,
    pub input: Arc<Value>,
    pub status: RunStatus,
    pub output: Option<Value>,
    pub error: Option<RunError>,
    pub created_at_us: i64,
    pub finished_at_us: Option<i64>,
    pub parent_run: Option<String>,
    /// The workflow document version this run ran (see [`NewRun::doc_version`]).
    pub doc_version: Option<String>,
    /// It ran the draft, not the published version.
    pub draft: bool,
    pub executor: sluice_api::RunOn,
}

crate::from_row! {
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct WorkflowRow {
        pub id: String,
        pub name: String,
        pub updated_at_us: i64,
        /// The document version the draft was written from.
        pub doc_version: Option<String>,
        /// What runs: the version published (None: never published, or
        /// unpublished), and when.
        pub published_version: Option<String>,
        pub published_at_us: Option<i64>,
        /// Whether a definition is published (a workflow stored from a file
        /// outside documents publishes without a version).
        pub published: bool,
        /// Its newest run: id, stored status, created, finished.
        pub last_run_id: Option<String>,
        pub last_run_status: Option<String>,
        pub last_run_at_us: Option<i64>,
        pub last_run_finished_at_us: Option<i64>,
    }
}

impl WorkflowRow {
    /// The workflow's list entry (`GET /api/v1/workflows`, `sluice
    /// workflows list --json`), with who is `editing` it.
    pub fn into_entry(self, editing: Vec<String>) -> Result<sluice_api::WorkflowEntry> {
        let last_run = match (self.last_run_id, self.last_run_status, self.last_run_at_us) {
            (Some(id), Some(status), Some(created_at_us)) => Some(sluice_api::LastRun {
                status: status
                    .parse()
                    .map_err(|e: sluice_api::runs::UnknownStatus| Error::Corrupt {
                        table: "runs",
                        key: id.clone(),
                        detail: format!("status: {e}"),
                    })?,
                id,
                created_at_us,
                finished_at_us: self.last_run_finished_at_us,
            }),
            _ => None,
        };
        Ok(sluice_api::WorkflowEntry {
            id: self.id,
            name: self.name,
            updated_at_us: self.updated_at_us,
            draft_version: self.doc_version,
            published: self.published,
            published_version: self.published_version,
            published_at_us: self.published_at_us,
            last_run,
            editing,
        })
    }
}

/// The data dir's database, blob store and journal writer. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    pool: SqlitePool,
    blobs: Blobs,
    journal: Journal,
    vault: tokio::sync::OnceCell<crate::vault::Vault>,
}

/// Inserts or replaces a workflow row: id, name, definition, updated_at_us,
/// doc_version.
const UPSERT_WORKFLOW: &str = "INSERT INTO workflows (id, name, definition, updated_at_us, doc_version) \
     VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET name = excluded.name, \
     definition = excluded.definition, updated_at_us = excluded.updated_at_us, \
     doc_version = excluded.doc_version";

/// Appends a document update after the newest one (or the snapshot):
/// workflow id, bytes, at_us; returns the new `seq`.
const APPEND_DOC_UPDATE: &str = "INSERT INTO doc_updates (workflow_id, seq, bytes, at_us) \
     VALUES (?1, MAX(COALESCE((SELECT MAX(seq) FROM doc_updates WHERE workflow_id = ?1), 0), \
     COALESCE((SELECT upto_seq FROM doc_snapshots WHERE workflow_id = ?1), 0)) + 1, ?2, ?3) \
     RETURNING seq";

/// A workflow document as stored (see [`Store::load_doc`]).
#[derive(Debug, Default)]
pub struct StoredDoc {
    pub snapshot: Option<Vec<u8>>,
    /// The last update folded into `snapshot` (0: none).
    pub upto_seq: i64,
    /// `(seq, bytes)` after `upto_seq`, oldest first.
    pub updates: Vec<(i64, Vec<u8>)>,
}

/// A document update's place in the workflow's history (see
/// [`Store::put_workflow_update`]).
#[derive(Debug, Clone, Copy)]
pub struct VersionMark<'a> {
    /// The document version before the update, and after.
    pub parent: &'a str,
    pub version: &'a str,
    /// Who wrote it (peer ids).
    pub author: &'a str,
    /// Where it came from ("api", "file"…), if known.
    pub message: Option<&'a str>,
    /// The same author's next edit within this many microseconds (and with
    /// the same message) extends the version instead of starting one;
    /// negative: never.
    pub gap_us: i64,
}

crate::from_row! {
    /// A version of a workflow: a burst of edits by one author.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct VersionRow {
        pub seq: i64,
        pub parent: String,
        pub version: String,
        pub author: String,
        pub message: Option<String>,
        pub started_at_us: i64,
        pub at_us: i64,
        pub edits: i64,
        /// When this version was last published (None: never).
        pub published_at_us: Option<i64>,
    }
}

/// Appends a document update and records its version; returns its `seq`.
async fn append_update(
    conn: &mut sqlx::SqliteConnection,
    id: &str,
    update: &[u8],
    mark: &VersionMark<'_>,
    now: i64,
) -> Result<i64> {
    let seq: i64 = sqlx::query_scalar(APPEND_DOC_UPDATE)
        .bind(id)
        .bind(update)
        .bind(now)
        .fetch_one(&mut *conn)
        .await?;
    mark_version(conn, id, mark, now).await?;
    Ok(seq)
}

/// Records `mark` in `doc_versions`, extending the newest version when it
/// continues it.
async fn mark_version(
    conn: &mut sqlx::SqliteConnection,
    id: &str,
    mark: &VersionMark<'_>,
    now: i64,
) -> Result<()> {
    crate::from_row! {
        /// The newest version of a workflow, as much as extending it needs.
        struct Last {
            seq: i64,
            version: String,
            author: String,
            message: Option<String>,
            at_us: i64,
            published_at_us: Option<i64>,
        }
    }
    let last: Option<Last> = sqlx::query_as(
        "SELECT seq, version, author, message, at_us, published_at_us FROM doc_versions \
         WHERE workflow_id = ? ORDER BY seq DESC LIMIT 1",
    )
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(Last {
        seq,
        version,
        author,
        message,
        at_us,
        published_at_us: None,
    }) = &last
        && version == mark.parent
        && author == mark.author
        && message.as_deref() == mark.message
        && mark.gap_us >= 0
        && now - at_us <= mark.gap_us
    {
        sqlx::query(
            "UPDATE doc_versions SET version = ?, at_us = ?, edits = edits + 1 \
             WHERE workflow_id = ? AND seq = ?",
        )
        .bind(mark.version)
        .bind(now)
        .bind(id)
        .bind(seq)
        .execute(&mut *conn)
        .await?;
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO doc_versions (workflow_id, seq, parent, version, author, message, \
         started_at_us, at_us, edits) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
    )
    .bind(id)
    .bind(last.map_or(1, |l| l.seq + 1))
    .bind(mark.parent)
    .bind(mark.version)
    .bind(mark.author)
    .bind(mark.message)
    .bind(now)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

crate::from_row! {
    /// A stored credential, without its value.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct CredentialRow {
        pub name: String,
        pub kind: String,
        pub updated_at_us: i64,
    }
}

/// A credential read to be changed: its kind, its decrypted value, and the
/// token a conditional write names ([`Store::replace_credential_if`]).
pub struct CredentialRead {
    pub kind: String,
    pub value: Value,
    pub token: Vec<u8>,
}

impl std::fmt::Debug for CredentialRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the value: it is a secret.
        f.debug_struct("CredentialRead")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

crate::from_row! {
    /// A `runs` row as [`RUN_COLUMNS`] selects it, before its values are
    /// resolved (blobs loaded, JSON parsed) into a [`RunRow`].
    struct RunColumns {
        id: String,
        workflow_id: String,
        definition: String,
        trigger: String,
        input: String,
        status: String,
        output: Option<String>,
        error: Option<String>,
        created_at_us: i64,
        finished_at_us: Option<i64>,
        parent_run: Option<String>,
        doc_version: Option<String>,
        draft: bool,
        executor: String,
    }
}

/// The `definition` column holds "#" + a hash into `definitions` (or, in rows
/// written before migration 0003, the text itself).
const RUN_COLUMNS: &str = "id, workflow_id, \
    CASE WHEN substr(runs.definition, 1, 1) = '#' \
        THEN (SELECT text FROM definitions WHERE hash = substr(runs.definition, 2)) \
        ELSE runs.definition END AS definition, \
    \"trigger\", input, \
    CASE WHEN status = 'running' AND waiting_since_us IS NOT NULL THEN 'waiting' ELSE status END AS status, \
    output, error, created_at_us, finished_at_us, parent_run, doc_version, draft, executor";

crate::from_row! {
    /// A `waits` row.
    struct WaitColumns {
        run_id: String,
        node: String,
        lineage: String,
        activation: String,
        since_us: i64,
        deadline_us: Option<i64>,
        message: Option<String>,
    }
}

impl WaitColumns {
    fn into_wait(self) -> Wait {
        Wait {
            key: crate::WaitKey {
                run_id: self.run_id.into(),
                node: self.node.into(),
                lineage: self.lineage.into(),
                activation: self.activation.into(),
            },
            since_us: self.since_us,
            deadline_us: self.deadline_us,
            message: self.message,
        }
    }
}

impl Store {
    /// Opens (creating) the store in `dir`: `sluice.db` in WAL mode with
    /// `synchronous=FULL`, migrated; `blobs/`; and the journal writer task.
    /// Must be called inside a tokio runtime.
    pub async fn open(dir: &Path) -> Result<Store> {
        let dir = dir.to_path_buf();
        let blobs = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || {
                private_dir(&dir)?;
                private_file(&dir.join("sluice.db"))?;
                Blobs::open(dir.join("blobs"))
            })
            .await??
        };
        let options = SqliteConnectOptions::new()
            .filename(dir.join("sluice.db"))
            .create_if_missing(true)
            .page_size(PAGE_SIZE)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            // A new database gives free pages back to the OS when retention
            // asks (an existing one keeps its mode: switching needs a VACUUM).
            .auto_vacuum(SqliteAutoVacuum::Incremental)
            // The WAL file shrinks back to this after a checkpoint resets it,
            // instead of staying at its largest.
            .pragma("journal_size_limit", (64 * 1024 * 1024).to_string())
            .busy_timeout(Duration::from_secs(5));
        // SQLite migrations take no lock of their own: two processes opening
        // a new data dir at once would both create the tables, and one would
        // fail half-way. Nor does switching a new file to WAL wait for
        // another connection doing the same: it fails at once with "database
        // is locked". One process connects and migrates at a time; the next
        // finds it done.
        let lock = {
            let path = dir.join("migrate.lock");
            tokio::task::spawn_blocking(move || {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .map_err(Error::io(&path))?;
                file.lock().map_err(Error::io(&path))?;
                Ok::<_, Error>(file)
            })
            .await??
        };
        check_database(&dir.join("sluice.db")).await?;
        // The writer's connection gathers each commit's WAL frames into one
        // write (see `journal/vfs.rs`); the readers need no such thing.
        let writer_options = match crate::journal::vfs::name() {
            Some(vfs) => options.clone().vfs(vfs),
            None => options.clone(),
        };
        let mut writer = SqliteConnection::connect_with(&writer_options).await?;
        MIGRATOR.run(&mut writer).await?;
        let pool = SqlitePoolOptions::new()
            .max_connections(READERS)
            .connect_with(options)
            .await?;
        drop(lock);
        let journal = spawn_writer(writer, blobs.clone());
        Ok(Store {
            inner: Arc::new(Inner {
                dir,
                pool,
                blobs,
                journal,
                vault: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// The vault, opened on first use: finding the key may mean asking the
    /// OS keyring, which only credential users should pay for.
    async fn vault(&self) -> Result<&crate::vault::Vault> {
        self.inner
            .vault
            .get_or_try_init(|| async {
                let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM credentials")
                    .fetch_one(&self.inner.pool)
                    .await?;
                let dir = self.inner.dir.clone();
                tokio::task::spawn_blocking(move || {
                    crate::vault::Vault::open(&dir, stored > 0, crate::vault::KeyHome::from_env()?)
                })
                .await?
            })
            .await
    }

    /// Stores a new credential, encrypted (the value never reaches the
    /// database in clear); false (nothing written) when the name is taken.
    /// One statement, so two creators cannot both win.
    pub async fn create_credential(&self, name: &str, kind: &str, value: &Value) -> Result<bool> {
        self.write_credential(name, kind, value, false).await
    }

    /// Stores a credential, encrypted; replaces one of the same name.
    pub async fn put_credential(&self, name: &str, kind: &str, value: &Value) -> Result<()> {
        self.write_credential(name, kind, value, true)
            .await
            .map(|_| ())
    }

    /// Seals `value` and writes it, replacing one of the same name when
    /// `replace`. Whether a row was written.
    async fn write_credential(
        &self,
        name: &str,
        kind: &str,
        value: &Value,
        replace: bool,
    ) -> Result<bool> {
        let plain = serde_json::to_vec(value).map_err(Error::Serialize)?;
        let (nonce, secret) = self.vault().await?.seal(name, &plain)?;
        let sql = if replace {
            "INSERT INTO credentials (name, kind, nonce, secret, updated_at_us) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, nonce = excluded.nonce, \
             secret = excluded.secret, updated_at_us = excluded.updated_at_us"
        } else {
            "INSERT INTO credentials (name, kind, nonce, secret, updated_at_us) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO NOTHING"
        };
        let done = sqlx::query(sql)
            .bind(name)
            .bind(kind)
            .bind(nonce)
            .bind(secret)
            .bind(now_us())
            .execute(&self.inner.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Names and kinds only, by name.
    pub async fn list_credentials(&self) -> Result<Vec<CredentialRow>> {
        Ok(
            sqlx::query_as("SELECT name, kind, updated_at_us FROM credentials ORDER BY name")
                .fetch_all(&self.inner.pool)
                .await?,
        )
    }

    /// A credential's kind and decrypted value (for the nodes that use it).
    pub async fn get_credential(&self, name: &str) -> Result<Option<(String, Value)>> {
        Ok(self
            .get_credential_sealed(name)
            .await?
            .map(|c| (c.kind, c.value)))
    }

    /// [`Store::get_credential`] with the token of the value read: a change
    /// made from it is written only if nothing was written since
    /// ([`Store::replace_credential_if`]).
    pub async fn get_credential_sealed(&self, name: &str) -> Result<Option<CredentialRead>> {
        crate::from_row! {
            struct Sealed {
                kind: String,
                nonce: Vec<u8>,
                secret: Vec<u8>,
            }
        }
        let row: Option<Sealed> =
            sqlx::query_as("SELECT kind, nonce, secret FROM credentials WHERE name = ?")
                .bind(name)
                .fetch_optional(&self.inner.pool)
                .await?;
        let Some(Sealed {
            kind,
            nonce,
            secret,
        }) = row
        else {
            return Ok(None);
        };
        let plain = self.vault().await?.open_sealed(name, &nonce, &secret)?;
        let value = serde_json::from_slice(&plain).map_err(Error::InvalidJson)?;
        Ok(Some(CredentialRead {
            kind,
            value,
            token: nonce,
        }))
    }

    /// Replaces credential `name` with `value` only if it is still the one
    /// read with `token` (each write seals with a fresh nonce, which is the
    /// token): false when another write (or a delete) came in between, in
    /// this process or another.
    pub async fn replace_credential_if(
        &self,
        name: &str,
        kind: &str,
        value: &Value,
        token: &[u8],
    ) -> Result<bool> {
        let plain = serde_json::to_vec(value).map_err(Error::Serialize)?;
        let (nonce, secret) = self.vault().await?.seal(name, &plain)?;
        let done = sqlx::query(
            "UPDATE credentials SET kind = ?, nonce = ?, secret = ?, updated_at_us = ? \
             WHERE name = ? AND nonce = ?",
        )
        .bind(kind)
        .bind(nonce)
        .bind(secret)
        .bind(now_us())
        .bind(name)
        .bind(token)
        .execute(&self.inner.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes a credential. Returns whether it existed.
    pub async fn delete_credential(&self, name: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM credentials WHERE name = ?")
            .bind(name)
            .execute(&self.inner.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The key resume links are signed with: `resume.key` in the data dir
    /// (32 random bytes as hex, mode 0600), made on first use.
    pub fn resume_key(&self) -> Result<[u8; 32]> {
        crate::vault::resume_key(self.data_dir())
    }

    pub fn data_dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Why the data dir cannot be written, while the journal's last commit
    /// failed for that reason (disk full, read-only, I/O error).
    pub fn write_failure(&self) -> Option<crate::WriteFailure> {
        self.inner.journal.write_failure()
    }

    pub fn journal(&self) -> Journal {
        self.inner.journal.clone()
    }

    pub fn blobs(&self) -> &Blobs {
        &self.inner.blobs
    }

    /// Inserts or replaces a workflow; `updated_at_us` is now.
    pub async fn put_workflow(&self, id: &str, name: &str, definition: &str) -> Result<()> {
        self.put_workflow_at(id, name, definition, None).await
    }

    /// [`Store::put_workflow`] for JSON written from document version
    /// `version` (runs of it pin that version).
    pub async fn put_workflow_at(
        &self,
        id: &str,
        name: &str,
        definition: &str,
        version: Option<&str>,
    ) -> Result<()> {
        sqlx::query(UPSERT_WORKFLOW)
            .bind(id)
            .bind(name)
            .bind(definition)
            .bind(now_us())
            .bind(version)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }

    /// Deletes a workflow and its document; its runs stay (they pin their
    /// own definition). Returns whether it existed.
    pub async fn delete_workflow(&self, id: &str) -> Result<bool> {
        let mut tx = self.inner.pool.begin().await?;
        let done = sqlx::query("DELETE FROM workflows WHERE id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM doc_updates WHERE workflow_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM doc_snapshots WHERE workflow_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM doc_versions WHERE workflow_id = ?")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        // Its shares, the peers that joined it and its link to a peer go
        // with it: a new workflow of the same id shares nothing.
        for sql in [
            "DELETE FROM shares WHERE workflow_id = ?",
            "DELETE FROM peer_grants WHERE workflow_id = ?",
            "DELETE FROM peer_links WHERE workflow_id = ?",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// Stores a workflow's new JSON and the document update that produced
    /// it, in one transaction (never one without the other). Returns the
    /// update's sequence number.
    pub async fn put_workflow_update(
        &self,
        id: &str,
        name: &str,
        definition: &str,
        update: &[u8],
        mark: &VersionMark<'_>,
    ) -> Result<i64> {
        let mut tx = self.inner.pool.begin().await?;
        let now = now_us();
        sqlx::query(UPSERT_WORKFLOW)
            .bind(id)
            .bind(name)
            .bind(definition)
            .bind(now)
            .bind(mark.version)
            .execute(&mut *tx)
            .await?;
        let seq = append_update(&mut tx, id, update, mark, now).await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Appends a document update (the workflow JSON is written later, by
    /// [`Store::put_workflow`]). Returns the update's sequence number.
    pub async fn append_doc_update(
        &self,
        id: &str,
        update: &[u8],
        mark: &VersionMark<'_>,
    ) -> Result<i64> {
        let mut tx = self.inner.pool.begin().await?;
        let now = now_us();
        let seq = append_update(&mut tx, id, update, mark, now).await?;
        tx.commit().await?;
        Ok(seq)
    }

    /// Versions of workflow `id`, newest first: `limit` from `offset`.
    pub async fn list_versions(
        &self,
        id: &str,
        offset: u32,
        limit: u32,
    ) -> Result<Vec<VersionRow>> {
        Ok(sqlx::query_as(
            "SELECT seq, parent, version, author, message, started_at_us, at_us, edits, \
             published_at_us FROM doc_versions WHERE workflow_id = ? ORDER BY seq DESC LIMIT ? OFFSET ?",
        )
        .bind(id)
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Workflows whose document changed after their JSON was last written
    /// (a crash came between the two).
    pub async fn stale_workflows(&self) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT w.id FROM workflows w WHERE \
             COALESCE((SELECT MAX(at_us) FROM doc_updates u WHERE u.workflow_id = w.id), 0) > w.updated_at_us \
             OR COALESCE((SELECT at_us FROM doc_snapshots s WHERE s.workflow_id = w.id), 0) > w.updated_at_us",
        )
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// A workflow's document as stored: the snapshot (if any) and the
    /// updates after it, oldest first.
    pub async fn load_doc(&self, id: &str) -> Result<StoredDoc> {
        crate::from_row! {
            struct Snapshot {
                upto_seq: i64,
                bytes: Vec<u8>,
            }
        }
        crate::from_row! {
            struct Update {
                seq: i64,
                bytes: Vec<u8>,
            }
        }
        let snapshot: Option<Snapshot> =
            sqlx::query_as("SELECT upto_seq, bytes FROM doc_snapshots WHERE workflow_id = ?")
                .bind(id)
                .fetch_optional(&self.inner.pool)
                .await?;
        let upto = snapshot.as_ref().map_or(0, |s| s.upto_seq);
        let updates: Vec<Update> = sqlx::query_as(
            "SELECT seq, bytes FROM doc_updates WHERE workflow_id = ? AND seq > ? ORDER BY seq",
        )
        .bind(id)
        .bind(upto)
        .fetch_all(&self.inner.pool)
        .await?;
        Ok(StoredDoc {
            snapshot: snapshot.map(|s| s.bytes),
            upto_seq: upto,
            updates: updates.into_iter().map(|u| (u.seq, u.bytes)).collect(),
        })
    }

    /// Replaces the updates up to `upto_seq` with `snapshot`, in one
    /// transaction: a crash leaves the old rows or the new ones, never
    /// neither. Updates appended after `upto_seq` stay. Nothing happens
    /// when there is nothing to fold (the workflow was deleted meanwhile).
    pub async fn compact_doc(&self, id: &str, snapshot: &[u8], upto_seq: i64) -> Result<()> {
        let mut tx = self.inner.pool.begin().await?;
        // The snapshot is as old as the newest update it folds in (a newer
        // time would make the workflow look stale: `stale_workflows`).
        sqlx::query(
            "INSERT INTO doc_snapshots (workflow_id, upto_seq, bytes, at_us) SELECT ?1, ?2, ?3, \
             COALESCE((SELECT MAX(at_us) FROM doc_updates WHERE workflow_id = ?1 AND seq <= ?2), ?4) \
             WHERE EXISTS (SELECT 1 FROM doc_updates WHERE workflow_id = ?1 AND seq <= ?2) \
             ON CONFLICT (workflow_id) DO UPDATE SET upto_seq = excluded.upto_seq, \
             bytes = excluded.bytes, at_us = excluded.at_us WHERE excluded.upto_seq > upto_seq",
        )
        .bind(id)
        .bind(upto_seq)
        .bind(snapshot)
        .bind(now_us())
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM doc_updates WHERE workflow_id = ? AND seq <= ?")
            .bind(id)
            .bind(upto_seq)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Bytes a workflow's document takes in the database (snapshot plus
    /// pending updates).
    pub async fn doc_size(&self, id: &str) -> Result<u64> {
        let size: i64 = sqlx::query_scalar(
            "SELECT COALESCE((SELECT SUM(LENGTH(bytes)) FROM doc_updates WHERE workflow_id = ?1), 0) \
             + COALESCE((SELECT LENGTH(bytes) FROM doc_snapshots WHERE workflow_id = ?1), 0)",
        )
        .bind(id)
        .fetch_one(&self.inner.pool)
        .await?;
        Ok(size.max(0) as u64)
    }

    /// The workflow JSON text, as stored.
    pub async fn get_workflow(&self, id: &str) -> Result<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT definition FROM workflows WHERE id = ?")
                .bind(id)
                .fetch_optional(&self.inner.pool)
                .await?,
        )
    }

    /// The workflow JSON text with the document version it was written
    /// from (None: not written from a document).
    pub async fn get_workflow_at(&self, id: &str) -> Result<Option<(String, Option<String>)>> {
        crate::from_row! {
            struct At {
                definition: String,
                doc_version: Option<String>,
            }
        }
        let row: Option<At> =
            sqlx::query_as("SELECT definition, doc_version FROM workflows WHERE id = ?")
                .bind(id)
                .fetch_optional(&self.inner.pool)
                .await?;
        Ok(row.map(|r| (r.definition, r.doc_version)))
    }

    /// The published workflow JSON text (what triggers and runs by id run)
    /// with the document version it was written from. None: no such
    /// workflow; `Some(None)`: stored, but not published.
    pub async fn get_published(
        &self,
        id: &str,
    ) -> Result<Option<Option<(String, Option<String>)>>> {
        crate::from_row! {
            struct Published {
                published_definition: Option<String>,
                published_version: Option<String>,
            }
        }
        let row: Option<Published> = sqlx::query_as(
            "SELECT published_definition, published_version FROM workflows WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(&self.inner.pool)
        .await?;
        Ok(row.map(|r| r.published_definition.map(|d| (d, r.published_version))))
    }

    /// Publishes `definition` (the workflow JSON at document version
    /// `version`) as what workflow `id` runs, and marks that version in the
    /// history (closing it: later edits start a new version). Returns
    /// whether the workflow exists.
    pub async fn publish_workflow(
        &self,
        id: &str,
        definition: &str,
        version: Option<&str>,
        at_us: i64,
    ) -> Result<bool> {
        let mut tx = self.inner.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE workflows SET published_definition = ?, published_version = ?, \
             published_at_us = ? WHERE id = ?",
        )
        .bind(definition)
        .bind(version)
        .bind(at_us)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if let Some(version) = version {
            sqlx::query(
                "UPDATE doc_versions SET published_at_us = ? WHERE workflow_id = ? AND seq = \
                 (SELECT MAX(seq) FROM doc_versions WHERE workflow_id = ? AND version = ?)",
            )
            .bind(at_us)
            .bind(id)
            .bind(id)
            .bind(version)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

    /// Withdraws workflow `id`'s published version: its triggers disarm and
    /// runs by id are refused until it is published again. Returns whether
    /// it was published.
    pub async fn unpublish_workflow(&self, id: &str) -> Result<bool> {
        let done = sqlx::query(
            "UPDATE workflows SET published_definition = NULL, published_version = NULL, \
             published_at_us = NULL WHERE id = ? AND published_definition IS NOT NULL",
        )
        .bind(id)
        .execute(&self.inner.pool)
        .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Every workflow's stored texts, by id: `(id, draft, published)`
    /// (the draft as last written from its document; the published
    /// version, if any).
    pub async fn workflow_texts(&self) -> Result<Vec<(String, String, Option<String>)>> {
        Ok(
            sqlx::query_as(
                "SELECT id, definition, published_definition FROM workflows ORDER BY id",
            )
            .fetch_all(&self.inner.pool)
            .await?,
        )
    }

    /// All workflows, by id.
    pub async fn list_workflows(&self) -> Result<Vec<WorkflowRow>> {
        // The newest run of each: one seek in `runs_workflow` per workflow.
        Ok(sqlx::query_as(
            "SELECT w.id, w.name, w.updated_at_us, w.doc_version, w.published_version, \
                 w.published_at_us, w.published_definition IS NOT NULL AS published, \
                 r.id AS last_run_id, \
                 CASE WHEN r.status = 'running' AND r.waiting_since_us IS NOT NULL \
                      THEN 'waiting' ELSE r.status END AS last_run_status, \
                 r.created_at_us AS last_run_at_us, r.finished_at_us AS last_run_finished_at_us \
             FROM workflows w LEFT JOIN runs r ON r.rowid = \
                 (SELECT rowid FROM runs WHERE workflow_id = w.id ORDER BY created_at_us DESC LIMIT 1) \
             ORDER BY w.id",
        )
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Creates a run (status `running`). Goes through the journal queue, so it
    /// is ordered before anything the caller appends afterwards, and returns
    /// once committed.
    pub async fn create_run(&self, run: &NewRun) -> Result<()> {
        let insert = self.run_insert(run)?;
        self.inner.journal.insert_run(insert).await
    }

    /// Queues a run's creation without waiting for it to be committed: it is
    /// durable with the next commit (the run's own finish waits for it). For
    /// callers that answer only once the run has ended.
    pub async fn queue_run(&self, run: &NewRun) -> Result<()> {
        let insert = self.run_insert(run)?;
        self.inner.journal.queue_insert_run(insert).await
    }

    /// Records a run that has ended, with its journal and logs, in one
    /// write, and waits until it is committed: for a run executed from start
    /// to end before anything of it was written (see the runtime's
    /// `Plan::in_one_go`). Nothing of it is visible before; everything after.
    pub async fn seal_run(
        &self,
        run: &NewRun,
        records: Vec<Record>,
        logs: Vec<LogLine>,
        end: crate::RunEnd,
    ) -> Result<()> {
        let insert = self.run_insert(run)?;
        self.inner
            .journal
            .seal_run(insert, records, logs, end)
            .await
    }

    fn run_insert(&self, run: &NewRun) -> Result<RunInsert> {
        // Small inputs stay inline; a large one is streamed to a blob file.
        let input = db_text(
            &self.inner.blobs,
            self.inner.blobs.store_value(&*run.input)?,
        )?;
        Ok(RunInsert {
            id: run.id.as_str().into(),
            workflow_id: run.workflow_id.as_str().into(),
            definition: run.definition.text.clone(),
            definition_hash: run.definition.hash.clone(),
            trigger: run.trigger.as_str().into(),
            input,
            created_at_us: run.created_at_us,
            parent_run: run.parent_run.as_deref().map(Arc::from),
            doc_version: run.doc_version.as_deref().map(Arc::from),
            draft: run.draft,
            executor: run.executor,
        })
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRow>> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?");
        let row: Option<RunColumns> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.inner.pool)
            .await?;
        Ok(self.decode_runs(row.into_iter().collect()).await?.pop())
    }

    /// The newest `limit` runs, newest first (by created_at, then id).
    pub async fn list_runs(&self, limit: u32) -> Result<Vec<RunRow>> {
        let sql =
            format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at_us DESC, id DESC LIMIT ?");
        let rows: Vec<RunColumns> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(i64::from(limit))
            .fetch_all(&self.inner.pool)
            .await?;
        self.decode_runs(rows).await
    }

    /// Runs newest first, filtered, a page at a time: `before` is the id of
    /// the last run of the previous page.
    pub async fn find_runs(&self, filter: &RunFilter) -> Result<Vec<RunRow>> {
        let mut q = sqlx::QueryBuilder::<sqlx::Sqlite>::new(format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1"
        ));
        if let Some(w) = &filter.workflow {
            q.push(" AND workflow_id = ").push_bind(w.clone());
        }
        match filter.status {
            // Parked runs are `running` with `waiting_since_us` set.
            Some(RunStatus::Running) => {
                q.push(" AND status = 'running' AND waiting_since_us IS NULL");
            }
            Some(RunStatus::Waiting) => {
                q.push(" AND status = 'running' AND waiting_since_us IS NOT NULL");
            }
            Some(st) => {
                q.push(" AND status = ").push_bind(st.as_str());
            }
            None => {}
        }
        if let Some(since) = filter.since_us {
            q.push(" AND created_at_us >= ").push_bind(since);
        }
        if let Some(t) = &filter.trigger {
            q.push(" AND \"trigger\" = ").push_bind(t.clone());
        }
        if let Some(draft) = filter.draft {
            q.push(" AND draft = ").push_bind(i64::from(draft));
        }
        if let Some(text) = filter.text.as_deref().filter(|t| !t.is_empty()) {
            let needle = text.to_lowercase();
            q.push(" AND (instr(lower(input), ")
                .push_bind(needle.clone())
                .push(") > 0 OR instr(lower(ifnull(output, '')), ")
                .push_bind(needle)
                .push(") > 0)");
        }
        if let Some(before) = &filter.before {
            // Strictly older than the cursor run, in (created_at_us, id) order.
            q.push(" AND (created_at_us, id) < (SELECT created_at_us, id FROM runs WHERE id = ")
                .push_bind(before.clone())
                .push(")");
        }
        q.push(" ORDER BY created_at_us DESC, id DESC LIMIT ")
            .push_bind(i64::from(filter.limit));
        let rows: Vec<RunColumns> = q.build_query_as().fetch_all(&self.inner.pool).await?;
        self.decode_runs(rows).await
    }

    /// The ids of runs that start with `prefix`, at most `limit` (a short
    /// id a person typed; two answers mean it is ambiguous).
    pub async fn runs_with_prefix(&self, prefix: &str, limit: u32) -> Result<Vec<String>> {
        // A range on the primary key: every id that starts with `prefix`
        // sorts between it and it followed by the largest character.
        let end = format!("{prefix}\u{10FFFF}");
        Ok(
            sqlx::query_scalar("SELECT id FROM runs WHERE id >= ? AND id < ? ORDER BY id LIMIT ?")
                .bind(prefix)
                .bind(end)
                .bind(i64::from(limit))
                .fetch_all(&self.inner.pool)
                .await?,
        )
    }

    /// The newest run of a workflow started at a given trigger (schedules
    /// find their last fire with it).
    pub async fn latest_run_for_trigger(
        &self,
        workflow_id: &str,
        trigger: &str,
    ) -> Result<Option<RunRow>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE workflow_id = ? AND \"trigger\" = ? \
             ORDER BY created_at_us DESC, id DESC LIMIT 1"
        );
        let rows: Vec<RunColumns> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(workflow_id)
            .bind(trigger)
            .fetch_all(&self.inner.pool)
            .await?;
        Ok(self.decode_runs(rows).await?.into_iter().next())
    }

    /// Whether a run with this id exists.
    pub async fn run_exists(&self, id: &str) -> Result<bool> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM runs WHERE id = ?")
            .bind(id)
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(n > 0)
    }

    /// Runs still `running` (to resume after a restart), oldest first;
    /// not the parked ones (they wait for a signal or a timeout).
    pub async fn unfinished_runs(&self) -> Result<Vec<RunRow>> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running' AND waiting_since_us IS NULL \
             ORDER BY created_at_us, id"
        );
        let rows: Vec<RunColumns> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.inner.pool)
            .await?;
        self.decode_runs(rows).await
    }

    /// The approval steps of a run that wait for a decision, oldest first.
    pub async fn open_waits(&self, run_id: &str) -> Result<Vec<Wait>> {
        let rows: Vec<WaitColumns> = sqlx::query_as(
            "SELECT run_id, node, lineage, activation, since_us, deadline_us, message FROM waits \
             WHERE run_id = ? ORDER BY since_us, node, lineage, activation",
        )
        .bind(run_id)
        .fetch_all(&self.inner.pool)
        .await?;
        Ok(rows.into_iter().map(WaitColumns::into_wait).collect())
    }

    /// Waits whose timeout is due at `now_us`, soonest first, at most `limit`.
    pub async fn due_waits(&self, now_us: i64, limit: u32) -> Result<Vec<Wait>> {
        let rows: Vec<WaitColumns> = sqlx::query_as(
            "SELECT run_id, node, lineage, activation, since_us, deadline_us, message FROM waits \
             WHERE deadline_us IS NOT NULL AND deadline_us <= ? ORDER BY deadline_us LIMIT ?",
        )
        .bind(now_us)
        .bind(i64::from(limit))
        .fetch_all(&self.inner.pool)
        .await?;
        Ok(rows.into_iter().map(WaitColumns::into_wait).collect())
    }

    /// The soonest timeout of any wait (unix µs).
    pub async fn next_wait_deadline(&self) -> Result<Option<i64>> {
        Ok(
            sqlx::query_scalar("SELECT MIN(deadline_us) FROM waits WHERE deadline_us IS NOT NULL")
                .fetch_one(&self.inner.pool)
                .await?,
        )
    }

    /// The committed journal of one run in seq order, values loaded
    /// (`Record::data` is `Stored::Loaded`).
    pub async fn run_records(&self, run_id: &str) -> Result<Vec<Record>> {
        // A run recorded whole when it ended keeps its journal in its row.
        let sealed: Option<String> =
            sqlx::query_scalar("SELECT steps FROM runs WHERE id = ? AND steps IS NOT NULL")
                .bind(run_id)
                .fetch_optional(&self.inner.pool)
                .await?;
        let rows: Vec<RecordColumns> = match sealed {
            Some(text) => packed::unpack(run_id, &text)?,
            None => {
                sqlx::query_as(
                    "SELECT seq, kind, node, lineage, activation, attempt, at_us, data, error, duration_us, input \
                     FROM journal WHERE run_id = ? ORDER BY seq",
                )
                .bind(run_id)
                .fetch_all(&self.inner.pool)
                .await?
            }
        };
        // Steps whose input (or outputs) is the run's input refer to it.
        let run_input: Option<String> = if rows.iter().any(|r| {
            [&r.data, &r.input]
                .into_iter()
                .flatten()
                .any(|t| refers_to_input(t))
        }) {
            sqlx::query_scalar("SELECT input FROM runs WHERE id = ?")
                .bind(run_id)
                .fetch_optional(&self.inner.pool)
                .await?
        } else {
            None
        };
        let blobs = self.inner.blobs.clone();
        let run_id: Arc<str> = run_id.into();
        // Parsing (and loading blobs) is blocking work.
        tokio::task::spawn_blocking(move || {
            let run_input = run_input
                .map(|t| resolve_text(&blobs, &t).map(Arc::new))
                .transpose()?;
            decode_records(&blobs, &run_id, run_input, rows)
        })
        .await?
    }

    /// The committed log lines of one run, in the order they were queued.
    pub async fn run_logs(&self, run_id: &str) -> Result<Vec<LogLine>> {
        crate::from_row! {
            struct Line {
                node: String,
                lineage: String,
                level: String,
                message: String,
                at_us: i64,
            }
        }
        let rows: Vec<Line> = sqlx::query_as(
            "SELECT node, lineage, level, message, at_us FROM logs WHERE run_id = ? ORDER BY id",
        )
        .bind(run_id)
        .fetch_all(&self.inner.pool)
        .await?;
        let run_id: Arc<str> = run_id.into();
        Ok(rows
            .into_iter()
            .map(|l| LogLine {
                run_id: run_id.clone(),
                node: l.node,
                lineage: l.lineage,
                level: l.level,
                message: l.message,
                at_us: l.at_us,
            })
            .collect())
    }

    async fn decode_runs(&self, rows: Vec<RunColumns>) -> Result<Vec<RunRow>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let blobs = self.inner.blobs.clone();
        tokio::task::spawn_blocking(move || {
            rows.into_iter()
                .map(|row| decode_run(&blobs, row))
                .collect()
        })
        .await?
    }
}

fn decode_run(blobs: &Blobs, row: RunColumns) -> Result<RunRow> {
    let RunColumns {
        id,
        workflow_id,
        definition,
        trigger,
        input,
        status,
        output,
        error,
        created_at_us,
        finished_at_us,
        parent_run,
        doc_version,
        draft,
        executor,
    } = row;
    let corrupt = |column: &str, e: Error| Error::Corrupt {
        table: "runs",
        key: id.clone(),
        detail: format!("{column}: {e}"),
    };
    let executor = executor.parse().map_err(|e: String| Error::Corrupt {
        table: "runs",
        key: id.clone(),
        detail: format!("executor: {e}"),
    })?;
    let input = resolve_text(blobs, &input).map_err(|e| corrupt("input", e))?;
    let output = output
        .map(|t| resolve_text(blobs, &t))
        .transpose()
        .map_err(|e| corrupt("output", e))?;
    let error = error
        .map(|t| serde_json::from_str(&t).map_err(Error::InvalidJson))
        .transpose()
        .map_err(|e| corrupt("error", e))?;
    let status = status
        .parse()
        .map_err(|e: sluice_api::runs::UnknownStatus| Error::Corrupt {
            table: "runs",
            key: id.clone(),
            detail: format!("status: {e}"),
        })?;
    Ok(RunRow {
        id,
        workflow_id,
        definition,
        trigger,
        input: Arc::new(input),
        status,
        output,
        error,
        created_at_us,
        finished_at_us,
        parent_run,
        doc_version,
        draft,
        executor,
    })
}

fn decode_records(
    blobs: &Blobs,
    run_id: &Arc<str>,
    run_input: Option<Arc<Value>>,
    rows: Vec<RecordColumns>,
) -> Result<Vec<Record>> {
    // Records of one run share few node names: share their allocations.
    let mut nodes: HashMap<String, Arc<str>> = HashMap::new();
    // Each record's outputs, for the references of the records after it.
    let mut outputs: HashMap<u64, Arc<Value>> = HashMap::new();
    rows.into_iter()
        .map(
            |RecordColumns {
                 seq,
                 kind,
                 node,
                 lineage,
                 activation,
                 attempt,
                 at_us,
                 data,
                 error,
                 duration_us,
                 input,
             }| {
                let corrupt = |detail: String| Error::Corrupt {
                    table: "journal",
                    key: format!("{run_id}/{seq}"),
                    detail,
                };
                let node = match nodes.get(&node) {
                    Some(n) => n.clone(),
                    None => {
                        let n: Arc<str> = node.as_str().into();
                        nodes.insert(node, n.clone());
                        n
                    }
                };
                let resolve = |text: &str| -> Result<Arc<Value>> {
                    let lookup = |r: &str| -> Result<Value> {
                        match parse_ref(r) {
                            Some(ValueRef::RunInput) => run_input
                                .as_deref()
                                .cloned()
                                .ok_or_else(|| Error::BadRef(r.to_string())),
                            Some(ValueRef::Output { seq, port }) => outputs
                                .get(&seq)
                                .and_then(|o| o.as_array())
                                .and_then(|o| {
                                    o.iter().find_map(|pair| match pair.as_array()?.as_slice() {
                                        [p, v] if p.as_str() == Some(port.as_str()) => {
                                            Some(v.clone())
                                        }
                                        _ => None,
                                    })
                                })
                                .ok_or_else(|| Error::BadRef(r.to_string())),
                            None => Err(Error::BadRef(r.to_string())),
                        }
                    };
                    if let Some(list) = text.strip_prefix("^^") {
                        let pairs: Vec<(String, String)> =
                            serde_json::from_str(list).map_err(Error::InvalidJson)?;
                        let values = pairs
                            .into_iter()
                            .map(|(port, r)| {
                                Ok(Value::Array(vec![Value::String(port), lookup(&r)?]))
                            })
                            .collect::<Result<Vec<_>>>()?;
                        return Ok(Arc::new(Value::Array(values)));
                    }
                    if let Some(r) = text.strip_prefix('^') {
                        return lookup(r).map(Arc::new);
                    }
                    resolve_text(blobs, text).map(Arc::new)
                };
                let data = data
                    .map(|t| resolve(&t))
                    .transpose()
                    .map_err(|e| corrupt(format!("data: {e}")))?;
                let input = input
                    .map(|t| resolve(&t))
                    .transpose()
                    .map_err(|e| corrupt(format!("input: {e}")))?;
                let seq_u = u64::try_from(seq).map_err(|_| corrupt(format!("seq {seq}")))?;
                if kind == RecordKind::Succeeded as i64
                    && let Some(d) = &data
                {
                    outputs.insert(seq_u, d.clone());
                }
                let data = data.map(Stored::Loaded);
                let input = input.map(Stored::Loaded);
                let error = error
                    .map(|t| serde_json::from_str(&t))
                    .transpose()
                    .map_err(|e| corrupt(format!("error: {e}")))?;
                Ok(Record {
                    run_id: run_id.clone(),
                    seq: seq_u,
                    kind: RecordKind::from_i64(kind)
                        .ok_or_else(|| corrupt(format!("kind {kind}")))?,
                    node,
                    lineage,
                    activation,
                    attempt: u32::try_from(attempt)
                        .map_err(|_| corrupt(format!("attempt {attempt}")))?,
                    at_us,
                    data,
                    input,
                    error,
                    duration_us,
                })
            },
        )
        .collect()
}

/// Unix micros now (0 if the clock is before 1970).
pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Creates the data dir, readable by its owner only (0700), and takes an
/// existing one down to that: it holds the journal, the token and the
/// vault key, none of them for other local users.
fn private_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(Error::io(dir))?;
        let meta = std::fs::metadata(dir).map_err(Error::io(dir))?;
        if meta.permissions().mode() & 0o077 != 0 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(Error::io(dir))?;
        }
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    Ok(())
}

/// Creates `file` empty with mode 0600 when it does not exist, or takes it
/// down to 0600 (SQLite gives its WAL and shared-memory files the mode of
/// the database file).
fn private_file(file: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(file)
            .map_err(Error::io(file))?;
        for f in [
            file.to_path_buf(),
            file.with_extension("db-wal"),
            file.with_extension("db-shm"),
        ] {
            if let Ok(meta) = std::fs::metadata(&f)
                && meta.permissions().mode() & 0o077 != 0
            {
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600))
                    .map_err(Error::io(&f))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = file;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded migrations are the folder's files, read as sqlx reads
    /// them (`sqlx::migrate!` used its resolver at compile time): same
    /// versions, descriptions and checksums, so a database migrated by an
    /// older build validates.
    #[tokio::test]
    async fn migrations_embedded_are_the_folder() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let from_folder = Migrator::new(dir.as_path())
            .await
            .expect("the folder's migrations");
        let folder: Vec<_> = from_folder
            .iter()
            .map(|m| {
                (
                    m.version,
                    m.description.to_string(),
                    m.checksum.to_vec(),
                    m.no_tx,
                )
            })
            .collect();
        let embedded: Vec<_> = MIGRATOR
            .iter()
            .map(|m| {
                (
                    m.version,
                    m.description.to_string(),
                    m.checksum.to_vec(),
                    m.no_tx,
                )
            })
            .collect();
        assert_eq!(
            embedded, folder,
            "list every file of migrations/ in MIGRATIONS"
        );
        assert_eq!(folder.len(), MIGRATIONS.len());
    }
}
