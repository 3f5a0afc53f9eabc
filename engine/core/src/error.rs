//! [`StepError`]: why a step failed, terminal or retryable. Nodes return
//! it, the machine's retry policy branches on it, the journal records it.

use sluice_model::template;

/// A step failure: terminal (never retried) or retryable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct StepError {
    pub message: String,
    pub retryable: bool,
}

impl StepError {
    pub fn terminal(message: impl Into<String>) -> Self {
        StepError {
            message: message.into(),
            retryable: false,
        }
    }
    pub fn retryable(message: impl Into<String>) -> Self {
        StepError {
            message: message.into(),
            retryable: true,
        }
    }

    /// The same failure, its message prefixed (`prefix: message`).
    pub fn with_prefix(self, prefix: &str) -> Self {
        StepError {
            message: format!("{prefix}: {}", self.message),
            retryable: self.retryable,
        }
    }
}

impl From<template::Error> for StepError {
    fn from(e: template::Error) -> Self {
        StepError::terminal(format!("template: {e}"))
    }
}
