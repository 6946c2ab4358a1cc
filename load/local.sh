# A local weir target for load/profiles, load/drill and load/soak (issue 17): named backends
# (weir-load backend --name bN), weir with a generated configuration, and private stores (a
# redis-server and a PostgreSQL cluster of our own, never the shared 6379/5432). Sourced after
# lib.sh. Ports: PORT_BASE (default 7400) + 0 weir, + 1 management, + 10.. backends, + 50 Redis;
# PostgreSQL on PG_PORT (default 5700). Everything started is recorded and stopped on exit.
# shellcheck shell=bash

PORT_BASE="${PORT_BASE:-7400}"
WEIR_PORT=$PORT_BASE
MGMT_PORT=$((PORT_BASE + 1))
REDIS_PORT=$((PORT_BASE + 50))
PG_PORT="${PG_PORT:-5700}"
export BALANCER_ADMIN_TOKEN="${BALANCER_ADMIN_TOKEN:-load-drill-token-0123456789}"
export PG_PASSWORD=unused-trust-auth
WEIR_WORKERS_N="${WEIR_WORKERS_N:-2}"
TARGET="http://127.0.0.1:$WEIR_PORT/"

declare -A BACKEND_PID=()
PG_DIR=""
REDIS_PID=""

# start_backend N [DELAY_MS]: backend bN on PORT_BASE + 10 + N.
start_backend() {
  local n=$1 port=$((PORT_BASE + 10 + $1))
  ! port_open "$port" || die "127.0.0.1:$port (backend b$n) is already taken by another process"
  spawn "b$n" "$WEIR_LOAD_BIN" backend --listen "127.0.0.1:$port" --name "b$n" \
    --threads 1 --delay-ms "${2:-${BACKEND_DELAY_MS:-0}}"
  BACKEND_PID[$n]=$PID
  wait_port "$port" || die "backend b$n did not start (see $WORK/b$n.log)"
}

# kill_backend N: SIGKILL, no goodbye (a crash).
kill_backend() {
  kill -KILL "${BACKEND_PID[$1]}" 2>/dev/null || true
  wait "${BACKEND_PID[$1]}" 2>/dev/null || true
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

backend_url() { echo "http://127.0.0.1:$((PORT_BASE + 10 + $1))"; }

# write_config FILE: a weir configuration from the environment:
#   BACKENDS="1 2"  RATE_LIMIT=0|1  STORE=local|redis|postgres  FAILURE_MODE  CAPACITY  REFILL
#   OVERLOAD=N (max requests in flight, no queue; 0: the default 2048)
write_config() {
  local file=$1 n
  {
    cat <<EOF
server:
  port: "$WEIR_PORT"
  access_log_sample_rate: 0
  retry:
    budget_capacity: 100000
    budget_refill_per_second: 100000
EOF
    if ((${OVERLOAD:-0} > 0)); then
      cat <<EOF
  overload:
    max_concurrent_requests: $OVERLOAD
    max_queue: 0
    queue_timeout: 0s
EOF
    fi
    cat <<EOF
health_check:
  mode: http
  path: /health
  interval: 500ms
  timeout: 250ms
  jitter: 50ms
  slow_start: 0s
  # A killed backend's circuit stays open this long after it is back (C-HEALTH-3; default 10s).
  cooldown: ${COOLDOWN:-1s}
  max_cooldown: ${COOLDOWN:-1s}
rate_limit:
  enabled: $([[ ${RATE_LIMIT:-0} == 1 ]] && echo true || echo false)
  storage: ${STORE:-local}
  failure_mode: ${FAILURE_MODE:-local-fallback}
  capacity: ${CAPACITY:-1000000000}
  refill_per_second: ${REFILL:-1000000000}
  operation_timeout: 50ms
EOF
    if [[ ${STORE:-local} == redis ]]; then
      cat <<EOF
redis:
  address: 127.0.0.1:$REDIS_PORT
  dial_timeout: 200ms
  read_timeout: 50ms
  write_timeout: 50ms
EOF
    fi
    if [[ ${STORE:-local} == postgres ]]; then
      cat <<EOF
database:
  host: 127.0.0.1
  port: "$PG_PORT"
  user: postgres
  name: postgres
  sslmode: disable
  password_env: PG_PASSWORD
  connect_timeout: 500ms
EOF
    fi
    cat <<EOF
management:
  enabled: true
  address: "127.0.0.1:$MGMT_PORT"
  auth_token_env: BALANCER_ADMIN_TOKEN
balancing:
  policy: round_robin
backends:
EOF
    for n in ${BACKENDS:-1 2}; do
      printf '  - id: b%s\n    url: %s\n' "$n" "$(backend_url "$n")"
    done
  } >"$file"
}

# start_weir FILE: weir on WEIR_PORT/MGMT_PORT; sets WEIR_PID; waits for a 200 through it.
start_weir() {
  rm -f "$WORK/ready.json"
  ! port_open "$WEIR_PORT" || die "127.0.0.1:$WEIR_PORT (weir) is already taken by another process"
  # shellcheck disable=SC2153 # WEIR_BIN is set by lib.sh
  spawn weir "$WEIR_BIN" run --config "$1" --public-bind "127.0.0.1:$WEIR_PORT" \
    --management-bind "127.0.0.1:$MGMT_PORT" --ready-file "$WORK/ready.json" --workers "$WEIR_WORKERS_N"
  WEIR_PID=$PID
  wait_port "$WEIR_PORT" 30 || die "weir did not start (see $WORK/weir.log)"
  local i
  for ((i = 0; i < 100; i++)); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$TARGET" || true) == 200 ]] && return 0
    sleep 0.1
  done
  die "weir answers no 200 (see $WORK/weir.log)"
}

# metric NAME_AND_LABELS: the value of one exposition line of weir's /metrics (0 when absent).
metric() {
  curl -s -H "Authorization: Bearer $BALANCER_ADMIN_TOKEN" "http://127.0.0.1:$MGMT_PORT/metrics" |
    awk -v m="$1" 'index($0, m) == 1 { v = $NF } END { print v + 0 }'
}

# weir_load_run PROFILE NAME [ARGS...]: runs a profile against the local weir; the report goes to
# $WORK/NAME.json, the summary to $WORK/NAME.txt (and stderr). Returns its exit code.
weir_load_run() {
  local profile=$1 name=$2 rc=0
  shift 2
  "$WEIR_LOAD_BIN" run --profile "$profile" --target-url "$TARGET" --json "$WORK/$name.json" \
    --pid "$WEIR_PID" "$@" >"$WORK/$name.txt" 2>"$WORK/$name.progress" || rc=$?
  sed "s/^/  [$name] /" "$WORK/$name.txt" >&2
  return "$rc"
}

# json FILE EXPR: a value of a report (python3 is on every Debian).
json() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

now_ms() { date +%s%3N; }

# --- our own Redis (never the shared 6379) ---
start_redis() {
  command -v redis-server >/dev/null || die "redis-server not found (apt-get install redis-server)"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$WORK" --logfile "$WORK/redis.log" --daemonize no >/dev/null 2>&1 &
  REDIS_PID=$!
  STARTED_PIDS+=("$REDIS_PID")
  local i
  for ((i = 0; i < 100; i++)); do
    redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  die "redis-server on $REDIS_PORT did not start"
}
kill_redis() {
  kill -KILL "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
}

# --- our own PostgreSQL cluster (never the shared 5432) ---
pg_bin() { printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1; }
start_pg() {
  local bin
  bin=$(pg_bin)
  [[ -x $bin/initdb ]] || die "no PostgreSQL binaries under /usr/lib/postgresql"
  if [[ -z $PG_DIR ]]; then
    PG_DIR=$(mktemp -d /tmp/weir-load-pg.XXXXXX)
    chown postgres "$PG_DIR"
    runuser -u postgres -- "$bin/initdb" -D "$PG_DIR/data" -A trust -U postgres >"$WORK/initdb.log" 2>&1 ||
      die "initdb failed (see $WORK/initdb.log)"
  fi
  runuser -u postgres -- "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/pg.log" -w -t 30 \
    -o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null ||
    die "PostgreSQL on $PG_PORT did not start (see $PG_DIR/pg.log)"
}
kill_pg() {
  runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
}
stop_pg() {
  [[ -n $PG_DIR ]] || return 0
  kill_pg
  rm -rf "$PG_DIR"
  PG_DIR=""
}
store_up() {
  case $1 in
    redis) redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG ;;
    postgres) "$(pg_bin)/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" ;;
  esac
}

local_cleanup() {
  stop_all
  stop_pg
}
