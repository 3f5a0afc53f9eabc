//! Stored workflows and credentials as lists show them.

use serde::{Deserialize, Serialize};

/// An entry of `GET /api/v1/workflows`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkflowEntry {
    pub id: String,
    pub name: String,
    /// Microseconds since the Unix epoch.
    pub updated_at_us: i64,
}

/// An entry of `GET /api/v1/credentials`: never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CredentialEntry {
    pub name: String,
    /// `bearer`, `basic`, `header`, `query` or `smtp`.
    pub kind: String,
    pub updated_at_us: i64,
}
