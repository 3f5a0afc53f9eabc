//! The shared worker's protocol: what an engine hands to `sluice worker`
//! through the Restate ingress ([`WorkerRun`]), what the worker records of a
//! run as it goes ([`WorkerEntry`], read back in pages of [`WorkerProgress`])
//! and the health view of `GET /api/v1/worker` ([`WorkerHealth`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runs::{RunError, RunStatus};

/// The version of this protocol. An engine and a worker that disagree
/// refuse the run with both versions named (no silent replay of a run under
/// code that reads it differently).
pub const WORKER_PROTOCOL: u32 = 1;

/// The Restate workflow that runs handed-off runs (keyed by run id).
pub const RUN_SERVICE: &str = "SluiceRun";

/// The Restate virtual object that owns a deployed workflow (keyed by
/// workflow id): its version, its schedules' durable timers, and the log
/// of the runs it started.
pub const DEPLOY_SERVICE: &str = "SluiceDeploy";

/// Whether a run id was made by the worker for a deployed workflow (a
/// schedule fire or a webhook call on the worker's port). Such runs are
/// never sent by an engine: it adopts them from the deployment's log and
/// only reads them back.
pub fn deployed_run(id: &str) -> bool {
    id.starts_with('d')
}

/// A run handed to the worker: the pinned workflow version and the input.
/// Never credentials: the worker resolves them by name from its own vault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerRun {
    /// [`WORKER_PROTOCOL`] of the engine that sent it.
    pub protocol: u32,
    /// The Sluice version of the engine that sent it.
    pub engine_version: String,
    pub run_id: String,
    pub workflow: String,
    /// The workflow JSON the run is pinned to.
    pub definition: String,
    /// The trigger node it starts at.
    pub trigger: String,
    pub input: Value,
    pub created_at_us: i64,
    #[serde(default)]
    pub draft: bool,
    /// Steps a retry from the failed step reuses (they finished in the run
    /// it retries): recorded as succeeded with these outputs, never run again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reuse: Vec<ReusedStep>,
}

/// A finished step a retried run takes over instead of running it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReusedStep {
    pub node: String,
    pub lineage: String,
    pub activation: String,
    /// `[[port, message], ...]`, as it produced them.
    pub outputs: Value,
}

/// One thing the worker recorded about a run, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerEntry {
    /// A step attempt began (steps with side effects; pure ones are
    /// recorded once, finished, with their input).
    Started {
        node: String,
        lineage: String,
        activation: String,
        attempt: u32,
        input: Value,
    },
    /// A step attempt produced messages: `outputs` is `[[port, message], ...]`.
    Succeeded {
        node: String,
        lineage: String,
        activation: String,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        outputs: Value,
        /// When it finished (None: a step the worker ran in line; the
        /// engine stamps it as it reads it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_us: Option<i64>,
        duration_us: i64,
    },
    Failed {
        node: String,
        lineage: String,
        activation: String,
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        message: String,
        retryable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_us: Option<i64>,
        duration_us: i64,
    },
    /// A node that will not run for this lineage.
    Skipped { node: String, lineage: String },
    /// A log line of a step.
    Log {
        node: String,
        lineage: String,
        level: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_us: Option<i64>,
    },
    /// The run is over.
    Finished {
        status: RunStatus,
        output: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<RunError>,
        /// The first `output.respond` reached: `{status, headers, body}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        respond: Option<Value>,
    },
}

/// The body of the worker's `progress` handler: entries from `from` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressFrom {
    pub from: u64,
}

/// A page of a run's entries, `from` the index asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerProgress {
    pub from: u64,
    pub entries: Vec<WorkerEntry>,
    /// How many entries the run has recorded so far.
    pub total: u64,
    /// The run's Restate invocation (cancelling it needs it), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<String>,
}

/// `GET /api/v1/worker`: where hand-off stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerHealth {
    /// `[worker] ingress` (null: no worker configured).
    pub ingress: Option<String>,
    /// The Restate ingress answered.
    pub reachable: bool,
    /// A Sluice worker is registered with it.
    pub registered: bool,
    /// The worker's Sluice version and protocol, when registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u32>,
    /// Runs handed off from this engine and not yet finished.
    pub in_flight: u64,
    /// What is wrong and what to do, when something is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// What the worker's `about` handler answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerAbout {
    pub version: String,
    pub protocol: u32,
}

/// A workflow version given to the worker to own (`SluiceDeploy/{id}/deploy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Deployment {
    /// [`WORKER_PROTOCOL`] of the engine that deploys it.
    pub protocol: u32,
    pub engine_version: String,
    pub workflow: String,
    /// The published document version deployed.
    pub version: String,
    /// The workflow JSON of that version.
    pub definition: String,
}

/// What the worker owns of a workflow now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Deployed {
    pub workflow: String,
    pub version: String,
    pub deployed_at_us: i64,
    /// Its schedules' next fires: `[trigger, RFC 3339 time]`.
    #[serde(default)]
    pub next_fires: Vec<(String, String)>,
    /// Its webhooks, as `METHOD /hook/{workflow}/{path}` on the worker's hook port.
    #[serde(default)]
    pub webhooks: Vec<String>,
}

/// One run a deployment started, in the deployment's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployedRun {
    pub run_id: String,
    /// The document version it runs.
    pub version: String,
    pub trigger: String,
    pub input: Value,
    pub created_at_us: i64,
}

/// A page of a deployment's run log from `after` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployedRuns {
    /// The log index of the first run in `runs`.
    pub from: u64,
    pub runs: Vec<DeployedRun>,
    /// How many runs the deployment has logged so far.
    pub total: u64,
}

/// `GET|POST|DELETE /api/v1/workflows/{id}/deploy`: what this engine knows of
/// a workflow's deployment on the shared worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeployState {
    pub workflow: String,
    /// The version the worker owns (null: not deployed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at_us: Option<i64>,
    /// Its schedules' next fires on the worker: `[trigger, RFC 3339 time]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_fires: Vec<(String, String)>,
    /// Its webhooks on the worker's hook port.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<String>,
}
