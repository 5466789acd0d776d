#!/bin/bash
# Runs inside the lab guest for SplitBrainGuestTest: fencing enforced by the RDMA NIC (soft-RoCE, real verbs only).
# One memserver on --transport ucx over rxe0; bridge A serves volume "disk" (R=1) to /dev/nbd0 and fio writes all
# over it without end. A's control connection to the memserver is then cut with a firewall rule while RoCE keeps
# flowing, A's lease lapses, and bridge B takes the volume over and writes and checks its own data on /dev/nbd1 while
# A still tries to write. B's data must verify, A's writes must fail, and the memory regions the NIC knows for the
# volume must have new rkeys. $RB_CP is the classpath (in ./cp) of the code under test; $RB_MAIN, when set, the main
# class of an older build's launcher.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce
RB_JAVA_OPTS=-XX:MaxDirectMemorySize=512m
slab_rkeys() { # the rkeys of the volume's 16 MiB slab regions the NIC knows now, sorted
  rdma res show mr | awk '{ for (i = 1; i < NF; i++) { if ($i == "rkey") k = $(i + 1); if ($i == "mrlen") l = $(i + 1) } }
                          l == 16777216 { print k }' | sort
}

say "soft-RoCE on eth0"
soft_roce eth0

ip=10.0.2.15
say "one memserver on ucx over rxe0"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > token # the memservers lend only to holders of it
rb memserver --transport ucx --listen $ip:7471 --token-file token --capacity 256M --admin none --metrics none >ms.out 2>ms.log &
await 120 grep -q lending ms.out

# A's watchdog must outlast B's start on a loaded machine (two minutes and more under TCG): when it fires, A reconnects on
# a connection the rule below does not cut and takes its lease back before B can. It costs nothing when all goes well:
# A's connection is ended once B's data is checked.
serve() { # serve NAME NBD-PORT ADMIN-PORT: a bridge with a 4 s lease and a patient watchdog
  rb serve --transport ucx --token-file token --memserver $ip:7471 --volume disk,size=64M,replicas=1,slab=16M --lease 4 --timeout 300 \
    --listen 127.0.0.1:"$2" --admin 127.0.0.1:"$3" --metrics none >"$1.out" 2>"$1.log" &
}
modprobe nbd nbds_max=2
say "bridge A serves the volume; fio writes all over it through /dev/nbd0, without end"
serve a 10809 7473
await 180 grep -q "serving nbd://" a.out
nbd-client -N disk 127.0.0.1 10809 /dev/nbd0 -b 4096
fio --name=a --filename=/dev/nbd0 --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=4 --size=64M \
  --time_based --runtime=900 --buffer_pattern=0xa5 --continue_on_error=all --output-format=json \
  --output=fio-a.json >fio-a.out 2>fio-a.err &
fio_a=$!
sleep 5
before=$(slab_rkeys)
echo "rkeys before: $(echo $before)"
[ -n "$before" ] || { echo "guest: the NIC knows no 16 MiB region: nothing was registered" >&2; exit 1; }

a_pid=$(pgrep -f -- "--listen 127.0.0.1:10809")
ports=$(ss -Htn state established "( dport = :7471 )" -p | grep "pid=$a_pid," | awk '{ sub(/.*:/, "", $3); print $3 }')
[ -n "$ports" ] || { echo "guest: no control connection of bridge A (pid $a_pid) found" >&2; exit 1; }
say "cutting bridge A's control connection (local port(s) $(echo $ports)); RoCE is left alone"
nft add table inet cut
nft 'add chain inet cut out { type filter hook output priority 0; }'
for p in $ports; do
  nft add rule inet cut out tcp sport "$p" drop
  nft add rule inet cut out tcp dport "$p" drop
done
sleep 8 # A's 4 s lease lapses: it cannot renew

say "bridge B takes the volume over"
serve b 10810 7483
await 180 grep -q "serving nbd://" b.out
after=$(slab_rkeys)
echo "rkeys after: $(echo $after)"
stale=$(comm -12 <(echo "$before") <(echo "$after") | tr '\n' ' ')
if [ -n "${stale// }" ]; then
  echo "rkeys: the NIC still takes A's rkey(s) $stale after the takeover"
else
  echo "rkeys: all new after the takeover"
fi

nbd-client -N disk 127.0.0.1 10810 /dev/nbd1 -b 4096
say "B writes 16 MiB of checksummed blocks, waits while A keeps trying, then checks them"
b_job=(--name=b --filename=/dev/nbd1 --ioengine=libaio --direct=1 --rw=write --bs=4k --iodepth=4 --size=16M
       --verify=crc32c --verify_fatal=1 --output-format=terse --terse-version=3)
fio "${b_job[@]}" --do_verify=0 >fio-b-write.out
sleep 10
set +e
fio "${b_job[@]}" --verify_only >fio-b-verify.out 2>fio-b-verify.err
verify_rc=$?
set -e
echo "B verify: exit $verify_rc"
head -5 fio-b-verify.err

# How A was shut out, counted before A is let go below. The NIC answers a PUT with a deregistered rkey with a remote
# access error, which puts A's RC queue pair in the error state; UCX reports that as "Connection reset by remote peer
# (status -25)" for whatever was in flight on it. The memserver also closes the endpoint of a client whose lease was
# taken over: its queue pair is gone, so nothing A sends on it later lands, whatever rkey it carries.
a_ucx_failures=$(grep -c 'failed in UCX' a.log || true)
a_closed=$(grep -c "client $ip:$(echo $ports | cut -d' ' -f1): closing its UCX endpoint (fenced" ms.log || true)
say "B's data checked; A's control connection ended"
# A's requests may still wait in A's bridge, whose memserver closed A's endpoint, so no completion comes: left alone
# they would wait for A's 300 s watchdog to declare the connection dead and fail them. Ending that connection in A's
# own kernel (ss -K) has A do the same now: the connection lost, its pending operations failed, the volume fenced
# when A comes back (its lease was taken). Only after B's check, which is what the test is about.
for p in $ports; do
  ss -Htn -K state established "( sport = :$p and dport = :7471 )" >/dev/null
done
kill -INT $fio_a 2>/dev/null || true
# fio writes its summary as it stops, once its I/O returns; it is killed if that takes longer than 170 s. (A poll,
# not a sleeper in the background: one left running would hold the job's output and keep the guest up until it ends.)
fio_a_ended() { [ ! -e /proc/$fio_a ] || grep -q '^[0-9]* (fio) Z' /proc/$fio_a/stat; }
await 170 fio_a_ended || kill -KILL $fio_a 2>/dev/null || true
wait $fio_a 2>/dev/null || true
echo "A writes: errors $(grep -m1 '"total_err"' fio-a.json | tr -dc 0-9), written KiB $(grep -m1 '"io_kbytes"' \
  <(sed -n '/"write"/,$p' fio-a.json) | tr -dc 0-9)"
echo "A log: $a_ucx_failures UCX failure(s)"
echo "memserver: $a_closed fenced endpoint(s) of A closed"
grep -m 3 'failed in UCX\|stops serving' a.log | cut -c1-240 || true
nft delete table inet cut
nbd-client -d /dev/nbd1 || true
nbd-client -d /dev/nbd0 || true
[ "$verify_rc" = 0 ] || { echo "guest: B's data did not verify: A overwrote it" >&2; exit 1; }
say "split brain fenced"
