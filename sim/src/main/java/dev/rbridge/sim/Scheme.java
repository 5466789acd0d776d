package dev.rbridge.sim;

import java.util.Locale;

/**
 * How a group of slab-sized pieces keeps its data: on how many memservers ({@link #holders}), how many of them may be
 * lost before the data is ({@link #tolerated}), and what re-creating one lost piece reads. Replication and erasure
 * coding are the two kinds; the simulator only asks these questions.
 */
sealed interface Scheme permits Replication, ErasureCoding {
    /** As the table names it: R=2, EC 4+2. */
    String name();

    /** Memservers holding a piece of one group, all distinct. */
    int holders();

    /** Pieces that may be missing at once without losing the group's data. */
    int tolerated();

    /** Slab-sized units of user data one group holds (lost with it). */
    int dataUnits();

    /** Pieces read to re-create one lost piece. */
    int repairSources();

    /** Live pieces below which the group's data is lost. */
    default int needed() {
        return holders() - tolerated();
    }

    /** {@code r2}, {@code R=3}, {@code ec4+2} or {@code EC 4+2}. */
    static Scheme parse(String s) {
        String t = s.replace(" ", "").replace("=", "").toLowerCase(Locale.ROOT);
        try {
            if (t.startsWith("r")) {
                return new Replication(Integer.parseInt(t.substring(1)));
            }
            if (t.startsWith("ec") && t.contains("+")) {
                String[] kd = t.substring(2).split("\\+", 2);
                return new ErasureCoding(Integer.parseInt(kd[0]), Integer.parseInt(kd[1]));
            }
        } catch (NumberFormatException e) {
            // fall through to the message below
        }
        throw new IllegalArgumentException("a scheme is rN (replicas) or ecK+M (erasure coding): " + s);
    }
}
