# Shared by load/bench.sh, load/idle-conns and load/h2-abuse: packages, binaries, backends, and
# the proxies (weir, weir-smol, nginx, HAProxy) started with the same worker count in front of the
# same two backends. Sourced, not run. Every process started here is recorded and stopped by stop_all
# (the callers trap EXIT); nothing else is ever killed.
# shellcheck shell=bash

LOAD_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$LOAD_DIR/.." && pwd)"

# Release binaries. The default target dir is used on purpose (not $CARGO_TARGET_DIR, which
# developers often point at a shared debug dir): benchmarks measure release builds only.
RELEASE_DIR="${RELEASE_DIR:-$REPO/target/release}"
WEIR_BIN="${WEIR_BIN:-$RELEASE_DIR/weir}"
WEIR_SMOL_BIN="${WEIR_SMOL_BIN:-$RELEASE_DIR/weir-smol}"
WEIR_LOAD_BIN="${WEIR_LOAD_BIN:-$RELEASE_DIR/weir-load}"
# `weir-base` in PROXIES: another weir build (e.g. an older commit's release binary) run beside
# the current one, for before/after comparisons in one run. Never built here.
WEIR_BASE_BIN="${WEIR_BASE_BIN:-}"

BACKEND_THREADS="${BACKEND_THREADS:-1}" # tokio worker threads of each of the two backends
BODY_BYTES="${BODY_BYTES:-64}"          # response body size
PIN="${PIN:-1}"                         # 1: pin each proxy to CPUs 0..workers-1 (taskset)
PROXY_CPUS="${PROXY_CPUS:-}"            # set: pin each proxy to these CPUs instead (taskset -c list)
# Set by load/h2-abuse, load/grpc-bench and load/idle-conns (unset: the HTTP/1 benchmark as it
# always was):
#   H2C=1          clients speak h2c: nginx listens with `http2`, HAProxy binds `proto h2` (prior
#                  knowledge only; weir takes both on one port); the start probe uses it
#   GRPC=1         the backends are weir-load's gRPC servers over h2c (start_backends --grpc):
#                  weir's backends get `protocol: h2c`, nginx `grpc_pass`, HAProxy `proto h2`
#   IDLE_TIMEOUT   weir's server.idle_timeout and nginx's keepalive_timeout (default 300s)
#   WRITE_TIMEOUT  weir's server.write_timeout and nginx's send_timeout (default: theirs)
#   BIG_BYTES      body size of the backends' paths under /big (default: BODY_BYTES)
# Set by load/tls-bench (unset: plain HTTP):
#   TLS_CERT TLS_KEY  PEM certificate and key every proxy terminates TLS with (nginx, weir);
#                     nginx gets `ssl_protocols TLSv1.2 TLSv1.3` (1.22's default has no 1.3)
#   TLS_PEM           the same certificate and key in one file (HAProxy's `crt`)

STARTED_PIDS=()
WORK="${WORK:-}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# Installs nginx, HAProxy and wrk from Debian packages when a command is missing.
ensure_packages() {
  local missing=()
  command -v nginx >/dev/null || missing+=(nginx)
  command -v haproxy >/dev/null || missing+=(haproxy)
  command -v wrk >/dev/null || missing+=(wrk)
  command -v taskset >/dev/null || missing+=(util-linux)
  command -v curl >/dev/null || missing+=(curl)
  if ((${#missing[@]})); then
    log "installing ${missing[*]} (Debian packages)"
    [[ $(id -u) == 0 ]] || die "need root to apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# h2load (nghttp2-client), installed when missing (load/grpc-bench, SHAPE=grpc load/instructions).
ensure_h2load() {
  command -v h2load >/dev/null && return
  [[ $(id -u) == 0 ]] || die "need root to apt-get install nghttp2-client (h2load)"
  log "installing nghttp2-client (h2load)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nghttp2-client >/dev/null
}

# A gRPC request body in file $1: one uncompressed length-prefixed message of $2 bytes.
write_grpc_message() {
  local n=$2
  {
    printf '%b' "\\x00\\x$(printf %02x $(((n >> 24) & 255)))\\x$(printf %02x $(((n >> 16) & 255)))\\x$(printf %02x $(((n >> 8) & 255)))\\x$(printf %02x $((n & 255)))"
    head -c "$n" /dev/zero | tr '\0' m
  } >"$1"
}

# Builds the release binaries (a no-op when up to date) unless NO_BUILD=1; $1 is the list of
# proxies (weir and weir-smol are built only when they are in the list).
build_binaries() {
  local pkgs=(-p weir-load) with_weir=0 with_smol=0
  [[ " ${1:-weir} " == *" weir "* || " ${1:-} " == *" weir-adaptive "* ]] && with_weir=1 && pkgs+=(-p weir-tokio)
  [[ " ${1:-} " == *" weir-smol "* ]] && with_smol=1 && pkgs+=(-p weir-smol)
  if [[ ${NO_BUILD:-0} != 1 ]]; then
    log "cargo build --release ${pkgs[*]}"
    (cd "$REPO" && env -u CARGO_TARGET_DIR cargo build --release -q "${pkgs[@]}") ||
      die "release build failed"
  fi
  [[ -x $WEIR_LOAD_BIN ]] || die "no $WEIR_LOAD_BIN"
  ((with_weir == 0)) || [[ -x $WEIR_BIN ]] || die "no $WEIR_BIN"
  ((with_smol == 0)) || [[ -x $WEIR_SMOL_BIN ]] || die "no $WEIR_SMOL_BIN"
  [[ " ${1:-} " != *" weir-base "* ]] || [[ -x $WEIR_BASE_BIN ]] ||
    die "weir-base is in the list but WEIR_BASE_BIN ('$WEIR_BASE_BIN') is not an executable"
}

machine_info() {
  echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), kernel $(uname -r)"
  echo "memory:  $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min; the machine may be shared with other builds)"
  echo "nginx:   $(nginx -v 2>&1 | sed 's/.*: //')"
  echo "haproxy: $(haproxy -v 2>/dev/null | head -1 | awk '{print $3}')"
  echo "wrk:     $(wrk -v 2>&1 | head -1 | awk '{print $2}')"
  if [[ -x $WEIR_BIN ]]; then
    echo "weir:    $("$WEIR_BIN" --version 2>/dev/null || echo '?') ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  fi
  if [[ -n $WEIR_BASE_BIN && -x $WEIR_BASE_BIN ]]; then
    echo "weir-base: $("$WEIR_BASE_BIN" --version 2>/dev/null || echo '?') ($WEIR_BASE_BIN)"
  fi
  if [[ -x $WEIR_SMOL_BIN ]]; then
    echo "weir-smol: $("$WEIR_SMOL_BIN" --version 2>/dev/null || echo '?') (the same proxy on smol)"
  fi
}

# Waits up to $2 seconds for the 1-minute load average to fall below $1.
wait_quiet() {
  local below=$1 deadline=$((SECONDS + $2)) load
  while :; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    if awk -v l="$load" -v b="$below" 'BEGIN { exit !(l < b) }'; then
      return 0
    fi
    if ((SECONDS >= deadline)); then
      (($2 == 0)) || log "load $load is still >= $below; going on anyway (numbers will be noisier)"
      return 0
    fi
    sleep 10
  done
}

# Raises the open-file limit of this shell (and so of everything it starts) to at least $1
# (or, when $2 is "soft", as far as the hard limit allows). Containers often cap the hard limit
# even for root (no CAP_SYS_RESOURCE); NOFILE_MAX records what was reached.
raise_nofile() {
  local want=$1 hard
  hard=$(ulimit -Hn)
  if [[ $hard != unlimited ]] && ((hard < want)); then
    if ! ulimit -Hn "$want" 2>/dev/null; then
      [[ ${2:-} == soft ]] || die "cannot raise the fd limit to $want (hard limit $hard)"
      want=$hard
    fi
  fi
  ulimit -n "$want" || die "cannot raise the fd limit to $want"
  NOFILE_MAX=$(ulimit -n)
}

# min of two integers
# Context switches (voluntary + involuntary) of every thread of a process and its children.
context_switches() {
  local pids=("$1") f total=0
  mapfile -t -O 1 pids < <(cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep .)
  for f in $(for p in "${pids[@]}"; do echo /proc/"$p"/task/*/status; done); do
    total=$((total + $(awk '/ctxt_switches/ { s += $2 } END { print s + 0 }' "$f" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

min() { if (($1 < $2)); then echo "$1"; else echo "$2"; fi; }

free_ports() { "$WEIR_LOAD_BIN" free-ports "$1"; }

# Waits until 127.0.0.1:$1 accepts connections (at most $2 seconds, default 15).
wait_port() {
  local port=$1 deadline=$((SECONDS + ${2:-15}))
  while ((SECONDS < deadline)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# Runs "$@" in the background with its output in $WORK/$name.log, records the pid in PID.
spawn() {
  local name=$1
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PID=$!
  STARTED_PIDS+=("$PID")
}

# Stops one recorded process (TERM, then KILL after 5 s).
stop_pid() {
  local pid=$1 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

stop_all() {
  local pid
  for pid in "${STARTED_PIDS[@]}"; do
    stop_pid "$pid"
  done
  STARTED_PIDS=()
}

# taskset prefix pinning a proxy with $1 workers to CPUs 0..$1-1 (when PIN=1), or to
# $PROXY_CPUS when that is set.
pin_prefix() {
  local workers=$1 ncpu
  ncpu=$(nproc)
  if [[ $PIN == 1 && -n $PROXY_CPUS ]]; then
    echo "taskset -c $PROXY_CPUS"
  elif [[ $PIN == 1 ]] && ((workers < ncpu)); then
    echo "taskset -c 0-$((workers - 1))"
  fi
}

# Two backends; sets BACKEND_PORTS=(p1 p2).
start_backends() {
  mapfile -t BACKEND_PORTS < <(free_ports 2)
  local i grpc=()
  [[ ${GRPC:-0} == 1 ]] && grpc=(--grpc)
  for i in 0 1; do
    spawn "backend$((i + 1))" "$WEIR_LOAD_BIN" backend --listen "127.0.0.1:${BACKEND_PORTS[$i]}" \
      --threads "$BACKEND_THREADS" --body-bytes "$BODY_BYTES" ${BIG_BYTES:+--big-bytes "$BIG_BYTES"} \
      "${grpc[@]}"
    wait_port "${BACKEND_PORTS[$i]}" || die "backend $((i + 1)) did not start (see $WORK/backend$((i + 1)).log)"
  done
  log "backends on 127.0.0.1:${BACKEND_PORTS[0]} and :${BACKEND_PORTS[1]} ($BACKEND_THREADS thread(s) each, ${BODY_BYTES}-byte body$([[ ${GRPC:-0} == 1 ]] && echo ', gRPC over h2c'))"
}

# One nginx backend (1 worker, pinned to CPUs $1 when given) answering BODY_BYTES bytes on every
# path (/health included), for the shared-CPU layout of load/bench.sh; sets BACKEND_PORTS=(p).
start_nginx_backend() {
  # Absolute: nginx reads -c and -e relative to its -p prefix.
  local cpus=${1:-} dir body pin=()
  dir=$(realpath -m "$WORK/backend-nginx")
  mkdir -p "$dir/tmp"
  mapfile -t BACKEND_PORTS < <(free_ports 1)
  body=$(head -c "$BODY_BYTES" /dev/zero | tr '\0' x)
  cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile $(min 8192 "${NOFILE_MAX:-$(ulimit -n)}");
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_timeout 300s;
  keepalive_requests 1000000000;
  default_type text/plain;
  server {
    listen 127.0.0.1:${BACKEND_PORTS[0]} backlog=4096;
    location / { return 200 "$body"; }
  }
}
EOF
  [[ -n $cpus ]] && pin=(taskset -c "$cpus")
  spawn backend-nginx "${pin[@]}" nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
  wait_port "${BACKEND_PORTS[0]}" || die "the nginx backend did not start (see $WORK/backend-nginx.log)"
  log "backend: nginx, 1 worker on 127.0.0.1:${BACKEND_PORTS[0]}${cpus:+ (CPU $cpus)}, ${BODY_BYTES}-byte body"
}

# Whether weir's `run` takes --workers (else WEIR_WORKER_THREADS and pinning set the count).
weir_workers_flag() {
  "$WEIR_BIN" run --help 2>/dev/null | grep -q -- '--workers'
}

# start_proxy NAME WORKERS MAXCONN: starts weir|weir-smol|nginx|haproxy on a free port; sets PORT and
# PROXY_PID (the process whose tree is measured).
start_proxy() {
  local name=$1 workers=$2 maxconn=${3:-4096} dir pin
  dir=$(realpath -m "$WORK/$name-w$workers")
  mkdir -p "$dir"
  PORT=$(free_ports 1)
  pin=$(pin_prefix "$workers")
  case $name in
    weir | weir-smol | weir-base | weir-adaptive)
      # The same proxy, configuration and flags on its two runtimes (tokio, smol), another
      # build of it (weir-base), or weir with adaptive concurrency on (weir-adaptive).
      local bin=$WEIR_BIN
      [[ $name == weir-smol ]] && bin=$WEIR_SMOL_BIN
      [[ $name == weir-base ]] && bin=$WEIR_BASE_BIN
      write_weir_config "$dir/weir.yaml" "$workers" "$maxconn"
      [[ $name != weir-adaptive ]] || weir_adaptive_block "$dir/weir.yaml" "$maxconn"
      # An older build rejects keys it does not know (strict config): weir-base runs without
      # the ones added since (WEIR_BASE_DROP, `server.` keys; e8861d1 had no client-connection
      # cap, so it runs uncapped).
      if [[ $name == weir-base ]]; then
        local key
        for key in ${WEIR_BASE_DROP-max_connections}; do sed -i "/^  $key:/d" "$dir/weir.yaml"; done
      fi
      local args=(run --config "$dir/weir.yaml" --public-bind "127.0.0.1:$PORT" --ready-file "$dir/ready.json")
      weir_workers_flag && args+=(--workers "$workers")
      # shellcheck disable=SC2086 # $pin is empty or a command prefix
      spawn "$name-w$workers" env WEIR_WORKERS="$workers" WEIR_WORKER_THREADS="$workers" $pin "$bin" "${args[@]}"
      ;;
    nginx)
      write_nginx_config "$dir" "$workers" "$maxconn"
      # shellcheck disable=SC2086
      spawn "$name-w$workers" $pin nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"
      ;;
    haproxy)
      write_haproxy_config "$dir/haproxy.cfg" "$workers" "$maxconn"
      # shellcheck disable=SC2086
      spawn "$name-w$workers" $pin haproxy -db -f "$dir/haproxy.cfg"
      ;;
    *) die "unknown proxy $name" ;;
  esac
  PROXY_PID=$PID
  wait_port "$PORT" 30 || die "$name did not open 127.0.0.1:$PORT (see $WORK/$name-w$workers.log)"
  # One request through it so that a dead backend path shows now, not in the numbers.
  local status probe=() scheme=http
  [[ ${H2C:-0} == 1 ]] && probe=(--http2-prior-knowledge)
  [[ -n ${TLS_CERT:-} ]] && scheme=https probe=(--insecure --http1.1)
  # A few tries: a proxy slowed down (valgrind, a loaded machine) may not have seen its first
  # health checks pass yet.
  local try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    status=$(curl -s "${probe[@]}" -o /dev/null -w '%{http_code}' "$scheme://127.0.0.1:$PORT/" 2>/dev/null || true)
    [[ $status == 200 ]] && break
    sleep "0.$try"
  done
  [[ $status == 200 ]] || die "$name answered '$status' on 127.0.0.1:$PORT (see $WORK/$name-w$workers.log)"
  log "$name: $workers worker(s) on 127.0.0.1:$PORT, pid $PROXY_PID${pin:+ ($pin)}"
}

# weir: rate limiting off, management off, health checks on, slow start off (nginx and HAProxy
# have none by default), access log off (successes are sampled at 0; errors would still be
# logged), limits above anything the benchmark sends.
write_weir_config() {
  local workers=${2:-1} maxconn=${3:-4096}
  cat >"$1" <<EOF
server:
  port: "$PORT"
$(weir_tls_block)
  # The client-connection cap nginx (worker_connections) and HAProxy (maxconn) get.
  max_connections: $maxconn
  access_log_sample_rate: 0
  idle_timeout: ${IDLE_TIMEOUT:-300s}
${WRITE_TIMEOUT:+  write_timeout: $WRITE_TIMEOUT}
  upstream:
    max_concurrent_requests: 100000
    # The idle cache nginx gets (keepalive 512 per worker): without it, 256 client connections
    # churn upstream connections past the defaults (64 per backend, 256 in all).
    max_idle_conns: $((512 * workers))
    max_idle_conns_per_host: 512
  overload:
    max_concurrent_requests: 100000
health_check:
  mode: http
  path: /health
  interval: 2s
  timeout: 1s
  jitter: 100ms
  slow_start: 0s
rate_limit:
  enabled: false
management:
  enabled: false
balancing:
  policy: round_robin
backends:
EOF
  local i
  for i in "${!BACKEND_PORTS[@]}"; do
    printf '  - id: b%d\n    url: http://127.0.0.1:%s\n' $((i + 1)) "${BACKEND_PORTS[$i]}" >>"$1"
    [[ ${GRPC:-0} != 1 ]] || printf '    protocol: h2c\n' >>"$1"
  done
}

# weir-adaptive: adaptive concurrency on (C-LOAD-4), starting at a limit above the connections
# the benchmark opens (min_limit = the client-connection cap), so what is measured is the cost of
# the per-attempt bookkeeping (latency samples, the window's median, the limit's moves), not
# requests shed while the limit grows from 3 one window at a time.
weir_adaptive_block() {
  local file=$1 maxconn=$2
  sed -i "/^  upstream:$/a\\    adaptive_concurrency:\\n      enabled: true\\n      min_limit: $maxconn" "$file"
}

# weir's server.tls block when TLS_CERT is set (nothing otherwise).
weir_tls_block() {
  [[ -n ${TLS_CERT:-} ]] || return 0
  printf '  tls:\n    certificates:\n      - cert_file: %s\n        key_file: %s\n' "$TLS_CERT" "$TLS_KEY"
}

# nginx: upstream keepalive, the same forwarding headers weir writes (C-FWD-2, C-PATH-3),
# retries on error/timeout/502-504 like weir's defaults, no access log.
write_nginx_config() {
  local dir=$1 workers=$2 maxconn=$3
  mkdir -p "$dir/tmp"
  cat >"$dir/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes $workers;
worker_rlimit_nofile $(min $((maxconn * 2 + 1024)) "${NOFILE_MAX:-$(ulimit -n)}");
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
  worker_connections $(min $((maxconn * 2 + 1024)) "${NOFILE_MAX:-$(ulimit -n)}");
}
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_timeout ${IDLE_TIMEOUT:-300s};
  ${WRITE_TIMEOUT:+send_timeout $WRITE_TIMEOUT;}
  keepalive_requests 1000000000;
  upstream backends {
$(for p in "${BACKEND_PORTS[@]}"; do echo "    server 127.0.0.1:$p;"; done)
    keepalive 512;
    keepalive_requests 1000000000;
    keepalive_timeout 60s;
  }
  server {
    listen 127.0.0.1:$PORT backlog=4096$([[ ${H2C:-0} == 1 ]] && echo ' http2')$([[ -n ${TLS_CERT:-} ]] && echo ' ssl');
$([[ -n ${TLS_CERT:-} ]] && printf '    ssl_protocols TLSv1.2 TLSv1.3;\n    ssl_certificate %s;\n    ssl_certificate_key %s;\n' "$TLS_CERT" "$TLS_KEY")
$(if [[ ${GRPC:-0} == 1 ]]; then nginx_grpc_location; else nginx_http_location; fi)
  }
}
EOF
}

# nginx's location for the HTTP/1.1 backends.
nginx_http_location() {
  cat <<'LOC'
    location / {
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Real-IP $remote_addr;
      proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_set_header X-Request-ID $request_id;
      add_header X-Request-ID $request_id always;
      proxy_next_upstream error timeout http_502 http_503 http_504;
      proxy_next_upstream_tries 2;
    }
LOC
}

# nginx's location for gRPC backends: grpc_pass over the upstream's keep-alive connections, the
# same forwarding headers and retries as the HTTP/1.1 location.
nginx_grpc_location() {
  cat <<'LOC'
    location / {
      grpc_pass grpc://backends;
      grpc_set_header X-Forwarded-For $remote_addr;
      grpc_set_header X-Real-IP $remote_addr;
      grpc_set_header X-Forwarded-Host $host;
      grpc_set_header X-Forwarded-Proto $scheme;
      grpc_set_header X-Request-ID $request_id;
      add_header X-Request-ID $request_id always;
      grpc_next_upstream error timeout http_502 http_503 http_504;
      grpc_next_upstream_tries 2;
    }
LOC
}

# HAProxy: http-reuse always, active health checks, the same forwarding headers, layer-7
# retries like weir's defaults, no logging.
write_haproxy_config() {
  local file=$1 workers=$2 maxconn=$3
  cat >"$file" <<EOF
global
  nbthread $workers
  maxconn $maxconn
  # HAProxy wants 2 x maxconn fds; containers may cap the hard limit below that. The idle test
  # needs N client fds plus a few upstream ones, so a warning is enough.
  no strict-limits
defaults
  mode http
  maxconn $maxconn
  timeout connect 5s
  timeout client 300s
  timeout server 60s
  timeout http-request 10s
  timeout http-keep-alive 300s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:$PORT backlog 4096${TLS_PEM:+ ssl crt $TLS_PEM}$([[ ${H2C:-0} == 1 ]] && echo ' proto h2')
  unique-id-format %[uuid()]
  unique-id-header X-Request-ID
  http-request del-header Forwarded
  http-request set-header X-Forwarded-For %[src]
  http-request set-header X-Real-IP %[src]
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header X-Forwarded-Proto $([[ -n ${TLS_PEM:-} ]] && echo https || echo http)
  http-response set-header X-Request-ID %[unique-id]
  default_backend be
backend be
  balance roundrobin
  option httpchk GET /health
  retries 1
  retry-on conn-failure empty-response response-timeout 502 503 504
  option redispatch
$(for i in "${!BACKEND_PORTS[@]}"; do echo "  server b$((i + 1)) 127.0.0.1:${BACKEND_PORTS[$i]} check inter 2s$([[ ${GRPC:-0} == 1 ]] && echo ' proto h2 check-proto h2')"; done)
EOF
}
