//! The one place errors become HTTP responses: `{"error": {"message", ...}}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sluice_api::{ErrorBody, ErrorInfo};

/// An API error: an HTTP status and a message that names the problem.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Extra structured detail (validation problems, the failed run...).
    pub detail: Option<Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            detail: None,
        }
    }
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
    pub fn internal(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message.to_string())
    }
    /// The same error, its message after `prefix`.
    pub fn with_prefix(mut self, prefix: &str) -> ApiError {
        self.message = format!("{prefix}{}", self.message);
        self
    }

    pub fn with_detail(mut self, detail: Value) -> ApiError {
        self.detail = Some(detail);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorInfo {
                message: self.message,
                detail: self.detail,
            },
        };
        let mut resp = (self.status, Json(body)).into_response();
        if self.status == StatusCode::TOO_MANY_REQUESTS
            || self.status == StatusCode::SERVICE_UNAVAILABLE
            || self.status == StatusCode::INSUFFICIENT_STORAGE
        {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        resp
    }
}

impl From<sluice_store::Error> for ApiError {
    fn from(e: sluice_store::Error) -> Self {
        ApiError::internal(format!("store: {e}"))
    }
}

impl From<sluice_runtime::executor::Error> for ApiError {
    fn from(e: sluice_runtime::executor::Error) -> Self {
        use sluice_runtime::executor::Error as E;
        match e {
            e @ E::Storage { full: true, .. } => {
                ApiError::new(StatusCode::INSUFFICIENT_STORAGE, e.to_string())
            }
            e @ E::Storage { full: false, .. } => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            }
            E::Invalid(invalid) => ApiError::bad_request("invalid workflow")
                .with_detail(serde_json::to_value(&invalid.0).unwrap_or(Value::Null)),
            // Refusals a caller can act on.
            e @ (E::CacheAllowed { .. }
            | E::StillRunning(_)
            | E::AlreadyEnded { .. }
            | E::StoredWorkflow { .. }
            | E::SandboxUnavailable(_)
            | E::Sandbox(_)
            | E::Doc(_)
            | E::DocRenamed { .. }
            | E::UnknownBase { .. }
            | E::NotWorkflowId(_)
            | E::DocNamesOther { .. }
            | E::NodeIdNotSlug { .. }) => ApiError::bad_request(e.to_string()),
            e @ E::Entry(_) => ApiError::bad_request(e.to_string()),
            E::RunNotFound(id) => ApiError::not_found(format!("run `{id}` not found")),
            E::WorkflowNotFound(id) => ApiError::not_found(format!("workflow `{id}` not found")),
            e @ (E::NodeNotFound { .. } | E::CredentialNotFound(_)) => {
                ApiError::not_found(e.to_string())
            }
            e @ E::CredentialTest(_) => ApiError::bad_request(e.to_string()),
            e @ E::NotPublished(_) => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            e @ E::Busy(_) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.to_string()),
            e @ E::NoWorker => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            e @ (E::NotWaiting { .. }
            | E::AmbiguousWait { .. }
            | E::ApprovalOnWorker { .. }
            | E::DrivenElsewhere(_)) => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            e @ E::Worker(_) => ApiError::new(StatusCode::BAD_GATEWAY, e.to_string()),
            e @ E::InputTooDeep => ApiError::bad_request(e.to_string()),
            // Engine faults (a task that ended without an answer, a lost
            // channel, the store): nothing the caller did; 500.
            other @ (E::ModuleCheck(_)
            | E::StartTask(_)
            | E::StepChannelClosed
            | E::Store(_)
            | E::Corrupt { .. }) => ApiError::internal(other),
        }
    }
}

/// Parses a JSON request body, naming the problem and where it is.
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let msg = e.to_string();
        // serde_json's own guard, in words a caller understands.
        let msg = if msg.starts_with("recursion limit exceeded") {
            "nested more than 128 levels deep".to_string()
        } else {
            msg
        };
        let msg = msg.rfind(" at line ").map(|i| &msg[..i]).unwrap_or(&msg);
        ApiError::bad_request(format!(
            "invalid JSON body at line {}, column {}: {msg}",
            e.line(),
            e.column()
        ))
    })
}
