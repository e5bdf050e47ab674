//! The engine's actions: the changes that cross rooms, each an `impl State` block over the
//! records the rooms below own (runs and tasks in `store/`, the queue and slots in `sched/`,
//! conditions in `dag/`, timers and schedules in `time/`, spans in `traces/`, the durable log in
//! `durable/`). Nothing below the hub imports them; the hub's entry points call them under the
//! state's lock.

mod admission;
mod assign;
mod conditions;
pub(crate) mod control;
mod fire;
mod holds;
mod runs;
mod skip;
mod subscribers;
mod traces;
