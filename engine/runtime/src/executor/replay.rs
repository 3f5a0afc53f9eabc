//! Resuming a run: [`Engine::resume`] reads the run's journal rows as the
//! core's typed entries and replays them (`sluice_core::journal`) into a
//! fresh state machine (finished steps are never run again) and hands what
//! is left (steps in flight at the crash, retries not yet due, the finish)
//! to a new driver.

use std::sync::Arc;

use serde_json::Value;
use sluice_core::journal::{self, Entry};
use sluice_model::Workflow;
use sluice_model::kinds::Kind;
use sluice_nodes as nodes;
use sluice_store::{Record, RecordKind, Stored};

use super::driver::{Wake, run_info};
use super::{Engine, Error, Result, RunHandle, tracing_log};

use crate::machine::{Activation, Lineage, Msg, Status, StepError, StepKey};
use crate::plan::Plan;

impl Engine {
    /// Resumes every unfinished run, oldest first. A parent whose
    /// sub-workflow step is still in flight attaches to its child's driver.
    pub async fn resume_all(&self) -> Result<Vec<RunHandle>> {
        let mut handles = Vec::new();
        for row in self.store().unfinished_runs().await? {
            // One run that cannot be replayed must not keep the others (or
            // the whole engine) from starting: report it and go on.
            match self.resume(&row.id).await {
                Ok(h) => handles.push(h),
                Err(e) => tracing_log(&format!("run {} cannot be resumed: {e}", row.id)),
            }
        }
        Ok(handles)
    }

    /// Rebuilds a run from its journal and drives it to the end (or until
    /// it parks again, waiting for a decision).
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle> {
        self.resume_queued(run_id, None).await
    }

    /// [`Engine::resume`], with `first` queued to the new driver before
    /// anything else (a signal that takes up a parked run). If another
    /// driver has the run, `first` is dropped.
    pub(super) async fn resume_queued(
        &self,
        run_id: &str,
        first: Option<Wake>,
    ) -> Result<RunHandle> {
        let slot = match self.claim(run_id) {
            Ok(slot) => slot,
            Err(attached) => return Ok(attached),
        };
        let row = self.run_row(run_id).await?;
        if row.status.is_finished() {
            return Err(Error::AlreadyEnded {
                run: run_id.to_string(),
                status: row.status,
            });
        }
        if row.status == Status::Waiting {
            // Driven again from now on: a crash resumes it at the next start.
            self.store().journal().unpark(run_id).await?;
        }
        let corrupt = |message: String| Error::Corrupt {
            run: run_id.to_string(),
            message,
        };
        let wf = Workflow::from_json(&row.definition).map_err(|e| corrupt(e.to_string()))?;
        let plan = Plan::new(wf)?;
        if row.executor == sluice_api::RunOn::Worker {
            // Driven by the worker: mirror it again from the last entry read.
            let next = self
                .store()
                .run_records(run_id)
                .await?
                .iter()
                .map(|r| r.seq + 1)
                .max()
                .unwrap_or(0);
            let run = self.worker_run(
                run_id,
                &plan,
                &row.trigger,
                (*row.input).clone(),
                row.created_at_us,
            );
            return Ok(self.spawn_mirror(slot, run, next, false));
        }
        let entry = plan
            .entry(Some(&row.trigger))
            .map_err(|e| corrupt(e.to_string()))?;
        let records = self.store().run_records(run_id).await?;
        let mut entries = Vec::with_capacity(records.len());
        let mut next_seq = 0;
        for rec in &records {
            next_seq = next_seq.max(rec.seq + 1);
            entries.push(entry_of(&plan, rec).map_err(corrupt)?);
        }
        let resumed = journal::replay(
            plan.clone(),
            entry,
            row.input.clone(),
            entries,
            nodes::now_us(),
        );
        let replay = Replay {
            next_seq,
            first_started: resumed.first_started,
            first_wake: first,
        };
        let (run, actions) = (resumed.run, resumed.actions);
        let info = run_info(self, run_id, &plan, &row.trigger, row.created_at_us);
        let fires_errors = row.parent_run.is_none() && plan.nodes[entry].kind != Kind::ErrorTrigger;
        Ok(self.spawn_driver(slot, run, actions, replay, info, fires_errors))
    }
}

/// Where a replayed run's driver picks up: the next journal sequence
/// number, and when each step's first attempt started.
#[derive(Default)]
pub(super) struct Replay {
    pub(super) next_seq: u64,
    pub(super) first_started: rustc_hash::FxHashMap<StepKey, i64>,
    /// What the driver handles first (see [`Engine::resume_queued`]).
    pub(super) first_wake: Option<Wake>,
}

/// A journal row as the core's typed entry.
fn entry_of(plan: &Plan, rec: &Record) -> Result<Entry, String> {
    let key = parse_key(plan, rec).ok_or_else(|| {
        format!(
            "record {} names an unknown step {}/{}",
            rec.seq, rec.node, rec.lineage
        )
    })?;
    Ok(match rec.kind {
        RecordKind::Started => Entry::Started {
            key,
            at_us: rec.at_us,
        },
        RecordKind::Succeeded => Entry::Succeeded {
            outputs: decode_outputs(rec)?,
            key,
        },
        RecordKind::Failed => {
            let error = rec.error.as_ref();
            Entry::Failed {
                key,
                error: StepError {
                    message: error.map(|e| e.message.clone()).unwrap_or_default(),
                    retryable: error.and_then(|e| e.retryable).unwrap_or(false),
                },
                at_us: rec.at_us,
            }
        }
        RecordKind::Skipped => Entry::Skipped {
            node: key.node,
            lineage: key.lineage,
        },
    })
}

fn parse_key(plan: &Plan, rec: &Record) -> Option<StepKey> {
    Some(StepKey {
        node: plan.node_index(&rec.node)?,
        lineage: Lineage::parse(&rec.lineage)?,
        activation: if rec.kind == RecordKind::Skipped {
            Activation::default()
        } else {
            Activation::parse(&rec.activation)?
        },
    })
}

fn decode_outputs(rec: &Record) -> Result<Vec<(String, Msg)>, String> {
    let v = rec
        .data
        .as_ref()
        .and_then(Stored::value)
        .ok_or_else(|| format!("record {} has no outputs", rec.seq))?;
    let pairs = v
        .as_array()
        .ok_or_else(|| format!("record {}: outputs are not an array", rec.seq))?;
    pairs
        .iter()
        .map(|p| {
            let port = p
                .get(0)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("record {}: bad output", rec.seq))?;
            Ok((
                port.to_string(),
                Arc::new(p.get(1).cloned().unwrap_or(Value::Null)),
            ))
        })
        .collect()
}
