#!/usr/bin/env python3
"""Pipelined AIO read/write check through libnbd (python3-libnbd).

Usage: python3 aio_pipeline.py URI [--structured on|off] [--inflight N]
                                  [--rounds R] [--seed S]

URI is nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path.

Phases, each with all commands issued before any completion is awaited:
  A  N aio_pwrite of random data, random sizes (1 B .. 256 KiB, some
     4 KiB aligned/sized, some tiny and unaligned) tiling a window
     [base, base+W) completely, so the window's content is fully known
     without ever trusting a server read.
  B  N aio_pread of random (possibly overlapping) ranges in the window.
  C  N/2 aio_pwrite + N/2 aio_pread interleaved, on mutually disjoint
     ranges (overlapping writes in flight together are undefined), the
     reads must see phase-A data.
  D  >= N aio_pread tiling the whole window: verifies every byte,
     including the phase-C overwrites.
  B-D are repeated --rounds times (default 3).
The window is placed at a random 1 MiB aligned offset in the first 3/4 of
the export (so trim_zero_status.py's never-written MiB at 7/8 survives when
scripts share an export).  Read buffers are pre-filled with 0xA5 and libnbd's pread initialisation
is switched off, so a server that "succeeds" without sending some of the
data is caught.  Also checks get_structured_replies_negotiated() matches
--structured.

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

from nbdcheck import Fail, first_diff  # noqa: E402

NAME = "aio_pipeline"
KiB = 1024
MiB = 1024 * KiB
MAXSZ = 256 * KiB
GARBAGE = 0xA5


def gen_tiling(rng, start, end=None, count=None, maxsz=MAXSZ):
    """Split [start, end) (or produce `count` ranges from start) into
    consecutive ranges of mixed kinds.  Returns list of (offset, length)."""
    out = []
    pos = start
    while True:
        if end is not None and pos >= end:
            break
        if count is not None and len(out) >= count:
            break
        kind = rng.randrange(4)
        if kind == 0:
            # 4 KiB aligned offset and size; realign first if needed.
            pad = (-pos) % 4096
            if pad:
                if end is not None and pos + pad > end:
                    pad = end - pos
                out.append((pos, pad))
                pos += pad
                if (end is not None and pos >= end) or (count is not None and len(out) >= count):
                    break
            ln = 4096 * rng.randint(1, max(1, maxsz // 4096))
        elif kind == 1:
            ln = rng.randint(1, maxsz)
        elif kind == 2:
            ln = rng.randint(1, 4096)
        else:
            ln = rng.randint(1, 600)
        if end is not None:
            ln = min(ln, end - pos)
        out.append((pos, ln))
        pos += ln
    return out


def at_least(layout, n):
    """Split the largest ranges of a tiling until it has >= n ranges."""
    layout = list(layout)
    while len(layout) < n:
        layout.sort(key=lambda r: r[1])
        o, l = layout.pop()
        if l < 2:
            layout.append((o, l))
            break
        k = l // 2
        layout += [(o, k), (o + k, l - k)]
    return layout


class Pipeline:
    def __init__(self, h, deadline):
        self.h = h
        self.deadline = deadline
        self.pending = {}  # cookie -> (kind, off, len, buf)
        self.max_in_flight = 0
        self.bytes_w = 0
        self.bytes_r = 0
        self.cmds_w = 0
        self.cmds_r = 0

    def write(self, off, data):
        buf = nbd.Buffer.from_bytearray(data)
        c = self.h.aio_pwrite(buf, off)
        self.pending[c] = ("write", off, len(data), buf)
        self.cmds_w += 1
        self.bytes_w += len(data)

    def read(self, off, ln):
        buf = nbd.Buffer.from_bytearray(bytearray([GARBAGE]) * ln)
        c = self.h.aio_pread(buf, off)
        self.pending[c] = ("read", off, ln, buf)
        self.cmds_r += 1
        self.bytes_r += ln

    def wait_all(self):
        """Wait for every pending command; returns list of completed reads
        (off, bytearray).  Raises Fail on any command error."""
        self.max_in_flight = max(self.max_in_flight, self.h.aio_in_flight())
        reads = []
        while self.pending:
            if time.monotonic() > self.deadline:
                raise Fail("%d commands still pending at deadline (server stalled?)"
                           % len(self.pending))
            cookie = self.h.aio_peek_command_completed()
            if cookie <= 0:
                self.h.poll(1000)
                continue
            kind, off, ln, buf = self.pending.pop(cookie)
            try:
                self.h.aio_command_completed(cookie)
            except nbd.Error as e:
                raise Fail("aio %s offset=%d len=%d failed: %s (errno %s)"
                           % (kind, off, ln, e.string, e.errno))
            if kind == "read":
                reads.append((off, buf.to_bytearray()))
        return reads


def check_reads(model, base, reads, phase):
    for off, got in reads:
        exp = model[off - base: off - base + len(got)]
        if got != exp:
            d = first_diff(exp, got)
            raise Fail("phase %s: read offset=%d len=%d differs at export offset %d: "
                       "expected 0x%02x got 0x%02x" % (phase, off, len(got), off + d,
                                                      exp[d], got[d]))


def main():
    ap = argparse.ArgumentParser(description="libnbd AIO pipeline check")
    ap.add_argument("uri")
    ap.add_argument("--structured", choices=["on", "off"], default="on")
    ap.add_argument("--inflight", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3,
                    help="repeat phases B-D this many times (default 3)")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    if a.inflight < 2:
        raise Fail("--inflight must be >= 2")
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    t0 = time.monotonic()
    deadline = t0 + float(os.environ.get("NBD_INTEROP_TIMEOUT", "120")) - 5

    want_sr = a.structured == "on"
    h = nbd.NBD()
    h.set_request_structured_replies(want_sr)
    h.set_pread_initialize(False)
    h.connect_uri(a.uri)
    got_sr = bool(h.get_structured_replies_negotiated())
    if got_sr != want_sr:
        raise Fail("structured replies negotiated=%s but requested %s"
                   % (got_sr, a.structured))
    if h.is_read_only():
        raise Fail("export is read-only")
    size = h.get_size()
    n = a.inflight

    minb = h.get_block_size(nbd.SIZE_MINIMUM)
    maxb = h.get_block_size(nbd.SIZE_MAXIMUM)
    if minb > 1:
        raise Fail("server advertises minimum block size %d; this test issues byte-granular "
                   "(unaligned) requests and needs 1" % minb)
    # Phase A layout decides the window; shrink request sizes on small exports.
    maxsz = MAXSZ if maxb <= 0 else max(4096, min(MAXSZ, maxb // 4096 * 4096))
    while True:
        layout_a = gen_tiling(rng, 0, count=n, maxsz=maxsz)
        W = layout_a[-1][0] + layout_a[-1][1]
        if W <= size // 2 or maxsz <= 4096:
            break
        maxsz //= 2
    if W > size:
        raise Fail("export too small (%d bytes) for %d requests" % (size, n))
    # 1 MiB aligned window, kept in the first 3/4 of the export when it fits,
    # so that trim_zero_status.py's never-written MiB (at 7/8) stays
    # untouched when several scripts share one export.
    limit = size * 3 // 4 if size * 3 // 4 >= 2 * W else size
    base = rng.randrange(0, (limit - W) // MiB + 1) * MiB
    layout_a = [(base + o, l) for o, l in layout_a]

    pl = Pipeline(h, deadline)
    model = bytearray(W)
    # Phase A: writes tiling the window.
    for off, ln in layout_a:
        data = os.urandom(ln)
        model[off - base: off - base + ln] = data
        pl.write(off, data)
    pl.wait_all()

    for rnd in range(1, a.rounds + 1):
        # Phase B: random reads.
        for _ in range(n):
            ln = rng.choice([rng.randint(1, maxsz), 4096 * rng.randint(1, maxsz // 4096),
                             rng.randint(1, 1024)])
            ln = min(ln, W)
            if rng.random() < 0.5:
                off = base + 4096 * rng.randrange(0, (W - ln) // 4096 + 1)
            else:
                off = base + rng.randrange(0, W - ln + 1)
            pl.read(off, ln)
        check_reads(model, base, pl.wait_all(), "B%d" % rnd)

        # Phase C: interleaved writes and reads on disjoint ranges.
        layout_c = at_least(gen_tiling(rng, base, end=base + W, maxsz=maxsz), n)
        rng.shuffle(layout_c)
        half = n // 2
        writes = layout_c[:half]
        reads = layout_c[half:half + (n - half)]
        new_model = bytearray(model)
        ops = [("w", o, l) for o, l in writes] + [("r", o, l) for o, l in reads]
        rng.shuffle(ops)
        for kind, off, ln in ops:
            if kind == "w":
                data = os.urandom(ln)
                new_model[off - base: off - base + ln] = data
                pl.write(off, data)
            else:
                pl.read(off, ln)
        check_reads(model, base, pl.wait_all(), "C%d" % rnd)  # reads are disjoint from C writes
        model = new_model

        # Phase D: reads tiling the whole window (>= n of them).
        layout_d = at_least(gen_tiling(rng, base, end=base + W, maxsz=maxsz), n)
        rng.shuffle(layout_d)
        for off, ln in layout_d:
            pl.read(off, ln)
        check_reads(model, base, pl.wait_all(), "D%d" % rnd)

    h.shutdown()
    dt = time.monotonic() - t0
    aligned = sum(1 for o, l in layout_a if o % 4096 == 0 and l % 4096 == 0)
    print("%s: OK structured=%s rounds=%d writes=%d (%.1f MB) reads=%d (%.1f MB) "
          "batch=%d max_in_flight=%d window=%d@%d aligned_writes_A=%d seed=%d %.1fs"
          % (NAME, a.structured, a.rounds, pl.cmds_w, pl.bytes_w / 1e6, pl.cmds_r, pl.bytes_r / 1e6,
             n, pl.max_in_flight, W, base, aligned, seed, dt))


if __name__ == "__main__":
    nbdcheck.run(NAME, main, nbdcheck.errno_detail)
