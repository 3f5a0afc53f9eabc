//! Live events: what runs are doing, as it happens, for the WebSocket and the
//! editor. Published on a bounded broadcast channel: a subscriber that falls
//! behind loses events (and is told so), the engine never waits for it.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

/// How many events a slow subscriber may fall behind before it lags.
pub const CAPACITY: usize = 4096;

/// One thing that happened in a run.
#[derive(Debug, Clone, Serialize)]
pub struct LiveEvent {
    pub run: Arc<str>,
    pub workflow: Arc<str>,
    /// Microseconds since the Unix epoch.
    pub at_us: i64,
    #[serde(flatten)]
    pub what: What,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum What {
    RunStarted {
        trigger: String,
    },
    StepStarted {
        node: Arc<str>,
        lineage: String,
        activation: String,
        attempt: u32,
    },
    StepFinished {
        node: Arc<str>,
        lineage: String,
        activation: String,
        attempt: u32,
        /// `succeeded` or `failed`.
        status: &'static str,
        duration_us: i64,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    StepSkipped {
        node: Arc<str>,
        lineage: String,
    },
    Log {
        node: Arc<str>,
        lineage: String,
        level: String,
        message: String,
    },
    RunFinished {
        status: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<Value>,
    },
}
