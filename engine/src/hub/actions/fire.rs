//! Firing the calendar: due schedules and cron ticks start runs (held or dropped while their
//! workflow is paused), and workflow versions set their crons. The calendar and its invariants
//! are in `schedules.rs`.

use std::time::SystemTime;

use serde_json::{Value, json};

use crate::hub::State;
use crate::parse::new_id;
use crate::store::model::TriggerOpts;
use crate::time::cron::Cron;
use crate::time::schedules::{Planned, cron_metadata, row_meta};
use hatchet_runtime::protocol::calendar::{format_rfc3339, unix_secs};

impl State {
    fn base_row(&self, p: &Planned) -> Result<Value, String> {
        let wf = self
            .workflows
            .get(&p.workflow)
            .ok_or_else(|| format!("workflow {:?} not found", p.workflow))?;
        Ok(json!({
            "metadata": row_meta(&new_id(), self.clock.system_now()),
            "tenantId": p.tenant, "workflowId": wf.id, "workflowVersionId": wf.version_id,
            "workflowName": p.workflow, "input": p.input, "additionalMetadata": p.metadata,
            "method": p.method, "priority": p.priority,
        }))
    }

    /// Stores a cron; the error says what is wrong with the workflow. The expression is not
    /// checked here, as the real engine's REST create does not check it (v0.104.9 stores any
    /// text); one that does not parse never fires. A workflow's own crons are checked at
    /// registration ([`State::set_workflow_crons`]).
    pub(crate) fn add_cron(
        &mut self,
        p: &Planned,
        name: &str,
        expr: &str,
    ) -> Result<Value, String> {
        let mut row = self.base_row(p)?;
        row["cron"] = json!(expr);
        row["name"] = json!(name);
        row["enabled"] = json!(true);
        self.calendar.crons.push(row.clone());
        Ok(row)
    }

    /// Replaces the crons `workflow` declares with `exprs` (all validated first).
    pub(crate) fn set_workflow_crons(
        &mut self,
        p: &Planned,
        exprs: &[String],
    ) -> Result<(), String> {
        for e in exprs {
            Cron::parse(e)?;
        }
        self.calendar
            .crons
            .retain(|c| !(c["workflowName"] == p.workflow.as_str() && c["method"] == "DEFAULT"));
        for e in exprs {
            self.add_cron(p, e, e)?;
        }
        Ok(())
    }

    /// Stores a one-off schedule at `at`.
    pub(crate) fn add_schedule(&mut self, p: &Planned, at: SystemTime) -> Result<Value, String> {
        let mut row = self.base_row(p)?;
        row["triggerAt"] = json!(format_rfc3339(at));
        self.calendar.scheduled.push(row.clone());
        Ok(row)
    }

    /// A schedule row as the API shows it: once fired, with its run's current status.
    pub(crate) fn scheduled_view(&self, row: &Value) -> Value {
        let mut row = row.clone();
        let run = row["workflowRunId"]
            .as_str()
            .and_then(|id| self.runs.get(id));
        if let Some(run) = run {
            row["workflowRunStatus"] = json!(run.status().workflow_run());
            row["workflowRunCreatedAt"] = json!(format_rfc3339(run.created_at));
            row["workflowRunName"] = json!(run.workflow_name);
        } else {
            // No run yet: the real engine reads the missing run's columns as Go's zero values.
            row["workflowRunCreatedAt"] = json!("0001-01-01T00:00:00Z");
            row["workflowRunName"] = json!("");
        }
        row
    }

    /// Fires what is due at `now` (invariants 2 and 3).
    pub(crate) fn fire_calendar(&mut self, now: SystemTime) {
        let now_secs = unix_secs(now);
        let since = self.calendar.checked.replace(now_secs).unwrap_or(now_secs);
        let mut due: Vec<(Value, Option<usize>)> = Vec::new();
        for c in &self.calendar.crons {
            let fires = self.cron_live(c)
                && c["cron"]
                    .as_str()
                    .and_then(|e| Cron::parse(e).ok())
                    .and_then(|cron| cron.next_after(since))
                    .is_some_and(|next| next <= now_secs);
            if fires {
                due.push((c.clone(), None));
            }
        }
        for (i, s) in self.calendar.scheduled.iter().enumerate() {
            let at = s["triggerAt"]
                .as_str()
                .and_then(hatchet_runtime::protocol::calendar::parse_rfc3339);
            if self.schedule_open(s) && at.is_some_and(|at| at <= now) {
                due.push((s.clone(), Some(i)));
            }
        }
        let mut fired: Vec<usize> = Vec::new();
        for (row, schedule) in due {
            let created = self.start_row(&row, schedule.is_none(), now);
            match (created, schedule) {
                (Ok(run), Some(i)) => {
                    self.calendar.scheduled[i]["workflowRunId"] = json!(run);
                    fired.push(i);
                }
                (Ok(_), None) => {}
                (Err(e), schedule) => {
                    // A schedule fires once, even when its run cannot start (invariant 3).
                    if let Some(i) = schedule {
                        fired.push(i);
                    }
                    tracing::warn!(
                        workflow = %row["workflowName"],
                        error = %e.message(),
                        "the dev engine could not start a cron or scheduled run"
                    );
                }
            }
        }
        // Fired schedules are deleted (invariant 3), highest index first.
        fired.sort_unstable();
        for i in fired.into_iter().rev() {
            self.calendar.scheduled.remove(i);
        }
    }
}

impl State {
    /// When the next cron or schedule fires, after the last pass (or `now`).
    pub(crate) fn next_calendar_fire(&self, now: SystemTime) -> Option<SystemTime> {
        let since = self.calendar.checked.unwrap_or_else(|| unix_secs(now));
        let crons = self
            .calendar
            .crons
            .iter()
            .filter(|c| self.cron_live(c))
            .filter_map(|c| Cron::parse(c["cron"].as_str()?).ok()?.next_after(since))
            .filter_map(|secs| {
                u64::try_from(secs)
                    .ok()
                    .map(|s| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s))
            });
        let schedules = self
            .calendar
            .scheduled
            .iter()
            .filter(|s| self.schedule_open(s))
            .filter_map(|s| {
                s["triggerAt"]
                    .as_str()
                    .and_then(hatchet_runtime::protocol::calendar::parse_rfc3339)
            });
        crons.chain(schedules).min()
    }
}

impl State {
    /// Runs cron `id` now (`POST .../workflows/crons/{id}`), with its input, metadata and
    /// priority, whether or not it is enabled; `None` for an unknown cron.
    pub(crate) fn trigger_cron(
        &mut self,
        id: &str,
        now: SystemTime,
    ) -> Option<Result<String, String>> {
        let row = self.calendar.cron(id)?.clone();
        Some(
            self.start_row(&row, true, now)
                .map_err(|e| e.message().to_string()),
        )
    }

    /// Whether a cron fires at all: enabled, and its workflow not paused with DROP (invariant
    /// 5 of `pause.rs`).
    fn cron_live(&self, c: &Value) -> bool {
        c["enabled"] != false && !self.paused_with(c, |p| p.drop_crons)
    }

    /// Whether a schedule may still fire: not fired, not failed, its workflow not paused with
    /// DROP.
    fn schedule_open(&self, s: &Value) -> bool {
        s.get("workflowRunId").is_none()
            && s.get("error").is_none()
            && !self.paused_with(s, |p| p.drop_schedules)
    }

    fn paused_with(
        &self,
        row: &Value,
        drop: impl Fn(&crate::store::pause::PauseRule) -> bool,
    ) -> bool {
        self.pauses
            .rule(row["workflowName"].as_str().unwrap_or_default())
            .is_some_and(|p| drop(&p))
    }

    /// Starts the run a cron (`cron`) or schedule row names, with its input, metadata (a
    /// cron's with the real engine's `hatchet__cron_*` keys) and priority.
    fn start_row(
        &mut self,
        row: &Value,
        cron: bool,
        now: SystemTime,
    ) -> Result<String, tonic::Status> {
        let mut meta = row["additionalMetadata"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if cron {
            meta.extend(cron_metadata(row, now));
        }
        self.create_run(
            row["workflowName"].as_str().unwrap_or_default(),
            row["input"].clone(),
            meta,
            TriggerOpts {
                priority: row["priority"].as_i64().map(|p| p as i32),
                ..TriggerOpts::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hatchet_runtime::protocol::calendar::parse_rfc3339;

    fn state_with_workflow() -> State {
        crate::hub::state_with(crate::hub::one_task_workflow())
    }

    fn planned() -> Planned {
        Planned {
            tenant: "tenant".into(),
            workflow: "wf".into(),
            input: json!({"n": 1}),
            metadata: json!({"from": "cron"}),
            method: "API",
            priority: json!(1),
        }
    }

    fn at(s: &str) -> SystemTime {
        parse_rfc3339(s).expect("time")
    }

    #[test]
    fn a_cron_fires_once_per_occurrence_and_missed_ones_collapse() {
        let mut st = state_with_workflow();
        st.add_cron(&planned(), "every-minute", "* * * * *")
            .expect("cron");
        st.fire_calendar(at("2026-11-30T09:30:20Z"));
        assert_eq!(st.runs.len(), 0, "the first pass only starts the clock");
        st.fire_calendar(at("2026-11-30T09:30:59Z"));
        assert_eq!(st.runs.len(), 0);
        st.fire_calendar(at("2026-11-30T09:31:00Z"));
        assert_eq!(st.runs.len(), 1, "09:31 fires");
        st.fire_calendar(at("2026-11-30T09:31:00Z"));
        st.fire_calendar(at("2026-11-30T09:31:30Z"));
        assert_eq!(st.runs.len(), 1, "and only once");
        // The engine was stopped for ten minutes: one run, not ten.
        st.fire_calendar(at("2026-11-30T09:41:05Z"));
        assert_eq!(st.runs.len(), 2);
        let run = st.runs.values().next().expect("a run");
        assert_eq!(run.input["n"], 1);
        assert_eq!(run.additional_metadata["from"], "cron");
    }

    #[test]
    fn a_workflow_paused_with_drop_skips_its_cron_ticks_and_holds_its_schedules() {
        let mut st = state_with_workflow();
        st.add_cron(&planned(), "every-minute", "* * * * *")
            .expect("cron");
        st.add_schedule(&planned(), at("2026-11-30T09:31:10Z"))
            .expect("schedule");
        let rule = crate::store::pause::PauseRule {
            ttl: std::time::Duration::from_secs(3_600),
            drop_crons: true,
            drop_schedules: true,
        };
        let now = st.clock.now();
        st.pause_workflow("wf", rule, now);
        st.fire_calendar(at("2026-11-30T09:30:20Z"));
        st.fire_calendar(at("2026-11-30T09:31:30Z"));
        assert_eq!(
            st.runs.len(),
            0,
            "the 09:31 tick is dropped, the schedule waits"
        );
        assert_eq!(
            st.calendar.scheduled.len(),
            1,
            "the schedule is kept, unfired"
        );
        st.unpause_workflow("wf");
        st.fire_calendar(at("2026-11-30T09:31:40Z"));
        assert_eq!(
            st.runs.len(),
            1,
            "unpaused, the schedule fires (the dropped tick does not)"
        );
        assert!(st.calendar.scheduled.is_empty());
    }

    #[test]
    fn a_schedule_fires_once_at_its_time_and_is_then_deleted() {
        let mut st = state_with_workflow();
        st.add_schedule(&planned(), at("2026-11-30T10:00:00Z"))
            .expect("schedule");
        st.fire_calendar(at("2026-11-30T09:59:59Z"));
        assert_eq!(st.runs.len(), 0);
        assert_eq!(st.calendar.scheduled.len(), 1, "open until its time");
        st.fire_calendar(at("2026-11-30T10:00:00Z"));
        st.fire_calendar(at("2026-11-30T10:00:01Z"));
        assert_eq!(st.runs.len(), 1);
        assert!(
            st.calendar.scheduled.is_empty(),
            "deleted once fired, as the real engine does"
        );
    }

    #[test]
    fn declared_crons_are_replaced_on_put_and_bad_ones_refused() {
        let mut st = state_with_workflow();
        let mut p = planned();
        p.method = "DEFAULT";
        st.set_workflow_crons(&p, &["0 * * * *".into()])
            .expect("crons");
        st.add_cron(&planned(), "api", "0 0 * * *").expect("cron");
        st.set_workflow_crons(&p, &["30 * * * *".into(), "45 * * * *".into()])
            .expect("crons");
        let mut exprs: Vec<&str> = st
            .calendar
            .crons
            .iter()
            .filter_map(|c| c["cron"].as_str())
            .collect();
        exprs.sort_unstable();
        assert_eq!(exprs, ["0 0 * * *", "30 * * * *", "45 * * * *"]);
        let e = st
            .set_workflow_crons(&p, &["61 * * * *".into()])
            .expect_err("bad");
        assert!(e.contains("minute"), "{e}");
        assert_eq!(st.calendar.crons.len(), 3, "a refused put changes nothing");
    }
}
