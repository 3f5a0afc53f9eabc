//! The wire protocol, typed once for both sides: what the engine's HTTP API,
//! its WebSocket and the CLI's `--json` send, and what the editor, the
//! desktop shell and scripts read. Serde only (no I/O), so the editor builds
//! it for wasm32; the server derives its OpenAPI schemas from these types
//! (feature `openapi`).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod error;
pub mod events;
pub mod peers;
pub mod runs;
pub mod storage;
pub mod worker;
pub mod workflows;
pub mod ws;

pub use error::{ErrorBody, ErrorInfo};
pub use events::{LiveEvent, What};
pub use peers::{
    Join, Joined, LinkEntry, LinkState, NewShare, PeerEntry, PeersInfo, Role, ShareCreated,
    ShareEntry, Shares, TicketInfo,
};
pub use runs::{
    Decision, LogLine, NodeTested, Retry, RetryFrom, RunDetail, RunError, RunOn, RunOutcome,
    RunStarted, RunStatus, RunSummary, Signalled, StartRun, Step, StepStatus, TestCall, TestNode,
    Waiting,
};
pub use storage::{KeepFor, KeepMax, PruneReport, Retention, RetentionOverride, StorageReport};
pub use worker::{
    DEPLOY_SERVICE, DeployState, Deployed, DeployedRun, DeployedRuns, Deployment, ProgressFrom,
    RUN_SERVICE, ReusedStep, WORKER_PROTOCOL, WorkerAbout, WorkerEntry, WorkerHealth,
    WorkerProgress, WorkerRun, deployed_run,
};
pub use workflows::{
    Changes, CredentialEntry, CredentialStored, CredentialTested, CredentialUse, FromPeer, Health,
    LastRun, Me, ModuleAdded, NewCredential, NewSignInLink, PatchCredential, Problem, Publish,
    PublishMode, PublishState, Restored, SetCredential, SignInLink, Stored, TestCredential,
    Validation, VersionEntry, WorkflowEntry,
};

/// For `Option<Value>` fields where `null` and absent differ: a field that
/// is present stays `Some`, even when it is `null`.
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}
