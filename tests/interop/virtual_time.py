"""Time you can skip, through the official Python SDK (check v1): our engine started with
--virtual-time runs an SDK durable task that sleeps an hour (`ctx.aio_sleep_for`), awaited by
an SDK client, in well under a minute of wall time. Ours only (the real engine has no virtual
clock). The worker is virtual_time_worker.py, the task virtual_time_tasks.py.
Env: HATCHET_DEV_ENGINE_BIN (required), INTEROP_PIDFILE (optional), INTEROP_KEEP=1.
"""

import os
import time
import uuid

from interop_harness import Session, drive, real_engine, wait_registered
from interop_util import bounded, check, expect, log


def body(session: Session) -> None:
    proc = session.python("worker", "virtual_time_worker.py")

    def v1_an_hour_of_durable_sleep() -> None:
        wait_registered(session.hs, "vt-worker", {"vt-sleep:vt-sleep"}, proc, 40)
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


if __name__ == "__main__":
    if real_engine():
        print("interop: check v1 (virtual time) is our engine's alone; skipped on the real engine",
              flush=True)
        os._exit(0)
    drive("hatchet-virtual-", body, engine_flags=["--virtual-time"])
