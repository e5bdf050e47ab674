//! The integration test suite: one binary, one module per area (one binary links faster than many).

mod bad_input;
mod cancel_safety;
mod chaos;
mod concurrency;
mod config_env;
mod conformance;
mod durable_listener;
mod engine_losses;
mod hygiene;
mod listeners;
mod operations;
mod placement;
mod public_api;
mod rate_limits;
mod rest_api;
mod retry_decisions;
mod run_control;
mod run_events;
mod runtime_e2e;
mod soak;
mod supervision;
mod support;
mod tls;
mod wire;
