#!/usr/bin/python3
"""Reads (and optionally writes) every slab of an export whole, one request per slab and one slab at a time, and
prints one JSON object per slab: its index, whether it worked, the errno name if not ("EIO", or "MISMATCH" when the
bytes read are not the expected ones), and how long the request took.

Usage: slab_probe.py URI SLAB_BYTES [--write] [--seed N] [--expect] [--wait]

The whole slab, not a sample of it: a replica that holds only part of the latest write (a rebuild that copied the
first chunk, a fenced bridge's write that landed past the first page) reads back wrong somewhere inside the slab.
Each 4 KiB page of slab i holds one byte repeated that depends on i, the page and the seed (default 0), so a caller
writes a new pattern with a new seed and can tell the latest acknowledged write from an older one (a stale replica)
when it reads back, and a page copied to the wrong place reads back wrong too. --write writes the pattern and reads
it back; --expect (without --write) only reads and checks that the pattern of --seed is there. --wait connects,
prints "connected" and waits for a line on stdin before the first request (a client that was connected before
something happened to its server).
"""
import errno
import json
import sys
import time

import nbd

PAGE = 4096

uri, slab = sys.argv[1], int(sys.argv[2])
rest = sys.argv[3:]
write = "--write" in rest
expect = write or "--expect" in rest
seed = int(rest[rest.index("--seed") + 1]) if "--seed" in rest else 0


def pattern(i, length):
    # Page p of slab i: a byte never 0; two seeds below 251 never give one page the same byte (97 is prime to 251).
    return b"".join(bytes([(i + p * 7 + seed * 97) % 251 + 1]) * PAGE for p in range(length // PAGE))


def first_wrong_page(data, want):
    for p in range(0, len(want), PAGE):
        if data[p:p + PAGE] != want[p:p + PAGE]:
            return p // PAGE
    return None


h = nbd.NBD()
h.connect_uri(uri)
size = h.get_size()
if "--wait" in rest:
    print("connected", flush=True)
    sys.stdin.readline()
out = []
for i in range((size + slab - 1) // slab):
    length = min(slab, size - i * slab)
    want = pattern(i, length)
    t0 = time.monotonic()
    wrong = None
    try:
        if write:
            h.pwrite(want, i * slab)
        data = h.pread(length, i * slab)
        ok, err = True, ""
        if expect and data != want:
            ok, err, wrong = False, "MISMATCH", first_wrong_page(data, want)
    except nbd.Error as e:
        # Depending on the libnbd version, errno is a number or already its name.
        n = e.errno
        ok, err = False, errno.errorcode.get(n, str(n)) if isinstance(n, int) else str(n)
    out.append({"slab": i, "ok": ok, "errno": err, "seconds": round(time.monotonic() - t0, 3)})
    if wrong is not None:  # for the reader of a failure; the JSON's fields stay what callers parse
        print(f"slab {i}: first wrong page {wrong}", file=sys.stderr)
print(json.dumps(out))
