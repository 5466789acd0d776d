#!/bin/bash
# Runs inside the lab guest for SwapGuestTest: the guest swaps onto an rbridge device it serves itself. The host runs
# one memserver on its loopback (10.0.2.2:$MS_PORT here, token $TOKEN); in the guest, `rbridge serve` exports a 2 GiB
# volume on it and `rbridge attach` hands the volume to /dev/nbd0, which becomes the guest's only swap. Then
# ./swap_hog touches 1.5 times the guest's RAM, so most of it goes to swap, that is, through this very bridge, and
# verifies every page on each pass. With PROTECT=1 both processes run with --mlock-all --io-flusher on; with
# PROTECT=0 with neither (to see what the protections are for). $RB_CP is the classpath (in ./cp).
set -euo pipefail
# On a failure the kernel lists the tasks blocked in D state with their stacks (sysrq w), to say where it hung.
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2; echo w > /proc/sysrq-trigger; sleep 2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce
# A small fixed heap, committed (and, with --mlock-all, locked) at start; C1 only and few malloc arenas, so the two
# JVMs leave most of the guest's RAM to the program that makes it swap.
RB_ENV=MALLOC_ARENA_MAX=2
RB_JAVA_OPTS="-Xms64m -Xmx64m -Xss512k -XX:MaxDirectMemorySize=320m"
started() { # started PID FILE PATTERN LOG: wait until FILE says PATTERN; fail at once (with LOG) if PID ended
  for _ in $(seq 1500); do
    grep -q "$3" "$2" && return 0
    kill -0 "$1" 2>/dev/null || { echo "guest: process $1 ended before '$3':" >&2; cat "$4" >&2; return 1; }
    sleep 0.2
  done
  echo "guest: gave up waiting for '$3' in $2" >&2; cat "$4" >&2; return 1
}
kb() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }

if [ "${PROTECT:-1}" = 1 ]; then
  protect=(--mlock-all --io-flusher on)
else
  protect=(--io-flusher off)
fi
swapoff -a
dmesg -n 7
echo 1 > /proc/sys/kernel/sysrq
# The reserve the kernel keeps free for allocations that cannot wait (the network buffers that carry swap I/O through
# the bridge's sockets among them): a userspace block server's sockets cannot draw on the emergency reserve the
# kernel's own swap paths use (SOCK_MEMALLOC), so it needs room above the watermarks. See docs/operations.md. Swap-in
# reads 2^page-cluster pages per fault: 64 (256 KiB) rather than 8 makes each round trip through the bridge count.
sysctl -q vm.min_free_kbytes=65536 vm.watermark_scale_factor=200 vm.page-cluster=6 kernel.hung_task_timeout_secs=20
modprobe nbd nbds_max=2
printf '%s\n' "$TOKEN" > /tmp/token
say "guest RAM $(awk '/MemTotal/ { print int($2 / 1024) }' /proc/meminfo) MiB; protections: ${protect[*]}"

rb serve --memserver "10.0.2.2:$MS_PORT" --token-file /tmp/token --volume swap,size=2G,replicas=1 \
  --listen 127.0.0.1:10809 --metrics none --timeout 10 --nbd-memory 48M --max-payload 8M "${protect[@]}" \
  >serve.out 2>serve.log &
serve_pid=$!
started $serve_pid serve.out serving serve.log
serve_pid=$(pgrep -f "dev.rbridge.cli.Main serve")   # the JVM itself, not the shell that started it
rb attach --device /dev/nbd0 --connections 1 --timeout 60 --dead-conn-timeout 120 "${protect[@]}" \
  nbd://127.0.0.1:10809/swap >attach.out 2>attach.log &
attach_pid=$!
started $attach_pid attach.out "watching /dev/nbd0" attach.log
attach_pid=$(pgrep -f "dev.rbridge.cli.Main attach")
grep -E "SwapSafetyOptions" serve.log attach.log | sed 's/^/guest: /' || true
say "bridge: VmRSS $(kb $serve_pid VmRSS) kB, VmLck $(kb $serve_pid VmLck) kB;" \
    "attach: VmRSS $(kb $attach_pid VmRSS) kB, VmLck $(kb $attach_pid VmLck) kB"
flagged=0
for t in /proc/$serve_pid/task/*; do
  flags=$(sed 's/.*) //' "$t/stat" | awk '{ print $7 }')
  [ $(( flags & 0x80000 )) != 0 ] && flagged=$((flagged + 1))
done
say "bridge threads in the I/O flusher state: $flagged of $(ls /proc/$serve_pid/task | wc -l)"

mkswap /dev/nbd0 >/dev/null
swapon /dev/nbd0
swapon --show | sed 's/^/guest: /'
grep -E "^(pswpin|pswpout) " /proc/vmstat | tr '\n' ' ' | sed 's/^/guest: before: /'; echo
# Every 15 s: swap use, and any thread of the two JVMs stuck in the kernel (D state) with its kernel stack, so a run
# that stalls says where.
( while sleep 15; do
    echo "guest: monitor: swap used $(awk '/SwapTotal/ { t = $2 } /SwapFree/ { f = $2 } END { print int((t - f) / 1024) }' /proc/meminfo) MiB, free $(awk '/MemFree/ { print int($2 / 1024) }' /proc/meminfo) MiB"
    for t in /proc/$serve_pid/task/* /proc/$attach_pid/task/*; do
      if [ "$(awk '{ print $3 }' "$t/stat" 2>/dev/null)" = D ]; then
        echo "guest: monitor: D $(cat "$t/comm") $(head -6 "$t/stack" 2>/dev/null | awk '{ print $2 }' | tr '\n' ' ')"
      fi
    done
  done ) &
monitor_pid=$!
size=$(awk '/MemTotal/ { print int($2 / 1024 * 1.5) }' /proc/meminfo)
# The program runs in a memory cgroup of $HOG_MEMORY_MIB (as a container would), so the swapping is its own: its
# allocations reclaim its pages, through the device, while the machine keeps free memory for everything else (the
# bridge's sockets included). Without a limit the whole machine runs out, and a user-space server's allocations
# then compete with the reclaim they are needed for (docs/operations.md, "Swapping onto rbridge").
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
echo +memory > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/hog
echo $(( ${HOG_MEMORY_MIB:-256} * 1048576 )) > /sys/fs/cgroup/hog/memory.max
say "swap_hog over ${size} MiB in a cgroup of ${HOG_MEMORY_MIB:-256} MiB"
sh -c 'echo $$ > /sys/fs/cgroup/hog/cgroup.procs && exec ./swap_hog --size "$1" --passes 3' swap_hog "$size"
grep -E "^(pswpin|pswpout) " /proc/vmstat | tr '\n' ' ' | sed 's/^/guest: after: /'; echo
say "bridge: VmRSS $(kb $serve_pid VmRSS) kB, VmLck $(kb $serve_pid VmLck) kB"
kill $monitor_pid
swapoff /dev/nbd0
say "swap off"
rb detach /dev/nbd0
await 60 sh -c '! kill -0 '"$attach_pid"' 2>/dev/null'
kill "$serve_pid"
await 60 sh -c '! kill -0 '"$serve_pid"' 2>/dev/null'   # the JVM, not a child of this shell: no wait
dmesg | grep -Ei "nbd0|hung_task|blocked for more|oom" | sed 's/^/dmesg: /' || true
say "all verified"
