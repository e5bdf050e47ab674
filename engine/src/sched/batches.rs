//! Batch tasks (`CreateTaskOpts.batch`), as the real engine runs them: a batch task's queued
//! attempts wait in a buffer per step and batch key, and a worker gets them together in one
//! `START_BATCH` assignment, whose payload maps each member's task id to its run and input.
//!
//! # Invariants
//!
//! 1. A buffer is flushed when its members' payloads pass [`MAX_BUFFERED_PAYLOAD_BYTES`]
//!    (`memory_size_reached`: the members before the one that passed it; one alone when the
//!    first does; checked first, and again until none passes), when it holds `max_size` members
//!    (`batch_size_reached`, as often as it fills), or when its deadline passes
//!    (`interval_elapsed`): `max_interval` after the first member arrived in an empty buffer,
//!    and again after every flush. A member's size is its stored input's, as the real engine
//!    measures it ([`payload_bytes`]), fixed when it is buffered.
//! 2. A batch takes one `default` slot of its worker for all its members, held until its last
//!    member has finished; at most `group_max_runs` batches of one step and key run at once.
//! 3. A member is in at most one place: a buffer (queued, not in the queue) or one running
//!    batch. A member cancelled while buffered is dropped when its buffer is flushed.
//! 4. The batch key is a CEL expression over `input`, `additional_metadata`,
//!    `workflow_run_id` and `parents`; it must give a string (trimmed). A key that cannot be
//!    read fails that task alone, with the real engine's words.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::dag::expr::Expr;
use hatchet_runtime::protocol::v1;

/// How one step batches its attempts (the registration's `TaskBatchConfig`, with the real
/// engine's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BatchRule {
    /// Members per batch at most.
    pub max_size: usize,
    /// How long a buffer waits for more members.
    pub max_interval: Duration,
    /// The CEL expression of the batch key.
    pub group_key: String,
    /// Batches of one step and key running at once at most.
    pub group_max_runs: usize,
}

impl BatchRule {
    /// From the registration, checked as the real engine checks it: size 1-100000, interval
    /// 1-86400000 ms (default 1000), max runs 1-10000 (default 100), key `'default'` unless
    /// given.
    pub(crate) fn from_proto(task: &str, c: &v1::TaskBatchConfig) -> Result<BatchRule, String> {
        let bad = |what: &str| {
            format!("task {task}: batch {what}; fix the task's batch options and register again")
        };
        if !(1..=100_000).contains(&c.batch_max_size) {
            return Err(bad("max size must be between 1 and 100000"));
        }
        let interval = c.batch_max_interval_ms.unwrap_or(1_000);
        if !(1..=86_400_000).contains(&interval) {
            return Err(bad("max interval must be between 1 and 86400000 ms"));
        }
        let max_runs = c.batch_group_max_runs.unwrap_or(100);
        if !(1..=10_000).contains(&max_runs) {
            return Err(bad("group max runs must be between 1 and 10000"));
        }
        let group_key = c
            .batch_group_key
            .clone()
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| "'default'".to_string());
        Ok(BatchRule {
            max_size: c.batch_max_size as usize,
            max_interval: Duration::from_millis(interval as u64),
            group_key,
            group_max_runs: max_runs as usize,
        })
    }

    /// The batch key of an attempt (invariant 4).
    pub(crate) fn key_of(
        &self,
        input: &Value,
        meta: &Map<String, Value>,
        run_id: &str,
        parents: &Value,
    ) -> Result<String, String> {
        let failed = |why: String| {
            format!(
                "failed to parse batch group key expression ({}): {why}",
                self.group_key
            )
        };
        let mut vars = Map::new();
        vars.insert("input".into(), input.clone());
        vars.insert("additional_metadata".into(), Value::Object(meta.clone()));
        vars.insert("workflow_run_id".into(), Value::String(run_id.into()));
        vars.insert("parents".into(), parents.clone());
        let value = Expr::parse(&self.group_key)
            .and_then(|e| e.eval(&vars))
            .map_err(|e| failed(e.0))?;
        match value {
            Value::String(s) => Ok(s.trim().to_string()),
            Value::Number(n) if n.is_i64() || n.is_u64() => Err(failed(
                "expected string output for batch key, got int".into(),
            )),
            _ => Err(failed(
                "expected string output for batch key, got unknown type".into(),
            )),
        }
    }
}

/// Buffered members' payload bytes past which a buffer is flushed: the real engine's fixed
/// 4,000,000 (v0.104.9, `batch_scheduler.go`, not configurable), so a batch's message stays
/// under the 4 MiB limit.
pub(crate) const MAX_BUFFERED_PAYLOAD_BYTES: u64 = 4_000_000;

/// The bytes a member counts for [`MAX_BUFFERED_PAYLOAD_BYTES`]: the length of its stored input
/// (`{"input": …, "trigger_datas": null, "filter_payload": null}`) as PostgreSQL writes jsonb
/// as text, which is what the real engine measures (`OCTET_LENGTH(inline_content::text)`):
/// compact JSON with a space after each `:` and `,`.
pub(crate) fn payload_bytes(input: &Value) -> u64 {
    fn text_len(v: &Value) -> u64 {
        match v {
            Value::Object(m) => {
                let entries: u64 = m
                    .iter()
                    .map(|(k, v)| {
                        serde_json::to_string(k).map_or(0, |k| k.len() as u64) + 2 + text_len(v)
                    })
                    .sum();
                2 + entries + 2 * (m.len().saturating_sub(1) as u64)
            }
            Value::Array(a) => {
                let items: u64 = a.iter().map(text_len).sum();
                2 + items + 2 * (a.len().saturating_sub(1) as u64)
            }
            other => serde_json::to_string(other).map_or(0, |t| t.len() as u64),
        }
    }
    // `{"input": ` + the input + `, "filter_payload": null, "trigger_datas": null}`.
    const WRAPPER: u64 = 58;
    WRAPPER + text_len(input)
}

/// Why a batch was flushed (the real engine's words, sent in `BatchStartPayload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// The buffered payloads passed [`MAX_BUFFERED_PAYLOAD_BYTES`].
    MemorySizeReached,
    /// The buffer held `max_size` members.
    SizeReached,
    /// The buffer's deadline passed.
    IntervalElapsed,
}

impl Flush {
    /// The trigger reason as the engine sends it.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Flush::MemorySizeReached => "memory_size_reached",
            Flush::SizeReached => "batch_size_reached",
            Flush::IntervalElapsed => "interval_elapsed",
        }
    }
}

/// A due flush: the line, why, and how many members it takes at most.
pub(crate) type Due = (Line, Flush, usize);

/// One step's buffer for one key.
#[derive(Debug)]
struct Buffer {
    rule: BatchRule,
    /// Members with their payload bytes ([`payload_bytes`]).
    members: VecDeque<(String, u64)>,
    deadline: Instant,
}

impl Buffer {
    /// How many members a flush by payload size takes now, if the payloads passed the limit:
    /// those before the one that passed it, or one alone when the first did.
    fn over_size(&self) -> Option<usize> {
        let mut total = 0u64;
        for (i, (_, size)) in self.members.iter().enumerate() {
            total += size;
            if total > MAX_BUFFERED_PAYLOAD_BYTES {
                return Some(i.max(1));
            }
        }
        None
    }
}

/// A batch that was started and has members still running.
#[derive(Debug)]
struct Running {
    line: (String, String),
    worker: String,
    members: HashSet<String>,
}

/// A step (its action) and a batch key.
pub(crate) type Line = (String, String);

/// The buffers and the running batches.
#[derive(Debug, Default)]
pub(crate) struct Batches {
    buffers: HashMap<Line, Buffer>,
    running: HashMap<String, Running>,
}

impl Batches {
    /// Buffers attempt `tid` of step `action` under `key`, its payload `size` bytes
    /// ([`payload_bytes`]; invariants 1 and 3).
    pub(crate) fn buffer(
        &mut self,
        action: &str,
        key: &str,
        rule: &BatchRule,
        (tid, size): (&str, u64),
        now: Instant,
    ) {
        let buffer = self
            .buffers
            .entry((action.to_string(), key.to_string()))
            .or_insert_with(|| Buffer {
                rule: rule.clone(),
                members: VecDeque::new(),
                deadline: now + rule.max_interval,
            });
        if buffer.members.is_empty() {
            buffer.deadline = now + rule.max_interval;
        }
        if !buffer.members.iter().any(|(m, _)| m == tid) {
            buffer.members.push_back((tid.to_string(), size));
        }
    }

    /// The lines due for a flush at `now`, why, and how many members each takes at most
    /// (invariant 1).
    pub(crate) fn due(&self, now: Instant) -> Vec<Due> {
        let mut due: Vec<Due> = self
            .buffers
            .iter()
            .filter(|(_, b)| !b.members.is_empty())
            .filter_map(|(line, b)| {
                let max = b.rule.max_size;
                if let Some(n) = b.over_size() {
                    Some((line.clone(), Flush::MemorySizeReached, n))
                } else if b.members.len() >= max {
                    Some((line.clone(), Flush::SizeReached, max))
                } else if b.deadline <= now {
                    Some((line.clone(), Flush::IntervalElapsed, max))
                } else {
                    None
                }
            })
            .collect();
        due.sort_by(|a, b| a.0.cmp(&b.0));
        due
    }

    /// Whether another batch of `line` may start (invariant 2).
    pub(crate) fn has_room(&self, line: &Line) -> bool {
        let Some(b) = self.buffers.get(line) else {
            return false;
        };
        let active = self.running.values().filter(|r| &r.line == line).count();
        active < b.rule.group_max_runs
    }

    /// Takes up to `n` members of `line` that `alive` keeps (the others are dropped:
    /// invariant 3), and restarts its deadline at `now`.
    pub(crate) fn take(
        &mut self,
        line: &Line,
        (now, n): (Instant, usize),
        mut alive: impl FnMut(&str) -> bool,
    ) -> Vec<(String, u64)> {
        let Some(b) = self.buffers.get_mut(line) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        while taken.len() < n {
            let Some((tid, size)) = b.members.pop_front() else {
                break;
            };
            if alive(&tid) {
                taken.push((tid, size));
            }
        }
        b.deadline = now + b.rule.max_interval;
        taken
    }

    /// Puts members back at the front of `line` (their batch could not be sent).
    pub(crate) fn put_back(&mut self, line: &Line, members: Vec<(String, u64)>) {
        if let Some(b) = self.buffers.get_mut(line) {
            for m in members.into_iter().rev() {
                b.members.push_front(m);
            }
        }
    }

    /// Batch `id` of `line` started on `worker` with `members` (invariant 2).
    pub(crate) fn started(&mut self, id: &str, line: Line, worker: &str, members: &[String]) {
        self.running.insert(
            id.to_string(),
            Running {
                line,
                worker: worker.to_string(),
                members: members.iter().cloned().collect(),
            },
        );
    }

    /// The members of batch `id` still running.
    pub(crate) fn members(&self, id: &str) -> Vec<String> {
        let mut m: Vec<String> = self
            .running
            .get(id)
            .map(|r| r.members.iter().cloned().collect())
            .unwrap_or_default();
        m.sort();
        m
    }

    /// Member `tid` of batch `id` finished. When it was the last, the batch ends: answers its
    /// worker, whose slot it gives back (invariant 2).
    pub(crate) fn member_done(&mut self, id: &str, tid: &str) -> Option<String> {
        let r = self.running.get_mut(id)?;
        r.members.remove(tid);
        if !r.members.is_empty() {
            return None;
        }
        self.running.remove(id).map(|r| r.worker)
    }

    /// When the earliest buffer's deadline passes (a timer for virtual time).
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.buffers
            .values()
            .filter(|b| !b.members.is_empty())
            .map(|b| b.deadline)
            .min()
    }

    /// Whether attempt `tid` waits in a buffer.
    #[cfg(test)]
    pub(crate) fn is_buffered(&self, tid: &str) -> bool {
        self.buffers
            .values()
            .any(|b| b.members.iter().any(|(m, _)| m == tid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(max_size: usize, interval_ms: u64) -> BatchRule {
        BatchRule {
            max_size,
            max_interval: Duration::from_millis(interval_ms),
            group_key: "'default'".into(),
            group_max_runs: 1,
        }
    }

    #[test]
    fn a_buffer_flushes_when_full_or_when_its_interval_ends() {
        let (t0, r) = (Instant::now(), rule(2, 1_000));
        let mut b = Batches::default();
        let line: Line = ("wf:t".into(), "k".into());
        b.buffer("wf:t", "k", &r, ("a", 1), t0);
        assert!(b.due(t0).is_empty(), "one member, interval not over");
        b.buffer("wf:t", "k", &r, ("b", 1), t0 + Duration::from_millis(10));
        b.buffer("wf:t", "k", &r, ("b", 1), t0 + Duration::from_millis(10)); // once only
        b.buffer("wf:t", "k", &r, ("c", 1), t0 + Duration::from_millis(20));
        assert_eq!(b.due(t0), [(line.clone(), Flush::SizeReached, 2)]);
        let first: Vec<String> = b
            .take(&line, (t0 + Duration::from_millis(30), 2), |_| true)
            .into_iter()
            .map(|(m, _)| m)
            .collect();
        assert_eq!(first, ["a", "b"]);
        b.started("batch-1", line.clone(), "w", &first);
        assert!(!b.has_room(&line), "one batch of this key at a time");
        let later = t0 + Duration::from_millis(30) + Duration::from_millis(999);
        assert!(
            b.due(later).is_empty(),
            "the deadline restarted at the flush"
        );
        let at = t0 + Duration::from_millis(1_030);
        assert_eq!(b.due(at), [(line.clone(), Flush::IntervalElapsed, 2)]);
        assert_eq!(b.next_due(), Some(at));
        assert_eq!(b.member_done("batch-1", "a"), None, "b still runs");
        assert_eq!(b.member_done("batch-1", "b"), Some("w".to_string()));
        assert!(b.has_room(&line));
        // A member cancelled while buffered is dropped at the flush.
        assert!(b.take(&line, (at, 2), |t| t != "c").is_empty());
        assert!(!b.is_buffered("c"));
    }

    /// The real engine's size flush: members of about 100 kB each (100,069 bytes as it measures
    /// them) flush 39 at a time, the 40th, which passed 4,000,000 bytes, starting the next
    /// batch; the rest go by interval. A first member over the limit alone goes alone.
    #[test]
    fn buffered_payloads_past_four_million_bytes_flush_the_members_before_the_one_that_passed() {
        let input = json!({ "pad": "x".repeat(100_000) });
        assert_eq!(payload_bytes(&input), 100_069);
        assert_eq!(payload_bytes(&json!({"a": [1, 2], "b": "c"})), 58 + 23);
        let (t0, r) = (Instant::now(), rule(1_000, 60_000));
        let mut b = Batches::default();
        let line: Line = ("wf:t".into(), "k".into());
        for i in 0..100 {
            b.buffer(
                "wf:t",
                "k",
                &r,
                (&format!("m{i}"), payload_bytes(&input)),
                t0,
            );
        }
        let mut sizes = Vec::new();
        while let Some((l, why, n)) = b.due(t0).into_iter().next() {
            assert_eq!(why, Flush::MemorySizeReached);
            sizes.push(b.take(&l, (t0, n), |_| true).len());
        }
        assert_eq!(sizes, [39, 39], "22 left for the interval");
        let at = t0 + Duration::from_secs(60);
        assert_eq!(b.due(at), [(line.clone(), Flush::IntervalElapsed, 1_000)]);
        assert_eq!(Flush::MemorySizeReached.reason(), "memory_size_reached");
        let mut one = Batches::default();
        one.buffer("wf:t", "k", &r, ("huge", 5_000_000), t0);
        one.buffer("wf:t", "k", &r, ("small", 10), t0);
        assert_eq!(one.due(t0), [(line, Flush::MemorySizeReached, 1)]);
    }

    #[test]
    fn the_batch_key_is_a_string_expression_and_a_bad_one_says_why() {
        let r = BatchRule {
            group_key: "input.group".into(),
            ..rule(2, 1)
        };
        let meta = Map::new();
        let parents = json!({});
        assert_eq!(
            r.key_of(&json!({"group": " a "}), &meta, "run", &parents),
            Ok("a".to_string())
        );
        let int = r.key_of(&json!({"group": 1}), &meta, "run", &parents);
        assert_eq!(
            int,
            Err("failed to parse batch group key expression (input.group): expected string output for batch key, got int".to_string())
        );
        let missing = r.key_of(&json!({}), &meta, "run", &parents);
        assert!(
            missing.is_err_and(|e| e.starts_with("failed to parse batch group key expression"))
        );
        let default = rule(1, 1).key_of(&json!({}), &meta, "run", &parents);
        assert_eq!(default, Ok("default".to_string()));
    }

    #[test]
    fn registration_checks_the_real_engine_s_bounds_and_fills_its_defaults() {
        let c = v1::TaskBatchConfig {
            batch_max_size: 3,
            ..Default::default()
        };
        let r = BatchRule::from_proto("t", &c).expect("valid");
        assert_eq!(r.max_interval, Duration::from_millis(1_000));
        assert_eq!((r.group_key.as_str(), r.group_max_runs), ("'default'", 100));
        for bad in [
            v1::TaskBatchConfig {
                batch_max_size: 0,
                ..Default::default()
            },
            v1::TaskBatchConfig {
                batch_max_interval_ms: Some(0),
                ..c.clone()
            },
            v1::TaskBatchConfig {
                batch_group_max_runs: Some(10_001),
                ..c.clone()
            },
        ] {
            assert!(BatchRule::from_proto("t", &bad).is_err_and(|e| e.contains("task t: batch")));
        }
    }
}
