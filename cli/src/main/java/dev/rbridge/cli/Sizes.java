package dev.rbridge.cli;

import java.util.Locale;

/** Byte sizes as people write them: {@code 4096}, {@code 64K}, {@code 1G}, {@code 2GiB} (binary units). */
final class Sizes {
    private Sizes() {}

    static long parse(String text) {
        String t = text.trim().toUpperCase(Locale.ROOT);
        if (t.endsWith("IB")) {
            t = t.substring(0, t.length() - 2);
        } else if (t.endsWith("B") && t.length() > 1 && !Character.isDigit(t.charAt(t.length() - 2))) {
            t = t.substring(0, t.length() - 1);
        } else if (t.endsWith("B")) {
            t = t.substring(0, t.length() - 1);
        }
        int shift = 0;
        if (!t.isEmpty()) {
            switch (t.charAt(t.length() - 1)) {
                case 'K' -> shift = 10;
                case 'M' -> shift = 20;
                case 'G' -> shift = 30;
                case 'T' -> shift = 40;
                case 'P' -> shift = 50;
                default -> shift = -1;
            }
            if (shift >= 0) {
                t = t.substring(0, t.length() - 1);
            } else {
                shift = 0;
            }
        }
        long n;
        try {
            n = Long.parseLong(t.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("'" + text + "' is not a size (examples: 4096, 64K, 512M, 1G, 2T)");
        }
        if (n < 0 || (shift > 0 && n > (Long.MAX_VALUE >> shift))) {
            throw new IllegalArgumentException("size '" + text + "' is out of range");
        }
        return n << shift;
    }

    static String format(long bytes) {
        String[] units = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        int u = 0;
        long v = bytes; // a unit is used only when it divides exactly; a double would round sizes above 2^53
        while (v >= 1024 && u < units.length - 1 && v % 1024 == 0) {
            v /= 1024;
            u++;
        }
        return v + units[u];
    }
}
