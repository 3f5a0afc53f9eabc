//! Sluice storage: SQLite (via sqlx, WAL) for workflows, runs, the run
//! journal and run logs; a content-addressed blob store for large values; and
//! the group-commit journal writer that makes journaling cheap.
//!
//! Architecture invariant: every write that belongs to a run's history goes
//! through the one journal writer thread and its one connection, so run rows,
//! records, logs and finishes commit in the order they were queued.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

/// A struct and its `sqlx::FromRow`, reading each field from the column of
/// its name (what `#[derive(sqlx::FromRow)]` does), from the one definition:
/// each field is named once. Not the derive: sqlx's proc macros take on
/// every database driver the workspace enables (`db.query`'s PostgreSQL and
/// MySQL) and a second build of SQLite, all compiled again for the host
/// (docs/benchmarks.md, CI from a clean clone).
macro_rules! from_row {
    (
        $(#[$attr:meta])*
        $vis:vis struct $t:ident {
            $($(#[$field_attr:meta])* $field_vis:vis $field:ident : $ty:ty),* $(,)?
        }
    ) => {
        $(#[$attr])*
        $vis struct $t {
            $($(#[$field_attr])* $field_vis $field: $ty,)*
        }
        impl<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow> for $t {
            fn from_row(row: &'r sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
                use sqlx::Row as _;
                Ok($t {
                    $($field: row.try_get(stringify!($field))?,)*
                })
            }
        }
    };
}
pub(crate) use from_row;

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
