#!/usr/bin/env python3
"""Write attempts on a read-only export must fail with EPERM (libnbd).

Usage: python3 errors_readonly.py URI

URI is nbd://127.0.0.1:PORT/EXPORT or nbd+unix:///EXPORT?socket=/path
and must name a read-only export.

libnbd's client-side checks are disabled (set_strict_mode(0)) so the
requests really reach the server.  Asserted:
  * is_read_only() is true;
  * WRITE (4 KiB aligned, unaligned 1 B, 1 MiB payload), WRITE_ZEROES,
    WRITE_ZEROES+NO_HOLE, TRIM and WRITE with FUA all fail with EPERM;
  * a WRITE past the end fails with EPERM or ENOSPC (either check may
    run first in a server);
  * after each, the connection still reads, and the bytes the request
    aimed at are unchanged (compared with what was read beforehand);
  * FLUSH, if advertised, succeeds (it is harmless on a read-only export).
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

NAME = "errors_readonly"
MiB = 1024 * 1024


def main():
    if len(sys.argv) != 2:
        raise Fail("usage: errors_readonly.py URI")
    uri = sys.argv[1]
    t0 = time.monotonic()
    h = nbd.NBD()
    h.set_strict_mode(0)
    h.connect_uri(uri)
    if not h.is_read_only():
        raise Fail("export is not read-only (is_read_only() is false)")
    size = h.get_size()
    if size < 2 * MiB:
        raise Fail("export too small (%d bytes), need >= 2 MiB" % size)
    n = 0

    def attempt(desc, fn, off, ln, allowed=("EPERM",)):
        nonlocal n
        n += 1
        ln = min(ln, size - off)
        before = h.pread(ln, off)
        try:
            fn()
        except nbd.Error as e:
            if errname(e) not in allowed:
                raise Fail("%s: failed with %s, expected %s (%s)"
                           % (desc, errname(e), "/".join(allowed), e.string))
        else:
            raise Fail("%s on read-only export succeeded, expected %s" % (desc, "/".join(allowed)))
        try:
            after = h.pread(ln, off)
        except nbd.Error as e:
            raise Fail("after %s the connection no longer reads: %s (%s)"
                       % (desc, e.string, errname(e)))
        if after != before:
            d = next(i for i in range(ln) if after[i] != before[i])
            raise Fail("after rejected %s: data changed at export offset %d: was 0x%02x now 0x%02x"
                       % (desc, off + d, before[d], after[d]))

    mid = (size // 2) // 4096 * 4096
    attempt("pwrite(4096) at 0", lambda: h.pwrite(os.urandom(4096), 0), 0, 4096)
    attempt("pwrite(1) at mid+1", lambda: h.pwrite(b"\xa7", mid + 1), mid, 4096)
    attempt("pwrite(1MiB) at mid", lambda: h.pwrite(os.urandom(MiB), mid), mid, MiB)
    attempt("pwrite(4096, FUA) at 8192",
            lambda: h.pwrite(os.urandom(4096), 8192, nbd.CMD_FLAG_FUA), 8192, 4096)
    attempt("zero(64KiB) at 0", lambda: h.zero(65536, 0), 0, 65536)
    attempt("zero(64KiB, NO_HOLE) at mid",
            lambda: h.zero(65536, mid, nbd.CMD_FLAG_NO_HOLE), mid, 65536)
    attempt("trim(1MiB) at 0", lambda: h.trim(MiB, 0), 0, MiB)
    attempt("pwrite(4096) straddling end", lambda: h.pwrite(os.urandom(4096), size - 2048),
            size - 2048, 2048, ("EPERM", "ENOSPC"))
    flushed = "not advertised"
    if h.can_flush():
        h.flush()
        flushed = "ok"
    h.pread(4096, 0)
    h.shutdown()
    print("%s: OK %d write-type requests rejected with EPERM on read-only export, data "
          "unchanged, connection usable; flush %s; %.1fs"
          % (NAME, n, flushed, time.monotonic() - t0))


if __name__ == "__main__":
    nbdcheck.run(NAME, main)
