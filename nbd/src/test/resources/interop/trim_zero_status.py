#!/usr/bin/env python3
"""TRIM / WRITE_ZEROES / BLOCK_STATUS (base:allocation) check via libnbd.

Usage: python3 trim_zero_status.py URI [--exact] [--area-offset BYTES]
                                       [--fresh-offset BYTES] [--seed S]

URI is nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path.
Needs structured replies and the base:allocation meta context.
Precondition: the --fresh-offset MiB (default: the 1 MiB at 7/8 of the
export) has never been written since the server started.

Layout inside a 16 MiB area (default at 64 MiB), first filled with random
data in 64 KiB writes (4 KiB aligned, 64 KiB steps):
   +2 MiB  1 MiB  TRIM
   +5 MiB  1 MiB  WRITE_ZEROES (no flags)
   +8 MiB  1 MiB  WRITE_ZEROES + NO_HOLE
  +11 MiB  1 MiB  WRITE_ZEROES + FAST_ZERO (only if can_fast_zero; the
                  server may refuse with ENOTSUP, then data is unchanged)
  +13 MiB+1000  5000 B  WRITE_ZEROES, unaligned (neighbours must survive)
  +14 MiB+100   5000 B  TRIM, unaligned (content inside is unspecified;
                  bytes outside must survive)
Then a full read-back and block status over the area, REQ_ONE queries,
a never-written range far away, and finally re-writing the trimmed MiB
must turn it back into data.

What is asserted (any correct sparse server; holds for nbdkit memory and
for rbridge, which tracks allocation in 4 KiB blocks):
  * trimmed (whole aligned MiB, our assumption: trim of whole blocks reads
    back as zeroes -- the NBD spec itself leaves it unspecified) and all
    zeroed ranges read as zeroes; everything else is unchanged;
  * block status is well formed: lengths > 0, never beyond the export,
    at least one extent, exactly one callback per request for
    base:allocation;
  * every extent carrying STATE_ZERO really reads as zeroes (checked
    against the read-back, so over-reporting is caught anywhere);
  * 4 KiB blocks holding written (non-zero) data report neither HOLE nor
    ZERO (we assume a plain sparse server; the spec would allow HOLE on
    data for exotic backends);
  * the aligned TRIM and no-flag WRITE_ZEROES MiBs report ZERO (HOLE may
    also be set);
  * the NO_HOLE MiB: ZERO set or the whole flags clear are both accepted
    by default; nbdkit memory ignores NO_HOLE and reports HOLE|ZERO,
    rbridge reports ZERO without HOLE.  --exact asserts rbridge's
    semantics: TRIM/ZERO MiBs exactly HOLE|ZERO, NO_HOLE MiB exactly ZERO;
  * the never-written MiB reports HOLE|ZERO and reads as zeroes;
  * REQ_ONE returns exactly one extent, 0 < length <= requested count
    (checked on zero, data, unaligned and tiny requests);
  * after rewriting the trimmed MiB it reports neither HOLE nor ZERO.
Exit 0 and one summary line on success; exit 1 and one line on stderr
otherwise.  Bounded by a watchdog (NBD_INTEROP_TIMEOUT, default 120 s).
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

NAME = "trim_zero_status"
KiB = 1024
MiB = 1024 * KiB
AREA = 16 * MiB
STEP = 64 * KiB
HOLE = nbd.STATE_HOLE
ZERO = nbd.STATE_ZERO
CTX = nbd.CONTEXT_BASE_ALLOCATION


def errname(e):
    # An error without an errno shows as "None" here (the other scripts say "no errno").
    return nbdcheck.errname(e, missing=None)


def flagstr(f):
    s = [n for b, n in ((HOLE, "HOLE"), (ZERO, "ZERO")) if f & b]
    if f & ~(HOLE | ZERO):
        s.append("0x%x" % (f & ~(HOLE | ZERO)))
    return "|".join(s) if s else "DATA(0)"


def block_status_once(h, count, off, flags=0):
    """One BLOCK_STATUS request; returns list of (offset, length, flags)."""
    calls = []

    def cb(ctx, req_off, entries, err):
        if ctx == CTX:
            calls.append((req_off, list(entries)))
        return 0
    h.block_status(count, off, cb, flags)
    if len(calls) != 1:
        raise Fail("block_status(off=%d, count=%d%s): base:allocation callback called %d times, "
                   "expected exactly 1" % (off, count, ", REQ_ONE" if flags else "", len(calls)))
    req_off, ents = calls[0]
    if len(ents) < 2 or len(ents) % 2:
        raise Fail("block_status(off=%d, count=%d): malformed/empty extent list %r"
                   % (off, count, ents))
    out = []
    pos = off
    size = h.get_size()
    for i in range(0, len(ents), 2):
        ln, fl = ents[i], ents[i + 1]
        if ln <= 0:
            raise Fail("block_status(off=%d, count=%d): extent #%d has length %d"
                       % (off, count, i // 2, ln))
        if pos + ln > size:
            raise Fail("block_status(off=%d, count=%d): extent [%d,+%d) goes beyond export size %d"
                       % (off, count, pos, ln, size))
        out.append((pos, ln, fl))
        pos += ln
    return out


def collect_extents(h, start, end):
    """Cover [start, end) with extents using as many requests as needed."""
    exts = []
    pos = start
    for _ in range(100000):
        if pos >= end:
            return exts
        got = block_status_once(h, min(end - pos, 64 * MiB), pos)
        for (o, l, f) in got:
            if o >= end:
                break
            exts.append((o, min(l, end - o), f))
        pos = got[-1][0] + got[-1][1]
    raise Fail("block status did not cover [%d,%d) after 100000 requests" % (start, end))


def flags_over(exts, lo, hi):
    """Extents (offset, length, flags) overlapping [lo, hi)."""
    return [(o, l, f) for (o, l, f) in exts if o < hi and o + l > lo]


def main():
    ap = argparse.ArgumentParser(description="trim/zero/block-status check")
    ap.add_argument("uri")
    ap.add_argument("--exact", action="store_true",
                    help="assert rbridge's exact semantics (see module doc)")
    ap.add_argument("--area-offset", type=int, default=64 * MiB)
    ap.add_argument("--fresh-offset", type=int, default=None)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    t0 = time.monotonic()

    h = nbd.NBD()
    h.add_meta_context(CTX)
    h.connect_uri(a.uri)
    if not h.get_structured_replies_negotiated():
        raise Fail("structured replies not negotiated")
    if not h.can_meta_context(CTX):
        raise Fail("server did not agree to meta context %s" % CTX)
    for what, ok in (("trim", h.can_trim()), ("write_zeroes", h.can_zero())):
        if not ok:
            raise Fail("server does not advertise %s" % what)
    if h.is_read_only():
        raise Fail("export is read-only")
    size = h.get_size()
    base = a.area_offset
    if base % MiB:
        raise Fail("--area-offset must be 1 MiB aligned")
    fresh = a.fresh_offset if a.fresh_offset is not None else (size * 7 // 8) // MiB * MiB
    if base + AREA > size or fresh + MiB > size or (fresh < base + AREA and fresh + MiB > base):
        raise Fail("export too small (%d bytes) for area at %d and fresh MiB at %d"
                   % (size, base, fresh))

    # 1. fill the area with random data, 64 KiB per write (4 KiB aligned).
    model = bytearray(os.urandom(AREA))
    for off in range(0, AREA, STEP):
        h.pwrite(model[off:off + STEP], base + off)

    rel = lambda r: (base + r[0], base + r[0] + r[1])
    R_TRIM = rel((2 * MiB, MiB))
    R_ZERO = rel((5 * MiB, MiB))
    R_NOHOLE = rel((8 * MiB, MiB))
    R_FAST = rel((11 * MiB, MiB))
    R_UZERO = rel((13 * MiB + 1000, 5000))
    R_UTRIM = rel((14 * MiB + 100, 5000))

    def zero_model(r):
        model[r[0] - base:r[1] - base] = bytes(r[1] - r[0])

    h.trim(MiB, R_TRIM[0])
    zero_model(R_TRIM)
    h.zero(MiB, R_ZERO[0])
    zero_model(R_ZERO)
    h.zero(MiB, R_NOHOLE[0], nbd.CMD_FLAG_NO_HOLE)
    zero_model(R_NOHOLE)
    fast = "not advertised"
    if h.can_fast_zero():
        try:
            h.zero(MiB, R_FAST[0], nbd.CMD_FLAG_FAST_ZERO)
            zero_model(R_FAST)
            fast = "done"
        except nbd.Error as e:
            if errname(e) != "ENOTSUP" and errname(e) != "EOPNOTSUPP":
                raise Fail("zero with FAST_ZERO failed with %s, only ENOTSUP is allowed"
                           % errname(e))
            fast = "refused with ENOTSUP"
    h.zero(R_UZERO[1] - R_UZERO[0], R_UZERO[0])
    zero_model(R_UZERO)
    h.trim(R_UTRIM[1] - R_UTRIM[0], R_UTRIM[0])

    # 2. read back the whole area.
    got = pread_all(h, AREA, base)
    # The unaligned-trim interior is unspecified: adopt what the server has.
    u0, u1 = R_UTRIM[0] - base, R_UTRIM[1] - base
    model[u0:u1] = got[u0:u1]
    if got != model:
        d = first_diff(model, got)
        where = "untouched data"
        for nm, r in (("TRIM", R_TRIM), ("ZERO", R_ZERO), ("ZERO+NO_HOLE", R_NOHOLE),
                      ("FAST_ZERO", R_FAST), ("unaligned ZERO", R_UZERO)):
            if r[0] <= base + d < r[1]:
                where = nm + " range"
        raise Fail("read-back differs at export offset %d (%s): expected 0x%02x got 0x%02x"
                   % (base + d, where, model[d], got[d]))

    # 3. block status over the whole area.
    exts = collect_extents(h, base, base + AREA)
    n_ext = len(exts)
    # Any extent claiming HOLE or ZERO must read as zeroes: catches ZERO
    # over-reporting anywhere, and HOLE/ZERO on written data at byte
    # precision (we assume a plain sparse server, where a hole reads as
    # zeroes; the spec would allow HOLE without ZERO for exotic backends).
    for (o, l, f) in exts:
        if f & (HOLE | ZERO):
            seg = got[o - base:o - base + l]
            if seg.count(0) != len(seg):
                nz = next(i for i, b in enumerate(seg) if b)
                raise Fail("extent [%d,+%d) reports %s but holds written data: byte at "
                           "export offset %d is 0x%02x" % (o, l, flagstr(f), o + nz, seg[nz]))

    def expect(rname, r, ok, want):
        for (o, l, f) in flags_over(exts, r[0], r[1]):
            if not ok(f):
                raise Fail("%s range [%d,%d): extent [%d,+%d) reports %s, expected %s"
                           % (rname, r[0], r[1], o, l, flagstr(f), want))

    if a.exact:
        expect("TRIM", R_TRIM, lambda f: f & 3 == HOLE | ZERO, "HOLE|ZERO")
        expect("ZERO", R_ZERO, lambda f: f & 3 == HOLE | ZERO, "HOLE|ZERO")
        expect("ZERO+NO_HOLE", R_NOHOLE, lambda f: f & 3 == ZERO, "ZERO without HOLE")
    else:
        expect("TRIM", R_TRIM, lambda f: f & ZERO, "ZERO bit set")
        expect("ZERO", R_ZERO, lambda f: f & ZERO, "ZERO bit set")
        expect("ZERO+NO_HOLE", R_NOHOLE, lambda f: f & ZERO or f & 3 == 0,
               "ZERO set, or no flags at all")
    if fast == "done":
        expect("FAST_ZERO", R_FAST, lambda f: f & ZERO or f & 3 == 0,
               "ZERO set, or no flags at all")

    # 4. never-written MiB far away.
    fexts = collect_extents(h, fresh, fresh + MiB)
    for (o, l, f) in fexts:
        if f & 3 != HOLE | ZERO:
            raise Fail("never-written range [%d,+1MiB): extent [%d,+%d) reports %s, expected "
                       "HOLE|ZERO (was the export fresh?)" % (fresh, o, l, flagstr(f)))
    fdata = pread_all(h, MiB, fresh)
    if fdata.count(0) != MiB:
        nz = next(i for i, b in enumerate(fdata) if b)
        raise Fail("never-written range reads non-zero at %d: 0x%02x" % (fresh + nz, fdata[nz]))

    # 5. REQ_ONE.
    def req_one(off, count, check=None, want=""):
        e = block_status_once(h, count, off, nbd.CMD_FLAG_REQ_ONE)
        if len(e) != 1:
            raise Fail("block_status REQ_ONE(off=%d, count=%d) returned %d extents, expected 1: %r"
                       % (off, count, len(e), e))
        o, l, f = e[0]
        if l > count:
            raise Fail("block_status REQ_ONE(off=%d, count=%d) extent length %d exceeds count"
                       % (off, count, l))
        if check and not check(f):
            raise Fail("block_status REQ_ONE(off=%d, count=%d) reports %s, expected %s"
                       % (off, count, flagstr(f), want))
        return e[0]

    _, l, _ = req_one(R_TRIM[0], 4 * MiB, lambda f: f & ZERO, "ZERO bit")
    if l > MiB:
        raise Fail("REQ_ONE extent at TRIM start has length %d, spills into data" % l)
    req_one(R_ZERO[0] + 12345, 4 * MiB, lambda f: f & ZERO, "ZERO bit")
    data_off = base + 3 * MiB + 4096 * rng.randrange(0, 256)
    _, l, _ = req_one(data_off, 4 * MiB, lambda f: f & 3 == 0, "no HOLE/ZERO (data)")
    req_one(data_off + 17, 100, lambda f: f & 3 == 0, "no HOLE/ZERO (data)")
    req_one(fresh + 7, 100, lambda f: f & ZERO, "ZERO bit on never-written range")
    req_one(fresh, MiB, lambda f: f & 3 == HOLE | ZERO, "HOLE|ZERO on never-written range")
    req_one(size - 4096, 4096)  # last block of the export

    # 6. rewrite the trimmed MiB: it must become data again.
    newdata = os.urandom(MiB)
    pwrite_all(h, newdata, R_TRIM[0])
    back = pread_all(h, MiB, R_TRIM[0])
    if back != newdata:
        d = first_diff(newdata, back)
        raise Fail("rewrite of trimmed range: read differs at %d: expected 0x%02x got 0x%02x"
                   % (R_TRIM[0] + d, newdata[d], back[d]))
    for (o, l, f) in collect_extents(h, R_TRIM[0], R_TRIM[1]):
        if f & (HOLE | ZERO):
            raise Fail("rewritten trimmed range: extent [%d,+%d) still reports %s"
                       % (o, l, flagstr(f)))

    h.shutdown()
    print("%s: OK area=%d+16MiB extents=%d trim/zero/no_hole checked, fast_zero %s, "
          "fresh@%d HOLE|ZERO, REQ_ONE x7%s seed=%d %.1fs"
          % (NAME, base, n_ext, fast, fresh, ", exact mode" if a.exact else "", seed,
             time.monotonic() - t0))


if __name__ == "__main__":
    nbdcheck.run(NAME, main, errname)
