//! The development engine's own tests: its semantics and faults, driven through the generated
//! clients (one binary, one module per area).

mod core;
mod durable;
mod faults;
mod lifecycle;
mod parity;
mod support;
mod timing;
mod virtual_time;
mod your_workflow;
