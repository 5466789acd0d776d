#!/usr/bin/env bash
# fio data-integrity run through fio's built-in libnbd engine (ioengine=nbd).
#
# Usage: fio_verify.sh URI [SIZE_PER_JOB_MIB]
#   URI               nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path
#                     (passed to fio as uri=; fio's nbd engine needs size= and
#                     no filename=)
#   SIZE_PER_JOB_MIB  default 256; the export must hold 2 x this
#
# Runs 2 jobs (numjobs=2), each on its own NBD connection and on its own
# disjoint region (offset_increment = size): randwrite, bssplit 4k/50:64k/50,
# iodepth 32, verify=crc32c with do_verify=1 and verify_fatal=1, i.e. every
# block is written with a checksummed header and then read back and checked.
# Asserted from --output-format=json (not from the exit code alone):
# fio exit 0, every job's error == 0, each job wrote exactly its size and
# read back (verified) exactly as many bytes as it wrote.
# Exit 0 with a summary line; 1 with one line on stderr; 2 on setup errors.
# NBD_INTEROP_TIMEOUT (default 120) bounds the fio run.
set -euo pipefail

NAME=fio_verify
fail() { echo "$NAME: FAIL: $*" >&2; exit 1; }
die() { echo "$NAME: ERROR: $*" >&2; exit 2; }

[[ $# -ge 1 && $# -le 2 ]] || die "usage: $0 URI [SIZE_PER_JOB_MIB]"
URI=$1
SZ_MIB=${2:-256}
[[ $SZ_MIB =~ ^[0-9]+$ && $SZ_MIB -ge 1 ]] || die "SIZE_PER_JOB_MIB must be a positive integer"
TMO=${NBD_INTEROP_TIMEOUT:-120}
for t in fio nbdinfo python3 timeout; do
    command -v "$t" >/dev/null || die "$t not found"
done
fio --enghelp=nbd 2>/dev/null | grep -q '^uri' || die "this fio has no nbd ioengine"

START=$(date +%s.%N)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fio_verify.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

EXPORT_SIZE=$(timeout 30 nbdinfo --size "$URI" 2>"$WORK/nbdinfo.err") ||
    die "nbdinfo --size $URI failed: $(tail -n1 "$WORK/nbdinfo.err")"
NEED=$((2 * SZ_MIB * 1048576))
[[ $EXPORT_SIZE -ge $NEED ]] || die "export is $EXPORT_SIZE bytes, need $NEED"

cd "$WORK"   # fio may drop verify state files into the current directory
rc=0
timeout "$TMO" fio --name=nbdverify --ioengine=nbd --uri="$URI" \
    --rw=randwrite --bssplit=4k/50:64k/50 --iodepth=32 \
    --size="${SZ_MIB}M" --numjobs=2 --offset_increment="${SZ_MIB}M" \
    --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_dump=0 --verify_state_save=0 \
    --output-format=json --output="$WORK/fio.json" >"$WORK/fio.log" 2>&1 || rc=$?
if [[ $rc -ne 0 ]]; then
    msg=$(cat "$WORK/fio.log" "$WORK/fio.json" 2>/dev/null |
          grep -i -m1 -E 'verify|bad|error|fail' | tr -s ' ' || true)
    [[ $rc -eq 124 ]] && fail "fio timed out after ${TMO}s"
    fail "fio exit code $rc: ${msg:-$(tail -n1 "$WORK/fio.log")}"
fi

SUMMARY=$(python3 - "$WORK/fio.json" "$((SZ_MIB * 1048576))" <<'EOF'
import json, sys
path, size = sys.argv[1], int(sys.argv[2])
txt = open(path).read()
txt = txt[txt.index("{"):]            # fio may print engine messages first
d = json.loads(txt)
jobs = d.get("jobs", [])
if len(jobs) != 2:
    print("FAIL expected 2 jobs in fio JSON, got %d" % len(jobs)); sys.exit(0)
tw = tr = ios = 0
for i, j in enumerate(jobs):
    w, r = j["write"], j["read"]
    if j.get("error", 0) != 0:
        print("FAIL job %d reported error %d (verify failure or I/O error)" % (i, j["error"])); sys.exit(0)
    if w["io_bytes"] != size:
        print("FAIL job %d wrote %d bytes, expected %d" % (i, w["io_bytes"], size)); sys.exit(0)
    if r["io_bytes"] != w["io_bytes"]:
        print("FAIL job %d verified (read back) %d bytes but wrote %d"
              % (i, r["io_bytes"], w["io_bytes"])); sys.exit(0)
    tw += w["io_bytes"]; tr += r["io_bytes"]; ios += w["total_ios"] + r["total_ios"]
print("OK 2 jobs, %d MiB written and %d MiB verified (crc32c), %d I/Os, 0 errors"
      % (tw >> 20, tr >> 20, ios))
EOF
) || fail "cannot parse fio JSON output"
[[ $SUMMARY == OK* ]] || fail "${SUMMARY#FAIL }"

END=$(date +%s.%N)
echo "$NAME: $SUMMARY, $(awk "BEGIN{printf \"%.1f\", $END - $START}")s"
