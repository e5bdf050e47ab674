//! The subscriptions: `SubscribeToWorkflowRuns` (the end of each run asked for) and
//! `SubscribeToWorkflowEvents` (a run's task and run events, by run id or by metadata).
//!
//! # Invariants
//!
//! 1. Every run a run subscription asks for is delivered once: when it finishes if it has not
//!    (its end going out, as the real engine's dispatcher sends it on the finished-candidate
//!    message); if it had, at the stream's next tick, as the real engine answers one (receiving
//!    a subscription only notes the id; a ticker started with the stream lists the finished
//!    runs among those noted every [`RUN_STREAM_TICK`]), or at once under the kindness
//!    ([`Ask::Now`]). A run asked for again before it was delivered is delivered once (the real
//!    engine notes ids in a map). Then it is no longer pending.
//! 2. An event subscription by run id ends (hangs up) with its run's end; one by metadata
//!    follows every run whose metadata matched when the run was created, and hangs up when
//!    none it follows is unfinished.
//! 3. A send to a closed stream is dropped: a subscriber gone is never an error for the run.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use hatchet_runtime::protocol as proto;

type RunTx = mpsc::UnboundedSender<Result<proto::WorkflowRunEvent, tonic::Status>>;
type EventTx = mpsc::UnboundedSender<Result<proto::WorkflowEvent, tonic::Status>>;

/// What a `SubscribeToWorkflowEvents` stream follows.
#[derive(Debug, Clone)]
pub(crate) enum EventFilter {
    /// One run.
    Run(String),
    /// Every run whose additional metadata has this key and value.
    Metadata {
        key: String,
        value: String,
        tracked: HashSet<String>,
    },
}

/// The period of a run stream's ticker (the real engine's `SubscribeToWorkflowRuns` handler,
/// v0.104.9 `internal/services/dispatcher/server.go`: `time.NewTicker(1 * time.Second)`, started
/// when the stream opens).
pub(crate) const RUN_STREAM_TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// How a subscription's run is answered (invariant 1).
#[derive(Debug)]
pub(crate) enum Ask {
    /// It has not finished: when it does.
    Wait,
    /// It has finished: at the stream's next tick, after `now`.
    AtTick(Instant),
    /// It has finished: this end, at once (a kindness for benchmarks).
    Now(proto::WorkflowRunEvent),
}

#[derive(Debug)]
struct RunSubscriber {
    tx: RunTx,
    /// Runs waited for until they end.
    pending: HashSet<String>,
    /// Runs that had ended when asked for, each with the tick it is answered at.
    at_tick: HashMap<String, Instant>,
    /// When the stream opened: its ticks fall every [`RUN_STREAM_TICK`] from then.
    opened: Instant,
}

impl RunSubscriber {
    /// The stream's first tick after `at`.
    fn tick_after(&self, at: Instant) -> Instant {
        let since = at.saturating_duration_since(self.opened).as_nanos();
        let every = RUN_STREAM_TICK.as_nanos();
        let ticks = since / every + 1;
        self.opened
            + std::time::Duration::from_nanos(u64::try_from(ticks * every).unwrap_or(u64::MAX))
    }
}

#[derive(Debug)]
struct EventSubscriber {
    tx: EventTx,
    filter: EventFilter,
}

/// Every open subscription.
#[derive(Debug, Default)]
pub(crate) struct Subscriptions {
    runs: HashMap<u64, RunSubscriber>,
    events: HashMap<u64, EventSubscriber>,
    last_id: u64,
}

impl Subscriptions {
    fn next_id(&mut self) -> u64 {
        self.last_id += 1;
        self.last_id
    }

    /// Opens a run subscription sending on `tx`, its stream opened at `now` (its ticks' phase);
    /// answers its id.
    pub(crate) fn open_runs(&mut self, tx: RunTx, now: Instant) -> u64 {
        let id = self.next_id();
        self.runs.insert(
            id,
            RunSubscriber {
                tx,
                pending: HashSet::new(),
                at_tick: HashMap::new(),
                opened: now,
            },
        );
        id
    }

    /// Subscription `sub` asks for run `run_id`, answered as `ask` says (invariant 1).
    pub(crate) fn want_run(&mut self, sub: u64, run_id: &str, ask: Ask) {
        let Some(s) = self.runs.get_mut(&sub) else {
            return;
        };
        if s.pending.contains(run_id) || s.at_tick.contains_key(run_id) {
            return; // noted already: delivered once
        }
        match ask {
            Ask::Now(ev) => {
                let _ = s.tx.send(Ok(ev));
            }
            Ask::AtTick(now) => {
                let tick = s.tick_after(now);
                s.at_tick.insert(run_id.to_string(), tick);
            }
            Ask::Wait => {
                s.pending.insert(run_id.to_string());
            }
        }
    }

    /// Takes the runs whose tick has come by `now`: (subscription, run), to answer.
    pub(crate) fn take_due_ticks(&mut self, now: Instant) -> Vec<(u64, String)> {
        let mut due = Vec::new();
        for (id, s) in self.runs.iter_mut() {
            if s.at_tick.values().any(|at| *at <= now) {
                s.at_tick.retain(|run, at| {
                    let keep = *at > now;
                    if !keep {
                        due.push((*id, run.clone()));
                    }
                    keep
                });
            }
        }
        due
    }

    /// The earliest tick a run waits for.
    pub(crate) fn next_tick(&self) -> Option<Instant> {
        self.runs
            .values()
            .flat_map(|s| s.at_tick.values())
            .min()
            .copied()
    }

    /// Whether some run waits for its stream's tick.
    pub(crate) fn awaiting_tick(&self) -> bool {
        self.runs.values().any(|s| !s.at_tick.is_empty())
    }

    /// Sends run end `ev` on subscription `sub` (a tick's answer).
    pub(crate) fn send_run(&self, sub: u64, ev: proto::WorkflowRunEvent) {
        if let Some(s) = self.runs.get(&sub) {
            let _ = s.tx.send(Ok(ev));
        }
    }

    /// Closes run subscription `sub`.
    pub(crate) fn close_runs(&mut self, sub: u64) {
        self.runs.remove(&sub);
    }

    /// Run `run_id` finished with `ev`: every subscription waiting for it gets it, and so does
    /// one waiting for its tick (an end goes out at once; invariant 1).
    pub(crate) fn run_ended(&mut self, run_id: &str, ev: &proto::WorkflowRunEvent) {
        for sub in self.runs.values_mut() {
            if sub.pending.remove(run_id) | sub.at_tick.remove(run_id).is_some() {
                let _ = sub.tx.send(Ok(ev.clone()));
            }
        }
    }

    /// Every run some subscription waits to end (with repeats).
    pub(crate) fn awaited(&self) -> impl Iterator<Item = &String> {
        self.runs.values().flat_map(|s| &s.pending)
    }

    /// How many run subscriptions are open, and how many runs they wait for (to end, or for
    /// their tick).
    pub(crate) fn run_counts(&self) -> (usize, usize) {
        let pending = self
            .runs
            .values()
            .map(|s| s.pending.len() + s.at_tick.len())
            .sum();
        (self.runs.len(), pending)
    }

    /// How many event subscriptions are open.
    pub(crate) fn event_count(&self) -> usize {
        self.events.len()
    }

    /// Opens an event subscription following `filter`, sending on `tx`.
    pub(crate) fn open_events(&mut self, tx: EventTx, filter: EventFilter) {
        let id = self.next_id();
        self.events.insert(id, EventSubscriber { tx, filter });
    }

    /// A run was created with metadata `meta`: metadata subscriptions that match follow it
    /// (invariant 2).
    pub(crate) fn track(&mut self, run_id: &str, meta: &Map<String, Value>) {
        for sub in self.events.values_mut() {
            if let EventFilter::Metadata {
                key,
                value,
                tracked,
            } = &mut sub.filter
            {
                let matches = meta.get(key.as_str()).is_some_and(|v| match v {
                    Value::String(s) => s == value,
                    other => &other.to_string() == value,
                });
                if matches {
                    tracked.insert(run_id.to_string());
                }
            }
        }
    }

    /// Sends `ev` to every event subscription following `run_id`.
    pub(crate) fn publish(&self, run_id: &str, ev: &proto::WorkflowEvent) {
        for sub in self.events.values() {
            let follows = match &sub.filter {
                EventFilter::Run(id) => id == run_id,
                EventFilter::Metadata { tracked, .. } => tracked.contains(run_id),
            };
            if follows {
                let _ = sub.tx.send(Ok(ev.clone()));
            }
        }
    }

    /// Run `run_id` ended with `base` (a run event, `completed` if it completed): its followers
    /// get it, and those it ends hang up and close (invariant 2).
    pub(crate) fn publish_run_end(
        &mut self,
        run_id: &str,
        base: &proto::WorkflowEvent,
        completed: bool,
    ) {
        let mut done = Vec::new();
        for (id, sub) in self.events.iter_mut() {
            let hangup = match &mut sub.filter {
                EventFilter::Run(r) if r == run_id => true,
                EventFilter::Metadata { tracked, .. } if tracked.contains(run_id) => {
                    if completed {
                        tracked.remove(run_id);
                    }
                    tracked.is_empty()
                }
                _ => continue,
            };
            let _ = sub.tx.send(Ok(proto::WorkflowEvent {
                hangup,
                ..base.clone()
            }));
            if hangup {
                done.push(*id);
            }
        }
        for id in done {
            self.events.remove(&id);
        }
    }

    /// Ends every subscription (the engine restarts or stops): their streams see EOF.
    pub(crate) fn close_all(&mut self) {
        self.runs.clear();
        self.events.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_end(id: &str) -> proto::WorkflowRunEvent {
        proto::WorkflowRunEvent {
            workflow_run_id: id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_run_is_delivered_once_per_request_at_once_or_when_it_ends() {
        let mut subs = Subscriptions::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sub = subs.open_runs(tx, Instant::now());
        subs.want_run(sub, "done", Ask::Now(run_end("done")));
        subs.want_run(sub, "later", Ask::Wait);
        subs.want_run(sub, "later", Ask::Wait); // noted once
        assert_eq!(subs.run_counts(), (1, 1));
        assert_eq!(subs.awaited().collect::<Vec<_>>(), ["later"]);
        subs.run_ended("later", &run_end("later"));
        subs.run_ended("later", &run_end("later")); // a second end is not a second delivery
        let got: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|r| r.expect("ok").workflow_run_id)
            .collect();
        assert_eq!(got, ["done", "later"]);
        assert_eq!(subs.run_counts(), (1, 0));
        subs.close_runs(sub);
        assert_eq!(subs.run_counts(), (0, 0));
    }

    #[test]
    fn a_run_that_had_ended_is_answered_at_the_stream_s_next_tick_once() {
        let mut subs = Subscriptions::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let opened = Instant::now();
        let sub = subs.open_runs(tx, opened);
        let asked = opened + std::time::Duration::from_millis(2_300);
        subs.want_run(sub, "done", Ask::AtTick(asked));
        subs.want_run(sub, "done", Ask::AtTick(asked)); // noted once
        let tick = opened + 3 * RUN_STREAM_TICK;
        assert_eq!(subs.next_tick(), Some(tick), "the tick after the ask");
        assert!(subs.awaiting_tick());
        assert_eq!(subs.run_counts(), (1, 1));
        assert!(
            subs.take_due_ticks(tick - std::time::Duration::from_millis(1))
                .is_empty()
        );
        assert_eq!(subs.take_due_ticks(tick), [(sub, "done".to_string())]);
        assert!(
            subs.take_due_ticks(tick + RUN_STREAM_TICK).is_empty(),
            "once"
        );
        assert_eq!((subs.next_tick(), subs.run_counts()), (None, (1, 0)));
        // An end that goes out before the tick answers it then (and the tick has nothing).
        subs.want_run(sub, "replayed", Ask::AtTick(tick));
        subs.run_ended("replayed", &run_end("replayed"));
        assert!(subs.take_due_ticks(tick + RUN_STREAM_TICK).is_empty());
        let got: Vec<String> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|r| r.expect("ok").workflow_run_id)
            .collect();
        assert_eq!(got, ["replayed"]);
    }

    #[test]
    fn event_followers_hang_up_when_what_they_follow_has_ended() {
        let mut subs = Subscriptions::default();
        let (by_run, mut run_rx) = mpsc::unbounded_channel();
        subs.open_events(by_run, EventFilter::Run("a".into()));
        let (by_meta, mut meta_rx) = mpsc::unbounded_channel();
        subs.open_events(
            by_meta,
            EventFilter::Metadata {
                key: "k".into(),
                value: "v".into(),
                tracked: HashSet::new(),
            },
        );
        let mut meta = Map::new();
        meta.insert("k".into(), Value::String("v".into()));
        subs.track("a", &meta);
        subs.track("b", &meta);
        subs.track("c", &Map::new()); // not followed
        let end = |id: &str| proto::WorkflowEvent {
            workflow_run_id: id.into(),
            ..Default::default()
        };
        subs.publish_run_end("a", &end("a"), true);
        let hangups =
            |rx: &mut mpsc::UnboundedReceiver<Result<proto::WorkflowEvent, tonic::Status>>| {
                std::iter::from_fn(|| rx.try_recv().ok())
                    .map(|e| e.expect("ok").hangup)
                    .collect::<Vec<_>>()
            };
        assert_eq!(
            hangups(&mut run_rx),
            [true],
            "by run: the run's end hangs up"
        );
        assert_eq!(hangups(&mut meta_rx), [false], "by metadata: b still runs");
        assert_eq!(subs.event_count(), 1);
        subs.publish_run_end("c", &end("c"), true);
        assert!(hangups(&mut meta_rx).is_empty(), "c was never followed");
        subs.publish_run_end("b", &end("b"), true);
        assert_eq!(hangups(&mut meta_rx), [true]);
        assert_eq!(subs.event_count(), 0);
    }
}
