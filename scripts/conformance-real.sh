#!/usr/bin/env bash
# The conformance suite against the real engine (its client env already exported, see
# scripts/real-engine.sh env). The same policy as the interop suites on the real engine: its read
# models trail its result stream by a varying moment, so a test that failed runs once more, alone,
# and is reported as `FLAKY test: first attempt failed` at the end. A test that fails twice, or a
# run that fails without naming a failed test (a build error, a timeout), fails the step.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT

timeout 1200 cargo test --test suite conformance:: -- --test-threads 4 \
  --skip _engine_restarting_ 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
flaky=()
if [ "$rc" -ne 0 ]; then
  # libtest lists the failed tests under the last "failures:" header, four spaces in.
  mapfile -t failed < <(awk '/^failures:$/ {n++; next} n == 2 && /^    conformance::/ {print $1}' "$log")
  if [ "${#failed[@]}" -eq 0 ]; then
    echo "conformance-real: the run failed (exit $rc) without naming a failed test" >&2
    exit "$rc"
  fi
  for t in "${failed[@]}"; do
    echo "== rerunning $t alone"
    if ! timeout 600 cargo test --test suite "$t" -- --exact; then
      echo "FAIL $t: failed twice on the real engine" >&2
      exit 1
    fi
    flaky+=("$t")
  done
fi
# The checks that kill and restart the shared engine run alone, one after another.
source scripts/lib-rerun.sh
FLAKY_TESTS=("${flaky[@]}")
for restart in conformance::results::results_survive_the_engine_restarting_mid_run \
  conformance::results::listeners_serve_again_within_seconds_after_the_engine_restarting_twice; do
  run_alone "the real engine" "$restart" 900
done
report_flaky
