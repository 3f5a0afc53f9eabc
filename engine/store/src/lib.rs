//! Sluice storage: SQLite (via sqlx, WAL) for workflows, runs, the run
//! journal and run logs; a content-addressed blob store for large values; and
//! the group-commit journal writer that makes journaling cheap.
//!
//! Architecture invariant: every write that belongs to a run's history goes
//! through the one journal writer thread and its one connection, so run rows,
//! records, logs and finishes commit in the order they were queued.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod blobs;
mod error;
mod journal;
mod store;
mod vault;

pub use blobs::{Blobs, BytesWriter, INLINE_LIMIT, Stored, ValueRef};
pub use error::{Error, Result};
pub use journal::{
    Committed, Journal, LogLine, MAX_LOG_MESSAGE, Record, RecordKind, RunEnd, SqliteError, Wait,
    WaitKey, WriteFailure,
};
/// Run statuses: one type, shared with the engine, the API and the editor.
pub use sluice_api::{RunError, RunStatus};
pub use store::{
    BLOB_GRACE, Collected, CredentialRead, CredentialRow, Cutoffs, Definition, Deleted,
    DeploymentRow, GrantRow, LinkRow, NewRun, NewShare, Prunable, Redeem, Refusal, RunFilter,
    RunRow, ShareRow, StorageFacts, Store, StoredDoc, VersionMark, VersionRow, WorkflowRow,
};
