#!/usr/bin/python3
"""Reads (and optionally writes) 4 KiB at the start of every slab of an export, one request at a time, and prints one
JSON object per slab: its index, whether it worked, the errno name if not ("EIO"), and how long the request took.

Usage: slab_probe.py URI SLAB_BYTES [--write]
"""
import errno
import json
import sys
import time

import nbd

uri, slab = sys.argv[1], int(sys.argv[2])
write = "--write" in sys.argv[3:]
h = nbd.NBD()
h.connect_uri(uri)
size = h.get_size()
out = []
for i in range((size + slab - 1) // slab):
    t0 = time.monotonic()
    try:
        if write:
            h.pwrite(bytes([i % 251 + 1]) * 4096, i * slab)
        data = h.pread(4096, i * slab)
        ok, err = True, ""
        if write and data != bytes([i % 251 + 1]) * 4096:
            ok, err = False, "MISMATCH"
    except nbd.Error as e:
        # Depending on the libnbd version, errno is a number or already its name.
        n = e.errno
        ok, err = False, errno.errorcode.get(n, str(n)) if isinstance(n, int) else str(n)
    out.append({"slab": i, "ok": ok, "errno": err, "seconds": round(time.monotonic() - t0, 3)})
print(json.dumps(out))
