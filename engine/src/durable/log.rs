//! What the durable stream does to the state: operations appended to a task's log (replayed
//! on a later invocation), acks, completions and their re-sends, eviction and restore, and the
//! legacy `RegisterDurableEvent` path. The log's records and the invariants are in `mod.rs`.

use std::collections::{HashMap, HashSet};

use hatchet_runtime::protocol::v1::{self, durable_task_response::Message as Resp};
use serde_json::Value;
use tokio::time::Instant;
use tonic::Status as GrpcStatus;

use super::{BRANCH, Conditions, LegacyTx, Node, NodeKind, Tx, eref, resp, wait_key};
use crate::hub::State;
use crate::store::model::{Status, StoredEvent, TriggerOpts};

impl State {
    /// Registers a DurableTask stream.
    pub(crate) fn durable_open(&mut self, tx: Tx) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.durable.streams.insert(id, tx);
        id
    }

    /// Forgets a DurableTask stream.
    pub(crate) fn durable_close(&mut self, stream: u64) {
        self.durable.streams.remove(&stream);
        self.durable.routes.retain(|_, s| *s != stream);
    }

    fn dsend(&self, stream: u64, m: Resp) {
        if let Some(tx) = self.durable.streams.get(&stream) {
            let _ = tx.send(resp(m));
        }
    }

    /// `node` was satisfied (or is listed by the worker again): its completion goes now if every
    /// entry satisfied before it has gone in this invocation, else it is held (invariant 6); one
    /// already sent in this invocation is sent again (the `worker_status` recovery path).
    fn send_completion(&mut self, task: &str, node: i64) {
        let Some(log) = self.durable.logs.get_mut(task) else {
            return;
        };
        let Some(n) = log.nodes.get_mut(&node) else {
            return;
        };
        if n.result.is_none() {
            return;
        }
        if matches!(n.kind, NodeKind::Memo) || log.sent.contains(&node) {
            self.emit_completion(task, node);
            return;
        }
        if n.order.is_none() {
            log.next_order += 1;
            n.order = Some(log.next_order);
        }
        log.held.insert(node);
        self.release_held(task);
    }

    /// The current invocation asked for `node` (a request resolved to it, its ack sent): its
    /// completion, and those held behind it, may go in their satisfied order (invariant 6).
    fn asked(&mut self, task: &str, node: i64) {
        let Some(log) = self.durable.logs.get_mut(task) else {
            return;
        };
        log.asked.insert(node);
        let memo_done = log
            .nodes
            .get(&node)
            .is_some_and(|n| matches!(n.kind, NodeKind::Memo) && n.result.is_some());
        if memo_done {
            self.emit_completion(task, node);
        }
        self.release_held(task);
    }

    /// Sends the held completions, lowest satisfied order first, while the lowest one has been
    /// asked for by the current invocation.
    fn release_held(&mut self, task: &str) {
        // Releasing sends completions and changes no entry's order: read the orders once.
        let Some(orders) = self.durable.logs.get(task).map(|log| {
            log.nodes
                .orders()
                .into_iter()
                .collect::<HashMap<i64, u64>>()
        }) else {
            return;
        };
        loop {
            let Some(log) = self.durable.logs.get_mut(task) else {
                return;
            };
            let Some(next) = log
                .held
                .iter()
                .copied()
                .min_by_key(|h| orders.get(h).copied().unwrap_or(u64::MAX))
            else {
                return;
            };
            if !log.asked.contains(&next) {
                return;
            }
            log.held.remove(&next);
            log.sent.insert(next);
            self.emit_completion(task, next);
        }
    }

    fn emit_completion(&self, task: &str, node: i64) {
        let Some(log) = self.durable.logs.get(task) else {
            return;
        };
        let Some(n) = log.nodes.get(&node) else {
            return;
        };
        let Some((payload, failure, err)) = &n.result else {
            return;
        };
        if crate::faults::take_one(&self.switches.lose_durable_completions) {
            return;
        }
        if let Some(stream) = self.durable.routes.get(task) {
            self.dsend(
                *stream,
                Resp::EntryCompleted(v1::DurableTaskEventLogEntryCompletedResponse {
                    r#ref: Some(eref(task, log.invocation, node, log.nodes.branch_of(node))),
                    payload: payload.clone(),
                    is_failure: *failure,
                    error_message: err.clone(),
                }),
            );
        }
    }

    /// Checks the invocation; on mismatch sends `server_evict` and returns false.
    fn durable_check(&mut self, stream: u64, task: &str, invocation: i32) -> bool {
        let Some(t) = self.tasks.get(task) else {
            return false;
        };
        let current = t.invocation_count;
        if invocation != current {
            self.dsend(
                stream,
                Resp::ServerEvict(v1::DurableTaskServerEvictNotice {
                    durable_task_external_id: task.to_string(),
                    invocation_count: invocation,
                    reason: format!("stale invocation {invocation}; current is {current}"),
                }),
            );
            return false;
        }
        self.durable.routes.insert(task.to_string(), stream);
        let log = self.durable.logs.entry(task.to_string()).or_default();
        if log.invocation != invocation {
            log.invocation = invocation;
            log.next_node = 0;
            // Invariant 6: every satisfied entry waits to be asked for again, in order.
            log.asked.clear();
            log.sent.clear();
            log.held = log.nodes.orders().into_iter().map(|(n, _)| n).collect();
        }
        true
    }

    /// Gets or creates the next node; `Err(node)` on a nondeterministic replay.
    fn next_node(
        &mut self,
        task: &str,
        key: &str,
        make: impl FnOnce() -> NodeKind,
    ) -> Result<(i64, bool), i64> {
        let log = self.durable.logs.entry(task.to_string()).or_default();
        log.next_node += 1;
        let id = log.next_node;
        match log.nodes.get(&id) {
            Some(n) if n.key == key => Ok((id, true)),
            Some(_) => Err(id),
            None => {
                self.counters.durable_nodes_recorded += 1;
                log.nodes.insert(
                    id,
                    Node {
                        kind: make(),
                        key: key.to_string(),
                        result: None,
                        order: None,
                    },
                );
                Ok((id, false))
            }
        }
    }

    /// The ref of `node` of `task`'s log, on the branch that owns it.
    fn eref_of(&self, task: &str, invocation: i32, node: i64) -> v1::DurableEventLogEntryRef {
        let branch = self
            .durable
            .logs
            .get(task)
            .map_or(BRANCH, |l| l.nodes.branch_of(node));
        eref(task, invocation, node, branch)
    }

    fn nondeterminism(&self, stream: u64, task: &str, invocation: i32, node: i64) {
        self.nondeterminism_saying(
            stream,
            (task, invocation, node),
            format!("operation {node} differs from the one recorded"),
        );
    }

    fn nondeterminism_saying(
        &self,
        stream: u64,
        (task, invocation, node): (&str, i32, i64),
        message: String,
    ) {
        self.dsend(
            stream,
            Resp::Error(v1::DurableTaskErrorResponse {
                r#ref: Some(self.eref_of(task, invocation, node)),
                error_type: v1::DurableTaskErrorType::Nondeterminism as i32,
                error_message: message,
            }),
        );
    }

    /// The node that recorded the child at `opt`'s spawn slot (its key, else its index) of
    /// durable task `task`, if that child is an entry of the current path: the real engine
    /// resolves a durable spawn by its slot, not by its place in the request order, so a replay
    /// whose concurrent branches spawn in another order finds each child where it was recorded.
    fn recorded_child(&self, task: &str, opt: &v1::TriggerWorkflowRequest) -> Option<i64> {
        let slot = match (&opt.child_key, opt.child_index) {
            (Some(k), _) => format!("key:{k}"),
            (None, Some(i)) => format!("index:{i}"),
            (None, None) => return None,
        };
        let run = self.tasks.get(task)?.children.get(&slot)?;
        self.durable.logs.get(task)?.nodes.node_of_run(run)
    }

    /// Handles one request of a DurableTask stream.
    pub(crate) fn durable_request(&mut self, stream: u64, req: v1::DurableTaskRequest) {
        use v1::durable_task_request::Message as Req;
        let Some(msg) = req.message else { return };
        let expects_ack = matches!(
            msg,
            Req::WaitFor(_) | Req::Memo(_) | Req::TriggerRuns(_) | Req::EvictInvocation(_)
        );
        if expects_ack && crate::faults::take_one(&self.switches.lose_durable_acks) {
            // The stream ends now; the request is still recorded, its answers go nowhere.
            if let Some(tx) = self.durable.streams.get(&stream) {
                let _ = tx.send(Err(GrpcStatus::unavailable(
                    "stream ended by fault injection (an ack lost with its stream)",
                )));
            }
            self.durable_close(stream);
        }
        match msg {
            Req::RegisterWorker(r) => self.durable_register_worker(stream, r),
            Req::WaitFor(w) => self.durable_wait_for(stream, w),
            Req::Memo(m) => self.durable_memo(stream, m),
            Req::CompleteMemo(c) => self.durable_complete_memo(c),
            Req::TriggerRuns(t) => self.durable_trigger_runs(stream, t),
            Req::EvictInvocation(e) => self.durable_evict(stream, e),
            Req::WorkerStatus(s) => self.durable_worker_status(stream, s),
        }
    }

    /// A worker registers on the stream: acknowledged when the engine knows it.
    fn durable_register_worker(&mut self, stream: u64, r: v1::DurableTaskRequestRegisterWorker) {
        if self.workers.contains_key(&r.worker_id) {
            self.dsend(
                stream,
                Resp::RegisterWorker(v1::DurableTaskResponseRegisterWorker {
                    worker_id: r.worker_id,
                }),
            );
        }
    }

    /// A wait for conditions: recorded as the next node (or a non-determinism error),
    /// acknowledged, and satisfied at once by kept events a look-back wait matches, the newest
    /// matching one for each group (`mod.rs` invariant 7).
    fn durable_wait_for(&mut self, stream: u64, w: v1::DurableTaskWaitForRequest) {
        let task = w.durable_task_external_id.clone();
        if !self.durable_check(stream, &task, w.invocation_count) {
            return;
        }
        let conds = w.wait_for_conditions.clone().unwrap_or_default();
        let key = wait_key(&conds);
        let now = self.clock.now();
        let seq = self.events.seq();
        let parsed = match Conditions::from_proto(&conds, now, seq) {
            Ok(c) => c,
            Err(_) => return, // bad input: logged by the engine, no response (as the engine does)
        };
        match self.next_node(&task, &key, || NodeKind::Wait(parsed)) {
            Err(node) => self.nondeterminism(stream, &task, w.invocation_count, node),
            Ok((node, _)) => {
                self.dsend(
                    stream,
                    Resp::WaitForAck(v1::DurableTaskEventWaitForAckResponse {
                        r#ref: Some(self.eref_of(&task, w.invocation_count, node)),
                    }),
                );
                // A look-back wait may already be satisfied by kept events (read in place:
                // the kept events and the durable logs are separate tables), offered newest
                // first as the real engine reads them: the newest match wins (invariant 7).
                let mut satisfied_now = false;
                if let Some(n) = self
                    .durable
                    .logs
                    .get_mut(&task)
                    .and_then(|l| l.nodes.get_mut(&node))
                    && let NodeKind::Wait(c) = &mut n.kind
                    && n.result.is_none()
                {
                    for ev in self.events.iter().rev() {
                        c.event(ev);
                    }
                    c.tick(now);
                    if c.satisfied() {
                        n.result = Some((c.payload(), false, None));
                        satisfied_now = true;
                    }
                }
                self.asked(&task, node);
                if satisfied_now {
                    self.send_completion(&task, node);
                }
            }
        }
    }

    /// A memo: its node recorded (or a non-determinism error), the payload it carries stored
    /// unless the node has a result already, and the stored result acknowledged.
    fn durable_memo(&mut self, stream: u64, m: v1::DurableTaskMemoRequest) {
        let task = m.durable_task_external_id.clone();
        if !self.durable_check(stream, &task, m.invocation_count) {
            return;
        }
        let key = format!("memo:{}", String::from_utf8_lossy(&m.key));
        match self.next_node(&task, &key, || NodeKind::Memo) {
            Err(node) => self.nondeterminism(stream, &task, m.invocation_count, node),
            Ok((node, existed)) => {
                let log = self.durable.logs.get_mut(&task).expect("log exists");
                let n = log.nodes.get_mut(&node).expect("node exists");
                if n.result.is_none()
                    && let Some(p) = &m.payload
                {
                    n.result = Some((p.clone(), false, None));
                }
                let stored = n.result.as_ref().map(|r| r.0.clone());
                self.dsend(
                    stream,
                    Resp::MemoAck(v1::DurableTaskEventMemoAckResponse {
                        r#ref: Some(self.eref_of(&task, m.invocation_count, node)),
                        memo_already_existed: existed && stored.is_some(),
                        memo_result_payload: stored,
                    }),
                );
                self.asked(&task, node);
            }
        }
    }

    /// A memo's result: stored on its node.
    fn durable_complete_memo(&mut self, c: v1::DurableTaskCompleteMemoRequest) {
        let Some(r) = c.r#ref else { return };
        if let Some(n) = self
            .durable
            .logs
            .get_mut(&r.durable_task_external_id)
            .and_then(|l| l.nodes.get_mut(&r.node_id))
            && n.result.is_none()
        {
            n.result = Some((c.payload, false, None));
        }
    }

    /// Children spawned: each matched to its node (the same child again on replay, a non-determinism error for another workflow), created, and acknowledged.
    fn durable_trigger_runs(&mut self, stream: u64, t: v1::DurableTaskTriggerRunsRequest) {
        let task = t.durable_task_external_id.clone();
        if !self.durable_check(stream, &task, t.invocation_count) {
            return;
        }
        // A spawn at a slot whose recorded child is another workflow (or, without a
        // child key, another input) is nondeterministic, as the real engine answers it
        // (its words); every spawn of the request is checked before any child is made.
        for opt in &t.trigger_opts {
            let Some(node) = self.recorded_child(&task, opt) else {
                continue;
            };
            let recorded = &self.durable.logs[&task].nodes[&node].key;
            let key = format!("run:{}:{}", opt.name, opt.input);
            if opt.child_key.is_none() && *recorded != key {
                let expected = recorded
                    .strip_prefix("run:")
                    .and_then(|r| r.split(':').next())
                    .unwrap_or_default()
                    .to_string();
                let received: Vec<&str> = t.trigger_opts.iter().map(|o| o.name.as_str()).collect();
                let branch = self.durable.logs[&task].nodes.branch_of(node);
                return self.nondeterminism_saying(
                    stream,
                    (&task, t.invocation_count, node),
                    format!(
                        "non-determinism error in task {task} at node {node}:{branch}\n  expected: run({expected})\n  received: run({})",
                        received.join(", ")
                    ),
                );
            }
        }
        let mut entries = Vec::new();
        let mut nodes = Vec::new();
        for opt in &t.trigger_opts {
            let key = format!("run:{}:{}", opt.name, opt.input);
            let recorded = self.recorded_child(&task, opt);
            let node = if let Some(node) = recorded {
                // Found by its slot: no new node; the log's count moves past it.
                let log = self.durable.logs.entry(task.clone()).or_default();
                log.next_node = log.next_node.max(node);
                node
            } else {
                match self.next_node(&task, &key, || NodeKind::Run(String::new())) {
                    Err(node) => {
                        return self.nondeterminism(stream, &task, t.invocation_count, node);
                    }
                    Ok((node, _)) => node,
                }
            };
            self.asked(&task, node);
            let existing = match &self.durable.logs[&task].nodes[&node].kind {
                NodeKind::Run(id) if !id.is_empty() => Some(id.clone()),
                _ => None,
            };
            let run_id = match existing {
                Some(id) => id,
                None => {
                    let input = serde_json::from_str(&opt.input)
                        .unwrap_or(Value::Object(Default::default()));
                    let meta = opt
                        .additional_metadata
                        .as_deref()
                        .and_then(|m| {
                            serde_json::from_str::<serde_json::Map<String, Value>>(m).ok()
                        })
                        .unwrap_or_default();
                    let opts = TriggerOpts {
                        parent_task: Some(task.clone()),
                        // Keyed as the real engine keys a durable child: by its key,
                        // else by its index (a spawn of the same index, durable or
                        // not, is the same child).
                        child_index: opt.child_index,
                        child_key: opt.child_key.clone(),
                        priority: opt.priority,
                        event: None,
                        desired_worker: opt.desired_worker_id.clone(),
                        desired_labels: crate::sched::placement::desired_labels(
                            &opt.desired_worker_labels,
                        ),
                        filter_payload: None,
                        run_id: None,
                    };
                    match self.create_run(&opt.name, input, meta, opts) {
                        Ok(id) => id,
                        // As TriggerWorkflow answers it: an id no run will have.
                        Err(e) if crate::answers::is_skipped_trigger(&e) => crate::parse::new_id(),
                        Err(_) => return,
                    }
                }
            };
            if let Some(n) = self
                .durable
                .logs
                .get_mut(&task)
                .and_then(|l| l.nodes.get_mut(&node))
            {
                n.kind = NodeKind::Run(run_id.clone());
            }
            self.durable_child_finished(&run_id);
            entries.push(v1::DurableTaskRunAckEntry {
                node_id: node,
                branch_id: self.durable.logs[&task].nodes.branch_of(node),
                workflow_run_external_id: run_id,
            });
            nodes.push(node);
        }
        self.dsend(
            stream,
            Resp::TriggerRunsAck(v1::DurableTaskEventTriggerRunsAckResponse {
                durable_task_external_id: task.clone(),
                invocation_count: t.invocation_count,
                run_entries: entries,
            }),
        );
        for node in nodes {
            self.send_completion(&task, node);
        }
    }

    /// An invocation evicted: acknowledged once its waits are held, the task marked evicted.
    fn durable_evict(&mut self, stream: u64, e: v1::DurableTaskEvictInvocationRequest) {
        let task = e.durable_task_external_id.clone();
        if self.switches.complete_waits_on_evict > 0 {
            // Fault: the task's waits end at this moment, before the eviction lands.
            self.switches.complete_waits_on_evict -= 1;
            let forever = self.clock.now() + std::time::Duration::from_secs(100 * 365 * 86_400);
            self.satisfy_waits_of(Some(&task), |c| c.tick(forever));
        }
        // As the real engine's eviction (v0.104.9, `EvictTask`): any invocation of a
        // running task not evicted yet whose timeout has not passed; the count the
        // request names is not compared (an SDK's graceful shutdown names its own).
        let now = self.clock.now();
        if self.tasks.get(&task).is_some_and(|t| {
            t.status() == Status::Running && !t.evicted && t.deadline.is_none_or(|d| d > now)
        }) {
            self.free_slot(&task);
            if let Some(t) = self.tasks.get_mut(&task) {
                t.evicted = true;
            }
        }
        self.dsend(
            stream,
            Resp::EvictionAck(v1::DurableTaskEvictionAckResponse {
                invocation_count: e.invocation_count,
                durable_task_external_id: task,
            }),
        );
    }

    /// A worker's status: a stale invocation's wait is told to evict; every other wait's stream
    /// is this one, and its completion, if its node has one, is sent again.
    fn durable_worker_status(&mut self, stream: u64, s: v1::DurableTaskWorkerStatusRequest) {
        for w in s.waiting_entries {
            let task = w.durable_task_external_id.clone();
            let current = self
                .tasks
                .get(&task)
                .map(|t| t.invocation_count)
                .unwrap_or(0);
            if w.invocation_count < current {
                self.dsend(
                    stream,
                    Resp::ServerEvict(v1::DurableTaskServerEvictNotice {
                        durable_task_external_id: task,
                        invocation_count: w.invocation_count,
                        reason: "stale invocation".into(),
                    }),
                );
                continue;
            }
            self.durable.routes.insert(task.clone(), stream);
            self.send_completion(&task, w.node_id);
        }
    }

    /// Satisfies waits on a pushed event (both durable paths).
    pub(crate) fn durable_event_pushed(&mut self, ev: &StoredEvent) {
        self.satisfy_waits(|c| c.event(ev));
    }

    /// Satisfies due sleeps.
    /// `BranchDurableTask` (the SDKs' durable reset; invariant 4): a new branch of `task`'s log
    /// from `from_branch` at `node`, and the task runs again (replayed as a new attempt, as the
    /// real engine replays it). Answers the new branch's id. As on the real engine, the node and
    /// branch are not checked; a task without a durable log cannot branch.
    pub(crate) fn branch_durable_task(
        &mut self,
        task: &str,
        node: i64,
        from_branch: i64,
    ) -> Result<i64, GrpcStatus> {
        if uuid::Uuid::parse_str(task).is_err() {
            return Err(GrpcStatus::invalid_argument("invalid task_external_id"));
        }
        if !self.tasks.contains_key(task) {
            return Err(GrpcStatus::not_found(format!("task not found: {task}")));
        }
        let Some(log) = self.durable.logs.get_mut(task) else {
            return Err(GrpcStatus::internal(format!(
                "failed to branch durable task: task {task} has no durable event log (it never ran a durable operation)"
            )));
        };
        let branch = log.nodes.branch(node, from_branch);
        self.replay_ids(&[task.to_string()]);
        Ok(branch)
    }

    /// Queues an evicted task again (a new invocation replays its log); whether it was
    /// evicted, `None` for an unknown task.
    pub(crate) fn restore_evicted(&mut self, id: &str) -> Option<bool> {
        let t = self.tasks.get_mut(id)?;
        if !(t.evicted && t.status() == Status::Running) {
            return Some(false);
        }
        t.restore();
        self.enqueue(id);
        Some(true)
    }

    /// Open waits of both durable paths, with their task ids.
    fn open_waits(&self) -> impl Iterator<Item = (&str, &Conditions)> {
        let v1 = self.durable.logs.iter().flat_map(|(task, log)| {
            log.nodes.values().filter_map(move |n| match &n.kind {
                NodeKind::Wait(c) if n.result.is_none() => Some((task.as_str(), c)),
                _ => None,
            })
        });
        let legacy = self
            .durable
            .legacy
            .iter()
            .filter(|(_, c)| !c.satisfied())
            .map(|((task, _), c)| (task.as_str(), c));
        v1.chain(legacy)
    }

    /// Tasks blocked in a durable wait (see `clock.rs`, invariant 4).
    pub(crate) fn durable_blocked_tasks(&self) -> HashSet<&str> {
        self.open_waits().map(|(t, _)| t).collect()
    }

    /// The earliest sleep of an open durable wait.
    pub(crate) fn durable_next_sleep(&self) -> Option<Instant> {
        self.open_waits().filter_map(|(_, c)| c.next_sleep()).min()
    }

    pub(crate) fn durable_tick(&mut self, now: Instant) {
        self.satisfy_waits(|c| c.tick(now));
    }

    /// Applies `advance` (an event, or the clock) to every open wait of both durable paths, and
    /// completes the waits it satisfies.
    fn satisfy_waits(&mut self, advance: impl FnMut(&mut Conditions) -> bool) {
        self.satisfy_waits_of(None, advance);
    }

    /// [`Self::satisfy_waits`], for one task's durable log only when `only` names it.
    fn satisfy_waits_of(
        &mut self,
        only: Option<&str>,
        mut advance: impl FnMut(&mut Conditions) -> bool,
    ) {
        let mut done = Vec::new();
        for (task, log) in self.durable.logs.iter_mut() {
            if only.is_some_and(|o| o != task) {
                continue;
            }
            for (id, n) in log.nodes.iter_mut() {
                if let NodeKind::Wait(c) = &mut n.kind
                    && n.result.is_none()
                    && advance(c)
                    && c.satisfied()
                {
                    n.result = Some((c.payload(), false, None));
                    done.push((task.clone(), *id));
                }
            }
        }
        for (task, node) in done {
            self.node_done(&task, node);
        }
        if only.is_some() {
            return; // the legacy path's waits are not a task's log
        }
        let legacy_done: Vec<_> = self
            .durable
            .legacy
            .iter_mut()
            .filter_map(|(k, c)| (advance(c) && c.satisfied()).then(|| k.clone()))
            .collect();
        for k in legacy_done {
            self.legacy_deliver(&k);
        }
    }

    fn node_done(&mut self, task: &str, node: i64) {
        self.send_completion(task, node);
        // An evicted task waiting on this node is queued again (new invocation).
        self.restore_evicted(task);
    }

    /// A child run finished: satisfies the RUN nodes waiting on it.
    pub(crate) fn durable_child_finished(&mut self, run_id: &str) {
        let Some(run) = self.runs.get(run_id) else {
            return;
        };
        // Only a child (spawned by a task) can have a durable RUN node waiting on it.
        if !run.status().is_terminal() || run.parent_task_id.is_none() {
            return;
        }
        let ev = self.run_event(run);
        let failed = run.status() != Status::Completed;
        let payload = if failed {
            Vec::new()
        } else if ev.results.len() == 1 {
            ev.results[0]
                .output
                .clone()
                .unwrap_or_else(|| "{}".into())
                .into_bytes()
        } else {
            let mut m = serde_json::Map::new();
            for r in &ev.results {
                let v = r
                    .output
                    .as_deref()
                    .and_then(|o| serde_json::from_str(o).ok())
                    .unwrap_or(Value::Null);
                m.insert(r.task_name.clone(), v);
            }
            Value::Object(m).to_string().into_bytes()
        };
        let error = failed.then(|| {
            ev.results
                .iter()
                .find_map(|r| r.error.clone())
                .unwrap_or_else(|| "task was cancelled".into())
        });
        let mut done = Vec::new();
        for (task, log) in self.durable.logs.iter_mut() {
            for (id, n) in log.nodes.iter_mut() {
                if matches!(&n.kind, NodeKind::Run(r) if r == run_id) && n.result.is_none() {
                    n.result = Some((payload.clone(), failed, error.clone()));
                    done.push((task.clone(), *id));
                }
            }
        }
        for (task, node) in done {
            self.node_done(&task, node);
        }
    }

    /// The durable task itself finished: stop routing to it.
    pub(crate) fn durable_task_finished(&mut self, task: &str) {
        self.durable.routes.remove(task);
    }

    // ===== legacy path =====

    /// `RegisterDurableEvent`.
    pub(crate) fn legacy_register(
        &mut self,
        req: &v1::RegisterDurableEventRequest,
    ) -> Result<(), GrpcStatus> {
        if !self.tasks.contains_key(&req.task_id) {
            return Err(GrpcStatus::not_found("task not found"));
        }
        let conds = req.conditions.clone().unwrap_or_default();
        for g in conds
            .sleep_conditions
            .iter()
            .filter_map(|c| c.base.as_ref())
            .chain(
                conds
                    .user_event_conditions
                    .iter()
                    .filter_map(|c| c.base.as_ref()),
            )
        {
            if uuid::Uuid::parse_str(&g.or_group_id).is_err() {
                return Err(GrpcStatus::invalid_argument("or_group_id must be a UUID"));
            }
        }
        let c = Conditions::from_proto(&conds, self.clock.now(), self.events.seq())?;
        self.durable
            .legacy
            .insert((req.task_id.clone(), req.signal_key.clone()), c);
        Ok(())
    }

    /// Opens a `ListenForDurableEvent` stream.
    pub(crate) fn legacy_listen_open(&mut self, tx: LegacyTx) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.durable
            .legacy_listeners
            .insert(id, (tx, HashSet::new()));
        id
    }

    /// Closes a `ListenForDurableEvent` stream.
    pub(crate) fn legacy_listen_close(&mut self, id: u64) {
        self.durable.legacy_listeners.remove(&id);
    }

    /// A listener asks for `(task, signal)`; delivered at once if already satisfied.
    pub(crate) fn legacy_listen(&mut self, id: u64, task: String, signal: String) {
        let k = (task, signal);
        if let Some((_, keys)) = self.durable.legacy_listeners.get_mut(&id) {
            keys.insert(k.clone());
        }
        if self
            .durable
            .legacy
            .get(&k)
            .is_some_and(Conditions::satisfied)
        {
            self.legacy_deliver(&k);
        }
    }

    fn legacy_deliver(&mut self, k: &(String, String)) {
        let Some(c) = self.durable.legacy.get(k) else {
            return;
        };
        let data = c.payload();
        for (tx, keys) in self.durable.legacy_listeners.values_mut() {
            if keys.remove(k) {
                let _ = tx.send(Ok(v1::DurableEvent {
                    task_id: k.0.clone(),
                    signal_key: k.1.clone(),
                    data: data.clone(),
                }));
            }
        }
    }
}
