#!/usr/bin/env bash
# End-to-end throughput against the official Go and Python SDKs: trivial tasks completed per
# second by ONE worker process, ours (the Rust example worker, task `rust-echo`) vs a Go SDK
# worker (tests/interop/go `bench-worker`, with its `bench-drive` client) vs a hatchet-sdk
# Python worker (benches/python/echo_worker.py, an equivalent async echo task). Each side gets a fresh
# hatchet-dev-engine, the same slots and the same bulk trigger load from the same Python driver
# (benches/python/bench.py). Prints a Markdown table (tasks/s, worker CPU s per 1,000 tasks,
# ratio ours/python) and appends it to target/bench-report/python.md.
#
#   scripts/bench_python.sh            # builds the engine and the worker example (release)
#   HATCHET_DEV_ENGINE_BIN=target/debug/hatchet-dev-engine \
#   HATCHET_RUST_WORKER_BIN=target/debug/examples/worker scripts/bench_python.sh
#
# BENCH_ENGINE=real runs every side on the real engine instead (scripts/real-engine.sh starts
# it; sizes default to "2000 10000"; the table goes to target/bench-report/real-engine.md).
# Knobs: BENCH_SIDES ("rust go python"), BENCH_TASKS (2000), BENCH_SLOTS (50), BENCH_CHUNK (500 runs per bulk trigger),
# BENCH_WARMUP (20), BENCH_SIDE_TIMEOUT (75 s), BENCH_WAIT (refs | rest); see bench.py.
# The Python SDK comes from tests/interop/.venv (created with the pinned SDK if missing).
# Every process started here is killed by id on exit; each side is bounded by `timeout`.
set -euo pipefail

SDK_VERSION=1.43.1 # keep in step with tests/interop/run.sh
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/tests/interop/.venv"
REPORT="$ROOT/target/bench-report/python.md"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hatchet-bench-python.XXXXXX")"
export INTEROP_PIDFILE="$TMP/pids" # the driver records its children here (see interop_util.py)
: >"$INTEROP_PIDFILE"
STEP_PID=""

cleanup() {
    local spec
    if [[ -n "$STEP_PID" ]]; then # the driver stops its worker and engine itself on SIGTERM
        kill -TERM "$STEP_PID" 2>/dev/null || true
        for _ in $(seq 30); do kill -0 "$STEP_PID" 2>/dev/null && sleep 0.5; done
        # `timeout` leads its own process group: this reaches the driver too
        kill -KILL -- "-$STEP_PID" "$STEP_PID" 2>/dev/null || true
    fi
    while read -r spec; do # "PID" or "-PGID" the driver recorded and did not mark "done"
        [[ -n "$spec" && "$spec" != done* ]] || continue
        grep -qxF "done $spec" "$INTEROP_PIDFILE" && continue
        kill -TERM -- "$spec" 2>/dev/null || continue
        sleep 1
        kill -KILL -- "$spec" 2>/dev/null || true
    done <"$INTEROP_PIDFILE"
    rm -rf "$TMP"
    if [[ "${BENCH_ENGINE:-ours}" == real ]]; then "$ROOT/scripts/real-engine.sh" stop || true; fi
}
trap cleanup EXIT
trap 'echo "bench: interrupted" >&2; exit 130' INT
trap 'echo "bench: terminated" >&2; exit 143' TERM

# step SECONDS CMD...: run CMD under `timeout` in the background, so signals reach our traps.
step() {
    local secs=$1 rc=0
    shift
    timeout -k 10 "$secs" "$@" &
    STEP_PID=$!
    wait "$STEP_PID" || rc=$?
    STEP_PID=""
    return "$rc"
}

# 1. the Python SDK
if [[ ! -x "$VENV/bin/python" ]]; then
    step 120 python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import hatchet_sdk" 2>/dev/null; then
    step 300 "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "hatchet-sdk==$SDK_VERSION"
fi

# 2. the binaries (release unless given)
if [[ -z "${HATCHET_DEV_ENGINE_BIN:-}" || -z "${HATCHET_RUST_WORKER_BIN:-}" ]]; then
    cd "$ROOT"
    step 1800 cargo build --release --quiet --bin hatchet-dev-engine --example worker \
        --example bench_driver
fi
DRIVER="${HATCHET_RUST_DRIVER_BIN:-$ROOT/target/release/examples/bench_driver}"
ENGINE="${HATCHET_DEV_ENGINE_BIN:-$ROOT/target/release/hatchet-dev-engine}"
WORKER="${HATCHET_RUST_WORKER_BIN:-$ROOT/target/release/examples/worker}"
# the official Go SDK's worker and driver (tests/interop/go; BENCH_SKIP_GO=1 leaves it out)
# The Go SDK release the suite pins (go.mod's require line).
GO_SDK="$(awk '$1 == "github.com/hatchet-dev/hatchet" {print $2}' "$ROOT/tests/interop/go/go.mod")"
SIDES_RUN="${BENCH_SIDES:-rust go python}"
if [[ "${BENCH_SKIP_GO:-0}" == 1 ]]; then
    SIDES_RUN="${SIDES_RUN//go/}"
elif [[ -z "${HATCHET_GO_BENCH_BIN:-}" ]]; then
    command -v go >/dev/null || { echo "bench: the Go toolchain is needed for the Go SDK side (BENCH_SKIP_GO=1 skips it)" >&2; exit 1; }
    step 900 "$ROOT/tests/interop/go/build.sh" "$ROOT/target/interop-go/go-interop"
fi
GO_BENCH="${HATCHET_GO_BENCH_BIN:-$ROOT/target/interop-go/go-interop}"
for b in "$ENGINE" "$WORKER" "$DRIVER"; do
    [[ -x "$b" ]] || { echo "bench: binary '$b' is missing or not executable" >&2; exit 1; }
done
abspath() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
ENGINE="$(abspath "$ENGINE")"
WORKER="$(abspath "$WORKER")"
DRIVER="$(abspath "$DRIVER")"
profile() { case "$1" in */debug/*) echo debug ;; */release/*) echo release ;; *) echo "?" ;; esac; }
BUILD="engine $(profile "$ENGINE") build, worker $(profile "$WORKER") build"
[[ "$BUILD" == *debug* ]] &&
    echo "bench: debug binaries in use; release builds (the default without *_BIN env) are faster"
echo "bench: engine $ENGINE"
echo "bench: worker $WORKER"
echo "bench: ${BENCH_TASKS:-2000} tasks, ${BENCH_SLOTS:-50} slots per worker, $(nproc) CPUs"

# 3. one side at a time, each with its own engine (or all on the real engine); then the table
SVG="$ROOT/target/bench-report/throughput.svg"
if [[ "${BENCH_ENGINE:-ours}" == real ]]; then
    # The real engine (scripts/real-engine.sh: hatchet-engine from the Go module proxy on
    # PostgreSQL from Debian's packages), started once and shared by every side and size.
    REPORT="$ROOT/target/bench-report/real-engine.md"
    SVG="$ROOT/target/bench-report/throughput-real.svg"
    step 1800 "$ROOT/scripts/real-engine.sh" start
    eval "$("$ROOT/scripts/real-engine.sh" env)"
    export BENCH_REAL_ENGINE_LABEL="The real engine (hatchet-engine $GO_SDK and hatchet-api on PostgreSQL 15, scripts/real-engine.sh: the Postgres message and task queues, engine settings in docs/guide/real-engine.md)"
    BENCH_SIZES="${BENCH_SIZES:-2000 10000}"
    echo "bench: on the real engine at $HATCHET_CLIENT_HOST_PORT"
fi
export HATCHET_DEV_ENGINE_BIN="$ENGINE" HATCHET_RUST_WORKER_BIN="$WORKER" BENCH_BUILD="$BUILD"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
# Sizes: BENCH_SIZES (default "2000 10000 50000"); ours runs with our client (BENCH_CLIENT=rust).
SIZES="${BENCH_SIZES:-2000 10000 50000}"
export BENCH_CLIENT=rust HATCHET_RUST_DRIVER_BIN="$DRIVER" HATCHET_GO_BENCH_BIN="$GO_BENCH"
export BENCH_GO_SDK="Go SDK $GO_SDK"
results=()
for n in $SIZES; do
    side_limit=$((${BENCH_SIDE_TIMEOUT:-$((n / 150 + 75))} + 60))
    for side in $SIDES_RUN; do
        echo "bench: side '$side', $n runs (limit ${side_limit}s)"
        rc=0
        BENCH_TASKS="$n" step "$side_limit" "$VENV/bin/python" "$ROOT/benches/python/bench.py" \
            side "$side" "$TMP/$side-$n.json" || rc=$?
        if [[ $rc -ne 0 ]]; then
            echo "bench: side '$side' ($n runs) failed (exit code $rc)" >&2
            exit 1
        fi
        results+=("$TMP/$side-$n.json")
    done
done
"$VENV/bin/python" "$ROOT/benches/python/bench.py" sweep "$REPORT" "$SVG" "${results[@]}"
echo "bench: appended to $REPORT; plot in $SVG"
