#!/usr/bin/env python3
"""Multi-connection consistency check through libnbd (python3-libnbd).

Usage: python3 multiconn.py URI [--rounds R] [--seed S]

URI is nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path.

Checks:
  * can_multi_conn() is true on both connections (the server promises
    that a flush on one connection makes writes visible on all others);
  * A -> B: a fresh random 1 MiB pattern is written at several offsets
    (start, 4 KiB aligned and unaligned ones in the first 3/4 of the export,
    last MiB) on connection A, A
    flushes, then connection B reads every range back and compares;
  * B -> A: the same in the reverse direction, with new patterns, on
    the same offsets (so B's data must replace A's as seen from A);
  * each side also re-reads its own writes;
  * repeated --rounds times (default 4) with fresh random offsets.
Exit 0 and one summary line on success; exit 1 and one line on stderr
describing the first difference otherwise.  Bounded by a watchdog
(NBD_INTEROP_TIMEOUT seconds, default 120).
"""

import os
import sys

# nbdcheck (this folder) re-execs under /usr/bin/python3 if 'nbd' is missing.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import nbdcheck  # noqa: E402  (must come before `import nbd`)
import nbd  # noqa: E402

import argparse
import random
import time

from nbdcheck import Fail, first_diff, pread_all, pwrite_all  # noqa: E402

NAME = "multiconn"
MiB = 1024 * 1024
CHUNK = 1 * MiB


def connect(uri, label):
    h = nbd.NBD()
    h.set_handle_name(label)
    h.connect_uri(uri)
    if not h.can_multi_conn():
        raise Fail("connection %s: server does not advertise multi-conn "
                   "(can_multi_conn() is false)" % label)
    if h.is_read_only():
        raise Fail("connection %s: export is read-only" % label)
    if not h.can_flush():
        raise Fail("connection %s: server does not advertise flush" % label)
    return h


def verify(h, label, what, off, exp):
    got = pread_all(h, len(exp), off)
    if got != exp:
        d = first_diff(exp, got)
        raise Fail("%s: connection %s read at %d (len %d) differs at export offset %d: "
                   "expected 0x%02x got 0x%02x" % (what, label, off, len(exp), off + d,
                                                   exp[d], got[d]))


def transfer(src, src_label, dst, dst_label, offsets):
    patterns = {}
    for off in offsets:
        data = os.urandom(CHUNK)
        pwrite_all(src, data, off)
        patterns[off] = data
    src.flush()
    what = "%s->%s" % (src_label, dst_label)
    for off in offsets:
        verify(dst, dst_label, what, off, patterns[off])
    for off in offsets:
        verify(src, src_label, what + " (self re-read)", off, patterns[off])
    return len(offsets) * CHUNK


def main():
    ap = argparse.ArgumentParser(description="NBD multi-conn consistency check")
    ap.add_argument("uri")
    ap.add_argument("--rounds", type=int, default=4,
                    help="repeat with fresh offsets/patterns (default 4)")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    t0 = time.monotonic()

    ha = connect(a.uri, "A")
    hb = connect(a.uri, "B")
    size = ha.get_size()
    if hb.get_size() != size:
        raise Fail("connections disagree on size: A=%d B=%d" % (size, hb.get_size()))
    if size < 16 * MiB:
        raise Fail("export too small (%d bytes), need >= 16 MiB" % size)

    nbytes = 0
    for rnd in range(a.rounds):
        # Several non-overlapping 1 MiB ranges: start of disk, a 4 KiB aligned
        # one, an unaligned one and the very end of the export.
        slots = size // CHUNK
        offsets = [0, size - CHUNK]
        # random ranges stay in the first 3/4 of the export (see aio_pipeline.py)
        mid = rng.randrange(2, max(3, min(slots - 6, (size * 3 // 4) // CHUNK - 4)))
        offsets.append(mid * CHUNK + 4096 * rng.randrange(1, 200))                # 4 KiB aligned
        offsets.append((mid + 2) * CHUNK + CHUNK // 2 + rng.randrange(1, 4096))  # unaligned
        offsets.sort()
        for x, y in zip(offsets, offsets[1:]):
            assert x + CHUNK <= y, (x, y)
        nbytes += transfer(ha, "A", hb, "B", offsets)
        nbytes += transfer(hb, "B", ha, "A", offsets)

    ha.shutdown()
    hb.shutdown()
    print("%s: OK 2 connections, multi-conn advertised, %d rounds x %d ranges x 1 MiB "
          "each way (%.1f MB written and cross-read) seed=%d %.1fs"
          % (NAME, a.rounds, len(offsets), nbytes / 1e6, seed, time.monotonic() - t0))


if __name__ == "__main__":
    nbdcheck.run(NAME, main, nbdcheck.errno_detail)
