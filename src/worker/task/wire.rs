//! The wire conversion: a workflow and its tasks as the registration request
//! (`v1.AdminService/PutWorkflow`), and durations as the engine spells them.

use super::workflow::Concurrency;
use super::{TaskDef, Workflow};
use crate::placement::desired_to_proto;
use crate::protocol::v1;
use crate::worker::duration::wire_duration;

impl Workflow {
    /// The registration request (`v1.AdminService/PutWorkflow`), `name` already namespaced,
    /// with event keys (triggers and conditions) in `namespace`, as
    /// [`crate::runtime::RuntimeHandle::push`] namespaces the keys it pushes.
    pub(crate) fn to_proto_in(
        &self,
        name: &str,
        namespace: &str,
    ) -> v1::CreateWorkflowVersionRequest {
        let ns = |k: &str| {
            if namespace.is_empty() || k.starts_with(namespace) {
                k.to_string()
            } else {
                format!("{namespace}{k}")
            }
        };
        v1::CreateWorkflowVersionRequest {
            name: name.to_string(),
            description: self.description.clone(),
            version: self.version.clone(),
            event_triggers: self.on_events.iter().map(|k| ns(k)).collect(),
            sticky: self.sticky.map(|s| s.wire() as i32),
            default_filters: self
                .default_filters
                .iter()
                .map(|(expression, scope, payload)| v1::DefaultFilter {
                    expression: expression.clone(),
                    scope: scope.clone(),
                    payload: Some(payload.to_string().into_bytes()),
                })
                .collect(),
            cron_triggers: self.on_crons.clone(),
            cron_input: self.cron_input.as_ref().map(|v| v.to_string()),
            tasks: self.engine_tasks().map(|t| t.to_proto(name, &ns)).collect(),
            on_failure_task: self.on_failure.as_ref().map(|t| t.to_proto(name, &ns)),
            default_priority: self.default_priority,
            concurrency_arr: self.concurrency.iter().map(Concurrency::to_proto).collect(),
            idempotency: self.idempotency.as_ref().map(|(e, ttl, by_status)| {
                v1::IdempotencyConfig {
                    expression: e.clone(),
                    ttl_ms: i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
                    method: by_status.then_some(v1::IdempotencyMethod::Status as i32),
                }
            }),
            ..Default::default()
        }
    }
}

impl TaskDef {
    /// The task's part of the registration request (`namespaced` applies the namespace to
    /// event keys).
    pub(crate) fn to_proto(
        &self,
        workflow: &str,
        namespaced: &dyn Fn(&str) -> String,
    ) -> v1::CreateTaskOpts {
        let o = &self.options;
        v1::CreateTaskOpts {
            concurrency: o.concurrency.iter().map(Concurrency::to_proto).collect(),
            worker_labels: desired_to_proto(&o.desired_labels),
            conditions: crate::worker::conditions::task_conditions(
                workflow,
                &self.name,
                &o.conditions,
                namespaced,
            ),
            readable_id: self.name.clone(),
            action: Workflow::action_id(workflow, &self.name),
            timeout: o.timeout.map(wire_duration).unwrap_or_default(),
            schedule_timeout: o.schedule_timeout.map(wire_duration),
            parents: o.parents.clone(),
            retries: o.retries,
            backoff_factor: o.backoff_factor,
            backoff_max_seconds: o.backoff_max_seconds,
            is_durable: self.durable,
            rate_limits: o.rate_limits.clone(),
            slot_requests: if o.slot_requests.is_empty() {
                let kind = if self.durable { "durable" } else { "default" };
                [(kind.to_string(), 1)].into()
            } else {
                o.slot_requests.clone()
            },
            batch: o.batch.as_ref().map(super::Batching::to_proto),
            ..Default::default()
        }
    }
}

impl Concurrency {
    /// A concurrency limit on the wire.
    fn to_proto(&self) -> v1::Concurrency {
        v1::Concurrency {
            expression: self.expression.clone(),
            max_runs: Some(self.max_runs),
            limit_strategy: Some(self.strategy.wire() as i32),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::worker::context::Context;
    use crate::worker::task::{ConcurrencyStrategy, TaskError, TaskOptions};

    #[test]
    fn durations_are_written_as_the_engine_parses_them() {
        let s = Duration::from_secs;
        assert_eq!(wire_duration(s(0)), "0s");
        assert_eq!(wire_duration(s(45)), "45s");
        assert_eq!(wire_duration(s(90)), "1m30s");
        assert_eq!(wire_duration(s(3600)), "1h");
        assert_eq!(wire_duration(s(3723)), "1h2m3s");
        assert_eq!(wire_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(wire_duration(Duration::from_micros(1)), "1ms");
    }

    #[test]
    fn definitions_carry_retries_timeouts_triggers_slots_concurrency_and_durability() {
        use crate::protocol::v1::ConcurrencyLimitStrategy;
        let wf = Workflow::new("Orders")
            .task_with(
                "charge",
                TaskOptions::new()
                    .retries(3)
                    .timeout(Duration::from_secs(30))
                    .slots("default", 2),
                |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
            )
            .durable_task(
                "ship",
                TaskOptions::new().parents(["charge"]),
                |i: Value, _c: Context| async move { Ok::<_, TaskError>(i) },
            )
            .on_events(["order:paid"])
            .concurrency(
                "input.user_id",
                2,
                crate::worker::task::ConcurrencyStrategy::GroupRoundRobin,
            );
        let p = wf.to_proto_in("ns_orders", "");
        assert_eq!(p.name, "ns_orders");
        assert_eq!(p.event_triggers, ["order:paid"]);
        assert_eq!(
            p.tasks[0].action, "ns_orders:charge",
            "action ids are lower case"
        );
        assert_eq!(
            (p.tasks[0].retries, p.tasks[0].timeout.as_str()),
            (3, "30s")
        );
        assert_eq!(p.tasks[0].slot_requests["default"], 2);
        assert!(p.tasks[1].is_durable);
        assert_eq!(p.tasks[1].parents, ["charge"]);
        assert_eq!(p.tasks[1].slot_requests["durable"], 1);
        assert_eq!(p.concurrency_arr[0].max_runs, Some(2));
        assert_eq!(
            p.concurrency_arr[0].limit_strategy,
            Some(ConcurrencyLimitStrategy::GroupRoundRobin as i32)
        );
    }

    #[test]
    fn on_failure_and_default_priority_reach_the_registration() {
        let wf = Workflow::new("w")
            .task("a", |_: Value, _| async { Ok::<_, TaskError>(1) })
            .on_failure("cleanup", TaskOptions::new(), |_: Value, _| async {
                Ok::<_, TaskError>(())
            })
            .default_priority(3);
        let req = wf.to_proto_in("w", "");
        assert_eq!(req.tasks.len(), 1);
        let hook = req.on_failure_task.expect("on_failure_task is sent");
        assert_eq!(hook.readable_id, "cleanup");
        assert_eq!(hook.action, "w:cleanup");
        assert!(hook.parents.is_empty());
        assert_eq!(req.default_priority, Some(3));
        assert_eq!(wf.all_tasks().count(), 2);
    }

    #[test]
    fn a_task_level_concurrency_limit_is_sent_with_its_task() {
        let wf = Workflow::new("w").task_with(
            "a",
            TaskOptions::new().concurrency("input.user", 2, ConcurrencyStrategy::CancelNewest),
            |_: Value, _: Context| async { Ok::<_, TaskError>(1) },
        );
        let req = wf.to_proto_in("w", "");
        let c = &req.tasks[0].concurrency;
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].expression.as_str(), c[0].max_runs),
            ("input.user", Some(2))
        );
        assert_eq!(
            c[0].limit_strategy,
            Some(ConcurrencyStrategy::CancelNewest.wire() as i32)
        );
        assert!(req.concurrency_arr.is_empty(), "not a workflow-level limit");
    }

    #[test]
    fn an_on_success_task_is_sent_as_a_task_whose_parents_are_the_leaves() {
        let t = |_: Value, _: Context| async { Ok::<_, TaskError>(1) };
        let wf = Workflow::new("w")
            .task("a", t)
            .task_with("b", TaskOptions::new().parents(["a"]), t)
            .task_with("c", TaskOptions::new().parents(["a"]), t)
            .on_success("done", TaskOptions::new(), t);
        let req = wf.to_proto_in("w", "");
        let names: Vec<_> = req.tasks.iter().map(|t| t.readable_id.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "done"]);
        assert_eq!(req.tasks[3].parents, ["b", "c"], "after every leaf");
        assert_eq!(req.tasks[3].action, "w:done");
        assert!(req.on_failure_task.is_none());
        assert_eq!(wf.all_tasks().count(), 4);
    }

    #[test]
    fn timeouts_are_durations_on_the_wire_as_strings() {
        let o = TaskOptions::new()
            .timeout(Duration::from_secs(90))
            .schedule_timeout(Duration::from_secs(600));
        let wf =
            Workflow::new("w").task_with("a", o, |_: Value, _| async { Ok::<_, TaskError>(1) });
        let t = &wf.to_proto_in("w", "").tasks[0];
        assert_eq!(t.timeout, "1m30s");
        assert_eq!(t.schedule_timeout.as_deref(), Some("10m"));
    }
}
