//! Runs as the API, the CLI's `--json` and the editor see them: a summary
//! per run and one entry per step attempt.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a run is. The one run status type: the state machine, the store,
/// live events, the API and the editor all use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    /// Parked at a `flow.approval` (see `RunSummary::waiting`) until a
    /// signal or its timeout: it holds no task or memory meanwhile.
    Waiting,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 5] = [
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ];

    /// The status as stored and sent (`succeeded`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the run has ended.
    pub fn is_finished(self) -> bool {
        !matches!(self, RunStatus::Running | RunStatus::Waiting)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status that is not one of `running`, `waiting`, `succeeded`, `failed`, `cancelled`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "status `{}`: expected running, waiting, succeeded, failed or cancelled",
            self.0
        )
    }
}

impl std::error::Error for UnknownStatus {}

impl FromStr for RunStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RunStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

/// Where one step attempt is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Running,
    Succeeded,
    Failed,
    /// Not run: its branch was not taken.
    Skipped,
    /// Started, then cut short by a crash (run again after the restart).
    Interrupted,
    /// A `flow.approval` waiting for its decision.
    Waiting,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Running => "running",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Skipped => "skipped",
            StepStatus::Interrupted => "interrupted",
            StepStatus::Waiting => "waiting",
        }
    }
}

impl fmt::Display for StepStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run failed or was cancelled, or why a step attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunError {
    /// The node that failed (absent when the run ended otherwise: cancelled,
    /// the engine stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What went wrong, naming the thing (field, file, status).
    pub message: String,
    /// Whether another attempt could succeed (a timeout, a 5xx) or not (bad
    /// config, a 4xx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// The attempts made, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

impl RunError {
    /// An error that belongs to no node (the run was cancelled, the engine
    /// stopped).
    pub fn of_run(message: impl Into<String>) -> Self {
        RunError {
            node: None,
            message: message.into(),
            retryable: None,
            attempts: None,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.node {
            Some(node) => write!(f, "node `{node}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// A run without its steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunSummary {
    pub id: String,
    pub workflow: String,
    /// The trigger node it started at.
    pub trigger: String,
    pub status: RunStatus,
    /// An object keyed by exit node id (null until the run ends).
    pub output: Value,
    /// Why the run failed or was cancelled.
    pub error: Option<RunError>,
    /// Microseconds since the Unix epoch.
    pub created_at_us: i64,
    pub finished_at_us: Option<i64>,
    /// The workflow document version it ran (null for a run of a file).
    pub version: Option<String>,
    /// It ran the draft (the editor's Run), not the published version.
    #[serde(default, skip_serializing_if = "is_false")]
    pub draft: bool,
    /// Where it executes: `"local"`, or `"worker"` for a run handed off to
    /// the shared worker (its steps and logs are mirrored back here).
    #[serde(default, skip_serializing_if = "RunOn::is_local")]
    pub executor: RunOn,
    /// The approvals it waits at (in a run's detail; empty in lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Waiting>,
}

/// A `flow.approval` step waiting for its decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Waiting {
    pub node: String,
    /// Split indices ("" outside splits).
    pub lineage: String,
    pub activation: String,
    /// What is asked (the node's `message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Microseconds since the Unix epoch.
    pub since_us: i64,
    /// When its timeout passes (absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_at_us: Option<i64>,
    /// The one-time link that decides it (POST; GET shows a page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_url: Option<String>,
}

/// How a signal decides an approval (`POST /api/v1/runs/{id}/signal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The body goes out on `approved`.
    Approved,
    /// The body goes out on `rejected`.
    Rejected,
}

impl Decision {
    /// The output port it sends the body on.
    pub fn port(self) -> &'static str {
        match self {
            Decision::Approved => "approved",
            Decision::Rejected => "rejected",
        }
    }

    /// `approved`/`approve`, `rejected`/`reject`.
    pub fn parse(s: &str) -> Option<Decision> {
        match s.trim().to_ascii_lowercase().as_str() {
            "approved" | "approve" => Some(Decision::Approved),
            "rejected" | "reject" => Some(Decision::Rejected),
            _ => None,
        }
    }
}

/// What a signal did (the answer of `POST /api/v1/runs/{id}/signal` and of
/// a resume link).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Signalled {
    pub run_id: String,
    /// The approval it decided.
    pub node: String,
    pub lineage: String,
    pub decision: Decision,
}

/// Where a run executes (`settings.run_on`, `StartRun::run_on`,
/// `RunSummary::executor`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunOn {
    /// On this machine's engine.
    #[default]
    Local,
    /// Handed off to the shared worker (`[worker] ingress` in config.toml).
    Worker,
}

impl RunOn {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOn::Local => "local",
            RunOn::Worker => "worker",
        }
    }

    pub fn is_local(&self) -> bool {
        *self == RunOn::Local
    }
}

impl std::str::FromStr for RunOn {
    type Err = String;
    fn from_str(s: &str) -> Result<RunOn, String> {
        match s {
            "local" => Ok(RunOn::Local),
            "worker" => Ok(RunOn::Worker),
            other => Err(format!("`{other}`: expected `local` or `worker`")),
        }
    }
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// One step attempt: a node's run for one message (lineage, activation) and
/// attempt, or a skip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Step {
    pub node: String,
    /// The split indices of its message (`""` outside splits).
    pub lineage: String,
    pub status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// When it was skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_us: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<i64>,
    /// Its input (present, maybe null, for every step that ran).
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub input: Option<Value>,
    /// Its messages by output port (a succeeded step).
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub output: Option<Value>,
    /// Its error (a failed step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
}

/// A run with every step attempt (`GET /api/v1/runs/{id}`, `sluice runs show --json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunSummary,
    pub steps: Vec<Step>,
}

/// The body of `POST /api/v1/workflows/{id}/runs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRun {
    /// The trigger's message.
    #[serde(default)]
    pub input: Value,
    /// The trigger to start at (default: the only `trigger.manual`, else the only trigger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Answer with the finished run (waiting at most the server's webhook timeout).
    #[serde(default)]
    pub wait: bool,
    /// Run the draft (the workflow as being edited) instead of the
    /// published version: the editor's Run.
    #[serde(default, skip_serializing_if = "is_false")]
    pub draft: bool,
    /// Where this run executes, overriding the workflow's `settings.run_on`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_on: Option<RunOn>,
}

/// The body of `POST /api/v1/runs/{id}/retry`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Retry {
    #[serde(default)]
    pub from: RetryFrom,
}

/// Where a retry starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RetryFrom {
    /// Reuse every finished step and run the failed one again.
    #[default]
    Failed,
    /// Run the pinned version again from its trigger.
    Start,
}

/// A run just started (`POST /api/v1/workflows/{id}/run` without waiting,
/// `POST /api/v1/runs/{id}/retry`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunStarted {
    pub id: String,
    pub status: RunStatus,
    /// The workflow document version it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The run this one retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
    /// It runs the draft, not the published version.
    #[serde(default, skip_serializing_if = "is_false")]
    pub draft: bool,
}

/// A run that ended while the caller waited (`POST /api/v1/workflows/{id}/run`
/// with `wait`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunOutcome {
    pub id: String,
    pub workflow: String,
    pub status: RunStatus,
    pub output: Value,
    pub error: Option<RunError>,
    /// The workflow document version it ran.
    pub version: Option<String>,
}

/// A line of a run's log (`GET /api/v1/runs/{id}/logs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogLine {
    pub node: String,
    pub lineage: String,
    pub level: String,
    pub message: String,
    pub at_us: i64,
}

/// The body of `POST /api/v1/workflows/{id}/nodes/{node}/test`: what to
/// run one node of the draft on ("Run this node" in the editor).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TestNode {
    /// The node's input message.
    #[serde(default)]
    pub input: Value,
    /// What `nodes.<id>` reads in its templates: the messages of the nodes
    /// before it, by id (from a run, or pinned).
    #[serde(default)]
    pub nodes: std::collections::BTreeMap<String, Value>,
}

/// The answer to a node test: one attempt of one node, not a run (nothing
/// is journaled; its side effects, a request sent or a file written, are
/// real).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct NodeTested {
    pub node: String,
    /// `succeeded` or `failed`.
    pub status: StepStatus,
    /// Its messages by output port (when it succeeded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// What it logged, secrets masked.
    #[serde(default)]
    pub logs: Vec<LogLine>,
    pub duration_us: i64,
}

/// The answer to `POST /api/v1/workflows/{id}/nodes/{node}/listen`: the
/// message a call to the webhook's test URL made (what the trigger would
/// start a run with).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TestCall {
    pub node: String,
    pub message: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn statuses_read_back_as_written() {
        for st in RunStatus::ALL {
            assert_eq!(st.as_str().parse::<RunStatus>(), Ok(st));
            assert_eq!(serde_json::to_value(st).unwrap(), json!(st.as_str()));
        }
        assert_eq!(
            "done".parse::<RunStatus>().unwrap_err().to_string(),
            "status `done`: expected running, waiting, succeeded, failed or cancelled"
        );
    }

    #[test]
    fn a_null_input_stays_apart_from_no_input() {
        let ran = json!({"node": "a", "lineage": "", "status": "running", "activation": "", "attempt": 1, "started_at_us": 5, "input": null});
        let step: Step = serde_json::from_value(ran.clone()).unwrap();
        assert_eq!(step.input, Some(Value::Null));
        assert_eq!(serde_json::to_value(&step).unwrap(), ran);
        let skipped = json!({"node": "b", "lineage": "", "status": "skipped", "at_us": 5});
        let step: Step = serde_json::from_value(skipped.clone()).unwrap();
        assert_eq!(step.input, None);
        assert_eq!(serde_json::to_value(&step).unwrap(), skipped);
    }
}
