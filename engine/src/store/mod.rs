//! Runs and tasks and what surrounds them: their records, their lifecycle, run control,
//! the events kept, what subscribers see, paused workflows and incoming webhooks.

pub mod control;
pub(crate) mod definition;
pub(crate) mod events;
pub(crate) mod model;
pub(crate) mod pause;
pub(crate) mod readable;
pub(crate) mod runs;
pub(crate) mod subscriptions;
pub(crate) mod table;
pub(crate) mod webhooks;
pub(crate) mod workflows;
