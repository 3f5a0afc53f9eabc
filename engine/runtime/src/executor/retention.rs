//! Retention of run history: a pass over every workflow with runs deletes
//! the finished runs its retention lets go (`config.toml [runs]`, under a
//! workflow's published `settings.runs`), a few at a time through the
//! journal writer so webhooks never wait behind it; then collects blobs no
//! kept value refers to, and gives free pages back to the OS.
//! [`Engine::keep_pruning`] repeats it while the engine serves.

use std::time::{Duration, Instant};

use sluice_api::storage::{BlobsSize, DatabaseSize, RunCounts, WorkflowRetention, WorkflowRuns};
use sluice_api::{PruneReport, Retention, StorageReport};

use super::{Engine, Result, nodes};

/// Runs deleted per journal command: small enough that a group commit
/// queued behind it waits well under a millisecond.
const RUNS_PER_BATCH: u32 = 64;

/// Free pages given back per journal command (4 MiB of 4 KiB pages).
const PAGES_PER_STEP: u32 = 1024;

/// The shortest `[runs] prune_every` and `blob_grace` honoured.
const MIN_PRUNE_EVERY: Duration = Duration::from_secs(1);
const MIN_BLOB_GRACE: Duration = Duration::from_secs(60);

/// The shortest pause between batches, so a pass that has much to delete
/// shares the writer instead of keeping it busy.
const BETWEEN_BATCHES: Duration = Duration::from_millis(2);

impl Engine {
    /// The retention of `workflow`'s runs: its published `settings.runs`
    /// over `config.toml [runs]`.
    pub async fn retention_of(&self, workflow: &str) -> Result<Retention> {
        let defaults = self.settings().retention();
        let published = self.inner.store.get_published(workflow).await?;
        Ok(match published.flatten() {
            Some((text, _)) => defaults.with(&runs_override(&text)),
            None => defaults,
        })
    }

    /// One pass: deletes what retention lets go in every workflow, then
    /// (`collect_blobs`) the blobs nothing refers to any more, then gives
    /// free pages back.
    pub async fn prune(&self, collect_blobs: bool) -> Result<PruneReport> {
        // One pass at a time (the engine's own and one asked for through
        // the API or the CLI): two would pick the same runs.
        let _one = self.inner.prune_lock.lock().await;
        let started = Instant::now();
        let store = &self.inner.store;
        let mut report = PruneReport::default();
        let now = nodes::now_us();
        for workflow in store.workflows_with_runs().await? {
            let retention = self.retention_of(&workflow).await?;
            let Some(cut) = store.cutoffs(&workflow, &retention, now).await? else {
                continue;
            };
            loop {
                let batch = store.prunable_runs(&workflow, &cut, RUNS_PER_BATCH).await?;
                let full = batch.runs.len() == RUNS_PER_BATCH as usize;
                let took = Instant::now();
                let deleted = store.delete_runs(batch).await?;
                report.runs_deleted += deleted.runs;
                report.versions_deleted += deleted.definitions;
                // A batch that deleted nothing (every run resumed since it
                // was chosen) ends this workflow's turn, not the pass.
                if !full || deleted.runs == 0 {
                    break;
                }
                // Pruning takes at most a quarter of the writer's time, so
                // a large backlog goes slowly rather than in a burst.
                tokio::time::sleep(BETWEEN_BATCHES.max(took.elapsed() * 3)).await;
            }
        }
        if collect_blobs {
            let grace = self.settings().runs.blob_grace.max(MIN_BLOB_GRACE);
            let collected = store.collect_blobs_older_than(grace).await?;
            report.blobs_deleted = collected.blobs;
            report.blob_bytes_freed = collected.bytes;
        }
        while store.free_pages().await? > 0 {
            let returned = store.return_free_pages(PAGES_PER_STEP).await?;
            if returned == 0 {
                break; // no incremental auto-vacuum in this database
            }
            report.database_bytes_returned += returned;
            tokio::time::sleep(BETWEEN_BATCHES).await;
        }
        report.took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        report.at_us = nodes::now_us();
        *self
            .inner
            .last_prune
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
        Ok(report)
    }

    /// Prunes every `[runs] prune_every` (the first pass soon after
    /// start), blobs every `collect_blobs_every` after a pass that deleted
    /// runs, until the task is dropped. A pass that fails is logged and
    /// tried again next time.
    pub async fn keep_pruning(self) {
        let runs = &self.settings().runs;
        let every = runs.prune_every.max(MIN_PRUNE_EVERY);
        let collect_every = runs.collect_blobs_every;
        let mut last_collect: Option<Instant> = None;
        let mut deleted_since_collect = true;
        tokio::time::sleep(every.min(Duration::from_secs(5))).await;
        loop {
            let collect =
                deleted_since_collect && last_collect.is_none_or(|t| t.elapsed() >= collect_every);
            match self.prune(collect).await {
                Ok(report) => {
                    if collect {
                        last_collect = Some(Instant::now());
                        deleted_since_collect = false;
                    }
                    deleted_since_collect |= report.runs_deleted > 0;
                    if report.runs_deleted > 0 || report.blobs_deleted > 0 {
                        super::tracing_log(&format!(
                            "retention: deleted {} runs, {} pinned versions and {} blobs ({} bytes), returned {} bytes of the database to the OS in {} ms",
                            report.runs_deleted,
                            report.versions_deleted,
                            report.blobs_deleted,
                            report.blob_bytes_freed,
                            report.database_bytes_returned,
                            report.took_ms
                        ));
                    }
                }
                Err(e) => super::tracing_log(&format!(
                    "retention: pruning failed (trying again later): {e}"
                )),
            }
            tokio::time::sleep(every).await;
        }
    }

    /// What the data dir holds, the retention in force, and the last pass.
    pub async fn storage(&self) -> Result<StorageReport> {
        let store = &self.inner.store;
        let facts = store.storage().await?;
        let retention = self.settings().retention();
        let mut overrides = Vec::new();
        for w in store.list_workflows().await? {
            let r = self.retention_of(&w.id).await?;
            if r != retention {
                overrides.push(WorkflowRetention {
                    workflow: w.id,
                    retention: r,
                });
            }
        }
        Ok(StorageReport {
            data_dir: store.data_dir().display().to_string(),
            database: DatabaseSize {
                file_bytes: facts.pages * facts.page_size,
                free_bytes: facts.free_pages * facts.page_size,
                wal_bytes: facts.wal_bytes,
                incremental: facts.incremental,
            },
            blobs: BlobsSize {
                count: facts.blobs,
                bytes: facts.blob_bytes,
            },
            runs: RunCounts {
                total: facts.runs,
                running: facts.running,
                oldest_started_at_us: facts.oldest_started_at_us,
                by_workflow: facts
                    .by_workflow
                    .into_iter()
                    .map(|(workflow, runs)| WorkflowRuns { workflow, runs })
                    .collect(),
            },
            retention,
            overrides,
            last_prune: self
                .inner
                .last_prune
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        })
    }
}

/// `settings.runs` of a workflow's JSON text (defaults when absent or bad:
/// validation reports a bad one when it is saved).
fn runs_override(text: &str) -> sluice_api::RetentionOverride {
    #[derive(serde::Deserialize)]
    struct Doc {
        #[serde(default)]
        settings: Option<Settings>,
    }
    #[derive(serde::Deserialize)]
    struct Settings {
        #[serde(default)]
        runs: Option<serde_json::Value>,
    }
    serde_json::from_str::<Doc>(text)
        .ok()
        .and_then(|d| d.settings)
        .and_then(|s| s.runs)
        .and_then(|r| serde_json::from_value(r).ok())
        .unwrap_or_default()
}
