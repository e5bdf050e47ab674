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
pub(crate) use protocol as proto;

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
mod listener;
#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "otel-export")]
mod otel_export;
#[cfg(test)]
mod properties;
mod retry;
mod runtime;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod test_hooks;
mod transport;
mod worker;

pub use client::api::filters::{Filter, FilterUpdate};
pub use client::api::{
    Api, AttemptEvent, Cron, EventInfo, EventQuery, HmacAlgorithm, LogLine, LogQuery, Meta,
    NewWebhook, Page, Pagination, RateLimitInfo, RunQuery, RunStatus, Schedule, SignatureEncoding,
    SlotCapacity, TaskMetrics, TaskSummary, TraceSpan, TriggeredRun, WebhookAuth, WebhookInfo,
    WebhookSource, WebhookUpdate, WorkerInfo, WorkflowInfo, WorkflowPause,
};
pub use client::bulk::{BulkEvent, BulkRun};
pub use client::control::RunFilter;
pub use client::events::{FinalStatus, RunEvent, TaskEventKind};
pub use client::typed::{Registered, RunView, TaskView, TypedRun, WorkflowRef};
pub use client::{PushOptions, RunHandle, TriggerOptions};
pub use config::{ClientConfig, ConfigError, TlsStrategy};
pub use connection::StreamBackoff;
pub use error::{Cause, DurableError};
pub use error::{Error, Outcome, Result, TaskFailure};
pub use listener::health::{ListenerKind, ListenerState};
#[cfg(feature = "otel-export")]
pub use otel_export::EngineSpanExporter;
pub use retry::backoff::Backoff;
pub use retry::budget::BudgetConfig;
pub use retry::ledger::MethodCounters;
pub use retry::report::{EndpointRetries, RetryReport};
pub use runtime::StopSignal;
pub use runtime::{Runtime, RuntimeHandle, RuntimeOptions};
pub use worker::TaskCounts;
pub use worker::WorkerOptions;
pub use worker::conditions::{AnyOf, Condition, WaitResult, any_of};
pub use worker::context::ChildOptions;
pub use worker::context::Context;
pub use worker::logs::TaskLogLayer;
pub use worker::placement::{Comparator, DesiredLabel, LabelValue, StickyStrategy};
pub use worker::standalone::Task;
pub use worker::task::{Batch, BatchMember, Batching};
pub use worker::task::{ConcurrencyStrategy, RateLimitWindow};
pub use worker::task::{TaskError, TaskOptions, Workflow};
