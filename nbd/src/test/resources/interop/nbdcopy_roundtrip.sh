#!/usr/bin/env bash
# nbdcopy round trip: local file -> NBD export -> local file, checksummed.
#
# Usage: nbdcopy_roundtrip.sh URI [SIZE_MIB]
#   URI       nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path
#   SIZE_MIB  amount of data to copy (default 256); the export must be at
#             least that big.  Only the first SIZE_MIB MiB are compared
#             (nbdcopy 1.14 has no --length, so the whole export is copied
#             back into a sparse file and the first SIZE_MIB MiB hashed).
#
# Round 1: SIZE_MIB MiB of random data -> export (nbdcopy --flush, default
#          multi-connection/parallel), copied back with default settings
#          (which uses block status to skip holes) -> sha256 must match.
# Round 2: the same data with zero runs punched in (4 MiB aligned, 1 MiB
#          unaligned, scattered 4 KiB blocks, the last MiB) is copied over
#          round 1's data; nbdcopy turns zero runs into WRITE_ZEROES, so the
#          export must really zero previously written data.  Copied back
#          twice: default settings, and --synchronous --connections=1
#          --no-extents --request-size=65536 (plain sequential reads).
# Prints the checksums; exit 0 on success, 1 with one line on stderr if a
# checksum differs (with the first differing offset), 2 on setup errors.
# Env: NBD_INTEROP_TIMEOUT (default 120) bounds each nbdcopy run.
set -euo pipefail

NAME=nbdcopy_roundtrip
fail() { echo "$NAME: FAIL: $*" >&2; exit 1; }
die() { echo "$NAME: ERROR: $*" >&2; exit 2; }

[[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 URI [SIZE_MIB]"
URI=$1
SIZE_MIB=${2:-256}
[[ $SIZE_MIB =~ ^[0-9]+$ && $SIZE_MIB -ge 8 ]] || die "SIZE_MIB must be an integer >= 8"
TMO=${NBD_INTEROP_TIMEOUT:-120}
for t in nbdcopy nbdinfo sha256sum cmp timeout; do
    command -v "$t" >/dev/null || die "$t not found"
done

BYTES=$((SIZE_MIB * 1024 * 1024))
START=$(date +%s.%N)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nbdcopy_rt.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

EXPORT_SIZE=$(timeout 30 nbdinfo --size "$URI" 2>"$WORK/nbdinfo.err") ||
    die "nbdinfo --size $URI failed: $(tail -n1 "$WORK/nbdinfo.err")"
[[ $EXPORT_SIZE -ge $BYTES ]] || die "export is $EXPORT_SIZE bytes, smaller than $BYTES"

run() { # run with a time bound; on failure report the command
    if ! timeout "$TMO" "$@" 2>"$WORK/err"; then
        fail "command failed or timed out: $* ($(tail -n1 "$WORK/err"))"
    fi
}

sum_head() { head -c "$BYTES" "$1" | sha256sum | cut -d' ' -f1; }

compare() { # compare <label> <expected-file> <got-file>
    local exp got
    exp=$(sum_head "$2")
    got=$(sum_head "$3")
    if [[ $exp != "$got" ]]; then
        local first
        first=$(cmp -n "$BYTES" "$2" "$3" 2>&1 | head -n1 || true)
        fail "$1: sha256 differs: expected $exp got $got ($first; cmp counts bytes from 1)"
    fi
    echo "$NAME: $1 sha256 $got"
}

# Round 1: random data.
head -c "$BYTES" /dev/urandom >"$WORK/a.img"
run nbdcopy --flush "$WORK/a.img" "$URI"
run nbdcopy "$URI" "$WORK/a.out"
[[ $(stat -c %s "$WORK/a.out") -eq $EXPORT_SIZE ]] ||
    fail "copied-back file is $(stat -c %s "$WORK/a.out") bytes, export is $EXPORT_SIZE"
compare "round1 (random)" "$WORK/a.img" "$WORK/a.out"
rm -f "$WORK/a.out"

# Round 2: same data with zero runs, written over round 1.
cp "$WORK/a.img" "$WORK/b.img"
zero_at() { dd if=/dev/zero of="$WORK/b.img" conv=notrunc status=none \
               oflag=seek_bytes iflag=count_bytes seek="$1" count="$2"; }
zero_at $((8 * 1048576)) $((4 * 1048576))               # 4 MiB, 1 MiB aligned
zero_at $((BYTES / 2 + 12345)) 1048576                  # 1 MiB, unaligned
for i in 3 5 7 11 13; do zero_at $((i * 1048576 + 4096 * i)) 4096; done
zero_at $((BYTES - 1048576)) 1048576                    # last MiB
rm -f "$WORK/a.img"
run nbdcopy --flush "$WORK/b.img" "$URI"
run nbdcopy "$URI" "$WORK/b.out"
compare "round2 (zero runs, default copy-back)" "$WORK/b.img" "$WORK/b.out"
rm -f "$WORK/b.out"
run nbdcopy --synchronous --connections=1 --no-extents --request-size=65536 "$URI" "$WORK/b.out"
compare "round2 (synchronous, no extents)" "$WORK/b.img" "$WORK/b.out"

END=$(date +%s.%N)
echo "$NAME: OK $SIZE_MIB MiB x 2 rounds copied in and out (3 copy-backs), checksums match," \
     "export $EXPORT_SIZE bytes, $(awk "BEGIN{printf \"%.1f\", $END - $START}")s"
