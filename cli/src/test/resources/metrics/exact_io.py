#!/usr/bin/python3
"""Issues exactly WRITES writes of SIZE bytes (at i * STRIDE) then READS reads of 4096 bytes of what it wrote, and
checks them: no flush, no other command, so a server's request counters must move by exactly these numbers.
Usage: exact_io.py URI WRITES SIZE STRIDE READS"""
import sys

import nbd

uri, writes, size, stride, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
h = nbd.NBD()
h.connect_uri(uri)
for i in range(writes):
    h.pwrite(bytes([i % 251 + 1]) * size, i * stride)
for j in range(reads):
    i = j % writes
    got = h.pread(4096, i * stride)
    if got != bytes([i % 251 + 1]) * 4096:
        sys.exit("read %d at %d returned other bytes" % (j, i * stride))
h.shutdown()
print("ok %d writes %d reads" % (writes, reads))
