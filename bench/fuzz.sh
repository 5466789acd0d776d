#!/usr/bin/env bash
# Fuzzes every decoder and parser that takes bytes from outside (the fuzz module's Jazzer targets), one target after
# another for a given time each, and prints per target: executions, executions per second, corpus size, and what was
# found. Not a test: numbers, and any finding's input.
#
#   bench/fuzz.sh [--time SECONDS] [--target NAME]... [--list]
#
#   --time SECONDS   fuzzing time per target (default 60), after Maven has started it
#   --target NAME    only this target; repeatable (default all; --list names them)
#   --list           the targets and the test method each runs
#
# Each target starts from its seeds and regression inputs (fuzz/src/test/resources/.../<Test>Inputs/<method>/) and
# the corpus earlier runs grew (fuzz/.cifuzz-corpus, not in git; delete it to start from the seeds alone). A crash or
# an input that takes longer than the test's @Timeout (a hang) stops that target; Jazzer writes the input into the
# target's Inputs folder, where every later `./test` replays it, and this script names the file. The table counts
# those files (crash-*, timeout-*) new since the run began. Runs under nice, one target at a time.
# Logs: fuzz/target/fuzz-logs/<target>.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

targets=(
  "nbd-handshake      dev.rbridge.nbd.protocol.HandshakeDecoderFuzzTest#decode"
  "nbd-request        dev.rbridge.nbd.protocol.RequestDecoderFuzzTest#decode"
  "control-memserver  dev.rbridge.rdma.wire.MessageDecoderFuzzTest#memserverSide"
  "control-client     dev.rbridge.rdma.wire.MessageDecoderFuzzTest#clientSide"
  "netlink            dev.rbridge.kmod.attach.NetlinkAttributesFuzzTest#parse"
  "netlink-datagram   dev.rbridge.kmod.attach.GenericNetlinkFuzzTest#datagram"
  "http-request       dev.rbridge.ops.http.HttpRequestDecoderFuzzTest#decode"
  "json               dev.rbridge.ops.json.JsonFuzzTest#parse"
  "volume-spec        dev.rbridge.cli.CliParsersFuzzTest#volumeSpec"
  "sizes              dev.rbridge.cli.CliParsersFuzzTest#sizes"
  "endpoints          dev.rbridge.cli.CliParsersFuzzTest#endpoints"
  "config-file        dev.rbridge.cli.CliParsersFuzzTest#configFile"
)

time_s=60; only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time_s="$2"; shift 2 ;;
    --target) only+=("$2"); shift 2 ;;
    --list) printf '%s\n' "${targets[@]}"; exit 0 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
for t in "${only[@]}"; do
  printf '%s\n' "${targets[@]}" | awk '{print $1}' | grep -qx "$t" || { echo "fuzz.sh: no target $t (--list)" >&2; exit 2; }
done

JAVA_HOME="$("$root/dev/find-jdk")" || exit 1
export JAVA_HOME
logs="$root/fuzz/target/fuzz-logs"
resources="$root/fuzz/src/test/resources"
# Builds the fuzz module and what it depends on in the reactor (no install: the targets run against these sources).
echo "fuzz.sh: building..." >&2
"$root/mvnw" -q -B -ntp test-compile -pl fuzz -am >/dev/null
mkdir -p "$logs"

findings() { # crash and timeout inputs Jazzer wrote (into an Inputs folder, or the module's folder without one)
  { find "$resources" -type f \( -name 'crash-*' -o -name 'timeout-*' \)
    find "$root/fuzz" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'timeout-*' \); } 2>/dev/null | sort
}
before="$(mktemp)"; trap 'rm -f "$before"' EXIT
findings > "$before"

printf '%-18s %12s %9s %8s %s\n' target execs exec/s corpus "crashes/hangs"
status=0
for line in "${targets[@]}"; do
  read -r name test <<<"$line"
  if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qx "$name"; then
    continue
  fi
  log="$logs/$name.log"
  rc=0
  JAZZER_FUZZ=1 JAZZER_MAX_DURATION="${time_s}s" nice -n 10 "$root/mvnw" -B -ntp test -pl fuzz -am \
    -Dtest="$test" -Dsurefire.failIfNoSpecifiedTests=false -Dfuzz.junitTimeoutMode=disabled >"$log" 2>&1 || rc=$?
  # libFuzzer's last status line: "#N DONE cov: .. corp: FILES/SIZE .. exec/s: R ..", or its last pulse when a
  # finding stopped it early.
  last="$(grep -aE '^#[0-9]+' "$log" | tail -1 || true)"
  execs="$(sed -nE 's/^.*Done ([0-9]+) runs in.*$/\1/p' "$log" | tail -1)"
  [ -n "$execs" ] || execs="$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")"
  rate="$(sed -nE 's/.*exec\/s: ([0-9]+).*/\1/p' <<<"$last")"
  corpus="$(sed -nE 's/.*corp: ([0-9]+)\/.*/\1/p' <<<"$last")"
  new="$(findings | comm -13 "$before" - | wc -l)"
  found="$new"
  if [ "$new" -gt 0 ]; then
    found="$new: $(findings | comm -13 "$before" - | sed "s#^$root/##" | tr '\n' ' ')"
    status=1
  elif [ "$rc" != 0 ]; then
    found="the run failed without a finding: see $log"
    status=1
  fi
  findings > "$before"
  printf '%-18s %12s %9s %8s %s\n' "$name" "${execs:-?}" "${rate:-?}" "${corpus:-?}" "$found"
done
exit $status
