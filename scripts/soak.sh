#!/usr/bin/env bash
# Long soak: the soak test alone (so resident memory is meaningful) for SOAK_SECS (600 default),
# with periodic engine restarts. Prints the samples and fails if tasks or memory grow.
set -euo pipefail
cd "$(dirname "$0")/.."
export SOAK_SECS="${SOAK_SECS:-600}" SOAK_ALONE=1
timeout $((SOAK_SECS + 600)) cargo test --release --test suite soak:: -- --exact faults::soak::soak_with_periodic_restarts_keeps_tasks_waiters_and_memory_flat --nocapture
