#!/usr/bin/env bash
# The tail of small reads when one memserver of two stalls in bursts, with hedged reads on and off, side by side in
# one run. Run with --help for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
TIME=10
REPEAT=3
SIZE=256M
STOP_MS=50
GAP_MS=200
QD=1
OUT=
CASES=calm,stalls

usage() {
    cat <<EOF
Usage: bench/hedged-reads.sh [--time SEC] [--repeat N] [--size SIZE] [--stop-ms MS] [--gap-ms MS] [--qd N]
                             [--cases calm,stalls] [--out DIR] [--help]

Starts two rbridge memservers (tcp transport) and two bridges in front of both, each serving a volume of
--size with replicas=2: "on" with --hedge-reads on, "off" with --hedge-reads off (the default). Both volumes
are filled first. Then, for each repeat and each bridge in turn (the order rotating between repeats):
  calm    fio (nbd engine, one connection) 4K random reads at QD --qd for --time seconds, nothing stalled
  stalls  the same while memserver 1 is stopped (SIGSTOP to its process group) for --stop-ms every --gap-ms
          (the default 50 ms of every 250 ms: a memserver starved of CPU, or pausing in a long GC)
--cases picks which of the two run (default both). Prints one line per run and a table of medians: IOPS, completion latency p50, p99, p99.9 and max (us),
p99/p50, and the hedges the bridge sent and won during the run (from its metrics).
The goal for "stalls" with hedging on is p99 within 3x of p50; "calm" shows what hedging costs when
nothing stalls. Needs fio (with its nbd engine), nbdinfo and curl.
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --time) TIME=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --stop-ms) STOP_MS=$2; shift 2 ;;
        --gap-ms) GAP_MS=$2; shift 2 ;;
        --qd) QD=$2; shift 2 ;;
        --cases) CASES=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for tool in fio nbdinfo curl python3 setsid; do
    command -v "$tool" >/dev/null || { echo "hedged-reads: $tool is not installed" >&2; exit 2; }
done


STALLER=
bench_before_stop() { # a stalled memserver would not stop on SIGTERM
    local p
    [[ -n $STALLER ]] && kill "$STALLER" 2>/dev/null
    for p in "${BENCH_GROUPS[@]}"; do kill -CONT -- "-$p" 2>/dev/null; done
}
bench_workdir "$OUT" hedged-reads

RB=(env RBRIDGE_NO_BUILD=1 "$ROOT/rbridge")
echo "# rbridge: $("$ROOT/rbridge" --version 2>&1 | tail -n 1)" # builds once when the sources are newer

MS=() MSPG=()
for i in 1 2; do
    port=$(free_port)
    spawn "memserver$i" "${RB[@]}" memserver --listen "127.0.0.1:$port" --capacity 2G --admin none --metrics none
    MS+=("127.0.0.1:$port") MSPG+=("$SPAWNED")
    await 120 "memserver $i" grep -q "lending" "$WORK/memserver$i.log"
done

declare -A URI METRICS
for mode in on off; do
    port=$(free_port) mport=$(free_port)
    spawn "bridge-$mode" "${RB[@]}" serve --listen "127.0.0.1:$port" --memserver "${MS[0]}" --memserver "${MS[1]}" \
        --volume "$mode,size=$SIZE,replicas=2" --hedge-reads "$mode" --admin none --metrics "127.0.0.1:$mport"
    URI[$mode]="nbd://127.0.0.1:$port/$mode"
    METRICS[$mode]="http://127.0.0.1:$mport/metrics"
    await 120 "bridge $mode" nbdinfo --size "${URI[$mode]}"
    fio --name=fill --ioengine=nbd --uri="${URI[$mode]}" --size="$SIZE" --rw=write --bs=1M --iodepth=8 \
        --output="$WORK/fill-$mode.log" >/dev/null
done
echo "# memservers ${MS[*]}; bridges: on ${URI[on]}, off ${URI[off]}; $SIZE each, filled"

hedges() { # hedges MODE -> "sent won delay-us"
    curl -fsS "${METRICS[$1]}" | awk -v v="export=\"$1\"" '
        /^rbridge_volume_read_hedges_total/ && index($0, v) { s = $NF }
        /^rbridge_volume_read_hedges_won_total/ && index($0, v) { w = $NF }
        /^rbridge_volume_read_hedge_delay_seconds/ && index($0, v) { d = $NF * 1e6 }
        END { printf "%d %d %d\n", s, w, d }'
}

stall_loop() { # SIGSTOP memserver 1's process group for STOP_MS every STOP_MS + GAP_MS, until killed
    local pg=${MSPG[0]} gap stop
    gap=$(awk -v g="$GAP_MS" 'BEGIN { printf "%.3f", g / 1000 }')
    stop=$(awk -v s="$STOP_MS" 'BEGIN { printf "%.3f", s / 1000 }')
    trap 'kill -CONT -- "-'"$pg"'" 2>/dev/null; exit 0' TERM
    while :; do
        sleep "$gap"
        kill -STOP -- "-$pg"
        sleep "$stop"
        kill -CONT -- "-$pg"
    done
}

RESULTS="$WORK/results.tsv"
: >"$RESULTS"
run() { # run MODE CASE REPEAT
    local mode=$1 case=$2 rep=$3 before after json="$WORK/$2-$1-$3.json"
    before=$(hedges "$mode")
    if [[ $case == stalls ]]; then
        stall_loop &
        STALLER=$!
    fi
    fio --name="$case" --ioengine=nbd --uri="${URI[$mode]}" --size="$SIZE" --rw=randread --bs=4k --iodepth="$QD" \
        --norandommap --time_based --runtime="$TIME" --percentile_list=50:99:99.9 --output-format=json \
        --output="$json" >/dev/null
    if [[ -n $STALLER ]]; then
        kill -TERM "$STALLER" 2>/dev/null; wait "$STALLER" 2>/dev/null || true
        STALLER=
        kill -CONT -- "-${MSPG[0]}" 2>/dev/null || true
    fi
    after=$(hedges "$mode")
    python3 - "$json" "$mode" "$case" "$rep" "$before" "$after" >>"$RESULTS" <<'EOF'
import json, sys
path, mode, case, rep, before, after = sys.argv[1:]
job = json.load(open(path))["jobs"][0]["read"]
pct = job["clat_ns"]["percentile"]
b, a = [int(x) for x in before.split()], [int(x) for x in after.split()]
print("\t".join(str(x) for x in [mode, case, rep, round(job["iops"]), pct["50.000000"] / 1000,
      pct["99.000000"] / 1000, pct["99.900000"] / 1000, job["clat_ns"]["max"] / 1000, a[0] - b[0], a[1] - b[1],
      a[2]]))
EOF
    tail -n 1 "$RESULTS" | awk -F'\t' '{ printf "%-4s %-6s #%s  %7d IOPS  p50 %8.1f  p99 %8.1f  p99.9 %8.1f  max %9.1f us  hedges %d (won %d), delay %d us\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }'
}

for ((r = 1; r <= REPEAT; r++)); do
    order=(on off)
    (( r % 2 == 0 )) && order=(off on)
    for c in ${CASES//,/ }; do
        for mode in "${order[@]}"; do run "$mode" "$c" "$r"; done
    done
done

echo
echo "# medians of $REPEAT run(s), 4K random read QD$QD, ${TIME}s each; stalls: memserver 1 stopped ${STOP_MS} ms of every $((STOP_MS + GAP_MS)) ms"
python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m, c, _, *v = line.rstrip("\n").split("\t")
    rows.setdefault((m, c), []).append([float(x) for x in v])
print("| hedging | memserver 1 | IOPS | p50 us | p99 us | p99.9 us | max us | p99/p50 | hedges sent (won) |")
print("|---|---|---|---|---|---|---|---|---|")
for c in ("calm", "stalls"):
    for m in ("on", "off"):
        if (m, c) not in rows:
            continue
        med = [statistics.median(col) for col in zip(*rows[(m, c)])]
        print(f"| {m} | {c} | {med[0]:.0f} | {med[1]:.1f} | {med[2]:.1f} | {med[3]:.1f} | {med[4]:.0f} | "
              f"{med[2] / med[1]:.1f}x | {med[5]:.0f} ({med[6]:.0f}) |")
EOF
