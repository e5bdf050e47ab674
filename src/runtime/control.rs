//! Cancelling and replaying runs.

use super::RuntimeHandle;
use crate::client::control::{RunFilter, Selection};
use crate::error::Error;

impl RuntimeHandle {
    /// Cancels runs (or tasks) by id: unfinished tasks are cancelled, running ones get a
    /// cancellation on their worker. Returns the ids the engine acknowledged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelling twice is harmless.
    pub async fn cancel_runs(&self, ids: &[String]) -> Result<Vec<String>, Error> {
        self.inner.client.cancel(Selection::Ids(ids.to_vec())).await
    }

    /// Cancels every run the filter selects (at most 20,000); returns their ids.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn cancel_where(&self, filter: &RunFilter) -> Result<Vec<String>, Error> {
        self.inner
            .client
            .cancel(Selection::Filter(filter.clone()))
            .await
    }

    /// Replays runs (a run id: its whole DAG; a task id: that task and what follows it):
    /// failed or cancelled tasks run again with a fresh retry budget. Returns the task ids
    /// replayed, once the engine shows each replayed run taken (at most 5 s, for the first 100
    /// ids given), so a wait or a read started after it never sees a run's old end. The runs
    /// are read before the replay too (within the same 5 s), to know their old end.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write).
    pub async fn replay_runs(&self, ids: &[String]) -> Result<Vec<String>, Error> {
        self.inner.client.replay(Selection::Ids(ids.to_vec())).await
    }

    /// Replays every run the filter selects (at most 1,000); returns the task ids replayed,
    /// as soon as the engine answers: a wait started at once on one of them can read its old
    /// end while the engine's controller has not applied the replay yet (read it until it
    /// shows not finished, or replay by id).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe (a write).
    pub async fn replay_where(&self, filter: &RunFilter) -> Result<Vec<String>, Error> {
        self.inner
            .client
            .replay(Selection::Filter(filter.clone()))
            .await
    }
}
