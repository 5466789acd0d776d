#!/usr/bin/env bash
# What the ucx provider costs per operation on real verbs, counted rather than timed: in the qemu guest lab
# (kmod-hooks/lab, soft-RoCE, UCX_TLS=rc_verbs,ud_verbs) a memserver and a bridge serve a replicas=1 volume and fio's
# nbd engine runs 4K QD1 random reads and writes (--ops each) and 1M QD8 sequential reads and writes (--ops-1m each,
# ten passes over 64 MiB by default) against the bridge. perf counts, for each row, the context switches and system calls of the bridge and of
# the memserver (and of the bridge's threads, by name and system call), and the RDMA core's table of memory regions
# (rdma res show mr) before and after the row says what each registered and deregistered: steady state should
# register nothing. Not a test, and TCG's times mean little; the counts per operation do not depend on them.
#
#   bench/rdma-costs.sh [--ops N] [--ops-1m N] [--baseline JAR] [--spins LIST] [--zcopy-auto] [--keep DIR]
#   bench/rdma-costs.sh --report DIR VARIANT...     (the tables again, from counts kept with --keep)
#
#   --ops N         operations per 4K row (default 2000: about 10 s per row under TCG)
#   --ops-1m N      operations per 1M row (default 640)
#   --spins LIST    RBRIDGE_UCX_SPIN_US values to run the current build with, comma separated (default "0,":
#                   0 = the progress thread sleeps at once, empty = the build's default budget)
#   --baseline JAR  also run another build's rbridge.jar (its defaults), e.g. one built from an older commit
#   --zcopy-auto    also run the current build with UCX_ZCOPY_THRESH=auto (UCX's own zero-copy threshold)
#   --keep DIR      keep the raw counts (perf and fio output per variant and row) in DIR
#
# Needs what the guest lab needs (kmod-hooks/lab/run-guest --help), python3, and a built cli/target/rbridge.jar.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ops=2000; ops1m=640; baseline=""; spins="0,"; keep=""; report=""; zauto=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ops) ops="$2"; shift 2 ;;
    --ops-1m) ops1m="$2"; shift 2 ;;
    --zcopy-auto) zauto=1; shift ;;
    --baseline) baseline="$2"; shift 2 ;;
    --spins) spins="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --report) report="$2"; shift 2; break ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
report() { # report DIR VARIANT...: the tables from the counts in DIR
  python3 - "$@" <<'EOF'
import json, os, re, sys
share, variants = sys.argv[1], [v.split("=", 1)[0] for v in sys.argv[2:]]
rows = [("rr1", "4K randread QD1"), ("rw1", "4K randwrite QD1"), ("sr8", "1M seq read QD8"), ("sw8", "1M seq write QD8")]

def counts(path):  # the whole process: its threads' counts summed
    out = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 3 and re.fullmatch(r"[0-9.]+", f[1]):
            out[f[3]] = out.get(f[3], 0) + float(f[1])
    return out

def missed_wakes(v):  # the highest count the bridge's log gave (it logs the 1st, 2nd, 4th, 8th...)
    seen = [int(m) for m in re.findall(r"found completions waiting \((\d+) time", open(os.path.join(share, f"{v}.serve.log")).read())]
    return max(seen, default=0)

def thread_roles(path):
    roles = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 3 and re.fullmatch(r"[0-9.]+", f[1]):
            role = re.sub(r"[-:0-9.]+$", "", f[0].rsplit("-", 1)[0]) or f[0]  # comm-tid; comm cut at 15 chars
            # a thread started during the row (the NBD connection's) is counted into the thread that started it
            role = "nbd-conn" if role.startswith("nbd-accept") else role
            roles.setdefault(role, {}).setdefault(f[3], 0)
            roles[role][f[3]] += float(f[1])
    return roles

print("per operation: context switches (cs) and system calls (sys) of the bridge and of the memserver; memory "
      "regions registered (reg_mr, bridge/memserver) and deregistered (bridge) during the whole row; the regions the "
      "bridge holds after it, and their MiB")
print(f"{'row':18} {'variant':14} {'ops':>6} {'p50 us':>8} {'bridge cs':>10} {'bridge sys':>11} "
      f"{'ms cs':>7} {'ms sys':>7} {'reg_mr b/ms':>12} {'dereg b':>8} {'MRs b':>5} {'MiB b':>9}")
threads = []
for key, label in rows:
    for v in variants:
        base = os.path.join(share, f"{v}.{key}")
        text = open(base + ".json").read()
        j = json.loads(text[text.index("{"):])["jobs"][0]  # fio's nbd engine prints a line before the JSON
        n = j["read"]["total_ios"] + j["write"]["total_ios"]
        lat = (j["read"] if j["read"]["total_ios"] else j["write"])["clat_ns"].get("percentile", {})
        b, m = counts(base + ".bridge.threads"), counts(base + ".ms.threads")
        ms_pds = set(open(os.path.join(share, "ms.pdns")).read().split())
        domains = {"memserver": ms_pds,
                   "bridge": set(open(os.path.join(share, f"{v}.pdns")).read().split()) - ms_pds}
        def regions(path, who):  # the memory regions in the process's protection domains: mrn -> bytes
            out = {}
            for line in open(path):
                m, d, n = (re.search(rf"\b{k} (\d+)\b", line) for k in ("mrn", "pdn", "mrlen"))
                if m and d and d.group(1) in domains[who]:
                    out[m.group(1)] = int(n.group(1)) if n else 0
            return out
        held = regions(base + ".mr-after", "bridge")
        held_bytes = sum(held.values())
        held = len(held)
        def changes(who):
            before, after = set(regions(base + ".mr-before", who)), set(regions(base + ".mr-after", who))
            return len(after - before), len(before - after)
        (breg, bdereg), (mreg, _) = changes("bridge"), changes("memserver")
        print(f"{label:18} {v:14} {n:6d} {lat.get('50.000000', 0) / 1000:8.1f} "
              f"{b.get('context-switches', 0) / n:10.2f} {b.get('raw_syscalls:sys_enter', 0) / n:11.2f} "
              f"{m.get('context-switches', 0) / n:7.2f} {m.get('raw_syscalls:sys_enter', 0) / n:7.2f} "
              f"{breg:5d}/{mreg:<6d} {bdereg:8d} {held:5d} {held_bytes / 2**20:9.1f}")
        for role, ev in sorted(thread_roles(base + ".bridge.threads").items()):
            cs, sc = ev.get("context-switches", 0) / n, ev.get("raw_syscalls:sys_enter", 0) / n
            if cs >= 0.01 or sc >= 0.01:
                named = sorted(((c / n, k.split("sys_enter_")[1]) for k, c in ev.items() if "sys_enter_" in k),
                               reverse=True)
                top = " ".join(f"{name} {per:.2f}" for per, name in named if per >= 0.05)
                threads.append(f"{label:18} {v:14} {role:16} {cs:8.2f} {sc:8.2f}  {top}")
print()
print("completions the bridge's progress thread found only when the watchdog woke it (UCX signalled no event), whole run:")
print("  " + ", ".join(f"{v} >= {missed_wakes(v)}" for v in variants))
print()
print("the bridge's threads by name, per operation (threads under 0.01 of both left out)")
print(f"{'row':18} {'variant':14} {'thread':16} {'cs':>8} {'sys':>8}  system calls by name, per operation (0.05 and up)")
print("\n".join(threads))
EOF
}

if [ -n "$report" ]; then
  report "$report" "$@"
  exit 0
fi
[[ $ops =~ ^[0-9]+$ && $ops -ge 100 ]] || { echo "--ops must be a number of at least 100" >&2; exit 2; }
[[ $ops1m =~ ^[0-9]+$ && $ops1m -ge 8 ]] || { echo "--ops-1m must be a number of at least 8" >&2; exit 2; }
jar="$root/cli/target/rbridge.jar"
[ -f "$jar" ] || { echo "no $jar: build it first (./mvnw -q install -DskipTests)" >&2; exit 2; }

share="$(mktemp -d)"
trap 'rm -rf "$share"' EXIT
cp "$jar" "$share/current.jar"
cp "$root/bench/rdma-costs-guest.sh" "$share/job.sh"
variants=()
IFS=, read -r -a spin_list <<< "$spins"
[[ $spins == *, || -z $spins ]] && spin_list+=("")
declare -A seen=()
for s in "${spin_list[@]}"; do
  [ -z "${seen[x$s]:-}" ] || continue
  seen[x$s]=1
  variants+=("spin${s:-default}=/share/current.jar:$s")
done
[ "$zauto" = 0 ] || variants+=("zauto=/share/current.jar::auto")
if [ -n "$baseline" ]; then
  cp "$baseline" "$share/baseline.jar"
  variants+=("baseline=/share/baseline.jar:")
fi

echo "# guest: ${variants[*]}, $ops operations per 4K row, $ops1m per 1M row" >&2
rc=0
"$root/kmod-hooks/lab/run-guest" --quiet --timeout 3000 --mem 3072 --share "$share" --env "OPS=$ops" --env "OPS_1M=$ops1m" \
  "$share/job.sh" "${variants[@]}" >"$share/run-guest.out" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  tail -40 "$share/run-guest.out" >&2
  for f in "$share"/*.log; do [ -f "$f" ] && { echo "---- $f" >&2; tail -20 "$f" >&2; }; done
  echo "the guest run failed (exit $rc)" >&2
  exit 1
fi
[ -z "$keep" ] || { mkdir -p "$keep"; cp -r "$share"/. "$keep"/; }

report "$share" "${variants[@]}"
