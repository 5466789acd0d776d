package dev.rbridge.cli;

import java.io.PrintWriter;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A bridge's rebuild as rbridge admin prints it ({@code rebuild}, {@code volumes --watch}): from one answer to the
 * next, how fast it goes and how long it still takes; and whether anything is left to rebuild, which ends
 * {@code --watch}.
 */
final class RebuildProgress {
    /** volumes --watch: per volume, the healthy slabs last seen and when. */
    private final Map<String, long[]> lastHealthy = new LinkedHashMap<>();
    /** rebuild: the last total copied and when, for the rate. */
    private long lastCopied = -1;
    private long lastAt;
    private boolean done;

    /** Whether the last answer left nothing to rebuild (and nothing waiting): --watch stops. */
    boolean done() {
        return done;
    }

    /** The bridge's /rebuild as one line: what is copied, how far, how fast and how long still; or why it waits. */
    String rebuildLine(Map<?, ?> m) {
        long queued = AdminClient.number(m.get("queued"));
        long degraded = AdminClient.number(m.get("degraded_slabs"));
        long total = AdminClient.number(m.get("copied_total"));
        long now = System.nanoTime();
        String rate = "";
        double bytesPerSecond = -1;
        if (lastCopied >= 0 && now > lastAt) {
            bytesPerSecond = (total - lastCopied) / ((now - lastAt) / 1e9);
            rate = ", " + Sizes.format((long) bytesPerSecond) + "/s";
        }
        lastCopied = total;
        lastAt = now;
        Object waiting = m.get("waiting");
        if (m.get("slab") != null) {
            long copied = AdminClient.number(m.get("copied"));
            long length = Math.max(1, AdminClient.number(m.get("length")));
            long left = (length - copied) + queued * length; // the queued slabs taken as large as this one
            String eta = bytesPerSecond > 0 ? ", about " + Math.round(left / bytesPerSecond) + " s left" : "";
            done = false;
            return "rebuilding volume " + m.get("volume") + " slab " + m.get("slab") + " onto " + m.get("target")
                    + ": " + (100 * copied / length) + "% (" + Sizes.format(copied) + " of " + Sizes.format(length)
                    + ")" + rate + eta + "; " + queued + " more queued, " + degraded + " degraded slab(s)";
        }
        done = queued == 0 && waiting == null;
        if (waiting != null) {
            return "waiting: " + waiting + "; " + degraded + " degraded slab(s), " + queued + " queued";
        }
        return queued == 0 ? "nothing to rebuild" + (degraded > 0 ? " (" + degraded + " degraded slab(s) waiting for"
                + " a memserver)" : "") : queued + " slab(s) queued";
    }

    /** The bridge's /volumes for volumes --watch: a line per volume, and a blank line after several. */
    void printVolumes(PrintWriter out, List<?> volumes) {
        done = true;
        for (Object v : volumes) {
            if (v instanceof Map<?, ?> m) {
                out.println(volumeLine(m));
            }
        }
        if (volumes.size() > 1) {
            out.println();
        }
    }

    /** The bridge's /volumes printed as JSON (--json --watch): done once no volume is degraded or rebuilding. */
    void sawVolumes(List<?> volumes) {
        done = volumes.stream().noneMatch(v -> v instanceof Map<?, ?> m
                && ("degraded".equals(m.get("state")) || "rebuilding".equals(m.get("state"))));
    }

    /**
     * One volume of the bridge's /volumes as a line for volumes --watch: its state, how much of what it holds is
     * healthy, and while that grows how fast and how long until all is. Sets {@link #done} false while the volume is
     * degraded or rebuilding.
     */
    private String volumeLine(Map<?, ?> v) {
        String name = String.valueOf(v.get("name"));
        long allocated = AdminClient.number(v.get("allocated"));
        long healthy = AdminClient.number(v.get("healthy"));
        long slab = AdminClient.number(v.get("slab_size"));
        String state = String.valueOf(v.get("state"));
        long now = System.nanoTime();
        long[] last = lastHealthy.put(name, new long[]{healthy, now});
        String line = name + ": " + state + ", " + healthy + " of " + allocated + " allocated slab(s) healthy"
                + (allocated > 0 ? " (" + (100 * healthy / allocated) + "%)" : "");
        if (state.equals("degraded") || state.equals("rebuilding")) {
            done = false;
            line += ", " + AdminClient.number(v.get("degraded")) + " degraded, "
                    + AdminClient.number(v.get("rebuilding")) + " rebuilding";
            if (last != null && now > last[1] && healthy > last[0]) {
                double perSecond = (healthy - last[0]) / ((now - last[1]) / 1e9);
                line += ", " + Sizes.format((long) (perSecond * slab)) + "/s, about "
                        + Math.round((allocated - healthy) / perSecond) + " s left";
            }
        } else if (AdminClient.number(v.get("lost")) > 0) {
            line += ", " + AdminClient.number(v.get("lost")) + " lost (no live replica: see admin slabs " + name + ")";
        }
        return line;
    }
}
