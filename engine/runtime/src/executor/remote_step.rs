//! One step of a run that another driver drives (the shared worker, which
//! keeps its journal in Restate): [`Engine::execute_step`] runs the node
//! with this engine's credentials, blobs and I/O, through the same
//! [`Prepared`] a local step uses, so limits, timeouts and secret masking
//! are the local executor's own.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_model::template::{NodeOutputs, Scope};
use sluice_nodes as nodes;

use super::Engine;
use super::step::Prepared;
use crate::machine::{Msg, StepError};
use crate::plan::Plan;

/// A step to execute for a driver elsewhere.
#[derive(Debug, Clone)]
pub struct RemoteStep {
    pub plan: Arc<Plan>,
    /// The node's index in the plan.
    pub node: usize,
    pub attempt: u32,
    pub input: Msg,
    /// What `nodes.<id>` reads: outputs on the message's path, nearest first.
    pub path: Vec<(String, Msg)>,
    /// The template context `run`.
    pub run_info: Arc<Value>,
    /// `run/node/lineage/activation`, the same for every attempt.
    pub idempotency_key: String,
    pub first_started_at_us: i64,
}

/// How a remote step went: its messages or its error (secrets masked), its
/// log lines, and how long the node took.
#[derive(Debug)]
pub struct RemoteStepReport {
    pub result: Result<Vec<(String, Msg)>, StepError>,
    pub logs: Vec<(String, String)>,
    pub duration_us: i64,
}

/// `nodes.<id>` from the outputs a driver sent along, in path order.
#[derive(Debug)]
struct PathOutputs(Vec<(String, Msg)>);

impl NodeOutputs for PathOutputs {
    fn get(&self, id: &str) -> Option<Msg> {
        self.0.iter().find(|(n, _)| n == id).map(|(_, m)| m.clone())
    }

    fn ids(&self) -> Vec<String> {
        self.0.iter().map(|(n, _)| n.clone()).collect()
    }
}

impl Engine {
    /// Whether node `node` of `plan` runs without I/O (a pure kind, a
    /// disabled node or pinned test data): a driver may run it in line.
    pub fn step_is_pure(plan: &Plan, node: usize) -> bool {
        let n = &plan.nodes[node];
        n.disabled || plan.pinned.contains_key(&node) || n.kind.is_pure()
    }

    /// When a `flow.wait` step is due (Unix micros), its templates resolved
    /// as the step would resolve them.
    pub fn wait_until(&self, step: RemoteStep) -> Result<i64, StepError> {
        let scope = Scope {
            input: step.input.clone(),
            nodes: Arc::new(PathOutputs(step.path)),
            run: step.run_info,
            vars: step.plan.vars.clone(),
        };
        let pn = &step.plan.nodes[step.node];
        let prepared = Prepared::remote(self, step.plan.clone(), step.idempotency_key, scope);
        nodes::wait_until_us(&prepared.call(pn, step.first_started_at_us))
    }

    /// Executes one attempt of a step and reports it; never journals.
    pub async fn execute_step(&self, step: RemoteStep) -> RemoteStepReport {
        let RemoteStep {
            plan,
            node,
            attempt,
            input,
            path,
            run_info,
            idempotency_key,
            first_started_at_us,
        } = step;
        if let Some(log) = &self.inner.exec_log {
            use std::io::Write;
            if let Ok(mut f) = log.lock() {
                // Test hook only: a failed write just means a missing count.
                writeln!(f, "{idempotency_key} {attempt}").ok();
            }
        }
        let scope = Scope {
            input: input.clone(),
            nodes: Arc::new(PathOutputs(path)),
            run: run_info,
            vars: plan.vars.clone(),
        };
        let pn = &plan.nodes[node];
        let prepared = Prepared::remote(self, plan.clone(), idempotency_key, scope);
        let result = if pn.disabled {
            Ok(vec![("out".to_string(), input)])
        } else if let Some(pinned) = plan.pinned.get(&node) {
            Ok(pinned.clone())
        } else if let Some(r) = nodes::execute_pure(&prepared.call(pn, first_started_at_us)) {
            r
        } else {
            let _permit = if pn.kind.only_waits() {
                None
            } else {
                self.inner.permits.clone().acquire_owned().await.ok()
            };
            let fut = nodes::execute(prepared.call(pn, first_started_at_us));
            match pn.timeout_ms {
                Some(ms) => match tokio::time::timeout(Duration::from_millis(ms), fut).await {
                    Ok(r) => r,
                    Err(_) => Err(nodes::Error::retryable(format!("timed out after {ms} ms"))),
                },
                None => fut.await,
            }
        };
        let started = prepared.started;
        let (result, logs) = prepared.finish(result);
        RemoteStepReport {
            result,
            logs,
            duration_us: i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX),
        }
    }
}
