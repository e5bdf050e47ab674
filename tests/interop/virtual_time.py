"""Time you can skip, through the official Python SDK (check v1): our engine started with
--virtual-time runs an SDK durable task that sleeps an hour (`ctx.aio_sleep_for`), awaited by
an SDK client, in well under a minute of wall time. Ours only (the real engine has no virtual
clock). The worker is virtual_time_worker.py, the task virtual_time_tasks.py.
Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional), INTEROP_KEEP=1.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    from interop_util import (bounded, check, dump_logs, expect, failures, forget_pid, log,
                              stop)
    from parity import wait_registered
    from scenario import start_engine

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.environ.get("HATCHET_REAL_ENGINE") == "1":
        print("interop: check v1 (virtual time) is our engine's alone; skipped on the real engine",
              flush=True)
        return 0
    work = Path(tempfile.mkdtemp(prefix="hatchet-virtual-"))
    os.chdir(work)
    os.environ["INTEROP_ENGINE_FLAGS"] = "--virtual-time"
    engine, hs = start_engine(work)
    os.environ.update(
        HATCHET_CLIENT_TOKEN=hs["token"],
        HATCHET_CLIENT_HOST_PORT=hs["grpc_address"],
        HATCHET_CLIENT_SERVER_URL=hs["api_url"],
        HATCHET_CLIENT_TLS_STRATEGY="none",
        PYTHONPATH=str(HERE),
    )
    proc = subprocess.Popen([sys.executable, str(HERE / "virtual_time_worker.py")],
                            start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=open(work / "worker.log", "wb"), stderr=subprocess.STDOUT)
    try:
        def v1_an_hour_of_durable_sleep() -> None:
            wait_registered(hs, "vt-worker", {"vt-sleep:vt-sleep"}, proc, 40)
            from virtual_time_tasks import Msg, vt_sleep
            nonce = uuid.uuid4().hex
            began = time.monotonic()
            out = bounded(lambda: vt_sleep.run(Msg(nonce=nonce)), 60)
            took = time.monotonic() - began
            log(f"v1 an hour's durable sleep took {took:.2f}s of wall time: {out}")
            expect(out == {"nonce": nonce, "slept": True}, f"unexpected output {out!r}")
            expect(took < 30, f"an hour's sleep took {took:.1f}s of wall time")

        check("v1 --virtual-time: an SDK durable task's hour of sleep passes in seconds",
              v1_an_hour_of_durable_sleep)
    finally:
        stop(proc, "worker", grace=15)
        engine.stdin.close()
        try:
            engine.wait(10)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait(5)
        forget_pid(str(engine.pid))
        if failures:
            dump_logs(work / "worker.log", work / "engine.log")
        elif os.environ.get("INTEROP_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
