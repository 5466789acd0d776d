# Sourced by the bench scripts that start servers (fio-bridge.sh, fio-vs-nbdkit.sh, hedged-reads.sh): every process
# in a process group of its own, all of them stopped when the script exits however it exits; free ports; waiting for
# a server. The sourcing script calls bench_workdir before it starts anything (logs go to WORK/NAME.log), and may
# define bench_before_stop, which the exit runs first (resume stopped processes, end a loop).

WORK=
KEEP=0
BENCH_GROUPS=() # process group ids (setsid) of everything started, in order

bench_workdir() { # bench_workdir DIR NAME -> WORK: DIR, kept, when given; else a temporary folder removed on exit
    if [[ -n $1 ]]; then
        mkdir -p "$1"
        WORK=$(cd "$1" && pwd)
        KEEP=1
    else
        WORK=$(mktemp -d "${TMPDIR:-/tmp}/$2.XXXXXX")
        KEEP=0
    fi
}

spawn() { # spawn LOGNAME COMMAND... -> starts it in its own process group, output in $WORK/LOGNAME.log; sets SPAWNED
    local log=$1; shift
    setsid "$@" >"$WORK/$log.log" 2>&1 </dev/null &
    SPAWNED=$!
    BENCH_GROUPS+=("$SPAWNED")
}

stop_group() { # stop_group PGID: SIGTERM the process group, SIGKILL what is left after 5 s
    local p=$1
    kill -TERM -- "-$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
}

bench_cleanup() {
    local rc=$? i
    set +e
    declare -F bench_before_stop >/dev/null && bench_before_stop
    # the last started first: front ends (bridges give their leases back, the nbd plugin lets go of nbdkit memory)
    # before what they stand on
    for ((i = ${#BENCH_GROUPS[@]} - 1; i >= 0; i--)); do stop_group "${BENCH_GROUPS[$i]}"; done
    [[ ${KEEP:-0} -eq 1 || -z ${WORK:-} ]] || rm -rf "$WORK"
    exit $rc
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

bench_split_cpus() { # with PIN=split on 2+ CPUs: SERVER_CPUS and FIO_CPUS (each half, unless set); else PIN=none
    local ncpu half
    ncpu=$(nproc)
    if [[ $PIN == split && $ncpu -lt 2 ]]; then PIN=none; fi
    if [[ $PIN == split ]]; then
        command -v taskset >/dev/null || { echo "taskset not found (use --pin none)" >&2; exit 2; }
        half=$((ncpu / 2))
        SERVER_CPUS=${SERVER_CPUS:-0-$((half - 1))}
        FIO_CPUS=${FIO_CPUS:-$half-$((ncpu - 1))}
    fi
}

bench_require() { # bench_require TOOL...: exits 2 naming the first one missing; "fio" also needs its nbd engine
    local t
    for t in "$@"; do
        command -v "$t" >/dev/null || { echo "$t not found" >&2; exit 2; }
    done
    if [[ " $* " == *" fio "* ]]; then
        fio --enghelp=nbd 2>/dev/null | grep -q '^uri' || { echo "fio has no nbd engine" >&2; exit 2; }
    fi
}

# fio's arguments for each row of the NBD tables (fio-bridge.sh adds its nbdcopy rows)
declare -A ROWARGS=(
    [rr1]="--rw=randread --bs=4k --iodepth=1 --norandommap --randrepeat=0"
    [rw1]="--rw=randwrite --bs=4k --iodepth=1 --norandommap --randrepeat=0"
    [rr32]="--rw=randread --bs=4k --iodepth=32 --norandommap --randrepeat=0"
    [rw32]="--rw=randwrite --bs=4k --iodepth=32 --norandommap --randrepeat=0"
    [sr]="--rw=read --bs=1M --iodepth=8"
    [sw]="--rw=write --bs=1M --iodepth=8"
)

bench_rows() { # bench_rows ROWS -> ROWLIST, every one a key of ROWARGS; exits 2 naming one that is not
    local r
    IFS=, read -r -a ROWLIST <<<"$1"
    for r in "${ROWLIST[@]}"; do
        [[ -n ${ROWARGS[$r]:-} ]] || { echo "unknown row '$r' (see --help)" >&2; exit 2; }
    done
}

free_port() { # a TCP port free on 127.0.0.1 right now
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

await() { # await SECONDS WHAT COMMAND...: until COMMAND succeeds; exits naming WHAT after SECONDS
    local limit=$1 what=$2 t0=$SECONDS; shift 2
    until "$@" >/dev/null 2>&1; do
        (( SECONDS - t0 <= limit )) || { echo "${0##*/}: $what did not come up within ${limit}s" >&2; exit 1; }
        sleep 0.3
    done
}

await_nbd() { # await_nbd NAME URI PID TIMEOUT: until nbdinfo reads the export's size (into $WORK/NAME.size)
    local name=$1 uri=$2 pid=$3 tmo=$4 t0=$SECONDS
    until timeout 10 nbdinfo --size "$uri" >"$WORK/$name.size" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$name exited before accepting connections; last log lines:" >&2
            tail -n 20 "$WORK/$name.log" >&2
            exit 1
        fi
        if (( SECONDS - t0 > tmo )); then
            echo "$name did not accept connections at $uri within ${tmo}s" >&2
            exit 1
        fi
        sleep 0.3
    done
}
