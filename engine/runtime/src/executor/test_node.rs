//! "Run this node": one node of a workflow's draft, run once on an input
//! and `nodes.<id>` messages the caller gives (the editor takes them from
//! the last run or from pinned test data), without running the rest. Not a
//! run: nothing is journaled, no trigger fires; its side effects are real,
//! which is what testing a node is for. Secrets are masked as in a run.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use sluice_api::{LogLine, NodeTested, RunError, StepStatus, TestNode};
use sluice_model::preview::RunOutputs;
use sluice_model::template::Scope;
use sluice_nodes as nodes;

use super::step::Prepared;
use super::{Engine, Error, Result, new_run_id};

/// How long a node under test may take when it sets no `timeout_ms`.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(120);

impl Engine {
    /// Runs node `node` of workflow `workflow`'s draft once on `req`.
    pub async fn test_node(&self, workflow: &str, node: &str, req: TestNode) -> Result<NodeTested> {
        let plan = self.draft(workflow).await?;
        let index = plan.node_index(node).ok_or_else(|| Error::NodeNotFound {
            workflow: workflow.to_string(),
            node: node.to_string(),
        })?;
        if sluice_model::value::deeper_than(&req.input, sluice_model::value::MAX_DEPTH)
            || req
                .nodes
                .values()
                .any(|v| sluice_model::value::deeper_than(v, sluice_model::value::MAX_DEPTH))
        {
            return Err(Error::InputTooDeep);
        }
        let test_id = format!("test-{}", new_run_id());
        let started_at_us = nodes::now_us();
        let input = Arc::new(req.input);
        let scope = Scope {
            input: input.clone(),
            nodes: Arc::new(RunOutputs::from_messages(req.nodes)),
            run: Arc::new(sluice_model::preview::run_info(
                &test_id,
                &plan.workflow.id,
                node,
                started_at_us,
            )),
            vars: plan.vars.clone(),
        };
        let pn = &plan.nodes[index];
        let step = Prepared::detached(self, plan.clone(), format!("{test_id}/{node}"), scope);
        let result = if pn.disabled {
            Ok(vec![("out".to_string(), input)])
        } else if let Some(r) = nodes::execute_pure(&step.call(pn, started_at_us)) {
            r
        } else {
            let _permit = if pn.kind.only_waits() {
                None
            } else {
                self.inner.permits.clone().acquire_owned().await.ok()
            };
            let limit = pn
                .timeout_ms
                .map_or(TEST_TIMEOUT, Duration::from_millis)
                .min(TEST_TIMEOUT);
            match tokio::time::timeout(limit, nodes::execute(step.call(pn, started_at_us))).await {
                Ok(r) => r,
                Err(_) => Err(nodes::Error::retryable(format!(
                    "timed out after {} ms",
                    limit.as_millis()
                ))),
            }
        };
        let started = step.started;
        let (result, logs) = step.finish(result);
        let duration_us = i64::try_from(started.elapsed().as_micros()).unwrap_or(i64::MAX);
        let now = nodes::now_us();
        let logs = logs
            .into_iter()
            .map(|(level, message)| LogLine {
                node: node.to_string(),
                lineage: String::new(),
                level,
                message,
                at_us: now,
            })
            .collect();
        Ok(match result {
            Ok(outputs) => NodeTested {
                node: node.to_string(),
                status: StepStatus::Succeeded,
                output: Some(by_port(outputs)),
                error: None,
                logs,
                duration_us,
            },
            Err(e) => NodeTested {
                node: node.to_string(),
                status: StepStatus::Failed,
                output: None,
                error: Some(RunError {
                    node: Some(node.to_string()),
                    message: e.message,
                    retryable: Some(e.retryable),
                    attempts: Some(1),
                }),
                logs,
                duration_us,
            },
        })
    }
}

/// Outputs as `{port: message}`; a port that sent several messages (a
/// split) holds them as an array, in order.
fn by_port(outputs: Vec<(String, nodes::Msg)>) -> Value {
    let mut counts: Map<String, Value> = Map::new();
    for (port, _) in &outputs {
        let n = counts.get(port).and_then(Value::as_u64).unwrap_or(0);
        counts.insert(port.clone(), Value::from(n + 1));
    }
    let mut out = Map::new();
    for (port, msg) in outputs {
        let msg = Arc::unwrap_or_clone(msg);
        if counts.get(&port).and_then(Value::as_u64) == Some(1) {
            out.insert(port, msg);
        } else if let Value::Array(items) =
            out.entry(port).or_insert_with(|| Value::Array(Vec::new()))
        {
            items.push(msg);
        }
    }
    Value::Object(out)
}
