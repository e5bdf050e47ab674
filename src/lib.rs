#![doc = include_str!("../README.md")]
#![warn(missing_docs, rust_2018_idioms, unreachable_pub, unnameable_types)]

// The wire protocol (generated types, the REST time format, the message-size limit), generated
// by build.rs from proto/. Private: the public API never names its types. The `protocol`
// feature opens it to the development engine and this workspace's tests (not a stable API).
#[cfg(feature = "protocol")]
#[doc(hidden)]
pub mod protocol;
#[cfg(not(feature = "protocol"))]
mod protocol;

// The guide's pages (docs/), compiled as doctests so their examples keep building with the API.
#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../docs/guide/workflows.md")]
    struct Workflows;
    #[doc = include_str!("../docs/guide/durable.md")]
    struct Durable;
    #[doc = include_str!("../docs/guide/rest-api.md")]
    struct RestApi;
    #[doc = include_str!("../docs/guide/testing.md")]
    struct Testing;
    #[doc = include_str!("../docs/guide/production.md")]
    struct Production;
    #[doc = include_str!("../docs/guide/real-engine.md")]
    struct RealEngine;
}

mod client;
pub mod config;
mod connection;
mod error;
#[cfg(test)]
mod fuzz_regressions;
#[cfg(test)]
mod house;
mod listener;
mod logs;
#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "otel-export")]
mod otel_export;
mod placement;
#[cfg(test)]
mod properties;
mod retry;
mod runtime;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;
mod transport;
mod worker;

// The root: what a first workflow needs (define it, run a worker, trigger a run and await it).
pub use client::api::RunStatus;
pub use client::{RunHandle, TriggerOptions};
pub use error::{Error, Outcome, Result};
pub use runtime::typed::TypedRun;
pub use runtime::{Runtime, RuntimeHandle, RuntimeOptions};
pub use worker::WorkerOptions;
pub use worker::context::Context;
pub use worker::standalone::Task;
pub use worker::task::{TaskError, TaskOptions, Workflow};

/// What lies under an [`Error`]: its [`Cause`](errors::Cause), the gRPC status the engine
/// answered, a transport failure.
pub mod errors {
    pub use crate::error::{Cause, GrpcCode, GrpcStatus, TransportError};
}

/// The engine's REST API ([`RuntimeHandle::api`]): runs, events, workers, workflows, crons and
/// schedules, filters, webhooks, logs, metrics, and what each read answers.
pub mod api {
    pub use crate::client::api::filters::{Filter, FilterUpdate};
    pub use crate::client::api::{
        Api, AttemptEvent, Cron, EventInfo, EventQuery, HmacAlgorithm, LogLine, LogQuery, Meta,
        NewWebhook, Page, Pagination, RateLimitInfo, RunQuery, Schedule, SignatureEncoding,
        SlotCapacity, TaskMetrics, TaskSummary, TraceSpan, TriggeredRun, WebhookAuth, WebhookInfo,
        WebhookSource, WebhookUpdate, WorkerInfo, WorkflowInfo, WorkflowPause,
    };
}

/// Runs from the caller's side: triggering many, pushing events, filtering runs to cancel or
/// replay, following a run's events, and the typed views of a run and its tasks.
pub mod run {
    pub use crate::client::PushOptions;
    pub use crate::client::bulk::{BulkEvent, BulkRun};
    pub use crate::client::control::RunFilter;
    pub use crate::client::events::{FinalStatus, RunEvent, TaskEventKind};
    pub use crate::client::view::{RunView, TaskView};
    pub use crate::error::TaskFailure;
    pub use crate::runtime::typed::{Registered, WorkflowRef};
    pub use crate::worker::context::ChildOptions;
}

/// What a task declares beyond its handler: batching, concurrency, rate limits, placement by
/// worker labels, and its log lines.
pub mod task {
    pub use crate::logs::TaskLogLayer;
    pub use crate::placement::{Comparator, DesiredLabel, LabelValue, StickyStrategy};
    pub use crate::worker::task::{Batch, BatchMember, Batching, Handler};
    pub use crate::worker::task::{ConcurrencyStrategy, RateLimitWindow};
}

/// Durable tasks: what a durable task waits for ([`Context::wait_for`]) and how a durable
/// operation fails.
pub mod durable {
    pub use crate::error::DurableError;
    pub use crate::worker::conditions::{AnyOf, Condition, EventCondition, WaitResult, any_of};
}

/// How the runtime retries and reconnects, and what it counted doing so.
pub mod retries {
    pub use crate::connection::ReclaimTiming;
    pub use crate::connection::StreamBackoff;
    pub use crate::retry::backoff::Backoff;
    pub use crate::retry::budget::BudgetConfig;
    pub use crate::retry::ledger::MethodCounters;
    pub use crate::retry::report::{EndpointRetries, RetryReport};
}

/// The runtime's health and lifecycle: its listeners' states, its worker's counts and the
/// signals it stops on.
pub mod health {
    pub use crate::listener::health::{ListenerKind, ListenerState};
    pub use crate::runtime::StopSignal;
    pub use crate::worker::TaskCounts;
}

/// OpenTelemetry: the exporter that sends spans to the engine (feature `otel-export`).
#[cfg(feature = "otel-export")]
pub mod telemetry {
    pub use crate::otel_export::EngineSpanExporter;
}
