"""One harness for the Python interop drivers (scenario, parity, placement, rust_interop,
virtual_time): a work directory, the engine (ours, started from $HATCHET_DEV_ENGINE_BIN, or the
real one the environment names), the SDK's environment, worker processes in their own process
groups, and on the way out: the workers stopped, our engine stopped through its stdin, the logs
dumped when a check failed, the work directory removed unless kept (INTEROP_KEEP=1).

A driver's `__main__` is `drive("prefix-", body)`: it runs `body(session)` and ends the process
with 0 when every check passed, 1 otherwise.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

from interop_util import (check, dump_logs, expect, failures, forget_pid, log, remember_pid, stop,
                          wait_until)

HERE = Path(__file__).resolve().parent


def real_engine() -> bool:
    """Whether the drivers run against the real Hatchet engine (scripts/real-engine.sh env)."""
    return os.environ.get("HATCHET_REAL_ENGINE") in ("1", "true")


def start_engine(work: Path, flags: Iterable[str] = ()) -> tuple[subprocess.Popen[bytes] | None,
                                                                  dict[str, str]]:
    """Our engine, started for this driver; or the real one, already running (no process)."""
    if real_engine():
        env = os.environ
        hs = {"token": env["HATCHET_CLIENT_TOKEN"], "tenant_id": env["HATCHET_CLIENT_TENANT_ID"],
              "grpc_address": env["HATCHET_CLIENT_HOST_PORT"],
              "api_url": env["HATCHET_CLIENT_SERVER_URL"]}
        return None, hs
    hs_path = work / "handshake.json"
    engine = subprocess.Popen(
        [os.environ["HATCHET_DEV_ENGINE_BIN"], "-handshake-file", str(hs_path),
         "-grpc-port", "0", "-api-port", "0", *flags],
        stdin=subprocess.PIPE,  # the engine exits when this pipe closes
        stdout=subprocess.DEVNULL,
        stderr=open(work / "engine.log", "wb"),
    )
    remember_pid(str(engine.pid))

    def ready() -> dict[str, str] | None:
        if engine.poll() is not None:
            raise RuntimeError(f"engine exited with {engine.returncode} before the handshake")
        try:
            return json.loads(hs_path.read_text())
        except (OSError, ValueError):
            return None

    try:
        hs = wait_until("the engine's handshake file", ready, 20)
    except BaseException:
        engine.kill()
        engine.wait(5)
        forget_pid(str(engine.pid))
        raise
    missing = {"token", "tenant_id", "grpc_address", "api_url"} - hs.keys()
    expect(not missing, f"handshake lacks {missing}")
    return engine, hs


def rest_get(hs: dict[str, str], path: str) -> dict:
    """A REST read with the tenant's token."""
    req = urllib.request.Request(hs["api_url"] + path,
                                 headers={"Authorization": f"Bearer {hs['token']}"})
    with urllib.request.urlopen(req, timeout=5) as res:
        return json.load(res)


def short(e: BaseException, limit: int = 600) -> str:
    """An exception on one line, at most `limit` characters."""
    text = f"{type(e).__name__}: {e}".replace("\n", " | ")
    return text if len(text) <= limit else text[:limit] + "..."


def wait_registered(hs: dict[str, str], name: str, actions: set[str],
                    proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Waits until worker `name` (process `proc`, which must stay alive) is ACTIVE with `actions`."""
    def registered() -> bool:
        expect(proc.poll() is None, f"worker {name} exited with {proc.returncode}")
        rows = rest_get(hs, f"/api/v1/tenants/{hs['tenant_id']}/worker")["rows"]
        return any(w["name"] == name and w.get("status") == "ACTIVE"
                   and actions <= set(w.get("actions") or []) for w in rows)

    wait_until(f"worker {name} ACTIVE with {sorted(actions)}", registered, timeout, 0.3)


class Session:
    """What a driver's body gets: the work directory, the markers directory the workers write
    to, the engine's handshake (`hs`), and `spawn` for worker processes."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.markers = work / "markers"
        self.markers.mkdir()
        self.hs: dict[str, str] = {}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.logs: list[Path] = []

    def spawn(self, name: str, argv: list[str], log_name: str,
              **env: str) -> subprocess.Popen[bytes]:
        """Starts `argv` in its own process group (so a stop reaches its children too), its
        output in `log_name`, with `env` added to this process's environment; stopped, and its
        log dumped on a failure, when the driver ends."""
        proc = subprocess.Popen(argv, start_new_session=True, env={**os.environ, **env},
                                stdin=subprocess.DEVNULL,
                                stdout=open(self.work / log_name, "wb"),
                                stderr=subprocess.STDOUT)
        remember_pid(f"-{proc.pid}")
        self.procs.append((name, proc))
        self.logs.append(self.work / log_name)
        return proc

    def python(self, name: str, script: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """`spawn` of one of this folder's Python scripts, its log `<name>.log`."""
        return self.spawn(name, [sys.executable, str(HERE / script), *args], f"{name}.log", **env)


def _stop_engine(engine: subprocess.Popen[bytes], exit_check: str | None) -> None:
    """Stops our engine by closing its stdin; with `exit_check`, that it exits within 10 s is a
    check of that name."""
    def closes() -> None:
        engine.stdin.close()
        try:
            engine.wait(10)
        except subprocess.TimeoutExpired:
            engine.kill()
            engine.wait(5)
            raise AssertionError("engine still running 10s after stdin closed")
        finally:
            forget_pid(str(engine.pid))

    if exit_check:
        check(exit_check, closes)
    else:
        try:
            closes()
        except AssertionError:
            pass


def run(prefix: str, body: Callable[[Session], None], *, client_env: dict[str, str] | None = None,
        engine_flags: Iterable[str] = (), engine_exit_check: str | None = None) -> int:
    """Runs `body` against the engine with the SDK pointed at it (`client_env` added); answers
    the process's exit code. A failure before the body's checks is counted as `setup`, a crash
    in them as `scenario`."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix=prefix))
    session = Session(work)
    os.chdir(work)  # the SDK reads .env files from the current directory: keep it clean
    log(f"work dir {work}")
    engine = None
    try:
        try:
            engine, session.hs = start_engine(work, engine_flags)
        except Exception as e:  # noqa: BLE001 - a failed setup step is a counted failure
            failures.append("setup")
            print(f"FAIL setup: engine start: {short(e)}", flush=True)
            return 1
        hs = session.hs
        log(f"engine up: grpc {hs['grpc_address']}, api {hs['api_url']}")
        os.environ.update(
            HATCHET_CLIENT_TOKEN=hs["token"],
            HATCHET_CLIENT_HOST_PORT=hs["grpc_address"],
            HATCHET_CLIENT_SERVER_URL=hs["api_url"],
            HATCHET_CLIENT_TLS_STRATEGY="none",
            INTEROP_MARKER_DIR=str(session.markers),
            PYTHONPATH=str(HERE),
            **(client_env or {}),
        )
        body(session)
    except Exception:  # noqa: BLE001 - a crash is a counted failure, and the rest still runs
        failures.append("scenario")
        print("FAIL scenario crashed:\n" + traceback.format_exc(), flush=True)
    finally:
        for name, proc in reversed(session.procs):
            stop(proc, name, grace=15)
        if engine is None and engine_exit_check and real_engine():
            log(f"check '{engine_exit_check}' is our engine's; skipped on the real one")
        if engine is not None:
            _stop_engine(engine, engine_exit_check)
        if failures:
            dump_logs(*session.logs, work / "engine.log")
        if failures or os.environ.get("INTEROP_KEEP") == "1":
            log(f"kept work dir {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def drive(prefix: str, body: Callable[[Session], None], **options) -> None:
    """[`run`], then ends the process with its code (on SIGTERM too, once `run` has stopped the
    children): threads of a timed-out SDK call must not keep it alive."""
    try:
        code = run(prefix, body, **options)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    sys.stdout.flush()
    os._exit(code)
