#!/usr/bin/env bash
# What TLS costs the tcp provider: two memserver processes in one run, one in clear and one with --tls-certificates
# (openssl-made EC P-256 certificates, TLS 1.3), and `rbridge bench` against each with the same options, back to back
# and alternating which goes first. Not a test: numbers only.
#
#   bench/rdma-tls.sh [--time SEC] [--iters N] [--repeat N] [--pin same|split|none] [--rows LIST]
#
#   --time SEC   seconds per bandwidth row (default 5)
#   --iters N    timed operations per latency row (default 20000)
#   --repeat N   run every row N times; print medians (default 3)
#   --pin        same: memservers and client on CPU 0; split (default): memservers on CPU 0, client on CPU 1, as two
#                hosts would; none: the scheduler's choice
#   --rows LIST  comma-separated subset of rl,wl,rb1m,wb1m,rb1m8,wb1m8 (default all): 4K QD1 read/write latency,
#                1M QD1 and QD8 read/write bandwidth
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
time_s=5; iters=20000; repeat=3; pin=split; rows="rl,wl,rb1m,wb1m,rb1m8,wb1m8"
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --pin) pin="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$pin" in same|split|none) ;; *) echo "--pin must be same, split or none" >&2; exit 2 ;; esac
command -v openssl >/dev/null || { echo "needs openssl (apt-get install openssl)" >&2; exit 1; }

work="$(mktemp -d)"; token="bench-$RANDOM"
cleanup() {
  for p in ${clear_pid:-} ${tls_pid:-}; do kill -- -"$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
RBRIDGE_NO_BUILD=0 "$root/rbridge" --version >/dev/null   # build once, outside any measurement

pki="$work/pki"; mkdir -p "$pki"
( cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca-key.pem -out ca-cert.pem \
    -days 2 -subj "/CN=bench CA" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server-key.pem -out server.csr \
    -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
  openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile server.ext \
    -out server-cert.pem 2>/dev/null )

wait_for() { for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
setsid "$root/rbridge" memserver --listen 127.0.0.1:0 --admin none --metrics none --capacity 4G --token "$token" \
  >"$work/clear.out" 2>"$work/clear.log" &
clear_pid=$!
setsid "$root/rbridge" memserver --listen 127.0.0.1:0 --admin none --metrics none --capacity 4G --token "$token" \
  --tls-certificates "$pki" >"$work/tls.out" 2>"$work/tls.log" &
tls_pid=$!
for m in clear tls; do
  wait_for "$work/$m.out" lending || { echo "$m memserver did not start:" >&2; cat "$work/$m.log" >&2; exit 1; }
done
addr() { sed -n 's/.* at \([^ ]*\).*/\1/p' "$work/$1.out"; }
client_cpu=()
if [ "$pin" != none ] && [ "$(nproc)" -ge 2 ]; then
  for p in $clear_pid $tls_pid; do taskset -a -p -c 0 "$(pgrep -P "$p" java || echo "$p")" >/dev/null; done
  if [ "$pin" = split ]; then client_cpu=(taskset -c 1); else client_cpu=(taskset -c 0); fi
fi

declare -A test_of=([rl]=read-lat [wl]=write-lat [rb1m]=read-bw [wb1m]=write-bw [rb1m8]=read-bw [wb1m8]=write-bw)
declare -A size_of=([rl]=4K [wl]=4K [rb1m]=1M [wb1m]=1M [rb1m8]=1M [wb1m8]=1M)
declare -A depth_of=([rl]=1 [wl]=1 [rb1m]=1 [wb1m]=1 [rb1m8]=8 [wb1m8]=8)
declare -A name_of=([rl]="4K read QD1 p50 us" [wl]="4K write QD1 p50 us" [rb1m]="1M read QD1 MB/s"
  [wb1m]="1M write QD1 MB/s" [rb1m8]="1M read QD8 MB/s" [wb1m8]="1M write QD8 MB/s")
IFS=, read -r -a keys <<<"$rows"
for k in "${keys[@]}"; do [ -n "${test_of[$k]:-}" ] || { echo "unknown row $k" >&2; exit 2; }; done

results="$work/results"; : >"$results"
measure() { # key which rep -> appends "key which value rep"
  local k="$1" extra=(--iters "$iters") tls=()
  case "${test_of[$k]}" in *-bw) extra=(--time "$time_s") ;; esac
  [ "$2" = tls ] && tls=(--tls-certificates "$pki")
  local r; r="$("${client_cpu[@]}" "$root/rbridge" bench --server "$(addr "$2")" --token "$token" "${tls[@]}" \
    --test "${test_of[$k]}" --size "${size_of[$k]}" --tx-depth "${depth_of[$k]}" "${extra[@]}" | awk 'NR==4')"
  [ -n "$r" ] || { echo "$k $2: no result" >&2; return 0; }
  case "${test_of[$k]}" in
    *-lat) echo "$r" | awk -v k="$k" -v w="$2" -v n="$3" '{print k, w, $5, n}' >>"$results" ;;
    *) echo "$r" | awk -v k="$k" -v w="$2" -v n="$3" '{print k, w, $4, n}' >>"$results" ;;
  esac
}
for rep in $(seq 1 "$repeat"); do
  for k in "${keys[@]}"; do
    if [ $((rep % 2)) = 1 ]; then measure "$k" clear "$rep"; measure "$k" tls "$rep"
    else measure "$k" tls "$rep"; measure "$k" clear "$rep"; fi
  done
done
median() {
  awk -v k="$1" -v w="$2" '$1 == k && $2 == w {v[n++] = $3}
    END { if (!n) { print "-"; exit }
          for (a = 0; a < n; a++) for (b = a + 1; b < n; b++) if (v[b] < v[a]) { t = v[a]; v[a] = v[b]; v[b] = t }
          x = n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; printf "%.2f", x }' "$results"
}
printf '\ntcp provider, 1 lane, rbridge bench --completion caller; --pin %s; %s repeat(s), medians; %s\n' "$pin" \
  "$repeat" "$("$("$root/dev/find-jdk")/bin/java" -version 2>&1 | head -1)"
printf '%-24s %10s %10s %12s\n' row clear TLS "TLS/clear"
printf '%s\n' "$(printf '%.0s-' $(seq 1 60))"
for k in "${keys[@]}"; do
  c="$(median "$k" clear)"; t="$(median "$k" tls)"
  printf '%-24s %10s %10s %12s\n' "${name_of[$k]}" "$c" "$t" \
    "$(awk -v a="$t" -v b="$c" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }')"
done
printf '\nTLS/clear: latency rows above 1 are slower with TLS, bandwidth rows below 1 are.\n'
