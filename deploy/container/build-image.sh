#!/usr/bin/env bash
# Builds the rbridge container image without a container daemon or registry: a docker-archive tarball that
# `docker load -i` and `podman load -i` accept (manifest.json, the image config, one uncompressed tar per layer).
#
#   deploy/container/build-image.sh [--jar FILE] [--output FILE] [--tag NAME:TAG] [--cache DIR] [--jdk DIR]
#                                   [--mirror URL] [--rebuild-rootfs]
#
#   --jar FILE        the rbridge jar (default cli/target/rbridge.jar; build it: ./mvnw -B -ntp package -DskipTests)
#   --output FILE     the image tarball (default target/rbridge-image.tar)
#   --tag NAME:TAG    the name it loads as (default rbridge:VERSION, VERSION from the jar)
#   --cache DIR       where the rootfs and runtime layers are kept between builds
#                     (default $RBRIDGE_IMAGE_CACHE, else ~/.cache/rbridge-image)
#   --jdk DIR         the JDK 25 that jlink takes the runtime from (default: what dev/find-jdk finds)
#   --mirror URL      Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   --rebuild-rootfs  build the Debian layer again even when the cache has it (to pick up new Debian updates)
#
# Layers, bottom to top:
#   1. Debian 12 (bookworm) minbase made by debootstrap, with bookworm-security applied, libucx0 and
#      ibverbs-providers (the ucx transport), and the user rbridge (uid/gid 10001). Cached by a hash of its recipe.
#   2. /opt/rbridge/jre: a jlink runtime (deploy/make-runtime.sh). Cached by a hash of the JDK and module list.
#   3. /opt/rbridge/bin/rbridge (deploy/bin/rbridge, the ENTRYPOINT) and /opt/rbridge/lib/rbridge.jar.
# Needs root (debootstrap, chroot) and, for a new rootfs, the Debian mirror; nothing else from the network.
# See deploy/README.md for loading and running the image.
set -euo pipefail
repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)"
jar="$repo/cli/target/rbridge.jar"
output="$repo/target/rbridge-image.tar"
tag=""
cache="${RBRIDGE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rbridge-image}"
jdk=""
mirror="http://deb.debian.org/debian"
rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
    --jar) jar="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --jdk) jdk="$2"; shift 2 ;;
    --mirror) mirror="$2"; shift 2 ;;
    --rebuild-rootfs) rebuild=1; shift ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "build-image: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

die() { echo "build-image: $*" >&2; exit 1; }
log() { echo "build-image: $*" >&2; }
[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"
for tool in debootstrap chroot tar sha256sum; do
  command -v "$tool" >/dev/null || die "$tool is missing (apt-get install debootstrap coreutils tar)"
done
[ -f "$jar" ] || die "$jar not found; build it: ./mvnw -B -ntp package -DskipTests"
[ -n "$jdk" ] || jdk="$("$repo/dev/find-jdk")"
[ "$(dpkg --print-architecture 2>/dev/null || echo amd64)" = amd64 ] || die "only amd64 hosts are supported"

suite=bookworm
packages="libucx0,ibverbs-providers"
uid=10001
mkdir -p "$cache" "$(dirname "$output")"
work="$(mktemp -d "${TMPDIR:-/tmp}/rbridge-image.XXXXXX")"
cleanup() {
  mountpoint -q "$work/rootfs/proc" 2>/dev/null && umount "$work/rootfs/proc"
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

sha() { sha256sum "$1" | cut -d' ' -f1; }
epoch="${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}"

# Writes a layer tarball of DIR's contents: sorted, numeric owners, no atime/ctime, so equal trees give equal layers.
# Extra tar options (ownership or mtime overrides) follow.
layer_tar() { # DIR OUT [tar options...]
  local dir="$1" out="$2"; shift 2
  (cd "$dir" && tar --create --file "$out.tmp" --format=gnu --sort=name --numeric-owner "$@" -- $(ls -A))
  mv "$out.tmp" "$out"
}

# ---- layer 1: Debian rootfs -------------------------------------------------------------------------------------
# Everything that shapes the rootfs is in this function or its key, so a change to either builds it again.
rootfs_recipe() { # ROOT
  local r="$1"
  cat >"$r/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
SOURCES
  cp /etc/resolv.conf "$r/etc/resolv.conf"
  mount -t proc proc "$r/proc"
  local rc=0
  chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c 'apt-get -qq update && apt-get -qq -y upgrade && apt-get -qq clean' >"$work/upgrade.log" 2>&1 || rc=$?
  umount "$r/proc"
  [ "$rc" = 0 ] || { tail -30 "$work/upgrade.log" >&2; return "$rc"; }
  chroot "$r" groupadd --gid "$uid" rbridge
  chroot "$r" useradd --uid "$uid" --gid "$uid" --home-dir /var/lib/rbridge --no-create-home \
    --shell /usr/sbin/nologin rbridge
  install -d -o "$uid" -g "$uid" -m 0750 "$r/var/lib/rbridge"
  install -d -m 0755 "$r/etc/rbridge"
  # What a container runtime provides, and what only the build needed.
  rm -rf "$r"/dev/* "$r"/proc/* "$r"/sys/* "$r"/tmp/* "$r"/var/tmp/* "$r"/run/* \
    "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
    "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old "$r"/var/log/* "$r"/etc/resolv.conf "$r"/etc/hostname
  : >"$r/etc/machine-id"
}
rootfs_key="$(printf '%s\n' "rootfs-v1" "$suite" "$mirror" "$packages" "$uid" minbase amd64 \
  "$(declare -f rootfs_recipe)" | sha256sum | cut -c1-16)"
rootfs_tar="$cache/rootfs-$rootfs_key.tar"
if [ "$rebuild" = 1 ] || [ ! -f "$rootfs_tar" ]; then
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  log "building the Debian $suite rootfs (debootstrap from $mirror; a few minutes, cached as $rootfs_tar)"
  root="$work/rootfs"
  if ! debootstrap --variant=minbase --arch=amd64 --include="$packages" "$suite" "$root" "$mirror" \
      >"$work/debootstrap.log" 2>&1; then
    tail -30 "$work/debootstrap.log" >&2
    [ -f "$root/debootstrap/debootstrap.log" ] && tail -30 "$root/debootstrap/debootstrap.log" >&2
    die "debootstrap failed (log above); is $mirror reachable?"
  fi
  rootfs_recipe "$root" || die "preparing the rootfs (apt-get upgrade from the security mirror, user) failed"
  layer_tar "$root" "$rootfs_tar"
  rm -rf "$root"
else
  log "reusing the Debian rootfs $rootfs_tar"
fi

# ---- layer 2: the Java runtime ----------------------------------------------------------------------------------
modules="$("$repo/deploy/make-runtime.sh" --jdk "$jdk" --jar "$jar" --print-modules)"
jre_key="$(printf '%s\n' "jre-v1" "$modules" "$(cat "$jdk/release")" "$(sha "$repo/deploy/make-runtime.sh")" \
  | sha256sum | cut -c1-16)"
jre_tar="$cache/jre-$jre_key.tar"
if [ ! -f "$jre_tar" ]; then
  log "making the Java runtime with jlink ($modules)"
  mkdir -p "$work/jre/opt/rbridge"
  "$repo/deploy/make-runtime.sh" --jdk "$jdk" --jar "$jar" --output "$work/jre/opt/rbridge/jre"
  chmod -R u=rwX,go=rX "$work/jre"
  layer_tar "$work/jre" "$jre_tar" --owner=0 --group=0 --mtime="@$epoch"
  rm -rf "$work/jre"
else
  log "reusing the Java runtime $jre_tar"
fi

# ---- layer 3: rbridge -------------------------------------------------------------------------------------------
app="$work/app"
install -d -m 0755 "$app/opt/rbridge/bin" "$app/opt/rbridge/lib" "$app/opt/rbridge/libexec"
install -m 0755 "$repo/deploy/bin/rbridge" "$app/opt/rbridge/bin/rbridge"
install -m 0644 "$jar" "$app/opt/rbridge/lib/rbridge.jar"
install -m 0755 "$repo/kmod-hooks/check-rdma.sh" "$app/opt/rbridge/libexec/check-rdma.sh"
app_tar="$work/app.tar"
layer_tar "$app" "$app_tar" --owner=0 --group=0 --mtime="@$epoch"

# ---- version, config, manifest ----------------------------------------------------------------------------------
mkdir -p "$work/props"
(cd "$work/props" && "$jdk/bin/jar" --extract --file "$jar" META-INF/maven/dev.rbridge/rbridge-cli/pom.properties)
version="$(sed -n 's/^version=//p' "$work/props/META-INF/maven/dev.rbridge/rbridge-cli/pom.properties")"
[ -n "$version" ] || die "no version in $jar (META-INF/maven/dev.rbridge/rbridge-cli/pom.properties)"
[ -n "$tag" ] || tag="rbridge:$version"
revision="$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
created="$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"

out="$work/archive"
mkdir -p "$out"
layers=() diff_ids=()
for t in "$rootfs_tar" "$jre_tar" "$app_tar"; do
  h="$(sha "$t")"
  mkdir -p "$out/$h"
  ln "$t" "$out/$h/layer.tar" 2>/dev/null || cp "$t" "$out/$h/layer.tar"
  layers+=("\"$h/layer.tar\"")
  diff_ids+=("\"sha256:$h\"")
done
join() { local IFS=,; echo "$*"; }
history() { # CREATED_BY
  printf '{"created":"%s","created_by":"%s"}' "$created" "$1"
}
cat >"$work/config.json" <<JSON
{
  "architecture": "amd64",
  "os": "linux",
  "created": "$created",
  "author": "rbridge deploy/container/build-image.sh",
  "config": {
    "User": "$uid:$uid",
    "Entrypoint": ["/opt/rbridge/bin/rbridge"],
    "Cmd": ["--help"],
    "Env": [
      "PATH=/opt/rbridge/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "RBRIDGE_HOME=/opt/rbridge",
      "UCX_ERROR_SIGNALS="
    ],
    "WorkingDir": "/var/lib/rbridge",
    "ExposedPorts": {"10809/tcp": {}, "7471/tcp": {}, "7474/tcp": {}, "7475/tcp": {}},
    "StopSignal": "SIGTERM",
    "Labels": {
      "org.opencontainers.image.title": "rbridge",
      "org.opencontainers.image.description": "NBD block devices backed by remote RAM: rbridge serve (bridge), rbridge memserver, rbridge attach",
      "org.opencontainers.image.version": "$version",
      "org.opencontainers.image.revision": "$revision",
      "org.opencontainers.image.created": "$created",
      "org.opencontainers.image.base.name": "debian:$suite (debootstrap minbase)",
      "dev.rbridge.ports": "10809 NBD (serve), 7471 memserver, 7474 memserver metrics, 7475 bridge metrics"
    }
  },
  "rootfs": {"type": "layers", "diff_ids": [$(join "${diff_ids[@]}")]},
  "history": [
    $(history "debootstrap --variant=minbase --include=$packages $suite; bookworm-security upgrade; user rbridge $uid"),
    $(history "jlink --add-modules $modules (/opt/rbridge/jre)"),
    $(history "/opt/rbridge/bin/rbridge, /opt/rbridge/lib/rbridge.jar $version")
  ]
}
JSON
config_hash="$(sha "$work/config.json")"
mv "$work/config.json" "$out/$config_hash.json"
printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":[%s]}]\n' "$config_hash" "$tag" "$(join "${layers[@]}")" \
  >"$out/manifest.json"
(cd "$out" && tar --create --file "$output.tmp" --format=gnu --sort=name --owner=0 --group=0 --numeric-owner \
  --mtime="@$epoch" -- manifest.json "$config_hash.json" $(ls -d */))
mv "$output.tmp" "$output"
log "wrote $output ($tag, image id sha256:${config_hash:0:12}, $(du -h "$output" | cut -f1)); load it with: docker load -i $output"
