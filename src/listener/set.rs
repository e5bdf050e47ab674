//! The four listeners' homes, as one value: what the stream supervisor spawns its children from,
//! and what the worker and the client reach their listeners through.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::actions::ActionsKind;
use super::durable_events::DurableEventsKind;
use super::durable_task::DurableTaskKind;
use super::health::{HealthReporter, ListenerKind};
use super::runs::RunsKind;
use super::stream::Home;

/// The four listeners' homes: what the stream supervisor spawns its children from.
pub(crate) struct Listeners {
    /// Workflow runs (result waiters).
    pub runs: Arc<Home<RunsKind>>,
    /// Durable events (the legacy durable path).
    pub events: Arc<Home<DurableEventsKind>>,
    /// The durable-task stream.
    pub durable: Arc<Home<DurableTaskKind>>,
    /// Worker actions, once the worker has started.
    pub actions: Mutex<Option<Arc<Home<ActionsKind>>>>,
    /// Each listener's health.
    pub health: BTreeMap<ListenerKind, Arc<HealthReporter>>,
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listeners").finish_non_exhaustive()
    }
}

impl Listeners {
    /// The worker-actions listener's home, once the worker has started.
    pub(crate) fn actions(&self) -> Option<Arc<Home<ActionsKind>>> {
        self.actions.lock().clone()
    }

    /// Makes the named listener's actor panic (test and chaos hook).
    #[cfg(feature = "test-hooks")]
    pub(crate) fn crash(&self, kind: ListenerKind) {
        match kind {
            ListenerKind::WorkflowRuns => self.runs.crash(),
            ListenerKind::DurableEvents => self.events.crash(),
            ListenerKind::DurableTask => self.durable.crash(),
            ListenerKind::WorkerActions => {
                if let Some(h) = self.actions() {
                    h.crash();
                }
            }
        }
    }

    /// Stops every listener quietly (shutdown).
    pub(crate) fn stop_all(&self) {
        self.runs.stop();
        self.events.stop();
        self.durable.stop();
        if let Some(h) = self.actions() {
            h.stop();
        }
    }

    /// Stops every listener for good with `why` (their waiters fail with it).
    pub(crate) fn stop_all_for_good(&self, why: &str) {
        self.runs.stop_for_good(why);
        self.events.stop_for_good(why);
        self.durable.stop_for_good(why);
        if let Some(h) = self.actions() {
            h.stop_for_good(why);
        }
    }
}
