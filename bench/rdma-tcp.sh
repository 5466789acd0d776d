#!/usr/bin/env bash
# Benchmark of the tcp remote-memory provider against the plain-NIO baseline, side by side in one run: a memserver
# process with `rbridge bench` as its client, and bench/baseline/NioBaseline.java (blocking SocketChannels, a platform
# thread per connection on both sides, one request then a blocking read of its reply; QD N = N connections) with the
# same JDK, JVM options and CPU placement. Not a test: numbers only.
#
#   bench/rdma-tcp.sh [--time SEC] [--iters N] [--pin same|split|none] [--repeat N] [--rows LIST] [--lanes N]
#                     [--completion caller|thread|both] [--tcp-congestion NAME]
#
#   --time SEC   seconds per bandwidth row (default 5, after 1 s of unmeasured warm-up)
#   --iters N    timed operations per latency row (default 20000, plus a tenth as warm-up)
#   --pin same   both servers and the client on CPU 0 (default); split: servers on CPU 0, client on CPU 1;
#                none: let the scheduler place them
#   --repeat N   run every row N times, tcp and baseline back to back, alternating which goes first; print medians
#                and in how many of the N repeats tcp beat the baseline (wins)
#   --rows LIST  comma-separated subset of: rl,wl,rb,wb,rb1m,wb1m,rb1m8,wb1m8 (default all)
#   --lanes N    TCP connections per provider connection (rbridge bench --lanes; default what rbridge serve uses:
#                one per two CPUs, at most 4).
#                One operation at a time always takes the first, so QD1 rows do not depend on it; the baseline's
#                QD N is N connections.
#   --completion caller|thread|both
#                who reads replies in the latency rows (rbridge bench --completion): caller, the waiting thread
#                itself, as a synchronous client; thread, the provider's reader thread, as rbridge serve runs
#                (timed until it completes the operation, not until the waiter wakes); both (default) prints a
#                row for each. Bandwidth rows keep operations in flight from completions,
#                where the two are the same.
#   --tcp-congestion NAME
#                congestion control of the tcp provider's sockets, both ends (default: rbridge's, cubic); system
#                runs it under the host's default, as the baseline always runs (the table's header names both).
#
# Why pin: in this VM kind a wake-up across CPUs costs ~80 us and on the same CPU a few, so unpinned results are
# bimodal (QD1 read p50 9 or 90 us; 4K QD32 read ~1000 or ~3000 MB/s) depending on where the scheduler puts the
# two processes. Run both --pin same and --pin split to see the range.
# Rows: 4K QD1 read/write latency (p50, p99: posting to completion), 4K QD32 and 1M QD1/QD8 read/write bandwidth, and
# CPU seconds per GB moved on each side (client from its own counter over the measured window; server from
# /proc/PID/stat over the whole client run, warm-up included, so both server figures are a little high alike).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
time_s=5; iters=20000; pin=same; repeat=1; rows="rl,wl,rb,wb,rb1m,wb1m,rb1m8,wb1m8"; lanes=""; completion=both; cc=cubic
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --pin) pin="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --rows) rows="$2"; shift 2 ;;
    --lanes) lanes="$2"; shift 2 ;;
    --completion) completion="$2"; shift 2 ;;
    --tcp-congestion) cc="$2"; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$lanes" ] || lanes=$(( $(nproc) / 2 < 1 ? 1 : $(nproc) / 2 > 4 ? 4 : $(nproc) / 2 ))
case "$pin" in same|split|none) ;; *) echo "--pin must be same, split or none" >&2; exit 2 ;; esac
case "$completion" in caller|thread|both) ;; *) echo "--completion must be caller, thread or both" >&2; exit 2 ;; esac

work="$(mktemp -d)"; token="bench-$RANDOM"
cleanup() {
  [ -n "${ms_pid:-}" ] && kill -- -"$ms_pid" 2>/dev/null
  [ -n "${nb_pid:-}" ] && kill -- -"$nb_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
RBRIDGE_NO_BUILD=0 "$root/rbridge" --version >/dev/null   # build once, outside any measurement
java_home="$("$root/dev/find-jdk")"
java_opts=(-XX:MaxDirectMemorySize=2g -XX:+UseParallelGC)   # as the rbridge launcher
"$java_home/bin/javac" -d "$work/nb" "$root/bench/baseline/NioBaseline.java"

wait_for() { # file pattern -> waits up to 30 s for the pattern to appear in the file
  for _ in $(seq 1 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

setsid "$root/rbridge" memserver --listen 127.0.0.1:0 --admin none --capacity 8G --token "$token" \
  --tcp-congestion "$cc" >"$work/ms.out" 2>"$work/ms.log" &
ms_pid=$!
setsid "$java_home/bin/java" --enable-native-access=ALL-UNNAMED "${java_opts[@]}" -cp "$work/nb" NioBaseline \
  server 127.0.0.1:0 >"$work/nb.out" 2>"$work/nb.log" &
nb_pid=$!
wait_for "$work/ms.out" lending || { echo "memserver did not start:" >&2; cat "$work/ms.log" >&2; exit 1; }
wait_for "$work/nb.out" listening || { echo "baseline server did not start:" >&2; cat "$work/nb.log" >&2; exit 1; }
ms_addr="$(sed -n 's/.* at \([^ ]*\).*/\1/p' "$work/ms.out")"
nb_addr="$(sed -n 's/^listening on //p' "$work/nb.out")"
ms_java="$(pgrep -P "$ms_pid" java || echo "$ms_pid")"
nb_java="$(pgrep -P "$nb_pid" java || echo "$nb_pid")"

client_cpu=()
place() { # pin both servers' threads to CPU 0 (again: threads started since inherit it anyway) and choose the client's
  [ "$pin" != none ] && [ "$(nproc)" -ge 2 ] || return 0
  taskset -a -p -c 0 "$ms_java" >/dev/null
  taskset -a -p -c 0 "$nb_java" >/dev/null
  if [ "$pin" = split ]; then client_cpu=(taskset -c 1); else client_cpu=(taskset -c 0); fi
}

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"

run_client() { # impl test size depth -> the result line (4th line of output, rbridge bench's format)
  local amount="$iters"; case "$2" in *-bw) amount="$time_s" ;; esac
  if [ "$1" != nio ]; then
    local mode=caller; [ "$1" = tcpt ] && mode=thread
    local extra=(--iters "$amount"); case "$2" in *-bw) extra=(--time "$amount") ;; esac
    "${client_cpu[@]}" "$root/rbridge" bench --server "$ms_addr" --token "$token" --test "$2" --size "$3" \
      --tx-depth "$4" --lanes "$lanes" --completion "$mode" --tcp-congestion "$cc" "${extra[@]}" | awk 'NR==4'
  else
    "${client_cpu[@]}" "$java_home/bin/java" "${java_opts[@]}" -cp "$work/nb" NioBaseline client "$nb_addr" \
      "$2" "$3" "$4" "$amount" | awk 'NR==4'
  fi
}

results="$work/results"; : >"$results"
measure() { # key impl test size depth rep -> appends "key impl metric value rep" lines
  place
  local pid="$ms_java"; [ "$2" = nio ] && pid="$nb_java"
  local t0 t1 r; t0="$(ticks "$pid")"; r="$(run_client "$2" "$3" "$4" "$5")"; t1="$(ticks "$pid")"
  [ -n "$r" ] || { echo "$2 $3 $4 $5: no result" >&2; return 0; }
  case "$3" in
    *-lat) echo "$r" | awk -v k="$1" -v i="$2" -v n="$6" '{print k, i, "p50", $5, n; print k, i, "p99", $8, n}' \
      >>"$results" ;;
    *)
      echo "$r" | awk -v k="$1" -v i="$2" -v s="$4" -v d="$((t1 - t0))" -v hz="$hz" -v n="$6" '{
        m = 1; if (s ~ /K$/) m = 1024; if (s ~ /M$/) m = 1048576
        gb = $2 * m * substr(s, 1, length(s) - 1) / 1e9
        print k, i, "mbs", $4, n; print k, i, "ccpu", $6, n; if (gb > 0) print k, i, "scpu", d / hz / gb, n }' \
        >>"$results" ;;
  esac
}

declare -A test_of=([rl]=read-lat [wl]=write-lat [rb]=read-bw [wb]=write-bw [rb1m]=read-bw [wb1m]=write-bw
  [rb1m8]=read-bw [wb1m8]=write-bw)
declare -A size_of=([rl]=4K [wl]=4K [rb]=4K [wb]=4K [rb1m]=1M [wb1m]=1M [rb1m8]=1M [wb1m8]=1M)
declare -A depth_of=([rl]=1 [wl]=1 [rb]=32 [wb]=32 [rb1m]=1 [wb1m]=1 [rb1m8]=8 [wb1m8]=8)
declare -A name_of=([rl]="4K read QD1" [wl]="4K write QD1" [rb]="4K read QD32" [wb]="4K write QD32"
  [rb1m]="1M read QD1" [wb1m]="1M write QD1" [rb1m8]="1M read QD8" [wb1m8]="1M write QD8")
IFS=, read -r -a keys <<<"$rows"
for k in "${keys[@]}"; do
  [ -n "${test_of[$k]:-}" ] || { echo "unknown row $k (rl,wl,rb,wb,rb1m,wb1m,rb1m8,wb1m8)" >&2; exit 2; }
done

lat_impls=(tcp); [ "$completion" = thread ] && lat_impls=(tcpt); [ "$completion" = both ] && lat_impls=(tcp tcpt)
for rep in $(seq 1 "$repeat"); do
  for k in "${keys[@]}"; do
    order=(tcp nio); case "${test_of[$k]}" in *-lat) order=("${lat_impls[@]}" nio) ;; esac
    [ $((rep % 2)) = 0 ] && order=(nio "${order[@]:0:${#order[@]}-1}")
    for impl in "${order[@]}"; do
      measure "$k" "$impl" "${test_of[$k]}" "${size_of[$k]}" "${depth_of[$k]}" "$rep"
    done
  done
done

median() { # key impl metric -> median over the repeats, or -
  awk -v k="$1" -v i="$2" -v m="$3" '$1 == k && $2 == i && $3 == m {v[n++] = $4}
    END { if (!n) { print "-"; exit }
          for (a = 0; a < n; a++) for (b = a + 1; b < n; b++) if (v[b] < v[a]) { t = v[a]; v[a] = v[b]; v[b] = t }
          x = n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2; printf "%.2f", x }' "$results"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
wins() { # key impl metric lower|higher -> "W/N": of the N repeats where both ran, in how many tcp beat NIO
  awk -v k="$1" -v i="$2" -v m="$3" -v better="$4" '$1 == k && $3 == m && $2 == i {t[$5] = $4}
    $1 == k && $3 == m && $2 == "nio" {n[$5] = $4}
    END { for (x in t) if (x in n) { r++; if (better == "lower" ? t[x] + 0 < n[x] + 0 : t[x] + 0 > n[x] + 0) w++ }
          if (!r) { print "-"; exit }
          printf "%d/%d", w, r }' "$results"
}

printf '\nplacement: --pin %s, %s repeat(s), medians; tcp = tcp provider with %s lane(s) (memserver + rbridge bench),' \
  "$pin" "$repeat" "$lanes"
printf ' NIO = plain-NIO baseline (bench/baseline), same run\n'
host_cc="$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown)"
printf 'TCP congestion control: tcp %s, NIO %s (the host default)\n' "$([ "$cc" = system ] && echo "$host_cc" || echo "$cc")" "$host_cc"
printf '%-28s %10s %10s %7s %7s %18s %18s\n' row "tcp" "NIO" ratio wins "tcp CPU s/GB c+s" "NIO CPU s/GB c+s"
printf '%s\n' "$(printf '%.0s-' $(seq 1 104))"
for k in "${keys[@]}"; do
  case "${test_of[$k]}" in
    *-lat)
      for impl in "${lat_impls[@]}"; do
        for m in p50 p99; do
          t="$(median "$k" "$impl" "$m")"; n="$(median "$k" nio "$m")"
          label="${name_of[$k]} $m us"; [ "$impl" = tcpt ] && label="$label [thread]"
          [ "$impl" = tcp ] && [ "$completion" = both ] && label="$label [caller]"
          printf '%-28s %10s %10s %7s %7s\n' "$label" "$t" "$n" "$(ratio "$n" "$t")" "$(wins "$k" "$impl" "$m" lower)"
        done
      done ;;
    *)
      t="$(median "$k" tcp mbs)"; n="$(median "$k" nio mbs)"
      printf '%-28s %10s %10s %7s %7s %18s %18s\n' "${name_of[$k]} MB/s" "$t" "$n" "$(ratio "$t" "$n")" \
        "$(wins "$k" tcp mbs higher)" \
        "$(median "$k" tcp ccpu)+$(median "$k" tcp scpu)" "$(median "$k" nio ccpu)+$(median "$k" nio scpu)" ;;
  esac
done
printf '\nratio > 1: the tcp provider is better (latency: NIO/tcp; bandwidth: tcp/NIO); wins: in how many repeats tcp beat\n'
printf 'NIO measured in the same repeat (on a noisy VM a median ratio of one row can hide a coin flip). Earlier throwaway-prototype\n'
printf 'figures (the design prototypes of docs/transports.md): 4K QD1 p50 6.4/6.9 us, 4K QD32 1354/1265 MB/s, 1M QD1 3671/2943 MB/s.\n'
