#!/usr/bin/python3
"""Writes the offset of every 64 KiB block into its first 8 bytes, for COUNT blocks. Usage: stamp_blocks.py URI COUNT"""
import struct
import sys

import nbd

uri, count = sys.argv[1], int(sys.argv[2])
h = nbd.NBD()
h.connect_uri(uri)
for i in range(count):
    h.pwrite(struct.pack("<Q", i * 65536) + bytes(4088), i * 65536)
h.flush()
