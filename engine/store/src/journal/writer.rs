//! The group-commit journal writer: one thread owning one connection.
//!
//! It waits for a command, takes everything else already queued (up to
//! [`MAX_BATCH`]), writes the lot in one transaction, commits (one fsync for
//! the whole batch), then answers the batch's waiters. If the batch fails,
//! it is retried in one transaction command by command, each under a
//! savepoint, so one bad command (a duplicate seq, a record for an unknown
//! run) fails alone instead of taking other runs' writes with it.
//!
//! The connection is opened (and migrated) by sqlx; the writer then locks
//! its handle out of sqlx for good and drives SQLite directly from a thread
//! of its own (see `sqlite.rs`): each row is one run of a statement
//! prepared once, its values bound where they lie, with no hop to sqlx's
//! worker thread per statement and no tokio worker blocked on the fsync.

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use sqlx::SqliteConnection;
use tokio::sync::mpsc;

use super::sqlite::{Db, SqliteError, Stmt};
use super::{
    Command, FinishRun, Health, Journal, JournalRow, LogRow, Prune, RunInsert, Sealed, Waiter,
};
use crate::blobs::Blobs;
use crate::{Error, Result};

/// Queue capacity: appends wait (backpressure) when this many are pending.
const QUEUE: usize = 16 * 1024;
/// Most commands written in one transaction.
const MAX_BATCH: usize = 4096;
/// Commands after which the writer checkpoints the WAL. SQLite would
/// checkpoint inside a commit (every 1,000 pages), holding the batch's
/// waiters behind the checkpoint's copying and fsync; the writer does it
/// after answering them.
///
/// Each checkpoint stalls the writer (the copy, then the database file's
/// fsync), which sets the webhook's p99. Measured under load
/// (docs/benchmarks.md, seventh sitting): every 4,096 or 16,384 commands
/// the p99 grows 1.5–5×, every 64 or 256 it does not shrink. A checkpoint
/// from another connection, beside the writer, never catches up with it:
/// the WAL is never restarted and grew by ~100 MB a second.
const CHECKPOINT_EVERY: usize = 1024;
/// Definition hashes the writer remembers as stored (then it forgets them
/// all and learns again; a forgotten one costs one INSERT OR IGNORE).
const KNOWN_DEFINITIONS: usize = 1024;

pub(crate) fn spawn_writer(conn: SqliteConnection, blobs: Blobs) -> Journal {
    let (tx, rx) = mpsc::channel(QUEUE);
    let health = blobs.health();
    let writer_health = health.clone();
    // Detached on purpose: the thread ends when the last handle is dropped,
    // after committing what was queued.
    let spawned = std::thread::Builder::new()
        .name("sluice-journal".into())
        .spawn(move || writer_thread(conn, rx, writer_health));
    if let Err(e) = spawned {
        // `rx` is gone with the closure: every write fails as WriterClosed.
        tracing::error!(error = %e, "could not start the journal writer");
    }
    Journal::new(tx, blobs, health)
}

fn writer_thread(mut conn: SqliteConnection, rx: mpsc::Receiver<Command>, health: Arc<Health>) {
    let locked = Db::with_locked(&mut conn, |db| match Statements::prepare(db) {
        Ok(statements) => Writer::new(db, statements, rx, health).run(),
        Err(e) => tracing::error!(error = %e, "could not prepare the journal's statements"),
    });
    if let Err(e) = locked {
        tracing::error!(error = %e, "could not lock the journal connection");
    }
    if let Err(e) = futures::executor::block_on(sqlx::Connection::close(conn)) {
        tracing::warn!(error = %e, "closing the journal connection");
    }
}

/// The writer's statements, prepared once.
struct Statements<'db> {
    /// A batch's BEGIN IMMEDIATE and COMMIT, prepared like the rest: run
    /// through `exec`, each commit parsed and planned both again.
    begin: Stmt<'db>,
    commit: Stmt<'db>,
    definition: Stmt<'db>,
    run: Stmt<'db>,
    record: Stmt<'db>,
    log: Stmt<'db>,
    finish: Stmt<'db>,
    delete_run: Stmt<'db>,
    delete_definition: Stmt<'db>,
    pin: Stmt<'db>,
    drop_pins: Stmt<'db>,
    open_wait: Stmt<'db>,
    close_wait: Stmt<'db>,
    close_waits: Stmt<'db>,
    park: Stmt<'db>,
}

impl<'db> Statements<'db> {
    fn prepare(db: &'db Db) -> Result<Statements<'db>, SqliteError> {
        Ok(Statements {
            begin: db.prepare("BEGIN IMMEDIATE")?,
            commit: db.prepare("COMMIT")?,
            definition: db.prepare("INSERT OR IGNORE INTO definitions (hash, text) VALUES (?, ?)")?,
            run: db.prepare(
                "INSERT INTO runs (id, workflow_id, definition, \"trigger\", input, created_at_us, parent_run, doc_version, draft, executor, status, output, error, finished_at_us, steps) \
                 VALUES (?, ?, '#' || ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?,
            record: db.prepare(
                "INSERT INTO journal (run_id, seq, kind, node, lineage, activation, attempt, at_us, data, error, duration_us, input) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )?,
            log: db.prepare(
                "INSERT INTO logs (run_id, node, lineage, level, message, at_us) VALUES (?, ?, ?, ?, ?, ?)",
            )?,
            finish: db.prepare(
                "UPDATE runs SET status = ?, output = ?, error = ?, finished_at_us = ?, \
                 waiting_since_us = NULL WHERE id = ?",
            )?,
            open_wait: db.prepare(
                "INSERT OR IGNORE INTO waits (run_id, node, lineage, activation, since_us, deadline_us, message) \
                 VALUES (?, ?, ?, ?, ?, ?, ?)",
            )?,
            close_wait: db.prepare(
                "DELETE FROM waits WHERE run_id = ? AND node = ? AND lineage = ? AND activation = ?",
            )?,
            close_waits: db.prepare("DELETE FROM waits WHERE run_id = ?")?,
            park: db.prepare(
                "UPDATE runs SET waiting_since_us = ? WHERE id = ? AND status = 'running'",
            )?,
            // Steps and logs go with the run (ON DELETE CASCADE). Never a run
            // in progress, nor a finished child its running parent may
            // still read.
            delete_run: db.prepare(
                "DELETE FROM runs WHERE id = ?1 AND status != 'running' AND (parent_run IS NULL \
                 OR NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = runs.parent_run AND p.status = 'running'))",
            )?,
            delete_definition: db.prepare(
                "DELETE FROM definitions WHERE hash = ?1 \
                 AND NOT EXISTS (SELECT 1 FROM definition_pins WHERE hash = ?1 AND runs > 0)",
            )?,
            pin: db.prepare(
                "INSERT INTO definition_pins (hash, runs) VALUES (?1, ?2) \
                 ON CONFLICT (hash) DO UPDATE SET runs = runs + excluded.runs",
            )?,
            drop_pins: db.prepare("DELETE FROM definition_pins WHERE hash = ?1 AND runs <= 0")?,
        })
    }
}

struct Writer<'db> {
    db: &'db Db,
    st: Statements<'db>,
    rx: mpsc::Receiver<Command>,
    /// Commands written since the last checkpoint.
    since_checkpoint: usize,
    /// Hashes of definitions committed to the `definitions` table (one that
    /// retention deletes is forgotten here): a batch of runs of a known
    /// workflow skips storing its text again. Keys here and in `pins` are
    /// BLAKE3 hashes, which nobody chooses, so Fx hashes them.
    stored_definitions: FxHashSet<Arc<str>>,
    /// Changes to `definition_pins` (runs per definition hash) made by the
    /// commands written since the last [`Writer::write_pins`]: one upsert
    /// per definition per transaction, not one per run.
    pins: FxHashMap<Arc<str>, i64>,
    /// Fire-and-forget writes that failed since the last flush.
    lost_since_flush: Option<Lost>,
    /// Fire-and-forget writes that failed, per run, until its finish_run.
    lost_by_run: HashMap<Arc<str>, Lost>,
    health: Arc<Health>,
}

struct Lost {
    count: u64,
    first: Arc<Error>,
}

type Outcome = Result<()>;

impl<'db> Writer<'db> {
    fn new(
        db: &'db Db,
        st: Statements<'db>,
        rx: mpsc::Receiver<Command>,
        health: Arc<Health>,
    ) -> Writer<'db> {
        Writer {
            health,
            db,
            st,
            rx,
            since_checkpoint: 0,
            stored_definitions: FxHashSet::default(),
            pins: FxHashMap::default(),
            lost_since_flush: None,
            lost_by_run: HashMap::new(),
        }
    }

    fn run(mut self) {
        // This connection's commits no longer checkpoint by themselves.
        if let Err(e) = self.db.exec("PRAGMA wal_autocheckpoint = 0") {
            tracing::warn!(error = %e, "the journal keeps SQLite's automatic checkpoints");
        }
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while self.rx.blocking_recv_many(&mut batch, MAX_BATCH) > 0 {
            let outcomes = self.write(&batch);
            let written = batch.len();
            self.complete(batch.drain(..), outcomes);
            self.checkpoint_if_due(written);
        }
    }

    /// Copies the WAL into the database every [`CHECKPOINT_EVERY`]
    /// commands, after their batch was answered. PASSIVE: it never waits
    /// for readers, and what it cannot copy yet is copied next time.
    fn checkpoint_if_due(&mut self, written: usize) {
        self.since_checkpoint += written;
        if self.since_checkpoint < CHECKPOINT_EVERY {
            return;
        }
        self.since_checkpoint = 0;
        if let Err(e) = self.db.exec("PRAGMA wal_checkpoint(PASSIVE)") {
            tracing::warn!(error = %e, "checkpointing the journal");
        }
    }

    /// One outcome per command, in order.
    fn write(&mut self, batch: &[Command]) -> Vec<Outcome> {
        let e = match self.write_batch(batch) {
            Ok(()) => {
                self.health.committed();
                self.learn_definitions(batch);
                return batch.iter().map(|_| Ok(())).collect();
            }
            Err(e) => e,
        };
        if let WriteError::Sqlite(e) = &e {
            self.health.failed(e);
        }
        // Again command by command: the one that failed gets its own error
        // (a finish naming no run: that run is not found), the others are
        // written.
        if batch.len() > 1 {
            tracing::error!(commands = batch.len(), error = %e, "journal batch failed; retrying command by command");
        }
        match self.write_one_by_one(batch) {
            Ok(outcomes) => {
                if outcomes.iter().all(Result::is_ok) {
                    self.health.committed();
                }
                outcomes
            }
            Err(e2) => {
                tracing::error!(commands = batch.len(), error = %e2, "journal batch could not be committed");
                fail_all(batch.len(), e2)
            }
        }
    }

    /// The fast path: the whole batch in one transaction, in queue order.
    fn write_batch(&mut self, batch: &[Command]) -> Result<(), WriteError> {
        self.st.begin.run(&[])?;
        let written = batch.iter().try_for_each(|cmd| self.write_one(cmd, true));
        let written = written.and_then(|()| self.write_pins());
        match written.and_then(|()| Ok(self.st.commit.run(&[])?)) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.pins.clear();
                if self.db.in_transaction()
                    && let Err(e2) = self.db.exec("ROLLBACK")
                {
                    tracing::warn!(error = %e2, "rolling back a failed journal batch");
                }
                Err(e)
            }
        }
    }

    /// The slow path after a failed batch: in queue order, each command
    /// under its own savepoint, all in one transaction.
    fn write_one_by_one(&mut self, batch: &[Command]) -> Result<Vec<Outcome>, WriteError> {
        self.db.exec("BEGIN IMMEDIATE")?;
        let result = self.each_under_a_savepoint(batch);
        let result = result.and_then(|outcomes| {
            self.db.exec("COMMIT")?;
            Ok(outcomes)
        });
        if result.is_err() {
            self.pins.clear();
            if self.db.in_transaction()
                && let Err(e) = self.db.exec("ROLLBACK")
            {
                tracing::warn!(error = %e, "rolling back a failed journal batch");
            }
        }
        result
    }

    fn each_under_a_savepoint(&mut self, batch: &[Command]) -> Result<Vec<Outcome>, WriteError> {
        let mut outcomes = Vec::with_capacity(batch.len());
        for cmd in batch {
            if let Command::Flush(_) = cmd {
                outcomes.push(Ok(()));
                continue;
            }
            self.db.exec("SAVEPOINT one")?;
            match self.write_one(cmd, false).and_then(|()| self.write_pins()) {
                Ok(()) => {
                    self.db.exec("RELEASE one")?;
                    outcomes.push(Ok(()));
                }
                Err(e) => {
                    self.pins.clear();
                    // If SQLite already rolled back the whole transaction,
                    // this fails and so does the batch.
                    self.db.exec("ROLLBACK TO one")?;
                    self.db.exec("RELEASE one")?;
                    outcomes.push(Err(e.into_error()));
                }
            }
        }
        Ok(outcomes)
    }

    /// Writes one command. `known`: skip definitions already stored.
    fn write_one(&mut self, cmd: &Command, known: bool) -> Result<(), WriteError> {
        match cmd {
            Command::CreateRun(run, _) => self.insert_run(run, None, known),
            Command::Seal(sealed, _) => {
                let Sealed {
                    run,
                    steps,
                    logs,
                    finish,
                } = &**sealed;
                self.insert_run(run, Some((finish, steps)), known)?;
                logs.iter().try_for_each(|l| self.insert_log(l))
            }
            Command::Append(row, _) => self.insert_record(row),
            Command::Log(row) => self.insert_log(row),
            Command::Finish(finish, _) => self.finish_run(finish),
            Command::Flush(_) => Ok(()),
            Command::Prune(prune, _) => self.prune(prune),
            Command::OpenWait(w) => {
                self.st.open_wait.run(&[
                    (&*w.key.run_id).into(),
                    (&*w.key.node).into(),
                    (&*w.key.lineage).into(),
                    (&*w.key.activation).into(),
                    w.since_us.into(),
                    w.deadline_us.into(),
                    w.message.as_deref().into(),
                ])?;
                Ok(())
            }
            Command::CloseWait(k) => {
                self.st.close_wait.run(&[
                    (&*k.run_id).into(),
                    (&*k.node).into(),
                    (&*k.lineage).into(),
                    (&*k.activation).into(),
                ])?;
                Ok(())
            }
            Command::Park(run_id, since_us, _) => {
                self.st
                    .park
                    .run(&[(*since_us).into(), (&**run_id).into()])?;
                Ok(())
            }
            Command::Probe(_) => {
                let v = self.db.query_i64("PRAGMA user_version")?;
                self.db.exec(&format!("PRAGMA user_version = {v}"))?;
                Ok(())
            }
        }
    }

    /// A retention step: runs, then the definitions only they pinned
    /// (forgotten as stored, so a later run of one stores it again), then
    /// free pages.
    fn prune(&mut self, p: &Prune) -> Result<(), WriteError> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut runs = 0u64;
        for (id, pinned) in &p.runs {
            if self.st.delete_run.run(&[(&**id).into()])? > 0 {
                runs += 1;
                if let Some(hash) = pinned {
                    *self.pins.entry(hash.clone()).or_default() -= 1;
                }
            }
        }
        let unpinned: Vec<Arc<str>> = self.pins.keys().cloned().collect();
        self.write_pins()?;
        let mut definitions = 0u64;
        for hash in &unpinned {
            if self.st.delete_definition.run(&[(&**hash).into()])? > 0 {
                self.stored_definitions.remove(hash);
                definitions += 1;
            }
            self.st.drop_pins.run(&[(&**hash).into()])?;
        }
        let mut returned = 0u64;
        if p.vacuum_pages > 0 {
            let before = self.db.query_i64("PRAGMA freelist_count")?;
            self.db.exec(&format!(
                "PRAGMA incremental_vacuum({})",
                p.vacuum_pages.min(1 << 30)
            ))?;
            let after = self.db.query_i64("PRAGMA freelist_count")?;
            returned = u64::try_from(before - after).unwrap_or(0);
        }
        p.deleted_runs.store(runs, Relaxed);
        p.deleted_definitions.store(definitions, Relaxed);
        p.returned_pages.store(returned, Relaxed);
        Ok(())
    }

    /// A run row (a sealed run's with how it ended and its packed journal),
    /// and the definition it pins unless stored before (INSERT OR IGNORE
    /// for one that was).
    fn insert_run(
        &mut self,
        r: &RunInsert,
        sealed: Option<(&FinishRun, &String)>,
        known: bool,
    ) -> Result<(), WriteError> {
        let end = sealed.map(|(finish, _)| finish);
        if !(known && self.stored_definitions.contains(&r.definition_hash)) {
            self.st
                .definition
                .run(&[(&*r.definition_hash).into(), (&*r.definition).into()])?;
        }
        self.st.run.run(&[
            (&*r.id).into(),
            (&*r.workflow_id).into(),
            (&*r.definition_hash).into(),
            (&*r.trigger).into(),
            (&*r.input).into(),
            r.created_at_us.into(),
            r.parent_run.as_deref().into(),
            r.doc_version.as_deref().into(),
            i64::from(r.draft).into(),
            r.executor.as_str().into(),
            end.map_or("running", |f| f.status).into(),
            end.and_then(|f| f.output.as_deref()).into(),
            end.and_then(|f| f.error.as_deref()).into(),
            end.map(|f| f.finished_at_us).into(),
            sealed.map(|(_, steps)| steps.as_str()).into(),
        ])?;
        *self.pins.entry(r.definition_hash.clone()).or_default() += 1;
        Ok(())
    }

    /// Writes the pin changes gathered since the last call, in the
    /// transaction (or savepoint) of the commands that made them.
    fn write_pins(&mut self) -> Result<(), WriteError> {
        for (hash, n) in self.pins.drain() {
            if n != 0 {
                self.st.pin.run(&[(&*hash).into(), n.into()])?;
            }
        }
        Ok(())
    }

    fn insert_record(&mut self, r: &JournalRow) -> Result<(), WriteError> {
        self.st.record.run(&[
            (&*r.run_id).into(),
            r.seq.into(),
            r.kind.into(),
            (&*r.node).into(),
            (&*r.lineage).into(),
            (&*r.activation).into(),
            r.attempt.into(),
            r.at_us.into(),
            r.data.as_deref().into(),
            r.error.as_deref().into(),
            r.duration_us.into(),
            r.input.as_deref().into(),
        ])?;
        Ok(())
    }

    fn insert_log(&mut self, r: &LogRow) -> Result<(), WriteError> {
        self.st.log.run(&[
            (&*r.run_id).into(),
            (&*r.node).into(),
            (&*r.lineage).into(),
            (&*r.level).into(),
            (&*r.message).into(),
            r.at_us.into(),
        ])?;
        Ok(())
    }

    fn finish_run(&mut self, f: &FinishRun) -> Result<(), WriteError> {
        let changed = self.st.finish.run(&[
            f.status.into(),
            f.output.as_deref().into(),
            f.error.as_deref().into(),
            f.finished_at_us.into(),
            (&*f.run_id).into(),
        ])?;
        if changed == 0 {
            return Err(WriteError::RunNotFound(f.run_id.to_string()));
        }
        // Nothing waits in a run that has ended.
        self.st.close_waits.run(&[(&*f.run_id).into()])?;
        Ok(())
    }

    /// Remembers the definitions of a committed batch as stored.
    fn learn_definitions(&mut self, batch: &[Command]) {
        for cmd in batch {
            let run = match cmd {
                Command::CreateRun(run, _) => run,
                Command::Seal(sealed, _) => &sealed.run,
                _ => continue,
            };
            if !self.stored_definitions.contains(&run.definition_hash) {
                if self.stored_definitions.len() >= KNOWN_DEFINITIONS {
                    self.stored_definitions.clear();
                }
                self.stored_definitions.insert(run.definition_hash.clone());
            }
        }
    }

    fn complete(&mut self, batch: impl Iterator<Item = Command>, outcomes: Vec<Outcome>) {
        let mut lost_now = 0u64;
        for (cmd, outcome) in batch.zip(outcomes) {
            match cmd {
                Command::Append(JournalRow { run_id, .. }, done) => {
                    if let Some(done) = done {
                        // Its waiter learns of the loss; the run's finish too.
                        reply(done, outcome.as_ref().map(|_| ()).map_err(copy_error));
                    }
                    if let Err(e) = outcome {
                        self.lose(run_id, e);
                        lost_now += 1;
                    }
                }
                Command::Log(LogRow { run_id, .. })
                | Command::CloseWait(super::WaitKey { run_id, .. }) => {
                    if let Err(e) = outcome {
                        self.lose(run_id, e);
                        lost_now += 1;
                    }
                }
                Command::OpenWait(w) => {
                    if let Err(e) = outcome {
                        self.lose(w.key.run_id, e);
                        lost_now += 1;
                    }
                }
                Command::Park(_, _, done) => reply(done, outcome),
                Command::CreateRun(_, done)
                | Command::Seal(_, done)
                | Command::Prune(_, done)
                | Command::Probe(done) => reply(done, outcome),
                Command::Finish(finish, done) => {
                    let result =
                        outcome.and_then(|()| match self.lost_by_run.remove(&finish.run_id) {
                            Some(lost) => Err(lost.into_error()),
                            None => Ok(()),
                        });
                    reply(done, result);
                }
                Command::Flush(done) => {
                    let lost = self.lost_since_flush.take();
                    let result =
                        outcome.and_then(|()| lost.map_or(Ok(()), |l| Err(l.into_error())));
                    reply(done, result);
                }
            }
        }
        if lost_now > 0 {
            tracing::error!(
                count = lost_now,
                "queued journal writes could not be committed"
            );
        }
    }

    fn lose(&mut self, run_id: Arc<str>, e: Error) {
        let e = Arc::new(e);
        let lost = self.lost_since_flush.get_or_insert_with(|| Lost {
            count: 0,
            first: e.clone(),
        });
        lost.count += 1;
        let lost = self
            .lost_by_run
            .entry(run_id)
            .or_insert_with(|| Lost { count: 0, first: e });
        lost.count += 1;
    }
}

/// Why a write failed: SQLite refused it, or a finish named no run.
#[derive(Debug)]
enum WriteError {
    Sqlite(SqliteError),
    RunNotFound(String),
}

impl From<SqliteError> for WriteError {
    fn from(e: SqliteError) -> Self {
        WriteError::Sqlite(e)
    }
}

impl WriteError {
    fn into_error(self) -> Error {
        match self {
            WriteError::Sqlite(e) => Error::Journal(Arc::new(e)),
            WriteError::RunNotFound(id) => Error::RunNotFound(id),
        }
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Sqlite(e) => e.fmt(f),
            WriteError::RunNotFound(id) => write!(f, "run {id} not found"),
        }
    }
}

impl Lost {
    fn into_error(self) -> Error {
        Error::WritesLost {
            count: self.count,
            first: self.first,
        }
    }
}

/// The same failure for a second listener (a write's error is not `Clone`).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Journal(e) => Error::Journal(e.clone()),
        other => Error::Journal(Arc::new(SqliteError {
            code: 0,
            message: other.to_string(),
        })),
    }
}

fn reply(done: Waiter, result: Result<()>) {
    if done.send(result).is_err() {
        tracing::debug!("journal waiter went away before its write completed");
    }
}

/// Every command of a batch that could not be committed fails with its
/// error (a missing run included: nothing of the batch was written).
fn fail_all(n: usize, e: WriteError) -> Vec<Outcome> {
    let e = match e {
        WriteError::Sqlite(e) => Arc::new(e),
        WriteError::RunNotFound(id) => Arc::new(SqliteError {
            code: 0,
            message: format!("run {id} not found"),
        }),
    };
    (0..n).map(|_| Err(Error::Journal(e.clone()))).collect()
}
