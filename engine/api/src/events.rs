//! Live events: what runs are doing, as it happens (the WebSocket's run
//! events, the editor's live marks). The engine publishes them on a bounded
//! broadcast channel; names and nodes are shared (`Arc<str>`), so an event
//! costs no copies of them.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::runs::{RunError, RunStatus, StepStatus};

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveEvent {
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub run: Arc<str>,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub workflow: Arc<str>,
    /// Microseconds since the Unix epoch.
    pub at_us: i64,
    #[serde(flatten)]
    pub what: What,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum What {
    RunStarted {
        trigger: String,
        /// It runs the draft, not the published version.
        #[serde(default, skip_serializing_if = "crate::runs::is_false")]
        draft: bool,
        /// `worker`: handed off to the shared worker and mirrored here.
        #[serde(default, skip_serializing_if = "crate::runs::RunOn::is_local")]
        executor: crate::runs::RunOn,
    },
    StepStarted {
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        node: Arc<str>,
        lineage: String,
        activation: String,
        attempt: u32,
    },
    StepFinished {
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        node: Arc<str>,
        lineage: String,
        activation: String,
        attempt: u32,
        /// `succeeded` or `failed`.
        status: StepStatus,
        duration_us: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    StepSkipped {
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        node: Arc<str>,
        lineage: String,
    },
    /// A `flow.approval` step waits for its decision.
    StepWaiting {
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        node: Arc<str>,
        lineage: String,
        activation: String,
    },
    /// The run is parked: all it has left is waiting for decisions (the
    /// run's detail lists them).
    RunWaiting {},
    Log {
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        node: Arc<str>,
        lineage: String,
        level: String,
        message: String,
    },
    /// A piece of text a step is producing (a model's tokens), as it comes:
    /// live only; the whole text is a `log` line when the step ends.
    Stream {
        #[cfg_attr(feature = "openapi", schema(value_type = String))]
        node: Arc<str>,
        lineage: String,
        level: String,
        text: String,
    },
    RunFinished {
        status: RunStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunError>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_flat_objects_tagged_by_type() {
        let e = LiveEvent {
            run: "r1".into(),
            workflow: "w".into(),
            at_us: 7,
            what: What::StepFinished {
                node: "a".into(),
                lineage: "0".into(),
                activation: "".into(),
                attempt: 1,
                status: StepStatus::Succeeded,
                duration_us: 3,
                error: None,
            },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"run": "r1", "workflow": "w", "at_us": 7, "type": "step_finished", "node": "a",
                   "lineage": "0", "activation": "", "attempt": 1, "status": "succeeded", "duration_us": 3})
        );
        assert_eq!(serde_json::from_value::<LiveEvent>(v).unwrap(), e);
    }
}
