//! Features, on our engine: runs and results, run control, run events, the REST reads,
//! operations (health, metrics, logs, spans), placement, rate limits and concurrency, each
//! driven through the public API. What can be checked on the real engine too is in
//! `conformance/`.

mod concurrency;
mod operations;
mod placement;
mod rate_limits;
mod rest_api;
mod run_control;
mod run_events;
mod runtime_e2e;
