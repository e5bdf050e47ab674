//! The scheduler: the queue of tasks waiting for a worker, assignment to slots, placement
//! (labels, sticky), workflow concurrency and rate limits.

pub(crate) mod batches;
pub(crate) mod concurrency;
pub(crate) mod placement;
pub(crate) mod queue;
pub(crate) mod rate_limits;
