#!/usr/bin/python3
"""A well-behaved NBD client that runs beside an attack: one request at a time, it writes a 4 KiB block with a
pattern naming the cycle, reads it back and checks every byte, then rests a little; every tenth cycle it also opens
a new connection (handshake included), reads a block and closes it, so refused or stalled new connections show too.

Prints one line per cycle: "ok MICROS" (the cycle's time), or "err MESSAGE" and exits 1 on any failure. Runs until
killed. Usage: well_behaved.py URI BASE_BYTES [REST_MILLIS]
"""
import struct
import sys
import time

import nbd

BLOCK = 4096
SLOTS = 256

uri, base = sys.argv[1], int(sys.argv[2])
rest = (int(sys.argv[3]) if len(sys.argv) > 3 else 20) / 1000.0


def pattern(i):
    return struct.pack("<QQ", i, 0x57454C4C42454856) * (BLOCK // 16)


try:
    h = nbd.NBD()
    h.connect_uri(uri)
    i = 0
    while True:
        start = time.monotonic()
        offset = base + (i % SLOTS) * BLOCK
        data = pattern(i)
        h.pwrite(data, offset)
        back = h.pread(BLOCK, offset)
        if back != data:
            print("err cycle %d: read back differs from what was written at offset %d" % (i, offset), flush=True)
            sys.exit(1)
        if i % 10 == 9:
            fresh = nbd.NBD()
            fresh.connect_uri(uri)
            fresh.pread(BLOCK, base)
            fresh.shutdown()
            del fresh
        print("ok %d" % int((time.monotonic() - start) * 1e6), flush=True)
        i += 1
        time.sleep(rest)
except nbd.Error as e:
    print("err %s" % e, flush=True)
    sys.exit(1)
