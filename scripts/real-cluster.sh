#!/usr/bin/env bash
# The real Hatchet engine deployed "for scale" on one machine, on loopback: the reference deployment
# (docs/guide/production.md, "The reference deployment").
#
#   scripts/real-cluster.sh start     install what is missing (nginx, rabbitmq-server; the engine's
#                                     commands as scripts/real-engine.sh builds them), start PostgreSQL,
#                                     a RabbitMQ node, migrate, mint a token, then two gRPC replicas, the
#                                     controllers+scheduler process, the REST API and an nginx gRPC proxy
#                                     in front of the replicas; write the client env
#   scripts/real-cluster.sh stop      stop everything it started, by PID
#   scripts/real-cluster.sh env       print the HATCHET_CLIENT_* lines (eval "$(... env)")
#   scripts/real-cluster.sh status    which of its processes are alive
#   scripts/real-cluster.sh psql [ARGS]   psql on the cluster's database
#   scripts/real-cluster.sh rabbitmqctl [ARGS]   rabbitmqctl on the cluster's RabbitMQ node (list_queues ...)
# Faults (each waits until what it starts again is ready):
#   kill-grpc N        SIGKILL gRPC replica N (1 or 2); it stays down (restart-grpc N brings it back)
#   restart-grpc N     SIGTERM replica N (the engine ends its streams and drains), wait, start it again
#   kill-core          SIGKILL the controllers+scheduler process, start it again after 1 s
#   restart-engine     SIGKILL every engine process and the API, start them again (the conformance
#                      suite's "engine restarts mid-run" check, as scripts/real-engine.sh has it)
#   restart-mq         stop the RabbitMQ node (SIGTERM, a clean shutdown) and start it again
#   restart-proxy      stop nginx hard (every client connection cut) and start it again
#   reload-proxy       nginx -s reload (graceful: old workers finish their streams; new connections
#                      go to new workers)
#   restart-postgres   stop PostgreSQL (fast: sessions ended) and start it again
#   block-listen       the proxy cuts every worker's actions stream (a hard restart) and refuses to
#                      carry a new one (/Dispatcher/ListenV2 goes to a closed port: 502, which gRPC
#                      reads as UNAVAILABLE); every other call passes: heartbeats are accepted
#   unblock-listen     the proxy carries actions streams again (a graceful reload)
#
# Processes and ports (all on 127.0.0.1; each can be moved with the variable named):
#   PostgreSQL 15         54339  CLUSTER_PG_PORT
#   RabbitMQ (AMQP)        5682  CLUSTER_MQ_PORT      Erlang distribution 25682 CLUSTER_MQ_DIST_PORT,
#                                                     its own epmd on 4379 CLUSTER_EPMD_PORT; no management
#   hatchet-engine grpc-api #1   gRPC 17081 CLUSTER_GRPC1_PORT, health 18741 CLUSTER_HEALTH1_PORT
#   hatchet-engine grpc-api #2   gRPC 17082 CLUSTER_GRPC2_PORT, health 18742 CLUSTER_HEALTH2_PORT
#   hatchet-engine controllers+scheduler       health 18743 CLUSTER_HEALTH_CORE_PORT
#   hatchet-api (REST)     18090  CLUSTER_API_PORT
#   nginx gRPC proxy       17090  CLUSTER_PROXY_PORT  (the token's and the client's gRPC address)
# CLUSTER_IDLE_TIMEOUT (20s by default) is the proxy's stream idle timeout (grpc_read_timeout,
# grpc_send_timeout, client_body_timeout): an idle stream, such as a worker's ListenV2 with nothing to
# assign, is cut after it, as a cloud load balancer cuts it after minutes. Set it to 1d for a proxy
# that does not cut.
#
# Health ports bind every interface (the engine has no bind option for them), as real-engine.sh's.
# SERVER_SERVICES is split on spaces by the engine (pkg/config/loader/loader.go), not on commas.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VERSION="${HATCHET_REAL_ENGINE_VERSION:-v0.104.9}"
STATE="${HATCHET_CLUSTER_DIR:-$ROOT/target/real-cluster}"
PG_PORT="${CLUSTER_PG_PORT:-54339}"
MQ_PORT="${CLUSTER_MQ_PORT:-5682}"
MQ_DIST_PORT="${CLUSTER_MQ_DIST_PORT:-25682}"
EPMD_PORT="${CLUSTER_EPMD_PORT:-4379}"
GRPC1_PORT="${CLUSTER_GRPC1_PORT:-17081}"
GRPC2_PORT="${CLUSTER_GRPC2_PORT:-17082}"
CORE_GRPC_PORT="${CLUSTER_CORE_GRPC_PORT:-17083}" # not served (no grpc-api there), set for completeness
HEALTH1_PORT="${CLUSTER_HEALTH1_PORT:-18741}"
HEALTH2_PORT="${CLUSTER_HEALTH2_PORT:-18742}"
HEALTH_CORE_PORT="${CLUSTER_HEALTH_CORE_PORT:-18743}"
API_PORT="${CLUSTER_API_PORT:-18090}"
PROXY_PORT="${CLUSTER_PROXY_PORT:-17090}"
IDLE_TIMEOUT="${CLUSTER_IDLE_TIMEOUT:-20s}"
PROXY_SHUTDOWN_TIMEOUT="${CLUSTER_PROXY_SHUTDOWN_TIMEOUT:-60s}" # how long old nginx workers drain on reload
READY_WAIT="${CLUSTER_READY_WAIT:-120}" # seconds each process gets to become ready
TENANT=707d0855-80ab-4e1f-a156-f1c4546cbf52 # the seed tenant quickstart creates
PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
PGDATA="$STATE/pgdata"
LOGS="$STATE/logs"
RUN="$STATE/run" # PID files
MQ_DIR="$STATE/rabbitmq"
NGINX_DIR="$STATE/nginx"
ENV_FILE="$STATE/client.env"
MQ_NODE="hatchet-cluster@localhost"
MQ_URL="amqp://guest:guest@127.0.0.1:$MQ_PORT/" # guest is allowed on loopback only, as here
BIN="" # set by find_engine

say() { printf 'real-cluster: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
log_tail() { [[ -f "$1" ]] && tail -n "${2:-30}" "$1" >&2; true; }

# ---------------------------------------------------------------------------------------------------
# Installation

# The engine's commands: the ones scripts/real-engine.sh built for the single engine when they are of
# the pinned release, else its install verb, into this cluster's own state dir.
find_engine() {
  local d
  for d in "${HATCHET_REAL_ENGINE_BIN:-}" "$ROOT/target/real-engine/bin" "$STATE/engine/bin"; do
    [[ -n "$d" ]] || continue
    if [[ -f "$d/.version" && "$(cat "$d/.version")" == "$VERSION" && -x "$d/hatchet-engine" &&
      -x "$d/hatchet-api" && -x "$d/hatchet-migrate" && -x "$d/hatchet-admin" ]]; then
      BIN="$d"; return 0
    fi
  done
  say "building the engine's commands ($VERSION) with scripts/real-engine.sh install"
  HATCHET_REAL_ENGINE_DIR="$STATE/engine" HATCHET_REAL_ENGINE_VERSION="$VERSION" \
    "$ROOT/scripts/real-engine.sh" install
  BIN="$STATE/engine/bin"
}

apt_install() { # package...
  command -v apt-get >/dev/null || die "$* not installed and apt-get is missing"
  say "installing $* from Debian's packages"
  # Debian's maintainer scripts start a package's system service; keep them from it (our processes
  # are our own), unless a policy already does (Debian container images have one).
  local policy=/usr/sbin/policy-rc.d made=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1
  fi
  local rc=0
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } \
    >"$STATE/apt.log" 2>&1 || rc=$?
  [[ -n "$made" ]] && rm -f "$policy"
  [[ $rc == 0 ]] || { log_tail "$STATE/apt.log" 20; die "apt-get install $* failed (log: $STATE/apt.log)"; }
}

ensure_installed() {
  local missing=()
  [[ -x "$PG_BIN/postgres" ]] || missing+=(postgresql-15)
  [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
  [[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)
  ((${#missing[@]} == 0)) || apt_install "${missing[@]}"
}

# ---------------------------------------------------------------------------------------------------
# Process bookkeeping

pid_of() { [[ -f "$RUN/$1.pid" ]] && cat "$RUN/$1.pid"; true; }
alive() { local p; p="$(pid_of "$1")"; [[ -n "$p" ]] && kill -0 "$p" 2>/dev/null; }

wait_gone() { # pid seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

stop_pid() { # name [signal] [seconds]: signal it, wait, then SIGKILL
  local name="$1" sig="${2:-TERM}" secs="${3:-30}" pid
  pid="$(pid_of "$name")"
  if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
    kill "-$sig" "$pid" 2>/dev/null || true
    wait_gone "$pid" "$secs" || { kill -KILL "$pid" 2>/dev/null || true; wait_gone "$pid" 5 || true; }
  fi
  rm -f "$RUN/$name.pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_ready() { # name check-command... : bounded wait; dies with the log tail
  local name="$1" i
  shift
  for ((i = 0; i < READY_WAIT * 5; i++)); do
    "$@" && return 0
    if ! alive "$name"; then
      log_tail "$LOGS/$name.log"
      die "$name exited before it was ready (log: $LOGS/$name.log)"
    fi
    sleep 0.2
  done
  log_tail "$LOGS/$name.log"
  die "$name is not ready after $READY_WAIT s (log: $LOGS/$name.log)"
}

http_ok() { curl -fs -m 2 -o /dev/null "$1"; }

# A port something else holds would pass a readiness check of ours: refuse to start on it.
ports_free() { # name port...
  local name="$1" p
  shift
  for p in "$@"; do port_open "$p" && die "port $p (for $name) is in use by another process"; done
  true
}

# ---------------------------------------------------------------------------------------------------
# PostgreSQL

as_pg() { if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

pg_start() {
  if [[ ! -f "$PGDATA/PG_VERSION" ]]; then
    mkdir -p "$PGDATA"
    [[ "$(id -u)" == 0 ]] && chown -R postgres:postgres "$PGDATA"
    as_pg "$PG_BIN/initdb" -D "$PGDATA" -U hatchet --auth=trust -E UTF8 >"$LOGS/initdb.log" 2>&1 ||
      { log_tail "$LOGS/initdb.log"; die "initdb failed"; }
  fi
  [[ "$(id -u)" == 0 ]] && { touch "$LOGS/postgres.log"; chown postgres:postgres "$LOGS/postgres.log"; }
  # UTC (the engine refuses other time zones); four engine processes and the API pool up to 50+ each.
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -l "$LOGS/postgres.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$PGDATA -c timezone=UTC -c max_connections=500 -c fsync=off -c synchronous_commit=off" \
    start >/dev/null || { log_tail "$LOGS/postgres.log" 20; die "postgres did not start (log: $LOGS/postgres.log)"; }
}

pg_stop() {
  [[ -f "$PGDATA/postmaster.pid" ]] || return 0
  as_pg "$PG_BIN/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null 2>&1 || true
}

pg_alive() {
  [[ -f "$PGDATA/postmaster.pid" ]] && kill -0 "$(head -n 1 "$PGDATA/postmaster.pid")" 2>/dev/null
}

# ---------------------------------------------------------------------------------------------------
# RabbitMQ: a node of its own (name, ports, cookie, data, config), not the system's

mq_env() {
  export HOME="$MQ_DIR" # its Erlang cookie is $HOME/.erlang.cookie
  export RABBITMQ_NODENAME="$MQ_NODE"
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT="$MQ_PORT"
  export RABBITMQ_DIST_PORT="$MQ_DIST_PORT"
  export ERL_EPMD_PORT="$EPMD_PORT"
  export ERL_EPMD_ADDRESS=127.0.0.1
  export RABBITMQ_CONF_ENV_FILE="$MQ_DIR/rabbitmq-env.conf"
  export RABBITMQ_CONFIG_FILE="$MQ_DIR/rabbitmq.conf"
  export RABBITMQ_ADVANCED_CONFIG_FILE="$MQ_DIR/advanced.config"
  export RABBITMQ_ENABLED_PLUGINS_FILE="$MQ_DIR/enabled_plugins"
  export RABBITMQ_MNESIA_BASE="$MQ_DIR/mnesia"
  export RABBITMQ_LOG_BASE="$LOGS/rabbitmq"
  export RABBITMQ_LOGS="$LOGS/rabbitmq/node.log"
  export RABBITMQ_PID_FILE="$MQ_DIR/node.pid"
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
  # The start script then execs the Erlang VM (no wrapper shell): our PID file names the node itself.
  export RUNNING_UNDER_SYSTEMD=true
}

mq_prepare() {
  mkdir -p "$MQ_DIR/mnesia" "$LOGS/rabbitmq"
  [[ -f "$MQ_DIR/.erlang.cookie" ]] || {
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c 32 >"$MQ_DIR/.erlang.cookie")
    chmod 400 "$MQ_DIR/.erlang.cookie"
  }
  : >"$MQ_DIR/rabbitmq-env.conf" # not /etc/rabbitmq/rabbitmq-env.conf
  echo '[].' >"$MQ_DIR/enabled_plugins" # no management plugin: nothing but AMQP on a port
  echo '[].' >"$MQ_DIR/advanced.config"
  cat >"$MQ_DIR/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$MQ_PORT
loopback_users.guest = true
disk_free_limit.absolute = 50MB
EOF
}

mq_start() {
  ports_free rabbitmq "$MQ_PORT" "$MQ_DIST_PORT"
  mq_prepare
  (mq_env; cd "$MQ_DIR"; exec nohup /usr/lib/rabbitmq/bin/rabbitmq-server) </dev/null >>"$LOGS/rabbitmq.log" 2>&1 &
  echo $! >"$RUN/rabbitmq.pid"
  wait_ready rabbitmq port_open "$MQ_PORT"
}

mq_stop() { # SIGTERM is a clean shutdown of the node
  stop_pid rabbitmq TERM 60
}

epmd_stop() { # the epmd our node started on its own port, once no node is registered there
  ERL_EPMD_ADDRESS=127.0.0.1 epmd -port "$EPMD_PORT" -kill >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------------------------------
# The engine's processes

server_env() { # the environment every server process shares (the environment beats the config file)
  export DATABASE_URL="postgresql://hatchet:hatchet@127.0.0.1:$PG_PORT/hatchet?sslmode=disable"
  export SERVER_URL="http://127.0.0.1:$API_PORT"
  export SERVER_PORT="$API_PORT"
  export SERVER_AUTH_COOKIE_DOMAIN=localhost
  export SERVER_AUTH_COOKIE_INSECURE=true
  export SERVER_GRPC_BIND_ADDRESS=127.0.0.1
  # Clients (and the token's grpc_broadcast_address claim) go through the proxy, never to a replica.
  export SERVER_GRPC_BROADCAST_ADDRESS="127.0.0.1:$PROXY_PORT"
  export SERVER_GRPC_INSECURE=true
  export SERVER_INTERNAL_CLIENT_BASE_STRATEGY=none
  export SERVER_INTERNAL_CLIENT_BASE_INHERIT_BASE=false
  export SERVER_INTERNAL_CLIENT_INTERNAL_GRPC_BROADCAST_ADDRESS="127.0.0.1:$PROXY_PORT"
  export SERVER_MSGQUEUE_KIND=rabbitmq
  export SERVER_MSGQUEUE_RABBITMQ_URL="$MQ_URL"
  unset SERVER_TASKQUEUE_KIND SERVER_TASKQUEUE_RABBITMQ_URL # read before SERVER_MSGQUEUE_*, and win
  export SERVER_SECURITY_CHECK_ENABLED=false # it calls out to the internet otherwise
  export SERVER_LOGGER_LEVEL="${SERVER_LOGGER_LEVEL:-warn}"
  export SERVER_LOGGER_FORMAT=console
  export DATABASE_LOGGER_LEVEL="${DATABASE_LOGGER_LEVEL:-warn}"
  export DATABASE_LOGGER_FORMAT=console
  export SERVER_OBSERVABILITY_ENABLED=true
  # Defaults, for the processes that do not override them.
  export SERVER_GRPC_PORT="$CORE_GRPC_PORT"
  export SERVER_HEALTHCHECK_PORT="$HEALTH_CORE_PORT"
}

grpc_ports() { # N -> "grpc health"
  case "$1" in
    1) echo "$GRPC1_PORT $HEALTH1_PORT" ;;
    2) echo "$GRPC2_PORT $HEALTH2_PORT" ;;
    *) die "no gRPC replica '$1' (1 or 2)" ;;
  esac
}

start_grpc() { # N
  local ports grpc health
  ports="$(grpc_ports "$1")"; grpc="${ports% *}"; health="${ports#* }"
  ports_free "grpc-$1" "$grpc" "$health"
  (
    server_env
    export SERVER_SERVICES=grpc-api SERVER_GRPC_PORT="$grpc" SERVER_HEALTHCHECK_PORT="$health"
    exec nohup "$BIN/hatchet-engine" --config "$STATE/config"
  ) </dev/null >>"$LOGS/grpc-$1.log" 2>&1 &
  echo $! >"$RUN/grpc-$1.pid"
  wait_ready "grpc-$1" http_ok "http://127.0.0.1:$health/ready"
  wait_ready "grpc-$1" port_open "$grpc"
}

start_core() {
  ports_free core "$HEALTH_CORE_PORT"
  (
    server_env
    export SERVER_SERVICES="controllers scheduler"
    exec nohup "$BIN/hatchet-engine" --config "$STATE/config"
  ) </dev/null >>"$LOGS/core.log" 2>&1 &
  echo $! >"$RUN/core.pid"
  wait_ready core http_ok "http://127.0.0.1:$HEALTH_CORE_PORT/ready"
}

start_api() {
  ports_free api "$API_PORT"
  (server_env; exec nohup "$BIN/hatchet-api" --config "$STATE/config") </dev/null >>"$LOGS/api.log" 2>&1 &
  echo $! >"$RUN/api.pid"
  wait_ready api http_ok "http://127.0.0.1:$API_PORT/api/ready"
}

# ---------------------------------------------------------------------------------------------------
# nginx: an HTTP/2 gRPC proxy with a prefix, configuration and PID file of its own

# With block-listen in force, workers' actions streams go to a closed port (a 502: UNAVAILABLE).
listen_block() {
  [[ -e "$STATE/listen-blocked" ]] || return 0
  printf '    location = /Dispatcher/ListenV2 {\n      grpc_pass grpc://127.0.0.1:9;\n    }\n'
}

nginx_conf() {
  mkdir -p "$NGINX_DIR/tmp"
  local user=""
  [[ "$(id -u)" == 0 ]] && user="user nobody nogroup;"
  cat >"$NGINX_DIR/nginx.conf" <<EOF
# Written by scripts/real-cluster.sh; rewritten on every start.
$user
worker_processes 1;
daemon off;
# A reload lets old workers finish their streams; a ListenV2 lives for hours, so bound that.
worker_shutdown_timeout $PROXY_SHUTDOWN_TIMEOUT;
pid $NGINX_DIR/nginx.pid;
error_log $LOGS/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log $LOGS/nginx-access.log;
  client_body_temp_path $NGINX_DIR/tmp/body;
  proxy_temp_path $NGINX_DIR/tmp/proxy;
  fastcgi_temp_path $NGINX_DIR/tmp/fastcgi;
  uwsgi_temp_path $NGINX_DIR/tmp/uwsgi;
  scgi_temp_path $NGINX_DIR/tmp/scgi;

  upstream replicas {
    server 127.0.0.1:$GRPC1_PORT;
    server 127.0.0.1:$GRPC2_PORT;
    keepalive 64;
    keepalive_requests 1000000;
  }

  server {
    listen 127.0.0.1:$PROXY_PORT http2;
    # A stream's idle timeouts: nothing read from the replica (a quiet ListenV2) or from the client
    # for this long ends the stream. Production wants these long (hours); tests want them short.
    grpc_read_timeout $IDLE_TIMEOUT;
    grpc_send_timeout $IDLE_TIMEOUT;
    client_body_timeout $IDLE_TIMEOUT;
    # A long-lived client stream is one request body: no size limit.
    client_max_body_size 0;
    # An HTTP/2 connection is closed after keepalive_requests streams (1000 by default) and after
    # keepalive_timeout with none open: a worker's heartbeats alone would reach the first in an hour.
    keepalive_requests 1000000;
    keepalive_timeout 1h;
    location / {
      grpc_pass grpc://replicas;
      grpc_socket_keepalive on;
    }
$(listen_block)
  }
}
EOF
  /usr/sbin/nginx -t -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" -e "$LOGS/nginx-error.log" \
    >"$LOGS/nginx-test.log" 2>&1 || { log_tail "$LOGS/nginx-test.log"; die "nginx rejects its configuration"; }
}

start_proxy() {
  ports_free proxy "$PROXY_PORT"
  nginx_conf
  (exec nohup /usr/sbin/nginx -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" -e "$LOGS/nginx-error.log") \
    </dev/null >>"$LOGS/proxy.log" 2>&1 &
  echo $! >"$RUN/proxy.pid"
  wait_ready proxy port_open "$PROXY_PORT"
}

stop_proxy_hard() { # SIGTERM is nginx's fast shutdown: workers close every connection at once
  local pid workers
  pid="$(pid_of proxy)"
  [[ -n "$pid" ]] || return 0
  workers="$(ps -o pid= --ppid "$pid" 2>/dev/null || true)"
  stop_pid proxy TERM 5
  local w
  for w in $workers; do kill -KILL "$w" 2>/dev/null || true; done
}

# ---------------------------------------------------------------------------------------------------
# Verbs

cmd_start() {
  mkdir -p "$STATE" "$LOGS" "$RUN"
  rm -f "$STATE/listen-blocked" # a fresh start carries every stream
  if alive grpc-1 || alive core || alive proxy; then
    say "already running (scripts/real-cluster.sh stop first)"; cmd_env; return 0
  fi
  ensure_installed
  find_engine
  pg_alive || pg_start
  as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U hatchet -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname='hatchet'" | grep -q 1 ||
    as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U hatchet -d postgres -qc "CREATE DATABASE hatchet"
  alive rabbitmq || mq_start
  server_env
  "$BIN/hatchet-migrate" >"$LOGS/migrate.log" 2>&1 || { log_tail "$LOGS/migrate.log" 20; die "migration failed"; }
  # --overwrite=false on reruns: new keys would void every token minted before.
  local overwrite=()
  [[ -f "$STATE/config/server.yaml" ]] && overwrite=(--overwrite=false)
  "$BIN/hatchet-admin" quickstart --skip certs --generated-config-dir "$STATE/config" "${overwrite[@]}" \
    >"$LOGS/quickstart.log" 2>&1 || { log_tail "$LOGS/quickstart.log" 20; die "hatchet-admin quickstart failed"; }
  local token
  token="$("$BIN/hatchet-admin" token create --config "$STATE/config" --tenant-id "$TENANT" \
    --name "hatchet-runtime-cluster" 2>"$LOGS/token.log" | tail -n 1)"
  [[ "$token" == *.*.* ]] || { log_tail "$LOGS/token.log"; die "hatchet-admin token create printed no token"; }
  start_core
  start_grpc 1
  start_grpc 2
  start_api
  start_proxy
  (
    umask 077
    cat >"$ENV_FILE" <<EOF
HATCHET_CLIENT_TOKEN=$token
HATCHET_CLIENT_TLS_STRATEGY=none
HATCHET_CLIENT_HOST_PORT=127.0.0.1:$PROXY_PORT
HATCHET_CLIENT_SERVER_URL=http://127.0.0.1:$API_PORT
HATCHET_CLIENT_API_URL=http://127.0.0.1:$API_PORT
HATCHET_CLIENT_TENANT_ID=$TENANT
HATCHET_REAL_ENGINE=1
HATCHET_REAL_ENGINE_SCRIPT=$ROOT/scripts/real-cluster.sh
HATCHET_REAL_CLUSTER=1
EOF
  )
  say "cluster $VERSION up: gRPC via nginx 127.0.0.1:$PROXY_PORT (replicas $GRPC1_PORT, $GRPC2_PORT; idle timeout $IDLE_TIMEOUT), REST http://127.0.0.1:$API_PORT, RabbitMQ 127.0.0.1:$MQ_PORT, PostgreSQL 127.0.0.1:$PG_PORT; client env in $ENV_FILE"
}

cmd_stop() {
  mkdir -p "$RUN"
  stop_proxy_hard
  # The engine's processes drain together (each may take SERVER_GRPC_SHUTDOWN_TIMEOUT, 10 s).
  local n
  for n in api grpc-1 grpc-2 core; do stop_pid "$n" & done
  wait
  mq_stop
  epmd_stop
  pg_stop
  say "stopped"
}

cmd_status() {
  local n p
  for n in postgres rabbitmq core grpc-1 grpc-2 api proxy; do
    if [[ $n == postgres ]]; then
      if pg_alive; then echo "postgres: running (pid $(head -n 1 "$PGDATA/postmaster.pid"), 127.0.0.1:$PG_PORT)"; else echo "postgres: stopped"; fi
      continue
    fi
    p="$(pid_of "$n")"
    if alive "$n"; then
      case $n in
        rabbitmq) echo "$n: running (pid $p, amqp 127.0.0.1:$MQ_PORT)" ;;
        core) echo "$n: running (pid $p, controllers+scheduler, health :$HEALTH_CORE_PORT)" ;;
        grpc-1) echo "$n: running (pid $p, grpc 127.0.0.1:$GRPC1_PORT, health :$HEALTH1_PORT)" ;;
        grpc-2) echo "$n: running (pid $p, grpc 127.0.0.1:$GRPC2_PORT, health :$HEALTH2_PORT)" ;;
        api) echo "$n: running (pid $p, rest http://127.0.0.1:$API_PORT)" ;;
        proxy) echo "$n: running (pid $p, nginx grpc 127.0.0.1:$PROXY_PORT, idle timeout $IDLE_TIMEOUT)" ;;
      esac
    else
      echo "$n: stopped"
    fi
  done
}

cmd_env() {
  [[ -f "$ENV_FILE" ]] || die "no client environment yet (scripts/real-cluster.sh start)"
  sed 's/^/export /' "$ENV_FILE"
}

need_running() { [[ -f "$STATE/config/server.yaml" && -d "$RUN" ]] || die "not started (scripts/real-cluster.sh start)"; }

cmd_kill_grpc() { # N
  need_running; grpc_ports "$1" >/dev/null
  alive "grpc-$1" || die "grpc-$1 is not running"
  stop_pid "grpc-$1" KILL 10
  say "grpc-$1 killed (SIGKILL); scripts/real-cluster.sh restart-grpc $1 starts it again"
}

cmd_restart_grpc() { # N
  need_running; grpc_ports "$1" >/dev/null; find_engine
  # SIGTERM: the engine ends its streams, then stops within SERVER_GRPC_SHUTDOWN_TIMEOUT (10 s).
  stop_pid "grpc-$1" TERM 60
  start_grpc "$1"
  say "grpc-$1 restarted"
}

cmd_kill_core() {
  need_running; find_engine
  stop_pid core KILL 10
  sleep "${CLUSTER_RESTART_GAP:-1}"
  start_core
  say "core (controllers+scheduler) killed and started again"
}

cmd_restart_engine() { # every engine process and the API: a crash, as an engine host lost would look
  need_running; find_engine
  local n
  for n in api grpc-1 grpc-2 core; do stop_pid "$n" KILL 10; done
  sleep "${CLUSTER_RESTART_GAP:-1}"
  start_core; start_grpc 1; start_grpc 2; start_api
  say "engine processes and API restarted"
}

cmd_restart_mq() {
  need_running
  mq_stop
  sleep "${CLUSTER_RESTART_GAP:-1}"
  mq_start
  say "RabbitMQ restarted"
}

cmd_restart_proxy() {
  need_running
  stop_proxy_hard
  sleep "${CLUSTER_RESTART_GAP:-1}"
  start_proxy
  say "proxy restarted (every connection was cut)"
}

cmd_reload_proxy() {
  need_running
  alive proxy || die "the proxy is not running"
  nginx_conf # picks up a changed CLUSTER_IDLE_TIMEOUT
  /usr/sbin/nginx -p "$NGINX_DIR" -c "$NGINX_DIR/nginx.conf" -e "$LOGS/nginx-error.log" -s reload ||
    die "nginx -s reload failed"
  say "proxy reloaded (graceful)"
}

cmd_block_listen() {
  need_running
  touch "$STATE/listen-blocked"
  stop_proxy_hard
  start_proxy
  say "proxy restarted: it carries no actions stream (ListenV2) until unblock-listen"
}

cmd_unblock_listen() {
  need_running
  rm -f "$STATE/listen-blocked"
  cmd_reload_proxy
  say "proxy carries actions streams again"
}

cmd_restart_postgres() {
  need_running
  pg_alive || die "PostgreSQL is not running"
  pg_stop
  sleep "${CLUSTER_RESTART_GAP:-1}"
  pg_start
  say "PostgreSQL restarted"
}

cmd_psql() { as_pg "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U hatchet -d hatchet "$@"; }

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  env) cmd_env ;;
  status) cmd_status ;;
  psql) shift; cmd_psql "$@" ;;
  kill-grpc) cmd_kill_grpc "${2:?kill-grpc N (1 or 2)}" ;;
  restart-grpc) cmd_restart_grpc "${2:?restart-grpc N (1 or 2)}" ;;
  kill-core) cmd_kill_core ;;
  restart-engine) cmd_restart_engine ;;
  restart-mq) cmd_restart_mq ;;
  restart-proxy) cmd_restart_proxy ;;
  reload-proxy) cmd_reload_proxy ;;
  restart-postgres) cmd_restart_postgres ;;
  block-listen) cmd_block_listen ;;
  unblock-listen) cmd_unblock_listen ;;
  rabbitmqctl) shift; (mq_env; exec /usr/lib/rabbitmq/bin/rabbitmqctl "$@") ;;
  *)
    echo "usage: $0 start|stop|env|status|psql [ARGS]|kill-grpc N|restart-grpc N|kill-core|restart-engine|restart-mq|restart-proxy|reload-proxy|restart-postgres|block-listen|unblock-listen|rabbitmqctl [ARGS]" >&2
    exit 2
    ;;
esac
