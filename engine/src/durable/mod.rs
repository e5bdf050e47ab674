//! Durable execution in the development engine: the `DurableTask` stream (event log of nodes per
//! task, acks, completions, eviction) and the legacy `RegisterDurableEvent` path.
//!
//! # Invariants
//!
//! 1. Nodes are numbered 1..n per invocation on branch 1. Replaying operation k of a later
//!    invocation finds node k: the same operation reuses it (and its result), a different one is
//!    `NONDETERMINISM`.
//! 2. A request with an invocation count other than the task's current one gets `server_evict`.
//! 3. Completions go to the stream that last sent an operation for the task; a lost completion
//!    is re-sent when the worker lists the entry in `worker_status`.
//! 4. Branches (`BranchDurableTask`, the SDKs' durable reset): a branch from branch `b` at node
//!    `n` gets the next branch id; on it node ids below `n` read `b`'s path (their results
//!    replay), `n` and later are new entries, except where a fork further back on the path
//!    starts later than `n` (a node belongs to the path's branch with the largest first node
//!    at or below it, as the real engine resolves it). Nothing is deleted. The task runs again
//!    (a new attempt, a new invocation numbering its nodes from 1).
//! 5. A durable spawn is resolved by its slot (child key, else index), not by its place in the
//!    request order: a replay finds its child where it was recorded; a slot recorded for another
//!    workflow (or, without a key, another input) is `NONDETERMINISM`.
//! 6. Completions of waits and children are released in the order the entries were satisfied
//!    (the real engine's ordered release, v0.104.9): one is sent only once every entry satisfied
//!    before it has been asked for by the current invocation. So a replay whose concurrent
//!    branches raced sees them finish in the order they first did, and spawns its later
//!    children at the same indexes. (The real engine evicts a task whose release stalls for a
//!    minute; ours holds it.)
//! 7. An event condition matches an event by its key exactly, as the real engine matches a
//!    condition's event key (v0.104.9 `m.event_key = i.event_key`; a `*` is a wildcard only in
//!    a workflow's event triggers), by its scope when it has one, and by its expression. A
//!    scoped condition with `consider_events_since` looks back at the kept events seen at or
//!    after that time, newest first, so the newest matching event satisfies it (the real
//!    engine's look-back reads `ORDER BY seen_at DESC`); other conditions match only events
//!    pushed after the wait. The real engine looks back as far as its event retention; ours as
//!    far as the kept events reach (`store/events.rs`, `EVENTS_KEPT`, a bound for memory).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::SystemTime;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::Status as GrpcStatus;

use crate::parse::parse_duration;
use crate::store::model::StoredEvent;
use hatchet_runtime::protocol::v1::{self, durable_task_response::Message as Resp};

mod log;

type Tx = mpsc::UnboundedSender<Result<v1::DurableTaskResponse, GrpcStatus>>;
type LegacyTx = mpsc::UnboundedSender<Result<v1::DurableEvent, GrpcStatus>>;

/// One condition of a wait.
#[derive(Debug, Clone)]
enum Cond {
    Sleep {
        until: Instant,
        readable: String,
        sleep_for: String,
    },
    Event {
        key: String,
        readable: String,
        after_seq: u64,
        since: Option<SystemTime>,
        /// Only events pushed with this scope (any scope when unset).
        scope: Option<String>,
        /// A CEL expression over the event payload (`input`); empty is true.
        expression: String,
    },
}

/// Conditions grouped by `or_group_id`: OR inside a group, AND across groups.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conditions {
    groups: BTreeMap<String, Vec<Cond>>,
    /// Satisfied items per group: (readable key, item).
    hits: BTreeMap<String, (String, Value)>,
}

impl Conditions {
    fn from_proto(
        c: &v1::DurableEventListenerConditions,
        now: Instant,
        seq: u64,
    ) -> Result<Self, GrpcStatus> {
        let mut out = Conditions::default();
        for s in &c.sleep_conditions {
            let base = s.base.clone().unwrap_or_default();
            let d = parse_duration(&s.sleep_for).ok_or_else(|| {
                GrpcStatus::invalid_argument(format!(
                    "sleep_for {:?} is not a duration",
                    s.sleep_for
                ))
            })?;
            let group = if base.or_group_id.is_empty() {
                crate::parse::new_id()
            } else {
                base.or_group_id
            };
            out.groups.entry(group).or_default().push(Cond::Sleep {
                until: now + d,
                readable: base.readable_data_key,
                sleep_for: s.sleep_for.clone(),
            });
        }
        for e in &c.user_event_conditions {
            let base = e.base.clone().unwrap_or_default();
            let group = if base.or_group_id.is_empty() {
                crate::parse::new_id()
            } else {
                base.or_group_id
            };
            let since = e.consider_events_since.as_ref().map(|t| {
                SystemTime::UNIX_EPOCH
                    + std::time::Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32)
            });
            out.groups.entry(group).or_default().push(Cond::Event {
                key: e.user_event_key.clone(),
                readable: base.readable_data_key,
                after_seq: seq,
                // The look-back applies only to a scoped condition (the real engine's rule).
                since: since.filter(|_| e.event_scope.is_some()),
                scope: e.event_scope.clone(),
                expression: base.expression,
            });
        }
        Ok(out)
    }

    /// The earliest sleep of a group not yet satisfied.
    fn next_sleep(&self) -> Option<Instant> {
        self.groups
            .iter()
            .filter(|(g, _)| !self.hits.contains_key(*g))
            .flat_map(|(_, conds)| conds)
            .filter_map(|c| match c {
                Cond::Sleep { until, .. } => Some(*until),
                Cond::Event { .. } => None,
            })
            .min()
    }

    fn satisfied(&self) -> bool {
        !self.groups.is_empty() && self.groups.keys().all(|g| self.hits.contains_key(g))
    }

    /// Marks sleeps that are due; returns whether anything changed.
    fn tick(&mut self, now: Instant) -> bool {
        let mut changed = false;
        for (g, conds) in &self.groups {
            if self.hits.contains_key(g) {
                continue;
            }
            for c in conds {
                if let Cond::Sleep {
                    until,
                    readable,
                    sleep_for,
                } = c
                    && *until <= now
                {
                    self.hits.insert(
                        g.clone(),
                        (
                            readable.clone(),
                            serde_json::json!({"sleep_duration": sleep_for}),
                        ),
                    );
                    changed = true;
                    break;
                }
            }
        }
        changed
    }

    /// Offers event `ev` to the groups not yet satisfied: the first of a group's conditions it
    /// matches (invariant 7) satisfies the group with its payload. Returns whether any did.
    fn event(&mut self, ev: &StoredEvent) -> bool {
        let mut changed = false;
        for (g, conds) in &self.groups {
            if self.hits.contains_key(g) {
                continue;
            }
            for c in conds {
                if let Cond::Event {
                    key,
                    readable,
                    after_seq,
                    since,
                    scope,
                    expression,
                } = c
                {
                    let in_window = match since {
                        Some(t) => ev.at >= *t,
                        None => ev.seq > *after_seq,
                    };
                    let in_scope = scope.is_none() || *scope == ev.scope;
                    // The key exactly, as the real engine matches a condition's event key
                    // (`m.event_key = i.event_key`); `*` is a trigger's wildcard only.
                    if !(in_window && in_scope && *key == ev.key) {
                        continue;
                    }
                    let mut vars = serde_json::Map::new();
                    vars.insert("input".into(), ev.payload.clone());
                    vars.insert("output".into(), serde_json::json!({}));
                    if crate::dag::expr::condition_holds(expression, &vars) {
                        self.hits
                            .insert(g.clone(), (readable.clone(), ev.payload.clone()));
                        changed = true;
                        break;
                    }
                }
            }
        }
        changed
    }

    fn payload(&self) -> Vec<u8> {
        let mut create = serde_json::Map::new();
        for (readable, item) in self.hits.values() {
            let list = create
                .entry(readable.clone())
                .or_insert_with(|| Value::Array(vec![]));
            if let Value::Array(a) = list {
                a.push(item.clone());
            }
        }
        serde_json::json!({ "CREATE": create })
            .to_string()
            .into_bytes()
    }
}

#[derive(Debug, Clone)]
enum NodeKind {
    Wait(Conditions),
    Memo,
    Run(String),
}

#[derive(Debug, Clone)]
struct Node {
    kind: NodeKind,
    key: String,
    result: Option<(Vec<u8>, bool, Option<String>)>,
    /// When a wait or child entry was satisfied, in the task's order (the real engine's
    /// `satisfied_order`): its completion is released only after every entry satisfied
    /// before it (invariant 6).
    order: Option<u64>,
}

#[derive(Debug, Default)]
struct TaskLog {
    invocation: i32,
    next_node: i64,
    /// The last satisfied order given.
    next_order: u64,
    /// Entries the current invocation has asked for (its requests resolved to them).
    asked: HashSet<i64>,
    /// Satisfied entries whose completion the current invocation has not been sent yet.
    held: BTreeSet<i64>,
    /// Satisfied entries whose completion the current invocation has been sent.
    sent: HashSet<i64>,
    nodes: Nodes,
}

/// A task's log entries by branch and node, and its branches (invariant 4). Read and written
/// by node id: the entry a node id means is the one on the branch that owns it on the path
/// from the latest branch back to branch 1.
#[derive(Debug, Default)]
struct Nodes {
    entries: BTreeMap<(i64, i64), Node>,
    /// The latest branch (0 until the first: branch 1).
    latest: i64,
    /// Branch points: (first node, parent branch, branch).
    points: Vec<(i64, i64, i64)>,
}

impl Nodes {
    /// The path from the latest branch back to branch 1: (first node, branch), newest first.
    fn path(&self) -> Vec<(i64, i64)> {
        let mut out = Vec::new();
        let mut b = self.latest.max(1);
        while let Some((first, parent, _)) = self.points.iter().find(|p| p.2 == b) {
            out.push((*first, b));
            if *parent == b {
                break;
            }
            b = *parent;
        }
        out.push((0, b));
        out
    }

    /// The branch that owns `node` on `path`, as the real engine resolves it: of the branches
    /// on the path whose first node is at most `node`, the one whose first node is largest (the
    /// newest on a tie). So a fork at node 1 of a branch that itself forked at node 2 keeps that
    /// branch's node 2 and later: only node 1 is new.
    fn owner(path: &[(i64, i64)], node: i64) -> i64 {
        path.iter()
            .filter(|(first, _)| *first <= node)
            .fold(None::<(i64, i64)>, |best, &(first, b)| match best {
                Some((f, _)) if f >= first => best,
                _ => Some((first, b)),
            })
            .map_or(BRANCH, |(_, b)| b)
    }

    /// The branch that owns `node` now.
    fn branch_of(&self, node: i64) -> i64 {
        Self::owner(&self.path(), node)
    }

    fn get(&self, node: &i64) -> Option<&Node> {
        self.entries.get(&(self.branch_of(*node), *node))
    }

    fn get_mut(&mut self, node: &i64) -> Option<&mut Node> {
        let b = self.branch_of(*node);
        self.entries.get_mut(&(b, *node))
    }

    fn insert(&mut self, node: i64, n: Node) {
        let b = self.branch_of(node);
        self.entries.insert((b, node), n);
    }

    /// The satisfied orders of the entries on the current path, by node id.
    fn orders(&self) -> Vec<(i64, u64)> {
        let path = self.path();
        self.entries
            .iter()
            .filter(|((b, n), _)| Self::owner(&path, *n) == *b)
            .filter_map(|((_, n), v)| v.order.map(|o| (*n, o)))
            .collect()
    }

    /// The node on the current path that recorded child run `run`.
    fn node_of_run(&self, run: &str) -> Option<i64> {
        let path = self.path();
        self.entries
            .iter()
            .filter(|((b, n), _)| Self::owner(&path, *n) == *b)
            .find(|(_, v)| matches!(&v.kind, NodeKind::Run(id) if id == run))
            .map(|((_, n), _)| *n)
    }

    /// The entries on the current path.
    fn values(&self) -> impl Iterator<Item = &Node> {
        let path = self.path();
        self.entries
            .iter()
            .filter(move |((b, n), _)| Self::owner(&path, *n) == *b)
            .map(|(_, v)| v)
    }

    /// The entries on the current path, by node id, to change.
    fn iter_mut(&mut self) -> impl Iterator<Item = (&i64, &mut Node)> {
        let path = self.path();
        self.entries
            .iter_mut()
            .filter(move |((b, n), _)| Self::owner(&path, *n) == *b)
            .map(|((_, n), v)| (n, v))
    }

    /// A new branch from `from_branch` at `node` (invariant 4): entries before `node` keep
    /// their place on the path, `node` and later start empty. Answers the new branch's id.
    fn branch(&mut self, node: i64, from_branch: i64) -> i64 {
        let new = self.latest.max(1) + 1;
        self.latest = new;
        self.points.push((node, from_branch, new));
        new
    }
}

impl std::ops::Index<&i64> for Nodes {
    type Output = Node;

    fn index(&self, node: &i64) -> &Node {
        self.get(node).expect("a node on the current path")
    }
}

/// The durable part of the engine state.
#[derive(Debug, Default)]
pub(crate) struct DurableState {
    /// Open DurableTask streams.
    pub streams: HashMap<u64, Tx>,
    routes: HashMap<String, u64>,
    logs: HashMap<String, TaskLog>,
    legacy: HashMap<(String, String), Conditions>,
    legacy_listeners: HashMap<u64, (LegacyTx, HashSet<(String, String)>)>,
}

/// A wait's idempotency key: its conditions' kinds, readable keys, expressions, sleep durations
/// and event keys (protocol §4.9), in a stable order. The `or_group_id`s are left out: SDKs
/// make them fresh on every call, so a replay of the same wait must still match.
fn wait_key(c: &v1::DurableEventListenerConditions) -> String {
    let base = |b: &Option<v1::BaseMatchCondition>| {
        b.as_ref()
            .map(|b| format!("{}|{}|{}", b.readable_data_key, b.expression, b.action))
            .unwrap_or_default()
    };
    let mut parts: Vec<String> = c
        .sleep_conditions
        .iter()
        .map(|s| format!("sleep|{}|{}", s.sleep_for, base(&s.base)))
        .chain(
            c.user_event_conditions
                .iter()
                .map(|e| format!("event|{}|{}", e.user_event_key, base(&e.base))),
        )
        .collect();
    parts.sort();
    format!("wait:{}", parts.join(";"))
}

const BRANCH: i64 = 1;

fn eref(task: &str, invocation: i32, node: i64, branch: i64) -> v1::DurableEventLogEntryRef {
    v1::DurableEventLogEntryRef {
        durable_task_external_id: task.to_string(),
        invocation_count: invocation,
        branch_id: branch,
        node_id: node,
    }
}

fn resp(m: Resp) -> Result<v1::DurableTaskResponse, GrpcStatus> {
    Ok(v1::DurableTaskResponse { message: Some(m) })
}
