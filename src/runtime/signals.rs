//! Running a worker under a process manager: until SIGTERM or SIGINT, then a drain
//! (docs/contract.md §5); a second signal during the drain stops at once.
//!
//! # Invariants
//!
//! 1. The signal handlers are installed before [`RuntimeHandle::run_until_signal`] first waits,
//!    so a signal that arrives while it runs never takes the default action (killing the
//!    process mid-task).
//! 2. The first signal starts the shutdown with the caller's drain; a second one cuts the drain:
//!    running tasks are cancelled at once and the shutdown finishes.

use std::time::Duration;

use super::RuntimeHandle;
use crate::error::{Error, Outcome};

/// The signal that ended [`RuntimeHandle::run_until_signal`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopSignal {
    /// SIGTERM (systemd, Kubernetes).
    Terminate,
    /// SIGINT (Ctrl-C).
    Interrupt,
}

/// The process's SIGTERM and SIGINT, as one stream of [`StopSignal`]s.
struct Signals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, Error> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let failed = |e: std::io::Error| {
                Error::new(Outcome::Invalid, "run until signal")
                    .with_detail(format!("cannot install the signal handlers: {e}"))
            };
            Ok(Signals {
                term: signal(SignalKind::terminate()).map_err(failed)?,
                int: signal(SignalKind::interrupt()).map_err(failed)?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    async fn next(&mut self) -> StopSignal {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => StopSignal::Terminate,
                _ = self.int.recv() => StopSignal::Interrupt,
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            StopSignal::Interrupt
        }
    }
}

impl RuntimeHandle {
    /// Serves until the process gets SIGTERM or SIGINT, then shuts down, draining running tasks
    /// for up to `drain` (the worker is paused at the engine first and keeps heartbeating until
    /// its tasks have reported). A second signal during the drain cancels what still runs and
    /// finishes the shutdown at once. Returns the first signal.
    ///
    /// # Errors
    /// The signal handlers cannot be installed (nothing was stopped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before a signal arrives leaves the runtime running. The handlers
    /// stay installed for the life of the process (a signal handler cannot be taken back), so
    /// from then on SIGTERM and SIGINT no longer end the process by themselves: call this again
    /// to serve until the next one. Dropping it during the drain leaves the shutdown going (see
    /// [`RuntimeHandle::shutdown`]), but a second signal is no longer watched.
    pub async fn run_until_signal(&self, drain: Duration) -> Result<StopSignal, Error> {
        let mut signals = Signals::install()?;
        let first = signals.next().await;
        tracing::info!(signal = ?first, "stopping: draining running tasks");
        let shutdown = self.shutdown(drain);
        tokio::pin!(shutdown);
        tokio::select! {
            _ = &mut shutdown => return Ok(first),
            second = signals.next() => {
                tracing::warn!(signal = ?second, "second signal: cancelling running tasks now");
                self.inner.tree.worker.cut_drain();
            }
        }
        shutdown.await;
        Ok(first)
    }
}
