//! Runs as the API's types for people and scripts (`sluice runs show
//! --json`, the API): the run row, and one entry per step attempt rebuilt
//! from the journal.

use std::collections::HashMap;

use serde_json::Value;
use sluice_api::{RunDetail, RunSummary, Step, StepStatus, Waiting};
use sluice_store::{Record, RecordKind, RunRow, Stored};

/// A run without its steps.
pub fn run_summary(r: &RunRow) -> RunSummary {
    RunSummary {
        id: r.id.clone(),
        workflow: r.workflow_id.clone(),
        trigger: r.trigger.clone(),
        status: r.status,
        output: r.output.clone().unwrap_or(Value::Null),
        error: r.error.clone(),
        created_at_us: r.created_at_us,
        finished_at_us: r.finished_at_us,
        version: r.doc_version.clone(),
        draft: r.draft,
        executor: r.executor,
        waiting: Vec::new(),
    }
}

/// A run with its step attempts.
pub fn run_detail(r: &RunRow, records: &[Record]) -> RunDetail {
    RunDetail {
        run: run_summary(r),
        steps: steps(records),
    }
}

/// [`run_detail`] of a run with approvals waiting: listed in
/// `run.waiting`, their steps `waiting` instead of `running`.
pub fn run_detail_waiting(r: &RunRow, records: &[Record], waiting: Vec<Waiting>) -> RunDetail {
    let mut detail = run_detail(r, records);
    for w in &waiting {
        if let Some(step) = detail.steps.iter_mut().rev().find(|s| {
            s.node == w.node
                && s.lineage == w.lineage
                && s.activation.as_deref() == Some(w.activation.as_str())
        }) && step.status == StepStatus::Running
        {
            step.status = StepStatus::Waiting;
        }
    }
    detail.run.waiting = waiting;
    detail
}

/// Step attempts from journal records: one entry per (node, lineage, activation, attempt).
pub fn steps(records: &[Record]) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut index: HashMap<(&str, &str, &str, u32), usize> = HashMap::new();
    let value = |s: &Option<Stored>| s.as_ref().and_then(Stored::value).map(|v| (*v).clone());
    let attempt = |r: &Record, started_at_us: i64, input: Option<Value>| Step {
        node: r.node.to_string(),
        lineage: r.lineage.clone(),
        status: StepStatus::Running,
        activation: Some(r.activation.clone()),
        attempt: Some(r.attempt),
        at_us: None,
        started_at_us: Some(started_at_us),
        finished_at_us: None,
        duration_us: None,
        input: Some(input.unwrap_or(Value::Null)),
        output: None,
        error: None,
    };
    for r in records {
        let key = (
            &*r.node,
            r.lineage.as_str(),
            r.activation.as_str(),
            r.attempt,
        );
        match r.kind {
            RecordKind::Skipped => out.push(Step {
                node: r.node.to_string(),
                lineage: r.lineage.clone(),
                status: StepStatus::Skipped,
                activation: None,
                attempt: None,
                at_us: Some(r.at_us),
                started_at_us: None,
                finished_at_us: None,
                duration_us: None,
                input: None,
                output: None,
                error: None,
            }),
            RecordKind::Started => {
                // A second start of the same attempt: the first was cut short by a crash.
                if let Some(&i) = index.get(&key)
                    && out[i].status == StepStatus::Running
                {
                    out[i].status = StepStatus::Interrupted;
                }
                index.insert(key, out.len());
                out.push(attempt(r, r.at_us, value(&r.data)));
            }
            RecordKind::Succeeded | RecordKind::Failed => {
                let i = match index.get(&key) {
                    Some(&i) => i,
                    // A pure step: journaled once, after it ran, with its input.
                    None => {
                        let started = r.at_us - r.duration_us.unwrap_or(0);
                        out.push(attempt(r, started, value(&r.input)));
                        out.len() - 1
                    }
                };
                let step = &mut out[i];
                step.finished_at_us = Some(r.at_us);
                step.duration_us = r.duration_us;
                if r.kind == RecordKind::Succeeded {
                    step.status = StepStatus::Succeeded;
                    step.output = Some(
                        value(&r.data)
                            .map(|pairs| {
                                let mut m = serde_json::Map::new();
                                for p in pairs.as_array().into_iter().flatten() {
                                    m.insert(
                                        p[0].as_str().unwrap_or("out").to_string(),
                                        p[1].clone(),
                                    );
                                }
                                Value::Object(m)
                            })
                            .unwrap_or(Value::Null),
                    );
                } else {
                    step.status = StepStatus::Failed;
                    step.error = r.error.clone();
                }
            }
        }
    }
    out
}
