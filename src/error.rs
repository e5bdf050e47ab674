//! The one error type of the runtime, classified by what the caller can do about it.
//!
//! # Invariants
//!
//! 1. Every [`Error`] carries an [`Outcome`]: the class the contract (docs/contract.md §2) defines,
//!    which tells the caller whether the operation may have run and whether trying again is safe.
//! 2. The original `tonic::Status`, transport or HTTP error is kept as the [`std::error::Error::source`],
//!    never flattened into a string.
//! 3. No error message ever contains the API token: errors are built from method names, codes and
//!    server messages, never from request metadata.
//! 4. An error about a run that was already triggered carries its run id, so the caller never has to
//!    trigger again to find it.

use std::borrow::Cow;
use std::fmt;

use crate::config::ConfigError;

/// What happened to an operation that did not succeed, from the caller's point of view.
///
/// The first seven are the classes of docs/contract.md §2; [`Outcome::Exhausted`] and
/// [`Outcome::Invalid`] name two more cases of a call (every attempt failed transiently; the
/// caller's input was refused before anything was sent). [`Outcome::RunFailed`] is not about a
/// call at all: the engine accepted the run and the *workflow* failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The request provably never reached the server (connect refused, stream refused).
    /// Nothing ran; trying again is safe.
    NotSent,
    /// A write reached, or may have reached, the server and no definite answer came back.
    /// It may have run: check before you repeat it (or make it idempotent).
    MaybeExecuted,
    /// The server answered no (invalid argument, not found, unauthenticated, ...).
    /// Repeating the same request will get the same answer.
    Rejected,
    /// The caller cancelled the operation.
    Cancelled,
    /// The caller's deadline (or the runtime's backstop) passed before the operation finished.
    DeadlineExceeded,
    /// The endpoint's retry budget is spent: the engine is failing many calls, so the runtime
    /// stopped adding retries to the load. Try again later.
    BudgetExhausted,
    /// The runtime was shut down.
    Closed,
    /// Every attempt the policy allows failed with a transient error (reads and idempotent writes).
    Exhausted,
    /// The caller's input was refused locally (bad configuration, unserializable input); nothing
    /// was sent.
    Invalid,
    /// The run was accepted and ran, and it failed: a task returned an error (or ran out of
    /// retries). The tasks' errors are in [`Error::run_failures`]. Not a refused call: triggering
    /// again runs the workflow again.
    RunFailed,
    /// The run was cancelled (a cancel call, a concurrency strategy, a task cancelling its own
    /// run). What had finished keeps its output; the rest will not run unless the run is
    /// replayed.
    RunCancelled,
    /// An answer arrived and cannot be read as asked: an output that is not JSON, or not of
    /// the type asked for, or missing from a finished run. The call itself succeeded: repeating
    /// it reads the same; read the run another way (`outputs()`, `run_details()`).
    Undecodable,
    /// What was asked for does not exist yet: the run (or task) has not finished.
    NotFinished,
    /// A listener stopped for good (a permanent refusal such as a bad token, or too many
    /// failures in a row without progress): the work it carried cannot finish in this runtime.
    /// The cause says why; fix it and spawn a new runtime. The run itself may still finish.
    Stopped,
    /// The engine showed nothing under a run id given to `run_handle` for two minutes of reads.
    /// Never a claim that the run cannot exist: it may still appear, so read it before
    /// triggering again. A run this process triggered never ends so (docs/contract.md §4): its wait
    /// goes on to its deadline, and a warning names it while the engine shows no trace of it.
    NotFound,
}

impl Outcome {
    /// A short name for logs and metrics (`not_sent`, `maybe_executed`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::NotSent => "not_sent",
            Outcome::MaybeExecuted => "maybe_executed",
            Outcome::Rejected => "rejected",
            Outcome::Cancelled => "cancelled",
            Outcome::DeadlineExceeded => "deadline_exceeded",
            Outcome::BudgetExhausted => "budget_exhausted",
            Outcome::Closed => "closed",
            Outcome::Exhausted => "exhausted",
            Outcome::Invalid => "invalid",
            Outcome::RunFailed => "run_failed",
            Outcome::RunCancelled => "run_cancelled",
            Outcome::Undecodable => "undecodable",
            Outcome::NotFinished => "not_finished",
            Outcome::Stopped => "stopped",
            Outcome::NotFound => "not_found",
        }
    }

    /// What the caller can do next, in one sentence.
    pub const fn hint(self) -> &'static str {
        match self {
            Outcome::NotSent => "the request never reached the engine; it is safe to try again",
            Outcome::MaybeExecuted => {
                "the request may have run on the engine; check its effect before repeating it"
            }
            Outcome::Rejected => "the engine refused the request; fix the request before retrying",
            Outcome::Cancelled => "the operation was cancelled by its caller",
            Outcome::DeadlineExceeded => "the deadline passed; retry with a longer deadline",
            Outcome::BudgetExhausted => {
                "the engine is failing many calls and the retry budget is spent; try again later"
            }
            Outcome::Closed => "the runtime was shut down; spawn a new one",
            Outcome::Exhausted => {
                "the engine stayed unavailable through every allowed attempt; try again later"
            }
            Outcome::Invalid => "the input was refused before sending; fix it and call again",
            Outcome::RunFailed => {
                "the workflow ran and failed; read run_failures() for each task's error, fix the cause, then run it again"
            }
            Outcome::RunCancelled => {
                "the run was cancelled; replay it (RunHandle::replay) or trigger a new run if its work is still wanted"
            }
            Outcome::Undecodable => {
                "the answer arrived but cannot be read as asked; read the run another way (outputs(), run_details()) or ask for another type"
            }
            Outcome::NotFinished => "it has not finished yet; wait for the run's result first",
            Outcome::Stopped => {
                "a listener stopped for good; see the cause, fix it, and spawn a new runtime (the run itself may still finish)"
            }
            Outcome::NotFound => {
                "the engine shows nothing under this id; check the id, and read the run again before triggering it again (it may still appear)"
            }
        }
    }

    /// Whether the operation may have had an effect on the engine.
    pub const fn may_have_executed(self) -> bool {
        matches!(self, Outcome::MaybeExecuted)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The underlying failure an [`Error`] wraps.
#[derive(Debug)]
#[non_exhaustive]
pub enum Cause {
    /// A gRPC status returned by the engine, or made by the transport for a connection it could
    /// not make or lost (code `Unavailable`: refused, reset, TLS; the channel connects lazily, so
    /// a transport failure always arrives as a status).
    Status(GrpcStatus),
    /// An HTTP client failure from the REST path (no response: connect, TLS, timeout, body).
    Http(TransportError),
    /// A non-success HTTP response; the body is kept (bounded) for diagnosis.
    HttpStatus {
        /// The status code.
        status: u16,
        /// Up to 4 KiB of the response body.
        body: String,
    },
    /// The configuration could not be built.
    Config(ConfigError),
    /// A JSON payload could not be encoded or decoded.
    Json(serde_json::Error),
    /// The engine refused a durable-task operation (nondeterministic replay, eviction, ...).
    Durable(DurableError),
    /// The run failed: the error of each task that failed.
    RunFailed(Vec<TaskFailure>),
}

impl Cause {
    /// A gRPC status's cause.
    pub(crate) fn status(s: tonic::Status) -> Self {
        Cause::Status(GrpcStatus { inner: s })
    }

    /// A REST transport failure's cause.
    pub(crate) fn http(e: reqwest::Error) -> Self {
        Cause::Http(TransportError::new(e))
    }
}

/// A gRPC status: its code and the engine's message.
#[derive(Debug, Clone)]
pub struct GrpcStatus {
    inner: tonic::Status,
}

impl GrpcStatus {
    /// The status code.
    pub fn code(&self) -> GrpcCode {
        GrpcCode::of(self.inner.code())
    }

    /// The message the engine (or the transport) gave with it.
    pub fn message(&self) -> &str {
        self.inner.message()
    }
}

impl fmt::Display for GrpcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code(), self.message())
    }
}

impl std::error::Error for GrpcStatus {}

/// The gRPC status codes (as the gRPC specification numbers them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GrpcCode {
    /// 0: not an error.
    Ok,
    /// 1: cancelled, usually by the caller.
    Cancelled,
    /// 2: an error of no other kind (a connection reset reads so).
    Unknown,
    /// 3: the request is invalid whatever the engine's state.
    InvalidArgument,
    /// 4: the deadline passed before the call completed.
    DeadlineExceeded,
    /// 5: what the request names does not exist.
    NotFound,
    /// 6: what the request creates already exists.
    AlreadyExists,
    /// 7: the caller may not do this.
    PermissionDenied,
    /// 8: a resource (a quota, the message size) is exhausted.
    ResourceExhausted,
    /// 9: the engine is not in the state the call needs.
    FailedPrecondition,
    /// 10: aborted (a concurrency conflict).
    Aborted,
    /// 11: past the valid range.
    OutOfRange,
    /// 12: the engine does not implement the call.
    Unimplemented,
    /// 13: the engine failed internally.
    Internal,
    /// 14: the engine is unavailable for now (retryable).
    Unavailable,
    /// 15: data was lost.
    DataLoss,
    /// 16: the caller's credentials are missing or invalid.
    Unauthenticated,
}

impl GrpcCode {
    /// The code of tonic's `c`.
    fn of(c: tonic::Code) -> Self {
        use tonic::Code as C;
        match c {
            C::Ok => GrpcCode::Ok,
            C::Cancelled => GrpcCode::Cancelled,
            C::Unknown => GrpcCode::Unknown,
            C::InvalidArgument => GrpcCode::InvalidArgument,
            C::DeadlineExceeded => GrpcCode::DeadlineExceeded,
            C::NotFound => GrpcCode::NotFound,
            C::AlreadyExists => GrpcCode::AlreadyExists,
            C::PermissionDenied => GrpcCode::PermissionDenied,
            C::ResourceExhausted => GrpcCode::ResourceExhausted,
            C::FailedPrecondition => GrpcCode::FailedPrecondition,
            C::Aborted => GrpcCode::Aborted,
            C::OutOfRange => GrpcCode::OutOfRange,
            C::Unimplemented => GrpcCode::Unimplemented,
            C::Internal => GrpcCode::Internal,
            C::Unavailable => GrpcCode::Unavailable,
            C::DataLoss => GrpcCode::DataLoss,
            C::Unauthenticated => GrpcCode::Unauthenticated,
        }
    }
}

/// A failure below the protocol (a connection refused or reset, TLS, a timeout, a body cut
/// short): its text, and its chain through [`std::error::Error::source`].
#[derive(Debug)]
pub struct TransportError(Box<dyn std::error::Error + Send + Sync>);

impl TransportError {
    pub(crate) fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        TransportError(Box::new(e))
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// One failed task of a failed run ([`Outcome::RunFailed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskFailure {
    /// The task's name in its workflow.
    pub task: String,
    /// The task run id.
    pub task_run_id: String,
    /// The error the task reported.
    pub error: String,
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {} failed: {}", self.task, self.error)
    }
}

/// Why the engine refused a durable-task operation, with the entry it concerns.
///
/// Reached through [`Error::durable`]; the enclosing [`Error`] has outcome
/// [`Outcome::Rejected`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DurableError {
    /// A replayed invocation asked for a different operation than the one recorded at this node:
    /// the task's code is not deterministic (it branched on time, randomness or outside state).
    /// Retrying replays the same history and fails the same way; fix the code or cancel the run.
    Nondeterminism {
        /// The durable task's run id.
        task: String,
        /// The invocation that diverged.
        invocation: i32,
        /// The branch of the node.
        branch: i64,
        /// The node whose recorded operation differs.
        node: i64,
        /// The engine's message.
        message: String,
    },
    /// The engine evicted this invocation (a newer invocation owns the task, or it was evicted
    /// on request). This invocation must stop; the engine resumes the task elsewhere.
    Evicted {
        /// The durable task's run id.
        task: String,
        /// The evicted invocation (and every older one).
        invocation: i32,
        /// The engine's reason.
        reason: String,
    },
    /// Any other refusal of an operation at a node.
    Engine {
        /// The durable task's run id.
        task: String,
        /// The invocation.
        invocation: i32,
        /// The node.
        node: i64,
        /// The engine's message.
        message: String,
    },
}

impl fmt::Display for DurableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurableError::Nondeterminism {
                task,
                invocation,
                node,
                message,
                ..
            } => write!(
                f,
                "nondeterministic replay of task {task} (invocation {invocation}) at node {node}: {message}"
            ),
            DurableError::Evicted {
                task,
                invocation,
                reason,
            } => write!(
                f,
                "invocation {invocation} of task {task} was evicted by the engine: {reason}"
            ),
            DurableError::Engine {
                task,
                invocation,
                node,
                message,
            } => write!(
                f,
                "the engine refused node {node} of task {task} (invocation {invocation}): {message}"
            ),
        }
    }
}

impl std::error::Error for DurableError {}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Status(s) => write!(f, "status {s}"),
            Cause::Http(e) => write!(f, "http: {e}"),
            Cause::HttpStatus { status, body } => write!(f, "http status {status}: {body}"),
            Cause::Config(e) => write!(f, "{e}"),
            Cause::Json(e) => write!(f, "json: {e}"),
            Cause::Durable(e) => write!(f, "{e}"),
            Cause::RunFailed(tasks) => {
                let all: Vec<String> = tasks.iter().map(ToString::to_string).collect();
                f.write_str(&all.join("; "))
            }
        }
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Cause::Status(s) => Some(s),
            Cause::Http(e) => Some(e),
            Cause::Config(e) => Some(e),
            Cause::Json(e) => Some(e),
            Cause::Durable(e) => Some(e),
            Cause::HttpStatus { .. } | Cause::RunFailed(_) => None,
        }
    }
}

/// The error of every runtime operation. Boxed so that `Result<T, Error>` stays one word wide.
pub struct Error(Box<Inner>);

struct Inner {
    outcome: Outcome,
    operation: Cow<'static, str>,
    attempts: u32,
    run_id: Option<String>,
    detail: Option<String>,
    cause: Option<Cause>,
}

/// The result type of the runtime.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error for `operation` (a method path such as `/Dispatcher/Register` or a REST route).
    pub fn new(outcome: Outcome, operation: impl Into<Cow<'static, str>>) -> Self {
        Error(Box::new(Inner {
            outcome,
            operation: operation.into(),
            attempts: 0,
            run_id: None,
            detail: None,
            cause: None,
        }))
    }

    /// Sets how many network attempts were made.
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.0.attempts = attempts;
        self
    }

    /// Attaches the run id of an already triggered run.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.0.run_id = Some(run_id.into());
        self
    }

    /// Adds a human sentence about what went wrong.
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.0.detail = Some(detail.into());
        self
    }

    /// The same error with another outcome (a failed run found to be cancelled).
    pub(crate) fn with_outcome(mut self, outcome: Outcome) -> Self {
        self.0.outcome = outcome;
        self
    }

    /// Keeps the underlying failure as the source.
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.0.cause = Some(cause);
        self
    }

    /// The outcome class.
    pub fn outcome(&self) -> Outcome {
        self.0.outcome
    }

    /// The operation (method path or route) that failed.
    pub fn operation(&self) -> &str {
        &self.0.operation
    }

    /// Network attempts made (0 when nothing was attempted).
    pub fn attempts(&self) -> u32 {
        self.0.attempts
    }

    /// The run id, when the run was triggered before the failure.
    pub fn run_id(&self) -> Option<&str> {
        self.0.run_id.as_deref()
    }

    /// The underlying failure.
    pub fn cause(&self) -> Option<&Cause> {
        self.0.cause.as_ref()
    }

    /// Takes the underlying failure out.
    pub fn into_cause(self) -> Option<Cause> {
        self.0.cause
    }

    /// The gRPC status as the transport gave it (inside the crate: the protocol's details).
    pub(crate) fn grpc_status(&self) -> Option<&tonic::Status> {
        self.status().map(|s| &s.inner)
    }

    /// The gRPC status, when the failure was one.
    pub fn status(&self) -> Option<&GrpcStatus> {
        match &self.0.cause {
            Some(Cause::Status(s)) => Some(s),
            _ => None,
        }
    }

    /// Whether the engine answered that what was named does not exist (an unknown or
    /// deleted id): a REST 404 or a gRPC `NOT_FOUND`.
    pub fn is_not_found(&self) -> bool {
        match &self.0.cause {
            Some(Cause::HttpStatus { status, .. }) => *status == 404,
            Some(Cause::Status(s)) => s.code() == GrpcCode::NotFound,
            _ => false,
        }
    }

    /// The failed tasks of a failed run ([`Outcome::RunFailed`]); empty otherwise.
    pub fn run_failures(&self) -> &[TaskFailure] {
        match self.cause() {
            Some(Cause::RunFailed(t)) => t,
            _ => &[],
        }
    }

    /// The engine's refusal of a durable-task operation, when the failure was one.
    pub fn durable(&self) -> Option<&DurableError> {
        match &self.0.cause {
            Some(Cause::Durable(d)) => Some(d),
            _ => None,
        }
    }

    /// The runtime was shut down.
    pub fn closed(operation: impl Into<Cow<'static, str>>) -> Self {
        Error::new(Outcome::Closed, operation)
    }

    /// Bad input refused before sending.
    pub fn invalid(operation: impl Into<Cow<'static, str>>, detail: impl Into<String>) -> Self {
        Error::new(Outcome::Invalid, operation).with_detail(detail)
    }

    /// `what` (a request, an item) is `size` bytes, over the `max` byte message limit, and was
    /// not sent: the engine would refuse it unread, so nothing of it ran.
    pub(crate) fn over_message_limit(
        operation: impl Into<Cow<'static, str>>,
        what: &str,
        size: usize,
        max: usize,
    ) -> Self {
        Error::invalid(
            operation,
            format!(
                "{what} is {size} bytes, over the {max} byte message limit (HATCHET_CLIENT_GRPC_MAX_SEND_MESSAGE_LENGTH, which the engine's own limit bounds); nothing was sent: send less (keep large data in storage and pass a reference)"
            ),
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.0;
        write!(f, "{}: {}", i.operation, i.outcome)?;
        if i.attempts > 0 {
            write!(f, " after {} attempt(s)", i.attempts)?;
        }
        if let Some(d) = &i.detail {
            write!(f, ": {d}")?;
        }
        if let Some(c) = &i.cause {
            write!(f, " ({c})")?;
        }
        if let Some(r) = &i.run_id {
            write!(f, " [run {r}]")?;
        }
        write!(f, "; {}", i.outcome.hint())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.0;
        f.debug_struct("Error")
            .field("outcome", &i.outcome)
            .field("operation", &i.operation)
            .field("attempts", &i.attempts)
            .field("run_id", &i.run_id)
            .field("detail", &i.detail)
            .field("cause", &i.cause)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0.cause {
            Some(Cause::Status(s)) => Some(s),
            Some(Cause::Http(e)) => Some(e),
            Some(Cause::Config(e)) => Some(e),
            Some(Cause::Json(e)) => Some(e),
            Some(Cause::Durable(e)) => Some(e),
            Some(c @ (Cause::HttpStatus { .. } | Cause::RunFailed(_))) => Some(c),
            None => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::new(Outcome::Invalid, "config").with_cause(Cause::Config(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn error_is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn keeps_status_as_source_and_says_what_to_do() {
        let e = Error::new(Outcome::MaybeExecuted, "/WorkflowService/TriggerWorkflow")
            .with_attempts(1)
            .with_cause(Cause::status(tonic::Status::unavailable(
                "engine going away",
            )));
        let src = e.source().expect("source kept");
        let status = src
            .downcast_ref::<GrpcStatus>()
            .expect("the status, our own type");
        assert_eq!(status.code(), GrpcCode::Unavailable);
        assert_eq!(status.message(), "engine going away");
        let text = e.to_string();
        assert!(text.contains("/WorkflowService/TriggerWorkflow"), "{text}");
        assert!(text.contains("maybe_executed after 1 attempt(s)"), "{text}");
        assert!(text.contains("check its effect before repeating"), "{text}");
        assert!(e.outcome().may_have_executed());
    }

    #[test]
    fn carries_run_id() {
        let e = Error::new(Outcome::Closed, "wait").with_run_id("r-1");
        assert_eq!(e.run_id(), Some("r-1"));
        assert!(e.to_string().contains("[run r-1]"));
    }
}
