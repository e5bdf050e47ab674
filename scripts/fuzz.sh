#!/usr/bin/env bash
# Fuzzes token parsing, Retry-After/pushback parsing and action payload decoding with cargo-fuzz
# (libFuzzer), FUZZ_SECS seconds per target (60 by default). cargo-fuzz needs nightly flags;
# RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them. A crash stops the script and leaves
# its input under fuzz/artifacts/<target>/: add it to src/fuzz_regressions.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECS="${FUZZ_SECS:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
for target in token retry_after action_payload; do
  echo "== fuzz $target for ${FUZZ_SECS}s"
  timeout $((FUZZ_SECS + 900)) cargo fuzz run --fuzz-dir fuzz "$target" -- -max_total_time="$FUZZ_SECS" -rss_limit_mb=2048
done
echo "fuzz: 3 targets ran ${FUZZ_SECS}s each without a crash"
