# The table of load/grpc-bench from its results.tsv (awk -F'\t' -f load/grpc-bench.awk FILE):
# per part and proxy the medians over rounds, and the ratios of each proxy to nginx and HAProxy
# as medians of per-round ratios (each pair ran seconds apart in the same round).
function median(list,   n, a, i, j, t) {
  n = split(list, a, " ")
  if (n == 0) return 0
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function ratio(part, proxy, peer, col,   k, list, v) {
  list = ""
  for (k = 1; k <= rounds; k++) {
    if ((part, proxy, k, col) in val && (part, peer, k, col) in val && val[part, peer, k, col] > 0)
      list = list " " val[part, proxy, k, col] / val[part, peer, k, col]
  }
  v = median(list)
  return list == "" ? "-" : sprintf("%.2f", v)
}
/^#/ || $1 == "part" { next }
{
  key = $1 SUBSEP $2
  if (!(key in seen)) { seen[key] = 1 }
  if (!($1 in pseen)) { pseen[$1] = 1; parts[++np] = $1 }
  if (!($2 in xseen)) { xseen[$2] = 1; proxies[++nx] = $2 }
  rps[key] = rps[key] " " $4; cpu[key] = cpu[key] " " $8; mean[key] = mean[key] " " $9
  failed[key] += $6
  if ($10 != "-") lost[key] += $5 - $10; else lost[key] = "-"
  val[$1, $2, $3, "rps"] = $4; val[$1, $2, $3, "cpu"] = $8
  if ($3 + 0 > rounds) rounds = $3 + 0
}
END {
  for (pi = 1; pi <= np; pi++) {
    part = parts[pi]
    printf "\n### %s\n\n", part == "grpc" ? "gRPC unary calls to gRPC backends over h2c" : "HTTP/2 clients to HTTP/1.1 backends"
    printf "| proxy | calls/s | CPU per call | mean time per call | failed | succeeded, not at a backend | calls/s ÷ nginx | ÷ HAProxy | CPU/call ÷ nginx | ÷ HAProxy |\n"
    printf "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    for (xi = 1; xi <= nx; xi++) {
      p = proxies[xi]; key = part SUBSEP p
      if (!(key in seen)) continue
      printf "| %s | %.0f | %.1f µs | %.2f ms | %d | %s | %s | %s | %s | %s |\n", p, median(rps[key]), median(cpu[key]), median(mean[key]), failed[key], lost[key], \
        ratio(part, p, "nginx", "rps"), ratio(part, p, "haproxy", "rps"), ratio(part, p, "nginx", "cpu"), ratio(part, p, "haproxy", "cpu")
    }
  }
}
