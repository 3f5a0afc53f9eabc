//! The Sluice runtime: the pure run state machine ([`machine`]), the plan it
//! runs ([`plan`]), and the tokio executor that drives it with a durable
//! journal in SQLite ([`executor`]).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod events;
pub mod executor;
pub mod machine;
pub mod metrics;
pub mod plan;
pub mod report;

pub use executor::{Engine, Options, RunHandle, RunResult};
pub use machine::{Action, Activation, Event, Lineage, Msg, Run, Status, StepError, StepKey};
pub use plan::{Invalid, Plan, Role};
pub use sluice_nodes::Settings;
