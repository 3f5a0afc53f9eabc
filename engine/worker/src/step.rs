//! `SluiceStep`, the worker's private step service: one invocation per step
//! attempt with I/O (Restate journals its result in the run's journal, and
//! runs it again, with the same idempotency key, when a worker dies midway),
//! and the durable sleeps of retry backoffs and `flow.wait`. Nodes run on
//! the worker's own engine: its vault, blobs and settings.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sluice_core::Plan;
use sluice_model::Workflow;
use sluice_model::kinds::Kind;
use sluice_runtime::{Engine, RemoteStep};

use crate::run::{SluiceRunClient, outcome_of};

/// Plans kept by definition hash (cleared when this many are held).
const PLAN_CACHE: usize = 256;

/// A call from a run to the step service.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StepCall {
    /// One attempt of a node.
    Node(Box<NodeCall>),
    /// A retry's backoff.
    Sleep { ms: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeCall {
    pub run_id: String,
    /// The BLAKE3 hash of the run's pinned definition (the plan's cache key).
    pub hash: String,
    pub node: String,
    pub attempt: u32,
    pub input: Value,
    /// What `nodes.<id>` reads, nearest first.
    pub path: Vec<(String, Value)>,
    pub run_info: Value,
    pub idempotency_key: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFailure {
    pub message: String,
    pub retryable: bool,
}

/// How a step attempt went.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StepOutcome {
    pub outputs: Vec<(String, Value)>,
    pub error: Option<StepFailure>,
    pub logs: Vec<(String, String)>,
    pub at_us: Option<i64>,
    pub duration_us: i64,
}

impl StepOutcome {
    pub fn failed(e: sluice_core::StepError) -> StepOutcome {
        StepOutcome {
            error: Some(StepFailure {
                message: e.message,
                retryable: e.retryable,
            }),
            at_us: Some(sluice_nodes::now_us()),
            ..StepOutcome::default()
        }
    }
}

pub struct SluiceStep {
    pub(crate) engine: Engine,
    pub(crate) plans: Mutex<HashMap<String, Arc<Plan>>>,
}

impl SluiceStep {
    /// The run's plan: cached by hash, else from the run's `definition`.
    async fn plan(&self, ctx: &Context<'_>, call: &NodeCall) -> HandlerResult<Arc<Plan>> {
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&call.hash)
        {
            return Ok(p.clone());
        }
        let text = ctx
            .workflow_client::<SluiceRunClient>(call.run_id.clone())
            .definition()
            .call()
            .await?;
        let plan = Workflow::from_json(&text)
            .map_err(|e| e.to_string())
            .and_then(|wf| Plan::new(wf).map_err(|e| e.to_string()))
            .map_err(|e| TerminalError::new(format!("the run's workflow does not read: {e}")))?;
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if plans.len() >= PLAN_CACHE {
            plans.clear();
        }
        plans.insert(call.hash.clone(), plan.clone());
        Ok(plan)
    }
}

#[restate_sdk::service]
impl SluiceStep {
    #[handler]
    async fn execute(
        &self,
        ctx: Context<'_>,
        call: Json<StepCall>,
    ) -> HandlerResult<Json<StepOutcome>> {
        let call = match call.into_inner() {
            StepCall::Sleep { ms } => {
                ctx.sleep(Duration::from_millis(ms)).await?;
                return Ok(Json(StepOutcome::default()));
            }
            StepCall::Node(call) => *call,
        };
        let plan = self.plan(&ctx, &call).await?;
        let Some(node) = plan.node_index(&call.node) else {
            return Err(TerminalError::new(format!(
                "node `{}` is not in the run's workflow",
                call.node
            ))
            .into());
        };
        let pn = &plan.nodes[node];
        let input = Arc::new(call.input);
        let step = RemoteStep {
            plan: plan.clone(),
            node,
            attempt: call.attempt,
            input: input.clone(),
            path: call
                .path
                .into_iter()
                .map(|(n, v)| (n, Arc::new(v)))
                .collect(),
            run_info: Arc::new(call.run_info),
            idempotency_key: call.idempotency_key,
            first_started_at_us: 0,
        };
        let runs_itself = pn.disabled || plan.pinned.contains_key(&node);
        if !runs_itself && pn.kind == Kind::Wait {
            // A durable sleep: how long is journaled once, then Restate's timer.
            let engine = self.engine.clone();
            let wait = step.clone();
            let delay: Json<Result<u64, StepFailure>> = ctx
                .run(|| async move {
                    let now = sluice_nodes::now_us();
                    let wait = RemoteStep {
                        first_started_at_us: now,
                        ..wait
                    };
                    Ok(Json(match engine.wait_until(wait) {
                        Ok(until) => Ok(u64::try_from((until - now).max(0) / 1000).unwrap_or(0)),
                        Err(e) => Err(StepFailure {
                            message: e.message,
                            retryable: e.retryable,
                        }),
                    }))
                })
                .name("flow.wait")
                .await?;
            let timeout = pn.timeout_ms;
            return Ok(Json(match delay.into_inner() {
                // The node's timeout bounds a wait as it bounds any step.
                Ok(ms) if timeout.is_some_and(|t| t < ms) => {
                    let t = timeout.unwrap_or_default();
                    ctx.sleep(Duration::from_millis(t)).await?;
                    StepOutcome::failed(sluice_core::StepError::retryable(format!(
                        "timed out after {t} ms"
                    )))
                }
                Ok(ms) => {
                    ctx.sleep(Duration::from_millis(ms)).await?;
                    StepOutcome {
                        outputs: vec![("out".into(), (*input).clone())],
                        at_us: Some(sluice_nodes::now_us()),
                        ..StepOutcome::default()
                    }
                }
                Err(e) => StepOutcome {
                    error: Some(e),
                    at_us: Some(sluice_nodes::now_us()),
                    ..StepOutcome::default()
                },
            }));
        }
        let report = self.engine.execute_step(step).await;
        Ok(Json(outcome_of(report, Some(sluice_nodes::now_us()))))
    }
}
