"""Interop proof: the official Python SDK (hatchet-sdk) against hatchet-dev-engine.

Starts the engine the way the SDK's embedded mode does (`-handshake-file F`, stdin pipe,
free ports), points the SDK at it with plain HATCHET_CLIENT_* env, starts a real SDK worker
(interop_worker.py) in its own process group, and proves, one counted check each:
  a. the worker registers its tasks (REST worker list shows it ACTIVE with all actions);
  b. sync `run()` returns the task's output;
  c. `aio_run()` returns the task's output;
  d. `event.push()` triggers the `on_events` task on the worker (its marker file records the
     triggering event key);
  e. a durable task sleeps 2 s, then waits for an event the client pushes later, and returns
     proof of both waits;
  f. the engine exits when its stdin closes (the embedded-mode contract).
Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional, for run.sh's trap),
INTEROP_LENIENT_REST=1 to skip reading the worker list through the SDK's REST models (check a),
INTEROP_KEEP=1 to keep the work dir (logs, markers) after a passing run.
"""

import asyncio
import datetime
import os
import subprocess
import time
import urllib.request
import urllib.parse
import uuid
from pathlib import Path

from interop_harness import Session, drive, rest_get
from interop_util import bounded, check, expect, log, wait_until

HERE = Path(__file__).resolve().parent
WORKER_NAME = "interop-worker"


def run_checks(hs: dict[str, str], markers: Path, worker: subprocess.Popen[bytes]) -> None:
    import interop_tasks as t  # builds Hatchet() from the env set by main()

    def a_worker_registers() -> None:
        wanted = {f"{w.name}:{w.name}" for w in t.ALL_WORKFLOWS}

        def registered() -> bool:
            expect(worker.poll() is None, f"worker process exited with {worker.returncode}")
            # Plain JSON first (cheap to poll); then once through the SDK's own REST models,
            # which proves the engine's worker JSON matches them.
            rows = rest_get(hs, f"/api/v1/tenants/{hs['tenant_id']}/worker")["rows"]
            return any(w["name"] == WORKER_NAME and w.get("status") == "ACTIVE"
                       and wanted <= set(w.get("actions") or []) for w in rows)

        wait_until(f"worker {WORKER_NAME} ACTIVE with {sorted(wanted)}", registered, 40, 0.5)
        if os.environ.get("INTEROP_LENIENT_REST") != "1":
            names = [w.name for w in bounded(t.hatchet.workers.list, 10).rows or []]
            expect(WORKER_NAME in names, f"SDK workers.list() shows only {names}")

    def b_sync_run() -> None:
        nonce = uuid.uuid4().hex
        out = bounded(lambda: t.echo.run(t.Msg(nonce=nonce)), 30)
        expect(out == {"nonce": nonce, "mark": t.ECHO_MARK}, f"unexpected output {out!r}")

    def c_aio_run() -> None:
        nonce = uuid.uuid4().hex
        out = bounded(lambda: asyncio.run(t.echo.aio_run(t.Msg(nonce=nonce))), 30)
        expect(out == {"nonce": nonce, "mark": t.ECHO_MARK}, f"unexpected output {out!r}")

    def d_push_triggers_on_events() -> None:
        nonce = uuid.uuid4().hex
        ev = bounded(lambda: t.hatchet.event.push(t.EVENT_KEY, {"nonce": nonce}), 15)
        expect(ev.key == t.EVENT_KEY, f"push answered key {ev.key!r}")
        mark = markers / f"event-{nonce}"
        wait_until(f"the worker's marker {mark.name}", mark.exists, 20)
        got = mark.read_text()
        expect(got == t.EVENT_KEY, f"the run saw triggering_event_key {got!r}")

    def e_durable_sleep_then_event() -> None:
        nonce = uuid.uuid4().hex
        t0 = time.monotonic()
        ref = bounded(lambda: t.durable_sleep_then_event.run(
            t.Msg(nonce=nonce), wait_for_result=False), 15)
        wait_until("the durable task to finish its sleep",
                   (markers / f"waiting-{nonce}").exists, 30)
        time.sleep(1.0)  # the event wait is registered right after the marker; push once
        bounded(lambda: t.hatchet.event.push(t.WAKE_KEY, {"nonce": nonce}), 15)
        out = bounded(ref.result, 30)
        elapsed = time.monotonic() - t0
        log(f"durable output {out}")
        expect(out.get("nonce") == nonce, f"unexpected output {out!r}")
        expect(out.get("slept_s", 0) >= 1.9 and out.get("sleep_duration_s") == 2.0,
               "the sleep did not last 2 s")
        expect(out.get("event") == {"nonce": nonce}, "the pushed event's payload is missing")
        expect(elapsed >= 3.0, f"finished too early ({elapsed:.1f}s)")

    def f_schedule_fires_and_crons_round_trip() -> None:
        nonce = uuid.uuid4().hex
        at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)
        sched = bounded(lambda: t.hatchet.scheduled.create(
            "interop-echo", at, {"nonce": nonce}, {"interop_nonce": nonce}), 15)
        expect(sched.workflow_run_id is None, "a schedule has no run before its time")
        since = urllib.parse.quote((at - datetime.timedelta(minutes=5)).isoformat())

        def fired() -> bool:
            # The run it started, found by its metadata: the real engine deletes a schedule once
            # it fired (a read of it answers 404), so the schedule row cannot tell.
            rows = rest_get(hs, f"/api/v1/stable/tenants/{hs['tenant_id']}/workflow-runs"
                                f"?since={since}&only_tasks=false"
                                f"&additional_metadata=interop_nonce:{nonce}")["rows"]
            return any(r.get("status") == "COMPLETED" for r in rows)

        wait_until("the scheduled run to fire and succeed", fired, 30, 0.3)
        expect(datetime.datetime.now(datetime.timezone.utc) >= at, "fired before its time")
        listed = bounded(t.hatchet.scheduled.list, 10).rows or []
        expect(all(r.metadata.id != sched.metadata.id for r in listed),
               "a fired schedule is deleted (as the real engine does)")
        cron = bounded(lambda: t.hatchet.cron.create(
            "interop-echo", f"interop-{nonce[:8]}", "*/5 * * * *", {"nonce": nonce}, {}), 15)
        rows = bounded(t.hatchet.cron.list, 10).rows or []
        expect(any(r.metadata.id == cron.metadata.id and r.cron == "*/5 * * * *" for r in rows),
               f"cron.list() does not show the new cron: {[r.cron for r in rows]}")
        got = bounded(lambda: t.hatchet.cron.get(cron.metadata.id), 10)
        expect(got.name == cron.name, f"cron.get() answered {got.name!r}")
        bounded(lambda: t.hatchet.cron.delete(cron.metadata.id), 10)
        rows = bounded(t.hatchet.cron.list, 10).rows or []
        expect(all(r.metadata.id != cron.metadata.id for r in rows), "the cron was not deleted")

    def e3_rate_limit_holds_a_run_until_units_are_free() -> None:
        # On both engines a key's windows follow each other from its creation (setup put it:
        # 1 a minute), and a raised limit adds no units to the current window: what is left is
        # kept (the real engine's upsert writes value = min(limit, value)). So the held run is
        # released when the window ends, and the new window lets two runs in.
        import datetime as dt

        from hatchet_sdk import RateLimitDuration

        def window_end() -> float:
            rows = bounded(lambda: t.hatchet.rate_limits.list(search=t.RATE_KEY), 10).rows or []
            row = next((r for r in rows if r.key == t.RATE_KEY), None)
            expect(row is not None, f"rate limit {t.RATE_KEY} is not listed")
            last = row.last_refill.timestamp()
            now = time.time()
            return last + 60 * (int((now - last) // 60) + 1)

        bounded(lambda: t.hatchet.rate_limits.put(t.RATE_KEY, 1, RateLimitDuration.MINUTE), 10)
        # Start early in a window: a window ending between the two runs would let both in.
        if window_end() - time.time() < 15:
            time.sleep(max(0.0, window_end() - time.time()) + 1.5)
        first, second, third = (uuid.uuid4().hex for _ in range(3))
        r1 = bounded(lambda: t.rate_limited.run(t.Msg(nonce=first), wait_for_result=False), 15)
        r2 = bounded(lambda: t.rate_limited.run(t.Msg(nonce=second), wait_for_result=False), 15)
        out = bounded(r1.result, 30)
        expect(out == {"nonce": first}, f"unexpected output {out!r}")
        time.sleep(0.5)  # a few scheduler passes: the second run must still be queued
        status = str(bounded(lambda: t.hatchet.runs.get_status(r2.workflow_run_id), 10))
        expect(status.endswith("QUEUED"), f"the second run is {status}, not held by the limit")
        bounded(lambda: t.hatchet.rate_limits.put(t.RATE_KEY, 2, RateLimitDuration.MINUTE), 10)
        rows = bounded(lambda: t.hatchet.rate_limits.list(search=t.RATE_KEY), 10).rows or []
        limit = next((r.limit_value for r in rows if r.key == t.RATE_KEY), None)
        expect(limit == 2, f"the raised limit reads {limit}")
        time.sleep(1.0)
        status = str(bounded(lambda: t.hatchet.runs.get_status(r2.workflow_run_id), 10))
        expect(status.endswith("QUEUED"), f"raising the limit released the held run ({status}) "
                                          "before its window ended")
        # A third run, scheduled: the real engine's queue loop takes a scheduled run, and only
        # a rate-limited run that loop has seen makes it look at the runs held on the way in
        # (a run held by the optimistic trigger path is not retried otherwise).
        since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
        bounded(lambda: t.rate_limited.schedule(
            dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1), t.Msg(nonce=third),
            additional_metadata={"e3": third}), 15)
        out = bounded(r2.result, 150)
        expect(out == {"nonce": second}, f"unexpected output {out!r}")

        def third_done() -> bool:
            rows = bounded(lambda: t.hatchet.runs.list(
                since=since, additional_metadata={"e3": third}), 15).rows or []
            return any(str(r.status).endswith("COMPLETED") for r in rows)

        wait_until("the scheduled third run to complete in the new window", third_done, 90, 0.5)

    def e4_concurrency_runs_one_per_group() -> None:
        runs = [bounded(lambda g=g: t.one_per_group.run(
            t.Grouped(nonce=uuid.uuid4().hex, group=g), wait_for_result=False), 15)
            for g in ("x", "x", "y")]
        # When each ran, by the worker's clock (REST statuses lag on the real engine, and on
        # ours: its status lag). Group x's runs never overlap; group y's does not wait on x.
        spans = [bounded(r.result, 30) for r in runs]
        spans = [next(iter(s.values())) if "started" not in s else s for s in spans]
        (x1, x2) = sorted((spans[0], spans[1]), key=lambda s: s["started"])
        y = spans[2]
        expect(x2["started"] >= x1["ended"] - 0.05,
               f"group x's second run started at {x2['started']:.3f} before the first ended at "
               f"{x1['ended']:.3f}")
        expect(y["started"] < x1["ended"],
               f"group y's run started at {y['started']:.3f}, after group x's first ended at "
               f"{x1['ended']:.3f}: it waited on another group")

    check("a worker registers tasks", a_worker_registers)
    check("b sync run()", b_sync_run)
    check("c aio_run()", c_aio_run)
    check("d push triggers on_events task", d_push_triggers_on_events)
    check("e durable sleep then user event", e_durable_sleep_then_event)
    check("e2 schedule fires; cron create/list/get/delete", f_schedule_fires_and_crons_round_trip)
    check("e3 a rate limit holds a run until units are free", e3_rate_limit_holds_a_run_until_units_are_free)
    check("e4 a task's concurrency runs one per group", e4_concurrency_runs_one_per_group)


def body(s: Session) -> None:
    # A static rate limit must exist before the workflow naming it is registered (the real
    # engine refuses the workflow otherwise): e3's key first.
    import interop_tasks as tasks
    from hatchet_sdk import RateLimitDuration
    bounded(lambda: tasks.hatchet.rate_limits.put(tasks.RATE_KEY, 1, RateLimitDuration.MINUTE), 15)
    worker = s.python("worker", "interop_worker.py")
    run_checks(s.hs, s.markers, worker)


if __name__ == "__main__":
    drive("hatchet-interop-", body, client_env={"INTEROP_WORKER_NAME": WORKER_NAME},
          engine_exit_check="f engine exits when stdin closes")
