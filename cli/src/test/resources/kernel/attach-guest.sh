#!/bin/bash
# Runs inside the lab guest for AttachGuestTest. The host runs `rbridge serve` on its loopback (10.0.2.2 here) with
# export "disk" on two memservers (R=2); $NBD_PORT is its port; $RB_CP the classpath (in ./cp) of the rbridge code
# under test; ./write_data is in the share, our working folder. `rbridge attach` (not nbd-client) attaches the export
# through netlink and watches it; the host restarts the bridge (SIGTERM, start again on the same port) when
# write_data creates ./restart-now, and checks ./restart-run.done does not exist yet then. Nothing may reach the
# filesystem as an I/O error: the kernel holds the I/O while attach reconnects. Then the host grows the volume to
# 768M when ./grow-now appears (rbridge admin grow), and the watching attach resizes /dev/nbd0 to match.
set -euo pipefail
trap 'echo "guest: FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
. ./guest-prelude.sh # say, await, rb, wd, soft_roce

modprobe nbd nbds_max=4
say "rbridge attach to nbd://10.0.2.2:$NBD_PORT/disk"
rb attach --device /dev/nbd0 --connections 2 --timeout 5 --dead-conn-timeout 120 \
  "nbd://10.0.2.2:$NBD_PORT/disk" >attach.out 2>attach.log &
attach_pid=$!
await 180 grep -q "watching /dev/nbd0" attach.out
cat attach.out
rb status | tee status.out
grep -Eq '^/dev/nbd0 +connected +512MiB +nbd://10.0.2.2:'"$NBD_PORT"'/disk' status.out
say "nbd0 $(blockdev --getsize64 /dev/nbd0) bytes, logical block $(blockdev --getss /dev/nbd0)"

mkfs.ext4 -q -F /dev/nbd0
mkdir -p /mnt/t
mount /dev/nbd0 /mnt/t
say "write_data over a file on ext4 while the host restarts the bridge"
rm -f restart-now restart-run.done
wd --size 64M --run 1 --signal-at 15:"$PWD/restart-now" /mnt/t/data
touch restart-run.done
await 60 grep -q "reconnected to" attach.log
grep -E "link to .* dead|reconnected" attach.log | sed 's/^/attach: /'
say "umount, fsck, remount, verify"
umount /mnt/t
fsck.ext4 -fn /dev/nbd0
mount /dev/nbd0 /mnt/t
wd --verify-only --size 64M --run 1 /mnt/t/data
umount /mnt/t
dmesg | grep -E "nbd0|EXT4|I/O error" | sed 's/^/dmesg: /' || true
if dmesg | grep -Eiq "I/O error|EXT4-fs error|EXT4-fs warning"; then
  echo "guest: an I/O error reached the block layer or the filesystem" >&2
  exit 1
fi
say "the host grows the volume to 768M; attach resizes the device"
touch grow-now
await 60 sh -c '[ "$(blockdev --getsize64 /dev/nbd0)" = 805306368 ]'
grep -E "grown from" attach.log | sed 's/^/attach: /'
head -c 4194304 /dev/urandom > pattern
dd if=pattern of=/dev/nbd0 bs=1M seek=700 oflag=direct status=none
dd if=/dev/nbd0 of=back bs=1M skip=700 count=4 iflag=direct status=none
cmp pattern back
say "nbd0 grown to $(blockdev --getsize64 /dev/nbd0) bytes; 4 MiB past the old end read back"
say "rbridge detach /dev/nbd0"
rb detach /dev/nbd0
await 30 sh -c '[ "$(cat /sys/block/nbd0/size)" = 0 ]'
await 30 sh -c '! kill -0 '"$attach_pid"' 2>/dev/null'   # attach notices the detach and exits
say "all verified"
