"""End-to-end throughput of ONE worker process: ours (the Rust example worker, `rust-echo`) vs a
hatchet-sdk Python worker (echo_worker.py, `py-echo`), each against a fresh hatchet-dev-engine.

  bench.py side rust|go|python OUT.json  # one side: engine + worker, trigger, measure, stop
  bench.py report RUST.json PY.json MD  # print the Markdown table and append it to MD
  bench.py sweep MD SVG RESULT.json...  # one table over sizes and sides, and the SVG plot
With BENCH_CLIENT=rust the rust side triggers and waits with our client
(HATCHET_RUST_DRIVER_BIN, tools/bench_driver.rs) instead of the SDK driver.

A side: start the engine (handshake file, free ports, stdin pipe), start the worker in its own
process group with the handshake's HATCHET_CLIENT_* env and BENCH_SLOTS slots, wait until the
REST worker list shows it ACTIVE, run BENCH_WARMUP runs, then trigger BENCH_TASKS runs through
the SDK's bulk trigger (`run_many(..., wait_for_result=False)`, BENCH_CHUNK runs per
BulkTriggerWorkflow call) and wait for all of them: by default through the SDK's run refs
(`aio_result()` on each: one pooled SubscribeToWorkflowRuns stream), with BENCH_WAIT=rest by
polling the engine's REST run list (statuses=COMPLETED) every BENCH_POLL_S (0.25) s; either
way the REST list must then show every run COMPLETED and none FAILED. Wall time runs from the
first trigger to the last completion seen;
CPU is utime+stime (+ reaped children) of the worker's process tree from /proc, over the same
window. The trigger path and the poller are this same driver for both sides.
Env: HATCHET_DEV_ENGINE_BIN, HATCHET_RUST_WORKER_BIN (required for `side`), BENCH_TASKS (2000),
BENCH_SLOTS (50), BENCH_CHUNK (500), BENCH_WARMUP (20), BENCH_SIDE_TIMEOUT (75 s),
BENCH_WAIT (refs | rest), BENCH_POLL_S (0.25), BENCH_KEEP=1 (keep the work dir and logs),
INTEROP_PIDFILE (ids for the calling script's trap), BENCH_BUILD (label for the report),
BENCH_WORKERS (1: worker processes of the side, each with BENCH_SLOTS slots; their CPU is
summed; scripts/bench_cluster.sh runs 1, 2 and 4 on the cluster).
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "tests" / "interop"))  # the interop scripts' small helpers

from interop_util import (bounded, dump_logs, expect, forget_pid, log,  # noqa: E402
                          remember_pid, stop, wait_until)
from interop_harness import rest_get, start_engine  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
SIDES = {
    # side: (workflow to trigger, worker name, action it must register)
    "rust": ("rust-echo", "rust-worker", "rust-echo:echo"),
    "python": ("py-echo", "py-bench-worker", "py-echo:py-echo"),
    # the official Go SDK's worker and driver (tests/interop/go, `bench-worker` / `bench-drive`)
    "go": ("go-bench-echo", "go-bench-worker", "go-bench-echo:go-bench-echo"),
}


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def tree_cpu_seconds(root: int) -> tuple[float, int]:
    """CPU seconds (user+system, plus reaped children) of `root` and all its live
    descendants, and how many processes that tree has now."""
    table: dict[int, tuple[int, int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()  # f[0] is field 3 (state)
        table[int(d)] = (int(f[1]), sum(int(x) for x in f[11:15]))  # ppid, ut+st+cut+cst
    kids: dict[int, list[int]] = defaultdict(list)
    for pid, (ppid, _) in table.items():
        kids[ppid].append(pid)
    ticks, n, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            ticks += table[pid][1]
            n += 1
            todo.extend(kids[pid])
    return ticks / CLK_TCK, n


# The engine's processes on this machine: its own, PostgreSQL's, and on the cluster
# (scripts/real-cluster.sh) RabbitMQ's and nginx's.
REAL_ENGINE_COMMS = ("hatchet-engine", "postgres", "beam.smp", "nginx")


def real_engine_cpu_seconds() -> float:
    """CPU seconds (user+system) of the real engine's live processes on this machine (the
    engine and PostgreSQL's, which does the queueing there); no engine process, no seconds."""
    ticks = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm in REAL_ENGINE_COMMS:
            f = stat[stat.rindex(")") + 2:].split()
            ticks += int(f[11]) + int(f[12])  # utime, stime
    return ticks / CLK_TCK


def run_side(side: str, out_path: Path) -> int:
    workflow, worker_name, action = SIDES[side]
    tasks, slots = env_int("BENCH_TASKS", 2000), env_int("BENCH_SLOTS", 50)
    chunk, warmup = env_int("BENCH_CHUNK", 500), env_int("BENCH_WARMUP", 20)
    # A bigger load gets more time (the Python side completes ~400 tasks/s here).
    side_timeout = float(os.environ.get("BENCH_SIDE_TIMEOUT") or max(75, tasks / 150 + 60))
    wait_mode = os.environ.get("BENCH_WAIT") or "refs"
    poll_s = float(os.environ.get("BENCH_POLL_S") or 0.25)
    work = Path(tempfile.mkdtemp(prefix=f"hatchet-bench-{side}-"))
    os.chdir(work)  # the SDK reads .env files from the current directory: keep it clean
    engine = worker = None
    nworkers = env_int("BENCH_WORKERS", 1)
    workers: list = []
    ok = False
    try:
        # Ours without its status lag (results as they finish: the bench measures workers, not
        # the real engine's 2 s publication lag); BENCH_ENGINE_FLAGS="" keeps the poll. The real
        # engine (HATCHET_REAL_ENGINE=1): no process.
        flags = os.environ.get("BENCH_ENGINE_FLAGS", "--no-status-lag").split()
        engine, hs = start_engine(work, flags)

        def engine_cpu() -> float:
            return tree_cpu_seconds(engine.pid)[0] if engine else real_engine_cpu_seconds()
        os.environ.update(
            HATCHET_CLIENT_TOKEN=hs["token"],
            HATCHET_CLIENT_HOST_PORT=hs["grpc_address"],
            HATCHET_CLIENT_SERVER_URL=hs["api_url"],
            HATCHET_CLIENT_TLS_STRATEGY="none",
        )
        if side == "rust":
            argv = [os.environ["HATCHET_RUST_WORKER_BIN"]]
        elif side == "go":
            argv = [os.environ["HATCHET_GO_BENCH_BIN"], "bench-worker"]
        else:
            argv = [sys.executable, str(HERE / "echo_worker.py")]
        for i in range(nworkers):
            w = subprocess.Popen(
                argv, start_new_session=True, stdin=subprocess.DEVNULL,
                env={**os.environ, "WORKER_SLOTS": str(slots), "BENCH_SLOTS": str(slots)},
                stdout=open(work / f"worker-{i}.log", "wb"), stderr=subprocess.STDOUT)
            remember_pid(f"-{w.pid}")
            workers.append(w)
        worker = workers[0]

        def workers_cpu() -> tuple[float, int]:
            got = [tree_cpu_seconds(w.pid) for w in workers]
            return sum(c for c, _ in got), sum(n for _, n in got)

        def workers_alive() -> None:
            for w in workers:
                expect(w.poll() is None, f"a worker exited with {w.returncode}")

        tenant = hs["tenant_id"]
        since = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

        def count(status: str) -> int:
            q = urllib.parse.urlencode({"since": since, "only_tasks": "true",
                                        "statuses": status, "limit": "1"})
            page = rest_get(hs, f"/api/v1/stable/tenants/{tenant}/workflow-runs?{q}")
            return page["pagination"]["num_pages"] if page["rows"] else 0  # limit 1: pages = runs

        def registered() -> bool:
            workers_alive()
            rows = rest_get(hs, f"/api/v1/tenants/{tenant}/worker")["rows"]
            return sum(w["name"] == worker_name and w.get("status") == "ACTIVE"
                       and action in (w.get("actions") or []) for w in rows) >= nworkers

        wait_until(f"{nworkers} workers {worker_name} ACTIVE with {action}", registered, 60, 0.2)

        from hatchet_sdk import EmptyModel, Hatchet  # after the env points at this engine

        stub = Hatchet().stubs.workflow(name=workflow)

        async def trigger(first: int, n: int) -> list:
            items = [stub.create_bulk_run_item(EmptyModel(i=k)) for k in range(first, first + n)]
            refs: list = []
            for at in range(0, n, chunk):
                refs += await stub.aio_run_many(items[at:at + chunk], wait_for_result=False)
            expect(len(refs) == n, f"bulk triggers returned {len(refs)} of {n} run ids")
            return refs

        async def wait_done(refs: list, total: int) -> None:
            if wait_mode == "refs":  # one pooled SubscribeToWorkflowRuns stream for all refs
                await asyncio.gather(*[r.aio_result() for r in refs])
                return
            # BENCH_WAIT=rest: poll the run list. Costly in a debug engine: every poll renders
            # each matching run under the engine's state lock, which slows the side it measures.
            while True:
                workers_alive()
                failed = await asyncio.to_thread(count, "FAILED")
                expect(failed == 0, f"{failed} runs FAILED")
                if await asyncio.to_thread(count, "COMPLETED") >= total:
                    return
                await asyncio.sleep(poll_s)

        async def measure() -> tuple[float, float, float, float]:
            # One event loop for everything: the SDK's pooled run listener binds to the loop
            # that first uses it, so a second asyncio.run() would wait on a dead stream.
            if warmup:
                try:
                    await asyncio.wait_for(wait_done(await trigger(0, warmup), warmup), 30)
                except TimeoutError:
                    raise TimeoutError("warm-up runs not done within 30s") from None
            # The measured window: same driver, same bulk trigger, same completion wait.
            cpu0, eng0 = workers_cpu()[0], engine_cpu()
            t0 = time.monotonic()
            refs = await trigger(warmup, tasks)
            t_trig = time.monotonic() - t0
            try:
                await asyncio.wait_for(wait_done(refs, warmup + tasks), side_timeout)
            except TimeoutError:
                raise TimeoutError(f"runs not done within {side_timeout:.0f}s") from None
            wall = time.monotonic() - t0
            cpu1, eng1 = workers_cpu()[0], engine_cpu()
            return wall, t_trig, cpu1 - cpu0, eng1 - eng0

        def measure_driver(argv: list[str], name: str) -> tuple[float, float, float, float]:
            """A side with its own client: a driver process (ours: tools/bench_driver.rs;
            the Go SDK's: tests/interop/go `bench-drive`) triggers and waits; CPU is measured
            around its measured part, as for the SDK driver."""
            driver = subprocess.Popen(
                argv, stdin=subprocess.PIPE,
                start_new_session=True,
                stdout=subprocess.PIPE, stderr=open(work / "driver.log", "wb"),
                env={**os.environ, "BENCH_WORKFLOW": workflow, "BENCH_TASKS": str(tasks),
                     "BENCH_WARMUP": str(warmup)})
            remember_pid(f"-{driver.pid}")
            try:
                def event() -> dict:
                    line = driver.stdout.readline()
                    if not line:  # the driver ended early: say how
                        expect(False, f"the {name} driver exited with {driver.wait()}")
                    return json.loads(line)
                warm = event()
                expect(warm.get("failed") == 0, f"warm-up: {warm}")
                cpu0, eng0 = workers_cpu()[0], engine_cpu()
                driver.stdin.write(b"go\n")
                driver.stdin.flush()
                done = event()
                cpu1, eng1 = workers_cpu()[0], engine_cpu()
                expect(done.get("failed") == 0, f"the {name} driver saw failures: {done}")
                return done["wall_s"], done["trigger_s"], cpu1 - cpu0, eng1 - eng0
            finally:
                stop(driver, f"{name} driver", grace=5)
                forget_pid(f"-{driver.pid}")

        if side == "rust" and os.environ.get("BENCH_CLIENT") == "rust":
            wall, t_trig, cpu, eng = bounded(
                lambda: measure_driver([os.environ["HATCHET_RUST_DRIVER_BIN"]], "Rust"),
                side_timeout + 45)
        elif side == "go":
            wall, t_trig, cpu, eng = bounded(
                lambda: measure_driver([os.environ["HATCHET_GO_BENCH_BIN"], "bench-drive"], "Go"),
                side_timeout + 45)
        else:
            wall, t_trig, cpu, eng = bounded(lambda: asyncio.run(measure()), side_timeout + 45)
        nprocs = workers_cpu()[1]
        result = {
            "side": side, "workflow": workflow, "tasks": tasks, "slots": slots,
            "workers": nworkers,
            "wall_s": wall, "trigger_s": t_trig, "tasks_per_s": tasks / wall,
            "worker_cpu_s": cpu, "cpu_s_per_1k": cpu * 1000 / tasks,
            "engine_cpu_s_per_1k": eng * 1000 / tasks, "worker_procs": nprocs,
            "wait": wait_mode,
            "engine": "real" if engine is None else "ours",
            "client": "go" if side == "go"
            else "rust" if side == "rust" and os.environ.get("BENCH_CLIENT") == "rust"
            else "python",
        }
        # The engine's own view agrees: every run COMPLETED, none FAILED. The real engine's
        # run list trails its own state (its OLAP tables fill asynchronously): poll it a while.
        def agrees() -> bool:
            completed, failed = count("COMPLETED"), count("FAILED")
            expect(failed == 0, f"REST run list: {failed} FAILED")
            return completed == warmup + tasks
        try:
            wait_until("the REST run list to count every run COMPLETED", agrees,
                       60 if engine is None else 5, 0.5)
        except TimeoutError:
            expect(False, f"REST run list: {count('COMPLETED')} COMPLETED of {warmup + tasks}")
        out_path.write_text(json.dumps(result))
        log(f"{side}: {tasks} tasks in {wall:.2f}s ({tasks / wall:.0f}/s, triggers took "
            f"{t_trig:.2f}s), worker CPU {cpu:.2f}s over {nprocs} process(es)")
        ok = True
    except Exception as e:  # noqa: BLE001 - reported, then the side fails
        print(f"bench {side} FAILED: {type(e).__name__}: {e}", flush=True)
    finally:
        quick = terminating  # told to stop (SIGTERM): no graceful drain, the caller is waiting
        for w in workers:
            if w.poll() is None and not quick:
                try:
                    os.killpg(w.pid, signal.SIGINT)  # every worker drains and exits on Ctrl-C
                except ProcessLookupError:
                    pass
        for w in workers:
            if w.poll() is None and not quick:
                try:
                    w.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            stop(w, f"{side} worker", grace=2 if quick else 5)
        if engine is not None:
            engine.stdin.close()  # the engine exits when its stdin closes
            try:
                engine.wait(2 if quick else 10)
            except subprocess.TimeoutExpired:
                engine.kill()
                engine.wait(5)
            forget_pid(str(engine.pid))
        if not ok:
            dump_logs(*sorted(work.glob("worker-*.log")), work / "engine.log")
        elif os.environ.get("BENCH_KEEP") != "1":
            for p in work.iterdir():
                p.unlink()
            work.rmdir()
    return 0 if ok else 1


def report(rust_path: Path, py_path: Path, md_path: Path) -> int:
    r, p = json.loads(rust_path.read_text()), json.loads(py_path.read_text())
    build = os.environ.get("BENCH_BUILD", "unknown build")
    from importlib.metadata import version

    sdk = version("hatchet-sdk")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    def row(name: str, x: dict) -> str:
        return (f"| {name} | {x['tasks']} | {x['slots']} | {x['wall_s']:.2f} | "
                f"{x['tasks_per_s']:.0f} | {x['cpu_s_per_1k']:.3f} | "
                f"{x['engine_cpu_s_per_1k']:.3f} |")

    lines = [
        f"### One worker process, trivial echo task: ours vs hatchet-sdk {sdk} ({stamp})",
        "",
        f"Binaries: {build}. One fresh hatchet-dev-engine per side; the same Python driver "
        f"triggers both sides in bulk ({os.environ.get('BENCH_CHUNK') or 500} runs per "
        "BulkTriggerWorkflow) and waits for completion "
        + ("by polling the REST run list" if r.get("wait") == "rest"
           else "through the SDK's run refs (`aio_result()`)")
        + "; wall time from the first trigger to the last completion; CPU = worker process "
        "tree (/proc utime+stime, over the same window).",
        "",
        "| worker | tasks | slots | wall s | tasks/s | worker CPU s / 1,000 tasks "
        "| engine CPU s / 1,000 tasks |",
        "|---|---:|---:|---:|---:|---:|---:|",
        row("ours: Rust example worker (`rust-echo`)", r),
        row(f"hatchet-sdk {sdk} Python worker (`py-echo`, async)", p),
        f"| **ratio ours / python** | | | | **{r['tasks_per_s'] / p['tasks_per_s']:.2f}x** | "
        f"**{r['cpu_s_per_1k'] / max(p['cpu_s_per_1k'], 1e-9):.2f}x** | |",
        "",
        f"Python worker tree: {p['worker_procs']} processes; ours: {r['worker_procs']}. "
        "tasks/s ratio > 1 means ours is faster; CPU ratio < 1 means ours uses less CPU."
        + (" Debug builds: release builds (the default without *_BIN env) are faster, "
           "for the engine too." if "debug" in build else ""),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    with open(md_path, "a") as f:
        f.write(text + "\n")
    return 0


def sweep(md_path: Path, svg_path: Path, results: list[Path]) -> int:
    """The table (one row per side and size, ratios per size) and the throughput-vs-runs plot."""
    rows = [json.loads(p.read_text()) for p in results]
    from importlib.metadata import version

    sdk = version("hatchet-sdk")
    go_sdk = os.environ.get("BENCH_GO_SDK", "the Go SDK")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    build = os.environ.get("BENCH_BUILD", "unknown build")
    by = {(r["side"], r["tasks"]): r for r in rows}
    sizes = sorted({r["tasks"] for r in rows})
    real = any(r.get("engine") == "real" for r in rows)
    on = (" on the real engine" if real else "")
    where = (os.environ.get("BENCH_REAL_ENGINE_LABEL", "The real engine") + " (shared by "
             "every side and size; engine CPU = its hatchet-engine and PostgreSQL processes; "
             "there the engine is the bottleneck: compare worker CPU per task, what a user pays "
             "for)" if real else "One fresh hatchet-dev-engine per side and size")
    lines = [
        f"### Throughput as runs accumulate{on}: ours (Rust worker + Rust client) vs {go_sdk} "
        f"(Go worker + Go client) vs hatchet-sdk {sdk} (Python worker + Python client) ({stamp})",
        "",
        f"Binaries: {build}. {where}, one worker "
        f"process with {rows[0]['slots']} slots. Ours: `tools/bench_driver.rs` triggers with "
        "`run_many` (BulkTriggerWorkflow, 1,000 per call) and awaits every result; Go: the SDK's "
        "`RunMany` (one TriggerWorkflow call per input, 500 inputs per call) and `Result()` on "
        "each ref (`tests/interop/go`, `bench-drive`); Python: the SDK's `aio_run_many` and "
        "`aio_result()`. Wall time from the first trigger to the last result; CPU from /proc "
        "over the same window. Ratios: ours / theirs for tasks/s (above 1: ours is faster) and "
        "for worker CPU per task (below 1: ours uses less).",
        "",
        "| runs | side | wall s | tasks/s | worker CPU s / 1,000 | engine CPU s / 1,000 | "
        "ours / go tasks/s | ours / go CPU | ours / python tasks/s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        r, g, p = by.get(("rust", n)), by.get(("go", n)), by.get(("python", n))
        for side, x in (("ours", r), ("go", g), ("python", p)):
            if x is None:
                continue
            vs_go = vs_go_cpu = vs_py = ""
            if side == "ours" and g:
                vs_go = f"**{r['tasks_per_s'] / g['tasks_per_s']:.1f}x**"
                vs_go_cpu = f"**{r['cpu_s_per_1k'] / max(g['cpu_s_per_1k'], 1e-9):.2f}x**"
            if side == "ours" and p:
                vs_py = f"**{r['tasks_per_s'] / p['tasks_per_s']:.1f}x**"
            lines.append(f"| {n} | {side} | {x['wall_s']:.2f} | {x['tasks_per_s']:.0f} | "
                         f"{x['cpu_s_per_1k']:.3f} | {x['engine_cpu_s_per_1k']:.3f} | "
                         f"{vs_go} | {vs_go_cpu} | {vs_py} |")
    ours = [by[("rust", n)]["tasks_per_s"] for n in sizes if ("rust", n) in by]
    if len(ours) >= 2:
        lines += ["", f"Ours at {sizes[-1]} runs is **{ours[-1] / ours[0]:.2f}x** ours at "
                  f"{sizes[0]} (flat throughput is 1.0). Plot: `{svg_path.name}`."]
    text = "\n".join(lines + [""])
    print(text)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    with open(md_path, "a") as f:
        f.write(text + "\n")
    series = {"ours (Rust)": [by.get(("rust", n)) for n in sizes]}
    if any(("go", n) in by for n in sizes):
        series[f"{go_sdk} (Go)"] = [by.get(("go", n)) for n in sizes]
    series[f"hatchet-sdk {sdk} (Python)"] = [by.get(("python", n)) for n in sizes]
    svg_path.write_text(plot(sizes, series))
    return 0


def plot(sizes: list[int], series: dict[str, list]) -> str:
    """A small SVG line chart: tasks/s (log scale) against runs (log scale)."""
    import math

    w, h, pad = 640, 360, 60
    ys = [x["tasks_per_s"] for s in series.values() for x in s if x]
    lo, hi = math.log10(max(min(ys) / 2, 1)), math.log10(max(ys) * 2)
    xl, xh = math.log10(sizes[0]), math.log10(sizes[-1]) if len(sizes) > 1 else math.log10(sizes[0]) + 1

    def px(n: int) -> float:
        return pad + (math.log10(n) - xl) / max(xh - xl, 1e-9) * (w - 2 * pad)

    def py(v: float) -> float:
        return h - pad - (math.log10(v) - lo) / max(hi - lo, 1e-9) * (h - 2 * pad)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle">tasks/s vs runs outstanding '
           '(one worker, 50 slots; log scales)</text>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>']
    for n in sizes:
        out.append(f'<text x="{px(n)}" y="{h - pad + 16}" text-anchor="middle">{n}</text>')
    for e in range(int(math.floor(lo)), int(math.ceil(hi)) + 1):
        v = 10 ** e
        if lo <= e <= hi:
            out.append(f'<text x="{pad - 6}" y="{py(v) + 4}" text-anchor="end">{v}</text>')
    for (name, pts), color, dy in zip(series.items(), ["#1f77b4", "#2ca02c", "#d62728"],
                                      [0, 16, 32]):
        xy = [(px(n), py(x["tasks_per_s"])) for n, x in zip(sizes, pts) if x]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            color, " ".join(f"{a:.1f},{b:.1f}" for a, b in xy)))
        for a, b in xy:
            out.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="3" fill="{color}"/>')
        out.append(f'<text x="{w - pad - 150}" y="{pad + dy}" fill="{color}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


terminating = False


def on_sigterm(*_: object) -> None:
    global terminating
    terminating = True
    sys.exit(143)  # unwinds through `finally`, which stops the worker and the engine


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if len(sys.argv) == 4 and sys.argv[1] == "side" and sys.argv[2] in SIDES:
            code = run_side(sys.argv[2], Path(sys.argv[3]).resolve())
        elif len(sys.argv) == 5 and sys.argv[1] == "report":
            code = report(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        elif len(sys.argv) >= 5 and sys.argv[1] == "sweep":
            code = sweep(Path(sys.argv[2]), Path(sys.argv[3]), [Path(p) for p in sys.argv[4:]])
        else:
            print(__doc__, file=sys.stderr)
            code = 2
    except SystemExit as e:  # SIGTERM: cleanup ran in `finally`; do not wait for SDK threads
        code = e.code if isinstance(e.code, int) else 1
    sys.stdout.flush()
    os._exit(code)  # threads of a timed-out SDK call must not keep the process alive
