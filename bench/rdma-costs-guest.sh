#!/bin/bash
# Runs inside the lab guest for bench/rdma-costs.sh (not on its own): a memserver and a bridge on --transport ucx over
# soft-RoCE (UCX_TLS=rc_verbs,ud_verbs: verbs only), fio's nbd engine against the bridge, and the costs of each
# row counted with perf, per variant: context switches and system calls of the bridge and of the memserver (and of
# the bridge's threads by role), and the memory regions each registered and deregistered during the row (rdma res
# show mr before and after). It only writes the counts (VARIANT.ROW.{json,bridge.threads,ms.threads,mr-before,mr-after,
# pids}, ms.pdns and VARIANT.pdns in the working folder, the share); the host
# script reads them. Arguments: the variants, each NAME=JAR:SPIN_US[:ZCOPY] (SPIN_US empty: the jar's default; ZCOPY:
# UCX_ZCOPY_THRESH, e.g. auto for UCX's own). $OPS: operations per QD1 row (default 2000); $OPS_1M per 1M row (640).
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
t0=$SECONDS
say() { echo "guest: [$((SECONDS - t0))s] $*"; }
ops=${OPS:-2000}
rb() { # rb JAR ARGS...
  local jar=$1; shift
  java --enable-native-access=ALL-UNNAMED -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:MaxDirectMemorySize=512m \
    -jar "$jar" "$@"
}
java_of() { # java_of PID: the JVM's PID when PID is the subshell that started it
  sleep 0.5
  pgrep -P "$1" java || echo "$1"
}
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

mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
# Registrations are read from the RDMA core's own table (rdma res show mr: one line per memory region, with the pid
# that registered it) before and after each row, not counted with uprobes on libibverbs: attaching perf with uprobes
# to a JVM soft-locked this guest's 6.1 kernel.
syscalls=()
for sc in read write epoll_wait epoll_pwait ioctl futex poll ppoll sched_yield madvise mmap munmap clock_gettime; do
  [ -d "/sys/kernel/tracing/events/syscalls/sys_enter_$sc" ] && syscalls+=("syscalls:sys_enter_$sc")
done
events="context-switches,raw_syscalls:sys_enter,$(IFS=,; echo "${syscalls[*]}")"

pdns() { # pdns FILE: the numbers of the protection domains that exist now ("pid" in rdma res is a thread's id, and
         # the thread that made a domain may be gone, so a process's domains are the ones that appear as it starts)
  rdma res show pd | awk '{ for (i = 1; i < NF; i++) if ($i == "pdn") print $(i + 1) }' > "$1"
}
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > token
first=${1#*=}; first_jar=${first%%:*}
rb "$first_jar" memserver --transport ucx --listen $ip:7471 --token-file token --capacity 512M --admin none \
  --metrics none >ms.out 2>ms.log &
ms=$(java_of $!)
await 120 grep -q lending ms.out
pdns ms.pdns

count() { # count PID FILE: perf stat's counts of PID's threads while the row runs (one perf per process: several
          # perf processes attaching to one JVM at once soft-locked the guest's 6.1 kernel)
  perf stat -x, --per-thread -e "$events" -p "$1" -o "$2.threads" &
  echo $! > "$2.pid"
  sleep 1
}
uncount() { # uncount FILE
  local p
  for p in $(cat "$1.pid"); do kill -INT "$p"; done
  for p in $(cat "$1.pid"); do wait "$p" || true; done
}
row() { # row VARIANT NAME FIO-ARGS...: fio against the bridge, counted
  local v=$1 name=$2; shift 2
  rdma res show mr > "$v.$name.mr-before"
  count "$bridge" "$v.$name.bridge"
  count "$ms" "$v.$name.ms"
  fio --name="$name" --ioengine=nbd --uri=nbd://127.0.0.1:10809/disk --output-format=json "$@" > "$v.$name.json"
  uncount "$v.$name.bridge"
  uncount "$v.$name.ms"
  rdma res show mr > "$v.$name.mr-after"
  echo "bridge $bridge memserver $ms" > "$v.$name.pids"
  say "counted $v $name"
}

shift_args=("$@")
for spec in "${shift_args[@]}"; do
  v=${spec%%=*}; rest=${spec#*=}; jar=${rest%%:*}; rest=${rest#*:}; spin=${rest%%:*}; zcopy=${rest#*:}
  [ "$zcopy" != "$rest" ] || zcopy=""
  say "variant $v: $jar, RBRIDGE_UCX_SPIN_US=${spin:-(default)}, UCX_ZCOPY_THRESH=${zcopy:-(default)}"
  if [ -n "$spin" ]; then export RBRIDGE_UCX_SPIN_US=$spin; else unset RBRIDGE_UCX_SPIN_US; fi
  if [ -n "$zcopy" ]; then export UCX_ZCOPY_THRESH=$zcopy; else unset UCX_ZCOPY_THRESH; fi
  rb "$jar" serve --transport ucx --token-file token --memserver $ip:7471 --volume disk,size=256M,replicas=1,slab=16M \
    --listen 127.0.0.1:10809 --admin none --metrics none --start-wait 120 >"$v.serve.out" 2>"$v.serve.log" &
  bridge=$(java_of $!)
  await 180 grep -q "serving nbd://" "$v.serve.out"
  pdns "$v.pdns" # the memserver's and this bridge's (a bridge before it took its own along when it exited)
  fio --name=fill --ioengine=nbd --uri=nbd://127.0.0.1:10809/disk --rw=write --bs=1M --iodepth=8 --size=64M \
    --output-format=terse >/dev/null
  fio --name=warm --ioengine=nbd --uri=nbd://127.0.0.1:10809/disk --rw=randread --bs=4k --iodepth=1 --size=64M \
    --number_ios=2000 --norandommap --output-format=terse >/dev/null
  row "$v" rr1 --rw=randread --bs=4k --iodepth=1 --size=64M --norandommap --number_ios="$ops"
  row "$v" rw1 --rw=randwrite --bs=4k --iodepth=1 --size=64M --norandommap --number_ios="$ops"
  row "$v" sr8 --rw=read --bs=1M --iodepth=8 --size=64M --io_size="${OPS_1M:-640}M"
  row "$v" sw8 --rw=write --bs=1M --iodepth=8 --size=64M --io_size="${OPS_1M:-640}M"
  kill "$bridge"; await 30 sh -c "! kill -0 $bridge 2>/dev/null"
done
kill "$ms"; await 30 sh -c "! kill -0 $ms 2>/dev/null"
say "all rows counted"
