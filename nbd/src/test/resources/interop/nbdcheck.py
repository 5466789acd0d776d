"""Helpers shared by the libnbd interop scripts in this folder.

Not a check itself.  Each script puts its own folder first on sys.path and
imports this module before `import nbd`:

    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    import nbdcheck  # re-execs under /usr/bin/python3 if 'nbd' is missing
    import nbd

Importing this module imports libnbd's python binding (python3-libnbd).  If
the python3 running the script lacks it (a pyenv shim or a venv, say), the
script is re-executed with /usr/bin/python3 and the same arguments; if that
is impossible or does not help, it prints one FAIL line and exits 2.

What a script gets from here:
  Fail          raise it for a failed check: run() prints its message;
  run()         the script's entry point: watchdog, then main(), then exactly
                one `NAME: FAIL: ...` line on stderr and exit 1 on any error;
  start_watchdog()  NBD_INTEROP_TIMEOUT (seconds, default 120) bounds the run;
  errname(), errno_detail()  how a libnbd error's errno is shown;
  io_chunk(), pread_all(), pwrite_all()  reads/writes of any length, split at
                the server's maximum block size;
  first_diff()  where two byte strings first differ.
"""

import os
import sys

try:
    import nbd
except ImportError:  # python3 on PATH may be a pyenv/venv without the bindings
    _sys_py = "/usr/bin/python3"
    if (os.path.exists(_sys_py) and not os.environ.get("NBD_INTEROP_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(_sys_py)):
        os.environ["NBD_INTEROP_REEXEC"] = "1"
        os.execv(_sys_py, [_sys_py] + sys.argv)
    sys.stderr.write("%s: FAIL: python module 'nbd' not found "
                     "(install python3-libnbd)\n" % os.path.basename(sys.argv[0]))
    sys.exit(2)

import errno as errno_mod
import faulthandler
import threading


class Fail(Exception):
    pass


def start_watchdog(name):
    """Exit 3 with one FAIL line once NBD_INTEROP_TIMEOUT seconds (default
    120) have passed."""
    secs = float(os.environ.get("NBD_INTEROP_TIMEOUT", "120"))

    def fire():
        sys.stderr.write("%s: FAIL: timed out after %.0f s\n" % (name, secs))
        sys.stderr.flush()
        os._exit(3)
    t = threading.Timer(secs, fire)
    t.daemon = True
    t.start()
    # Backstop that needs no GIL, in case the main thread is stuck in C.
    faulthandler.dump_traceback_later(secs + 15, exit=True)


def errname(e, missing="no errno"):
    """The errno name of an nbd.Error ("EINVAL"), or `missing` if it has none
    (missing=None: str() of whatever it has, so "None")."""
    v = e.errno
    if isinstance(v, int):
        return errno_mod.errorcode.get(v, str(v))
    return missing if not v and missing is not None else str(v)


def errno_detail(e):
    """For run(nbd_detail=...): shows a libnbd error as "(errno EINVAL)"."""
    return "errno %s" % e.errno


def run(name, main, nbd_detail=errname):
    """Start the watchdog and call main().  Exit 0 if it returns; on Fail, a
    libnbd error (its errno shown by nbd_detail) or any other exception,
    write one `NAME: FAIL: ...` line to stderr and exit 1."""
    start_watchdog(name)
    try:
        main()
    except Fail as e:
        sys.stderr.write("%s: FAIL: %s\n" % (name, e))
        sys.exit(1)
    except nbd.Error as e:
        sys.stderr.write("%s: FAIL: libnbd error: %s (%s)\n" % (name, e.string, nbd_detail(e)))
        sys.exit(1)
    except Exception as e:  # a bug here or an unexpected reply: still one line
        sys.stderr.write("%s: FAIL: unexpected %s: %s\n" % (name, type(e).__name__, e))
        sys.exit(1)
    sys.exit(0)


def io_chunk(h):
    """Largest read/write payload to use: the server's advertised maximum
    block size if it has one (capped at 4 MiB), else 4 MiB."""
    m = h.get_block_size(nbd.SIZE_MAXIMUM)
    return 4 * 1024 * 1024 if m <= 0 else min(4 * 1024 * 1024, m)


def pread_all(h, count, off):
    step = io_chunk(h)
    out = bytearray()
    while len(out) < count:
        out += h.pread(min(step, count - len(out)), off + len(out))
    return out


def pwrite_all(h, data, off):
    step = io_chunk(h)
    for i in range(0, len(data), step):
        h.pwrite(data[i:i + step], off + i)


def first_diff(a, b):
    """Index of the first differing byte of a and b; min(len) if one is a
    prefix of the other, -1 if equal."""
    n = min(len(a), len(b))
    # Coarse then fine search, fast enough for a few hundred KiB.
    step = 4096
    for i in range(0, n, step):
        if a[i:i + step] != b[i:i + step]:
            for j in range(i, min(i + step, n)):
                if a[j] != b[j]:
                    return j
    return n if len(a) != len(b) else -1
