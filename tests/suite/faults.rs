//! Faults, on our engine: what the runtime does when the engine, the network or its own actors
//! fail (streams cut or held, outages, an engine that loses what it was told, TLS mismatches,
//! crashes of the supervised actors, a soak with restarts). Our engine injects each fault (its
//! switches, `DevEngine`'s methods); the network's come from `chaos.rs`'s proxy.

mod chaos;
mod durable_listener;
mod engine_losses;
mod listeners;
mod retry_decisions;
mod soak;
mod supervision;
mod tls;
mod wire;
