"""Small helpers shared by the interop scenario scripts: bounded waits, counted checks,
and stopping the processes we started (by PID / process-group id)."""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

failures: list[str] = []


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def remember_pid(spec: str) -> None:
    """Tell run.sh's trap what to kill (`PID` or `-PGID`) if we die without cleaning up."""
    if pidfile := os.environ.get("INTEROP_PIDFILE"):
        with open(pidfile, "a") as f:
            f.write(spec + "\n")


def forget_pid(spec: str) -> None:
    """The process `spec` is gone (reaped by us): run.sh must not kill that id any more."""
    if pidfile := os.environ.get("INTEROP_PIDFILE"):
        with open(pidfile, "a") as f:
            f.write(f"done {spec}\n")


def wait_until(what: str, cond: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def bounded(fn: Callable[[], Any], timeout: float) -> Any:
    """Run a blocking SDK call (many have no gRPC deadline) with a bound. A daemon thread,
    not asyncio.to_thread: asyncio.run() would wait for a hung executor thread forever."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        raise TimeoutError(f"no answer within {timeout:.0f}s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def second_attempt(check_id: str) -> bool:
    """On the real engine a failed check runs once more, reported as `FLAKY id: why` (run.sh
    lists those at the end): its read models and caches settle within seconds, not at once.
    Checks listed as known failures there (INTEROP_REAL_ENGINE_KNOWN) get one attempt, and
    our engine's checks always get one: there a failure is a failure."""
    if os.environ.get("HATCHET_REAL_ENGINE") != "1":
        return False
    return check_id not in os.environ.get("INTEROP_REAL_ENGINE_KNOWN", "").split()


def check(name: str, fn: Callable[[], None]) -> bool:
    """Run one counted check; prints `PASS name` or `FAIL name: why` for run.sh to count
    (after `FLAKY name: why` when a first attempt on the real engine failed)."""
    check_id = name.split()[0]
    t0 = time.monotonic()
    attempts = 2 if second_attempt(check_id) else 1
    for attempt in range(1, attempts + 1):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every failure is reported and counted
            if attempt < attempts:
                print(f"FLAKY {name}: first attempt: {type(e).__name__}: {e}", flush=True)
                continue
            failures.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            return False
        except BaseException:  # SIGTERM (e.g. from `timeout`) or Ctrl-C: count it, then unwind
            failures.append(name)
            print(f"FAIL {name}: interrupted after {time.monotonic() - t0:.1f}s", flush=True)
            raise
        break
    print(f"PASS {name} ({time.monotonic() - t0:.1f}s)", flush=True)
    return True


def stop(proc: subprocess.Popen[bytes] | None, name: str, grace: float) -> None:
    """SIGTERM the process group led by `proc` (started with start_new_session=True),
    SIGKILL it after `grace` seconds; the SDK worker's listener child is in that group."""
    if proc is None:
        return
    try:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                log(f"{name} ignored SIGTERM for {grace:.0f}s, killing its group")
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers in the group, if any
    except ProcessLookupError:
        pass
    proc.wait(5)
    forget_pid(f"-{proc.pid}")


def dump_logs(*paths: os.PathLike[str] | str) -> None:
    for p in paths:
        try:
            tail = open(p, errors="replace").read()[-3000:]
        except OSError:
            continue
        print(f"----- {p} (tail) -----\n{tail}", flush=True)
