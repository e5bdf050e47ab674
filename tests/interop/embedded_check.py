"""Interop extra: `Hatchet.from_embedded()` drives hatchet-dev-engine as its sidecar.

With HATCHET_CLIENT_EMBEDDED_BINARY_PATH pointing at the dev engine and no token in the
environment, the SDK itself spawns the binary (`-handshake-file F`), reads the handshake and
exports it, so a worker subprocess calling `from_embedded()` joins the same engine. Counted
check: g. a task run on that worker through `aio_run()` returns its output, and
`stop_embedded()` then stops the engine.
Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional, for run.sh's trap).
"""

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from interop_util import (bounded, check, dump_logs, expect, failures, forget_pid, log,
                          remember_pid, stop, wait_until)

HERE = Path(__file__).resolve().parent


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="hatchet-interop-embedded-"))
    (work / "markers").mkdir()
    os.chdir(work)  # no stray .env files
    for k in [k for k in os.environ if k.startswith(("HATCHET_CLIENT_", "HATCHET_EMBEDDED"))]:
        del os.environ[k]
    os.environ.update(
        HATCHET_CLIENT_EMBEDDED_BINARY_PATH=os.environ["HATCHET_DEV_ENGINE_BIN"],
        HATCHET_CLIENT_EMBEDDED_READY_TIMEOUT_SECONDS="20",
        INTEROP_EMBEDDED="1",
        INTEROP_MARKER_DIR=str(work / "markers"),
        INTEROP_WORKER_NAME="interop-embedded-worker",
        PYTHONPATH=str(HERE),
    )
    worker = None
    sidecars: list = []

    def g_from_embedded() -> None:
        nonlocal worker
        import interop_tasks as t  # calls Hatchet.from_embedded(): spawns the engine
        from hatchet_sdk import embedded

        sidecars.extend(embedded._active_sidecars)  # only to record the pid for the trap
        for s in sidecars:
            remember_pid(str(s.process.pid))
        expect(bool(os.environ.get("HATCHET_EMBEDDED_HANDSHAKE")), "no handshake exported")
        log(f"embedded engine at {t.hatchet.config.host_port}")
        worker = subprocess.Popen(
            [sys.executable, str(HERE / "interop_worker.py")], start_new_session=True,
            stdout=open(work / "worker.log", "wb"), stderr=subprocess.STDOUT)
        remember_pid(f"-{worker.pid}")
        nonce = uuid.uuid4().hex

        # A trigger before the worker registered the workflow would be answered with an id no
        # run ever has (both engines answer an unknown workflow's trigger so): wait for the
        # worker, which registers only after its workflows are put.
        def registered() -> bool:
            try:
                rows = t.hatchet.workers.list().rows or []
            except Exception:  # noqa: BLE001 - the engine may still be starting
                return False
            if worker.poll() is not None:
                raise AssertionError(f"the worker exited with {worker.returncode}")
            return any(w.name == "interop-embedded-worker" for w in rows)

        wait_until("the embedded worker to register", registered, 30, 0.3)
        out = bounded(lambda: asyncio.run(t.echo.aio_run(t.Msg(nonce=nonce))), 40)
        expect(out == {"nonce": nonce, "mark": t.ECHO_MARK}, f"unexpected output {out!r}")
        stop(worker, "worker", grace=15)
        t.hatchet.stop_embedded()
        for s in sidecars:
            wait_until("the embedded engine to exit", lambda: s.process.poll() is not None, 10)

    try:
        check("g from_embedded() runs a task on the dev engine", g_from_embedded)
    finally:
        stop(worker, "worker", grace=15)
        for s in sidecars:
            if s.process.poll() is None:
                s.process.kill()
            s.process.wait(5)
            forget_pid(str(s.process.pid))
        if failures:
            dump_logs(work / "worker.log")
        elif os.environ.get("INTEROP_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
