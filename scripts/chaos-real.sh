#!/usr/bin/env bash
# The chaos suite: a worker process and a client process (tools/chaos_suite.rs, the public API
# only) work through DAG, single-task and durable runs while faults are injected on loopback: the
# engine SIGKILLed and started again, its PostgreSQL restarted, connections frozen (half-open) or
# cut by a TCP proxy of our own in front of the gRPC port, the worker SIGKILLed mid-task and
# started again. The client counts results right, wrong and lost, the runs the engine holds per
# trigger key and the executions per task in the handlers, and prints one summary line; for every
# run that did not come back right the engine's own tables are dumped as evidence.
#
#   scripts/chaos-real.sh [short|long|defaults|defaults-long]
#                                          on the real engine of scripts/real-engine.sh (started
#                                          if it is not running)
#   CHAOS_ENGINE=dev scripts/chaos-real.sh short
#                                          on our development engine (hatchet-dev-engine): the
#                                          engine "kill" drops every connection at the engine
#                                          (its state is in memory), PostgreSQL is not there
#
# Another deployment: export its HATCHET_CLIENT_* variables, set CHAOS_ENGINE=external and
# CHAOS_KILL_ENGINE / CHAOS_RESTART_POSTGRES to commands that do those (or `true` to skip them).
# Peers: CHAOS_PEER=go or CHAOS_PEER=python runs the workers written with the official Go SDK
# (tests/interop/go chaos-worker) or Python SDK (tests/interop/chaos_peer_worker.py) instead of
# ours, through the same client, load and faults (the table in docs/guide/production.md).
# Knobs: CHAOS_RUNS, CHAOS_RATE (runs a second), CHAOS_WAIT (seconds a result may take),
# CHAOS_FAULTS ("SECONDS:KIND ..." from the client's start; kinds engine, postgres, freeze, cut,
# worker), CHAOS_FREEZE_SECS. Output in target/chaos/<tag>/.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
MODE="${1:-short}"
ENGINE="${CHAOS_ENGINE:-real}"
case "$MODE" in
  short)
    RUNS="${CHAOS_RUNS:-200}" RATE="${CHAOS_RATE:-8}" WAIT="${CHAOS_WAIT:-300}"
    FAULTS="${CHAOS_FAULTS:-4:engine 9:freeze 13:worker 18:postgres 22:cut}"
    ;;
  long)
    RUNS="${CHAOS_RUNS:-1000}" RATE="${CHAOS_RATE:-5}" WAIT="${CHAOS_WAIT:-420}"
    FAULTS="${CHAOS_FAULTS:-15:engine 40:freeze 60:worker 80:engine 100:postgres 125:cut 150:engine 175:freeze}"
    ;;
  defaults|defaults-long)
    # A new user's task options (no retries, the default five-minute timeout): nothing the
    # engine loses is retried by the engine in the suite's bound, so the worker must take it
    # back. Engine SIGKILLs land among assignments (the load runs throughout).
    export CHAOS_TASK_DEFAULTS=1
    if [[ "$MODE" == defaults ]]; then
      RUNS="${CHAOS_RUNS:-200}" RATE="${CHAOS_RATE:-8}" WAIT="${CHAOS_WAIT:-280}"
      FAULTS="${CHAOS_FAULTS:-4:engine 12:postgres 18:worker 25:engine}"
    else
      RUNS="${CHAOS_RUNS:-1000}" RATE="${CHAOS_RATE:-6}" WAIT="${CHAOS_WAIT:-280}"
      FAULTS="${CHAOS_FAULTS:-8:engine 40:postgres 75:worker 110:engine 150:engine}"
    fi
    ;;
  cluster|cluster-long)
    # The reference deployment (scripts/real-cluster.sh): two gRPC replicas behind nginx (its
    # stream idle timeout cuts idle streams), a controllers+scheduler process, RabbitMQ; three
    # worker processes; a new user's task options. Faults are the cluster's own verbs.
    export CHAOS_TASK_DEFAULTS=1
    ENGINE=cluster
    WORKERS="${CHAOS_WORKERS:-3}"
    if [[ "$MODE" == cluster ]]; then
      RUNS="${CHAOS_RUNS:-200}" RATE="${CHAOS_RATE:-5}" WAIT="${CHAOS_WAIT:-280}"
      FAULTS="${CHAOS_FAULTS:-5:kill-grpc=1 12:restart-grpc=1 20:restart-proxy 28:worker}"
    else
      RUNS="${CHAOS_RUNS:-1000}" RATE="${CHAOS_RATE:-5}" WAIT="${CHAOS_WAIT:-280}"
      FAULTS="${CHAOS_FAULTS:-10:kill-grpc=1 25:restart-grpc=1 40:kill-grpc=2 55:restart-grpc=2 70:restart-grpc=1 80:restart-grpc=2 95:kill-core 110:restart-mq 130:restart-proxy 150:worker 170:reload-proxy}"
    fi
    ;;
  *) echo "usage: $0 [short|long|defaults|defaults-long|cluster|cluster-long]" >&2; exit 2 ;;
esac
FREEZE_SECS="${CHAOS_FREEZE_SECS:-25}"
TAG="${CHAOS_TAG:-$MODE-$(date +%s)}"
OUT="$ROOT/target/chaos/$TAG"
mkdir -p "$OUT"
say() { printf 'chaos: %s\n' "$*" >&2; }

cargo build --quiet --example chaos_suite --bin hatchet-dev-engine 2>&1 | tail -20
BIN="$ROOT/target/debug/examples/chaos_suite"

pids=()
WORKER_PIDS=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${WORKER_PIDS[@]}"; do kill -TERM -- "-$p" "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

# ---- the engine ----
dev_drop_connections() {
  # The engine drops every connection, this request's too: an empty reply (curl's 52) is the
  # drop done, not a failure.
  local rc=0
  curl -fsS -X POST -H "Authorization: Bearer $HATCHET_CLIENT_TOKEN" "$HATCHET_CLIENT_SERVER_URL/_dev/drop-connections" || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 52 ]
}
case "$ENGINE" in
  real)
    if [[ "$(scripts/real-engine.sh status)" != *"engine: running"* ]]; then
      scripts/real-engine.sh start >/dev/null
    fi
    eval "$(scripts/real-engine.sh env)"
    KILL_ENGINE="${CHAOS_KILL_ENGINE:-scripts/real-engine.sh restart-engine}"
    RESTART_POSTGRES="${CHAOS_RESTART_POSTGRES:-scripts/real-engine.sh restart-postgres}"
    ;;
  dev)
    "$ROOT/target/debug/hatchet-dev-engine" >"$OUT/engine.out" 2>"$OUT/engine.log" &
    pids+=($!)
    for _ in $(seq 1 100); do grep -q HATCHET_CLIENT_TOKEN "$OUT/engine.out" 2>/dev/null && break; sleep 0.1; done
    eval "$(grep '^export [A-Z_]*=' "$OUT/engine.out")"
    KILL_ENGINE="${CHAOS_KILL_ENGINE:-dev_drop_connections}"
    RESTART_POSTGRES="${CHAOS_RESTART_POSTGRES:-true}"
    ;;
  cluster)
    if [[ "$(scripts/real-cluster.sh status)" != *"proxy: running"* ]]; then
      scripts/real-cluster.sh start >/dev/null
    fi
    eval "$(scripts/real-cluster.sh env)"
    KILL_ENGINE="${CHAOS_KILL_ENGINE:-scripts/real-cluster.sh restart-engine}"
    RESTART_POSTGRES="${CHAOS_RESTART_POSTGRES:-scripts/real-cluster.sh restart-postgres}"
    ;;
  external)
    KILL_ENGINE="${CHAOS_KILL_ENGINE:-true}"
    RESTART_POSTGRES="${CHAOS_RESTART_POSTGRES:-true}"
    ;;
  *) echo "CHAOS_ENGINE is real, dev, cluster or external" >&2; exit 2 ;;
esac
: "${HATCHET_CLIENT_HOST_PORT:?set the HATCHET_CLIENT_ variables of the engine}"

# ---- the proxy in front of the gRPC port (the cluster has its own: nginx) ----
if [[ "$ENGINE" != cluster ]]; then
  PROXY_ADDR="127.0.0.1:${CHAOS_PROXY_PORT:-17178}"
  "$BIN" proxy --listen "$PROXY_ADDR" --upstream "$HATCHET_CLIENT_HOST_PORT" --freeze-secs "$FREEZE_SECS" 2>>"$OUT/proxy.log" &
  PROXY_PID=$!
  pids+=("$PROXY_PID")
  export HATCHET_CLIENT_HOST_PORT="$PROXY_ADDR"
fi
export RUST_LOG="${RUST_LOG:-hatchet_runtime=info}"

# Worker processes: WORKER_PIDS[i] logs to worker-i.log (worker.log for the first). Each leads
# its own process group (setsid), so a kill reaches the processes an SDK's worker starts.
WORKERS="${WORKERS:-${CHAOS_WORKERS:-1}}"
WORKER_PIDS=()
PEER="${CHAOS_PEER:-ours}"
case "$PEER" in
  ours) WORKER_CMD=("$BIN" worker) ;;
  go)
    GO_BIN="$ROOT/target/interop-go/go-interop"
    tests/interop/go/build.sh "$GO_BIN"
    WORKER_CMD=("$GO_BIN" chaos-worker)
    ;;
  python)
    VENV="$ROOT/tests/interop/.venv"
    [[ -x "$VENV/bin/python" ]] || { echo "CHAOS_PEER=python needs the Python SDK's virtualenv: run tests/interop/run.sh or scripts/bench_python.sh once" >&2; exit 2; }
    WORKER_CMD=("$VENV/bin/python" "$ROOT/tests/interop/chaos_peer_worker.py")
    ;;
  *) echo "CHAOS_PEER is ours, go or python" >&2; exit 2 ;;
esac
worker_log() { if [[ "$1" -eq 0 ]]; then echo "$OUT/worker.log"; else echo "$OUT/worker-$1.log"; fi; }
start_worker() { # start_worker I
  local log
  log=$(worker_log "$1")
  setsid "${WORKER_CMD[@]}" --dir "$OUT" --slots 16 >>"$log" 2>&1 &
  WORKER_PIDS[$1]=$!
  WORKER_PID=${WORKER_PIDS[0]}
}
for ((w = 0; w < WORKERS; w++)); do
  start_worker "$w"
  log=$(worker_log "$w")
  for _ in $(seq 1 300); do grep -q 'serving' "$log" 2>/dev/null && break; sleep 0.1; done
  grep -q 'serving' "$log" || { tail -20 "$log" >&2; say "worker $w did not start"; exit 1; }
done

say "$RUNS runs at $RATE/s on the $ENGINE engine, $WORKERS $PEER workers; faults: $FAULTS; output in $OUT"
"$BIN" client --dir "$OUT" --runs "$RUNS" --rate "$RATE" --wait "$WAIT" --tag "$TAG" >"$OUT/client.out" 2>"$OUT/client.log" &
CLIENT_PID=$!
T0=$(date +%s)

# ---- the faults, in order ----
for f in $FAULTS; do
  at="${f%%:*}" kind="${f#*:}"
  now=$(($(date +%s) - T0))
  ((at > now)) && sleep $((at - now))
  kill -0 "$CLIENT_PID" 2>/dev/null || break
  say "+$(($(date +%s) - T0))s $kind"
  echo "$(date -u +%FT%T.%3NZ) $kind" >>"$OUT/faults.log"
  case "$kind" in
    engine) eval "$KILL_ENGINE" >>"$OUT/faults.log" 2>&1 || say "the engine kill failed" ;;
    postgres) eval "$RESTART_POSTGRES" >>"$OUT/faults.log" 2>&1 || say "the PostgreSQL restart failed" ;;
    freeze) kill -USR1 "$PROXY_PID" ;;
    cut) kill -USR2 "$PROXY_PID" ;;
    worker)
      echo "$WORKER_PID" >>"$OUT/killed.txt"
      kill -KILL -- "-$WORKER_PID" "$WORKER_PID" 2>/dev/null || true
      wait "$WORKER_PID" 2>/dev/null || true
      sleep 2
      start_worker 0
      ;;
    kill-grpc=* | restart-grpc=* | kill-core | restart-mq | restart-proxy | reload-proxy | restart-engine | restart-postgres)
      scripts/real-cluster.sh "${kind%%=*}" ${kind#*=} >>"$OUT/faults.log" 2>&1 || say "the cluster fault $kind failed"
      ;;
    *) say "unknown fault kind $kind" ;;
  esac
done

rc=0
wait "$CLIENT_PID" || rc=$?
for p in "${WORKER_PIDS[@]}"; do kill -TERM -- "-$p" "$p" 2>/dev/null || true; done
cat "$OUT/client.out"
grep -h 'chaos summary' "$OUT/client.out" >"$OUT/summary.txt" || true
# ---- recovery per fault: until every worker executes again, until every waiter has its answer ----
python3 "$ROOT/scripts/chaos-recovery.py" "$OUT" "$PEER" | tee "$OUT/recovery.txt"

# ---- evidence from the engine's tables for each run that did not come back right ----
if [[ "$ENGINE" == real && -s "$OUT/problems.tsv" ]]; then
  scripts/chaos-evidence.sh "$OUT" >"$OUT/evidence.txt" 2>&1 || true
  say "evidence from the engine's tables: $OUT/evidence.txt"
fi
[[ -s "$OUT/problems.tsv" ]] && { say "runs that did not come back right:"; cut -c1-300 "$OUT/problems.tsv" >&2; }
[[ "$rc" -eq 0 ]] || { tail -30 "$OUT/client.log" >&2; say "FAILED (exit $rc)"; }
exit "$rc"
