//! The error a task returns: retryable or not, with conversions from the usual errors.

/// A task failure. `retryable: false` sets `should_not_retry` (the engine skips the retries left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError {
    /// What went wrong (sent to the engine as the failure text).
    pub message: String,
    /// Whether the engine may retry the task.
    pub retryable: bool,
}

impl TaskError {
    /// A failure the engine may retry (per the task's `retries`).
    pub fn new(message: impl Into<String>) -> Self {
        TaskError {
            message: message.into(),
            retryable: true,
        }
    }

    /// A failure the engine must not retry.
    pub fn non_retryable(message: impl Into<String>) -> Self {
        TaskError {
            message: message.into(),
            retryable: false,
        }
    }
}

impl std::fmt::Display for TaskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for TaskError {
    fn from(s: String) -> Self {
        TaskError::new(s)
    }
}

impl From<&str> for TaskError {
    fn from(s: &str) -> Self {
        TaskError::new(s)
    }
}

impl From<crate::error::Error> for TaskError {
    /// A nondeterministic replay is not retried: the retry would replay the same history and
    /// diverge the same way. Every other runtime error leaves the engine's retries in charge.
    fn from(e: crate::error::Error) -> Self {
        match e.durable() {
            Some(crate::error::DurableError::Nondeterminism { .. }) => {
                TaskError::non_retryable(e.to_string())
            }
            _ => TaskError::new(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for TaskError {
    fn from(e: serde_json::Error) -> Self {
        TaskError::non_retryable(format!("json: {e}"))
    }
}
