//! Conditions: what a DAG task waits for (`wait_for`), what skips or cancels it (`skip_if`,
//! `cancel_if`), and what a durable task waits for ([`crate::worker::context::Context::wait_for`]). A
//! [`Condition`] is a sleep, a user event (with an optional CEL expression over its payload
//! and a scope), or a parent's output (with a CEL expression over `output`). Conditions in one
//! [`AnyOf`] are OR-ed; separate groups are AND-ed.
//!
//! # Invariants
//!
//! 1. Every condition has a readable key (what the engine reports it under): its own
//!    [`Condition::key`], or `sleep:<duration>` for a sleep, the event key for an event, and
//!    `parent:<task>` for a parent.
//! 2. A registered task's group ids are derived from the workflow, task and group position, so
//!    registering the same workflow again sends the same request; a durable wait's are fresh.
//! 3. Durations go on the wire as duration strings (`1m30s`), event keys namespaced.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::protocol::v1;
use crate::worker::duration::wire_duration;

/// One condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    kind: Kind,
    expression: String,
    key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Sleep(Duration),
    Event {
        key: String,
        scope: Option<String>,
        lookback: Option<Duration>,
    },
    Parent(String),
}

impl Condition {
    /// Holds once `duration` has passed (for a task with parents: since they finished; for a
    /// root task or a durable wait: since it was registered).
    pub fn sleep(duration: Duration) -> Self {
        Condition {
            kind: Kind::Sleep(duration),
            expression: String::new(),
            key: None,
        }
    }

    /// Holds when an event with `key` is pushed (after the wait began). Its scope and lookback
    /// are set on the [`EventCondition`] this returns, where they mean something; it stands
    /// wherever a condition or a group is taken (in an array with other kinds of conditions,
    /// write `.into()`).
    pub fn event(key: impl Into<String>) -> EventCondition {
        EventCondition {
            key: key.into(),
            scope: None,
            lookback: None,
            expression: String::new(),
            report_key: None,
        }
    }

    /// Holds when the parent task `task` completes (with the expression, over its `output`).
    ///
    /// In `wait_for` a parent condition is a gate, not a member of its group: the engine
    /// checks the parents first and starts the task's sleeps and event waits only once they
    /// hold. So `AnyOf[parent, sleep(30 s)]` waits the 30 s (the parent cannot stand in for the
    /// sleep), and a parent whose expression is false keeps the task waiting. In `skip_if` and
    /// `cancel_if` it decides on its own.
    pub fn parent(task: impl Into<String>) -> Self {
        Condition {
            kind: Kind::Parent(task.into()),
            expression: String::new(),
            key: None,
        }
    }

    /// A CEL expression that must be true: over `input` (the event payload) for an event, over
    /// `output` for a parent (`output.amount > 100`).
    pub fn expression(mut self, cel: impl Into<String>) -> Self {
        self.expression = cel.into();
        self
    }

    /// Whether a lookback is set.
    pub(crate) fn has_lookback(&self) -> bool {
        matches!(
            &self.kind,
            Kind::Event {
                lookback: Some(_),
                ..
            }
        )
    }

    /// The key the engine reports this condition under (invariant 1).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Whether it is a parent condition (DAG tasks only).
    pub fn is_parent(&self) -> bool {
        matches!(self.kind, Kind::Parent(_))
    }

    /// The key it is reported under, with the event key namespaced.
    pub(crate) fn readable_key(&self, namespaced: &dyn Fn(&str) -> String) -> String {
        if let Some(k) = &self.key {
            return k.clone();
        }
        match &self.kind {
            Kind::Sleep(d) => format!("sleep:{}", wire_duration(*d)),
            Kind::Event { key, .. } => namespaced(key),
            Kind::Parent(task) => format!("parent:{task}"),
        }
    }
}

/// An event condition ([`Condition::event`]): an event with its key is pushed, with what else
/// must hold of it. Scope and lookback exist only here, and a lookback carries its scope (the
/// engine looks back only for scoped events), so neither can be set where it would do nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventCondition {
    key: String,
    scope: Option<String>,
    lookback: Option<Duration>,
    expression: String,
    report_key: Option<String>,
}

impl EventCondition {
    /// A CEL expression over the event's payload (`input`) that must be true.
    pub fn expression(mut self, cel: impl Into<String>) -> Self {
        self.expression = cel.into();
        self
    }

    /// Only events pushed with this scope (`PushOptions::scope`).
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// A durable wait on this event also takes one pushed with `scope` up to `window` before
    /// the wait is registered (measured by the task's durable clock, so a replay asks the same
    /// instant): an event pushed while the task was still sleeping, or before a replay reached
    /// the wait, is not missed. The engine looks back only for scoped events, so the scope comes
    /// with it. Durable waits only; a task's `wait_for` refuses it.
    pub fn lookback(mut self, scope: impl Into<String>, window: Duration) -> Self {
        self.scope = Some(scope.into());
        self.lookback = Some(window);
        self
    }

    /// The key the engine reports this condition under (invariant 1; the event key by default).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.report_key = Some(key.into());
        self
    }
}

impl From<EventCondition> for Condition {
    fn from(e: EventCondition) -> Self {
        Condition {
            kind: Kind::Event {
                key: e.key,
                scope: e.scope,
                lookback: e.lookback,
            },
            expression: e.expression,
            key: e.report_key,
        }
    }
}

impl From<EventCondition> for AnyOf {
    fn from(e: EventCondition) -> Self {
        AnyOf(vec![e.into()])
    }
}

/// Conditions of which any one is enough (an OR group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnyOf(pub Vec<Condition>);

/// An OR group of `conditions` (of one kind, or each `.into()` a [`Condition`]).
pub fn any_of<C: Into<Condition>>(conditions: impl IntoIterator<Item = C>) -> AnyOf {
    AnyOf(conditions.into_iter().map(Into::into).collect())
}

impl From<Condition> for AnyOf {
    fn from(c: Condition) -> Self {
        AnyOf(vec![c])
    }
}

/// What a satisfied task condition does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConditionAction {
    /// Run the task (`wait_for`).
    Queue,
    /// Skip it: it completes with `{"skipped": true}` (`skip_if`).
    Skip,
    /// Cancel it (`cancel_if`).
    Cancel,
}

impl ConditionAction {
    fn to_proto(self) -> v1::Action {
        match self {
            ConditionAction::Queue => v1::Action::Queue,
            ConditionAction::Skip => v1::Action::Skip,
            ConditionAction::Cancel => v1::Action::Cancel,
        }
    }
}

/// Appends `group`'s conditions to `out` with `action` and `group_id`.
fn push_group(
    out: &mut v1::TaskConditions,
    sleeps_out: Option<&mut Vec<v1::SleepMatchCondition>>,
    events_out: Option<&mut Vec<v1::UserEventMatchCondition>>,
    (action, group_id): (v1::Action, &str),
    group: &AnyOf,
    namespaced: &dyn Fn(&str) -> String,
    now: Option<std::time::SystemTime>,
) {
    let (mut sleeps, mut events) = (Vec::new(), Vec::new());
    for c in &group.0 {
        let base = Some(v1::BaseMatchCondition {
            readable_data_key: c.readable_key(namespaced),
            action: action as i32,
            or_group_id: group_id.to_string(),
            expression: c.expression.clone(),
        });
        match &c.kind {
            Kind::Sleep(d) => sleeps.push(v1::SleepMatchCondition {
                base,
                sleep_for: wire_duration(*d),
            }),
            Kind::Event {
                key,
                scope,
                lookback,
            } => events.push(v1::UserEventMatchCondition {
                base,
                user_event_key: namespaced(key),
                event_scope: scope.clone(),
                consider_events_since: lookback
                    .zip(now)
                    .and_then(|(back, now)| now.checked_sub(back))
                    .map(crate::protocol::timestamp),
            }),
            Kind::Parent(task) => {
                out.parent_override_conditions
                    .push(v1::ParentOverrideMatchCondition {
                        base,
                        parent_readable_id: task.clone(),
                    })
            }
        }
    }
    match sleeps_out {
        Some(s) => s.extend(sleeps),
        None => out.sleep_conditions.extend(sleeps),
    }
    match events_out {
        Some(e) => e.extend(events),
        None => out.user_event_conditions.extend(events),
    }
}

/// A registered task's conditions (invariant 2: stable group ids).
pub(crate) fn task_conditions(
    workflow: &str,
    task: &str,
    groups: &[(ConditionAction, AnyOf)],
    namespaced: &dyn Fn(&str) -> String,
) -> Option<v1::TaskConditions> {
    if groups.is_empty() {
        return None;
    }
    let mut out = v1::TaskConditions::default();
    for (i, (action, group)) in groups.iter().enumerate() {
        let id = uuid::Uuid::new_v5(
            &uuid::Uuid::NAMESPACE_OID,
            format!("{workflow}/{task}/{i}").as_bytes(),
        )
        .to_string();
        push_group(
            &mut out,
            None,
            None,
            (action.to_proto(), &id),
            group,
            namespaced,
            None,
        );
    }
    Some(out)
}

/// A durable wait's conditions (every action CREATE; fresh group ids); an event's lookback is
/// measured back from `now` (the task's durable clock).
pub(crate) fn durable_conditions(
    groups: &[AnyOf],
    namespaced: &dyn Fn(&str) -> String,
    now: Option<std::time::SystemTime>,
) -> v1::DurableEventListenerConditions {
    let mut scratch = v1::TaskConditions::default();
    let (mut sleeps, mut events) = (Vec::new(), Vec::new());
    for group in groups {
        let id = uuid::Uuid::new_v4().to_string();
        push_group(
            &mut scratch,
            Some(&mut sleeps),
            Some(&mut events),
            (v1::Action::Create, &id),
            group,
            namespaced,
            now,
        );
    }
    v1::DurableEventListenerConditions {
        sleep_conditions: sleeps,
        user_event_conditions: events,
    }
}

/// What a durable wait returned: for each condition that fired, its key and data (an event's
/// payload, or `{"sleep_duration": ...}` for a sleep). With an OR group, normally one key.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct WaitResult {
    /// Fired conditions by key (several items when conditions share a key).
    pub(crate) fired: BTreeMap<String, Vec<Value>>,
}

impl WaitResult {
    /// From the engine's completion payload `{"CREATE": {key: [item, ...]}}`, with each key as
    /// the user wrote it (`user_key` undoes the namespace the wire key carries).
    pub(crate) fn from_payload_keyed(v: &Value, user_key: &dyn Fn(&str) -> String) -> Self {
        let mut r = Self::from_payload(v);
        r.fired = std::mem::take(&mut r.fired)
            .into_iter()
            .map(|(k, items)| (user_key(&k), items))
            .collect();
        r
    }

    /// From the engine's completion payload `{"CREATE": {key: [item, ...]}}`.
    pub(crate) fn from_payload(v: &Value) -> Self {
        let fired = v
            .get("CREATE")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, items)| {
                        let list = match items {
                            Value::Array(a) => a.clone(),
                            other => vec![other.clone()],
                        };
                        (k.clone(), list)
                    })
                    .collect()
            })
            .unwrap_or_default();
        WaitResult { fired }
    }

    /// Whether the condition reported under `key` fired.
    pub fn fired(&self, key: &str) -> bool {
        self.fired.contains_key(key)
    }

    /// The keys of the conditions that fired.
    pub fn fired_keys(&self) -> impl Iterator<Item = &str> {
        self.fired.keys().map(String::as_str)
    }

    /// Every item of the condition reported under `key` (several when conditions share a key).
    pub fn items(&self, key: &str) -> &[Value] {
        self.fired.get(key).map(Vec::as_slice).unwrap_or_default()
    }

    /// The first item of the condition reported under `key`.
    pub fn data(&self, key: &str) -> Option<&Value> {
        self.fired.get(key).and_then(|v| v.first())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ns(k: &str) -> String {
        format!("app_{k}")
    }

    #[test]
    fn task_conditions_are_grouped_keyed_and_stable() {
        let groups = vec![
            (
                ConditionAction::Queue,
                any_of([
                    Condition::sleep(Duration::from_secs(90)),
                    Condition::event("order:paid").expression("input.ok").into(),
                ]),
            ),
            (
                ConditionAction::Skip,
                Condition::parent("check").expression("output.skip").into(),
            ),
        ];
        let a = task_conditions("wf", "t", &groups, &ns).expect("some");
        let b = task_conditions("wf", "t", &groups, &ns).expect("some");
        assert_eq!(a, b, "registering again sends the same conditions");
        let sleep = &a.sleep_conditions[0];
        let event = &a.user_event_conditions[0];
        let parent = &a.parent_override_conditions[0];
        assert_eq!(sleep.sleep_for, "1m30s");
        let (sb, eb, pb) = (
            sleep.base.as_ref().unwrap(),
            event.base.as_ref().unwrap(),
            parent.base.as_ref().unwrap(),
        );
        assert_eq!(sb.readable_data_key, "sleep:1m30s");
        assert_eq!(event.user_event_key, "app_order:paid");
        assert_eq!(eb.readable_data_key, "app_order:paid");
        assert_eq!(sb.or_group_id, eb.or_group_id, "one OR group");
        assert_ne!(sb.or_group_id, pb.or_group_id);
        assert!(uuid::Uuid::parse_str(&sb.or_group_id).is_ok());
        assert_eq!(
            (sb.action, pb.action),
            (v1::Action::Queue as i32, v1::Action::Skip as i32)
        );
        assert_eq!(pb.readable_data_key, "parent:check");
        assert!(task_conditions("wf", "t", &[], &ns).is_none());
    }

    #[test]
    fn durable_waits_use_create_and_fresh_groups_and_results_say_what_fired() {
        let c = durable_conditions(
            &[any_of([
                Condition::sleep(Duration::from_secs(5)),
                Condition::event("wake")
                    .key("woken")
                    .lookback("tenant-a", Duration::from_secs(60))
                    .into(),
            ])],
            &ns,
            Some(std::time::UNIX_EPOCH + Duration::from_secs(1_000)),
        );
        let e = &c.user_event_conditions[0];
        assert_eq!(e.event_scope.as_deref(), Some("tenant-a"));
        assert_eq!(
            e.consider_events_since.as_ref().map(|t| t.seconds),
            Some(940),
            "the lookback counts back from the durable clock's instant"
        );
        assert_eq!(
            e.base.as_ref().map(|b| b.action),
            Some(v1::Action::Create as i32)
        );
        assert_eq!(
            e.base.as_ref().map(|b| b.readable_data_key.as_str()),
            Some("woken")
        );
        let r = WaitResult::from_payload(&json!({"CREATE": {"woken": [{"n": 1}]}}));
        assert!(r.fired("woken") && !r.fired("sleep:5s"));
        assert_eq!(r.data("woken"), Some(&json!({"n": 1})));
    }
}
