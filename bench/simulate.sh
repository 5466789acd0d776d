#!/usr/bin/env bash
# Runs the cluster simulator (module sim, sim/README.md): 1,000 memservers, 500 bridges, independent and rack
# failures, placement by the bridge's own PlacementPolicy; prints the assumptions and one table (time to restore
# redundancy, data lost a year) for R=2, R=3 and EC 4+2. Every flag after the script's own goes to the simulator
# (bench/simulate.sh --help lists them). Builds sim and what it needs first when sim/target/classes is missing, or
# with --build. CPU only, one thread; run it under nice on a shared machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

build=0
if [[ ${1:-} == --build ]]; then build=1; shift; fi
java_home="$("$root/dev/find-jdk")"
if [[ $build -eq 1 || ! -d sim/target/classes || ! -f sim/target/classpath.txt ]]; then
    JAVA_HOME="$java_home" ./mvnw -q -B -ntp -pl sim -am install -DskipTests -Dspotless.check.skip=true >&2
    JAVA_HOME="$java_home" ./mvnw -q -B -ntp -pl sim dependency:build-classpath \
        -Dmdep.outputFile=target/classpath.txt >&2
fi
exec "$java_home/bin/java" -XX:+UseParallelGC -cp "sim/target/classes:$(cat sim/target/classpath.txt)" \
    dev.rbridge.sim.Simulate "$@"
