#!/usr/bin/python3
"""Reads (and optionally writes) 4 KiB at the start of every slab of an export, one request at a time, and prints one
JSON object per slab: its index, whether it worked, the errno name if not ("EIO", or "MISMATCH" when the bytes read
are not the expected ones), and how long the request took.

Usage: slab_probe.py URI SLAB_BYTES [--write] [--seed N] [--expect] [--wait]

The bytes of slab i depend on i and the seed (default 0), so a caller writes a new pattern with a new seed and can
tell the latest acknowledged write from an older one (a stale replica) when it reads back. --write writes the pattern
and reads it back; --expect (without --write) only reads and checks that the pattern of --seed is there. --wait
connects, prints "connected" and waits for a line on stdin before the first request (a client that was connected
before something happened to its server).
"""
import errno
import json
import sys
import time

import nbd

uri, slab = sys.argv[1], int(sys.argv[2])
rest = sys.argv[3:]
write = "--write" in rest
expect = write or "--expect" in rest
seed = int(rest[rest.index("--seed") + 1]) if "--seed" in rest else 0


def pattern(i):
    # seed 0 keeps the historical i % 251 + 1; other seeds shift every slab's byte (never 0, never the same as seed 0's)
    return bytes([(i + seed * 97) % 251 + 1]) * 4096


h = nbd.NBD()
h.connect_uri(uri)
size = h.get_size()
if "--wait" in rest:
    print("connected", flush=True)
    sys.stdin.readline()
out = []
for i in range((size + slab - 1) // slab):
    t0 = time.monotonic()
    try:
        if write:
            h.pwrite(pattern(i), i * slab)
        data = h.pread(4096, i * slab)
        ok, err = True, ""
        if expect and data != pattern(i):
            ok, err = False, "MISMATCH"
    except nbd.Error as e:
        # Depending on the libnbd version, errno is a number or already its name.
        n = e.errno
        ok, err = False, errno.errorcode.get(n, str(n)) if isinstance(n, int) else str(n)
    out.append({"slab": i, "ok": ok, "errno": err, "seconds": round(time.monotonic() - t0, 3)})
print(json.dumps(out))
