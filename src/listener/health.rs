//! Listener health, published on a watch channel per listener (docs/contract.md §3 "Health and logs").

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// The four listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ListenerKind {
    /// ListenV2 / Listen and the heartbeat.
    WorkerActions,
    /// SubscribeToWorkflowRuns.
    WorkflowRuns,
    /// RegisterDurableEvent / ListenForDurableEvent.
    DurableEvents,
    /// The DurableTask stream.
    DurableTask,
}

impl ListenerKind {
    /// Name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            ListenerKind::WorkerActions => "worker_actions",
            ListenerKind::WorkflowRuns => "workflow_runs",
            ListenerKind::DurableEvents => "durable_events",
            ListenerKind::DurableTask => "durable_task",
        }
    }
}

/// A listener's state.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenerState {
    /// Not needed yet (no waiter, no worker).
    Idle,
    /// Opening its first stream.
    Connecting,
    /// Streaming since `since`.
    Connected {
        /// When the current stream was published.
        since: Instant,
    },
    /// Lost its stream; trying again.
    Reconnecting {
        /// When the outage began.
        since: Instant,
        /// Reconnect attempts so far.
        attempts: u32,
        /// The last error.
        last_error: String,
    },
    /// Stopped for good.
    Stopped {
        /// Why (`None` on shutdown).
        error: Option<String>,
    },
}

/// The publishing side of a listener's health, with the degraded/recovered log lines.
#[derive(Debug)]
pub(crate) struct HealthReporter {
    kind: ListenerKind,
    tx: watch::Sender<ListenerState>,
    reconnects: std::sync::atomic::AtomicU64,
}

/// Log a warning on entering reconnecting, then every this many attempts.
const WARN_EVERY: u32 = 5;

impl HealthReporter {
    /// A reporter starting `Idle`.
    pub(crate) fn new(kind: ListenerKind) -> Self {
        HealthReporter {
            kind,
            tx: watch::Sender::new(ListenerState::Idle),
            reconnects: Default::default(),
        }
    }

    /// A receiver of the state.
    pub(crate) fn subscribe(&self) -> watch::Receiver<ListenerState> {
        self.tx.subscribe()
    }

    /// The current state.
    pub(crate) fn get(&self) -> ListenerState {
        self.tx.borrow().clone()
    }

    /// Reconnects made so far.
    pub(crate) fn reconnects(&self) -> u64 {
        self.reconnects.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The listener is opening its first stream.
    pub(crate) fn connecting(&self) {
        self.tx.send_if_modified(|s| {
            if matches!(s, ListenerState::Idle) {
                *s = ListenerState::Connecting;
                true
            } else {
                false
            }
        });
    }

    /// A stream was published.
    pub(crate) fn connected(&self) {
        let now = Instant::now();
        let prev = self.get();
        if let ListenerState::Reconnecting {
            since, attempts, ..
        } = prev
        {
            let down: Duration = now.saturating_duration_since(since);
            tracing::info!(
                listener = self.kind.as_str(),
                downtime_ms = down.as_millis() as u64,
                attempts,
                "listener recovered"
            );
        }
        self.tx
            .send_replace(ListenerState::Connected { since: now });
    }

    /// The stream was lost; `attempts` reconnects so far in this outage.
    pub(crate) fn reconnecting(&self, attempts: u32, error: &str) {
        self.reconnects
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now = Instant::now();
        let since = match self.get() {
            ListenerState::Reconnecting { since, .. } => since,
            _ => now,
        };
        if attempts <= 1 || attempts.is_multiple_of(WARN_EVERY) {
            tracing::warn!(
                listener = self.kind.as_str(),
                attempts,
                error,
                "listener reconnecting"
            );
        }
        self.tx.send_replace(ListenerState::Reconnecting {
            since,
            attempts,
            last_error: error.to_string(),
        });
    }

    /// The listener is idle (nobody needs it).
    pub(crate) fn idle(&self) {
        self.tx.send_replace(ListenerState::Idle);
    }

    /// The listener stopped.
    pub(crate) fn stopped(&self, error: Option<String>) {
        if let Some(e) = &error {
            tracing::error!(listener = self.kind.as_str(), error = %e, "listener stopped");
        }
        self.tx.send_replace(ListenerState::Stopped { error });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map(|mut v| v.extend_from_slice(b)).ok();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn warns_on_entering_reconnecting_then_every_fifth_attempt_and_logs_recovery() {
        let lines = Lines::default();
        let w = lines.clone();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || w.clone())
            .finish();
        let _g = tracing::subscriber::set_default(sub);
        let h = HealthReporter::new(ListenerKind::WorkflowRuns);
        for attempt in 1..=10 {
            h.reconnecting(attempt, "down");
        }
        tokio::time::advance(Duration::from_secs(3)).await;
        h.connected();
        let text = String::from_utf8(lines.0.lock().map(|v| v.clone()).unwrap_or_default())
            .unwrap_or_default();
        let warned: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warned.len(), 3, "attempts 1, 5 and 10: {warned:?}");
        for a in ["attempts=1 ", "attempts=5 ", "attempts=10 "] {
            assert!(
                warned.iter().any(|l| l.contains(a)),
                "{a} missing: {warned:?}"
            );
        }
        assert!(
            text.contains("listener recovered") && text.contains("downtime_ms=3000"),
            "{text}"
        );
        assert_eq!(h.reconnects(), 10);
        assert!(matches!(h.get(), ListenerState::Connected { .. }));
    }
}
