//! # hatchet-runtime
//!
//! An actor-based runtime for workers and clients of the [Hatchet](https://hatchet.run) workflow
//! engine, with an embedded, wire-compatible development engine.
//!
//! Modules:
//!
//! - [`proto`]: the generated wire types, clients and servers.
//! - [`config`]: [`ClientConfig`] from the `HATCHET_CLIENT_*` environment or a builder.
//! - [`error`]: [`Error`] and its [`Outcome`] classes.
//! - [`retry`]: backoff, budget, deadlines, the pure retry decision and its executor.
//! - [`transport`]: the gRPC channel (TLS, keepalive) and the auth interceptor.

#![warn(missing_docs, rust_2018_idioms)]

pub mod client;
pub mod config;
#[cfg(feature = "dev-engine")]
pub mod engine;
pub mod error;
pub mod listener;
pub mod proto;
pub mod retry;
pub mod runtime;
pub mod transport;
pub mod worker;

pub use client::{RunHandle, TriggerOptions};
pub use config::{ClientConfig, ConfigError, TlsStrategy};
pub use error::{Error, Outcome, Result};
pub use runtime::{Runtime, RuntimeHandle, RuntimeOptions};
pub use worker::{Context, TaskError, TaskOptions, WorkerOptions, Workflow};
