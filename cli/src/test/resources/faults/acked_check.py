#!/usr/bin/python3
"""Checks that blocks 0..LAST written by acked_writer.py read back intact. Exit 1 naming the first bad block.

Usage: acked_check.py URI BASE_BYTES BLOCK_BYTES LAST
"""
import struct
import sys

import nbd

uri, base, block, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
h = nbd.NBD()
h.connect_uri(uri)
for i in range(last + 1):
    want = struct.pack("<QQ", i, 0x5242524944474521) * (block // 16)
    got = h.pread(block, base + i * block)
    if got != want:
        print("block %d at offset %d does not hold what was acknowledged" % (i, base + i * block))
        sys.exit(1)
print("acked_check: %d acknowledged blocks intact" % (last + 1))
