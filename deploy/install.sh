#!/usr/bin/env bash
# Installs a built rbridge and its systemd units on this host (root), or into a staging root (--root).
#
#   deploy/install.sh [--root DIR] [--jar FILE] [--jlink] [--jdk DIR] [--no-user]
#
#   --root DIR   install under DIR instead of / (packaging, tests); no user is created, systemd is not told
#   --jar FILE   the jar to install (default cli/target/rbridge.jar; build it: ./mvnw -B -ntp package -DskipTests)
#   --jlink      also make a private Java runtime in /opt/rbridge/jre (deploy/make-runtime.sh), so the host needs
#                no JDK; without it the launcher uses $JAVA_HOME or a Java 25+ under /usr/lib/jvm
#   --jdk DIR    the JDK for --jlink (default: what dev/find-jdk finds)
#   --no-user    do not create the system user rbridge
#
# Layout:
#   /opt/rbridge/bin/rbridge             launcher (deploy/bin/rbridge)
#   /opt/rbridge/lib/rbridge.jar         the application
#   /opt/rbridge/jre/                    private runtime (--jlink)
#   /opt/rbridge/libexec/                setup-nbd.sh, setup-rxe.sh, check-rdma.sh (kmod-hooks/)
#   /opt/rbridge/README.md               deploy/README.md
#   /etc/systemd/system/                 rbridge-memserver.service, rbridge-bridge.service, rbridge-attach@.service
#   /etc/rbridge/                        serve.conf, memserver.env, attach-nbd0.env, token (kept if present)
# Existing files under /etc/rbridge are never overwritten; binaries and units are replaced.
set -euo pipefail
repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
root=/; jar="$repo/cli/target/rbridge.jar"; jlink=0; jdk=""; user=1
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root="$2"; shift 2 ;;
    --jar) jar="$2"; shift 2 ;;
    --jlink) jlink=1; shift ;;
    --jdk) jdk="$2"; shift 2 ;;
    --no-user) user=0; shift ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "install: $*" >&2; exit 1; }
[ -f "$jar" ] || die "$jar not found; build it first: ./mvnw -B -ntp package -DskipTests"
real_root=0
if [ "$(readlink -f "$root")" = / ]; then
  real_root=1
  [ "$(id -u)" = 0 ] || die "installing into / needs root (or use --root DIR)"
else
  mkdir -p "$root"
  root="$(readlink -f "$root")"
fi
r="${root%/}"
opt="$r/opt/rbridge"

install -d -m 0755 "$opt/bin" "$opt/lib" "$opt/libexec" "$r/etc/systemd/system" "$r/etc/rbridge"
install -m 0755 "$repo/deploy/bin/rbridge" "$opt/bin/rbridge"
install -m 0644 "$jar" "$opt/lib/rbridge.jar.new" && mv "$opt/lib/rbridge.jar.new" "$opt/lib/rbridge.jar"
for s in setup-nbd.sh setup-rxe.sh check-rdma.sh; do
  install -m 0755 "$repo/kmod-hooks/$s" "$opt/libexec/$s"
done
install -m 0644 "$repo/deploy/README.md" "$opt/README.md"
for u in rbridge-memserver.service rbridge-bridge.service rbridge-attach@.service; do
  install -m 0644 "$repo/deploy/systemd/$u" "$r/etc/systemd/system/$u"
done
if [ "$jlink" = 1 ]; then
  rm -rf "$opt/jre.new"
  if [ -n "$jdk" ]; then "$repo/deploy/make-runtime.sh" --jdk "$jdk" --jar "$jar" --output "$opt/jre.new"
  else "$repo/deploy/make-runtime.sh" --jar "$jar" --output "$opt/jre.new"; fi
  rm -rf "$opt/jre" && mv "$opt/jre.new" "$opt/jre"
fi

if [ "$real_root" = 1 ] && [ "$user" = 1 ] && ! getent passwd rbridge >/dev/null; then
  useradd --system --user-group --home-dir /var/lib/rbridge --create-home --shell /usr/sbin/nologin rbridge
  echo "install: created the system user rbridge"
fi

for f in serve.conf memserver.env attach-nbd0.env; do
  if [ -e "$r/etc/rbridge/$f" ]; then
    echo "install: kept /etc/rbridge/$f (the new example is $repo/deploy/config/$f)"
  else
    install -m 0644 "$repo/deploy/config/$f" "$r/etc/rbridge/$f"
  fi
done
if [ ! -e "$r/etc/rbridge/token" ]; then
  (umask 077 && head -c 32 /dev/urandom | base64 | tr -d '/+=' >"$r/etc/rbridge/token")
  echo "install: wrote a new random token to /etc/rbridge/token: every memserver and bridge needs the same one"
fi
if [ "$real_root" = 1 ] && getent group rbridge >/dev/null; then
  chown root:rbridge "$r/etc/rbridge/token" && chmod 0640 "$r/etc/rbridge/token"
fi

# Refuse to leave an install the units cannot start.
"$opt/bin/rbridge" --version >/dev/null 2>&1 \
  || echo "install: warning: $opt/bin/rbridge --version fails here (no Java 25? use --jlink or set JAVA_HOME)" >&2

if [ "$real_root" = 1 ] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
cat <<EOF
install: rbridge installed under $opt, units in $r/etc/systemd/system, configuration in $r/etc/rbridge.
Next: edit /etc/rbridge/memserver.env or serve.conf (and attach-nbd0.env), copy /etc/rbridge/token to every host, then
  systemctl enable --now rbridge-memserver          # on each host lending RAM
  systemctl enable --now rbridge-bridge             # where the block device is served
  systemctl enable --now rbridge-attach@nbd0        # /dev/nbd0 from /etc/rbridge/attach-nbd0.env
EOF
