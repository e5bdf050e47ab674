"""SDK parity (1): the official Python SDK's run-management and task-context features against
hatchet-dev-engine, one counted check each:
  p1. on_failure: a workflow whose task always fails (non-retryable) runs its on_failure task,
      which reads the failed task's error (ctx.task_run_errors, ctx.fetch_task_run_error); the
      run reads back FAILED;
  p2. `hatchet.runs.cancel(run_id)` of a running slow task: the worker sees the cancellation
      (marker file), the status reads back CANCELLED;
  p3. the run reference has no cancel, so by filter on additional metadata: two runs by
      `runs.bulk_cancel(filters=...)`, one by `runs.bulk_cancel_by_filters_with_pagination`; a
      fourth run (other metadata) keeps running;
  p4. a task that fails on its first execution is replayed after FAILED with
      `runs.replay(run_id)`, two more with `runs.bulk_replay(filters=...)` and one with
      `runs.bulk_replay_by_filters_with_pagination`; all complete with their output;
  p5. `run_many` of 20 bulk items returns every output; `event.bulk_push` with additional
      metadata triggers the on_events task once per event (and the run sees that metadata);
  p6. priority: with no worker serving `parity-prio`, runs at priorities 1, 3, 2 and one at the
      workflow's default_priority (2) are queued; a 1-slot worker started then runs them
      highest priority first (FIFO within a priority);
  p7. `ctx.log()` lines read back through `hatchet.logs.list(task_run_id)`;
  p8. strict reads: `runs.get`, `runs.get_status`, `runs.get_task_run`, `runs.get_result`,
      `runs.list` (since/until, statuses, workflow_ids, additional_metadata, only_tasks, limit)
      and `workflows.list/get` validate through the SDK's pydantic models for runs queued (no
      worker), running, failed, cancelled, completed and a failed two-task DAG (on_failure),
      and the filters filter;
  p10. the rest of the API: `workflows.pause` holds a new run QUEUED while another workflow's
      run completes on the same worker, `unpause` lets it complete; `workflows.delete` of a
      workflow makes `workflows.get` fail with 404 and drops it from `workflows.list`;
      `workers.pause`/`unpause` read back PAUSED/ACTIVE; `event.list(keys=...)` shows a pushed
      event; `metrics.get_task_metrics(workflow_ids=...)` counts the completed runs and
      `metrics.get_queue_metrics()` answers a mapping;
  p11. webhooks: `webhooks.create` (GENERIC, HMAC-SHA256 hex, a static payload), `list`, `get`;
      a request with a bad signature is refused 403, a signed one answers its event (key from
      CEL over the body, the static payload merged); `delete`, then `get` is a 404;
  p12. batch tasks (`hatchet.batch_task`, START_BATCH): three runs of group "a" and one of group
      "b" of a size-3, 2 s-interval task keyed by `input.group` run as one batch of three (the
      size flushes it) and one of one (the interval does); a run whose key is an int fails with
      the engine's "failed to parse batch group key expression"; two runs of a size-2 task
      with `broadcast_output` both read the one output (the sum of their inputs);
  p13. durable reset (`runs.reset_durable_task`, BranchDurableTask): a durable task that sleeps
      1 s three times completes; reset from node 2 of branch 1 it answers branch 2 and runs
      again with its first sleep replayed (instant) and the other two slept; reset from node 3
      of branch 2 it answers branch 3 and only its last sleep is slept;
  p14. traces (`HatchetInstrumentor`, the engine's OTLP collector, `ObservabilityApi
      .v1_observability_get_trace`): with the instrumentor on in a worker and this client, a
      run's trace holds the SDK's spans (hatchet.run_workflow, hatchet.start_step_run, the
      task's own span) and the engine's (hatchet.engine.workflow_run, .queued,
      .start_step_run) in one trace, each span once: 6 for a run, 7 for an event's run (with
      hatchet.push_event and hatchet.engine.event), 12 for a parent and the child it spawned;
  p15. durable eviction and restore: a durable task (eviction policy ttl 1 s) waiting for an
      event reads is_evicted, the REST restore (`/api/v1/stable/tasks/{task}/restore`) brings
      it back (a second invocation) and the event ends it; another, evicted, is brought back by
      its event alone;
  p16. durable children: a durable task (eviction policy ttl 1 s) spawns a 4 s child with
      `aio_run` and three more with `aio_run_many`, over the durable stream; it is evicted
      while the first child runs, the child's completion restores it, the replay finds that
      child in the durable log: each child runs once, the engine holds four child runs of the
      parent, and the parent reads every child's output;
  p17. on_success: a DAG's `on_success_task` runs once after both tasks completed; a run whose
      first task fails ends FAILED and its on_success task never runs;
  p18. trigger a cron now: `cron.create` with a yearly expression, then the SDK's generated
      REST client (`WorkflowApi.workflow_cron_trigger`; no SDK method has it) starts a run
      with the cron's input at once, and the cron stays;
  p9. task context: `ctx.refresh_timeout` lets a 2 s-timeout task run 4 s (a twin without the
      refresh is timed out); on a 1-slot worker a task that keeps its slot delays the next run,
      and so does one that calls `ctx.release_slot()`: the call is accepted and the task
      completes, but the real engine v0.104.9 keeps the slot counted until the task ends (its
      release statement deletes none of the slot rows; our engine does the same by default);
      `ctx.additional_metadata` shows the trigger's metadata.
Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional, for run.sh's trap),
INTEROP_KEEP=1 to keep the work dir, PARITY_ONLY=p1,p5 to run only some checks.
"""

import datetime
import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from interop_harness import Session, drive, short, wait_registered
from interop_util import bounded, check, expect, log, wait_until

UTC = datetime.timezone.utc


def start_worker(which: str, session: Session) -> subprocess.Popen[bytes]:
    # The worker keeps the SDK's default REST retries; the client (this process) uses fewer,
    # so a missing endpoint fails fast instead of backing off for ~15 s.
    return session.python(f"worker-{which}", "parity_worker.py", which,
                          HATCHET_CLIENT_TENACITY_MAX_ATTEMPTS="5")


def run_checks(session: Session, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    markers = session.markers
    import parity_tasks as t  # builds Hatchet() from the env set by main()
    from hatchet_sdk import BulkPushEventWithMetadata, Priority
    from hatchet_sdk.clients.rest.models.v1_task_status import V1TaskStatus as S
    from hatchet_sdk.features.runs import BulkCancelReplayOpts, RunFilter

    h = t.hatchet
    only = {x.strip() for x in os.environ.get("PARITY_ONLY", "").split(",") if x.strip()}

    def mark(name: str) -> Path:
        return markers / name

    def status(run_id: str) -> str:
        return str(bounded(lambda: h.runs.get_status(run_id), 30)).split(".")[-1]

    def status_or_404(run_id: str) -> str:
        """The run's status, or "404" while the real engine has not written its readable row
        (it writes it after the trigger answers)."""
        from hatchet_sdk.clients.rest.exceptions import NotFoundException

        try:
            return status(run_id)
        except NotFoundException:
            return "404"

    def wait_status(run_id: str, want: str, timeout: float) -> None:
        seen: list[str] = []

        def reached() -> bool:
            s = status_or_404(run_id)
            if not seen or seen[-1] != s:
                seen.append(s)
            return s == want

        try:
            wait_until(f"run {run_id} {want}", reached, timeout, 0.3)
        except TimeoutError as e:
            raise TimeoutError(f"{e}; statuses seen {seen}") from None

    def trigger(task, inp, **kw):
        return bounded(lambda: task.run(inp, wait_for_result=False, **kw), 15)

    def output_of(run_id: str) -> dict:
        """The run's outputs by task name, read over gRPC (GetRunDetails), not REST."""
        d = bounded(lambda: h.runs.get_details(run_id), 15)
        return {k: v.output for k, v in d.task_runs.items()}

    # ----- p1 -----
    def p1_on_failure() -> None:
        nonce = uuid.uuid4().hex
        ref = trigger(t.on_failure_wf, t.Msg(nonce=nonce))
        try:
            wait_until("the on_failure task's marker", mark(f"onfail-{nonce}").exists, 30)
        except TimeoutError:
            raise AssertionError(
                f"the on_failure task never ran (run status {status(ref.workflow_run_id)})"
            ) from None
        got = json.loads(mark(f"onfail-{nonce}").read_text())
        log("p1 on_failure saw task_run_errors " + json.dumps(
            {k: v.splitlines()[0] for k, v in got["errors"].items()}))
        errors, one = got["errors"], got["one"]
        expect(set(errors) == {"always_fails"},
               f"ctx.task_run_errors keys are {sorted(errors)}, want ['always_fails']")
        expect(one and t.FAIL_MESSAGE in one and nonce in one,
               f"fetch_task_run_error(always_fails) = {one!r}")
        expect("NonRetryableException" in one, f"the error lacks its type: {one!r}")
        wait_status(ref.workflow_run_id, "FAILED", 20)

    # ----- p2 -----
    def p2_cancel_by_id() -> None:
        nonce = uuid.uuid4().hex
        ref = trigger(t.slow, t.Msg(nonce=nonce))
        wait_until("the slow task to start", mark(f"slow-started-{nonce}").exists, 20)
        bounded(lambda: h.runs.cancel(ref.workflow_run_id), 20)
        wait_until("the worker to see the cancellation",
                   mark(f"slow-cancelled-{nonce}").exists, 20)
        log(f"p2 worker saw: {mark(f'slow-cancelled-{nonce}').read_text()}")
        wait_status(ref.workflow_run_id, "CANCELLED", 20)

    # ----- p3 -----
    def p3_bulk_cancel_by_metadata() -> None:
        from hatchet_sdk.workflow_run import WorkflowRunRef
        expect(not hasattr(WorkflowRunRef, "cancel"), "WorkflowRunRef grew a cancel(): use it")
        # two by `bulk_cancel(filters=...)` (one POST tasks/cancel with a filter), one by
        # `bulk_cancel_by_filters_with_pagination` (GET workflow-runs/external-ids, then POST
        # tasks/cancel with the ids); a fourth run with other metadata keeps running
        tags = {"filter": uuid.uuid4().hex, "paged": uuid.uuid4().hex, "other": uuid.uuid4().hex}
        since = datetime.datetime.now(UTC) - datetime.timedelta(seconds=5)
        runs = {f"{kind}-{i}": trigger(t.slow, t.Msg(nonce=f"{tag}-{i}"),
                                        additional_metadata={"p3": tag})
                for kind, tag in tags.items() for i in range(2 if kind == "filter" else 1)}
        nonce_of = {name: f"{tags[name.split('-')[0]]}-{name.split('-')[1]}" for name in runs}
        for name in runs:
            wait_until(f"slow task {name} to start",
                       mark(f"slow-started-{nonce_of[name]}").exists, 20)
        # The real engine's run list (what a filter reads) trails its own state: a run whose task
        # already runs can still be missing from "RUNNING" for a moment, and a filter by status
        # would then miss it. Wait until every run reads RUNNING before filtering.
        for name in runs:
            wait_status(runs[name].workflow_run_id, "RUNNING", 20)

        def cancelled(names: list[str]) -> None:
            for name in names:
                wait_until(f"the worker to see {name} cancelled",
                           mark(f"slow-cancelled-{nonce_of[name]}").exists, 20)
                wait_status(runs[name].workflow_run_id, "CANCELLED", 20)

        try:
            bounded(lambda: h.runs.bulk_cancel(BulkCancelReplayOpts(filters=RunFilter(
                since=since, statuses=[S.RUNNING, S.QUEUED],
                additional_metadata={"p3": tags["filter"]}))), 20)
            cancelled(["filter-0", "filter-1"])
            bounded(lambda: h.runs.bulk_cancel_by_filters_with_pagination(
                sleep_time=0, since=since, additional_metadata={"p3": tags["paged"]}), 20)
            cancelled(["paged-0"])
            time.sleep(1.0)
            expect(not mark(f"slow-cancelled-{nonce_of['other-0']}").exists(),
                   "the run with other metadata was cancelled too")
            s = status(runs["other-0"].workflow_run_id)
            expect(s == "RUNNING", f"the run with other metadata is {s}")
        finally:
            try:
                bounded(lambda: h.runs.cancel(runs["other-0"].workflow_run_id), 20)
            except Exception:  # noqa: BLE001 - cleanup only
                pass

    # ----- p4 -----
    def p4_replay() -> None:
        nonce = uuid.uuid4().hex
        ref = trigger(t.flaky, t.Msg(nonce=nonce))
        wait_status(ref.workflow_run_id, "FAILED", 20)
        bounded(lambda: h.runs.replay(ref.workflow_run_id), 20)
        wait_status(ref.workflow_run_id, "COMPLETED", 20)
        out = output_of(ref.workflow_run_id)
        expect(out.get("parity-flaky", {}).get("nonce") == nonce
               and out["parity-flaky"].get("replayed") is True, f"replayed output {out!r}")
        # the bulk variants, by filter on additional metadata: one POST tasks/replay with a
        # filter, and the paginated helper (external-ids, then tasks/replay with the ids)
        since = datetime.datetime.now(UTC) - datetime.timedelta(seconds=5)
        for how in ("filter", "paged"):
            tag = uuid.uuid4().hex
            refs = [trigger(t.flaky, t.Msg(nonce=f"{tag}-{i}"), additional_metadata={"p4": tag})
                    for i in range(2 if how == "filter" else 1)]
            for r in refs:
                wait_status(r.workflow_run_id, "FAILED", 20)
            if how == "filter":
                bounded(lambda: h.runs.bulk_replay(BulkCancelReplayOpts(filters=RunFilter(
                    since=since, statuses=[S.FAILED], additional_metadata={"p4": tag}))), 20)
            else:
                bounded(lambda: h.runs.bulk_replay_by_filters_with_pagination(
                    sleep_time=0, since=since, additional_metadata={"p4": tag}), 20)
            for i, r in enumerate(refs):
                try:
                    wait_status(r.workflow_run_id, "COMPLETED", 20)
                except TimeoutError as e:
                    raise AssertionError(f"bulk replay ({how}): {e}") from None
                out = output_of(r.workflow_run_id)
                expect(out.get("parity-flaky", {}).get("nonce") == f"{tag}-{i}",
                       f"bulk-replayed ({how}) output {out!r}")

    # ----- p5 -----
    def p5_bulk() -> None:
        nonce = uuid.uuid4().hex
        items = [t.double.create_bulk_run_item(t.Num(nonce=nonce, n=i),
                                               additional_metadata={"p5": nonce})
                 for i in range(20)]
        outs = bounded(lambda: t.double.run_many(items), 60)
        expect(len(outs) == 20, f"run_many returned {len(outs)} results")
        got = sorted((o["n"], o["double"]) for o in outs if o.get("nonce") == nonce)
        expect(got == [(i, 2 * i) for i in range(20)], f"run_many outputs {outs!r}")
        events = [BulkPushEventWithMetadata(key=t.BULK_EVENT_KEY,
                                            payload={"nonce": f"{nonce}-{i}"},
                                            additional_metadata={"p5": nonce, "i": str(i)})
                  for i in range(3)]
        pushed = bounded(lambda: h.event.bulk_push(events), 20)
        expect(len(pushed) == 3, f"bulk_push answered {len(pushed)} events")
        expect(all(e.key == t.BULK_EVENT_KEY for e in pushed),
               f"bulk_push keys {[e.key for e in pushed]}")
        for i in range(3):
            m = mark(f"bulk-event-{nonce}-{i}")
            wait_until(f"the on_events run for event {i}", m.exists, 20)
            seen = json.loads(m.read_text())
            expect(seen["key"] == t.BULK_EVENT_KEY, f"triggering_event_key {seen['key']!r}")
            expect(seen["meta"].get("p5") == nonce and seen["meta"].get("i") == str(i),
                   f"the run's additional metadata is {seen['meta']!r}")
        time.sleep(1.0)
        extra = sorted(p.name for p in markers.glob(f"bulk-event-{nonce}-*"))
        expect(len(extra) == 3, f"more runs than events: {extra}")

    # ----- p6 -----
    def p6_priority() -> None:
        nonce = uuid.uuid4().hex
        plan = [("p1", Priority.LOW), ("p3", Priority.HIGH), ("p2", Priority.MEDIUM),
                ("default", None)]
        refs = {}
        for label, prio in plan:
            kw = {} if prio is None else {"priority": prio}
            refs[label] = trigger(t.prio_wf, t.Label(nonce=nonce, label=label), **kw)
            time.sleep(0.05)  # distinct creation times
        for label, r in refs.items():
            # A 404 (the real engine's row not written yet) is waited out; a run that ran never
            # reads QUEUED again.
            try:
                wait_until(f"run {label} to read QUEUED",
                           lambda r=r: status_or_404(r.workflow_run_id) == "QUEUED", 10, 0.3)
            except TimeoutError:
                pass
            s = status_or_404(r.workflow_run_id)
            expect(s == "QUEUED", f"run {label} is {s} with no worker")
        procs["prio"] = start_worker("prio", session)
        order_file = mark(f"order-{nonce}")

        def all_ran() -> bool:
            expect(procs["prio"].poll() is None, "the prio worker exited")
            return order_file.exists() and len(order_file.read_text().split()) == 4

        wait_until("the 1-slot worker to run all four", all_ran, 40, 0.3)
        order = order_file.read_text().split()
        log(f"p6 execution order {order}")
        outs = {label: bounded(r.result, 20) for label, r in refs.items()}
        prios = {label: o.get("record_order", {}).get("priority") for label, o in outs.items()}
        log(f"p6 ctx.priority per run {prios}")
        expect(order == ["p3", "p2", "default", "p1"],
               f"execution order {order}, want ['p3', 'p2', 'default', 'p1']")
        expect(prios == {"p1": 1, "p3": 3, "p2": 2, "default": 2},
               f"ctx.priority per run {prios}")

    # ----- p7 -----
    def p7_logs() -> None:
        nonce = uuid.uuid4().hex
        out = bounded(lambda: t.logs.run(t.Msg(nonce=nonce)), 30)
        task_run_id = out["task_run_id"]
        want = [f"parity line {i} {nonce}" for i in range(3)]
        last: list[str] = []

        def got_all() -> bool:
            rows = bounded(lambda: h.logs.list(task_run_id), 30).rows or []
            last[:] = [r.message for r in rows]
            return all(w in last for w in want)

        try:
            wait_until("the three log lines", got_all, 15, 0.5)
        except TimeoutError:
            raise AssertionError(f"logs.list answered {last!r}") from None

    # ----- p9 -----
    def p9_task_context() -> None:
        nonce = uuid.uuid4().hex
        problems: list[str] = []
        # refresh_timeout + additional metadata
        try:
            out = bounded(lambda: t.refresh.run(
                t.Msg(nonce=nonce), additional_metadata={"p9": nonce, "who": "refresh"}), 40)
            log(f"p9 refresh output {out}")
            if not (out.get("ran_s", 0) >= 3.9 and out.get("cancelled") is False):
                problems.append(f"refresh_timeout: the task did not run 4 s uncancelled: {out}")
            meta = out.get("meta") or {}
            if meta.get("p9") != nonce or meta.get("who") != "refresh":
                problems.append(f"ctx.additional_metadata is {meta!r}")
        except Exception as e:  # noqa: BLE001 - reported below
            problems.append(f"refresh_timeout run: {short(e)}")
        # the control: the same task without the refresh is timed out after 2 s
        try:
            out = bounded(lambda: t.no_refresh.run(t.Msg(nonce=nonce)), 40)
            problems.append(f"control without refresh_timeout was not timed out: {out}")
        except Exception as e:  # noqa: BLE001 - expected: the run failed (timed out)
            log(f"p9 control failed as expected: {short(e, 200)}")
        # release_slot on the 1-slot prio worker: another run starts while the first runs
        if "prio" not in procs:  # p6 starts it; when p6 did not run, start it here
            procs["prio"] = start_worker("prio", session)
        if procs["prio"].poll() is not None:
            problems.append("release_slot: the 1-slot prio worker exited")
        else:
            try:  # the control: a task that keeps its slot delays the next run
                ctl = f"{nonce}-ctl"
                r = trigger(t.hold, t.Msg(nonce=ctl))
                wait_until("the holding task to start", mark(f"holding-{ctl}").exists, 20)
                bounded(lambda: t.quick.run(t.Msg(nonce=ctl)), 30)
                out = bounded(r.result, 20)
                if out.get("saw_quick") is not False:
                    problems.append(f"control: a run started beside a slot-holding task on the "
                                    f"1-slot worker: {out}")
            except Exception as e:  # noqa: BLE001 - reported below
                problems.append(f"release_slot control: {short(e)}")
            try:  # release_slot is accepted, and the slot stays counted until the task ends:
                # the real engine v0.104.9's release deletes none of the task's slot rows
                r = trigger(t.release, t.Msg(nonce=nonce))
                wait_until("the task to release its slot", mark(f"released-{nonce}").exists, 20)
                q = trigger(t.quick, t.Msg(nonce=nonce))
                wait_status(r.workflow_run_id, "COMPLETED", 30)
                out = output_of(r.workflow_run_id)
                if out.get("parity-release", {}).get("saw_quick") is not False:
                    problems.append(f"release_slot: a run started beside the releasing task on "
                                    f"the 1-slot worker: {out}")
                bounded(q.result, 30)
            except Exception as e:  # noqa: BLE001 - reported below
                problems.append(f"release_slot: {short(e)}")
        expect(not problems, "; ".join(problems))

    # ----- p8 -----
    def p8_strict_reads() -> None:
        nonce = uuid.uuid4().hex
        since = datetime.datetime.now(UTC) - datetime.timedelta(seconds=5)
        problems: list[str] = []
        # label -> the status it must read back; every run carries {"p8": nonce, "state": label}
        want_status = {"QUEUED": "QUEUED", "RUNNING": "RUNNING", "FAILED": "FAILED",
                       "CANCELLED": "CANCELLED", "COMPLETED": "COMPLETED",
                       "DAG_FAILED": "FAILED"}
        runs: dict[str, str] = {}  # label -> run id

        def meta(label: str) -> dict[str, str]:
            return {"p8": nonce, "state": label}

        def add(label: str, task, inp) -> None:
            try:
                runs[label] = trigger(task, inp, additional_metadata=meta(label)).workflow_run_id
            except Exception as e:  # noqa: BLE001
                problems.append(f"trigger {label}: {short(e)}")

        add("COMPLETED", t.double, t.Num(nonce=nonce, n=1))
        add("QUEUED", t.orphan, t.Msg(nonce=nonce))  # no worker serves parity-orphan
        add("RUNNING", t.slow, t.Msg(nonce=f"{nonce}-run"))
        add("FAILED", t.flaky, t.Msg(nonce=f"{nonce}-fail"))
        add("CANCELLED", t.slow, t.Msg(nonce=f"{nonce}-cxl"))
        add("DAG_FAILED", t.on_failure_wf, t.Msg(nonce=f"{nonce}-dag"))
        try:
            wait_until("slow runs to start", lambda: mark(f"slow-started-{nonce}-run").exists()
                       and mark(f"slow-started-{nonce}-cxl").exists(), 20)
            # The real engine's reads trail its workers' events: each run reads its state first.
            wait_status(runs["RUNNING"], "RUNNING", 20)
            wait_status(runs["QUEUED"], "QUEUED", 20)
            wait_status(runs["COMPLETED"], "COMPLETED", 20)
            wait_status(runs["FAILED"], "FAILED", 20)
            wait_until("the DAG's on_failure task", mark(f"onfail-{nonce}-dag").exists, 20)
            wait_status(runs["DAG_FAILED"], "FAILED", 20)
            bounded(lambda: h.runs.cancel(runs["CANCELLED"]), 20)
            wait_status(runs["CANCELLED"], "CANCELLED", 20)
        except Exception as e:  # noqa: BLE001
            problems.append(f"setting up the states: {short(e)}")
        wf_ids: dict[str, str] = {}
        try:  # the orphan workflow's id, for the workflow_ids filter
            rows = bounded(lambda: h.workflows.list(workflow_name="parity-orphan"), 30).rows
            wf_ids.update({"QUEUED": w.metadata.id for w in rows or []
                           if w.name == "parity-orphan"})
        except Exception as e:  # noqa: BLE001
            problems.append(f"workflows.list(workflow_name=parity-orphan): {short(e)}")
        # runs.get / get_task_run / get_status per run
        for label, run_id in runs.items():
            st = want_status[label]
            try:
                d = bounded(lambda: h.runs.get(run_id), 30)
                got = str(d.run.status).split(".")[-1]
                if got != st:
                    problems.append(f"runs.get {label}: status {got}")
                if d.run.metadata.id != run_id:
                    problems.append(f"runs.get {label}: run.metadata.id {d.run.metadata.id}")
                if (d.run.additional_metadata or {}).get("p8") != nonce:
                    problems.append(f"runs.get {label}: additionalMetadata "
                                    f"{d.run.additional_metadata}")
                wf_ids.setdefault(label, d.run.workflow_id)
                if label == "COMPLETED" and d.run.output in (None, {}):
                    problems.append(f"runs.get COMPLETED: output {d.run.output!r}")
                if label == "DAG_FAILED":
                    log(f"p8 DAG details: shape {[x.task_name for x in d.shape]}, tasks "
                        f"{[(x.display_name, str(x.status).split('.')[-1]) for x in d.tasks]}")
                    if len(d.shape) != 2:
                        problems.append(f"runs.get DAG_FAILED: shape has {len(d.shape)} items")
                if d.tasks:
                    task_id = d.tasks[0].task_external_id
                    def task_status(task_id=task_id) -> str:
                        tr = bounded(lambda: h.runs.get_task_run(task_id), 30)
                        return str(tr.status).split(".")[-1]

                    # The real engine's task read trails its run read by a moment: poll it.
                    # Its single-task read also says the latest event by timestamp unless one
                    # is final (PopulateSingleTaskRunData), and the QUEUED event is stamped in
                    # the background: a running task can read QUEUED there for its whole run.
                    ok = {st}
                    if label == "RUNNING" and os.environ.get("HATCHET_REAL_ENGINE") == "1":
                        ok = {"RUNNING", "QUEUED"}
                    if label != "DAG_FAILED":
                        try:
                            wait_until(f"get_task_run {label} to read {st}",
                                       lambda: task_status() in ok, 10, 0.3)
                        except Exception:  # noqa: BLE001 - recorded below with what it read
                            problems.append(f"runs.get_task_run {label}: status {task_status()}")
                elif label != "QUEUED":
                    problems.append(f"runs.get {label}: no tasks")
            except Exception as e:  # noqa: BLE001
                problems.append(f"runs.get/get_task_run {label}: {short(e)}")
            try:
                got = status(run_id)
                if got != st:
                    problems.append(f"runs.get_status {label}: {got}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"runs.get_status {label}: {short(e)}")
        try:
            out = bounded(lambda: h.runs.get_result(runs["COMPLETED"]), 30)
            if out.get("double") != 2:
                problems.append(f"runs.get_result COMPLETED: {out!r}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"runs.get_result: {short(e)}")

        # runs.list: one row per run (only_tasks=False), with the right status; the filters filter
        def listed(**kw) -> list:
            return bounded(lambda: h.runs.list(since=since, additional_metadata={"p8": nonce},
                                               **kw), 30).rows or []

        try:
            rows = listed()
            by_label = {(r.additional_metadata or {}).get("state"): r for r in rows}
            if len(rows) != len(want_status) or set(by_label) != set(want_status):
                problems.append(f"runs.list(additional_metadata): {len(rows)} rows, states "
                                f"{sorted(map(str, by_label))}")
            for label, row in by_label.items():
                got = str(row.status).split(".")[-1]
                if label in want_status and got != want_status[label]:
                    problems.append(f"runs.list row {label} has status {got}")
                if label in runs and row.workflow_run_external_id != runs[label]:
                    problems.append(f"runs.list row {label}: workflowRunExternalId "
                                    f"{row.workflow_run_external_id}, want {runs[label]}")
            dag = by_label.get("DAG_FAILED")
            if dag is not None:
                if str(dag.type).split(".")[-1] != "DAG":
                    problems.append(f"runs.list DAG row: type {dag.type}")
                if dag.metadata.id != runs.get("DAG_FAILED"):
                    problems.append(f"runs.list DAG row: metadata.id {dag.metadata.id} is not "
                                    "the run's id")
        except Exception as e:  # noqa: BLE001
            problems.append(f"runs.list(additional_metadata): {short(e)}")
        filters = [
            ("statuses=[FAILED]", dict(statuses=[S.FAILED]), {"FAILED", "DAG_FAILED"}),
            ("statuses=[RUNNING,QUEUED]", dict(statuses=[S.RUNNING, S.QUEUED]),
             {"RUNNING", "QUEUED"}),
            ("statuses=[CANCELLED]", dict(statuses=[S.CANCELLED]), {"CANCELLED"}),
            ("statuses=[COMPLETED]", dict(statuses=[S.COMPLETED]), {"COMPLETED"}),
            ("workflow_ids=[orphan]", dict(workflow_ids=[wf_ids.get("QUEUED", "")]),
             {"QUEUED"}),
        ]
        if not wf_ids.get("QUEUED"):
            problems.append("no workflow id for parity-orphan: workflow_ids filter not tried")
            filters = [f for f in filters if not f[0].startswith("workflow_ids")]
        for what, kw, want in filters:
            try:
                got = {(r.additional_metadata or {}).get("state") for r in listed(**kw)}
                if got != want:
                    problems.append(f"runs.list({what}) gave {sorted(map(str, got))}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"runs.list({what}): {short(e)}")
        try:  # only_tasks=True: task rows; the DAG's failed task among them
            rows = listed(only_tasks=True)
            labels = sorted(str((r.additional_metadata or {}).get("state")) for r in rows)
            log(f"p8 only_tasks=True rows by state {labels}")
            if not set(want_status) <= set(labels):
                problems.append(f"runs.list(only_tasks=True) gave {labels}")
            if any(str(r.type).split(".")[-1] != "TASK" for r in rows
                   if (r.additional_metadata or {}).get("state") != "DAG_FAILED"):
                problems.append("runs.list(only_tasks=True): a single-task row is not TASK")
        except Exception as e:  # noqa: BLE001
            problems.append(f"runs.list(only_tasks=True): {short(e)}")
        try:  # pagination
            page = bounded(lambda: h.runs.list(since=since, additional_metadata={"p8": nonce},
                                               limit=2, offset=0), 30)
            if len(page.rows or []) != 2:
                problems.append(f"runs.list(limit=2) gave {len(page.rows or [])} rows")
        except Exception as e:  # noqa: BLE001
            problems.append(f"runs.list(limit=2): {short(e)}")
        try:  # time windows that hold none of our runs
            rows = bounded(lambda: h.runs.list(
                since=since - datetime.timedelta(hours=1), until=since,
                additional_metadata={"p8": nonce}), 30).rows or []
            if rows:
                problems.append(f"runs.list(until before the runs) gave {len(rows)} rows")
            rows = bounded(lambda: h.runs.list(
                since=datetime.datetime.now(UTC) + datetime.timedelta(minutes=1),
                additional_metadata={"p8": nonce}), 30).rows or []
            if rows:
                problems.append(f"runs.list(since after the runs) gave {len(rows)} rows")
            other = bounded(lambda: h.runs.list(since=since,
                                                additional_metadata={"p8": "nope"}), 30)
            if other.rows:
                problems.append(f"runs.list(other metadata) gave {len(other.rows)} rows")
        except Exception as e:  # noqa: BLE001
            problems.append(f"runs.list(since/until): {short(e)}")
        # workflows
        try:
            wl = bounded(lambda: h.workflows.list(workflow_name="parity-"), 30)
            names = sorted(w.name for w in wl.rows or [])
            for want in ("parity-slow", "parity-orphan", "parity-on-failure", "parity-prio"):
                if want not in names:
                    problems.append(f"workflows.list lacks {want}: {names}")
            if any(not n.startswith("parity-") for n in names):
                problems.append(f"workflows.list(workflow_name=parity-) gave {names}")
            everything = bounded(h.workflows.list, 30)
            if len(everything.rows or []) < len(names):
                problems.append("workflows.list() shows fewer workflows than a name filter")
        except Exception as e:  # noqa: BLE001
            problems.append(f"workflows.list: {short(e)}")
        for label, wid in sorted(wf_ids.items()):
            try:
                w = bounded(lambda: h.workflows.get(wid), 30)
                if w.metadata.id != wid:
                    problems.append(f"workflows.get({label}) answered id {w.metadata.id}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"workflows.get({label}): {short(e)}")
                break
        try:
            bounded(lambda: h.runs.cancel(runs["RUNNING"]), 20)
        except Exception:  # noqa: BLE001 - cleanup only
            pass
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    # ----- p10 -----
    def p10_rest_of_the_api() -> None:
        import datetime as dt
        from hatchet_sdk.clients.rest.exceptions import NotFoundException

        def workflow_id(name: str) -> str:
            rows = bounded(lambda: h.workflows.list(workflow_name=name), 30).rows or []
            ids = [w.metadata.id for w in rows if w.name == name]
            expect(len(ids) == 1, f"workflows.list(workflow_name={name}) gave {rows}")
            return ids[0]

        problems: list[str] = []
        since = dt.datetime.now(UTC) - dt.timedelta(seconds=30)
        wid = workflow_id("parity-double")
        paused = bounded(lambda: h.workflows.pause(wid, queue_ttl=dt.timedelta(hours=1)), 30)
        if not paused.is_paused:
            problems.append(f"workflows.pause answered {paused}")
        # The real engine's triggers read the workflow through a cache: for a moment after the
        # pause a new run may still be assigned. Probe until one stays queued while a run of
        # another workflow on the same worker completes (at most 20 tries).
        nonce = uuid.uuid4().hex
        held = None
        for _ in range(20):
            probe = trigger(t.double, t.Num(nonce=uuid.uuid4().hex, n=4))
            bounded(lambda: t.logs.run(t.Msg(nonce=nonce)), 60)
            if status_or_404(probe.workflow_run_id) == "QUEUED":
                held = probe
                break
            wait_status(probe.workflow_run_id, "COMPLETED", 60)
        if held is None:
            raise AssertionError("no run of the paused workflow stayed QUEUED in 20 tries")
        unpaused = bounded(lambda: h.workflows.unpause(wid), 30)
        if unpaused.is_paused:
            problems.append(f"workflows.unpause answered {unpaused}")
        wait_status(held.workflow_run_id, "COMPLETED", 60)

        def counted():
            m = bounded(lambda: h.metrics.get_task_metrics(since=since, workflow_ids=[wid]), 30)
            return m if m.completed >= 1 else None
        try:
            wait_until("the completed run counted", counted, 30, 0.5)
        except TimeoutError as e:
            problems.append(f"metrics.get_task_metrics: {e}")
        queues = bounded(h.metrics.get_queue_metrics, 30)
        if not isinstance(queues, dict):
            problems.append(f"metrics.get_queue_metrics answered {queues!r}")

        key = f"parity:listed:{nonce}"
        bounded(lambda: h.event.push(key, {"nonce": nonce}), 30)

        def listed():
            return bounded(lambda: h.event.list(keys=[key], since=since), 30).rows
        try:
            rows = wait_until("the pushed event listed", listed, 30, 0.5)
            if rows[0].payload != {"nonce": nonce}:
                problems.append(f"event.list row {rows[0]}")
        except TimeoutError as e:
            problems.append(f"event.list: {e}")

        workers = bounded(h.workers.list, 30).rows or []
        main = [w for w in workers if w.name == "parity-main" and w.status == "ACTIVE"]
        if main:
            wk = main[0].metadata.id
            bounded(lambda: h.workers.pause(wk), 30)
            if (s := bounded(lambda: h.workers.get(wk), 30).status) != "PAUSED":
                problems.append(f"a paused worker read {s}")
            bounded(lambda: h.workers.unpause(wk), 30)
            if (s := bounded(lambda: h.workers.get(wk), 30).status) != "ACTIVE":
                problems.append(f"an unpaused worker read {s}")
        else:
            problems.append(f"no ACTIVE parity-main in workers.list: {[w.name for w in workers]}")

        gone = workflow_id("parity-doomed")
        bounded(lambda: h.workflows.delete(gone), 30)
        try:
            bounded(lambda: h.workflows.get(gone), 30)
            problems.append("workflows.get of a deleted workflow answered")
        except NotFoundException:
            pass
        rows = bounded(lambda: h.workflows.list(workflow_name="parity-doomed"), 30).rows or []
        if any(w.metadata.id == gone for w in rows):
            problems.append("workflows.list still shows a deleted workflow")
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    # ----- p11 -----
    def p11_webhooks() -> None:
        import hashlib
        import hmac
        import urllib.error
        import urllib.request
        from hatchet_sdk.clients.rest.exceptions import NotFoundException
        from hatchet_sdk.clients.rest.models.v1_webhook_hmac_algorithm import (
            V1WebhookHMACAlgorithm)
        from hatchet_sdk.clients.rest.models.v1_webhook_hmac_auth import V1WebhookHMACAuth
        from hatchet_sdk.clients.rest.models.v1_webhook_hmac_encoding import (
            V1WebhookHMACEncoding)
        from hatchet_sdk.clients.rest.models.v1_webhook_source_name import V1WebhookSourceName

        nonce = uuid.uuid4().hex
        name = f"parity-hook-{nonce[:12]}"
        secret = "parity-secret"
        auth = V1WebhookHMACAuth(algorithm=V1WebhookHMACAlgorithm.SHA256,
                                 encoding=V1WebhookHMACEncoding.HEX,
                                 signatureHeaderName="X-Signature", signingSecret=secret)
        made = bounded(lambda: h.webhooks.create(
            source_name=V1WebhookSourceName.GENERIC, name=name,
            event_key_expression="'parity:hooked:' + input.nonce", auth=auth,
            static_payload={"via": "webhook"}), 30)
        problems: list[str] = []
        if made.name != name:
            problems.append(f"webhooks.create answered {made}")
        names = [w.name for w in (bounded(h.webhooks.list, 30).rows or [])]
        if name not in names:
            problems.append(f"webhooks.list lacks {name}: {names}")
        if bounded(lambda: h.webhooks.get(name), 30).auth_type != "HMAC":
            problems.append("webhooks.get: auth type is not HMAC")
        url = f"{h.config.server_url}/api/v1/stable/tenants/{h.tenant_id}/webhooks/{name}"
        body = json.dumps({"nonce": nonce}).encode()

        def post(signature: str) -> tuple[int, bytes]:
            req = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/json", "X-Signature": signature})
            try:
                with urllib.request.urlopen(req, timeout=20) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        code, _ = post("0" * 64)
        if code != 403:
            problems.append(f"a bad signature answered {code}, not 403")
        good = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        code, answer = post(f"sha256={good}")
        if code != 200:
            problems.append(f"a good signature answered {code}: {answer[:300]!r}")
        else:
            event = json.loads(answer).get("event", {})
            if event.get("key") != f"parity:hooked:{nonce}":
                problems.append(f"the webhook's event key is {event.get('key')!r}")
            if event.get("payload") != {"nonce": nonce, "via": "webhook"}:
                problems.append(f"the webhook's event payload is {event.get('payload')!r}")
        bounded(lambda: h.webhooks.delete(name), 30)
        try:
            bounded(lambda: h.webhooks.get(name), 30)
            problems.append("webhooks.get of a deleted webhook answered")
        except NotFoundException:
            pass
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    # ----- p12 -----
    def p12_batch_tasks() -> None:
        nonce = uuid.uuid4().hex
        a = [trigger(t.batch, t.BatchIn(nonce=f"{nonce}-a{i}", group="a")) for i in range(3)]
        b = trigger(t.batch, t.BatchIn(nonce=f"{nonce}-b", group="b"))
        bad = trigger(t.batch, t.BatchIn(nonce=f"{nonce}-bad", group=7))
        problems: list[str] = []
        outs = {}
        for ref in a + [b]:
            wait_status(ref.workflow_run_id, "COMPLETED", 60)
            outs[ref.workflow_run_id] = next(iter(output_of(ref.workflow_run_id).values()))
        sizes = sorted(o["size"] for o in outs.values())
        if sizes != [1, 3, 3, 3]:
            problems.append(f"batch sizes {sizes}, want one batch of 3 (group a) and one of 1")
        for ref in a:
            o = outs[ref.workflow_run_id]
            if o["groups"] != ["a"] or len(o["members"]) != 3:
                problems.append(f"group a's batch: {o}")
        if outs[b.workflow_run_id]["groups"] != ["b"]:
            problems.append(f"group b's batch: {outs[b.workflow_run_id]}")
        wait_status(bad.workflow_run_id, "FAILED", 60)
        task = bounded(lambda: h.runs.get(bad.workflow_run_id), 30).tasks[0]
        if "failed to parse batch group key expression" not in (task.error_message or ""):
            problems.append(f"an int key failed with {task.error_message!r}")
        s1 = trigger(t.batch_sum, t.BatchIn(nonce=f"{nonce}-s1", group="x", n=2))
        s2 = trigger(t.batch_sum, t.BatchIn(nonce=f"{nonce}-s2", group="x", n=5))
        for ref in (s1, s2):
            wait_status(ref.workflow_run_id, "COMPLETED", 60)
            o = next(iter(output_of(ref.workflow_run_id).values()))
            if o != {"sum": 7, "size": 2}:
                problems.append(f"a broadcast member read {o}")
        log(f"p12 batch sizes {sizes}; the int key's error read back")
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    # ----- p13 -----
    def p13_durable_reset() -> None:
        nonce = uuid.uuid4().hex
        ref = trigger(t.reset_me, t.Msg(nonce=nonce))
        run_id = ref.workflow_run_id
        wait_status(run_id, "COMPLETED", 120)
        problems: list[str] = []

        def has_output() -> bool:
            return bool(next(iter(output_of(run_id).values())))

        wait_until("the first run's output", has_output, 30, 0.3)
        last = next(iter(output_of(run_id).values()))
        log(f"p13 first run slept {last['took']}")

        def rerun(node: int, branch: int, want_branch: int, cached: int) -> None:
            nonlocal last
            before = last["at"]
            resp = bounded(lambda: h.runs.reset_durable_task(run_id, node, branch), 30)
            if resp.branch_id != want_branch:
                problems.append(f"reset from node {node} of branch {branch} answered "
                                f"branch {resp.branch_id}, not {want_branch}")

            def rerun_done() -> bool:
                nonlocal last
                if status(run_id) != "COMPLETED":
                    return False
                out = next(iter(output_of(run_id).values()))
                # The real engine's details can say COMPLETED a moment before they carry the
                # output (the run's status and its task's output are written apart).
                if not out or out.get("at") == before:
                    return False
                last = out
                return True

            wait_until(f"the run reset from node {node} to complete again", rerun_done, 120, 0.5)
            took = last["took"]
            log(f"p13 reset from node {node} of branch {branch}: slept {took}")
            for i, d in enumerate(took):
                if i < cached and d >= 0.9:
                    problems.append(f"reset from node {node}: sleep {i + 1} took {d}s, "
                                    "not replayed")
                if i >= cached and d < 0.9:
                    problems.append(f"reset from node {node}: sleep {i + 1} took {d}s, "
                                    "not slept again")

        rerun(2, 1, 2, 1)
        rerun(3, 2, 3, 2)
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    # ----- p15 -----
    def p15_eviction_and_restore() -> None:
        from hatchet_sdk.clients.rest.api.task_api import TaskApi

        problems: list[str] = []

        def task_of(run_id: str):
            # REST: the SDK's gRPC details do not know the EVICTED status (5) both engines send
            try:
                tasks = bounded(lambda: h.runs.get(run_id), 15).tasks
            except Exception:  # noqa: BLE001 - the real engine's read trails the trigger
                return None
            return tasks[0] if tasks else None

        def invocations(n: str) -> int:
            m = markers / f"evictable-{n}"
            return len(m.read_text().split()) if m.exists() else 0

        # Restored by hand (the REST restore), then its event ends it; another is brought back
        # by its event alone.
        for by_hand in (True, False):
            n = uuid.uuid4().hex
            ref = trigger(t.evictable, t.Msg(nonce=n))
            run_id = ref.workflow_run_id
            wait_until(f"run {run_id} evicted by its policy",
                       lambda: bool(getattr(task_of(run_id), "is_evicted", False)), 30, 0.3)
            if invocations(n) != 1:
                problems.append(f"{invocations(n)} invocations before the restore")
            if by_hand:
                task_id = task_of(run_id).task_external_id
                with h.runs.client() as client:
                    bounded(lambda: TaskApi(client).v1_task_restore(task_id), 20)
                wait_until("a second invocation after the restore",
                           lambda: invocations(n) == 2, 30, 0.2)
            bounded(lambda: h.event.push(f"parity:wake:{n}", {"n": n}), 15)
            out = bounded(ref.result, 60)
            if not (isinstance(out, dict) and out.get("nonce") == n):
                problems.append(f"the restored run's output {out}")
            log(f"p15 {'restore' if by_hand else 'the event'}: {invocations(n)} invocations")
        expect(not problems, "; ".join(problems))

    # ----- p17 -----
    def p17_on_success() -> None:
        ok, bad = uuid.uuid4().hex, uuid.uuid4().hex
        out = bounded(lambda: trigger(t.on_success_wf, t.Num(nonce=ok, n=1)).result(), 60)
        expect(out.get("second_step", {}).get("n") == 20, f"the run's output {out}")
        wait_until("the on_success marker", mark(f"onsuccess-{ok}").exists, 30)
        ran = mark(f"onsuccess-{ok}").read_text().split()
        expect(len(ran) == 1, f"on_success ran {len(ran)} times")
        failing = trigger(t.on_success_wf, t.Num(nonce=bad, n=-1))
        wait_status(failing.workflow_run_id, "FAILED", 30)
        expect(not mark(f"onsuccess-{bad}").exists(), "on_success ran for a run whose task failed")

    # ----- p18 -----
    def p18_trigger_cron_now() -> None:
        # Neither SDK has a method for it; the Python SDK's generated REST client does
        # (WorkflowApi.workflow_cron_trigger), as p15 reaches the restore through TaskApi.
        from hatchet_sdk.clients.rest.api.workflow_api import WorkflowApi

        n = uuid.uuid4().hex
        cron = bounded(lambda: h.cron.create(
            t.on_success_wf.name, f"parity-now-{n}", "0 0 1 1 *", {"nonce": n, "n": 2}, {}), 15)
        try:
            with h.cron.client() as client:
                started = bounded(lambda: WorkflowApi(client).workflow_cron_trigger(
                    h.tenant_id, cron.metadata.id), 15)
            run_id = started.external_id
            wait_status(run_id, "COMPLETED", 60)
            out = output_of(run_id)
            expect(out.get("second_step", {}).get("n") == 30, f"the cron's run output {out}")
            expect(mark(f"onsuccess-{n}").exists(), "the cron's run did not run on_success")
            still = [c for c in bounded(lambda: h.cron.list(), 15).rows or []
                     if c.metadata.id == cron.metadata.id]
            expect(len(still) == 1, "triggering the cron now consumed it")
        finally:
            bounded(lambda: h.cron.delete(cron.metadata.id), 15)

    # ----- p16 -----
    def p16_durable_children() -> None:
        problems: list[str] = []
        n = uuid.uuid4().hex

        def task_of(run_id: str):
            try:  # REST, as in p15: the SDK's gRPC details do not know EVICTED (5)
                tasks = bounded(lambda: h.runs.get(run_id), 15).tasks
            except Exception:  # noqa: BLE001 - the real engine's read trails the trigger
                return None
            return tasks[0] if tasks else None

        def count(name: str) -> int:
            m = markers / name
            return len(m.read_text().split()) if m.exists() else 0

        ref = trigger(t.durable_parent, t.Msg(nonce=n))
        run_id = ref.workflow_run_id
        # The first child runs 4 s; the parent's policy evicts it after 1 s of waiting.
        wait_until(f"parent {run_id} evicted while its first child runs",
                   lambda: bool(getattr(task_of(run_id), "is_evicted", False)), 30, 0.2)
        if count(f"kid-{n}-0") != 1:
            problems.append(f"the first child ran {count(f'kid-{n}-0')} times before the "
                            "parent's eviction was read")
        out = bounded(ref.result, 90)
        parent_out = next(iter(out.values())) if isinstance(out, dict) and "nonce" not in out \
            else out
        first = parent_out.get("first") if isinstance(parent_out, dict) else None
        rest = parent_out.get("rest") if isinstance(parent_out, dict) else None
        if first != {"nonce": n, "i": 0}:
            problems.append(f"the first child's result read {first!r} in the parent")
        if rest != [{"nonce": n, "i": i} for i in (1, 2, 3)]:
            problems.append(f"run_many's results read {rest!r} in the parent")
        # The child's completion restored the parent: a second invocation, which replayed the
        # first spawn from the durable log instead of spawning again.
        if count(f"dparent-{n}") < 2:
            problems.append(f"{count(f'dparent-{n}')} parent invocation(s); the eviction and "
                            "the child's completion should have started a second")
        for i in range(4):
            if count(f"kid-{n}-{i}") != 1:
                problems.append(f"child {i} ran {count(f'kid-{n}-{i}')} times, not once")
        # Runs at the engine: the parent's children, by its task id.
        parent_task = task_of(run_id)
        kids: list = []

        def four_kids() -> bool:
            nonlocal kids
            kids = bounded(lambda: h.runs.list(
                parent_task_external_id=parent_task.task_external_id,
                since=datetime.datetime.now(UTC) - datetime.timedelta(hours=1),
                limit=50), 15).rows or []
            return len(kids) >= 4

        try:
            wait_until("the parent's four child runs listed", four_kids, 30, 0.5)
        except TimeoutError:
            pass
        if len(kids) != 4:
            problems.append(f"{len(kids)} child runs at the engine, not 4")
        log(f"p16 durable children: {count(f'dparent-{n}')} parent invocations, "
            f"{len(kids)} child runs, {sum(count(f'kid-{n}-{i}') for i in range(4))} executions")
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    # ----- p14 -----
    def p14_traces() -> None:
        from hatchet_sdk.clients.rest.api.observability_api import ObservabilityApi
        from hatchet_sdk.opentelemetry.instrumentor import HatchetInstrumentor

        if "otel" not in procs:  # its runs below wait for it to be up
            procs["otel"] = start_worker("otel", session)
        for wf in t.OTEL_WORKFLOWS:  # registered as its worker will register them
            bounded(lambda wf=wf: h._client.admin.put_workflow(wf.to_proto()), 15)
        HatchetInstrumentor().instrument()
        nonce = uuid.uuid4().hex
        problems: list[str] = []

        def trace_of(run_id: str, want: int) -> list:
            spans: list = []

            def enough() -> bool:
                nonlocal spans
                with h.runs.client() as client:
                    try:
                        got = ObservabilityApi(client).v1_observability_get_trace(
                            h.tenant_id, run_id)
                    except Exception:  # noqa: BLE001 - 404 until the spans are written
                        return False
                spans = got.rows or []
                return len(spans) >= want

            try:
                wait_until(f"{want} spans in run {run_id}'s trace", enough, 60, 0.5)
            except TimeoutError:
                pass
            time.sleep(1.5)  # later exports would show as too many spans
            enough()
            return spans

        def judge(what: str, spans: list, want: int, names: set[str]) -> None:
            got = sorted(s.span_name for s in spans)
            if len(spans) != want:
                problems.append(f"{what}: {len(spans)} spans, want {want}: {got}")
            if {s.span_name for s in spans} != names:
                problems.append(f"{what}: span names {sorted({s.span_name for s in spans})}, "
                                f"want {sorted(names)}")
            if len({s.trace_id for s in spans}) != 1:
                problems.append(f"{what}: {len({s.trace_id for s in spans})} trace ids")
            if len({s.span_id for s in spans}) != len(spans):
                problems.append(f"{what}: a span id repeats")

        base = {"hatchet.run_workflow", "hatchet.engine.workflow_run", "hatchet.engine.queued",
                "hatchet.start_step_run", "hatchet.engine.start_step_run", "parity.work"}
        ref = trigger(t.traced, t.Traced(nonce=f"{nonce}-run", note="direct"))
        wait_status(ref.workflow_run_id, "COMPLETED", 60)
        spans = trace_of(ref.workflow_run_id, 6)
        judge("a run", spans, 6, base)
        step = [s for s in spans if s.span_name == "hatchet.start_step_run"]
        if step and (step[0].span_attributes or {}).get("hatchet.workflow_run_id") \
                != ref.workflow_run_id:
            problems.append(f"the SDK's step span names {step[0].span_attributes}")
        work_spans = [s for s in spans if s.span_name == "parity.work"]
        if work_spans and (work_spans[0].span_attributes or {}).get("parity.note") != "direct":
            problems.append(f"the task's own span reads {work_spans[0].span_attributes}")

        event = bounded(lambda: h.event.push("parity:traced",
                                             {"nonce": f"{nonce}-ev", "note": "event"}), 15)
        run_id = None

        def event_run_done() -> bool:
            nonlocal run_id
            rows = bounded(lambda: h.runs.list(triggering_event_external_id=event.event_id),
                           30).rows or []
            done = [r for r in rows if str(r.status).endswith("COMPLETED")]
            if done:
                run_id = done[0].task_external_id
            return bool(done)

        wait_until("the event's run to complete", event_run_done, 60, 0.5)
        spans = trace_of(run_id, 7)
        judge("an event's run", spans, 7,
              (base - {"hatchet.run_workflow"}) | {"hatchet.push_event", "hatchet.engine.event"})
        ev = [s for s in spans if s.span_name == "hatchet.engine.event"]
        if ev and (ev[0].span_attributes or {}).get("hatchet.event_key") \
                != h.config.apply_namespace("parity:traced"):
            problems.append(f"the engine's event span reads {ev[0].span_attributes}")

        ref = trigger(t.traced_parent, t.Traced(nonce=f"{nonce}-parent"))
        wait_status(ref.workflow_run_id, "COMPLETED", 60)
        spans = trace_of(ref.workflow_run_id, 12)
        judge("a parent and its child", spans, 12, base | {"parity.spawn"})
        log(f"p14 traces: {len(spans)} spans in the parent's trace")
        expect(not problems, "\n    ".join([f"{len(problems)} problem(s):"] + problems))

    checks = [
        ("p1", "p1 on_failure task runs and reads the error", p1_on_failure),
        ("p2", "p2 runs.cancel(run_id) cancels a running task", p2_cancel_by_id),
        ("p3", "p3 runs.bulk_cancel by additional-metadata filter", p3_bulk_cancel_by_metadata),
        ("p4", "p4 runs.replay / bulk_replay re-run a failed run", p4_replay),
        ("p5", "p5 run_many and event.bulk_push", p5_bulk),
        ("p6", "p6 queued runs execute highest priority first", p6_priority),
        ("p7", "p7 ctx.log lines read back with logs.list", p7_logs),
        ("p9", "p9 refresh_timeout, release_slot, additional_metadata", p9_task_context),
        ("p8", "p8 strict REST reads in every run state", p8_strict_reads),
        ("p10", "p10 workflows pause/delete, workers pause, events list, metrics",
         p10_rest_of_the_api),
        ("p11", "p11 webhooks: create/list/get/delete, an HMAC-signed request becomes an event",
         p11_webhooks),
        ("p12", "p12 batch tasks: size and interval flushes, keys, a bad key, broadcast output",
         p12_batch_tasks),
        ("p13", "p13 durable reset: a branch from a node replays what came before it",
         p13_durable_reset),
        ("p14", "p14 traces: the SDK's and the engine's spans in one trace per run",
         p14_traces),
        ("p15", "p15 durable eviction by policy; restored by REST and by the event",
         p15_eviction_and_restore),
        ("p16", "p16 durable children over the durable stream; evicted while waiting, replayed "
                "without a re-spawn", p16_durable_children),
        ("p17", "p17 on_success runs once after every task, skipped when a task fails",
         p17_on_success),
        ("p18", "p18 a cron triggered now (the SDK's REST client) runs with its input",
         p18_trigger_cron_now),
    ]
    for key, name, fn in checks:
        if not only or key in only:
            check(name, fn)


def body(session: Session) -> None:
    import parity_tasks as t
    procs: dict[str, subprocess.Popen[bytes]] = {"main": start_worker("main", session)}
    wait_registered(session.hs, "parity-main", {"parity-slow:parity-slow"}, procs["main"], 40)
    # Workflows no worker serves yet: registered the way a worker registers them.
    for wf in (t.prio_wf, t.release, t.hold, t.quick, t.orphan, t.doomed):
        bounded(lambda wf=wf: t.hatchet._client.admin.put_workflow(wf.to_proto()), 15)
    run_checks(session, procs)


if __name__ == "__main__":
    drive("hatchet-parity-", body, client_env={"HATCHET_CLIENT_TENACITY_MAX_ATTEMPTS": "2"})
