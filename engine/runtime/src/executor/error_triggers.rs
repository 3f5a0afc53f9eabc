//! Error triggers: when a top-level run ends `failed`, its driver starts
//! every `trigger.error` watching that workflow before it reports the
//! result. Runs started this way never fire error triggers themselves.

use std::sync::Arc;

use serde_json::json;
use sluice_model::kinds::Trigger;

use super::{Engine, RunResult, new_run_id, tracing_log};

impl Engine {
    /// Starts every `trigger.error` that watches `workflow` (its `workflows`
    /// list, or every other workflow when it has none) with the failure.
    /// Runs started this way never fire error triggers themselves: no cascades.
    pub async fn fire_error_triggers(&self, workflow: &str, failed: &RunResult) {
        let message = Arc::new(json!({
            "run_id": failed.id,
            "workflow": workflow,
            "node": failed.error.as_ref().and_then(|e| e.node.as_deref()),
            "error": failed.error,
        }));
        let rows = match self.store().list_workflows().await {
            Ok(rows) => rows,
            Err(e) => {
                return tracing_log(&format!(
                    "run {}: cannot look for error triggers: {e}",
                    failed.id
                ));
            }
        };
        for row in rows {
            let Ok(plan) = self.workflow(&row.id).await else {
                continue;
            };
            for node in plan.nodes.iter().filter(|n| !n.disabled) {
                let Some(Trigger::Error(cfg)) = &node.trigger else {
                    continue;
                };
                let watched = match &cfg.workflows {
                    Some(list) => list.iter().any(|w| w == workflow),
                    None => row.id != workflow,
                };
                if !watched {
                    continue;
                }
                let started = self
                    .start_with_id(
                        new_run_id(),
                        plan.clone(),
                        Some(&node.id),
                        message.clone(),
                        None,
                    )
                    .await;
                if let Err(e) = started {
                    tracing_log(&format!("error trigger {}/{}: {e}", row.id, node.id));
                }
            }
        }
    }
}
