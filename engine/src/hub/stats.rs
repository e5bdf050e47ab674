//! What tests count inside the engine: messages on streams and fault deliveries. Counters of
//! calls at the network boundary live with the fault rules (`faults.rs`); these count what the
//! engine's rules did, and `DevEngine::stats` reports them.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The engine's counters; they only grow.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Subscribe messages received on `SubscribeToWorkflowRuns` streams (tests count replays).
    pub run_subscribe_messages: u64,
    /// Messages received on `ListenForDurableEvent` streams.
    pub durable_event_listen_messages: u64,
    /// Duplicate assignments sent so far.
    pub duplicated_assignments: u64,
    /// Late duplicates sent so far (counted once on the stream, after the state is unlocked).
    pub late_duplicates_sent: Arc<AtomicU64>,
    /// Durable log nodes ever recorded, all tasks (a re-sent request shows as one more).
    pub durable_nodes_recorded: u64,
    /// `ReleaseSlot` calls accepted.
    pub slot_releases: u64,
}
