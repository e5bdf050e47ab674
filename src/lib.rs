#![doc = include_str!("../README.md")]
#![warn(missing_docs, rust_2018_idioms)]

pub mod calendar;
pub mod client;
pub mod config;
pub mod connection;
pub mod error;
pub mod listener;
#[cfg(feature = "otel")]
mod otel;
pub mod proto;
pub mod retry;
pub mod runtime;
pub mod transport;
pub mod worker;

pub use client::api::RunStatus;
pub use client::bulk::{BulkEvent, BulkRun};
pub use client::control::RunFilter;
pub use client::filters::{Filter, FilterUpdate};
pub use client::typed::{Registered, RunView, TaskView, TypedRun, WorkflowRef};
pub use client::{PushOptions, RunHandle, TriggerOptions};
pub use config::{ClientConfig, ConfigError, TlsStrategy};
pub use error::{Error, Outcome, Result, TaskFailure};
pub use runtime::{Runtime, RuntimeHandle, RuntimeOptions};
pub use worker::conditions::{AnyOf, Condition, WaitResult, any_of};
pub use worker::context::ChildOptions;
pub use worker::placement::{Comparator, DesiredLabel, LabelValue, StickyStrategy};
pub use worker::task::{ConcurrencyStrategy, RateLimitWindow};
pub use worker::{Context, TaskError, TaskOptions, WorkerOptions, Workflow};
