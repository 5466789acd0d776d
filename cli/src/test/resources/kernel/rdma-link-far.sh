#!/bin/bash
# Runs inside the far guest of RdmaLinkGuestTest: one memserver on --transport ucx over soft-RoCE on eth1, the wire
# to the near guest (192.168.77.1 here, .2 there). It lends until the host powers the guest off. $TOKEN is the
# memservers' token, $RB_CP the classpath (in ./cp) of the code under test.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
t0=$SECONDS
say() { echo "guest: [$((SECONDS - t0))s] $*"; }
rb() { java --enable-native-access=ALL-UNNAMED -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:MaxDirectMemorySize=256m \
         -cp "$RB_CP" dev.rbridge.cli.Main "$@"; }
await() { # await SECONDS COMMAND...
  local limit=$1; shift
  for _ in $(seq $((limit * 5))); do "$@" && return 0; sleep 0.2; done
  echo "guest: gave up waiting for: $*" >&2; return 1
}

say "soft-RoCE on eth1 (the wire)"
ip link set eth1 up
ip addr add 192.168.77.1/24 dev eth1
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev eth1
await 30 sh -c 'rdma link show rxe0/1 | grep -q ACTIVE'
export UCX_ERROR_SIGNALS= UCX_NET_DEVICES=rxe0:1 UCX_TLS=rc_verbs,ud_verbs UCX_UD_VERBS_ETH_DGID_CHECK=n \
       UCX_KEEPALIVE_INTERVAL=inf
printf '%s\n' "$TOKEN" > token
rb memserver --transport ucx --listen 192.168.77.1:7471 --token-file token --capacity 256M --admin none \
  --metrics none >ms.out 2>ms.log &
await 120 grep -q lending ms.out
say "memserver lending"
wait
