//! Time: the engine's clock (real or virtual), cron expressions, and the crons and schedules
//! that fire runs.

pub(crate) mod clock;
pub(crate) mod cron;
pub(crate) mod schedules;
pub(crate) mod timers;
