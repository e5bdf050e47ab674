#!/usr/bin/env bash
# Where our worker's CPU goes, per task: the development engine (release, --instant-timing, so
# the engine's timing does not pace the load), our worker (examples/worker.rs, release, with line
# tables) under `perf record`, and BENCH_TASKS runs of rust-echo (the benchmarks' trivial task)
# triggered and awaited with our client (tools/bench_driver.rs). Prints the worker's CPU per
# 1,000 tasks (from /proc, perf's own cost excluded) and perf's top symbols by self time, and
# keeps perf.data in target/profile/ for `perf report -i target/profile/perf.data`.
#
#   scripts/profile_worker.sh        (BENCH_TASKS=5000, WORKER_SLOTS=50; needs linux-perf)
#   PROFILE_ENGINE=env scripts/profile_worker.sh   against the engine the HATCHET_CLIENT_*
#                                    variables name (the real engine: eval "$(scripts/real-engine.sh env)")
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
OUT="$ROOT/target/profile"
TASKS="${BENCH_TASKS:-5000}"
mkdir -p "$OUT"
command -v perf >/dev/null || { echo "profile: perf is missing (apt-get install linux-perf)" >&2; exit 1; }
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release --quiet \
  --bin hatchet-dev-engine --example worker --example bench_driver
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
if [[ "${PROFILE_ENGINE:-dev}" != env ]]; then
  "$ROOT/target/release/hatchet-dev-engine" --instant-timing >"$OUT/engine.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q '^export HATCHET_CLIENT_TOKEN=' "$OUT/engine.out" && break; sleep 0.1; done
  # shellcheck disable=SC1090
  source <(grep '^export HATCHET_CLIENT_' "$OUT/engine.out")
fi
WORKER_SLOTS="${WORKER_SLOTS:-50}" RUST_LOG=warn "$ROOT/target/release/examples/worker" >"$OUT/worker.out" 2>&1 &
worker=$!
pids+=("$worker")
for _ in $(seq 1 100); do grep -q 'worker ready' "$OUT/worker.out" && break; sleep 0.1; done
cpu() { awk '{print $14 + $15}' "/proc/$worker/stat"; }
# Warm-up runs, then the measured part under perf.
exec 3> >(BENCH_TASKS="$TASKS" BENCH_WARMUP=200 "$ROOT/target/release/examples/bench_driver" >"$OUT/driver.out" 2>&1)
for _ in $(seq 1 600); do grep -q '"warm"' "$OUT/driver.out" 2>/dev/null && break; sleep 0.1; done
perf record -F 499 -g -p "$worker" -o "$OUT/perf.data" >/dev/null 2>&1 &
perf_pid=$!
sleep 0.5
before=$(cpu)
echo go >&3
for _ in $(seq 1 3000); do grep -q '"done"' "$OUT/driver.out" && break; sleep 0.1; done
after=$(cpu)
kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
ticks=$(getconf CLK_TCK)
grep '"done"' "$OUT/driver.out"
awk -v a="$after" -v b="$before" -v t="$ticks" -v n="$TASKS" \
  'BEGIN { printf "worker CPU: %.3f s for %d tasks, %.3f ms per task (with perf sampling)\n", (a-b)/t, n, (a-b)/t*1000/n }'
perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60
