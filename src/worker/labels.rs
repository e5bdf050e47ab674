//! Worker labels at run time: `UpsertWorkerLabels`.
//!
//! # Invariants
//!
//! 1. An upsert changes only the keys it names (the engine has no delete); the worker's
//!    registration keeps the merged labels, so a re-registration (the engine lost the worker)
//!    carries them too. Only an upsert the engine took (or may have taken: no answer) is kept:
//!    one it refused, or that was never sent, is not carried by a later registration.
//! 2. Upserting before the worker started is refused locally: there is no worker to label.

use std::collections::HashMap;

use super::WorkerCore;
use crate::error::Error;
use crate::placement::{LabelValue, labels_to_proto};
use crate::protocol as proto;

impl WorkerCore {
    /// Sets `labels` on this worker at the engine (and for later re-registrations).
    pub(crate) async fn upsert_labels(
        &self,
        labels: HashMap<String, LabelValue>,
    ) -> Result<(), Error> {
        const PATH: &str = "/Dispatcher/UpsertWorkerLabels";
        let (Some(worker_id), Some(registration)) =
            (self.identity.get(), self.registration.lock().clone())
        else {
            return Err(Error::invalid(
                PATH,
                "the worker has not started: call start_worker first, or give the labels in WorkerOptions",
            ));
        };
        let req = proto::UpsertWorkerLabelsRequest {
            worker_id,
            labels: labels_to_proto(&labels),
        };
        let client = self.conn.dispatcher();
        let result = self
            .conn
            .call(PATH, &client, &req, |mut c, r| async move {
                c.upsert_worker_labels(r).await
            })
            .await;
        let taken = match &result {
            Ok(_) => true,
            Err(e) => e.outcome() == crate::error::Outcome::MaybeExecuted,
        };
        if taken {
            registration.labels.lock().extend(labels);
        }
        result.map(|_| ())
    }
}
