"""Reading fio's JSON output, shared by fio-bridge.sh and fio-vs-nbdkit.sh (imported from their tables' Python)."""
import json
import sys

# row key -> (label, the side of fio's job that holds it, the metrics shown)
ROWS = {
    "rr1":  ("4K randread QD1",   "read",  ["iops", "p50", "p99"]),
    "rw1":  ("4K randwrite QD1",  "write", ["iops", "p50", "p99"]),
    "rr32": ("4K randread QD32",  "read",  ["iops"]),
    "rw32": ("4K randwrite QD32", "write", ["iops"]),
    "sr":   ("1M seq read QD8",   "read",  ["mbs"]),
    "sw":   ("1M seq write QD8",  "write", ["mbs"]),
}


def units(lat):
    """Each metric's heading, with the latency kind (clat or lat) named."""
    return {"iops": "IOPS", "mbs": "MB/s", "p50": "p50 %s us" % lat, "p99": "p99 %s us" % lat}


def load(work, tag, target):
    """The one job of WORK/TAG.TARGET.json; exits naming the run when fio reported an error."""
    txt = open("%s/%s.%s.json" % (work, tag, target)).read()
    job = json.loads(txt[txt.index("{"):])["jobs"][0]  # fio may print warnings before the JSON
    if job.get("error"):
        sys.exit("fio job %s on %s reported error %d" % (tag, target, job["error"]))
    return job


def metric(job, side, what, lat):
    """iops, mbs (10^6 bytes/s), or p50/p99 of the lat kind in microseconds."""
    d = job[side]
    if what == "iops":
        return d["iops"]
    if what == "mbs":
        return d["bw_bytes"] / 1e6
    pct = d[lat + "_ns"].get("percentile", {})
    key = {"p50": "50.000000", "p99": "99.000000"}[what]
    return pct[key] / 1000.0
