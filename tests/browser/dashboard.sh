#!/usr/bin/env bash
# Browser test of the development engine's dashboard: runs the quickstart (holding the engine up
# after its summary), loads the dashboard in headless Chromium, checks what the page shows once
# its script has fetched the data, and keeps a screenshot at target/dashboard.png.
#
# Needs `chromium` (Debian's package; .ci/run installs it). Exits non-zero, saying why, on any
# missing piece: a check that cannot run is a failure, not a pass.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
if [[ -z "$CHROMIUM" ]]; then
    echo "dashboard: no chromium on PATH (apt-get install chromium)" >&2
    exit 1
fi
TMP="$(mktemp -d "${TMPDIR:-/tmp}/hatchet-dashboard.XXXXXX")"
QS_PID=""
cleanup() {
    [[ -n "$QS_PID" ]] && kill "$QS_PID" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

cargo build --quiet --example quickstart
QUICKSTART_HOLD_SECS=60 RUST_LOG=error target/debug/examples/quickstart >"$TMP/out" 2>"$TMP/err" &
QS_PID=$!
for _ in $(seq 1200); do
    grep -q "^holding for" "$TMP/out" 2>/dev/null && break
    kill -0 "$QS_PID" 2>/dev/null || { echo "dashboard: the quickstart exited early" >&2; cat "$TMP/out" "$TMP/err" >&2; exit 1; }
    sleep 0.1
done
URL="$(sed -n 's/^holding for [0-9]* s: //p' "$TMP/out")"
[[ -n "$URL" ]] || { echo "dashboard: the quickstart printed no dashboard URL" >&2; cat "$TMP/out" >&2; exit 1; }

CHROME=("$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run
    --disable-background-networking --disable-component-update --disable-sync
    --user-data-dir="$TMP/profile" --virtual-time-budget=5000)
timeout 120 "${CHROME[@]}" --dump-dom "$URL" >"$TMP/dom.html" 2>"$TMP/chrome.err" || {
    echo "dashboard: chromium failed" >&2; tail -20 "$TMP/chrome.err" >&2; exit 1; }
mkdir -p target
timeout 120 "${CHROME[@]}" --window-size=1400,1000 --screenshot="$ROOT/target/dashboard.png" "$URL" \
    >/dev/null 2>>"$TMP/chrome.err" || { echo "dashboard: screenshot failed" >&2; exit 1; }

fail=0
check() { # check NAME PATTERN MIN: the rendered page holds PATTERN at least MIN times
    local n
    n="$( (grep -o -- "$2" "$TMP/dom.html" || true) | wc -l)"
    if (( n >= $3 )); then echo "PASS $1 ($n)"; else echo "FAIL $1: $n of $3 '$2'"; fail=1; fi
}
check "the runs table lists the quickstart's order runs" '<td>order-pipeline</td>' 300
check "durable approval runs are listed" '<td>approval</td><td><span' 20
check "completed runs show their status" 'class="st COMPLETED">COMPLETED' 300
check "each order run shows its DAG's last task" '<b>receipt</b>' 300
check "task outputs are shown" '"total"' 300
check "the worker is listed and active" 'quickstart-worker</td><td><span class="st ACTIVE">' 1
# The quickstart pushes its approvals as `approval`, scoped per order: an event row is its key,
# then its time (a run row is its workflow, then a status badge).
check "recent events are listed" '<td>approval</td><td>[^<]' 5
check "no error banner" '<div id="error"></div>' 1
[[ -s "$ROOT/target/dashboard.png" ]] && echo "PASS screenshot kept at target/dashboard.png" || { echo "FAIL no screenshot"; fail=1; }
if (( fail )); then
    echo "dashboard: some checks failed; the page was:" >&2
    head -c 4000 "$TMP/dom.html" >&2
    exit 1
fi
echo "dashboard: 9 passed, 0 failed"
