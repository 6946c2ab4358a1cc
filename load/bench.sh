#!/usr/bin/env bash
# Side-by-side benchmark (issue 4, item 7; weir-smol: issue 8): weir, weir-smol, nginx and
# HAProxy with the same worker count
# in front of the same two static backends, driven by wrk in interleaved rounds.
#
#   bash load/bench.sh                      # defaults: about 4 minutes
#   ROUNDS=5 DURATION=10 bash load/bench.sh # longer, steadier
#   LAYOUT=shared bash load/bench.sh        # the shared-CPU layout (issue 14), below
#
# Layouts (LAYOUT=):
#   own (default)  two weir-load backends; each proxy pinned to CPUs 0..workers-1, wrk unpinned
#   shared         wrk (1 thread) pinned to CPU 0; the proxy (1 worker) and ONE nginx backend
#                  (1 worker, 100-byte body) both pinned to CPU 1. Throughput is then about
#                  1 / (proxy CPU + backend CPU) per request, so the proxy's CPU per request
#                  decides. Defaults: WORKERS=1 WRK_THREADS=1 BODY_BYTES=100; WRK_CPUS=0,
#                  PROXY_CPUS=1, BACKEND_CPUS=1 can move them.
#
# Settings (environment):
#   WORKERS="1 2"      worker processes/threads of every proxy (nginx worker_processes, HAProxy
#                      nbthread, weir / weir-smol --workers or WEIR_WORKER_THREADS)
#   CONNECTIONS="50 256"  wrk connections
#   ROUNDS=3           interleaved rounds per workers x connections cell (order rotates per round)
#   DURATION=5         seconds per wrk run;  WARMUP=2 seconds per proxy after it starts
#   WRK_THREADS=2      wrk threads
#   PROXIES="weir weir-smol nginx haproxy"   (also weir-base: WEIR_BASE_BIN, another weir build;
#                      weir-adaptive: weir with adaptive concurrency on)
#   PIN=1              pin each proxy to CPUs 0..workers-1 (0: no pinning)
#   BACKEND_THREADS=1  threads of each backend;  BODY_BYTES=64 response body
#   NO_BUILD=1         skip `cargo build --release`;  WEIR_BIN, WEIR_LOAD_BIN: other binaries
#   OUT=DIR            where results go (default target/bench/<UTC time>); bench.svg there is
#                      the bar plot (req/s; p50 with p99 whiskers), see load/README.md
#   QUIET_LOAD=1.5 QUIET_WAIT=0  before starting, wait up to QUIET_WAIT seconds for the 1-minute
#                      load average to fall below QUIET_LOAD (the machine may be shared)
# Runtime is about |WORKERS| x (|PROXIES| x WARMUP + |CONNECTIONS| x ROUNDS x |PROXIES| x DURATION).
set -euo pipefail
LAYOUT="${LAYOUT:-own}"
WRK_PIN=()
case $LAYOUT in
  own) ;;
  shared)
    WORKERS="${WORKERS:-1}"
    WRK_THREADS="${WRK_THREADS:-1}"
    export BODY_BYTES="${BODY_BYTES:-100}"
    export PROXY_CPUS="${PROXY_CPUS:-1}"
    BACKEND_CPUS="${BACKEND_CPUS:-1}"
    WRK_PIN=(taskset -c "${WRK_CPUS:-0}")
    ;;
  *)
    echo "LAYOUT must be own or shared, not '$LAYOUT'" >&2
    exit 2
    ;;
esac
# shellcheck source=load/lib.sh
source "$(dirname "$0")/lib.sh"

WORKERS="${WORKERS:-1 2}"
CONNECTIONS="${CONNECTIONS:-50 256}"
ROUNDS="${ROUNDS:-3}"
DURATION="${DURATION:-5}"
WARMUP="${WARMUP:-2}"
WRK_THREADS="${WRK_THREADS:-2}"
PROXIES="${PROXIES:-weir weir-smol nginx haproxy}"
OUT="${OUT:-$REPO/target/bench/$(date -u +%Y%m%dT%H%M%SZ)}"

mkdir -p "$OUT"
WORK="$OUT/run"
mkdir -p "$WORK"
trap stop_all EXIT
trap 'exit 130' INT TERM

ensure_packages
build_binaries "$PROXIES"
wait_quiet "${QUIET_LOAD:-1.5}" "${QUIET_WAIT:-0}"
raise_nofile 65536 soft

read -r -a proxies <<<"$PROXIES"
n_workers=$(wc -w <<<"$WORKERS")
n_conns=$(wc -w <<<"$CONNECTIONS")
estimate=$((n_workers * (${#proxies[@]} * WARMUP + n_conns * ROUNDS * ${#proxies[@]} * DURATION)))

{
  echo "# weir side-by-side benchmark"
  machine_info | sed 's/^/# /'
  if [[ $LAYOUT == shared ]]; then
    echo "# layout: shared (wrk on CPU ${WRK_CPUS:-0}; proxy on CPU $PROXY_CPUS; one nginx backend, 1 worker, on CPU $BACKEND_CPUS)"
    echo "# workers: $WORKERS; connections: $CONNECTIONS; rounds: $ROUNDS x ${DURATION}s; wrk threads: $WRK_THREADS; backend: nginx, ${BODY_BYTES}-byte body"
  else
    echo "# layout: own; workers: $WORKERS; connections: $CONNECTIONS; rounds: $ROUNDS x ${DURATION}s; wrk threads: $WRK_THREADS; pin: $PIN; backends: 2 x $BACKEND_THREADS thread(s), ${BODY_BYTES}-byte body"
  fi
  if [[ " $PROXIES " == *" weir "* || " $PROXIES " == *" weir-smol "* ]]; then
    if weir_workers_flag; then echo "# weir workers: --workers N"; else echo "# weir workers: WEIR_WORKER_THREADS=N (no --workers flag)"; fi
  fi
} >"$OUT/machine.txt"
cat "$OUT/machine.txt" >&2
log "about $((estimate / 60)) min $((estimate % 60)) s of load; results in $OUT"

RESULTS="$OUT/results.tsv"
{
  cat "$OUT/machine.txt"
  "$WEIR_LOAD_BIN" wrk-header
} >"$RESULTS"

BACKEND_PID=
if [[ $LAYOUT == shared ]]; then
  start_nginx_backend "$BACKEND_CPUS"
  BACKEND_PID=$PID
else
  start_backends
fi

declare -A port_of pid_of
for w in $WORKERS; do
  for p in "${proxies[@]}"; do
    start_proxy "$p" "$w"
    port_of[$p]=$PORT
    pid_of[$p]=$PROXY_PID
  done
  for p in "${proxies[@]}"; do
    "${WRK_PIN[@]}" wrk -t "$WRK_THREADS" -c 50 -d "${WARMUP}s" "http://127.0.0.1:${port_of[$p]}/" >/dev/null 2>&1 || true
  done
  for c in $CONNECTIONS; do
    for ((r = 1; r <= ROUNDS; r++)); do
      echo "# workers $w connections $c round $r: load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" >>"$RESULTS"
      # Rotate the order each round so no proxy always runs first (or right after another).
      order=()
      for ((i = 0; i < ${#proxies[@]}; i++)); do
        order+=("${proxies[$(((i + r - 1) % ${#proxies[@]}))]}")
      done
      for p in "${order[@]}"; do
        out="$WORK/wrk-$p-w$w-c$c-r$r.txt"
        cpu0=$("$WEIR_LOAD_BIN" cpu-seconds "${pid_of[$p]}")
        sw0=$(context_switches "${pid_of[$p]}")
        [[ -z $BACKEND_PID ]] || bcpu0=$("$WEIR_LOAD_BIN" cpu-seconds "$BACKEND_PID")
        "${WRK_PIN[@]}" wrk -t "$WRK_THREADS" -c "$c" -d "${DURATION}s" --latency "http://127.0.0.1:${port_of[$p]}/" >"$out" 2>&1 || true
        cpu1=$("$WEIR_LOAD_BIN" cpu-seconds "${pid_of[$p]}")
        sw1=$(context_switches "${pid_of[$p]}")
        [[ -z $BACKEND_PID ]] || bcpu1=$("$WEIR_LOAD_BIN" cpu-seconds "$BACKEND_PID")
        cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.3f", b - a }')
        if row=$("$WEIR_LOAD_BIN" wrk-row --proxy "$p" --workers "$w" --connections "$c" --round "$r" --cpu-seconds "$cpu" <"$out"); then
          echo "$row" >>"$RESULTS"
          awk -F'\t' '{printf "  %-9s w=%s c=%-3s round %s: %8.0f req/s  p50 %7.0fus  p99 %7.0fus  CPU/req %5.1fus  errors %d\n", $1, $2, $3, $4, $5, $6, $7, $11, $9 + $10}' <<<"$row" >&2
          # What the proxy costs around it (not in the table): its context switches per request
          # and, in the shared layout, the backend's CPU per request (it shares the proxy's CPU).
          awk -F'\t' -v d="$DURATION" -v s0="$sw0" -v s1="$sw1" -v b0="${bcpu0:-0}" -v b1="${bcpu1:-0}" \
            -v shared="${BACKEND_PID:+1}" \
            '{ n = $5 * d; if (n > 0) { printf "# around %s w=%s c=%s round %s: proxy context switches/req %.3f", $1, $2, $3, $4, (s1 - s0) / n; if (shared) printf ", backend CPU/req %.1fus", (b1 - b0) * 1e6 / n; printf "\n" } }' \
            <<<"$row" | tee -a "$RESULTS" >&2
        else
          log "$p w=$w c=$c round $r: wrk failed (see $out)"
        fi
      done
    done
  done
  for p in "${proxies[@]}"; do
    stop_pid "${pid_of[$p]}"
  done
done

{
  echo
  echo "## Side-by-side ($LAYOUT layout): weir (tokio) and weir-smol vs nginx vs HAProxy"
  echo
  sed -n 's/^# //p' "$OUT/machine.txt" | sed 's/^/    /'
  "$WEIR_LOAD_BIN" summarize "$RESULTS"
} | tee "$OUT/summary.md"
"$WEIR_LOAD_BIN" plot-bench "$RESULTS" --out "$OUT/bench.svg" \
  --title "weir, nginx and HAProxy side by side, $(date -u +%Y-%m-%d), $(nproc) CPUs" ||
  log "the plot failed (the table above stands)"
log "results: $RESULTS, table: $OUT/summary.md, plot: $OUT/bench.svg"
