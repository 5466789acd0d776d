#!/bin/bash
# Runs inside the far guest of RdmaLinkGuestTest: one memserver on --transport ucx over soft-RoCE on eth1, the wire
# to the near guest (192.168.77.1 here, .2 there). It lends until the host powers the guest off. $TOKEN is the
# memservers' token, $RB_CP the classpath (in ./cp) of the code under test.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce
RB_JAVA_OPTS=-XX:MaxDirectMemorySize=256m

say "soft-RoCE on eth1 (the wire)"
ip link set eth1 up
ip addr add 192.168.77.1/24 dev eth1
soft_roce eth1
printf '%s\n' "$TOKEN" > token
rb memserver --transport ucx --listen 192.168.77.1:7471 --token-file token --capacity 256M --admin none \
  --metrics none >ms.out 2>ms.log &
await 120 grep -q lending ms.out
say "memserver lending"
wait
