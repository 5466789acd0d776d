#!/usr/bin/env bash
# Loads and configures the kernel nbd driver for rbridge on a real host (root).
#
#   kmod-hooks/setup-nbd.sh [--nbds-max N] [--max-sectors-kb KB] [--persist]
#
#   --nbds-max N        devices to create when the module is first loaded (default 16)
#   --max-sectors-kb KB largest request the block layer sends per /dev/nbdX (default 1024; the kernel's default is
#                       128, which cuts large sequential I/O into 128 KiB NBD requests; rbridge takes up to 32 MiB)
#   --persist           also write /etc/modules-load.d/nbd.conf, /etc/modprobe.d/nbd.conf and a udev rule so the
#                       settings survive a reboot
#
# Afterwards: rbridge attach nbd://HOST:10809/disk (or nbd-client -N disk HOST 10809 /dev/nbd0 -b 4096).
set -euo pipefail
nbds_max=16; max_kb=1024; persist=0
while [ $# -gt 0 ]; do
  case "$1" in
    --nbds-max) nbds_max="$2"; shift 2 ;;
    --max-sectors-kb) max_kb="$2"; shift 2 ;;
    --persist) persist=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup-nbd: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "setup-nbd: run as root" >&2; exit 1; }

if [ ! -d /sys/module/nbd ]; then
  if ! modprobe nbd nbds_max="$nbds_max" 2>/tmp/setup-nbd.err; then
    echo "setup-nbd: modprobe nbd failed: $(cat /tmp/setup-nbd.err)" >&2
    echo "  the kernel has no nbd module (check CONFIG_BLK_DEV_NBD; on Debian/Ubuntu it is in linux-image-*;" >&2
    echo "  containers cannot load modules: load it on the host)" >&2
    exit 1
  fi
  echo "setup-nbd: loaded nbd with nbds_max=$nbds_max"
else
  echo "setup-nbd: nbd already loaded ($(ls -d /sys/block/nbd* 2>/dev/null | wc -l) devices)"
fi

n=0
for q in /sys/block/nbd*/queue; do
  [ -d "$q" ] || continue
  hw=$(cat "$q/max_hw_sectors_kb")
  kb=$max_kb; [ "$kb" -gt "$hw" ] && kb=$hw
  echo "$kb" >"$q/max_sectors_kb"
  n=$((n + 1))
done
echo "setup-nbd: max_sectors_kb=$max_kb on $n device(s)"

if [ "$persist" = 1 ]; then
  echo nbd >/etc/modules-load.d/nbd.conf
  echo "options nbd nbds_max=$nbds_max" >/etc/modprobe.d/nbd.conf
  echo "ACTION==\"add|change\", KERNEL==\"nbd[0-9]*\", ATTR{queue/max_sectors_kb}=\"$max_kb\"" \
    >/etc/udev/rules.d/60-rbridge-nbd.rules
  echo "setup-nbd: wrote /etc/modules-load.d/nbd.conf, /etc/modprobe.d/nbd.conf, /etc/udev/rules.d/60-rbridge-nbd.rules"
fi
