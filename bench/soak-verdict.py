#!/usr/bin/env python3
# The soak's verdict (bench/soak.sh), from the files of a run folder alone, so --evaluate can judge a kept run
# again: soak-verdict.py DIR DURATION END_T JUDGE. Prints the table and PASS or FAIL; exits 1 on FAIL.
import csv, json, os, sys
work, duration, end_t, judge = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
fails = [l.strip() for l in open(os.path.join(work, "failures")) if l.strip()]
notes = []
def soft(reason):  # flat and p99: a failure with --judge all, a note with --judge data
    (fails if judge == "all" else notes).append(reason)
warm = max(30, duration // 5)
rows = list(csv.DictReader(open(os.path.join(work, "samples.csv"))))
for r in rows:
    r["t"] = int(r["t"])
lost = max((int(r["lost"] or 0) for r in rows), default=0)
if not rows:
    fails.append("no samples were taken")
if lost:
    fails.append(f"{lost} slab(s) lost at some sample")

RES = ["rss_kb", "overhead_kb", "direct_bytes", "heap_after_gc_bytes", "threads", "fds"]
def num(r, key):
    v = r.get(key)
    return float(v) if v not in ("", None) else None

# Series judged: the bridge from its quiet samples (no NBD connection open), per lifetime (pid); the memservers as
# one tier, the sum over all three, from samples where all three were up and the volume stable: a kill moves
# replicas between memservers, so one memserver's RSS follows its share of the data, while the tier's holds
# R x the data written plus three JVMs.
series = {}
# The bridge's direct memory is judged net of its payload buffer pool (rbridge_nbd_payload_pooled_bytes): released
# buffers kept for reuse, bounded by a quarter of --nbd-memory, fill in size classes as the load's peaks need them;
# that fill is printed on its own line, and what is left is the direct memory that a leak would grow.
pooled_max = {}
for r in rows:
    if r["proc"] == "bridge" and r.get("quiet") == "1":
        pooled = num(r, "pooled_bytes")
        if pooled is not None:
            pooled_max[r["pid"]] = max(pooled_max.get(r["pid"], 0), pooled)
        for k in RES:
            if k != "overhead_kb" and num(r, k) is not None:
                v = num(r, k)
                name = k
                if k == "direct_bytes" and pooled is not None:
                    v, name = v - pooled, "direct_bytes - pooled"
                series.setdefault(("bridge", name), {}).setdefault(r["pid"], []).append((r["t"], v, r["stable"] == "1"))
by_t = {}
for r in rows:
    if r["proc"].startswith("memserver"):
        by_t.setdefault(r["t"], []).append(r)
for t, rs in sorted(by_t.items()):
    if len(rs) != 3 or any(x["stable"] != "1" for x in rs):
        continue
    for k in RES:
        vals = [num(x, k) for x in rs]
        if None not in vals:
            series.setdefault(("memservers (sum of 3)", k), {}).setdefault("tier", []).append((t, sum(vals), True))

# The first failover starts things once per JVM (the JDK's virtual-thread scheduler: 5 threads and a poller's
# fds), so a warm-up ends only after the first recovery of its lifetime as well.
recovered = [int(l.split()[0]) for l in open(os.path.join(work, "events.log")) if "healthy again" in l]
def warmup_end(start, pts):
    after = [t for t in recovered if t >= start]
    if not after:
        return start + warm
    judged = [t for t, _, ok in pts if ok and t > after[0]]  # the first stable sample after it is warm-up too
    return max(start + warm, judged[0] if judged else after[0])

mid_t = end_t / 2
table = []
for (proc, key), lives in series.items():
    levels, peaks, verdicts = [], [], []
    allpts = sorted(p for life in lives.values() for p in life)
    for life_id, pts in lives.items():
        start = pts[0][0] if proc == "bridge" else 0
        start = min(start, min(r["t"] for r in rows if r["pid"] == life_id)) if proc == "bridge" else start
        w_end = warmup_end(start, pts)
        wu = [v for t, v, ok in pts if t <= w_end and ok]
        later = [(t, v) for t, v, ok in pts if t > w_end and ok]
        if not wu or not later:
            verdicts.append("-")
            continue
        level = max(wu)
        t_peak, peak = max(later, key=lambda x: x[1])
        levels.append(level)
        peaks.append(peak)
        if peak > level * 1.10:
            soft(f"{proc}{'' if life_id == 'tier' else ' pid ' + life_id}: {key} grew to {peak:.0f} at "
                         f"t={t_peak}s, above 1.10 x its warm-up level {level:.0f}")
            verdicts.append("GREW")
        else:
            verdicts.append("ok")
    def at(t):
        return min(allpts, key=lambda p: abs(p[0] - t))[1] if allpts else None
    fmt = lambda v: "-" if v is None else f"{v:.0f}"
    table.append((proc, key, fmt(allpts[0][1] if allpts else None), fmt(at(warm)), fmt(at(mid_t)), fmt(at(end_t)), "/".join(fmt(x) for x in levels) or "-",
                  "/".join(fmt(x) for x in peaks) or "-", " ".join(verdicts)))
for need in ("bridge", "memservers (sum of 3)"):
    if not any(p == need for p, _ in series):
        fails.append(f"{need}: no judged sample at all")

# p99 of the 4K jobs' completion latency (reads and writes merged) per window, from merged json+ histograms.
rounds = list(csv.DictReader(open(os.path.join(work, "rounds.csv"))))
window = 300 if duration >= 1800 else duration // 3
def bins_of(path):
    out = {}
    d = json.load(open(path))
    for j in d["jobs"]:
        if not (j["jobname"].startswith("rand4k") or j["jobname"].startswith("randrw")):
            continue
        for dd in ("read", "write"):
            for ns, c in j[dd]["clat_ns"].get("bins", {}).items():
                out[int(ns)] = out.get(int(ns), 0) + c
    return out
def p99(rs):
    total = {}
    for r in rs:
        name = "round%s%s" % (r["round"], "" if r["kind"] == "write+verify" else "-after-restart")
        for ns, c in bins_of(os.path.join(work, "fio", name + ".json")).items():
            total[ns] = total.get(ns, 0) + c
    n = sum(total.values())
    if not n:
        return None, 0
    acc = 0
    for ns in sorted(total):
        acc += total[ns]
        if acc >= 0.99 * n:
            return ns / 1000, n
first = [r for r in rounds if (int(r["start"]) + int(r["end"])) / 2 < window]
last = [r for r in rounds if (int(r["start"]) + int(r["end"])) / 2 >= end_t - window]
p_first, n_first = p99(first)
p_last, n_last = p99(last)
if p_first is None or p_last is None:
    fails.append("p99: no fio round in the first or the last window")
elif p_last > 1.5 * p_first:
    soft(f"p99: last {window}s {p_last:.0f} us > 1.5 x first {window}s {p_first:.0f} us")

print()
print(f"# soak: {end_t}s of load, {len(rounds)} fio rounds, warm-up {warm}s per lifetime and past its first recovery, "
      "samples every 10s")
print(f"# first = first judged sample; start = end of warm-up (t={warm}s), middle = t={mid_t:.0f}s, end = t={end_t}s (nearest judged sample); "
      "level = highest warm-up sample, peak = highest judged sample after it; bridge lifetimes split by /")
print("| process | resource | first | start | middle | end | level | peak | verdict |")
print("|---|---|---|---|---|---|---|---|---|")
for row in table:
    print("| " + " | ".join(row) + " |")
kills = sum(1 for l in open(os.path.join(work, "events.log")) if "SIGKILL memserver" in l)
print()
print(f"verify errors / fio failures: {sum(1 for f in fails if f.startswith('fio'))}; memserver kills: {kills}; "
      f"bridge restarts: {sum(1 for l in open(os.path.join(work, 'events.log')) if 'bridge restart: SIGTERM' in l)}; "
      f"lost slabs (max over samples): {lost}")
if pooled_max:
    print("bridge payload buffer pool, highest quiet sample per lifetime: "
          + " / ".join(f"{v:.0f}" for v in pooled_max.values()) + " bytes (bounded by a quarter of --nbd-memory)")
if p_first is not None and p_last is not None:
    print(f"p99 4K clat: first {window}s {p_first:.0f} us ({n_first} I/Os), last {window}s {p_last:.0f} us "
          f"({n_last} I/Os), ratio {p_last / p_first:.2f} (limit 1.5)")
print()
for f in notes:
    print("NOTE (not judged with --judge data):", f)
for f in fails:
    print("FAIL:", f)
print("PASS" if not fails else f"FAIL ({len(fails)} criteria)")
sys.exit(1 if fails else 0)
