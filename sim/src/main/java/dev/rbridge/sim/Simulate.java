package dev.rbridge.sim;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * The simulator's command ({@code bench/simulate.sh}): simulates each scheme and placement the flags ask for over the
 * same scenario and seed, and prints the assumptions and one table.
 */
public final class Simulate {
    private Simulate() {}

    public static void main(String[] args) {
        if (List.of(args).contains("--help") || List.of(args).contains("-h")) {
            System.out.print("""
                    Usage: bench/simulate.sh [--flag value]...
                    A discrete-event simulation of memservers and bridges that places slabs and rebuilds them with
                    the bridge's own PlacementPolicy, under independent and rack failures; prints, per scheme and
                    placement, the time to restore redundancy and the data lost a year.
                    """ + Scenario.help());
            return;
        }
        Scenario s;
        try {
            s = Scenario.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("simulate: " + e.getMessage());
            System.exit(2);
            return;
        }
        System.out.println("# " + s.describe());
        List<Outcome> rows = new ArrayList<>();
        for (Scheme scheme : s.schemes()) {
            for (Scenario.Placing p : s.placings()) {
                long start = System.nanoTime();
                Outcome o = Run.simulate(s, scheme, p);
                rows.add(o);
                System.out.printf(Locale.ROOT, "# %s %s: %d events in %.1f s%n", scheme.name(), p.label(), o.events(),
                        (System.nanoTime() - start) / 1e9);
            }
        }
        System.out.println();
        System.out.print(Table.of(rows));
    }
}
