#!/usr/bin/env bash
# Benchmark rbridge against nbdkit's memory plugin with fio's nbd engine.
# Run with --help for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
TIME=10
RAMP=2
REPEAT=1
SIZE=1G
ROWS=rr1,rw1,rr32,rw32,sr,sw
OUT=
TLS=
LAT=clat
PIN=split
SERVER_CPUS=
FIO_CPUS=
START_TIMEOUT=${RBRIDGE_START_TIMEOUT:-600}

usage() {
    cat <<EOF
Usage: bench/fio-vs-nbdkit.sh [--time SEC] [--ramp SEC] [--repeat N] [--size SIZE]
                              [--rows LIST] [--latency clat|lat] [--pin split|none]
                              [--server-cpus LIST] [--fio-cpus LIST] [--tls DIR] [--out DIR] [--help]

Starts two NBD servers on free 127.0.0.1 ports, each exporting "disk" (1 GiB,
in memory):
  rbridge : "\$ROOT/rbridge" demo --listen 127.0.0.1:PORT --export disk --size 1G
            (the launcher builds on first run; we wait up to
            \$RBRIDGE_START_TIMEOUT = $START_TIMEOUT s for it to accept connections)
  nbdkit  : nbdkit memory 1G
then drives both with fio's libnbd engine (ioengine=nbd, one job, one
connection) and prints a table.  Both exports are first filled with a
sequential 1M write so reads hit written data.  Rows are run interleaved
(rbridge, nbdkit, then nbdkit, rbridge, ...) so drift on a noisy machine
hits both sides alike; with --repeat N each number is the median of N runs.

Rows (--rows, comma separated, default all):
  rr1   4K random read,  QD1   -> IOPS, p50 and p99 completion latency (us)
  rw1   4K random write, QD1   -> IOPS, p50 and p99 completion latency (us)
  rr32  4K random read,  QD32  -> IOPS
  rw32  4K random write, QD32  -> IOPS
  sr    1M sequential read,  QD8 -> MB/s (10^6 bytes/s)
  sw    1M sequential write, QD8 -> MB/s
Random rows use the whole --size working set (default 1G) with norandommap.

Options:
  --time SEC    measured time per run (default $TIME)
  --ramp SEC    unmeasured warm-up per run (default $RAMP)
  --repeat N    runs per server per row, median reported (default $REPEAT)
  --size SIZE   fio working set, <= export size (default $SIZE)
  --rows LIST   subset of rows, e.g. rr1,sw
  --latency K   clat (default): fio's completion latency, from submission
                (request handed to libnbd) to reply; lat: total latency,
                which adds the submission time (mostly the client's send)
  --pin MODE    split (default when >= 2 CPUs): once a server accepts
                connections, all its threads are bound to --server-cpus
                (default: the first half of the CPUs, i.e. CPU 0 on a 2-core
                machine) and fio runs on --fio-cpus (default: the other half).
                Unpinned QD1 results swing 2-3x run to run on a small VM
                depending on whether the scheduler puts fio and the server
                on the same core; pinning makes rows repeatable.  none: no
                pinning.
  --server-cpus LIST, --fio-cpus LIST   taskset CPU lists for --pin split
  --tls DIR     both servers require TLS with the X.509 files in DIR (server-cert.pem,
                server-key.pem, ca-cert.pem: the layout both read): rbridge with
                --tls require --tls-certificates DIR, nbdkit with --tls=require
                --tls-certificates=DIR.  fio connects to nbds:// URIs with
                tls-verify-peer=false (its nbd engine refuses URIs naming local
                files, so it cannot be given the CA); the traffic is encrypted
                all the same, on both sides alike.
  --out DIR     keep fio JSON and server logs in DIR (default: temp, deleted)

Reading the table: "ratio" is always oriented so that > 1 means rbridge is
better: rbridge/nbdkit for IOPS and MB/s, nbdkit/rbridge for latencies.

Environment:
  RBRIDGE_CMD            shell command that starts the server under test
                         instead of the launcher; \$PORT is exported to it and it
                         must serve export "disk" of >= --size on
                         127.0.0.1:\$PORT, in the foreground.  Example (nbdkit on
                         both sides, to test the harness):
                         RBRIDGE_CMD='nbdkit -f -i 127.0.0.1 -p \$PORT -e disk memory 1G'
  RBRIDGE_START_TIMEOUT  seconds to wait for it to accept connections (600)
Both servers are stopped on exit (their process groups are killed).
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --time) TIME=$2; shift 2 ;;
        --ramp) RAMP=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --rows) ROWS=$2; shift 2 ;;
        --latency) LAT=$2; shift 2 ;;
        --pin) PIN=$2; shift 2 ;;
        --server-cpus) SERVER_CPUS=$2; shift 2 ;;
        --fio-cpus) FIO_CPUS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --tls) TLS=$(cd "$2" && pwd); shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $TIME =~ ^[0-9]+$ && $TIME -ge 1 ]] || { echo "--time must be a positive integer" >&2; exit 2; }
[[ $RAMP =~ ^[0-9]+$ ]] || { echo "--ramp must be an integer" >&2; exit 2; }
[[ $REPEAT =~ ^[0-9]+$ && $REPEAT -ge 1 ]] || { echo "--repeat must be >= 1" >&2; exit 2; }
[[ $LAT == clat || $LAT == lat ]] || { echo "--latency must be clat or lat" >&2; exit 2; }
[[ $PIN == split || $PIN == none ]] || { echo "--pin must be split or none" >&2; exit 2; }
bench_split_cpus
bench_require fio nbdkit nbdinfo python3 setsid timeout

bench_rows "$ROWS"


declare -A PID URI
bench_workdir "$OUT" fio-vs-nbdkit

start_server() { # start_server NAME COMMAND TIMEOUT
    local name=$1 cmd=$2 tmo=$3 port
    port=$(free_port)
    PORT=$port spawn "$name" bash -c "exec $cmd"
    PID[$name]=$SPAWNED
    URI[$name]="nbd://127.0.0.1:$port/disk"
    local probe=${URI[$name]}
    if [[ -n $TLS ]]; then
        URI[$name]="nbds://127.0.0.1:$port/disk?tls-verify-peer=false"
        probe="nbds://127.0.0.1:$port/disk?tls-certificates=$TLS"
    fi
    local t0=$SECONDS
    await_nbd "$name" "$probe" "${PID[$name]}" "$tmo"
    echo "# $name ready at ${URI[$name]} after $((SECONDS - t0))s, export size $(cat "$WORK/$name.size")"
    if [[ $PIN == split ]]; then
        local p
        for p in $(pgrep -g "${PID[$name]}"); do
            taskset -a -p -c "$SERVER_CPUS" "$p" >/dev/null 2>&1 || true
        done
        echo "#   $name threads bound to CPU(s) $SERVER_CPUS"
    fi
}
FIO_PREFIX=()
if [[ $PIN == split ]]; then FIO_PREFIX=(taskset -c "$FIO_CPUS"); fi

export PORT
RB_TLS=
NK_TLS=
if [[ -n $TLS ]]; then
    RB_TLS=" --tls require --tls-certificates \"$TLS\""
    NK_TLS=" --tls=require --tls-certificates=\"$TLS\""
fi
RB_CMD=${RBRIDGE_CMD:-"\"$ROOT/rbridge\" demo --listen 127.0.0.1:\$PORT --export disk --size 1G$RB_TLS"}
echo "# rbridge command: $RB_CMD"
start_server rbridge "$RB_CMD" "$START_TIMEOUT"
start_server nbdkit "nbdkit -f --exit-with-parent -i 127.0.0.1 -p \$PORT -e disk$NK_TLS memory 1G" 60

runfio() { # runfio SERVER TAG fio-args... -> JSON in $WORK/TAG.SERVER.json
    local server=$1 tag=$2; shift 2
    local out="$WORK/$tag.$server.json"
    if ! timeout $((TIME + RAMP + 120)) "${FIO_PREFIX[@]}" fio --name="$tag" --ioengine=nbd --uri="${URI[$server]}" \
            --size="$SIZE" --numjobs=1 --group_reporting --percentile_list=50:99 --lat_percentiles=1 \
            --output-format=json --output="$out" "$@" >"$WORK/fio.$tag.$server.log" 2>&1; then
        echo "fio failed for $tag on $server:" >&2
        tail -n 5 "$WORK/fio.$tag.$server.log" "$out" >&2 2>/dev/null
        exit 1
    fi
}

echo "# prefilling both exports ($SIZE, 1M sequential writes)"
for s in rbridge nbdkit; do
    runfio "$s" prefill --rw=write --bs=1M --iodepth=8
done


echo "# rows: $ROWS; ${TIME}s measured + ${RAMP}s ramp per run; $REPEAT run(s) per server per row;" \
     "pin: $PIN${FIO_CPUS:+ (fio on CPU(s) $FIO_CPUS)}"
for r in "${ROWLIST[@]}"; do
    for i in $(seq "$REPEAT"); do
        if (( i % 2 )); then order="rbridge nbdkit"; else order="nbdkit rbridge"; fi
        for s in $order; do
            # shellcheck disable=SC2086
            runfio "$s" "$r.$i" ${ROWARGS[$r]} --time_based --runtime="$TIME" --ramp_time="$RAMP"
            echo "#   done $r run $i on $s"
        done
    done
done

PYTHONPATH="$ROOT/bench" PYTHONDONTWRITEBYTECODE=1 python3 - "$WORK" "$REPEAT" "$ROWS" "$TIME" "$LAT" <<'EOF'
import statistics, sys
import fio_results
work, repeat, rows, secs, lat = (sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","),
                                 sys.argv[4], sys.argv[5])

def load(tag, server):
    return fio_results.load(work, tag, server)

def metric(job, side, what):
    return fio_results.metric(job, side, what, lat)

DEF = fio_results.ROWS
UNIT = fio_results.units(lat)
out = []
for r in rows:
    label, side, metrics = DEF[r]
    for m in metrics:
        vals = {}
        for s in ("rbridge", "nbdkit"):
            vals[s] = statistics.median(metric(load("%s.%d" % (r, i), s), side, m)
                                        for i in range(1, repeat + 1))
        rb, nk = vals["rbridge"], vals["nbdkit"]
        if m in ("p50", "p99"):
            ratio = nk / rb if rb else float("nan")
        else:
            ratio = rb / nk if nk else float("nan")
        out.append(("%s %s" % (label, UNIT[m]), rb, nk, ratio))

w = max(len(o[0]) for o in out)
print()
print("fio nbd engine, %ss per run, median of %d run(s); ratio > 1 means rbridge is better" % (secs, repeat))
print("(ratio = rbridge/nbdkit for IOPS and MB/s, nbdkit/rbridge for latency)")
print("%-*s %12s %12s %8s" % (w, "row", "rbridge", "nbdkit", "ratio"))
print("-" * (w + 35))
for name, rb, nk, ratio in out:
    fmt = "%12.0f" if "IOPS" in name else "%12.1f"
    print(("%-*s " + fmt + " " + fmt + " %8.2f") % (w, name, rb, nk, ratio))
EOF
[[ $KEEP -eq 1 ]] && echo "# fio JSON and server logs kept in $WORK"
exit 0
