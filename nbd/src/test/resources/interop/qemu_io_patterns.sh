#!/usr/bin/env bash
# qemu-io / qemu-img interop: pattern writes and verifying reads through
# QEMU's NBD block driver, then qemu-img compare against a local raw file.
#
# Usage: qemu_io_patterns.sh URI
#   URI  nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path
#        (the export must be >= 1 GiB; it is zeroed first, so any prior
#        content is fine)
#
# 1. One qemu-io session on the export: write -z over the whole export,
#    then write -P at aligned/unaligned offsets and sizes, the last 4 KiB,
#    a FUA write (-f), writev, aio_write batch + aio_flush, write -z and
#    write -z -u (may unmap) inside data, discard followed by a rewrite,
#    overlapping writes, flush.
# 2. The same commands on a local sparse raw file of the same size.
# 3. A second qemu-io session (new connection) reads everything back with
#    read -P / readv -P / aio_read -P, including zero gaps around data.
#    qemu-io exits 0 even when an aio_read pattern check fails, so the
#    output is also scanned for "failed"/"error".
#    qemu-img map (block status as qemu sees it) must not report any
#    written range as zero.
# 4. qemu-img compare export vs file -> must say identical (exit 0).
# 5. One byte changed on the export in a zero area -> qemu-img compare must
#    exit 1 and report the sector of that byte; restore -> identical again;
#    one byte changed inside data -> exit 1 at that sector.
# Exit 0 with a summary line; exit 1 with one line on stderr on a
# difference, 2 on setup errors.  NBD_INTEROP_TIMEOUT (default 120) bounds
# each qemu command.
set -euo pipefail

NAME=qemu_io_patterns
fail() { echo "$NAME: FAIL: $*" >&2; exit 1; }
die() { echo "$NAME: ERROR: $*" >&2; exit 2; }

[[ $# -eq 1 ]] || die "usage: $0 URI"
URI=$1
TMO=${NBD_INTEROP_TIMEOUT:-120}
for t in qemu-io qemu-img timeout truncate; do
    command -v "$t" >/dev/null || die "$t not found"
done
START=$(date +%s.%N)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/qemu_io_pat.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

SIZE=$(timeout "$TMO" qemu-img info -f raw --output=json "$URI" 2>"$WORK/info.err" |
       sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p') || true
[[ -n $SIZE ]] || die "cannot get export size with qemu-img info $URI: $(tail -n1 "$WORK/info.err")"
[[ $SIZE -ge $((1024 * 1048576)) ]] || die "export is $SIZE bytes, need >= 1 GiB"

M=1048576
WRITES=(
    "write -z 0 $SIZE"
    "write -P 0x11 0 64k"
    "write -P 0x22 65536 4k"
    "write -P 0x33 $((M + 512)) 3000"
    "write -P 0x44 $((SIZE - 4096)) 4096"
    "write -P 0x45 $((SIZE - 4096 - 100)) 100"
    "write -P 0x55 $((100 * M)) 1M"
    "write -f -P 0x66 $((200 * M + 7)) 12345"
    "writev -P 0x77 $((300 * M)) 4k 512 1k 8k"
    "aio_write -P 0x88 $((400 * M)) 64k"
    "aio_write -P 0x99 $((400 * M + 65536)) 64k"
    "aio_write -P 0xaa $((401 * M)) 1"
    "aio_write -P 0xab $((401 * M + 4097)) 131071"
    "aio_flush"
    "write -P 0xbb $((500 * M)) 2M"
    "write -z $((500 * M + 524288)) 512k"
    "write -z -u $((501 * M)) 256k"
    "write -P 0xcc $((600 * M)) 2M"
    "discard $((600 * M)) 1M"
    "write -P 0xcd $((600 * M)) 1M"
    "write -P 0xdd $((700 * M)) 64k"
    "write -P 0xde $((700 * M + 32768)) 64k"
    "flush"
)
READS=(
    "read -P 0x11 0 64k"
    "read -P 0x22 65536 4k"
    "read -P 0 69632 $((M + 512 - 69632))"
    "read -P 0x33 $((M + 512)) 3000"
    "read -P 0 $((M + 3512)) 10000"
    "read -P 0x45 $((SIZE - 4196)) 100"
    "read -P 0x44 $((SIZE - 4096)) 4096"
    "read -P 0 $((SIZE - M)) $((M - 4196))"
    "read -P 0 $((100 * M - 4096)) 4096"
    "read -P 0x55 $((100 * M)) 1M"
    "read -P 0 $((101 * M)) 4096"
    "read -P 0 $((200 * M)) 7"
    "read -P 0x66 $((200 * M + 7)) 12345"
    "read -P 0 $((200 * M + 12352)) 100"
    "readv -P 0x77 $((300 * M)) 4k 512 1k 8k"
    "read -P 0 $((300 * M + 13824)) 512"
    "aio_read -P 0x88 $((400 * M)) 64k"
    "aio_read -P 0x99 $((400 * M + 65536)) 64k"
    "aio_read -P 0xaa $((401 * M)) 1"
    "aio_read -P 0 $((401 * M + 1)) 4096"
    "aio_read -P 0xab $((401 * M + 4097)) 131071"
    "aio_flush"
    "read -P 0xbb $((500 * M)) 512k"
    "read -P 0 $((500 * M + 524288)) 512k"
    "read -P 0 $((501 * M)) 256k"
    "read -P 0xbb $((501 * M + 262144)) 768k"
    "read -P 0xcd $((600 * M)) 1M"
    "read -P 0xcc $((601 * M)) 1M"
    "read -P 0xdd $((700 * M)) 32k"
    "read -P 0xde $((700 * M + 32768)) 64k"
    "read -P 0 $((700 * M + 98304)) 4096"
)

qio() { # qio <target> <cmd>... ; fails on exit code or on reported failures
    local target=$1; shift
    local args=()
    for c in "$@"; do args+=(-c "$c"); done
    local rc=0
    timeout "$TMO" qemu-io -f raw "${args[@]}" "$target" >"$WORK/qio.out" 2>&1 || rc=$?
    local bad
    bad=$(grep -i -m1 -E 'fail|error|denied|abort' "$WORK/qio.out" || true)
    if [[ $rc -ne 0 || -n $bad ]]; then
        fail "qemu-io on $target: ${bad:-exit code $rc: $(tail -n1 "$WORK/qio.out")}"
    fi
    NOPS=$(grep -c -E '^(wrote|read) ' "$WORK/qio.out" || true)
}

# 1+2: write on export and on the local model file.
qio "$URI" "${WRITES[@]}"
W_OPS=$NOPS
truncate -s "$SIZE" "$WORK/model.img"
qio "$WORK/model.img" "${WRITES[@]}"
# 3: read back through a new connection; sanity-check the model too.
qio "$URI" "${READS[@]}"
R_OPS=$NOPS
qio "$WORK/model.img" "${READS[@]}"

# 3b: qemu's view of block status: no written range may be reported as zero.
timeout "$TMO" qemu-img map -f raw --output=json "$URI" >"$WORK/map.json" 2>"$WORK/map.err" ||
    fail "qemu-img map failed: $(tail -n1 "$WORK/map.err")"
BAD=$(python3 - "$WORK/map.json" \
    0 69632   $((M + 512)) 3000   $((SIZE - 4196)) 4196   $((100 * M)) $M \
    $((200 * M + 7)) 12345   $((300 * M)) 13824   $((400 * M)) 131072 \
    $((401 * M)) 1   $((401 * M + 4097)) 131071   $((500 * M)) 524288 \
    $((501 * M + 262144)) 786432   $((600 * M)) $((2 * M))   $((700 * M)) 98304 <<'EOF2'
import json, sys
m = json.load(open(sys.argv[1]))
r = list(map(int, sys.argv[2:]))
for off, ln in zip(r[0::2], r[1::2]):
    for e in m:
        if e["start"] < off + ln and e["start"] + e["length"] > off and e.get("zero"):
            print("written range [%d,+%d) reported as zero by block status: %s" % (off, ln, e))
            sys.exit(0)
EOF2
) || fail "cannot parse qemu-img map output"
[[ -z $BAD ]] || fail "$BAD"

# 4: whole-image compare.
cmpimg() { # cmpimg <expected-rc> <label> [expected-offset]
    local rc=0
    timeout "$TMO" qemu-img compare -f raw -F raw "$URI" "$WORK/model.img" \
        >"$WORK/cmp.out" 2>&1 || rc=$?
    if [[ $rc -ne $1 ]]; then
        fail "$2: qemu-img compare exit $rc, expected $1: $(head -n1 "$WORK/cmp.out")"
    fi
    if [[ $# -ge 3 ]]; then
        local got
        got=$(sed -n 's/^Content mismatch at offset \([0-9]*\)!.*/\1/p' "$WORK/cmp.out")
        [[ $got == "$3" ]] ||
            fail "$2: qemu-img compare reported '$(head -n1 "$WORK/cmp.out")', expected mismatch at offset $3"
    fi
}
cmpimg 0 "export vs model file"

# 5: single-byte differences must be found.
X=$(( (RANDOM * 32768 + RANDOM) % (50 * M) + 800 * M ))   # in a zero area
qio "$URI" "write -P 0x5a $X 1"
cmpimg 1 "after changing byte $X (zero area)" $((X / 512 * 512))
qio "$URI" "write -z $X 1"
cmpimg 0 "after restoring byte $X"
Y=$((100 * M + 4096 + RANDOM % 4096))                      # inside 0x55 data
qio "$URI" "write -P 0x56 $Y 1"
cmpimg 1 "after changing byte $Y (data area)" $((Y / 512 * 512))

END=$(date +%s.%N)
echo "$NAME: OK $W_OPS qemu-io write ops and $R_OPS verified reads, qemu-img compare" \
     "identical over $SIZE bytes, 1-byte changes at $X and $Y detected," \
     "$(awk "BEGIN{printf \"%.1f\", $END - $START}")s"
