#!/usr/bin/env bash
# How fast redundancy comes back after a memserver dies, and what the rebuild costs a client meanwhile.
# Run with --help for usage.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib.sh
source "$ROOT/bench/lib.sh"
SIZE=4G
SLAB=
RATE=
CHUNK=
IDLE=10
RW=randread
OUT=
TIMEOUT=900

usage() {
    cat <<EOF
Usage: bench/rebuild.sh [--size SIZE] [--slab SIZE] [--rebuild-rate SIZE] [--rebuild-chunk SIZE]
                        [--idle SEC] [--rw randread|randwrite|none] [--timeout SEC] [--out DIR] [--help]

Starts three rbridge memservers (tcp transport) and one bridge serving the volume "disk" of --size (default $SIZE)
with replicas=2 on them (and serve's --rebuild-rate and
--rebuild-chunk when given), and fills it (1 MiB sequential writes). Then:
  idle      a client (fio, nbd engine, one connection) runs 4K --rw (default $RW) at QD1 for --idle seconds
            (default $IDLE): its p50 and p99 completion latency with no rebuild going on (--rw none: no client,
            the rebuild alone)
  rebuild   the same client runs again; memserver 1 is killed (SIGKILL) and the bridge rebuilds every replica it
            held onto the two others; the admin interface (GET /volumes) is read every 0.2 s until every
            allocated slab is healthy again (at most --timeout seconds, default $TIMEOUT); the client stops there.
            The idle phase reads GET /volumes the same way, so both phases pay the same for it
Prints the bytes memserver 1 held for the volume (its capacity less its free bytes, as the bridge saw them
before the kill), the time from the kill to healthy, their ratio (GB/s, 10^9 bytes a second: the rebuild
rate, detection included), and the client's p50 and p99 idle and during the rebuild with the ratio of the
p99s. The memservers lend --size and 256 MiB each (the volume's two copies, and the room to rebuild one), so
the machine needs about three times --size of free memory. Needs fio (with its nbd engine), nbdinfo, curl and python3.
EOF
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --size) SIZE=$2; shift 2 ;;
        --slab) SLAB=$2; shift 2 ;;
        --rebuild-rate) RATE=$2; shift 2 ;;
        --rebuild-chunk) CHUNK=$2; shift 2 ;;
        --idle) IDLE=$2; shift 2 ;;
        --rw) RW=$2; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ $IDLE =~ ^[0-9]+$ && $IDLE -ge 1 ]] || { echo "--idle must be a positive whole number of seconds" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ && $TIMEOUT -ge 1 ]] || { echo "--timeout must be a positive whole number" >&2; exit 2; }
[[ $RW == randread || $RW == randwrite || $RW == none ]] || { echo "--rw must be randread, randwrite or none" >&2; exit 2; }
BYTES=$(numfmt --from=iec "$SIZE" 2>/dev/null) || { echo "--size must be a size such as 4G" >&2; exit 2; }
bench_require fio nbdinfo curl python3 setsid
CAPACITY="$((BYTES / 1048576 + 256))M" # the volume, and room for the manifest regions and a partial slab
bench_workdir "$OUT" rebuild

RB=(env RBRIDGE_NO_BUILD=1 "$ROOT/rbridge")
echo "# rbridge: $("$ROOT/rbridge" --version 2>&1 | tail -n 1)" # builds once when the sources are newer

MS=() MSPG=()
for i in 1 2 3; do
    port=$(free_port)
    spawn "memserver$i" "${RB[@]}" memserver --listen "127.0.0.1:$port" --capacity "$CAPACITY" --admin none \
        --metrics none
    MS+=("127.0.0.1:$port") MSPG+=("$SPAWNED")
    await 120 "memserver $i" grep -q "lending" "$WORK/memserver$i.log"
done
port=$(free_port) admin=$(free_port)
volume="disk,size=$SIZE,replicas=2${SLAB:+,slab=$SLAB}"
spawn bridge "${RB[@]}" serve --listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" --metrics none \
    --memserver "${MS[0]}" --memserver "${MS[1]}" --memserver "${MS[2]}" --volume "$volume" \
    ${RATE:+--rebuild-rate "$RATE"} ${CHUNK:+--rebuild-chunk "$CHUNK"}
URI="nbd://127.0.0.1:$port/disk"
ADMIN="http://127.0.0.1:$admin"
await 120 "the bridge" nbdinfo --size "$URI"
echo "# three memservers of $CAPACITY, volume $volume: filling"
fio --name=fill --ioengine=nbd --uri="$URI" --size="$SIZE" --rw=write --bs=1M --iodepth=8 \
    --output="$WORK/fill.log" >/dev/null

client() { # client NAME SECONDS: 4K $RW at QD1, JSON into $WORK/NAME.client.json (EXEC=exec: fio replaces the shell)
    if [[ $RW == none ]]; then ${EXEC:-} sleep "$2"; return; fi
    ${EXEC:-} fio --name="$1" --ioengine=nbd --uri="$URI" --size="$SIZE" --rw="$RW" --bs=4k --iodepth=1 --norandommap \
        --time_based --runtime="$2" --percentile_list=50:99 --output-format=json --output="$WORK/$1.client.json" >/dev/null
}

held() { # held ADDRESS -> bytes the memserver lends out now, as the bridge last heard (capacity - free)
    curl -fsS "$ADMIN/memservers" | python3 -c '
import json, sys
for m in json.load(sys.stdin):
    if m["memserver"] == sys.argv[1]:
        print(m["capacity"] - m["free"])' "$1"
}

# watch MODE SECONDS: reads GET /volumes; healthy means every allocated slab of every volume healthy (and at least
# one allocated). now: exit 0 if healthy; watch: read it every 0.2 s for SECONDS; until-healthy: every 0.2 s until
# healthy after having been degraded, printing that time (ns). One python process watches for the whole of a phase,
# in both phases, so the client pays the same for being watched (a curl and a python3 started every 0.2 s cost the
# client more than a slow rebuild does).
cat >"$WORK/watch.py" <<'EOF'
import json, sys, time, urllib.request
admin, mode, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
def healthy():
    with urllib.request.urlopen(admin + "/volumes", timeout=10) as r:
        v = json.load(r)
    return bool(v) and all(x["allocated"] > 0 and x["healthy"] == x["allocated"] for x in v)
if mode == "now":
    sys.exit(0 if healthy() else 1)
end, seen_degraded = time.monotonic() + limit, False
while time.monotonic() < end:
    h = healthy()
    if mode == "until-healthy":
        if h and seen_degraded:
            print(time.time_ns())
            sys.exit(0)
        seen_degraded = seen_degraded or not h
    time.sleep(0.2)
sys.exit(0 if mode == "watch" else 1)
EOF
watch() { python3 "$WORK/watch.py" "$ADMIN" "$@"; }
healthy() { watch now 0; }

await 60 "a healthy volume after the fill" healthy
if [[ $RW != none ]]; then
    echo "# idle: 4K $RW QD1 for ${IDLE}s (the admin interface watched as during the rebuild)"
    watch watch "$IDLE" &
    client idle "$IDLE"
    wait $!
fi

victim_bytes=$(held "${MS[0]}")
[[ -n $victim_bytes && $victim_bytes -gt 0 ]] || { echo "rebuild: memserver 1 holds nothing of the volume" >&2; exit 1; }
(EXEC="exec" client rebuild "$TIMEOUT") & # $! is fio itself, which a SIGINT ends with its report
fio_pid=$!
who="client running"
[[ $RW == none ]] && who="no client"
echo "# rebuild: SIGKILL memserver 1 (${MS[0]}, $victim_bytes bytes of the volume), $who"
killed_ns=$(date +%s%N)
kill -KILL -- "-${MSPG[0]}"
wait "${MSPG[0]}" 2>/dev/null || true # reaped here, so the shell does not report the kill as a job that died
healthy_ns=$(watch until-healthy "$TIMEOUT") ||
    { echo "rebuild: the volume was not healthy within ${TIMEOUT}s" >&2; exit 1; }
kill -INT "$fio_pid" 2>/dev/null || true # (sleep, with --rw none)
wait "$fio_pid" || true

PYTHONPATH="$ROOT/bench" PYTHONDONTWRITEBYTECODE=1 python3 - "$WORK" "$victim_bytes" "$killed_ns" "$healthy_ns" "$RW" "$SIZE" <<'EOF'
import sys
import fio_results
work, held, killed, healthy, rw, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
side = "read" if rw == "randread" else "write"
def lat(name):
    j = fio_results.load(work, name, "client")[side]  # it skips what fio prints before the JSON (the SIGINT)
    p = j["clat_ns"]["percentile"]
    return j["iops"], p["50.000000"] / 1000, p["99.000000"] / 1000
secs = (healthy - killed) / 1e9
print()
print("volume %s, replicas=2 on three memservers; memserver 1 killed, holding %.2f GB of it" % (size, held / 1e9))
print("time to healthy %.1f s, rebuild rate %.2f GB/s (detection included)" % (secs, held / 1e9 / secs))
if rw == "none":
    print("no client")
    sys.exit(0)
idle, during = lat("idle"), lat("rebuild")
print("client 4K %s QD1     IOPS   p50 us   p99 us" % rw)
print("  idle            %8.0f %8.1f %8.1f" % idle)
print("  during rebuild  %8.0f %8.1f %8.1f" % during)
print("p99 during / idle: %.2fx (goal: at most 2x, at least 1 GB/s)" % (during[2] / idle[2]))
EOF
[[ $KEEP -eq 1 ]] && echo "# logs and fio JSON kept in $WORK"
exit 0
