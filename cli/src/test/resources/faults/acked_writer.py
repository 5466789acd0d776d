#!/usr/bin/python3
"""Writes block after block (one request at a time, each block written once) and prints the index of each block
as soon as its write is acknowledged, so whoever kills the server knows exactly which writes were acknowledged.

Usage: acked_writer.py URI BASE_BYTES BLOCK_BYTES COUNT
"""
import struct
import sys

import nbd


def pattern(i, block):
    return struct.pack("<QQ", i, 0x5242524944474521) * (block // 16)


uri, base, block, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
h = nbd.NBD()
h.connect_uri(uri)
for i in range(count):
    h.pwrite(pattern(i, block), base + i * block)
    print(i, flush=True)
h.shutdown()
