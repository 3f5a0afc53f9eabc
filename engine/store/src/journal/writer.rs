//! The group-commit journal writer: one task owning one connection.
//!
//! It waits for a command, takes everything else already queued (up to
//! [`MAX_BATCH`]), writes the lot in one transaction with multi-row INSERTs,
//! commits (one fsync for the whole batch), then answers the batch's waiters.
//! If the batch fails, it is retried in one transaction command by command,
//! each under a savepoint, so one bad command (a duplicate seq, a record for
//! an unknown run) fails alone instead of taking other runs' writes with it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sqlx::{Connection, QueryBuilder, Sqlite, SqliteConnection};
use tokio::sync::mpsc;

use super::{Command, FinishRun, Journal, JournalRow, LogRow, RunInsert, Sealed, Waiter};
use crate::blobs::Blobs;
use crate::{Error, Result};

/// Queue capacity: appends wait (backpressure) when this many are pending.
const QUEUE: usize = 16 * 1024;
/// Most commands written in one transaction.
const MAX_BATCH: usize = 4096;
/// Rows per INSERT statement. A fixed set of sizes keeps the number of
/// distinct statements small, so they stay in the prepared-statement cache.
/// 500 rows x 14 columns stays far below SQLite's 32766 bind parameters.
const CHUNKS: [usize; 10] = [500, 256, 128, 64, 32, 16, 8, 4, 2, 1];
/// Commands after which the writer checkpoints the WAL. SQLite would
/// checkpoint inside a commit (every 1,000 pages), holding the batch's
/// waiters behind the checkpoint's copying and fsync; the writer does it
/// after answering them.
const CHECKPOINT_EVERY: usize = 1024;
/// Definition hashes the writer remembers as stored (then it forgets them
/// all and learns again; a forgotten one costs one INSERT OR IGNORE).
const KNOWN_DEFINITIONS: usize = 1024;

pub(crate) fn spawn_writer(conn: SqliteConnection, blobs: Blobs) -> Journal {
    let (tx, rx) = mpsc::channel(QUEUE);
    let writer = Writer {
        conn,
        rx,
        since_checkpoint: 0,
        stored_definitions: HashSet::new(),
        lost_since_flush: None,
        lost_by_run: HashMap::new(),
    };
    // Detached on purpose: the task ends when the last handle is dropped.
    drop(tokio::spawn(writer.run()));
    Journal::new(tx, blobs)
}

struct Writer {
    conn: SqliteConnection,
    rx: mpsc::Receiver<Command>,
    /// Commands written since the last checkpoint.
    since_checkpoint: usize,
    /// Hashes of definitions committed to the `definitions` table (rows
    /// there are never deleted): a batch of runs of a known workflow skips
    /// storing its text again.
    stored_definitions: HashSet<Arc<str>>,
    /// Fire-and-forget writes that failed since the last flush.
    lost_since_flush: Option<Lost>,
    /// Fire-and-forget writes that failed, per run, until its finish_run.
    lost_by_run: HashMap<Arc<str>, Lost>,
}

struct Lost {
    count: u64,
    first: Arc<Error>,
}

type Outcome = Result<()>;

impl Writer {
    async fn run(mut self) {
        // This connection's commits no longer checkpoint by themselves.
        if let Err(e) = sqlx::query("PRAGMA wal_autocheckpoint = 0")
            .execute(&mut self.conn)
            .await
        {
            tracing::warn!(error = %e, "the journal keeps SQLite's automatic checkpoints");
        }
        let mut batch = Vec::with_capacity(MAX_BATCH);
        while self.rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let outcomes = self.write(&batch).await;
            let written = batch.len();
            self.complete(batch.drain(..), outcomes);
            self.checkpoint_if_due(written).await;
        }
        if let Err(e) = self.conn.close().await {
            tracing::warn!(error = %e, "closing the journal connection");
        }
    }

    /// Copies the WAL into the database every [`CHECKPOINT_EVERY`]
    /// commands, after their batch was answered. PASSIVE: it never waits
    /// for readers, and what it cannot copy yet is copied next time.
    async fn checkpoint_if_due(&mut self, written: usize) {
        self.since_checkpoint += written;
        if self.since_checkpoint < CHECKPOINT_EVERY {
            return;
        }
        self.since_checkpoint = 0;
        if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
            .execute(&mut self.conn)
            .await
        {
            tracing::warn!(error = %e, "checkpointing the journal");
        }
    }

    /// One outcome per command, in order.
    async fn write(&mut self, batch: &[Command]) -> Vec<Outcome> {
        let e = match write_batch(&mut self.conn, batch, &self.stored_definitions).await {
            Ok(outcomes) => {
                self.learn_definitions(batch);
                return outcomes;
            }
            Err(e) => e,
        };
        if batch.len() > 1 {
            tracing::error!(commands = batch.len(), error = %e, "journal batch failed; retrying command by command");
            match write_one_by_one(&mut self.conn, batch).await {
                Ok(outcomes) => return outcomes,
                Err(e2) => {
                    tracing::error!(commands = batch.len(), error = %e2, "journal batch could not be committed");
                    return fail_all(batch.len(), e2);
                }
            }
        }
        tracing::error!(error = %e, "journal write could not be committed");
        fail_all(batch.len(), e)
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
                Command::Append(JournalRow { run_id, .. })
                | Command::Log(LogRow { run_id, .. }) => {
                    if let Err(e) = outcome {
                        self.lose(run_id, e);
                        lost_now += 1;
                    }
                }
                Command::CreateRun(_, done) | Command::Seal(_, done) => reply(done, outcome),
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

impl Lost {
    fn into_error(self) -> Error {
        Error::WritesLost {
            count: self.count,
            first: self.first,
        }
    }
}

fn reply(done: Waiter, result: Result<()>) {
    if done.send(result).is_err() {
        tracing::debug!("journal waiter went away before its write completed");
    }
}

fn fail_all(n: usize, e: sqlx::Error) -> Vec<Outcome> {
    let e = Arc::new(e);
    (0..n).map(|_| Err(Error::Journal(e.clone()))).collect()
}

/// The fast path: the whole batch in one transaction, grouped by table.
/// Reordering within the batch is safe: it commits atomically, runs are
/// inserted before the records that reference them, and finishes go last.
async fn write_batch(
    conn: &mut SqliteConnection,
    batch: &[Command],
    stored: &HashSet<Arc<str>>,
) -> Result<Vec<Outcome>, sqlx::Error> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    match write_grouped(&mut tx, batch, stored).await {
        Ok(outcomes) => {
            tx.commit().await?;
            Ok(outcomes)
        }
        Err(e) => {
            if let Err(e2) = tx.rollback().await {
                tracing::warn!(error = %e2, "rolling back a failed journal batch");
            }
            Err(e)
        }
    }
}

async fn write_grouped(
    conn: &mut SqliteConnection,
    batch: &[Command],
    stored: &HashSet<Arc<str>>,
) -> Result<Vec<Outcome>, sqlx::Error> {
    let mut runs: Vec<(&RunInsert, Option<&FinishRun>)> = Vec::new();
    let mut records: Vec<&JournalRow> = Vec::new();
    let mut logs: Vec<&LogRow> = Vec::new();
    for cmd in batch {
        match cmd {
            Command::CreateRun(run, _) => runs.push((run, None)),
            Command::Append(row) => records.push(row),
            Command::Log(row) => logs.push(row),
            Command::Seal(sealed, _) => {
                let Sealed {
                    run,
                    records: r,
                    logs: l,
                    finish,
                } = &**sealed;
                runs.push((run, Some(finish)));
                records.extend(r);
                logs.extend(l);
            }
            Command::Finish(..) | Command::Flush(_) => {}
        }
    }
    insert_runs(conn, &runs, stored).await?;
    insert_journal(conn, &records).await?;
    insert_logs(conn, &logs).await?;
    let finishes: Vec<&FinishRun> = batch
        .iter()
        .filter_map(|c| match c {
            Command::Finish(finish, _) => Some(finish),
            _ => None,
        })
        .collect();
    let mut finish_outcomes = finish_runs(conn, &finishes).await?.into_iter();
    let mut outcomes = Vec::with_capacity(batch.len());
    for cmd in batch {
        outcomes.push(match cmd {
            Command::Finish(..) => finish_outcomes.next().unwrap_or(Ok(())),
            _ => Ok(()),
        });
    }
    Ok(outcomes)
}

/// Finishes many runs with one UPDATE per chunk; a chunk that names a run
/// that does not exist is redone run by run to tell which.
async fn finish_runs(
    conn: &mut SqliteConnection,
    finishes: &[&FinishRun],
) -> Result<Vec<Outcome>, sqlx::Error> {
    let mut outcomes = Vec::with_capacity(finishes.len());
    for chunk in chunks(finishes) {
        if chunk.len() == 1 {
            outcomes.push(finish_run(conn, chunk[0]).await?);
            continue;
        }
        let mut qb = QueryBuilder::<Sqlite>::new("WITH v(id, status, output, error, fin) AS (");
        qb.push_values(chunk, |mut b, f| {
            b.push_bind(f.run_id.clone())
                .push_bind(f.status)
                .push_bind(f.output.clone())
                .push_bind(f.error.clone())
                .push_bind(f.finished_at_us);
        });
        qb.push(
            ") UPDATE runs SET status = v.status, output = v.output, error = v.error, \
             finished_at_us = v.fin FROM v WHERE runs.id = v.id",
        );
        let done = qb.build().execute(&mut *conn).await?;
        if done.rows_affected() == chunk.len() as u64 {
            outcomes.extend(chunk.iter().map(|_| Ok(())));
        } else {
            for f in chunk {
                outcomes.push(finish_run(conn, f).await?);
            }
        }
    }
    Ok(outcomes)
}

/// The slow path after a failed batch: in queue order, each command under its
/// own savepoint, all in one transaction.
async fn write_one_by_one(
    conn: &mut SqliteConnection,
    batch: &[Command],
) -> Result<Vec<Outcome>, sqlx::Error> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for cmd in batch {
        if let Command::Flush(_) = cmd {
            outcomes.push(Ok(()));
            continue;
        }
        let mut savepoint = tx.begin().await?;
        match write_one(&mut savepoint, cmd).await {
            Ok(outcome) => {
                savepoint.commit().await?;
                outcomes.push(outcome);
            }
            Err(e) => {
                // If SQLite already rolled back the whole transaction, this
                // fails and so does the batch.
                savepoint.rollback().await?;
                outcomes.push(Err(Error::Journal(Arc::new(e))));
            }
        }
    }
    tx.commit().await?;
    Ok(outcomes)
}

async fn write_one(conn: &mut SqliteConnection, cmd: &Command) -> Result<Outcome, sqlx::Error> {
    match cmd {
        Command::CreateRun(run, _) => insert_runs(conn, &[(run, None)], &HashSet::new()).await?,
        Command::Seal(sealed, _) => {
            insert_runs(
                conn,
                &[(&sealed.run, Some(&sealed.finish))],
                &HashSet::new(),
            )
            .await?;
            insert_journal(conn, &sealed.records.iter().collect::<Vec<_>>()).await?;
            insert_logs(conn, &sealed.logs.iter().collect::<Vec<_>>()).await?;
        }
        Command::Append(row) => insert_journal(conn, &[row]).await?,
        Command::Log(row) => insert_logs(conn, &[row]).await?,
        Command::Finish(finish, _) => return finish_run(conn, finish).await,
        Command::Flush(_) => {}
    }
    Ok(Ok(()))
}

/// Splits `rows` into slices whose lengths come from [`CHUNKS`].
fn chunks<T>(mut rest: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let n = CHUNKS
            .iter()
            .copied()
            .find(|&c| c <= rest.len())
            .unwrap_or(rest.len());
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

/// Inserts run rows (a sealed run's with how it ended), and the definitions
/// they pin that are not in `stored` (each distinct one once; INSERT OR
/// IGNORE for one stored before).
async fn insert_runs(
    conn: &mut SqliteConnection,
    runs: &[(&RunInsert, Option<&FinishRun>)],
    stored: &HashSet<Arc<str>>,
) -> Result<(), sqlx::Error> {
    let mut defs: Vec<&RunInsert> = Vec::new();
    for (r, _) in runs {
        if !stored.contains(&r.definition_hash)
            && !defs.iter().any(|d| d.definition_hash == r.definition_hash)
        {
            defs.push(r);
        }
    }
    for chunk in chunks(&defs) {
        let mut qb = QueryBuilder::<Sqlite>::new("INSERT OR IGNORE INTO definitions (hash, text) ");
        qb.push_values(chunk, |mut b, r| {
            b.push_bind(r.definition_hash.clone())
                .push_bind(r.definition.clone());
        });
        qb.build().execute(&mut *conn).await?;
    }
    for chunk in chunks(runs) {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO runs (id, workflow_id, definition, \"trigger\", input, created_at_us, parent_run, doc_version, draft, executor, status, output, error, finished_at_us) ",
        );
        qb.push_values(chunk, |mut b, (r, end)| {
            b.push_bind(r.id.clone())
                .push_bind(r.workflow_id.clone())
                .push_bind(format!("#{}", r.definition_hash))
                .push_bind(r.trigger.clone())
                .push_bind(r.input.clone())
                .push_bind(r.created_at_us)
                .push_bind(r.parent_run.clone())
                .push_bind(r.doc_version.clone())
                .push_bind(r.draft)
                .push_bind(r.executor.as_str())
                .push_bind(end.map_or("running", |f| f.status))
                .push_bind(end.and_then(|f| f.output.clone()))
                .push_bind(end.and_then(|f| f.error.clone()))
                .push_bind(end.map(|f| f.finished_at_us));
        });
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_journal(
    conn: &mut SqliteConnection,
    rows: &[&JournalRow],
) -> Result<(), sqlx::Error> {
    for chunk in chunks(rows) {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO journal (run_id, seq, kind, node, lineage, activation, attempt, at_us, data, error, duration_us, input) ",
        );
        qb.push_values(chunk, |mut b, r| {
            b.push_bind(r.run_id.clone())
                .push_bind(r.seq)
                .push_bind(r.kind)
                .push_bind(r.node.clone())
                .push_bind(r.lineage.clone())
                .push_bind(r.activation.clone())
                .push_bind(r.attempt)
                .push_bind(r.at_us)
                .push_bind(r.data.clone())
                .push_bind(r.error.clone())
                .push_bind(r.duration_us)
                .push_bind(r.input.clone());
        });
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn insert_logs(conn: &mut SqliteConnection, rows: &[&LogRow]) -> Result<(), sqlx::Error> {
    for chunk in chunks(rows) {
        let mut qb = QueryBuilder::<Sqlite>::new(
            "INSERT INTO logs (run_id, node, lineage, level, message, at_us) ",
        );
        qb.push_values(chunk, |mut b, r| {
            b.push_bind(r.run_id.clone())
                .push_bind(r.node.clone())
                .push_bind(r.lineage.clone())
                .push_bind(r.level.clone())
                .push_bind(r.message.clone())
                .push_bind(r.at_us);
        });
        qb.build().execute(&mut *conn).await?;
    }
    Ok(())
}

async fn finish_run(conn: &mut SqliteConnection, f: &FinishRun) -> Result<Outcome, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE runs SET status = ?, output = ?, error = ?, finished_at_us = ? WHERE id = ?",
    )
    .bind(f.status)
    .bind(f.output.clone())
    .bind(f.error.clone())
    .bind(f.finished_at_us)
    .bind(f.run_id.clone())
    .execute(&mut *conn)
    .await?;
    Ok(if done.rows_affected() == 0 {
        Err(Error::RunNotFound(f.run_id.to_string()))
    } else {
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_use_fixed_sizes_and_cover_everything() {
        let rows: Vec<u32> = (0..1234).collect();
        let sizes: Vec<usize> = chunks(&rows).map(<[u32]>::len).collect();
        assert_eq!(sizes, [500, 500, 128, 64, 32, 8, 2]);
        assert!(sizes.iter().all(|s| CHUNKS.contains(s)));
        assert_eq!(chunks::<u32>(&[]).count(), 0);
    }
}
