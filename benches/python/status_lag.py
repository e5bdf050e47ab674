"""How late an engine publishes a run's end: for N runs of a 0.5 s task, the time from the task's
return (the worker's clock) to (a) the run reading COMPLETED over REST and (b) the official
Python SDK's `aio_result()` returning, and whether REST ever read RUNNING. The real engine
publishes REST's late: a new run 1 to 2 s after its creation, its later changes at once; the
result comes the end hop after the task returned (tens of milliseconds). Ours does the same by
default (`DevEngine::status_lag`, `DevEngine::end_hop`).

    # the real engine (scripts/real-engine.sh start):
    eval "$(scripts/real-engine.sh env)"; python benches/python/status_lag.py 12
    # ours: start target/release/hatchet-dev-engine and export the lines it prints, then the same

`STATUS_LAG_TASK_SECS` sets the task's length (0.5 s by default). With `durable` after N, the task is durable and sleeps three times for 2 s (`aio_sleep_for`):
each line also gives how long each sleep took, as the worker saw it. With `lookback`, the durable
task waits for an event pushed 3 s before the run, with a 15 s look-back (the official Python
`test_durable_event_scope` look-back path). Each line also gives when `GetRunDetails` (gRPC)
first read RUNNING and COMPLETED, relative to the task's return.

Needs hatchet-sdk (tests/interop/.venv has it). Prints one line a run, then min/median/max.
"""
import asyncio
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta

from hatchet_sdk import Context, DurableContext, EmptyModel, Hatchet, RunStatus
from hatchet_sdk.clients.rest.models.v1_task_status import V1TaskStatus

os.environ.setdefault("HATCHET_CLIENT_NAMESPACE", "status-lag")
hatchet = Hatchet()
lag = hatchet.workflow(name="status-lag")


@lag.task()
async def step(_: EmptyModel, ctx: Context) -> dict[str, float]:
    started = time.time()
    await asyncio.sleep(float(os.environ.get("STATUS_LAG_TASK_SECS", "0.5")))
    return {"started": started, "ended": time.time()}


durable = hatchet.workflow(name="status-lag-durable")
lookback = hatchet.workflow(name="status-lag-lookback")
LOOKBACK_KEY = "status-lag:lookback"


@lookback.durable_task()
async def waits(_: EmptyModel, ctx: DurableContext) -> dict[str, object]:
    before = time.time()
    await ctx.aio_wait_for_event(LOOKBACK_KEY, scope="lag", lookback_window=timedelta(seconds=15))
    return {"waited": round(time.time() - before, 3), "ended": time.time()}


@durable.durable_task()
async def sleeps(_: EmptyModel, ctx: DurableContext) -> dict[str, object]:
    took = []
    for _ in range(3):
        before = time.time()
        await ctx.aio_sleep_for(timedelta(seconds=2))
        took.append(round(time.time() - before, 3))
    return {"sleeps": took, "ended": time.time()}


async def measure(n: int, wf) -> None:
    rows = []
    for i in range(n):
        if wf is lookback:
            await hatchet.event.aio_push(LOOKBACK_KEY, {}, scope="lag")
            await asyncio.sleep(3)
        created = time.time()
        ref = await wf.aio_run(wait_for_result=False)
        details_running = details_completed = None
        details_seen: list[str] = []
        result = asyncio.create_task(ref.aio_result())
        # When the result arrived, noted by the task itself: the loop below waits on REST reads
        # (which lag) and would note it only after the next one.
        arrived: list[float] = []
        result.add_done_callback(lambda _: arrived.append(time.time()))
        running = completed = returned = None
        while completed is None or returned is None:
            status = await hatchet.runs.aio_get_status(ref.workflow_run_id)
            now = time.time()
            if status == V1TaskStatus.RUNNING and running is None:
                running = now
            if status == V1TaskStatus.COMPLETED and completed is None:
                completed = now
            if result.done() and returned is None:
                returned = arrived[0] if arrived else now
            if details_completed is None:
                d = (await hatchet.runs.aio_get_details(ref.workflow_run_id)).status
                if not details_seen or details_seen[-1].split("@")[0] != d.name:
                    details_seen.append(f"{d.name}@{time.time() - created:.2f}")
                if d == RunStatus.RUNNING and details_running is None:
                    details_running = time.time()
                if d == RunStatus.COMPLETED:
                    details_completed = time.time()
            await asyncio.sleep(0.02)
        out = next(iter(result.result().values()))
        ended = out["ended"]
        rows.append((completed - ended, returned - ended, running is not None))
        print(f"run {i}: REST COMPLETED +{rows[-1][0]:.3f}s, result +{rows[-1][1]:.3f}s, "
              f"REST read RUNNING: {rows[-1][2]}, phase (wall clock mod 1 s) ended "
              f"{ended % 1:.3f} result {returned % 1:.3f}"
              + (f", sleeps took {out['sleeps']}" if "sleeps" in out else "")
              + (f", the look-back wait took {out['waited']}s" if "waited" in out else "")
              + ", gRPC details read RUNNING: "
              + (f"{details_running - ended:+.3f}s" if details_running else "never")
              + ", COMPLETED: "
              + (f"{details_completed - ended:+.3f}s" if details_completed else "never")
              + f" (its reads, s after the trigger: {' '.join(details_seen)}; the task ended at "
              + f"{ended - created:.2f})",
              flush=True)
        await asyncio.sleep(0.37)  # spread the runs over the poll's phase
    for name, xs in (("REST COMPLETED", [r[0] for r in rows]), ("result", [r[1] for r in rows])):
        print(f"{name} after the task returned: min {min(xs):.3f}s, "
              f"median {statistics.median(xs):.3f}s, max {max(xs):.3f}s")
    print(f"REST never read RUNNING in {sum(not r[2] for r in rows)} of {len(rows)} runs")


def main() -> None:
    if sys.argv[1:] == ["worker"]:
        hatchet.worker("status-lag", workflows=[lag, durable, lookback], slots=4).start()
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 12
    wf = {"durable": durable, "lookback": lookback}.get(sys.argv[2] if sys.argv[2:] else "", lag)
    worker = subprocess.Popen([sys.executable, __file__, "worker"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(8)  # the worker registers
        asyncio.run(measure(n, wf))
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(20)


if __name__ == "__main__":
    main()
