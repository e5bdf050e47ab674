#!/usr/bin/env bash
# The benchmarks on the real engine (scripts/real-engine.sh: hatchet-engine from the Go module
# proxy on PostgreSQL from Debian's packages), ours beside the official Go and Python SDKs in the
# same run:
#   6 end-to-end throughput, worker and engine CPU per 1,000 tasks (BENCH_ENGINE=real
#     scripts/bench_python.sh; sizes "2000 10000" unless BENCH_SIZES) -> target/bench-report/real-engine.md
#   7 trigger -> result latency against the protocol floor (BENCH_ENGINE=real cargo bench
#     --bench side_by_side -- latency) -> target/bench-report/real-engine-latency.md
# `scripts/bench_real.sh latency` runs only the second, `... throughput` only the first.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
what="${1:-all}"
mkdir -p target/bench-report
if [[ "$what" == all || "$what" == throughput ]]; then
  # It starts the real engine and stops it when done, and builds the Go SDK's bench binary and
  # the Python SDK's virtualenv that the latency rows use too.
  BENCH_ENGINE=real timeout 3600 scripts/bench_python.sh
fi
if [[ "$what" == all || "$what" == latency ]]; then
  VENV="$ROOT/tests/interop/.venv"
  GO_BIN="$ROOT/target/interop-go/go-interop"
  if [[ ! -x "$VENV/bin/python" || ! -x "$GO_BIN" ]]; then
    echo "bench_real: the Python SDK's virtualenv or the Go SDK's bench binary is missing: run scripts/bench_real.sh throughput (or scripts/bench_python.sh) once" >&2
    exit 1
  fi
  trap 'scripts/real-engine.sh stop || true' EXIT
  timeout 1800 scripts/real-engine.sh start
  eval "$(scripts/real-engine.sh env)"
  BENCH_ENGINE=real HATCHET_BENCH_PYTHON="$VENV/bin/python" HATCHET_GO_BENCH_BIN="$GO_BIN" \
    timeout 1800 cargo bench --bench side_by_side -- latency
fi
