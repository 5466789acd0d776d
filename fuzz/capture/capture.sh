#!/usr/bin/env bash
# Records real peers' bytes for the fuzz seed corpora: NBD clients (nbdinfo, nbdcopy, qemu-img, qemu-io, fio's nbd
# engine) against nbdkit, a bridge against a memserver (the control protocol both ways, driven by NBD I/O, ping, mem
# and admin), and HTTP/JSON of the admin interfaces, each through relay.py. Then make-seeds.py turns the captures into
# seeds. Usage: fuzz/capture/capture.sh [OUT-DIR]   (default: a temporary folder; needs the packaged rbridge.jar, which
# ./rbridge builds, and the Debian packages of dev/test-packages.txt)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.2; done; echo "port $1 never opened" >&2; return 1; }
# Connections not named yet by client (NNN.c2s, NNN.s2c); the one wait_port makes to a relay is dropped.
unnamed() { ls "$1" 2>/dev/null | grep -E '^[0-9]{3}\.' || true; }
relay() {
  python3 "$here/relay.py" "$1" 127.0.0.1 "$2" "$out/$3" & pids+=($!)
  wait_port "$1"; sleep 0.3
  for f in $(unnamed "$out/$3"); do rm -f "$out/$3/$f"; done
}
# Runs a client and names the connections it made after it.
client() {
  local dir="$out/$1" label="$2"; shift 2
  "$@" >/dev/null 2>&1 || echo "capture: $label exited $?" >&2
  sleep 0.5
  for f in $(unnamed "$dir"); do mv "$dir/$f" "$dir/$label-$f"; done
}

# NBD against nbdkit
nbdkit -f -p 20809 memory 64M & pids+=($!)
wait_port 20809
relay 20810 20809 nbd
u=nbd://127.0.0.1:20810/
img="$out/small.img"; head -c 256K /dev/urandom > "$img"
client nbd nbdinfo-list nbdinfo --list "$u"
client nbd nbdinfo nbdinfo "$u"
client nbd nbdinfo-map nbdinfo --map "$u"
client nbd nbdcopy-in nbdcopy "$img" "$u"
client nbd nbdcopy-out nbdcopy "$u" "$out/copy.img"
client nbd qemu-img-info qemu-img info "$u"
client nbd qemu-img-convert qemu-img convert -f raw -O raw "$img" "$u"
client nbd qemu-io qemu-io -f raw -c 'write -P 0x55 0 64k' -c 'read -P 0x55 0 64k' -c 'write -z 64k 64k' \
  -c 'discard 128k 4k' -c flush "$u"
client nbd fio fio --name=f --ioengine=nbd --uri="$u" --rw=randrw --bs=4k --size=1M --iodepth=4 --number_ios=64

# The control protocol: a bridge and the tools against a memserver, through the relay
export RBRIDGE_NO_BUILD=1
"$root/rbridge" memserver --listen 127.0.0.1:20871 --capacity 256M --token fuzzcapture --admin 127.0.0.1:20873 \
  --metrics none & pids+=($!)
wait_port 20871
relay 20872 20871 control
relay 20874 20873 http
client control ping "$root/rbridge" ping --server 127.0.0.1:20872 --token fuzzcapture --count 5 --size 64K --validate
client control mem-list "$root/rbridge" mem list --server 127.0.0.1:20872 --token fuzzcapture
"$root/rbridge" serve --memserver 127.0.0.1:20872 --token fuzzcapture --volume disk,size=16M,replicas=1 \
  --listen 127.0.0.1:20819 --admin 127.0.0.1:20875 --metrics none & pids+=($!)
wait_port 20875 || true
sleep 2
relay 20876 20875 http
client control qemu-io-through-bridge qemu-io -f raw -c 'write -P 0x33 0 256k' -c 'read -P 0x33 0 256k' \
  -c 'write -z 1M 64k' -c flush nbd://127.0.0.1:20819/disk
client http curl-memserver curl -s -H 'Authorization: Bearer fuzzcapture' http://127.0.0.1:20874/clients
client http curl-bridge curl -s http://127.0.0.1:20876/volumes
client http curl-bridge-post curl -s -X POST -H 'Content-Type: application/json' -d '{"memserver":"127.0.0.1:20871"}' \
  http://127.0.0.1:20876/memservers
echo "captures in $out"
