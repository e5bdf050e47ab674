"""Interop across languages: our Rust runtime and the official Python SDK on one dev engine.

Starts the engine as scenario.py does, then two workers in their own process groups: the SDK
worker (interop_worker.py) and our Rust example worker (examples/worker.rs: `rust-echo`,
`rust-dag`), both from the handshake's HATCHET_CLIENT_* environment. Counted checks:
  h1. runs of `rust-echo` triggered by the SDK client (`run()` and `aio_run()` on a
      `hatchet.stubs.workflow(name=...)` stub, since Python does not declare it) are executed by
      the Rust worker: the output echoes the input and says "worker": "rust";
  h2. a `rust-dag` run triggered by the SDK returns both task outputs (second.n = (n+1)*10);
  i1. our Rust client binary triggers the SDK-declared `interop-echo` task (its registered,
      namespaced name) and prints the Python worker's output as JSON on stdout;
  i2. the Rust client exits 1 with the engine's reason for an unknown workflow name;
  h3. the Rust worker exits 0 after SIGTERM (a process manager's stop): it pauses itself at the
      engine (the worker row reads PAUSED), drains, then stops.
Env: HATCHET_DEV_ENGINE_BIN, HATCHET_RUST_WORKER_BIN, HATCHET_RUST_CLIENT_BIN (required),
INTEROP_PIDFILE (optional, for run.sh's trap), INTEROP_KEEP=1 to keep the work dir.
"""

import asyncio
import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

from interop_harness import Session, drive, rest_get, wait_registered
from interop_util import bounded, check, expect, log, remember_pid, stop

PY_WORKER = "interop-worker"
RUST_WORKER = "rust-worker"  # the name examples/worker.rs registers with


def rust_client(work: Path, *args: str, timeout: float = 45) -> tuple[int, str, str]:
    """Run the Rust client binary once, bounded; returns (exit code, stdout, stderr)."""
    out, err = work / "client.out", work / "client.err"
    proc = subprocess.Popen([os.environ["HATCHET_RUST_CLIENT_BIN"], *args],
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=open(out, "wb"), stderr=open(err, "wb"))
    remember_pid(f"-{proc.pid}")
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"the Rust client did not exit within {timeout:.0f}s") from None
    finally:
        stop(proc, "rust client", grace=5)
    return proc.returncode, out.read_text(errors="replace"), err.read_text(errors="replace")


def run_checks(hs: dict[str, str], work: Path, py_worker: subprocess.Popen[bytes],
               rust_worker: subprocess.Popen[bytes]) -> None:
    import interop_tasks as t  # builds Hatchet() from the env set by main()
    from hatchet_sdk import EmptyModel

    # Both workers register concurrently; a run is refused until its workflow exists.
    wait_registered(hs, RUST_WORKER, {"rust-echo:echo", "rust-dag:first", "rust-dag:second"},
                    rust_worker, 40)
    wait_registered(hs, PY_WORKER, {f"{t.echo.name}:{t.echo.name}"}, py_worker, 40)

    # Stubs: typed handles on workflows that another process (here: Rust) declares.
    rust_echo = t.hatchet.stubs.workflow(name="rust-echo")
    rust_dag = t.hatchet.stubs.workflow(name="rust-dag")

    def h1_rust_worker_runs_sdk_triggered_echo() -> None:
        nonce = uuid.uuid4().hex
        sent = {"nonce": nonce, "n": 7, "nested": {"list": [1, "two", None]}}
        out = bounded(lambda: rust_echo.run(EmptyModel(**sent)), 30)
        log(f"rust-echo via run(): {out}")
        expect(out == {"echo": {"echo": sent, "worker": "rust"}}, f"unexpected output {out!r}")
        nonce2 = uuid.uuid4().hex
        out = bounded(lambda: asyncio.run(rust_echo.aio_run(EmptyModel(nonce=nonce2))), 30)
        expect(out == {"echo": {"echo": {"nonce": nonce2}, "worker": "rust"}},
               f"unexpected aio_run output {out!r}")

    def h2_rust_worker_runs_sdk_triggered_dag() -> None:
        out = bounded(lambda: rust_dag.run(EmptyModel(n=4)), 30)
        log(f"rust-dag via run(): {out}")
        expect(out == {"first": {"n": 5}, "second": {"n": 50}}, f"unexpected output {out!r}")

    def i1_rust_client_runs_python_task() -> None:
        nonce = uuid.uuid4().hex
        # t.echo.name is the name the SDK registered (namespace prefix + declared name)
        rc, out, err = rust_client(work, t.echo.name, json.dumps({"nonce": nonce}))
        log(f"rust client: exit {rc}, stdout {out.strip()!r}")
        expect(rc == 0, f"exit code {rc}, stderr {err.strip()[-500:]!r}")
        got = json.loads(out)
        expect(got == {"nonce": nonce, "mark": t.ECHO_MARK}, f"unexpected output {got!r}")

    def i2_rust_client_unknown_workflow() -> None:
        rc, out, err = rust_client(work, "interop-no-such-workflow", "{}", timeout=30)
        expect(rc == 1, f"exit code {rc} (stdout {out.strip()!r})")
        expect(out.strip() == "", f"printed a result: {out.strip()!r}")
        expect("interop-no-such-workflow" in err, f"the error lacks the name: {err.strip()!r}")

    def h3_rust_worker_exits_on_sigterm() -> None:
        os.killpg(rust_worker.pid, signal.SIGTERM)
        try:
            rc = rust_worker.wait(20)  # drains for up to 10 s
        except subprocess.TimeoutExpired:
            raise AssertionError("still running 20s after SIGTERM") from None
        expect(rc == 0, f"exit code {rc}")
        rows = rest_get(hs, f"/api/v1/tenants/{hs['tenant_id']}/worker")["rows"]
        statuses = [w.get("status") for w in rows if w["name"] == RUST_WORKER]
        # Rows of earlier runs of this worker name (a tenant kept between runs) read INACTIVE.
        expect(statuses.count("PAUSED") == 1 and set(statuses) <= {"PAUSED", "INACTIVE"},
               f"the drained worker's row reads {statuses}")

    check("h1 Rust worker runs rust-echo triggered by the SDK (run, aio_run)",
          h1_rust_worker_runs_sdk_triggered_echo)
    check("h2 Rust worker runs rust-dag triggered by the SDK", h2_rust_worker_runs_sdk_triggered_dag)
    check("i1 Rust client runs the SDK worker's interop-echo", i1_rust_client_runs_python_task)
    check("i2 Rust client exits 1 for an unknown workflow", i2_rust_client_unknown_workflow)
    check("h3 Rust worker pauses, drains and exits 0 on SIGTERM", h3_rust_worker_exits_on_sigterm)


def body(session: Session) -> None:
    for var in ("HATCHET_RUST_WORKER_BIN", "HATCHET_RUST_CLIENT_BIN"):
        expect(os.access(os.environ.get(var, ""), os.X_OK), f"${var} is not an executable file")
    session.logs.append(session.work / "client.err")
    rust_worker = session.spawn("rust worker", [os.environ["HATCHET_RUST_WORKER_BIN"]],
                                "rust-worker.log", WORKER_SLOTS="4")
    py_worker = session.python("worker", "interop_worker.py")
    run_checks(session.hs, session.work, py_worker, rust_worker)


if __name__ == "__main__":
    drive("hatchet-interop-rust-", body, client_env={"INTEROP_WORKER_NAME": PY_WORKER})
