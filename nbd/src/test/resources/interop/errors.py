#!/usr/bin/env python3
"""Out-of-range / bad request error codes via libnbd, with strict mode off.

Usage: python3 errors.py URI SIZE_BYTES

URI is nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path;
SIZE_BYTES is the export size the server is expected to announce.

libnbd's client-side checks are disabled (set_strict_mode(0)) so every bad
request really reaches the server.  The whole battery runs twice: on a
connection with structured replies (and base:allocation) and on one with
simple replies only (where an error reply to a READ must carry no payload,
or the stream desynchronises).  Asserted:
  * the announced size equals SIZE_BYTES;
  * READ past the end (at the end, straddling it, far beyond, with an
    offset+length that wraps 2^64, with offset >= 2^63) fails with EINVAL;
  * WRITE past the end (same shapes, 1 B .. 1 MiB payloads, so the server
    must swallow the payload to stay in sync) fails with ENOSPC;
  * WRITE_ZEROES past the end fails with ENOSPC;
  * TRIM past the end fails with EINVAL or ENOSPC (the spec names neither);
  * BLOCK_STATUS past the end fails with EINVAL (if base:allocation was
    negotiated) and CACHE past the end with EINVAL (if can_cache);
  * READ with a flag not valid for READ (NO_HOLE) and with an unknown flag
    bit (0x8000) either fails with EINVAL or succeeds with correct data
    (the spec says SHOULD EINVAL; we accept both);
  * after every rejected request the same connection still writes and
    reads correctly, and sentinel data in the first 4 KiB and last 8 KiB
    of the export is unchanged (our assumption: a rejected request has no
    effect, in particular a straddling write does not write its in-range
    part and a wrapping offset does not land at the start of the disk).
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

import time

from nbdcheck import Fail, errname  # noqa: E402

NAME = "errors"
MiB = 1024 * 1024
U64 = 1 << 64


class Checker:
    def __init__(self, h, size):
        self.h = h
        self.size = size
        self.n = 0
        self.alive_k = 0
        self.head = os.urandom(4096)
        self.tail = os.urandom(8192)
        h.pwrite(self.head, 0)
        h.pwrite(self.tail, size - 8192)
        self.sentinels_ok("initial")

    def sentinels_ok(self, after):
        h = self.h
        for off, exp, nm in ((0, self.head, "first 4 KiB"),
                             (self.size - 8192, self.tail, "last 8 KiB")):
            got = h.pread(len(exp), off)
            if got != exp:
                d = next(i for i in range(len(exp)) if got[i] != exp[i])
                raise Fail("after %s: sentinel in %s changed at export offset %d: "
                           "expected 0x%02x got 0x%02x" % (after, nm, off + d, exp[d], got[d]))

    def alive(self, after):
        """The connection must still write and read correctly."""
        h = self.h
        self.alive_k += 1
        off = 4096 * (1 + self.alive_k % 200) + (self.alive_k * 7) % 512
        data = os.urandom(4096 + self.alive_k)
        try:
            h.pwrite(data, off)
            got = h.pread(len(data), off)
        except nbd.Error as e:
            raise Fail("after %s the connection is no longer usable: %s (%s)"
                       % (after, e.string, errname(e)))
        if got != data:
            d = next(i for i in range(len(data)) if got[i] != data[i])
            raise Fail("after %s: write/read-back at %d differs at offset %d: expected 0x%02x "
                       "got 0x%02x" % (after, off, off + d, data[d], got[d]))
        self.sentinels_ok(after)

    def expect_err(self, desc, fn, allowed):
        self.n += 1
        try:
            r = fn()
        except nbd.Error as e:
            en = errname(e)
            if en not in allowed:
                raise Fail("%s: failed with %s, expected %s (%s)"
                           % (desc, en, "/".join(allowed), e.string))
            self.alive(desc)
            return en
        raise Fail("%s: succeeded (returned %r), expected %s"
                   % (desc, r if not isinstance(r, (bytes, bytearray)) else "%d bytes" % len(r),
                      "/".join(allowed)))


def battery(uri, want_size, structured):
    """Run every bad request on one connection; returns summary pieces."""
    mode = "structured" if structured else "simple-replies"
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.set_request_structured_replies(structured)
    if structured:
        h.add_meta_context(nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri(uri)
    if bool(h.get_structured_replies_negotiated()) != structured:
        raise Fail("[%s] structured replies negotiated=%s, requested %s"
                   % (mode, h.get_structured_replies_negotiated(), structured))
    size = h.get_size()
    if size != want_size:
        raise Fail("export size is %d, expected %d" % (size, want_size))
    if h.is_read_only():
        raise Fail("export is read-only (use errors_readonly.py)")
    if size < 4 * MiB:
        raise Fail("export too small (%d bytes), need >= 4 MiB" % size)
    c = Checker(h, size)
    EINVAL, ENOSPC = ["EINVAL"], ["ENOSPC"]

    def X(desc, fn, allowed):
        return c.expect_err("[%s] %s" % (mode, desc), fn, allowed)

    # READ
    X("pread(512) at offset=size", lambda: h.pread(512, size), EINVAL)
    X("pread(1024) straddling end", lambda: h.pread(1024, size - 512), EINVAL)
    X("pread(1) at size+1MiB", lambda: h.pread(1, size + MiB), EINVAL)
    X("pread(8192) at 2^64-4096 (wraps)", lambda: h.pread(8192, U64 - 4096), EINVAL)
    X("pread(4096) at 2^63", lambda: h.pread(4096, 1 << 63), EINVAL)
    X("pread(64KiB) at 2^63-1", lambda: h.pread(65536, (1 << 63) - 1), EINVAL)
    X("pread(1MiB) straddling end", lambda: h.pread(MiB, size - 4096), EINVAL)

    # WRITE (payload must be consumed by the server)
    X("pwrite(512) at offset=size", lambda: h.pwrite(os.urandom(512), size), ENOSPC)
    X("pwrite(1024) straddling end", lambda: h.pwrite(os.urandom(1024), size - 512), ENOSPC)
    X("pwrite(1MiB) straddling end", lambda: h.pwrite(os.urandom(MiB), size - 4096), ENOSPC)
    X("pwrite(1MiB) at size+1MiB", lambda: h.pwrite(os.urandom(MiB), size + MiB), ENOSPC)
    X("pwrite(8192) at 2^64-4096 (wraps)",
      lambda: h.pwrite(os.urandom(8192), U64 - 4096), ENOSPC)
    X("pwrite(4096) at 2^63", lambda: h.pwrite(os.urandom(4096), 1 << 63), ENOSPC)
    X("pwrite(1) at size", lambda: h.pwrite(b"\x5a", size), ENOSPC)

    # WRITE_ZEROES / TRIM / BLOCK_STATUS / CACHE
    X("zero(1024) straddling end", lambda: h.zero(1024, size - 512), ENOSPC)
    X("zero(4096) at offset=size", lambda: h.zero(4096, size), ENOSPC)
    X("zero(8192) at 2^64-4096 (wraps)", lambda: h.zero(8192, U64 - 4096), ENOSPC)
    trim_err = X("trim(8192) straddling end", lambda: h.trim(8192, size - 4096),
                 ["EINVAL", "ENOSPC"])
    X("trim(8192) at 2^64-4096 (wraps)", lambda: h.trim(8192, U64 - 4096),
      ["EINVAL", "ENOSPC"])
    extra = []
    if structured and h.can_meta_context(nbd.CONTEXT_BASE_ALLOCATION):
        X("block_status(8192) straddling end",
          lambda: h.block_status(8192, size - 4096, lambda *a: 0), EINVAL)
        X("block_status(4096) at offset=size",
          lambda: h.block_status(4096, size, lambda *a: 0), EINVAL)
        extra.append("block_status")
    if h.can_cache():
        X("cache(8192) straddling end", lambda: h.cache(8192, size - 4096), EINVAL)
        extra.append("cache")

    # Flags that are not valid for READ.
    flag_res = []
    for fl, nm in ((nbd.CMD_FLAG_NO_HOLE, "NO_HOLE"), (0x8000, "unknown 0x8000")):
        c.n += 1
        desc = "[%s] pread(4096) with flag %s" % (mode, nm)
        try:
            got = h.pread(4096, 0, fl)
            if got != c.head:
                raise Fail("%s succeeded but returned wrong data" % desc)
            flag_res.append("%s:accepted" % nm)
        except nbd.Error as e:
            if errname(e) != "EINVAL":
                raise Fail("%s: failed with %s, expected EINVAL or success" % (desc, errname(e)))
            flag_res.append("%s:EINVAL" % nm)
        c.alive(desc)
    h.shutdown()
    return c.n, trim_err, extra, flag_res


def main():
    if len(sys.argv) != 3:
        raise Fail("usage: errors.py URI SIZE_BYTES")
    uri, want_size = sys.argv[1], int(sys.argv[2])
    t0 = time.monotonic()
    n1, trim_err, extra, flag_res = battery(uri, want_size, True)
    n2, _, _, flag_res2 = battery(uri, want_size, False)
    print("%s: OK %d bad requests rejected correctly (%d with structured replies, %d with simple "
          "replies; read EINVAL, write/zero ENOSPC, trim %s%s), flags [%s | %s], connection "
          "usable after each, %.1fs"
          % (NAME, n1 + n2, n1, n2, trim_err,
             (", " + "/".join(extra) + " EINVAL") if extra else "",
             ", ".join(flag_res), ", ".join(flag_res2), time.monotonic() - t0))


if __name__ == "__main__":
    nbdcheck.run(NAME, main)
