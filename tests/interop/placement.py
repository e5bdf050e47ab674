"""SDK parity (2): placement and conditional execution with the official Python SDK against
hatchet-dev-engine. Two SDK workers serve identical actions (placement_tasks.py):
`placement-a` (labels model=fast, memory=1024) and `placement-b` (model=slow, memory=256).
One counted check each:
  q1. worker labels: a task requiring model=fast runs only on placement-a; run-level
      desired_worker_labels (required model=slow) replace the task's own and move it to
      placement-b; a task requiring zone=east (no worker has it) stays QUEUED while another
      runs; optional weighted labels (with an int GREATER_THAN_OR_EQUAL comparator) prefer the
      worker with the higher total weight, and swapping the weights swaps the worker; a task
      on placement-b calls ctx.aio_upsert_worker_labels({"zone": "east"}) and the queued
      zone=east run then starts there;
  q2. sticky: workflows with sticky=SOFT and sticky=HARD (a 4-task DAG whose first task spawns
      a sticky child with `sticky=True`) run every task and the child on the worker that ran
      the first task, also when the run is triggered with `sticky=True, desired_worker_id=`
      (either worker) to choose that worker;
  q3. conditions in a DAG: wait_for a 2 s sleep, a user event with an expression on its
      payload (a non-matching push does not release it), a parent's output (ParentCondition
      with an expression), an or_(never-pushed event, 2 s sleep) group; skip_if on the
      parent's output: the skipped task reads back {"skipped": true} (COMPLETED), its only
      child is skipped too, a child with other parents runs and sees ctx.was_skipped; cancel_if
      on the parent's output: the run reads back CANCELLED, the task and its child never run,
      and with a false expression the same workflow completes;
  q4. durable `ctx.aio_wait_for(or_(sleep, event))`: the pushed event wins (result key = the
      event key, item = its payload) well before the sleep; another run's sleep wins
      (key `sleep:3s`, item {"sleep_duration": "3s"});
  q5. event filters: hatchet.filters create / get / list (by workflow and scope) / update /
      delete; events pushed with a scope start placement-filtered once per filter whose
      expression is true (ctx.filter_payload = that filter's payload), not at all for another
      scope or no scope, and once (empty filter payload) when it has no filters left; the
      filterless placement-unfiltered on the same key runs once per event.
Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional, for run.sh's trap),
INTEROP_KEEP=1 to keep the work dir, PLACEMENT_ONLY=q1,q3 to run only some checks.
"""

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

from interop_harness import Session, drive, real_engine, short, wait_registered
from interop_util import bounded, check, expect, log, wait_until

HERE = Path(__file__).resolve().parent
WORKERS = ("a", "b")


class Budget:
    """A check's time budget: `B(cap)` is the bound for one wait, at most `cap` seconds and
    never past the check's deadline (TimeoutError once that has passed), so a check ends in
    its budget even when every call hangs."""

    def __init__(self) -> None:
        self.end = time.monotonic()

    def reset(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def __call__(self, cap: float) -> float:
        left = self.end - time.monotonic()
        if left < 0.5:
            raise TimeoutError("the check's time budget is used up")
        return min(cap, left)


def start_worker(which: str, session: Session) -> subprocess.Popen[bytes]:
    return session.python(f"worker-{which}", "placement_worker.py", which,
                          HATCHET_CLIENT_TENACITY_MAX_ATTEMPTS="5",
                          INTEROP_WORKER_NAME=f"placement-{which}")


def run_checks(markers: Path) -> None:
    import placement_tasks as t  # builds Hatchet() from the env set by main()
    from hatchet_sdk.clients.rest.models.v1_update_filter_request import V1UpdateFilterRequest

    h = t.hatchet
    only = {x.strip() for x in os.environ.get("PLACEMENT_ONLY", "").split(",") if x.strip()}
    B = Budget()  # every wait of a check draws on that check's budget (set before it runs)

    def mark(name: str) -> Path:
        return markers / name

    def status(run_id: str) -> str:
        return str(bounded(lambda: h.runs.get_status(run_id), B(30))).split(".")[-1]

    def trigger(task, inp, **kw):
        return bounded(lambda: task.run(inp, wait_for_result=False, **kw), B(15))

    def details(run_id: str):
        return bounded(lambda: h.runs.get_details(run_id), B(15))

    def task_statuses(d) -> dict[str, str]:
        return {k: str(v.status).split(".")[-1] for k, v in sorted(d.task_runs.items())}

    def cancel_quietly(run_id: str) -> None:
        try:  # cleanup: outside the budget, short; cancelling a finished run is a no-op
            bounded(lambda: h.runs.cancel(run_id), 5)
        except Exception:  # noqa: BLE001 - cleanup only
            pass

    # ----- q1 -----
    def q1_worker_labels() -> None:
        nonce = uuid.uuid4().hex
        problems: list[str] = []

        def ran_on(refs) -> list[str]:
            return [bounded(r.result, B(30)).get("worker", "?") for r in refs]

        try:  # (a) required model=fast, six at once
            refs = [trigger(t.fast_only, t.Msg(nonce=f"{nonce}-fast-{i}")) for i in range(6)]
            got = ran_on(refs)
            log(f"q1 required model=fast ran on {got}")
            if set(got) != {"placement-a"}:
                problems.append(f"(a) required model=fast ran on {got}, want only placement-a")
        except Exception as e:  # noqa: BLE001
            problems.append(f"(a) required model=fast: {short(e)}")
        try:  # (b) run-level labels replace the task's labels
            refs = [trigger(t.fast_only, t.Msg(nonce=f"{nonce}-override-{i}"),
                            desired_worker_labels=[t.want("model", "slow", required=True)])
                    for i in range(3)]
            got = ran_on(refs)
            log(f"q1 run-level required model=slow (task wants fast) ran on {got}")
            if set(got) != {"placement-b"}:
                problems.append(f"(b) run-level desired_worker_labels model=slow ran on {got}, "
                                "want only placement-b")
        except Exception as e:  # noqa: BLE001
            problems.append(f"(b) run-level desired_worker_labels: {short(e)}")
        # (c) required zone=east: no worker has it; it stays QUEUED while another run runs
        zone_ref = None
        zone_queued = False
        try:
            zone_ref = trigger(t.needs_zone, t.Msg(nonce=f"{nonce}-zone"))
            other = bounded(lambda: t.slow_only.run(t.Msg(nonce=f"{nonce}-other")), B(30))
            if other.get("worker") != "placement-b":
                problems.append(f"(c) required model=slow ran on {other.get('worker')}")
            time.sleep(1.0)
            s = status(zone_ref.workflow_run_id)
            zone_queued = s == "QUEUED"
            log(f"q1 required zone=east (no worker has it) reads {s}")
            if not zone_queued:
                problems.append(f"(c) the run requiring zone=east is {s}, want QUEUED")
        except Exception as e:  # noqa: BLE001
            problems.append(f"(c) required zone=east: {short(e)}")
        # (d) optional labels: the higher total weight wins; swapping the weights swaps workers
        for task, want_worker in ((t.prefer_memory, "placement-a"),
                                  (t.prefer_model, "placement-b")):
            try:
                got = [bounded(lambda i=i: task.run(t.Msg(nonce=f"{nonce}-{task.name}-{i}")),
                               B(20)).get("worker", "?") for i in range(3)]
                log(f"q1 {task.name} ran on {got}")
                if set(got) != {want_worker}:
                    problems.append(f"(d) {task.name} ran on {got}, want only {want_worker}")
            except Exception as e:  # noqa: BLE001
                problems.append(f"(d) {task.name}: {short(e)}")
        # (e) a task upserts zone=east on its worker: the queued run starts there
        try:
            out = bounded(lambda: t.relabel.run(t.Msg(nonce=f"{nonce}-relabel")), B(30))
            log(f"q1 relabel ran on {out.get('worker')}; its ctx.worker_labels "
                f"{out.get('labels_now')}")
            try:
                w = bounded(lambda: h.workers.get(out["worker_id"]), B(15))
                log("q1 REST labels of that worker: "
                    f"{sorted((x.key, x.value) for x in w.labels or [])}")
            except Exception as e:  # noqa: BLE001 - informational
                log(f"q1 workers.get({out.get('worker_id')}): {short(e, 200)}")
            if zone_ref is not None:
                zone_out = bounded(zone_ref.result, B(20))
                log(f"q1 the zone=east run ran on {zone_out.get('worker')}")
                if zone_out.get("worker") != out.get("worker"):
                    problems.append(f"(e) the zone=east run ran on {zone_out.get('worker')}, "
                                    f"not on the relabelled {out.get('worker')}")
                elif not zone_queued:
                    problems.append("(e) not shown: the zone=east run was not held before "
                                    "the upsert")
        except Exception as e:  # noqa: BLE001
            problems.append(f"(e) upsert_worker_labels then placement: {short(e)}")
        finally:
            if zone_ref is not None:
                cancel_quietly(zone_ref.workflow_run_id)
        expect(not problems, "; ".join(problems))

    # ----- q2 -----
    def q2_sticky() -> None:
        nonce = uuid.uuid4().hex
        problems: list[str] = []
        ids = {w.name: w.metadata.id for w in bounded(h.workers.list, B(15)).rows or []
               if str(w.status).split(".")[-1] == "ACTIVE"}
        expect({"placement-a", "placement-b"} <= set(ids), f"active workers {sorted(ids)}")
        # One run placed by the engine, then runs whose first task is sent to a chosen worker
        # (the SDK sends TriggerWorkflowRequest.desired_worker_id only with sticky=True): every
        # task and the sticky child must follow the first task.
        plan = [None, "placement-a", "placement-b", "placement-a", "placement-b"]
        for wf, tag in ((t.sticky_soft, "SOFT"), (t.sticky_hard, "HARD")):
            try:
                refs = [trigger(wf, t.Msg(nonce=f"{nonce}-{tag}-{i}"))
                        if target is None else
                        trigger(wf, t.Msg(nonce=f"{nonce}-{tag}-{i}"), sticky=True,
                                desired_worker_id=ids[target])
                        for i, target in enumerate(plan)]
                firsts = []
                for i, (target, r) in enumerate(zip(plan, refs)):
                    out = bounded(r.result, B(40))
                    placed = {k: out[k]["worker"] for k in ("first", "second", "third", "fourth")}
                    placed["child"] = out["first"]["child"]["worker"]
                    firsts.append(placed["first"])
                    label = f"{tag} run {i}" + (f" (desired_worker_id {target})" if target else "")
                    # SOFT is a preference: the real engine falls back to another worker when
                    # the sticky one has no free slot at that moment, so only HARD is held to it
                    # there (our engine keeps SOFT runs together whenever the worker lives).
                    strict = tag == "HARD" or not real_engine()
                    if strict and len(set(placed.values())) != 1:
                        problems.append(f"{label}: {placed}")
                    elif strict and target and placed["first"] != target:
                        problems.append(f"{label}: everything ran on {placed['first']}")
                log(f"q2 {tag}: first tasks ran on {firsts} (desired {plan})")
            except Exception as e:  # noqa: BLE001
                problems.append(f"{tag}: {short(e)}")
        expect(not problems, "; ".join(problems))

    # ----- q3 -----
    def q3_conditions() -> None:
        nonce = uuid.uuid4().hex
        problems: list[str] = []
        ref = trigger(t.cond_wf, t.Num(nonce=nonce, n=10))
        k_yes = trigger(t.cancel_wf, t.Num(nonce=f"{nonce}-k10", n=10))
        k_no = trigger(t.cancel_wf, t.Num(nonce=f"{nonce}-k1", n=1))
        try:
            wait_until("the DAG's first task", mark(f"cond-start-{nonce}").exists, B(20))
            time.sleep(1.5)  # the parent is done; its children's conditions are registered
            bounded(lambda: h.event.push(t.COND_EVENT, {"go": False, "nonce": nonce}), B(15))
            time.sleep(1.5)
            if mark(f"cond-event-ran-{nonce}").exists():
                problems.append("wait_for event: released by a payload failing "
                                "`input.go == true`")
            pushed_at = time.time()
            bounded(lambda: h.event.push(t.COND_EVENT, {"go": True, "nonce": nonce}), B(15))
            out = None
            try:
                out = bounded(ref.result, B(30))
            except Exception as e:  # noqa: BLE001
                try:
                    d = details(ref.workflow_run_id)
                    now = f"run {str(d.status).split('.')[-1]}, tasks {task_statuses(d)}"
                except Exception as e2:  # noqa: BLE001
                    now = f"details: {short(e2, 200)}"
                problems.append(f"the DAG run did not complete ({short(e, 200)}); {now}")
            if out is not None:
                log("q3 DAG outputs " + json.dumps(out, default=str)[:1500])
                t0 = out.get("c_start", {}).get("t", 0)
                for name, least in (("c_sleep", 1.9), ("c_either", 1.9)):
                    dt = out.get(name, {}).get("t", 0) - t0
                    if dt < least:
                        problems.append(f"{name} started {dt:.2f}s after c_start, want >= 2 s")
                dt = out.get("c_either", {}).get("t", 0) - t0
                if dt > 20:
                    problems.append(f"c_either (or_ of a never-pushed event and a 2 s sleep) "
                                    f"started only after {dt:.1f}s")
                if out.get("c_event", {}).get("t", 0) < pushed_at - 0.5:
                    problems.append("c_event started before the matching event was pushed")
                if out.get("c_parent", {}).get("start_n") != 10:
                    problems.append(f"c_parent output {out.get('c_parent')}")
                for name in ("c_skipped", "c_after_skip"):
                    if out.get(name) != {"skipped": True}:
                        problems.append(f"{name} output is {out.get(name)!r}, want "
                                        "{'skipped': True}")
                want_skips = {"c_skipped": True, "c_sleep": False, "c_event": False,
                              "c_parent": False, "c_either": False}
                if out.get("c_join", {}).get("was_skipped") != want_skips:
                    problems.append(f"c_join saw was_skipped {out.get('c_join')}, want "
                                    f"{want_skips}")
                log("q3 triggers seen: " + json.dumps(
                    {k: out.get(k, {}).get("triggers") for k in ("c_sleep", "c_event",
                                                                 "c_either")}))
                d = details(ref.workflow_run_id)
                ts = task_statuses(d)
                log(f"q3 DAG run {str(d.status).split('.')[-1]}, tasks {ts}")
                if set(ts.values()) != {"COMPLETED"} or len(ts) != 8:
                    problems.append(f"GetRunDetails task statuses {ts}, want 8 COMPLETED")
            for m in (f"cond-skipped-ran-{nonce}", f"cond-after-skip-ran-{nonce}"):
                if mark(m).exists():
                    problems.append(f"a task that must be skipped ran ({m})")
        except Exception as e:  # noqa: BLE001
            problems.append(f"conditions DAG: {short(e)}")
        # cancel_if: n=10 cancels k_target (and so k_down); n=1 runs everything
        try:
            def done(run_id: str):
                d = details(run_id)
                return d if d.done else None

            try:
                d = wait_until("the cancel_if run to finish",
                               lambda: done(k_yes.workflow_run_id), B(20), 0.5)
                ts = task_statuses(d)
                run_status = str(d.status).split(".")[-1]
                log(f"q3 cancel_if (true) run {run_status}, tasks {ts}")
                if run_status != "CANCELLED":
                    problems.append(f"cancel_if true: run {run_status}, want CANCELLED")
                for name in ("k_target", "k_down"):
                    if ts.get(name, "CANCELLED") != "CANCELLED":
                        problems.append(f"cancel_if true: {name} is {ts.get(name)}")
                if ts.get("k_start") != "COMPLETED":
                    problems.append(f"cancel_if true: k_start is {ts.get('k_start')}")
            except TimeoutError as e:
                d = details(k_yes.workflow_run_id)
                problems.append(f"cancel_if true: {e}; run {str(d.status).split('.')[-1]}, "
                                f"tasks {task_statuses(d)}")
            for m in ("cancel-target-ran", "cancel-down-ran"):
                if mark(f"{m}-{nonce}-k10").exists():
                    problems.append(f"cancel_if true: {m.replace('cancel-', '')} on the worker")
            out = bounded(k_no.result, B(20))
            if out.get("k_target") != {"ran": True} or out.get("k_down") != {"ran": True}:
                problems.append(f"cancel_if false: outputs {out}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"cancel_if: {short(e)}")
        finally:
            for r in (ref, k_yes, k_no):
                cancel_quietly(r.workflow_run_id)
        expect(not problems, "; ".join(problems))

    # ----- q4 -----
    def q4_durable_or() -> None:
        ev, sl = uuid.uuid4().hex, uuid.uuid4().hex
        problems: list[str] = []
        r_ev = trigger(t.durable_or, t.DurableIn(nonce=ev, sleep_s=40))
        r_sl = trigger(t.durable_or, t.DurableIn(nonce=sl, sleep_s=3))
        try:
            wait_until("the durable task to start waiting", mark(f"durable-waiting-{ev}").exists,
                       B(20))
            time.sleep(1.5)  # the wait is registered right after the marker
            bounded(lambda: h.event.push(t.DURABLE_EVENT, {"nonce": ev, "who": "event"}), B(15))
            out = bounded(r_ev.result, B(25))
            log(f"q4 event side: {out}")
            got = (out.get("result") or {}).get("CREATE") or {}
            if out.get("fired") != [t.DURABLE_EVENT]:
                problems.append(f"event pushed: fired keys {out.get('fired')}, want "
                                f"[{t.DURABLE_EVENT!r}]")
            elif got[t.DURABLE_EVENT] != [{"nonce": ev, "who": "event"}]:
                problems.append(f"event pushed: item {got[t.DURABLE_EVENT]!r}")
            if not out.get("waited_s", 99) < 20:
                problems.append(f"event pushed: waited {out.get('waited_s')}s")
        except Exception as e:  # noqa: BLE001
            problems.append(f"event side: {short(e)}")
        try:
            out = bounded(r_sl.result, B(20))
            log(f"q4 sleep side: {out}")
            got = (out.get("result") or {}).get("CREATE") or {}
            if out.get("fired") != ["sleep:3s"]:
                problems.append(f"sleep first: fired keys {out.get('fired')}, want ['sleep:3s']")
            elif got["sleep:3s"] != [{"sleep_duration": "3s"}]:
                problems.append(f"sleep first: item {got['sleep:3s']!r}")
            if not 2.9 <= out.get("waited_s", 0) < 20:
                problems.append(f"sleep first: waited {out.get('waited_s')}s, want ~3 s")
        except Exception as e:  # noqa: BLE001
            problems.append(f"sleep side: {short(e)}")
        finally:
            for r in (r_ev, r_sl):
                cancel_quietly(r.workflow_run_id)
        expect(not problems, "; ".join(problems))

    # ----- q5 -----
    def q5_filters() -> None:
        nonce = uuid.uuid4().hex[:12]
        scope = f"scope-{nonce}"
        problems: list[str] = []
        rows = bounded(lambda: h.workflows.list(workflow_name="placement-filtered"), B(30)).rows
        wid = next((w.metadata.id for w in rows or [] if w.name == "placement-filtered"), None)
        expect(wid is not None, "workflows.list() does not show placement-filtered")

        # create / get / list / update, through the SDK's pydantic models
        f1 = bounded(lambda: h.filters.create(wid, "input.amount > 10", scope,
                                              {"tag": "f1", "nonce": nonce}), B(15))
        f2 = bounded(lambda: h.filters.create(wid, "input.amount > 100", scope, {"tag": "f2"}),
                     B(15))
        log("q5 created " + json.dumps(f1.to_dict(), default=str))
        if (f1.workflow_id, f1.scope, f1.expression, f1.payload) != (
                wid, scope, "input.amount > 10", {"tag": "f1", "nonce": nonce}):
            problems.append(f"create answered {f1.to_dict()}")
        got = bounded(lambda: h.filters.get(f1.metadata.id), B(15))
        if got.metadata.id != f1.metadata.id or got.expression != "input.amount > 10":
            problems.append(f"get answered {got.to_dict()}")
        listed = bounded(lambda: h.filters.list(workflow_ids=[wid], scopes=[scope]), B(15))
        ids = {f.metadata.id for f in listed.rows or []}
        if ids != {f1.metadata.id, f2.metadata.id}:
            problems.append(f"list(workflow_ids, scopes) gave {len(ids)} filters, want f1, f2")
        elsewhere = bounded(lambda: h.filters.list(scopes=[f"nope-{nonce}"]), B(15))
        if elsewhere.rows:
            problems.append(f"list(scopes=[unused]) gave {len(elsewhere.rows)} filters")
        upd = bounded(lambda: h.filters.update(f2.metadata.id, V1UpdateFilterRequest(
            expression="input.amount > 1000", payload={"tag": "f2", "v": 2})), B(15))
        if (upd.expression, upd.scope, upd.payload) != ("input.amount > 1000", scope,
                                                        {"tag": "f2", "v": 2}):
            problems.append(f"update answered {upd.to_dict()}")

        def push_and_collect(plan: list[tuple[str, int, str | None, list[str]]]) -> None:
            """Push one event per plan row; then compare the filter payload tags of the
            placement-filtered runs per event with the row's expectation."""
            for name, amount, sc, _ in plan:
                bounded(lambda: h.event.push(t.FILTER_EVENT,
                                             {"mark": f"{nonce}-{name}", "amount": amount},
                                             scope=sc), B(15))

            def unfiltered_all() -> bool:
                return all(list(markers.glob(f"unfiltered-{nonce}-{name}-*"))
                           for name, *_ in plan)

            try:  # the filterless control workflow runs once per event
                wait_until("placement-unfiltered runs for every event", unfiltered_all, B(20), 0.3)
            except TimeoutError as e:
                problems.append(str(e))
            time.sleep(1.5)  # filtered runs are created with the same push
            for name, amount, sc, want_tags in plan:
                runs = [json.loads(p.read_text())
                        for p in markers.glob(f"filtered-{nonce}-{name}-*")]
                tags = sorted(str(r["filter_payload"].get("tag", "<none>")) for r in runs)
                if tags != sorted(want_tags):
                    problems.append(f"event {name} (amount {amount}, scope "
                                    f"{'ours' if sc == scope else sc}) started "
                                    f"placement-filtered with filter payloads {tags}, want "
                                    f"{sorted(want_tags)}")
                for r in runs:
                    if r["filter_payload"].get("tag") == "f1" and r["filter_payload"] != {
                            "tag": "f1", "nonce": nonce}:
                        problems.append(f"event {name}: ctx.filter_payload {r['filter_payload']}")
                n_unf = len(list(markers.glob(f"unfiltered-{nonce}-{name}-*")))
                if n_unf != 1:
                    problems.append(f"event {name}: placement-unfiltered ran {n_unf} times")

        push_and_collect([
            ("e1", 50, scope, ["f1"]),
            ("e2", 5, scope, []),
            ("e3", 50, f"elsewhere-{nonce}", []),
            ("e4", 50, None, []),
            ("e5", 5000, scope, ["f1", "f2"]),
        ])
        # delete f1: only f2 (updated) is left
        gone = bounded(lambda: h.filters.delete(f1.metadata.id), B(15))
        if gone.metadata.id != f1.metadata.id:
            problems.append(f"delete answered {gone.to_dict()}")
        listed = bounded(lambda: h.filters.list(workflow_ids=[wid]), B(15))
        if {f.metadata.id for f in listed.rows or []} != {f2.metadata.id}:
            problems.append("after delete, list(workflow_ids) does not show exactly f2")
        push_and_collect([("e6", 5000, scope, ["f2"])])
        # delete f2: a workflow with no filters is triggered once, whatever the scope
        bounded(lambda: h.filters.delete(f2.metadata.id), B(15))
        push_and_collect([("e7", 50, scope, ["<none>"])])
        expect(not problems, "; ".join(problems))

    checks = [  # (key, name, function, time budget in seconds)
        ("q1", "q1 worker labels steer placement (required, weights, upsert)", q1_worker_labels,
         50),
        ("q2", "q2 sticky SOFT/HARD keep a DAG and its sticky child on one worker", q2_sticky,
         40),
        ("q3", "q3 DAG conditions: wait_for, skip_if, cancel_if, or_ groups", q3_conditions, 55),
        ("q4", "q4 durable aio_wait_for(or_(sleep, event)) reports which fired", q4_durable_or,
         35),
        ("q5", "q5 event filters: CRUD, scopes, filter payload", q5_filters, 40),
    ]
    for key, name, fn, budget in checks:
        if not only or key in only:
            B.reset(budget)
            check(name, fn)


def body(session: Session) -> None:
    procs = {which: start_worker(which, session) for which in WORKERS}
    for which in WORKERS:
        wait_registered(session.hs, f"placement-{which}",
                        {"placement-fast-only:placement-fast-only",
                         "placement-conditions:c_join",
                         "placement-durable-or:placement-durable-or"},
                        procs[which], 40)
    run_checks(session.markers)


if __name__ == "__main__":
    drive("hatchet-placement-", body, client_env={"HATCHET_CLIENT_TENACITY_MAX_ATTEMPTS": "2"})
