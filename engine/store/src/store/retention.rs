//! Retention (migration 0011): which finished runs a retention lets go,
//! deleting them through the journal writer (in its queue order, so the
//! journal never waits for the database lock), collecting blobs no kept
//! value refers to, giving free pages back to the OS, and what the data dir
//! holds.

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime};

use futures::TryStreamExt;
use sluice_api::Retention;

use super::Store;
use crate::journal::Prune;
use crate::{Error, Result};

/// Finished runs a retention lets go (see [`Store::prunable_runs`]).
#[derive(Debug, Default, Clone)]
pub struct Prunable {
    /// Each run's id and the hash of the stored definition it pins (none
    /// for a row from before definitions were stored apart).
    pub runs: Vec<(Arc<str>, Option<Arc<str>>)>,
}

/// Where retention cuts a workflow's runs (see [`Store::cutoffs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    /// No run started after this goes.
    upto: i64,
    /// The newest run beyond `keep_max`: its start and rowid.
    max_at: i64,
    max_rowid: i64,
    /// Finished (not failed) runs started before this go.
    ok_before: i64,
    failed_before: i64,
}

/// What [`Store::delete_runs`] deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    pub runs: u64,
    pub definitions: u64,
}

/// What [`Store::collect_blobs`] removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collected {
    pub blobs: u64,
    pub bytes: u64,
}

/// The database and blob store as [`Store::storage`] finds them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StorageFacts {
    pub page_size: u64,
    pub pages: u64,
    pub free_pages: u64,
    pub wal_bytes: u64,
    /// `PRAGMA auto_vacuum` is incremental: free pages can go back to the OS.
    pub incremental: bool,
    pub blobs: u64,
    pub blob_bytes: u64,
    pub runs: u64,
    pub running: u64,
    pub oldest_started_at_us: Option<i64>,
    /// Runs kept per workflow, most first.
    pub by_workflow: Vec<(String, u64)>,
}

/// Blob files are only collected once older than this (their modification
/// time, refreshed whenever a value stored again finds its blob there): a
/// value stored but not yet committed, or a module uploaded for a workflow
/// not yet saved, keeps its blob.
pub const BLOB_GRACE: Duration = Duration::from_secs(60 * 60);

/// Where a value column is scanned for blob references; `true`: the column
/// holds packed records (`runs.steps`, see `journal/packed.rs`), whose value
/// texts are scanned (in it, a blob is `"@<hash>"`, a `$blob` escaped).
const VALUE_SCANS: &[(&str, bool)] = &[
    (
        "SELECT input, output FROM runs WHERE input LIKE '@%' OR instr(input, '\"$blob\"') > 0 \
         OR output LIKE '@%' OR instr(output, '\"$blob\"') > 0",
        false,
    ),
    (
        "SELECT data, input FROM journal WHERE data LIKE '@%' OR instr(data, '\"$blob\"') > 0 \
         OR input LIKE '@%' OR instr(input, '\"$blob\"') > 0",
        false,
    ),
    (
        "SELECT steps, NULL FROM runs WHERE instr(steps, '\"@') > 0 OR instr(steps, '$blob') > 0",
        true,
    ),
];

/// Workflow texts: any hash in them is a reference (a `code.wasm` module,
/// a `$blob` in a config).
const DEFINITION_SCANS: &[&str] = &[
    "SELECT definition, published_definition FROM workflows",
    "SELECT text, NULL FROM definitions",
];

impl Store {
    /// The workflows that have runs kept (including deleted workflows'),
    /// by id; a skip-scan of the `runs_workflow` index.
    pub async fn workflows_with_runs(&self) -> Result<Vec<String>> {
        let ids: Vec<Option<String>> = sqlx::query_scalar(
            "WITH RECURSIVE w(id) AS (SELECT MIN(workflow_id) FROM runs \
             UNION ALL SELECT (SELECT MIN(workflow_id) FROM runs WHERE workflow_id > w.id) \
             FROM w WHERE w.id IS NOT NULL) SELECT id FROM w",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        Ok(ids.into_iter().flatten().collect())
    }

    /// Where `retention` cuts `workflow`'s runs at `now_us`: beyond its
    /// newest `keep_max` (as of now: runs that come later do not move the
    /// cut until the next pass), or started longer ago than `keep_for`
    /// (`keep_failed_for` for failed runs). None: nothing can go.
    pub async fn cutoffs(
        &self,
        workflow: &str,
        retention: &Retention,
        now_us: i64,
    ) -> Result<Option<Cutoffs>> {
        let before = |keep: sluice_api::KeepFor| match keep.span() {
            None => i64::MIN,
            Some(d) => now_us.saturating_sub(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
        };
        let (ok_before, failed_before) = (
            before(retention.keep_for),
            before(retention.keep_failed_for),
        );
        // The newest run beyond keep_max (runs in progress count: they are
        // few, and will be kept runs soon).
        let (max_at, max_rowid) = match retention.keep_max.limit() {
            None => (i64::MIN, i64::MIN),
            Some(n) => sqlx::query_as::<_, (i64, i64)>(
                "SELECT created_at_us, rowid FROM runs INDEXED BY runs_workflow WHERE workflow_id = ? \
                 ORDER BY created_at_us DESC, rowid DESC LIMIT 1 OFFSET ?",
            )
            .bind(workflow)
            .bind(i64::try_from(n).unwrap_or(i64::MAX))
            .fetch_optional(&self.inner.pool)
            .await?
            .unwrap_or((i64::MIN, i64::MIN)),
        };
        let upto = max_at
            .max(ok_before.saturating_sub(1))
            .max(failed_before.saturating_sub(1));
        Ok((upto != i64::MIN).then_some(Cutoffs {
            upto,
            max_at,
            max_rowid,
            ok_before,
            failed_before,
        }))
    }

    /// Up to `limit` finished runs of `workflow` past `cut`, oldest first.
    /// Never a run in progress, nor the finished child of one.
    pub async fn prunable_runs(
        &self,
        workflow: &str,
        cut: &Cutoffs,
        limit: u32,
    ) -> Result<Prunable> {
        let Cutoffs {
            upto,
            max_at,
            max_rowid,
            ok_before,
            failed_before,
        } = *cut;
        let rows: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT id, CASE WHEN definition LIKE '#%' THEN substr(definition, 2) END FROM runs INDEXED BY runs_workflow \
             WHERE workflow_id = ?1 AND created_at_us <= ?2 AND status != 'running' \
             AND ((created_at_us < ?3 OR (created_at_us = ?3 AND rowid <= ?4)) \
                  OR (status != 'failed' AND created_at_us < ?5) \
                  OR (status = 'failed' AND created_at_us < ?6)) \
             AND (parent_run IS NULL OR NOT EXISTS \
                  (SELECT 1 FROM runs p WHERE p.id = runs.parent_run AND p.status = 'running')) \
             ORDER BY created_at_us, rowid LIMIT ?7",
        )
        .bind(workflow)
        .bind(upto)
        .bind(max_at)
        .bind(max_rowid)
        .bind(ok_before)
        .bind(failed_before)
        .bind(i64::from(limit))
        .fetch_all(&self.inner.pool)
        .await?;
        let runs = rows
            .into_iter()
            .map(|(id, hash)| (Arc::from(id), hash.map(Arc::from)))
            .collect();
        Ok(Prunable { runs })
    }

    /// Deletes finished runs with their steps and logs, and the pinned
    /// definitions no other run needs, in one journal transaction. A run
    /// that is in progress again (resumed since it was chosen) stays.
    pub async fn delete_runs(&self, prunable: Prunable) -> Result<Deleted> {
        if prunable.runs.is_empty() {
            return Ok(Deleted::default());
        }
        let prune = Arc::new(Prune {
            runs: prunable.runs,
            ..Prune::default()
        });
        self.inner.journal.prune(prune.clone()).await?;
        Ok(Deleted {
            runs: prune.deleted_runs.load(Relaxed),
            definitions: prune.deleted_definitions.load(Relaxed),
        })
    }

    /// Gives up to `pages` free database pages back to the OS (in a
    /// database with incremental auto-vacuum; 0 otherwise). Returns the
    /// bytes returned.
    pub async fn return_free_pages(&self, pages: u32) -> Result<u64> {
        let prune = Arc::new(Prune {
            vacuum_pages: pages,
            ..Prune::default()
        });
        self.inner.journal.prune(prune.clone()).await?;
        let page_size: i64 = sqlx::query_scalar("PRAGMA page_size")
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(prune.returned_pages.load(Relaxed) * u64::try_from(page_size).unwrap_or(0))
    }

    /// Free pages in the database file.
    pub async fn free_pages(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("PRAGMA freelist_count")
            .fetch_one(&self.inner.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Removes blob files no kept value, workflow or pinned version refers
    /// to, and that nothing stored for [`BLOB_GRACE`]. WebAssembly modules
    /// are kept (an old version of a workflow may name one). Scans only
    /// when there is an old enough blob to collect.
    pub async fn collect_blobs(&self) -> Result<Collected> {
        self.collect_blobs_older_than(BLOB_GRACE).await
    }

    /// [`Store::collect_blobs`] with another grace (tests).
    pub async fn collect_blobs_older_than(&self, grace: Duration) -> Result<Collected> {
        let cutoff = SystemTime::now()
            .checked_sub(grace)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let blobs = self.inner.blobs.clone();
        let old = tokio::task::spawn_blocking(move || blobs.files_older_than(cutoff)).await??;
        if old.is_empty() {
            return Ok(Collected::default());
        }
        let mut marked = HashSet::new();
        let mut values = HashSet::new();
        for (sql, packed) in VALUE_SCANS {
            let mut rows =
                sqlx::query_as::<_, (Option<String>, Option<String>)>(*sql).fetch(&self.inner.pool);
            while let Some((a, b)) = rows.try_next().await? {
                let texts: Vec<String> = if *packed {
                    a.as_deref()
                        .map(crate::journal::packed::value_texts)
                        .unwrap_or_default()
                } else {
                    [a, b].into_iter().flatten().collect()
                };
                for text in texts {
                    match text.strip_prefix('@') {
                        Some(hash) => {
                            values.insert(hash.to_string());
                        }
                        None => blob_refs(&text, &mut marked),
                    }
                }
            }
        }
        for sql in DEFINITION_SCANS {
            let mut rows =
                sqlx::query_as::<_, (Option<String>, Option<String>)>(*sql).fetch(&self.inner.pool);
            while let Some((a, b)) = rows.try_next().await? {
                for text in [a, b].into_iter().flatten() {
                    hashes_in(&text, &mut marked);
                }
            }
        }
        let blobs = self.inner.blobs.clone();
        tokio::task::spawn_blocking(move || {
            // A large value's blob is JSON that may hold references itself.
            for hash in values {
                if let Ok(path) = blobs.blob_path(&hash) {
                    scan_file(&path, &mut marked);
                }
                marked.insert(hash);
            }
            let mut collected = Collected::default();
            for (hash, path, size) in old {
                if marked.contains(&hash) || is_module(&path) {
                    continue;
                }
                match std::fs::remove_file(&path) {
                    Ok(()) => {
                        collected.blobs += 1;
                        collected.bytes += size;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => return Err(Error::Io { path, source }),
                }
            }
            Ok(collected)
        })
        .await?
    }

    /// Rewrites the database without free pages, with incremental
    /// auto-vacuum from now on. Takes the database for its whole run (the
    /// caller holds the data dir's lock: no engine is running).
    pub async fn compact(&self) -> Result<()> {
        self.inner.journal.flush().await?;
        let mut conn = self.inner.pool.acquire().await?;
        sqlx::query("PRAGMA auto_vacuum = INCREMENTAL")
            .execute(&mut *conn)
            .await?;
        sqlx::query("VACUUM").execute(&mut *conn).await?;
        sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Writes a consistent copy of the database to `dest` (a new file),
    /// everything committed so far included, while writers go on (SQLite's
    /// `VACUUM INTO`: one read transaction).
    pub async fn snapshot_into(&self, dest: &std::path::Path) -> Result<()> {
        self.inner.journal.flush().await?;
        let dest = dest.to_str().ok_or_else(|| Error::Io {
            path: dest.to_path_buf(),
            source: std::io::Error::other("the path is not UTF-8"),
        })?;
        sqlx::query("VACUUM INTO ?")
            .bind(dest)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }

    /// `PRAGMA integrity_check`: "ok", or what is wrong.
    pub async fn integrity_check(&self) -> Result<String> {
        let rows: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_all(&self.inner.pool)
            .await?;
        Ok(rows.join("; "))
    }

    /// The vault key (hex) for a backup that asks for it: from `vault.key`
    /// or the OS keyring; None when no credential was ever stored.
    pub async fn vault_key(&self) -> Result<Option<String>> {
        let dir = self.inner.dir.clone();
        tokio::task::spawn_blocking(move || crate::vault::key_hex(&dir)).await?
    }

    /// What the data dir holds: database pages, WAL, blobs, runs.
    pub async fn storage(&self) -> Result<StorageFacts> {
        let pool = &self.inner.pool;
        let pragma = |name: &'static str| async move {
            sqlx::query_scalar::<_, i64>(name)
                .fetch_one(pool)
                .await
                .map(|n| u64::try_from(n).unwrap_or(0))
        };
        let page_size = pragma("PRAGMA page_size").await?;
        let pages = pragma("PRAGMA page_count").await?;
        let free_pages = pragma("PRAGMA freelist_count").await?;
        let incremental = pragma("PRAGMA auto_vacuum").await? == 2;
        let runs = pragma("SELECT COUNT(*) FROM runs").await?;
        let running = pragma("SELECT COUNT(*) FROM runs WHERE status = 'running'").await?;
        let oldest_started_at_us: Option<i64> =
            sqlx::query_scalar("SELECT MIN(created_at_us) FROM runs")
                .fetch_one(pool)
                .await?;
        let mut by_workflow: Vec<(String, i64)> = sqlx::query_as(
            "SELECT workflow_id, COUNT(*) FROM runs INDEXED BY runs_workflow GROUP BY workflow_id",
        )
        .fetch_all(pool)
        .await?;
        by_workflow.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let wal = self.inner.dir.join("sluice.db-wal");
        let blobs = self.inner.blobs.clone();
        let (wal_bytes, (blob_count, blob_bytes)) = tokio::task::spawn_blocking(move || {
            let wal = std::fs::metadata(&wal).map_or(0, |m| m.len());
            (wal, blobs.usage())
        })
        .await?;
        Ok(StorageFacts {
            page_size,
            pages,
            free_pages,
            wal_bytes,
            incremental,
            blobs: blob_count,
            blob_bytes,
            runs,
            running,
            oldest_started_at_us,
            by_workflow: by_workflow
                .into_iter()
                .map(|(w, n)| (w, u64::try_from(n).unwrap_or(0)))
                .collect(),
        })
    }
}

/// The hashes of every `{"$blob": "<hash>"}` in JSON text.
fn blob_refs(text: &str, out: &mut HashSet<String>) {
    const KEY: &str = "\"$blob\"";
    let mut rest = text;
    while let Some(at) = rest.find(KEY) {
        rest = &rest[at + KEY.len()..];
        let value = rest.trim_start().strip_prefix(':').map(str::trim_start);
        if let Some(hash) = value
            .and_then(|v| v.strip_prefix('"'))
            .and_then(|v| v.get(..64))
            .filter(|h| is_hash(h))
        {
            out.insert(hash.to_string());
        }
    }
}

/// Every run of 64 lowercase hex characters in `text`.
fn hashes_in(text: &str, out: &mut HashSet<String>) {
    let bytes = text.as_bytes();
    let mut start = None;
    for (i, b) in bytes.iter().chain(std::iter::once(&b' ')).enumerate() {
        let hex = b.is_ascii_digit() || (b'a'..=b'f').contains(b);
        match (hex, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                if i - s == 64 {
                    out.insert(text[s..i].to_string());
                }
                start = None;
            }
            _ => {}
        }
    }
}

fn is_hash(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Blob references inside a value's blob file, read in pieces (a large
/// value is never held whole).
fn scan_file(path: &Path, out: &mut HashSet<String>) {
    let Ok(mut file) = std::fs::File::open(path) else {
        return;
    };
    let mut buf = vec![0u8; 256 * 1024];
    let mut carry = String::new();
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        carry.push_str(&String::from_utf8_lossy(&buf[..n]));
        blob_refs(&carry, out);
        // Keep a tail long enough to hold a reference cut in two.
        let keep = carry.len().saturating_sub(128);
        let cut = (keep..carry.len())
            .find(|i| carry.is_char_boundary(*i))
            .unwrap_or(carry.len());
        carry.drain(..cut);
    }
}

/// A WebAssembly module (binary or text): kept, whatever refers to it.
fn is_module(path: &Path) -> bool {
    let mut head = [0u8; 10];
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    let n = f.read(&mut head).unwrap_or(0);
    head[..n].starts_with(b"\0asm")
        || head[..n].starts_with(b"(module")
        || head[..n].starts_with(b"(component")
}
