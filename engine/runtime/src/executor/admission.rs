//! What a run must pass before it is recorded or gets to run: the engine's
//! limit on active runs (`Error::Busy`), a workflow's own concurrency
//! (`settings.concurrency`: runs beyond it queue), the sub-workflow depth
//! limit (read from the runs' parent links) and the credentials a workflow
//! names.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_model::Workflow;
use tokio::sync::Semaphore;

use super::{Engine, Error, Result};
use crate::plan::{Invalid, Plan};

impl Engine {
    /// Refuses a new run (top-level, or a new sub-workflow) while the engine
    /// holds `max_active_runs`. Schedule fires, error triggers, retries and
    /// resumes belong to work already admitted and are not refused.
    pub(super) fn admit(&self) -> Result<()> {
        let active = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len();
        if active >= self.inner.max_active_runs {
            return Err(Error::Busy(active));
        }
        Ok(())
    }

    /// Refuses a new run while the data dir cannot be written (the
    /// journal's last commit failed: disk full, read-only, I/O error),
    /// trying a small write at most once a second to learn that it can
    /// again: a run admitted then is recorded, and nothing acknowledged is
    /// lost. Reads go on meanwhile.
    pub(super) async fn admit_storage(&self) -> Result<()> {
        let store = &self.inner.store;
        let Some(failure) = store.write_failure() else {
            return Ok(());
        };
        let probe = {
            let mut last = self
                .inner
                .last_probe
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1));
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if probe && store.journal().probe().await.is_ok() && store.write_failure().is_none() {
            return Ok(());
        }
        Err(Error::Storage {
            reason: failure.reason,
            full: failure.full,
        })
    }

    /// The semaphore limiting runs of this plan's workflow, if it has a limit.
    pub(super) fn workflow_limit(&self, plan: &Plan) -> Option<Arc<Semaphore>> {
        let limit = plan.concurrency?;
        let mut limits = self.inner.limits.lock().unwrap_or_else(|e| e.into_inner());
        let entry = limits
            .entry(plan.workflow.id.clone())
            .or_insert_with(|| (limit, Arc::new(Semaphore::new(limit))));
        if entry.0 != limit {
            // The limit changed: new runs share a new semaphore; runs holding
            // permits of the old one finish under it.
            *entry = (limit, Arc::new(Semaphore::new(limit)));
        }
        Some(entry.1.clone())
    }

    /// The workflows of a run and its ancestors, the run's own first, read
    /// from the parent links of the run rows (at most `limit` of them). A
    /// run whose row is not yet committed is a top-level run (only those
    /// are queued rather than created), so the walk ends there.
    pub(super) async fn lineage(
        &self,
        run_id: &str,
        own_workflow: &str,
        limit: usize,
    ) -> Result<Vec<String>> {
        let mut chain = vec![own_workflow.to_string()];
        let mut parent = match self.store().get_run(run_id).await? {
            Some(row) => row.parent_run,
            None => None,
        };
        while let Some(id) = parent {
            if chain.len() > limit {
                break;
            }
            match self.store().get_run(&id).await? {
                Some(row) => {
                    chain.push(row.workflow_id);
                    parent = row.parent_run;
                }
                None => break,
            }
        }
        Ok(chain)
    }

    /// Checks the credentials a workflow names: each must exist with a kind
    /// its node accepts. Problems name the node.
    pub async fn check_credentials(&self, workflow: &Workflow) -> Result<()> {
        let refs = sluice_model::validate::credential_refs(workflow);
        if refs.is_empty() {
            return Ok(());
        }
        let stored: HashMap<String, String> = self
            .store()
            .list_credentials()
            .await?
            .into_iter()
            .map(|c| (c.name, c.kind))
            .collect();
        let problems =
            sluice_model::validate::check_credentials(workflow, |n| stored.get(n).cloned());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(Invalid(problems)))
        }
    }
}
