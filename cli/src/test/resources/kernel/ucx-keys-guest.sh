#!/bin/bash
# Runs inside the lab guest for UcxKeysGuestTest: whether a ucx memserver finds its withdrawn remote keys enforced by
# the NIC, as UCX itself reports it, under three configurations of soft-RoCE (rxe0 on eth0).
# 1. The lab's settings (UCX_TLS=rc_verbs,ud_verbs): bridge A maps the volume's regions and writes through kernel nbd,
#    is frozen with SIGSTOP (its control connection stays, its lease lapses), bridge B takes the volume over. The
#    memserver must report the keys NIC-enforced, close A's endpoint on the fence, keep no grace period, and the NIC
#    must know the volume's regions under new rkeys.
# 2. UCX_IB_REG_METHODS=rcache: reported not enforced; a bridge killed with SIGKILL leaves its regions registered for
#    the grace period.
# 3. UCX_TLS=sm,self: reported not enforced (no IB memory domain).
# $RB_CP is the classpath (in ./cp) of the code under test.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, soft_roce
RB_JAVA_OPTS=-XX:MaxDirectMemorySize=512m
slab_rkeys() { # the rkeys of the volume's 16 MiB slab regions the NIC knows now, sorted
  rdma res show mr | awk '{ for (i = 1; i < NF; i++) { if ($i == "rkey") k = $(i + 1); if ($i == "mrlen") l = $(i + 1) } }
                          l == 16777216 { print k }' | sort
}
memserver() { # memserver NAME PORT [VAR=VALUE ...]: a ucx memserver, these UCX settings over the lab's
  local name=$1 port=$2
  shift 2
  RB_ENV="$*" rb memserver --transport ucx --listen $ip:"$port" --token-file token --capacity 256M --admin none \
    --metrics none >"$name.out" 2>"$name.log" &
  await 120 grep -q lending "$name.out"
}
serve() { # serve NAME MEMSERVER-PORT NBD-PORT ADMIN-PORT: a bridge with a 4 s lease
  rb serve --transport ucx --token-file token --memserver $ip:"$2" --volume disk,size=64M,replicas=1,slab=16M \
    --lease 4 --timeout 120 --listen 127.0.0.1:"$3" --admin 127.0.0.1:"$4" --metrics none >"$1.out" 2>"$1.log" &
  await 180 grep -q "serving nbd://" "$1.out"
}
write_through() { # write_through NBD-PORT: 8 MiB written through kernel nbd, then detached
  nbd-client -N disk 127.0.0.1 "$1" /dev/nbd0 -b 4096
  dd if=/dev/urandom of=/dev/nbd0 bs=1M count=8 oflag=direct status=none
  nbd-client -d /dev/nbd0
}
stop() { # stop PORT: the memserver listening on PORT ends (SIGTERM) and is waited for
  local pid
  pid=$(pgrep -f -- "--listen $ip:$1")
  kill "$pid"
  await 60 sh -c "! kill -0 $pid 2>/dev/null"
}
keys() { # keys NAME: what memserver NAME's log says of its keys
  echo "$1 keys: $(grep -c 'withdrawn remote keys: regions are registered with rxe0' "$1.log") enforced," \
    "$(grep -c 'withdrawn remote keys are not enforced' "$1.log") not enforced," \
    "$(grep -c 'stay registered for a grace period' "$1.log") grace," \
    "$(grep -c 'closing its UCX endpoint (fenced' "$1.log") fenced endpoint(s)"
  grep -m 3 -o 'withdrawn remote keys.*\|stay registered for a grace.*' "$1.log" | cut -c1-300 || true
}

say "soft-RoCE on eth0"
soft_roce eth0
ip=10.0.2.15
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > token
modprobe nbd nbds_max=2

say "1: the lab's UCX settings; bridge A writes, is frozen, bridge B takes the volume over"
memserver ms1 7471
serve a 7471 10809 7473
a_pid=$(pgrep -f -- "--listen 127.0.0.1:10809")
write_through 10809
before=$(slab_rkeys)
echo "rkeys before: $(echo $before)"
[ -n "$before" ] || { echo "guest: the NIC knows no 16 MiB region: nothing was registered" >&2; exit 1; }
kill -STOP "$a_pid"
sleep 8 # A's 4 s lease lapses
serve b 7471 10810 7483
b_pid=$(pgrep -f -- "--listen 127.0.0.1:10810")
write_through 10810
after=$(slab_rkeys)
echo "rkeys after: $(echo $after)"
stale=$(comm -12 <(echo "$before") <(echo "$after") | tr '\n' ' ')
if [ -n "${stale// }" ]; then
  echo "rkeys: the NIC still takes A's rkey(s) $stale after the takeover"
else
  echo "rkeys: all new after the takeover"
fi
kill -KILL "$a_pid" "$b_pid" || true
kill -CONT "$a_pid" 2>/dev/null || true
sleep 2
keys ms1
stop 7471

say "2: UCX_IB_REG_METHODS=rcache; bridge C writes and is killed"
memserver ms2 7491 UCX_IB_REG_METHODS=rcache
serve c 7491 10811 7493
write_through 10811
kill -KILL "$(pgrep -f -- "--listen 127.0.0.1:10811")"
await 60 grep -q 'stay registered for a grace period' ms2.log
keys ms2
stop 7491

say "3: UCX_TLS=sm,self"
memserver ms3 7501 UCX_TLS=sm,self
keys ms3
say "keys checked"
