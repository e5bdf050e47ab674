//! The integration test suite: one binary, one module per area (one binary links faster than many).

mod config_env;
mod retry_decisions;
mod wire;
