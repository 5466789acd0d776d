#!/usr/bin/env bash
# Brings up soft-RoCE (the rdma_rxe driver) on a network interface, for hosts without an RDMA NIC, so that
# `--transport ucx` runs over real RDMA verbs (emulated by the kernel on a plain Ethernet NIC). Root.
#
#   kmod-hooks/setup-rxe.sh [--netdev IF] [--name rxe0] [--remove]
#
#   --netdev IF   the interface to put RoCE on (default: the one with the default route)
#   --name NAME   the RDMA device name (default rxe0)
#   --remove      delete the device again
#
# Use it with: UCX_NET_DEVICES=rxe0:1 UCX_TLS=rc_verbs,ud_verbs UCX_UD_VERBS_ETH_DGID_CHECK=n \
#              UCX_KEEPALIVE_INTERVAL=inf rbridge memserver --transport ucx ...
# (why each is needed: docs/transports.md, "Soft-RoCE"). Needs rdma-core's `rdma` tool (iproute2) and
# ibverbs-providers (librxe).
set -euo pipefail
netdev=""; name=rxe0; remove=0
while [ $# -gt 0 ]; do
  case "$1" in
    --netdev) netdev="$2"; shift 2 ;;
    --name) name="$2"; shift 2 ;;
    --remove) remove=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup-rxe: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "setup-rxe: run as root" >&2; exit 1; }
command -v rdma >/dev/null || { echo "setup-rxe: no 'rdma' tool: apt-get install iproute2" >&2; exit 1; }

if [ "$remove" = 1 ]; then
  rdma link delete "$name"
  echo "setup-rxe: removed $name"
  exit 0
fi
if [ -z "$netdev" ]; then
  netdev=$(ip route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
  [ -n "$netdev" ] || { echo "setup-rxe: no default route; give --netdev IF" >&2; exit 1; }
fi
if ! modprobe rdma_rxe 2>/tmp/setup-rxe.err; then
  echo "setup-rxe: modprobe rdma_rxe failed: $(cat /tmp/setup-rxe.err) (needs CONFIG_RDMA_RXE; containers cannot load" \
       "modules)" >&2
  exit 1
fi
if rdma link show "$name/1" >/dev/null 2>&1; then
  echo "setup-rxe: $name already exists"
else
  rdma link add "$name" type rxe netdev "$netdev"
  echo "setup-rxe: $name on $netdev"
fi
rdma link show "$name/1"
