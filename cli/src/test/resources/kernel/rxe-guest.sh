#!/bin/bash
# Runs inside the lab guest for RxeGuestTest: real RDMA verbs on soft-RoCE. rdma_rxe on eth0 gives an RDMA device;
# two memservers and a bridge run here on --transport ucx over it (UCX_TLS=rc_verbs,ud_verbs: no tcp, no shared
# memory), then: ping with validation, bench with UCX's lanes, the memserver's progress thread idle during one-sided
# traffic, and the kernel nbd-client on /dev/nbd0 against that bridge with write_data verifying. $RB_CP is the
# classpath (in ./cp) of the code under test; ./write_data is built on the host. The guest has two NUMA nodes with
# eth0 on node 1 (run-guest --numa), so the memservers place region memory there.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce
RB_JAVA_OPTS=-XX:MaxDirectMemorySize=512m
thread_ticks() { # thread_ticks PID COMM-PREFIX: utime+stime of that process's threads whose name starts so
  local sum=0 n=0 t
  for t in /proc/"$1"/task/*; do
    if grep -q "^$2" "$t/comm" 2>/dev/null; then
      sum=$((sum + $(awk '{print $14 + $15}' "$t/stat"))) n=$((n + 1))
    fi
  done
  [ "$n" -gt 0 ] || { echo "guest: process $1 has no thread named $2*" >&2; return 1; }
  echo "$sum"
}

say "soft-RoCE on eth0"
soft_roce eth0
rdma link show rxe0/1
ibv_devices

ip=10.0.2.15
say "two memservers on ucx over rxe0"
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > token # the memservers lend only to holders of it
rb memserver --transport ucx --listen $ip:7471 --token-file token --capacity 512M --admin none --metrics none >ms1.out 2>ms1.log &
ms1=$!
rb memserver --transport ucx --listen $ip:7481 --token-file token --capacity 512M --admin none --metrics none >ms2.out 2>ms2.log &
await 120 grep -q lending ms1.out
await 120 grep -q lending ms2.out
ms1=$(pgrep -P "$ms1" java) # the JVM, not the subshell that runs rb in the background
cat ms1.out ms2.out

say "ping with validation"
rb ping --transport ucx --token-file token --server $ip:7471 --timeout 60 --count 20 --size 64K --validate | tee ping.out
grep -q "all validated" ping.out

say "bench: latency and the lanes UCX chose"
rb bench --transport ucx --token-file token --server $ip:7471 --timeout 60 --test read-lat --size 4K --iters 2000 | tee bench-lat.out
grep "UCX lanes" bench-lat.out
grep "UCX lanes" bench-lat.out | grep -q "rc_verbs/rxe0"
if grep "UCX lanes" bench-lat.out | grep -Eq "tcp/|posix|sysv|cma"; then
  echo "guest: UCX used a non-RDMA lane" >&2; exit 1
fi

say "the memserver stays passive during one-sided writes"
before=$(thread_ticks $ms1 rdma-ucx-server)
all_before=$(awk '{print $14 + $15}' /proc/$ms1/stat)
rb bench --transport ucx --token-file token --server $ip:7471 --timeout 60 --test write-bw --size 64K --tx-depth 8 --time 8 | tee bench-bw.out
after=$(thread_ticks $ms1 rdma-ucx-server)
all_after=$(awk '{print $14 + $15}' /proc/$ms1/stat)
echo "passive: memserver progress thread $((after - before)) ticks, whole memserver $((all_after - all_before)) ticks"
echo "passive: ticks per second $(getconf CLK_TCK)"

say "rbridge serve on ucx, replicated on both memservers"
rb serve --transport ucx --token-file token --memserver $ip:7471 --memserver $ip:7481 --volume disk,size=256M,replicas=2,slab=16M --timeout 60 \
  --listen 127.0.0.1:10809 --admin 127.0.0.1:7473 --metrics none >serve.out 2>serve.log &
await 180 grep -q "serving nbd://" serve.out
cat serve.out
modprobe nbd nbds_max=2
nbd-client -N disk 127.0.0.1 10809 /dev/nbd0 -b 4096
say "write_data on /dev/nbd0 (kernel nbd -> bridge -> RDMA over rxe -> memservers)"
./write_data --threads 2 --qd 8 --size 64M --run 1 /dev/nbd0
say "fio verify=crc32c on /dev/nbd0 (another region of the volume)"
fio --name=rxe-verify --filename=/dev/nbd0 --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=8 \
  --offset=128M --size=32M --verify=crc32c --verify_fatal=1 --do_verify=1 --output-format=terse --terse-version=3 \
  >fio.out
echo "fio: errors $(cut -d';' -f5 fio.out), written KiB $(cut -d';' -f47 fio.out)"
nbd-client -d /dev/nbd0
say "region memory on the NIC's NUMA node"
grep "NUMA placement" ms1.log
on1=0 elsewhere=0
while read -r line; do # pages of memserver 1's mappings with policy prefer:1, by node (numa_maps: N<node>=<pages>)
  for f in $line; do
    case "$f" in N1=*) on1=$((on1 + ${f#N1=})) ;; N[0-9]*=*) elsewhere=$((elsewhere + ${f#*=})) ;; esac
  done
done < <(grep ' prefer:1 ' /proc/$ms1/numa_maps)
echo "numa: ms1 regions prefer node 1, pages on node 1: $on1, elsewhere: $elsewhere"
rb admin --bridge 127.0.0.1:7473 --token-file token volumes | tee volumes.out
grep -q healthy volumes.out
say "all verified"
