#!/usr/bin/env bash
# Makes a private Java runtime for rbridge with jlink: only the modules the jar needs (found with jdeps) plus a few it
# reaches by reflection, without debug symbols, headers or man pages (about 60 MB instead of a 300 MB JDK).
#
#   deploy/make-runtime.sh --output DIR [--jar FILE] [--jdk DIR] [--print-modules]
#
#   --output DIR      where the runtime goes (must not exist yet); DIR/bin/java is the result
#   --jar FILE        the rbridge jar to scan (default cli/target/rbridge.jar)
#   --jdk DIR         the JDK 25 whose jlink and modules to use (default: what dev/find-jdk finds)
#   --print-modules   print the module list and exit
#
# Used by deploy/install.sh --jlink and deploy/container/build-image.sh.
set -euo pipefail
repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
out=""; jar="$repo/cli/target/rbridge.jar"; jdk=""; print=0
while [ $# -gt 0 ]; do
  case "$1" in
    --output) out="$2"; shift 2 ;;
    --jar) jar="$2"; shift 2 ;;
    --jdk) jdk="$2"; shift 2 ;;
    --print-modules) print=1; shift ;;
    -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "make-runtime: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$jdk" ] || jdk="$("$repo/dev/find-jdk")"
[ -x "$jdk/bin/jlink" ] || { echo "make-runtime: $jdk has no bin/jlink (a JRE is not enough: install a full JDK 25)" >&2; exit 1; }
[ -f "$jar" ] || { echo "make-runtime: $jar not found; build it: ./mvnw -B -ntp package -DskipTests" >&2; exit 1; }

# jdeps finds the static dependencies; jdk.management (the process and OS metrics), jdk.unsupported and
# jdk.crypto.ec are reached by reflection or service lookup only, so they are named here.
deps="$("$jdk/bin/jdeps" --ignore-missing-deps --print-module-deps --multi-release 25 "$jar")" \
  || { echo "make-runtime: jdeps failed on $jar" >&2; exit 1; }
modules="$(printf '%s\n' "${deps//,/$'\n'}" java.base jdk.management jdk.unsupported jdk.crypto.ec | sort -u | paste -sd, -)"
if [ "$print" = 1 ]; then echo "$modules"; exit 0; fi
[ -n "$out" ] || { echo "make-runtime: --output DIR is required (see --help)" >&2; exit 2; }
[ -e "$out" ] && { echo "make-runtime: $out already exists" >&2; exit 1; }
"$jdk/bin/jlink" --add-modules "$modules" --output "$out" \
  --strip-debug --no-header-files --no-man-pages --compress=zip-6
"$out/bin/java" -version >/dev/null 2>&1 || { echo "make-runtime: the runtime in $out does not start" >&2; exit 1; }
echo "make-runtime: $out ($modules), $(du -sh "$out" | cut -f1)" >&2
