//! The run journal: record types and [`Journal`], the handle that queues
//! writes for the group-commit writer task (see `journal/writer.rs`).
//!
//! Ordering guarantee: commands from all handles go through one queue and are
//! committed in queue order, in whole batches. A waiter (`create_run`,
//! `finish_run`, `flush`) returns only after everything queued before it is
//! committed, or with an error naming what was not.

use std::sync::Arc;

use serde_json::Value;
use sluice_api::{RunError, RunStatus};
use tokio::sync::{mpsc, oneshot};

use crate::blobs::{Blobs, Stored, ValueRef, check_hash};
use crate::{Error, Result};

pub(crate) mod packed;
mod sqlite;
pub(crate) mod vfs;
mod writer;

pub use sqlite::SqliteError;

pub(crate) use writer::spawn_writer;

/// Longer log messages are cut (on a char boundary) to keep the logs bounded.
pub const MAX_LOG_MESSAGE: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    Started = 1,
    Succeeded = 2,
    Failed = 3,
    Skipped = 4,
}

impl RecordKind {
    pub fn from_i64(v: i64) -> Option<RecordKind> {
        Some(match v {
            1 => RecordKind::Started,
            2 => RecordKind::Succeeded,
            3 => RecordKind::Failed,
            4 => RecordKind::Skipped,
            _ => return None,
        })
    }
}

/// One journal record: a step (node, lineage, activation, attempt) started,
/// succeeded, failed or was skipped.
#[derive(Clone, Debug)]
pub struct Record {
    pub run_id: Arc<str>,
    /// Assigned by the caller, per run, strictly increasing.
    pub seq: u64,
    pub kind: RecordKind,
    pub node: Arc<str>,
    /// Split indices, e.g. "" or "3" or "3.1".
    pub lineage: String,
    /// e.g. "0" or "0.1".
    pub activation: String,
    pub attempt: u32,
    /// Unix micros.
    pub at_us: i64,
    /// Started: the step input; Succeeded: the outputs; Failed: None.
    pub data: Option<Stored>,
    /// Succeeded / Failed of a step journaled only after it ran (pure node
    /// kinds, no Started record): the step input.
    pub input: Option<Stored>,
    /// Failed: why (`message`, `retryable`).
    pub error: Option<RunError>,
    pub duration_us: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub run_id: Arc<str>,
    pub node: String,
    pub lineage: String,
    pub level: String,
    pub message: String,
    pub at_us: i64,
}

/// Cheap clonable handle to the journal writer. The writer stops once every
/// handle (and every [`crate::Store`]) is dropped, after committing what was
/// queued, provided the tokio runtime is still running: `flush` before
/// shutting the runtime down.
#[derive(Clone, Debug)]
pub struct Journal {
    tx: mpsc::Sender<Command>,
    blobs: Blobs,
    health: Arc<Health>,
}

/// Whether the data dir can be written: the journal writer records a
/// failure of the storage itself (disk full, read-only, I/O error) and
/// clears it at its next commit; the blob store likewise for a blob file
/// it could not write, cleared by the next blob it writes.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Set while either failure is: the webhook path reads only this.
    failing: std::sync::atomic::AtomicBool,
    failure: std::sync::Mutex<Failures>,
}

#[derive(Debug, Default)]
struct Failures {
    journal: Option<WriteFailure>,
    blobs: Option<WriteFailure>,
}

/// Why the data dir cannot be written, as the journal writer last found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// SQLite's message and code, or the blob file and the OS error.
    pub reason: String,
    /// The disk (or the user's quota) is full.
    pub full: bool,
    /// When it was first seen (microseconds since the epoch).
    pub since_us: i64,
}

/// Whether an I/O error is the storage failing (and whether it is full),
/// rather than something about one file.
pub(crate) fn storage_io(e: &std::io::Error) -> Option<bool> {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::StorageFull | K::QuotaExceeded => Some(true),
        K::ReadOnlyFilesystem => Some(false),
        // EIO: the device failed under the write.
        _ if cfg!(unix) && e.raw_os_error() == Some(5) => Some(false),
        _ => None,
    }
}

impl Health {
    fn update(&self, f: impl FnOnce(&mut Failures)) {
        let mut all = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut all);
        self.failing.store(
            all.journal.is_some() || all.blobs.is_some(),
            std::sync::atomic::Ordering::Release,
        );
    }

    pub(crate) fn failed(&self, e: &SqliteError) {
        let code = e.code & 0xff;
        let storage = matches!(
            code,
            libsqlite3_sys::SQLITE_FULL
                | libsqlite3_sys::SQLITE_IOERR
                | libsqlite3_sys::SQLITE_READONLY
                | libsqlite3_sys::SQLITE_CANTOPEN
                | libsqlite3_sys::SQLITE_NOTADB
                | libsqlite3_sys::SQLITE_CORRUPT
        );
        if !storage {
            return;
        }
        self.update(|f| {
            f.journal.get_or_insert_with(|| WriteFailure {
                reason: e.to_string(),
                full: code == libsqlite3_sys::SQLITE_FULL,
                since_us: crate::store::now_us(),
            });
        });
    }

    /// A blob file could not be written: counts when the storage failed.
    pub(crate) fn blob_failed(&self, e: &std::io::Error) {
        let Some(full) = storage_io(e) else {
            return;
        };
        self.update(|f| {
            f.blobs.get_or_insert_with(|| WriteFailure {
                // Not the full path: webhook callers read the reason.
                reason: format!("writing a value to blobs/: {e}"),
                full,
                since_us: crate::store::now_us(),
            });
        });
    }

    pub(crate) fn committed(&self) {
        if self.failing.load(std::sync::atomic::Ordering::Acquire) {
            self.update(|f| f.journal = None);
        }
    }

    pub(crate) fn blob_written(&self) {
        if self.failing.load(std::sync::atomic::Ordering::Acquire) {
            self.update(|f| f.blobs = None);
        }
    }

    /// Whether the journal (not only the blob store) has failed.
    pub(crate) fn journal_failing(&self) -> bool {
        self.failing.load(std::sync::atomic::Ordering::Acquire)
            && self
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .journal
                .is_some()
    }

    pub(crate) fn failure(&self) -> Option<WriteFailure> {
        if !self.failing.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let all = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        all.journal.clone().or_else(|| all.blobs.clone())
    }
}

impl Journal {
    pub(crate) fn new(tx: mpsc::Sender<Command>, blobs: Blobs, health: Arc<Health>) -> Journal {
        Journal { tx, blobs, health }
    }

    /// Why the data dir cannot be written, if the last commit failed for
    /// that reason (cleared by the next commit that succeeds).
    pub fn write_failure(&self) -> Option<WriteFailure> {
        self.health.failure()
    }

    /// Tries a small write (a transaction that rewrites the database's
    /// header) when the journal failed, and a 64 KiB blob-sized file when
    /// the blob store did, to learn whether storage works again.
    pub async fn probe(&self) -> Result<()> {
        if self.health.journal_failing() {
            self.wait(Command::Probe).await?;
        }
        let blobs = self.blobs.clone();
        tokio::task::spawn_blocking(move || blobs.probe_if_failing()).await?
    }

    /// Queues a record. Returns once it is queued (waiting only for queue
    /// capacity): it is durable after a later `flush` or `finish_run` returns
    /// `Ok`. A `Stored::Loaded` value is serialized here, on the caller's task.
    pub async fn append(&self, rec: Record) -> Result<()> {
        let row = self.journal_row(rec)?;
        self.send(Command::Append(row, None)).await
    }

    /// Queues a record like [`Journal::append`] (in the same order with the
    /// rest) and returns what resolves once that record is committed: a step
    /// that acts on the world waits for it before it does, so that no effect
    /// happens for a step (or a run) that a crash could leave without a trace.
    pub async fn append_committed(&self, rec: Record) -> Result<Committed> {
        let row = self.journal_row(rec)?;
        let (done, rx) = oneshot::channel();
        self.send(Command::Append(row, Some(done))).await?;
        Ok(Committed(rx))
    }

    fn journal_row(&self, rec: Record) -> Result<JournalRow> {
        Ok(JournalRow {
            seq: i64::try_from(rec.seq).map_err(|_| Error::SeqOutOfRange(rec.seq))?,
            kind: rec.kind as i64,
            lineage: rec.lineage.into(),
            activation: rec.activation.into(),
            attempt: i64::from(rec.attempt),
            at_us: rec.at_us,
            data: rec.data.map(|d| db_text(&self.blobs, d)).transpose()?,
            input: rec.input.map(|d| db_text(&self.blobs, d)).transpose()?,
            error: rec.error.as_ref().map(error_text).transpose()?,
            duration_us: rec.duration_us,
            run_id: rec.run_id,
            node: rec.node,
        })
    }

    /// Queues a log line (not durable yet, like `append`).
    pub async fn log(&self, line: LogLine) -> Result<()> {
        self.send(Command::Log(log_row(line))).await
    }

    /// Marks a run finished and waits until that and everything queued before
    /// it is committed. `status` is a final one (not `running`).
    /// Returns [`Error::WritesLost`] if an earlier queued write of this run
    /// could not be committed (the status itself is then still saved).
    pub async fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        output: Option<Stored>,
        error: Option<RunError>,
        finished_at_us: i64,
    ) -> Result<()> {
        let finish = self.finish_row(run_id, status, output, error, finished_at_us)?;
        self.wait(|done| Command::Finish(finish, done)).await
    }

    fn finish_row(
        &self,
        run_id: &str,
        status: RunStatus,
        output: Option<Stored>,
        error: Option<RunError>,
        finished_at_us: i64,
    ) -> Result<FinishRun> {
        if !status.is_finished() {
            return Err(Error::InvalidStatus(status));
        }
        Ok(FinishRun {
            run_id: run_id.into(),
            status: status.as_str(),
            output: output.map(|o| db_text(&self.blobs, o)).transpose()?,
            error: error.as_ref().map(error_text).transpose()?,
            finished_at_us,
        })
    }

    /// Records a whole run that has ended, its journal and its logs, in one
    /// command, and waits until it is committed: the run appears (or, after
    /// a crash before the commit, does not) with everything at once.
    pub(crate) async fn seal_run(
        &self,
        run: RunInsert,
        records: Vec<Record>,
        logs: Vec<LogLine>,
        end: RunEnd,
    ) -> Result<()> {
        let sealed = Sealed {
            finish: self.finish_row(
                &run.id,
                end.status,
                end.output,
                end.error,
                end.finished_at_us,
            )?,
            steps: packed::pack(&self.blobs, &records)?,
            logs: logs.into_iter().map(log_row).collect(),
            run,
        };
        self.wait(|done| Command::Seal(Box::new(sealed), done))
            .await
    }

    /// Waits until everything queued before is committed. Returns
    /// [`Error::WritesLost`] if a queued write (any run) failed since the
    /// previous flush.
    pub async fn flush(&self) -> Result<()> {
        self.wait(Command::Flush).await
    }

    /// Carries out a retention step after everything queued before it.
    pub(crate) async fn prune(&self, prune: Arc<Prune>) -> Result<()> {
        self.wait(|done| Command::Prune(prune, done)).await
    }

    /// Queues a wait (not durable yet, like `append`): queue it after the
    /// step's Started record.
    pub async fn open_wait(&self, wait: Wait) -> Result<()> {
        self.send(Command::OpenWait(Box::new(wait))).await
    }

    /// Queues the end of a wait (not durable yet): queue it after the
    /// record that decides the step, so the two commit together or in order.
    pub async fn close_wait(&self, key: WaitKey) -> Result<()> {
        self.send(Command::CloseWait(key)).await
    }

    /// Marks a run parked since `since_us` (its driver is ending: all it
    /// has left is waiting), after everything queued before; waits for the
    /// commit. A run that is not `running` is left as it is.
    pub async fn park(&self, run_id: &str, since_us: i64) -> Result<()> {
        self.wait(|done| Command::Park(run_id.into(), Some(since_us), done))
            .await
    }

    /// Marks a parked run taken up again (a driver has it), and waits for
    /// the commit: a crash from now on resumes it at the next start.
    pub async fn unpark(&self, run_id: &str) -> Result<()> {
        self.wait(|done| Command::Park(run_id.into(), None, done))
            .await
    }

    pub(crate) async fn insert_run(&self, run: RunInsert) -> Result<()> {
        self.wait(|done| Command::CreateRun(run, done)).await
    }

    pub(crate) async fn queue_insert_run(&self, run: RunInsert) -> Result<()> {
        // Nobody waits: a failure surfaces as lost writes at the run's finish.
        let (done, _) = oneshot::channel();
        self.send(Command::CreateRun(run, done)).await
    }

    async fn send(&self, cmd: Command) -> Result<()> {
        self.tx.send(cmd).await.map_err(|_| Error::WriterClosed)
    }

    async fn wait(&self, cmd: impl FnOnce(Waiter) -> Command) -> Result<()> {
        let (done, rx) = oneshot::channel();
        self.send(cmd(done)).await?;
        rx.await.map_err(|_| Error::WriterClosed)?
    }
}

/// How a run ended, for [`crate::Store::seal_run`].
#[derive(Debug)]
pub struct RunEnd {
    /// A final status (not `running`).
    pub status: RunStatus,
    pub output: Option<Stored>,
    pub error: Option<RunError>,
    pub finished_at_us: i64,
}

fn log_row(line: LogLine) -> LogRow {
    let mut message = line.message;
    if message.len() > MAX_LOG_MESSAGE {
        let mut end = MAX_LOG_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" [truncated]");
    }
    LogRow {
        run_id: line.run_id,
        node: line.node.into(),
        lineage: line.lineage.into(),
        level: line.level.into(),
        message: message.into(),
        at_us: line.at_us,
    }
}

/// The column text of a stored value: inline JSON as is, a blob as "@" + hash.
pub(crate) fn db_text(blobs: &Blobs, stored: Stored) -> Result<Arc<str>> {
    match stored {
        // Moved into its column, not copied (`column_text` borrows).
        Stored::Inline(text) => {
            check_inline(&text)?;
            Ok(text.into())
        }
        other => Ok(column_text(blobs, &other)?.into()),
    }
}

/// [`db_text`] borrowing the value: inline JSON (most values) is not copied.
pub(crate) fn column_text<'a>(
    blobs: &Blobs,
    stored: &'a Stored,
) -> Result<std::borrow::Cow<'a, str>> {
    use std::borrow::Cow;
    match stored {
        Stored::Inline(text) => {
            check_inline(text)?;
            Ok(Cow::Borrowed(text))
        }
        Stored::Ref(r) => Ok(Cow::Owned(format!("^{}", ref_text(r)))),
        Stored::Refs(outputs) => {
            let pairs: Vec<(&str, String)> = outputs
                .iter()
                .map(|(port, r)| (port.as_str(), ref_text(r)))
                .collect();
            let json = serde_json::to_string(&pairs).map_err(Error::InvalidJson)?;
            Ok(Cow::Owned(format!("^^{json}")))
        }
        Stored::Blob(hash) => {
            check_hash(hash)?;
            Ok(Cow::Owned(format!("@{hash}")))
        }
        Stored::Loaded(v) => Ok(Cow::Owned(
            column_text(blobs, &blobs.store_value(v)?)?.into_owned(),
        )),
    }
}

/// Inline JSON never looks like a blob (`@`) or a reference (`^`).
fn check_inline(text: &str) -> Result<()> {
    if text.is_empty() || text.starts_with('@') || text.starts_with('^') {
        return Err(Error::InvalidInline);
    }
    Ok(())
}

/// A reference as journal columns write it: `input`, or `<seq>/<port>`.
fn ref_text(r: &ValueRef) -> String {
    match r {
        ValueRef::RunInput => "input".to_string(),
        ValueRef::Output { seq, port } => format!("{seq}/{port}"),
    }
}

/// Reads back what [`ref_text`] wrote.
pub(crate) fn parse_ref(text: &str) -> Option<ValueRef> {
    if text == "input" {
        return Some(ValueRef::RunInput);
    }
    let (seq, port) = text.split_once('/')?;
    Some(ValueRef::Output {
        seq: seq.parse().ok()?,
        port: port.to_string(),
    })
}

/// Whether journal column text refers to the run's input.
pub(crate) fn refers_to_input(text: &str) -> bool {
    text == "^input" || (text.starts_with("^^") && text.contains("\"input\""))
}

/// Resolves column text written by [`db_text`].
/// An error as its column holds it (JSON).
pub(crate) fn error_text(e: &RunError) -> Result<Arc<str>> {
    Ok(Arc::from(
        serde_json::to_string(e).map_err(Error::InvalidJson)?,
    ))
}

pub(crate) fn resolve_text(blobs: &Blobs, text: &str) -> Result<Value> {
    match text.strip_prefix('@') {
        Some(hash) => blobs.load_value(hash),
        None => serde_json::from_str(text).map_err(Error::InvalidJson),
    }
}

type Waiter = oneshot::Sender<Result<()>>;

/// A queued record's commit (see [`Journal::append_committed`]).
#[derive(Debug)]
pub struct Committed(oneshot::Receiver<Result<()>>);

impl Committed {
    /// Waits until the record is committed.
    pub async fn wait(self) -> Result<()> {
        self.0.await.map_err(|_| Error::WriterClosed)?
    }
}

/// What handles send to the writer. Text is `Arc<str>` so the writer can bind
/// it without copying and still keep the batch for a retry.
#[derive(Debug)]
pub(crate) enum Command {
    CreateRun(RunInsert, Waiter),
    /// A record; with a waiter, told once it is committed (or lost).
    Append(JournalRow, Option<Waiter>),
    Log(LogRow),
    Finish(FinishRun, Waiter),
    /// A whole run that has ended (see [`Journal::seal_run`]).
    Seal(Box<Sealed>, Waiter),
    Flush(Waiter),
    /// Retention: delete finished runs and the definitions they alone
    /// pinned; or return free pages to the OS (see [`Prune`]).
    Prune(Arc<Prune>, Waiter),
    /// A write that only tests storage (see [`Journal::probe`]).
    Probe(Waiter),
    /// An approval step waits (see [`Journal::open_wait`]).
    OpenWait(Box<Wait>),
    /// An approval step was decided (see [`Journal::close_wait`]).
    CloseWait(WaitKey),
    /// A run parks (`Some(since)`) or is taken up again (`None`).
    Park(Arc<str>, Option<i64>, Waiter),
}

/// An approval step waiting for its decision: a `waits` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    pub key: WaitKey,
    /// When it started waiting (unix µs).
    pub since_us: i64,
    /// When its timeout fires (unix µs); None: never.
    pub deadline_us: Option<i64>,
    /// What is asked.
    pub message: Option<String>,
}

/// Which step waits: a run's approval node, in a lineage and activation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitKey {
    pub run_id: Arc<str>,
    pub node: Arc<str>,
    pub lineage: Arc<str>,
    pub activation: Arc<str>,
}

/// A retention step the writer carries out in its queue order, so it never
/// waits for the database lock against the journal (see `store/retention.rs`).
#[derive(Debug, Default)]
pub(crate) struct Prune {
    /// Runs to delete, with their steps and logs (only if finished, and not
    /// the child of a run in progress), each with the hash of the stored
    /// definition it pins: a definition goes once no run pins it.
    pub runs: Vec<(Arc<str>, Option<Arc<str>>)>,
    /// Free pages to give back to the OS (`PRAGMA incremental_vacuum`).
    pub vacuum_pages: u32,
    /// What the last (committed) execution did: runs and definitions
    /// deleted, pages returned. Set, not added: a batch retried command by
    /// command runs it again.
    pub deleted_runs: std::sync::atomic::AtomicU64,
    pub deleted_definitions: std::sync::atomic::AtomicU64,
    pub returned_pages: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
pub(crate) struct Sealed {
    pub run: RunInsert,
    /// Its journal, packed into the run row (see `journal/packed.rs`).
    pub steps: String,
    pub logs: Vec<LogRow>,
    pub finish: FinishRun,
}

#[derive(Debug)]
pub(crate) struct RunInsert {
    pub id: Arc<str>,
    pub workflow_id: Arc<str>,
    pub definition: Arc<str>,
    pub definition_hash: Arc<str>,
    pub trigger: Arc<str>,
    pub input: Arc<str>,
    pub created_at_us: i64,
    pub parent_run: Option<Arc<str>>,
    pub doc_version: Option<Arc<str>>,
    pub draft: bool,
    pub executor: sluice_api::RunOn,
}

#[derive(Debug)]
pub(crate) struct JournalRow {
    pub run_id: Arc<str>,
    pub seq: i64,
    pub kind: i64,
    pub node: Arc<str>,
    pub lineage: Arc<str>,
    pub activation: Arc<str>,
    pub attempt: i64,
    pub at_us: i64,
    pub data: Option<Arc<str>>,
    pub input: Option<Arc<str>>,
    pub error: Option<Arc<str>>,
    pub duration_us: Option<i64>,
}

#[derive(Debug)]
pub(crate) struct LogRow {
    pub run_id: Arc<str>,
    pub node: Arc<str>,
    pub lineage: Arc<str>,
    pub level: Arc<str>,
    pub message: Arc<str>,
    pub at_us: i64,
}

#[derive(Debug)]
pub(crate) struct FinishRun {
    pub run_id: Arc<str>,
    pub status: &'static str,
    pub output: Option<Arc<str>>,
    pub error: Option<Arc<str>>,
    pub finished_at_us: i64,
}
