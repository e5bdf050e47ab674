# Sourced by the conformance scripts: the real engine's policy for a check that failed. Its read
# models trail its result stream by a varying moment, so a check that fails runs once more,
# alone, and is reported FLAKY when the rerun passes; one that fails twice fails the step.
FLAKY_TESTS=()

# run_alone WHERE TEST [SECONDS]: runs TEST alone (and once more if it fails); exits 1 when it
# fails twice.
run_alone() {
  local where=$1 t=$2 secs=${3:-900}
  if ! timeout "$secs" cargo test --test suite "$t" -- --exact --nocapture; then
    echo "== rerunning $t alone"
    if ! timeout "$secs" cargo test --test suite "$t" -- --exact --nocapture; then
      echo "FAIL $t: failed twice on $where" >&2
      exit 1
    fi
    FLAKY_TESTS+=("$t")
  fi
}

report_flaky() {
  local t
  for t in "${FLAKY_TESTS[@]}"; do
    echo "FLAKY $t: the first attempt failed, the rerun passed"
  done
}
