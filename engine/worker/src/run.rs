//! `SluiceRun`, the Restate workflow that drives one handed-off run (keyed
//! by its run id, so a hand-off sent twice is one run): the core's state
//! machine, fed in the order Restate journaled what happened. Steps with
//! I/O are calls to the private `SluiceStep` service (durable, concurrent:
//! parallel branches run at once); pure steps run in line (deterministic, so
//! a replay computes them again identically); retry backoffs and
//! `flow.wait` are durable sleeps. What happened is kept in the workflow's
//! state as numbered entries, which the engine that handed the run off reads
//! back with the shared `progress` handler.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use restate_sdk::prelude::*;
use serde_json::{Value, json};
use sluice_api::{
    ProgressFrom, RunError, WORKER_PROTOCOL, WorkerAbout, WorkerEntry, WorkerProgress, WorkerRun,
};
use sluice_core::machine::{Action, Event, Hist, Run, StepKey};
use sluice_core::{Plan, StepError};
use sluice_model::Workflow;
use sluice_runtime::{Engine, RemoteStep, RemoteStepReport};

use crate::step::{NodeCall, SluiceStepClient, StepCall, StepFailure, StepOutcome};

/// The most entries one `progress` page carries.
const PAGE: u64 = 256;

pub struct SluiceRun {
    pub(crate) engine: Engine,
}

/// The run's entries in the workflow's state, in chunks of [`CHUNK`]:
/// `c<K>` holds entries `K*CHUNK..`, and `n` is how many are readable. A
/// chunk is written when it fills and at each wait (the one still filling,
/// again), so a short run writes two state commands to Restate's log, not
/// two per entry. The first page is also kept in memory: a run that fits
/// in it answers with all its entries, so the engine reads a short run back
/// in one go.
struct Book {
    n: u64,
    /// The `n` readers see.
    published: u64,
    /// The chunk still filling (entries from `n - chunk.len()`).
    chunk: Vec<WorkerEntry>,
    first: Vec<WorkerEntry>,
    invocation: String,
}

/// Entries per state value.
const CHUNK: u64 = 64;

/// `n` in the run's state: how many entries are readable, and the run's
/// invocation.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Count {
    n: u64,
    invocation: String,
}

impl Book {
    fn push(&mut self, ctx: &WorkflowContext<'_>, entry: WorkerEntry) {
        if self.n < PAGE {
            self.first.push(entry.clone());
        }
        self.chunk.push(entry);
        self.n += 1;
        if self.n.is_multiple_of(CHUNK) {
            self.write_chunk(ctx);
            self.chunk.clear();
        }
    }

    fn write_chunk(&self, ctx: &WorkflowContext<'_>) {
        if !self.chunk.is_empty() {
            let k = (self.n - self.chunk.len() as u64) / CHUNK;
            ctx.set(&format!("c{k}"), Json(self.chunk.clone()));
        }
    }

    /// Makes the entries pushed so far readable: once per wait, not per
    /// entry.
    fn publish(&mut self, ctx: &WorkflowContext<'_>) {
        if self.published != self.n {
            self.write_chunk(ctx);
            // With the invocation id: an engine cancels the run by it.
            ctx.set(
                "n",
                Json(Count {
                    n: self.n,
                    invocation: self.invocation.clone(),
                }),
            );
            self.published = self.n;
        }
    }

    /// Publishes, then waits for `next` (what Restate completes next).
    async fn publish_then<F: std::future::Future>(
        &mut self,
        ctx: &WorkflowContext<'_>,
        next: F,
    ) -> F::Output {
        self.publish(ctx);
        next.await
    }

    /// What the run answers: every entry when they fit in a page, else
    /// none (the engine pages them with `progress`).
    fn answer(mut self, ctx: &WorkflowContext<'_>) -> HandlerResult<Json<WorkerProgress>> {
        // A run that never waited and fits in its answer is read from the
        // answer alone (by whoever attaches): nothing to write to state.
        if self.published > 0 || self.n > PAGE {
            self.publish(ctx);
        }
        let entries = if self.n <= PAGE {
            self.first
        } else {
            Vec::new()
        };
        Ok(Json(WorkerProgress {
            from: 0,
            entries,
            total: self.n,
            invocation: Some(self.invocation),
        }))
    }

    /// A step finished in line (pure, or taken over from the run a retry
    /// repeats), with its input: recorded, and the event it makes.
    fn in_line(
        &mut self,
        ctx: &WorkflowContext<'_>,
        plan: &Plan,
        key: StepKey,
        attempt: u32,
        input: &Value,
        outcome: StepOutcome,
    ) -> Event {
        self.finished(ctx, plan, &key, attempt, Some(input.clone()), &outcome);
        event_of(key, outcome)
    }

    /// A finished step attempt: its log lines, then how it went.
    #[allow(clippy::too_many_arguments)]
    fn finished(
        &mut self,
        ctx: &WorkflowContext<'_>,
        plan: &Plan,
        key: &StepKey,
        attempt: u32,
        input: Option<Value>,
        outcome: &StepOutcome,
    ) {
        let node = plan.nodes[key.node].id.to_string();
        let lineage = key.lineage.to_string();
        for (level, message) in &outcome.logs {
            self.push(
                ctx,
                WorkerEntry::Log {
                    node: node.clone(),
                    lineage: lineage.clone(),
                    level: level.clone(),
                    message: message.clone(),
                    at_us: outcome.at_us,
                },
            );
        }
        let activation = key.activation.to_string();
        let entry = match &outcome.error {
            None => WorkerEntry::Succeeded {
                node,
                lineage,
                activation,
                attempt,
                input,
                outputs: Value::Array(outcome.outputs.iter().map(|(p, m)| json!([p, m])).collect()),
                at_us: outcome.at_us,
                duration_us: outcome.duration_us,
            },
            Some(e) => WorkerEntry::Failed {
                node,
                lineage,
                activation,
                attempt,
                input,
                message: e.message.clone(),
                retryable: e.retryable,
                at_us: outcome.at_us,
                duration_us: outcome.duration_us,
            },
        };
        self.push(ctx, entry);
    }
}

/// What a pending durable future stands for.
enum Pending {
    Step { key: StepKey, attempt: u32 },
    Retry { key: StepKey },
}

fn event_of(key: StepKey, outcome: StepOutcome) -> Event {
    match outcome.error {
        None => Event::Succeeded {
            key,
            outputs: outcome
                .outputs
                .into_iter()
                .map(|(p, m)| (p, Arc::new(m)))
                .collect(),
        },
        Some(e) => Event::Failed {
            key,
            error: StepError {
                message: e.message,
                retryable: e.retryable,
            },
        },
    }
}

pub(crate) fn outcome_of(report: RemoteStepReport, at_us: Option<i64>) -> StepOutcome {
    let (outputs, error) = match report.result {
        Ok(outputs) => (
            outputs
                .into_iter()
                .map(|(p, m)| (p, Arc::unwrap_or_clone(m)))
                .collect(),
            None,
        ),
        Err(e) => (
            Vec::new(),
            Some(StepFailure {
                message: e.message,
                retryable: e.retryable,
            }),
        ),
    };
    StepOutcome {
        outputs,
        error,
        logs: report.logs,
        at_us,
        duration_us: report.duration_us,
    }
}

/// Why a run could not even start, as its finish.
fn unstartable(message: String) -> WorkerEntry {
    WorkerEntry::Finished {
        status: sluice_api::RunStatus::Failed,
        output: Value::Null,
        error: Some(RunError::of_run(message)),
        respond: None,
    }
}

#[restate_sdk::workflow]
impl SluiceRun {
    /// Drives the run to its end; answers its entries (all of them when
    /// they fit in a page).
    #[handler]
    async fn run(
        &self,
        ctx: WorkflowContext<'_>,
        req: Json<WorkerRun>,
    ) -> HandlerResult<Json<WorkerProgress>> {
        let req = req.into_inner();
        if req.protocol != WORKER_PROTOCOL {
            return Err(TerminalError::new(format!(
                "version skew: the engine that sent run {} speaks worker protocol {} (Sluice {}), \
                 this worker speaks {} (Sluice {}): run the same Sluice version on both",
                req.run_id,
                req.protocol,
                req.engine_version,
                WORKER_PROTOCOL,
                env!("CARGO_PKG_VERSION")
            ))
            .into());
        }

        let mut book = Book {
            n: 0,
            published: 0,
            chunk: Vec::new(),
            first: Vec::new(),
            invocation: ctx.invocation_id().to_string(),
        };
        let plan = match Workflow::from_json(&req.definition)
            .map_err(|e| e.to_string())
            .and_then(|wf| Plan::new(wf).map_err(|e| e.to_string()))
        {
            Ok(plan) => plan,
            Err(e) => {
                book.push(
                    &ctx,
                    unstartable(format!(
                        "the worker cannot read workflow `{}`: {e}",
                        req.workflow
                    )),
                );
                return book.answer(&ctx);
            }
        };
        // Read by the step service (steps with I/O) and by engines that
        // adopt a deployment's run; a run of pure steps needs it nowhere.
        if sluice_api::deployed_run(&req.run_id)
            || (0..plan.nodes.len()).any(|i| !Engine::step_is_pure(&plan, i))
        {
            ctx.set("definition", req.definition.clone());
        }
        let entry = match plan.entry(Some(&req.trigger)) {
            Ok(entry) => entry,
            Err(e) => {
                book.push(&ctx, unstartable(e.to_string()));
                return book.answer(&ctx);
            }
        };
        let run_info = Arc::new(sluice_model::preview::run_info(
            &req.run_id,
            &plan.workflow.id,
            &req.trigger,
            req.created_at_us,
        ));
        let hash = plan.definition.shared_hash().to_string();
        let mut reuse: HashMap<(String, String, String), Vec<(String, Value)>> = req
            .reuse
            .iter()
            .map(|r| {
                let outputs = r
                    .outputs
                    .as_array()
                    .map(|pairs| {
                        pairs
                            .iter()
                            .filter_map(|p| {
                                Some((p.get(0)?.as_str()?.to_string(), p.get(1)?.clone()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (
                    (r.node.clone(), r.lineage.clone(), r.activation.clone()),
                    outputs,
                )
            })
            .collect();
        let (mut run, mut actions) = Run::start(plan.clone(), entry, Arc::new(req.input));
        let mut futures = DurableFuturesUnordered::new();
        let mut pending: HashMap<usize, Pending> = HashMap::new();
        let mut ready: VecDeque<Event> = VecDeque::new();
        loop {
            for action in std::mem::take(&mut actions) {
                match action {
                    Action::Start {
                        key,
                        attempt,
                        input,
                        hist,
                    } => {
                        let done = (
                            plan.nodes[key.node].id.to_string(),
                            key.lineage.to_string(),
                            key.activation.to_string(),
                        );
                        if let Some(outputs) = reuse.remove(&done) {
                            // Finished in the run this retries: taken over, not run.
                            let outcome = StepOutcome {
                                outputs,
                                ..StepOutcome::default()
                            };
                            let event = book.in_line(&ctx, &plan, key, attempt, &input, outcome);
                            ready.push_back(event);
                            continue;
                        }
                        let path: Vec<(String, Value)> = Hist::path_outputs(hist.as_ref())
                            .into_iter()
                            .map(|(n, m)| (plan.nodes[n].id.to_string(), (*m).clone()))
                            .collect();
                        let node_id = plan.nodes[key.node].id.to_string();
                        let idempotency_key = format!(
                            "{}/{}/{}/{}",
                            req.run_id, node_id, key.lineage, key.activation
                        );
                        if Engine::step_is_pure(&plan, key.node) {
                            // Pure: in line, and computed again identically on replay.
                            let report = self
                                .engine
                                .execute_step(RemoteStep {
                                    plan: plan.clone(),
                                    node: key.node,
                                    attempt,
                                    input: input.clone(),
                                    path: path.into_iter().map(|(n, v)| (n, Arc::new(v))).collect(),
                                    run_info: run_info.clone(),
                                    idempotency_key,
                                    first_started_at_us: req.created_at_us,
                                })
                                .await;
                            let mut outcome = outcome_of(report, None);
                            // What goes into the journal must be the same on
                            // replay: no clock (a pure step takes microseconds).
                            outcome.duration_us = 0;
                            let event = book.in_line(&ctx, &plan, key, attempt, &input, outcome);
                            ready.push_back(event);
                        } else {
                            book.push(
                                &ctx,
                                WorkerEntry::Started {
                                    node: node_id.clone(),
                                    lineage: key.lineage.to_string(),
                                    activation: key.activation.to_string(),
                                    attempt,
                                    input: (*input).clone(),
                                },
                            );
                            let call = StepCall::Node(Box::new(NodeCall {
                                run_id: req.run_id.clone(),
                                hash: hash.clone(),
                                node: node_id,
                                attempt,
                                input: (*input).clone(),
                                path,
                                run_info: (*run_info).clone(),
                                idempotency_key,
                            }));
                            let i = futures.push(
                                ctx.service_client::<SluiceStepClient>()
                                    .execute(Json(call))
                                    .call(),
                            );
                            pending.insert(i, Pending::Step { key, attempt });
                        }
                    }
                    Action::Retry { key, delay_ms, .. } => {
                        let i = futures.push(
                            ctx.service_client::<SluiceStepClient>()
                                .execute(Json(StepCall::Sleep { ms: delay_ms }))
                                .call(),
                        );
                        pending.insert(i, Pending::Retry { key });
                    }
                    Action::Skipped { node, lineage } => book.push(
                        &ctx,
                        WorkerEntry::Skipped {
                            node: plan.nodes[node].id.to_string(),
                            lineage: lineage.to_string(),
                        },
                    ),
                    Action::Abort { keys } => {
                        // Their results, should they come, are not the run's any more.
                        let keys: HashSet<StepKey> = keys.into_iter().collect();
                        pending.retain(|_, p| match p {
                            Pending::Step { key, .. } | Pending::Retry { key } => {
                                !keys.contains(key)
                            }
                        });
                    }
                    Action::Finish {
                        status,
                        output,
                        error,
                        respond,
                    } => {
                        book.push(
                            &ctx,
                            WorkerEntry::Finished {
                                status,
                                output,
                                error,
                                respond: respond.map(Arc::unwrap_or_clone),
                            },
                        );
                        return book.answer(&ctx);
                    }
                }
            }
            let event = match ready.pop_front() {
                Some(e) => e,
                None => match book.publish_then(&ctx, futures.next()).await {
                    Ok(Some((i, result))) => match pending.remove(&i) {
                        None => continue,
                        Some(Pending::Retry { key }) => Event::RetryDue { key },
                        Some(Pending::Step { key, attempt }) => {
                            let outcome = match result {
                                Ok(Json(outcome)) => outcome,
                                // The step service itself gave up (it never
                                // does for a node's own errors): a terminal failure.
                                Err(e) => StepOutcome::failed(StepError::terminal(format!(
                                    "the worker could not run this step: {}",
                                    e.message()
                                ))),
                            };
                            book.finished(&ctx, &plan, &key, attempt, None, &outcome);
                            event_of(key, outcome)
                        }
                    },
                    Ok(None) => {
                        book.push(
                            &ctx,
                            unstartable("the worker's run has nothing left to wait for but has not ended (a bug: please report it)".into()),
                        );
                        return book.answer(&ctx);
                    }
                    // The invocation was cancelled (the engine's Cancel).
                    Err(_) => Event::Cancel,
                },
            };
            actions = run.apply(event);
        }
    }

    /// The run's entries from `from` on (a page at most).
    #[handler]
    async fn progress(
        &self,
        ctx: SharedWorkflowContext<'_>,
        from: Json<ProgressFrom>,
    ) -> HandlerResult<Json<WorkerProgress>> {
        let from = from.into_inner().from;
        let count = ctx
            .get::<Json<Count>>("n")
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        let total = count.n;
        let end = total.min(from.saturating_add(PAGE));
        let mut entries = Vec::new();
        if from < end {
            for k in from / CHUNK..=(end - 1) / CHUNK {
                let chunk = ctx
                    .get::<Json<Vec<WorkerEntry>>>(&format!("c{k}"))
                    .await?
                    .map(Json::into_inner)
                    .unwrap_or_default();
                let first = k * CHUNK;
                entries.extend(
                    chunk
                        .into_iter()
                        .enumerate()
                        .map(|(i, e)| (first + i as u64, e))
                        .filter(|(i, _)| (from..end).contains(i))
                        .map(|(_, e)| e),
                );
            }
        }
        Ok(Json(WorkerProgress {
            from,
            entries,
            total,
            invocation: Some(count.invocation).filter(|i| !i.is_empty()),
        }))
    }

    /// How the run finished (null: not yet).
    #[handler]
    async fn finish(
        &self,
        ctx: SharedWorkflowContext<'_>,
    ) -> HandlerResult<Json<Option<WorkerEntry>>> {
        let total = ctx
            .get::<Json<Count>>("n")
            .await?
            .map_or(0, |c| c.into_inner().n);
        let Some(last) = total.checked_sub(1) else {
            return Ok(Json(None));
        };
        let chunk = ctx
            .get::<Json<Vec<WorkerEntry>>>(&format!("c{}", last / CHUNK))
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        Ok(Json(
            chunk
                .into_iter()
                .nth((last % CHUNK) as usize)
                .filter(|e| matches!(e, WorkerEntry::Finished { .. })),
        ))
    }

    /// This worker's Sluice version and protocol (any key answers; the
    /// engine's health view asks `SluiceRun/-/about`).
    #[handler]
    async fn about(&self, _ctx: SharedWorkflowContext<'_>) -> HandlerResult<Json<WorkerAbout>> {
        Ok(Json(WorkerAbout {
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: WORKER_PROTOCOL,
        }))
    }

    /// The workflow JSON the run is pinned to (for the step service).
    #[handler]
    async fn definition(&self, ctx: SharedWorkflowContext<'_>) -> HandlerResult<String> {
        Ok(ctx.get::<String>("definition").await?.unwrap_or_default())
    }
}
