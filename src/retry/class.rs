//! The one table of unary RPC classes (CONTRACT.md §2) and of streaming RPCs.
//!
//! A test walks every method of every service compiled from `proto/` and fails when one is in
//! neither table, so a new RPC cannot ship without a retry decision.

/// What retrying a request can do to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestClass {
    /// Has no effect: retried on transient failure.
    Read,
    /// The engine dedupes it, or a repeat is harmless: retried on transient failure.
    IdempotentWrite,
    /// A repeat could act twice: retried only when the request provably never left.
    Write,
}

impl RequestClass {
    /// Name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            RequestClass::Read => "read",
            RequestClass::IdempotentWrite => "idempotent_write",
            RequestClass::Write => "write",
        }
    }

    /// Whether a transient failure after the request was sent may be retried.
    pub const fn retries_after_send(self) -> bool {
        !matches!(self, RequestClass::Write)
    }
}

use RequestClass::*;

/// Every unary RPC with its class. The reason column is the engine behaviour that makes it so.
pub const UNARY_METHODS: &[(&str, RequestClass, &str)] = &[
    ("/Dispatcher/GetVersion", Read, "no effect"),
    ("/v1.AdminService/GetRunDetails", Read, "no effect"),
    (
        "/Dispatcher/Heartbeat",
        IdempotentWrite,
        "sets last-heartbeat to the server clock",
    ),
    (
        "/Dispatcher/Unsubscribe",
        IdempotentWrite,
        "drops routing; a repeat finds none",
    ),
    ("/Dispatcher/UpsertWorkerLabels", IdempotentWrite, "upsert"),
    (
        "/WorkflowService/PutRateLimit",
        IdempotentWrite,
        "upsert by key",
    ),
    (
        "/v1.AdminService/PutWorkflow",
        IdempotentWrite,
        "stores the same latest version",
    ),
    (
        "/WorkflowService/PutWorkflow",
        IdempotentWrite,
        "stores the same latest version",
    ),
    (
        "/Dispatcher/RefreshTimeout",
        Write,
        "adds the increment to the deadline: a repeat extends it twice",
    ),
    (
        "/Dispatcher/ReleaseSlot",
        IdempotentWrite,
        "a released slot stays released",
    ),
    (
        "/v1.AdminService/CancelTasks",
        IdempotentWrite,
        "a cancelled task stays cancelled",
    ),
    (
        "/Dispatcher/SendStepActionEvent",
        IdempotentWrite,
        "keyed by task id + retry count",
    ),
    (
        "/Dispatcher/SendBatchActionEvent",
        IdempotentWrite,
        "keyed by task id + retry count",
    ),
    (
        "/Dispatcher/SendGroupKeyActionEvent",
        IdempotentWrite,
        "unimplemented by v1 engines",
    ),
    (
        "/Dispatcher/PutOverridesData",
        IdempotentWrite,
        "no-op on v1 engines",
    ),
    (
        "/EventsService/PutLog",
        IdempotentWrite,
        "a repeated log line is harmless",
    ),
    (
        "/EventsService/PutStreamEvent",
        IdempotentWrite,
        "fan-out only; a repeated chunk is visible",
    ),
    (
        "/Dispatcher/RestoreEvictedTask",
        IdempotentWrite,
        "restoring twice requeues once",
    ),
    (
        "/v1.AdminService/BranchDurableTask",
        Write,
        "forks a durable task",
    ),
    (
        "/Dispatcher/Register",
        Write,
        "creates a new worker id each time",
    ),
    (
        "/WorkflowService/TriggerWorkflow",
        Write,
        "creates a run (unless child key or idempotency key)",
    ),
    (
        "/v1.AdminService/TriggerWorkflowRun",
        Write,
        "creates a run",
    ),
    (
        "/WorkflowService/BulkTriggerWorkflow",
        Write,
        "creates runs",
    ),
    (
        "/WorkflowService/ScheduleWorkflow",
        Write,
        "creates a schedule",
    ),
    (
        "/EventsService/Push",
        Write,
        "creates an event that triggers runs",
    ),
    ("/EventsService/BulkPush", Write, "creates events"),
    (
        "/EventsService/ReplaySingleEvent",
        Write,
        "re-triggers runs",
    ),
    ("/v1.AdminService/ReplayTasks", Write, "re-runs tasks"),
    (
        "/v1.V1Dispatcher/RegisterDurableEvent",
        IdempotentWrite,
        "keyed by task id + signal key",
    ),
];

/// Streaming RPCs: owned by the stream supervisor, never wrapped by the unary retry layer.
pub const STREAMING_METHODS: &[&str] = &[
    "/Dispatcher/Listen",
    "/Dispatcher/ListenV2",
    "/Dispatcher/SubscribeToWorkflowEvents",
    "/Dispatcher/SubscribeToWorkflowRuns",
    "/v1.V1Dispatcher/DurableTask",
    "/v1.V1Dispatcher/ListenForDurableEvent",
];

/// The class of a unary method path, or `None` for streams and unknown paths.
pub fn class_of(path: &str) -> Option<RequestClass> {
    // An index over the one table, built on first use (the hot path looks up every call).
    static INDEX: std::sync::OnceLock<std::collections::HashMap<&'static str, RequestClass>> =
        std::sync::OnceLock::new();
    INDEX
        .get_or_init(|| UNARY_METHODS.iter().map(|(p, c, _)| (*p, *c)).collect())
        .get(path)
        .copied()
}

/// Whether `path` is a streaming RPC.
pub fn is_streaming(path: &str) -> bool {
    STREAMING_METHODS.contains(&path)
}

/// Per-request override of a method's class (CONTRACT.md §2: classification is per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassOverride {
    /// A child trigger carrying its parent and `child_index`/`child_key`: the engine returns the
    /// existing run on a repeat.
    ChildKeyed,
    /// A trigger the caller marked idempotent (the workflow has an idempotency key): a repeat
    /// answers `ALREADY_EXISTS` with the existing run id.
    CallerIdempotent,
}

/// The class of one request: the method's, raised to `IdempotentWrite` by an override.
pub fn request_class(path: &str, over: Option<ClassOverride>) -> Option<RequestClass> {
    let base = class_of(path)?;
    Some(match (base, over) {
        (Write, Some(_)) => IdempotentWrite,
        (c, _) => c,
    })
}
