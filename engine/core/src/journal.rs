//! The journal as every driver sees it: typed entries recording what
//! happened to each step, and the replay that rebuilds a run from them. The
//! local executor keeps its entries in SQLite (the store holds them as rows,
//! without knowing what they mean); the shared worker will keep them in
//! Restate's journal. Replay is pure: the clock comes in as `now_us`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::error::StepError;
use crate::machine::{Action, Event, Hist, Lineage, Msg, Run, StepKey};
use crate::plan::Plan;

/// One thing a driver journals about a step, in the order it happened.
#[derive(Debug, Clone)]
pub enum Entry {
    /// An attempt began (written before it runs).
    Started { key: StepKey, at_us: i64 },
    /// It produced these messages, by output port.
    Succeeded {
        key: StepKey,
        outputs: Vec<(String, Msg)>,
    },
    /// It failed, terminally or retryably.
    Failed {
        key: StepKey,
        error: StepError,
        at_us: i64,
    },
    /// A node that will not run for this lineage (its branch was not taken).
    Skipped { node: usize, lineage: Lineage },
}

/// A run rebuilt from its journal.
#[derive(Debug)]
pub struct Resumed {
    pub run: Run,
    /// What is left to do, for the driver to carry out: steps that were in
    /// flight (run again, with the same idempotency key), retries (with the
    /// delay still to wait), skips not yet journaled, and the finish.
    pub actions: Vec<Action>,
    /// When each step's first attempt started: waits count from it.
    pub first_started: rustc_hash::FxHashMap<StepKey, i64>,
}

/// A step whose last action the journal has not answered yet.
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

/// Rebuilds a run from its entry trigger, input and journal: finished steps
/// are applied, never run again.
pub fn replay(
    plan: Arc<Plan>,
    entry: usize,
    input: Msg,
    entries: Vec<Entry>,
    now_us: i64,
) -> Resumed {
    let (mut run, actions) = Run::start(plan, entry, input);
    let mut state = State::default();
    // Skips already journaled are not written again.
    for e in &entries {
        if let Entry::Skipped { node, lineage } = e {
            state.skipped.insert((*node, lineage.clone()));
        }
    }
    state.absorb(actions);
    for e in entries {
        match e {
            Entry::Started { key, at_us } => {
                state.first_started.entry(key.clone()).or_insert(at_us);
                if matches!(state.pending.get(&key), Some(Pending::Retry { .. })) {
                    let acts = run.apply(Event::RetryDue { key });
                    state.absorb(acts);
                }
            }
            Entry::Succeeded { key, outputs } => {
                state.pending.remove(&key);
                let acts = run.apply(Event::Succeeded { key, outputs });
                state.absorb(acts);
            }
            Entry::Failed { key, error, at_us } => {
                state.pending.remove(&key);
                state.failed_at.insert(key.clone(), at_us);
                let acts = run.apply(Event::Failed { key, error });
                state.absorb(acts);
            }
            Entry::Skipped { node, lineage } => {
                state.skipped.insert((node, lineage));
            }
        }
    }
    let mut actions = Vec::new();
    for (key, p) in std::mem::take(&mut state.pending) {
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
                let due =
                    state.failed_at.get(&key).copied().unwrap_or(now_us) + delay_ms as i64 * 1000;
                Action::Retry {
                    key,
                    attempt,
                    delay_ms: ((due - now_us).max(0) / 1000) as u64,
                }
            }
        });
    }
    actions.append(&mut state.skips_to_write);
    if let Some(finish) = state.finish.take() {
        actions.push(finish);
    }
    Resumed {
        run,
        actions,
        first_started: state.first_started,
    }
}

#[derive(Default)]
struct State {
    pending: BTreeMap<StepKey, Pending>,
    first_started: rustc_hash::FxHashMap<StepKey, i64>,
    failed_at: HashMap<StepKey, i64>,
    skipped: HashSet<(usize, Lineage)>,
    skips_to_write: Vec<Action>,
    finish: Option<Action>,
}

impl State {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_model::Workflow;

    fn plan() -> Arc<Plan> {
        let wf = Workflow::from_value(json!({"format": "sluice.workflow/v1", "id": "w", "nodes": [
            {"id": "t", "kind": "trigger.manual"},
            {"id": "a", "kind": "data.set", "config": {"values": {"a": 1}}},
            {"id": "b", "kind": "data.set", "config": {"values": {"b": 2}},
             "retry": {"max_attempts": 3, "backoff_ms": 1000}},
            {"id": "end", "kind": "output.end"}],
            "edges": [{"from": "t", "to": "a"}, {"from": "a", "to": "b"}, {"from": "b", "to": "end"}]}))
        .unwrap();
        Plan::new(wf).unwrap()
    }

    /// Drives a run live, answering each start with `answer`, and journals
    /// what happened, as a driver does.
    fn live(
        plan: &Arc<Plan>,
        mut answer: impl FnMut(&StepKey, u32) -> Result<Vec<(String, Msg)>, StepError>,
    ) -> Vec<Entry> {
        let (mut run, mut todo) = Run::start(plan.clone(), 0, Arc::new(json!({"x": 1})));
        let mut journal = Vec::new();
        let mut at = 0;
        while let Some(action) = todo.pop() {
            at += 1;
            let acts = match action {
                Action::Start { key, attempt, .. } => {
                    journal.push(Entry::Started {
                        key: key.clone(),
                        at_us: at,
                    });
                    match answer(&key, attempt) {
                        Ok(outputs) => {
                            journal.push(Entry::Succeeded {
                                key: key.clone(),
                                outputs: outputs.clone(),
                            });
                            run.apply(Event::Succeeded { key, outputs })
                        }
                        Err(error) => {
                            journal.push(Entry::Failed {
                                key: key.clone(),
                                error: error.clone(),
                                at_us: at,
                            });
                            run.apply(Event::Failed { key, error })
                        }
                    }
                }
                Action::Retry { key, .. } => run.apply(Event::RetryDue { key }),
                Action::Skipped { node, lineage } => {
                    journal.push(Entry::Skipped { node, lineage });
                    Vec::new()
                }
                Action::Abort { .. } | Action::Finish { .. } => Vec::new(),
            };
            todo.extend(acts);
        }
        journal
    }

    fn out(v: serde_json::Value) -> Vec<(String, Msg)> {
        vec![("out".into(), Arc::new(v))]
    }

    #[test]
    fn a_finished_journal_replays_to_its_finish_and_runs_nothing() {
        let plan = plan();
        let journal = live(&plan, |_, _| Ok(out(json!({"ok": true}))));
        let resumed = replay(plan, 0, Arc::new(json!({"x": 1})), journal, 10);
        assert!(
            matches!(resumed.actions.as_slice(), [Action::Finish { .. }]),
            "{:?}",
            resumed.actions
        );
    }

    #[test]
    fn a_step_in_flight_runs_again_and_a_retry_waits_only_what_is_left() {
        let plan = plan();
        // Cut after `a` started: `a` was in flight at the crash.
        let mut journal = live(&plan, |_, _| Ok(out(json!(1))));
        journal.truncate(3);
        assert!(
            matches!(journal.last(), Some(Entry::Started { .. })),
            "{journal:?}"
        );
        let resumed = replay(plan.clone(), 0, Arc::new(json!({"x": 1})), journal, 10);
        match resumed.actions.as_slice() {
            [
                Action::Start {
                    key, attempt: 1, ..
                },
            ] => assert_eq!(key.node, 1),
            other => panic!("{other:?}"),
        }
        // Cut after `b` failed retryably: replayed 400 ms later, its 1 s
        // backoff has 600 ms left; replayed after it was due, none.
        let b = plan.node_index("b").unwrap();
        let mut journal = live(&plan, |key, attempt| {
            if key.node == b && attempt == 1 {
                Err(StepError::retryable("try again"))
            } else {
                Ok(out(json!(1)))
            }
        });
        journal.truncate(6);
        let failed_at = match journal.last() {
            Some(Entry::Failed { at_us, .. }) => *at_us,
            other => panic!("{other:?}"),
        };
        let soon = replay(
            plan.clone(),
            0,
            Arc::new(json!({})),
            journal.clone(),
            failed_at + 400_000,
        );
        match soon.actions.as_slice() {
            [
                Action::Retry {
                    key,
                    attempt: 2,
                    delay_ms,
                },
            ] => {
                assert_eq!(key.node, b);
                assert_eq!(*delay_ms, 600);
            }
            other => panic!("{other:?}"),
        }
        let late = replay(plan, 0, Arc::new(json!({})), journal, failed_at + 5_000_000);
        assert!(
            matches!(late.actions.as_slice(), [Action::Retry { delay_ms: 0, .. }]),
            "{:?}",
            late.actions
        );
    }
}
