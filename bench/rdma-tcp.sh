#!/usr/bin/env bash
# Benchmark of the tcp remote-memory provider: a memserver process and `rbridge bench` as the client, printed next
# to the plain-NIO baseline measured on this machine kind (shared/notes/transports.md). Not a test: numbers only.
#
#   bench/rdma-tcp.sh [--time SEC] [--iters N] [--pin split|none]
#
#   --time SEC   seconds per bandwidth row (default 5)
#   --iters N    timed operations per latency row (default 20000, plus a tenth as warm-up)
#   --pin same   memserver and client both on CPU 0 (default); split: memserver on CPU 0, client on CPU 1;
#                none: let the scheduler place them
#
# Why pin: in this VM kind a wake-up across CPUs costs ~80 us and on the same CPU a few, so unpinned results are
# bimodal (QD1 read p50 9 or 90 us; 4K QD32 read ~1000 or ~3000 MB/s) depending on where the scheduler puts the
# two processes. Run both --pin same and --pin split to see the range.
# Rows: 4K QD1 read/write latency (p50, p99), 4K QD32 and 1M QD1/QD8 read/write bandwidth, and CPU seconds per GB
# moved on each side (client from the bench's own counter, memserver from /proc/PID/stat).
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

work="$(mktemp -d)"; token="bench-$RANDOM"
cleanup() { [ -n "${ms_pid:-}" ] && kill -- -"$ms_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
RBRIDGE_NO_BUILD=0 "$root/rbridge" --version >/dev/null   # build once, outside any measurement

client_cpu=""
place() { # pin the memserver's threads to CPU 0 and choose the client's CPU
  [ "$pin" != none ] && [ "$(nproc)" -ge 2 ] || return 0
  taskset -a -p -c 0 "$java_pid" >/dev/null
  if [ "$pin" = split ]; then client_cpu="taskset -c 1"; else client_cpu="taskset -c 0"; fi
}

setsid "$root/rbridge" memserver --listen 127.0.0.1:0 --admin none --capacity 8G --token "$token" \
  >"$work/ms.out" 2>"$work/ms.log" &
ms_pid=$!
for _ in $(seq 1 300); do grep -q lending "$work/ms.out" 2>/dev/null && break; sleep 0.1; done
addr="$(sed -n 's/.* at \([^ ]*\).*/\1/p' "$work/ms.out")"
[ -n "$addr" ] || { echo "memserver did not start:" >&2; cat "$work/ms.log" >&2; exit 1; }
java_pid="$(pgrep -P "$ms_pid" java || echo "$ms_pid")"

ticks() { awk '{print $14 + $15}' "/proc/$java_pid/stat"; }
hz="$(getconf CLK_TCK)"

bench() { # test size depth -> the result line of rbridge bench
  local extra=(--iters "$iters")
  case "$1" in *-bw) extra=(--time "$time_s") ;; esac
  $client_cpu "$root/rbridge" bench --server "$addr" --token "$token" --test "$1" --size "$2" --tx-depth "$3" \
    "${extra[@]}" | awk 'NR==4'
}

printf '\nplacement: --pin %s\n' "$pin"
printf 'tcp provider (this run) vs plain NIO baseline (shared/notes/transports.md, same machine kind, earlier run)\n'
printf '%-22s %12s %12s %10s %16s\n' row "tcp provider" "NIO base" ratio "CPU s/GB c+s"
printf '%s\n' "-------------------------------------------------------------------------------"
lat_row() { # name test base_p50
  place lat
  local r; r="$(bench "$2" 4K 1)"
  local p50 p99; p50="$(echo "$r" | awk '{print $5}')"; p99="$(echo "$r" | awk '{print $8}')"
  printf '%-22s %12s %12s %10s\n' "$1 p50 us" "$p50" "$3" "$(awk -v a="$3" -v b="$p50" 'BEGIN{printf "%.2f", a/b}')"
  printf '%-22s %12s %12s %10s\n' "$1 p99 us" "$p99" "-" "-"
}
bw_row() { # name test size depth base_mbs
  place bw
  local t0 t1 r; t0="$(ticks)"; r="$(bench "$2" "$3" "$4")"; t1="$(ticks)"
  local mbs ccpu gb scpu
  mbs="$(echo "$r" | awk '{print $4}')"; ccpu="$(echo "$r" | awk '{print $6}')"
  gb="$(echo "$r" | awk -v s="$3" '{n=$2; m=1; if (s ~ /K$/) m=1024; if (s ~ /M$/) m=1048576; print n*m*substr(s,1,length(s)-1)/1e9}')"
  scpu="$(awk -v d="$((t1 - t0))" -v hz="$hz" -v gb="$gb" 'BEGIN{ if (gb>0) printf "%.2f", d/hz/gb; else print "-"}')"
  local ratio="-"; [ "$5" != "-" ] && ratio="$(awk -v a="$mbs" -v b="$5" 'BEGIN{printf "%.2f", a/b}')"
  printf '%-22s %12s %12s %10s %16s\n' "$1 MB/s" "$mbs" "$5" "$ratio" "$ccpu+$scpu"
}
lat_row "4K read QD1" read-lat 6.4
lat_row "4K write QD1" write-lat 6.9
bw_row "4K read QD32" read-bw 4K 32 1354
bw_row "4K write QD32" write-bw 4K 32 1265
bw_row "1M read QD1" read-bw 1M 1 3671
bw_row "1M write QD1" write-bw 1M 1 2943
bw_row "1M read QD8" read-bw 1M 8 -
bw_row "1M write QD8" write-bw 1M 8 -
printf '\nratio > 1: the tcp provider is better (latency: base/ours; bandwidth: ours/base). NIO baseline CPU s/GB:\n'
printf '4K QD1 1.9, 4K QD32 0.7, 1M QD1 0.3-0.4 (both sides). Compare ratios, not absolute numbers, across runs.\n'
