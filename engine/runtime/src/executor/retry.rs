//! Retrying an ended run: [`Engine::retry_from_start`] runs the pinned
//! workflow version again; [`Engine::retry_from_failed`] copies the journal
//! records of the steps that finished into a new run and resumes it, so only
//! the failed step and what follows run again.

use std::collections::HashSet;
use std::sync::Arc;

use sluice_api::{ReusedStep, RunOn};
use sluice_model::Workflow;
use sluice_nodes as nodes;
use sluice_store::{NewRun, Record, RecordKind, Stored};

use super::{Engine, Error, Result, RunHandle, new_run_id};
use crate::plan::Plan;

impl Engine {
    /// A new run of the same pinned workflow version with the same trigger
    /// and input as `run_id`.
    /// It executes where the run it retries did (here, or on the worker).
    pub async fn retry_from_start(&self, run_id: &str) -> Result<RunHandle> {
        let (row, plan) = self.ended_run(run_id).await?;
        self.start_inner(
            new_run_id(),
            plan,
            Some(&row.trigger),
            row.input.clone(),
            None,
            true,
            Some(row.executor),
        )
        .await
    }

    /// A new run that reuses every step `run_id` finished (their journal
    /// records are copied, so they are replayed, not executed) and runs the
    /// rest: the failed step and what follows it.
    pub async fn retry_from_failed(&self, run_id: &str) -> Result<RunHandle> {
        let (row, plan) = self.ended_run(run_id).await?;
        let records = self.store().run_records(run_id).await?;
        if row.executor == RunOn::Worker {
            return self.retry_on_worker(&row, &plan, &records).await;
        }
        let finished: HashSet<(&str, &str, &str)> = records
            .iter()
            .filter(|r| r.kind == RecordKind::Succeeded)
            .map(|r| (&*r.node, r.lineage.as_str(), r.activation.as_str()))
            .collect();
        let id = new_run_id();
        self.store()
            .create_run(&retried(&row, &id, nodes::now_us(), RunOn::Local))
            .await?;
        let run: Arc<str> = Arc::from(id.as_str());
        let mut seq = 0;
        for rec in &records {
            let reused = matches!(rec.kind, RecordKind::Started | RecordKind::Succeeded)
                && finished.contains(&(&*rec.node, rec.lineage.as_str(), rec.activation.as_str()));
            if reused {
                self.store()
                    .journal()
                    .append(Record {
                        run_id: run.clone(),
                        seq,
                        ..rec.clone()
                    })
                    .await?;
                seq += 1;
            }
        }
        self.store().journal().flush().await?;
        self.resume(&id).await
    }

    /// A retry from the failed step of a worker run: handed off again, with
    /// the steps it finished to take over (the worker records them as
    /// succeeded without running them; the mirror brings them back).
    async fn retry_on_worker(
        &self,
        row: &sluice_store::RunRow,
        plan: &Arc<Plan>,
        records: &[Record],
    ) -> Result<RunHandle> {
        let reuse: Vec<ReusedStep> = records
            .iter()
            .filter(|r| r.kind == RecordKind::Succeeded)
            .filter_map(|r| {
                Some(ReusedStep {
                    node: r.node.to_string(),
                    lineage: r.lineage.clone(),
                    activation: r.activation.clone(),
                    outputs: (*r.data.as_ref().and_then(Stored::value)?).clone(),
                })
            })
            .collect();
        let id = new_run_id();
        let Ok(slot) = self.claim(&id) else {
            return Err(Error::StillRunning(id));
        };
        let created_at_us = nodes::now_us();
        self.store()
            .create_run(&retried(row, &id, created_at_us, RunOn::Worker))
            .await?;
        let mut run = self.worker_run(&id, plan, &row.trigger, (*row.input).clone(), created_at_us);
        run.reuse = reuse;
        Ok(self.spawn_mirror(slot, run, 0, true))
    }

    /// A run that has ended, with its pinned plan.
    async fn ended_run(&self, run_id: &str) -> Result<(sluice_store::RunRow, Arc<Plan>)> {
        let row = self.run_row(run_id).await?;
        // Running, or waiting for a decision: not over.
        if !row.status.is_finished() {
            return Err(Error::StillRunning(run_id.to_string()));
        }
        let wf = Workflow::from_json(&row.definition).map_err(|e| Error::Corrupt {
            run: run_id.to_string(),
            message: e.to_string(),
        })?;
        let plan = Plan::build(wf, row.doc_version.clone(), row.draft)?;
        Ok((row, plan))
    }
}

/// The record of run `id` retrying `row`: its pinned workflow, trigger and
/// input, executing on `executor`.
fn retried(row: &sluice_store::RunRow, id: &str, created_at_us: i64, executor: RunOn) -> NewRun {
    NewRun {
        id: id.to_string(),
        workflow_id: row.workflow_id.clone(),
        definition: row.definition.clone().into(),
        trigger: row.trigger.clone(),
        input: row.input.clone(),
        created_at_us,
        parent_run: None,
        doc_version: row.doc_version.clone(),
        draft: row.draft,
        executor,
    }
}
