#!/usr/bin/env bash
# What a bridge and its memservers cost at rest as one dimension grows: NBD connections, volumes, regions on one
# memserver, memservers behind one bridge. Run with --help for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
ONLY=connections,volumes,regions,memservers
declare -A STEPS=([connections]="1,4,16,64,256" [volumes]="1,4,16,64" [regions]="100,1000,10000,30000"
    [memservers]="1,2,4,8,16")
declare -A UNIT=([connections]=connection [volumes]=volume [regions]=region [memservers]=memserver)
QUIET=5
SETTLE=5
HEAP=0
OUT=

usage() {
    cat <<EOF
Usage: bench/scale.sh [--only DIM[,DIM...]] [--steps DIM=N,N,...]... [--quiet SEC] [--settle SEC] [--heap]
                      [--out DIR] [--help]

Grows one dimension at a time and prints, at each step, what the bridge and the memservers cost at rest:
  connections  NBD connections held idle on one bridge (one memserver, volume "disk" of 64 MiB): each does the
               fixed-newstyle handshake and NBD_OPT_GO, then sits; added step by step to the same bridge
               (default steps ${STEPS[connections]})
  volumes      volumes of 64 MiB on one bridge (--volume repeated), one memserver; each step a fresh bridge and
               memserver, and every volume written once (4 KiB: one slab allocated, its allocation manifest and
               lease in place) (default ${STEPS[volumes]})
  regions      regions on one memserver: one bridge writes 4 KiB at the start of each 1 MiB slab (slab=1M, the
               smallest) of one volume, so every slab is a region; added step by step to the same processes. Each
               region then holds one touched page (4 KiB) of data. A memserver grants at most 38000 regions
               (--max-regions; one memory mapping each) (default ${STEPS[regions]})
  memservers   memservers of 128 MiB behind one bridge (volume "disk" of 64 MiB), each step fresh processes
               (default ${STEPS[memservers]})
Columns: the bridge's and the memservers' (summed) resident memory (VmRSS, MiB), threads, and CPU at rest (run time
of their threads, /proc/PID/task/*/schedstat, over --quiet seconds, default $QUIET, after --settle seconds, default
$SETTLE, in % of one core); with --heap, measured last, the Java heap live after a full collection (jcmd GC.run and
GC.heap_info, MiB; it adds the JVM's attach thread); "us/unit", the step's set-up time over the units it added:
connecting with the handshake (as the client timed it); start-up until the last volume is served, with the first
writes; the writes that allocate the slabs (as the client timed them); start-up until the bridge has every
memserver up. Start-ups are timed by polling every 0.3 s. Under each table, the least-squares slope per unit.
Needs python3, nbdinfo and curl.
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --only) ONLY=$2; shift 2 ;;
        --steps) [[ $2 == *=* && -n ${STEPS[${2%%=*}]:-} ]] || { echo "--steps wants DIM=N,N,..." >&2; exit 2; }
            STEPS[${2%%=*}]=${2#*=}; shift 2 ;;
        --quiet) QUIET=$2; shift 2 ;;
        --settle) SETTLE=$2; shift 2 ;;
        --heap) HEAP=1; shift ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
IFS=, read -r -a DIMS <<<"$ONLY"
for d in "${DIMS[@]}"; do
    [[ -n ${STEPS[$d]:-} ]] || { echo "unknown dimension '$d' (see --help)" >&2; exit 2; }
    [[ ${STEPS[$d]} =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "--steps $d: positive whole numbers" >&2; exit 2; }
done
[[ ${STEPS[regions]##*,} -le 37000 ]] || { echo "--steps regions: a memserver grants at most 38000" >&2; exit 2; }
[[ $QUIET =~ ^[1-9][0-9]*$ && $SETTLE =~ ^[0-9]+$ ]] || { echo "--quiet, --settle: whole seconds" >&2; exit 2; }
bench_require python3 nbdinfo curl setsid
bench_workdir "$OUT" scale
JCMD="$("$ROOT/dev/find-jdk")/bin/jcmd"
RB=(env RBRIDGE_NO_BUILD=1 "$ROOT/rbridge")
echo "# rbridge: $("$ROOT/rbridge" --version 2>&1 | tail -n 1), commit $(git -C "$ROOT" rev-parse --short HEAD)"
echo "# $(nproc) CPUs; quiet window ${QUIET}s after ${SETTLE}s"

# An NBD client: "hold N" opens N connections (handshake, NBD_OPT_GO), prints "ready", then sits until killed;
# "touch FIRST END SLAB EXPORT..." writes 4 KiB of 0x5a at the start of slabs FIRST..END-1 of each export, then
# prints "us MICROSECONDS" it took (hold prints them on its "ready" line).
cat >"$WORK/nbd.py" <<'EOF'
import signal, socket, struct, sys, time

def recv(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise SystemExit("the server closed the connection")
        b += c
    return b

def connect(port, export):
    s = socket.create_connection(("127.0.0.1", port))
    magic, opt, flags = struct.unpack(">8s8sH", recv(s, 18))
    if magic != b"NBDMAGIC" or opt != b"IHAVEOPT" or not flags & 1:
        raise SystemExit("not a fixed-newstyle NBD server")
    s.sendall(struct.pack(">I", 3))  # FIXED_NEWSTYLE, NO_ZEROES
    name = export.encode()
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, len(data)) + data)  # NBD_OPT_GO
    while True:
        _, _, rep, n = struct.unpack(">QIII", recv(s, 20))
        recv(s, n)
        if rep == 1:  # ACK
            return s
        if rep & 0x80000000:
            raise SystemExit("NBD_OPT_GO refused: reply type %#x" % rep)

mode, port, t0 = sys.argv[1], int(sys.argv[2]), time.monotonic()
if mode == "hold":
    held = [connect(port, "disk") for _ in range(int(sys.argv[3]))]
    print("ready", len(held), "us", int((time.monotonic() - t0) * 1e6), flush=True)
    while True:
        signal.pause()
first, end, slab = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
block = b"\x5a" * 4096
for export in sys.argv[6:]:
    s = connect(port, export)
    for lo in range(first, end, 64):
        hi = min(end, lo + 64)
        s.sendall(b"".join(struct.pack(">IHHQQI", 0x25609513, 0, 1, i, i * slab, 4096) + block
                           for i in range(lo, hi)))
        for _ in range(lo, hi):
            magic, err, _ = struct.unpack(">IIQ", recv(s, 16))
            if magic != 0x67446698 or err:
                raise SystemExit("write to %s failed: error %d" % (export, err))
    s.close()
print("us", int((time.monotonic() - t0) * 1e6))
EOF
exec 3>&2 # await hides what the command it polls prints: held() reports on this
# shellcheck disable=SC2317
held() { # held PID LOG: the holder said "ready"; exits with its log when it died
    grep -q "^ready" "$2" && return 0
    kill -0 "$1" 2>/dev/null && return 1
    { echo "the NBD client holding connections exited:"; cat "$2"; } >&3
    exit 1
}

stop_from() { # stop_from INDEX: stops the groups started since BENCH_GROUPS had INDEX entries, forgets them
    local i
    for ((i = ${#BENCH_GROUPS[@]} - 1; i >= $1; i--)); do stop_group "${BENCH_GROUPS[$i]}"; done
    BENCH_GROUPS=("${BENCH_GROUPS[@]:0:$1}")
}

# shellcheck disable=SC2317 # these two are called through await
is_java() { [[ $(cat "/proc/$1/comm" 2>/dev/null) == java ]]; }
java_pid() { # java_pid PID: PID, once it is the JVM itself (setsid, env and the launcher exec it)
    await 30 "the JVM of process $1" is_java "$1"
    echo "$1"
}

memserver() { # memserver NAME CAPACITY [OPTION...] -> MSPID, MSADDR, MSADMIN (its admin address)
    local name=$1 cap=$2 port; shift 2
    port=$(free_port) MSADMIN=127.0.0.1:$(free_port)
    spawn "$name" "${RB[@]}" memserver --listen "127.0.0.1:$port" --capacity "$cap" --admin "$MSADMIN" \
        --metrics none --huge-pages off "$@"
    MSPID=$(java_pid "$SPAWNED") MSADDR=127.0.0.1:$port
    await 120 "$name" grep -q "lending" "$WORK/$name.log"
}

bridge() { # bridge NAME OPTION... -> BRPID, BRPORT, BRADMIN (its admin address)
    local name=$1; shift
    BRPORT=$(free_port) BRADMIN=127.0.0.1:$(free_port)
    spawn "$name" "${RB[@]}" serve --listen "127.0.0.1:$BRPORT" --admin "$BRADMIN" --metrics none "$@"
    BRPID=$(java_pid "$SPAWNED")
}

cpu_ns() { # cpu_ns PID: nanoseconds its threads have run (schedstat; /proc/PID/stat's 10 ms ticks are too coarse)
    local f t=0 a
    for f in /proc/"$1"/task/*/schedstat; do { read -r a _ <"$f"; } 2>/dev/null && t=$((t + a)); done
    echo "$t"
}
status() { awk '/^VmRSS:/ {r = $2} /^Threads:/ {t = $2} END {print r, t}' "/proc/$1/status"; }
heap() { # heap PID -> KiB of Java heap live after a full collection (the "used" of each generation)
    "$JCMD" "$1" GC.run >/dev/null
    "$JCMD" "$1" GC.heap_info | awk '/ used [0-9]+K/ {for (i = 1; i <= NF; i++) if ($i == "used") {
        sub(/K.*/, "", $(i + 1)); u += $(i + 1)}} END {print u + 0}'
}

measure() { # measure X MS_PER_UNIT BRIDGE_PID MEMSERVER_PID...: one row into $WORK/$DIM.rows
    local x=$1 per=$2 pids=("${@:3}") t0 t1 p i rss thr
    local -a c0=() row=()
    sleep "$SETTLE" # the set-up's JIT compilation and garbage collection, which is not what the step costs at rest
    t0=$(date +%s%N)
    for p in "${pids[@]}"; do c0+=("$(cpu_ns "$p")"); done
    sleep "$QUIET" # the measurement window itself
    t1=$(date +%s%N)
    local brss=0 bthr=0 bcpu=0 mrss=0 mthr=0 mcpu=0 bheap=0 mheap=0 cpu
    for i in "${!pids[@]}"; do
        p=${pids[$i]}
        cpu=$(( ($(cpu_ns "$p") - c0[i]) * 100000 / (t1 - t0) )) # % of one core, x 1000
        read -r rss thr < <(status "$p")
        if (( i == 0 )); then brss=$rss bthr=$thr bcpu=$cpu; else
            mrss=$((mrss + rss)) mthr=$((mthr + thr)) mcpu=$((mcpu + cpu)); fi
    done
    if (( HEAP )); then
        bheap=$(heap "${pids[0]}")
        for p in "${pids[@]:1}"; do mheap=$((mheap + $(heap "$p"))); done
    fi
    row=("$x" "$per" "$brss" "$bthr" "$bcpu" "$bheap" "$mrss" "$mthr" "$mcpu" "$mheap")
    echo "${row[*]}" >>"$WORK/$DIM.rows"
}

elapsed_us() { echo $(( ($(date +%s%N) - $1) / 1000 )); }

steps() { IFS=, read -r -a STEPLIST <<<"${STEPS[$DIM]}"; }

dim_connections() {
    local have=0 n us max=${STEPLIST[-1]} base=${#BENCH_GROUPS[@]}
    memserver ms 128M
    bridge bridge --memserver "$MSADDR" --volume disk,size=64M --max-connections $((max + 1024)) \
        --max-connections-per-peer $((max + 16))
    await_nbd bridge "nbd://127.0.0.1:$BRPORT/disk" "$BRPID" 120
    for n in "${STEPLIST[@]}"; do
        (( n > have )) || continue
        spawn "hold$n" python3 "$WORK/nbd.py" hold "$BRPORT" $((n - have))
        await 120 "$((n - have)) connections" held "$SPAWNED" "$WORK/hold$n.log"
        read -r _ _ _ us <"$WORK/hold$n.log"
        measure "$n" "$((us / (n - have)))" "$BRPID" "$MSPID"
        have=$n
    done
    stop_from "$base"
}

dim_volumes() {
    local n t0 i base
    local -a vols names
    for n in "${STEPLIST[@]}"; do
        base=${#BENCH_GROUPS[@]} vols=() names=()
        for ((i = 1; i <= n; i++)); do vols+=(--volume "v$i,size=64M"); names+=("v$i"); done
        memserver "ms-v$n" "$((n * 64 + 64))M"
        t0=$(date +%s%N)
        bridge "bridge-v$n" --memserver "$MSADDR" "${vols[@]}"
        await_nbd "bridge-v$n" "nbd://127.0.0.1:$BRPORT/v$n" "$BRPID" 120
        python3 "$WORK/nbd.py" touch "$BRPORT" 0 1 67108864 "${names[@]}" >/dev/null
        measure "$n" "$(( $(elapsed_us "$t0") / n ))" "$BRPID" "$MSPID"
        stop_from "$base"
    done
}

regions() { curl -fsS "http://$MSADMIN/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["regions"])'; }

dim_regions() {
    local have=0 n us max=${STEPLIST[-1]} base=${#BENCH_GROUPS[@]} count per_us
    memserver ms "$((max + 256))M" --max-regions 38000
    bridge bridge --memserver "$MSADDR" --volume "disk,size=${max}M,slab=1M"
    await_nbd bridge "nbd://127.0.0.1:$BRPORT/disk" "$BRPID" 120
    for n in "${STEPLIST[@]}"; do
        (( n > have )) || continue
        read -r _ us < <(python3 "$WORK/nbd.py" touch "$BRPORT" "$have" "$n" 1048576 disk)
        per_us=$((us / (n - have)))
        count=$(regions)
        (( count >= n )) || { echo "regions: the memserver holds $count regions after $n slabs written" >&2; exit 1; }
        echo "# $n slabs written: the memserver holds $count regions (the rest: allocation manifests)," \
            "${per_us} us a slab"
        measure "$n" "$per_us" "$BRPID" "$MSPID"
        have=$n
    done
    stop_from "$base"
}

# shellcheck disable=SC2317 # called through await
all_up() { # all_up N: the bridge has N memservers up
    curl -fsS "http://$BRADMIN/memservers" | python3 -c '
import json, sys; sys.exit(sum(m["state"] == "up" for m in json.load(sys.stdin)) != int(sys.argv[1]))' "$1"
}

dim_memservers() {
    local n t0 i base
    local -a ms pids
    for n in "${STEPLIST[@]}"; do
        base=${#BENCH_GROUPS[@]} ms=() pids=()
        for ((i = 1; i <= n; i++)); do
            memserver "ms-m$n-$i" 128M
            ms+=(--memserver "$MSADDR") pids+=("$MSPID")
        done
        t0=$(date +%s%N)
        bridge "bridge-m$n" "${ms[@]}" --volume disk,size=64M
        await 120 "the bridge with $n memservers up" all_up "$n"
        measure "$n" "$(( $(elapsed_us "$t0") / n ))" "$BRPID" "${pids[@]}"
        stop_from "$base"
    done
}

table() { # prints $WORK/$DIM.rows as a table with the least-squares slope of every column per unit
    python3 - "$WORK/$DIM.rows" "$DIM" "${UNIT[$DIM]}" "$HEAP" <<'EOF'
import sys
rows = [[int(v) for v in line.split()] for line in open(sys.argv[1])]
dim, unit, heap = sys.argv[2], sys.argv[3], sys.argv[4] == "1"
# x, us/unit, bridge rss KiB, threads, cpu m%, heap KiB, memservers rss KiB, threads, cpu m%, heap KiB
cols = [("us/unit", 1, 1), ("br MiB", 2, 1024), ("br thr", 3, 1), ("br cpu%", 4, 1000), ("br heap", 5, 1024),
        ("ms MiB", 6, 1024), ("ms thr", 7, 1), ("ms cpu%", 8, 1000), ("ms heap", 9, 1024)]
cols = [c for c in cols if heap or "heap" not in c[0]]
print("%-14s" % dim + "".join("%12s" % c[0] for c in cols))
for r in rows:
    print("%-14d" % r[0] + "".join("%12.3f" % (r[i] / div) if div == 1000 else "%12.2f" % (r[i] / div) if div > 1
                              else "%12d" % r[i] for _, i, div in cols))
def slope(i):
    xs, ys = [r[0] for r in rows], [r[i] for r in rows]
    n, mx, my = len(xs), sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if n > 1 and sxx else float("nan")
def fmt(i, div):
    s = slope(i)
    return "%.1f KiB" % s if div == 1024 else "%.4f%%" % (s / 1000) if div == 1000 else "%.3f" % s
print("%-14s" % ("per " + unit) + "%12s" % "" + "".join("%12s" % fmt(i, div) for _, i, div in cols[1:]))
EOF
}

for DIM in "${DIMS[@]}"; do
    : >"$WORK/$DIM.rows"
    steps
    case $DIM in
        connections) dim_connections ;;
        volumes) dim_volumes ;;
        regions) dim_regions ;;
        memservers) dim_memservers ;;
    esac
    echo
    table
done
[[ $KEEP -eq 1 ]] && echo "# logs kept in $WORK"
exit 0
