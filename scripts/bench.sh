#!/usr/bin/env bash
# All six benchmarks, release builds, side by side in one run each:
#   1 unary overhead, 2 result fan-in, 3 reconnect, 5 outage amplification, 6 at rest
#     (cargo bench --bench side_by_side)
#   4 end-to-end throughput against the official Python SDK (scripts/bench_python.sh)
# Writes target/bench-report/report.md (all tables), outage.svg and python.md.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/bench-report
rm -f target/bench-report/python.md
timeout 1500 cargo bench --bench side_by_side "$@"
timeout 900 scripts/bench_python.sh
{
  echo
  echo "## 4. End-to-end throughput against the official Python SDK"
  echo
  cat target/bench-report/python.md
} >> target/bench-report/report.md
echo "wrote target/bench-report/report.md"
