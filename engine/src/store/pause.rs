//! Paused workflows (`PATCH /api/v1/workflows/{id}` with `pause`), as the real engine holds
//! them: a paused workflow's runs are still created and read `QUEUED`, but its tasks wait in a
//! room of their own that the scheduler never sees.
//!
//! # Invariants
//!
//! 1. A task of a paused workflow is never in the queue: queueing it holds it instead, in
//!    arrival order (pausing moves the workflow's queued tasks there too).
//! 2. Unpausing queues every held task again, in the order they were held.
//! 3. A held task older than the pause's TTL is cancelled (the real engine's sweep).
//! 4. Tasks already running are untouched by either.
//! 5. While paused, a cron fires only if the pause queues cron runs, and a due schedule
//!    waits (unfired) if the pause drops scheduled runs.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// How a workflow is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PauseRule {
    /// How long a held task waits before it is cancelled.
    pub ttl: Duration,
    /// Cron ticks start nothing while paused (`DROP`); otherwise their runs are held.
    pub drop_crons: bool,
    /// Due schedules wait while paused (`DROP`); otherwise their runs are held.
    pub drop_schedules: bool,
}

impl PauseRule {
    /// From the request's `pause` object; `None` for an unpause, `Err` for a bad one.
    pub(crate) fn from_json(pause: &serde_json::Value) -> Result<Option<PauseRule>, String> {
        match pause["action"].as_str() {
            Some("unpause") => Ok(None),
            Some("pause") => {
                let drop = |k: &str| match pause[k].as_str() {
                    Some("DROP") => Ok(true),
                    Some("QUEUE") => Ok(false),
                    other => Err(format!("{k} must be QUEUE or DROP, not {other:?}")),
                };
                Ok(Some(PauseRule {
                    ttl: parse_ttl(pause["pausedWorkflowQueueTTL"].as_str().unwrap_or("")),
                    drop_crons: drop("pausedWorkflowCronRunQueueBehavior")?,
                    drop_schedules: drop("pausedWorkflowScheduledRunQueueBehavior")?,
                }))
            }
            other => Err(format!(
                "pause.action must be pause or unpause, not {other:?}"
            )),
        }
    }

    /// The engine's words for the two behaviours.
    pub(crate) fn behaviours(&self) -> (&'static str, &'static str) {
        let word = |drop: bool| if drop { "DROP" } else { "QUEUE" };
        (word(self.drop_crons), word(self.drop_schedules))
    }
}

/// The real engine's TTL form: a number and `ms`, `s`, `m`, `h`, `d`, `w` or `y`; anything it
/// cannot read is five minutes.
pub(crate) fn parse_ttl(s: &str) -> Duration {
    const FALLBACK: Duration = Duration::from_secs(300);
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let Ok(n) = n.parse::<u64>() else {
        return FALLBACK;
    };
    let secs = |k: u64| Duration::from_secs(n.saturating_mul(k));
    match unit {
        "ms" => Duration::from_millis(n),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3_600),
        "d" => secs(86_400),
        "w" => secs(7 * 86_400),
        "y" => secs(365 * 86_400),
        _ => FALLBACK,
    }
}

/// The pauses and the tasks they hold.
#[derive(Debug, Default)]
pub(crate) struct Pauses {
    rules: HashMap<String, PauseRule>,
    held: HashMap<String, VecDeque<(String, Instant)>>,
}

impl Pauses {
    /// The rule of a paused workflow (by name).
    pub(crate) fn rule(&self, workflow: &str) -> Option<PauseRule> {
        if self.rules.is_empty() {
            return None;
        }
        self.rules.get(workflow).copied()
    }

    /// Whether `tid` is held.
    pub(crate) fn holds(&self, tid: &str) -> bool {
        !self.held.is_empty() && self.held.values().flatten().any(|(t, _)| t == tid)
    }

    /// Every held task's id.
    pub(crate) fn held_ids(&self) -> impl Iterator<Item = &str> {
        self.held.values().flatten().map(|(t, _)| t.as_str())
    }

    /// Tasks held for `workflow`.
    #[cfg(test)]
    pub(crate) fn held(&self, workflow: &str) -> usize {
        self.held.get(workflow).map_or(0, VecDeque::len)
    }

    /// Whether `workflow` (by name) is paused.
    pub(crate) fn is_paused(&self, workflow: &str) -> bool {
        !self.rules.is_empty() && self.rules.contains_key(workflow)
    }

    /// Holds task `tid` of paused `workflow`, after the ones held before it (invariant 1).
    pub(crate) fn hold(&mut self, workflow: &str, tid: &str, now: Instant) {
        self.held
            .entry(workflow.to_string())
            .or_default()
            .push_back((tid.to_string(), now));
    }

    /// Pauses `workflow` under `rule` (or changes its rule), holding `queued`, its tasks taken
    /// out of the queue, after what it already holds (invariant 1).
    pub(crate) fn pause(
        &mut self,
        workflow: &str,
        rule: PauseRule,
        queued: Vec<String>,
        now: Instant,
    ) {
        self.rules.insert(workflow.to_string(), rule);
        let held = self.held.entry(workflow.to_string()).or_default();
        held.extend(queued.into_iter().map(|t| (t, now)));
    }

    /// Ends `workflow`'s pause (an unpause or its deletion) and gives back what it held, in the
    /// order it was held (invariant 2).
    pub(crate) fn end(&mut self, workflow: &str) -> Vec<String> {
        self.rules.remove(workflow);
        let held = self.held.remove(workflow).unwrap_or_default();
        held.into_iter().map(|(t, _)| t).collect()
    }

    /// Takes out the held tasks older than their pause's TTL at `now` (invariant 3).
    pub(crate) fn expired(&mut self, now: Instant) -> Vec<String> {
        let mut expired = Vec::new();
        for (wf, held) in &mut self.held {
            let Some(rule) = self.rules.get(wf) else {
                continue;
            };
            while held
                .front()
                .is_some_and(|(_, at)| now.duration_since(*at) >= rule.ttl)
            {
                if let Some((tid, _)) = held.pop_front() {
                    expired.push(tid);
                }
            }
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ttls_read_as_the_real_engine_reads_them() {
        assert_eq!(parse_ttl("90s"), Duration::from_secs(90));
        assert_eq!(parse_ttl("250ms"), Duration::from_millis(250));
        assert_eq!(parse_ttl("2h"), Duration::from_secs(7_200));
        assert_eq!(parse_ttl("1d"), Duration::from_secs(86_400));
        assert_eq!(parse_ttl("soon"), Duration::from_secs(300));
        assert_eq!(parse_ttl(""), Duration::from_secs(300));
    }

    #[test]
    fn a_pause_request_reads_its_behaviours_and_refuses_unknown_words() {
        let r = PauseRule::from_json(&json!({"action": "pause",
            "pausedWorkflowCronRunQueueBehavior": "DROP",
            "pausedWorkflowScheduledRunQueueBehavior": "QUEUE",
            "pausedWorkflowQueueTTL": "1m"}))
        .expect("valid")
        .expect("a pause");
        assert_eq!(r.ttl, Duration::from_secs(60));
        assert_eq!(r.behaviours(), ("DROP", "QUEUE"));
        assert_eq!(
            PauseRule::from_json(&json!({"action": "unpause"})),
            Ok(None)
        );
        assert!(PauseRule::from_json(&json!({"action": "stop"})).is_err());
        assert!(
            PauseRule::from_json(&json!({"action": "pause",
                "pausedWorkflowCronRunQueueBehavior": "KEEP"}))
            .is_err()
        );
    }

    #[test]
    fn held_tasks_go_back_in_order_on_unpause_and_expire_after_the_ttl() {
        let mut st = crate::hub::state_with(crate::hub::one_task_workflow());
        let wf = st
            .workflows
            .values()
            .next()
            .map(|w| w.name.clone())
            .expect("a workflow");
        let now = Instant::now();
        let rule = PauseRule {
            ttl: Duration::from_secs(10),
            drop_crons: false,
            drop_schedules: false,
        };
        let first = st
            .create_run(&wf, json!({}), Default::default(), Default::default())
            .expect("run");
        st.pause_workflow(&wf, rule, now);
        let second = st
            .create_run(&wf, json!({}), Default::default(), Default::default())
            .expect("run");
        assert!(
            st.queue.is_empty(),
            "nothing of a paused workflow is queued"
        );
        assert_eq!(st.pauses.held(&wf), 2);
        // Unpause: both queued again, the first held first.
        assert_eq!(st.unpause_workflow(&wf), 2);
        let mut order: Vec<String> = Vec::new();
        for lane in st.queue.lane_keys() {
            order.extend(st.queue.take_lane(&lane));
        }
        let run_of = |tid: &String| st.tasks[tid].run_id.clone();
        assert_eq!(
            order.iter().map(run_of).collect::<Vec<_>>(),
            [first, second]
        );
        // Queued again, paused again, and the TTL passes: both are cancelled.
        for tid in &order {
            st.enqueue(tid);
        }
        st.pause_workflow(&wf, rule, now);
        assert!(st.queue.is_empty());
        st.expire_paused(now + Duration::from_secs(9));
        assert_eq!(st.pauses.held(&wf), 2, "not before the TTL");
        st.expire_paused(now + Duration::from_secs(10));
        assert_eq!(st.pauses.held(&wf), 0);
        assert!(
            order
                .iter()
                .all(|t| st.tasks[t].status == crate::store::model::Status::Cancelled)
        );
    }
}
