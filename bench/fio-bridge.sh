#!/usr/bin/env bash
# Benchmark the real rbridge deployment (rbridge serve + memserver processes over tcp) against rbridge demo and
# against the comparable two-hop peer (nbdkit's nbd plugin in front of nbdkit memory) with fio's nbd engine.
# Run with --help for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
TIME=10
RAMP=2
WARMUP=2
REPEAT=1
SIZE=1G
ROWS=rr1,rw1,rr32,rw32,sr,sw
TARGETS=rb1,rb2,demo,nbdkit
OUT=
LAT=clat
PIN=split
SERVER_CPUS=
FIO_CPUS=
SLAB=
BASELINE=
GUARD=
START_TIMEOUT=${RBRIDGE_START_TIMEOUT:-600}

usage() {
    cat <<EOF
Usage: bench/fio-bridge.sh [--time SEC] [--ramp SEC] [--repeat N] [--size SIZE] [--rows LIST]
                           [--targets LIST] [--slab SIZE] [--latency clat|lat] [--pin split|none]
                           [--server-cpus LIST] [--fio-cpus LIST] [--baseline DIR [--guard PCT]]
                           [--out DIR] [--help]

Starts four NBD targets on free 127.0.0.1 ports, each exporting "disk" (1 GiB, in RAM), all at once:
  rb1     rbridge serve --volume disk,size=1G,replicas=1 in front of ONE rbridge memserver (tcp transport):
          every request crosses two processes, like the deployment
  rb1l1   (not in the default list) rb1 with --lanes 1: one TCP connection to the memserver instead of serve's
          default four, to see what the lanes do
  rb1nm   (not in the default list) rb1 with --metrics none on the bridge and its memserver: with
          --targets rb1,rb1nm the table gains an "on/off" column, the hot-path cost of metrics
  rb2     rbridge serve --volume disk,size=1G,replicas=2 in front of TWO memservers: reads go to one
          replica, writes to both
  demo    rbridge demo --export disk --size 1G: memserver and bridge in one process (local transport)
  nbdkit  the two-hop peer: nbdkit's nbd plugin (nbdkit nbd hostname=127.0.0.1 port=P2) in front of
          nbdkit memory 1G on P2, over TCP
  nkmem   (not in the default list) nbdkit memory 1G alone, default threads: the one-process peer of demo
  nkmem1  (not in the default list) nbdkit --threads=1 memory 1G
rbridge runs through the launcher "\$ROOT/rbridge" (built once up front, then RBRIDGE_NO_BUILD=1 so every
process runs the same jar). Every export is filled first (sequential 1M writes over --size) so reads hit
written data and slabs have memory. Then each row runs on every target in turn, the order rotating
between repeats so drift on a noisy machine hits all alike; with --repeat N each number is the median.

Rows (--rows, comma separated, default all):
  rr1   4K random read,  QD1   -> IOPS, p50 and p99 completion latency (us)
  rw1   4K random write, QD1   -> IOPS, p50 and p99 completion latency (us)
  rr32  4K random read,  QD32  -> IOPS
  rw32  4K random write, QD32  -> IOPS
  sr    1M sequential read,  QD8 -> MB/s (10^6 bytes/s)
  sw    1M sequential write, QD8 -> MB/s
  cin   (not in the default list) nbdcopy of a --size file of random bytes into the export -> MB/s
  cout  (not in the default list) nbdcopy of --size of the export to null: -> MB/s
One fio job, one NBD connection (ioengine=nbd). Random rows use the whole --size working set with
norandommap. nbdcopy rows use nbdcopy's defaults (four connections, its own request sizes and depth),
pinned like fio.
After the table, a second one gives CPU seconds per GB moved for each row and target, from the user and system
time (/proc/PID/stat) of the target's server processes around each run: the process serving NBD (bridge, demo,
the front nbdkit) and its back ends (memservers, nbdkit memory) apart, medians over repeats. fio rows count the
ramp's bytes at the measured rate, since the CPU counters include it.

Options:
  --time SEC       measured time per run (default $TIME)
  --ramp SEC       unmeasured warm-up per run (default $RAMP)
  --warmup SEC     before the first measured run, every row runs once on every target, unmeasured, for SEC
                   seconds (nbdcopy rows: one whole copy), so each server has run every path it will be timed
                   on; the JVM's compilers are otherwise still at work in the first rows (default $WARMUP; 0: none)
  --repeat N       runs per target per row, median reported (default $REPEAT)
  --size SIZE      fio working set, <= 1G (default $SIZE)
  --rows LIST      subset of rows, e.g. rr1,sw
  --targets LIST   subset of targets (default $TARGETS); ratios need nbdkit
  --slab SIZE      slab size of the serve volumes (default: serve's default)
  --latency K      clat (default): fio's completion latency; lat: total latency
  --pin MODE       split (default when >= 2 CPUs): once a target serves, all threads of all its
                   processes (bridge and memservers; both nbdkits) are bound to --server-cpus (default
                   the first half of the CPUs: CPU 0 on a 2-core machine) and fio runs on --fio-cpus
                   (default the other half), as in bench/fio-vs-nbdkit.sh. none: no pinning.
  --server-cpus LIST, --fio-cpus LIST   taskset CPU lists for --pin split
  --baseline DIR   another rbridge checkout (built, e.g. a git worktree of an older commit): targets
                   base-rb1, base-rb2 and base-demo run its launcher, so a change is measured against the code
                   before it in the same run; the table gains a "new/base" column per pair (> 1: new is better)
  --guard PCT      with --baseline: the regression guard. After the tables, every row where a target is more
                   than PCT percent worse than its base (X/base below 1 - PCT/100) is listed, and the script
                   exits with status 3 when there is one (0 otherwise). Noise on a shared 2-core machine can
                   reach 10 %: use --repeat 3 or more, and rerun a row before believing it
  --out DIR        keep fio JSON and server logs in DIR (default: temp, deleted)

Reading the table: each ratio column compares one rbridge target with its peer and is oriented so that
> 1 means rbridge is better: rbridge/peer for IOPS and MB/s, peer/rbridge for latencies. The peer of
rb1, rb2 (and their variants) is nbdkit (two hops); the peer of demo is nkmem when it runs, else nbdkit.
With --repeat N each ratio is followed by its win count: in how many of the N interleaved runs rbridge
did better than its peer in the same round.

Environment: RBRIDGE_START_TIMEOUT (seconds to wait for a target, $START_TIMEOUT), RBRIDGE_JAVA_OPTS
(extra JVM options, read by the launcher). Every process is stopped on exit (process groups killed).
Needs fio (with the nbd engine), nbdkit (memory and nbd plugins), nbdinfo, python3, taskset, setsid.
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --time) TIME=$2; shift 2 ;;
        --ramp) RAMP=$2; shift 2 ;;
        --warmup) WARMUP=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --size) SIZE=$2; shift 2 ;;
        --rows) ROWS=$2; shift 2 ;;
        --targets) TARGETS=$2; shift 2 ;;
        --slab) SLAB=$2; shift 2 ;;
        --latency) LAT=$2; shift 2 ;;
        --pin) PIN=$2; shift 2 ;;
        --server-cpus) SERVER_CPUS=$2; shift 2 ;;
        --fio-cpus) FIO_CPUS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --baseline) BASELINE=$2; shift 2 ;;
        --guard) GUARD=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $TIME =~ ^[0-9]+$ && $TIME -ge 1 ]] || { echo "--time must be a positive integer" >&2; exit 2; }
[[ $RAMP =~ ^[0-9]+$ ]] || { echo "--ramp must be an integer" >&2; exit 2; }
[[ $WARMUP =~ ^[0-9]+$ ]] || { echo "--warmup must be an integer" >&2; exit 2; }
[[ $REPEAT =~ ^[0-9]+$ && $REPEAT -ge 1 ]] || { echo "--repeat must be >= 1" >&2; exit 2; }
[[ $LAT == clat || $LAT == lat ]] || { echo "--latency must be clat or lat" >&2; exit 2; }
[[ $PIN == split || $PIN == none ]] || { echo "--pin must be split or none" >&2; exit 2; }
if [[ -n $GUARD ]]; then
    [[ $GUARD =~ ^[0-9]+$ && $GUARD -ge 1 && $GUARD -le 99 ]] \
        || { echo "--guard must be a whole percentage from 1 to 99" >&2; exit 2; }
    [[ -n $BASELINE && $TARGETS == *base-* ]] \
        || { echo "--guard compares with the baseline: give --baseline DIR and base-* targets" >&2; exit 2; }
fi
bench_split_cpus
bench_require fio nbdkit nbdinfo python3 setsid timeout pgrep

ROWARGS[cin]=copy
ROWARGS[cout]=copy
bench_rows "$ROWS"
IFS=, read -r -a TLIST <<<"$TARGETS"
for t in "${TLIST[@]}"; do
    case $t in
        rb1|rb1nm|rb1l1|rb2|demo|nbdkit|nkmem|nkmem1) ;;
        base-rb1|base-rb2|base-demo)
            [[ -n $BASELINE && -x $BASELINE/rbridge ]] \
                || { echo "target '$t' needs --baseline DIR with an rbridge launcher in DIR" >&2; exit 2; } ;;
        *) echo "unknown target '$t' (rb1, rb1nm, rb1l1, rb2, demo, nbdkit, nkmem, nkmem1, base-rb1, base-rb2," \
                "base-demo)" >&2
           exit 2 ;;
    esac
done
[[ -n $SLAB ]] && SLABSPEC=",slab=$SLAB" || SLABSPEC=


bench_workdir "$OUT" fio-bridge
declare -A URI FRONTG BACKG
CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { # cpu_ticks PGID... -> user+system clock ticks of every process in those groups
    local g p t=0 v
    for g in "$@"; do
        for p in $(pgrep -g "$g"); do
            v=$(awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$p/stat" \
                2>/dev/null) || continue
            t=$((t + ${v:-0}))
        done
    done
    echo "$t"
}
cpu_mark() { # cpu_mark TARGET -> "front back" ticks now
    # shellcheck disable=SC2086
    echo "$(cpu_ticks "${FRONTG[$1]}") $(cpu_ticks ${BACKG[$1]})"
}
pin_group() { # bind every thread of every process in group $1 to the server CPUs
    [[ $PIN == split ]] || return 0
    local p
    for p in $(pgrep -g "$1"); do
        taskset -a -p -c "$SERVER_CPUS" "$p" >/dev/null 2>&1 || true
    done
}

RB=("$ROOT/rbridge")
[[ -n $BASELINE ]] && RB_BASE=("$(cd "$BASELINE" && pwd)/rbridge") || RB_BASE=()
LAUNCHER=("${RB[@]}")   # the rbridge of the target being started
start_memserver() { # start_memserver NAME METRICS -> MEMSERVER=host:port, MEMSERVER_PGID
    local name=$1 metrics=$2 t0=$SECONDS addr=
    spawn "$name" env RBRIDGE_NO_BUILD=1 "${LAUNCHER[@]}" memserver --listen 127.0.0.1:0 --capacity 2G --admin none \
        --metrics "$metrics"
    MEMSERVER_PGID=$SPAWNED
    until addr=$(sed -n 's/^rbridge memserver: lending .* at \([^ ]*:[0-9]*\).*/\1/p' "$WORK/$name.log") && [[ -n $addr ]]; do
        if ! kill -0 "$MEMSERVER_PGID" 2>/dev/null; then
            echo "$name exited before serving; last log lines:" >&2
            tail -n 20 "$WORK/$name.log" >&2
            exit 1
        fi
        (( SECONDS - t0 <= 60 )) || { echo "$name did not start within 60s" >&2; exit 1; }
        sleep 0.2
    done
    MEMSERVER=$addr
}

start_target() { # start_target NAME
    local name=$1 port pgids=() t0=$SECONDS
    port=$(free_port)
    URI[$name]="nbd://127.0.0.1:$port/disk"
    LAUNCHER=("${RB[@]}")
    [[ $name == base-* ]] && LAUNCHER=("${RB_BASE[@]}")
    case ${name#base-} in
        rb1|rb1nm|rb1l1|rb2)
            # Metrics on a free port each (several targets run at once), or off for rb1nm; rb1l1: one tcp lane.
            local n=${name#base-} ms=() i metrics=127.0.0.1:0 lanes=()
            n=${n#rb}
            [[ $name == rb1nm ]] && { n=1; metrics=none; }
            [[ $name == rb1l1 ]] && { n=1; lanes=(--lanes 1); }
            for ((i = 1; i <= n; i++)); do
                start_memserver "$name-memserver$i" "$metrics"
                ms+=(--memserver "$MEMSERVER")
                pgids+=("$MEMSERVER_PGID")
            done
            spawn "$name" env RBRIDGE_NO_BUILD=1 "${LAUNCHER[@]}" serve --listen "127.0.0.1:$port" "${ms[@]}" \
                --volume "disk,size=1G,replicas=$n$SLABSPEC" --admin none --metrics "$metrics" "${lanes[@]}"
            pgids+=("$SPAWNED")
            ;;
        demo)
            spawn "$name" env RBRIDGE_NO_BUILD=1 "${LAUNCHER[@]}" demo --listen "127.0.0.1:$port" --export disk --size 1G \
                --metrics 127.0.0.1:0
            pgids+=("$SPAWNED")
            ;;
        nbdkit)
            local back
            back=$(free_port)
            spawn nbdkit-memory nbdkit -f -i 127.0.0.1 -p "$back" memory 1G
            pgids+=("$SPAWNED")
            await_nbd nbdkit-memory "nbd://127.0.0.1:$back/" "$SPAWNED" 60
            spawn "$name" nbdkit -f -i 127.0.0.1 -p "$port" -e disk nbd hostname=127.0.0.1 port="$back"
            pgids+=("$SPAWNED")
            ;;
        nkmem|nkmem1)
            local threads=()
            [[ $name == nkmem1 ]] && threads=(--threads=1)
            spawn "$name" nbdkit -f -i 127.0.0.1 -p "$port" -e disk "${threads[@]}" memory 1G
            pgids+=("$SPAWNED")
            ;;
    esac
    await_nbd "$name" "${URI[$name]}" "$SPAWNED" "$START_TIMEOUT"
    local g
    for g in "${pgids[@]}"; do pin_group "$g"; done
    FRONTG[$name]=${pgids[-1]}   # what serves NBD (bridge, demo, nbdkit); the groups before it are its back ends
    BACKG[$name]="${pgids[*]:0:${#pgids[@]}-1}"
    echo "# $name ready at ${URI[$name]} after $((SECONDS - t0))s, export size $(cat "$WORK/$name.size")" \
         "(${#pgids[@]} process group(s)${FIO_CPUS:+, bound to CPU(s) $SERVER_CPUS})"
}

FIO_PREFIX=()
if [[ $PIN == split ]]; then FIO_PREFIX=(taskset -c "$FIO_CPUS"); fi

runfio() { # runfio TARGET TAG fio-args... -> JSON in $WORK/TAG.TARGET.json
    local target=$1 tag=$2; shift 2
    local out="$WORK/$tag.$target.json" before
    before=$(cpu_mark "$target")
    if ! timeout $((TIME + RAMP + 300)) "${FIO_PREFIX[@]}" fio --name="$tag" --ioengine=nbd --uri="${URI[$target]}" \
            --size="$SIZE" --numjobs=1 --group_reporting --percentile_list=50:99 --lat_percentiles=1 \
            --output-format=json --output="$out" "$@" >"$WORK/fio.$tag.$target.log" 2>&1; then
        echo "fio failed for $tag on $target:" >&2
        tail -n 5 "$WORK/fio.$tag.$target.log" "$out" >&2 2>/dev/null
        exit 1
    fi
    echo "$before $(cpu_mark "$target")" >"$WORK/$tag.$target.cpu"
}

runcopy() { # runcopy TARGET TAG cin|cout -> seconds in $WORK/TAG.TARGET.copy
    local target=$1 tag=$2 dir=$3 t0 t1 from to
    if [[ $dir == cin ]]; then from=$WORK/copy.src; to=${URI[$target]}; else from=${URI[$target]}; to=null:; fi
    local before
    before=$(cpu_mark "$target")
    t0=$(date +%s.%N)
    if ! timeout 600 "${FIO_PREFIX[@]}" nbdcopy "$from" "$to" >"$WORK/copy.$tag.$target.log" 2>&1; then
        echo "nbdcopy failed for $tag on $target:" >&2
        tail -n 5 "$WORK/copy.$tag.$target.log" >&2
        exit 1
    fi
    t1=$(date +%s.%N)
    echo "$before $(cpu_mark "$target")" >"$WORK/$tag.$target.cpu"
    echo "$t0 $t1" | awk '{ printf "%.6f\n", $2 - $1 }' >"$WORK/$tag.$target.copy"
}

# Build once (the launcher builds when sources are newer than the jar), then never again during the run.
if [[ ",$TARGETS," == *,rb* || ",$TARGETS," == *,demo,* ]]; then
    echo "# rbridge: $("${RB[@]}" --version 2>&1 | tail -n 1)"
fi
if [[ ",$TARGETS," == *,base-* ]]; then
    echo "# baseline rbridge ($BASELINE, $(git -C "$BASELINE" rev-parse --short HEAD 2>/dev/null || echo 'not git')):" \
         "$("${RB_BASE[@]}" --version 2>&1 | tail -n 1)"
fi
for t in "${TLIST[@]}"; do start_target "$t"; done

echo "# prefilling every export ($SIZE, 1M sequential writes, QD8)"
for t in "${TLIST[@]}"; do
    runfio "$t" prefill --rw=write --bs=1M --iodepth=8
done

if [[ ",$ROWS," == *,cin,* ]]; then
    command -v nbdcopy >/dev/null || { echo "nbdcopy not found (libnbd-bin)" >&2; exit 2; }
    echo "# making a $SIZE file of random bytes for the cin row"
    head -c "$(numfmt --from=iec "$SIZE")" /dev/urandom >"$WORK/copy.src"
fi
if [[ $WARMUP -gt 0 ]]; then
    echo "# warming up: every row once on every target, ${WARMUP}s each (nbdcopy rows: one copy), not measured"
    for r in "${ROWLIST[@]}"; do
        for t in "${TLIST[@]}"; do
            if [[ ${ROWARGS[$r]} == copy ]]; then
                runcopy "$t" "warm.$r" "$r"
            else
                # shellcheck disable=SC2086
                runfio "$t" "warm.$r" ${ROWARGS[$r]} --time_based --runtime="$WARMUP"
            fi
        done
    done
fi
echo "# rows: $ROWS; ${TIME}s measured + ${RAMP}s ramp per run; $REPEAT run(s) per target per row;" \
     "pin: $PIN${FIO_CPUS:+ (fio on CPU(s) $FIO_CPUS)}"
NT=${#TLIST[@]}
for r in "${ROWLIST[@]}"; do
    for i in $(seq "$REPEAT"); do
        for ((k = 0; k < NT; k++)); do
            t=${TLIST[$(( (k + i - 1) % NT ))]}   # rotate the order between repeats
            if [[ ${ROWARGS[$r]} == copy ]]; then
                runcopy "$t" "$r.$i" "$r"
            else
                # shellcheck disable=SC2086
                runfio "$t" "$r.$i" ${ROWARGS[$r]} --time_based --runtime="$TIME" --ramp_time="$RAMP"
            fi
            echo "#   done $r run $i on $t"
        done
    done
done

guard_rc=0
PYTHONPATH="$ROOT/bench" PYTHONDONTWRITEBYTECODE=1 python3 - "$WORK" "$REPEAT" "$ROWS" "$TIME" "$LAT" "$TARGETS" "$(numfmt --from=iec "$SIZE")" "$CLK_TCK" \
    "$RAMP" "${GUARD:-0}" <<'EOF' || guard_rc=$?
import statistics, sys
import fio_results
work, repeat, rows, secs, lat, targets = (sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","),
                                          sys.argv[4], sys.argv[5], sys.argv[6].split(","))
size = int(sys.argv[7])
clk_tck, ramp = int(sys.argv[8]), float(sys.argv[9])
guard = int(sys.argv[10])

def copied(tag, target):
    return size / float(open("%s/%s.%s.copy" % (work, tag, target)).read()) / 1e6

def load(tag, target):
    return fio_results.load(work, tag, target)

def metric(job, side, what):
    return fio_results.metric(job, side, what, lat)

DEF = dict(fio_results.ROWS)
DEF["cin"] = ("nbdcopy file->export", "copy", ["mbs"])
DEF["cout"] = ("nbdcopy export->null", "copy", ["mbs"])

def value(r, i, t, side, m):
    if side == "copy":
        return copied("%s.%d" % (r, i), t)
    return metric(load("%s.%d" % (r, i), t), side, m)
UNIT = fio_results.units(lat)
HEAD = {"rb1": "serve R=1", "rb1nm": "R=1 nometr", "rb1l1": "R=1 1 lane", "rb2": "serve R=2", "demo": "demo",
        "nbdkit": "nbdkit 2hop", "nkmem": "nbdkit mem", "nkmem1": "nbdkit t=1",
        "base-rb1": "base R=1", "base-rb2": "base R=2", "base-demo": "base demo"}
PEERS = ("nbdkit", "nkmem", "nkmem1")
def peer(t):
    if t == "demo" and "nkmem" in targets:
        return "nkmem"
    return "nbdkit" if "nbdkit" in targets else None
rb = [t for t in targets if t not in PEERS and not t.startswith("base-") and peer(t)]
ratios = bool(rb)
onoff = "rb1" in targets and "rb1nm" in targets
pairs = [t for t in targets if "base-" + t in targets]
out = []
for r in rows:
    label, side, metrics = DEF[r]
    for m in metrics:
        runs = {t: [value(r, i, t, side, m) for i in range(1, repeat + 1)] for t in targets}
        vals = {t: statistics.median(runs[t]) for t in targets}
        rat = []
        wins = []
        lower = m in ("p50", "p99")
        for t in rb:
            v, nk = vals[t], vals[peer(t)]
            rat.append((nk / v if v else float("nan")) if lower else (v / nk if nk else float("nan")))
            wins.append(sum(1 for a, b in zip(runs[t], runs[peer(t)]) if (a < b if lower else a > b)))
        if onoff:
            on, off = vals["rb1"], vals["rb1nm"]
            rat.append((off / on if on else float("nan")) if m in ("p50", "p99") else (on / off if off else float("nan")))
        for t in pairs:
            new, old = vals[t], vals["base-" + t]
            rat.append((old / new if new else float("nan")) if m in ("p50", "p99") else (new / old if old else float("nan")))
        out.append(("%s %s" % (label, UNIT[m]), m, vals, rat, wins))

w = max(len(o[0]) for o in out)
print()
print("fio nbd engine, %ss per run, median of %d run(s); one job, one connection" % (secs, repeat))
if ratios:
    print("ratio columns: each rbridge target vs its peer (%s), > 1 means rbridge is better"
          % ", ".join("%s vs %s" % (t, peer(t)) for t in rb))
    print("(rbridge/peer for IOPS and MB/s, peer/rbridge for latency)%s"
          % ("; (w/N): runs of N in which rbridge did better" if repeat > 1 else ""))
if onoff:
    print("on/off: rb1 (metrics on) vs rb1nm (--metrics none), > 1 means metrics on is better")
if pairs:
    print("X/base: X vs the --baseline build of X, > 1 means the new code is better")
RW = 14 if repeat > 1 else 9
cols = (["%11s" % HEAD[t] for t in targets] + ["%*s" % (RW, "%s/%s" % (t, "mem" if peer(t) == "nkmem" else "nk"))
                                                for t in rb]
        + (["%9s" % "on/off"] if onoff else []) + ["%9s" % ("%s/base" % t) for t in pairs])
print("%-*s %s" % (w, "row", " ".join(cols)))
print("-" * (w + 1 + len(" ".join(cols))))
for name, m, vals, rat, wins in out:
    fmt = "%11.0f" if m == "iops" else "%11.1f"
    n = len(wins)
    cells = ([fmt % vals[t] for t in targets]
             + ["%*s" % (RW, "%.2f (%d/%d)" % (x, w, repeat) if repeat > 1 else "%.2f" % x) for x, w in zip(rat, wins)]
             + ["%9.2f" % x for x in rat[n:]])
    print("%-*s %s" % (w, name, " ".join(cells)))

def cpu_per_gb(r, i, t, side):
    """CPU seconds per GB (10^9 bytes) moved: (front, back), back None for one-process targets."""
    f0, b0, f1, b1 = [int(x) for x in open("%s/%s.%d.%s.cpu" % (work, r, i, t)).read().split()]
    if side == "copy":
        moved = size
    else:
        # fio's bandwidth excludes the ramp, the CPU counters include it: bytes over ramp + measured time
        moved = metric(load("%s.%d" % (r, i), t), side, "mbs") * 1e6 * (float(secs) + ramp)
    gb = moved / 1e9
    if gb <= 0:
        return float("nan"), None
    back = None if b0 == 0 and b1 == 0 else (b1 - b0) / clk_tck / gb
    return (f1 - f0) / clk_tck / gb, back

print()
print("CPU seconds per GB moved (user + system of the server processes, ramp included): front / back ends")
print("(front: the process serving NBD; back: memservers, nbdkit memory behind the nbd plugin; '-' for one process)")
cols = ["%15s" % HEAD[t] for t in targets]
print("%-*s %s" % (w, "row", " ".join(cols)))
print("-" * (w + 1 + len(" ".join(cols))))
for r in rows:
    label, side, _ = DEF[r]
    cells = []
    for t in targets:
        fr, bk = [], []
        for i in range(1, repeat + 1):
            f, b = cpu_per_gb(r, i, t, side)
            fr.append(f)
            bk.append(b)
        back = "-" if any(b is None for b in bk) else "%.2f" % statistics.median(bk)
        cells.append("%15s" % ("%.2f / %s" % (statistics.median(fr), back)))
    print("%-*s %s" % (w, label, " ".join(cells)))

if guard:
    worse = [(name, t, x) for name, m, vals, rat, wins in out for t, x in zip(pairs, rat[len(rat) - len(pairs):])
             if not x >= 1 - guard / 100]
    print()
    if worse:
        print("regression guard: %d row(s) more than %d %% worse than the baseline:" % (len(worse), guard))
        for name, t, x in worse:
            print("  %s, %s: %.2fx of base-%s" % (name, t, x, t))
        sys.exit(3)
    print("regression guard: no row more than %d %% worse than the baseline" % guard)
EOF
[[ $KEEP -eq 1 ]] && echo "# fio JSON and server logs kept in $WORK"
exit "$guard_rc"
