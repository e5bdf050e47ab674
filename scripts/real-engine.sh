#!/usr/bin/env bash
# The real Hatchet engine (Go module github.com/hatchet-dev/hatchet) as a local test service.
#
#   scripts/real-engine.sh start     install (once), start PostgreSQL, migrate, mint a token, start
#                                    hatchet-engine and hatchet-api on loopback, write the client env
#   scripts/real-engine.sh stop      stop everything it started, by PID
#   scripts/real-engine.sh env       print the HATCHET_CLIENT_* lines (eval "$(... env)" or `source`)
#   scripts/real-engine.sh restart-engine   kill the engine and API processes and start them again
#                                    (the conformance suite's "engine restarts mid-run" check)
#   scripts/real-engine.sh restart-postgres   stop PostgreSQL (fast: sessions ended) and start it
#   scripts/real-engine.sh psql [ARGS]   psql on the engine's database (its tables as evidence)
#   scripts/real-engine.sh evidence RUN   what the engine's tables hold of one run: its tasks, their
#                                    events, runtime rows and queue items, the workers holding them,
#                                    its read-model row, the tenant's partitions, the message queue
#   scripts/real-engine.sh status    which of its processes are alive
#
# Nothing of the engine is copied into this repository: the script installs its commands with the Go
# toolchain from the Go module proxy, at the pinned release below, into $STATE/bin.
#
# Why this release: the SDKs we test (PyPI hatchet-sdk 1.43.1, npm @hatchet-dev/typescript-sdk
# 1.33.2) were released in October 2026. The newest engine release the module proxy serves whole
# (.info, .mod, .zip and a checksum-database entry) is v0.104.9 of 2026-08-24; v0.105.x and v0.106.x
# list an .info but their .mod is refused (403) and sum.golang.org has no entry for them. The official
# repository's own CI runs new SDKs against older engines (sdk-python-old-engine-new-sdk), and the
# SDKs gate newer features on the version the engine reports, which the build sets to the tag.
#
# Settings and traps: ../shared/reference/real-engine-config.md (and docs/guide/real-engine.md here).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="${HATCHET_REAL_ENGINE_VERSION:-v0.104.9}"
MODULE=github.com/hatchet-dev/hatchet
STATE="${HATCHET_REAL_ENGINE_DIR:-$ROOT/target/real-engine}"
PG_PORT="${HATCHET_REAL_PG_PORT:-54329}"
GRPC_PORT="${HATCHET_REAL_GRPC_PORT:-17077}"
API_PORT="${HATCHET_REAL_API_PORT:-18080}"
HEALTH_PORT="${HATCHET_REAL_HEALTH_PORT:-18733}"
TENANT=707d0855-80ab-4e1f-a156-f1c4546cbf52 # the seed tenant quickstart creates
BIN="$STATE/bin"
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PGDATA="$STATE/pgdata"
LOGS="$STATE/logs"
ENV_FILE="$STATE/client.env"

say() { printf 'real-engine: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# The server's environment, the same for every process (the environment beats the config file, and
# quickstart drops booleans set to false from the file it writes).
server_env() {
  export DATABASE_URL="postgresql://hatchet:hatchet@127.0.0.1:$PG_PORT/hatchet?sslmode=disable"
  export SERVER_URL="http://127.0.0.1:$API_PORT"
  export SERVER_PORT="$API_PORT"
  export SERVER_AUTH_COOKIE_DOMAIN=localhost
  export SERVER_AUTH_COOKIE_INSECURE=true
  export SERVER_GRPC_PORT="$GRPC_PORT"
  export SERVER_GRPC_BIND_ADDRESS=127.0.0.1
  export SERVER_GRPC_BROADCAST_ADDRESS="127.0.0.1:$GRPC_PORT"
  export SERVER_GRPC_INSECURE=true
  export SERVER_INTERNAL_CLIENT_BASE_STRATEGY=none
  export SERVER_INTERNAL_CLIENT_BASE_INHERIT_BASE=false
  export SERVER_INTERNAL_CLIENT_INTERNAL_GRPC_BROADCAST_ADDRESS="127.0.0.1:$GRPC_PORT"
  export SERVER_HEALTHCHECK_PORT="$HEALTH_PORT"
  export SERVER_MSGQUEUE_KIND=postgres
  unset SERVER_TASKQUEUE_KIND # read before SERVER_MSGQUEUE_KIND, and wins
  export SERVER_SECURITY_CHECK_ENABLED=false # it calls out to the internet otherwise
  export SERVER_LOGGER_LEVEL="${SERVER_LOGGER_LEVEL:-warn}"
  export SERVER_LOGGER_FORMAT=console
  export DATABASE_LOGGER_LEVEL="${DATABASE_LOGGER_LEVEL:-warn}"
  export DATABASE_LOGGER_FORMAT=console
  export SERVER_OBSERVABILITY_ENABLED=true
}

install_engine() {
  local stamp="$BIN/.version"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$VERSION" && -x "$BIN/hatchet-engine" && -x "$BIN/hatchet-api" &&
    -x "$BIN/hatchet-migrate" && -x "$BIN/hatchet-admin" ]]; then
    return 0
  fi
  command -v go >/dev/null || die "the Go toolchain is needed (go 1.26 is on the CI image)"
  say "installing $MODULE@$VERSION (hatchet-engine, hatchet-api, hatchet-migrate, hatchet-admin) with $(go version | cut -d' ' -f3); a first build takes several minutes"
  # `go install $MODULE/cmd/hatchet-engine@$VERSION` is how a Go program is installed, but it asks the
  # proxy for each command's path as a module of its own first, and the proxy here refuses those (403)
  # where it should answer 404. So: download the engine's module at the pinned release (verified
  # against sum.golang.org), and build its commands inside it, with its own go.mod and go.sum, which
  # is what `go install pkg@version` does. One of its dependencies (github.com/hatchet-dev/pgoutbox)
  # has no checksum-database entry: the engine's go.sum pins its hash instead.
  local dir
  (
    cd "$STATE"
    dir="$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -n "$dir" && -f "$dir/go.mod" ]] || { echo "go mod download gave no module directory"; exit 1; }
    cd "$dir"
    mkdir -p "$BIN"
    CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" go build -trimpath \
      -ldflags "-X main.Version=$VERSION" -o "$BIN/" \
      ./cmd/hatchet-engine ./cmd/hatchet-api ./cmd/hatchet-migrate ./cmd/hatchet-admin
  ) >"$STATE/install.log" 2>&1 || { tail -20 "$STATE/install.log" >&2; die "building the engine failed (log: $STATE/install.log)"; }
  echo "$VERSION" >"$stamp"
}

ensure_postgres_installed() {
  [[ -x "$PG_BIN/postgres" ]] && return 0
  say "installing PostgreSQL 15 from Debian's packages"
  command -v apt-get >/dev/null || die "PostgreSQL 15 is not installed and apt-get is missing"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15) \
    >"$STATE/apt.log" 2>&1 || { tail -20 "$STATE/apt.log" >&2; die "apt-get install postgresql-15 failed"; }
}

# PostgreSQL refuses to run as root; run it as the postgres user when we are root.
as_pg() {
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_postgres() {
  ensure_postgres_installed
  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    mkdir -p "$PGDATA"
    [[ "$(id -u)" == 0 ]] && chown -R postgres:postgres "$PGDATA"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -U hatchet --auth=trust -E UTF8 >"$LOGS/initdb.log" 2>&1 ||
      { cat "$LOGS/initdb.log" >&2; die "initdb failed"; }
  fi
  [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$LOGS"
  # UTC (the engine refuses other time zones), 300 connections (each process pools up to 50 and more).
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$LOGS/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$PGDATA -c timezone=UTC -c max_connections=400 -c fsync=off -c synchronous_commit=off" \
    start >/dev/null || { tail -20 "$LOGS/postgres.log" >&2; die "postgres did not start"; }
  as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U hatchet -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='hatchet'" | grep -q 1 ||
    as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U hatchet -d postgres -qc "CREATE DATABASE hatchet"
}

wait_http() { # url seconds what
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    curl -fs -o /dev/null "$1" && return 0
    sleep 0.1
  done
  return 1
}

start_servers() {
  server_env
  # Appended: a restart keeps what came before it (the chaos suite reads both sides of a kill).
  nohup "$BIN/hatchet-engine" --config "$STATE/config" >>"$LOGS/engine.log" 2>&1 &
  echo $! >"$STATE/engine.pid"
  nohup "$BIN/hatchet-api" --config "$STATE/config" >>"$LOGS/api.log" 2>&1 &
  echo $! >"$STATE/api.pid"
  wait_http "http://127.0.0.1:$HEALTH_PORT/ready" 120 ||
    { tail -30 "$LOGS/engine.log" >&2; die "hatchet-engine is not ready after 120 s (log: $LOGS/engine.log)"; }
  wait_http "http://127.0.0.1:$API_PORT/api/ready" 120 ||
    { tail -30 "$LOGS/api.log" >&2; die "hatchet-api is not ready after 120 s (log: $LOGS/api.log)"; }
}

stop_pidfile() { # file
  [[ -f "$1" ]] || return 0
  local pid
  pid="$(cat "$1")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

cmd_start() {
  mkdir -p "$STATE" "$LOGS"
  if [[ -f "$STATE/engine.pid" ]] && kill -0 "$(cat "$STATE/engine.pid")" 2>/dev/null; then
    say "already running (scripts/real-engine.sh stop first)"; cmd_env; return 0
  fi
  install_engine
  start_postgres
  server_env
  "$BIN/hatchet-migrate" >"$LOGS/migrate.log" 2>&1 || { tail -20 "$LOGS/migrate.log" >&2; die "migration failed"; }
  if [[ ! -f "$STATE/config/server.yaml" ]]; then
    "$BIN/hatchet-admin" quickstart --skip certs --generated-config-dir "$STATE/config" \
      >"$LOGS/quickstart.log" 2>&1 || { tail -20 "$LOGS/quickstart.log" >&2; die "hatchet-admin quickstart failed"; }
  else
    "$BIN/hatchet-admin" quickstart --skip certs --generated-config-dir "$STATE/config" --overwrite=false \
      >"$LOGS/quickstart.log" 2>&1 || { tail -20 "$LOGS/quickstart.log" >&2; die "hatchet-admin quickstart failed"; }
  fi
  local token
  token="$("$BIN/hatchet-admin" token create --config "$STATE/config" --tenant-id "$TENANT" --name "hatchet-runtime-tests" 2>"$LOGS/token.log" | tail -n 1)"
  [[ "$token" == *.*.* ]] || { cat "$LOGS/token.log" >&2; die "hatchet-admin token create printed no token"; }
  start_servers
  umask 077
  cat >"$ENV_FILE" <<EOF
HATCHET_CLIENT_TOKEN=$token
HATCHET_CLIENT_TLS_STRATEGY=none
HATCHET_CLIENT_HOST_PORT=127.0.0.1:$GRPC_PORT
HATCHET_CLIENT_SERVER_URL=http://127.0.0.1:$API_PORT
HATCHET_CLIENT_API_URL=http://127.0.0.1:$API_PORT
HATCHET_CLIENT_TENANT_ID=$TENANT
HATCHET_REAL_ENGINE=1
HATCHET_REAL_ENGINE_SCRIPT=$ROOT/scripts/real-engine.sh
EOF
  say "engine $VERSION up: gRPC 127.0.0.1:$GRPC_PORT, REST http://127.0.0.1:$API_PORT, PostgreSQL 127.0.0.1:$PG_PORT; client env in $ENV_FILE"
}

cmd_stop() {
  stop_pidfile "$STATE/api.pid"
  stop_pidfile "$STATE/engine.pid"
  if [[ -f "$PGDATA/postmaster.pid" ]]; then
    as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
  fi
  say "stopped"
}

cmd_restart_engine() {
  [[ -f "$STATE/engine.pid" ]] || die "not running (scripts/real-engine.sh start)"
  # A crash, not a drain: SIGKILL, as an engine host lost would look.
  for f in "$STATE/engine.pid" "$STATE/api.pid"; do
    kill -KILL "$(cat "$f")" 2>/dev/null || true
    rm -f "$f"
  done
  sleep "${HATCHET_REAL_RESTART_GAP:-1}"
  start_servers
  say "engine and API restarted"
}

cmd_restart_postgres() {
  [[ -f "$PGDATA/postmaster.pid" ]] || die "PostgreSQL is not running (scripts/real-engine.sh start)"
  # A fast shutdown (open sessions are ended, the engine's connections break) and a start.
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
  sleep "${HATCHET_REAL_RESTART_GAP:-1}"
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$LOGS/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$PGDATA -c timezone=UTC -c max_connections=400 -c fsync=off -c synchronous_commit=off" \
    start >/dev/null || die "postgres did not start again"
  say "PostgreSQL restarted"
}

cmd_psql() { # the engine's database, for reading its tables (the chaos suite's evidence)
  as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U hatchet -d hatchet "$@"
}

cmd_evidence() { # run id: the engine's tables on one run (why it did not end)
  local run="${1:?usage: $0 evidence RUN_ID}" q
  [[ "$run" =~ ^[0-9a-f-]{36}$ ]] || die "not a run id: $run"
  q() { cmd_psql -P pager=off -c "$1"; }
  q "select external_id, inserted_at, dag_id, task_id from v1_lookup_table where external_id = '$run'"
  q "select id, step_readable_id, retry_count, inserted_at, initial_state, schedule_timeout, step_timeout
       from v1_task where workflow_run_id = '$run' or external_id = '$run' order by id"
  q "select e.task_id, t.step_readable_id, e.retry_count, e.event_type, e.created_at, left(e.data::text, 120) data
       from v1_task_event e join v1_task t on t.id = e.task_id and t.inserted_at = e.task_inserted_at
      where t.workflow_run_id = '$run' or t.external_id = '$run' order by e.created_at"
  q "select r.task_id, r.retry_count, r.worker_id, r.timeout_at, r.evicted_at, now() at time zone 'UTC' as now
       from v1_task_runtime r join v1_task t on t.id = r.task_id and t.inserted_at = r.task_inserted_at
      where t.workflow_run_id = '$run' or t.external_id = '$run'"
  q "select w.id, w.name, w.\"isActive\", w.\"lastHeartbeatAt\", w.\"lastListenerEstablished\", w.\"dispatcherId\"
       from \"Worker\" w where w.id in (select r.worker_id from v1_task_runtime r join v1_task t
         on t.id = r.task_id and t.inserted_at = r.task_inserted_at where t.workflow_run_id = '$run' or t.external_id = '$run')"
  q "select id, kind, is_satisfied, trigger_step_index, trigger_external_id from v1_match
      where trigger_workflow_run_id = '$run' or trigger_external_id = '$run'"
  q "select q.task_id, q.retry_count, q.queue, q.priority, q.schedule_timeout_at from v1_queue_item q
       join v1_task t on t.id = q.task_id and t.inserted_at = q.task_inserted_at where t.workflow_run_id = '$run' or t.external_id = '$run'"
  q "select readable_status, inserted_at from v1_runs_olap where external_id = '$run'"
  q "select \"schedulerPartitionId\", \"controllerPartitionId\" from \"Tenant\" where id = '$TENANT'"
  q "select id, \"lastHeartbeat\" from \"SchedulerPartition\""
  q "select \"queueId\", status, payload->>'id' as message, count(*), min(\"expiresAt\") from \"MessageQueueItem\" group by 1, 2, 3"
}

cmd_env() {
  [[ -f "$ENV_FILE" ]] || die "no client environment yet (scripts/real-engine.sh start)"
  sed 's/^/export /' "$ENV_FILE"
}

cmd_status() {
  for n in engine api; do
    if [[ -f "$STATE/$n.pid" ]] && kill -0 "$(cat "$STATE/$n.pid")" 2>/dev/null; then echo "$n: running"; else echo "$n: stopped"; fi
  done
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  restart-engine) cmd_restart_engine ;;
  restart-postgres) cmd_restart_postgres ;;
  psql) shift; cmd_psql "$@" ;;
  evidence) shift; cmd_evidence "$@" ;;
  status) cmd_status ;;
  install) mkdir -p "$STATE" "$LOGS"; install_engine ;;
  *) echo "usage: $0 start|stop|env|restart-engine|restart-postgres|psql|evidence|status|install" >&2; exit 2 ;;
esac
