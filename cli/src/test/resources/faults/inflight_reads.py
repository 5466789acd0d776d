#!/usr/bin/python3
"""Puts COUNT 4 KiB reads in flight on one NBD connection at once (distinct offsets, 64 KiB apart), prints
"submitted", then waits for every one of them and checks each read what the first 8 bytes of its block should hold
(the block's offset, written before by the test). Exit 1 on any error or mismatch.

Usage: inflight_reads.py URI COUNT
"""
import struct
import sys

import nbd

uri, count = sys.argv[1], int(sys.argv[2])
h = nbd.NBD()
h.connect_uri(uri)
bufs = []
for i in range(count):
    b = nbd.Buffer(4096)
    h.aio_pread(b, i * 65536)
    bufs.append(b)
print("submitted", h.aio_in_flight(), flush=True)
while h.aio_in_flight() > 0:
    h.poll(-1)
for i, b in enumerate(bufs):
    got = struct.unpack("<Q", b.to_bytearray()[:8])[0]
    if got != i * 65536:
        print("read %d returned block %d" % (i, got))
        sys.exit(1)
print("done", count, flush=True)
