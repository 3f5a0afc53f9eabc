//! Resuming a run: [`Engine::resume`] replays the run's journal into a
//! fresh state machine (finished steps are never run again) and hands what
//! is left (steps in flight at the crash, retries not yet due, the finish)
//! to a new driver.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde_json::Value;
use sluice_model::Workflow;
use sluice_model::kinds::Kind;
use sluice_nodes as nodes;
use sluice_store::{Record, RecordKind, Stored};

use super::driver::run_info;
use super::{Engine, Error, Result, RunHandle, tracing_log};
use crate::machine::{
    Action, Activation, Event, Hist, Lineage, Msg, Run, Status, StepError, StepKey,
};
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

    /// Rebuilds a run from its journal and drives it to the end.
    pub async fn resume(&self, run_id: &str) -> Result<RunHandle> {
        let slot = match self.claim(run_id) {
            Ok(slot) => slot,
            Err(attached) => return Ok(attached),
        };
        let row = self
            .store()
            .get_run(run_id)
            .await?
            .ok_or_else(|| Error::RunNotFound(run_id.to_string()))?;
        if row.status != Status::Running {
            return Err(Error::AlreadyEnded {
                run: run_id.to_string(),
                status: row.status,
            });
        }
        let corrupt = |message: String| Error::Corrupt {
            run: run_id.to_string(),
            message,
        };
        let wf = Workflow::from_json(&row.definition).map_err(|e| corrupt(e.to_string()))?;
        let plan = Plan::new(wf)?;
        let entry = plan
            .entry(Some(&row.trigger))
            .map_err(|e| corrupt(e.to_string()))?;
        let records = self.store().run_records(run_id).await?;
        let (mut run, actions) = Run::start(plan.clone(), entry, row.input.clone());
        let mut replay = Replay::default();
        // Skips already journaled are not written again.
        for rec in records.iter().filter(|r| r.kind == RecordKind::Skipped) {
            if let Some(key) = parse_key(&plan, rec) {
                replay.skipped.insert((key.node, key.lineage));
            }
        }
        replay.absorb(actions);
        for rec in &records {
            replay.next_seq = replay.next_seq.max(rec.seq + 1);
            let Some(key) = parse_key(&plan, rec) else {
                return Err(corrupt(format!(
                    "record {} names an unknown step {}/{}",
                    rec.seq, rec.node, rec.lineage
                )));
            };
            match rec.kind {
                RecordKind::Started => {
                    replay.first_started.entry(key.clone()).or_insert(rec.at_us);
                    if matches!(replay.pending.get(&key), Some(Pending::Retry { .. })) {
                        let acts = run.apply(Event::RetryDue { key: key.clone() });
                        replay.absorb(acts);
                    }
                }
                RecordKind::Succeeded => {
                    let outputs = decode_outputs(rec).map_err(corrupt)?;
                    replay.pending.remove(&key);
                    let acts = run.apply(Event::Succeeded { key, outputs });
                    replay.absorb(acts);
                }
                RecordKind::Failed => {
                    let message = rec
                        .error
                        .as_ref()
                        .and_then(|e| e["message"].as_str())
                        .unwrap_or("")
                        .to_string();
                    let retryable = rec
                        .error
                        .as_ref()
                        .and_then(|e| e["retryable"].as_bool())
                        .unwrap_or(false);
                    replay.pending.remove(&key);
                    replay.failed_at.insert(key.clone(), rec.at_us);
                    let acts = run.apply(Event::Failed {
                        key,
                        error: StepError { message, retryable },
                    });
                    replay.absorb(acts);
                }
                RecordKind::Skipped => {
                    replay.skipped.insert((key.node, key.lineage));
                }
            }
        }
        // What is left: steps in flight at the crash, retries not yet due, or the end.
        let mut actions = Vec::new();
        for (key, p) in std::mem::take(&mut replay.pending) {
            actions.push(match p {
                Pending::Start {
                    attempt,
                    input,
                    hist,
                } => Action::Start {
                    key,
                    attempt,
                    input,
                    hist,
                },
                Pending::Retry { attempt, delay_ms } => {
                    let due = replay
                        .failed_at
                        .get(&key)
                        .copied()
                        .unwrap_or_else(nodes::now_us)
                        + delay_ms as i64 * 1000;
                    let left = ((due - nodes::now_us()).max(0) / 1000) as u64;
                    Action::Retry {
                        key,
                        attempt,
                        delay_ms: left,
                    }
                }
            });
        }
        actions.append(&mut replay.skips_to_write);
        if let Some(finish) = replay.finish.take() {
            actions.push(finish);
        }
        let info = run_info(run_id, &plan, &row.trigger, row.created_at_us);
        let fires_errors = row.parent_run.is_none() && plan.nodes[entry].kind != Kind::ErrorTrigger;
        Ok(self.spawn_driver(slot, run, actions, replay, info, fires_errors))
    }
}

/// What a replay found still to do.
#[derive(Default)]
pub(super) struct Replay {
    pub(super) next_seq: u64,
    pending: BTreeMap<StepKey, Pending>,
    pub(super) first_started: HashMap<StepKey, i64>,
    failed_at: HashMap<StepKey, i64>,
    skipped: HashSet<(usize, Lineage)>,
    skips_to_write: Vec<Action>,
    finish: Option<Action>,
}

enum Pending {
    Start {
        attempt: u32,
        input: Msg,
        hist: Option<Arc<Hist>>,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
    },
}

impl Replay {
    fn absorb(&mut self, actions: Vec<Action>) {
        for a in actions {
            match a {
                Action::Start {
                    key,
                    attempt,
                    input,
                    hist,
                } => {
                    self.pending.insert(
                        key,
                        Pending::Start {
                            attempt,
                            input,
                            hist,
                        },
                    );
                }
                Action::Retry {
                    key,
                    attempt,
                    delay_ms,
                } => {
                    self.pending
                        .insert(key, Pending::Retry { attempt, delay_ms });
                }
                Action::Skipped { node, lineage } => {
                    if !self.skipped.contains(&(node, lineage.clone())) {
                        self.skips_to_write.push(Action::Skipped { node, lineage });
                    }
                }
                Action::Abort { keys } => {
                    for k in keys {
                        self.pending.remove(&k);
                    }
                }
                finish @ Action::Finish { .. } => self.finish = Some(finish),
            }
        }
    }
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
