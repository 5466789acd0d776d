#!/usr/bin/env bash
# Says whether this host is ready for rbridge's ucx transport and a memserver's options, with advice for each
# missing piece. Read-only; exits 0 when everything needed for --transport ucx is present, 1 otherwise.
#
#   kmod-hooks/check-rdma.sh
set -uo pipefail
[ "${1:-}" = -h ] || [ "${1:-}" = --help ] && { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
bad=0
ok() { printf '  ok    %s\n' "$1"; }
warn() { printf '  warn  %s\n        -> %s\n' "$1" "$2"; }
fail() { printf '  FAIL  %s\n        -> %s\n' "$1" "$2"; bad=1; }

echo "RDMA devices"
devs=$(ls /sys/class/infiniband 2>/dev/null || true)
if [ -n "$devs" ]; then
  for d in $devs; do
    state=$(cat /sys/class/infiniband/"$d"/ports/1/state 2>/dev/null | awk '{print $2}')
    link=$(cat /sys/class/infiniband/"$d"/ports/1/link_layer 2>/dev/null)
    if [ "$state" = ACTIVE ]; then ok "$d port 1 $state ($link)"; else warn "$d port 1 ${state:-unknown}" "check cabling / the netdev under it"; fi
  done
else
  fail "no RDMA device (/sys/class/infiniband is empty)" \
       "use --transport tcp, or bring up soft-RoCE: kmod-hooks/setup-rxe.sh"
fi

echo "Libraries"
if ldconfig -p 2>/dev/null | grep -q 'libucp.so.0'; then ok "libucx0 (UCX)"; else fail "libucx0 missing" "apt-get install libucx0 ucx-utils"; fi
if ldconfig -p 2>/dev/null | grep -q 'libibverbs.so.1'; then ok "libibverbs1"; else fail "libibverbs1 missing" "apt-get install libibverbs1 ibverbs-providers"; fi
if [ -n "$devs" ] && [ -d /etc/libibverbs.d ] && ls /etc/libibverbs.d/*.driver >/dev/null 2>&1; then ok "verbs providers (ibverbs-providers)"
elif [ -n "$devs" ]; then fail "no verbs provider drivers" "apt-get install ibverbs-providers"; fi
command -v ucx_info >/dev/null && ok "ucx_info (ucx-utils): 'ucx_info -d' lists transports" || warn "ucx_info missing" "apt-get install ucx-utils (diagnosis only)"

echo "Memory"
lim=$(ulimit -l)
if [ "$lim" = unlimited ]; then ok "memlock unlimited"
else warn "memlock limit ${lim} KiB" "registered memory needs it: LimitMEMLOCK=infinity (systemd) or ulimit -l unlimited (deploy/systemd units set it)"; fi
hp=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
if [ "$hp" -gt 0 ]; then ok "huge pages: $hp x 2 MiB reserved (memserver --huge-pages can use them)"
else warn "no huge pages reserved" "optional: sysctl vm.nr_hugepages=N for memserver --huge-pages"; fi

echo "Kernel nbd (for rbridge attach / nbd-client)"
if [ -d /sys/module/nbd ]; then ok "nbd loaded ($(ls -d /sys/block/nbd* 2>/dev/null | wc -l) devices)"
else warn "nbd not loaded" "kmod-hooks/setup-nbd.sh (modprobe nbd, max_sectors_kb)"; fi

[ "$bad" = 0 ] && echo "ready for --transport ucx" || echo "not ready for --transport ucx (--transport tcp works anywhere)"
exit "$bad"
