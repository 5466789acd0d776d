#!/usr/bin/env bash
# What forwarding 1 MiB blocks through a middle process costs when it copies them (recv into a buffer, send from it:
# the bridge's tcp path) and when it splices them (splice(2) socket -> pipe -> socket, tee(2) for a second replica),
# measured on the kernel alone with bench/forward-study.c: a client on CPU 1, the forwarder and its back ends (the
# memservers' part) on CPU 0, as fio-bridge.sh places fio and the servers. Not a test: numbers only.
#
#   bench/forward-study.sh [--count N] [--repeat N]
#
#   --count N    1 MiB blocks per run (default 4000)
#   --repeat N   rounds (default 3): every path of a direction once per round, back to back, the order reversed in
#                every other round; prints medians and in how many rounds a path beat chain (wins)
#
# Paths, each for writes (client -> forwarder -> back ends) and reads (back end -> forwarder -> client):
#   chain    the two-hop nbdkit chain's: the forwarder copies, the back end receives into a buffer and memcpys that
#            into its memory (reads: memcpy out, then send); one back end
#   copy     rbridge serve's: the forwarder copies, the back end receives straight into its region (reads: sends from
#            it); R=2 sends each block to two back ends
#   splice   as copy, with the forwarder splicing instead of copying (tee for the second back end)
# Needs cc (gcc) and python3.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
count=4000; repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $count =~ ^[1-9][0-9]*$ ]] || { echo "--count wants a positive whole number, not '$count'" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "--repeat wants a positive whole number, not '$repeat'" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "needs two CPUs: the client on one, the servers on the other" >&2; exit 2; }
command -v cc >/dev/null || { echo "cc not found (apt-get install gcc)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/forward-study.XXXXXX")
trap 'rm -rf "$work"' EXIT
cc -O2 -Wall -o "$work/forward-study" "$here/forward-study.c"

echo "# $count blocks of 1 MiB per run, $repeat round(s); client on CPU 1, forwarder and back ends on CPU 0"
for dir in write read; do
  cases="chain:1 copy:1 splice:1"
  [ $dir = write ] && cases="$cases copy:2 splice:2"
  for ((i = 0; i < repeat; i++)); do
    order=$cases
    ((i % 2 == 1)) && order=$(tr ' ' '\n' <<<"$cases" | tac | tr '\n' ' ')
    for c in $order; do
      echo "$i $("$work/forward-study" "$dir" "${c%:*}" "${c#*:}" "$count")"
    done
  done
done | tee "$work/runs" >&2

python3 - "$work/runs" <<'PY'
import statistics, sys
runs = {}  # (direction, path, "R=n") -> {round: (MB/s, forward s/GB, back s/GB)}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault((f[1], f[2], f[3]), {})[f[0]] = (float(f[5]), float(f[7]), float(f[9]))
def against(rounds, peer):
    """median MB/s of rounds over peer's, and the rounds in which it moved more"""
    ratio = statistics.median(r[0] for r in rounds.values()) / statistics.median(r[0] for r in peer.values())
    wins = sum(1 for k, r in rounds.items() if r[0] > peer[k][0])
    return f"{ratio:.2f} ({wins}/{len(rounds)})"
print("vs chain, vs copy: median MB/s against that path's with as many back ends; (w/N): rounds in which it moved more")
print(f"{'direction':<10}{'path':<8}{'R':<4}{'MB/s':>7}{'vs chain':>14}{'vs copy':>14}{'forward s/GB':>15}{'back s/GB':>12}")
for key, rounds in runs.items():
    med = lambda i: statistics.median(r[i] for r in rounds.values())
    chain = against(rounds, runs[(key[0], "chain", "R=1")]) if key[1] != "chain" else ""
    copy = against(rounds, runs[(key[0], "copy", key[2])]) if key[1] == "splice" else ""
    print(f"{key[0]:<10}{key[1]:<8}{key[2][2:]:<4}{med(0):>7.0f}{chain:>14}{copy:>14}{med(1):>15.3f}{med(2):>12.3f}")
PY
