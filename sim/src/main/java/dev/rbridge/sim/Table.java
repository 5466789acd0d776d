package dev.rbridge.sim;

import java.util.List;
import java.util.Locale;

/** The outcomes as one Markdown table, a row per scheme and placement. */
final class Table {
    private Table() {}

    static String of(List<Outcome> rows) {
        StringBuilder b = new StringBuilder();
        b.append("| scheme | placement | groups | failures: memserver / rack / bridge | restore after one memserver,"
                + " s: min / median / max | after a rack, s: median / max | loss events | loss events a year (95 %)"
                + " | groups lost | GiB lost a year |\n");
        b.append("|---|---|---|---|---|---|---|---|---|---|\n");
        for (Outcome o : rows) {
            PoissonBounds ci = o.lossEventsInterval();
            b.append(String.format(Locale.ROOT, "| %s | %s | %d | %d / %d / %d | %s / %s / %s | %s / %s | %d | %s (%s"
                    + " to %s) | %d | %s |%n", o.scheme(), o.placing(), o.groups(), o.serverFailures(),
                    o.rackFailures(), o.bridgeFailures(), seconds(o.serverRestore().min()),
                    seconds(o.serverRestore().median()), seconds(o.serverRestore().max()),
                    seconds(o.rackRestore().median()), seconds(o.rackRestore().max()), o.lossEvents(),
                    rate(o.lossEventsPerYear()), rate(ci.lower()), rate(ci.upper()), o.groupsLost(),
                    rate(o.bytesLostPerYear() / (1L << 30))));
        }
        return b.toString();
    }

    private static String seconds(double s) {
        return Double.isNaN(s) ? "-" : String.format(Locale.ROOT, "%.2f", s);
    }

    private static String rate(double r) {
        return r == 0 ? "0" : String.format(Locale.ROOT, "%.3g", r);
    }
}
