//! The Sluice runtime: the tokio executor ([`executor`]) that drives the
//! core's pure run state machine ([`machine`], [`plan`], from sluice-core)
//! with a durable journal in SQLite.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod events;
pub mod executor;
pub mod metrics;
pub mod report;

/// The run state machine and the plan live in the pure core; the executor
/// here is the local driver of them.
pub use sluice_core::{machine, plan};

pub use executor::{
    Engine, Options, RemoteStep, RemoteStepReport, RunHandle, RunResult, WorkerTarget,
};
pub use machine::{Action, Activation, Event, Lineage, Msg, Run, Status, StepError, StepKey};
pub use plan::{Invalid, Plan, Role};
pub use sluice_nodes::Settings;
pub use sluice_store::RunFilter;
