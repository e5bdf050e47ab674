//! The one table of unary RPC classes (docs/contract.md §2) and of streaming RPCs.
//!
//! A test walks every method of every service compiled from `proto/` and fails when one is in
//! neither table, so a new RPC cannot ship without a retry decision.

/// What retrying a request can do to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RequestClass {
    /// Has no effect: retried on transient failure.
    Read,
    /// The engine dedupes it, or a repeat is harmless: retried on transient failure.
    IdempotentWrite,
    /// A repeat could act twice: retried only when the request provably never left.
    Write,
}

impl RequestClass {
    /// Name for logs.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            RequestClass::Read => "read",
            RequestClass::IdempotentWrite => "idempotent_write",
            RequestClass::Write => "write",
        }
    }

    /// Whether a transient failure after the request was sent may be retried.
    pub(crate) const fn retries_after_send(self) -> bool {
        !matches!(self, RequestClass::Write)
    }
}

use RequestClass::*;

/// Every unary RPC with its class. The reason column is the engine behaviour that makes it so.
pub(crate) const UNARY_METHODS: &[(&str, RequestClass, &str)] = &[
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
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        IdempotentWrite,
        "spans are keyed by trace, start and span id",
    ),
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

/// Streaming RPCs: owned by the stream supervisor, never wrapped by the unary retry layer (the
/// tests check this list and the table against the compiled protocol).
#[cfg(test)]
pub(crate) const STREAMING_METHODS: &[&str] = &[
    "/Dispatcher/Listen",
    "/Dispatcher/ListenV2",
    "/Dispatcher/SubscribeToWorkflowEvents",
    "/Dispatcher/SubscribeToWorkflowRuns",
    "/v1.V1Dispatcher/DurableTask",
    "/v1.V1Dispatcher/ListenForDurableEvent",
];

/// The class of a unary method path, or `None` for streams and unknown paths.
pub(crate) fn class_of(path: &str) -> Option<RequestClass> {
    // An index over the one table, built on first use (the hot path looks up every call).
    static INDEX: std::sync::OnceLock<std::collections::HashMap<&'static str, RequestClass>> =
        std::sync::OnceLock::new();
    INDEX
        .get_or_init(|| UNARY_METHODS.iter().map(|(p, c, _)| (*p, *c)).collect())
        .get(path)
        .copied()
}

/// Whether `path` is a streaming RPC.
#[cfg(test)]
pub(crate) fn is_streaming(path: &str) -> bool {
    STREAMING_METHODS.contains(&path)
}

/// Per-request override of a method's class (docs/contract.md §2: classification is per request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassOverride {
    /// A child trigger carrying its parent and `child_index`/`child_key`: the engine returns the
    /// existing run on a repeat.
    ChildKeyed,
    /// A trigger the caller marked idempotent (the workflow has an idempotency key): a repeat
    /// answers `ALREADY_EXISTS` with the existing run id.
    CallerIdempotent,
}

/// The class of one request: the method's, raised to `IdempotentWrite` by an override.
pub(crate) fn request_class(path: &str, over: Option<ClassOverride>) -> Option<RequestClass> {
    let base = class_of(path)?;
    Some(match (base, over) {
        (Write, Some(_)) => IdempotentWrite,
        (c, _) => c,
    })
}

/// The retry table against the compiled protocol (the descriptor set `build.rs` writes):
/// every unary method has one class, every stream none, and no row names a method that is not
/// compiled.
#[cfg(test)]
mod table_tests {
    use std::collections::BTreeSet;

    use prost::Message as _;

    /// (path, client_streaming, server_streaming) of every compiled method.
    fn compiled_methods() -> Vec<(String, bool, bool)> {
        let fds = prost_types::FileDescriptorSet::decode(crate::protocol::FILE_DESCRIPTOR_SET)
            .expect("descriptor set decodes");
        let mut out = Vec::new();
        for f in fds.file {
            let pkg = f.package().to_string();
            for s in &f.service {
                for m in &s.method {
                    let svc = if pkg.is_empty() {
                        s.name().to_string()
                    } else {
                        format!("{pkg}.{}", s.name())
                    };
                    out.push((
                        format!("/{svc}/{}", m.name()),
                        m.client_streaming(),
                        m.server_streaming(),
                    ));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn every_compiled_method_has_a_retry_class_or_is_a_stream() {
        let mut unary_seen = BTreeSet::new();
        for (path, cs, ss) in compiled_methods() {
            if cs || ss {
                assert!(
                    super::is_streaming(&path),
                    "{path} streams but is not in STREAMING_METHODS"
                );
                assert!(
                    super::class_of(&path).is_none(),
                    "{path} streams but has a unary class"
                );
            } else {
                assert!(
                    super::class_of(&path).is_some(),
                    "{path} has no retry class: add it to UNARY_METHODS"
                );
                unary_seen.insert(path);
            }
        }
        // And no stale rows: every table row is a compiled method.
        for (path, _, _) in super::UNARY_METHODS {
            assert!(
                unary_seen.contains(*path),
                "{path} is in the table but not compiled"
            );
        }
        assert_eq!(super::STREAMING_METHODS.len(), 6);
    }

    #[test]
    fn writes_and_reads_are_classified_as_the_contract_says() {
        use super::RequestClass::*;
        let expect = [
            ("/Dispatcher/GetVersion", Read),
            ("/v1.AdminService/GetRunDetails", Read),
            ("/Dispatcher/Heartbeat", IdempotentWrite),
            ("/Dispatcher/SendStepActionEvent", IdempotentWrite),
            ("/v1.AdminService/PutWorkflow", IdempotentWrite),
            ("/v1.AdminService/CancelTasks", IdempotentWrite),
            ("/EventsService/PutLog", IdempotentWrite),
            ("/WorkflowService/TriggerWorkflow", Write),
            ("/WorkflowService/BulkTriggerWorkflow", Write),
            ("/WorkflowService/ScheduleWorkflow", Write),
            ("/EventsService/Push", Write),
            ("/EventsService/BulkPush", Write),
            ("/Dispatcher/Register", Write),
            ("/v1.AdminService/ReplayTasks", Write),
        ];
        for (path, c) in expect {
            assert_eq!(super::class_of(path), Some(c), "{path}");
        }
        // Per-request overrides raise a Write to IdempotentWrite, and never lower anything.
        let child = super::request_class(
            "/WorkflowService/TriggerWorkflow",
            Some(super::ClassOverride::ChildKeyed),
        );
        assert_eq!(child, Some(IdempotentWrite));
        let read = super::request_class(
            "/Dispatcher/GetVersion",
            Some(super::ClassOverride::CallerIdempotent),
        );
        assert_eq!(read, Some(Read));
    }
}
