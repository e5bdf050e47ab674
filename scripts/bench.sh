#!/usr/bin/env bash
# All eight benchmarks, release builds, each side by side with its baseline in one run:
#   1 unary overhead (vs raw tonic), 2 result fan-in (vs a raw stream consumer), 3 reconnect
#   (vs the official Python SDK), 4 outage amplification (vs the Go SDK's documented retry
#   policy), 5 at rest (our worker process vs the Go and Python SDKs'), 7 latency against the
#   protocol floor (raw stubs, ours, the Go and Python SDKs), 8 cold start
#   -- cargo bench --bench side_by_side
#   6 end-to-end throughput at 2,000 / 10,000 / 50,000 runs, our worker and client against the
#     official Go and Python SDKs' -- scripts/bench_python.sh (BENCH_SIZES to change the sizes)
#   then 6 and 7 again on the real engine (scripts/bench_real.sh: hatchet-engine v0.104.9 on
#     PostgreSQL, the same three clients; BENCH_REAL=0 skips it, about 15 minutes more)
# Writes target/bench-report/report.md (all tables), outage.svg, throughput.svg and python.md,
# and real-engine.md and real-engine-latency.md. Arguments select benchmarks of side_by_side.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
mkdir -p target/bench-report
rm -f target/bench-report/python.md
# Benchmark 6 first: it creates the Python SDK's virtualenv (tests/interop/.venv) and builds the
# release engine and worker that benchmarks 3 and 5 use as baselines.
timeout 900 scripts/bench_python.sh
export HATCHET_BENCH_PYTHON="$ROOT/tests/interop/.venv/bin/python"
export HATCHET_RUST_WORKER_BIN="$ROOT/target/release/examples/worker"
# the Go SDK's bench worker and latency client (built by bench_python.sh unless BENCH_SKIP_GO=1)
[[ "${BENCH_SKIP_GO:-0}" == 1 ]] || export HATCHET_GO_BENCH_BIN="${HATCHET_GO_BENCH_BIN:-$ROOT/target/interop-go/go-interop}"
timeout 1800 cargo bench --bench side_by_side -- "$@"
{
  echo
  echo "## 6. End-to-end throughput against the official Python SDK"
  echo
  cat target/bench-report/python.md
} >> target/bench-report/report.md
if [[ "${BENCH_REAL:-1}" != 0 ]]; then
  rm -f target/bench-report/real-engine.md target/bench-report/real-engine-latency.md
  scripts/bench_real.sh
  for f in real-engine.md real-engine-latency.md; do
    if [[ -f "target/bench-report/$f" ]]; then
      { echo; cat "target/bench-report/$f"; } >> target/bench-report/report.md
    fi
  done
fi
echo "wrote target/bench-report/report.md"
