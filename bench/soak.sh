#!/usr/bin/env bash
# Soak: rbridge serve (R=2, three memservers) under 16 connections of fio with verify, memservers SIGKILLed and
# restarted on a schedule, the bridge restarted once; resources sampled every 10 s, pass/fail from the samples.
# Run with --help for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DURATION=1800
SIZE_MIB=1024
KILL_EVERY=
DOWN=10
SAMPLE=10
GC_EVERY=30
OUT=
EVALUATE=
SOAK_JAVA_OPTS=${SOAK_JAVA_OPTS-"-Xms128m -Xmx128m -XX:+AlwaysPreTouch -XX:NativeMemoryTracking=summary"}
NMT_AFTER=120

usage() {
    cat <<EOF
Usage: bench/soak.sh [--duration SEC] [--size MIB] [--kill-every SEC] [--down SEC] [--gc-every SEC]
                     [--out DIR] [--help]

Starts three rbridge memservers (tcp transport, 2 GiB capacity each) and one bridge serving the volume "soak"
(--size MiB, default $SIZE_MIB, replicas=2, 16 MiB slabs), all on free 127.0.0.1 ports, then for --duration
seconds (default $DURATION = 30 min; the CI variant is --duration 180):

Load: fio (nbd engine) in ROUNDS, 16 jobs = 16 NBD connections, each job on a region of its own:
  8 x rand4k   4K random writes, QD4, verify=crc32c with verify_backlog (written blocks are read back and
               checked while writing: a random read/write mix)
  4 x seq1m    1M sequential writes, QD4, verify_backlog
  2 x trim     trimwrite 64K (TRIM a block, then write it), QD1 (NBD does not order a TRIM and a WRITE of the
               same block that are in flight together), verify
  2 x randrw   4K random 50/50 reads and writes, QD4, verify of the writes
Every job writes its whole region once per round with a randseed of that round (offsets and block contents
differ between rounds), then fio reads the whole region back and checks every block's CRC32C and header
against the write it issued (do_verify). A round takes seconds to tens of seconds; rounds follow
each other until --duration has passed (the round in progress finishes, so runs end a little late).

Faults:
  memservers  every --kill-every seconds (default 180 when --duration >= 900, else duration/4) one memserver,
              in turn 1, 2, 3, ..., is SIGKILLed while fio runs, kept down --down seconds (default $DOWN: the
              bridge declares it dead and rebuilds its replicas onto the other two), and started again
              with the same arguments and ports (empty; the bridge reconnects and places replicas on it again).
              A kill waits until the volume is healthy again (no slab degraded, rebuilding or queued, every
              memserver reachable); not healthy within 300 s after a kill is a FAIL.
  bridge      once, at the first round boundary past half of --duration: SIGTERM (it drains and gives its
              leases back), started again with the same arguments and ports; it reattaches the volume from
              the memservers. fio never runs across the restart: the round before it has finished (written
              and verified, fio exited), the whole volume is read through the bridge (nbdcopy) and hashed
              (sha256), the bridge restarts, and the whole volume must hash the same from the new process:
              every acknowledged byte survived. Then rounds go on. (fio --verify_only was the first idea; it
              checks each block's own CRC and offset, not which run wrote it, so a stale block passes: a
              replay with a wrong seed passed, so it is not used.)
  Kills and the bridge restart never overlap (a lock): a memserver is never killed while the bridge is down.

Samples (every $SAMPLE s, into samples.csv): for the bridge and each memserver, RSS, threads and file
descriptors from /proc/PID; direct memory (jvm_buffer_memory_used_bytes{id="direct"}) and heap after GC from
its Prometheus metrics; for memservers also the RAM backing their regions (rbridge_memserver_resident_bytes)
and "overhead" = RSS - resident, the part of a memserver's RSS that is not volume data. Heap after GC is
jvm_gc_live_data_size_bytes, which the JVM only updates at a full GC: every --gc-every seconds (default
$GC_EVERY) each process gets "jcmd PID GC.run" (a full GC, tens of ms), and samples in between repeat the last
value. The bridge's lost/degraded slabs are sampled too. Latency: every round's fio output (json+) holds the
completion-latency histogram of the 4K jobs' reads and writes; p99 over a window is computed from those
histograms merged, not averaged from per-round percentiles.

Pass criteria (the exit code is 0 only if all hold; each failed one prints a line "FAIL: reason"):
  verify    every fio round exits 0 with no job error and no verify mismatch, and the volume hashes the same
            before and after the bridge restart
  lost      no sample ever sees a lost slab on the bridge
  healthy   after every kill the volume is healthy again within 300 s
  flat      RSS, direct memory, heap after GC, threads and fds, in two series kinds:
            - the bridge, per lifetime (the restart starts a second series), from QUIET samples only: taken
              between fio rounds with no NBD connection open, right after a full GC (jcmd GC.run), at most
              one per 10 s (each connection holds a thread, three fds and payload buffers, jobs finish at
              different times, and dropped direct buffers are freed only by a GC: under load, samples swing
              by 30 %);
            - the memservers as one tier, the sum over the three, from samples where all three are up: a
              kill moves replicas between memservers, so one memserver's RSS follows its share of the data,
              while the tier holds R x the data written plus three JVMs. (samples.csv keeps every process's
              own series, with "overhead" = RSS - resident region bytes, for a closer look.)
            Warm-up = the first 20 % of --duration (at least 30 s) of the series, and until the first
            recovery from a kill in it: the first failover starts the JDK's virtual-thread scheduler once
            (5 threads and its poller's fds), a one-time step, not a leak. Level = the highest warm-up
            sample; every later sample must stay <= level x 1.10. Samples taken while a memserver is down or
            a rebuild runs (a kill until healthy again) are recorded but not judged: copy buffers and
            reconnects are work in progress, and a leak they cause shows in the stable samples after. A
            series with nothing judged after its warm-up shows "-". Only growth fails: shrinking is no leak.
  p99       the 4K jobs' p99 completion latency in the last window <= 1.5 x the first window; the window is
            5 minutes when --duration >= 1800, else a third of --duration (60 s for the 180 s variant)
Prints a table: per series, each resource at its first judged sample, at the end of warm-up (start), at the
middle and at the end of the run, the warm-up level, the highest judged sample after it and the verdict; then
errors, kills, lost slabs and p99.

Options:
  --duration SEC    how long the load runs (default $DURATION)
  --size MIB        volume size in MiB, at least 256 (default $SIZE_MIB)
  --kill-every SEC  seconds between memserver kills (default: see above)
  --down SEC        how long a killed memserver stays down (default $DOWN)
  --gc-every SEC    seconds between forced full GCs for heap after GC (default $GC_EVERY)
  --judge all|data  all (default): every criterion above; data: only verify, lost and healthy fail the run,
                    while flat and p99 are printed as NOTE lines (the CI variant: three minutes on a shared
                    machine say whether data survives, not whether a resource drifts)
  --evaluate DIR    judge a run kept with --out DIR again (prints the table and verdict; runs nothing)
  --out DIR         keep everything there (samples.csv, rounds.csv, events.log, fio output, process logs);
                    default: a temporary folder, removed on success and kept (path printed) on failure
Environment: RBRIDGE_CMD, the command that runs rbridge (word-split; default: the launcher
"\$ROOT/rbridge" with RBRIDGE_NO_BUILD=1 after one build up front); SoakTest sets it to the test classpath.
SOAK_JAVA_OPTS, the JVM options of every process the launcher starts, by default
"$SOAK_JAVA_OPTS": a fixed heap touched at start, so RSS is not the collector first touching more of its young generation, and native memory
tracking: ${NMT_AFTER} s into each process's life the soak takes a baseline, and at the end writes each live
process's growth since then by category (jcmd VM.native_memory summary.diff) to nmt-NAME.txt.
The command must exec the JVM (its pid is sampled and signalled). Nothing is pinned to CPUs: the soak looks
for drift over time, not for speed.
Needs fio (with the nbd engine), nbdinfo, curl, python3, setsid, flock and jcmd (from the JDK dev/find-jdk
finds). Every process it started is killed on exit, also on Ctrl-C.
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --duration) DURATION=$2; shift 2 ;;
        --size) SIZE_MIB=$2; shift 2 ;;
        --kill-every) KILL_EVERY=$2; shift 2 ;;
        --down) DOWN=$2; shift 2 ;;
        --gc-every) GC_EVERY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --evaluate) EVALUATE=$2; shift 2 ;;
        --judge) JUDGE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ ${JUDGE:=all} == all || $JUDGE == data ]] || { echo "--judge must be all or data" >&2; exit 2; }
[[ $DURATION =~ ^[0-9]+$ && $DURATION -ge 60 ]] || { echo "--duration must be >= 60 seconds" >&2; exit 2; }
[[ $SIZE_MIB =~ ^[0-9]+$ && $SIZE_MIB -ge 256 ]] || { echo "--size must be >= 256 (MiB)" >&2; exit 2; }
if [[ -z $KILL_EVERY ]]; then
    if (( DURATION >= 900 )); then KILL_EVERY=180; else KILL_EVERY=$((DURATION / 4)); fi
fi
JAVA_HOME_25=$("$ROOT/dev/find-jdk")
JCMD="$JAVA_HOME_25/bin/jcmd"
for tool in fio nbdinfo nbdcopy sha256sum curl python3 setsid flock "$JCMD"; do
    command -v "$tool" >/dev/null || { echo "soak: $tool is not installed" >&2; exit 2; }
done

# --- verdict: from the files of a run folder alone, so --evaluate can judge a kept run again ---------------------
verdict() { # verdict DIR DURATION END_T
    python3 "$ROOT/bench/soak-verdict.py" "$1" "$2" "$3" "$JUDGE"
}

if [[ -n $EVALUATE ]]; then
    [[ -r $EVALUATE/run.env ]] || { echo "soak: $EVALUATE/run.env not found (not a finished run folder)" >&2; exit 2; }
    # shellcheck disable=SC1091
    source "$EVALUATE/run.env"
    verdict "$EVALUATE" "$DURATION" "$END_T"
    exit $?
fi

if [[ -n $OUT ]]; then
    mkdir -p "$OUT"
    WORK=$(cd "$OUT" && pwd)
    KEEP=1
else
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")
    KEEP=0
fi
mkdir -p "$WORK/pids" "$WORK/fio"
: >"$WORK/pgroups"
: >"$WORK/failures"
: >"$WORK/events.log"

HELPERS=()
cleanup() {
    local rc=$? p
    set +e
    for p in "${HELPERS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${HELPERS[@]}"; do wait "$p" 2>/dev/null; done
    # Newest first: fio before the bridge, the bridge before its memservers.
    for p in $(tac "$WORK/pgroups"); do
        kill -TERM -- "-$p" 2>/dev/null
        for _ in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$p" 2>/dev/null
    done
    if [[ $KEEP -eq 0 && $rc -eq 0 ]]; then rm -rf "$WORK"; elif [[ $KEEP -eq 0 ]]; then echo "soak: kept $WORK" >&2; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

T0=$(date +%s)
now() { echo $(( $(date +%s) - T0 )); }
event() { echo "$(now) $*" | tee -a "$WORK/events.log"; }
fail() { echo "$*" >>"$WORK/failures"; event "FAIL: $*"; }

# Every port the run needs, taken in one go with all sockets bound at once so no two are the same (asking for one
# free port at a time can return a port handed out a moment before, not yet bound by its process).
read -r -a PORTS <<<"$(python3 -c 'import socket
ss = [socket.socket() for _ in range(9)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
next_port=0
free_port() { # sets PORT to the next of PORTS (not in a subshell, so the count advances)
    PORT=${PORTS[$next_port]}
    next_port=$((next_port + 1))
}

spawn() { # spawn NAME COMMAND... -> own process group, pid in pids/NAME; log appended (restarts keep one log)
    local name=$1; shift
    # Closing the lock's descriptors matters: a long-lived child holding one would hold the lock forever.
    setsid "$@" >>"$WORK/$name.log" 2>&1 </dev/null 8>&- 9>&- &
    disown # a SIGKILLed memserver is expected; no "Killed" job notice
    echo $! >>"$WORK/pgroups"
    echo $! >"$WORK/pids/$name"
    echo "$(now) $name pid $!" >>"$WORK/lifetimes"
}

await() { # await SECONDS WHAT COMMAND...
    local limit=$1 what=$2 t0=$SECONDS; shift 2
    until "$@" >/dev/null 2>&1; do
        (( SECONDS - t0 <= limit )) || { fail "$what not within ${limit}s"; return 1; }
        sleep 0.5
    done
}

if [[ -n ${RBRIDGE_CMD:-} ]]; then
    read -r -a RB <<<"$RBRIDGE_CMD"
else
    echo "# rbridge: $("$ROOT/rbridge" --version 2>&1 | tail -n 1)" # builds once when the sources are newer
    # A fixed heap, touched at start: with the default (a heap that may grow to a quarter of the machine's RAM),
    # RSS climbs whenever heavier traffic (a rebuild) lets the collector touch more of its young generation for
    # the first time, a growth bounded only by -Xmx and, in 30 minutes, not told apart from a leak. A heap leak
    # shows in heap after GC. Native memory tracking names what grew (nmt-*.txt at the end).
    RB=(env RBRIDGE_NO_BUILD=1 "RBRIDGE_JAVA_OPTS=$SOAK_JAVA_OPTS" "$ROOT/rbridge")
fi

declare -a MS_ADDR MS_METRICS MS_ARGS
for i in 1 2 3; do
    free_port; port=$PORT
    free_port; mport=$PORT
    MS_ADDR[$i]="127.0.0.1:$port"
    MS_METRICS[$i]="http://127.0.0.1:$mport/metrics"
    MS_ARGS[$i]="memserver --listen 127.0.0.1:$port --capacity 2G --admin none --metrics 127.0.0.1:$mport"
done
free_port; NBD_PORT=$PORT
free_port; BR_MPORT=$PORT
free_port; BR_APORT=$PORT
URI="nbd://127.0.0.1:$NBD_PORT/soak"
BR_METRICS="http://127.0.0.1:$BR_MPORT/metrics"
BR_ARGS=(serve --listen "127.0.0.1:$NBD_PORT" --volume "soak,size=${SIZE_MIB}M,replicas=2,slab=16M"
    --memserver "${MS_ADDR[1]}" --memserver "${MS_ADDR[2]}" --memserver "${MS_ADDR[3]}"
    --admin "127.0.0.1:$BR_APORT" --metrics "127.0.0.1:$BR_MPORT")

start_memserver() { # start_memserver I
    local i=$1
    # shellcheck disable=SC2086 # MS_ARGS[i] is a word list without spaces inside words
    spawn "memserver$i" "${RB[@]}" ${MS_ARGS[$i]}
    await 120 "memserver $i up" curl -fsS "${MS_METRICS[$i]%/metrics}/readyz"
}

start_bridge() {
    spawn bridge "${RB[@]}" "${BR_ARGS[@]}"
    await 120 "bridge serving" nbdinfo --size "$URI"
}

metric() { # metric URL NAME LABELMATCH -> sum of matching series (0 if none)
    curl -fsS --max-time 5 "$1" 2>/dev/null | awk -v n="$2" -v m="$3" '
        index($0, n) == 1 && (m == "" || index($0, m)) && substr($0, length(n) + 1, 1) ~ /[{ ]/ { s += $NF }
        END { printf "%.0f\n", s }'
}

healthy() { # the volume has every slab at full replication and every memserver reachable
    local page
    page=$(curl -fsS --max-time 5 "$BR_METRICS" 2>/dev/null) || return 1
    awk '
        /^rbridge_volume_slabs\{/ && /state="(degraded|rebuilding|lost)"/ { bad += $NF }
        /^rbridge_rebuild_queue_slabs / { bad += $NF }
        /^rbridge_rebuild_active / { bad += $NF }
        /^rbridge_memserver_reachable\{/ { up += $NF; n++ }
        END { exit !(bad == 0 && n == 3 && up == 3) }' <<<"$page"
}

for i in 1 2 3; do start_memserver "$i"; done
start_bridge
event "memservers ${MS_ADDR[*]}; bridge $URI (admin 127.0.0.1:$BR_APORT); ${SIZE_MIB} MiB R=2;" \
    "duration ${DURATION}s, memserver kill every ${KILL_EVERY}s (down ${DOWN}s), bridge restart past $((DURATION / 2))s"

# --- the fio job file: 16 jobs, disjoint regions scaled to the volume -------------------------------------------
# Sizes in MiB from a unit U = size/32: rand4k 8 x U/2, seq1m 4 x 4U, trim 2 x 2U, randrw 2 x U/2: 25 U in all.
U=$((SIZE_MIB / 32))
JOBFILE="$WORK/soak.fio"
{
    echo "[global]"
    echo "ioengine=nbd"
    echo "uri=$URI"
    echo "verify=crc32c"
    echo "do_verify=1"
    echo "verify_fatal=1"
    echo "verify_state_save=0"
    echo "iodepth=4"
    echo "group_reporting=1"
    off=0
    add() { # add NAME RW BS REGION_MIB COUNT EXTRA
        local k
        for ((k = 0; k < $5; k++)); do
            echo "[$1$k]"
            [[ $k -eq 0 ]] && echo "new_group"
            echo "rw=$2"
            echo "bs=$3"
            echo "offset=${off}M"
            echo "size=$4M"
            [[ -n $6 ]] && echo "$6"
            off=$((off + $4))
        done
    }
    add rand4k randwrite 4k $((U / 2)) 8 "verify_backlog=256"
    add seq1m write 1M $((U * 4)) 4 "verify_backlog=16"
    # NBD does not order requests in flight: a TRIM and the WRITE of the same block must not overlap, so QD1.
    add trim trimwrite 64k $((U * 2)) 2 "iodepth=1"
    add randrw randrw 4k $((U / 2)) 2 "rwmixread=50"
} >"$JOBFILE"

volume_hash() { # volume_hash LABEL -> sha256 of the whole volume, read through the bridge (also in hash-LABEL)
    local h
    h=$(timeout 600 nbdcopy "$URI" - | sha256sum | cut -d' ' -f1) && [[ -n $h ]] || { fail "reading the whole volume ($1 the bridge restart) failed"; return 1; }
    echo "$h" | tee "$WORK/hash-$1"
}

run_fio() { # run_fio NAME SEED [EXTRA...] -> 0 when fio exited 0 with no job error
    local name=$1 seed=$2 rc; shift 2
    # A round takes seconds to a minute; 900 s means fio hangs (exit 124 from timeout).
    setsid timeout 900 fio "$JOBFILE" --randseed="$seed" --output-format=json+ --output="$WORK/fio/$name.json" "$@" \
        >"$WORK/fio/$name.out" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >>"$WORK/pgroups"
    set +e
    wait "$pid"
    rc=$?
    set -e
    if [[ $rc -ne 0 ]]; then
        fail "fio $name exited $rc: $(grep -m 3 -iE 'verify|error|bad' "$WORK/fio/$name.out" | tr '\n' ' ')"
        return 1
    fi
    local why
    why=$(python3 - "$WORK/fio/$name.json" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except ValueError as e:
    print(f"unreadable output: {e}")
    sys.exit(0)
bad = [f'{j["jobname"]} error {j["error"]}' for j in d["jobs"] if j.get("error", 0)]
if bad:
    print("job errors:", ", ".join(bad))
EOF
)
    [[ -z $why ]] || { fail "fio $name: $why"; return 1; }
}

pid_of() { cat "$WORK/pids/$1" 2>/dev/null || true; }

# --- sampler: one CSV row per process every SAMPLE seconds --------------------------------------------------------
sampler() {
    set +e
    local next=0 lastgc=-999999 t name pid url page rss threads fds direct heap resident lost degraded stable
    declare -A HEAP BORN
    echo "t,proc,pid,rss_kb,threads,fds,direct_bytes,heap_after_gc_bytes,resident_bytes,overhead_kb,lost,degraded,stable,quiet,pooled_bytes" \
        >"$WORK/samples.csv"
    while :; do
        t=$(now)
        if (( t < next )); then sleep 0.5; continue; fi
        next=$((t + SAMPLE))
        local gc=0
        if (( t - lastgc >= GC_EVERY )); then gc=1; lastgc=$t; fi
        # A kill window (marker file present) is not judged; see --help.
        stable=1
        [[ -e $WORK/unstable ]] && stable=0
        lost=$(metric "$BR_METRICS" rbridge_volume_slabs 'state="lost"')
        degraded=$(metric "$BR_METRICS" rbridge_volume_slabs 'state="degraded"')
        for name in bridge memserver1 memserver2 memserver3; do
            pid=$(pid_of "$name")
            [[ -n $pid && -r /proc/$pid/status ]] || continue
            if [[ $name == bridge ]]; then url=$BR_METRICS; else url=${MS_METRICS[${name#memserver}]}; fi
            if (( gc )); then
                timeout 30 "$JCMD" "$pid" GC.run >/dev/null 2>&1
            fi
            [[ -n ${BORN[$pid]:-} ]] || BORN[$pid]=$t
            if [[ ${BORN[$pid]} != done ]] && (( t - BORN[$pid] >= NMT_AFTER )); then
                # Fails harmlessly when the JVM runs without native memory tracking.
                timeout 30 "$JCMD" "$pid" VM.native_memory baseline >/dev/null 2>&1
                echo "$t $name pid $pid" >>"$WORK/nmt-baselines"
                BORN[$pid]=done
            fi
            page=$(curl -fsS --max-time 5 "$url" 2>/dev/null) || continue
            rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
            threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status")
            fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
            direct=$(awk '/^jvm_buffer_memory_used_bytes\{/ && /id="direct"/ { printf "%.0f", $NF }' <<<"$page")
            heap=$(awk '/^jvm_gc_live_data_size_bytes/ { printf "%.0f", $NF }' <<<"$page")
            # Before the first full GC of a lifetime the JVM reports 0: no value yet.
            if [[ -n $heap && $heap != 0 ]]; then HEAP[$pid]=$heap; fi
            resident=$(awk '/^rbridge_memserver_resident_bytes / { printf "%.0f", $NF }' <<<"$page")
            local over=
            [[ -n $resident ]] && over=$((rss - resident / 1024))
            [[ -n $rss ]] || continue
            echo "$t,$name,$pid,$rss,$threads,$fds,${direct},${HEAP[$pid]:-},${resident},${over},${lost},${degraded},$stable,0," \
                >>"$WORK/samples.csv"
        done
    done
}

# --- quiet samples of the bridge: between fio runs, no NBD connection open ------------------------------------
# The bridge's fds, threads and payload buffers follow its NBD connections (16 while all jobs run, fewer as they
# finish); samples taken with none open, right after a full GC, compare like with like. Rows get quiet=1.
LAST_QUIET=-999999
quiet_sample() {
    local t pid page conns t0=$SECONDS
    t=$(now)
    (( t - LAST_QUIET >= SAMPLE )) || return 0
    pid=$(pid_of bridge)
    [[ -n $pid && -r /proc/$pid/status ]] || return 0
    until [[ $(metric "$BR_METRICS" rbridge_nbd_connections_open "") == 0 ]]; do
        (( SECONDS - t0 <= 5 )) || return 0 # connections still closing: skip this one, the next round comes
        sleep 0.2
    done
    # Direct buffers dropped by finished connections are freed only when the GC collects them: a full GC first
    # makes direct memory and heap comparable between samples.
    timeout 30 "$JCMD" "$pid" GC.run >/dev/null 2>&1 || return 0
    page=$(curl -fsS --max-time 5 "$BR_METRICS" 2>/dev/null) || return 0
    LAST_QUIET=$t
    local rss threads fds direct heap lost degraded pooled stable=1
    [[ -e $WORK/unstable ]] && stable=0
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status")
    threads=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status")
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    direct=$(awk '/^jvm_buffer_memory_used_bytes\{/ && /id="direct"/ { printf "%.0f", $NF }' <<<"$page")
    heap=$(awk '/^jvm_gc_live_data_size_bytes/ { printf "%.0f", $NF }' <<<"$page")
    [[ $heap == 0 ]] && heap=
    pooled=$(awk '/^rbridge_nbd_payload_pooled_bytes / { printf "%.0f", $NF }' <<<"$page")
    lost=$(awk '/^rbridge_volume_slabs\{/ && /state="lost"/ { s += $NF } END { printf "%.0f", s }' <<<"$page")
    degraded=$(awk '/^rbridge_volume_slabs\{/ && /state="degraded"/ { s += $NF } END { printf "%.0f", s }' <<<"$page")
    echo "$t,bridge,$pid,$rss,$threads,$fds,$direct,$heap,,,$lost,$degraded,$stable,1,$pooled" >>"$WORK/samples.csv"
}

# --- killer: a memserver SIGKILLed every KILL_EVERY seconds, restarted after DOWN seconds -------------------------
wait_healthy() { # wait_healthy SECONDS
    local t0=$SECONDS
    until healthy; do
        (( SECONDS - t0 <= $1 )) || return 1
        sleep 1
    done
}

killer() {
    set +e
    local n=0 i due pid
    while :; do
        n=$((n + 1))
        due=$((n * KILL_EVERY))
        (( due < DURATION )) || return 0 # no kill may land on the end of the run
        while (( $(now) < due )); do sleep 1; done
        i=$(( (n - 1) % 3 + 1 ))
        # The lock keeps kills and the bridge restart apart (fd 8 in this subshell only).
        exec 8>"$WORK/lock"
        if ! flock -w 600 8; then fail "kill $n: lock not free within 600 s"; continue; fi
        touch "$WORK/unstable"
        if ! wait_healthy 300; then
            fail "kill $n: volume not healthy within 300 s before the kill"
            rm -f "$WORK/unstable"; exec 8>&-; continue
        fi
        pid=$(pid_of "memserver$i")
        event "kill $n: SIGKILL memserver$i (pid $pid)"
        kill -KILL "$pid"
        sleep "$DOWN"
        start_memserver "$i" || { rm -f "$WORK/unstable"; exec 8>&-; continue; }
        event "kill $n: memserver$i restarted (pid $(pid_of "memserver$i"))"
        if wait_healthy 300; then
            event "kill $n: healthy again"
        else
            fail "kill $n: volume not healthy within 300 s after memserver$i came back"
        fi
        rm -f "$WORK/unstable"
        exec 8>&-
    done
}

T0=$(date +%s) # the clock of samples, rounds and kills starts with the load
sampler &
HELPERS+=($!)
killer &
HELPERS+=($!)

restart_bridge() {
    exec 9>"$WORK/lock"
    # In the background and waited for, so that Ctrl-C (whose trap runs only between commands) is not held off.
    flock -w 600 9 &
    wait $! || { fail "bridge restart: lock not free within 600 s"; exec 9>&-; return 1; }
    touch "$WORK/unstable"
    local pid t0=$SECONDS
    pid=$(pid_of bridge)
    event "bridge restart: SIGTERM pid $pid"
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        if (( SECONDS - t0 > 60 )); then
            fail "bridge restart: pid $pid still running 60 s after SIGTERM"
            kill -KILL "$pid"
            break
        fi
        sleep 0.2
    done
    start_bridge || { rm -f "$WORK/unstable"; exec 9>&-; return 1; }
    event "bridge restart: serving again as pid $(pid_of bridge) after $((SECONDS - t0)) s"
    "${RB[@]}" admin --bridge "127.0.0.1:$BR_APORT" volumes >>"$WORK/events.log" 2>&1 \
        || fail "bridge restart: admin volumes failed"
    wait_healthy 300 || fail "bridge restart: volume not healthy within 300 s"
    rm -f "$WORK/unstable"
    exec 9>&-
}

# --- the rounds -------------------------------------------------------------------------------------------------
echo "round,start,end,seed,kind" >"$WORK/rounds.csv"
round=0 restarted=0 ok=1
while (( $(now) < DURATION )); do
    round=$((round + 1))
    seed=$((1000 + round))
    t_start=$(now)
    if ! run_fio "round$round" "$seed"; then ok=0; break; fi
    echo "$round,$t_start,$(now),$seed,write+verify" >>"$WORK/rounds.csv"
    quiet_sample
    if (( !restarted && $(now) >= DURATION / 2 )); then
        restarted=1
        BEFORE=$(volume_hash before)
        [[ -n $BEFORE ]] || { ok=0; break; }
        restart_bridge || { ok=0; break; }
        if [[ $(volume_hash after) != "$BEFORE" ]]; then
            fail "bridge restart: the volume's sha256 changed across the restart (before $BEFORE, after $(cat "$WORK/hash-after"))"
            ok=0; break
        fi
        event "bridge restart: every byte of the volume reads back the same (sha256 $BEFORE)"
    fi
done
END_T=$(now)
event "load ended after $round rounds"
(( restarted )) || [[ $ok -eq 0 ]] || fail "the bridge was never restarted"
# The killer stops first, so no kill lands on the final look at the volume; a kill it left unfinished
# (a memserver down) shows as degraded there, which is allowed: only lost slabs fail.
kill "${HELPERS[1]}" 2>/dev/null || true
wait "${HELPERS[1]}" 2>/dev/null || true
"${RB[@]}" admin --bridge "127.0.0.1:$BR_APORT" volumes >"$WORK/volumes-end.txt" 2>&1 \
    || fail "admin volumes at the end failed"
cat "$WORK/volumes-end.txt"
sleep "$SAMPLE" # one more sample after the load
kill "${HELPERS[0]}" 2>/dev/null || true
wait "${HELPERS[0]}" 2>/dev/null || true
HELPERS=()
for name in bridge memserver1 memserver2 memserver3; do
    pid=$(pid_of "$name")
    [[ -n $pid ]] || continue
    { echo "# $name pid $pid, native memory since its baseline ($(grep " $name pid $pid\$" "$WORK/nmt-baselines" 2>/dev/null || echo none): t, name, pid)"
      timeout 30 "$JCMD" "$pid" VM.native_memory summary.diff 2>&1; } >"$WORK/nmt-$name.txt" || true
done

# --- verdict ----------------------------------------------------------------------------------------------------
printf 'DURATION=%s\nEND_T=%s\n' "$DURATION" "$END_T" >"$WORK/run.env"
verdict "$WORK" "$DURATION" "$END_T"
