#!/usr/bin/env bash
# Throughput on the reference deployment (scripts/real-cluster.sh: two gRPC replicas behind
# nginx, a controllers+scheduler process, RabbitMQ, PostgreSQL): tasks/s and worker CPU per
# 1,000 tasks with 1, 2 and 4 worker processes, ours (examples/worker.rs with our client,
# tools/bench_driver.rs) beside the official Go SDK's (tests/interop/go bench-worker and
# bench-drive) in the same run. The sides are interleaved A B B A per worker count (ours, Go,
# Go, ours): on a shared engine a run favours the side that goes second, so every pair is
# printed, and the median of the pairs' ratios. The table goes to target/bench-report/cluster.md.
#
#   scripts/bench_cluster.sh
#
# Knobs: BENCH_TASKS (2000 per side), BENCH_SLOTS (50 per worker), BENCH_WORKER_COUNTS ("1 2 4"),
# BENCH_ORDER ("rust go go rust"). Release builds; the cluster is started if it is not running
# and left running.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/tests/interop/.venv"
SDK_VERSION=1.43.1 # keep in step with tests/interop/run.sh
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hatchet-bench-cluster.XXXXXX")"
export INTEROP_PIDFILE="$TMP/pids"
: >"$INTEROP_PIDFILE"
cleanup() {
  local spec
  while read -r spec; do
    [[ -n "$spec" && "$spec" != done* ]] || continue
    grep -qxF "done $spec" "$INTEROP_PIDFILE" && continue
    kill -TERM -- "$spec" 2>/dev/null || true
  done <"$INTEROP_PIDFILE"
}
trap cleanup EXIT

[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -c "import hatchet_sdk" 2>/dev/null ||
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "hatchet-sdk==$SDK_VERSION"
cargo build --release --quiet --example worker --example bench_driver
tests/interop/go/build.sh "$ROOT/target/interop-go/go-interop"
if [[ "$(scripts/real-cluster.sh status)" != *"proxy: running"* ]]; then
  scripts/real-cluster.sh start >/dev/null
fi
eval "$(scripts/real-cluster.sh env)"
GO_SDK="$(awk '$1 == "github.com/hatchet-dev/hatchet" {print $2}' tests/interop/go/go.mod)"
export HATCHET_REAL_ENGINE=1 BENCH_CLIENT=rust PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export HATCHET_RUST_WORKER_BIN="$ROOT/target/release/examples/worker"
export HATCHET_RUST_DRIVER_BIN="$ROOT/target/release/examples/bench_driver"
export HATCHET_GO_BENCH_BIN="$ROOT/target/interop-go/go-interop"
export HATCHET_DEV_ENGINE_BIN=/nonexistent # the real engine: bench.py starts no engine
TASKS="${BENCH_TASKS:-2000}"
ORDER="${BENCH_ORDER:-rust go go rust}"
results=()
for n in ${BENCH_WORKER_COUNTS:-1 2 4}; do
  i=0
  for side in $ORDER; do
    i=$((i + 1))
    out="$TMP/w$n-$i-$side.json"
    echo "bench-cluster: $n $side worker(s), $TASKS runs (position $i of the A B B A order)"
    BENCH_WORKERS="$n" BENCH_TASKS="$TASKS" timeout -k 10 400 \
      "$VENV/bin/python" benches/python/bench.py side "$side" "$out"
    results+=("$out")
  done
done
mkdir -p target/bench-report
"$VENV/bin/python" - "$GO_SDK" "$TASKS" "${results[@]}" <<'PY' | tee -a target/bench-report/cluster.md
import json, statistics, sys, collections
go_sdk, tasks, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
by_n = collections.defaultdict(list)
for p in paths:
    r = json.load(open(p))
    by_n[r["workers"]].append(r)
print(f"\n### Throughput on the cluster ({tasks} runs per side, {{}} slots per worker; ours vs Go SDK {go_sdk})\n".format(by_n[min(by_n)][0]["slots"]))
print("Command: `scripts/bench_cluster.sh`. Two gRPC replicas behind nginx, a controllers+scheduler process, RabbitMQ and PostgreSQL on this 2-core machine (scripts/real-cluster.sh); each side triggers with its own client. Sides interleaved A B B A; a pair is one ours run beside one Go run.\n")
print("| workers | pair | ours tasks/s | Go tasks/s | ours/Go tasks/s | ours CPU s/1k | Go CPU s/1k | ours/Go CPU |")
print("|---|---|---|---|---|---|---|---|")
summary = []
for n in sorted(by_n):
    runs = by_n[n]
    ours = [r for r in runs if r["side"] == "rust"]
    go = [r for r in runs if r["side"] == "go"]
    # A B B A: the first ours with the first Go, the second Go with the second ours.
    pairs = list(zip(ours, go))
    tp, cpu = [], []
    for k, (o, g) in enumerate(pairs, 1):
        t = o["tasks_per_s"] / g["tasks_per_s"]
        c = o["cpu_s_per_1k"] / max(g["cpu_s_per_1k"], 1e-9)
        tp.append(t); cpu.append(c)
        print(f"| {n} | {k} ({'ours first' if k == 1 else 'Go first'}) | {o['tasks_per_s']:.0f} | {g['tasks_per_s']:.0f} | {t:.2f}x | {o['cpu_s_per_1k']:.3f} | {g['cpu_s_per_1k']:.3f} | {c:.2f}x |")
    summary.append((n, statistics.median(tp), statistics.median(cpu)))
print("\n| workers | median ours/Go tasks/s | median ours/Go worker CPU per 1k tasks |")
print("|---|---|---|")
for n, t, c in summary:
    print(f"| {n} | **{t:.2f}x** | **{c:.2f}x** |")
PY
echo "bench-cluster: appended to target/bench-report/cluster.md"
