#!/usr/bin/env bash
# Benchmark of the ucx remote-memory provider next to the tcp provider, one run, one table: a memserver process per
# transport and `rbridge bench` as the client, each row measured for tcp and then ucx, back to back. Not a test.
#
#   bench/rdma-ucx.sh [--time SEC] [--iters N] [--pin same|split|none]
#
#   --time SEC   seconds per bandwidth row (default 5)
#   --iters N    timed operations per latency row (default 20000, plus a tenth as warm-up)
#   --pin same   memserver and client both on CPU 0 (default); split: memserver on CPU 0, client on CPU 1;
#                none: let the scheduler place them (see bench/rdma-tcp.sh for why pinning matters here)
#
# UCX_TLS defaults to tcp (set it to rc_verbs,ud_verbs and friends on an RDMA host; see README "--transport ucx"):
# on a host without an RDMA device UCX emulates GET/PUT with active messages over TCP, so expect ucx to be slower
# than the pure-Java tcp provider there. The UCX lanes line says which transport UCX really used.
# Rows: 4K QD1 read/write latency (p50, p99), 4K QD32 and 1M QD1/QD8 read/write bandwidth, CPU seconds per GB moved
# (client from the bench's own counter + memserver from /proc/PID/stat).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
time_s=5; iters=20000; pin=same
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --pin) pin="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
export UCX_TLS="${UCX_TLS:-tcp}"
export UCX_ERROR_SIGNALS="${UCX_ERROR_SIGNALS-}"

work="$(mktemp -d)"; token="bench-$RANDOM"
declare -A addr java_pid
pids=()
cleanup() { for p in "${pids[@]}"; do kill -- -"$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
RBRIDGE_NO_BUILD=0 "$root/rbridge" --version >/dev/null   # build once, outside any measurement
export RBRIDGE_NO_BUILD=1

for t in tcp ucx; do
  setsid "$root/rbridge" memserver --transport "$t" --listen 127.0.0.1:0 --admin none --capacity 8G \
    --token "$token" >"$work/$t.out" 2>"$work/$t.log" &
  pids+=($!)
  for _ in $(seq 1 300); do grep -q lending "$work/$t.out" 2>/dev/null && break; sleep 0.1; done
  addr[$t]="$(sed -n 's/.* at \([^ ]*\).*/\1/p' "$work/$t.out")"
  [ -n "${addr[$t]}" ] || { echo "$t memserver did not start:" >&2; cat "$work/$t.log" >&2; exit 1; }
  java_pid[$t]="$(pgrep -P "${pids[-1]}" java || echo "${pids[-1]}")"
done

client_cpu=""
place() { # transport: pin that memserver to CPU 0 and choose the client's CPU
  [ "$pin" != none ] && [ "$(nproc)" -ge 2 ] || return 0
  taskset -a -p -c 0 "${java_pid[$1]}" >/dev/null
  if [ "$pin" = split ]; then client_cpu="taskset -c 1"; else client_cpu="taskset -c 0"; fi
}
ticks() { awk '{print $14 + $15}' "/proc/${java_pid[$1]}/stat"; }
hz="$(getconf CLK_TCK)"

bench() { # transport test size depth -> the result line of rbridge bench (lanes saved aside)
  local extra=(--iters "$iters")
  case "$2" in *-bw) extra=(--time "$time_s") ;; esac
  $client_cpu "$root/rbridge" bench --transport "$1" --server "${addr[$1]}" --token "$token" --test "$2" \
    --size "$3" --tx-depth "$4" "${extra[@]}" >"$work/last" 2>"$work/last.err" \
    || { cat "$work/last" "$work/last.err" >&2; exit 1; }
  grep '^UCX lanes:' "$work/last" >"$work/lanes.$1" 2>/dev/null || true
  awk '$1 ~ /^[0-9]+$/ {print; exit}' "$work/last"
}

lat() { # transport test -> "p50 p99"
  place "$1"; bench "$1" "$2" 4K 1 | awk '{print $5, $8}'
}
bw() { # transport test size depth -> "MB/s cpu_client+cpu_server"
  place "$1"
  local t0 t1 r; t0="$(ticks "$1")"; r="$(bench "$1" "$2" "$3" "$4")"; t1="$(ticks "$1")"
  local mbs ccpu gb scpu
  mbs="$(echo "$r" | awk '{print $4}')"; ccpu="$(echo "$r" | awk '{print $6}')"
  gb="$(echo "$r" | awk -v s="$3" '{m=1; if (s ~ /K$/) m=1024; if (s ~ /M$/) m=1048576; print $2*m*substr(s,1,length(s)-1)/1e9}')"
  scpu="$(awk -v d="$((t1 - t0))" -v hz="$hz" -v gb="$gb" 'BEGIN{ if (gb>0) printf "%.2f", d/hz/gb; else print "-"}')"
  echo "$mbs $ccpu+$scpu"
}

row_fmt='%-18s %10s %10s %9s %14s %14s\n'
printf '\nplacement: --pin %s, UCX_TLS=%s\n' "$pin" "$UCX_TLS"
printf "$row_fmt" row tcp ucx ucx/tcp "tcp CPU s/GB" "ucx CPU s/GB"
printf '%s\n' "-------------------------------------------------------------------------------"
lat_row() { # name test
  local a b; a=($(lat tcp "$2")); b=($(lat ucx "$2"))
  printf "$row_fmt" "$1 p50 us" "${a[0]}" "${b[0]}" "$(awk -v x="${b[0]}" -v y="${a[0]}" 'BEGIN{printf "%.2f", x/y}')" "" ""
  printf "$row_fmt" "$1 p99 us" "${a[1]}" "${b[1]}" "$(awk -v x="${b[1]}" -v y="${a[1]}" 'BEGIN{printf "%.2f", x/y}')" "" ""
}
bw_row() { # name test size depth
  local a b; a=($(bw tcp "$2" "$3" "$4")); b=($(bw ucx "$2" "$3" "$4"))
  printf "$row_fmt" "$1 MB/s" "${a[0]}" "${b[0]}" "$(awk -v x="${b[0]}" -v y="${a[0]}" 'BEGIN{printf "%.2f", x/y}')" \
    "${a[1]}" "${b[1]}"
}
lat_row "4K read QD1" read-lat
lat_row "4K write QD1" write-lat
bw_row "4K read QD32" read-bw 4K 32
bw_row "4K write QD32" write-bw 4K 32
bw_row "1M read QD1" read-bw 1M 1
bw_row "1M write QD1" write-bw 1M 1
bw_row "1M read QD8" read-bw 1M 8
bw_row "1M write QD8" write-bw 1M 8
printf '\n%s\n' "$(cat "$work/lanes.ucx" 2>/dev/null || echo 'UCX lanes: not reported')"
printf 'ucx/tcp: latency > 1 means ucx is slower; bandwidth < 1 means ucx is slower. CPU s/GB is client+memserver.\n'
if [ "$UCX_TLS" = tcp ]; then
  printf 'With UCX_TLS=tcp, UCX emulates GET/PUT with active messages over TCP and the memserver'"'"'s progress thread\n'
  printf 'serves every one: this measures UCX'"'"'s tcp transport, not RDMA. Run with an RDMA UCX_TLS on an RDMA host.\n'
fi
