//! Sluice's pure core: the run state machine ([`machine`]), the plan it runs
//! ([`plan`]), step errors ([`StepError`]), workflow definitions as runs pin
//! them ([`Definition`]) and jq checking ([`jq`]). No I/O and no async
//! runtime: the local executor (sluice-runtime) drives it with a SQLite
//! journal, and a second driver can drive the same machine with another
//! journal. Builds for wasm32 (checked by `cargo xtask test`).
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod definition;
pub mod error;
pub mod journal;
pub mod jq;
pub mod machine;
pub mod plan;

pub use definition::Definition;
pub use error::StepError;
pub use journal::{Entry, Resumed};
pub use machine::{Action, Activation, Event, Lineage, Msg, Run, Status, StepKey};
pub use plan::{EntryError, Invalid, Plan, Role};
