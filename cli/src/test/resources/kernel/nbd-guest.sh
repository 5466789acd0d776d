#!/bin/bash
# Runs inside the lab guest (kmod-hooks/lab/run-guest) for KernelNbdGuestTest. The host runs `rbridge serve` on its
# loopback (10.0.2.2 from here) with exports "disk" and "raw" on two memservers, R=2; $NBD_PORT is its port, and
# ./write_data (built on the host) is in the share, our working folder. The host kills a memserver when
# write_data creates ./kill-now, and checks that ./kill-run.done does not exist yet at that moment.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce

modprobe nbd nbds_max=4
say "nbd-client to 10.0.2.2:$NBD_PORT"
nbd-client -N disk 10.0.2.2 "$NBD_PORT" /dev/nbd0 -b 4096
nbd-client -N raw 10.0.2.2 "$NBD_PORT" /dev/nbd1 -b 4096
say "nbd0 $(blockdev --getsize64 /dev/nbd0) bytes, nbd1 $(blockdev --getsize64 /dev/nbd1) bytes, bs $(blockdev --getbsz /dev/nbd0)"

say "mkfs.ext4 on /dev/nbd0"
mkfs.ext4 -q -F /dev/nbd0
mkdir -p /mnt/t
mount /dev/nbd0 /mnt/t
say "write_data over a file on ext4"
wd --size 32M --run 1 /mnt/t/data
say "write_data over the raw device /dev/nbd1, first 32 MiB"
wd --size 32M --run 1 /dev/nbd1

say "umount, fsck, remount"
umount /mnt/t
fsck.ext4 -fn /dev/nbd0
mount /dev/nbd0 /mnt/t
wd --verify-only --size 32M --run 1 /mnt/t/data
say "disconnect and reconnect /dev/nbd1"
nbd-client -d /dev/nbd1
for i in $(seq 100); do [ "$(cat /sys/block/nbd1/size)" = 0 ] && break; sleep 0.1; done
nbd-client -N raw 10.0.2.2 "$NBD_PORT" /dev/nbd1 -b 4096
wd --verify-only --size 32M --run 1 /dev/nbd1

say "write_data on /dev/nbd1 at 64 MiB while the host kills a memserver"
rm -f kill-now kill-run.done
wd --offset 64M --size 128M --run 2 --signal-at 20:"$PWD/kill-now" /dev/nbd1
touch kill-run.done
say "after the kill: the earlier data is still there"
wd --verify-only --size 32M --run 1 /dev/nbd1
wd --verify-only --size 32M --run 1 /mnt/t/data
umount /mnt/t
fsck.ext4 -fn /dev/nbd0
nbd-client -d /dev/nbd0
nbd-client -d /dev/nbd1
say "all verified"
