# Sourced by every lab job script here, from the share (the job's working folder, where GuestLab copies it): what
# they all need, written once.
#   say TEXT                 a step, timed from the job's start
#   await SECONDS COMMAND... poll every 0.2 s until COMMAND succeeds; fail, naming it, after SECONDS
#   rb ARGS...               rbridge from $RB_CP (the classpath of the code under test, in ./cp), or $RB_MAIN of an
#                            older build; C1 only and the serial collector, since TCG compiles slowly. RB_JAVA_OPTS
#                            adds JVM options (a direct-memory bound, a fixed heap), RB_ENV variables for the JVM alone.
#   wd ARGS...               ./write_data (built on the host) with four threads at queue depth 8
#   soft_roce NETDEV         rxe0 on NETDEV, waited for until ACTIVE, and UCX told to use its verbs and nothing else
t0=$SECONDS
say() { echo "guest: [$((SECONDS - t0))s] $*"; }
await() {
  local limit=$1; shift
  for _ in $(seq $((limit * 5))); do "$@" && return 0; sleep 0.2; done
  echo "guest: gave up waiting for: $*" >&2; return 1
}
# shellcheck disable=SC2086 # RB_ENV and RB_JAVA_OPTS are lists of words
rb() { env ${RB_ENV:-} java --enable-native-access=ALL-UNNAMED -XX:+UseSerialGC -XX:TieredStopAtLevel=1 ${RB_JAVA_OPTS:-} \
         -cp "$RB_CP" "${RB_MAIN:-dev.rbridge.cli.Main}" "$@"; }
wd() { ./write_data --threads 4 --qd 8 "$@"; }
soft_roce() {
  modprobe rdma_rxe
  rdma link add rxe0 type rxe netdev "$1"
  await 30 sh -c 'rdma link show rxe0/1 | grep -q ACTIVE'
  # soft-RoCE's settings from docs/testing.md, and no UCX signal handlers in a JVM (as ./rbridge sets)
  export UCX_ERROR_SIGNALS= UCX_NET_DEVICES=rxe0:1 UCX_TLS=rc_verbs,ud_verbs UCX_UD_VERBS_ETH_DGID_CHECK=n \
         UCX_KEEPALIVE_INTERVAL=inf
}
