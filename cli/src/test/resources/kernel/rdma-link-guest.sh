#!/bin/bash
# Runs inside the lab guest for RdmaLinkGuestTest: the RoCE link goes away under I/O and comes back (soft-RoCE, real
# verbs only). One memserver on --transport ucx over rxe0, one bridge serving volume "disk" (R=1) to /dev/nbd0. fio
# writes checksummed blocks, then verifies them in a loop; eth0 (rxe0's netdev) goes down: every request must fail
# (EIO from the bridge, not a hang); eth0 comes back: the bridge must reconnect, find its regions holding every
# acknowledged write, and the blocks must verify again. $RB_CP is the classpath (in ./cp) of the code under test.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
t0=$SECONDS
say() { echo "guest: [$((SECONDS - t0))s] $*"; }
rb() { java --enable-native-access=ALL-UNNAMED -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:MaxDirectMemorySize=512m \
         -cp "$RB_CP" dev.rbridge.cli.Main "$@"; }
await() { # await SECONDS COMMAND...
  local limit=$1; shift
  for _ in $(seq $((limit * 5))); do "$@" && return 0; sleep 0.2; done
  echo "guest: gave up waiting for: $*" >&2; return 1
}

say "soft-RoCE on eth0"
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev eth0
await 30 sh -c 'rdma link show rxe0/1 | grep -q ACTIVE'
export UCX_ERROR_SIGNALS= UCX_NET_DEVICES=rxe0:1 UCX_TLS=rc_verbs,ud_verbs UCX_UD_VERBS_ETH_DGID_CHECK=n \
       UCX_KEEPALIVE_INTERVAL=inf
ip=10.0.2.15
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > token # the memservers lend only to holders of it
rb memserver --transport ucx --listen $ip:7471 --token-file token --capacity 256M --admin none --metrics none >ms.out 2>ms.log &
await 120 grep -q lending ms.out
rb serve --transport ucx --token-file token --memserver $ip:7471 --volume disk,size=64M,replicas=1,slab=16M --timeout 10 \
  --listen 127.0.0.1:10809 --admin 127.0.0.1:7473 --metrics none >a.out 2>a.log &
await 180 grep -q "serving nbd://" a.out
modprobe nbd nbds_max=1
nbd-client -N disk 127.0.0.1 10809 /dev/nbd0 -b 4096 -t 120
job=(--name=v --filename=/dev/nbd0 --ioengine=libaio --direct=1 --bs=4k --iodepth=4 --size=32M --verify=crc32c
     --output-format=terse --terse-version=3)
say "fio writes 32 MiB of checksummed blocks"
fio "${job[@]}" --rw=write --do_verify=0 >write.out

say "verifying in a loop"
touch verifying
( while [ -e verifying ]; do
    set +e; fio "${job[@]}" --rw=read --verify_only --verify_fatal=0 >>verify.out 2>>verify.err; rc=$?; set -e
    echo "$(date +%s) $rc"
  done ) >verify.times &
loop=$!
sleep 8
down=$(date +%s)
say "eth0 down: rxe0's port goes down under I/O"
ip link set eth0 down
await 30 sh -c 'rdma link show rxe0/1 | grep -q DOWN'
await 120 sh -c "awk -v t=$down '\$1 > t && \$2 != 0 { f = 1 } END { exit !f }' verify.times"
first=$(awk -v t="$down" '$1 > t && $2 != 0 { print $1 - t; exit }' verify.times)
echo "link down: first failed verify ${first}s after"
sleep 20
up=$(date +%s)
say "eth0 up"
ip link set eth0 up
await 30 sh -c 'rdma link show rxe0/1 | grep -q ACTIVE'
await 180 grep -q "came back holding every acknowledged write" a.log
await 120 sh -c "awk -v t=$up '\$1 > t && \$2 == 0 { f = 1 } END { exit !f }' verify.times"
back=$(awk -v t="$up" '$1 > t && $2 == 0 { print $1 - t; exit }' verify.times)
echo "link up: first clean verify ${back}s after"
rm verifying
wait $loop || true
grep -m 3 'lost its last replica\|is down\|came back\|is up' a.log | cut -c1-200 || true
grep 'periodic wake found' a.log | tail -1 | cut -c1-260 || true # a completion UCX did not signal, found by a kick

say "a last verify, to the end of the data"
set +e
fio "${job[@]}" --rw=read --verify_only --verify_fatal=1 >final.out 2>final.err
final=$?
set -e
echo "final verify: exit $final"
head -3 final.err
nbd-client -d /dev/nbd0 || true
[ "$final" = 0 ] || { echo "guest: the data did not verify after the link came back" >&2; exit 1; }
say "link outage survived"
