//! DAG conditions (`wait_for`, `skip_if`, `cancel_if`, OR groups) and the default parent rules,
//! as the real engine's match conditions decide when a task is queued, skipped or cancelled
//! (`hatchet-engine-semantics.md` §8).
//!
//! # Invariants
//!
//! 1. Conditions sharing an `or_group_id` are OR-ed; within one match every group must hold.
//!    A task has up to two matches: the parents' (the default parent rules and the parent
//!    overrides) and its own (its sleeps and event waits, every action). SKIP and CANCEL hold
//!    when either match holds them. QUEUE needs both: the parents' match is a gate that starts
//!    the task's own match (the real engine's CREATE_MATCH), so a parent condition never
//!    satisfies a group of sleeps or events, even with their `or_group_id`. A match without
//!    QUEUE groups holds QUEUE (a root task has no gate). An action with no groups in either
//!    match never fires. When several actions hold at once the precedence is
//!    SKIP > CANCEL > QUEUE.
//! 2. Default rules per parent: QUEUE when it completed (one group per parent, so all are
//!    needed), SKIP when it completed with `{"skipped": true}` (one group per parent: skipped
//!    only if every parent was), CANCEL when it failed or was cancelled (one shared group: any
//!    parent). A parent override with QUEUE replaces that parent's QUEUE rule; any SKIP
//!    override drops the automatic skip rules; CANCEL overrides join the shared cancel group.
//! 3. Sleeps and event waits of a task with parents start once the parents' QUEUE groups
//!    hold (every parent completed, or its QUEUE override held); a root task's start with
//!    the run.
//! 4. A matcher decides once: after an action fired, later hits change nothing.
//! 5. An event condition matches an event by its key exactly, as the real engine matches a
//!    condition's event key (v0.104.9 `m.event_key = i.event_key`): a `*` in it is no
//!    wildcard (only a workflow's event triggers take wildcards).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;
use tonic::Status as GrpcStatus;

use crate::dag::expr::condition_holds;
use hatchet_runtime::protocol::v1;

/// What a satisfied action does to the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Act {
    Queue,
    Cancel,
    Skip,
}

/// What satisfies one condition.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Sleep {
        for_: Duration,
        text: String,
    },
    Event {
        key: String,
        scope: Option<String>,
    },
    /// A parent's completion with a true expression (`output` is the parent's output).
    ParentCompleted(String),
    /// A parent completing with `{"skipped": true}`.
    ParentSkipped(String),
    /// A parent failing or being cancelled.
    ParentFailed(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Cond {
    act: Act,
    /// Which match it belongs to: the parents' (`false`: default rules and overrides) or the
    /// task's own sleeps and events (`true`). SKIP and CANCEL hold when every group of either
    /// match holds, so a `skip_if` event does not wait for the automatic skip rules; QUEUE
    /// needs both matches (invariant 1).
    user: bool,
    group: String,
    key: String,
    expression: String,
    kind: Kind,
}

/// One task's conditions and what has been satisfied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Matcher {
    conds: Vec<Cond>,
    /// Satisfied conditions: index → data (event payload, sleep duration, parent output).
    hits: BTreeMap<usize, Value>,
    /// When sleeps and event waits started (invariant 3); events count from `after_seq`.
    armed: Option<(Instant, u64)>,
    decided: bool,
}

/// The task's conditions as registered (`CreateTaskOpts.conditions`), checked.
pub(crate) fn validate(c: &v1::TaskConditions) -> Result<(), GrpcStatus> {
    let bases = c
        .sleep_conditions
        .iter()
        .map(|s| s.base.as_ref())
        .chain(c.user_event_conditions.iter().map(|e| e.base.as_ref()))
        .chain(c.parent_override_conditions.iter().map(|p| p.base.as_ref()));
    for b in bases {
        let b = b.cloned().unwrap_or_default();
        if b.action == v1::Action::Create as i32 {
            return Err(GrpcStatus::invalid_argument(
                "task conditions take the actions QUEUE, CANCEL or SKIP, not CREATE",
            ));
        }
        if !b.or_group_id.is_empty() && uuid::Uuid::parse_str(&b.or_group_id).is_err() {
            return Err(GrpcStatus::invalid_argument("or_group_id must be a UUID"));
        }
    }
    for s in &c.sleep_conditions {
        if crate::parse::parse_duration(&s.sleep_for).is_none() {
            return Err(GrpcStatus::invalid_argument(format!(
                "sleep_for {:?} is not a duration",
                s.sleep_for
            )));
        }
    }
    Ok(())
}

fn act_of(action: i32) -> Act {
    match v1::Action::try_from(action) {
        Ok(v1::Action::Skip) => Act::Skip,
        Ok(v1::Action::Cancel) => Act::Cancel,
        _ => Act::Queue,
    }
}

fn group_of(base: &v1::BaseMatchCondition) -> String {
    if base.or_group_id.is_empty() {
        crate::parse::new_id()
    } else {
        base.or_group_id.clone()
    }
}

const CANCEL_GROUP: &str = "parents-failed";

/// The output of a skipped task.
pub(crate) const SKIPPED: &str = r#"{"skipped":true}"#;

impl Matcher {
    /// The matcher of a task with `parents` and `conditions`; `None` when neither exists (the
    /// task is queued at once).
    pub(crate) fn new(
        parents: &[String],
        conditions: Option<&v1::TaskConditions>,
    ) -> Option<Matcher> {
        let empty = v1::TaskConditions::default();
        let c = conditions.unwrap_or(&empty);
        let has_user = !(c.sleep_conditions.is_empty()
            && c.user_event_conditions.is_empty()
            && c.parent_override_conditions.is_empty());
        if parents.is_empty() && !has_user {
            return None;
        }
        let mut conds = Vec::new();
        let overrides: Vec<(Act, &v1::ParentOverrideMatchCondition)> = c
            .parent_override_conditions
            .iter()
            .map(|p| (act_of(p.base.as_ref().map_or(0, |b| b.action)), p))
            .collect();
        let skip_overridden = overrides.iter().any(|(a, _)| *a == Act::Skip);
        for p in parents {
            let queue_override = overrides
                .iter()
                .any(|(a, o)| *a == Act::Queue && &o.parent_readable_id == p);
            if !queue_override {
                conds.push(Cond {
                    act: Act::Queue,
                    user: false,
                    group: format!("queue:{p}"),
                    key: p.clone(),
                    expression: String::new(),
                    kind: Kind::ParentCompleted(p.clone()),
                });
            }
            if !skip_overridden {
                conds.push(Cond {
                    act: Act::Skip,
                    user: false,
                    group: format!("skip:{p}"),
                    key: p.clone(),
                    expression: String::new(),
                    kind: Kind::ParentSkipped(p.clone()),
                });
            }
            conds.push(Cond {
                act: Act::Cancel,
                user: false,
                group: CANCEL_GROUP.into(),
                key: p.clone(),
                expression: String::new(),
                kind: Kind::ParentFailed(p.clone()),
            });
        }
        for (act, o) in overrides {
            let base = o.base.clone().unwrap_or_default();
            conds.push(Cond {
                act,
                // Overrides belong to the parents' match: a cancel override joins the
                // parents' cancel group, a QUEUE override stands in for its parent's rule.
                user: false,
                group: if act == Act::Cancel {
                    CANCEL_GROUP.into()
                } else {
                    group_of(&base)
                },
                key: base.readable_data_key.clone(),
                expression: base.expression.clone(),
                kind: Kind::ParentCompleted(o.parent_readable_id.clone()),
            });
        }
        for s in &c.sleep_conditions {
            let base = s.base.clone().unwrap_or_default();
            let act = act_of(base.action);
            conds.push(Cond {
                act,
                user: true,
                group: group_of(&base),
                key: base.readable_data_key.clone(),
                expression: String::new(),
                kind: Kind::Sleep {
                    for_: crate::parse::parse_duration(&s.sleep_for).unwrap_or_default(),
                    text: s.sleep_for.clone(),
                },
            });
        }
        for e in &c.user_event_conditions {
            let base = e.base.clone().unwrap_or_default();
            let act = act_of(base.action);
            conds.push(Cond {
                act,
                user: true,
                group: group_of(&base),
                key: base.readable_data_key.clone(),
                expression: base.expression.clone(),
                kind: Kind::Event {
                    key: e.user_event_key.clone(),
                    scope: e.event_scope.clone(),
                },
            });
        }
        Some(Matcher {
            conds,
            hits: BTreeMap::new(),
            armed: None,
            decided: false,
        })
    }

    /// Starts the sleeps and event waits (invariant 3); returns the sleeps' deadlines.
    pub(crate) fn arm(&mut self, now: Instant, event_seq: u64) -> Vec<Instant> {
        if self.armed.is_some() {
            return Vec::new();
        }
        self.armed = Some((now, event_seq));
        self.conds
            .iter()
            .filter_map(|c| match &c.kind {
                Kind::Sleep { for_, .. } => Some(now + *for_),
                _ => None,
            })
            .collect()
    }

    /// Whether it waits for events.
    pub(crate) fn wants_events(&self) -> bool {
        self.conds
            .iter()
            .any(|c| matches!(c.kind, Kind::Event { .. }))
    }

    /// A parent finished: `completed` (with its output) or failed/cancelled.
    pub(crate) fn parent_finished(&mut self, parent: &str, completed: bool, output: &Value) {
        let skipped = completed && output.get("skipped") == Some(&Value::Bool(true));
        let vars = vars(&json!({}), output);
        for (i, c) in self.conds.iter().enumerate() {
            let hit = match &c.kind {
                Kind::ParentCompleted(p) if p == parent => {
                    completed && condition_holds(&c.expression, &vars)
                }
                Kind::ParentSkipped(p) if p == parent => skipped,
                Kind::ParentFailed(p) if p == parent => !completed,
                _ => false,
            };
            if hit {
                self.hits.insert(i, output.clone());
            }
        }
    }

    /// An event was pushed: it satisfies the conditions armed before it whose key it has
    /// exactly (invariant 5), whose scope it has when they have one, and whose expression
    /// holds.
    pub(crate) fn event(&mut self, key: &str, scope: Option<&str>, seq: u64, payload: &Value) {
        let Some((_, since)) = self.armed else {
            return;
        };
        if seq <= since {
            return;
        }
        let vars = vars(payload, &json!({}));
        for (i, c) in self.conds.iter().enumerate() {
            if let Kind::Event { key: k, scope: s } = &c.kind
                && k == key
                && s.as_deref().is_none_or(|s| Some(s) == scope)
                && condition_holds(&c.expression, &vars)
            {
                self.hits.insert(i, payload.clone());
            }
        }
    }

    /// Marks the sleeps that are due.
    pub(crate) fn tick(&mut self, now: Instant) {
        let Some((start, _)) = self.armed else {
            return;
        };
        for (i, c) in self.conds.iter().enumerate() {
            if let Kind::Sleep { for_, text } = &c.kind
                && start + *for_ <= now
            {
                self.hits.insert(i, json!({ "sleep_duration": text }));
            }
        }
    }

    /// Whether the parents' QUEUE groups hold (the moment to arm a task with parents,
    /// invariant 3).
    pub(crate) fn parents_completed(&self) -> bool {
        self.groups_hold(Act::Queue, false) != Some(false)
    }

    /// Whether every group of `act` in one match (`user`: the task's own, else the parents')
    /// holds; `None` when that match has no group of `act`.
    fn groups_hold(&self, act: Act, user: bool) -> Option<bool> {
        let mut groups: BTreeMap<&str, bool> = BTreeMap::new();
        let mine = self.conds.iter().enumerate();
        for (i, c) in mine.filter(|(_, c)| c.act == act && c.user == user) {
            *groups.entry(c.group.as_str()).or_default() |= self.hits.contains_key(&i);
        }
        (!groups.is_empty()).then(|| groups.values().all(|ok| *ok))
    }

    /// The action that holds now, by precedence (invariants 1 and 4); marks it decided.
    pub(crate) fn decide(&mut self) -> Option<Act> {
        if self.decided {
            return None;
        }
        let holds = |act: Act| {
            let (parents, own) = (self.groups_hold(act, false), self.groups_hold(act, true));
            match act {
                // The parents' match gates the task's own (invariant 1).
                Act::Queue => {
                    (parents.is_some() || own.is_some())
                        && parents != Some(false)
                        && own != Some(false)
                }
                Act::Skip | Act::Cancel => parents == Some(true) || own == Some(true),
            }
        };
        let act = [Act::Skip, Act::Cancel, Act::Queue]
            .into_iter()
            .find(|a| holds(*a))?;
        self.decided = true;
        Some(act)
    }

    /// `triggers` data for the task: each satisfied sleep or event condition's data by its key.
    pub(crate) fn trigger_data(&self) -> Map<String, Value> {
        self.hits
            .iter()
            .filter(|(i, _)| {
                matches!(
                    self.conds[**i].kind,
                    Kind::Sleep { .. } | Kind::Event { .. }
                )
            })
            .map(|(i, v)| (self.conds[*i].key.clone(), v.clone()))
            .collect()
    }
}

fn vars(input: &Value, output: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("input".into(), input.clone());
    m.insert("output".into(), output.clone());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(
        action: v1::Action,
        key: &str,
        group: &str,
        expr: &str,
    ) -> Option<v1::BaseMatchCondition> {
        Some(v1::BaseMatchCondition {
            readable_data_key: key.into(),
            action: action as i32,
            or_group_id: group.into(),
            expression: expr.into(),
        })
    }

    fn parents(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_rules_queue_after_all_parents_skip_if_all_skipped_cancel_if_any_failed() {
        let mut m = Matcher::new(&parents(&["a", "b"]), None).expect("has parents");
        m.parent_finished("a", true, &json!({"x": 1}));
        assert_eq!(m.decide(), None, "b still running");
        m.parent_finished("b", true, &json!({"skipped": true}));
        assert_eq!(
            m.decide(),
            Some(Act::Queue),
            "one skipped parent is not enough to skip"
        );
        assert_eq!(m.decide(), None, "decides once");

        let mut m = Matcher::new(&parents(&["a", "b"]), None).expect("m");
        m.parent_finished("a", true, &json!({"skipped": true}));
        m.parent_finished("b", true, &json!({"skipped": true}));
        assert_eq!(m.decide(), Some(Act::Skip), "every parent skipped");

        let mut m = Matcher::new(&parents(&["a", "b"]), None).expect("m");
        m.parent_finished("a", false, &json!({}));
        assert_eq!(m.decide(), Some(Act::Cancel), "any parent failing cancels");
        assert!(
            Matcher::new(&[], None).is_none(),
            "a plain root task has no matcher"
        );
    }

    #[test]
    fn or_groups_and_sleeps_and_events_with_expressions() {
        let g = uuid::Uuid::new_v4().to_string();
        let c = v1::TaskConditions {
            sleep_conditions: vec![v1::SleepMatchCondition {
                base: base(v1::Action::Queue, "sleep:5s", &g, ""),
                sleep_for: "5s".into(),
            }],
            user_event_conditions: vec![v1::UserEventMatchCondition {
                base: base(v1::Action::Queue, "go", &g, "input.ok == true"),
                user_event_key: "go".into(),
                event_scope: None,
                consider_events_since: None,
            }],
            parent_override_conditions: vec![],
        };
        let now = Instant::now();
        let mut m = Matcher::new(&[], Some(&c)).expect("conditions");
        m.event("go", None, 5, &json!({"ok": true}));
        assert_eq!(
            m.decide(),
            None,
            "not armed yet: events before the wait do not count"
        );
        assert_eq!(m.arm(now, 5).len(), 1);
        m.event("go", None, 6, &json!({"ok": false}));
        m.tick(now + Duration::from_secs(4));
        assert_eq!(m.decide(), None, "expression false, sleep not due");
        m.event("go", None, 7, &json!({"ok": true}));
        assert_eq!(
            m.decide(),
            Some(Act::Queue),
            "either member of the OR group"
        );
        assert_eq!(
            m.trigger_data(),
            Map::from_iter([("go".to_string(), json!({"ok": true}))])
        );
    }

    #[test]
    fn an_event_condition_matches_its_key_exactly_and_a_star_in_it_is_no_wildcard() {
        let c = v1::TaskConditions {
            user_event_conditions: vec![v1::UserEventMatchCondition {
                base: base(v1::Action::Queue, "order", "", ""),
                user_event_key: "order:*".into(),
                event_scope: None,
                consider_events_since: None,
            }],
            ..Default::default()
        };
        let mut m = Matcher::new(&[], Some(&c)).expect("conditions");
        m.arm(Instant::now(), 0);
        m.event("order:created", None, 1, &json!({"n": 1}));
        assert_eq!(m.decide(), None, "a trigger's wildcard, not a condition's");
        m.event("order:*", None, 2, &json!({"n": 2}));
        assert_eq!(m.decide(), Some(Act::Queue), "the key itself");
        assert_eq!(
            m.trigger_data(),
            Map::from_iter([("order".to_string(), json!({"n": 2}))])
        );
    }

    #[test]
    fn overrides_replace_queue_drop_auto_skip_and_join_cancel() {
        let c = v1::TaskConditions {
            parent_override_conditions: vec![
                v1::ParentOverrideMatchCondition {
                    base: base(v1::Action::Skip, "s", "", "output.n > 5"),
                    parent_readable_id: "a".into(),
                },
                v1::ParentOverrideMatchCondition {
                    base: base(v1::Action::Cancel, "c", "", "output.n < 0"),
                    parent_readable_id: "a".into(),
                },
            ],
            ..Default::default()
        };
        let mut m = Matcher::new(&parents(&["a"]), Some(&c)).expect("m");
        m.parent_finished("a", true, &json!({"n": 9}));
        assert_eq!(m.decide(), Some(Act::Skip), "skip beats queue");
        let mut m = Matcher::new(&parents(&["a"]), Some(&c)).expect("m");
        m.parent_finished("a", true, &json!({"n": -1}));
        assert_eq!(m.decide(), Some(Act::Cancel));
        let mut m = Matcher::new(&parents(&["a"]), Some(&c)).expect("m");
        m.parent_finished("a", true, &json!({"skipped": true, "n": 1}));
        assert_eq!(
            m.decide(),
            Some(Act::Queue),
            "the automatic skip rule is gone"
        );
    }

    #[test]
    fn a_skip_if_event_does_not_wait_for_the_automatic_skip_rules() {
        let c = v1::TaskConditions {
            user_event_conditions: vec![v1::UserEventMatchCondition {
                base: base(v1::Action::Skip, "skip", "", ""),
                user_event_key: "skip".into(),
                event_scope: None,
                consider_events_since: None,
            }],
            sleep_conditions: vec![v1::SleepMatchCondition {
                base: base(v1::Action::Queue, "sleep:60s", "", ""),
                sleep_for: "60s".into(),
            }],
            ..Default::default()
        };
        let mut m = Matcher::new(&parents(&["a"]), Some(&c)).expect("m");
        m.parent_finished("a", true, &json!({"n": 1}));
        let now = Instant::now();
        m.arm(now, 0);
        assert_eq!(m.decide(), None, "the sleep is not due");
        m.event("skip", None, 1, &json!({}));
        assert_eq!(
            m.decide(),
            Some(Act::Skip),
            "the parent was not skipped, the event skips"
        );
    }

    #[test]
    fn a_parent_condition_gates_the_sleeps_of_its_or_group_instead_of_joining_them() {
        // waitFor [Or(parent a with output.n > 5, sleep 30s), sleep 1s]: the real engine
        // queues at 30 s, not at 1 s (invariant 1).
        let g = uuid::Uuid::new_v4().to_string();
        let c = v1::TaskConditions {
            parent_override_conditions: vec![v1::ParentOverrideMatchCondition {
                base: base(v1::Action::Queue, "a", &g, "output.n > 5"),
                parent_readable_id: "a".into(),
            }],
            sleep_conditions: vec![
                v1::SleepMatchCondition {
                    base: base(v1::Action::Queue, "sleep-30s", &g, ""),
                    sleep_for: "30s".into(),
                },
                v1::SleepMatchCondition {
                    base: base(v1::Action::Queue, "sleep-1s", "", ""),
                    sleep_for: "1s".into(),
                },
            ],
            ..Default::default()
        };
        let mut m = Matcher::new(&parents(&["a"]), Some(&c)).expect("m");
        m.parent_finished("a", true, &json!({"n": 9}));
        assert!(
            m.parents_completed(),
            "the override holds: the sleeps start"
        );
        let now = Instant::now();
        assert_eq!(m.arm(now, 0).len(), 2);
        m.tick(now + Duration::from_secs(2));
        assert_eq!(
            m.decide(),
            None,
            "the parent does not stand in for the 30 s sleep"
        );
        m.tick(now + Duration::from_secs(30));
        assert_eq!(m.decide(), Some(Act::Queue));

        let mut m = Matcher::new(&parents(&["a"]), Some(&c)).expect("m");
        m.parent_finished("a", true, &json!({"n": 1}));
        assert!(
            !m.parents_completed(),
            "a false override keeps the gate shut: the sleeps never start"
        );
    }

    #[test]
    fn registration_refuses_create_and_bad_groups() {
        let bad = |b| v1::TaskConditions {
            sleep_conditions: vec![v1::SleepMatchCondition {
                base: b,
                sleep_for: "1s".into(),
            }],
            ..Default::default()
        };
        assert!(validate(&bad(base(v1::Action::Create, "k", "", ""))).is_err());
        assert!(validate(&bad(base(v1::Action::Queue, "k", "not-a-uuid", ""))).is_err());
        assert!(validate(&bad(base(v1::Action::Queue, "k", "", ""))).is_ok());
    }
}
