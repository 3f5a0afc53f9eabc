//! The body of every API error: `{"error": {"message", "detail"?}}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorInfo,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorInfo {
    /// What went wrong, naming the thing (node, field, file, line).
    pub message: String,
    /// Structured detail: validation problems, the failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}
