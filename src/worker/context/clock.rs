//! Durable time: `now()` is recorded in the durable log the first time it is asked, so a replay
//! of the invocation (a retry, a restore after eviction) reads the same instant back and decides
//! the same way; `sleep_until()` sleeps durably until an instant measured by that clock. The
//! official SDKs do the same (a memo of the current time, then a durable sleep for the rest).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Context;
use crate::error::Error;

/// The memo key of `now()` (each call is its own node of the log, in call order).
const NOW_KEY: &str = "hatchet:now";

impl Context {
    /// The current time, recorded in the durable log: a replay of this invocation gets the same
    /// instant back. Durable tasks only (see [`Context::memo`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an interrupted call is asked again on replay.
    pub async fn now(&self) -> Result<SystemTime, Error> {
        let ms: u64 = self
            .memo(NOW_KEY, || async {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or(0)
            })
            .await?;
        Ok(UNIX_EPOCH + Duration::from_millis(ms))
    }

    /// Sleeps durably until `wake_at`, measured by [`Context::now`]: the engine keeps the timer,
    /// and a replay finds both the recorded time and the timer. An instant already past sleeps
    /// for zero (the log keeps the same nodes either way).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a replay finds the same timer.
    pub async fn sleep_until(&self, wake_at: SystemTime) -> Result<(), Error> {
        let now = self.now().await?;
        let left = wake_at.duration_since(now).unwrap_or(Duration::ZERO);
        self.sleep_for(left).await
    }
}
