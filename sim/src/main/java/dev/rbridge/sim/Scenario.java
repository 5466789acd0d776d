package dev.rbridge.sim;

import dev.rbridge.bridge.volume.VolumeSpec;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * What one simulation assumes: the cluster's shape, the failure rates, the repair's speeds and the span simulated.
 * Each is a flag of {@code bench/simulate.sh}; the defaults are issue 41's cluster and, for the speeds, placeholders
 * until bench/rebuild.sh measures them.
 */
record Scenario(int servers, int bridges, long capacityBytes, double fill, long slabBytes, int rackSize,
        double serverFailuresPerYear, double rackFailuresPerYear, double bridgeFailuresPerYear,
        double bridgeRestartSeconds, double detectSeconds, double replaceSeconds, double streamBytesPerSecond,
        double linkBytesPerSecond, double years, long seed, List<Scheme> schemes, List<Placing> placings) {

    /** Where pieces go: anywhere the policy likes, or on distinct racks (memservers labelled with their rack). */
    enum Placing {
        ANY, RACKS;

        String label() {
            return this == ANY ? "any" : "racks";
        }
    }

    static final double SECONDS_PER_YEAR = 365.25 * 86_400;

    /** The flags, their defaults and what they mean, in the order --help shows them. */
    private static final String[][] FLAGS = {
            {"--servers", "1000", "memservers"},
            {"--bridges", "500", "bridges; slab groups are split evenly between them"},
            {"--capacity-gib", "64", "RAM each memserver lends, GiB"},
            {"--fill", "0.75", "share of all capacity the pieces use at the start (the rest is room to rebuild)"},
            {"--slab-mib", Long.toString(VolumeSpec.DEFAULT_SLAB_SIZE >> 20), "slab size, MiB (the bridge's default)"},
            {"--rack-size", "40", "memservers per rack (consecutive numbers share one)"},
            {"--server-rate", "0.02", "independent failures per memserver per year (contents lost)"},
            {"--rack-rate", "0.01", "failures of a whole rack per rack per year (all its memservers at once)"},
            {"--bridge-rate", "0.02", "failures per bridge per year (its rebuilds pause while it restarts)"},
            {"--bridge-restart-s", "60", "seconds until a failed bridge serves and rebuilds again"},
            {"--detect-s", "6", "seconds from a failure until its slabs are queued for rebuild (5 s operation"
                    + " timeout + the health duty's 1 s offer)"},
            {"--replace-h", "24", "hours until a failed memserver lends again (empty)"},
            {"--stream-mbs", "1000", "MB/s of one rebuild copy (a bridge copies one slab at a time)"},
            {"--link-gbit", "10", "Gbit/s of each memserver's link, shared by the copies it sends or receives"},
            {"--years", "1000", "simulated years per row (1 to 6 minutes each on a loaded 2-core VM)"},
            {"--seed", "1", "seed of the random numbers (every row uses it: the same run is the same table)"},
            {"--schemes", "r2,r3,ec4+2", "rows: rN (N replicas) or ecK+M (erasure coding), comma separated"},
            {"--placements", "any,racks", "any (today's bridge: no rack labels) and/or racks (pieces on distinct"
                    + " racks)"}};

    /** The scenario {@code args} describe (flags as {@code --name value}); unknown flags are refused. */
    static Scenario parse(String... args) {
        Map<String, String> v = new LinkedHashMap<>();
        for (String[] f : FLAGS) {
            v.put(f[0], f[1]);
        }
        for (int i = 0; i < args.length; i += 2) {
            if (!v.containsKey(args[i])) {
                throw new IllegalArgumentException("unknown flag " + args[i] + " (--help lists them)");
            }
            if (i + 1 >= args.length) {
                throw new IllegalArgumentException(args[i] + " needs a value");
            }
            v.put(args[i], args[i + 1]);
        }
        List<Scheme> schemes = new ArrayList<>();
        for (String s : v.get("--schemes").split(",")) {
            schemes.add(Scheme.parse(s));
        }
        List<Placing> placings = new ArrayList<>();
        for (String p : v.get("--placements").split(",")) {
            placings.add(switch (p) {
                case "any" -> Placing.ANY;
                case "racks" -> Placing.RACKS;
                default -> throw new IllegalArgumentException("--placements takes any and/or racks: " + p);
            });
        }
        Scenario s = new Scenario(integer(v, "--servers"), integer(v, "--bridges"),
                (long) (number(v, "--capacity-gib") * (1L << 30)), number(v, "--fill"),
                (long) integer(v, "--slab-mib") << 20, integer(v, "--rack-size"), number(v, "--server-rate"),
                number(v, "--rack-rate"), number(v, "--bridge-rate"), number(v, "--bridge-restart-s"),
                number(v, "--detect-s"), number(v, "--replace-h") * 3600, number(v, "--stream-mbs") * 1e6,
                number(v, "--link-gbit") * 1e9 / 8, number(v, "--years"), Long.parseLong(v.get("--seed")),
                List.copyOf(schemes), List.copyOf(placings));
        s.check();
        return s;
    }

    private void check() {
        if (servers < 1 || bridges < 1 || rackSize < 1 || slabBytes < 1 || capacityBytes < slabBytes) {
            throw new IllegalArgumentException("servers, bridges and rack size must be positive, capacity at least"
                    + " one slab");
        }
        if (!(fill > 0 && fill < 1)) {
            throw new IllegalArgumentException("--fill must lie between 0 and 1: " + fill);
        }
        for (double d : new double[]{serverFailuresPerYear, rackFailuresPerYear, bridgeFailuresPerYear,
                bridgeRestartSeconds, detectSeconds, replaceSeconds}) {
            if (!(d >= 0)) {
                throw new IllegalArgumentException("rates and times must not be negative");
            }
        }
        if (!(streamBytesPerSecond > 0 && linkBytesPerSecond > 0 && years > 0)) {
            throw new IllegalArgumentException("speeds and --years must be positive");
        }
        for (Scheme s : schemes) {
            if (s.holders() > servers) {
                throw new IllegalArgumentException(s.name() + " needs " + s.holders() + " memservers");
            }
        }
    }

    private static int integer(Map<String, String> v, String flag) {
        try {
            return Integer.parseInt(v.get(flag));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " takes a whole number: " + v.get(flag), e);
        }
    }

    private static double number(Map<String, String> v, String flag) {
        try {
            return Double.parseDouble(v.get(flag));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(flag + " takes a number: " + v.get(flag), e);
        }
    }

    /** The flags with their defaults, for --help. */
    static String help() {
        StringBuilder b = new StringBuilder();
        for (String[] f : FLAGS) {
            b.append(String.format("  %-20s %s (default %s)%n", f[0] + " X", f[2], f[1]));
        }
        return b.toString();
    }

    /** Racks: the last may hold fewer memservers. */
    int racks() {
        return (servers + rackSize - 1) / rackSize;
    }

    /** The assumptions in one paragraph, printed above the table. */
    String describe() {
        return String.format("%d memservers of %.0f GiB in %d racks of %d, %d bridges, slab %d MiB, fill %.0f %%;"
                + " failures a year: %.3g per memserver, %.3g per rack, %.3g per bridge (restart %.0f s);"
                + " detection %.1f s, memserver back empty after %.0f h; rebuild copy %.0f MB/s, memserver link"
                + " %.1f Gbit/s; %.0f years per row, seed %d", servers, capacityBytes / (double) (1L << 30), racks(),
                rackSize, bridges, slabBytes >> 20, fill * 100, serverFailuresPerYear, rackFailuresPerYear,
                bridgeFailuresPerYear, bridgeRestartSeconds, detectSeconds, replaceSeconds / 3600,
                streamBytesPerSecond / 1e6, linkBytesPerSecond * 8 / 1e9, years, seed);
    }
}
