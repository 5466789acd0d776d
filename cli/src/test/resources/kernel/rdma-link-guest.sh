#!/bin/bash
# Runs inside the near guest of RdmaLinkGuestTest: RoCE between two guests loses packets, then goes away under I/O
# and comes back (soft-RoCE, real verbs only). The far guest (rdma-link-far.sh) runs one memserver on --transport ucx
# at 192.168.77.1 over the wire, eth1; here one bridge serves volume "disk" (R=1) to /dev/nbd0. fio writes checksummed
# blocks. Then netem drops packets on eth1 while fio writes and verifies more: RC retransmits, nothing is corrupt.
# Then fio verifies in a loop; eth1 (rxe0's netdev) goes down: every request must fail (EIO from the bridge, not a
# hang); eth1 comes back: the bridge must reconnect, find its regions holding every acknowledged write, and the blocks
# must verify again. $TOKEN is the memserver's token, $RB_CP the classpath (in ./cp) of the code under test.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce
RB_JAVA_OPTS=-XX:MaxDirectMemorySize=512m

counters() { # counters: rxe0's hardware counters, one "name value" a line
  for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "$(basename "$f") $(cat "$f")"; done
}
counter() { awk -v n="$1" '$1 == n { print $2 }' "$2"; }

say "soft-RoCE on eth1 (the wire)"
ip link set eth1 up
ip addr add 192.168.77.2/24 dev eth1
soft_roce eth1
ip=192.168.77.1
printf '%s\n' "$TOKEN" > token
await 240 bash -c "exec 3<>/dev/tcp/$ip/7471 2>/dev/null" # the far guest's memserver is up
say "the far memserver answers"
rb serve --transport ucx --token-file token --memserver $ip:7471 --volume disk,size=64M,replicas=1,slab=16M --timeout 10 \
  --listen 127.0.0.1:10809 --admin 127.0.0.1:7473 --metrics none >a.out 2>a.log &
await 180 grep -q "serving nbd://" a.out
modprobe nbd nbds_max=1
nbd-client -N disk 127.0.0.1 10809 /dev/nbd0 -b 4096 -t 120
job=(--name=v --filename=/dev/nbd0 --ioengine=libaio --direct=1 --bs=4k --iodepth=4 --size=32M --verify=crc32c
     --output-format=terse --terse-version=3)
say "fio writes 32 MiB of checksummed blocks"
fio "${job[@]}" --rw=write --do_verify=0 >write.out

say "1 % of eth1's packets lost: fio writes and verifies 4 MiB more"
counters > counters.before
tc qdisc add dev eth1 root netem loss 1%
lossy=(--name=lossy --filename=/dev/nbd0 --ioengine=libaio --direct=1 --bs=4k --iodepth=4 --offset=48M --size=4M
       --rw=randwrite --verify=crc32c --verify_fatal=1 --do_verify=1 --output-format=terse --terse-version=3)
fio "${lossy[@]}" >lossy.out
tc -s qdisc show dev eth1 | tee netem.out
tc qdisc del dev eth1 root
counters > counters.after
dropped=$(awk '/dropped/ { sub(",", "", $7); print $7; exit }' netem.out)
retried=0
for c in duplicate_request out_of_seq_request rcvd_seq_err completer_retry_err; do
  retried=$((retried + $(counter $c counters.after) - $(counter $c counters.before)))
done
echo "lossy: fio errors $(cut -d';' -f5 lossy.out), written KiB $(cut -d';' -f47 lossy.out), netem dropped $dropped," \
  "rxe retransmission signs $retried"

say "verifying in a loop"
touch verifying
( while [ -e verifying ]; do
    set +e; fio "${job[@]}" --rw=read --verify_only --verify_fatal=0 >>verify.out 2>>verify.err; rc=$?; set -e
    echo "$(date +%s) $rc"
  done ) >verify.times &
loop=$!
sleep 8
down=$(date +%s)
say "eth1 down: rxe0's port goes down under I/O"
ip link set eth1 down
await 30 sh -c 'rdma link show rxe0/1 | grep -q DOWN'
await 120 sh -c "awk -v t=$down '\$1 > t && \$2 != 0 { f = 1 } END { exit !f }' verify.times"
first=$(awk -v t="$down" '$1 > t && $2 != 0 { print $1 - t; exit }' verify.times)
echo "link down: first failed verify ${first}s after"
sleep 20
up=$(date +%s)
say "eth1 up"
ip link set eth1 up
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
